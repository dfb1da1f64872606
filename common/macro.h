/* Small helpers shared by every layer: cleanup attributes, ownership
 * transfer and array sizes.  Nothing here knows about FUSE, HTTP or the
 * cache. */
#pragma once

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _likely_(x) __builtin_expect(!!(x), 1)
#define _unlikely_(x) __builtin_expect(!!(x), 0)

/* gcc 12's -fanalyzer (a CI step) reports a read of an uninitialised
 * value here on some early returns, for locals that are set to NULL where
 * they are declared: a false positive of that analyzer.  A cleanup local
 * that really lacks its initialiser is caught by -Wmaybe-uninitialized,
 * an error in CI, so only the analyzer's report is silenced, and only in
 * this function. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wanalyzer-use-of-uninitialized-value"
#endif
static inline void freep(void *p)
{
	free(*(void **)p);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

static inline void closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}

#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)

/* Defines `funcp(type **p)` that calls `func(*p)` when *p is set, for use
 * with _cleanup_(). */
#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func) \
	static inline void func##p(type *p)     \
	{                                       \
		if (*p)                         \
			func(*p);               \
	}

#define TAKE_PTR(p)                        \
	({                                 \
		__typeof__(p) _ptr_ = (p); \
		(p) = NULL;                \
		_ptr_;                     \
	})

#define TAKE_FD(fd)              \
	({                       \
		int _fd_ = (fd); \
		(fd) = -1;       \
		_fd_;            \
	})

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* The value of a macro as a string literal: STRINGIFY(60) is "60". */
#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* -errno of the last libc failure; never 0 so callers can return it. */
static inline int negative_errno(void)
{
	return errno > 0 ? -errno : -EIO;
}

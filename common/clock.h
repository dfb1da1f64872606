/* The one clock of the tree: CLOCK_MONOTONIC, read directly by code that
 * measures or waits, and behind struct clock where timing logic (back-off
 * windows, the pull token bucket, event limits) must be driven by hand in
 * unit tests instead of sleeping. */
#pragma once

#include <stdint.h>
#include <time.h>

#define CLOCK_NS_PER_SEC INT64_C(1000000000)

struct clock {
	/* Nanoseconds on a clock that never goes backwards; the origin is
	 * arbitrary.  Must be safe to call from any thread. */
	int64_t (*now_ns)(const struct clock *c);
	void *userdata; /* for now_ns; the real clock has none */
};

/* The real CLOCK_MONOTONIC clock: a static object, never freed, safe from
 * any thread. */
const struct clock *clock_monotonic(void);

static inline int64_t clock_now_ns(const struct clock *c)
{
	return c->now_ns(c);
}

/* CLOCK_MONOTONIC now, in nanoseconds and in milliseconds: the same
 * reading as clock_monotonic()'s, shared by every process on the machine
 * (a hand-over log may carry it from one process to the next).  Safe from
 * any thread; cannot fail. */
int64_t clock_mono_ns(void);
int64_t clock_mono_ms(void);

/* The CLOCK_MONOTONIC time ns from now, as the absolute deadline
 * pthread_cond_timedwait() takes on a condition variable whose clock
 * attribute is CLOCK_MONOTONIC. */
struct timespec clock_mono_deadline(int64_t ns);
/* The same on CLOCK_REALTIME, pthread_cond_timedwait()'s default clock. */
struct timespec clock_real_deadline(int64_t ns);

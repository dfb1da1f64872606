/* The detail of a failure, for a human: the negative errno that callers
 * act on, the HTTP status when a registry answered, and one printable
 * line.  The only error-detail structure of pullfs; parsers that report a
 * reason into a caller's buffer use errbuf_fail (errname.h). */
#pragma once

#include <stdarg.h>

#define ERROR_DETAIL_MAX 512

struct error_detail {
	int err;			/* 0, or the negative errno of the failure */
	int http_status;		/* 0 when no HTTP response was involved */
	char message[ERROR_DETAIL_MAX]; /* one printable line, "" when none; never a credential */
};

/* Records err and a printf message (cut to fit, control characters made
 * spaces: text from the network may end up in it) in d, which may be
 * NULL.  Returns err, so that "return error_detail_set(d, -EIO, ...)"
 * reports and fails in one step. */
int error_detail_set(struct error_detail *d, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The same with a va_list, for wrappers that add a policy of their own. */
int error_detail_vset(struct error_detail *d, long http_status, int err, const char *fmt,
		      va_list ap) __attribute__((format(printf, 4, 0)));

/* The same with the HTTP status of the response (0: none). */
int error_detail_set_http(struct error_detail *d, long http_status, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Empties d (may be NULL). */
void error_detail_clear(struct error_detail *d);

/* d's message, or strerror of err when it has none ("" when d is NULL or
 * holds no failure).  Borrowed from d or static. */
const char *error_detail_message(const struct error_detail *d);

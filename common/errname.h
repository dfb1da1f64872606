/* Symbolic names for errno values ("ENOENT"), as the events log prints them. */
#pragma once

#include <stddef.h>

/* Returns a static string such as "EBADMSG" for err, a negative errno
 * ("OK" for 0); "EUNKNOWN" for values outside the set pullfs produces.
 * Never NULL. */
const char *errno_name(int err);

/* Formats a one-line reason into errbuf (may be NULL) and returns err, so
 * that "return errbuf_fail(-EBADMSG, buf, len, ...)" reports and fails in
 * one step. */
int errbuf_fail(int err, char *errbuf, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

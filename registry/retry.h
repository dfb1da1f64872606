/* When to try a failed registry request again: bounded exponential
 * back-off that honours a server's Retry-After, as pure functions so that
 * the schedule is tested without sleeping. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

struct retry_policy {
	unsigned max_retries; /* retries after the first attempt */
	int64_t base_ms;      /* first delay; doubles each retry */
	int64_t max_delay_ms; /* cap of one computed delay */
	int64_t max_total_ms; /* cap of all delays of one request together */
};

#define RETRY_POLICY_DEFAULT    \
	((struct retry_policy){ \
		.max_retries = 3, .base_ms = 500, .max_delay_ms = 8000, .max_total_ms = 30000 })

/* The delay in ms before retry number `retry` (0 for the first retry),
 * given what was already waited and the server's Retry-After in ms (-1:
 * none).  A Retry-After is obeyed as it is when it fits the total budget
 * (even above max_delay_ms); one that does not fit ends the retries.
 * Returns the delay, or -1: give up. */
int64_t retry_delay_ms(const struct retry_policy *p, unsigned retry, int64_t waited_ms,
		       int64_t retry_after_ms);

/* Parses a Retry-After value: delta-seconds or an IMF-fixdate ("Sun, 06
 * Nov 1994 08:49:37 GMT"), the latter relative to now.  Returns ms (0 for
 * a date in the past) or -1 when malformed. */
int64_t retry_after_parse(const char *value, time_t now);

/* Whether an HTTP status is worth retrying: 429, 500, 502, 503, 504. */
bool retry_status_is_transient(long status);

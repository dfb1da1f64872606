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

/* A floor under the rate of a blob transfer, kept across its resumes and
 * retries: each window of window_ms must bring min_bytes_per_s times the
 * window, or the rest of the blob when that is less.  The windows follow
 * each other (a new one starts when a check finds the last one done), so
 * a transfer that makes too little progress fails at most about two
 * windows after it began to.  Pure: the caller supplies the time. */
struct rate_floor {
	uint64_t min_bytes_per_s; /* 0: no floor */
	int64_t window_ms;
	int64_t start_ms;   /* of the current window */
	uint64_t start_got; /* bytes received when it began */
};

/* Begins the first window at now_ms with got bytes received. */
void rate_floor_start(struct rate_floor *f, int64_t now_ms, uint64_t got);

/* At now_ms, got bytes received of total: 0 while the transfer keeps to
 * the floor (a window that is done makes way for the next), -ETIMEDOUT
 * when the window that is done brought too little; then *ret_got_in_window
 * (may be NULL) says how many bytes it brought. */
int rate_floor_check(struct rate_floor *f, int64_t now_ms, uint64_t got, uint64_t total,
		     uint64_t *ret_got_in_window);

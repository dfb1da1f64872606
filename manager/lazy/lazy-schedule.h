/* When the background completion of a lazy layer runs: after a start-up
 * window that belongs to the image's first readers, and again after each
 * failure with a capped doubling back-off, early when there is reason to
 * think the registry is back.  Time comes from an injectable clock
 * (clock.h); nothing here sleeps or takes a lock (the caller's lock
 * protects the struct). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "clock.h"

/* The first retry after a failure, and the cap of the doubling. */
#define LAZY_RETRY_FIRST_S 10
#define LAZY_RETRY_MAX_S 300
/* The start-up window is pushed back while readers fetch, by this
 * fraction of it after the last fetch, up to this many windows; once
 * readers fetched and went quiet for that long, it ends early, but not
 * before this fraction of it. */
#define LAZY_WINDOW_QUIET_DIV 4
#define LAZY_WINDOW_CAP 3
#define LAZY_WINDOW_MIN_DIV 2
/* Failures after which the status stops calling the layer "completing"
 * (pullfsctl pull gives up waiting); the retries go on. */
#define LAZY_FAILURES_REPORTED 5

enum lazy_phase {
	LAZY_PHASE_WINDOW,   /* waiting for the start-up window to end */
	LAZY_PHASE_RUNNING,  /* fetching */
	LAZY_PHASE_RETRYING, /* failed, waiting to try again */
};

struct lazy_schedule {
	const struct clock *clock;
	int64_t usable_ns;	/* when the completion was scheduled */
	int64_t window_ns;	/* the start-up window; 0: none */
	int64_t last_reader_ns; /* last reader fetch seen; 0: none */
	int64_t retry_at_ns;	/* RETRYING: when to try again */
	uint64_t reader_seen;	/* the readers' fetch count last sampled */
	unsigned failures;	/* in a row */
	bool now;		/* start (or retry) at once: someone waits */
	enum lazy_phase phase;
};

/* A schedule that starts window_ns after now; reader_count is the
 * readers' successful fetches so far (lazy_stats.reader_ok). */
void lazy_schedule_init(struct lazy_schedule *s, const struct clock *clock, int64_t window_ns,
			uint64_t reader_count);

/* Samples the readers' fetch count, and whether a reader's fetch is under
 * way: a new fetch pushes the start-up window back (one under way counts
 * as new), and after a failure makes the next try come at once (a reader
 * reached the registry). */
void lazy_schedule_readers(struct lazy_schedule *s, uint64_t reader_count, bool fetching);

/* A new lookup of the image came (waited false: a failed completion tries
 * again now, the start-up window stays, since the lookup is likely its
 * readers'), or someone waits for the whole image (pullfsctl pull: the
 * window ends too). */
void lazy_schedule_wake(struct lazy_schedule *s, bool waited);

/* Whether the completion should run now; ret_wait_ns (may be NULL): how
 * long until it should when not. */
bool lazy_schedule_due(const struct lazy_schedule *s, int64_t *ret_wait_ns);

/* Whether the rest of an image, rest bytes, arrives at rate bytes a
 * second (0: not measured) within the start-up window: then waiting for
 * it only delays the whole image, its readers' fetches gain little, and
 * the window may end (lazy-completer.c, with the default window). */
bool lazy_schedule_link_fast(const struct lazy_schedule *s, uint64_t rate, uint64_t rest);

/* The completion starts; then it failed (the back-off grows, returns the
 * seconds until the next try). */
void lazy_schedule_running(struct lazy_schedule *s);
unsigned lazy_schedule_failed(struct lazy_schedule *s);

/* Seconds of the back-off after the n-th failure in a row (n >= 1). */
unsigned lazy_schedule_retry_s(unsigned n);

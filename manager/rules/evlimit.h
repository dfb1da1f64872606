/* How many events each user other than root may cause: a token bucket per
 * uid and reason (the generic cell rate algorithm: one deadline per
 * bucket, integers only), with a count of the events it dropped.  The
 * events log (events.c) asks before writing an event a user caused; what
 * root and the daemon cause is never asked about, so another user's flood
 * cannot crowd it out.  Not thread-safe: the caller holds its own lock. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "clock.h"

/* Buckets kept at most; past that, idle ones are forgotten, and when none
 * is idle an event of a new uid and reason is dropped and counted apart. */
#define EVLIMIT_MAX_BUCKETS 4096

struct evlimit;

/* burst events at once, then per_minute a minute, per uid and reason.
 * clock NULL: CLOCK_MONOTONIC.  NULL without memory. */
struct evlimit *evlimit_new(unsigned burst, unsigned per_minute, const struct clock *clock);
void evlimit_free(struct evlimit *l);

/* Whether an event of reason caused by uid may be written now.  When it
 * may, *ret_suppressed is how many of that uid's events of that reason
 * were dropped since the last one written (to be said with it); they are
 * forgotten then. */
bool evlimit_admit(struct evlimit *l, uid_t uid, const char *reason, uint64_t *ret_suppressed);

/* Called by evlimit_lifted() for each uid and reason whose events were
 * dropped and that may write again; uid is (uid_t)-1 for the events of
 * buckets there was no room for (reason NULL). */
typedef void evlimit_fn(void *userdata, uid_t uid, const char *reason, uint64_t suppressed);
/* Hands each count of dropped events whose limit has lifted to fn (which
 * writes one event for it) and forgets it.  Cheap when nothing was
 * dropped.  fn must not call evlimit_*. */
void evlimit_lifted(struct evlimit *l, evlimit_fn *fn, void *userdata);

/* Every count of dropped events, lifted or not (at close). */
void evlimit_drain(struct evlimit *l, evlimit_fn *fn, void *userdata);

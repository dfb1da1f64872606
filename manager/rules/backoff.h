/* Per-reference back-off after failed pulls, with the kubelet's timeline.
 *
 * Each key (a canonical reference) has a delay d and the time L of its last
 * failure.  With `initial` (default 10 s) and `max` (default 300 s):
 *
 *   backoff_failure at time t:  if the key is unknown, or t - L > 2*max,
 *                               d = initial; otherwise d = min(2*d, max).
 *                               Then L = t.
 *   backoff_check at time t:    refused (-EAGAIN) while t - L < d, allowed
 *                               from t = L + d on.  An entry with
 *                               t - L > 2*max is forgotten.
 *   backoff_success:            forgets the key.
 *
 * So a reference that keeps failing, retried as soon as it is allowed, is
 * refused for [L, L+10s), [L', L'+20s), then 40, 80, 160, 300, 300 s ...
 * An entry untouched for exactly 2*max is still remembered (the next
 * failure doubles); one nanosecond later it is gone and the next failure
 * starts again at `initial`.  This is the kubelet's
 * Backoff.IsInBackOffSinceUpdate/Next pair (which its image manager uses),
 * without jitter, as the kubelet configures it for image pulls.  Unlike
 * the kubelet, a success clears the entry at once rather than leaving it
 * to age out.
 *
 * Memory: one small entry per failing reference; entries older than
 * 2*max are swept by backoff_gc and, at most once per `max`, by
 * backoff_failure and backoff_success themselves.
 *
 * Every function is thread-safe: the struct has its own mutex and no call
 * blocks on anything but that mutex. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "clock.h"
#include "errdetail.h"

#define BACKOFF_DEFAULT_INITIAL_NS (10 * CLOCK_NS_PER_SEC)
#define BACKOFF_DEFAULT_MAX_NS (300 * CLOCK_NS_PER_SEC)

struct backoff_options {
	int64_t initial_ns;	   /* 0: 10 s, or max_ns if that is smaller */
	int64_t max_ns;		   /* 0: 300 s */
	const struct clock *clock; /* NULL: clock_monotonic(); borrowed */
};

/* Why a key is refused, or one entry of a snapshot. */
struct backoff_state {
	int64_t remaining_ns;	  /* until the key is allowed; 0 when it is now */
	int64_t delay_ns;	  /* the whole current window */
	int64_t idle_ns;	  /* since the last failure */
	unsigned failures;	  /* consecutive, since the entry was created */
	struct error_detail last; /* the last failure; message "" when none was given */
};

struct backoff_entry {
	char *key;
	struct backoff_state state;
};

struct backoff;

/* opts may be NULL for every default; the clock must outlive the
 * back-off.  Returns 0 and a back-off owned by the caller in *ret,
 * -EINVAL for negative durations or initial_ns > max_ns, -ENOMEM. */
int backoff_new(const struct backoff_options *opts, struct backoff **ret);
/* Accepts NULL.  No other thread may be using b. */
void backoff_free(struct backoff *b);

/* Returns 0 when key may be pulled now, or -EAGAIN while it is backing
 * off; then, when ret is not NULL, fills *ret with the time left and the
 * previous failure (for "Back-off pulling image "X": <message>").
 * *ret is left alone when 0 is returned. */
int backoff_check(struct backoff *b, const char *key, struct backoff_state *ret);

/* Records a failed pull of key and why it failed (copied; why->err a
 * negative errno).
 * Returns 0, or -ENOMEM when a new entry cannot be allocated (then key
 * simply does not back off). */
int backoff_failure(struct backoff *b, const char *key, const struct error_detail *why);

/* Records a successful pull: key is forgotten. */
void backoff_success(struct backoff *b, const char *key);

/* Drops entries untouched for more than 2*max.  Returns how many. */
size_t backoff_gc(struct backoff *b);

/* A watcher of the table (a serving process noting it for the one that
 * takes over from it): fn(userdata, key, st) after each failure, with the
 * entry's state, and after each success, with st NULL; called with b's
 * lock held, so it must only take note.  fn NULL: none. */
typedef void backoff_hook_fn(void *userdata, const char *key, const struct backoff_state *st);
void backoff_set_hook(struct backoff *b, backoff_hook_fn *fn, void *userdata);

/* Makes key's entry what st says (delay, failures, last failure, and the
 * time since it, idle_ns), as a process before this one left it.  0 or
 * -ENOMEM; -EINVAL for a delay outside [initial, max]. */
int backoff_restore(struct backoff *b, const char *key, const struct backoff_state *st);

/* A copy of every live entry, for a status view, in no particular order.
 * Returns 0 with an array owned by the caller (free it with
 * backoff_entries_free) in *ret and its length in *ret_n (0 and NULL
 * when there are none), or -ENOMEM. */
int backoff_snapshot(struct backoff *b, struct backoff_entry **ret, size_t *ret_n);
void backoff_entries_free(struct backoff_entry *entries, size_t n);

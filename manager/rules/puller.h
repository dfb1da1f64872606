/* Pull slots: how many image pulls run at once.  The kubelet default is
 * serialised (one pull at a time); --max-parallel-pulls N allows N.
 * Callers beyond the limit wait in a FIFO queue of at most max_queue; past
 * that they get -EAGAIN at once rather than pile up, since every waiter
 * here is a blocked filesystem request.
 *
 * The queue bound defaults to 100, not the kubelet's 10: the kubelet
 * queues pod-level pull requests from one sync loop, while here each
 * distinct image looked up concurrently by any process on the machine
 * takes a place, and a refusal turns into EAGAIN for that process.
 *
 * A waiter whose caller has gone (the request was interrupted, the pull
 * is no longer wanted) can leave the queue from any place: its abandon
 * flag is set and puller_wake called.  Its place then no longer counts
 * against max_queue and the ones behind it move up.
 *
 * A slot is held for a whole pull, and a registry that sends slowly (but
 * above the transfer rate floor, which fails the rest) could hold the
 * only one for hours.  So the slots are shared between registries: once a
 * pull has held its slot for share_after, it no longer holds back a pull
 * from another registry, which then takes one more slot.  Pulls from the
 * same registry stay serialised behind it, and a slow registry delays
 * the pulls of the others by at most share_after.  More pulls than
 * max_parallel may then run: at most one more per pull that has held
 * its slot that long (the per-user limit on pulls bounds those).
 *
 * Thread-safe: the struct has its own mutex and condition variable.  Time
 * comes from the injected clock; blocking waits sleep on CLOCK_MONOTONIC
 * for the time that clock says is missing, then ask the clock again. */
#pragma once

#include <stdatomic.h>
#include <stdint.h>

#include "clock.h"
#include "dlist.h"

#define PULLER_DEFAULT_MAX_PARALLEL 1
#define PULLER_DEFAULT_MAX_QUEUE 100
#define PULLER_DEFAULT_SHARE_AFTER_S 60

struct puller_options {
	unsigned max_parallel; /* 0: 1, serialised */
	unsigned max_queue;    /* waiters beyond the running pulls; 0: 100 */
	/* How long a slot holds back the pulls of other registries; 0: 60 s,
	 * < 0: for as long as it is held. */
	int64_t share_after_ns;
	const struct clock *clock; /* NULL: clock_monotonic(); borrowed */
};

/* A slot taken with a registry's name, in the caller's memory from
 * puller_enter to puller_leave; the puller fills it. */
struct puller_slot {
	struct dlist_node node;
	const char *key; /* borrowed: the registry */
	int64_t since_ns;
};

struct puller_stats {
	unsigned running; /* holding a slot now */
	unsigned queued;  /* blocked in puller_enter now, not abandoned */
	unsigned max_parallel;
	unsigned max_queue;
	uint64_t entered;   /* slots handed out */
	uint64_t refused;   /* -EAGAIN for a full queue */
	uint64_t abandoned; /* -ECANCELED for the caller's abandon flag */
	uint64_t shared;    /* slots taken beside one held past share_after */
};

struct puller;

/* opts may be NULL for the defaults.  Returns 0 and a puller owned by the
 * caller in *ret, or -ENOMEM. */
int puller_new(const struct puller_options *opts, struct puller **ret);
/* Accepts NULL.  No thread may be inside puller_enter or hold a slot. */
void puller_free(struct puller *p);

/* Takes a slot, blocking in FIFO order while max_parallel pulls run (of
 * which those of other registries that have held theirs for share_after
 * do not count).  slot (may be NULL: a slot like any other that is never
 * shared) and key, the registry's name, borrowed until puller_leave, say
 * whose it is.  abandon (borrowed, may be NULL) is read on entry and each
 * time the caller wakes: once true, the caller leaves the queue without a
 * slot.  Returns 0 (then call puller_leave exactly once, with the same
 * slot), -EAGAIN at once when max_queue callers are already waiting, or
 * -ECANCELED when *abandon is true or puller_shutdown is called meanwhile
 * (or was before). */
int puller_enter(struct puller *p, struct puller_slot *slot, const char *key,
		 const atomic_bool *abandon);

/* Gives back a slot taken by puller_enter; never blocks. */
void puller_leave(struct puller *p, struct puller_slot *slot);

/* Makes every waiter read its abandon flag and the clock again; call it
 * after setting one, or when a test clock jumps.  Never blocks (beyond
 * the mutex). */
void puller_wake(struct puller *p);

/* Wakes every waiter with -ECANCELED and refuses every later
 * puller_enter the same way; slots already held stay valid. */
void puller_shutdown(struct puller *p);

void puller_get_stats(struct puller *p, struct puller_stats *ret);

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
 * Thread-safe: the struct has its own mutex and condition variable. */
#pragma once

#include <stdatomic.h>
#include <stdint.h>

#define PULLER_DEFAULT_MAX_PARALLEL 1
#define PULLER_DEFAULT_MAX_QUEUE 100

struct puller_options {
	unsigned max_parallel; /* 0: 1, serialised */
	unsigned max_queue;    /* waiters beyond the running pulls; 0: 100 */
};

struct puller_stats {
	unsigned running; /* holding a slot now */
	unsigned queued;  /* blocked in puller_enter now, not abandoned */
	unsigned max_parallel;
	unsigned max_queue;
	uint64_t entered;   /* slots handed out */
	uint64_t refused;   /* -EAGAIN for a full queue */
	uint64_t abandoned; /* -ECANCELED for the caller's abandon flag */
};

struct puller;

/* opts may be NULL for the defaults.  Returns 0 and a puller owned by the
 * caller in *ret, or -ENOMEM. */
int puller_new(const struct puller_options *opts, struct puller **ret);
/* Accepts NULL.  No thread may be inside puller_enter or hold a slot. */
void puller_free(struct puller *p);

/* Takes a slot, blocking in FIFO order while max_parallel pulls run.
 * abandon (borrowed, may be NULL) is read on entry and each time the
 * caller wakes: once true, the caller leaves the queue without a slot.
 * Returns 0 (then call puller_leave exactly once), -EAGAIN at once when
 * max_queue callers are already waiting, or -ECANCELED when *abandon is
 * true or puller_shutdown is called meanwhile (or was before). */
int puller_enter(struct puller *p, const atomic_bool *abandon);

/* Gives back a slot taken by puller_enter; never blocks. */
void puller_leave(struct puller *p);

/* Makes every waiter read its abandon flag again; call it after setting
 * one.  Never blocks (beyond the mutex). */
void puller_wake(struct puller *p);

/* Wakes every waiter with -ECANCELED and refuses every later
 * puller_enter the same way; slots already held stay valid. */
void puller_shutdown(struct puller *p);

void puller_get_stats(struct puller *p, struct puller_stats *ret);

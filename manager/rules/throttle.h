/* A token bucket on pull starts, the kubelet's registryPullQPS and
 * registryBurst: `burst` pulls may start at once, then one more every
 * 1/qps seconds.  Where the kubelet refuses a pull over the rate ("pull
 * QPS exceeded"), pullfs by default makes it wait, in a bounded FIFO
 * queue; fail_fast restores the kubelet's behaviour.
 *
 * The bucket is kept as a theoretical arrival time in integer
 * nanoseconds (GCRA), so the schedule is exact: with qps 5 and burst 10,
 * ten tokens at t, the eleventh at t + 200 ms, and so on.
 *
 * A waiter whose caller has gone can leave the queue from any place: its
 * abandon flag is set and throttle_wake called.  Its place then no longer
 * counts against max_waiters and the ones behind it move up, each token
 * coming one interval sooner.
 *
 * Thread-safe: the struct has its own mutex.  Time comes from the
 * injected clock; blocking waits sleep on CLOCK_MONOTONIC for the time
 * that clock says is missing, then ask the clock again. */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "clock.h"

#define THROTTLE_DEFAULT_QPS 5.0
#define THROTTLE_DEFAULT_BURST 10
#define THROTTLE_DEFAULT_MAX_WAITERS 100

struct throttle_options {
	double qps;		   /* starts per second; 0: no limit */
	unsigned burst;		   /* 0: THROTTLE_DEFAULT_BURST */
	unsigned max_waiters;	   /* 0: THROTTLE_DEFAULT_MAX_WAITERS */
	bool fail_fast;		   /* no queue: refuse at once when out of tokens */
	const struct clock *clock; /* NULL: clock_monotonic(); borrowed */
};

#define THROTTLE_OPTIONS_DEFAULT                                              \
	{                                                                     \
		.qps = THROTTLE_DEFAULT_QPS, .burst = THROTTLE_DEFAULT_BURST, \
		.max_waiters = THROTTLE_DEFAULT_MAX_WAITERS,                  \
	}

struct throttle_stats {
	unsigned waiting;   /* blocked in throttle_acquire now, not abandoned */
	uint64_t granted;   /* tokens handed out */
	uint64_t refused;   /* -EAGAIN returned (fail-fast, full queue, try) */
	uint64_t abandoned; /* -ECANCELED for the caller's abandon flag */
};

struct throttle;

/* opts NULL means THROTTLE_OPTIONS_DEFAULT; the clock must outlive the
 * throttle.  Returns 0 and a throttle owned by the caller in *ret,
 * -EINVAL for a negative or NaN qps or a qps/burst pair whose window does
 * not fit in 64-bit nanoseconds, -ENOMEM.  The bucket starts full. */
int throttle_new(const struct throttle_options *opts, struct throttle **ret);
/* Accepts NULL.  No thread may be inside throttle_acquire. */
void throttle_free(struct throttle *t);

/* Takes a token now or not at all; never blocks (beyond the mutex).
 * Returns 0 when a token was taken, or -EAGAIN with the time until one
 * would be free for this caller in *ret_wait_ns (may be NULL), counting
 * the blocked waiters ahead of it: they are served first, so this may
 * say 0 while they have not yet woken to take the tokens.  -ECANCELED
 * after throttle_shutdown. */
int throttle_try_acquire(struct throttle *t, int64_t *ret_wait_ns);

/* Takes a token, blocking in FIFO order until one is free.  abandon
 * (borrowed, may be NULL) is read on entry and each time the caller
 * wakes: once true, the caller leaves the queue without a token.
 * Returns 0; -EAGAIN at once when fail_fast is set and no token is free,
 * or when max_waiters callers are already waiting; -ECANCELED when
 * *abandon is true or throttle_shutdown is called meanwhile (or was
 * before). */
int throttle_acquire(struct throttle *t, const atomic_bool *abandon);

/* Makes the waiters look at the clock and their abandon flags again;
 * never blocks (beyond the mutex).  Call it after setting an abandon
 * flag, or when the clock jumps ahead by other means than the passing of
 * real time (a test clock); real waiters wake by themselves when their
 * token is due. */
void throttle_wake(struct throttle *t);

/* Wakes every waiter with -ECANCELED and refuses every later call the
 * same way; for unmount. */
void throttle_shutdown(struct throttle *t);

void throttle_get_stats(struct throttle *t, struct throttle_stats *ret);

/* The token bucket on pull starts; see throttle.h. */
#include "throttle.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "macro.h"
#include "waitlist.h"

/* One blocking wait is cut to this much real time, so that a clock that
 * disagrees with CLOCK_MONOTONIC cannot park a waiter for ages. */
#define MAX_WAIT_SLICE_NS (60 * CLOCK_NS_PER_SEC)

struct throttle {
	int64_t interval_ns;  /* between tokens; 0: no limit */
	int64_t tolerance_ns; /* (burst - 1) * interval: how far ahead tat may run */
	unsigned max_waiters;
	bool fail_fast;
	const struct clock *clock;

	pthread_mutex_t lock;
	pthread_cond_t cond; /* CLOCK_MONOTONIC; head moved, shutdown or wake */
	/* All below under lock. */
	int64_t tat_ns; /* theoretical arrival time of the next token */
	/* Only the head of the line may take a token, which is what makes
	 * the queue FIFO; it alone does the timed wait for it. */
	struct dlist waiters;
	bool shutdown;
	uint64_t granted;
	uint64_t refused;
	uint64_t abandoned;
};

int throttle_new(const struct throttle_options *opts, struct throttle **ret)
{
	static const struct throttle_options defaults = THROTTLE_OPTIONS_DEFAULT;
	struct throttle *t;
	pthread_condattr_t attr;
	unsigned burst, max_waiters;
	int64_t interval = 0, tolerance = 0;
	uint64_t window;
	int r;

	if (!opts)
		opts = &defaults;
	if (!(opts->qps >= 0))
		return -EINVAL;
	burst = opts->burst ? opts->burst : THROTTLE_DEFAULT_BURST;
	max_waiters = opts->max_waiters ? opts->max_waiters : THROTTLE_DEFAULT_MAX_WAITERS;
	if (opts->qps > 0) {
		double iv = (double)CLOCK_NS_PER_SEC / opts->qps;

		if (iv > (double)(INT64_MAX / 4))
			return -EINVAL;
		interval = MAX((int64_t)(iv + 0.5), 1);
		/* The wait of the last queued waiter must fit, with room for
		 * the sums made with it. */
		if (__builtin_mul_overflow((uint64_t)burst + max_waiters, (uint64_t)interval,
					   &window) ||
		    window > (uint64_t)(INT64_MAX / 4))
			return -EINVAL;
		tolerance = (int64_t)(burst - 1) * interval;
	}

	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	r = -pthread_condattr_init(&attr);
	if (r < 0) {
		free(t);
		return r;
	}
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	r = -pthread_cond_init(&t->cond, &attr);
	pthread_condattr_destroy(&attr);
	if (r < 0) {
		free(t);
		return r;
	}
	pthread_mutex_init(&t->lock, NULL);
	t->interval_ns = interval;
	t->tolerance_ns = tolerance;
	t->max_waiters = max_waiters;
	t->fail_fast = opts->fail_fast;
	t->clock = opts->clock ? opts->clock : clock_monotonic();
	t->tat_ns = clock_now_ns(t->clock);
	*ret = t;
	return 0;
}

void throttle_free(struct throttle *t)
{
	if (!t)
		return;
	pthread_cond_destroy(&t->cond);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

/* Takes a token at now when none of `ahead` waiters is before us and the
 * bucket has one; otherwise says how long until it would. */
static int take_locked(struct throttle *t, int64_t now, unsigned ahead, int64_t *ret_wait_ns)
{
	int64_t base = MAX(t->tat_ns, now);
	int64_t due = base + (int64_t)ahead * t->interval_ns - t->tolerance_ns;

	if (ahead == 0 && due <= now) {
		t->tat_ns = base + t->interval_ns;
		t->granted++;
		return 0;
	}
	*ret_wait_ns = MAX(due - now, 0);
	return -EAGAIN;
}

int throttle_try_acquire(struct throttle *t, int64_t *ret_wait_ns)
{
	int64_t wait;
	int r = 0;

	pthread_mutex_lock(&t->lock);
	if (t->shutdown)
		r = -ECANCELED;
	else if (t->interval_ns == 0)
		t->granted++;
	else {
		r = take_locked(t, clock_now_ns(t->clock), t->waiters.len, &wait);
		if (r < 0) {
			t->refused++;
			if (ret_wait_ns)
				*ret_wait_ns = wait;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return r;
}

static void wait_real_ns(struct throttle *t, int64_t ns)
{
	struct timespec ts = clock_mono_deadline(MIN(ns, MAX_WAIT_SLICE_NS));

	pthread_cond_timedwait(&t->cond, &t->lock, &ts);
}

int throttle_acquire(struct throttle *t, const atomic_bool *abandon)
{
	struct dlist_node me = { 0 };
	int64_t wait;
	int r;

	pthread_mutex_lock(&t->lock);
	r = waitlist_cancelled(t->shutdown, abandon, &t->abandoned);
	if (r < 0)
		goto out;
	if (t->interval_ns == 0) {
		t->granted++;
		r = 0;
		goto out;
	}
	if (t->waiters.len == 0 && take_locked(t, clock_now_ns(t->clock), 0, &wait) == 0) {
		r = 0;
		goto out;
	}
	if (t->fail_fast || t->waiters.len >= t->max_waiters) {
		t->refused++;
		r = -EAGAIN;
		goto out;
	}

	dlist_push(&t->waiters, &me);
	for (;;) {
		r = waitlist_cancelled(t->shutdown, abandon, &t->abandoned);
		if (r < 0)
			break;
		if (!waitlist_is_head(&t->waiters, &me)) {
			pthread_cond_wait(&t->cond, &t->lock);
			continue;
		}
		r = take_locked(t, clock_now_ns(t->clock), 0, &wait);
		if (r == 0)
			break;
		wait_real_ns(t, wait);
	}
	/* The next in line has to start its own timed wait, whether we
	 * took the token or gave up. */
	if (waitlist_remove(&t->waiters, &me))
		pthread_cond_broadcast(&t->cond);
out:
	pthread_mutex_unlock(&t->lock);
	return r;
}

void throttle_wake(struct throttle *t)
{
	pthread_mutex_lock(&t->lock);
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

void throttle_shutdown(struct throttle *t)
{
	pthread_mutex_lock(&t->lock);
	t->shutdown = true;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

void throttle_get_stats(struct throttle *t, struct throttle_stats *ret)
{
	pthread_mutex_lock(&t->lock);
	ret->waiting = t->waiters.len;
	ret->granted = t->granted;
	ret->refused = t->refused;
	ret->abandoned = t->abandoned;
	pthread_mutex_unlock(&t->lock);
}

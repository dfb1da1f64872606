/* Unit tests for the token bucket on pull starts: burst, refill, the
 * unlimited and fail-fast modes, the bounded FIFO queue and waiters that
 * abandon their place.  Time is a hand-driven clock; the threads that
 * block do so only until the test moves that clock (or sets their
 * abandon flag) and wakes them. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "throttle.h"

#define MS(x) ((int64_t)(x)*1000000)
#define S(x) ((int64_t)(x)*CLOCK_NS_PER_SEC)

struct fake {
	struct clock clock;
	int64_t now; /* atomic: read by blocked threads */
};

static int64_t fake_now(const struct clock *c)
{
	return __atomic_load_n((const int64_t *)c->userdata, __ATOMIC_SEQ_CST);
}

static void fake_init(struct fake *f)
{
	f->clock.now_ns = fake_now;
	f->clock.userdata = &f->now;
	f->now = S(5000);
}

static void fake_advance(struct fake *f, int64_t ns)
{
	__atomic_add_fetch(&f->now, ns, __ATOMIC_SEQ_CST);
}

static struct throttle *make(struct fake *f, double qps, unsigned burst, unsigned max_waiters,
			     bool fail_fast)
{
	struct throttle_options o = {
		.qps = qps,
		.burst = burst,
		.max_waiters = max_waiters,
		.fail_fast = fail_fast,
		.clock = &f->clock,
	};
	struct throttle *t = NULL;

	assert_int_equal(throttle_new(&o, &t), 0);
	assert_non_null(t);
	return t;
}

static void test_burst_then_rate(void **state)
{
	struct fake f;
	struct throttle *t;
	int64_t wait = -1;

	fake_init(&f);
	t = make(&f, 5, 10, 0, false);
	/* The whole burst at once. */
	for (int i = 0; i < 10; i++)
		assert_int_equal(throttle_try_acquire(t, &wait), 0);
	assert_int_equal(throttle_try_acquire(t, &wait), -EAGAIN);
	assert_int_equal(wait, MS(200));

	/* Then exactly one token every 200 ms. */
	for (int i = 0; i < 20; i++) {
		fake_advance(&f, MS(200) - 1);
		assert_int_equal(throttle_try_acquire(t, &wait), -EAGAIN);
		assert_int_equal(wait, 1);
		fake_advance(&f, 1);
		assert_int_equal(throttle_try_acquire(t, &wait), 0);
		assert_int_equal(throttle_try_acquire(t, &wait), -EAGAIN);
		assert_int_equal(wait, MS(200));
	}

	struct throttle_stats st;
	throttle_get_stats(t, &st);
	assert_int_equal(st.granted, 30);
	assert_int_equal(st.refused, 41);
	assert_int_equal(st.waiting, 0);
	throttle_free(t);
}

static void test_refill_caps_at_burst(void **state)
{
	struct fake f;
	struct throttle *t;
	int64_t wait;

	fake_init(&f);
	t = make(&f, 5, 10, 0, false);
	for (int i = 0; i < 10; i++)
		assert_int_equal(throttle_try_acquire(t, NULL), 0);
	/* 1 s refills 5 tokens ... */
	fake_advance(&f, S(1));
	for (int i = 0; i < 5; i++)
		assert_int_equal(throttle_try_acquire(t, NULL), 0);
	assert_int_equal(throttle_try_acquire(t, NULL), -EAGAIN);
	/* ... and an idle hour refills no more than the burst. */
	fake_advance(&f, S(3600));
	for (int i = 0; i < 10; i++)
		assert_int_equal(throttle_try_acquire(t, NULL), 0);
	assert_int_equal(throttle_try_acquire(t, &wait), -EAGAIN);
	assert_int_equal(wait, MS(200));
	throttle_free(t);
}

static void test_fractional_qps(void **state)
{
	struct fake f;
	struct throttle *t;
	int64_t wait;

	fake_init(&f);
	t = make(&f, 0.5, 1, 0, false);
	assert_int_equal(throttle_try_acquire(t, NULL), 0);
	assert_int_equal(throttle_try_acquire(t, &wait), -EAGAIN);
	assert_int_equal(wait, S(2));
	fake_advance(&f, S(1));
	assert_int_equal(throttle_try_acquire(t, &wait), -EAGAIN);
	assert_int_equal(wait, S(1));
	fake_advance(&f, S(1));
	assert_int_equal(throttle_try_acquire(t, NULL), 0);
	throttle_free(t);
}

static void test_unlimited(void **state)
{
	struct fake f;
	struct throttle *t;

	fake_init(&f);
	t = make(&f, 0, 1, 1, true);
	for (int i = 0; i < 10000; i++) {
		assert_int_equal(throttle_try_acquire(t, NULL), 0);
		assert_int_equal(throttle_acquire(t, NULL), 0);
	}
	throttle_free(t);
}

static void test_fail_fast(void **state)
{
	struct fake f;
	struct throttle *t;
	struct throttle_stats st;

	fake_init(&f);
	t = make(&f, 5, 2, 0, true);
	assert_int_equal(throttle_acquire(t, NULL), 0);
	assert_int_equal(throttle_acquire(t, NULL), 0);
	/* The kubelet's "pull QPS exceeded": refused, not queued. */
	assert_int_equal(throttle_acquire(t, NULL), -EAGAIN);
	throttle_get_stats(t, &st);
	assert_int_equal(st.waiting, 0);
	assert_int_equal(st.refused, 1);
	fake_advance(&f, MS(200));
	assert_int_equal(throttle_acquire(t, NULL), 0);
	assert_int_equal(throttle_acquire(t, NULL), -EAGAIN);
	throttle_free(t);
}

static void test_defaults_and_invalid(void **state)
{
	struct throttle_options o = THROTTLE_OPTIONS_DEFAULT;
	struct throttle *t = NULL;
	struct fake f;
	int64_t wait;

	/* The documented defaults: qps 5, burst 10. */
	fake_init(&f);
	o.clock = &f.clock;
	assert_int_equal(throttle_new(&o, &t), 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(throttle_try_acquire(t, NULL), 0);
	assert_int_equal(throttle_try_acquire(t, &wait), -EAGAIN);
	assert_int_equal(wait, MS(200));
	throttle_free(t);

	/* NULL options: the same, on the real clock (whose passing time
	 * makes only the burst certain). */
	t = NULL;
	assert_int_equal(throttle_new(NULL, &t), 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(throttle_try_acquire(t, NULL), 0);
	throttle_free(t);
	throttle_free(NULL);

	/* burst 0 and max_waiters 0 mean their defaults. */
	o = (struct throttle_options){ .qps = 5, .clock = &f.clock };
	t = NULL;
	assert_int_equal(throttle_new(&o, &t), 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(throttle_try_acquire(t, NULL), 0);
	assert_int_equal(throttle_try_acquire(t, NULL), -EAGAIN);
	throttle_free(t);

	t = NULL;
	o.qps = -1;
	assert_int_equal(throttle_new(&o, &t), -EINVAL);
	o.qps = __builtin_nan("");
	assert_int_equal(throttle_new(&o, &t), -EINVAL);
	o.qps = 1e-12; /* a token every 30000 years */
	assert_int_equal(throttle_new(&o, &t), -EINVAL);
	assert_null(t);
}

static void test_real_clock_blocking(void **state)
{
	struct throttle_options o = { .qps = 200000, .burst = 1 };
	struct throttle *t = NULL;

	/* The one test on real time: 5 us between tokens, so the blocking
	 * path with its timed waits runs without a noticeable delay. */
	assert_int_equal(throttle_new(&o, &t), 0);
	for (int i = 0; i < 50; i++)
		assert_int_equal(throttle_acquire(t, NULL), 0);
	throttle_free(t);
}

#define N_WAITERS 4

/* The order in which the waiters got their tokens. */
struct order {
	pthread_mutex_t lock;
	int ids[N_WAITERS];
	int n; /* lock */
};

struct waiter {
	struct throttle *t;
	struct order *order;
	int id;
	int result;
	atomic_bool abandon;
	pthread_t thread;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;

	w->result = throttle_acquire(w->t, &w->abandon);
	if (w->result == 0) {
		pthread_mutex_lock(&w->order->lock);
		w->order->ids[w->order->n++] = w->id;
		pthread_mutex_unlock(&w->order->lock);
	}
	return NULL;
}

static void start_waiter(struct waiter *w, struct throttle *t, struct order *o, int id)
{
	*w = (struct waiter){ .t = t, .order = o, .id = id, .result = 1 };
	atomic_init(&w->abandon, false);
	assert_int_equal(pthread_create(&w->thread, NULL, waiter_main, w), 0);
}

/* Lets waiter w give up its place and waits until it has returned. */
static void abandon(struct waiter *w)
{
	atomic_store(&w->abandon, true);
	throttle_wake(w->t);
	pthread_join(w->thread, NULL);
	assert_int_equal(w->result, -ECANCELED);
}

static void wait_for(struct throttle *t, unsigned waiting, uint64_t granted)
{
	struct throttle_stats st;

	for (;;) {
		throttle_get_stats(t, &st);
		if (st.waiting == waiting && st.granted == granted)
			return;
		sched_yield();
	}
}

static void wait_order(struct order *o, int want)
{
	for (;;) {
		pthread_mutex_lock(&o->lock);
		int have = o->n;
		pthread_mutex_unlock(&o->lock);
		if (have == want)
			return;
		sched_yield();
	}
}

/* At one token a second, with `waiting` queued and the last token taken
 * now: moves the clock a second at a time and checks each time that the
 * head takes its token exactly then, not a nanosecond before.  Then
 * checks the order of all the grants the waiters saw. */
static void serve(struct fake *f, struct throttle *t, struct order *o, unsigned waiting,
		  const int *want, int n_want)
{
	struct throttle_stats st;
	int done;

	throttle_get_stats(t, &st);
	assert_int_equal(st.waiting, waiting);
	pthread_mutex_lock(&o->lock);
	done = o->n;
	pthread_mutex_unlock(&o->lock);
	assert_int_equal(done + (int)waiting, n_want);

	for (unsigned i = 0; i < waiting; i++) {
		fake_advance(f, S(1) - 1);
		throttle_wake(t);
		wait_for(t, waiting - i, st.granted + i);
		fake_advance(f, 1);
		throttle_wake(t);
		wait_for(t, waiting - i - 1, st.granted + i + 1);
		wait_order(o, done + (int)i + 1);
	}
	for (int i = 0; i < n_want; i++)
		assert_int_equal(o->ids[i], want[i]);
}

/* Takes the one token in the bucket of t and queues n waiters one by one,
 * so that their arrival order is their id order. */
static void queue_up(struct throttle *t, struct waiter *w, struct order *o, int n)
{
	assert_int_equal(throttle_acquire(t, NULL), 0);
	for (int i = 0; i < n; i++) {
		start_waiter(&w[i], t, o, i);
		wait_for(t, i + 1, 1);
	}
}

static void join_all(struct waiter *w, const int *ids, int n)
{
	for (int i = 0; i < n; i++) {
		pthread_join(w[ids[i]].thread, NULL);
		assert_int_equal(w[ids[i]].result, 0);
	}
}

static void test_queue_fifo_and_bound(void **state)
{
	static const int want[] = { 0, 1, 2, 3 };
	struct fake f;
	struct throttle *t;
	struct waiter w[N_WAITERS];
	struct order o = { .lock = PTHREAD_MUTEX_INITIALIZER };
	int64_t wait;

	fake_init(&f);
	/* One token a second, burst 1, room for N_WAITERS waiters. */
	t = make(&f, 1, 1, N_WAITERS, false);
	queue_up(t, w, &o, N_WAITERS);

	/* Full queue: refused at once. */
	assert_int_equal(throttle_acquire(t, NULL), -EAGAIN);
	/* A non-blocking caller does not jump the queue, and learns it is
	 * behind four waiters: its token is due in 5 s. */
	assert_int_equal(throttle_try_acquire(t, &wait), -EAGAIN);
	assert_int_equal(wait, S(5));

	/* Nothing moves while the clock does not. */
	throttle_wake(t);
	wait_for(t, N_WAITERS, 1);

	serve(&f, t, &o, N_WAITERS, want, N_WAITERS);
	join_all(w, want, N_WAITERS);
	throttle_free(t);
}

static void test_shutdown_wakes_waiters(void **state)
{
	struct fake f;
	struct throttle *t;
	struct waiter w[2];
	struct order o = { .lock = PTHREAD_MUTEX_INITIALIZER };

	fake_init(&f);
	t = make(&f, 1, 1, 0, false);
	queue_up(t, w, &o, 2);
	throttle_shutdown(t);
	for (int i = 0; i < 2; i++) {
		pthread_join(w[i].thread, NULL);
		assert_int_equal(w[i].result, -ECANCELED);
	}
	assert_int_equal(o.n, 0);
	assert_int_equal(throttle_acquire(t, NULL), -ECANCELED);
	assert_int_equal(throttle_try_acquire(t, NULL), -ECANCELED);
	throttle_free(t);
}

/* Three queued, the queue full.  The middle one leaves: the others keep
 * their order, each token comes a second sooner for those behind it, and
 * its place goes to a newcomer that a full queue would have refused. */
static void test_abandon_middle(void **state)
{
	static const int want[] = { 0, 2, 3 };
	struct fake f;
	struct throttle *t;
	struct waiter w[4];
	struct order o = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct throttle_stats st;
	int64_t wait;

	fake_init(&f);
	t = make(&f, 1, 1, 3, false);
	queue_up(t, w, &o, 3);
	assert_int_equal(throttle_acquire(t, NULL), -EAGAIN);
	assert_int_equal(throttle_try_acquire(t, &wait), -EAGAIN);
	assert_int_equal(wait, S(4));

	abandon(&w[1]);
	wait_for(t, 2, 1);
	assert_int_equal(throttle_try_acquire(t, &wait), -EAGAIN);
	assert_int_equal(wait, S(3));
	throttle_get_stats(t, &st);
	assert_int_equal(st.abandoned, 1);

	start_waiter(&w[3], t, &o, 3);
	wait_for(t, 3, 1);
	assert_int_equal(throttle_acquire(t, NULL), -EAGAIN);

	serve(&f, t, &o, 3, want, 3);
	join_all(w, want, 3);
	throttle_get_stats(t, &st);
	assert_int_equal(st.granted, 4);
	assert_int_equal(st.refused, 4);
	assert_int_equal(st.abandoned, 1);
	throttle_free(t);
}

/* The head leaves while it waits for its token: the next in line takes
 * that same token when it is due, not one interval later. */
static void test_abandon_head(void **state)
{
	static const int want[] = { 1 };
	struct fake f;
	struct throttle *t;
	struct waiter w[2];
	struct order o = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct throttle_stats st;

	fake_init(&f);
	t = make(&f, 1, 1, 0, false);
	queue_up(t, w, &o, 2);
	/* Once queued, the head is in its timed wait for the token due in a
	 * second: queueing and starting that wait happen under one lock. */
	abandon(&w[0]);
	wait_for(t, 1, 1);
	serve(&f, t, &o, 1, want, 1);
	join_all(w, want, 1);
	throttle_get_stats(t, &st);
	assert_int_equal(st.abandoned, 1);
	throttle_free(t);
}

/* A flag already set: -ECANCELED at once, with tokens in the bucket, with
 * no limit at all, or behind a full queue; nothing is taken and nobody
 * queues. */
static void test_abandon_before(void **state)
{
	static const int want[] = { 0 };
	struct fake f;
	struct throttle *t;
	struct waiter w[1];
	struct order o = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct throttle_stats st;
	atomic_bool gone = true;

	fake_init(&f);
	t = make(&f, 0, 1, 1, false);
	assert_int_equal(throttle_acquire(t, &gone), -ECANCELED);
	throttle_get_stats(t, &st);
	assert_int_equal(st.granted, 0);
	throttle_free(t);

	t = make(&f, 1, 2, 1, false);
	assert_int_equal(throttle_acquire(t, &gone), -ECANCELED);
	/* The burst is whole. */
	assert_int_equal(throttle_acquire(t, NULL), 0);
	assert_int_equal(throttle_acquire(t, NULL), 0);
	start_waiter(&w[0], t, &o, 0);
	wait_for(t, 1, 2);
	assert_int_equal(throttle_acquire(t, &gone), -ECANCELED);
	throttle_get_stats(t, &st);
	assert_int_equal(st.waiting, 1);
	assert_int_equal(st.refused, 0);
	assert_int_equal(st.abandoned, 2);

	serve(&f, t, &o, 1, want, 1);
	join_all(w, want, 1);
	throttle_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_burst_then_rate),
		cmocka_unit_test(test_refill_caps_at_burst),
		cmocka_unit_test(test_fractional_qps),
		cmocka_unit_test(test_unlimited),
		cmocka_unit_test(test_fail_fast),
		cmocka_unit_test(test_defaults_and_invalid),
		cmocka_unit_test(test_real_clock_blocking),
		cmocka_unit_test(test_queue_fifo_and_bound),
		cmocka_unit_test(test_shutdown_wakes_waiters),
		cmocka_unit_test(test_abandon_middle),
		cmocka_unit_test(test_abandon_head),
		cmocka_unit_test(test_abandon_before),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

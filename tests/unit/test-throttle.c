/* Unit tests for the token bucket on pull starts: burst, refill, the
 * unlimited and fail-fast modes, the bounded FIFO queue.  Time is a
 * hand-driven clock; the threads that block do so only until the test
 * moves that clock and wakes them. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "throttle.h"

#define MS(x) ((int64_t)(x) * 1000000)
#define S(x) ((int64_t)(x) * CLOCK_NS_PER_SEC)

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

static struct throttle *make(struct fake *f, double qps, unsigned burst,
			     unsigned max_waiters, bool fail_fast)
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
		assert_int_equal(throttle_acquire(t), 0);
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
	assert_int_equal(throttle_acquire(t), 0);
	assert_int_equal(throttle_acquire(t), 0);
	/* The kubelet's "pull QPS exceeded": refused, not queued. */
	assert_int_equal(throttle_acquire(t), -EAGAIN);
	throttle_get_stats(t, &st);
	assert_int_equal(st.waiting, 0);
	assert_int_equal(st.refused, 1);
	fake_advance(&f, MS(200));
	assert_int_equal(throttle_acquire(t), 0);
	assert_int_equal(throttle_acquire(t), -EAGAIN);
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
	o = (struct throttle_options){.qps = 5, .clock = &f.clock};
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
	struct throttle_options o = {.qps = 200000, .burst = 1};
	struct throttle *t = NULL;

	/* The one test on real time: 5 us between tokens, so the blocking
	 * path with its timed waits runs without a noticeable delay. */
	assert_int_equal(throttle_new(&o, &t), 0);
	for (int i = 0; i < 50; i++)
		assert_int_equal(throttle_acquire(t), 0);
	throttle_free(t);
}

struct waiter {
	struct throttle *t;
	int id;
	int result;
	int *order;
	int *n_order;
	pthread_mutex_t *order_lock;
	pthread_t thread;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;

	w->result = throttle_acquire(w->t);
	if (w->result == 0) {
		pthread_mutex_lock(w->order_lock);
		w->order[(*w->n_order)++] = w->id;
		pthread_mutex_unlock(w->order_lock);
	}
	return NULL;
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

static void wait_order(pthread_mutex_t *lock, const int *n, int want)
{
	for (;;) {
		pthread_mutex_lock(lock);
		int have = *n;
		pthread_mutex_unlock(lock);
		if (have == want)
			return;
		sched_yield();
	}
}

#define N_WAITERS 4

static void test_queue_fifo_and_bound(void **state)
{
	struct fake f;
	struct throttle *t;
	struct waiter w[N_WAITERS];
	pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
	int order[N_WAITERS], n_order = 0;
	int64_t wait;

	fake_init(&f);
	/* One token a second, burst 1, room for N_WAITERS waiters. */
	t = make(&f, 1, 1, N_WAITERS, false);
	assert_int_equal(throttle_acquire(t), 0);

	/* Queue them one by one, so the arrival order is known. */
	for (int i = 0; i < N_WAITERS; i++) {
		w[i] = (struct waiter){
			.t = t, .id = i, .result = 1, .order = order,
			.n_order = &n_order, .order_lock = &order_lock,
		};
		assert_int_equal(pthread_create(&w[i].thread, NULL, waiter_main, &w[i]), 0);
		wait_for(t, i + 1, 1);
	}

	/* Full queue: refused at once. */
	assert_int_equal(throttle_acquire(t), -EAGAIN);
	/* A non-blocking caller does not jump the queue, and learns it is
	 * behind four waiters: its token is due in 5 s. */
	assert_int_equal(throttle_try_acquire(t, &wait), -EAGAIN);
	assert_int_equal(wait, S(5));

	/* Nothing moves while the clock does not. */
	throttle_wake(t);
	wait_for(t, N_WAITERS, 1);

	for (int i = 0; i < N_WAITERS; i++) {
		fake_advance(&f, S(1) - 1);
		throttle_wake(t);
		wait_for(t, N_WAITERS - i, 1 + i);
		fake_advance(&f, 1);
		throttle_wake(t);
		wait_for(t, N_WAITERS - i - 1, 2 + i);
		wait_order(&order_lock, &n_order, i + 1);
	}
	for (int i = 0; i < N_WAITERS; i++) {
		pthread_join(w[i].thread, NULL);
		assert_int_equal(w[i].result, 0);
		assert_int_equal(order[i], i);
	}
	throttle_free(t);
}

static void test_shutdown_wakes_waiters(void **state)
{
	struct fake f;
	struct throttle *t;
	struct waiter w[2];
	pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
	int order[2], n_order = 0;

	fake_init(&f);
	t = make(&f, 1, 1, 0, false);
	assert_int_equal(throttle_acquire(t), 0);
	for (int i = 0; i < 2; i++) {
		w[i] = (struct waiter){
			.t = t, .id = i, .result = 1, .order = order,
			.n_order = &n_order, .order_lock = &order_lock,
		};
		assert_int_equal(pthread_create(&w[i].thread, NULL, waiter_main, &w[i]), 0);
	}
	wait_for(t, 2, 1);
	throttle_shutdown(t);
	for (int i = 0; i < 2; i++) {
		pthread_join(w[i].thread, NULL);
		assert_int_equal(w[i].result, -ECANCELED);
	}
	assert_int_equal(n_order, 0);
	assert_int_equal(throttle_acquire(t), -ECANCELED);
	assert_int_equal(throttle_try_acquire(t, NULL), -ECANCELED);
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
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

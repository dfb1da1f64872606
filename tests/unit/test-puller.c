/* Unit tests for the pull slots: the serial default, the parallel limit,
 * FIFO order, the bounded queue and waiters that abandon their place.
 * Threads hold their slot until the test lets them go, so every count
 * checked is exact. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "macro.h"
#include "puller.h"

#define N_THREADS 16

struct shared {
	struct puller *p;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned inside;     /* threads between enter and leave; lock */
	unsigned max_inside; /* lock */
	unsigned released;   /* how many may leave, in entry order; lock */
	unsigned n_order;    /* lock */
	int order[N_THREADS];
};

struct worker {
	struct shared *s;
	int id;
	int result;
	atomic_bool abandon;
	const char *key; /* the registry; NULL: an unnamed slot */
	struct puller_slot slot;
	bool joined; /* by abandon() */
	pthread_t thread;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct shared *s = w->s;
	unsigned my_turn;

	w->result = puller_enter(s->p, w->key ? &w->slot : NULL, w->key, &w->abandon);
	if (w->result != 0)
		return NULL;
	pthread_mutex_lock(&s->lock);
	s->inside++;
	if (s->inside > s->max_inside)
		s->max_inside = s->inside;
	my_turn = s->n_order;
	s->order[s->n_order++] = w->id;
	pthread_cond_broadcast(&s->cond);
	while (s->released <= my_turn)
		pthread_cond_wait(&s->cond, &s->lock);
	s->inside--;
	pthread_mutex_unlock(&s->lock);
	puller_leave(s->p, w->key ? &w->slot : NULL);
	return NULL;
}

static void shared_init(struct shared *s, unsigned max_parallel, unsigned max_queue)
{
	struct puller_options o = { .max_parallel = max_parallel, .max_queue = max_queue };

	*s = (struct shared){ 0 };
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	assert_int_equal(puller_new(&o, &s->p), 0);
}

static void shared_done(struct shared *s)
{
	puller_free(s->p);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
}

static void start(struct shared *s, struct worker *w, int id)
{
	*w = (struct worker){ .s = s, .id = id, .result = 1 };
	atomic_init(&w->abandon, false);
	assert_int_equal(pthread_create(&w->thread, NULL, worker_main, w), 0);
}

/* Spins until the puller shows exactly these counts. */
static void wait_stats(struct puller *p, unsigned running, unsigned queued)
{
	struct puller_stats st;

	for (;;) {
		puller_get_stats(p, &st);
		if (st.running == running && st.queued == queued)
			return;
		sched_yield();
	}
}

static void wait_entered(struct shared *s, unsigned n)
{
	pthread_mutex_lock(&s->lock);
	while (s->n_order < n)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
}

static void release(struct shared *s, unsigned n)
{
	pthread_mutex_lock(&s->lock);
	s->released = n;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

/* max_parallel pulls run, the rest queue; releasing them one at a time
 * admits exactly one more each time, in arrival order. */
static void run_limit(unsigned max_parallel)
{
	struct shared s;
	struct worker w[N_THREADS];
	struct puller_stats st;

	shared_init(&s, max_parallel, N_THREADS);
	for (int i = 0; i < N_THREADS; i++) {
		unsigned n = (unsigned)i + 1;

		start(&s, &w[i], i);
		/* Wait for each to be in place so that arrival order is
		 * thread order. */
		wait_stats(s.p, n < max_parallel ? n : max_parallel,
			   n > max_parallel ? n - max_parallel : 0);
	}
	wait_entered(&s, max_parallel);

	for (unsigned done = 0; done < N_THREADS; done++) {
		unsigned left = N_THREADS - done;

		wait_stats(s.p, left < max_parallel ? left : max_parallel,
			   left > max_parallel ? left - max_parallel : 0);
		wait_entered(&s, done + (left < max_parallel ? left : max_parallel));
		release(&s, done + 1);
	}
	for (int i = 0; i < N_THREADS; i++) {
		pthread_join(w[i].thread, NULL);
		assert_int_equal(w[i].result, 0);
		assert_int_equal(s.order[i], i);
	}
	assert_int_equal(s.max_inside, max_parallel);
	puller_get_stats(s.p, &st);
	assert_int_equal(st.running, 0);
	assert_int_equal(st.queued, 0);
	assert_int_equal(st.entered, N_THREADS);
	assert_int_equal(st.refused, 0);
	assert_int_equal(st.max_parallel, max_parallel);
	shared_done(&s);
}

static void test_serial(void **state)
{
	run_limit(1);
}

static void test_parallel_3(void **state)
{
	run_limit(3);
}

static void test_queue_full(void **state)
{
	struct shared s;
	struct worker w[3];
	struct puller_stats st;

	shared_init(&s, 1, 2);
	start(&s, &w[0], 0);
	wait_stats(s.p, 1, 0);
	start(&s, &w[1], 1);
	start(&s, &w[2], 2);
	wait_stats(s.p, 1, 2);

	/* One running, two queued: the next caller is turned away. */
	assert_int_equal(puller_enter(s.p, NULL, NULL, NULL), -EAGAIN);
	assert_int_equal(puller_enter(s.p, NULL, NULL, NULL), -EAGAIN);
	puller_get_stats(s.p, &st);
	assert_int_equal(st.refused, 2);
	assert_int_equal(st.max_queue, 2);

	release(&s, 3);
	for (int i = 0; i < 3; i++) {
		pthread_join(w[i].thread, NULL);
		assert_int_equal(w[i].result, 0);
	}
	assert_int_equal(s.max_inside, 1);

	/* Free again: a caller enters at once. */
	assert_int_equal(puller_enter(s.p, NULL, NULL, NULL), 0);
	puller_leave(s.p, NULL);
	shared_done(&s);
}

static void test_defaults(void **state)
{
	struct puller *p = NULL;
	struct puller_stats st;

	assert_int_equal(puller_new(NULL, &p), 0);
	puller_get_stats(p, &st);
	assert_int_equal(st.max_parallel, 1);
	assert_int_equal(st.max_queue, PULLER_DEFAULT_MAX_QUEUE);
	assert_int_equal(puller_enter(p, NULL, NULL, NULL), 0);
	puller_get_stats(p, &st);
	assert_int_equal(st.running, 1);
	puller_leave(p, NULL);
	puller_free(p);
	puller_free(NULL);
}

static void test_shutdown(void **state)
{
	struct shared s;
	struct worker w[3];

	shared_init(&s, 1, 0);
	start(&s, &w[0], 0);
	wait_stats(s.p, 1, 0);
	start(&s, &w[1], 1);
	start(&s, &w[2], 2);
	wait_stats(s.p, 1, 2);

	puller_shutdown(s.p);
	pthread_join(w[1].thread, NULL);
	pthread_join(w[2].thread, NULL);
	assert_int_equal(w[1].result, -ECANCELED);
	assert_int_equal(w[2].result, -ECANCELED);
	assert_int_equal(puller_enter(s.p, NULL, NULL, NULL), -ECANCELED);

	/* The slot already held stays valid and is given back normally. */
	release(&s, 1);
	pthread_join(w[0].thread, NULL);
	assert_int_equal(w[0].result, 0);
	wait_stats(s.p, 0, 0);
	shared_done(&s);
}

/* Starts workers 0..n-1 one by one on a serial puller, so that arrival
 * order is worker order. */
static void start_serial(struct shared *s, struct worker *w, int n)
{
	for (int i = 0; i < n; i++) {
		start(s, &w[i], i);
		wait_stats(s->p, 1, (unsigned)i);
	}
}

/* Lets worker w give up its place and waits until it has returned. */
static void abandon(struct shared *s, struct worker *w)
{
	atomic_store(&w->abandon, true);
	puller_wake(s->p);
	pthread_join(w->thread, NULL);
	w->joined = true;
	assert_int_equal(w->result, -ECANCELED);
}

/* Lets every worker still there go, and checks that they all took their
 * slot, one at a time, in the order want[n_want]. */
static void finish(struct shared *s, struct worker *w, int n, const int *want, unsigned n_want)
{
	struct puller_stats st;

	release(s, n_want);
	for (int i = 0; i < n; i++) {
		if (w[i].joined)
			continue;
		pthread_join(w[i].thread, NULL);
		assert_int_equal(w[i].result, 0);
	}
	assert_int_equal(s->n_order, n_want);
	for (unsigned i = 0; i < n_want; i++)
		assert_int_equal(s->order[i], want[i]);
	assert_int_equal(s->max_inside, 1);
	puller_get_stats(s->p, &st);
	assert_int_equal(st.running, 0);
	assert_int_equal(st.queued, 0);
	assert_int_equal(st.entered, n_want);
}

/* One running, three queued, the queue full.  The middle one leaves: the
 * others keep their order, and its place goes to a newcomer that a full
 * queue would have refused. */
static void test_abandon_middle(void **state)
{
	static const int want[] = { 0, 1, 3, 4 };
	struct shared s;
	struct worker w[5];
	struct puller_stats st;

	shared_init(&s, 1, 3);
	start_serial(&s, w, 4);
	assert_int_equal(puller_enter(s.p, NULL, NULL, NULL), -EAGAIN);

	abandon(&s, &w[2]);
	wait_stats(s.p, 1, 2);
	puller_get_stats(s.p, &st);
	assert_int_equal(st.abandoned, 1);
	assert_int_equal(st.refused, 1);

	start(&s, &w[4], 4);
	wait_stats(s.p, 1, 3);
	assert_int_equal(puller_enter(s.p, NULL, NULL, NULL), -EAGAIN);

	finish(&s, w, 5, want, ARRAY_SIZE(want));
	puller_get_stats(s.p, &st);
	assert_int_equal(st.refused, 2);
	assert_int_equal(st.abandoned, 1);
	shared_done(&s);
}

/* The head of the line leaves: the next one becomes the head and takes
 * the slot when it is freed. */
static void test_abandon_head(void **state)
{
	static const int want[] = { 0, 2 };
	struct shared s;
	struct worker w[3];
	struct puller_stats st;

	shared_init(&s, 1, 0);
	start_serial(&s, w, 3);
	abandon(&s, &w[1]);
	wait_stats(s.p, 1, 1);

	finish(&s, w, 3, want, ARRAY_SIZE(want));
	puller_get_stats(s.p, &st);
	assert_int_equal(st.abandoned, 1);
	shared_done(&s);
}

/* A flag already set: -ECANCELED at once, whether a slot is free, all are
 * taken or the queue is full; nothing is taken and nobody queues. */
static void test_abandon_before(void **state)
{
	static const int want[] = { 0, 1 };
	struct shared s;
	struct worker w[2];
	struct puller_stats st;
	atomic_bool gone = true;

	shared_init(&s, 1, 1);
	assert_int_equal(puller_enter(s.p, NULL, NULL, &gone), -ECANCELED);
	puller_get_stats(s.p, &st);
	assert_int_equal(st.running, 0);
	assert_int_equal(st.entered, 0);

	start(&s, &w[0], 0);
	wait_stats(s.p, 1, 0);
	assert_int_equal(puller_enter(s.p, NULL, NULL, &gone), -ECANCELED);
	start(&s, &w[1], 1);
	wait_stats(s.p, 1, 1);
	assert_int_equal(puller_enter(s.p, NULL, NULL, &gone), -ECANCELED);
	puller_get_stats(s.p, &st);
	assert_int_equal(st.queued, 1);
	assert_int_equal(st.refused, 0);
	assert_int_equal(st.abandoned, 3);

	finish(&s, w, 2, want, ARRAY_SIZE(want));
	shared_done(&s);
}

static _Atomic int64_t test_now;

static int64_t test_clock_now(const struct clock *c)
{
	return atomic_load(&test_now);
}

static void start_keyed(struct shared *s, struct worker *w, int id, const char *key)
{
	*w = (struct worker){ .s = s, .id = id, .result = 1, .key = key };
	atomic_init(&w->abandon, false);
	assert_int_equal(pthread_create(&w->thread, NULL, worker_main, w), 0);
}

/* A slot held past share_after no longer holds back another registry's
 * pull, which takes one more; the same registry's pull waits its turn. */
static void test_share(void **state)
{
	static const struct clock clk = { .now_ns = test_clock_now };
	struct puller_options o = { .max_parallel = 1,
				    .share_after_ns = 10 * CLOCK_NS_PER_SEC,
				    .clock = &clk };
	struct puller_slot slow;
	struct puller_stats st;
	struct worker w[2];
	struct shared s;

	atomic_store(&test_now, 0);
	shared_init(&s, 1, 0);
	puller_free(s.p);
	assert_int_equal(puller_new(&o, &s.p), 0);

	assert_int_equal(puller_enter(s.p, &slow, "slow.test", NULL), 0);
	start_keyed(&s, &w[0], 0, "slow.test");
	wait_stats(s.p, 1, 1);
	start_keyed(&s, &w[1], 1, "other.test");
	wait_stats(s.p, 1, 2);

	/* Held for 9 s: still the only one.  An unnamed caller never shares. */
	atomic_store(&test_now, 9 * CLOCK_NS_PER_SEC);
	puller_wake(s.p);
	puller_get_stats(s.p, &st);
	assert_int_equal(st.running, 1);
	assert_int_equal(st.shared, 0);

	/* Held for 10 s: the other registry's pull goes past the one of the
	 * same registry that waits ahead of it. */
	atomic_store(&test_now, 10 * CLOCK_NS_PER_SEC);
	puller_wake(s.p);
	wait_entered(&s, 1);
	wait_stats(s.p, 2, 1);
	assert_int_equal(s.order[0], 1);

	/* The slow pull ends, then the other one: the same registry's pull
	 * has its turn (the other registry's slot held it back while it
	 * was young). */
	puller_leave(s.p, &slow);
	wait_stats(s.p, 1, 1);
	release(&s, 1);
	wait_entered(&s, 2);
	assert_int_equal(s.order[1], 0);
	release(&s, 2);
	for (int i = 0; i < 2; i++) {
		pthread_join(w[i].thread, NULL);
		assert_int_equal(w[i].result, 0);
	}
	puller_get_stats(s.p, &st);
	assert_int_equal(st.running, 0);
	assert_int_equal(st.shared, 1);
	assert_int_equal(st.entered, 3);
	shared_done(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_serial),	     cmocka_unit_test(test_parallel_3),
		cmocka_unit_test(test_queue_full),   cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_shutdown),     cmocka_unit_test(test_abandon_middle),
		cmocka_unit_test(test_abandon_head), cmocka_unit_test(test_abandon_before),
		cmocka_unit_test(test_share),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

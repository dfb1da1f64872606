/* Unit tests for manager/lazy/lazy-schedule: when a lazy layer's background
 * completion starts and tries again, on a hand-driven clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "lazy-schedule.h"

#define S(x) ((int64_t)(x)*CLOCK_NS_PER_SEC)
#define MS(x) ((int64_t)(x)*1000000)

struct fixture {
	struct clock clock;
	int64_t now;
	struct lazy_schedule s;
};

static int64_t fake_now(const struct clock *c)
{
	return *(const int64_t *)c->userdata;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->clock.now_ns = fake_now;
	f->clock.userdata = &f->now;
	f->now = S(98765); /* far from 0: no test passes by accident of t = 0 */
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	free(*state);
	return 0;
}

static bool due(struct fixture *f, int64_t *wait)
{
	return lazy_schedule_due(&f->s, wait);
}

/* No window: the completion starts at once. */
static void test_no_window(void **state)
{
	struct fixture *f = *state;

	lazy_schedule_init(&f->s, &f->clock, 0, 7);
	assert_true(due(f, NULL));
}

/* The window holds the start back its whole length, and no longer. */
static void test_window(void **state)
{
	struct fixture *f = *state;
	int64_t wait;

	lazy_schedule_init(&f->s, &f->clock, S(2), 0);
	assert_false(due(f, &wait));
	assert_int_equal(wait, S(2));
	f->now += S(2) - 1;
	assert_false(due(f, &wait));
	assert_int_equal(wait, 1);
	f->now += 1;
	assert_true(due(f, NULL));
}

/* The link is fast when the rest arrives within the window at the rate
 * measured; unmeasured, or without a window, never. */
static void test_link_fast(void **state)
{
	struct fixture *f = *state;
	const uint64_t mb = 1000000;

	lazy_schedule_init(&f->s, &f->clock, S(2), 0);
	assert_false(lazy_schedule_link_fast(&f->s, 0, 1));
	/* 800 MB at 500 MB/s: 1.6 s; at 25 MB/s (200 Mbit/s): 32 s */
	assert_true(lazy_schedule_link_fast(&f->s, 500 * mb, 800 * mb));
	assert_false(lazy_schedule_link_fast(&f->s, 25 * mb, 800 * mb));
	/* exactly the window, and a byte more */
	assert_true(lazy_schedule_link_fast(&f->s, 100 * mb, 200 * mb));
	assert_false(lazy_schedule_link_fast(&f->s, 100 * mb, 200 * mb + 1));
	/* a rest too large for nanoseconds in 64 bits saturates: not fast */
	assert_false(lazy_schedule_link_fast(&f->s, 1000 * mb, UINT64_MAX / 2));
	lazy_schedule_init(&f->s, &f->clock, 0, 0);
	assert_false(lazy_schedule_link_fast(&f->s, 500 * mb, 1));
}

/* Readers' fetches push the start back to a quiet spell after the last
 * one; a sample with no new fetch does not. */
static void test_readers_push_back(void **state)
{
	struct fixture *f = *state;
	int64_t wait;

	lazy_schedule_init(&f->s, &f->clock, S(4), 10);
	f->now += S(3) + MS(900);
	lazy_schedule_readers(&f->s, 11, false);
	assert_false(due(f, &wait));
	assert_int_equal(wait, S(1)); /* 4 s / LAZY_WINDOW_QUIET_DIV after it */
	f->now += MS(500);
	lazy_schedule_readers(&f->s, 11, false); /* nothing new */
	assert_false(due(f, &wait));
	assert_int_equal(wait, MS(500));
	f->now += MS(500);
	assert_true(due(f, NULL));
}

/* Readers that fetched early and went quiet end the window before its
 * end (their start is over), but not before half of it; a fetch under way
 * counts as a fetch. */
static void test_readers_quiet(void **state)
{
	struct fixture *f = *state;
	int64_t wait;

	lazy_schedule_init(&f->s, &f->clock, S(2), 0);
	f->now += MS(100);
	lazy_schedule_readers(&f->s, 3, false);
	assert_false(due(f, &wait));
	assert_int_equal(wait, MS(900)); /* half the window, not 2 s */
	f->now += MS(600);
	lazy_schedule_readers(&f->s, 3, true); /* a fetch under way at 0.7 s */
	assert_false(due(f, &wait));
	assert_int_equal(wait, MS(500)); /* a quarter of the window after it */
	f->now += MS(500);
	lazy_schedule_readers(&f->s, 3, false);
	assert_true(due(f, NULL));
	/* no reader at all: the whole window */
	lazy_schedule_init(&f->s, &f->clock, S(2), 3);
	f->now += S(1);
	lazy_schedule_readers(&f->s, 3, false);
	assert_false(due(f, &wait));
	assert_int_equal(wait, S(1));
}

/* Readers that never stop cannot hold the completion back beyond the cap. */
static void test_busy_image_cap(void **state)
{
	struct fixture *f = *state;
	uint64_t count = 0;

	lazy_schedule_init(&f->s, &f->clock, S(2), count);
	for (int i = 0; i < 1000; i++) {
		lazy_schedule_readers(&f->s, ++count, false);
		if (due(f, NULL))
			break;
		f->now += MS(100);
	}
	assert_true(due(f, NULL));
	assert_int_equal(f->now - f->s.usable_ns, LAZY_WINDOW_CAP * S(2));
}

/* A lookup does not end the window (it is likely the readers' own); someone
 * who waits for the whole image does. */
static void test_wake_window(void **state)
{
	struct fixture *f = *state;

	lazy_schedule_init(&f->s, &f->clock, S(3600), 0);
	lazy_schedule_wake(&f->s, false);
	assert_false(due(f, NULL));
	lazy_schedule_wake(&f->s, true);
	assert_true(due(f, NULL));
	lazy_schedule_running(&f->s);
	assert_int_equal(f->s.phase, LAZY_PHASE_RUNNING);
	assert_true(due(f, NULL));
}

/* The back-off doubles from LAZY_RETRY_FIRST_S to LAZY_RETRY_MAX_S and
 * the tries never stop, however many failed. */
static void test_retry_forever(void **state)
{
	struct fixture *f = *state;
	unsigned expect = LAZY_RETRY_FIRST_S;
	int64_t wait;

	lazy_schedule_init(&f->s, &f->clock, 0, 0);
	for (unsigned n = 1; n <= 20; n++) {
		assert_true(due(f, NULL));
		lazy_schedule_running(&f->s);
		assert_int_equal(lazy_schedule_failed(&f->s), expect);
		assert_int_equal(f->s.failures, n);
		assert_int_equal(f->s.phase, LAZY_PHASE_RETRYING);
		assert_false(due(f, &wait));
		assert_int_equal(wait, S(expect));
		f->now += S(expect) - 1;
		assert_false(due(f, NULL));
		f->now += 1;
		expect = expect * 2 > LAZY_RETRY_MAX_S ? LAZY_RETRY_MAX_S : expect * 2;
	}
	assert_int_equal(lazy_schedule_retry_s(5), 160);
	assert_int_equal(lazy_schedule_retry_s(6), LAZY_RETRY_MAX_S);
}

/* After a failure, a reader's fetch that got through, or a new lookup,
 * makes the next try come at once; once. */
static void test_retry_woken(void **state)
{
	struct fixture *f = *state;

	lazy_schedule_init(&f->s, &f->clock, 0, 5);
	for (int i = 0; i < 8; i++) {
		lazy_schedule_running(&f->s);
		lazy_schedule_failed(&f->s);
	}
	assert_false(due(f, NULL));
	lazy_schedule_readers(&f->s, 5, false); /* no new fetch */
	assert_false(due(f, NULL));
	lazy_schedule_readers(&f->s, 6, false);
	assert_true(due(f, NULL));
	lazy_schedule_running(&f->s);
	lazy_schedule_failed(&f->s);
	assert_false(due(f, NULL));
	f->now += S(1);
	lazy_schedule_wake(&f->s, false);
	assert_true(due(f, NULL));
	/* a wake while it runs means nothing for its next failure */
	lazy_schedule_running(&f->s);
	lazy_schedule_wake(&f->s, true);
	lazy_schedule_failed(&f->s);
	assert_false(due(f, NULL));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_no_window, setup, teardown),
		cmocka_unit_test_setup_teardown(test_window, setup, teardown),
		cmocka_unit_test_setup_teardown(test_link_fast, setup, teardown),
		cmocka_unit_test_setup_teardown(test_readers_push_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_readers_quiet, setup, teardown),
		cmocka_unit_test_setup_teardown(test_busy_image_cap, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wake_window, setup, teardown),
		cmocka_unit_test_setup_teardown(test_retry_forever, setup, teardown),
		cmocka_unit_test_setup_teardown(test_retry_woken, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for the limits of the events users cause: the bucket of one
 * uid and reason to the nanosecond, independence of users and reasons,
 * the counts of dropped events handed over when a limit lifts, and the
 * bounded table, on a hand-driven clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "evlimit.h"

#define S(x) ((int64_t)(x)*CLOCK_NS_PER_SEC)

struct fixture {
	struct clock clock;
	int64_t now;
	struct evlimit *l;
	/* what evlimit_lifted() handed over */
	uid_t uid[8];
	char reason[8][32];
	uint64_t n[8];
	size_t calls;
};

static int64_t fake_now(const struct clock *c)
{
	return *(const int64_t *)c->userdata;
}

/* 3 at once, then one a second */
static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->clock.now_ns = fake_now;
	f->clock.userdata = &f->now;
	f->now = S(98765);
	f->l = evlimit_new(3, 60, &f->clock);
	assert_non_null(f->l);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	evlimit_free(f->l);
	free(f);
	return 0;
}

static void collect(void *userdata, uid_t uid, const char *reason, uint64_t n)
{
	struct fixture *f = userdata;

	if (f->calls < 8) {
		f->uid[f->calls] = uid;
		snprintf(f->reason[f->calls], sizeof(f->reason[0]), "%s", reason ? reason : "-");
		f->n[f->calls] = n;
	}
	f->calls++;
}

static bool admit(struct fixture *f, uid_t uid, const char *reason, uint64_t *suppressed)
{
	uint64_t dummy;

	return evlimit_admit(f->l, uid, reason, suppressed ? suppressed : &dummy);
}

static void test_burst_then_rate(void **state)
{
	struct fixture *f = *state;
	uint64_t s;

	for (int i = 0; i < 3; i++) {
		assert_true(admit(f, 1000, "InspectFailed", &s));
		assert_int_equal(s, 0);
	}
	for (int i = 0; i < 500; i++)
		assert_false(admit(f, 1000, "InspectFailed", NULL));
	/* one token a second: not a nanosecond before */
	f->now += S(1) - 1;
	assert_false(admit(f, 1000, "InspectFailed", NULL));
	f->now += 1;
	assert_true(admit(f, 1000, "InspectFailed", &s));
	assert_int_equal(s, 501); /* said with the event written */
	assert_false(admit(f, 1000, "InspectFailed", &s));
	/* a long pause refills the burst, no more */
	f->now += S(3600);
	for (int i = 0; i < 3; i++) {
		assert_true(admit(f, 1000, "InspectFailed", &s));
		assert_int_equal(s, i == 0 ? 1 : 0);
	}
	assert_false(admit(f, 1000, "InspectFailed", NULL));
}

static void test_users_and_reasons_apart(void **state)
{
	struct fixture *f = *state;

	for (int i = 0; i < 100; i++)
		admit(f, 65534, "InspectFailed", NULL);
	assert_false(admit(f, 65534, "InspectFailed", NULL));
	/* another reason of the same user, the same reason of another */
	assert_true(admit(f, 65534, "Pulled", NULL));
	for (int i = 0; i < 3; i++)
		assert_true(admit(f, 1000, "InspectFailed", NULL));
}

static void test_lifted(void **state)
{
	struct fixture *f = *state;
	uint64_t s;

	evlimit_lifted(f->l, collect, f);
	assert_int_equal(f->calls, 0);
	for (int i = 0; i < 10; i++)
		admit(f, 65534, "InspectFailed", NULL);
	for (int i = 0; i < 4; i++)
		admit(f, 65534, "Failed", NULL);
	/* still limited: nothing yet */
	evlimit_lifted(f->l, collect, f);
	assert_int_equal(f->calls, 0);
	f->now += S(1);
	evlimit_lifted(f->l, collect, f);
	assert_int_equal(f->calls, 2);
	assert_int_equal(f->uid[0], 65534);
	assert_string_equal(f->reason[0], "InspectFailed");
	assert_int_equal(f->n[0], 7);
	assert_string_equal(f->reason[1], "Failed");
	assert_int_equal(f->n[1], 1);
	/* handed over once: the next event carries nothing */
	evlimit_lifted(f->l, collect, f);
	assert_int_equal(f->calls, 2);
	assert_true(admit(f, 65534, "InspectFailed", &s));
	assert_int_equal(s, 0);
}

static void test_drain(void **state)
{
	struct fixture *f = *state;

	for (int i = 0; i < 5; i++)
		admit(f, 7, "Failed", NULL);
	evlimit_drain(f->l, collect, f);
	assert_int_equal(f->calls, 1);
	assert_int_equal(f->n[0], 2);
}

static void test_table_bounded(void **state)
{
	struct fixture *f = *state;
	uint64_t s;

	/* every bucket holds a count: no room for another */
	for (uid_t u = 1; u <= EVLIMIT_MAX_BUCKETS; u++)
		for (int i = 0; i < 4; i++)
			admit(f, u, "Failed", NULL);
	assert_false(admit(f, 999999, "Failed", NULL));
	/* refilling, still counting: not idle */
	f->now += S(1);
	assert_false(admit(f, 888888, "Failed", NULL));
	evlimit_lifted(f->l, collect, f);
	assert_int_equal(f->calls, EVLIMIT_MAX_BUCKETS + 1);
	/* idle buckets make room */
	f->now += S(10);
	assert_true(admit(f, 777777, "Failed", &s));
	assert_int_equal(s, 0);
}

static void test_untracked_reported(void **state)
{
	struct fixture *f = *state;

	for (uid_t u = 1; u <= EVLIMIT_MAX_BUCKETS; u++)
		for (int i = 0; i < 4; i++)
			admit(f, u, "Failed", NULL);
	assert_false(admit(f, 999999, "Failed", NULL));
	assert_false(admit(f, 999998, "Pulled", NULL));
	/* no bucket lifted yet; the untracked ones come as one (uid -1) */
	evlimit_lifted(f->l, collect, f);
	assert_int_equal(f->calls, 1);
	assert_int_equal(f->uid[0], (uid_t)-1);
	assert_string_equal(f->reason[0], "-");
	assert_int_equal(f->n[0], 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_burst_then_rate, setup, teardown),
		cmocka_unit_test_setup_teardown(test_users_and_reasons_apart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lifted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_drain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_table_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_untracked_reported, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for the retry schedule and Retry-After parsing. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "retry.h"

static void test_schedule(void **state)
{
	struct retry_policy p = RETRY_POLICY_DEFAULT;

	assert_int_equal(retry_delay_ms(&p, 0, 0, -1), 500);
	assert_int_equal(retry_delay_ms(&p, 1, 500, -1), 1000);
	assert_int_equal(retry_delay_ms(&p, 2, 1500, -1), 2000);
	assert_int_equal(retry_delay_ms(&p, 3, 3500, -1), -1); /* 3 retries */

	p.max_retries = 10;
	assert_int_equal(retry_delay_ms(&p, 5, 0, -1), 8000); /* capped */
	assert_int_equal(retry_delay_ms(&p, 9, 0, -1), 8000);
	assert_int_equal(retry_delay_ms(&p, 6, 25000, -1), -1); /* total budget */

	/* Retry-After wins, within the budget, even above the per-delay cap. */
	assert_int_equal(retry_delay_ms(&p, 0, 0, 2000), 2000);
	assert_int_equal(retry_delay_ms(&p, 0, 0, 0), 0);
	assert_int_equal(retry_delay_ms(&p, 0, 0, 20000), 20000);
	assert_int_equal(retry_delay_ms(&p, 0, 0, 31000), -1);
	assert_int_equal(retry_delay_ms(&p, 1, 15000, 20000), -1);

	p.max_retries = 0;
	assert_int_equal(retry_delay_ms(&p, 0, 0, -1), -1);
}

static void test_retry_after(void **state)
{
	time_t now = 784111777; /* Sun, 06 Nov 1994 08:49:37 GMT */

	assert_int_equal(retry_after_parse("0", now), 0);
	assert_int_equal(retry_after_parse("3", now), 3000);
	assert_int_equal(retry_after_parse(" 120 ", now), 120000);
	assert_int_equal(retry_after_parse("Sun, 06 Nov 1994 08:49:47 GMT", now), 10000);
	assert_int_equal(retry_after_parse("Sun, 06 Nov 1994 08:49:00 GMT", now), 0);
	assert_int_equal(retry_after_parse("-1", now), -1);
	assert_int_equal(retry_after_parse("1.5", now), -1);
	assert_int_equal(retry_after_parse("soon", now), -1);
	assert_int_equal(retry_after_parse("", now), -1);
	assert_int_equal(retry_after_parse(NULL, now), -1);
	assert_int_equal(retry_after_parse("99999999999999999999", now), -1);
}

static void test_transient(void **state)
{
	assert_true(retry_status_is_transient(429));
	assert_true(retry_status_is_transient(503));
	assert_true(retry_status_is_transient(502));
	assert_false(retry_status_is_transient(404));
	assert_false(retry_status_is_transient(401));
	assert_false(retry_status_is_transient(501));
	assert_false(retry_status_is_transient(200));
}

static void test_rate_floor(void **state)
{
	struct rate_floor f = { .min_bytes_per_s = 1000, .window_ms = 10000 };
	uint64_t brought = 0;

	rate_floor_start(&f, 0, 0);
	assert_int_equal(rate_floor_check(&f, 5000, 100, 1000000, &brought), 0);
	/* exactly the floor: the next window begins */
	assert_int_equal(rate_floor_check(&f, 10000, 10000, 1000000, &brought), 0);
	assert_int_equal(rate_floor_check(&f, 19999, 10000, 1000000, &brought), 0);
	assert_int_equal(rate_floor_check(&f, 20000, 19999, 1000000, &brought), -ETIMEDOUT);
	assert_int_equal(brought, 9999);

	/* A resume does not start the window again: bytes count from its
	 * start, whatever happened between. */
	rate_floor_start(&f, 0, 4000);
	assert_int_equal(rate_floor_check(&f, 30000, 4030, 1000000, &brought), -ETIMEDOUT);
	assert_int_equal(brought, 30);

	/* The end of a blob need not fill the window; it must come in it. */
	rate_floor_start(&f, 0, 0);
	assert_int_equal(rate_floor_check(&f, 10000, 500, 500, NULL), 0);
	rate_floor_start(&f, 0, 0);
	assert_int_equal(rate_floor_check(&f, 10000, 499, 500, NULL), -ETIMEDOUT);

	/* No floor. */
	f.min_bytes_per_s = 0;
	rate_floor_start(&f, 0, 0);
	assert_int_equal(rate_floor_check(&f, INT64_C(1) << 40, 0, 1000000, NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_schedule),
		cmocka_unit_test(test_retry_after),
		cmocka_unit_test(test_transient),
		cmocka_unit_test(test_rate_floor),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for the retry schedule and Retry-After parsing. */
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_schedule),
		cmocka_unit_test(test_retry_after),
		cmocka_unit_test(test_transient),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

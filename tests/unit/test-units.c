/* units: the number, size and duration grammars (what they take and what
 * they refuse, as tables) and the human-readable forms of sizes and
 * durations. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "macro.h"
#include "units.h"

static void test_decimal_len(void **state)
{
	static const struct {
		const char *s;
		size_t len;
	} cases[] = {
		{ "", 0 },    { "x", 0 },  { "12", 2 },	      { "12abc", 2 },
		{ "1.5", 3 }, { "1.", 1 }, { ".5", 0 },	      { "1.5.2", 3 },
		{ "-1", 0 },  { " 1", 0 }, { "007.250s", 7 },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		assert_int_equal(decimal_len(cases[i].s), cases[i].len);
}

struct u64_case {
	const char *s;
	int r;
	uint64_t v;
};

/* Each case parses to its value, or fails leaving the output alone. */
static void check_u64(int (*parse)(const char *, uint64_t *), const struct u64_case *cases,
		      size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t v = 12345;

		assert_int_equal(parse(cases[i].s, &v), cases[i].r);
		assert_int_equal(v, cases[i].r == 0 ? cases[i].v : 12345);
	}
}

static void test_parse_uint64(void **state)
{
	static const struct u64_case cases[] = {
		{ "0", 0, 0 },
		{ "42", 0, 42 },
		{ "18446744073709551615", 0, UINT64_MAX },
		{ "18446744073709551616", -ERANGE, 0 },
		{ "99999999999999999999999", -ERANGE, 0 },
		{ "", -EINVAL, 0 },
		{ "-1", -EINVAL, 0 },
		{ "+5", -EINVAL, 0 },
		{ " 5", -EINVAL, 0 },
		{ "5 ", -EINVAL, 0 },
		{ "0x10", -EINVAL, 0 },
		{ "1e3", -EINVAL, 0 },
		{ "1.0", -EINVAL, 0 },
		{ "nan", -EINVAL, 0 },
	};

	check_u64(parse_uint64, cases, ARRAY_SIZE(cases));
}

static void test_parse_size(void **state)
{
	static const struct u64_case cases[] = {
		{ "0", 0, 0 },
		{ "1", 0, 1 },
		{ "1073741824", 0, 1073741824 },
		{ "100B", 0, 100 },
		{ "100b", 0, 100 },
		{ "512K", 0, 512 << 10 },
		{ "512k", 0, 512 << 10 },
		{ "500M", 0, 500ull << 20 },
		{ "2GiB", 0, 2ull << 30 },
		{ "2gib", 0, 2ull << 30 },
		{ "2Gi", 0, 2ull << 30 },
		{ "20G", 0, 20ull << 30 },
		{ "1T", 0, 1ull << 40 },
		{ "1.5TiB", 0, 3ull << 39 },
		{ "0.5K", 0, 512 },
		{ "15T", 0, 15ull << 40 },
		{ "16777215T", 0, 16777215ull << 40 },
		{ "16777216T", -ERANGE, 0 },
		{ "18446744073709551616", -ERANGE, 0 },
		{ "99999999999999999999999", -ERANGE, 0 },
		{ "", -EINVAL, 0 },
		{ "1.5", -EINVAL, 0 },
		{ "1.5B", -EINVAL, 0 },
		{ "16E", -EINVAL, 0 },
		{ "1P", -EINVAL, 0 },
		{ "1iB", -EINVAL, 0 },
		{ "1KBB", -EINVAL, 0 },
		{ "1 K", -EINVAL, 0 },
		{ " 5", -EINVAL, 0 },
		{ "5 ", -EINVAL, 0 },
		{ "+5", -EINVAL, 0 },
		{ "-1", -EINVAL, 0 },
		{ "-0", -EINVAL, 0 },
		{ "0x10", -EINVAL, 0 },
		{ "1e3", -EINVAL, 0 },
		{ "nan", -EINVAL, 0 },
		{ "inf", -EINVAL, 0 },
		{ "12abc", -EINVAL, 0 },
		{ "lots", -EINVAL, 0 },
	};

	check_u64(parse_size, cases, ARRAY_SIZE(cases));
}

static void test_parse_duration(void **state)
{
	static const struct {
		const char *s;
		int r;
		double v;
	} cases[] = {
		{ "0", 0, 0 },
		{ "90", 0, 90 },
		{ "90s", 0, 90 },
		{ "5m", 0, 300 },
		{ "1.5m", 0, 90 },
		{ "1h30m", 0, 5400 },
		{ "1h30", 0, 3630 },
		{ "2d", 0, 172800 },
		{ "1d1h1m1s", 0, 90061 },
		{ "0.25s", 0, 0.25 },
		{ "", -EINVAL, 0 },
		{ "s", -EINVAL, 0 },
		{ "5x", -EINVAL, 0 },
		{ "5 m", -EINVAL, 0 },
		{ " 5", -EINVAL, 0 },
		{ "-5s", -EINVAL, 0 },
		{ "+5s", -EINVAL, 0 },
		{ "1e3", -EINVAL, 0 },
		{ "nan", -EINVAL, 0 },
		{ "yesterday", -EINVAL, 0 },
		{ "2026-11-22", -EINVAL, 0 },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		double v = -1;

		assert_int_equal(parse_duration(cases[i].s, &v), cases[i].r);
		if (cases[i].r == 0)
			assert_true(v == cases[i].v);
		else
			assert_true(v == -1);
	}
}

static void test_format_size(void **state)
{
	static const struct {
		double bytes;
		const char *text;
	} cases[] = {
		{ -5, "0 B" },
		{ 0, "0 B" },
		{ 1023, "1023 B" },
		{ 1024, "1.0 KiB" },
		{ 1536, "1.5 KiB" },
		{ 10 * 1024, "10 KiB" },
		{ 1048575, "1024 KiB" },
		{ 3.2 * 1048576, "3.2 MiB" },
		{ 20.0 * 1073741824, "20 GiB" },
		{ 1099511627776.0, "1.0 TiB" },
		{ 1125899906842624.0, "1.0 PiB" },
		{ 1152921504606846976.0, "1024 PiB" },
	};
	char buf[32];

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		format_size(cases[i].bytes, buf, sizeof(buf));
		assert_string_equal(buf, cases[i].text);
	}
	format_size(1536, buf, 4);
	assert_string_equal(buf, "1.5");
}

static void test_format_duration(void **state)
{
	static const struct {
		double seconds;
		const char *text;
	} cases[] = {
		{ -3, "0s" },
		{ 0, "0s" },
		{ 45.9, "45s" },
		{ 119, "119s" },
		{ 120, "2m" },
		{ 192, "3m12s" },
		{ 599, "9m59s" },
		{ 600, "10m" },
		{ 47 * 60 + 30, "47m" },
		{ 3 * 3600, "3h" },
		{ 5 * 3600 + 3 * 60, "5h3m" },
		{ 8 * 3600 + 59 * 60, "8h" },
		{ 47 * 3600, "47h" },
		{ 52 * 3600, "2d4h" },
		{ 72 * 3600, "3d" },
		{ 400 * 86400.0, "400d" },
		{ 3 * 365 * 86400.0, "3y" },
	};
	char buf[32];

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		format_duration(cases[i].seconds, buf, sizeof(buf));
		assert_string_equal(buf, cases[i].text);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decimal_len), cmocka_unit_test(test_parse_uint64),
		cmocka_unit_test(test_parse_size),  cmocka_unit_test(test_parse_duration),
		cmocka_unit_test(test_format_size), cmocka_unit_test(test_format_duration),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

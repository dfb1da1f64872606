/* base64: strict (Go's encoding/json) and lenient (docker's "auth")
 * decoding, table-driven. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base64.h"
#include "macro.h"

struct row {
	const char *in;
	bool strict;
	const char *out; /* NULL: refused */
	size_t len;
};

static const struct row rows[] = {
	{ "", true, "", 0 },
	{ "YQ==", true, "a", 1 },
	{ "YWI=", true, "ab", 2 },
	{ "YWJj", true, "abc", 3 },
	{ "AP8Q", true, "\x00\xff\x10", 3 },
	{ "dXNlcjpwYXNz", true, "user:pass", 9 },
	{ "YQ", true, NULL, 0 },     /* not a multiple of four */
	{ "Y===", true, NULL, 0 },   /* one character is no byte */
	{ "Y=Q=", true, NULL, 0 },   /* padding inside */
	{ "YW*j", true, NULL, 0 },   /* not the alphabet */
	{ "YWJj\n", true, NULL, 0 }, /* no whitespace */
	{ "YQ", false, "a", 1 },     /* lenient: padding optional */
	{ "YQ==", false, "a", 1 },
	{ "dXNlcjpwYXNz", false, "user:pass", 9 },
	{ "YW-j", false, NULL, 0 }, /* URL alphabet: not this one */
};

static void test_rows(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
		unsigned char out[64];
		ssize_t n = base64_decode(rows[i].in, strlen(rows[i].in), rows[i].strict, out);

		if (!rows[i].out) {
			if (n != -1)
				fail_msg("row %zu (\"%s\"): decoded, should be refused", i,
					 rows[i].in);
			continue;
		}
		if (n != (ssize_t)rows[i].len)
			fail_msg("row %zu (\"%s\"): %zd bytes, not %zu", i, rows[i].in, n,
				 rows[i].len);
		assert_memory_equal(out, rows[i].out, rows[i].len);
	}
}

/* Encoding: each length modulo 3, bytes over 0x7f, and back. */
static void test_encode(void **state)
{
	static const struct {
		const char *in, *out;
	} enc[] = {
		{ "", "" },
		{ "a", "YQ==" },
		{ "ab", "YWI=" },
		{ "abc", "YWJj" },
		{ "127.0.0.1:5000/test/app:1", "MTI3LjAuMC4xOjUwMDAvdGVzdC9hcHA6MQ==" },
		{ "\xff\xfe\xfd", "//79" },
		{ "\xfb\xff", "+/8=" },
	};
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(enc); i++) {
		char out[64];
		unsigned char back[64];
		size_t len = strlen(enc[i].in);

		assert_int_equal(base64_encode((const unsigned char *)enc[i].in, len, out),
				 BASE64_ENCODED_LEN(len));
		assert_string_equal(out, enc[i].out);
		assert_int_equal(base64_decode(out, strlen(out), true, back), len);
		assert_memory_equal(back, enc[i].in, len);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows),
		cmocka_unit_test(test_encode),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

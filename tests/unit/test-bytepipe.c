/* bytepipe: the worker sees the stream exactly as put, in order, across
 * the ring's wrap and puts larger than the ring; settle means consumed. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bytepipe.h"
#include "digest.h"
#include "macro.h"

struct sink {
	unsigned char *got;
	size_t len, cap, calls, largest;
};

static void collect(void *userdata, const void *buf, size_t len)
{
	struct sink *s = userdata;

	assert_true(len > 0);
	assert_true(s->len + len <= s->cap);
	memcpy(s->got + s->len, buf, len);
	s->len += len;
	s->calls++;
	s->largest = MAX(s->largest, len);
}

/* A stream that does not repeat with the ring's period. */
static void fill(unsigned char *d, size_t n)
{
	uint32_t x = 2463534242u;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		d[i] = (unsigned char)x;
	}
}

static void test_order_and_wrap(void **state)
{
	enum { total = 300000, cap = 4093 };
	static const size_t steps[] = { 1, 7, 4093, 10000, 3, 4092, 4094, 65536, 2 };
	unsigned char *in = malloc(total);
	struct sink s = { .got = malloc(total), .cap = total };
	struct bytepipe *p = NULL;
	size_t at = 0;

	(void)state;
	assert_non_null(in);
	assert_non_null(s.got);
	fill(in, total);
	assert_int_equal(bytepipe_new(cap, collect, &s, &p), 0);
	for (size_t i = 0; at < total; i++) {
		size_t n = MIN(steps[i % ARRAY_SIZE(steps)], (size_t)total - at);

		bytepipe_put(p, in + at, n);
		at += n;
		if (i % 5 == 4) {
			bytepipe_settle(p);
			assert_int_equal(s.len, at);
		}
	}
	bytepipe_settle(p);
	assert_int_equal(s.len, total);
	assert_memory_equal(s.got, in, total);
	assert_true(s.largest <= cap);
	bytepipe_free(p);
	free(s.got);
	free(in);
}

static void digest_sink(void *userdata, const void *buf, size_t len)
{
	hasher_update(userdata, buf, len);
}

/* What the pipe is for: a digest taken on the worker equals the one taken
 * in place. */
static void test_digest_on_worker(void **state)
{
	enum { total = 5 << 20 };
	unsigned char *in = malloc(total);
	struct hasher *h = hasher_new();
	struct bytepipe *p = NULL;
	char want[DIGEST_STRING_MAX], got[DIGEST_STRING_MAX];

	(void)state;
	assert_non_null(in);
	assert_non_null(h);
	fill(in, total);
	assert_int_equal(digest_buffer(in, total, want), 0);
	assert_int_equal(bytepipe_new(1 << 20, digest_sink, h, &p), 0);
	for (size_t at = 0; at < total; at += 16384)
		bytepipe_put(p, in + at, MIN((size_t)16384, (size_t)total - at));
	bytepipe_settle(p);
	hasher_final(h, got);
	assert_string_equal(got, want);
	bytepipe_free(p);
	hasher_free(h);
	free(in);
}

static void nothing(void *userdata, const void *buf, size_t len)
{
	(void)userdata;
	(void)buf;
	(void)len;
}

/* Freed with bytes not yet consumed, or never used: no wait, no leak. */
static void test_free_pending(void **state)
{
	unsigned char buf[1000] = { 0 };
	struct bytepipe *p = NULL;

	(void)state;
	assert_int_equal(bytepipe_new(sizeof(buf), nothing, NULL, &p), 0);
	bytepipe_put(p, buf, sizeof(buf));
	bytepipe_free(p);
	assert_int_equal(bytepipe_new(64, nothing, NULL, &p), 0);
	bytepipe_free(p);
	bytepipe_free(NULL);
	assert_int_equal(bytepipe_new(0, nothing, NULL, &p), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_and_wrap),
		cmocka_unit_test(test_digest_on_worker),
		cmocka_unit_test(test_free_pending),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

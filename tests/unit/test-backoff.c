/* Unit tests for the per-reference back-off: the kubelet timeline to the
 * second (and to the nanosecond at the edges), on a hand-driven clock. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backoff.h"

#define S(x) ((int64_t)(x)*CLOCK_NS_PER_SEC)

struct fixture {
	struct clock clock;
	int64_t now;
	struct backoff *b;
};

static int64_t fake_now(const struct clock *c)
{
	return *(const int64_t *)c->userdata;
}

/* A failure with errno err (negative) and message msg (NULL: none). */
static int fail_with(struct backoff *b, const char *key, int err, const char *msg)
{
	struct error_detail why = { .err = err };

	if (msg)
		error_detail_set(&why, err, "%s", msg);
	return backoff_failure(b, key, &why);
}

static int setup_with(void **state, int64_t initial, int64_t max)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct backoff_options o = { .initial_ns = initial, .max_ns = max, .clock = &f->clock };

	assert_non_null(f);
	f->clock.now_ns = fake_now;
	f->clock.userdata = &f->now;
	/* An origin far from zero, so no test passes by accident of t = 0. */
	f->now = S(123456);
	assert_int_equal(backoff_new(&o, &f->b), 0);
	*state = f;
	return 0;
}

static int setup(void **state)
{
	return setup_with(state, 0, 0);
}

static int setup_small(void **state)
{
	return setup_with(state, S(1), S(4));
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	backoff_free(f->b);
	free(f);
	return 0;
}

static const char *const key = "127.0.0.1:5000/test/app:1";

/* Asserts the key is refused from now for exactly d: at every whole
 * second of [now, now+d) and 1 ns before the end, allowed at now+d.
 * Leaves the clock at now+d. */
static void assert_window(struct fixture *f, int64_t d)
{
	int64_t start = f->now;
	struct backoff_state st;

	for (int64_t t = 0; t < d; t += S(1)) {
		f->now = start + t;
		memset(&st, 0, sizeof(st));
		assert_int_equal(backoff_check(f->b, key, &st), -EAGAIN);
		assert_int_equal(st.remaining_ns, d - t);
		assert_int_equal(st.delay_ns, d);
		assert_int_equal(st.idle_ns, t);
	}
	f->now = start + d - 1;
	assert_int_equal(backoff_check(f->b, key, &st), -EAGAIN);
	assert_int_equal(st.remaining_ns, 1);
	f->now = start + d;
	st.remaining_ns = -42;
	assert_int_equal(backoff_check(f->b, key, &st), 0);
	assert_int_equal(st.remaining_ns, -42); /* untouched when allowed */
}

static void test_unknown_key_allowed(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(backoff_check(f->b, key, NULL), 0);
	backoff_success(f->b, key); /* no entry: nothing happens */
	assert_int_equal(backoff_check(f->b, key, NULL), 0);
}

static void test_timeline(void **state)
{
	struct fixture *f = *state;
	static const int delays[] = { 10, 20, 40, 80, 160, 300, 300, 300 };
	struct backoff_state st;

	for (size_t i = 0; i < sizeof(delays) / sizeof(delays[0]); i++) {
		char msg[64];

		snprintf(msg, sizeof(msg), "failure %zu", i + 1);
		assert_int_equal(fail_with(f->b, key, -EHOSTUNREACH, msg), 0);
		assert_int_equal(backoff_check(f->b, key, &st), -EAGAIN);
		assert_int_equal(st.failures, i + 1);
		assert_int_equal(st.last.err, -EHOSTUNREACH);
		assert_string_equal(st.last.message, msg);
		assert_window(f, S(delays[i]));
	}
}

static void test_window_without_check(void **state)
{
	struct fixture *f = *state;

	/* Nobody asks during the window; the next failure still doubles. */
	assert_int_equal(fail_with(f->b, key, -EIO, NULL), 0);
	f->now += S(55);
	assert_int_equal(fail_with(f->b, key, -EIO, NULL), 0);
	assert_window(f, S(20));
}

static void test_failure_inside_window_doubles(void **state)
{
	struct fixture *f = *state;
	struct backoff_state st;

	/* A pull that started before the first failure was recorded fails
	 * too: the kubelet's Next() doubles regardless, and restarts the
	 * window from the later failure. */
	assert_int_equal(fail_with(f->b, key, -EIO, "a"), 0);
	f->now += S(3);
	assert_int_equal(fail_with(f->b, key, -ETIMEDOUT, "b"), 0);
	assert_int_equal(backoff_check(f->b, key, &st), -EAGAIN);
	assert_int_equal(st.delay_ns, S(20));
	assert_int_equal(st.last.err, -ETIMEDOUT);
	assert_string_equal(st.last.message, "b");
	assert_window(f, S(20));
}

static void test_forgotten_after_twice_max(void **state)
{
	struct fixture *f = *state;
	struct backoff_state st;

	for (int i = 0; i < 3; i++)
		assert_int_equal(fail_with(f->b, key, -EIO, NULL), 0); /* 10, 20, 40 */

	/* Untouched for exactly 600 s: still remembered, so it doubles. */
	f->now += S(600);
	assert_int_equal(backoff_check(f->b, key, NULL), 0);
	assert_int_equal(fail_with(f->b, key, -EIO, NULL), 0);
	assert_int_equal(backoff_check(f->b, key, &st), -EAGAIN);
	assert_int_equal(st.delay_ns, S(80));
	assert_int_equal(st.failures, 4);

	/* Untouched for 600 s and 1 ns: forgotten, back to 10 s. */
	f->now += S(600) + 1;
	assert_int_equal(backoff_check(f->b, key, NULL), 0);
	assert_int_equal(fail_with(f->b, key, -EIO, NULL), 0);
	assert_int_equal(backoff_check(f->b, key, &st), -EAGAIN);
	assert_int_equal(st.delay_ns, S(10));
	assert_int_equal(st.failures, 1);
	assert_window(f, S(10));
}

static void test_forgotten_without_check(void **state)
{
	struct fixture *f = *state;
	struct backoff_state st;

	/* The expiry also applies when nothing looked at the entry since. */
	for (int i = 0; i < 6; i++)
		assert_int_equal(fail_with(f->b, key, -EIO, NULL), 0);
	f->now += S(601);
	assert_int_equal(fail_with(f->b, key, -EIO, NULL), 0);
	assert_int_equal(backoff_check(f->b, key, &st), -EAGAIN);
	assert_int_equal(st.delay_ns, S(10));
}

static void test_success_clears(void **state)
{
	struct fixture *f = *state;
	struct backoff_state st;

	for (int i = 0; i < 4; i++)
		assert_int_equal(fail_with(f->b, key, -EIO, NULL), 0);
	assert_int_equal(backoff_check(f->b, key, NULL), -EAGAIN);
	backoff_success(f->b, key);
	assert_int_equal(backoff_check(f->b, key, NULL), 0);
	assert_int_equal(fail_with(f->b, key, -EIO, NULL), 0);
	assert_int_equal(backoff_check(f->b, key, &st), -EAGAIN);
	assert_int_equal(st.delay_ns, S(10));
	assert_int_equal(st.failures, 1);
}

static void test_keys_independent(void **state)
{
	struct fixture *f = *state;
	struct backoff_state st;

	assert_int_equal(fail_with(f->b, "a:1", -EIO, NULL), 0);
	assert_int_equal(fail_with(f->b, "a:1", -EIO, NULL), 0);
	f->now += S(5);
	assert_int_equal(fail_with(f->b, "b:1", -ENOENT, "not found"), 0);
	assert_int_equal(backoff_check(f->b, "c:1", NULL), 0);
	assert_int_equal(backoff_check(f->b, "a:1", &st), -EAGAIN);
	assert_int_equal(st.remaining_ns, S(15));
	assert_int_equal(backoff_check(f->b, "b:1", &st), -EAGAIN);
	assert_int_equal(st.remaining_ns, S(10));
	assert_int_equal(st.last.err, -ENOENT);
	backoff_success(f->b, "a:1");
	assert_int_equal(backoff_check(f->b, "a:1", NULL), 0);
	assert_int_equal(backoff_check(f->b, "b:1", NULL), -EAGAIN);
}

static int by_key(const void *a, const void *b)
{
	return strcmp(((const struct backoff_entry *)a)->key,
		      ((const struct backoff_entry *)b)->key);
}

static void test_snapshot_and_gc(void **state)
{
	struct fixture *f = *state;
	struct backoff_entry *e = NULL;
	size_t n = 99;

	assert_int_equal(backoff_snapshot(f->b, &e, &n), 0);
	assert_null(e);
	assert_int_equal(n, 0);

	assert_int_equal(fail_with(f->b, "old:1", -EACCES, "denied"), 0);
	f->now += S(300);
	assert_int_equal(fail_with(f->b, "new:1", -EIO, "x"), 0);
	assert_int_equal(fail_with(f->b, "new:1", -EIO, "y"), 0);
	f->now += S(4);

	assert_int_equal(backoff_snapshot(f->b, &e, &n), 0);
	assert_int_equal(n, 2);
	qsort(e, n, sizeof(*e), by_key);
	assert_string_equal(e[0].key, "new:1");
	assert_int_equal(e[0].state.delay_ns, S(20));
	assert_int_equal(e[0].state.remaining_ns, S(16));
	assert_int_equal(e[0].state.idle_ns, S(4));
	assert_int_equal(e[0].state.failures, 2);
	assert_string_equal(e[0].state.last.message, "y");
	assert_string_equal(e[1].key, "old:1");
	assert_int_equal(e[1].state.remaining_ns, 0);
	assert_int_equal(e[1].state.idle_ns, S(304));
	assert_int_equal(e[1].state.last.err, -EACCES);
	backoff_entries_free(e, n);

	/* old:1 was last touched 600 s + 1 ns ago, new:1 only 300 s + 1 ns. */
	f->now += S(296) + 1;
	assert_int_equal(backoff_gc(f->b), 1);
	assert_int_equal(backoff_snapshot(f->b, &e, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(e[0].key, "new:1");
	backoff_entries_free(e, n);

	/* Stale entries are hidden from a snapshot even before a sweep. */
	f->now += S(300);
	assert_int_equal(backoff_snapshot(f->b, &e, &n), 0);
	assert_int_equal(n, 0);
	assert_null(e);
	assert_int_equal(backoff_gc(f->b), 1);
	assert_int_equal(backoff_gc(f->b), 0);
}

static void test_failure_sweeps(void **state)
{
	struct fixture *f = *state;
	struct backoff_entry *e = NULL;
	size_t n = 0;

	/* Without any backoff_gc call, stale entries do not pile up. */
	assert_int_equal(fail_with(f->b, "gone:1", -EIO, NULL), 0);
	f->now += S(601);
	assert_int_equal(fail_with(f->b, "other:1", -EIO, NULL), 0);
	assert_int_equal(backoff_gc(f->b), 0);
	assert_int_equal(backoff_snapshot(f->b, &e, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(e[0].key, "other:1");
	backoff_entries_free(e, n);
}

static void test_message_cut(void **state)
{
	struct fixture *f = *state;
	struct backoff_state st;
	char long_msg[ERROR_DETAIL_MAX * 2];

	memset(long_msg, 'x', sizeof(long_msg) - 1);
	long_msg[sizeof(long_msg) - 1] = '\0';
	assert_int_equal(fail_with(f->b, key, -EBADMSG, long_msg), 0);
	assert_int_equal(backoff_check(f->b, key, &st), -EAGAIN);
	assert_int_equal(strlen(st.last.message), ERROR_DETAIL_MAX - 1);
	assert_int_equal(st.last.err, -EBADMSG);
}

static void test_small_options(void **state)
{
	struct fixture *f = *state;
	static const int delays[] = { 1, 2, 4, 4 };

	for (size_t i = 0; i < sizeof(delays) / sizeof(delays[0]); i++) {
		assert_int_equal(fail_with(f->b, key, -EIO, NULL), 0);
		assert_window(f, S(delays[i]));
	}
	/* 2 * max = 8 s: at 8 s since the last failure it is remembered ... */
	f->now += S(4);
	assert_int_equal(fail_with(f->b, key, -EIO, NULL), 0);
	assert_window(f, S(4));
	/* ... and at 8 s + 1 ns forgotten. */
	f->now += S(4) + 1;
	assert_int_equal(fail_with(f->b, key, -EIO, NULL), 0);
	assert_window(f, S(1));
}

static void test_options(void **state)
{
	struct backoff *b = NULL;
	struct backoff_options o = { 0 };
	struct backoff_state st;

	assert_int_equal(backoff_new(NULL, &b), 0);
	assert_int_equal(fail_with(b, key, -EIO, NULL), 0);
	assert_int_equal(backoff_check(b, key, &st), -EAGAIN);
	assert_int_equal(st.delay_ns, BACKOFF_DEFAULT_INITIAL_NS);
	backoff_free(b);
	backoff_free(NULL);

	/* A default initial delay never exceeds a smaller explicit max. */
	o.max_ns = S(4);
	assert_int_equal(backoff_new(&o, &b), 0);
	assert_int_equal(fail_with(b, key, -EIO, NULL), 0);
	assert_int_equal(backoff_check(b, key, &st), -EAGAIN);
	assert_int_equal(st.delay_ns, S(4));
	backoff_free(b);

	b = NULL;
	o = (struct backoff_options){ .initial_ns = S(20), .max_ns = S(10) };
	assert_int_equal(backoff_new(&o, &b), -EINVAL);
	o = (struct backoff_options){ .initial_ns = -1 };
	assert_int_equal(backoff_new(&o, &b), -EINVAL);
	o = (struct backoff_options){ .max_ns = INT64_MAX / 2 };
	assert_int_equal(backoff_new(&o, &b), -EINVAL);
	assert_null(b);
}

static void test_cap_without_overflow(void **state)
{
	struct backoff *b = NULL;
	struct backoff_options o = { .initial_ns = 1, .max_ns = INT64_MAX / 4 };
	struct backoff_state st;

	assert_int_equal(backoff_new(&o, &b), 0);
	for (int i = 0; i < 100; i++)
		assert_int_equal(fail_with(b, key, -EIO, NULL), 0);
	assert_int_equal(backoff_check(b, key, &st), -EAGAIN);
	assert_int_equal(st.delay_ns, INT64_MAX / 4);
	backoff_free(b);
}

/* What a hook is told, for the takeover tests. */
struct told {
	int calls;
	char key[64];
	bool cleared;
	struct backoff_state st;
};

static void hook(void *userdata, const char *k, const struct backoff_state *st)
{
	struct told *t = userdata;

	t->calls++;
	snprintf(t->key, sizeof(t->key), "%s", k);
	t->cleared = !st;
	if (st)
		t->st = *st;
}

/* The hook hears every failure (with the entry's state) and success. */
static void test_hook(void **state)
{
	struct fixture *f = *state;
	struct told t = { 0 };

	backoff_set_hook(f->b, hook, &t);
	assert_int_equal(fail_with(f->b, key, -ENOENT, "gone"), 0);
	assert_int_equal(t.calls, 1);
	assert_string_equal(t.key, key);
	assert_false(t.cleared);
	assert_int_equal(t.st.failures, 1);
	assert_int_equal(t.st.delay_ns, S(10));
	assert_int_equal(t.st.idle_ns, 0);
	assert_string_equal(t.st.last.message, "gone");
	f->now += S(10);
	assert_int_equal(fail_with(f->b, key, -ENOENT, NULL), 0);
	assert_int_equal(t.st.failures, 2);
	assert_int_equal(t.st.delay_ns, S(20));
	backoff_success(f->b, key);
	assert_int_equal(t.calls, 3);
	assert_true(t.cleared);
	/* a success for a key not in back-off changes nothing: not told */
	backoff_success(f->b, "other");
	assert_int_equal(t.calls, 3);
	backoff_set_hook(f->b, NULL, NULL);
	assert_int_equal(fail_with(f->b, key, -ENOENT, NULL), 0);
	assert_int_equal(t.calls, 3);
}

/* An entry restored as another process left it: refused for what was left
 * of its window, and the next failure doubles its delay. */
static void test_restore(void **state)
{
	struct fixture *f = *state;
	struct backoff_state st = { .delay_ns = S(40), .idle_ns = S(15), .failures = 3 };
	struct backoff_state got;

	error_detail_set(&st.last, -EHOSTUNREACH, "%s", "unreachable");
	assert_int_equal(backoff_restore(f->b, key, &st), 0);
	assert_int_equal(backoff_check(f->b, key, &got), -EAGAIN);
	assert_int_equal(got.remaining_ns, S(25));
	assert_int_equal(got.failures, 3);
	assert_string_equal(got.last.message, "unreachable");
	assert_int_equal(got.delay_ns, S(40));
	assert_int_equal(got.idle_ns, S(15));
	f->now += S(25) - 1;
	assert_int_equal(backoff_check(f->b, key, NULL), -EAGAIN);
	f->now += 1;
	assert_int_equal(backoff_check(f->b, key, NULL), 0);
	assert_int_equal(fail_with(f->b, key, -ENOENT, NULL), 0);
	assert_window(f, S(80));
	/* delays this back-off would never have: refused */
	st.delay_ns = S(1);
	assert_int_equal(backoff_restore(f->b, key, &st), -EINVAL);
	st.delay_ns = S(301);
	assert_int_equal(backoff_restore(f->b, key, &st), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_unknown_key_allowed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timeline, setup, teardown),
		cmocka_unit_test_setup_teardown(test_window_without_check, setup, teardown),
		cmocka_unit_test_setup_teardown(test_failure_inside_window_doubles, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_forgotten_after_twice_max, setup, teardown),
		cmocka_unit_test_setup_teardown(test_forgotten_without_check, setup, teardown),
		cmocka_unit_test_setup_teardown(test_success_clears, setup, teardown),
		cmocka_unit_test_setup_teardown(test_keys_independent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_snapshot_and_gc, setup, teardown),
		cmocka_unit_test_setup_teardown(test_failure_sweeps, setup, teardown),
		cmocka_unit_test_setup_teardown(test_message_cut, setup, teardown),
		cmocka_unit_test_setup_teardown(test_small_options, setup_small, teardown),
		cmocka_unit_test(test_options),
		cmocka_unit_test(test_cap_without_overflow),
		cmocka_unit_test_setup_teardown(test_hook, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restore, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

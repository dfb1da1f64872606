/* imagekeys: keys derived from (reference, digest) the same way in every
 * build, probing past keys in the table and keys the caller says are
 * taken, and a table that readers walk without locks while one writer
 * inserts, removes and grows it. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "imagekeys.h"

#define DIGEST_AB "sha256:abababababababababababababababababababababababababababababababab"

/* Values are the keys themselves, so a reader can tell a wrong answer. */
#define V(k) ((void *)(uintptr_t)(k))

static int setup(void **state)
{
	struct imagekeys *t;

	assert_int_equal(imagekeys_new(&t), 0);
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	imagekeys_free(*state);
	return 0;
}

static void test_derive_is_stable(void **state)
{
	/* A key stored nowhere must come out the same in the next build:
	 * the first 31 bits of sha256("127.0.0.1:5000/test/busybox:1\n"
	 * DIGEST_AB). */
	assert_int_equal(imagekey_derive("127.0.0.1:5000/test/busybox:1", DIGEST_AB), 0x6e57993f);
	assert_int_equal(imagekey_derive("127.0.0.1:5000/test/busybox:1", DIGEST_AB),
			 imagekey_derive("127.0.0.1:5000/test/busybox:1", DIGEST_AB));
	/* Another name of the digest, another digest of the name. */
	assert_int_not_equal(imagekey_derive("127.0.0.1:5000/test/busybox:2", DIGEST_AB),
			     imagekey_derive("127.0.0.1:5000/test/busybox:1", DIGEST_AB));
	assert_int_not_equal(
		imagekey_derive(
			"127.0.0.1:5000/test/busybox:1",
			"sha256:abababababababababababababababababababababababababababababababac"),
		imagekey_derive("127.0.0.1:5000/test/busybox:1", DIGEST_AB));
	/* The separator keeps pairs apart that concatenate alike. */
	assert_int_not_equal(imagekey_derive("a/b:1", "sha256:x"),
			     imagekey_derive("a/b:1sha", "256:x"));
}

static void test_derive_range(void **state)
{
	char ref[64];

	for (int i = 0; i < 2000; i++) {
		snprintf(ref, sizeof(ref), "example.com/r/n:%d", i);
		uint32_t k = imagekey_derive(ref, DIGEST_AB);
		assert_true(k >= 1 && k <= IMAGEKEY_MAX);
	}
	assert_int_equal(imagekey_next(1), 2);
	assert_int_equal(imagekey_next(IMAGEKEY_MAX), 1);
}

static void test_insert_get_remove(void **state)
{
	struct imagekeys *t = *state;

	assert_null(imagekeys_get(t, 5));
	assert_int_equal(imagekeys_insert(t, 5, V(5)), 0);
	assert_ptr_equal(imagekeys_get(t, 5), V(5));
	assert_int_equal(imagekeys_insert(t, 5, V(6)), -EEXIST);
	assert_int_equal(imagekeys_insert(t, 0, V(1)), -EINVAL);
	assert_int_equal(imagekeys_insert(t, IMAGEKEY_MAX + 1, V(1)), -EINVAL);
	assert_null(imagekeys_get(t, 0));
	assert_null(imagekeys_get(t, UINT32_MAX));
	assert_ptr_equal(imagekeys_remove(t, 5), V(5));
	assert_null(imagekeys_get(t, 5));
	assert_null(imagekeys_remove(t, 5));
	assert_int_equal(imagekeys_size(t), 0);
}

static void test_grow_and_reuse(void **state)
{
	struct imagekeys *t = *state;

	/* Neighbouring keys, as probing makes them, and spread ones. */
	for (uint32_t k = 1; k <= 5000; k++)
		assert_int_equal(imagekeys_insert(t, k, V(k)), 0);
	for (uint32_t k = 1; k <= 5000; k++)
		assert_int_equal(imagekeys_insert(t, k * 397 + (1u << 24), V(k * 397 + (1u << 24))),
				 0);
	assert_int_equal(imagekeys_size(t), 10000);
	for (uint32_t k = 1; k <= 5000; k++) {
		assert_ptr_equal(imagekeys_get(t, k), V(k));
		assert_ptr_equal(imagekeys_get(t, k * 397 + (1u << 24)), V(k * 397 + (1u << 24)));
	}
	/* Remove every other one, insert others in their place, many
	 * times: dead slots are reused or dropped, never lose a live key. */
	for (int round = 0; round < 20; round++) {
		for (uint32_t k = 1; k <= 5000; k += 2)
			assert_ptr_equal(imagekeys_remove(t, k + round * 10000u),
					 V(k + round * 10000u));
		for (uint32_t k = 1; k <= 5000; k += 2)
			assert_int_equal(imagekeys_insert(t, k + (round + 1) * 10000u,
							  V(k + (round + 1) * 10000u)),
					 0);
		for (uint32_t k = 2; k <= 5000; k += 2)
			assert_ptr_equal(imagekeys_get(t, k), V(k));
		for (uint32_t k = 1; k <= 5000; k += 2) {
			assert_null(imagekeys_get(t, k + round * 10000u));
			assert_ptr_equal(imagekeys_get(t, k + (round + 1) * 10000u),
					 V(k + (round + 1) * 10000u));
		}
	}
	assert_int_equal(imagekeys_size(t), 10000);
}

static bool taken_odd_below_100(void *userdata, uint32_t key)
{
	unsigned *calls = userdata;

	(*calls)++;
	return key < 100 && key % 2 == 1;
}

static bool taken_all(void *userdata, uint32_t key)
{
	return true;
}

static void test_pick(void **state)
{
	struct imagekeys *t = *state;
	unsigned calls = 0;
	uint32_t k;

	/* Free: the preferred key itself. */
	assert_int_equal(imagekeys_pick(t, 40, NULL, NULL, &k), 0);
	assert_int_equal(k, 40);
	/* In the table: the next free one. */
	for (uint32_t i = 40; i < 44; i++)
		assert_int_equal(imagekeys_insert(t, i, V(i)), 0);
	assert_int_equal(imagekeys_pick(t, 40, NULL, NULL, &k), 0);
	assert_int_equal(k, 44);
	/* Taken by the caller (a key stored for another name). */
	assert_int_equal(imagekeys_pick(t, 41, taken_odd_below_100, &calls, &k), 0);
	assert_int_equal(k, 44);
	assert_int_equal(imagekeys_pick(t, 45, taken_odd_below_100, &calls, &k), 0);
	assert_int_equal(k, 46);
	assert_true(calls > 0);
	/* Around the end of the range. */
	assert_int_equal(imagekeys_insert(t, IMAGEKEY_MAX, V(IMAGEKEY_MAX)), 0);
	assert_int_equal(imagekeys_pick(t, IMAGEKEY_MAX, NULL, NULL, &k), 0);
	assert_int_equal(k, 1);
	assert_int_equal(imagekeys_pick(t, 0, NULL, NULL, &k), 0);
	assert_int_equal(k, 1);
	/* A key let go of is free again. */
	assert_ptr_equal(imagekeys_remove(t, 41), V(41));
	assert_int_equal(imagekeys_pick(t, 41, NULL, NULL, &k), 0);
	assert_int_equal(k, 41);
	/* Nothing free within the bound. */
	assert_int_equal(imagekeys_pick(t, 7, taken_all, NULL, &k), -EMFILE);
}

struct race {
	struct imagekeys *t;
	atomic_bool stop;
	atomic_ulong wrong, found;
};

static void *reader(void *arg)
{
	struct race *r = arg;
	uint32_t k = 1;

	while (!atomic_load(&r->stop)) {
		/* 1..1000 stay in the table throughout; others come and go. */
		void *v = imagekeys_get(r->t, k);
		if (k <= 1000 && v != V(k))
			atomic_fetch_add(&r->wrong, 1);
		else if (v && v != V(k))
			atomic_fetch_add(&r->wrong, 1);
		else if (v)
			atomic_fetch_add(&r->found, 1);
		k = k % 60000 + 1;
	}
	return NULL;
}

static void test_readers_without_locks(void **state)
{
	struct race r = { .t = *state };
	pthread_t th[2];

	for (uint32_t k = 1; k <= 1000; k++)
		assert_int_equal(imagekeys_insert(r.t, k, V(k)), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, reader, &r), 0);
	for (int round = 0; round < 30; round++) {
		for (uint32_t k = 1001; k <= 60000; k++)
			assert_int_equal(imagekeys_insert(r.t, k, V(k)), 0);
		for (uint32_t k = 1001; k <= 60000; k++)
			assert_ptr_equal(imagekeys_remove(r.t, k), V(k));
	}
	atomic_store(&r.stop, true);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(atomic_load(&r.wrong), 0);
	assert_true(atomic_load(&r.found) > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_derive_is_stable),
		cmocka_unit_test(test_derive_range),
		cmocka_unit_test_setup_teardown(test_insert_get_remove, setup, teardown),
		cmocka_unit_test_setup_teardown(test_grow_and_reuse, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pick, setup, teardown),
		cmocka_unit_test_setup_teardown(test_readers_without_locks, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

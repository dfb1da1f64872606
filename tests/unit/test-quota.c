/* Unit tests for cache bytes per user: the charge (each blob once per
 * user, root charged nothing), the room a user's pull makes among its own
 * images only, and the order GC takes images in under pressure.  Ages are
 * given as times of last use on a made-up clock. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "quota.h"

#define MB (1000 * 1000ULL)
#define T0 1700000000000LL /* ms */

static struct quota_blob A[] = { { "sha256:a1", 4 * MB }, { "sha256:base", 2 * MB } };
static struct quota_blob B[] = { { "sha256:b1", 4 * MB }, { "sha256:base", 2 * MB } };
static struct quota_blob C[] = { { "sha256:c1", 4 * MB } };
static struct quota_blob D[] = { { "sha256:d1", 4 * MB } };
static struct quota_blob BIG[] = { { "sha256:big", 12 * MB } };
static struct quota_blob ROOT[] = { { "sha256:root", 12 * MB } };

#define IMG(ref, uid, age_s, set)                                                                  \
	(struct quota_image)                                                                       \
	{                                                                                          \
		.reference = ref, .owner = uid, .last_used_ms = T0 - (age_s)*1000LL, .blobs = set, \
		.n_blobs = sizeof(set) / sizeof(set[0])                                            \
	}

static void charge_counts_shared_blobs_once(void **state)
{
	struct quota_image imgs[] = {
		IMG("u/a", 65534, 30, A),
		IMG("u/b", 65534, 20, B),
		IMG("v/a", 1000, 10, A),
		IMG("root", 0, 50, ROOT),
	};
	uint64_t bytes;

	assert_int_equal(quota_charge(imgs, 4, 65534, NULL, &bytes), 0);
	assert_int_equal(bytes, 10 * MB); /* a1 + b1 + base once */
	assert_int_equal(quota_charge(imgs, 4, 1000, NULL, &bytes), 0);
	assert_int_equal(bytes, 6 * MB); /* the same blob, charged to each user */
	assert_int_equal(quota_charge(imgs, 4, 0, NULL, &bytes), 0);
	assert_int_equal(bytes, 0);
}

static void room_is_made_among_own_images_oldest_first(void **state)
{
	struct quota_image imgs[] = {
		IMG("root", 0, 500, ROOT),
		IMG("other", 1000, 400, C),
		IMG("u/a", 65534, 30, A),
		IMG("u/b", 65534, 20, B),
	};
	struct quota_image next = IMG("u/c", 65534, 0, C);
	uint64_t bytes;

	/* 10 MB charged, 4 MB more: a goes (b keeps base), 10 MB after */
	assert_int_equal(quota_make_room(imgs, 4, 65534, 10 * MB, &next, &bytes), 0);
	assert_int_equal(bytes, 10 * MB);
	assert_false(imgs[0].victim);
	assert_false(imgs[1].victim);
	assert_true(imgs[2].victim);
	assert_false(imgs[3].victim);
}

static void room_skips_kept_images(void **state)
{
	struct quota_image imgs[] = {
		IMG("u/a", 65534, 30, A),
		IMG("u/b", 65534, 20, B),
	};
	struct quota_image next = IMG("u/c", 65534, 0, C);
	uint64_t bytes;

	imgs[0].keep = true; /* a file open in it */
	assert_int_equal(quota_make_room(imgs, 2, 65534, 10 * MB, &next, &bytes), 0);
	assert_false(imgs[0].victim);
	assert_true(imgs[1].victim);
	assert_int_equal(bytes, 10 * MB); /* a1 + base + c1 */
}

static void no_room_is_edquot_and_marks_nothing(void **state)
{
	struct quota_image imgs[] = {
		IMG("root", 0, 500, ROOT),
		IMG("u/a", 65534, 30, A),
		IMG("u/b", 65534, 20, B),
		IMG("u/d", 65534, 10, D),
	};
	struct quota_image next = IMG("u/c", 65534, 0, C);
	uint64_t bytes;

	imgs[1].keep = imgs[2].keep = true; /* both held open: 10 MB */
	assert_int_equal(quota_make_room(imgs, 4, 65534, 12 * MB, &next, &bytes), -EDQUOT);
	assert_int_equal(bytes, 14 * MB); /* what cannot go, with the new image */
	for (size_t i = 0; i < 4; i++)
		assert_false(imgs[i].victim);

	/* an image bigger than the quota on its own */
	struct quota_image big = IMG("u/big", 65534, 0, BIG);
	imgs[1].keep = imgs[2].keep = false;
	assert_int_equal(quota_make_room(imgs, 4, 65534, 10 * MB, &big, &bytes), -EDQUOT);
	assert_int_equal(bytes, 12 * MB);
	for (size_t i = 0; i < 4; i++)
		assert_false(imgs[i].victim);
}

static void root_is_never_limited(void **state)
{
	struct quota_image imgs[] = { IMG("root", 0, 500, ROOT) };
	struct quota_image big = IMG("root2", 0, 0, BIG);
	uint64_t bytes;

	assert_int_equal(quota_make_room(imgs, 1, 0, 1, &big, &bytes), 0);
	assert_false(imgs[0].victim);
}

static void gc_takes_users_over_quota_first(void **state)
{
	struct quota_image imgs[] = {
		IMG("root/old", 0, 900, ROOT), IMG("private", 0, 800, ROOT),
		IMG("v/c", 1000, 700, C),      IMG("u/a", 65534, 30, A),
		IMG("u/b", 65534, 20, B),      IMG("u/d", 65534, 10, D),
	};
	static const char *const want[] = { "u/a", "u/b", "u/d", "root/old", "private", "v/c" };

	for (size_t i = 0; i < 6; i++)
		imgs[i].index = i;
	/* 65534 holds 14 MB, over 10 MB; 1000 holds 4 MB, within */
	assert_int_equal(quota_gc_order(imgs, 6, 10 * MB), 0);
	for (size_t i = 0; i < 6; i++)
		assert_string_equal(imgs[i].reference, want[i]);
	assert_int_equal(imgs[0].index, 3);

	/* nobody over quota: least recently used first, as without quotas */
	assert_int_equal(quota_gc_order(imgs, 6, 100 * MB), 0);
	assert_string_equal(imgs[0].reference, "root/old");
	assert_string_equal(imgs[2].reference, "v/c");
	assert_string_equal(imgs[5].reference, "u/d");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(charge_counts_shared_blobs_once),
		cmocka_unit_test(room_is_made_among_own_images_oldest_first),
		cmocka_unit_test(room_skips_kept_images),
		cmocka_unit_test(no_room_is_edquot_and_marks_nothing),
		cmocka_unit_test(root_is_never_limited),
		cmocka_unit_test(gc_takes_users_over_quota_first),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

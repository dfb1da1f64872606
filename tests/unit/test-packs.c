/* packs: one struct per layer digest, descriptors opened on demand and
 * closed least recently used first beyond the bound, never while a read
 * holds them, and kept open (pinned) across the deletion of their layer. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache.h"
#include "packs.h"

#define N_LAYERS 6

struct fixture {
	char dir[64];
	struct cache *cache;
	char digests[N_LAYERS][80];
};

static void layer_path(const struct fixture *f, int i, char *buf, size_t len, const char *file)
{
	snprintf(buf, len, "%s/layers/%s%s%s", f->dir, f->digests[i] + 7, file ? "/" : "",
		 file ? file : "");
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char err[256], path[256];

	strcpy(f->dir, "/tmp/test-packs.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_int_equal(cache_open(f->dir, &f->cache, err, sizeof(err)), 0);
	for (int i = 0; i < N_LAYERS; i++) {
		snprintf(f->digests[i], sizeof(f->digests[i]), "sha256:%064x", i + 1);
		layer_path(f, i, path, sizeof(path), NULL);
		assert_int_equal(mkdir(path, 0700), 0);
		layer_path(f, i, path, sizeof(path), "pack");
		FILE *p = fopen(path, "w");
		assert_non_null(p);
		fprintf(p, "layer %d", i);
		fclose(p);
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[128];

	cache_close(f->cache);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

/* Layer i's directory made again, its pack saying "layer N". */
static void remake_layer(const struct fixture *f, int i, int n)
{
	char path[256];
	FILE *o;

	layer_path(f, i, path, sizeof(path), NULL);
	assert_int_equal(mkdir(path, 0700), 0);
	layer_path(f, i, path, sizeof(path), "pack");
	o = fopen(path, "w");
	assert_non_null(o);
	fprintf(o, "layer %d", n);
	fclose(o);
}

static void read_layer(struct packs *p, struct pack *pk, int i)
{
	char buf[32] = "", want[32];
	int fd = pack_fd_get(p, pk);

	assert_true(fd >= 0);
	assert_true(pread(fd, buf, sizeof(buf) - 1, 0) > 0);
	snprintf(want, sizeof(want), "layer %d", i);
	assert_string_equal(buf, want);
	pack_fd_put(p, pk);
}

static void test_one_struct_per_digest(void **state)
{
	struct fixture *f = *state;
	struct packs *p;
	struct pack *a, *b;

	assert_int_equal(packs_new(f->cache, 4, &p), 0);
	assert_int_equal(packs_get(p, f->digests[0], &a), 0);
	assert_int_equal(packs_get(p, f->digests[0], &b), 0);
	assert_ptr_equal(a, b);
	/* Getting a pack opens nothing; a read does, once. */
	assert_int_equal(packs_open_count(p), 0);
	read_layer(p, a, 0);
	read_layer(p, b, 0);
	assert_int_equal(packs_open_count(p), 1);
	packs_put(p, a);
	assert_int_equal(packs_open_count(p), 1);
	packs_put(p, b);
	/* The last image let go: closed and forgotten. */
	assert_int_equal(packs_open_count(p), 0);
	packs_free(p);
}

static void test_bound_and_lru(void **state)
{
	struct fixture *f = *state;
	struct packs *p;
	struct pack *pk[N_LAYERS];
	int held;

	assert_int_equal(packs_new(f->cache, 3, &p), 0);
	for (int i = 0; i < N_LAYERS; i++)
		assert_int_equal(packs_get(p, f->digests[i], &pk[i]), 0);
	for (int i = 0; i < N_LAYERS; i++) {
		read_layer(p, pk[i], i);
		assert_true(packs_open_count(p) <= 3);
	}
	assert_int_equal(packs_open_count(p), 3);
	/* Reads of every layer again still work: reopened on demand. */
	for (int i = 0; i < N_LAYERS; i++)
		read_layer(p, pk[i], i);
	assert_int_equal(packs_open_count(p), 3);

	/* A descriptor held by a read is never closed, even over the bound. */
	held = pack_fd_get(p, pk[0]);
	assert_true(held >= 0);
	for (int i = 1; i < N_LAYERS; i++)
		read_layer(p, pk[i], i);
	assert_true(fcntl(held, F_GETFD) >= 0);
	char c;
	assert_int_equal(pread(held, &c, 1, 0), 1);
	pack_fd_put(p, pk[0]);
	assert_true(packs_open_count(p) <= 3);

	for (int i = 0; i < N_LAYERS; i++)
		packs_put(p, pk[i]);
	assert_int_equal(packs_open_count(p), 0);
	packs_free(p);
}

static int count_retired(const struct fixture *f)
{
	char path[128];
	struct dirent *de;
	int n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/tmp", f->dir);
	d = opendir(path);
	assert_non_null(d);
	while ((de = readdir(d)))
		n += strncmp(de->d_name, "gone.", 5) == 0;
	closedir(d);
	return n;
}

static void test_removed_while_used(void **state)
{
	struct fixture *f = *state;
	static const char object[] =
		"00000000000000000000000000000000000000000000000000000000000000aa";
	struct packs *p;
	struct pack *pk, *other;
	char path[256], buf[16] = "";
	FILE *o;
	int fd;

	/* an object of layer 2 */
	snprintf(path, sizeof(path), "%s/layers/%s/o.%s", f->dir, f->digests[2] + 7, object);
	o = fopen(path, "w");
	assert_non_null(o);
	fputs("object bytes", o);
	fclose(o);

	assert_int_equal(packs_new(f->cache, 1, &p), 0);
	assert_int_equal(packs_get(p, f->digests[2], &pk), 0);
	/* In use: moved aside, never read before, so its pack is opened. */
	assert_int_equal(packs_remove_layer(p, f->digests[2]), 0);
	assert_int_equal(packs_open_count(p), 1);
	layer_path(f, 2, path, sizeof(path), NULL);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(count_retired(f), 1);
	/* A layer no image uses is deleted. */
	assert_int_equal(packs_remove_layer(p, f->digests[3]), 0);
	layer_path(f, 3, path, sizeof(path), NULL);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(packs_open_count(p), 1);
	/* Reads of other layers over the bound do not close a pinned one,
	 * and its objects still open. */
	assert_int_equal(packs_get(p, f->digests[4], &other), 0);
	read_layer(p, other, 4);
	read_layer(p, other, 4);
	read_layer(p, pk, 2);
	fd = pack_object_open(p, pk, object);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, buf, 6, 0), 6);
	assert_string_equal(buf, "object");
	close(fd);
	packs_put(p, other);
	/* An unpinned layer that is gone cannot be opened. */
	layer_path(f, 5, path, sizeof(path), "pack");
	assert_int_equal(unlink(path), 0);
	assert_int_equal(packs_get(p, f->digests[5], &other), 0);
	assert_int_equal(pack_fd_get(p, other), -ENOENT);
	assert_int_equal(pack_object_open(p, other, object), -ENOENT);
	packs_put(p, other);
	/* The last user gone, so is the retired directory. */
	packs_put(p, pk);
	assert_int_equal(packs_open_count(p), 0);
	assert_int_equal(count_retired(f), 0);
	packs_free(p);
}

/* A layer deleted while an image reads it and then pulled again: the new
 * copy gets a pack of its own, and deleting it again deletes it, whether
 * or not the image holding the deleted copy is still there. */
static void test_removed_then_pulled_again(void **state)
{
	struct fixture *f = *state;
	struct packs *p;
	struct pack *old, *pk;
	char path[256];

	assert_int_equal(packs_new(f->cache, 4, &p), 0);
	assert_int_equal(packs_get(p, f->digests[2], &old), 0);
	read_layer(p, old, 2);
	assert_int_equal(packs_remove_layer(p, f->digests[2]), 0);
	assert_int_equal(count_retired(f), 1);
	/* the same digest published again, with content told apart here */
	remake_layer(f, 2, 9);
	assert_int_equal(packs_get(p, f->digests[2], &pk), 0);
	assert_ptr_not_equal(pk, old);
	read_layer(p, pk, 9);
	read_layer(p, old, 2);
	packs_put(p, pk);
	/* no image uses the new copy: deleted, the old one still read */
	assert_int_equal(packs_remove_layer(p, f->digests[2]), 0);
	layer_path(f, 2, path, sizeof(path), NULL);
	assert_int_equal(access(path, F_OK), -1);
	read_layer(p, old, 2);
	packs_put(p, old);
	assert_int_equal(count_retired(f), 0);
	assert_int_equal(packs_open_count(p), 0);
	packs_free(p);
}

/* A verified layer has one content whatever its directory (a layer
 * served from its stage while another pull's copy was published first):
 * its pack is kept, never detached. */
static void test_verified_not_detached(void **state)
{
	struct fixture *f = *state;
	struct packs *p;
	struct pack *old, *pk;
	char path[256], moved[256];

	assert_int_equal(packs_new(f->cache, 1, &p), 0);
	assert_int_equal(packs_get(p, f->digests[1], &old), 0);
	read_layer(p, old, 1);
	layer_path(f, 1, path, sizeof(path), NULL);
	snprintf(moved, sizeof(moved), "%s/tmp/copy-1", f->dir);
	assert_int_equal(rename(path, moved), 0);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(packs_get(p, f->digests[1], &pk), 0);
	assert_ptr_equal(pk, old);
	read_layer(p, pk, 1);
	packs_put(p, pk);
	packs_put(p, old);
	assert_int_equal(packs_open_count(p), 0);
	packs_free(p);
}

/* Layer 1's directory is replaced (a lazy layer by one verified against
 * its digest, publish.c): a new image gets a new pack that reads the new
 * directory, while the image holding the old pack keeps reading the old
 * one; an old pack that never opened its descriptor has nothing to read. */
static void test_replaced_while_used(void **state)
{
	struct fixture *f = *state;
	struct packs *p;
	struct pack *old, *unread, *pk;
	char path[256], moved[256];
	FILE *o;

	/* only a lazy layer not verified yet is ever replaced */
	for (int i = 1; i <= 2; i++) {
		layer_path(f, i, path, sizeof(path), "lazy");
		o = fopen(path, "w");
		assert_non_null(o);
		fclose(o);
	}
	assert_int_equal(packs_new(f->cache, 1, &p), 0);
	assert_int_equal(packs_get(p, f->digests[1], &old), 0);
	read_layer(p, old, 1);
	assert_int_equal(packs_get(p, f->digests[2], &unread), 0);
	for (int i = 1; i <= 2; i++) {
		layer_path(f, i, path, sizeof(path), NULL);
		snprintf(moved, sizeof(moved), "%s/tmp/replaced-%d", f->dir, i);
		assert_int_equal(rename(path, moved), 0);
		remake_layer(f, i, i + 6);
	}
	assert_int_equal(packs_get(p, f->digests[1], &pk), 0);
	assert_ptr_not_equal(pk, old);
	read_layer(p, pk, 7);
	/* the old one: pinned open over the bound */
	read_layer(p, old, 1);
	read_layer(p, pk, 7);
	read_layer(p, old, 1);
	packs_put(p, pk);
	assert_int_equal(packs_get(p, f->digests[2], &pk), 0);
	assert_ptr_not_equal(pk, unread);
	assert_int_equal(pack_fd_get(p, unread), -ESTALE);
	read_layer(p, pk, 8);
	packs_put(p, pk);
	packs_put(p, unread);
	packs_put(p, old);
	assert_int_equal(packs_open_count(p), 0);
	/* the table forgot none of the new ones wrongly */
	assert_int_equal(packs_get(p, f->digests[1], &pk), 0);
	read_layer(p, pk, 7);
	packs_put(p, pk);
	packs_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_one_struct_per_digest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bound_and_lru, setup, teardown),
		cmocka_unit_test_setup_teardown(test_removed_while_used, setup, teardown),
		cmocka_unit_test_setup_teardown(test_removed_then_pulled_again, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replaced_while_used, setup, teardown),
		cmocka_unit_test_setup_teardown(test_verified_not_detached, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

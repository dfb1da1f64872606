/* snapstore: the snapshot store of the containerd snapshotter.  The
 * operations and their errors as containerd's overlay snapshotter has
 * them, the mounts, names that are never paths, remote snapshots (a
 * link to a directory elsewhere), the metadata read back
 * after a reopen, the running count of bytes on local disk, a malformed
 * metadata file refused, and a kill -9 at
 * each step of a change (the test binary run again with PULLFS_FAULT):
 * the store reopens in the old state or the new one, with no directory
 * left that nothing names. */
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
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "snapstore.h"

static char dir[64];
static char store_dir[96];
static char errbuf[512];

static int setup(void **state)
{
	strcpy(dir, "/tmp/test-snapstore.XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(store_dir, sizeof(store_dir), "%s/snapshotter", dir);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
	return 0;
}

static struct snapstore *open_store(void)
{
	struct snapstore *s = NULL;

	errbuf[0] = '\0';
	assert_int_equal(snapstore_open(store_dir, &s, errbuf, sizeof(errbuf)), 0);
	return s;
}

static json_t *labels(void)
{
	return json_object();
}

static int prepare(struct snapstore *s, enum snap_kind kind, const char *key, const char *parent)
{
	struct snap_mount m = { 0 };
	json_t *l = labels();
	int r;

	errbuf[0] = '\0';
	r = snapstore_prepare(s, kind, key, parent, l, &m, errbuf, sizeof(errbuf));
	json_decref(l);
	snap_mount_done(&m);
	return r;
}

static int commit(struct snapstore *s, const char *name, const char *key)
{
	json_t *l = json_pack("{s:s}", "containerd.io/snapshot.ref", name);
	int r;

	errbuf[0] = '\0';
	r = snapstore_commit(s, name, key, l, errbuf, sizeof(errbuf));
	json_decref(l);
	return r;
}

/* Entries of DIR/snapshotter/snapshots. */
static int n_dirs(void)
{
	char path[128];
	DIR *d;
	struct dirent *de;
	int n = 0;

	snprintf(path, sizeof(path), "%s/snapshots", store_dir);
	d = opendir(path);
	assert_non_null(d);
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static int count_one(void *userdata, const struct snap_info *info)
{
	(*(int *)userdata)++;
	return 0;
}

static int n_snapshots(struct snapstore *s)
{
	int n = 0;

	assert_int_equal(snapstore_walk(s, count_one, &n), 0);
	return n;
}

static void test_lifecycle(void **state)
{
	struct snapstore *s = open_store();
	struct snap_mount m = { 0 };
	struct snap_info i = { 0 };
	int64_t size, inodes;
	char path[256];
	FILE *f;

	assert_int_equal(prepare(s, SNAP_ACTIVE, "ns/1/extract-1 sha256:aa", ""), 0);
	/* one layer: a bind mount of its own directory */
	assert_int_equal(
		snapstore_mounts(s, "ns/1/extract-1 sha256:aa", &m, errbuf, sizeof(errbuf)), 0);
	assert_string_equal(m.type, "bind");
	snprintf(path, sizeof(path), "%s/snapshots/1/fs", store_dir);
	assert_string_equal(m.source, path);
	assert_int_equal(m.n_options, 2);
	assert_string_equal(m.options[0], "rw");
	snap_mount_done(&m);

	snprintf(path, sizeof(path), "%s/snapshots/1/fs/file", store_dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("content", f);
	fclose(f);
	assert_int_equal(commit(s, "ns/2/sha256:aa", "ns/1/extract-1 sha256:aa"), 0);
	assert_int_equal(snapstore_stat(s, "ns/1/extract-1 sha256:aa", &i, errbuf, sizeof(errbuf)),
			 -ENOENT);
	assert_int_equal(snapstore_stat(s, "ns/2/sha256:aa", &i, errbuf, sizeof(errbuf)), 0);
	assert_int_equal(i.kind, SNAP_COMMITTED);
	assert_string_equal(
		json_string_value(json_object_get(i.labels, "containerd.io/snapshot.ref")),
		"ns/2/sha256:aa");
	snap_info_done(&i);
	assert_int_equal(
		snapstore_usage(s, "ns/2/sha256:aa", &size, &inodes, errbuf, sizeof(errbuf)), 0);
	assert_true(size > 0);
	assert_int_equal(inodes, 1);
	/* the work directory went with the commit */
	snprintf(path, sizeof(path), "%s/snapshots/1/work", store_dir);
	assert_int_equal(access(path, F_OK), -1);

	/* two layers and a container */
	assert_int_equal(prepare(s, SNAP_ACTIVE, "l2", "ns/2/sha256:aa"), 0);
	assert_int_equal(commit(s, "c2", "l2"), 0);
	assert_int_equal(prepare(s, SNAP_ACTIVE, "ctr", "c2"), 0);
	assert_int_equal(snapstore_mounts(s, "ctr", &m, errbuf, sizeof(errbuf)), 0);
	assert_string_equal(m.type, "overlay");
	snprintf(path, sizeof(path), "lowerdir=%s/snapshots/2/fs:%s/snapshots/1/fs", store_dir,
		 store_dir);
	assert_string_equal(m.options[m.n_options - 1], path);
	snprintf(path, sizeof(path), "upperdir=%s/snapshots/3/fs", store_dir);
	assert_string_equal(m.options[m.n_options - 2], path);
	snap_mount_done(&m);

	/* a view of one layer: its parent's directory, read-only */
	assert_int_equal(prepare(s, SNAP_VIEW, "v1", "ns/2/sha256:aa"), 0);
	assert_int_equal(snapstore_mounts(s, "v1", &m, errbuf, sizeof(errbuf)), 0);
	assert_string_equal(m.type, "bind");
	snprintf(path, sizeof(path), "%s/snapshots/1/fs", store_dir);
	assert_string_equal(m.source, path);
	assert_string_equal(m.options[0], "ro");
	snap_mount_done(&m);
	/* a view of two: overlayfs without an upper directory */
	assert_int_equal(prepare(s, SNAP_VIEW, "v2", "c2"), 0);
	assert_int_equal(snapstore_mounts(s, "v2", &m, errbuf, sizeof(errbuf)), 0);
	assert_string_equal(m.type, "overlay");
	for (size_t k = 0; k < m.n_options; k++)
		assert_null(strstr(m.options[k], "upperdir"));
	snap_mount_done(&m);
	assert_int_equal(n_snapshots(s), 5);
	assert_int_equal(n_dirs(), 5);

	/* the same after a reopen */
	snapstore_free(s);
	s = open_store();
	assert_int_equal(n_snapshots(s), 5);
	assert_int_equal(n_dirs(), 5);
	assert_int_equal(snapstore_mounts(s, "ctr", &m, errbuf, sizeof(errbuf)), 0);
	snprintf(path, sizeof(path), "upperdir=%s/snapshots/3/fs", store_dir);
	assert_string_equal(m.options[m.n_options - 2], path);
	snap_mount_done(&m);

	/* removal: children first */
	assert_int_equal(snapstore_remove(s, "c2", errbuf, sizeof(errbuf)), -EBUSY);
	assert_non_null(strstr(errbuf, "has it as parent"));
	assert_int_equal(snapstore_remove(s, "ctr", errbuf, sizeof(errbuf)), 0);
	assert_int_equal(snapstore_remove(s, "v2", errbuf, sizeof(errbuf)), 0);
	assert_int_equal(snapstore_remove(s, "c2", errbuf, sizeof(errbuf)), 0);
	assert_int_equal(snapstore_remove(s, "c2", errbuf, sizeof(errbuf)), -ENOENT);
	assert_int_equal(n_snapshots(s), 2);
	assert_int_equal(n_dirs(), 2);
	snapstore_free(s);
}

/* Usage counts an inode of several links once, and a directory as one. */
static void test_usage_links(void **state)
{
	struct snapstore *s = open_store();
	int64_t size, inodes;
	char path[256], other[256];
	FILE *f;

	assert_int_equal(prepare(s, SNAP_ACTIVE, "a", ""), 0);
	snprintf(path, sizeof(path), "%s/snapshots/1/fs/file", store_dir);
	f = fopen(path, "w");
	assert_non_null(f);
	for (int i = 0; i < 10000; i++)
		fputs("0123456789", f);
	fclose(f);
	for (int i = 0; i < 100; i++) {
		snprintf(other, sizeof(other), "%s/snapshots/1/fs/link%d", store_dir, i);
		assert_int_equal(link(path, other), 0);
	}
	snprintf(path, sizeof(path), "%s/snapshots/1/fs/dir", store_dir);
	assert_int_equal(mkdir(path, 0755), 0);
	assert_int_equal(snapstore_usage(s, "a", &size, &inodes, errbuf, sizeof(errbuf)), 0);
	assert_int_equal(inodes, 2);
	assert_true(size >= 100000 && size < 200000);
	assert_int_equal(commit(s, "c", "a"), 0);
	assert_int_equal(snapstore_usage(s, "c", &size, &inodes, errbuf, sizeof(errbuf)), 0);
	assert_int_equal(inodes, 2);
	snapstore_free(s);
}

/* A file of n bytes of data in snapshot id's fs. */
static void write_file(unsigned id, const char *name, size_t n)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/snapshots/%u/fs/%s", store_dir, id, name);
	f = fopen(path, "w");
	assert_non_null(f);
	for (size_t i = 0; i < n; i++)
		fputc('x', f);
	fclose(f);
}

/* The store's bytes on local disk, a running sum: an active snapshot
 * counts from its last measure, a committed one as measured at its
 * commit, a remote one nothing; a remove takes its bytes off, and a
 * reopen sums the metadata again -- with no walk of the folders when the
 * count is read. */
static void test_local_bytes(void **state)
{
	struct snapstore *s = open_store();
	char layer[128];
	int64_t size, inodes, c_size;
	json_t *l = json_pack("{s:s}", "containerd.io/snapshot.ref", "remote");

	assert_int_equal(snapstore_local_bytes(s), 0);
	snprintf(layer, sizeof(layer), "%s/layers/sha256:aa/diff", dir);
	assert_int_equal(snapstore_add_remote(s, "remote", "", l, layer, errbuf, sizeof(errbuf)),
			 0);
	json_decref(l);
	assert_int_equal(prepare(s, SNAP_ACTIVE, "a", "remote"), 0); /* id 2 */
	write_file(2, "big", 256 * 1024);
	/* not measured yet: nothing walks the folder behind the count */
	assert_int_equal(snapstore_local_bytes(s), 0);
	assert_int_equal(snapstore_usage(s, "a", &size, &inodes, errbuf, sizeof(errbuf)), 0);
	assert_true(size >= 256 * 1024);
	assert_int_equal(snapstore_local_bytes(s), (uint64_t)size);
	write_file(2, "more", 64 * 1024);
	assert_int_equal(snapstore_local_bytes(s), (uint64_t)size);
	assert_int_equal(commit(s, "c", "a"), 0);
	assert_int_equal(snapstore_usage(s, "c", &c_size, &inodes, errbuf, sizeof(errbuf)), 0);
	assert_true(c_size >= size + 64 * 1024);
	assert_int_equal(snapstore_local_bytes(s), (uint64_t)c_size);
	/* a container's upper directory over it */
	assert_int_equal(prepare(s, SNAP_ACTIVE, "ctr", "c"), 0); /* id 3 */
	write_file(3, "log", 128 * 1024);
	assert_int_equal(snapstore_usage(s, "ctr", &size, &inodes, errbuf, sizeof(errbuf)), 0);
	assert_int_equal(snapstore_local_bytes(s), (uint64_t)(c_size + size));
	assert_int_equal(prepare(s, SNAP_VIEW, "v", "c"), 0);
	assert_int_equal(snapstore_local_bytes(s), (uint64_t)(c_size + size));

	/* read back from the metadata */
	snapstore_free(s);
	s = open_store();
	assert_int_equal(snapstore_local_bytes(s), (uint64_t)(c_size + size));
	assert_int_equal(snapstore_remove(s, "ctr", errbuf, sizeof(errbuf)), 0);
	assert_int_equal(snapstore_remove(s, "v", errbuf, sizeof(errbuf)), 0);
	assert_int_equal(snapstore_local_bytes(s), (uint64_t)c_size);
	assert_int_equal(snapstore_remove(s, "c", errbuf, sizeof(errbuf)), 0);
	assert_int_equal(snapstore_local_bytes(s), 0);
	assert_int_equal(snapstore_remove(s, "remote", errbuf, sizeof(errbuf)), 0);
	assert_int_equal(snapstore_local_bytes(s), 0);
	snapstore_free(s);
}

static void test_errors(void **state)
{
	struct snapstore *s = open_store();
	struct snap_mount m = { 0 };
	int64_t size, inodes;

	assert_int_equal(prepare(s, SNAP_ACTIVE, "a", ""), 0);
	assert_int_equal(prepare(s, SNAP_ACTIVE, "a", ""), -EEXIST);
	assert_int_equal(prepare(s, SNAP_ACTIVE, "b", "nope"), -ENOENT);
	/* the parent must be committed */
	assert_int_equal(prepare(s, SNAP_ACTIVE, "b", "a"), -EINVAL);
	assert_int_equal(commit(s, "c", "nope"), -ENOENT);
	assert_int_equal(commit(s, "c", "a"), 0);
	/* only an active snapshot commits */
	assert_int_equal(commit(s, "d", "c"), -EBUSY);
	assert_int_equal(prepare(s, SNAP_VIEW, "v", "c"), 0);
	assert_int_equal(commit(s, "d", "v"), -EBUSY);
	assert_int_equal(prepare(s, SNAP_ACTIVE, "e", "c"), 0);
	assert_int_equal(commit(s, "c", "e"), -EEXIST);
	assert_int_equal(snapstore_mounts(s, "c", &m, errbuf, sizeof(errbuf)), -EINVAL);
	assert_int_equal(snapstore_mounts(s, "zz", &m, errbuf, sizeof(errbuf)), -ENOENT);
	assert_int_equal(snapstore_usage(s, "zz", &size, &inodes, errbuf, sizeof(errbuf)), -ENOENT);
	assert_int_equal(snapstore_usage(s, "v", &size, &inodes, errbuf, sizeof(errbuf)), 0);
	assert_int_equal(size, 0);
	snapstore_free(s);
}

/* Names are data: '/', "..", blanks and any UTF-8 are names like others
 * and never reach a path. */
static void test_names_are_not_paths(void **state)
{
	static const char *const keys[] = {
		"../../escape", "/etc/passwd",	    "a/../../b", "..", ".",
		"k\n\t x",	"\xc3\xa9t\xc3\xa9"
	};
	struct snapstore *s = open_store();
	char path[128];

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		assert_int_equal(prepare(s, SNAP_ACTIVE, keys[i], ""), 0);
	assert_int_equal(n_dirs(), 7);
	snprintf(path, sizeof(path), "%s/escape", dir);
	assert_int_equal(access(path, F_OK), -1);
	snprintf(path, sizeof(path), "%s/b", dir);
	assert_int_equal(access(path, F_OK), -1);
	snapstore_free(s);
	s = open_store();
	assert_int_equal(n_snapshots(s), 7);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		assert_int_equal(snapstore_remove(s, keys[i], errbuf, sizeof(errbuf)), 0);
	assert_int_equal(n_dirs(), 0);
	snapstore_free(s);
}

static void test_checks(void **state)
{
	char big[SNAP_LABEL_MAX + 2];
	json_t *l;

	assert_int_equal(snapstore_check_name("key", "", errbuf, sizeof(errbuf)), -EINVAL);
	assert_int_equal(snapstore_check_name("key", "\xff", errbuf, sizeof(errbuf)), -EINVAL);
	assert_non_null(strstr(errbuf, "UTF-8"));
	/* overlong form of '/', a surrogate */
	assert_int_equal(snapstore_check_name("key", "\xc0\xaf", errbuf, sizeof(errbuf)), -EINVAL);
	assert_int_equal(snapstore_check_name("key", "\xed\xa0\x80", errbuf, sizeof(errbuf)),
			 -EINVAL);
	assert_int_equal(snapstore_check_name("key", "a\xe2\x82", errbuf, sizeof(errbuf)), -EINVAL);
	assert_int_equal(snapstore_check_name("key", "\xe2\x82\xac", errbuf, sizeof(errbuf)), 0);
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(snapstore_check_name("key", big, errbuf, sizeof(errbuf)), -EINVAL);

	big[SNAP_LABEL_MAX - 1] = '\0'; /* with the key "k": exactly the bound */
	l = json_pack("{s:s}", "k", big);
	assert_int_equal(snapstore_check_labels(l, errbuf, sizeof(errbuf)), 0);
	json_decref(l);
	big[SNAP_LABEL_MAX - 1] = 'x';
	big[SNAP_LABEL_MAX] = '\0';
	l = json_pack("{s:s}", "k", big);
	assert_int_equal(snapstore_check_labels(l, errbuf, sizeof(errbuf)), -EINVAL);
	assert_non_null(strstr(errbuf, "greater than maximum size"));
	json_decref(l);
	l = json_pack("{s:i}", "k", 1);
	assert_int_equal(snapstore_check_labels(l, errbuf, sizeof(errbuf)), -EINVAL);
	json_decref(l);
	l = json_pack("{s:s}", "", "v");
	assert_int_equal(snapstore_check_labels(l, errbuf, sizeof(errbuf)), -EINVAL);
	json_decref(l);
}

static void test_update(void **state)
{
	struct snapstore *s = open_store();
	struct snap_info given = { .name = "a" }, i = { 0 };
	char *one[] = { "labels.x" }, *bad[] = { "parent" }, *all[] = { "labels" };

	assert_int_equal(prepare(s, SNAP_ACTIVE, "a", ""), 0);
	given.labels = json_pack("{s:s, s:s}", "x", "1", "y", "2");
	assert_int_equal(snapstore_update(s, &given, one, 1, &i, errbuf, sizeof(errbuf)), 0);
	assert_int_equal(json_object_size(i.labels), 1);
	assert_string_equal(json_string_value(json_object_get(i.labels, "x")), "1");
	snap_info_done(&i);
	assert_int_equal(snapstore_update(s, &given, NULL, 0, &i, errbuf, sizeof(errbuf)), 0);
	assert_int_equal(json_object_size(i.labels), 2);
	snap_info_done(&i);
	assert_int_equal(snapstore_update(s, &given, bad, 1, &i, errbuf, sizeof(errbuf)), -EINVAL);
	json_object_del(given.labels, "x");
	assert_int_equal(snapstore_update(s, &given, one, 1, &i, errbuf, sizeof(errbuf)), 0);
	assert_null(json_object_get(i.labels, "x"));
	assert_non_null(json_object_get(i.labels, "y"));
	snap_info_done(&i);
	json_object_clear(given.labels);
	assert_int_equal(snapstore_update(s, &given, all, 1, &i, errbuf, sizeof(errbuf)), 0);
	assert_int_equal(json_object_size(i.labels), 0);
	snap_info_done(&i);
	given.name = "nope";
	assert_int_equal(snapstore_update(s, &given, NULL, 0, &i, errbuf, sizeof(errbuf)), -ENOENT);
	json_decref(given.labels);
	snapstore_free(s);
}

/* A remote snapshot: its fs is a link to a directory elsewhere, which
 * the mounts of its children name through the link (a ':' in the
 * directory's path stays out of overlayfs's options); it survives a
 * reopen, counts no usage, and its removal leaves the directory alone. */
static void test_remote(void **state)
{
	struct snapstore *s = open_store();
	struct snap_mount m = { 0 };
	struct snap_info i = { 0 };
	char layer[128], link[128], target[128], path[512];
	int64_t size, inodes;
	json_t *l = json_pack("{s:s}", "containerd.io/snapshot.ref", "sha256:cc");
	ssize_t n;

	snprintf(layer, sizeof(layer), "%s/layers/sha256:aa/diff", dir);
	snprintf(path, sizeof(path), "mkdir -p '%s' && touch '%s/file'", layer, layer);
	assert_int_equal(system(path), 0);
	assert_int_equal(snapstore_add_remote(s, "sha256:cc", "", l, layer, errbuf, sizeof(errbuf)),
			 0);
	assert_int_equal(snapstore_add_remote(s, "sha256:cc", "", l, layer, errbuf, sizeof(errbuf)),
			 -EEXIST);
	assert_int_equal(snapstore_add_remote(s, "x", "nope", l, layer, errbuf, sizeof(errbuf)),
			 -ENOENT);
	assert_int_equal(snapstore_add_remote(s, "x", "", l, "relative", errbuf, sizeof(errbuf)),
			 -EINVAL);
	json_decref(l);
	snprintf(link, sizeof(link), "%s/snapshots/1/fs", store_dir);
	n = readlink(link, target, sizeof(target) - 1);
	assert_true(n > 0);
	target[n] = '\0';
	assert_string_equal(target, layer);
	assert_int_equal(snapstore_stat(s, "sha256:cc", &i, errbuf, sizeof(errbuf)), 0);
	assert_int_equal(i.kind, SNAP_COMMITTED);
	snap_info_done(&i);

	snapstore_free(s);
	s = open_store();
	assert_int_equal(prepare(s, SNAP_ACTIVE, "l2", "sha256:cc"), 0);
	assert_int_equal(commit(s, "c2", "l2"), 0);
	assert_int_equal(prepare(s, SNAP_ACTIVE, "ctr", "c2"), 0);
	assert_int_equal(snapstore_mounts(s, "ctr", &m, errbuf, sizeof(errbuf)), 0);
	snprintf(path, sizeof(path), "lowerdir=%s/snapshots/2/fs:%s", store_dir, link);
	assert_string_equal(m.options[m.n_options - 1], path);
	snap_mount_done(&m);
	assert_int_equal(snapstore_usage(s, "sha256:cc", &size, &inodes, errbuf, sizeof(errbuf)),
			 0);
	assert_int_equal(size, 0);
	assert_int_equal(inodes, 0);
	assert_int_equal(snapstore_remove(s, "ctr", errbuf, sizeof(errbuf)), 0);
	assert_int_equal(snapstore_remove(s, "c2", errbuf, sizeof(errbuf)), 0);
	assert_int_equal(snapstore_remove(s, "sha256:cc", errbuf, sizeof(errbuf)), 0);
	assert_int_equal(n_dirs(), 0);
	snprintf(path, sizeof(path), "%s/file", layer);
	assert_int_equal(access(path, F_OK), 0);
	snapstore_free(s);
}

static void write_metadata(const char *text)
{
	char path[160];
	FILE *f;

	snprintf(path, sizeof(path), "%s/metadata.json", store_dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_bad_metadata(void **state)
{
	static const char *const bad[] = {
		"not json",
		"{\"version\":2,\"next_id\":1,\"snapshots\":[]}",
		"{\"version\":1,\"next_id\":1,\"snapshots\":[{\"id\":1}]}",
		/* a parent that is not there */
		"{\"version\":1,\"next_id\":2,\"snapshots\":[{\"id\":1,\"name\":\"a\","
		"\"parent\":\"b\",\"kind\":\"active\",\"created\":0,\"updated\":0,"
		"\"labels\":{},\"size\":0,\"inodes\":0}]}",
		/* a name twice */
		"{\"version\":1,\"next_id\":3,\"snapshots\":[{\"id\":1,\"name\":\"a\","
		"\"parent\":\"\",\"kind\":\"committed\",\"created\":0,\"updated\":0,"
		"\"labels\":{},\"size\":0,\"inodes\":0},{\"id\":2,\"name\":\"a\","
		"\"parent\":\"\",\"kind\":\"committed\",\"created\":0,\"updated\":0,"
		"\"labels\":{},\"size\":0,\"inodes\":0}]}",
	};
	struct snapstore *s = open_store();

	snapstore_free(s);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_metadata(bad[i]);
		s = NULL;
		assert_int_equal(snapstore_open(store_dir, &s, errbuf, sizeof(errbuf)), -EBADMSG);
		assert_null(s);
		assert_non_null(strstr(errbuf, "metadata.json"));
	}
	assert_int_equal(snapstore_open("relative", &s, errbuf, sizeof(errbuf)), -EINVAL);
}

/* ---------------------------------------------------- kill -9 at a step */

enum op { OP_PREPARE, OP_COMMIT, OP_REMOVE };

/* In a child process: open the store and run op; PULLFS_FAULT kills it. */
static int crash_child(const char *sdir, enum op op)
{
	struct snapstore *s = NULL;
	struct snap_mount m = { 0 };
	json_t *l = json_object();
	char eb[512];
	int r;

	if (snapstore_open(sdir, &s, eb, sizeof(eb)) < 0)
		return 3;
	switch (op) {
	case OP_PREPARE:
		r = snapstore_prepare(s, SNAP_ACTIVE, "new", "base", l, &m, eb, sizeof(eb));
		break;
	case OP_COMMIT:
		r = snapstore_commit(s, "done", "work", l, eb, sizeof(eb));
		break;
	case OP_REMOVE:
		r = snapstore_remove(s, "gone", eb, sizeof(eb));
		break;
	default:
		r = -EINVAL;
	}
	snap_mount_done(&m);
	json_decref(l);
	snapstore_free(s);
	return r == 0 ? 0 : 4;
}

static void crash_at(enum op op, const char *point)
{
	char opname[8];
	pid_t pid;
	int st;

	snprintf(opname, sizeof(opname), "%d", op);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		setenv("PULLFS_FAULT", point, 1);
		execl("/proc/self/exe", "test-snapstore", "--crash", store_dir, opname,
		      (char *)NULL);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGKILL);
}

static void crash_fixture(void)
{
	struct snapstore *s = open_store();

	assert_int_equal(prepare(s, SNAP_ACTIVE, "b0", ""), 0);
	assert_int_equal(commit(s, "base", "b0"), 0);
	assert_int_equal(prepare(s, SNAP_ACTIVE, "work", "base"), 0);
	assert_int_equal(prepare(s, SNAP_VIEW, "gone", "base"), 0);
	snapstore_free(s);
}

static bool exists(struct snapstore *s, const char *key)
{
	struct snap_info i = { 0 };
	bool there = snapstore_stat(s, key, &i, errbuf, sizeof(errbuf)) == 0;

	snap_info_done(&i);
	return there;
}

static void test_crash(void **state)
{
	static const struct {
		enum op op;
		const char *point;
		const char *absent, *present; /* after the reopen */
	} cases[] = {
		{ OP_PREPARE, "snap-dirs", "new", "work" },
		{ OP_PREPARE, "snap-metadata", "new", "work" },
		{ OP_COMMIT, "snap-metadata", "done", "work" },
		{ OP_REMOVE, "snap-metadata", NULL, "gone" },
		{ OP_REMOVE, "snap-removed", "gone", "work" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct snapstore *s;
		char cmd[160];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", store_dir);
		assert_int_equal(system(cmd), 0);
		crash_fixture();
		crash_at(cases[i].op, cases[i].point);
		s = open_store();
		if (cases[i].absent)
			assert_false(exists(s, cases[i].absent));
		assert_true(exists(s, cases[i].present));
		/* every directory is a snapshot's, and the store goes on */
		assert_int_equal(n_dirs(), n_snapshots(s));
		assert_int_equal(prepare(s, SNAP_ACTIVE, "after", "base"), 0);
		assert_int_equal(n_dirs(), n_snapshots(s));
		snapstore_free(s);
	}
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_lifecycle, setup, teardown),
		cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_usage_links, setup, teardown),
		cmocka_unit_test_setup_teardown(test_local_bytes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_names_are_not_paths, setup, teardown),
		cmocka_unit_test(test_checks),
		cmocka_unit_test_setup_teardown(test_update, setup, teardown),
		cmocka_unit_test_setup_teardown(test_remote, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_metadata, setup, teardown),
		cmocka_unit_test_setup_teardown(test_crash, setup, teardown),
	};

	if (argc == 4 && strcmp(argv[1], "--crash") == 0)
		return crash_child(argv[2], (enum op)atoi(argv[3]));
	return cmocka_run_group_tests(tests, NULL, NULL);
}

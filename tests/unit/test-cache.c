/* cache: the order of writes that makes a publish survive a power cut.
 * The flushes (fdatasync, fsync, syncfs) and the publishing calls (renameat,
 * linkat) are wrapped at link time (-Wl,--wrap): each is done for real and
 * logged with the cache-relative paths of its descriptors, so the tests can
 * check that content is flushed before the rename that publishes it and the
 * directory after it; a flush can be made to fail, and then nothing may be
 * published.  Also: a layer staged but never committed is gone after the
 * next cache_open. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
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
#include "digest.h"

#define LOG_MAX 64

static char dir[64];
static char calls[LOG_MAX][512];
static size_t n_calls;
static const char *fail_op; /* make this flush fail with EIO... */
static const char *fail_at; /* ...on a path starting with this */
/* The publisher runs on a thread of its own: the log is shared, and a
 * held syncfs keeps a layer in the window between its commit and its
 * publish until the test lets it go. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
static bool hold_syncfs;

/* The path of fd relative to the cache ("." for the cache itself). */
static void fd_path(int fd, char *buf, size_t len)
{
	char link[64], full[PATH_MAX];
	ssize_t n;
	size_t dl = strlen(dir);

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, full, sizeof(full) - 1);
	full[n < 0 ? 0 : n] = '\0';
	if (strncmp(full, dir, dl) == 0 && full[dl] == '/')
		snprintf(buf, len, "%s", full + dl + 1);
	else if (strcmp(full, dir) == 0)
		snprintf(buf, len, ".");
	else
		snprintf(buf, len, "%s", full);
}

static void log_call(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&log_lock);
	assert_true(n_calls < LOG_MAX);
	va_start(ap, fmt);
	vsnprintf(calls[n_calls++], sizeof(calls[0]), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&log_lock);
}

/* A flush, logged; fails when it is the one the test asked for. */
static int flush_call(const char *op, int fd, int (*real)(int))
{
	char p[PATH_MAX];

	fd_path(fd, p, sizeof(p));
	log_call("%s %s", op, p);
	if (fail_op && strcmp(op, fail_op) == 0 && strncmp(p, fail_at, strlen(fail_at)) == 0) {
		errno = EIO;
		return -1;
	}
	return real(fd);
}

int __wrap_fdatasync(int fd);
int __wrap_fsync(int fd);
int __wrap_syncfs(int fd);
int __wrap_renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath);
int __wrap_linkat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags);
int __wrap_unlinkat(int dirfd, const char *path, int flags);
int __real_fdatasync(int fd);
int __real_fsync(int fd);
int __real_syncfs(int fd);
int __real_renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath);
int __real_linkat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags);
int __real_unlinkat(int dirfd, const char *path, int flags);

int __wrap_fdatasync(int fd)
{
	return flush_call("fdatasync", fd, __real_fdatasync);
}

int __wrap_fsync(int fd)
{
	return flush_call("fsync", fd, __real_fsync);
}

int __wrap_syncfs(int fd)
{
	pthread_mutex_lock(&log_lock);
	while (hold_syncfs)
		pthread_cond_wait(&hold_cond, &log_lock);
	pthread_mutex_unlock(&log_lock);
	return flush_call("syncfs", fd, __real_syncfs);
}

static void syncfs_hold(bool on)
{
	pthread_mutex_lock(&log_lock);
	hold_syncfs = on;
	pthread_cond_broadcast(&hold_cond);
	pthread_mutex_unlock(&log_lock);
}

int __wrap_renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath)
{
	char a[PATH_MAX], b[PATH_MAX];

	fd_path(olddirfd, a, sizeof(a));
	fd_path(newdirfd, b, sizeof(b));
	log_call("rename %s/%s %s/%s", a, oldpath, b, newpath);
	return __real_renameat(olddirfd, oldpath, newdirfd, newpath);
}

int __wrap_linkat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags)
{
	char a[PATH_MAX], b[PATH_MAX];

	fd_path(olddirfd, a, sizeof(a));
	fd_path(newdirfd, b, sizeof(b));
	log_call("link %s/%s %s/%s", a, oldpath, b, newpath);
	return __real_linkat(olddirfd, oldpath, newdirfd, newpath, flags);
}

/* Set by a test: once a stage's index is unlinked, the layer's index is
 * read by its digest as a reader would at that moment, and the result
 * kept. */
static const char *read_at_unlink;
static int read_at_unlink_result = 1;
static struct cache *cache;

int __wrap_unlinkat(int dirfd, const char *path, int flags)
{
	char p[PATH_MAX];
	int r = __real_unlinkat(dirfd, path, flags);

	fd_path(dirfd, p, sizeof(p));
	if (r == 0 && read_at_unlink && strcmp(path, "index") == 0 &&
	    strncmp(p, "tmp/layer-", strlen("tmp/layer-")) == 0) {
		struct layer_index *li = NULL;

		read_at_unlink_result = cache_layer_read_index(cache, read_at_unlink, &li);
		layer_index_free(li);
		read_at_unlink = NULL;
	}
	return r;
}

/* The index of the first logged call from `from` on that starts with
 * prefix, or -1. */
static int find_call(size_t from, const char *prefix)
{
	for (size_t i = from; i < n_calls; i++)
		if (strncmp(calls[i], prefix, strlen(prefix)) == 0)
			return (int)i;
	return -1;
}

static void print_calls(void)
{
	for (size_t i = 0; i < n_calls; i++)
		print_message("  %s\n", calls[i]);
}

/* Calls a, b, c... were logged in this order (each prefix found after the
 * one before). */
static void assert_order(const char *const *prefixes, size_t n)
{
	int at = 0;

	for (size_t i = 0; i < n; i++) {
		int j = find_call((size_t)at, prefixes[i]);

		if (j < 0) {
			print_calls();
			fail_msg("no \"%s\" after call %d", prefixes[i], at);
		}
		at = j + 1;
	}
}

static int setup(void **state)
{
	char err[256];

	(void)state;
	strcpy(dir, "/tmp/test-cache.XXXXXX");
	assert_non_null(mkdtemp(dir));
	assert_int_equal(cache_open(dir, &cache, err, sizeof(err)), 0);
	n_calls = 0;
	fail_op = fail_at = NULL;
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	cache_close(cache);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
	return 0;
}

static size_t entries_in(const char *sub)
{
	char p[PATH_MAX];
	size_t n = 0;
	struct dirent *de;
	DIR *d;

	snprintf(p, sizeof(p), "%s/%s", dir, sub);
	d = opendir(p);
	assert_non_null(d);
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

static void blob_digest(const char *content, char digest[DIGEST_STRING_MAX])
{
	assert_int_equal(digest_buffer(content, strlen(content), digest), 0);
}

static void test_blob(void **state)
{
	char d[DIGEST_STRING_MAX], rename_to[128];
	static const char *content = "{\"config\":1}";

	(void)state;
	blob_digest(content, d);
	assert_int_equal(cache_blob_write(cache, d, content, strlen(content)), 0);
	snprintf(rename_to, sizeof(rename_to), "rename tmp/f.");
	const char *order[] = { "fdatasync tmp/f.", rename_to, "fsync blobs/sha256" };
	assert_order(order, 3);
	/* the rename names the flushed file */
	int fl = find_call(0, "fdatasync tmp/"), rn = find_call(0, "rename ");
	char flushed[256];
	snprintf(flushed, sizeof(flushed), "rename %s ", calls[fl] + strlen("fdatasync "));
	assert_int_equal(strncmp(calls[rn], flushed, strlen(flushed)), 0);
	assert_true(cache_blob_present(cache, d));
}

static void test_blob_flush_fails(void **state)
{
	char d[DIGEST_STRING_MAX];
	static const char *content = "{\"config\":2}";

	(void)state;
	blob_digest(content, d);
	fail_op = "fdatasync";
	fail_at = "tmp/";
	assert_int_equal(cache_blob_write(cache, d, content, strlen(content)), -EIO);
	assert_false(cache_blob_present(cache, d));
	assert_int_equal(find_call(0, "rename "), -1);
	assert_int_equal(entries_in("tmp"), 0);
}

static void test_ref(void **state)
{
	struct cache_ref cr = {
		.reference = "registry.test/a/b:1",
		.digest = "sha256:"
			  "0000000000000000000000000000000000000000000000000000000000000001",
		.pulled_at = 1,
	};
	struct cache_ref *got = NULL;
	size_t n = 0;

	(void)state;
	assert_int_equal(cache_ref_save(cache, &cr), 0);
	/* layers a killed process renamed (or another pull) are durable
	 * first */
	const char *order[] = { "fsync layers", "fdatasync tmp/f.", "rename tmp/f.", "fsync refs" };
	assert_order(order, 4);
	assert_int_equal(cache_refs_load(cache, &got, &n), 0);
	assert_int_equal(n, 1);
	assert_false(got[0].user);
	cache_ref_done(&got[0]);
	free(got);
	/* then only after a rename into layers/: none since */
	n_calls = 0;
	cr.pulled_at = 2;
	assert_int_equal(cache_ref_save(cache, &cr), 0);
	assert_order(order + 1, 3);
	assert_int_equal(find_call(0, "fsync layers"), -1);

	/* a user's pull keeps its uid, the user charged for it */
	cr.user = true;
	cr.uid = 65534;
	assert_int_equal(cache_ref_save(cache, &cr), 0);
	assert_int_equal(cache_refs_load(cache, &got, &n), 0);
	assert_int_equal(n, 1);
	assert_true(got[0].user);
	assert_int_equal(got[0].uid, 65534);
	cache_ref_done(&got[0]);
	free(got);

	/* a removal is durable before GC goes on to what it named */
	n_calls = 0;
	assert_int_equal(cache_ref_remove(cache, cr.reference), 0);
	assert_true(find_call(0, "fsync refs") >= 0);
}

static void test_ref_flush_fails(void **state)
{
	struct cache_ref cr = {
		.reference = "registry.test/a/b:2",
		.digest = "sha256:"
			  "0000000000000000000000000000000000000000000000000000000000000002",
	};
	struct cache_ref *got = NULL;
	size_t n = 9;

	(void)state;
	fail_op = "fdatasync";
	fail_at = "tmp/";
	assert_int_equal(cache_ref_save(cache, &cr), -EIO);
	assert_int_equal(cache_refs_load(cache, &got, &n), 0);
	assert_int_equal(n, 0);
	free(got);
	assert_int_equal(entries_in("tmp"), 0);
}

/* A layer of one object file and a pack, staged as the unpacker leaves
 * it. */
static void stage_layer(struct cache_layer_stage *st, const char *digest, char object[65],
			struct layer_index *li, struct layer_entry *e)
{
	static const char *content = "object content";
	char d[DIGEST_STRING_MAX], name[80];
	int fd;

	assert_int_equal(cache_layer_stage(cache, digest, st), 0);
	assert_int_equal(write(st->pack_fd, "pack", 4), 4);
	blob_digest(content, d);
	snprintf(object, 65, "%s", digest_hex(d));
	snprintf(name, sizeof(name), "o.%s", object);
	fd = openat(st->dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
	close(fd);
	*e = (struct layer_entry){ .path = "f",
				   .type = LAYER_ENTRY_REG,
				   .mode = 0644,
				   .size = strlen(content),
				   .object = object };
	*li = (struct layer_index){ .entries = e, .n_entries = 1, .data_size = 4 };
}

static void test_layer(void **state)
{
	static const char *digest =
		"sha256:00000000000000000000000000000000000000000000000000000000000000aa";
	struct cache_layer_stage st;
	struct layer_index li;
	struct layer_entry e;
	char object[65], link_to[320], stage[128];

	(void)state;
	stage_layer(&st, digest, object, &li, &e);
	snprintf(stage, sizeof(stage), "syncfs tmp/%s", st.name);
	n_calls = 0;
	assert_int_equal(cache_layer_commit(cache, &st, digest, &li), 0);
	cache_publish_wait(cache);
	snprintf(link_to, sizeof(link_to), "link %s/o.%s objects/%s", stage + strlen("syncfs "),
		 object, object);
	/* content, its index link, the links' directory and the stage's,
	 * the layer, layers/ */
	const char *order[] = {
		stage,	       link_to, "fsync objects", "fsync tmp/layer-", "rename tmp/layer-",
		"fsync layers"
	};
	assert_order(order, 6);
	/* and the rename publishes the stage that was flushed */
	char renamed[160];
	snprintf(renamed, sizeof(renamed), "rename %s ", stage + strlen("syncfs "));
	assert_true(find_call(0, renamed) >= 0);
	assert_true(cache_layer_present(cache, digest));
	assert_int_equal(entries_in("objects"), 1);
}

/* What the status and the metrics read from the memo is what a scan
 * finds, after each change: a blob and a layer stored, a layer and a blob
 * removed, the objects swept. */
static void assert_memo_is_scan(const char *digest)
{
	struct cache_objects_stats a, b;
	uint64_t bytes, memo_bytes;
	unsigned layers, memo_layers;

	assert_int_equal(cache_usage(cache, &bytes, &layers), 0);
	assert_int_equal(cache_usage_memo(cache, &memo_bytes, &memo_layers), 0);
	assert_int_equal(memo_bytes, bytes);
	assert_int_equal(memo_layers, layers);
	assert_int_equal(cache_objects_stats(cache, &a), 0);
	assert_int_equal(cache_objects_stats_memo(cache, &b), 0);
	assert_memory_equal(&a, &b, sizeof(a));
	assert_int_equal(cache_layer_bytes_memo(cache, digest), cache_layer_bytes(cache, digest));
}

static void test_memo_follows_changes(void **state)
{
	static const char *digest =
		"sha256:00000000000000000000000000000000000000000000000000000000000000bb";
	static const char *content = "{\"config\":2}";
	char d[DIGEST_STRING_MAX], object[65];
	struct cache_layer_stage st;
	struct layer_index li;
	struct layer_entry e;
	uint64_t empty, bytes;
	unsigned layers;

	(void)state;
	assert_memo_is_scan(digest);
	assert_int_equal(cache_usage_memo(cache, &empty, &layers), 0);
	assert_int_equal(layers, 0);
	blob_digest(content, d);
	assert_int_equal(cache_blob_write(cache, d, content, strlen(content)), 0);
	assert_memo_is_scan(digest);
	stage_layer(&st, digest, object, &li, &e);
	assert_int_equal(cache_layer_commit(cache, &st, digest, &li), 0);
	assert_memo_is_scan(digest); /* staged */
	cache_publish_wait(cache);
	assert_memo_is_scan(digest); /* published */
	assert_int_equal(cache_usage_memo(cache, &bytes, &layers), 0);
	assert_int_equal(layers, 1);
	assert_true(bytes > empty);
	assert_true(cache_layer_bytes_memo(cache, digest) > 0);
	assert_int_equal(cache_layer_remove(cache, digest), 0);
	assert_memo_is_scan(digest);
	assert_int_equal(cache_objects_sweep(cache, NULL), 0);
	assert_memo_is_scan(digest);
	assert_int_equal(cache_blob_remove(cache, d), 0);
	assert_memo_is_scan(digest);
	assert_int_equal(cache_usage_memo(cache, &bytes, &layers), 0);
	assert_int_equal(bytes, empty);
}

static void test_layer_flush_fails(void **state)
{
	static const char *digest =
		"sha256:00000000000000000000000000000000000000000000000000000000000000bb";
	struct cache_layer_stage st;
	struct layer_index li;
	struct layer_entry e;
	char object[65];

	(void)state;
	stage_layer(&st, digest, object, &li, &e);
	fail_op = "syncfs";
	fail_at = "tmp/layer-";
	syncfs_hold(true);
	/* served from the stage until its publish fails */
	assert_int_equal(cache_layer_commit(cache, &st, digest, &li), 0);
	assert_true(cache_layer_present(cache, digest));
	/* a reference saved meanwhile may name it: never written */
	struct cache_ref cr = { .reference = "registry.test/a/b:3", .digest = (char *)digest };
	assert_int_equal(cache_ref_save(cache, &cr), 0);
	syncfs_hold(false);
	cache_publish_wait(cache);
	assert_false(cache_layer_present(cache, digest));
	/* not even an index link to content that may not be on disk */
	assert_int_equal(entries_in("objects"), 0);
	assert_int_equal(entries_in("layers"), 0);
	assert_int_equal(entries_in("refs"), 0);
	/* its files stay for whoever has the image loaded; not a mark that
	 * would publish them at the next start */
	char mark[PATH_MAX];
	snprintf(mark, sizeof(mark), "%s/tmp/%s/verified", dir, st.name ? st.name : "x");
	assert_int_equal(entries_in("tmp"), 1);
	cache_close(cache);
	char err[256];
	assert_int_equal(cache_open(dir, &cache, err, sizeof(err)), 0);
	assert_false(cache_layer_present(cache, digest));
	assert_int_equal(entries_in("tmp"), 0);
	assert_int_equal(entries_in("layers"), 0);
}

/* The window between a commit and its publish: the layer is served from
 * its stage (index, objects, pack open), a reference saved then is
 * written only after the layer is on stable storage and renamed. */
static void test_layer_served_before_publish(void **state)
{
	static const char *digest =
		"sha256:00000000000000000000000000000000000000000000000000000000000000dd";
	struct cache_layer_stage st;
	struct layer_index li, *got = NULL;
	struct layer_entry e;
	char object[65], stage[128];
	struct cache_ref cr = { .reference = "registry.test/a/b:4", .digest = (char *)digest };
	char buf[32];
	int fd;

	(void)state;
	stage_layer(&st, digest, object, &li, &e);
	snprintf(stage, sizeof(stage), "syncfs tmp/%s", st.name);
	syncfs_hold(true);
	n_calls = 0;
	assert_int_equal(cache_layer_commit(cache, &st, digest, &li), 0);
	assert_true(cache_layer_present(cache, digest));
	assert_int_equal(cache_layer_read_index(cache, digest, &got), 0);
	assert_int_equal(got->n_entries, 1);
	layer_index_free(got);
	fd = cache_layer_open_object(cache, digest, object);
	assert_true(fd >= 0);
	fd = cache_layer_open_pack(cache, digest);
	assert_true(fd >= 0);
	assert_int_equal(cache_ref_save(cache, &cr), 0);
	/* counted (GC after a pull must see what it brought) */
	uint64_t bytes = 0;
	unsigned layers = 0;
	assert_int_equal(cache_usage(cache, &bytes, &layers), 0);
	assert_int_equal(layers, 1);
	assert_true(bytes > 0);
	assert_true(cache_layer_bytes(cache, digest) > 0);
	/* nothing published yet */
	assert_int_equal(entries_in("layers"), 0);
	assert_int_equal(entries_in("refs"), 0);
	syncfs_hold(false);
	cache_publish_wait(cache);
	const char *order[] = {
		stage,		"fsync objects",    "fsync tmp/layer-", "rename tmp/layer-",
		"fsync layers", "fdatasync tmp/f.", "rename tmp/f.",	"fsync refs"
	};
	assert_order(order, 8);
	assert_int_equal(entries_in("layers"), 1);
	assert_int_equal(entries_in("refs"), 1);
	/* a descriptor opened in the stage reads on after the rename */
	assert_int_equal(pread(fd, buf, 4, 0), 4);
	assert_memory_equal(buf, "pack", 4);
	close(fd);
	/* the reference file saved meanwhile is gone from tmp/ */
	assert_int_equal(entries_in("tmp"), 0);
}

/* Two pulls unpacked the same layer at once: the second copy, not
 * published, goes (the first serves the same files), and a reader between
 * the start of its removal and its end already reads the published one:
 * the stage is no longer shown once its files start to go. */
static void test_layer_twice(void **state)
{
	static const char *digest =
		"sha256:00000000000000000000000000000000000000000000000000000000000000ff";
	struct cache_layer_stage a, b;
	struct layer_index la, lb;
	struct layer_entry ea, eb;
	char object[65];

	(void)state;
	stage_layer(&a, digest, object, &la, &ea);
	stage_layer(&b, digest, object, &lb, &eb);
	read_at_unlink = digest;
	read_at_unlink_result = 1;
	syncfs_hold(true);
	assert_int_equal(cache_layer_commit(cache, &a, digest, &la), 0);
	assert_int_equal(cache_layer_commit(cache, &b, digest, &lb), 0);
	syncfs_hold(false);
	cache_publish_wait(cache);
	assert_null(read_at_unlink);
	assert_int_equal(read_at_unlink_result, 0);
	assert_true(cache_layer_present(cache, digest));
	assert_int_equal(entries_in("layers"), 1);
	assert_int_equal(entries_in("tmp"), 0);
}

/* A kill in that window: the next process of the same boot publishes the
 * verified stage and the reference that waited for it; a stage marked in
 * another boot is discarded. */
static void test_staged_layer_published_after_kill(void **state)
{
	static const char *digest =
		"sha256:00000000000000000000000000000000000000000000000000000000000000ee";
	char boot[64] = "", p[PATH_MAX], err[256], object[65];
	struct cache_layer_stage st;
	struct layer_index li;
	struct layer_entry e;
	FILE *f;
	int fd;

	(void)state;
	f = fopen("/proc/sys/kernel/random/boot_id", "r");
	assert_non_null(f);
	assert_non_null(fgets(boot, sizeof(boot), f));
	fclose(f);
	boot[strcspn(boot, "\n")] = '\0';
	for (int round = 0; round < 2; round++) {
		const char *b = round == 0 ? "00000000-0000-0000-0000-000000000000" : boot;

		stage_layer(&st, digest, object, &li, &e);
		fd = openat(st.dirfd, "index", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		assert_true(fd >= 0);
		assert_int_equal(layer_index_write(&li, fd), 0);
		close(fd);
		snprintf(p, sizeof(p), "%s/tmp/%s/verified", dir, st.name);
		assert_non_null(f = fopen(p, "w"));
		fprintf(f, "%s %s\n", b, digest_hex(digest));
		fclose(f);
		snprintf(p, sizeof(p), "%s/tmp/ref.%064d", dir, 7);
		assert_non_null(f = fopen(p, "w"));
		fprintf(f, "%s\n{\"reference\":\"registry.test/a/b:5\",\"digest\":\"%s\"}", b,
			digest);
		fclose(f);
		/* the killed process's copy, as a kill leaves it (a close
		 * would empty tmp/: kept aside meanwhile) */
		char in_tmp[PATH_MAX], aside[PATH_MAX], ref_aside[PATH_MAX];
		snprintf(in_tmp, sizeof(in_tmp), "%s/tmp/%s", dir, st.name);
		snprintf(aside, sizeof(aside), "%s/aside", dir);
		snprintf(ref_aside, sizeof(ref_aside), "%s/ref-aside", dir);
		assert_int_equal(rename(in_tmp, aside), 0);
		assert_int_equal(rename(p, ref_aside), 0);
		close(st.pack_fd);
		close(st.dirfd);
		cache_close(cache);
		assert_int_equal(rename(aside, in_tmp), 0);
		assert_int_equal(rename(ref_aside, p), 0);
		free(st.name);
		n_calls = 0;
		assert_int_equal(cache_open(dir, &cache, err, sizeof(err)), 0);
		assert_int_equal(entries_in("tmp"), 0);
		assert_int_equal(cache_layer_present(cache, digest), round == 1);
		assert_int_equal(entries_in("refs"), round == 1 ? 1 : 0);
	}
	const char *order[] = { "syncfs tmp/layer-", "fsync objects",	 "rename tmp/layer-",
				"fsync layers",	     "fdatasync tmp/f.", "rename tmp/f.",
				"fsync refs" };
	assert_order(order, 7);
}

/* What a power cut or a kill leaves between staging and commit: a stage
 * with all of a layer's files but no rename, and a blob never renamed.
 * The next start throws them away and publishes nothing from them. */
static void test_staged_layer_discarded_at_open(void **state)
{
	static const char *digest =
		"sha256:00000000000000000000000000000000000000000000000000000000000000cc";
	static const char *const files[] = { "pack", "index", "o.0123" };
	char p[PATH_MAX], err[256];
	FILE *f;

	(void)state;
	cache_close(cache);
	snprintf(p, sizeof(p), "%s/tmp/layer-%.12s.99.0badf00d", dir, digest_hex(digest));
	assert_int_equal(mkdir(p, 0700), 0);
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(p, sizeof(p), "%s/tmp/layer-%.12s.99.0badf00d/%s", dir, digest_hex(digest),
			 files[i]);
		assert_non_null(f = fopen(p, "w"));
		fputs("half", f);
		fclose(f);
	}
	snprintf(p, sizeof(p), "%s/tmp/f.99.0badf00d", dir);
	assert_non_null(f = fopen(p, "w"));
	fclose(f);
	assert_int_equal(entries_in("tmp"), 2);

	assert_int_equal(cache_open(dir, &cache, err, sizeof(err)), 0);
	assert_int_equal(entries_in("tmp"), 0);
	assert_false(cache_layer_present(cache, digest));
	assert_int_equal(entries_in("layers"), 0);
	assert_int_equal(entries_in("objects"), 0);
}

/* A lazy layer not verified against its digest (its "lazy" file) is
 * replaced by a full unpack of the blob: layers/ holds the verified one,
 * the lazy directory moves to tmp/ where a descriptor of it still reads
 * it, and goes with tmp/ at the next start; a lazy layer never replaces
 * one. */
static void test_lazy_layer_replaced(void **state)
{
	static const char *digest =
		"sha256:00000000000000000000000000000000000000000000000000000000000000fe";
	struct cache_layer_stage a, b, l2;
	struct layer_index la, lb, ll;
	struct layer_entry ea, eb, el;
	char object[65], err[256];
	int old, now;

	(void)state;
	stage_layer(&a, digest, object, &la, &ea);
	n_calls = 0;
	assert_int_equal(cache_layer_commit_lazy(cache, &a, digest, &la, "lazy\n", "toc", 3), 0);
	cache_publish_wait(cache);
	/* its own files flushed, not the whole file system */
	const char *order[] = { "fdatasync tmp/layer-", "fdatasync tmp/layer-",
				"fdatasync tmp/layer-", "fsync objects",
				"fsync tmp/layer-",	"rename tmp/layer-",
				"fsync layers" };
	assert_order(order, ARRAY_SIZE(order));
	assert_int_equal(find_call(0, "syncfs"), -1);
	old = cache_layer_open_dir(cache, digest);
	assert_true(old >= 0);
	assert_int_equal(faccessat(old, "lazy", F_OK, 0), 0);
	stage_layer(&b, digest, object, &lb, &eb);
	assert_int_equal(cache_layer_commit(cache, &b, digest, &lb), 0);
	cache_publish_wait(cache);
	now = cache_layer_open_dir(cache, digest);
	assert_true(now >= 0);
	assert_int_equal(faccessat(now, "lazy", F_OK, 0), -1);
	assert_int_equal(faccessat(now, "verified", F_OK, 0), -1);
	close(now);
	assert_int_equal(faccessat(old, "lazy", F_OK, 0), 0);
	assert_int_equal(entries_in("layers"), 1);
	assert_int_equal(entries_in("tmp"), 1);
	/* a lazy layer does not replace the verified one */
	stage_layer(&l2, digest, object, &ll, &el);
	assert_int_equal(cache_layer_commit_lazy(cache, &l2, digest, &ll, "lazy\n", "toc", 3), 0);
	cache_publish_wait(cache);
	now = cache_layer_open_dir(cache, digest);
	assert_true(now >= 0);
	assert_int_equal(faccessat(now, "lazy", F_OK, 0), -1);
	close(now);
	close(old);
	cache_close(cache);
	assert_int_equal(cache_open(dir, &cache, err, sizeof(err)), 0);
	assert_int_equal(entries_in("tmp"), 0);
	now = cache_layer_open_dir(cache, digest);
	assert_true(now >= 0);
	assert_int_equal(faccessat(now, "lazy", F_OK, 0), -1);
	close(now);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_blob, setup, teardown),
		cmocka_unit_test_setup_teardown(test_blob_flush_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ref, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ref_flush_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(test_layer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_memo_follows_changes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_layer_flush_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(test_staged_layer_discarded_at_open, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_layer_served_before_publish, setup, teardown),
		cmocka_unit_test_setup_teardown(test_layer_twice, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lazy_layer_replaced, setup, teardown),
		cmocka_unit_test_setup_teardown(test_staged_layer_published_after_kill, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

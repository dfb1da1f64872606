#include "cache-private.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "digest.h"
#include "fileio.h"
#include "macro.h"

static int mkdirat_p(int dirfd, const char *name)
{
	if (mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST)
		return negative_errno();
	return 0;
}

static int open_dir(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	return fd < 0 ? negative_errno() : fd;
}

static int mkdir_parents(const char *path)
{
	_cleanup_free_ char *p = strdup(path);

	if (!p)
		return -ENOMEM;
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			return negative_errno();
		*s = '/';
	}
	if (mkdir(p, 0700) < 0 && errno != EEXIST)
		return negative_errno();
	return 0;
}

/* A DIR stream over a directory fd we keep: readdir(3) needs one of its
 * own, positioned at the start. */
/* How long a start waits for a pullfs of the same cache on its way out
 * (lock_or_wait). */
#define LOCK_WAIT_MS 5000

/* Whether process pid has SIGTERM or SIGINT pending for the process (a
 * supervisor takes them from a signalfd: pending until it reads them). */
static bool stop_pending(long pid)
{
	char path[64], line[128];
	bool pending = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/status", pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long mask;

		if (sscanf(line, "ShdPnd: %llx", &mask) == 1) {
			pending = mask & ((1ULL << (SIGTERM - 1)) | (1ULL << (SIGINT - 1)));
			break;
		}
	}
	fclose(f);
	return pending;
}

/* Whether process pid is gone, ending (a zombie: threads still held, or
 * a stop signal not yet taken), or not a pullfs any more (its pid taken
 * again: a pullfs has our name). */
static bool taker_gone(long pid)
{
	char comm[64], ours[64];
	int st;

	if (pid <= 0)
		return true; /* dead and freed, or in another pid namespace */
	st = proc_stat((pid_t)pid, comm, sizeof(comm));
	if (st < 0 || st == 'Z' || st == 'X')
		return true;
	if (proc_stat(getpid(), ours, sizeof(ours)) > 0 && strcmp(comm, ours) != 0)
		return true;
	return stop_pending(pid);
}

/* Whether the pullfs holding the lock of fd's file is on its way out: the
 * process that took it is gone (a supervisor killed, its serving process
 * still running for the moment it takes to notice, unmount and exit) or
 * ending, or it wrote CACHE_LOCK_STOPPING into the file. */
static bool holder_leaving(int fd)
{
	char line[256];
	struct stat st;
	long pid = -1, ino_pid = -1;
	FILE *f;
	ssize_t n;

	if (fstat(fd, &st) < 0)
		return false;
	n = pread(fd, line, sizeof(line) - 1, 0);
	if (n > 0) {
		line[n] = '\0';
		if (!strncmp(line, CACHE_LOCK_STOPPING, strlen(CACHE_LOCK_STOPPING)))
			return true;
	}
	f = fopen("/proc/locks", "re");
	if (!f)
		return false;
	/* "N: FLOCK  ADVISORY  WRITE PID MAJ:MIN:INO 0 EOF"; a waiter's line
	 * has "->".  The device is the filesystem's below an overlay, which
	 * stat does not show: the inode alone when no line has both. */
	while (fgets(line, sizeof(line), f)) {
		char type[16];
		unsigned maj, min;
		unsigned long ino;
		long p;

		if (strstr(line, "->") ||
		    sscanf(line, "%*d: %15s %*s %*s %ld %x:%x:%lu", type, &p, &maj, &min, &ino) !=
			    5 ||
		    strcmp(type, "FLOCK") != 0 || ino != (unsigned long)st.st_ino)
			continue;
		if (maj == major(st.st_dev) && min == minor(st.st_dev))
			pid = p;
		else
			ino_pid = p;
	}
	fclose(f);
	if (pid == -1)
		pid = ino_pid;
	/* no line: the lock went since flock(2) found it held */
	return pid == -1 || taker_gone(pid);
}

/* An exclusive flock of fd: 0, or -EBUSY once the pullfs holding it is
 * not leaving or did not let go within LOCK_WAIT_MS, or -errno.  A holder
 * that does not look like leaving is looked at once more 100 ms later: a
 * supervisor between taking its SIGTERM and saying it stops. */
static int lock_or_wait(int fd)
{
	bool second_look = false;

	for (int waited = 0;; waited += 20) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			/* what a holder before said (CACHE_LOCK_STOPPING) */
			if (ftruncate(fd, 0) < 0) {
				/* a stop of ours cannot be told then */
			}
			return 0;
		}
		if (errno != EWOULDBLOCK)
			return negative_errno();
		if (waited >= LOCK_WAIT_MS)
			return -EBUSY;
		if (!holder_leaving(fd)) {
			if (second_look)
				return -EBUSY;
			second_look = true;
			usleep(100000);
			continue;
		}
		usleep(20000);
	}
}

int cache_lock_take(const char *dir, char *errbuf, size_t errlen)
{
	_cleanup_free_ char *path = NULL;
	int r, fd;

	r = mkdir_parents(dir);
	if (r < 0) {
		snprintf(errbuf, errlen, "cannot create cache directory \"%s\": %s", dir,
			 strerror(-r));
		return r;
	}
	if (asprintf(&path, "%s/lock", dir) < 0)
		return -ENOMEM;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		r = negative_errno();
		snprintf(errbuf, errlen, "cannot create \"%s\": %s", path, strerror(-r));
		return r;
	}
	r = lock_or_wait(fd);
	if (r < 0) {
		snprintf(errbuf, errlen, "cache \"%s\" is in use by another pullfs", dir);
		close(fd);
		return r;
	}
	return fd;
}

void cache_lock_stopping(int fd)
{
	if (fd >= 0 &&
	    pwrite(fd, CACHE_LOCK_STOPPING "\n", strlen(CACHE_LOCK_STOPPING) + 1, 0) < 0) {
		/* a start meanwhile fails at once, as without it */
	}
}

/* The lock the supervisor holds for every serving process it runs
 * (CACHE_LOCK_ENV): a descriptor of the same open file, whose lock is
 * already ours; -1 when there is none, or not of this cache. */
static int inherited_lock(int dirfd)
{
	const char *v = getenv(CACHE_LOCK_ENV);
	struct stat a, b;
	char *end;
	long fd;

	if (!v || !*v)
		return -1;
	fd = strtol(v, &end, 10);
	if (*end || fd < 0 || fd > INT_MAX || fstat((int)fd, &a) < 0 ||
	    fstatat(dirfd, "lock", &b, AT_SYMLINK_NOFOLLOW) < 0 || a.st_dev != b.st_dev ||
	    a.st_ino != b.st_ino)
		return -1;
	return fcntl((int)fd, F_DUPFD_CLOEXEC, 3);
}

int cache_open(const char *dir, struct cache **ret, char *errbuf, size_t errlen)
{
	struct cache *c;
	int r;

	r = mkdir_parents(dir);
	if (r < 0) {
		snprintf(errbuf, errlen, "cannot create cache directory \"%s\": %s", dir,
			 strerror(-r));
		return r;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->dirfd = c->lockfd = c->blobs_fd = c->layers_fd = c->refs_fd = c->tmp_fd = c->objects_fd =
		-1;
	pthread_mutex_init(&c->stages_lock, NULL);

	/* A killed process may have renamed a layer into layers/ without
	 * flushing it: the first reference file flushes layers/. */
	atomic_store(&c->layers_renamed, 1);
	r = cache_memo_new(c);
	if (r < 0)
		goto fail;
	c->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c->dirfd < 0) {
		r = negative_errno();
		snprintf(errbuf, errlen, "cannot open cache directory \"%s\": %s", dir,
			 strerror(-r));
		goto fail;
	}
	c->lockfd = inherited_lock(c->dirfd);
	if (c->lockfd < 0)
		c->lockfd = openat(c->dirfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (c->lockfd < 0) {
		r = negative_errno();
		snprintf(errbuf, errlen, "cannot create \"%s/lock\": %s", dir, strerror(-r));
		goto fail;
	}
	r = lock_or_wait(c->lockfd);
	if (r < 0) {
		snprintf(errbuf, errlen, "cache \"%s\" is in use by another pullfs", dir);
		goto fail;
	}
	static const char *const dirs[] = { "blobs",   "blobs/sha256", "layers",
					    "objects", "refs",	       "tmp" };
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		r = mkdirat_p(c->dirfd, dirs[i]);
		if (r < 0) {
			snprintf(errbuf, errlen, "cannot create \"%s/%s\": %s", dir, dirs[i],
				 strerror(-r));
			goto fail;
		}
	}
	if ((r = c->blobs_fd = open_dir(c->dirfd, "blobs/sha256")) < 0 ||
	    (r = c->layers_fd = open_dir(c->dirfd, "layers")) < 0 ||
	    (r = c->refs_fd = open_dir(c->dirfd, "refs")) < 0 ||
	    (r = c->objects_fd = open_dir(c->dirfd, "objects")) < 0 ||
	    (r = c->tmp_fd = open_dir(c->dirfd, "tmp")) < 0) {
		snprintf(errbuf, errlen, "cannot open cache layout in \"%s\": %s", dir,
			 strerror(-r));
		goto fail;
	}
	/* Layers a killed process of this boot served before publishing
	 * them are published now; whatever else a killed daemon left
	 * half-done is worthless: nothing in tmp/ was ever published. */
	publisher_recover(c);
	empty_dir(c->tmp_fd);
	r = publisher_new(c);
	if (r < 0) {
		snprintf(errbuf, errlen, "cannot start the publisher: %s", strerror(-r));
		goto fail;
	}
	*ret = c;
	return 0;
fail:
	cache_close(c);
	return r;
}

void cache_close(struct cache *c)
{
	if (!c)
		return;
	publisher_free(c); /* publishes what is staged */
	if (c->tmp_fd >= 0) {
		empty_dir(c->tmp_fd);
		close(c->tmp_fd);
	}
	int fds[] = { c->blobs_fd, c->layers_fd, c->refs_fd, c->objects_fd, c->lockfd, c->dirfd };
	for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	cache_memo_free(c);
	pthread_mutex_destroy(&c->stages_lock);
	free(c);
}

/* ---- where a layer lives ----------------------------------------------- */

void cache_stage_show(struct cache *c, struct cache_stage_entry *e)
{
	/* first: the newest stage of a layer answers */
	pthread_mutex_lock(&c->stages_lock);
	e->next = c->stages;
	c->stages = e;
	atomic_fetch_add(&c->n_stages, 1);
	pthread_mutex_unlock(&c->stages_lock);
}

void cache_stage_hide(struct cache *c, struct cache_stage_entry *e)
{
	pthread_mutex_lock(&c->stages_lock);
	for (struct cache_stage_entry **pp = &c->stages; *pp; pp = &(*pp)->next)
		if (*pp == e) {
			*pp = e->next;
			atomic_fetch_sub(&c->n_stages, 1);
			break;
		}
	pthread_mutex_unlock(&c->stages_lock);
}

int layer_openat(struct cache *c, const char *hex, const char *file, int flags)
{
	char path[2 * DIGEST_HEX_LEN + 16];
	int fd;

	if (atomic_load(&c->n_stages) > 0) {
		pthread_mutex_lock(&c->stages_lock);
		for (struct cache_stage_entry *e = c->stages; e; e = e->next)
			if (!strcmp(e->hex, hex)) {
				/* under the lock: the stage's owner closes its
				 * descriptor only after hiding it */
				fd = openat(e->dirfd, file ? file : ".", flags);
				if (fd < 0)
					fd = negative_errno();
				pthread_mutex_unlock(&c->stages_lock);
				return fd;
			}
		pthread_mutex_unlock(&c->stages_lock);
	}
	snprintf(path, sizeof(path), "%s%s%s", hex, file ? "/" : "", file ? file : "");
	fd = openat(c->layers_fd, path, flags);
	return fd < 0 ? negative_errno() : fd;
}

/* Whole small files of the cache; too big means damaged. */
static int read_all(int fd, size_t max, char **ret_buf, size_t *ret_len)
{
	int r = read_full(fd, max, ret_buf, ret_len);

	return r == -EFBIG ? -EBADMSG : r;
}

int cache_blob_read(struct cache *c, const char *digest, size_t max, char **ret_buf,
		    size_t *ret_len)
{
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *buf = NULL;
	char got[DIGEST_STRING_MAX];
	size_t len;
	int r;

	if (!digest_is_valid(digest))
		return -EINVAL;
	fd = openat(c->blobs_fd, digest_hex(digest), O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return negative_errno();
	r = read_all(fd, max, &buf, &len);
	if (r < 0)
		return r;
	r = digest_buffer(buf, len, got);
	if (r < 0)
		return r;
	if (strcmp(got, digest) != 0)
		return -EBADMSG;
	*ret_buf = TAKE_PTR(buf);
	*ret_len = len;
	return 0;
}

bool cache_blob_present(struct cache *c, const char *digest)
{
	return digest_is_valid(digest) && faccessat(c->blobs_fd, digest_hex(digest), F_OK, 0) == 0;
}

/* Writes buf to tmp/ and renames it to name in dirfd: the content is on
 * stable storage before the rename, the rename before this returns. */
int write_atomic(struct cache *c, int dirfd, const char *name, const void *buf, size_t len)
{
	char tmpname[64];
	_cleanup_close_ int fd = -1;
	int r;

	for (int attempt = 0;; attempt++) {
		snprintf(tmpname, sizeof(tmpname), "f.%ld.%08x", (long)getpid(),
			 (unsigned)random());
		fd = openat(c->tmp_fd, tmpname, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd >= 0)
			break;
		if (errno != EEXIST || attempt > 100)
			return negative_errno();
	}
	r = write_full(fd, buf, len);
	if (r == 0)
		r = flush_data(fd);
	if (r == 0 && renameat(c->tmp_fd, tmpname, dirfd, name) < 0)
		r = negative_errno();
	if (r < 0) {
		unlinkat(c->tmp_fd, tmpname, 0);
		return r;
	}
	cache_touch(c);
	return flush_dir(dirfd);
}

int cache_blob_write(struct cache *c, const char *digest, const void *buf, size_t len)
{
	if (!digest_is_valid(digest))
		return -EINVAL;
	return write_atomic(c, c->blobs_fd, digest_hex(digest), buf, len);
}

bool cache_layer_present(struct cache *c, const char *digest)
{
	char path[DIGEST_HEX_LEN + 16];

	if (!digest_is_valid(digest))
		return false;
	if (publisher_staged(c, digest_hex(digest)))
		return true;
	snprintf(path, sizeof(path), "%s/index", digest_hex(digest));
	return faccessat(c->layers_fd, path, F_OK, 0) == 0;
}

static int layer_file_open(struct cache *c, const char *digest, const char *file)
{
	if (!digest_is_valid(digest))
		return -EINVAL;
	return layer_openat(c, digest_hex(digest), file, O_RDONLY | O_CLOEXEC);
}

int cache_layer_open_pack(struct cache *c, const char *digest)
{
	return layer_file_open(c, digest, "pack");
}

int cache_layer_read_index(struct cache *c, const char *digest, struct layer_index **ret)
{
	_cleanup_close_ int idx = layer_file_open(c, digest, "index");

	if (idx < 0)
		return idx;
	return layer_index_read(idx, ret);
}

static int cache_stage_new(struct cache *c, const char *prefix, char **ret_name, int *ret_dirfd)
{
	char name[128];
	int fd;

	for (int attempt = 0;; attempt++) {
		snprintf(name, sizeof(name), "%.60s.%ld.%08x", prefix, (long)getpid(),
			 (unsigned)random());
		if (mkdirat(c->tmp_fd, name, 0700) == 0)
			break;
		if (errno != EEXIST || attempt > 100)
			return negative_errno();
	}
	fd = open_dir(c->tmp_fd, name);
	if (fd < 0) {
		unlinkat(c->tmp_fd, name, AT_REMOVEDIR);
		return fd;
	}
	*ret_name = strdup(name);
	if (!*ret_name) {
		close(fd);
		cache_stage_discard(c, name);
		return -ENOMEM;
	}
	*ret_dirfd = fd;
	return 0;
}

void cache_stage_discard(struct cache *c, const char *name)
{
	int fd = openat(c->tmp_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd >= 0) {
		empty_dir(fd);
		close(fd);
	}
	unlinkat(c->tmp_fd, name, AT_REMOVEDIR);
}

int cache_layer_stage(struct cache *c, const char *digest, struct cache_layer_stage *st)
{
	char prefix[32];
	int r;

	*st = (struct cache_layer_stage){ .dirfd = -1, .pack_fd = -1 };
	if (!digest_is_valid(digest))
		return -EINVAL;
	snprintf(prefix, sizeof(prefix), "layer-%.12s", digest_hex(digest));
	r = cache_stage_new(c, prefix, &st->name, &st->dirfd);
	if (r < 0)
		return r;
	st->pack_fd = openat(st->dirfd, "pack", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (st->pack_fd < 0) {
		r = negative_errno();
		cache_layer_abandon(c, st);
		return r;
	}
	return 0;
}

void cache_layer_abandon(struct cache *c, struct cache_layer_stage *st)
{
	if (st->pack_fd >= 0)
		close(st->pack_fd);
	if (st->dirfd >= 0)
		close(st->dirfd);
	if (st->name)
		cache_stage_discard(c, st->name);
	free(st->name);
	*st = (struct cache_layer_stage){ .dirfd = -1, .pack_fd = -1 };
}

/* Flushes layers/, which makes the renames into it up to gen durable. */
static int flush_layers_dir(struct cache *c, uint_fast64_t gen)
{
	int r = flush_dir(c->layers_fd);
	uint_fast64_t seen = atomic_load(&c->layers_flushed);

	while (r == 0 && seen < gen &&
	       !atomic_compare_exchange_weak(&c->layers_flushed, &seen, gen))
		;
	return r;
}

/* layers/hex is a lazy layer not verified against its digest yet (its
 * "lazy" file, lazy.h). */
static bool layer_unverified(struct cache *c, const char *hex)
{
	char path[DIGEST_HEX_LEN + 8];
	struct stat st;

	snprintf(path, sizeof(path), "%s/lazy", hex);
	return fstatat(c->layers_fd, path, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* The stage, verified against the digest, takes the place of the lazy
 * layers/hex, which goes to tmp/ (under the stage's name: no "verified"
 * mark, so emptied with tmp/) for the images that still hold it. */
static int layer_replace(struct cache *c, const char *stage_name, const char *hex)
{
	char aside[128];

	if (renameat2(c->tmp_fd, stage_name, c->layers_fd, hex, RENAME_EXCHANGE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return negative_errno();
	/* a file system without the exchange: a moment with no layer */
	snprintf(aside, sizeof(aside), "replaced.%s", stage_name);
	if (renameat(c->layers_fd, hex, c->tmp_fd, aside) < 0 ||
	    renameat(c->tmp_fd, stage_name, c->layers_fd, hex) < 0)
		return negative_errno();
	return 0;
}

/* The files a lazy layer's stage writes (cache_layer_commit_lazy); the
 * rest of it are links to stored objects, and its empty pack. */
static int flush_lazy_stage(int stage_fd)
{
	static const char *const written[] = { "index", "toc", "lazy" };
	int r = 0;

	for (size_t i = 0; i < ARRAY_SIZE(written) && r == 0; i++) {
		_cleanup_close_ int fd = openat(stage_fd, written[i], O_RDONLY | O_CLOEXEC);

		r = fd < 0 ? negative_errno() : flush_data(fd);
	}
	return r;
}

int layer_publish(struct cache *c, int stage_fd, const char *stage_name, const char *hex,
		  const struct layer_index *li, bool lazy, bool *ret_renamed)
{
	uint_fast64_t gen;
	int r;

	/* Everything the layer holds is on stable storage before any of it
	 * is published: one syncfs for the whole stage costs less than a
	 * flush per file.  A lazy layer's stage holds three small files:
	 * each is flushed, and the lookup waiting for it does not wait for
	 * whatever else the file system has to write.  Then the objects'
	 * index links and the stage's own links to stored objects, then
	 * the layer itself (see "Durability" in docs/content-store.md). */
	r = lazy ? flush_lazy_stage(stage_fd) : flush_fs(stage_fd);
	if (r == 0)
		r = objects_enter(c, stage_fd, li, lazy);
	if (r == 0)
		r = flush_dir(c->objects_fd);
	if (r == 0)
		r = flush_dir(stage_fd);
	if (r < 0)
		return r;
	*ret_renamed = false;
	gen = atomic_fetch_add(&c->layers_renamed, 1) + 1;
	if (renameat(c->tmp_fd, stage_name, c->layers_fd, hex) < 0) {
		if (errno != EEXIST && errno != ENOTEMPTY)
			return negative_errno();
		/* (EEXIST: another pull of a sharing image won the race;
		 * its copy is as good as ours, and durable once the
		 * directory is; unless it is a lazy layer not verified
		 * against its digest, which a verified unpack replaces) */
		if (!lazy && layer_unverified(c, hex)) {
			r = layer_replace(c, stage_name, hex);
			if (r < 0)
				return r;
			*ret_renamed = true;
		}
	} else {
		*ret_renamed = true;
	}
	if (*ret_renamed) {
		/* The mark of a stage served before its publish (publish.c)
		 * has no use in layers/; removed only now, so that a stage
		 * left by a kill before its rename keeps it (its reference
		 * may be waiting).  A power cut may bring it back: unread. */
		unlinkat(stage_fd, "verified", 0);
		cache_touch(c);
	}
	return flush_layers_dir(c, gen);
}

static int layer_index_stage(struct cache_layer_stage *st, const struct layer_index *li)
{
	_cleanup_close_ int idx = -1;

	idx = openat(st->dirfd, "index", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (idx < 0)
		return negative_errno();
	return layer_index_write(li, idx);
}

/* background: served from the stage at once, published by publish.c */
static int layer_commit(struct cache *c, struct cache_layer_stage *st, const char *digest,
			const struct layer_index *li, bool lazy, bool background)
{
	bool renamed = false;
	int r;

	if (!digest_is_valid(digest)) {
		r = -EINVAL;
		goto out;
	}
	r = layer_index_stage(st, li);
	/* (where it cannot be, published here) */
	if (r == 0 && background && publisher_queue(c, st, digest_hex(digest)) == 0)
		return 0;
	if (r == 0)
		r = layer_publish(c, st->dirfd, st->name, digest_hex(digest), li, lazy, &renamed);
	if (renamed) {
		free(st->name); /* published: nothing left to discard */
		st->name = NULL;
	}
out:
	cache_layer_abandon(c, st);
	return r;
}

int cache_layer_commit(struct cache *c, struct cache_layer_stage *st, const char *digest,
		       const struct layer_index *li)
{
	return layer_commit(c, st, digest, li, false, true);
}

static int write_stage_file(int dirfd, const char *name, const void *buf, size_t len)
{
	_cleanup_close_ int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

	if (fd < 0)
		return negative_errno();
	return write_full(fd, buf, len);
}

int cache_layer_commit_lazy(struct cache *c, struct cache_layer_stage *st, const char *digest,
			    const struct layer_index *li, const char *lazy_text, const void *toc,
			    size_t toc_len)
{
	int r = write_stage_file(st->dirfd, "toc", toc, toc_len);

	if (r == 0)
		r = write_stage_file(st->dirfd, "lazy", lazy_text, strlen(lazy_text));
	if (r < 0) {
		cache_layer_abandon(c, st);
		return r;
	}
	return layer_commit(c, st, digest, li, true, false);
}

int cache_layer_open_dir(struct cache *c, const char *digest)
{
	if (!digest_is_valid(digest))
		return -EINVAL;
	return layer_openat(c, digest_hex(digest), NULL, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

void cache_ref_done(struct cache_ref *r)
{
	if (!r)
		return;
	free(r->reference);
	free(r->digest);
	free(r->index_digest);
	memset(r, 0, sizeof(*r));
}

static int ref_file_name(const char *reference, char name[DIGEST_HEX_LEN + 1])
{
	char d[DIGEST_STRING_MAX];
	int r = digest_buffer(reference, strlen(reference), d);

	if (r < 0)
		return r;
	memcpy(name, digest_hex(d), DIGEST_HEX_LEN + 1);
	return 0;
}

static int ref_parse(const char *buf, size_t len, struct cache_ref *ret)
{
	json_t *o = json_loadb(buf, len, 0, NULL);
	const char *ref, *dig, *idx;
	json_int_t at = 0, key = 0;
	int r = -EBADMSG;

	if (!o)
		return -EBADMSG;
	ref = json_string_value(json_object_get(o, "reference"));
	dig = json_string_value(json_object_get(o, "digest"));
	idx = json_string_value(json_object_get(o, "index_digest"));
	if (json_is_integer(json_object_get(o, "pulled_at")))
		at = json_integer_value(json_object_get(o, "pulled_at"));
	if (json_is_integer(json_object_get(o, "image_key")))
		key = json_integer_value(json_object_get(o, "image_key"));
	if (ref && dig && digest_is_valid(dig) && (!idx || digest_is_valid(idx))) {
		memset(ret, 0, sizeof(*ret));
		ret->reference = strdup(ref);
		ret->digest = strdup(dig);
		ret->index_digest = idx ? strdup(idx) : NULL;
		ret->pulled_at = at;
		/* Out of range: as if absent, the key is derived again. */
		ret->image_key = key > 0 && key <= UINT32_C(0x7fffffff) ? (uint32_t)key : 0;
		ret->credentials_known = json_is_boolean(json_object_get(o, "credentials"));
		ret->credentials = json_is_true(json_object_get(o, "credentials"));
		json_t *uid = json_object_get(o, "uid");
		if (json_is_integer(uid) && json_integer_value(uid) > 0 &&
		    json_integer_value(uid) < UINT32_MAX) {
			ret->user = true;
			ret->uid = (uint32_t)json_integer_value(uid);
		}
		if (!ret->reference || !ret->digest || (idx && !ret->index_digest)) {
			cache_ref_done(ret);
			r = -ENOMEM;
		} else {
			r = 0;
		}
	}
	json_decref(o);
	return r;
}

int cache_refs_load(struct cache *c, struct cache_ref **ret, size_t *ret_n)
{
	struct cache_ref *refs = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;
	int r;

	r = dir_stream(c->refs_fd, &d);
	if (r < 0)
		return r;
	while ((de = readdir(d))) {
		_cleanup_close_ int f = -1;
		_cleanup_free_ char *buf = NULL;
		size_t len;

		if (de->d_name[0] == '.')
			continue;
		f = openat(c->refs_fd, de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (f < 0 || read_all(f, 64 << 10, &buf, &len) < 0)
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			struct cache_ref *nr = realloc(refs, ncap * sizeof(*nr));
			if (!nr)
				break;
			refs = nr;
			cap = ncap;
		}
		if (ref_parse(buf, len, &refs[n]) == 0)
			n++;
	}
	closedir(d);
	*ret = refs;
	*ret_n = n;
	return 0;
}

int cache_ref_save(struct cache *c, const struct cache_ref *r)
{
	char name[DIGEST_HEX_LEN + 1];
	uint_fast64_t gen;
	json_t *o;
	char *s;
	int ret;

	ret = ref_file_name(r->reference, name);
	if (ret < 0)
		return ret;
	o = json_pack("{s:s, s:s, s:I}", "reference", r->reference, "digest", r->digest,
		      "pulled_at", (json_int_t)r->pulled_at);
	if (!o)
		return -ENOMEM;
	if (r->index_digest)
		json_object_set_new(o, "index_digest", json_string(r->index_digest));
	if (r->image_key)
		json_object_set_new(o, "image_key", json_integer(r->image_key));
	json_object_set_new(o, "credentials", json_boolean(r->credentials));
	if (r->user)
		json_object_set_new(o, "uid", json_integer(r->uid));
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!s)
		return -ENOMEM;
	/* Written by the publisher once the layers staged before it are
	 * published, else here. */
	ret = publisher_defer_ref(c, name, s);
	gen = atomic_load(&c->layers_renamed);
	if (ret == 0 && atomic_load(&c->layers_flushed) < gen)
		/* A layer this reference names may have been published by
		 * another pull that has not flushed layers/ yet. */
		ret = flush_layers_dir(c, gen);
	if (ret == 0)
		ret = write_atomic(c, c->refs_fd, name, s, strlen(s));
	free(s);
	return ret < 0 ? ret : 0;
}

int cache_ref_remove(struct cache *c, const char *reference)
{
	char name[DIGEST_HEX_LEN + 1];
	int r = ref_file_name(reference, name);

	if (r < 0)
		return r;
	publisher_forget_ref(c, name);
	if (unlinkat(c->refs_fd, name, 0) < 0) {
		if (errno != ENOENT)
			return negative_errno();
		return 0;
	}
	/* gone for good before GC may remove what it named */
	return flush_dir(c->refs_fd);
}

int cache_statfs(struct cache *c, uint64_t *ret_total, uint64_t *ret_free)
{
	struct statvfs sv;

	if (fstatvfs(c->dirfd, &sv) < 0)
		return negative_errno();
	*ret_total = (uint64_t)sv.f_blocks * sv.f_frsize;
	*ret_free = (uint64_t)sv.f_bavail * sv.f_frsize;
	return 0;
}

uint64_t file_bytes(int dirfd, const char *name)
{
	struct stat st;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	return (uint64_t)st.st_blocks * 512;
}

/* The pack and index of a layer, published or staged (publish.c). */
static uint64_t layer_own_bytes(struct cache *c, const char *digest)
{
	_cleanup_close_ int dfd =
		layer_openat(c, digest_hex(digest), NULL, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (dfd < 0)
		return 0;
	return file_bytes(dfd, "pack") + file_bytes(dfd, "index");
}

uint64_t cache_layer_bytes(struct cache *c, const char *digest)
{
	if (!digest_is_valid(digest))
		return 0;
	return layer_own_bytes(c, digest) + objects_layer_bytes(c, digest, NULL);
}

uint64_t cache_blob_bytes(struct cache *c, const char *digest)
{
	if (!digest_is_valid(digest))
		return 0;
	return file_bytes(c->blobs_fd, digest_hex(digest));
}

/* Calls fn("sha256:<name>") for each entry of dirfd named like a digest. */
static int foreach_digest(int dirfd, int (*fn)(void *userdata, const char *digest), void *userdata)
{
	struct dirent *de;
	DIR *d;
	int r;

	r = dir_stream(dirfd, &d);
	if (r < 0)
		return r;
	while (r == 0 && (de = readdir(d))) {
		char digest[DIGEST_STRING_MAX];

		if (strlen(de->d_name) != DIGEST_HEX_LEN)
			continue;
		snprintf(digest, sizeof(digest), "%s%s", DIGEST_SHA256_PREFIX, de->d_name);
		if (digest_is_valid(digest))
			r = fn(userdata, digest);
	}
	closedir(d);
	return r;
}

int cache_foreach_layer(struct cache *c, int (*fn)(void *userdata, const char *digest),
			void *userdata)
{
	return foreach_digest(c->layers_fd, fn, userdata);
}

int cache_foreach_blob(struct cache *c, int (*fn)(void *userdata, const char *digest),
		       void *userdata)
{
	return foreach_digest(c->blobs_fd, fn, userdata);
}

struct usage_ctx {
	struct cache *c;
	struct inoset seen;
	uint64_t bytes;
	unsigned layers;
};

static int usage_layer(void *userdata, const char *digest)
{
	struct usage_ctx *u = userdata;

	/* objects shared by several layers are counted once */
	u->bytes += layer_own_bytes(u->c, digest);
	u->bytes += objects_layer_bytes(u->c, digest, &u->seen);
	u->layers++;
	return 0;
}

static int usage_blob(void *userdata, const char *digest)
{
	struct usage_ctx *u = userdata;

	u->bytes += cache_blob_bytes(u->c, digest);
	return 0;
}

int cache_usage(struct cache *c, uint64_t *ret_bytes, unsigned *ret_layers)
{
	struct usage_ctx u = { .c = c };
	int r;

	r = cache_foreach_layer(c, usage_layer, &u);
	/* layers being published count from their commit on (GC after a
	 * pull must see them) */
	if (r == 0)
		r = publisher_foreach_staged(c, usage_layer, &u);
	if (r == 0)
		r = cache_foreach_blob(c, usage_blob, &u);
	inoset_done(&u.seen);
	if (r < 0)
		return r;
	*ret_bytes = u.bytes;
	if (ret_layers)
		*ret_layers = u.layers;
	return 0;
}

int cache_layer_remove(struct cache *c, const char *digest)
{
	char name[DIGEST_HEX_LEN + 32];

	if (!digest_is_valid(digest))
		return -EINVAL;
	snprintf(name, sizeof(name), "gc.%s", digest_hex(digest));
	if (renameat(c->layers_fd, digest_hex(digest), c->tmp_fd, name) < 0)
		return negative_errno();
	cache_touch(c);
	cache_stage_discard(c, name);
	return 0;
}

int cache_layer_retire(struct cache *c, const char *digest, char **ret_name, int *ret_dirfd)
{
	char name[DIGEST_HEX_LEN + 32];
	int fd;

	if (!digest_is_valid(digest))
		return -EINVAL;
	fd = open_dir(c->layers_fd, digest_hex(digest));
	if (fd < 0)
		return fd;
	snprintf(name, sizeof(name), "gone.%.12s.%08x", digest_hex(digest), (unsigned)random());
	if (renameat(c->layers_fd, digest_hex(digest), c->tmp_fd, name) < 0) {
		int r = negative_errno();

		close(fd);
		return r;
	}
	cache_touch(c);
	*ret_name = strdup(name);
	if (!*ret_name) {
		cache_stage_discard(c, name);
		close(fd);
		return -ENOMEM;
	}
	*ret_dirfd = fd;
	return 0;
}

void cache_retired_discard(struct cache *c, const char *name)
{
	cache_stage_discard(c, name);
}

int cache_blob_remove(struct cache *c, const char *digest)
{
	if (!digest_is_valid(digest))
		return -EINVAL;
	if (unlinkat(c->blobs_fd, digest_hex(digest), 0) < 0)
		return negative_errno();
	cache_touch(c);
	return 0;
}

/* The counters of FUSE requests and the control view in the mount:
 * .pullfs/status (JSON) and .pullfs/metrics (Prometheus text), each made
 * afresh at open. */
#include "fs-private.h"
#include "clock.h"
#include "fuseio.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control.h"
#include "macro.h"
#include "manager.h"

static const char *const fsop_names[FSOP_COUNT] = {
	"lookup",      "getattr",    "readlink", "open",      "read",	"opendir", "readdir",
	"readdirplus", "releasedir", "getxattr", "listxattr", "forget", "release", "other",
};

static const double fsop_bucket_bounds[FSOP_BUCKETS] = {
	1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1, 10,
};

void fsop_done(struct fs *fs, enum fsop op, int64_t start_ns)
{
	struct fsop_stats *st = &fs->ops[op];
	int64_t d = clock_mono_ns() - start_ns;
	double secs = (double)d / 1e9;
	unsigned b = 0;

	while (b < FSOP_BUCKETS && secs > fsop_bucket_bounds[b])
		b++;
	atomic_fetch_add(&st->count, 1);
	atomic_fetch_add(&st->sum_ns, (uint64_t)d);
	atomic_fetch_add(&st->buckets[b], 1);
}

void ctl_stat(struct fs *fs, fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mtim = st->st_ctim = st->st_atim = fs->started;
	st->st_blksize = 4096;
	if (ino == INO_CTL_DIR) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else {
		/* Made at open; read with direct I/O, so no size is needed. */
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
	}
}

void ctl_reply_entry(fuse_req_t req, struct fs *fs, fuse_ino_t ino)
{
	struct fuse_entry_param e = { 0 };

	e.ino = ino;
	e.generation = 1;
	ctl_stat(fs, ino, &e.attr);
	e.attr_timeout = e.entry_timeout = 1.0;
	fuse_reply_entry(req, &e);
}

/* who NULL: everything (the control socket admits only root and the
 * daemon's own user). */
static json_t *fs_status(struct fs *fs, const struct caller *who)
{
	json_t *o = NULL;

	if (manager_status(fs->manager, who, &o) < 0)
		return NULL;
	json_object_set_new(o, "pid", json_integer(getpid()));
	serve_status(fs, o);
	if (fs->mountpoint)
		json_object_set_new(o, "mountpoint", json_string(fs->mountpoint));
	if (fs->opts.control)
		json_object_set_new(o, "control_socket",
				    json_string(control_path(fs->opts.control)));
	return o;
}

json_t *ctl_status_for_control(void *userdata)
{
	return fs_status(userdata, NULL);
}

static void fs_metrics(struct fs *fs, FILE *f)
{
	manager_metrics(fs->manager, f);
	fprintf(f,
		"# HELP pullfs_passthrough Whether files stored as objects are read by the kernel directly (FUSE passthrough).\n"
		"# TYPE pullfs_passthrough gauge\n"
		"pullfs_passthrough %d\n"
		"# HELP pullfs_passthrough_opens_total Opens served in passthrough.\n"
		"# TYPE pullfs_passthrough_opens_total counter\n"
		"pullfs_passthrough_opens_total %llu\n"
		"# HELP pullfs_backing_files Backing files registered with the kernel now (open or kept for the next open).\n"
		"# TYPE pullfs_backing_files gauge\n"
		"pullfs_backing_files %u\n",
		fuseio_passthrough(fs->io) && !fs->opts.no_passthrough &&
			!atomic_load(&fs->passthrough_refused),
		(unsigned long long)atomic_load(&fs->passthrough_opens), files_backing_count(fs));
	fputs("# HELP pullfs_fuse_operations_total FUSE requests served, by operation.\n"
	      "# TYPE pullfs_fuse_operations_total counter\n",
	      f);
	for (unsigned i = 0; i < FSOP_COUNT; i++)
		fprintf(f, "pullfs_fuse_operations_total{op=\"%s\"} %llu\n", fsop_names[i],
			(unsigned long long)atomic_load(&fs->ops[i].count));
	fputs("# HELP pullfs_fuse_operation_duration_seconds Time to serve FUSE requests, by operation.\n"
	      "# TYPE pullfs_fuse_operation_duration_seconds histogram\n",
	      f);
	for (unsigned i = 0; i < FSOP_COUNT; i++) {
		uint64_t cum = 0;
		for (unsigned b = 0; b < FSOP_BUCKETS; b++) {
			cum += atomic_load(&fs->ops[i].buckets[b]);
			fprintf(f,
				"pullfs_fuse_operation_duration_seconds_bucket{op=\"%s\",le=\"%g\"} %llu\n",
				fsop_names[i], fsop_bucket_bounds[b], (unsigned long long)cum);
		}
		cum += atomic_load(&fs->ops[i].buckets[FSOP_BUCKETS]);
		fprintf(f,
			"pullfs_fuse_operation_duration_seconds_bucket{op=\"%s\",le=\"+Inf\"} %llu\n"
			"pullfs_fuse_operation_duration_seconds_sum{op=\"%s\"} %.9f\n"
			"pullfs_fuse_operation_duration_seconds_count{op=\"%s\"} %llu\n",
			fsop_names[i], (unsigned long long)cum, fsop_names[i],
			(double)atomic_load(&fs->ops[i].sum_ns) / 1e9, fsop_names[i],
			(unsigned long long)cum);
	}
}

/* A control file's contents, made at open.  Every one open is on a list,
 * so that those the kernel never released (the daemon stopping with the
 * file open, a RELEASE not yet read) are freed with the filesystem. */
struct ctlbuf {
	char *data;
	size_t len;
	struct dlist_node node; /* fs.ctl_open_bufs; fs.ctl_lock */
};

static void ctlbuf_free_locked(struct fs *fs, struct ctlbuf *b)
{
	dlist_remove(&fs->ctl_open_bufs, &b->node);
	free(b->data);
	free(b);
}

void ctl_free_all(struct fs *fs)
{
	struct dlist_node *n;

	pthread_mutex_lock(&fs->ctl_lock);
	/* the list taken whole, then each freed after its successor is
	 * known */
	n = fs->ctl_open_bufs.head;
	fs->ctl_open_bufs = (struct dlist){ 0 };
	while (n) {
		struct ctlbuf *b = dlist_entry(n, struct ctlbuf, node);

		n = n->next;
		free(b->data);
		free(b);
	}
	pthread_mutex_unlock(&fs->ctl_lock);
}

/* The contents of a control file now, as req's caller may see them (the
 * file is read with direct I/O: the kernel keeps no copy for another
 * user), in a new buffer; NULL when out of memory. */
static struct ctlbuf *ctlbuf_make(fuse_req_t req, struct fs *fs, fuse_ino_t ino)
{
	struct ctlbuf *b = calloc(1, sizeof(*b));
	FILE *f;

	if (!b)
		return NULL;
	f = open_memstream(&b->data, &b->len);
	if (!f) {
		free(b);
		return NULL;
	}
	if (ino == INO_CTL_STATUS) {
		struct caller who;

		caller_of(req, &who);
		json_t *o = fs_status(fs, &who);
		if (o) {
			json_dumpf(o, f, JSON_INDENT(2));
			fputc('\n', f);
			json_decref(o);
		}
	} else {
		fs_metrics(fs, f);
	}
	fclose(f);
	return b;
}

void ctl_open(fuse_req_t req, struct fs *fs, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ctlbuf *b = ctlbuf_make(req, fs, ino);

	if (!b) {
		reply_err(req, -ENOMEM);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)b;
	fi->direct_io = 1;
	pthread_mutex_lock(&fs->ctl_lock);
	dlist_push(&fs->ctl_open_bufs, &b->node);
	pthread_mutex_unlock(&fs->ctl_lock);
	if (fuse_reply_open(req, fi) != 0) {
		/* no RELEASE will come for it */
		pthread_mutex_lock(&fs->ctl_lock);
		ctlbuf_free_locked(fs, b);
		pthread_mutex_unlock(&fs->ctl_lock);
	}
}

/* A RELEASE can come while a READ of the same handle is still being
 * answered (the reader was killed mid-request), so both hold this lock
 * while they touch the buffer. */
/* The buffer of a handle, NULL for one this process did not give out (a
 * file opened before a takeover reads as empty).  fs.ctl_lock held. */
static struct ctlbuf *ctlbuf_of_locked(struct fs *fs, uint64_t fh)
{
	for (struct dlist_node *n = fs->ctl_open_bufs.head; n; n = n->next)
		if ((uint64_t)(uintptr_t)dlist_entry(n, struct ctlbuf, node) == fh)
			return dlist_entry(n, struct ctlbuf, node);
	return NULL;
}

void ctl_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct fs *fs = fs_of(req);
	struct ctlbuf *b, *fresh = NULL;

	pthread_mutex_lock(&fs->ctl_lock);
	b = ctlbuf_of_locked(fs, fi->fh);
	if (!b) {
		/* opened before a takeover: the contents as they are now */
		pthread_mutex_unlock(&fs->ctl_lock);
		b = fresh = ctlbuf_make(req, fs, ino);
		if (!b) {
			reply_err(req, -ENOMEM);
			return;
		}
		pthread_mutex_lock(&fs->ctl_lock);
	}
	if (off < 0 || (size_t)off >= b->len)
		fuse_reply_buf(req, NULL, 0);
	else
		fuse_reply_buf(req, b->data + off, MIN(size, b->len - (size_t)off));
	pthread_mutex_unlock(&fs->ctl_lock);
	if (fresh) {
		free(fresh->data);
		free(fresh);
	}
}

void ctl_release(struct fs *fs, struct fuse_file_info *fi)
{
	pthread_mutex_lock(&fs->ctl_lock);
	struct ctlbuf *b = ctlbuf_of_locked(fs, fi->fh);
	if (b)
		ctlbuf_free_locked(fs, b);
	pthread_mutex_unlock(&fs->ctl_lock);
}

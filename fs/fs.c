/* FUSE low-level operations.
 *
 * Three kinds of node, told apart by the inode number alone so the hot
 * path needs no table: FUSE_ROOT_ID; namespace nodes (images/ and the
 * host / repository directories below it, plus docker.io short-form
 * symlinks), whose ino is the address of a struct nsnode; and nodes inside
 * an image, whose ino has the top bit set, the image's id in the bits
 * below and the node's index in its tree in the low 32 bits, so two names
 * of one digest share the tree and still differ in every node id.  Every
 * lookup the kernel holds on an image node holds a reference on its image,
 * so an image lives exactly as long as the kernel can still ask about it. */
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)

#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "control.h"
#include "fuseio.h"
#include "strmap.h"
#include "macro.h"
#include "manager.h"
#include "reference.h"

#define INO_IMAGE_BIT (UINT64_C(1) << 63)
/* The control view: small fixed numbers, below any heap address and with
 * the image bit clear. */
#define INO_CTL_DIR 0x100u
#define INO_CTL_STATUS 0x200u
#define INO_CTL_METRICS 0x300u
#define CTL_DIR_NAME ".pullfs"

/* FUSE operations counted for the metrics. */
enum fsop {
	FSOP_LOOKUP,
	FSOP_GETATTR,
	FSOP_READLINK,
	FSOP_OPEN,
	FSOP_READ,
	FSOP_OPENDIR,
	FSOP_READDIR,
	FSOP_READDIRPLUS,
	FSOP_GETXATTR,
	FSOP_LISTXATTR,
	FSOP_FORGET,
	FSOP_OTHER,
	FSOP_COUNT,
};

static const char *const fsop_names[FSOP_COUNT] = {
	"lookup", "getattr", "readlink", "open", "read", "opendir",
	"readdir", "readdirplus", "getxattr", "listxattr", "forget", "other",
};

#define FSOP_BUCKETS 7
static const double fsop_bucket_bounds[FSOP_BUCKETS] = {
	1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1, 10,
};

struct fsop_stats {
	atomic_uint_fast64_t count;
	atomic_uint_fast64_t sum_ns;
	atomic_uint_fast64_t buckets[FSOP_BUCKETS + 1];
};

enum nskind {
	NS_DIR,
	NS_SYMLINK,
};

/* Namespace nodes are interned by path: one path, one node, one inode
 * number for as long as the kernel knows it.  A second node for a path
 * the kernel still holds would make the image directory below it appear
 * under two parents, which the kernel refuses (ESTALE). */
struct nsnode {
	uint64_t nlookup; /* fs.ns_lock */
	char *key;	  /* path below images/, "" for images/ itself */
	bool permanent;	 /* images/ itself: never freed */
	enum nskind kind;
	bool short_form; /* below a docker.io short name: closing names are symlinks */
	unsigned depth;	 /* path components below images/ */
	char *prefix;	 /* NS_DIR: canonical components so far, "" for images/ */
	char *target;	 /* NS_SYMLINK */
};

struct fs {
	struct manager *manager;
	struct fs_options opts;
	struct nsnode images; /* images/ */
	struct timespec started;
	struct fuse_session *session;
	char *mountpoint;
	pthread_mutex_t ns_lock;
	struct strmap *nsnodes; /* key -> struct nsnode *; ns_lock */
	struct fsop_stats ops[FSOP_COUNT];
};

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void fsop_done(struct fs *fs, enum fsop op, int64_t start_ns)
{
	struct fsop_stats *st = &fs->ops[op];
	int64_t d = mono_ns() - start_ns;
	double secs = (double)d / 1e9;
	unsigned b = 0;

	while (b < FSOP_BUCKETS && secs > fsop_bucket_bounds[b])
		b++;
	atomic_fetch_add(&st->count, 1);
	atomic_fetch_add(&st->sum_ns, (uint64_t)d);
	atomic_fetch_add(&st->buckets[b], 1);
}

static bool ino_is_ctl(fuse_ino_t ino)
{
	return ino == INO_CTL_DIR || ino == INO_CTL_STATUS || ino == INO_CTL_METRICS;
}

static struct fs *fs_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static bool ino_is_image(fuse_ino_t ino)
{
	return (ino & INO_IMAGE_BIT) != 0;
}

static fuse_ino_t node_ino(const struct image *img, const struct tinode *t)
{
	return INO_IMAGE_BIT | (fuse_ino_t)image_id(img) << 32 | tinode_index(t);
}

/* The node an image ino names, and its image; NULL for an ino the kernel
 * should not have (it holds a reference on every image it asks about). */
static const struct tinode *ino_node(struct fs *fs, fuse_ino_t ino,
				     struct image **ret_img)
{
	struct image *img = manager_image(fs->manager,
					  (uint32_t)((ino & ~INO_IMAGE_BIT) >> 32));

	*ret_img = img;
	return img ? image_inode(img, (uint32_t)ino) : NULL;
}

static struct nsnode *ino_nsnode(fuse_ino_t ino)
{
	return (struct nsnode *)(uintptr_t)ino;
}

/* The one place where a negative errno becomes a FUSE reply. */
static void reply_err(fuse_req_t req, int r)
{
	fuse_reply_err(req, r < 0 ? -r : r);
}

/* ---- attributes ------------------------------------------------------ */

static void ns_stat(struct fs *fs, fuse_ino_t ino, const struct nsnode *n,
		    struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = 0;
	st->st_gid = 0;
	st->st_mtim = st->st_ctim = st->st_atim = fs->started;
	st->st_blksize = 4096;
	if (n && n->kind == NS_SYMLINK) {
		st->st_mode = S_IFLNK | 0777;
		st->st_nlink = 1;
		st->st_size = (off_t)strlen(n->target);
	} else {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		st->st_size = 4096;
	}
}

static void image_stat(fuse_ino_t ino, const struct tinode *t, struct stat *st)
{
	tinode_fill_stat(t, st);
	st->st_ino = ino;
}

/* ---- namespace nodes ------------------------------------------------- */

static struct nsnode *nsnode_new(enum nskind kind, bool short_form,
				 unsigned depth, char *prefix, char *target)
{
	struct nsnode *n = calloc(1, sizeof(*n));

	if (!n) {
		free(prefix);
		free(target);
		return NULL;
	}
	n->nlookup = 1;
	n->kind = kind;
	n->short_form = short_form;
	n->depth = depth;
	n->prefix = prefix;
	n->target = target;
	return n;
}

static void nsnode_free(struct nsnode *n)
{
	free(n->key);
	free(n->prefix);
	free(n->target);
	free(n);
}

static void nsnode_forget(struct fs *fs, struct nsnode *n, uint64_t count)
{
	if (n->permanent)
		return;
	pthread_mutex_lock(&fs->ns_lock);
	if (n->nlookup <= count) {
		if (strmap_get(fs->nsnodes, n->key) == n)
			strmap_remove(fs->nsnodes, n->key);
		nsnode_free(n);
	} else {
		n->nlookup -= count;
	}
	pthread_mutex_unlock(&fs->ns_lock);
}

/* The node already known for key with one more lookup, or NULL. */
static struct nsnode *nsnode_find(struct fs *fs, const char *key)
{
	struct nsnode *n;

	pthread_mutex_lock(&fs->ns_lock);
	n = strmap_get(fs->nsnodes, key);
	if (n)
		n->nlookup++;
	pthread_mutex_unlock(&fs->ns_lock);
	return n;
}

/* Makes the fresh node n the one for key, or, when another lookup won
 * the race, frees n and returns that one (with a lookup taken). */
static struct nsnode *nsnode_intern(struct fs *fs, const char *key, struct nsnode *n)
{
	struct nsnode *other;

	if (!n)
		return NULL;
	n->key = strdup(key);
	if (!n->key) {
		nsnode_free(n);
		return NULL;
	}
	pthread_mutex_lock(&fs->ns_lock);
	other = strmap_get(fs->nsnodes, key);
	if (other) {
		other->nlookup++;
	} else if (strmap_put(fs->nsnodes, key, n) < 0) {
		pthread_mutex_unlock(&fs->ns_lock);
		nsnode_free(n);
		return NULL;
	}
	pthread_mutex_unlock(&fs->ns_lock);
	if (other) {
		nsnode_free(n);
		return other;
	}
	return n;
}

static char *join(const char *a, const char *b)
{
	char *s;

	if (!*a)
		return strdup(b);
	if (asprintf(&s, "%s/%s", a, b) < 0)
		return NULL;
	return s;
}

/* A docker.io short name in path form: a symlink to the canonical path,
 * so `images/alpine:3.19` and `images/docker.io/library/alpine:3.19` are
 * one image, one pull, one set of inodes. */
static int short_form_symlink(const struct nsnode *parent, const char *name,
			      struct nsnode **ret)
{
	_cleanup_free_ char *full = NULL, *canonical = NULL;
	struct reference *ref = NULL;
	char *target;
	size_t len;
	int r;

	full = join(parent->prefix, name);
	if (!full)
		return -ENOMEM;
	r = reference_parse(full, 0, &ref);
	if (r < 0)
		return r;
	canonical = reference_to_string(ref);
	reference_free(ref);
	if (!canonical)
		return -ENOMEM;
	len = 3 * parent->depth + strlen(canonical) + 1;
	target = malloc(len);
	if (!target)
		return -ENOMEM;
	target[0] = '\0';
	for (unsigned i = 0; i < parent->depth; i++)
		strcat(target, "../");
	strcat(target, canonical);
	*ret = nsnode_new(NS_SYMLINK, true, parent->depth + 1, NULL, target);
	return *ret ? 0 : -ENOMEM;
}

static void caller_of(fuse_req_t req, struct caller *c)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	char path[64];
	int fd;

	memset(c, 0, sizeof(*c));
	c->pid = ctx->pid;
	c->uid = ctx->uid;
	c->gid = ctx->gid;
	snprintf(path, sizeof(path), "/proc/%ld/comm", (long)ctx->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, c->comm, sizeof(c->comm) - 1);
		if (n > 0) {
			c->comm[n] = '\0';
			c->comm[strcspn(c->comm, "\n")] = '\0';
		}
		close(fd);
	}
}

static void reply_image_root(fuse_req_t req, struct fs *fs, struct image *img)
{
	struct fuse_entry_param e = { 0 };
	const struct tinode *root = image_root(img);

	e.ino = node_ino(img, root);
	e.generation = 1;
	image_stat(e.ino, root, &e.attr);
	e.attr_timeout = fs->opts.content_timeout;
	e.entry_timeout = fs->opts.image_timeout;
	/* The reference from ensure becomes the kernel's lookup reference. */
	if (fuse_reply_entry(req, &e) != 0)
		image_unref(img, 1);
}

static void reply_nsnode(fuse_req_t req, struct fs *fs, struct nsnode *n)
{
	struct fuse_entry_param e = { 0 };

	e.ino = (fuse_ino_t)(uintptr_t)n;
	e.generation = 1;
	ns_stat(fs, e.ino, n, &e.attr);
	e.attr_timeout = fs->opts.namespace_timeout;
	e.entry_timeout = fs->opts.namespace_timeout;
	if (fuse_reply_entry(req, &e) != 0)
		nsnode_forget(fs, n, 1);
}

/* A lookup of images/<ref> waiting for ensure.  No worker thread waits
 * with it: the flight's end answers it from the flight's thread, or an
 * interrupt answers EINTR at once, and a lookup never waits for another
 * reference's pull.  Which of the two answers is decided under lc.lock;
 * the request's own lock, which libfuse holds around every interrupt
 * callback and fuse_req_interrupt_func() takes, keeps the callback from
 * running once the flight's end has unregistered it. */
struct lookup_call {
	pthread_mutex_t lock;
	atomic_int refs; /* the handler's and the pending ensure's */
	fuse_req_t req;
	struct fs *fs;
	struct ensure_call *call; /* lock */
	bool interrupted;	  /* lock */
	bool finished;		  /* lock: the answer is decided */
	uint64_t parent;
	int64_t start_ns;
	char name[];
};

static void lookup_call_put(struct lookup_call *lc)
{
	if (atomic_fetch_sub(&lc->refs, 1) == 1) {
		pthread_mutex_destroy(&lc->lock);
		free(lc);
	}
}

static void lookup_reply(struct lookup_call *lc, int r, struct image *img)
{
	struct fs *fs = lc->fs;

	if (r < 0) {
		reply_err(lc->req, r);
	} else {
		image_note_dentry(img, lc->parent, lc->name);
		reply_image_root(lc->req, fs, img);
	}
	fsop_done(fs, FSOP_LOOKUP, lc->start_ns);
}

static void lookup_done(void *userdata, int r, struct image *img)
{
	struct lookup_call *lc = userdata;

	/* The handler may still be between starting ensure and recording
	 * the call: wait for it. */
	pthread_mutex_lock(&lc->lock);
	lc->finished = true;
	pthread_mutex_unlock(&lc->lock);
	fuse_req_interrupt_func(lc->req, NULL, NULL);
	lookup_reply(lc, r, img);
	lookup_call_put(lc);
}

/* Called with the request's lock held. */
static void lookup_interrupt(fuse_req_t req, void *data)
{
	struct lookup_call *lc = data;
	bool claimed = false;

	pthread_mutex_lock(&lc->lock);
	lc->interrupted = true;
	if (lc->call && !lc->finished && ensure_call_cancel(lc->call))
		claimed = lc->finished = true;
	pthread_mutex_unlock(&lc->lock);
	if (claimed) {
		lookup_reply(lc, -EINTR, NULL);
		lookup_call_put(lc);
	}
}

/* Returns true when the answer is left to the flight or an interrupt. */
static bool image_lookup(fuse_req_t req, struct fs *fs, struct nsnode *parent,
			 const char *name)
{
	_cleanup_free_ char *full = join(parent->prefix, name);
	struct lookup_call *lc;
	struct ensure_call *call;
	struct image *img = NULL;
	struct caller who;
	bool claimed = false;
	int r;

	lc = full ? calloc(1, sizeof(*lc) + strlen(name) + 1) : NULL;
	if (!lc) {
		reply_err(req, -ENOMEM);
		return false;
	}
	pthread_mutex_init(&lc->lock, NULL);
	atomic_init(&lc->refs, 2);
	lc->req = req;
	lc->fs = fs;
	lc->parent = (uint64_t)(uintptr_t)parent;
	lc->start_ns = mono_ns();
	strcpy(lc->name, name);
	caller_of(req, &who);
	/* Registered first: an interrupt that came already is noted now. */
	fuse_req_interrupt_func(req, lookup_interrupt, lc);
	pthread_mutex_lock(&lc->lock);
	r = manager_ensure_start(fs->manager, full, &who, lookup_done, lc, &call, &img);
	if (r != 0) {
		lc->finished = true;
	} else {
		lc->call = call;
		if (lc->interrupted && ensure_call_cancel(call))
			claimed = lc->finished = true;
	}
	pthread_mutex_unlock(&lc->lock);
	if (r == 0 && !claimed) {
		lookup_call_put(lc);
		return true;
	}
	fuse_req_interrupt_func(req, NULL, NULL);
	lookup_reply(lc, claimed ? -EINTR : r, img);
	lookup_call_put(lc);
	lookup_call_put(lc);
	return true;
}

/* Returns true when the lookup was timed by its own answer. */
static bool ns_lookup(fuse_req_t req, struct fs *fs, struct nsnode *parent,
		      const char *name)
{
	_cleanup_free_ char *key = NULL;
	struct nsnode *n = NULL;
	bool is_host, closes;
	int r;

	if (parent->kind != NS_DIR) {
		reply_err(req, -ENOTDIR);
		return false;
	}
	/* Path form: a registry host opens the reference only in the first
	 * position; elsewhere, and for names that are not hosts, the docker.io
	 * short-name rules apply. */
	is_host = parent->depth == 0 && (reference_component_is_host(name) ||
					 manager_is_known_host(fs->manager, name));
	closes = !is_host && reference_component_closes(name);
	if (closes && parent->depth > 0 && !parent->short_form)
		return image_lookup(req, fs, parent, name);

	key = join(parent->key, name);
	if (!key) {
		reply_err(req, -ENOMEM);
		return false;
	}
	n = nsnode_find(fs, key);
	if (n) {
		reply_nsnode(req, fs, n);
		return false;
	}
	if (is_host) {
		char *prefix = strdup(name);
		n = prefix ? nsnode_new(NS_DIR, false, 1, prefix, NULL) : NULL;
	} else if (closes) {
		r = short_form_symlink(parent, name, &n);
		if (r < 0) {
			reply_err(req, r);
			return false;
		}
	} else if (!reference_path_component_is_valid(name)) {
		reply_err(req, -EINVAL);
		return false;
	} else {
		bool short_form = parent->depth == 0 || parent->short_form;
		char *prefix = parent->depth == 0 ? join(REFERENCE_DEFAULT_DOMAIN, name)
						  : join(parent->prefix, name);
		n = prefix ? nsnode_new(NS_DIR, short_form, parent->depth + 1, prefix, NULL)
			   : NULL;
	}
	n = nsnode_intern(fs, key, n);
	if (!n) {
		reply_err(req, -ENOMEM);
		return false;
	}
	reply_nsnode(req, fs, n);
	return false;
}

/* ---- the control view ------------------------------------------------ */

static void ctl_stat(struct fs *fs, fuse_ino_t ino, struct stat *st)
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

static void ctl_reply_entry(fuse_req_t req, struct fs *fs, fuse_ino_t ino)
{
	struct fuse_entry_param e = { 0 };

	e.ino = ino;
	e.generation = 1;
	ctl_stat(fs, ino, &e.attr);
	e.attr_timeout = e.entry_timeout = 1.0;
	fuse_reply_entry(req, &e);
}

static json_t *fs_status(struct fs *fs)
{
	void *j = NULL;
	json_t *o;

	if (manager_status(fs->manager, &j) < 0)
		return NULL;
	o = j;
	json_object_set_new(o, "pid", json_integer(getpid()));
	if (fs->mountpoint)
		json_object_set_new(o, "mountpoint", json_string(fs->mountpoint));
	if (fs->opts.control)
		json_object_set_new(o, "control_socket",
				    json_string(control_path(fs->opts.control)));
	return o;
}

static void *status_for_control(void *userdata)
{
	return fs_status(userdata);
}

static void fs_metrics(struct fs *fs, FILE *f)
{
	manager_metrics(fs->manager, f);
	fputs("# HELP pullfs_fuse_operations_total FUSE requests served, by operation.\n"
	      "# TYPE pullfs_fuse_operations_total counter\n", f);
	for (unsigned i = 0; i < FSOP_COUNT; i++)
		fprintf(f, "pullfs_fuse_operations_total{op=\"%s\"} %llu\n", fsop_names[i],
			(unsigned long long)atomic_load(&fs->ops[i].count));
	fputs("# HELP pullfs_fuse_operation_duration_seconds Time to serve FUSE requests, by operation.\n"
	      "# TYPE pullfs_fuse_operation_duration_seconds histogram\n", f);
	for (unsigned i = 0; i < FSOP_COUNT; i++) {
		uint64_t cum = 0;
		for (unsigned b = 0; b < FSOP_BUCKETS; b++) {
			cum += atomic_load(&fs->ops[i].buckets[b]);
			fprintf(f, "pullfs_fuse_operation_duration_seconds_bucket{op=\"%s\",le=\"%g\"} %llu\n",
				fsop_names[i], fsop_bucket_bounds[b], (unsigned long long)cum);
		}
		cum += atomic_load(&fs->ops[i].buckets[FSOP_BUCKETS]);
		fprintf(f, "pullfs_fuse_operation_duration_seconds_bucket{op=\"%s\",le=\"+Inf\"} %llu\n"
			   "pullfs_fuse_operation_duration_seconds_sum{op=\"%s\"} %.9f\n"
			   "pullfs_fuse_operation_duration_seconds_count{op=\"%s\"} %llu\n",
			fsop_names[i], (unsigned long long)cum, fsop_names[i],
			(double)atomic_load(&fs->ops[i].sum_ns) / 1e9, fsop_names[i],
			(unsigned long long)cum);
	}
}

struct ctlbuf {
	char *data;
	size_t len;
};

static void ctl_open(fuse_req_t req, struct fs *fs, fuse_ino_t ino,
		     struct fuse_file_info *fi)
{
	struct ctlbuf *b = calloc(1, sizeof(*b));
	FILE *f;

	if (!b) {
		reply_err(req, -ENOMEM);
		return;
	}
	f = open_memstream(&b->data, &b->len);
	if (!f) {
		free(b);
		reply_err(req, -ENOMEM);
		return;
	}
	if (ino == INO_CTL_STATUS) {
		json_t *o = fs_status(fs);
		if (o) {
			json_dumpf(o, f, JSON_INDENT(2));
			fputc('\n', f);
			json_decref(o);
		}
	} else {
		fs_metrics(fs, f);
	}
	fclose(f);
	fi->fh = (uint64_t)(uintptr_t)b;
	fi->direct_io = 1;
	fuse_reply_open(req, fi);
}

/* A RELEASE can come while a READ of the same handle is still being
 * answered (the reader was killed mid-request), so both hold this lock
 * while they touch the buffer. */
static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;

static void ctl_read(fuse_req_t req, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct ctlbuf *b;

	pthread_mutex_lock(&ctl_lock);
	b = (struct ctlbuf *)(uintptr_t)fi->fh;
	if (!b || off < 0 || (size_t)off >= b->len)
		fuse_reply_buf(req, NULL, 0);
	else
		fuse_reply_buf(req, b->data + off, MIN(size, b->len - (size_t)off));
	pthread_mutex_unlock(&ctl_lock);
}

/* ---- operations ------------------------------------------------------ */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	unsigned want = FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE |
			FUSE_CAP_READDIRPLUS | FUSE_CAP_ASYNC_READ |
			FUSE_CAP_PARALLEL_DIROPS | FUSE_CAP_CACHE_SYMLINKS;

	conn->want |= conn->capable & want;
	/* Image content never changes under an inode, so the kernel may
	 * keep what it read across opens. */
	conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
	conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
}

/* Returns true when the lookup was timed by its own answer. */
static bool do_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs *fs = fs_of(req);

	if (parent == FUSE_ROOT_ID && !strcmp(name, CTL_DIR_NAME)) {
		ctl_reply_entry(req, fs, INO_CTL_DIR);
		return false;
	}
	if (parent == INO_CTL_DIR) {
		if (!strcmp(name, "status"))
			ctl_reply_entry(req, fs, INO_CTL_STATUS);
		else if (!strcmp(name, "metrics"))
			ctl_reply_entry(req, fs, INO_CTL_METRICS);
		else
			reply_err(req, -ENOENT);
		return false;
	}
	if (ino_is_ctl(parent)) {
		reply_err(req, -ENOTDIR);
		return false;
	}
	if (parent == FUSE_ROOT_ID) {
		if (!strcmp(name, "images")) {
			struct fuse_entry_param e = { 0 };
			e.ino = (fuse_ino_t)(uintptr_t)&fs->images;
			ns_stat(fs, e.ino, &fs->images, &e.attr);
			e.attr_timeout = e.entry_timeout = fs->opts.content_timeout;
			fuse_reply_entry(req, &e);
			return false;
		}
		reply_err(req, -ENOENT);
		return false;
	}
	if (!ino_is_image(parent))
		return ns_lookup(req, fs, ino_nsnode(parent), name);

	struct image *img;
	const struct tinode *dir = ino_node(fs, parent, &img), *t;
	if (!dir) {
		reply_err(req, -ESTALE);
		return false;
	}
	if (!S_ISDIR(dir->mode)) {
		reply_err(req, -ENOTDIR);
		return false;
	}
	t = tinode_lookup(dir, name);
	if (!t) {
		/* Image content is immutable: absence can be cached too. */
		struct fuse_entry_param e = { 0 };
		e.entry_timeout = fs->opts.content_timeout;
		fuse_reply_entry(req, &e);
		return false;
	}
	struct fuse_entry_param e = { 0 };
	e.ino = node_ino(img, t);
	e.generation = 1;
	image_stat(e.ino, t, &e.attr);
	e.attr_timeout = e.entry_timeout = fs->opts.content_timeout;
	image_ref(img, 1);
	if (fuse_reply_entry(req, &e) != 0)
		image_unref(img, 1);
	return false;
}

static void forget_one(struct fs *fs, fuse_ino_t ino, uint64_t nlookup)
{
	struct image *img;

	if (ino == FUSE_ROOT_ID || ino_is_ctl(ino))
		return;
	if (ino_is_image(ino)) {
		if (ino_node(fs, ino, &img))
			image_unref(img, nlookup);
	} else
		nsnode_forget(fs, ino_nsnode(ino), nlookup);
}

static void do_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	forget_one(fs_of(req), ino, nlookup);
	fuse_reply_none(req);
}

static void do_forget_multi(fuse_req_t req, size_t count,
			    struct fuse_forget_data *forgets)
{
	for (size_t i = 0; i < count; i++)
		forget_one(fs_of(req), forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void do_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = fs_of(req);
	struct stat st;

	if (ino == FUSE_ROOT_ID) {
		ns_stat(fs, ino, NULL, &st);
		fuse_reply_attr(req, &st, fs->opts.namespace_timeout);
	} else if (ino_is_ctl(ino)) {
		ctl_stat(fs, ino, &st);
		fuse_reply_attr(req, &st, 1.0);
	} else if (ino_is_image(ino)) {
		struct image *img;
		const struct tinode *t = ino_node(fs, ino, &img);
		if (!t) {
			reply_err(req, -ESTALE);
			return;
		}
		image_stat(ino, t, &st);
		fuse_reply_attr(req, &st, fs->opts.content_timeout);
	} else {
		ns_stat(fs, ino, ino_nsnode(ino), &st);
		fuse_reply_attr(req, &st, fs->opts.namespace_timeout);
	}
}

static void do_readlink(fuse_req_t req, fuse_ino_t ino)
{
	if (ino == FUSE_ROOT_ID || ino_is_ctl(ino)) {
		reply_err(req, -EINVAL);
	} else if (ino_is_image(ino)) {
		struct image *img;
		const struct tinode *t = ino_node(fs_of(req), ino, &img);
		if (t && S_ISLNK(t->mode) && t->link)
			fuse_reply_readlink(req, t->link);
		else
			reply_err(req, -EINVAL);
	} else {
		struct nsnode *n = ino_nsnode(ino);
		if (n->kind == NS_SYMLINK)
			fuse_reply_readlink(req, n->target);
		else
			reply_err(req, -EINVAL);
	}
}

static void do_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if ((fi->flags & O_ACCMODE) != O_RDONLY ||
	    (fi->flags & (O_TRUNC | O_APPEND | O_CREAT))) {
		reply_err(req, -EROFS);
		return;
	}
	if (ino == INO_CTL_STATUS || ino == INO_CTL_METRICS) {
		ctl_open(req, fs_of(req), ino, fi);
		return;
	}
	if (!ino_is_image(ino)) {
		reply_err(req, -EISDIR);
		return;
	}
	struct image *img;
	const struct tinode *t = ino_node(fs_of(req), ino, &img);
	if (!t) {
		reply_err(req, -ESTALE);
		return;
	}
	if (S_ISDIR(t->mode)) {
		reply_err(req, -EISDIR);
		return;
	}
	if (!S_ISREG(t->mode)) {
		reply_err(req, -ENXIO);
		return;
	}
	fi->keep_cache = 1;
	fi->noflush = 1;
	fi->fh = 0;
	/* Counted before the reply: GC must never see the file closed. */
	image_open(img);
	if (fuse_reply_open(req, fi) != 0)
		image_close(img);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino == INO_CTL_STATUS || ino == INO_CTL_METRICS) {
		pthread_mutex_lock(&ctl_lock);
		struct ctlbuf *b = (struct ctlbuf *)(uintptr_t)fi->fh;
		if (b) {
			free(b->data);
			free(b);
		}
		pthread_mutex_unlock(&ctl_lock);
	} else if (ino_is_image(ino)) {
		struct image *img;
		if (ino_node(fs_of(req), ino, &img))
			image_close(img);
	}
	fuse_reply_err(req, 0);
}

static void do_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	const struct tinode *t;
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(0);
	struct image *img;
	int fd;

	if (ino == INO_CTL_STATUS || ino == INO_CTL_METRICS) {
		ctl_read(req, size, off, fi);
		return;
	}
	if (!ino_is_image(ino)) {
		reply_err(req, -EISDIR);
		return;
	}
	t = ino_node(fs_of(req), ino, &img);
	if (!t) {
		reply_err(req, -ESTALE);
		return;
	}
	if (off < 0 || (uint64_t)off >= t->size) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > t->size - (uint64_t)off)
		size = (size_t)(t->size - (uint64_t)off);
	fd = image_file_fd(img, t);
	if (fd < 0) {
		reply_err(req, -EIO);
		return;
	}
	buf.buf[0].size = size;
	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = fd;
	buf.buf[0].pos = (off_t)(t->data_off + (uint64_t)off);
	fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
	image_file_fd_put(img, t);
}

/* Directory listings of namespace directories are taken once, at opendir,
 * so that offsets stay meaningful while the cache changes. */
struct nslisting {
	bool files; /* entries are regular files (the control view) */
	char **names;
	bool *is_image;
	size_t n, cap;
};

static int listing_add(void *userdata, const char *name, bool is_image)
{
	struct nslisting *l = userdata;

	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		char **names = realloc(l->names, cap * sizeof(*names));
		if (!names)
			return -ENOMEM;
		l->names = names;
		bool *im = realloc(l->is_image, cap * sizeof(*im));
		if (!im)
			return -ENOMEM;
		l->is_image = im;
		l->cap = cap;
	}
	l->names[l->n] = strdup(name);
	if (!l->names[l->n])
		return -ENOMEM;
	l->is_image[l->n++] = is_image;
	return 0;
}

static void listing_free(struct nslisting *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		free(l->names[i]);
	free(l->names);
	free(l->is_image);
	free(l);
}

static void do_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = fs_of(req);
	struct nslisting *l;
	int r;

	fi->fh = 0;
	if (ino_is_image(ino)) {
		struct image *img;
		const struct tinode *t = ino_node(fs, ino, &img);
		if (!t) {
			reply_err(req, -ESTALE);
			return;
		}
		if (!S_ISDIR(t->mode)) {
			reply_err(req, -ENOTDIR);
			return;
		}
		fi->cache_readdir = 1;
		fi->keep_cache = 1;
		fuse_reply_open(req, fi);
		return;
	}
	l = calloc(1, sizeof(*l));
	if (!l) {
		reply_err(req, -ENOMEM);
		return;
	}
	if (ino == FUSE_ROOT_ID) {
		r = listing_add(l, "images", false);
	} else if (ino == INO_CTL_DIR) {
		l->files = true;
		r = listing_add(l, "status", false);
		if (r == 0)
			r = listing_add(l, "metrics", false);
	} else if (ino_is_ctl(ino)) {
		listing_free(l);
		reply_err(req, -ENOTDIR);
		return;
	} else {
		struct nsnode *n = ino_nsnode(ino);
		if (n->kind != NS_DIR) {
			listing_free(l);
			reply_err(req, -ENOTDIR);
			return;
		}
		/* Short-form directories list nothing: their content lives
		 * under the canonical docker.io path. */
		r = n->short_form ? 0 : manager_list(fs->manager, n->prefix, listing_add, l);
	}
	if (r < 0) {
		listing_free(l);
		reply_err(req, r);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)l;
	fuse_reply_open(req, fi);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	listing_free((struct nslisting *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

/* Synthetic inode numbers for namespace listings: the kernel does not
 * instantiate those entries (no lookup count is taken), it only shows
 * the number in d_ino. */
static ino_t name_ino(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return (ino_t)(h & ~(uint64_t)7) | 4;
}

static void ns_readdir(fuse_req_t req, struct fs *fs, fuse_ino_t ino,
		       size_t size, off_t off, struct nslisting *l, bool plus)
{
	_cleanup_free_ char *buf = calloc(1, size);
	size_t used = 0;

	if (!buf) {
		reply_err(req, -ENOMEM);
		return;
	}
	for (off_t i = off; i < (off_t)l->n + 2; i++) {
		const char *name = i == 0 ? "." : i == 1 ? ".." : l->names[i - 2];
		struct fuse_entry_param e = { 0 };
		size_t n;

		e.attr.st_mode = l->files && i >= 2 ? S_IFREG | 0444 : S_IFDIR | 0555;
		e.attr.st_ino = i < 2 ? ino : name_ino(name);
		if (plus)
			n = fuse_add_direntry_plus(req, buf + used, size - used,
						   name, &e, i + 1);
		else
			n = fuse_add_direntry(req, buf + used, size - used, name,
					      &e.attr, i + 1);
		if (n > size - used)
			break;
		used += n;
	}
	fuse_reply_buf(req, buf, used);
}

static void image_readdir(fuse_req_t req, struct fs *fs, fuse_ino_t ino,
			  size_t size, off_t off, bool plus)
{
	struct image *img;
	const struct tinode *dir = ino_node(fs, ino, &img);
	_cleanup_free_ char *buf = NULL;
	size_t used = 0;

	if (!dir || !S_ISDIR(dir->mode)) {
		reply_err(req, dir ? -ENOTDIR : -ESTALE);
		return;
	}
	buf = calloc(1, size);
	if (!buf) {
		reply_err(req, -ENOMEM);
		return;
	}
	for (off_t i = off; i < (off_t)dir->n_children + 2; i++) {
		struct fuse_entry_param e = { 0 };
		const struct tinode *t;
		const char *name;
		size_t n;

		if (i < 2) {
			t = i == 0 ? dir : dir->parent;
			name = i == 0 ? "." : "..";
		} else {
			t = dir->children[i - 2];
			name = dir->child_names[i - 2];
		}
		e.ino = node_ino(img, t);
		e.generation = 1;
		image_stat(e.ino, t, &e.attr);
		e.attr_timeout = e.entry_timeout = fs->opts.content_timeout;
		if (plus) {
			n = fuse_add_direntry_plus(req, buf + used, size - used,
						   name, &e, i + 1);
		} else {
			n = fuse_add_direntry(req, buf + used, size - used, name,
					      &e.attr, i + 1);
		}
		if (n > size - used)
			break;
		used += n;
		/* The kernel takes a lookup reference for every entry of a
		 * readdirplus reply except "." and "..". */
		if (plus && i >= 2)
			image_ref(img, 1);
	}
	fuse_reply_buf(req, buf, used);
}

static void readdir_common(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi, bool plus)
{
	struct fs *fs = fs_of(req);

	if (ino_is_image(ino))
		image_readdir(req, fs, ino, size, off, plus);
	else
		ns_readdir(req, fs, ino, size, off,
			   (struct nslisting *)(uintptr_t)fi->fh, plus);
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	readdir_common(req, ino, size, off, fi, false);
}

static void do_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			   off_t off, struct fuse_file_info *fi)
{
	readdir_common(req, ino, size, off, fi, true);
}

static void do_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			size_t size)
{
	const struct tree_xattr *x;

	if (!ino_is_image(ino)) {
		reply_err(req, -ENODATA);
		return;
	}
	struct image *img;
	const struct tinode *t = ino_node(fs_of(req), ino, &img);
	if (!t) {
		reply_err(req, -ESTALE);
		return;
	}
	x = tinode_getxattr(t, name);
	if (!x)
		reply_err(req, -ENODATA);
	else if (size == 0)
		fuse_reply_xattr(req, x->size);
	else if (size < x->size)
		reply_err(req, -ERANGE);
	else
		fuse_reply_buf(req, x->value, x->size);
}

static void do_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	const struct tinode *t;
	_cleanup_free_ char *buf = NULL;
	size_t len = 0, pos = 0;

	if (!ino_is_image(ino)) {
		if (size == 0)
			fuse_reply_xattr(req, 0);
		else
			fuse_reply_buf(req, NULL, 0);
		return;
	}
	struct image *img;
	t = ino_node(fs_of(req), ino, &img);
	if (!t) {
		reply_err(req, -ESTALE);
		return;
	}
	for (uint32_t i = 0; i < t->n_xattrs; i++)
		len += strlen(t->xattrs[i].name) + 1;
	if (size == 0) {
		fuse_reply_xattr(req, len);
		return;
	}
	if (size < len) {
		reply_err(req, -ERANGE);
		return;
	}
	buf = malloc(len ? len : 1);
	if (!buf) {
		reply_err(req, -ENOMEM);
		return;
	}
	for (uint32_t i = 0; i < t->n_xattrs; i++) {
		size_t n = strlen(t->xattrs[i].name) + 1;
		memcpy(buf + pos, t->xattrs[i].name, n);
		pos += n;
	}
	fuse_reply_buf(req, buf, len);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv = { 0 };

	sv.f_bsize = sv.f_frsize = 4096;
	sv.f_namemax = NAME_MAX;
	fuse_reply_statfs(req, &sv);
}

/* Every way of changing the tree.  The mount is read-only, so the kernel
 * answers most of these itself; these cover the rest. */
static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		       int to_set, struct fuse_file_info *fi)
{
	reply_err(req, -EROFS);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, dev_t rdev)
{
	reply_err(req, -EROFS);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode)
{
	reply_err(req, -EROFS);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	reply_err(req, -EROFS);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		       const char *name)
{
	reply_err(req, -EROFS);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		      fuse_ino_t newparent, const char *newname,
		      unsigned int flags)
{
	reply_err(req, -EROFS);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		    const char *newname)
{
	reply_err(req, -EROFS);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, struct fuse_file_info *fi)
{
	reply_err(req, -EROFS);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			const char *value, size_t size, int flags)
{
	reply_err(req, -EROFS);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	reply_err(req, -EROFS);
}

/* Every request is timed for the metrics; fs is taken before the reply,
 * which frees req. */
static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs *fs = fs_of(req);
	int64_t t = mono_ns();

	if (!do_lookup(req, parent, name))
		fsop_done(fs, FSOP_LOOKUP, t);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = fs_of(req);
	int64_t t = mono_ns();

	do_getattr(req, ino, fi);
	fsop_done(fs, FSOP_GETATTR, t);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct fs *fs = fs_of(req);
	int64_t t = mono_ns();

	do_readlink(req, ino);
	fsop_done(fs, FSOP_READLINK, t);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = fs_of(req);
	int64_t t = mono_ns();

	do_open(req, ino, fi);
	fsop_done(fs, FSOP_OPEN, t);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct fs *fs = fs_of(req);
	int64_t t = mono_ns();

	do_read(req, ino, size, off, fi);
	fsop_done(fs, FSOP_READ, t);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = fs_of(req);
	int64_t t = mono_ns();

	do_opendir(req, ino, fi);
	fsop_done(fs, FSOP_OPENDIR, t);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct fs *fs = fs_of(req);
	int64_t t = mono_ns();

	do_readdir(req, ino, size, off, fi);
	fsop_done(fs, FSOP_READDIR, t);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct fs *fs = fs_of(req);
	int64_t t = mono_ns();

	do_readdirplus(req, ino, size, off, fi);
	fsop_done(fs, FSOP_READDIRPLUS, t);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct fs *fs = fs_of(req);
	int64_t t = mono_ns();

	do_getxattr(req, ino, name, size);
	fsop_done(fs, FSOP_GETXATTR, t);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct fs *fs = fs_of(req);
	int64_t t = mono_ns();

	do_listxattr(req, ino, size);
	fsop_done(fs, FSOP_LISTXATTR, t);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct fs *fs = fs_of(req);
	int64_t t = mono_ns();

	do_forget(req, ino, nlookup);
	fsop_done(fs, FSOP_FORGET, t);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	struct fs *fs = fs_of(req);
	int64_t t = mono_ns();

	do_forget_multi(req, count, forgets);
	fsop_done(fs, FSOP_FORGET, t);
}

static const struct fuse_lowlevel_ops fs_ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.readlink = op_readlink,
	.open = op_open,
	.read = op_read,
	.release = op_release,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.releasedir = op_releasedir,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.statfs = op_statfs,
	.setattr = op_setattr,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_unlink,
	.symlink = op_symlink,
	.rename = op_rename,
	.link = op_link,
	.create = op_create,
	.setxattr = op_setxattr,
	.removexattr = op_removexattr,
};

int fs_new(struct manager *m, const struct fs_options *opts, struct fs **ret)
{
	struct fs *fs = calloc(1, sizeof(*fs));

	if (!fs)
		return -ENOMEM;
	fs->manager = m;
	fs->opts = *opts;
	if (fs->opts.content_timeout <= 0)
		fs->opts.content_timeout = 86400.0;
	if (fs->opts.image_timeout <= 0)
		fs->opts.image_timeout = 60.0;
	if (fs->opts.namespace_timeout <= 0)
		fs->opts.namespace_timeout = 1.0;
	if (fs->opts.max_threads == 0)
		fs->opts.max_threads = 32;
	pthread_mutex_init(&fs->ns_lock, NULL);
	fs->nsnodes = strmap_new();
	if (!fs->nsnodes) {
		free(fs);
		return -ENOMEM;
	}
	fs->images.key = (char *)"";
	fs->images.permanent = true;
	fs->images.kind = NS_DIR;
	fs->images.prefix = (char *)"";
	clock_gettime(CLOCK_REALTIME, &fs->started);
	*ret = fs;
	return 0;
}

static int free_nsnode_entry(void *userdata, const char *key, void *value)
{
	nsnode_free(value);
	return 0;
}

void fs_free(struct fs *fs)
{
	if (!fs)
		return;
	free(fs->mountpoint);
	/* The nodes the kernel still held die with the mount. */
	if (fs->nsnodes)
		strmap_foreach(fs->nsnodes, free_nsnode_entry, NULL);
	strmap_free(fs->nsnodes);
	pthread_mutex_destroy(&fs->ns_lock);
	free(fs);
}

/* GC removed an image: ask the kernel to drop its root dentry so the
 * image can be let go of as soon as nothing holds it. */
static void forget_dentry(void *userdata, uint64_t parent, const char *name)
{
	struct fs *fs = userdata;

	if (fs->session)
		fuse_lowlevel_notify_inval_entry(fs->session, (fuse_ino_t)parent,
						 name, strlen(name));
}

static struct manager *hup_manager;
static struct fuse_session *stop_session;
static int stop_pipe[2] = { -1, -1 };

static void on_sighup(int sig)
{
	manager_reopen_events(hup_manager);
}

/* SIGINT/SIGTERM: end the session as libfuse's own handler would, and
 * wake the thread that cancels pulls -- a worker busy with a slow pull
 * would otherwise hold the unmount until the pull ends. */
static void on_stop(int sig)
{
	int saved = errno;

	if (stop_session)
		fuse_session_exit(stop_session);
	if (stop_pipe[1] >= 0 && write(stop_pipe[1], "x", 1) < 0) {
		/* already woken */
	}
	errno = saved;
}

static void *stop_thread(void *arg)
{
	char c;

	while (read(stop_pipe[0], &c, 1) < 0 && errno == EINTR)
		;
	manager_cancel(arg);
	return NULL;
}

int fs_serve(struct fs *fs, struct fuse_args *args, const char *mountpoint,
	     bool foreground)
{
	struct fuse_loop_config *cfg = NULL;
	struct sigaction sa = { 0 };
	int r;

	fs->session = fuse_session_new(args, &fs_ops, sizeof(fs_ops), fs);
	if (!fs->session)
		return -EINVAL;
	if (fuse_set_signal_handlers(fs->session) != 0) {
		r = -EIO;
		goto out_destroy;
	}
	/* libfuse ends the session on SIGHUP; here it means "reopen the
	 * events log", as logrotate expects of a daemon. */
	hup_manager = fs->manager;
	sa.sa_handler = on_sighup;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGHUP, &sa, NULL);
	if (pipe2(stop_pipe, O_CLOEXEC) == 0) {
		stop_session = fs->session;
		sa.sa_handler = on_stop;
		/* No SA_RESTART: the worker blocked in read(2) on /dev/fuse
		 * must see EINTR to notice the session ended. */
		sa.sa_flags = 0;
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}

	if (fuse_session_mount(fs->session, mountpoint) != 0) {
		r = -EIO;
		goto out_signals;
	}
	/* op_init asks for FUSE_CAP_PARALLEL_DIROPS, which libfuse before
	 * 3.17 does not pass on to the kernel. */
	struct fuseio_options io = { .parallel_dirops = true, .debug = fs->opts.debug };
	r = fuseio_attach(fs->session, &io);
	if (r < 0)
		goto out_unmount;
	if (fuse_daemonize(foreground) != 0) {
		r = -EIO;
		goto out_unmount;
	}
	/* Threads only now: fuse_daemonize forks. */
	fs->mountpoint = realpath(mountpoint, NULL);
	manager_set_forget_dentry(fs->manager, forget_dentry, fs);
	pthread_t stopper;
	bool stopper_started = stop_pipe[0] >= 0 &&
			       pthread_create(&stopper, NULL, stop_thread, fs->manager) == 0;
	r = manager_start(fs->manager);
	if (r < 0) {
		fprintf(stderr, "pullfs: cannot start the garbage collector: %s\n", strerror(-r));
		goto out_unmount;
	}
	if (fs->opts.control) {
		r = control_start(fs->opts.control, status_for_control, fs);
		if (r < 0) {
			fprintf(stderr, "pullfs: cannot serve the control socket: %s\n",
				strerror(-r));
			goto out_unmount;
		}
	}
	cfg = fuse_loop_cfg_create();
	if (!cfg) {
		r = -ENOMEM;
		goto out_unmount;
	}
	fuse_loop_cfg_set_clone_fd(cfg, 0);
	fuse_loop_cfg_set_max_threads(cfg, fs->opts.max_threads);
	fuse_loop_cfg_set_idle_threads(cfg, 8);
	r = fuse_session_loop_mt(fs->session, cfg);
	/* A positive value is the signal that ended the loop: a clean stop. */
	r = r > 0 ? 0 : r < 0 ? r : 0;
	fuse_loop_cfg_destroy(cfg);
	/* Lookups waiting for pulls are answered from the pulls' threads:
	 * they end before the session does. */
	manager_drain(fs->manager);
	control_stop(fs->opts.control);
	if (stopper_started) {
		if (write(stop_pipe[1], "x", 1) < 0) {
			/* the thread was woken by a signal already */
		}
		pthread_join(stopper, NULL);
	}
out_unmount:
	fuse_session_unmount(fs->session);
out_signals:
	fuse_remove_signal_handlers(fs->session);
out_destroy:
	fuse_session_destroy(fs->session);
	fs->session = NULL;
	return r;
}

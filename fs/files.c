/* Regular files of images: open, read, release.
 *
 * A file stored in its layer's pack is read by the daemon (READ requests,
 * spliced from the pack) and kept in the page cache of the FUSE inode
 * across opens.  A file stored as an object of its own (cache.h) is opened
 * in passthrough when the kernel accepted it at INIT: the object becomes
 * the file's backing file and the kernel reads it directly, so no READ
 * reaches the daemon and the bytes live once in the page cache, the
 * object's, shared by every image and layer holding the same content.
 *
 * A file of a lazy layer is read by the daemon, which fetches what is
 * missing.  An open of one not all local yet is in direct I/O, so that a
 * reader waiting for the registry can be interrupted, when the kernel
 * still maps such files (FUSE_DIRECT_IO_ALLOW_MMAP, fuseio.c; a kernel
 * without it reads them through the page cache, where a reader waits
 * killable only).  An open once it is local is in passthrough like any
 * object's, unless an open of the same node that is not is still open
 * (fs.lazy_opens counts them): the kernel refuses a passthrough open of
 * an inode with cached opens or mappings (a direct I/O open may have
 * been mapped), and any other open of one open in passthrough.  Neither
 * can happen the other way round: a file once local stays local.  The
 * nodes of an image whose key a process before handed out (restored at
 * a takeover) may be open in modes this process never saw: their lazy
 * files are not in passthrough, and are cached like a pack's once local.
 *
 * The kernel refuses two backing files for one inode, and it attaches an
 * inode to the backing file of its first open until the last one closes;
 * so backing ids are kept per object, registered at the first open of any
 * file with that content.  One that no open file uses any more stays
 * registered, up to BACKING_IDLE_MAX of them, least recently used first
 * out: opening a file again then costs the daemon a table lookup and the
 * reply, not an openat() and two ioctls.  Every open of an
 * object is in passthrough or none is: after a refused registration
 * (no CAP_SYS_ADMIN, the cache on a stacked filesystem) passthrough is off
 * for the rest of the mount, and objects are read like packs.
 *
 * A file handle outlives the process that gave it out when another takes
 * the connection over (supervisor.c): its top 16 bits are the epoch of the
 * process that made it, the rest the struct ofile of an object's open, or
 * a number of its own for a pack's (FH_PACK_BIT).  A handle of another
 * epoch is resolved from the node alone: its object opened for each read,
 * a lazy file read lazily; its image was pinned open when this process
 * restored it, and from its first read to its release it counts as an
 * open file of its own (the pin ends when the kernel is found without
 * the image's root, which must not leave a file in use uncounted).  Backing ids are
 * the connection's, not the process's: each registration and closing is
 * noted in the hand-over log, and the next process takes the live ones
 * over, pinned, so a new open of an inode the kernel still holds open in
 * passthrough gets the same backing file.  Such an inode belongs to an
 * image restored from the log, which is held until the kernel forgets its
 * root (no file of it open): a pinned id whose object no restored image
 * still held has is unpinned then, and closed unless an open of this
 * process uses it (files_unpin_backings()), so that ids do not pile up
 * from one takeover to the next. */
#include "fs-private.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuseio.h"
#include "strmap.h"

#define BACKING_IDLE_MAX 4096

#define FH_EPOCH_SHIFT 48
/* A handle of a pack's file: no struct ofile, a number of its own (user
 * space pointers stay below this bit) */
#define FH_PACK_BIT (UINT64_C(1) << 47)

struct backing {
	int id;
	bool pinned;		/* taken over from another process: never dropped */
	unsigned opens;		/* fs.backing_lock */
	struct dlist_node idle; /* registered and unused; fs.backing_lock */
	char object[];
};

static void backing_drop(struct fs *fs, struct backing *b)
{
	dlist_remove(&fs->backing_idle, &b->idle);
	strmap_remove(fs->backings, b->object);
	takeover_note_backing_closed(fs, b->id);
	fuseio_backing_close(fs->io, b->id);
	free(b);
}

/* fi->fh of an open object; packs have fh 0. */
struct ofile {
	int fd;		    /* read through the daemon; -1 in passthrough */
	const char *object; /* passthrough: the key of its backing */
	bool lazy;	    /* a file of a lazy layer: image_lazy_read() */
	char *lazy_node;    /* lazy: its key in fs.lazy_opens */
	/* in fs.open_files until released; backing_lock.  Those the kernel
	 * never released (the daemon stopping first) go with the fs. */
	struct dlist_node node;
};

static void ofile_track(struct fs *fs, struct ofile *of)
{
	pthread_mutex_lock(&fs->backing_lock);
	dlist_push(&fs->open_files, &of->node);
	pthread_mutex_unlock(&fs->backing_lock);
}

static void ofile_untrack(struct fs *fs, struct ofile *of)
{
	pthread_mutex_lock(&fs->backing_lock);
	dlist_remove(&fs->open_files, &of->node);
	pthread_mutex_unlock(&fs->backing_lock);
}

void files_free_all(struct fs *fs)
{
	pthread_mutex_lock(&fs->backing_lock);
	while (fs->open_files.head) {
		struct ofile *of = dlist_entry(fs->open_files.head, struct ofile, node);

		dlist_remove(&fs->open_files, &of->node);
		if (of->fd >= 0)
			close(of->fd);
		free(of->lazy_node);
		free(of);
	}
	pthread_mutex_unlock(&fs->backing_lock);
}

static bool passthrough_usable(struct fs *fs)
{
	return !fs->opts.no_passthrough && fuseio_passthrough(fs->io) &&
	       !atomic_load_explicit(&fs->passthrough_refused, memory_order_relaxed);
}

/* The backing id of an object, registered from fd when it has none yet.
 * Returns the id, or -errno when the kernel refused. */
static int backing_get(struct fs *fs, const char *object, int fd)
{
	struct backing *b;
	int r;

	pthread_mutex_lock(&fs->backing_lock);
	b = strmap_get(fs->backings, object);
	if (!b) {
		size_t len = strlen(object);

		r = fuseio_backing_open(fs->io, fd);
		if (r < 0) {
			pthread_mutex_unlock(&fs->backing_lock);
			return r;
		}
		b = calloc(1, sizeof(*b) + len + 1);
		if (b)
			memcpy(b->object, object, len + 1);
		if (!b || strmap_put(fs->backings, b->object, b) < 0) {
			fuseio_backing_close(fs->io, r);
			free(b);
			pthread_mutex_unlock(&fs->backing_lock);
			return -ENOMEM;
		}
		b->id = r;
		takeover_note_backing(fs, r, object);
	}
	dlist_remove(&fs->backing_idle, &b->idle);
	b->opens++;
	r = b->id;
	pthread_mutex_unlock(&fs->backing_lock);
	return r;
}

/* The backing id of an object already registered, taken for one more
 * open; 0 when there is none. */
static int backing_get_registered(struct fs *fs, const char *object)
{
	struct backing *b;
	int id = 0;

	pthread_mutex_lock(&fs->backing_lock);
	b = strmap_get(fs->backings, object);
	if (b) {
		dlist_remove(&fs->backing_idle, &b->idle);
		b->opens++;
		id = b->id;
	}
	pthread_mutex_unlock(&fs->backing_lock);
	return id;
}

static void backing_put(struct fs *fs, const char *object)
{
	struct backing *b;

	pthread_mutex_lock(&fs->backing_lock);
	b = strmap_get(fs->backings, object);
	if (b && --b->opens == 0 && !b->pinned) {
		dlist_push(&fs->backing_idle, &b->idle);
		if (fs->backing_idle.len > BACKING_IDLE_MAX)
			backing_drop(fs, dlist_entry(fs->backing_idle.head, struct backing, idle));
	}
	pthread_mutex_unlock(&fs->backing_lock);
}

/* The key of a node in fs.lazy_opens: its image (a name of its own, held
 * by the open) and its tree node. */
static void lazy_node_key(char *buf, size_t len, const struct image *img, const struct tinode *t)
{
	snprintf(buf, len, "%p/%p", (const void *)img, (const void *)t);
}

/* Whether a file of a lazy layer is opened in passthrough; if not, the
 * open is counted in fs.lazy_opens (under the same lock as the choice:
 * two opens racing agree) and of->lazy_node set.  -ENOMEM. */
static int lazy_open_mode(struct fs *fs, struct ofile *of, struct image *img,
			  const struct tinode *t, bool *ret_passthrough)
{
	bool usable = passthrough_usable(fs) && !image_restored(img) && !image_file_packed(img, t);
	/* A file once local stays local: looked at outside the lock (it may
	 * read the layer's directory), and again under it only when it was
	 * not, where an open that saw it local may have gone passthrough. */
	bool local = usable && image_file_local(img, t);
	char key[64];
	uintptr_t n;
	int r = 0;

	lazy_node_key(key, sizeof(key), img, t);
	pthread_mutex_lock(&fs->backing_lock);
	n = (uintptr_t)strmap_get(fs->lazy_opens, key);
	*ret_passthrough = n == 0 && usable && (local || image_file_local(img, t));
	if (!*ret_passthrough) {
		of->lazy_node = strdup(key);
		r = of->lazy_node ? strmap_put(fs->lazy_opens, key, (void *)(n + 1)) : -ENOMEM;
		if (r < 0) {
			free(of->lazy_node);
			of->lazy_node = NULL;
		}
	}
	pthread_mutex_unlock(&fs->backing_lock);
	return r;
}

/* An open lazy_open_mode() counted is gone. */
static void lazy_open_end(struct fs *fs, struct ofile *of)
{
	uintptr_t n;

	if (!of->lazy_node)
		return;
	pthread_mutex_lock(&fs->backing_lock);
	n = (uintptr_t)strmap_get(fs->lazy_opens, of->lazy_node);
	if (n > 1)
		(void)strmap_put(fs->lazy_opens, of->lazy_node, (void *)(n - 1));
	else
		strmap_remove(fs->lazy_opens, of->lazy_node);
	pthread_mutex_unlock(&fs->backing_lock);
	free(of->lazy_node);
	of->lazy_node = NULL;
}

static void open_object(fuse_req_t req, struct fs *fs, struct image *img, const struct tinode *t,
			struct fuse_file_info *fi)
{
	bool passthrough = false;
	struct ofile *of = malloc(sizeof(*of));
	int fd = -1, id = 0;

	if (!of) {
		reply_err(req, -ENOMEM);
		return;
	}
	*of = (struct ofile){ .fd = -1 };
	if (image_file_lazy(img, t) &&
	    (lazy_open_mode(fs, of, img, t, &passthrough) < 0 || !passthrough)) {
		if (!of->lazy_node) {
			free(of);
			reply_err(req, -ENOMEM);
			return;
		}
		/* fetched as it is read.  Until it is all local, with direct
		 * I/O: each read(2) is a READ the reader waits for, which a
		 * signal interrupts (FUSE_INTERRUPT, answered at once), where
		 * a read through the page cache waits, killable only, for the
		 * kernel's readahead requests.  Once local (and not in
		 * passthrough), cached by the kernel like a pack's. */
		of->lazy = true;
		if (fuseio_direct_io_mmap(fs->io) && !image_file_local(img, t))
			fi->direct_io = 1;
		goto reply;
	}
	if (passthrough_usable(fs)) {
		id = backing_get_registered(fs, t->object);
		if (id > 0)
			goto reply;
	}
	fd = image_object_open(img, t);
	if (fd < 0) {
		free(of);
		reply_err(req, fd == -ENOMEM || fd == -EMFILE || fd == -ENFILE ? fd : -EIO);
		return;
	}
	*of = (struct ofile){ .fd = fd };
	if (passthrough_usable(fs)) {
		id = backing_get(fs, t->object, fd);
		if (id == -EPERM || id == -EOPNOTSUPP || id == -EINVAL || id == -ELOOP) {
			/* (ELOOP: the backing file's filesystem stacks too
			 * deep) never better for the next file either */
			atomic_store(&fs->passthrough_refused, true);
			id = 0;
		} else if (id < 0) {
			close(fd);
			free(of);
			reply_err(req, id);
			return;
		}
	}
	if (id > 0)
		close(fd);
reply:
	if (id > 0) {
		of->fd = -1;
		of->object = t->object; /* lives as long as the image */
		fi->keep_cache = 0;
	}
	fi->fh = fs->fh_epoch << FH_EPOCH_SHIFT | (uint64_t)(uintptr_t)of;
	/* Counted before the reply: GC must never see the file closed. */
	image_open(img);
	ofile_track(fs, of);
	if ((id > 0 ? fuseio_reply_open_backing(req, fi, id) : fuse_reply_open(req, fi)) != 0) {
		ofile_untrack(fs, of);
		image_close(img);
		if (id > 0)
			backing_put(fs, t->object);
		else if (fd >= 0)
			close(fd);
		lazy_open_end(fs, of);
		free(of);
		return;
	}
	if (id > 0)
		atomic_fetch_add_explicit(&fs->passthrough_opens, 1, memory_order_relaxed);
}

void file_open(fuse_req_t req, struct fs *fs, struct image *img, const struct tinode *t,
	       struct fuse_file_info *fi)
{
	fi->keep_cache = 1;
	fi->noflush = 1;
	fi->fh = fs->fh_epoch << FH_EPOCH_SHIFT | FH_PACK_BIT |
		 (atomic_fetch_add(&fs->pack_handles, 1) & (FH_PACK_BIT - 1));
	if (t->object) {
		/* an open is what every read of a start shows the daemon
		 * (reads of passthrough and cached files never come here) */
		image_profile_note(img, t);
		open_object(req, fs, img, t, fi);
		return;
	}
	image_open(img);
	if (fuse_reply_open(req, fi) != 0)
		image_close(img);
}

/* A read of a lazy file waiting for its chunks.  An interrupt answers
 * EINTR when the reader is dying (killwatch.h), and leaves a reader that
 * a handled signal interrupted waiting, its read served as on a local
 * disk; such a reader is watched until the answer, which is EINTR if it
 * is found dying first.  The fetch goes on in the worker either way and
 * serves the next reader.  Which answer goes out is decided under lock;
 * libfuse holds the request's own lock around the interrupt callback,
 * and unregistering it takes that lock, so once the worker has
 * unregistered it no callback runs (and one that lost the race has not
 * touched the request); the watch is ended before the call goes. */
struct lazy_call {
	pthread_mutex_t lock;
	fuse_req_t req;
	struct fs *fs;
	struct killwatch_entry watch;
	bool registered;  /* lock: the callback may answer */
	bool interrupted; /* lock: before it was registered */
	bool answered;	  /* lock */
	bool watched;	  /* lock: watch was added */
};

/* Called with lc->lock held, the request interrupted and not answered:
 * true when the answer is EINTR, now; otherwise the reader is watched. */
static bool lazy_interrupted_locked(struct lazy_call *lc)
{
	if (killwatch_dying(lc->watch.tid))
		return lc->answered = true;
	/* (a watcher that cannot start: EINTR, as the reader cannot be
	 * seen dying later) */
	if (!lc->watched && killwatch_add(lc->fs->killwatch, &lc->watch) < 0)
		return lc->answered = true;
	lc->watched = true;
	return false;
}

static void lazy_interrupt(fuse_req_t req, void *data)
{
	struct lazy_call *lc = data;
	bool mine = false;

	pthread_mutex_lock(&lc->lock);
	/* libfuse calls back from inside the registration when the
	 * interrupt came first: the request may not be answered from there */
	if (!lc->registered)
		lc->interrupted = true;
	else if (!lc->answered)
		mine = lazy_interrupted_locked(lc);
	pthread_mutex_unlock(&lc->lock);
	if (mine)
		reply_err(req, -EINTR);
}

/* The watcher found the reader dying. */
static void lazy_dying(struct killwatch_entry *e)
{
	struct lazy_call *lc = e->data;
	bool mine;

	pthread_mutex_lock(&lc->lock);
	mine = !lc->answered;
	lc->answered = true;
	pthread_mutex_unlock(&lc->lock);
	if (mine)
		reply_err(lc->req, -EINTR);
}

static void read_lazy(fuse_req_t req, struct image *img, const struct tinode *t, size_t size,
		      off_t off)
{
	struct lazy_call lc = { .lock = PTHREAD_MUTEX_INITIALIZER, .req = req, .fs = fs_of(req) };
	struct caller who;
	char *buf = malloc(size ? size : 1);
	ssize_t n;
	bool mine, watched;

	if (!buf) {
		reply_err(req, -ENOMEM);
		return;
	}
	caller_ids(req, &who);
	lc.watch.tid = (pid_t)who.pid;
	lc.watch.dying = lazy_dying;
	lc.watch.data = &lc;
	fuse_req_interrupt_func(req, lazy_interrupt, &lc);
	pthread_mutex_lock(&lc.lock);
	lc.registered = true;
	mine = lc.interrupted && lazy_interrupted_locked(&lc);
	pthread_mutex_unlock(&lc.lock);
	if (mine) {
		fuse_req_interrupt_func(req, NULL, NULL);
		reply_err(req, -EINTR);
		free(buf);
		return;
	}
	/* an upgrade's drain leaves this read to the next process (io taken
	 * now: an interrupt may answer, and free, req meanwhile) */
	struct fuseio *io = lc.fs->io;
	fuseio_wait_begin(io);
	n = image_lazy_read(img, t, (uint64_t)off, size, buf, &who);
	fuseio_wait_end(io);
	pthread_mutex_lock(&lc.lock);
	mine = !lc.answered;
	lc.answered = true;
	watched = lc.watched;
	pthread_mutex_unlock(&lc.lock);
	/* (no callback adds a watch once answered) */
	if (watched)
		killwatch_remove(lc.fs->killwatch, &lc.watch);
	if (mine) {
		fuse_req_interrupt_func(req, NULL, NULL);
		if (n < 0)
			/* the cause's errno (unreachable registry, timeout,
			 * corrupt chunk, full disk...) */
			reply_err(req, n == -ENOENT ? -EIO : (int)n);
		else
			fuse_reply_buf(req, buf, (size_t)n);
	}
	free(buf);
	pthread_mutex_destroy(&lc.lock);
}

/* The ofile of a handle this process gave out (NULL for a pack's);
 * *foreign when another process gave it out. */
static struct ofile *fh_ofile(struct fs *fs, uint64_t fh, bool *foreign)
{
	*foreign = fh >> FH_EPOCH_SHIFT != fs->fh_epoch;
	if (*foreign || (fh & FH_PACK_BIT))
		return NULL;
	return (struct ofile *)(uintptr_t)(fh & ((UINT64_C(1) << FH_EPOCH_SHIFT) - 1));
}

/* A handle a process before gave out, seen in use (a READ): the kernel
 * holds it open until its RELEASE, so its image counts it open until then,
 * whatever the pin of the restored image says (GC must keep what the
 * image is made from).  Handles given out before they were numbered (all
 * of a pack's alike) are left to the pin. */
static void foreign_seen(struct fs *fs, struct image *img, uint64_t fh)
{
	char name[20];

	if (!(fh & ((UINT64_C(1) << FH_EPOCH_SHIFT) - 1)))
		return;
	snprintf(name, sizeof(name), "%" PRIx64, fh);
	pthread_mutex_lock(&fs->backing_lock);
	if (!strmap_get(fs->foreign, name) && strmap_put(fs->foreign, name, img) == 0) {
		image_ref(img, 1);
		image_open(img);
	}
	pthread_mutex_unlock(&fs->backing_lock);
}

static void foreign_released(struct fs *fs, uint64_t fh)
{
	char name[20];
	struct image *img;

	snprintf(name, sizeof(name), "%" PRIx64, fh);
	pthread_mutex_lock(&fs->backing_lock);
	img = strmap_remove(fs->foreign, name);
	pthread_mutex_unlock(&fs->backing_lock);
	if (img) {
		image_close(img);
		image_unref(img, 1);
	}
}

void files_set_epoch(struct fs *fs, unsigned generation)
{
	/* never 0, and never the previous process's */
	fs->fh_epoch = generation % 0xffff + 1;
}

int files_restore_backing(struct fs *fs, int id, const char *object)
{
	size_t len = strlen(object);
	struct backing *b = calloc(1, sizeof(*b) + len + 1);
	int r = 0;

	if (!b)
		return -ENOMEM;
	memcpy(b->object, object, len + 1);
	b->id = id;
	b->pinned = true;
	pthread_mutex_lock(&fs->backing_lock);
	if (strmap_get(fs->backings, b->object) || strmap_put(fs->backings, b->object, b) < 0) {
		/* a second id for one object: only the first is used */
		free(b);
		r = -EEXIST;
	}
	pthread_mutex_unlock(&fs->backing_lock);
	if (r == 0)
		takeover_note_backing(fs, id, object);
	return r;
}

static void read_file(fuse_req_t req, struct image *img, const struct tinode *t, size_t size,
		      off_t off, struct fuse_file_info *fi)
{
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(0);
	bool foreign;
	struct ofile *of = fh_ofile(fs_of(req), fi->fh, &foreign);
	int fd, own = -1;
	uint64_t base = 0;

	if (foreign)
		foreign_seen(fs_of(req), img, fi->fh);
	if (off < 0 || (uint64_t)off >= t->size) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > t->size - (uint64_t)off)
		size = (size_t)(t->size - (uint64_t)off);
	if ((of && of->lazy) || (foreign && t->object && image_file_lazy(img, t))) {
		read_lazy(req, img, t, size, off);
		return;
	}
	if (of && of->fd >= 0) {
		fd = of->fd;
	} else if (t->object) {
		/* a passthrough open the kernel still sends a READ for */
		fd = own = image_object_open(img, t);
	} else {
		fd = image_file_fd(img, t);
		base = t->data_off;
	}
	if (fd < 0) {
		reply_err(req, -EIO);
		return;
	}
	buf.buf[0].size = size;
	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = fd;
	buf.buf[0].pos = (off_t)(base + (uint64_t)off);
	fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
	if (own >= 0)
		close(own);
	else if (!t->object)
		image_file_fd_put(img, t);
}

void file_read(fuse_req_t req, struct image *img, const struct tinode *t, size_t size, off_t off,
	       struct fuse_file_info *fi)
{
	/* The kernel's reference may end with the answer (the file closed,
	 * its nodes forgotten by another thread at once), and an interrupt
	 * answers a lazy read while it still fetches: this read holds the
	 * image, and t with it, until it is done with them. */
	image_ref(img, 1);
	read_file(req, img, t, size, off, fi);
	image_unref(img, 1);
}

void file_release(struct fs *fs, struct image *img, struct fuse_file_info *fi)
{
	bool foreign;
	struct ofile *of = fh_ofile(fs, fi->fh, &foreign);

	/* the image of a handle given out before a takeover is pinned open */
	if (foreign) {
		foreign_released(fs, fi->fh);
		return;
	}
	if (of) {
		ofile_untrack(fs, of);
		if (of->fd >= 0)
			close(of->fd);
		else if (of->object)
			backing_put(fs, of->object);
		lazy_open_end(fs, of);
		free(of);
	}
	if (img)
		image_close(img);
}

struct unpin_ctx {
	bool (*kept)(void *userdata, const char *object);
	void *userdata;
	struct backing **list;
	size_t n;
};

static int collect_unpinned(void *userdata, const char *key, void *value)
{
	struct unpin_ctx *c = userdata;
	struct backing *b = value;

	if (b->pinned && !c->kept(c->userdata, b->object))
		c->list[c->n++] = b;
	return 0;
}

void files_unpin_backings(struct fs *fs, bool (*kept)(void *userdata, const char *object),
			  void *userdata)
{
	struct unpin_ctx c = { .kept = kept, .userdata = userdata };

	pthread_mutex_lock(&fs->backing_lock);
	c.list = calloc(strmap_size(fs->backings) + 1, sizeof(*c.list));
	if (c.list)
		strmap_foreach(fs->backings, collect_unpinned, &c);
	for (size_t i = 0; i < c.n; i++) {
		struct backing *b = c.list[i];

		/* one this process opened again goes when its last open
		 * does, the others at once */
		b->pinned = false;
		if (b->opens == 0)
			backing_drop(fs, b);
	}
	pthread_mutex_unlock(&fs->backing_lock);
	free(c.list);
}

unsigned files_backing_count(struct fs *fs)
{
	unsigned n;

	pthread_mutex_lock(&fs->backing_lock);
	n = (unsigned)strmap_size(fs->backings);
	pthread_mutex_unlock(&fs->backing_lock);
	return n;
}

/* What the files of fs/ share: the filesystem's state, its node numbers
 * and the counters of FUSE requests.  Only for fs/. */
#pragma once

#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)

#include <fuse_lowlevel.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <pthread.h>
#include <time.h>

#include "clock.h"
#include "dlist.h"
#include "fs.h"
#include "killwatch.h"
#include "manager.h"
#include "suplink.h"
#include "supervisor.h"
#include "takeover.h"

struct strmap;

#define INO_IMAGE_BIT (UINT64_C(1) << 63)
/* Namespace nodes: this bit and a hash of the path (namespace.c). */
#define INO_NS_BIT (UINT64_C(1) << 62)
/* The control view: small fixed numbers, with neither bit. */
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
	FSOP_RELEASEDIR,
	FSOP_GETXATTR,
	FSOP_LISTXATTR,
	FSOP_FORGET,
	FSOP_RELEASE,
	FSOP_OTHER,
	FSOP_COUNT,
};

#define FSOP_BUCKETS 7
struct fsop_stats {
	atomic_uint_fast64_t count;
	atomic_uint_fast64_t sum_ns;
	atomic_uint_fast64_t buckets[FSOP_BUCKETS + 1];
};

enum nskind {
	NS_DIR,
	NS_SYMLINK,
	NS_LAYERS, /* layers/ and below (layers.c) */
};

struct lnode;

/* Namespace nodes are interned by path: one path, one node, one inode
 * number for as long as the kernel knows it.  A second node for a path
 * the kernel still holds would make the image directory below it appear
 * under two parents, which the kernel refuses (ESTALE). */
struct nsnode {
	uint64_t nlookup; /* fs.ns_lock */
	fuse_ino_t ino;
	char *key;	/* path below images/, "" for images/ itself */
	bool permanent; /* images/ itself: never freed */
	/* made again after a takeover: the kernel's count of lookups went
	 * with the process before, and its first FORGET is its last
	 * (fs.ns_lock) */
	bool restored;
	enum nskind kind;
	bool short_form;     /* below a docker.io short name: closing names are symlinks */
	unsigned depth;	     /* path components below images/ */
	char *prefix;	     /* NS_DIR: canonical components so far, "" for images/ */
	char *target;	     /* NS_SYMLINK */
	struct lnode *lnode; /* NS_LAYERS */
	/* NS_DIR: when its listing last changed, as the kernel's check of
	 * a cached listing wants it; fs.ns_lock. */
	struct timespec mtime;
	/* The user charged with it (NS_NO_OWNER: root, a takeover, the
	 * daemon), and its place in that user's line, oldest first: what
	 * bounds the nodes one user makes (namespace.c); fs.ns_lock. */
	uid_t owner;
	struct dlist_node by_owner;
	/* when it was asked to be evicted (0: never), and whether it stayed
	 * long after: a process holds it (fs.ns_lock) */
	int64_t evict_ns;
	bool stuck;
	unsigned children; /* live nodes right below it; fs.ns_lock */
	/* an image root (or a layer's view) was handed out below it: never
	 * evicted, as dropping it would detach what is mounted below */
	bool holds_roots;
};

#define NS_NO_OWNER ((uid_t)-1)

struct fs {
	/* First: the session's userdata begins with it (fuseio.h).  Made
	 * by serve.c's fuseio_attach(), freed by fs_free(); NULL before. */
	struct fuseio *io;
	struct manager *manager;
	struct fs_options opts;
	/* requests a handled signal interrupted, until they are answered */
	struct killwatch *killwatch;
	struct nsnode images;  /* images/ */
	struct nsnode *layers; /* layers/, permanent */
	struct timespec started;
	struct fuse_session *session;
	char *mountpoint;
	pthread_mutex_t ns_lock;
	struct strmap *nsnodes; /* key -> struct nsnode *; ns_lock */
	struct strmap *nsinos;	/* ino in hex -> struct nsnode *; ns_lock */
	struct strmap *nsusers; /* uid in decimal -> struct nsuser *; ns_lock */
	/* The kernel opens directories itself (no OPENDIR requests). */
	bool no_opendir;
	/* The kernel enforces POSIX ACLs, which give the roots of images
	 * pulled with credentials their readers (fs.c). */
	bool posix_acl;
	/* Namespace directories whose listings changed, by key, and the
	 * dentries of removed names, waiting for the notifier thread to
	 * invalidate them in the kernel. */
	pthread_mutex_t notify_lock;
	pthread_cond_t notify_cond;
	struct strmap *notify_keys; /* notify_lock */
	/* manifest digests of images whose trees took exact mtimes: the
	 * kernel's cached attributes of their nodes are dropped (nsnotify.c);
	 * notify_lock */
	struct strmap *notify_times;
	bool notify_stop; /* notify_lock */
	/* dentries.c: reference -> struct root_dentry * list; notify_lock */
	struct strmap *dentries;
	struct root_dentry *dentries_gone; /* of removed names; notify_lock */
	/* reference -> count of its dentries in dentries_gone or being
	 * invalidated (as a pointer); notify_lock */
	struct strmap *dentries_pending;
	/* What was queued and what the notifier has sent, for
	 * ns_notifier_settle(); notify_lock */
	uint64_t notify_queued, notify_sent;
	/* clock_mono_ns() when the notifier began the notification it is
	 * writing now, 0 between them: one it has been in for a second is
	 * held by a lookup (waiting for a slow registry), and a settle does
	 * not wait for it (each removal of a collection would wait its
	 * whole bound) */
	_Atomic int64_t notify_writing_ns;
	pthread_cond_t notify_sent_cond;
	pthread_t notifier;
	bool notifier_started;
	struct fsop_stats ops[FSOP_COUNT];
	/* files.c: backing files of objects open in passthrough */
	pthread_mutex_t backing_lock;
	struct strmap *backings;   /* object hex -> struct backing *; backing_lock */
	struct dlist backing_idle; /* unused ones, oldest first; backing_lock */
	struct dlist open_files;   /* struct ofile of every open object; backing_lock */
	/* opens not in passthrough of files of lazy layers, per node
	 * (files.c: lazy_node_key()) -> their count; backing_lock */
	struct strmap *lazy_opens;
	/* handles of processes before seen in use, fh in hex -> struct
	 * image * (a reference and an open each); backing_lock */
	struct strmap *foreign;
	atomic_bool passthrough_refused;
	atomic_uint_fast64_t passthrough_opens;
	/* files.c: the top bits of the file handles this process gives out,
	 * and the number of the last handle of a pack's file */
	uint64_t fh_epoch;
	atomic_uint_fast64_t pack_handles;
	/* ctlview.c: the contents of the control files open */
	pthread_mutex_t ctl_lock;
	struct dlist ctl_open_bufs; /* ctl_lock */
	/* serve.c: under the supervisor (sup_fd -1: not) */
	struct handoff handoff;
	/* the hand-over log (restart/handover.h): made by serve.c under the
	 * supervisor, written through takeover.h, freed by takeover_free();
	 * NULL: none */
	struct handover_log *log;
	struct takeover takeover; /* takeover.c */
	struct suplink sup;	  /* the supervisor's socket (restart/suplink.h) */
	double held_ms;		  /* requests held by the last takeover */
	/* serve.c: the stop aborted the connection (abort_connection()) */
	bool aborted;
};
_Static_assert(offsetof(struct fs, io) == 0, "the session's userdata begins with its fuseio");

/* The one place where a negative errno r becomes a FUSE reply. */
static inline void reply_err(fuse_req_t req, int r)
{
	fuse_reply_err(req, -r);
}

static inline bool ino_is_ctl(fuse_ino_t ino)
{
	return ino == INO_CTL_DIR || ino == INO_CTL_STATUS || ino == INO_CTL_METRICS;
}

static inline struct fs *fs_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static inline bool ino_is_image(fuse_ino_t ino)
{
	return (ino & INO_IMAGE_BIT) != 0;
}

/* An image node: the image bit, the image's key (31 bits, never 0) and
 * the node's index in the image's tree.  A pure function of the name, the
 * manifest digest and the path in the image, the same in every run of the
 * daemon (manager.h). */
static inline fuse_ino_t node_ino(const struct image *img, const struct tinode *t)
{
	return INO_IMAGE_BIT | (fuse_ino_t)image_key(img) << 32 | tinode_index(t);
}

/* The node an image ino names, and its image; NULL for an ino that names
 * no node of a live image (the kernel holds a reference on every image it
 * asks about, so only a forged or stale ino). */
static inline const struct tinode *ino_node(struct fs *fs, fuse_ino_t ino, struct image **ret_img)
{
	struct image *img = manager_image(fs->manager, (uint32_t)((ino & ~INO_IMAGE_BIT) >> 32));

	*ret_img = img;
	return img ? image_inode(img, (uint32_t)ino) : NULL;
}

/* fs.c: the FUSE operations, with fs as their userdata. */
extern const struct fuse_lowlevel_ops fs_ops;

static inline void image_stat(fuse_ino_t ino, const struct tinode *t, struct stat *st)
{
	tinode_fill_stat(t, st);
	st->st_ino = ino;
}

/* fs.c: the mode the root of an image pulled with credentials shows when
 * the kernel enforces its ACL (group bits r-x, the ACL's mask; nothing
 * for others); other nodes as they are. */
void root_mode_private(struct fs *fs, struct image *img, const struct tinode *t, struct stat *st);

/* files.c: regular files of images.  file_release() takes img NULL when
 * the image is gone (the file is still released). */
void file_open(fuse_req_t req, struct fs *fs, struct image *img, const struct tinode *t,
	       struct fuse_file_info *fi);
void file_read(fuse_req_t req, struct image *img, const struct tinode *t, size_t size, off_t off,
	       struct fuse_file_info *fi);
void file_release(struct fs *fs, struct image *img, struct fuse_file_info *fi);
/* Frees what files still open hold (at the filesystem's end: the kernel
 * released them with the connection). */
void files_free_all(struct fs *fs);
/* Backing files registered with the kernel now. */
unsigned files_backing_count(struct fs *fs);
/* Takeover (takeover.h): the epoch of this process's file handles, from
 * the number of processes before it; a backing id another process
 * registered, kept for good (0, -EEXIST for a second id of one object,
 * -ENOMEM).  Before the session loop. */
void files_set_epoch(struct fs *fs, unsigned generation);
int files_restore_backing(struct fs *fs, int id, const char *object);
/* Backing ids taken over whose object kept() says no restored image still
 * held has: unpinned, closed at once unless an open uses them. */
void files_unpin_backings(struct fs *fs, bool (*kept)(void *userdata, const char *object),
			  void *userdata);

/* namespace.c: images/ and the directories below it down to the name that
 * closes a reference, whose lookup runs ensure.  ns_init() sets up images/
 * and the tables (0 or -ENOMEM).  ino_nsnode() is the namespace node ino
 * names, NULL for an ino that names none.  ns_lookup() returns true when
 * the lookup was timed by its own (later) answer. */
int ns_init(struct fs *fs);
struct nsnode *ino_nsnode(struct fs *fs, fuse_ino_t ino);
void ns_stat(struct fs *fs, fuse_ino_t ino, const struct nsnode *n, struct stat *st);
void nsnode_free(struct nsnode *n);
void nsnode_forget(struct fs *fs, struct nsnode *n, uint64_t count);
bool ns_lookup(fuse_req_t req, struct fs *fs, struct nsnode *parent, const char *name);
/* Takeover: makes the node of key (a path below images/ another process
 * gave out, or a key of the layer store) and those above it, the node
 * charged to uid owner (NS_NO_OWNER: nobody).  0 or -errno. */
int ns_restore(struct fs *fs, const char *key, uid_t owner);
/* After ns_restore(): the dentries of the restored directories that name
 * the root of reference's image (canonical), noted for rm and GC
 * (dentries.c, takeover.c).  Before the session loop. */
void ns_restore_roots(struct fs *fs, const char *reference);
/* Marks n, made again after a takeover, as held by the kernel for an
 * unknown count of lookups. */
void ns_restored(struct fs *fs, struct nsnode *n);
/* A READDIR(PLUS) of the root, .pullfs/ or a namespace directory. */
void ns_readdir(fuse_req_t req, struct fs *fs, fuse_ino_t ino, size_t size, off_t off, bool plus);
/* The notifier: a thread that tells the kernel to drop its cached
 * listings of the namespace directories above a name that came or went.
 * ns_notifier_start() after the mount and the daemon's fork; 0 or
 * -errno.  ns_notifier_stop() before the session ends; it waits. */
int ns_notifier_start(struct fs *fs);
/* How long garbage collection waits for the kernel to drop the dentries
 * of names it removed, and an upgrade for a notification under way. */
#define NS_SETTLE_SECONDS 2

void ns_notifier_stop(struct fs *fs);
/* The same, waiting at most `seconds` for a notification under way: one
 * that waits for a directory a lookup holds (its pull waiting for a slow
 * registry) is left behind, and false returned.  Only for a process that
 * ends without freeing fs and leaves that lookup to the next process. */
bool ns_notifier_stop_within(struct fs *fs, unsigned seconds);
/* The same, for a process that ends the mount: a notification still under
 * way after `seconds` waits for a lookup no thread will answer (the
 * session has ended), so late(fs) makes the kernel give up on the
 * connection's requests, and the notifier is then waited for. */
void ns_notifier_stop_or(struct fs *fs, unsigned seconds, void (*late)(struct fs *fs));
/* Waits until the notifier has sent what was queued before the call (a
 * control request that removed images answers after that, as the kernel
 * should forget them first).  Returns at once when no notifier runs. */
void ns_notifier_settle(void *fs);
/* Wakes the notifier, which looks at the restored images waiting to be
 * retired (takeover.retire_due). */
void ns_notifier_wake(struct fs *fs);

/* namespace.c, for layers.c: interning (ns_intern() makes a new node of
 * kind for key unless the kernel holds one, which it returns instead;
 * either way with a lookup taken, NULL when memory is short), the entry
 * reply of a node, listing entries, and the lookup that runs ensure for
 * reference: then(req, fs, r, img, userdata) answers the request, from
 * the flight's thread or at once (img NULL when r < 0, else one image
 * reference for then).  ns_ensure_lookup() returns as ns_lookup(). */
struct nsnode *ns_intern(struct fs *fs, const char *key, enum nskind kind, struct lnode *ln);
/* ns_intern() of a node that the caller of req makes, charged to that
 * user: NULL with *ret_err -EAGAIN when the user is refused new nodes
 * (namespace.c), -ENOMEM. */
struct nsnode *ns_intern_for(fuse_req_t req, struct fs *fs, const char *key, enum nskind kind,
			     struct lnode *ln, int *ret_err);
/* Marks n as a directory an image root (or a view) was handed out in. */
void ns_holds_roots(struct fs *fs, struct nsnode *n);
struct nsnode *ns_find(struct fs *fs, const char *key);
void ns_reply_node(fuse_req_t req, struct fs *fs, struct nsnode *n);
/* The entry of img's root, passing one image reference of the caller's
 * to the kernel. */
void ns_reply_image_root(fuse_req_t req, struct fs *fs, struct image *img, double entry_timeout);
typedef void ns_then_fn(fuse_req_t req, struct fs *fs, int r, struct image *img, void *userdata);
bool ns_ensure_lookup(fuse_req_t req, struct fs *fs, struct nsnode *parent, const char *name,
		      const char *reference, ns_then_fn *then, void *userdata);
struct nslisting;
int ns_listing_add(struct nslisting *l, const char *name, bool file);
void caller_of(fuse_req_t req, struct caller *c);
/* caller_of() without the command name (no read of /proc) */
void caller_ids(fuse_req_t req, struct caller *c);

/* layers.c: MOUNT/layers/, the Additional Layer Store (docs/layer-store.md).
 * layers_init() from ns_init(); the rest are the namespace's and fs.c's
 * hooks for NS_LAYERS nodes and their files.  layers_open() and
 * layers_read() return false when ino is not a file of theirs. */
int layers_init(struct fs *fs);
void layers_node_free(struct lnode *ln);
void layers_stat(struct fs *fs, const struct nsnode *n, struct stat *st);
bool layers_lookup(fuse_req_t req, struct fs *fs, struct nsnode *parent, const char *name);
int layers_list(struct fs *fs, const struct nsnode *n, struct nslisting *l);
bool layers_open(fuse_req_t req, struct fs *fs, fuse_ino_t ino, struct fuse_file_info *fi);
/* An xattr a layer view answers beside its tree's own, or NULL. */
const struct tree_xattr *layers_getxattr(struct image *img, const struct tinode *t,
					 const char *name);
bool layers_read(fuse_req_t req, struct fs *fs, fuse_ino_t ino, size_t size, off_t off);
/* Makes the node of key (below "/layers") again, and those above it, after
 * a takeover: pinned, as ns_restore() does.  0 or -errno. */
int layers_restore(struct fs *fs, const char *key);

/* takeover.c: the filesystem's side of a restart (takeover.h). */

/* dentries.c: image roots the kernel holds, by canonical reference.
 * dentries_note() records one as the kernel gets it (takes notify_lock);
 * dentries_removed_locked() moves those of a removed name to
 * dentries_gone (notify_lock held); dentries_invalidate() sends the
 * invalidations of such a list and frees it (the notifier thread only,
 * no lock held). */
struct root_dentry;
void dentries_note(struct fs *fs, const char *reference, fuse_ino_t parent, const char *name);
void dentries_removed_locked(struct fs *fs, const char *reference);
void dentries_invalidate(struct fs *fs, struct root_dentry *list);
/* Whether a dentry of the removed name reference may still be in the
 * kernel (not invalidated yet).  notify_lock held. */
bool dentries_pending_locked(struct fs *fs, const char *reference);
/* Queues the dentry name in directory parent for the notifier to drop
 * (an evicted namespace node); takes notify_lock. */
void dentries_drop(struct fs *fs, fuse_ino_t parent, const char *name);
void dentries_free(struct fs *fs);

/* serve.c: the serving process in the status document ("serving"). */
void serve_status(struct fs *fs, json_t *o);

/* ctlview.c: the request counters, and the control view (.pullfs/status
 * and .pullfs/metrics, made at open and read with direct I/O). */
void fsop_done(struct fs *fs, enum fsop op, int64_t start_ns);

/* Times a request handler from its first line to its return, for the
 * metrics: `_timed_(FSOP_X);` first in a handler whose request is `req`.
 * fs is read at once, since the reply frees req; clear timer_.fs when the
 * answer comes later and is timed there. */
struct op_timer {
	struct fs *fs;
	enum fsop op;
	int64_t start_ns;
};

static inline void op_timer_done(struct op_timer *t)
{
	if (t->fs)
		fsop_done(t->fs, t->op, t->start_ns);
}

#define _timed_(fsop)                                                      \
	struct op_timer timer_ __attribute__((cleanup(op_timer_done))) = { \
		.fs = fuse_req_userdata(req),                              \
		.op = (fsop),                                              \
		.start_ns = clock_mono_ns(),                               \
	}
void ctl_stat(struct fs *fs, fuse_ino_t ino, struct stat *st);
void ctl_reply_entry(fuse_req_t req, struct fs *fs, fuse_ino_t ino);
void ctl_open(fuse_req_t req, struct fs *fs, fuse_ino_t ino, struct fuse_file_info *fi);
/* A handle given out before a takeover reads the contents as they are. */
void ctl_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void ctl_release(struct fs *fs, struct fuse_file_info *fi);
/* Frees the contents of control files still open (at the filesystem's
 * end: the kernel released them with the connection). */
void ctl_free_all(struct fs *fs);
/* The status document for the control socket (a json_t *). */
json_t *ctl_status_for_control(void *fs);

/* The filesystem's side of a restart (takeover.c): the one interface
 * through which the filesystem's tables reach the hand-over log
 * (restart/handover.h) and come back from it.
 *
 * Noting: each table tells the next serving process what the kernel may
 * name before the kernel hears of it -- a namespace node, an image or a
 * layer's view handed out, a backing file registered for passthrough --
 * and when the kernel forgot it.  A note is one write to the log, made
 * at once on the caller's thread; without a supervisor (no log) it does
 * nothing.  A note that cannot be written is counted as lost, never
 * fatal: the next process then knows less.
 *
 * Restoring: a process that takes the connection over makes again what
 * the log lists before it reads the first request (takeover_restore()),
 * by calling the tables' own restore functions (ns_restore(),
 * layers_restore(), files_restore_backing(): fs-private.h); the hooks
 * below let the tables tell it what the kernel still holds. */
#pragma once

#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct fs;
struct image;
struct handover_state;
struct retiring;
struct strmap;

/* The takeover's state, a part of struct fs (fs.takeover). */
struct takeover {
	pthread_mutex_t noted_lock;
	struct strmap *noted; /* image key in decimal -> digest; noted_lock */
	/* the views restored, by "LAYER-DIGEST:REFERENCE"; only while
	 * takeover_restore() runs */
	struct strmap *restored_views;
	/* the restored images by key in decimal (struct restored_image *,
	 * takeover.c); restored_lock */
	pthread_mutex_t restored_lock;
	struct strmap *restored;
	atomic_bool any_restored;
	/* the connection is taken over: the kernel may be asked
	 * (takeover_probe()) */
	atomic_bool connected;
	/* restored images whose pin ended, until they are retired
	 * (takeover_retire()); restored_lock, their state retire_lock */
	struct retiring *retiring;
	atomic_uint n_retiring;
	pthread_mutex_t retire_lock; /* one takeover_retire() at a time */
	atomic_bool retire_due;	     /* another takeover_retire() is wanted */
	/* FORGETs of image nodes (read), a retirement (write) */
	pthread_rwlock_t forget_lock;
};

/* ---- noting, before the kernel hears of it -------------------------- */

/* A namespace node of key (a path below images/, or "/layers/..."),
 * charged to user owner (NS_NO_OWNER: nobody).  Under fs.ns_lock, so that
 * it goes out after the forgetting of a node of the same key. */
void takeover_note_ns(struct fs *fs, const char *key, uid_t owner);
/* ... the kernel forgot it (fs.ns_lock held). */
void takeover_note_ns_forgotten(struct fs *fs, const char *key);
/* An image handed out under reference (canonical), noted once per key
 * and digest. */
void takeover_note_image(struct fs *fs, struct image *img, const char *reference);
/* The view of layer (a digest) of reference's image img, handed out. */
void takeover_note_view(struct fs *fs, struct image *view, struct image *img, const char *reference,
			const char *layer);
/* Backing id registered with the kernel for object (fs.backing_lock
 * held), and closed. */
void takeover_note_backing(struct fs *fs, int id, const char *object);
void takeover_note_backing_closed(struct fs *fs, int id);

/* ---- the life of the hand-over --------------------------------------- */

/* Notes every change of the back-off table in the log, and the images
 * the manager forgets (before the manager starts). */
void takeover_watch(struct fs *fs);
/* Restores what st lists; failures are counted in *ret_failed and printed.
 * Before the session loop.  0 or -ENOMEM. */
int takeover_restore(struct fs *fs, const struct handover_state *st, unsigned *ret_failed);
/* Once the connection is taken over: ends the pins of restored images
 * whose root the kernel does not hold. */
void takeover_probe(struct fs *fs);
/* Sets up fs.takeover (fs_new()); takeover_free() frees what it keeps, the
 * hand-over log included, at the filesystem's end. */
void takeover_init(struct fs *fs);
void takeover_free(struct fs *fs);

/* ---- what the tables tell it ---------------------------------------- */

/* While takeover_restore() runs: the view of layer of reference it made
 * again (no reference taken), or NULL. */
struct image *takeover_view(struct fs *fs, const char *reference, const char *layer);
/* An image node forgotten by the kernel (before the unref): a restored
 * image's root ends its pin of open files. */
void takeover_forgot(struct fs *fs, struct image *img, fuse_ino_t ino);
/* A dentry that may reach the root of a restored image: under images/, of
 * the image handed out as reference (view NULL), or a layer directory
 * holding view.  Noted while the namespace is restored. */
void takeover_restored_dentry(struct fs *fs, const char *reference, struct image *view,
			      fuse_ino_t parent, const char *name);
/* Retires the restored images whose pin ended, nothing but the kernel's
 * counts holds, and of which the kernel holds no node (seen so twice, a
 * second apart, with no lookup between): their content, descriptors and
 * the disk of removed layers go; takeover.retire_due says when another
 * call is wanted a second later.  Blocks on the kernel; from the
 * notifier's thread or a collection. */
void takeover_retire(struct fs *fs);
/* Has the notifier call takeover_retire() soon: a name removed, a root
 * forgotten. */
void takeover_retire_soon(struct fs *fs);
/* The manager's hook before GC and rm (manager_set_gc_prepare(); userdata
 * the fs): restored images nothing holds are let go of.  Blocks on the
 * kernel; no lock held. */
void takeover_settle(void *userdata);
/* The manager's images_entered hook (userdata the fs): the keys of the
 * images some process has its working directory or root in. */
int takeover_entered_keys(void *userdata, uint32_t **ret_keys, size_t *ret_n);

/* Images as the filesystem sees them: a small object per name, with a key
 * that makes its node ids (imagekeys.h), over content shared by every name
 * of one manifest digest (its merged tree and the packs of its layers).
 *
 * struct images holds them all: the contents by digest and the live images
 * by key.  It knows no names but the one each image was loaded under; the
 * owner of the names (the manager) chooses each image's key, and hears of
 * events and of images whose lazy layers all completed, through the
 * callbacks of images_options. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "clock.h"
#include "events.h"
#include "tree.h"

struct cache;
struct image;
struct images;
struct lazy_completer;
struct manifest;
struct packs;
struct profiles;
struct registry;

/* A loaded image whose last lazy layer just completed. */
struct image_completed {
	char *digest;	/* manifest */
	double seconds; /* since its content was loaded */
	uint64_t size;	/* config + compressed layers */
};

struct images_options {
	/* borrowed, and must outlive the images */
	struct cache *cache;
	struct packs *packs;
	struct registry *registry; /* a layer view's blob reads, lazy reads */
	struct lazy_completer *completer;
	/* start profiles: recorded and used at cold loads (NULL: none) */
	struct profiles *profiles;
	const struct clock *clock;
	/* entries of one image's layers together; more fail with -EFBIG */
	unsigned max_entries;
	/* LazyReadFailed and the events of layer views; without locks */
	struct event_sink events;
	/* Each loaded image whose lazy layers all completed just now (the
	 * Pulled event of each of its names); called without locks. */
	void (*completed)(void *userdata, const struct image_completed *done, size_t n);
	/* Gives img, about to be loaded under name for manifest digest, its
	 * key: images_key_assign() with the key the names prefer and those
	 * they keep.  Without locks; returns 0 or -errno. */
	int (*key_assign)(void *userdata, struct images *imgs, struct image *img, const char *name,
			  const char *digest);
	void *userdata;
};

/* Returns 0 with no image yet, or -ENOMEM. */
int images_new(const struct images_options *o, struct images **ret);
/* Frees every image left, whatever its references (what the kernel still
 * held when the mount went away), and the table; no callback is called. */
void images_free(struct images *imgs);

/* The image named name for manifest digest, loading the content when no
 * other image holds it, with the key o.key_assign gives it.  Blocks on
 * the cache.  Returns 0 with a new image (one reference for the caller),
 * -ENOENT when something is missing from the cache, -EBADMSG (reason in
 * errbuf), -EFBIG when its layers have more entries than max_entries
 * (reason in errbuf), -ENOMEM, or what key_assign returns. */
int images_load(struct images *imgs, const char *name, const char *digest, struct image **ret,
		char *errbuf, size_t errlen);
/* For o.key_assign: gives img the first key from preferred on that is
 * free and not taken(userdata, key) (imagekeys_pick()), and makes the
 * image findable by it.  Takes the table's lock (after the names' lock
 * when both are): taken runs with it held, and so must not call into the
 * images.  0, -EMFILE, -ENOMEM. */
int images_key_assign(struct images *imgs, struct image *img, uint32_t preferred,
		      bool (*taken)(void *userdata, uint32_t key), void *userdata);
/* images_load() in two steps, for a caller that gives the key itself:
 * a new image of digest named name without a key (one reference; as
 * images_load() fails), and then exactly key for it, as a process before
 * handed it out (fs/takeover.c).  images_key_take() finds the live image
 * of key first: when that is of img's digest (and no layer view) it is
 * returned in *ret_live with a reference and img gets no key (unref it);
 * else *ret_live is NULL and img has key.  Takes the table's lock (after
 * the names' lock when both are).  Returns 0, -ESTALE when key is another
 * image's, -EINVAL for a key out of range, -ENOMEM. */
int images_new_image(struct images *imgs, const char *name, const char *digest, struct image **ret,
		     char *errbuf, size_t errlen);
int images_key_take(struct images *imgs, struct image *img, uint32_t key, struct image **ret_live);
/* The live image of key, NULL when none; lock-free, valid while the
 * caller holds a reference (manager_image()). */
struct image *images_get(struct images *imgs, uint32_t key);
/* fn (NULL: none) is called when an image with a key is freed because
 * nothing held it any more (manager_set_image_forgotten()). */
void images_set_forgotten(struct images *imgs, void (*fn)(uint32_t key));

/* fn(userdata, digest) is called, without locks, for each loaded content
 * (manifest digest) whose tree took new mtimes: a lazy layer of it was
 * verified against its digest and its index given the tar headers' exact
 * times (the filesystem then drops the kernel's cached attributes of its
 * images).  NULL: none. */
void images_set_times_changed(struct images *imgs, void (*fn)(void *userdata, const char *digest),
			      void *userdata);
/* Calls fn with every live image, under the table's lock: fn may read
 * an image (image_digest(), image_open_count(), ...) but must not drop
 * one, nor load or find one. */
void images_foreach(struct images *imgs, void (*fn)(void *userdata, uint32_t key, void *img),
		    void *userdata);

/* The cached manifest of digest; 0, -ENOENT, -EBADMSG, -ENOMEM. */
int manifest_load_cached(struct cache *c, const char *digest, struct manifest **ret);

/* Images: immutable once returned; refcounted; safe from any thread. */
void image_ref(struct image *img, uint64_t n);
void image_unref(struct image *img, uint64_t n);
/* The kernel's lookups of an image's nodes are references counted apart
 * as well: n lookups handed out; a reference the caller holds becoming
 * one; n forgotten (nothing once the image is retired).  The lookups
 * ever handed out only grow. */
void image_kernel_ref(struct image *img, uint64_t n);
void image_kernel_adopt(struct image *img);
void image_kernel_forget(struct image *img, uint64_t n);
uint64_t image_kernel_lookups(const struct image *img);
/* Whether every reference held is a lookup of the kernel's. */
bool image_kernel_only(const struct image *img);
/* Ends the image's references from the kernel, whose counts are not
 * known (taken over from another process), once the kernel is known to
 * hold none of its nodes: later FORGETs count for nothing.  Returns the
 * references to drop with image_unref(), which may free the image.  The
 * caller keeps FORGETs (image_kernel_forget()) from running meanwhile,
 * and the image's key from going to another image while the kernel may
 * still send FORGETs of it. */
uint64_t image_retire(struct image *img);
/* Every live image has a key of its own (imagekeys.h), derived from its
 * name and manifest digest and stored with the name in the cache, so the
 * same name and digest have the same key in every run of the daemon; two
 * names of one digest have two.  With the index of a node in its tree
 * (tinode_index()) it makes the filesystem's node ids.  manager_image()
 * finds a live image by key without locks, NULL when none: valid while the
 * caller holds a reference (the kernel's).  image_generation() is
 * derived from the manifest digest: a key that comes back for other
 * content comes back with another generation (almost surely). */
uint32_t image_key(const struct image *img);
uint32_t image_generation(const struct image *img);
const struct tinode *image_root(const struct image *img);
/* Node `index` of the image's tree, or NULL when out of range. */
const struct tinode *image_inode(const struct image *img, uint32_t index);
const char *image_digest(const struct image *img);
/* The name the image was loaded under (borrowed from it). */
const char *image_name(const struct image *img);
/* References held, and regular files open (image_open()): the table of
 * names holds one; GC and rm leave an image with more alone. */
uint64_t image_refs(const struct image *img);
unsigned image_open_count(const struct image *img);
/* Some lazy layer of img's content is still being completed (its Pulled
 * event is still due). */
bool image_lazy_pending(struct image *img);
/* Some layer of img is being completed in the background now. */
bool image_completing(struct image *img);
/* The background completion of img's lazy layers: a new lookup (waited
 * false) makes one that failed try again now; someone who waits for the
 * whole image (waited true) also ends its start-up window.  Does not
 * block. */
void image_completion_wake(struct image *img, bool waited);
/* A read-only fd of the pack holding the data of regular file `file`,
 * open until image_file_fd_put(); -errno when the layer cannot be opened
 * (-ENOENT: it is gone).  May block on openat(). */
int image_file_fd(struct image *img, const struct tinode *file);
void image_file_fd_put(struct image *img, const struct tinode *file);
/* For a regular file stored as an object (file->object): a read-only
 * descriptor of its own content, offsets as in the file, owned by the
 * caller; -errno when it cannot be opened.  May block on openat(). */
int image_object_open(struct image *img, const struct tinode *file);
/* Files of lazy layers: whether the file's layer was lazy when this
 * process first looked (then not opened in passthrough until it is local,
 * fs/files.c), and a read of it that
 * fetches what is missing (who: the reader's ids, named by the event of
 * a failure).  Returns the bytes read or -errno; blocks. */
bool image_file_lazy(struct image *img, const struct tinode *file);
/* Whether every byte of a file of a lazy layer is on this node (a read of
 * it never waits for a registry): complete, or the layer complete. */
bool image_file_local(struct image *img, const struct tinode *file);
/* Whether a file of a lazy layer lies in the layer's pack (never in
 * passthrough: it has no object of its own).  No system call. */
bool image_file_packed(struct image *img, const struct tinode *file);
/* Whether the image has a key a process before this one handed out
 * (images_key_take()): the kernel may hold its files open from then, in
 * modes this process does not know. */
bool image_restored(const struct image *img);
ssize_t image_lazy_read(struct image *img, const struct tinode *file, uint64_t off, size_t size,
			void *buf, const struct caller *who);
/* Open regular files of the image, counted by the filesystem: GC and rm
 * leave an image with open files alone. */
void image_open(struct image *img);
void image_close(struct image *img);
/* An open of regular file `file` of img: one of the files its start
 * profile records while its window is open (docs/profiles.md).  Does not
 * block beyond a short lock. */
void image_profile_note(struct image *img, const struct tinode *file);

/* Taking a /dev/fuse connection over from a process that is gone
 * (supervisor.c, handover.h): what the kernel may still name is made
 * again before the first request is read -- namespace nodes, the images
 * handed out, by the key in their node ids, and the backing files
 * registered for passthrough -- and the layer store's nodes, with the
 * views of single layers they hand out.  The kernel's counts of lookups
 * and open files went with the old process: a restored namespace node
 * goes at its first FORGET (which carries the kernel's whole count), a
 * restored image keeps its references pinned and is held open, for rm and
 * GC, until the kernel forgets its root or is found to hold no inode of
 * it; before GC and rm the kernel is asked to drop what nothing holds
 * (takeover_settle()).  What this process's tables hand out, and the
 * back-off table, is noted in the log for the next one (takeover.h). */
#include "fs-private.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fuseio.h"
#include "handover.h"
#include "layerview.h"
#include "macro.h"
#include "manager.h"
#include "strmap.h"

/* Enough references that the kernel's FORGETs never drop a restored image
 * to zero: it cannot have taken more lookups than it can count. */
#define PIN_REFS (UINT64_C(1) << 48)

/* A view of one layer (layers.c) is noted as an image whose reference is
 * VIEW_PREFIX, the layer digest, ':' and the image's reference, and whose
 * digest is the image's manifest digest: what makes the view again. */
#define VIEW_PREFIX "layer:"
#define LAYER_DIGEST_LEN 71 /* sha256:<64 hex> */

/* A dentry that may still reach a restored image's root: the name of an
 * image under images/, or of a layer directory of the layer store. */
struct rdentry {
	struct rdentry *next;
	fuse_ino_t parent;
	char name[];
};

/* An image restored and held open for the handles the kernel may still
 * have, until the kernel is known to hold no dentry of it. */
struct restored_image {
	struct image *img;
	char *reference; /* as handed out; NULL for a view */
	struct rdentry *dentries;
};

/* A restored image whose pin ended (release_restored()): the kernel's
 * references of the process before still hold it, until it is retired
 * (takeover_retire()). */
struct retiring {
	struct retiring *next;
	struct image *img;
	/* when first found with no node in the kernel (0: not so), and the
	 * lookups handed out then */
	int64_t unheld_ns;
	uint64_t lookups;
};

/* How long an image found with no node in the kernel stays before it is
 * retired: a lookup answered just before the first look makes its node
 * in the kernel after the answer. */
#define RETIRE_SETTLE_NS (1000 * INT64_C(1000000))

/* Notes image key as handed out under reference for digest, once. */
static void note(struct fs *fs, uint32_t key, const char *digest, const char *reference)
{
	char name[16];
	const char *had;
	char *d;

	if (!fs->log)
		return;
	snprintf(name, sizeof(name), "%" PRIu32, key);
	pthread_mutex_lock(&fs->takeover.noted_lock);
	if (!fs->takeover.noted)
		fs->takeover.noted = strmap_new();
	had = fs->takeover.noted ? strmap_get(fs->takeover.noted, name) : NULL;
	if (had && !strcmp(had, digest)) {
		pthread_mutex_unlock(&fs->takeover.noted_lock);
		return;
	}
	/* still under the lock: the record goes out before any reply */
	handover_note(fs->log, handover_format_image(key, digest, reference));
	d = fs->takeover.noted ? strdup(digest) : NULL;
	if (d) {
		free(strmap_remove(fs->takeover.noted, name));
		if (strmap_put(fs->takeover.noted, name, d) < 0)
			free(d);
	}
	pthread_mutex_unlock(&fs->takeover.noted_lock);
}

/* The filesystem whose images the manager's image_forgotten hook
 * reports: the hook takes no userdata (manager_set_image_forgotten()).
 * Set by takeover_watch(), cleared by takeover_free(). */
static struct fs *_Atomic watched;

/* Notes that the image of key, if noted, is gone: the kernel holds no
 * node of it. */
static void note_gone(uint32_t key)
{
	struct fs *fs = atomic_load(&watched);
	char name[16];

	if (!fs)
		return;
	snprintf(name, sizeof(name), "%" PRIu32, key);
	pthread_mutex_lock(&fs->takeover.noted_lock);
	if (fs->takeover.noted && strmap_get(fs->takeover.noted, name)) {
		handover_note(fs->log, handover_format_image_gone(key));
		free(strmap_remove(fs->takeover.noted, name));
	}
	pthread_mutex_unlock(&fs->takeover.noted_lock);
}

void takeover_note_image(struct fs *fs, struct image *img, const char *reference)
{
	note(fs, image_key(img), image_digest(img), reference);
}

void takeover_note_ns(struct fs *fs, const char *key, uid_t owner)
{
	handover_note(fs->log, owner == NS_NO_OWNER
				       ? handover_format_ns(key)
				       : handover_format_ns_owned(key, (uint32_t)owner));
}

void takeover_note_ns_forgotten(struct fs *fs, const char *key)
{
	handover_note(fs->log, handover_format_ns_forgotten(key));
}

void takeover_note_backing(struct fs *fs, int id, const char *object)
{
	handover_note(fs->log, handover_format_backing(id, object));
}

void takeover_note_backing_closed(struct fs *fs, int id)
{
	handover_note(fs->log, handover_format_backing_closed(id));
}

void takeover_note_view(struct fs *fs, struct image *view, struct image *img, const char *reference,
			const char *layer)
{
	_cleanup_free_ char *name = NULL;

	if (!fs->log)
		return;
	if (asprintf(&name, VIEW_PREFIX "%s:%s", layer, reference) < 0) {
		name = NULL;
		handover_note(fs->log, NULL); /* counted as lost */
		return;
	}
	note(fs, image_key(view), image_digest(img), name);
}

struct image *takeover_view(struct fs *fs, const char *reference, const char *layer)
{
	_cleanup_free_ char *name = NULL;

	if (!fs->takeover.restored_views || asprintf(&name, "%s:%s", layer, reference) < 0) {
		name = NULL;
		return NULL;
	}
	return strmap_get(fs->takeover.restored_views, name);
}

static int free_noted(void *userdata, const char *key, void *value)
{
	free(value);
	return 0;
}

static void rdentries_free(struct rdentry *d)
{
	while (d) {
		struct rdentry *next = d->next;

		free(d);
		d = next;
	}
}

static void restored_image_free(struct restored_image *ri)
{
	if (!ri)
		return;
	rdentries_free(ri->dentries);
	free(ri->reference);
	free(ri);
}

static int free_restored(void *userdata, const char *key, void *value)
{
	restored_image_free(value);
	return 0;
}

void takeover_init(struct fs *fs)
{
	pthread_mutex_init(&fs->takeover.noted_lock, NULL);
	pthread_mutex_init(&fs->takeover.restored_lock, NULL);
	pthread_mutex_init(&fs->takeover.retire_lock, NULL);
	pthread_rwlock_init(&fs->takeover.forget_lock, NULL);
}

void takeover_free(struct fs *fs)
{
	/* the manager outlives the filesystem: its hooks first (each set
	 * under the lock the hook is called under, so none runs after) */
	if (atomic_load(&watched) == fs) {
		manager_set_backoff_hook(fs->manager, NULL, NULL);
		manager_set_image_forgotten(fs->manager, NULL);
		atomic_store(&watched, NULL);
	}
	pthread_mutex_lock(&fs->takeover.restored_lock);
	if (fs->takeover.restored)
		strmap_foreach(fs->takeover.restored, free_restored, NULL);
	strmap_free(fs->takeover.restored);
	fs->takeover.restored = NULL;
	/* (the images go with the manager's table) */
	while (fs->takeover.retiring) {
		struct retiring *r = fs->takeover.retiring;

		fs->takeover.retiring = r->next;
		free(r);
	}
	atomic_store(&fs->takeover.connected, false);
	atomic_store(&fs->takeover.any_restored, false);
	pthread_mutex_unlock(&fs->takeover.restored_lock);
	pthread_mutex_lock(&fs->takeover.noted_lock);
	if (fs->takeover.noted) {
		strmap_foreach(fs->takeover.noted, free_noted, NULL);
		strmap_free(fs->takeover.noted);
		fs->takeover.noted = NULL;
	}
	pthread_mutex_unlock(&fs->takeover.noted_lock);
	pthread_mutex_destroy(&fs->takeover.noted_lock);
	pthread_mutex_destroy(&fs->takeover.restored_lock);
	pthread_mutex_destroy(&fs->takeover.retire_lock);
	pthread_rwlock_destroy(&fs->takeover.forget_lock);
	handover_log_free(fs->log);
	fs->log = NULL;
}

/* The manager's back-off hook (under its lock: a write, nothing more).
 * The manager's clock is CLOCK_MONOTONIC, which every process shares. */
static void backoff_noted(void *userdata, const char *key, const struct backoff_state *st)
{
	struct fs *fs = userdata;
	struct handover_backoff b;

	if (!st) {
		handover_note(fs->log, handover_format_backoff_cleared(key));
		return;
	}
	b = (struct handover_backoff){ .reference = (char *)key,
				       .failures = st->failures,
				       .delay_ns = st->delay_ns,
				       .last_ns = clock_mono_ns() - st->idle_ns,
				       .err = st->last.err,
				       .message = (char *)st->last.message };
	handover_note(fs->log, handover_format_backoff(&b));
}

void takeover_watch(struct fs *fs)
{
	if (!fs->log)
		return;
	manager_set_backoff_hook(fs->manager, backoff_noted, fs);
	atomic_store(&watched, fs);
	/* (an image freed because nothing held it, the kernel included:
	 * called under the manager's table of keys, so no other image has
	 * the key yet) */
	manager_set_image_forgotten(fs->manager, note_gone);
}

static void restore_backoff(struct fs *fs, const struct handover_backoff *b)
{
	struct backoff_state st = { .delay_ns = b->delay_ns,
				    .failures = b->failures,
				    .idle_ns = MAX(clock_mono_ns() - b->last_ns, 0) };

	st.last.err = b->err;
	snprintf(st.last.message, sizeof(st.last.message), "%s", b->message);
	/* a delay outside this process's bounds (other options): dropped */
	if (manager_restore_backoff(fs->manager, b->reference, &st) == -EINVAL)
		fprintf(stderr,
			"pullfs: back-off of \"%s\" not carried over: its delay is out of bounds\n",
			b->reference);
}

/* A view of a layer, made again from its image. */
static int restore_view(struct fs *fs, const struct handover_image *hi, struct image **ret)
{
	const char *name = hi->reference + strlen(VIEW_PREFIX);
	_cleanup_free_ char *layer = NULL;
	struct caller who = { .pid = getpid() };
	struct image *img = NULL;
	int r;

	if (strlen(name) <= LAYER_DIGEST_LEN || name[LAYER_DIGEST_LEN] != ':')
		return -EINVAL;
	layer = strndup(name, LAYER_DIGEST_LEN);
	if (!layer)
		return -ENOMEM;
	snprintf(who.comm, sizeof(who.comm), "pullfs");
	r = manager_restore_image(fs->manager, name + LAYER_DIGEST_LEN + 1, hi->digest, 0, &img);
	if (r < 0)
		return r;
	r = manager_layer_view(img, name + LAYER_DIGEST_LEN + 1, layer, &who, ret);
	image_unref(img, 1);
	return r;
}

/* Returns 0, 1 when the kernel holds nothing of the image (not made
 * again), or -errno. */
static int restore_image(struct fs *fs, const struct handover_image *hi)
{
	char name[16];
	struct restored_image *ri;
	struct image *img = NULL;
	bool view = !strncmp(hi->reference, VIEW_PREFIX, strlen(VIEW_PREFIX));
	int held = 0, r;

	/* Before any request is answered the kernel makes no node: one
	 * whose root it has no inode for holds nothing of it (an inode
	 * holds its dentry's parents, up to the root), and never will. */
	if (!view)
		held = fuseio_kernel_has_node(fs->io, INO_IMAGE_BIT | (fuse_ino_t)hi->key << 32);
	if (held == -ENOENT) {
		handover_note(fs->log, handover_format_image_gone(hi->key));
		return 1;
	}
	r = view ? restore_view(fs, hi, &img)
		 : manager_restore_image(fs->manager, hi->reference, hi->digest, hi->key, &img);
	if (r < 0) {
		fprintf(stderr, "pullfs: cannot restore image \"%s\" (%s): %s\n", hi->reference,
			hi->digest, strerror(-r));
		/* Gone from the cache (removed while nothing stood in it).
		 * (Not ESTALE, another image holds the key now; nor ENOMEM.)
		 * While the kernel holds nodes of it, its key is given to no
		 * other image (they would resolve to that image, and their
		 * FORGETs count against it), here and in the next process;
		 * once the kernel has none, the record goes. */
		if (r != -ENOMEM && r != -ESTALE) {
			if (!view && held == 0)
				manager_reserve_key(fs->manager, hi->key);
			else
				handover_note(fs->log, handover_format_image_gone(hi->key));
		}
		return r;
	}
	if (image_key(img) != hi->key) {
		fprintf(stderr,
			"pullfs: image \"%s\" has key %" PRIu32 " now, %" PRIu32
			" before: its nodes are stale\n",
			hi->reference, image_key(img), hi->key);
		image_unref(img, 1);
		return -ESTALE;
	}
	/* the reference restored and the rest of the pin: the kernel's */
	image_kernel_adopt(img);
	image_kernel_ref(img, PIN_REFS - 1);
	image_open(img);
	snprintf(name, sizeof(name), "%" PRIu32, image_key(img));
	ri = calloc(1, sizeof(*ri));
	if (ri) {
		ri->img = img;
		ri->reference = view ? NULL : strdup(hi->reference);
	}
	pthread_mutex_lock(&fs->takeover.restored_lock);
	if (!fs->takeover.restored)
		fs->takeover.restored = strmap_new();
	if (fs->takeover.restored && strmap_get(fs->takeover.restored, name)) {
		image_close(img); /* one pin per image */
	} else if (ri && (view || ri->reference) && fs->takeover.restored &&
		   strmap_put(fs->takeover.restored, name, ri) == 0) {
		ri = NULL;
		atomic_store(&fs->takeover.any_restored, true);
	}
	/* else: out of memory, pinned open for good */
	pthread_mutex_unlock(&fs->takeover.restored_lock);
	restored_image_free(ri);
	note(fs, image_key(img), hi->digest, hi->reference);
	if (view) {
		/* for its layer directory (layers_restore()) */
		if (!fs->takeover.restored_views)
			fs->takeover.restored_views = strmap_new();
		if (!fs->takeover.restored_views ||
		    strmap_put(fs->takeover.restored_views, hi->reference + strlen(VIEW_PREFIX),
			       img) < 0)
			return -ENOMEM;
	}
	return 0;
}

struct dentry_ctx {
	const char *reference;
	struct image *view;
	fuse_ino_t parent;
	const char *name;
};

static int add_dentry(void *userdata, const char *key, void *value)
{
	const struct dentry_ctx *c = userdata;
	struct restored_image *ri = value;
	size_t len = strlen(c->name);
	struct rdentry *d;

	if (c->view ? ri->img != c->view
		    : !ri->reference || strcmp(ri->reference, c->reference) != 0)
		return 0;
	for (d = ri->dentries; d; d = d->next)
		if (d->parent == c->parent && !strcmp(d->name, c->name))
			return 0;
	/* short of memory the image stays pinned until the kernel forgets
	 * its root by itself */
	d = malloc(sizeof(*d) + len + 1);
	if (!d)
		return 0;
	d->parent = c->parent;
	memcpy(d->name, c->name, len + 1);
	d->next = ri->dentries;
	ri->dentries = d;
	return 0;
}

void takeover_restored_dentry(struct fs *fs, const char *reference, struct image *view,
			      fuse_ino_t parent, const char *name)
{
	struct dentry_ctx c = {
		.reference = reference, .view = view, .parent = parent, .name = name
	};

	pthread_mutex_lock(&fs->takeover.restored_lock);
	if (fs->takeover.restored)
		strmap_foreach(fs->takeover.restored, add_dentry, &c);
	pthread_mutex_unlock(&fs->takeover.restored_lock);
}

static int add_objects(void *userdata, const char *key, void *value)
{
	struct strmap *objects = userdata;
	const struct restored_image *ri = value;
	const struct tinode *t;

	for (uint32_t i = 0; (t = image_inode(ri->img, i)); i++)
		if (t->object && strmap_put(objects, t->object, (void *)1) < 0)
			return -ENOMEM;
	return 0;
}

static bool object_kept(void *userdata, const char *object)
{
	return strmap_get(userdata, object) != NULL;
}

/* The backing ids taken over are needed only for inodes the kernel holds
 * open from before, which belong to restored images still held: the ids
 * of objects none of those has are let go of. */
static void unpin_backings(struct fs *fs)
{
	struct strmap *objects = strmap_new();
	int r = objects ? 0 : -ENOMEM;

	pthread_mutex_lock(&fs->takeover.restored_lock);
	if (r == 0 && fs->takeover.restored)
		r = strmap_foreach(fs->takeover.restored, add_objects, objects);
	pthread_mutex_unlock(&fs->takeover.restored_lock);
	if (r == 0)
		files_unpin_backings(fs, object_kept, objects);
	strmap_free(objects);
}

/* Puts img, pinned by the kernel's references alone now, on the list of
 * those takeover_retire() looks at, and has the notifier call it. */
static void retire_later(struct fs *fs, struct image *img)
{
	struct retiring *r = calloc(1, sizeof(*r));

	if (!r)
		return; /* pinned for good */
	r->img = img;
	pthread_mutex_lock(&fs->takeover.restored_lock);
	r->next = fs->takeover.retiring;
	fs->takeover.retiring = r;
	atomic_fetch_add(&fs->takeover.n_retiring, 1);
	pthread_mutex_unlock(&fs->takeover.restored_lock);
	takeover_retire_soon(fs);
}

void takeover_retire_soon(struct fs *fs)
{
	atomic_store(&fs->takeover.retire_due, true);
	ns_notifier_wake(fs);
}

/* Ends the pin of a restored image, once: no longer counted open, nor is
 * the image a view of it was made from.  Returns whether it did. */
static bool release_restored(struct fs *fs, struct image *img, const char *why)
{
	struct restored_image *ri = NULL;
	char name[16];

	snprintf(name, sizeof(name), "%" PRIu32, image_key(img));
	pthread_mutex_lock(&fs->takeover.restored_lock);
	ri = fs->takeover.restored ? strmap_get(fs->takeover.restored, name) : NULL;
	if (ri && ri->img == img)
		strmap_remove(fs->takeover.restored, name);
	else
		ri = NULL;
	pthread_mutex_unlock(&fs->takeover.restored_lock);
	if (!ri)
		return false;
	fprintf(stderr, "pullfs: restored image %" PRIu32 " \"%s\" let go of: %s\n", image_key(img),
		ri->reference ? ri->reference : "(a layer view)", why);
	restored_image_free(ri);
	image_close(img);
	layer_view_release(img);
	/* (its record stays in the log: a lookup may be handing it out
	 * again right now; the next process finds out, restore_image()) */
	retire_later(fs, img);
	return true;
}

/* The kernel evicts an inode only when nothing holds it, and its FORGET
 * then carries every lookup it had (fs/fuse/inode.c, fuse_evict_inode).
 * An open file, a working directory or a root holds the dentry of its
 * inode, which holds its parent's, up to the image root: once the root is
 * forgotten, the kernel has no handle of the image left from the process
 * before, and the image may go when its name is removed.  (The pin of its
 * references stays until takeover_retire(): a FORGET of a node the kernel
 * evicted meanwhile may still be on its way, and that count must land
 * somewhere.) */
static bool is_restored(struct fs *fs, struct image *img)
{
	char name[16];
	struct restored_image *ri;

	snprintf(name, sizeof(name), "%" PRIu32, image_key(img));
	pthread_mutex_lock(&fs->takeover.restored_lock);
	ri = fs->takeover.restored ? strmap_get(fs->takeover.restored, name) : NULL;
	pthread_mutex_unlock(&fs->takeover.restored_lock);
	return ri && ri->img == img;
}

/* A FORGET also comes for an inode the kernel keeps: with a count of one
 * for a node it looked up and could not use (an entry it found invalid,
 * a directory it could not give a second dentry), so the root's FORGET
 * ends the pin only once the kernel is asked and has no inode for it. */
void takeover_forgot(struct fs *fs, struct image *img, fuse_ino_t ino)
{
	if (!atomic_load(&fs->takeover.any_restored) || ino != node_ino(img, image_root(img)))
		return;
	if (is_restored(fs, img)) {
		if (fuseio_kernel_has_node(fs->io, ino) == -ENOENT &&
		    release_restored(fs, img, "its root forgotten"))
			unpin_backings(fs);
	} else if (atomic_load(&fs->takeover.n_retiring) > 0) {
		/* (maybe one of those waiting to be retired) */
		takeover_retire_soon(fs);
	}
}

static int collect_restored(void *userdata, const char *key, void *value)
{
	struct image ***next = userdata;
	const struct restored_image *ri = value;

	*(*next)++ = ri->img;
	return 0;
}

void takeover_probe(struct fs *fs)
{
	_cleanup_free_ struct image **imgs = NULL;
	struct image **next;
	size_t n = 0;

	atomic_store(&fs->takeover.connected, true);
	if (!atomic_load(&fs->takeover.any_restored))
		return;
	pthread_mutex_lock(&fs->takeover.restored_lock);
	n = fs->takeover.restored ? strmap_size(fs->takeover.restored) : 0;
	imgs = n ? calloc(n, sizeof(*imgs)) : NULL;
	next = imgs;
	if (imgs)
		strmap_foreach(fs->takeover.restored, collect_restored, &next);
	pthread_mutex_unlock(&fs->takeover.restored_lock);
	/* Restored images whose root the kernel has no inode for at all
	 * (forgotten before the takeover): nothing will forget them again.
	 * Invalidating the root's attributes (no pages: offset -1) answers
	 * ENOENT for those.  The pins are released by this thread or at a
	 * FORGET, and the images live on (pinned references): imgs stays
	 * valid. */
	bool released = false;
	for (size_t i = 0; imgs && i < n; i++) {
		struct image *img = imgs[i];
		if (fuse_lowlevel_notify_inval_inode(fs->session, node_ino(img, image_root(img)),
						     -1, 0) == -ENOENT)
			released |=
				release_restored(fs, img, "the kernel holds no inode of its root");
	}
	if (released)
		unpin_backings(fs);
}

/* Whether the kernel may hold a node of img: asked of every inode of its
 * tree, the root first (it is held while anything below it is, but for a
 * file whose release is under way). */
static bool kernel_holds_any(struct fs *fs, struct image *img)
{
	const struct tinode *t;

	for (uint32_t i = 0; (t = image_inode(img, i)); i++)
		if (fuseio_kernel_has_node(fs->io, node_ino(img, t)) != -ENOENT)
			return true;
	return false;
}

/* Whether nothing but the kernel's counts holds img, nothing of it is
 * open, and the kernel has none of its nodes. */
static bool unheld(struct fs *fs, struct image *img)
{
	return image_kernel_only(img) && image_open_count(img) == 0 && !kernel_holds_any(fs, img);
}

/* The kernel evicts an inode when nothing holds it, and asking for one it
 * evicted answers ENOENT once its FORGET is queued; no lookup can make
 * one again when no name of this process leads to the image (nothing but
 * the kernel's counts holds it) and the kernel has none of its nodes to
 * look up below.  Such an image is retired: its key stays reserved for
 * it, so that the FORGETs still queued find nothing, or nothing else.  A
 * lookup answered just before that was seen has its node made by the
 * kernel after the answer, which a second look a second later, with no
 * lookup handed out between, finds. */
void takeover_retire(struct fs *fs)
{
	struct retiring **v = NULL, *r;
	size_t cap = 0, n = 0, i;
	bool due = false;

	pthread_mutex_lock(&fs->takeover.retire_lock);
	/* (one put on the list from now on asks again) */
	atomic_store(&fs->takeover.retire_due, false);
	pthread_mutex_lock(&fs->takeover.restored_lock);
	for (r = fs->takeover.retiring; r; r = r->next)
		cap++;
	v = calloc(MAX(cap, 1), sizeof(*v));
	if (v)
		for (r = fs->takeover.retiring; r && n < cap; r = r->next)
			v[n++] = r;
	pthread_mutex_unlock(&fs->takeover.restored_lock);
	for (i = 0; i < n; i++) {
		struct image *img = v[i]->img;
		int64_t now = clock_mono_ns();
		uint64_t lookups = image_kernel_lookups(img), refs = 0;
		bool gone;

		r = v[i];
		if (!unheld(fs, img)) {
			r->unheld_ns = 0;
			continue;
		}
		if (!r->unheld_ns || r->lookups != lookups) {
			r->unheld_ns = now;
			r->lookups = lookups;
			due = true;
			continue;
		}
		if (now - r->unheld_ns < RETIRE_SETTLE_NS) {
			due = true;
			continue;
		}
		pthread_rwlock_wrlock(&fs->takeover.forget_lock);
		gone = image_kernel_only(img) && image_open_count(img) == 0 &&
		       image_kernel_lookups(img) == r->lookups &&
		       fuseio_kernel_has_node(fs->io, node_ino(img, image_root(img))) == -ENOENT;
		if (gone) {
			manager_reserve_key(fs->manager, image_key(img));
			refs = image_retire(img);
		}
		pthread_rwlock_unlock(&fs->takeover.forget_lock);
		if (!gone) {
			r->unheld_ns = 0;
			continue;
		}
		pthread_mutex_lock(&fs->takeover.restored_lock);
		for (struct retiring **p = &fs->takeover.retiring; *p; p = &(*p)->next)
			if (*p == r) {
				*p = r->next;
				atomic_fetch_sub(&fs->takeover.n_retiring, 1);
				break;
			}
		pthread_mutex_unlock(&fs->takeover.restored_lock);
		fprintf(stderr,
			"pullfs: restored image %" PRIu32
			" retired: the kernel holds none of its nodes\n",
			image_key(img));
		free(r);
		image_unref(img, refs);
	}
	free(v);
	if (due)
		atomic_store(&fs->takeover.retire_due, true);
	pthread_mutex_unlock(&fs->takeover.retire_lock);
}

/* The keys of the images some process has its working directory or its
 * root in, as the kernel shows them (/proc/PID/cwd and root, stat'ed
 * without asking the filesystem); dev is the mount's.  NULL when that
 * cannot be told (no /proc, out of memory). */
static struct strmap *keys_entered(dev_t dev)
{
	static const char *const links[] = { "cwd", "root" };
	struct strmap *keys = strmap_new();
	DIR *d = opendir("/proc");
	struct dirent *e;
	bool ok = keys && d;

	while (ok && (e = readdir(d))) {
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		for (size_t i = 0; i < ARRAY_SIZE(links) && ok; i++) {
			char path[sizeof(e->d_name) + 8], name[16];
			struct statx stx;
			uint64_t ino;

			snprintf(path, sizeof(path), "%s/%s", e->d_name, links[i]);
			if (statx(dirfd(d), path, AT_STATX_DONT_SYNC, STATX_INO, &stx) < 0) {
				/* a process gone meanwhile; or one this process
				 * may not look at (of a more privileged user
				 * namespace, like a sandbox's init): skipped,
				 * it can hardly be in the mount (ENOMEM ends) */
				ok = errno != ENOMEM;
				continue;
			}
			ino = stx.stx_ino;
			if (makedev(stx.stx_dev_major, stx.stx_dev_minor) != dev ||
			    !ino_is_image(ino))
				continue;
			snprintf(name, sizeof(name), "%" PRIu32,
				 (uint32_t)((ino & ~INO_IMAGE_BIT) >> 32));
			ok = strmap_put(keys, name, (void *)1) == 0;
		}
	}
	if (d)
		closedir(d);
	if (!ok) {
		strmap_free(keys);
		return NULL;
	}
	return keys;
}

struct keys_ctx {
	uint32_t *v;
	size_t n;
};

static int add_key(void *userdata, const char *key, void *value)
{
	struct keys_ctx *c = userdata;

	c->v[c->n++] = (uint32_t)strtoul(key, NULL, 10);
	return 0;
}

int takeover_entered_keys(void *userdata, uint32_t **ret_keys, size_t *ret_n)
{
	struct fs *fs = userdata;
	struct keys_ctx c = { 0 };
	struct strmap *keys;
	struct statx stx;

	if (statx(AT_FDCWD, fs->mountpoint, AT_STATX_DONT_SYNC, 0, &stx) < 0)
		return -errno;
	keys = keys_entered(makedev(stx.stx_dev_major, stx.stx_dev_minor));
	if (!keys)
		return -ENOMEM;
	c.v = calloc(strmap_size(keys) + 1, sizeof(*c.v));
	if (c.v)
		strmap_foreach(keys, add_key, &c);
	strmap_free(keys);
	if (!c.v)
		return -ENOMEM;
	*ret_keys = c.v;
	*ret_n = c.n;
	return 0;
}

/* What settling a restored image asks the kernel to drop: each dentry
 * that may reach its root, and each entry of its root directory. */
struct drop {
	struct drop *next;
	fuse_ino_t parent;
	char name[];
};

static void drop_add(struct drop **list, fuse_ino_t parent, const char *name)
{
	size_t len = strlen(name);
	struct drop *c = malloc(sizeof(*c) + len + 1);

	if (!c)
		return; /* that dentry stays until the kernel drops it itself */
	c->next = *list;
	c->parent = parent;
	memcpy(c->name, name, len + 1);
	*list = c;
}

struct drops_ctx {
	struct strmap *entered;
	struct drop *list;
};

static int collect_drops(void *userdata, const char *key, void *value)
{
	struct drops_ctx *c = userdata;
	const struct restored_image *ri = value;
	const struct tinode *root = image_root(ri->img);
	fuse_ino_t root_ino = node_ino(ri->img, root);

	if (strmap_get(c->entered, key))
		return 0;
	/* its entries too: a root the process before unhashed (the tag
	 * moved) is alive only through them */
	for (uint32_t i = 0; i < root->n_children; i++)
		drop_add(&c->list, root_ino, root->child_names[i]);
	for (const struct rdentry *d = ri->dentries; d; d = d->next)
		drop_add(&c->list, d->parent, d->name);
	return 0;
}

/* The kernel's counts of lookups of a restored image are not known, so
 * it stays pinned open until the kernel lets go of its root; but the
 * kernel keeps dentries nothing uses for as long as memory allows.  Before
 * GC and rm judge what is in use, the kernel is asked to drop the dentries
 * of restored images no process is in (a working directory or a root:
 * dropping those would make getcwd() fail and detach mounts below, a
 * container's /proc).  What nothing holds goes with its inode at once (a
 * FORGET follows), which the probe sees; what an open file holds only
 * leaves the dentry cache, and is found again at the next lookup. */
void takeover_settle(void *userdata)
{
	struct fs *fs = userdata;
	struct drops_ctx c = { 0 };
	struct statx stx;

	if (!atomic_load(&fs->takeover.any_restored) || !atomic_load(&fs->takeover.connected))
		return;
	if (statx(AT_FDCWD, fs->mountpoint, AT_STATX_DONT_SYNC, 0, &stx) < 0)
		return;
	c.entered = keys_entered(makedev(stx.stx_dev_major, stx.stx_dev_minor));
	if (!c.entered)
		return;
	pthread_mutex_lock(&fs->takeover.restored_lock);
	if (fs->takeover.restored)
		strmap_foreach(fs->takeover.restored, collect_drops, &c);
	pthread_mutex_unlock(&fs->takeover.restored_lock);
	strmap_free(c.entered);
	/* (images stay alive while listed: pinned references) */
	while (c.list) {
		struct drop *d = c.list;

		c.list = d->next;
		/* by the notifier: dropping a dentry waits for its directory,
		 * which a lookup holds for as long as its pull waits for a
		 * registry (a user's trickling one), and a collection must
		 * not wait that long */
		dentries_drop(fs, d->parent, d->name);
		free(d);
	}
	/* bounded; what is not dropped by then keeps its image for now */
	ns_notifier_settle(fs);
	takeover_probe(fs);
	takeover_retire(fs);
}

static int collect_reference(void *userdata, const char *key, void *value)
{
	struct strmap *refs = userdata;
	const struct restored_image *ri = value;

	if (ri->reference)
		strmap_put(refs, ri->reference, NULL);
	return 0;
}

static int note_roots_of(void *userdata, const char *key, void *value)
{
	ns_restore_roots(userdata, key);
	return 0;
}

/* The dentries of restored images under images/, from the namespace just
 * restored.  Short of memory some are not noted: those images stay
 * pinned until the kernel forgets their roots by itself. */
static void note_root_dentries(struct fs *fs)
{
	struct strmap *refs = strmap_new();

	if (!refs)
		return;
	pthread_mutex_lock(&fs->takeover.restored_lock);
	if (fs->takeover.restored)
		strmap_foreach(fs->takeover.restored, collect_reference, refs);
	pthread_mutex_unlock(&fs->takeover.restored_lock);
	strmap_foreach(refs, note_roots_of, fs);
	strmap_free(refs);
}

int takeover_restore(struct fs *fs, const struct handover_state *st, unsigned *ret_failed)
{
	unsigned failed = 0, unheld = 0;
	int r = 0;

	/* Images first: a layer directory of the store is made with its
	 * view. */
	for (size_t i = 0; i < st->n_images; i++) {
		r = restore_image(fs, &st->images[i]);
		if (r < 0)
			failed++;
		else if (r == 1)
			unheld++;
	}
	r = 0;
	if (unheld)
		fprintf(stderr,
			"pullfs: %u images of the previous process not made again: the kernel "
			"holds no node of them\n",
			unheld);
	for (size_t i = 0; i < st->n_ns_keys && r == 0; i++) {
		r = ns_restore(fs, st->ns_keys[i],
			       st->ns_owners && st->ns_owners[i] != HANDOVER_NO_OWNER
				       ? (uid_t)st->ns_owners[i]
				       : NS_NO_OWNER);
		if (r < 0 && r != -ENOMEM) {
			fprintf(stderr, "pullfs: cannot restore node \"%s%s\": %s\n",
				st->ns_keys[i][0] == '/' ? "" : "images/", st->ns_keys[i],
				strerror(-r));
			failed++;
			r = 0;
		}
	}
	if (fs->takeover.restored_views) {
		strmap_free(fs->takeover.restored_views);
		fs->takeover.restored_views = NULL;
	}
	note_root_dentries(fs);
	if (r == -ENOMEM)
		return r;
	for (size_t i = 0; i < st->n_backoffs; i++)
		restore_backoff(fs, &st->backoffs[i]);
	for (size_t i = 0; i < st->n_backings; i++) {
		r = files_restore_backing(fs, st->backings[i].id, st->backings[i].object);
		if (r == -ENOMEM)
			return r;
	}
	/* (ids a process before kept for objects no open file has) */
	unpin_backings(fs);
	*ret_failed = failed;
	return 0;
}

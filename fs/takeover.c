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
 * it.  Images handed out by this process, and the back-off table, are
 * noted in the log for the next one. */
#include "fs-private.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

static pthread_mutex_t noted_lock = PTHREAD_MUTEX_INITIALIZER;
static struct strmap *noted; /* image key in decimal -> digest; noted_lock */
/* the views restored, by "LAYER-DIGEST:REFERENCE"; only while restoring */
static struct strmap *restored_views;
/* Images restored and held open for the handles the kernel may still
 * have, by key in decimal, until the kernel is known to hold no dentry of
 * theirs (restored_lock). */
static pthread_mutex_t restored_lock = PTHREAD_MUTEX_INITIALIZER;
static struct strmap *restored;
static atomic_bool any_restored;

/* Notes image key as handed out under reference for digest, once. */
static void note(uint32_t key, const char *digest, const char *reference)
{
	char name[16];
	const char *had;
	char *d;

	if (handover_fd() < 0)
		return;
	snprintf(name, sizeof(name), "%" PRIu32, key);
	pthread_mutex_lock(&noted_lock);
	if (!noted)
		noted = strmap_new();
	had = noted ? strmap_get(noted, name) : NULL;
	if (had && !strcmp(had, digest)) {
		pthread_mutex_unlock(&noted_lock);
		return;
	}
	/* still under the lock: the record goes out before any reply */
	handover_note(handover_format_image(key, digest, reference));
	d = noted ? strdup(digest) : NULL;
	if (d) {
		free(strmap_remove(noted, name));
		if (strmap_put(noted, name, d) < 0)
			free(d);
	}
	pthread_mutex_unlock(&noted_lock);
}

void takeover_note_image(struct fs *fs, struct image *img, const char *reference)
{
	note(image_key(img), image_digest(img), reference);
}

void takeover_note_view(struct fs *fs, struct image *view, struct image *img, const char *reference,
			const char *layer)
{
	_cleanup_free_ char *name = NULL;

	if (handover_fd() < 0)
		return;
	if (asprintf(&name, VIEW_PREFIX "%s:%s", layer, reference) < 0) {
		name = NULL;
		handover_note(NULL); /* counted as lost */
		return;
	}
	note(image_key(view), image_digest(img), name);
}

struct image *takeover_view(const char *reference, const char *layer)
{
	_cleanup_free_ char *name = NULL;

	if (!restored_views || asprintf(&name, "%s:%s", layer, reference) < 0) {
		name = NULL;
		return NULL;
	}
	return strmap_get(restored_views, name);
}

static int free_noted(void *userdata, const char *key, void *value)
{
	free(value);
	return 0;
}

void takeover_free(void)
{
	pthread_mutex_lock(&restored_lock);
	strmap_free(restored);
	restored = NULL;
	atomic_store(&any_restored, false);
	pthread_mutex_unlock(&restored_lock);
	pthread_mutex_lock(&noted_lock);
	if (noted) {
		strmap_foreach(noted, free_noted, NULL);
		strmap_free(noted);
		noted = NULL;
	}
	pthread_mutex_unlock(&noted_lock);
}

static int64_t mono_ns_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The manager's back-off hook (under its lock: a write, nothing more).
 * The manager's clock is CLOCK_MONOTONIC, which every process shares. */
static void backoff_noted(void *userdata, const char *key, const struct backoff_state *st)
{
	struct handover_backoff b;

	if (!st) {
		handover_note(handover_format_backoff_cleared(key));
		return;
	}
	b = (struct handover_backoff){ .reference = (char *)key,
				       .failures = st->failures,
				       .delay_ns = st->delay_ns,
				       .last_ns = mono_ns_now() - st->idle_ns,
				       .err = st->last.err,
				       .message = (char *)st->last.message };
	handover_note(handover_format_backoff(&b));
}

void takeover_watch(struct fs *fs)
{
	if (handover_fd() >= 0)
		manager_set_backoff_hook(fs->manager, backoff_noted, NULL);
}

static void restore_backoff(struct fs *fs, const struct handover_backoff *b)
{
	struct backoff_state st = { .delay_ns = b->delay_ns,
				    .failures = b->failures,
				    .idle_ns = MAX(mono_ns_now() - b->last_ns, 0) };

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

static int restore_image(struct fs *fs, const struct handover_image *hi)
{
	char name[16];
	struct image *img = NULL;
	bool view = !strncmp(hi->reference, VIEW_PREFIX, strlen(VIEW_PREFIX));
	int r = view ? restore_view(fs, hi, &img)
		     : manager_restore_image(fs->manager, hi->reference, hi->digest, hi->key, &img);

	if (r < 0) {
		fprintf(stderr, "pullfs: cannot restore image \"%s\" (%s): %s\n", hi->reference,
			hi->digest, strerror(-r));
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
	image_ref(img, PIN_REFS - 1);
	image_open(img);
	snprintf(name, sizeof(name), "%" PRIu32, image_key(img));
	pthread_mutex_lock(&restored_lock);
	if (!restored)
		restored = strmap_new();
	if (restored && strmap_get(restored, name))
		image_close(img); /* one pin per image */
	else if (restored && strmap_put(restored, name, img) == 0)
		atomic_store(&any_restored, true);
	/* else: out of memory, pinned open for good */
	pthread_mutex_unlock(&restored_lock);
	note(image_key(img), hi->digest, hi->reference);
	if (view) {
		/* for its layer directory (layers_restore()) */
		if (!restored_views)
			restored_views = strmap_new();
		if (!restored_views ||
		    strmap_put(restored_views, hi->reference + strlen(VIEW_PREFIX), img) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* Ends the pin of a restored image, once. */
static void release_restored(struct image *img)
{
	char name[16];
	bool had;

	snprintf(name, sizeof(name), "%" PRIu32, image_key(img));
	pthread_mutex_lock(&restored_lock);
	had = restored && strmap_get(restored, name) == img;
	if (had)
		strmap_remove(restored, name);
	pthread_mutex_unlock(&restored_lock);
	if (had)
		image_close(img);
}

/* The kernel evicts an inode only when nothing holds it, and its FORGET
 * then carries every lookup it had (fs/fuse/inode.c, fuse_evict_inode).
 * An open file, a working directory or a root holds the dentry of its
 * inode, which holds its parent's, up to the image root: once the root is
 * forgotten, the kernel has no handle of the image left from the process
 * before, and the image may go when its name is removed.  (The pin of its
 * references stays: a node the kernel still caches without a dentry is
 * forgotten later, and that count must land somewhere.) */
void takeover_forgot(struct fs *fs, struct image *img, fuse_ino_t ino)
{
	if (atomic_load(&any_restored) && ino == node_ino(img, image_root(img)))
		release_restored(img);
}

static int collect_restored(void *userdata, const char *key, void *value)
{
	struct image ***next = userdata;

	*(*next)++ = value;
	return 0;
}

void takeover_probe(struct fs *fs)
{
	_cleanup_free_ struct image **imgs = NULL;
	struct image **next;
	size_t n = 0;

	if (!atomic_load(&any_restored))
		return;
	pthread_mutex_lock(&restored_lock);
	n = restored ? strmap_size(restored) : 0;
	imgs = n ? calloc(n, sizeof(*imgs)) : NULL;
	next = imgs;
	if (imgs)
		strmap_foreach(restored, collect_restored, &next);
	pthread_mutex_unlock(&restored_lock);
	/* Restored images whose root the kernel has no inode for at all
	 * (forgotten before the takeover): nothing will forget them again.
	 * Invalidating the root's attributes (no pages: offset -1) answers
	 * ENOENT for those.  The pins are released by this thread or at a
	 * FORGET, and the images live on (pinned references): imgs stays
	 * valid. */
	for (size_t i = 0; imgs && i < n; i++) {
		struct image *img = imgs[i];
		if (fuse_lowlevel_notify_inval_inode(fs->session, node_ino(img, image_root(img)),
						     -1, 0) == -ENOENT)
			release_restored(img);
	}
}

int takeover_restore(struct fs *fs, const struct handover_state *st, unsigned *ret_failed)
{
	unsigned failed = 0;
	int r = 0;

	/* Images first: a layer directory of the store is made with its
	 * view. */
	for (size_t i = 0; i < st->n_images; i++)
		if (restore_image(fs, &st->images[i]) < 0)
			failed++;
	for (size_t i = 0; i < st->n_ns_keys && r == 0; i++) {
		r = ns_restore(fs, st->ns_keys[i]);
		if (r < 0 && r != -ENOMEM) {
			fprintf(stderr, "pullfs: cannot restore node \"%s%s\": %s\n",
				st->ns_keys[i][0] == '/' ? "" : "images/", st->ns_keys[i],
				strerror(-r));
			failed++;
			r = 0;
		}
	}
	if (restored_views) {
		strmap_free(restored_views);
		restored_views = NULL;
	}
	if (r == -ENOMEM)
		return r;
	for (size_t i = 0; i < st->n_backoffs; i++)
		restore_backoff(fs, &st->backoffs[i]);
	for (size_t i = 0; i < st->n_backings; i++) {
		r = files_restore_backing(fs, st->backings[i].id, st->backings[i].object);
		if (r == -ENOMEM)
			return r;
	}
	*ret_failed = failed;
	return 0;
}

/* What the files of image/ share: the state of the images, of a content
 * and of one image.  Not for use outside image/. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "image.h"

struct layer_view;
struct lazy_prefetch;
struct manifest;
struct strmap;

struct images {
	struct images_options o;
	/* Loaded contents by manifest digest, shared by names. */
	pthread_mutex_t content_lock;
	struct strmap *contents; /* digest -> struct image_content *; content_lock */
	/* Every live image by key, read without locks by the filesystem;
	 * written under keys_lock (taken after the names' lock when both
	 * are: images_key_assign()). */
	struct imagekeys *keys;
	pthread_mutex_t keys_lock;
	void (*forgotten)(uint32_t key); /* images_set_forgotten(); keys_lock */
	/* images_set_times_changed(); content_lock */
	void (*times_changed)(void *userdata, const char *digest);
	void *times_userdata;
	/* wall ms of the last LazyReadFailed event (rate limit) */
	_Atomic int64_t lazy_warned_ms;
};

/* What one image manifest loads into, shared by every name of that
 * digest: the merged tree and the packs of its layers.  Immutable once
 * loaded; counted under images.content_lock. */
struct image_content {
	unsigned refs; /* images.content_lock */
	char *digest;  /* manifest digest */
	struct tree *tree;
	struct pack **packs; /* one per layer, by tinode.layer */
	size_t n_layers;
	uint64_t size; /* config + compressed layers, as the registry sent it */
	/* lazy layers are left to complete; the images' completed hook is
	 * due when they are (images.content_lock) */
	bool lazy_pending;
	double loaded_s; /* the clock's seconds when loaded */
	/* its start profile, used or recorded (imageprofile.c); NULL: none */
	struct content_profile *profile;
};

/* One name of an image: images/<reference>/ as the kernel knows it.  A few
 * dozen bytes, since the content is shared; each name has its own key, so
 * that every directory the kernel sees has one parent. */
struct image {
	atomic_uint_fast64_t refcount;
	/* of refcount: the kernel's lookups (image_kernel_ref()) */
	atomic_uint_fast64_t kernel_refs;
	atomic_uint_fast64_t kernel_lookups; /* ever handed out */
	atomic_bool retired;		     /* image_retire() */
	/* its key is one a process before handed out (images_key_take()):
	 * the kernel may hold its files open from then */
	atomic_bool restored;
	atomic_uint open_files; /* regular files the filesystem has open */
	struct images *images;
	struct image_content *content;
	char *name;		  /* it was loaded under */
	uint32_t key;		  /* in images.keys: part of every node id */
	uint32_t generation;	  /* from the manifest digest, never 0 */
	struct layer_view *layer; /* a view of one layer (layerview.c), or NULL */
};

/* layerview.c: contents whose digest is LAYER_CONTENT_PREFIX and a layer
 * digest hold that layer alone, in overlayfs's format; content_get() loads
 * them with layer_content_load().  image_free() ends a view's hold on its
 * image with layer_view_free(). */
#define LAYER_CONTENT_PREFIX "layer:"
int layer_content_load(struct images *imgs, const char *digest, struct image_content **ret,
		       char *errbuf, size_t errlen);
void layer_view_free(struct layer_view *lv);
/* At the end, when every image is freed regardless of references: the
 * view of img (if it is one) forgets its image without dropping it. */
void layer_view_detach(struct image *img);

/* imageprofile.c: the start profile of a content (docs/profiles.md).  At
 * the load of c from mf: the stored profile of its digest, matched to its
 * layers, or else a recorder of this start; NULL when its layers are all
 * local, recording is off and there is no profile, or a profile was
 * dropped as stale and recording is off.  One reference, the content's. */
struct content_profile;
struct content_profile *content_profile_start(struct images *imgs, const struct image_content *c,
					      const struct manifest *mf);
void content_profile_put(struct content_profile *cp);
/* The profile's files in layer (their content objects as keys), NULL when
 * none: one reference more, dropped by content_profile_prefetched(). */
const struct strmap *content_profile_layer(struct content_profile *cp, size_t layer);
/* A completion's prefetch of the profile's files is over; the last one
 * says so in a ProfileUsed event. */
void content_profile_prefetched(struct content_profile *cp, const struct lazy_prefetch *pf, int r);
/* The load gave every layer's completion its part (after
 * content_profile_layer() for each). */
void content_profile_handed(struct content_profile *cp);
/* An open of file (a regular file of the content): recorded while the
 * window is open. */
void content_profile_note(struct content_profile *cp, const struct tinode *file);

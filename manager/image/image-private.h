/* What the files of image/ share: the state of the images, of a content
 * and of one image.  Not for use outside image/. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "image.h"

struct layer_view;
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
	atomic_uint open_files;		     /* regular files the filesystem has open */
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

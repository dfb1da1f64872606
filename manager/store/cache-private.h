/* What the files of the cache (cache.c: layout, blobs, layers, references;
 * objects.c: the content store) share. */
#pragma once

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cache.h"
#include "digest.h"

/* A layer served from its stage in tmp/ while it is published: the
 * publisher shows it to layer_openat() (cache_stage_show) and withdraws it
 * once the layer is in layers/ or before the stage's directory is closed
 * (cache_stage_hide).  The publisher owns the entry and its descriptor. */
struct cache_stage_entry {
	struct cache_stage_entry *next;
	char hex[DIGEST_HEX_LEN + 1];
	int dirfd;
};

struct cache {
	int dirfd;
	int lockfd;
	int blobs_fd;	/* blobs/sha256 */
	int layers_fd;	/* layers */
	int objects_fd; /* objects */
	int refs_fd;	/* refs */
	int tmp_fd;	/* tmp */
	/* Layers unpacked and verified, served from their stage while the
	 * publisher flushes and publishes them (publish.c). */
	struct publisher *pub;
	/* Where a layer lives (layer_openat): its stage while one is shown
	 * here, else layers/.  Taken after the publisher's lock. */
	pthread_mutex_t stages_lock;
	struct cache_stage_entry *stages; /* stages_lock */
	atomic_uint n_stages;		  /* the lookup's fast path */
	/* Renames into layers/ started and flushed: a reference file
	 * flushes layers/ only when the two differ. */
	atomic_uint_fast64_t layers_renamed, layers_flushed;
	/* cache_touch() counts each change of what the cache holds on disk;
	 * the memo keeps the scans of the status and the metrics while it
	 * stays the same. */
	atomic_uint_fast64_t generation;
	struct cache_memo *memo;
};

/* cache.c: where a layer lives.  layer_openat() opens file (NULL: the
 * directory) of layer hex, in its stage while one is shown, else in
 * layers/; returns a descriptor or -errno.  A stage is shown from before
 * its layer is renamed into layers/ until after, so that an open finds
 * the layer throughout. */
void cache_stage_show(struct cache *c, struct cache_stage_entry *e);
void cache_stage_hide(struct cache *c, struct cache_stage_entry *e);
int layer_openat(struct cache *c, const char *hex, const char *file, int flags);

/* cache-memo.c: the memo's life, with the cache's. */
int cache_memo_new(struct cache *c);
void cache_memo_free(struct cache *c);

/* Allocated bytes of a file; 0 when absent. */
uint64_t file_bytes(int dirfd, const char *name);

/* A set of inode numbers, to count shared objects once. */
struct inoset {
	uint64_t *slots;
	size_t n, cap;
};
void inoset_done(struct inoset *set);

/* Allocated bytes of the objects of layer digest: with seen NULL, only
 * those no other layer holds (what removing the layer frees); else those
 * not in seen yet, which are added to it.  A lazy layer's partial files
 * count either way. */
uint64_t objects_layer_bytes(struct cache *c, const char *digest, struct inoset *seen);
/* Enters the objects of a staged layer into objects/, replacing each that
 * is already there by a link to the stored one. */
int objects_enter(struct cache *c, int stage_fd, const struct layer_index *li, bool lazy);

/* A stage (in tmp/) flushed to stable storage and published as
 * layers/HEX: one syncfs, the objects' links, objects/ and the stage
 * flushed, the rename, layers/ flushed.  A layer that appeared meanwhile
 * leaves the stage as it is (the caller discards it).  Returns 0 (*ret_renamed
 * says whether the stage became the layer) or -errno, with nothing published. */
int layer_publish(struct cache *c, int stage_fd, const char *stage_name, const char *hex,
		  const struct layer_index *li, bool lazy, bool *ret_renamed);
/* Writes buf under name in dirfd, atomically and durably (tmp/ first). */
int write_atomic(struct cache *c, int dirfd, const char *name, const void *buf, size_t len);
void cache_stage_discard(struct cache *c, const char *name);

/* publish.c: the publisher of staged layers and of the reference files
 * that wait for them. */
/* Publishes what a killed process of this boot left staged and verified
 * in tmp/, with the references that waited for it.  Before tmp/ is
 * emptied, at open. */
void publisher_recover(struct cache *c);
int publisher_new(struct cache *c);
/* Publishes what is queued, then stops the thread. */
void publisher_free(struct cache *c);
/* Takes the stage over: marked verified, queued, served from where it is.
 * Returns 0 or -errno (the stage is the caller's then). */
int publisher_queue(struct cache *c, struct cache_layer_stage *st, const char *hex);
bool publisher_staged(struct cache *c, const char *hex);
/* fn("sha256:HEX") for each layer queued for publishing (a copy of the
 * list: fn runs without the publisher's lock). */
int publisher_foreach_staged(struct cache *c, int (*fn)(void *userdata, const char *digest),
			     void *userdata);
/* 1 when the reference file (its JSON, for refs/name) waits for staged
 * layers (the publisher writes it), 0 when it can be written now, -errno. */
int publisher_defer_ref(struct cache *c, const char *name, const char *json);
void publisher_forget_ref(struct cache *c, const char *name);

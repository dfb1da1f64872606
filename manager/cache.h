/* The on-disk cache.  Everything is reached relative to one directory fd
 * with openat()-family calls; no host path is ever built from image
 * content.  Layout:
 *
 *   lock                 flock()ed by the daemon that owns the cache
 *   blobs/sha256/HEX     verified small blobs: manifests, indexes, configs
 *   layers/HEX/pack      unpacked layer: every regular file's bytes
 *   layers/HEX/index     unpacked layer: entries (layer_index_write format)
 *   refs/HEX             one per cached reference (HEX = sha256 of the
 *                        reference string): JSON {reference, digest, ...}
 *   tmp/                 work in progress; emptied at every start
 *
 * Publishing is a rename into place, so a kill at any moment leaves either
 * the old state or the new one.  A reference file is written last: an
 * image is visible only once everything it needs is in place. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layer.h"

struct cache;

/* Creates the layout under dir if needed, takes the lock (-EBUSY when
 * another daemon holds it) and empties tmp/.  Returns 0 or -errno; errbuf
 * says what failed. */
int cache_open(const char *dir, struct cache **ret, char *errbuf,
	       size_t errlen);
void cache_close(struct cache *c);

/* Reads blob `digest` (at most max bytes) and checks it still hashes to
 * its name.  Returns 0 with a malloc'ed buffer, -ENOENT, -EBADMSG. */
int cache_blob_read(struct cache *c, const char *digest, size_t max,
		    char **ret_buf, size_t *ret_len);
bool cache_blob_present(struct cache *c, const char *digest);
/* Stores a verified blob atomically.  Returns 0 or -errno (-ENOSPC). */
int cache_blob_write(struct cache *c, const char *digest, const void *buf,
		     size_t len);

bool cache_layer_present(struct cache *c, const char *digest);
/* An unpacked layer's pack, read-only and O_CLOEXEC: returns the fd or
 * -errno (-ENOENT when absent). */
int cache_layer_open_pack(struct cache *c, const char *digest);
/* An unpacked layer's index: 0, -ENOENT when absent, -EBADMSG when it is
 * damaged. */
int cache_layer_read_index(struct cache *c, const char *digest,
			   struct layer_index **ret);

/* A fresh directory tmp/<prefix>.XXXXXX for staging.  Returns 0 with its
 * name (caller frees) and an O_DIRECTORY fd. */
int cache_stage_new(struct cache *c, const char *prefix, char **ret_name,
		    int *ret_dirfd);
/* Removes a staging directory and the files in it (it holds no
 * subdirectories).  Never fails loudly. */
void cache_stage_discard(struct cache *c, const char *name);
/* Moves staging directory `name` to layers/HEX of digest.  When the layer
 * appeared meanwhile, the staged copy is discarded and 0 returned. */
int cache_layer_publish(struct cache *c, const char *name,
			const char *digest);

struct cache_ref {
	char *reference; /* canonical */
	char *digest;	 /* manifest digest (the platform's image manifest) */
	char *index_digest; /* the index it was picked from, or NULL */
	int64_t pulled_at;  /* unix seconds */
};
void cache_ref_done(struct cache_ref *r);

/* Every reference file that parses; damaged ones are skipped. */
int cache_refs_load(struct cache *c, struct cache_ref **ret, size_t *ret_n);
/* Writes the reference file atomically (the publish step of a pull). */
int cache_ref_save(struct cache *c, const struct cache_ref *r);
int cache_ref_remove(struct cache *c, const char *reference);

/* Bytes the cache takes on disk (allocated blocks of blobs and layers)
 * and how many layers it holds. */
int cache_usage(struct cache *c, uint64_t *ret_bytes, unsigned *ret_layers);
/* Allocated bytes of one layer / one blob; 0 when absent. */
uint64_t cache_layer_bytes(struct cache *c, const char *digest);
uint64_t cache_blob_bytes(struct cache *c, const char *digest);
/* Removes a layer: renamed out of layers/ first, so it vanishes at once,
 * then deleted.  Returns 0 or -errno (-ENOENT when absent). */
int cache_layer_remove(struct cache *c, const char *digest);
int cache_blob_remove(struct cache *c, const char *digest);
/* Calls fn with the digest of every layer / blob in the cache. */
int cache_foreach_layer(struct cache *c,
			int (*fn)(void *userdata, const char *digest),
			void *userdata);
int cache_foreach_blob(struct cache *c,
		       int (*fn)(void *userdata, const char *digest),
		       void *userdata);

/* Bytes free for unprivileged writers on the cache's filesystem. */
int cache_statfs(struct cache *c, uint64_t *ret_total, uint64_t *ret_free);

/* The on-disk cache.  Everything is reached relative to one directory fd
 * with openat()-family calls; no host path is ever built from image
 * content.  Layout:
 *
 *   lock                 flock()ed by the daemon that owns the cache
 *   blobs/sha256/HEX     verified small blobs: manifests, indexes, configs
 *   layers/HEX/pack      unpacked layer: the bytes of its small regular files
 *   layers/HEX/o.OBJ     unpacked layer: a hard link to each object it uses
 *   layers/HEX/index     unpacked layer: entries (layer_index_write format)
 *   objects/OBJ          the content store's index: one link per object,
 *                        OBJ the hex SHA-256 of a file's content (objects.c)
 *   refs/HEX             one per cached reference (HEX = sha256 of the
 *                        reference string): JSON {reference, digest, ...}
 *   tmp/                 work in progress; emptied at every start
 *
 * Publishing is a rename into place, so a kill at any moment leaves either
 * the old state or the new one; what is published is flushed to stable
 * storage before its rename and the directory after it, so a power cut
 * does too ("Durability" in docs/content-store.md).  A layer's objects are
 * entered into objects/ before the layer itself is published.  A reference
 * file is written last: an image is visible only once everything it needs
 * is in place. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layer.h"

struct cache;

/* Creates the layout under dir if needed, takes the lock (-EBUSY when
 * another daemon holds it; one on its way out is waited for, a few
 * seconds at most, as by cache_lock_take) and empties tmp/.  Returns 0
 * or -errno; errbuf says what failed. */
int cache_open(const char *dir, struct cache **ret, char *errbuf, size_t errlen);
/* The cache's lock, taken by a supervisor for all its serving processes:
 * a descriptor (its number in CACHE_LOCK_ENV for them, kept across exec)
 * or -errno (-EBUSY: another pullfs has it), the reason in errbuf.  A
 * serving process killed with a thread held in the kernel keeps its
 * descriptors until that thread is free, which only the next process can
 * do: so the lock is not its alone. */
#define CACHE_LOCK_ENV "PULLFS_CACHE_LOCK_FD"
/* A holder on its way out is waited for, 5 s at most: the process that
 * took the lock is gone or ending (a supervisor killed, its serving process
 * still running for the moment it takes to notice, unmount and exit) or
 * has SIGTERM or SIGINT pending, or the holder said it stops
 * (cache_lock_stopping).  The lock file is emptied once taken
 * (cache_open() too). */
int cache_lock_take(const char *dir, char *errbuf, size_t errlen);
/* Said by the holder of the lock (fd from cache_lock_take) once it stops:
 * a start meanwhile waits for it. */
#define CACHE_LOCK_STOPPING "stopping"
void cache_lock_stopping(int fd);
void cache_close(struct cache *c);

/* Reads blob `digest` (at most max bytes) and checks it still hashes to
 * its name.  Returns 0 with a malloc'ed buffer, -ENOENT, -EBADMSG. */
int cache_blob_read(struct cache *c, const char *digest, size_t max, char **ret_buf,
		    size_t *ret_len);
bool cache_blob_present(struct cache *c, const char *digest);
/* Stores a verified blob atomically and durably (flushed before its
 * rename, the directory after).  Blocks on the disk.  Returns 0 or -errno
 * (-ENOSPC, -EIO from a flush). */
int cache_blob_write(struct cache *c, const char *digest, const void *buf, size_t len);

bool cache_layer_present(struct cache *c, const char *digest);
/* An unpacked layer's pack, read-only and O_CLOEXEC: returns the fd or
 * -errno (-ENOENT when absent). */
int cache_layer_open_pack(struct cache *c, const char *digest);
/* An unpacked layer's index: 0, -ENOENT when absent, -EBADMSG when it is
 * damaged. */
int cache_layer_read_index(struct cache *c, const char *digest, struct layer_index **ret);

/* Regular files at least this big become objects of their own: an eighth
 * of the files of a Debian system, 94 % of its bytes.  (16 KiB would take
 * 98 % of the bytes in a third of the files, and the file creations made
 * a cold pull of Debian 35 % slower.) */
#define CACHE_OBJECT_MIN_SIZE (64u << 10)

/* A layer being unpacked: a staging directory under tmp/ with the pack
 * open for writing and the directory objects are written to
 * (struct layer_objects). */
struct cache_layer_stage {
	char *name;
	int dirfd;
	int pack_fd;
};
int cache_layer_stage(struct cache *c, const char *digest, struct cache_layer_stage *st);
/* Writes the index and hands the verified layer to the publisher
 * (publish.c): from then on it is served from its stage (every open of a
 * layer's files goes there), while a thread flushes it to stable storage
 * (one syncfs), enters its objects into the content store and renames it
 * into layers/; reference files saved meanwhile wait for that.  Without a
 * boot id it is published here, blocking on the disk.  A layer already in
 * layers/ stays, unless it is a lazy one not verified against its digest
 * (its "lazy" file, lazy.h): this one replaces it, and the lazy directory
 * goes to tmp/ for the images that hold it (emptied at the next start).
 * The stage is the cache's either way; on an error nothing is published. */
int cache_layer_commit(struct cache *c, struct cache_layer_stage *st, const char *digest,
		       const struct layer_index *li);
/* The same for a lazy layer (lazy.h): the index from its table of
 * contents, with the "lazy" and "toc" files; objects that are already
 * stored (another layer has the content) are linked in at once, the
 * others come later. */
int cache_layer_commit_lazy(struct cache *c, struct cache_layer_stage *st, const char *digest,
			    const struct layer_index *li, const char *lazy_text, const void *toc,
			    size_t toc_len);
/* Waits until every layer committed so far is published (or failed to
 * be), with the reference files that waited for it. */
void cache_publish_wait(struct cache *c);
/* Throws a stage away (safe on a zeroed or finished one). */
void cache_layer_abandon(struct cache *c, struct cache_layer_stage *st);

/* An object of a layer (struct tinode's object), read-only: the fd or
 * -errno. */
int cache_layer_open_object(struct cache *c, const char *layer_digest, const char *object);

/* An O_DIRECTORY fd of the published layer digest, or -errno. */
int cache_layer_open_dir(struct cache *c, const char *digest);
/* Enters the object o.OBJ of a layer directory into the content store
 * (or replaces it by the stored copy).  Returns 0 or -errno. */
int cache_object_enter(struct cache *c, int layer_dirfd, const char *object);

/* Whether the stored object OBJ (objects/OBJ) is held by a layer that a
 * pull without credentials brought (proofs/, blobproof.h): only such an
 * object may be linked by a lazy layer whose table of contents names it.
 * Reads every layer directory's entry for it; blocks on the disk. */
bool cache_object_public(struct cache *c, const char *object);

/* The same, from the directory of a retired layer (cache_layer_retire). */
int cache_object_openat(int layer_dirfd, const char *object);

struct cache_objects_stats {
	uint64_t objects;      /* distinct contents stored */
	uint64_t bytes;	       /* their allocated bytes */
	uint64_t uses;	       /* layers using them, summed */
	uint64_t shared_bytes; /* bytes that would be stored again without
				* sharing */
};
int cache_objects_stats(struct cache *c, struct cache_objects_stats *ret);
/* Deletes the objects no layer uses any more.  Returns 0 or -errno. */
int cache_objects_sweep(struct cache *c, uint64_t *ret_freed);

struct cache_ref {
	char *reference;    /* canonical */
	char *digest;	    /* manifest digest (the platform's image manifest) */
	char *index_digest; /* the index it was picked from, or NULL */
	int64_t pulled_at;  /* unix seconds */
	uint32_t image_key; /* the key of its view (imagekeys.h); 0: none stored */
	/* Pulled with the registry's credentials; not known for a file from
	 * before it was recorded. */
	bool credentials, credentials_known;
	/* A name a user other than root pulled: the user its content is
	 * charged to (quota.h). */
	bool user;
	uint32_t uid;
};
void cache_ref_done(struct cache_ref *r);

/* Every reference file that parses; damaged ones are skipped. */
int cache_refs_load(struct cache *c, struct cache_ref **ret, size_t *ret_n);
/* Writes the reference file atomically and durably (the publish step of
 * a pull), after flushing layers/ if a rename into it is not flushed yet;
 * while layers are being published in the background, the publisher
 * writes it after them and this returns at once.  Blocks on the disk. */
int cache_ref_save(struct cache *c, const struct cache_ref *r);
int cache_ref_remove(struct cache *c, const char *reference);

/* Bytes the cache takes on disk (allocated blocks of blobs and layers)
 * and how many layers it holds.  Reads every layer directory. */
int cache_usage(struct cache *c, uint64_t *ret_bytes, unsigned *ret_layers);
/* Allocated bytes of one layer / one blob; 0 when absent. */
uint64_t cache_layer_bytes(struct cache *c, const char *digest);

/* Says that what the cache holds on disk changed (a layer or blob stored
 * or removed, an object entered or swept, a file of a lazy layer fetched
 * or a chunk of it written): the next cache_*_memo() call scans again.
 * Any thread; never blocks. */
void cache_touch(struct cache *c);
/* cache_usage(), cache_objects_stats() and cache_layer_bytes() as of the
 * last cache_touch(): the scan runs once per change, so that a status or
 * metrics reader costs no disk reads while the cache stays as it is (a
 * lazy layer's files are one file each).  Thread-safe; the values may
 * miss a change another process made to the same cache. */
int cache_usage_memo(struct cache *c, uint64_t *ret_bytes, unsigned *ret_layers);
int cache_objects_stats_memo(struct cache *c, struct cache_objects_stats *ret);
uint64_t cache_layer_bytes_memo(struct cache *c, const char *digest);
uint64_t cache_blob_bytes(struct cache *c, const char *digest);
/* Layers served from their stage and waiting to be published (flushed,
 * shared with stored objects, renamed into layers/). */
unsigned cache_layers_publishing(struct cache *c);
/* Removes a layer: renamed out of layers/ first, so it vanishes at once,
 * then deleted.  Returns 0 or -errno (-ENOENT when absent). */
int cache_layer_remove(struct cache *c, const char *digest);
int cache_blob_remove(struct cache *c, const char *digest);
/* Removes a layer that is still being read: moved out of layers/ into
 * tmp/ with its files kept, returning its new name there (caller frees)
 * and an O_DIRECTORY fd of it.  cache_retired_discard() deletes it when
 * nothing reads it any more; tmp/ is emptied at the next start anyway. */
int cache_layer_retire(struct cache *c, const char *digest, char **ret_name, int *ret_dirfd);
void cache_retired_discard(struct cache *c, const char *name);
/* Calls fn with the digest of every layer / blob in the cache. */
int cache_foreach_layer(struct cache *c, int (*fn)(void *userdata, const char *digest),
			void *userdata);
int cache_foreach_blob(struct cache *c, int (*fn)(void *userdata, const char *digest),
		       void *userdata);

/* Bytes free for unprivileged writers on the cache's filesystem. */
int cache_statfs(struct cache *c, uint64_t *ret_total, uint64_t *ret_free);

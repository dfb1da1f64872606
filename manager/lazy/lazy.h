/* Lazy layers: a layer with a table of contents (toc.h) is published from
 * its TOC alone, and its files are fetched chunk by chunk when they are
 * read, or in the background.  See docs/content-store.md.
 *
 * In the layer directory, beside the index made from the TOC:
 *   lazy         what is needed to fetch (format, TOC place, registry and
 *                repository); present while some file is not complete
 *   toc          the verified TOC bytes, parsed again at load
 *   p.OBJ        a file being fetched: sparse, written chunk by chunk
 *   p.OBJ.map    one byte per chunk of it, '1' once the chunk is written
 *   pack         the small files (lazy-pack.c), each at its place
 *   pack.map     one byte per small file, '1' once it is written
 * A file whose chunks are all there is checked against its digest and
 * becomes the object o.OBJ, like the files of a full unpack; a small file
 * (under CACHE_OBJECT_MIN_SIZE, in one chunk) stays in the pack, and once
 * the layer is complete its index says where, as a full unpack's does. */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "toc.h"

struct cache;
struct registry;
struct lazy_layer;
struct lazy_stats;
struct strmap;

#define LAZY_LATENCY_BUCKETS 12
/* The upper bounds of the latency buckets, in seconds. */
extern const double lazy_latency_bounds[LAZY_LATENCY_BUCKETS];

/* Counts one on-demand fetch of us microseconds in stats. */
void lazy_stats_observe(struct lazy_stats *stats, uint64_t us);

/* What lazy fetching did, for the metrics (shared by every layer of one
 * daemon). */
struct lazy_stats {
	atomic_uint_fast64_t fetches;	     /* Range requests for chunks */
	atomic_uint_fast64_t bytes;	     /* compressed bytes they brought */
	atomic_uint_fast64_t failures;	     /* fetches that failed */
	atomic_uint_fast64_t files_complete; /* files that became objects */
	atomic_uint_fast64_t layers_complete;
	atomic_uint_fast64_t background_bytes; /* of bytes: the completion's */
	/* bytes of blobs written to their kept copies (lazy-blob.c) */
	atomic_uint_fast64_t kept_bytes;
	/* files found in the content store instead of fetched (partial
	 * pulls), and the compressed bytes that spared */
	atomic_uint_fast64_t files_linked;
	atomic_uint_fast64_t saved_bytes;
	/* latency of the fetches readers waited for: a count per bucket
	 * (lazy_latency_bounds; the last is +Inf) and the sum */
	atomic_uint_fast64_t latency[LAZY_LATENCY_BUCKETS + 1];
	atomic_uint_fast64_t latency_sum_us;
	/* readers' fetches under way: the background completion yields to
	 * them */
	atomic_uint foreground;
	/* readers' fetches that succeeded: they delay the completion's
	 * start, and wake one that failed (lazy-schedule.h) */
	atomic_uint_fast64_t reader_ok;
};

/* Where a lazy layer's content comes from. */
struct lazy_source {
	struct toc_layer tl;
	struct toc_range where;
	char *domain;
	char *repo;
	/* small files go into the layer's pack (layers published before
	 * packs keep an object per file) */
	bool packs;
};

/* Fetches and verifies the TOC of blob_digest from src (tl, domain, repo):
 * eStargz: the tail of the blob, then the TOC's range; zstd:chunked: the
 * range its annotation gives, one request.  The range goes to
 * src->where.  Its entries are held to lim (NULL: the defaults; see
 * toc_parse()).
 * Returns 0 with the parsed toc and its raw bytes (caller frees both), or
 * -errno with a reason in errbuf (-EBADMSG: malformed or not matching its
 * digest). */
int lazy_fetch_toc(struct registry *reg, struct lazy_source *src, const char *blob_digest,
		   const struct layer_limits *lim, struct toc **ret_toc, char **ret_buf,
		   size_t *ret_len, char *errbuf, size_t errlen);

/* The "lazy" file's text for src, and back.  Returns 0 or -ENOMEM /
 * -EBADMSG. */
int lazy_source_format(const struct lazy_source *src, char **ret);
int lazy_source_parse(const char *text, struct lazy_source *ret);
void lazy_source_done(struct lazy_source *src);

/* Opens the lazy state of layer digest: -ENOENT when the layer is not
 * lazy (complete, or absent), -EBADMSG when its files are damaged.  files
 * (taken, freed on failure; NULL: the table is read from the layer) is
 * the layer's table after toc_keep_files(), as the pull that just
 * published it parsed it: the table is then not parsed again. */
int lazy_layer_open_with(struct cache *c, const char *digest, struct lazy_stats *stats,
			 struct toc *files, struct lazy_layer **ret);
int lazy_layer_open(struct cache *c, const char *digest, struct lazy_stats *stats,
		    struct lazy_layer **ret);
void lazy_layer_free(struct lazy_layer *l);

/* Reads size bytes at off of the layer's file with content object into
 * buf, fetching the chunks that are missing (merged into few Range
 * requests, each chunk verified before it is written).  Readers of one
 * chunk share its fetch.  Returns the bytes read (short only at the end
 * of the file), or -errno: -EBADMSG for a chunk (or a file) the registry
 * sent wrong, the registry's errno (-EHOSTUNREACH, -ETIMEDOUT...), -ENOSPC.
 * Blocks. */
ssize_t lazy_read(struct lazy_layer *l, struct registry *reg, const char *object, uint64_t off,
		  size_t size, void *buf);

/* Whether the layer's file with content object is all local: complete,
 * or the layer complete.  A file not used yet is looked for on disk
 * only (one that the content store holds is linked at its first read).
 * Takes the layer's locks. */
bool lazy_file_local(struct lazy_layer *l, const char *object);

/* Whether the layer's file with content object is kept in its pack
 * (lazy-pack.c): never an object of its own, so never opened in
 * passthrough.  No system call. */
bool lazy_file_packed(struct lazy_layer *l, const char *object);

/* How much of the layer is local: ret_local of its ret_total compressed
 * bytes (the blob's size): the table of contents and the blob ranges of
 * the chunks present (their union: eStargz files may share a gzip
 * member); all of it only once complete.  Reads the maps of files not
 * used yet.  Takes the layer's locks. */
void lazy_layer_bytes(struct lazy_layer *l, uint64_t *ret_local, uint64_t *ret_total);

/* Whether the cached layer digest may serve a pull whose descriptor
 * describes its table of contents with tl (NULL, or TOC_NONE: none): a
 * layer verified against its digest (no "lazy" file) serves any; a lazy
 * one, built from a table trusted through one manifest's annotation only,
 * serves only the descriptors that name that same table.  false when the
 * layer is absent.  Reads the "lazy" file. */
bool lazy_layer_serves(struct cache *c, const char *digest, const struct toc_layer *tl);

/* In the layer directory beside "lazy": every file is an object, checked
 * against the table of contents; the blob was not checked against its
 * digest (lazy_layer_complete()), so the layer is still shared only under
 * its table (lazy_layer_serves()). */
#define LAZY_COMPLETE_FILE "complete"

/* How the cached layer digest was verified: against its blob's digest
 * (a full pull, or a completion that read the whole blob), against its
 * table of contents only (every file checked, the blob never read whole),
 * or not yet (lazy, not complete).  Reads the layer's directory. */
enum lazy_verified { LAZY_VERIFIED_NONE, LAZY_VERIFIED_TOC, LAZY_VERIFIED_DIGEST };
enum lazy_verified lazy_layer_verified(struct cache *c, const char *digest);

/* A new descriptor of the layer's directory (it may have been moved out
 * of layers/ since), or -errno. */
int lazy_layer_dup_dir(struct lazy_layer *l);

/* Readers' fetches of the layer so far (a file another reader's request
 * brought along counts as one at its first read), and the compressed
 * bytes they brought.  Readers who fetch LAZY_BULK_BYTES of an image, or make
 * LAZY_BULK_FETCHES fetches of it, read it rather than start from it (a
 * start reads a few MB in a few dozen fetches): lazy-completer.c then
 * ends the start-up window of its layers. */
#define LAZY_BULK_BYTES (16u << 20)
#define LAZY_BULK_FETCHES 64u
/* us: the time the readers' requests took, one after the other (from the
 * request to the last byte): bytes / us is what the link gives a reader;
 * size: the blob's. */
struct lazy_reads {
	uint64_t fetches, bytes;
	uint64_t us, size;
};
void lazy_layer_reads(struct lazy_layer *l, struct lazy_reads *ret);

/* The layer left the cache (removed while images still read it): its
 * completion and prefetch stop at their next chunk with -ECANCELED;
 * readers' fetches go on. */
void lazy_layer_abandon(struct lazy_layer *l);

/* Whether lazy_layer_complete() finished the layer. */
bool lazy_layer_is_complete(struct lazy_layer *l);

/* Whether the layer is complete with every file checked against its
 * table of contents, and its blob never read whole against its digest. */
bool lazy_layer_toc_verified(struct lazy_layer *l);

/* Whether lazy_layer_complete() found the blob to be the layer's and its
 * table of contents another than the one the layer was built from (a
 * manifest that claimed a layer digest for a table of its own), or chunks
 * in it that are not what that table says. */
bool lazy_layer_foreign_toc(struct lazy_layer *l);

/* The compressed bytes of the files of toc that the layer directory dirfd
 * already holds as objects: what publishing it took from the content
 * store instead of the registry. */
uint64_t lazy_toc_present_bytes(int dirfd, const struct toc *toc);

/* The Prometheus text of the stats. */
void lazy_stats_metrics(const struct lazy_stats *stats, FILE *f);

/* Completes the layer with every byte fetched once: the chunks still
 * missing, by Range requests in blob order of at most a few MB each
 * (chunks close to each other in one request), each chunk checked against
 * the table of contents as it arrives and written at once, so that a
 * reader of it waits for it instead of asking again; a reader's own
 * fetches go first (the request pauses).  When the requests read the whole
 * blob in order from its first byte (nothing was fetched before, and the
 * tail after the last chunk is small), the blob is checked against its
 * digest as it passes: it must match and hold, where the table of contents
 * was read from, the very bytes of the table the layer was built from
 * (else -EBADMSG, and lazy_layer_foreign_toc() is true: the layer stays
 * lazy).  Every file is then checked whole and made an object, and the
 * layer marked complete: verified against its digest (its "lazy" file
 * removed), or against its table of contents only
 * (lazy_layer_toc_verified(): it keeps its "lazy" file, and is shared only
 * under that table).  What the requests wrote is flushed and marked in the
 * maps every 2 MiB and half a second, and at their end: a completion killed
 * on its way fetches no more than that again.
 * Stops with -ECANCELED when *cancel becomes true.  Returns 0 or -errno. */
int lazy_layer_complete(struct lazy_layer *l, struct registry *reg, const atomic_bool *cancel);

/* What lazy_layer_prefetch() did. */
struct lazy_prefetch {
	size_t files;	/* files before the landmark */
	bool fetched;	/* some of them were missing and were fetched */
	uint64_t bytes; /* compressed bytes the requests brought */
};

/* eStargz's prefetch landmark: the files the image's builder placed
 * before it (those its workload reads first) are fetched now, as
 * lazy_layer_complete() fetches, with readers' fetches first, and made
 * objects; nothing when the layer has no landmark or those files are
 * local.  Returns 0 or -errno (what failed is fetched when read, or by
 * the completion). */
int lazy_layer_prefetch(struct lazy_layer *l, struct registry *reg, const atomic_bool *cancel,
			struct lazy_prefetch *ret);
/* The same for the files whose content objects (hex) are the keys of
 * objects (a start profile's files in this layer): ret->files counts
 * those the layer has; the missing ones are fetched, as above. */
int lazy_layer_prefetch_objects(struct lazy_layer *l, struct registry *reg,
				const atomic_bool *cancel, const struct strmap *objects,
				struct lazy_prefetch *ret);

/* What lazy.c, lazy-complete.c and lazy-bytes.c share: the state of a
 * lazy layer and of its files.  See lazy.h. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "digest.h"
#include "dlist.h"
#include "lazy.h"

struct hasher;
struct strmap;
struct tarhdr;

/* A chunk's state.  CHUNK_WRITTEN: its bytes are in the file, written by
 * the completion without a check of their own, since the file's hash
 * over every chunk in order checks them at once (lazy-complete.c); no
 * reader sees them before that hash matched or the chunk was checked
 * alone (lazy_written_settle). */
enum { CHUNK_MISSING, CHUNK_FETCHING, CHUNK_PRESENT, CHUNK_WRITTEN };

/* The layer's index with the tar headers' times, before its rename over
 * "index" (lazy-complete.c). */
#define LAZY_INDEX_NEW "index.new"
/* The blob's bytes as they were fetched, at their offsets (lazy-blob.c);
 * a restart removes it. */
#define LAZY_BLOB_PART "blob.part"

struct lazy_range {
	uint64_t a, b; /* [a, b) */
};

/* The completion's hash of the blob in blob order: bytes [0, pos) went
 * through it.  While it is live, the completion's requests continue it
 * where it is and what they bring is not kept (its bytes are hashed as
 * they pass); bytes that readers brought ahead of it are read back from
 * LAZY_BLOB_PART as it reaches them.  Once a gap nobody kept lies ahead,
 * it is suspended: from then on the completion keeps what it fetches,
 * and lazy_blob_prove() goes on from pos.  It lives in the layer across
 * the tries of its completion (one thread at a time: the completion's). */
struct lazy_chain {
	struct hasher *hasher; /* NULL: none started */
	struct tarhdr *hdrs;   /* the tar headers of the bytes hashed; NULL: none */
	uint64_t pos;
	uint64_t toc_seen; /* bytes of the table compared */
	bool toc_differs;
	bool suspended;
	/* the header walk passes over the blob up to here (a member of
	 * content only), and the next of the layer's such members to look
	 * at */
	uint64_t walk_past;
	size_t member;
	/* The hash, the table's comparison and the header walk take the
	 * bytes on a thread of their own when one could be started (NULL:
	 * on the feeding thread): the fields above but pos, suspended and
	 * hasher (set before it starts) are that thread's until
	 * lazy_chain_settle().  worked: the offset in the blob of the next
	 * byte it takes, behind pos while the pipe holds bytes. */
	struct bytepipe *pipe;
	uint64_t worked;
};

/* A gzip member (zstd frames) of the blob that the table says holds a
 * chunk of a file and nothing else: one that is not the file's last, at
 * the start of its member, with the file's next chunk starting the next
 * member.  The tar header walk passes over them (tarhdr_skip_content()). */
struct lazy_member {
	uint64_t offset, length; /* in the blob */
	uint64_t size;		 /* of content */
};

/* A request of lazy_ensure_chunks() under way: the compressed bytes it
 * brings. */
struct lazy_claim {
	uint64_t bytes;
	/* the completion's request: each chunk is written as its bytes
	 * arrive, so a reader waits for it rather than asking again, as
	 * long as bytes keep coming (heard_ns: clock_mono_ns() when it
	 * started or last got some; LAZY_CLAIM_QUIET_NS) */
	bool streams;
	_Atomic int64_t heard_ns;
};

/* A reader waits for a chunk the completion's request brings while that
 * request got bytes this recently; past it, the reader fetches the chunk
 * itself (a stalled request does not hold a reader). */
#define LAZY_CLAIM_QUIET_NS (1500 * (int64_t)1000000)

struct lazy_file {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	const struct toc_chunk *chunks; /* the toc's */
	size_t n;
	uint8_t *state; /* per chunk; lock */
	/* per chunk FETCHING, the request that brings it; NULL: being
	 * written from memory (the completion's stream).  lock */
	const struct lazy_claim **claim;
	unsigned fetches; /* lock: requests for chunks of it under way */
	uint64_t size;
	/* p.OBJ (o.OBJ once complete) and p.OBJ.map (-1 once complete);
	 * both -1 while the file is parked (users 0 and not among the
	 * layer's idle files), and until they are made */
	int fd;
	int mapfd;
	/* p.OBJ and its map exist: made when the first chunk is written
	 * (a file the completion finds untouched costs no file until
	 * then).  The layer's lock */
	bool made;
	/* made without a map: a file of one chunk whose digest is the
	 * file's, written by the completion, which publishes it at its
	 * next commit (lazy_file_publish()).  The layer's lock */
	bool mapless;
	unsigned users;		     /* the layer's lock: holders of fd */
	struct dlist_node idle_node; /* the layer's lock: on idle */
	/* lock; becomes true while f is held, or with the layer's lock held
	 * too: file_reopen() of a parked file reads it under that one */
	bool complete;
	/* both files' names are on stable storage */
	atomic_bool named;
	/* in the layer's pack, at pack_off, the bytes of its chunks in
	 * pack.map from slot on (fd and mapfd stay -1) */
	bool packed;
	size_t slot;
	uint64_t pack_off;
	/* chunks the completion wrote and did not flush (nor mark) */
	atomic_bool unflushed;
	/* brought along by a reader's request for another file, and not
	 * read since: its first read counts as the fetch it saved (the
	 * readers' fetches say how they read the image, lazy.h) */
	atomic_bool near_unread;
	char object[DIGEST_HEX_LEN + 1];
};

struct lazy_layer {
	int dirfd;
	struct cache *cache;
	struct lazy_stats *stats;
	struct lazy_source src;
	char *blob_digest;
	struct toc *toc;
	/* the table's bytes as fetched (the blob's at src.where) */
	unsigned char *tocbuf;
	size_t toclen;
	/* the blob's digest matched and its table is not this one, or its
	 * chunks not the table's: the layer stays lazy for good */
	atomic_bool foreign_toc;
	pthread_mutex_t lock;
	/* the state of toc->files[i], once used; lock */
	struct lazy_file **file_of;
	atomic_bool complete;  /* lazy_layer_complete() finished */
	atomic_bool abandoned; /* lazy_layer_abandon() */
	/* readers' fetches of this layer, and the compressed bytes they
	 * brought */
	atomic_uint_fast64_t reader_fetches, reader_bytes;
	atomic_uint_fast64_t reader_us; /* lazy_reads.us */
	/* files readers' requests brought along, and how many of them were
	 * read since: what share of the next ones is worth their bytes */
	atomic_uint_fast64_t near_landed, near_read;
	/* complete, every file checked against the table's digests, the
	 * blob never against its own (the "complete" file) */
	atomic_bool toc_verified;
	struct dlist idle; /* lock: files with descriptors and no user */
	/* lazy_changed() calls: lazy_layer_bytes() counts again only when
	 * this moved since its last count (lock: counted_*) */
	atomic_uint_fast64_t changes;
	bool counted;
	uint64_t counted_changes, counted_local;
	/* the blob's bytes fetched so far, in LAZY_BLOB_PART (keepfd, -1
	 * until the first), sorted and apart; keep_off: given up (a write
	 * failed, or the layer is done with it).  keep_lock */
	pthread_mutex_t keep_lock;
	int keepfd;
	bool keep_off;
	struct lazy_range *kept;
	size_t n_kept, cap_kept;
	struct lazy_chain chain; /* the completion's thread only */
	/* the table's files that have chunks, by the blob offset of their
	 * first: made at the first request that brings a small file's
	 * neighbours along (lock) */
	size_t *by_offset;
	size_t n_by_offset;
	/* the blob ranges of the table's chunks by offset, each with the
	 * farthest end of those up to it: made at the first
	 * lazy_blob_holds_chunk() (the completion's thread only) */
	struct lazy_range *spans;
	uint64_t *span_reach;
	size_t n_spans;
	/* by offset, made with the chain (the completion's thread only) */
	struct lazy_member *members;
	size_t n_members;
	/* the pack (lazy-pack.c): the first slot and place of toc->files[i]
	 * (SIZE_MAX: not packed; NULL: a layer without a pack), set at
	 * open; the descriptors of "pack" and "pack.map" (-1 until the
	 * first packed file is used; lock) */
	size_t *slot_of;
	uint64_t *pack_off_of;
	size_t n_packed;
	uint64_t pack_size;
	int pack_fd, pack_mapfd;
	/* the chain proved the blob (a later step of that completion may
	 * have failed), and the tar headers it read, for the completion's
	 * last index (the completion's thread only) */
	bool blob_proven;
	struct tarhdr *proven_hdrs;
};

/* lazy-pack.c: the slots of the layer's small files, at its open.  0 or
 * -ENOMEM. */
int lazy_pack_plan(struct lazy_layer *l);
/* "pack" and "pack.map" open (made when missing, with the directory
 * flushed); l->lock held.  0 or -errno. */
int lazy_pack_open_locked(struct lazy_layer *l);
/* How many of the n chunks of a packed file, from slot on, are written,
 * from pack.map (none when there is none yet); state (may be NULL) takes
 * CHUNK_PRESENT for each of them. */
size_t lazy_pack_marked(struct lazy_layer *l, size_t slot, size_t n, uint8_t *state);
/* Marks n chunks from slot on as written (their bytes flushed before);
 * the map open.  0 or -errno. */
int lazy_pack_mark(struct lazy_layer *l, size_t slot, size_t n);
/* The slot of toc->files[i], or SIZE_MAX. */
size_t lazy_pack_slot(const struct lazy_layer *l, size_t i);
/* The entries of li whose content is packed name their place in the pack
 * instead of their object, and li's data the pack; *ret_changed: how
 * many.  0 or -ENOMEM. */
int lazy_pack_index(struct lazy_layer *l, struct layer_index *li, size_t *ret_changed);

/* Says that a file or chunk of l became present (after its state says
 * so): the counts of what is local are to be made again. */
void lazy_changed(struct lazy_layer *l);

/* lazy.c: the state of the file with content object when it is in use,
 * or NULL; l->lock held. */
struct lazy_file *lazy_file_peek_locked(struct lazy_layer *l, const char *object);
/* lazy.c: the state of the file with content object, held (its
 * descriptors stay open) until lazy_file_put(); lazy_file_hold() holds
 * one the caller has.  0 or -errno. */
int lazy_file_get(struct lazy_layer *l, const char *object, struct lazy_file **ret);
int lazy_file_hold(struct lazy_layer *l, struct lazy_file *f);
void lazy_file_put(struct lazy_layer *l, struct lazy_file *f);
/* A file whose chunks are all present and on stable storage, and known
 * to match the file's digest: written without a map (its one chunk
 * matched it), or hashed (its chunks fed in order to a hasher that
 * matched it): made an object, as finishing it would, without reading
 * it again, by name (f need not be held). */
void lazy_file_publish(struct lazy_layer *l, struct lazy_file *f, bool hashed);
/* Chunk k of f from its compressed bytes src, verified and written;
 * with mark, flushed and marked in the map (see lazy.c).  whole, if not
 * NULL, is fed the chunk's bytes (the file's hash, chunk after chunk),
 * and then the chunk's own digest is not computed: the caller makes its
 * state CHUNK_WRITTEN, not CHUNK_PRESENT. */
int lazy_write_chunk(struct lazy_layer *l, struct lazy_file *f, size_t k, const void *src,
		     void **dst, bool mark, struct hasher *whole);
/* Feeds h len bytes of fd read back from off, through buf (buf_len
 * bytes).  0, or -EIO when they cannot all be read. */
int lazy_hash_back(int fd, uint64_t off, uint64_t len, struct hasher *h, void *buf, size_t buf_len);
/* The chunks of f in CHUNK_WRITTEN once the file's hash said: all
 * present when it matched, else each read back and checked alone
 * (present or missing).  f held, f->lock held; readers are woken.
 * Returns how many did not match their own digests. */
size_t lazy_written_settle(struct lazy_layer *l, struct lazy_file *f, bool matched);
/* lazy-blob.c: bytes of the blob at off that a request brought, kept for
 * the chain and lazy_blob_prove() (a write that fails gives the keeping
 * up). */
void lazy_blob_keep(struct lazy_layer *l, uint64_t off, const void *buf, size_t len);
/* Starts l's chain at the blob's first byte (its tar headers walked when
 * possible).  0 or -ENOMEM. */
int lazy_chain_start(struct lazy_layer *l);
/* Ends the chain; it can be started again. */
void lazy_chain_drop(struct lazy_chain *c);
/* Returns once the chain's worker took every byte fed: its hash, table
 * comparison and headers are then the caller's to read. */
void lazy_chain_settle(struct lazy_chain *c);
/* lazy-pack.c: the objects (o.OBJ) the layer directory dirfd holds, as
 * keys of *ret: one pass over the directory.  0 or -ENOMEM. */
int lazy_objects_held(int dirfd, struct strmap **ret);
/* Feeds the chain the bytes of the blob at [off, off + len) it has not
 * had.  false, feeding nothing, when they begin past its position. */
bool lazy_chain_feed(struct lazy_layer *l, struct lazy_chain *c, uint64_t off, const void *buf,
		     size_t len);
/* Feeds the chain what is kept from its position on, as far as the kept
 * bytes reach without a gap.  0, or -errno when the kept file cannot be
 * read (the chain is as far as it got). */
int lazy_chain_catch_up(struct lazy_layer *l, struct lazy_chain *c);
/* The first byte kept after off, or UINT64_MAX. */
uint64_t lazy_blob_next_kept(struct lazy_layer *l, uint64_t off);
/* Whether [a, b) of the blob holds bytes of a chunk of the table (the
 * completion's thread only).  true when that cannot be told (no
 * memory). */
bool lazy_blob_holds_chunk(struct lazy_layer *l, uint64_t a, uint64_t b);
/* Every file complete, the chain not at the blob's end: the bytes from
 * its position on that no request brought, fetched once (when they are
 * at most a small share of the blob, else nothing is), and the kept blob
 * read in order from there (from the first byte when no chain was
 * started).  Returns 1 when the blob matched the layer's digest and its
 * table (with its tar headers in *ret_hdrs, or NULL; the caller frees
 * them), 0 when it was not kept whole or did not match, -errno when a
 * fetch failed or stop was asked.  The chain is dropped unless a fetch
 * failed or stop was asked.  Blocks. */
int lazy_blob_prove(struct lazy_layer *l, struct registry *reg, const atomic_bool *cancel,
		    struct tarhdr **ret_hdrs);
/* Keeps no more and removes the file. */
void lazy_blob_drop(struct lazy_layer *l);
/* Makes chunks a..b of f present (f held); foreground: a reader waits. */
int lazy_ensure_chunks(struct lazy_layer *l, struct registry *reg, struct lazy_file *f, size_t a,
		       size_t b, bool foreground);
/* The compressed bytes of n chunks. */
uint64_t lazy_chunks_bytes(const struct toc_chunk *c, size_t n);

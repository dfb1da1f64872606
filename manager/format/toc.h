/* Tables of contents of lazy images: eStargz and zstd:chunked layers carry
 * an index of their entries and of where each file's compressed chunks
 * sit in the blob, so a layer can be listed from a few Range requests and
 * its files fetched chunk by chunk.  This module recognises such a layer
 * from its descriptor, finds the table in the blob, verifies it against
 * the digest the manifest gives, and turns it into the same struct
 * layer_index a full unpack produces, with a chunk list per regular file.
 * Pure logic on bytes the caller fetched: no I/O, no FUSE. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "digest.h"
#include "layer.h"
#include "manifest.h"

#define TOC_ESTARGZ_DIGEST "containerd.io/snapshot/stargz/toc.digest"
/* zstd:chunked: the keys containers/storage writes now, and the ones
 * older writers (skopeo 1.9) used; either names the same thing. */
#define TOC_ZSTD_CHECKSUM "io.github.containers.zstd-chunked.manifest-checksum"
#define TOC_ZSTD_POSITION "io.github.containers.zstd-chunked.manifest-position"
#define TOC_ZSTD_CHECKSUM_OLD "io.containers.zstd-chunked.manifest-checksum"
#define TOC_ZSTD_POSITION_OLD "io.containers.zstd-chunked.manifest-position"

/* The most a table of contents may take, uncompressed. */
#define TOC_MAX_BYTES (64u << 20)
/* How many bytes from the end of the blob toc_locate() wants to see: the
 * longest footer of any format. */
#define TOC_TAIL_BYTES 72u

enum toc_format {
	TOC_NONE,	  /* no table of contents: pull the layer whole */
	TOC_ESTARGZ,	  /* gzip members, JSON in a tar entry at the end */
	TOC_ZSTD_CHUNKED, /* zstd frames, JSON in a skippable frame */
};

/* What a layer's descriptor says about its table of contents. */
struct toc_layer {
	enum toc_format format;
	uint64_t blob_size; /* the descriptor's size */
	/* eStargz: of the uncompressed JSON; zstd:chunked: of the
	 * compressed bytes of the skippable frame's content */
	char digest[DIGEST_STRING_MAX];
	/* zstd:chunked: the manifest-position annotation */
	uint64_t zc_offset, zc_length, zc_uncompressed;
	/* Written by stargz-snapshotter's tools (eStargz, and their
	 * zstd:chunked, which carries the eStargz annotation too): the
	 * landmark files and the table's own entry are theirs, not the
	 * image's. */
	bool stargz_files;
};

/* Where the table of contents is in the blob. */
struct toc_range {
	uint64_t offset;
	uint64_t length;
};

struct toc_chunk {
	uint64_t offset; /* in the file */
	uint64_t size;	 /* uncompressed bytes, > 0 */
	/* The compressed bytes that hold it: one gzip member (eStargz) or
	 * the zstd frames (zstd:chunked) from blob_offset on. */
	uint64_t blob_offset;
	uint64_t blob_length;
	/* eStargz: where the chunk starts in what the member decompresses
	 * to (several small files may share one member); 0 otherwise */
	uint64_t inner_offset;
	char digest[DIGEST_STRING_MAX]; /* "sha256:..." or "" when not given */
};

/* A content of a layer, what fetching it needs (toc_keep_files()). */
struct toc_file {
	const char *object; /* hex SHA-256 */
	uint64_t size;
};

struct toc {
	enum toc_format format;
	/* The layer's entries as layer_unpack() would give them, but with
	 * nothing in a pack: data_size is 0, and a regular file's object
	 * is the hex SHA-256 of its whole content when the table gives it
	 * (NULL otherwise and for empty files).  NULL after
	 * toc_keep_files(). */
	struct layer_index *index;
	/* toc_keep_files(): what replaces the index, one per distinct
	 * content, in the order of their objects; their objects back to
	 * back */
	struct toc_file *files;
	size_t n_files;
	char *objects;
	/* Chunks of entry i (of the index, or of files): chunks[first_chunk[i]
	 * .. first_chunk[i + 1]), in file order, covering the file exactly;
	 * none for anything but non-empty regular files. */
	struct toc_chunk *chunks;
	size_t n_chunks;
	size_t *first_chunk; /* index->n_entries + 1 */
	/* eStargz: the blob offset of the prefetch landmark, before which
	 * the files the image's builder marked for prefetching lie; 0 when
	 * there is none. */
	uint64_t prefetch_end;
};

/* Reads the lazy format of a layer from its descriptor's annotations.
 * Returns 0 with ret->format TOC_NONE for a layer without them (and for a
 * media type that does not fit them: a gzip layer cannot be zstd:chunked),
 * 0 with the format and what its annotations say, or -EBADMSG with a
 * reason when an annotation is there but malformed (the caller pulls the
 * layer whole).  Does not block. */
int toc_layer_from_descriptor(const struct descriptor *d, struct toc_layer *ret, char *errbuf,
			      size_t errlen);

/* Where the table of contents is, from the last tail_len bytes of the
 * blob (tail; fetched by the caller, TOC_TAIL_BYTES of them or the whole
 * blob if smaller).  eStargz needs the footer (51 bytes, or 47 for the
 * legacy stargz one); zstd:chunked is placed by its annotation, and a
 * footer in tail, when there is one, must agree with it (tail may be
 * NULL).  Returns 0 or -EBADMSG with a reason.  Does not block. */
int toc_locate(const struct toc_layer *tl, const void *tail, size_t tail_len, struct toc_range *ret,
	       char *errbuf, size_t errlen);

/* Verifies and parses the table of contents: buf holds the len bytes of
 * the blob at where (from toc_locate()).  The digest is checked before
 * anything is parsed: for zstd:chunked over buf itself, for eStargz over
 * the JSON once the gzip member and its tar header are undone.  Every
 * entry is held to layer_unpack()'s rules (names, whiteouts, hardlinks,
 * lim; NULL: its defaults), every chunk to the blob: inside it, not
 * overlapping another, covering its file exactly.  Returns 0 with a new
 * toc in *ret (free with toc_free()), -EBADMSG with a reason for anything
 * malformed or a digest that does not match, -ENOMEM.  CPU-bound, blocks
 * only as long as parsing takes. */
int toc_parse(const struct toc_layer *tl, const struct toc_range *where, const void *buf,
	      size_t len, const struct layer_limits *lim, struct toc **ret, char *errbuf,
	      size_t errlen);

/* toc_parse() then toc_keep_files(), without ever holding more than the
 * files: for a table toc_parse() accepted before (the digest is checked
 * again, the rules on paths and entries are not).  Same returns. */
int toc_parse_files(const struct toc_layer *tl, const struct toc_range *where, const void *buf,
		    size_t len, struct toc **ret, char *errbuf, size_t errlen);

void toc_free(struct toc *t);

/* Keeps of t what fetching files needs: t->files, one per distinct
 * object (the first of the entries naming it), and their chunks; the
 * index is freed.  Returns 0, or -ENOMEM with t unchanged. */
int toc_keep_files(struct toc *t);

/* The position in t->files of content object, or -1. */
ssize_t toc_find_file(const struct toc *t, const char *object);

/* The chunks of entry i of t->index, or of t->files once kept
 * (borrowed); NULL with *ret_n 0 for entries without content. */
const struct toc_chunk *toc_entry_chunks(const struct toc *t, size_t i, size_t *ret_n);

/* Receives the bytes of a chunk in order: len bytes that go at off in the
 * chunk.  0, or -errno to stop. */
typedef int (*toc_chunk_sink_fn)(void *userdata, uint64_t off, const void *buf, size_t len);

/* Decompresses one chunk as toc_chunk_decompress does, through piece
 * (piece_len bytes, the caller's) to sink, a piece at a time: memory does
 * not grow with the chunk's size.  The sink sees bytes before the chunk's
 * digest is checked: they are the chunk's only once this returned 0.
 * Without check, the digest is not computed: the caller checks the bytes
 * by other means (the file's digest over all of its chunks).  Errors as
 * toc_chunk_decompress, and the sink's. */
int toc_chunk_stream(enum toc_format f, const struct toc_chunk *c, const void *src, size_t src_len,
		     void *piece, size_t piece_len, toc_chunk_sink_fn sink, void *userdata,
		     bool check, char *errbuf, size_t errlen);

/* Decompresses one chunk: src holds the c->blob_length bytes of the blob
 * at c->blob_offset; c->size bytes go to dst.  The chunk's digest, when
 * it has one, is checked before returning; dst holds garbage on failure.
 * Returns 0, -EBADMSG with a reason (corrupt data, too short, digest
 * mismatch), -ENOMEM.  CPU-bound. */
int toc_chunk_decompress(enum toc_format f, const struct toc_chunk *c, const void *src,
			 size_t src_len, void *dst, char *errbuf, size_t errlen);

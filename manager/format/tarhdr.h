/* The tar headers of a lazy layer's blob, read as the blob streams past:
 * what a table of contents rounds or leaves out (eStargz's modtime has
 * whole seconds) is in the headers, which a full unpack reads.  A walker
 * is fed the compressed blob in order from its first byte (gzip members
 * or zstd frames, one after the other), keeps, per entry, what identifies
 * it and its times, and skips file contents; once the blob is known to be
 * the layer's (its digest matched), tarhdr_merge() puts the headers'
 * times into the index the table of contents gave.  Pure logic on bytes
 * the caller has: no I/O, no FUSE. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "layer.h"
#include "toc.h"

struct tarhdr;

/* A new walker of a blob of format f (TOC_ESTARGZ: gzip members,
 * TOC_ZSTD_CHUNKED: zstd frames).  Returns 0, -ENOMEM or -EINVAL. */
int tarhdr_new(enum toc_format f, struct tarhdr **ret);
void tarhdr_free(struct tarhdr *w);

/* The next len bytes of the blob.  Returns 0, or -EBADMSG for bytes that
 * are not a compressed tar (the walker then takes nothing more and merges
 * nothing), -ENOMEM.  Memory grows with the entries (their paths), not
 * with the blob. */
int tarhdr_feed(struct tarhdr *w, const void *buf, size_t len);

/* Feeds uncompressed tar bytes, as tarhdr_feed() does once they are
 * decompressed (the unit test's way in). */
int tarhdr_feed_tar(struct tarhdr *w, const void *buf, size_t len);

/* Passes over a gzip member (zstd frames) that the caller knows to hold
 * size bytes of the current entry's content and nothing else (the table
 * of contents says so of a chunk that is not its file's last): the
 * caller then does not feed its compressed bytes.  Only where a member
 * (frame) begins, inside an entry's content with more than size bytes of
 * it (and padding) left.  Returns 0, or -EAGAIN when the walker is not
 * there (the caller feeds the member as any other).  A member that held
 * more than the table said leaves the walker out of step with the tar:
 * it fails at the next header, and nothing is merged. */
int tarhdr_skip_content(struct tarhdr *w, uint64_t size);

/* What the headers say of one entry, after the rules of
 * layer_normalise() and layer_whiteout(). */
struct tarhdr_entry {
	const char *path;
	uint8_t type; /* enum layer_entry_type */
	uint64_t size;
	int64_t mtime_sec;
	uint32_t mtime_nsec;
};

/* The entries the walker has seen, in blob order (borrowed until the
 * walker is freed); ret_n of them. */
const struct tarhdr_entry *tarhdr_entries(const struct tarhdr *w, size_t *ret_n);

/* Puts the headers' mtimes into li: an entry of li takes the mtime
 * (seconds and nanoseconds) of the header of the same path, type and (a
 * regular file) size; anything else of li, the table of contents', stays.
 * Nothing is merged when the walker failed, when the headers name a path
 * twice, or when the blob did not end where a tar ends.  ret_changed (may
 * be NULL): the entries whose mtime changed.  Returns 0, -EBADMSG (nothing
 * merged: the reason above), -ENOMEM. */
int tarhdr_merge(const struct tarhdr *w, struct layer_index *li, size_t *ret_changed);

/* Open packs, shared by every image and bounded in number.
 *
 * An image's regular files are read from the packs of its layers.  Holding
 * a descriptor per layer of every loaded image would make the descriptors
 * grow with the number of cached references (and a hostile manifest can
 * list one layer ten thousand times), so images hold a struct pack per
 * distinct layer instead, one per layer digest whoever uses it, and the
 * descriptor is opened when a read needs it.  Descriptors no read is using
 * are closed, least recently used first, beyond max_open.
 *
 * A layer that garbage collection deletes while a loaded image still names
 * it is pinned instead: its pack stays open and its directory is only
 * moved out of the cache's layers/ (cache_layer_retire), so a process
 * reading from (or standing in) that image keeps the content it started
 * with, objects included; the directory goes when the last image lets go
 * (or with tmp/ at the next start).
 *
 * Thread-safe: one mutex, held for a table lookup and, on a miss, an
 * openat(). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lazy.h"

struct cache;
struct packs;
struct pack;

/* max_open 0: 256.  The cache is borrowed and must outlive the table. */
int packs_new(struct cache *cache, unsigned max_open, struct packs **ret);
/* Every pack must have been put. */
void packs_free(struct packs *p);

/* The pack of layer digest, with a reference for the caller (no
 * descriptor is opened).  Returns 0 or -ENOMEM. */
int packs_get(struct packs *p, const char *digest, struct pack **ret);
void packs_put(struct packs *p, struct pack *pk);

/* A descriptor of the pack, open until the matching pack_fd_put(); may
 * block on openat().  Returns the fd or -errno (-ENOENT: the layer is
 * gone from the cache). */
int pack_fd_get(struct packs *p, struct pack *pk);
void pack_fd_put(struct packs *p, struct pack *pk);

/* A read-only descriptor of an object of the layer (tinode.object), owned
 * by the caller; -errno when it cannot be opened. */
int pack_object_open(struct packs *p, struct pack *pk, const char *object);

/* The lazy state of the layer (lazy.h), loaded at the first call; NULL
 * for a layer that was complete when first asked.  Lives as long as the
 * pack. */
struct lazy_layer *pack_lazy(struct packs *p, struct pack *pk);
/* The table of lazy layer digest as the pull that just published it
 * parsed it, after toc_keep_files() (taken): the layer's first load uses
 * it rather than parse the table again.  At most PACKS_OFFERED_MAX are
 * held. */
#define PACKS_OFFERED_MAX 16
void packs_offer_toc(struct packs *p, const char *digest, struct toc *files);
/* The layer digest of a pack (lives as long as the pack). */
const char *pack_digest(const struct pack *pk);
/* The counters of lazy fetching, shared by every pack. */
struct lazy_stats *packs_lazy_stats(struct packs *p);
/* The metrics of lazy fetching (lazy.h), Prometheus text. */
void packs_lazy_metrics(struct packs *p, FILE *f);
/* Whether the layer was lazy when first asked (its files then are never
 * opened in passthrough while this process runs: the kernel cannot switch
 * an inode it has open through the daemon). */
bool pack_was_lazy(struct packs *p, struct pack *pk);
/* This process took the connection over from another one, which may have
 * served files of a lazy layer through the daemon that are complete now
 * and still open: from now on a layer that was ever lazy (it keeps its
 * "toc") counts as lazy for pack_was_lazy(). */
void packs_took_over(struct packs *p);
/* True once per lazy layer, for the caller to complete it in the
 * background: the caller then holds a reference (packs_put() it). */
bool pack_claim_completion(struct packs *p, struct pack *pk);

/* The completion that pack_claim_completion() gave ended without
 * completing the layer: the next load of an image may claim it again. */
void pack_completion_failed(struct packs *p, struct pack *pk);
/* Whether the layer's background completion runs now. */
bool pack_completing(struct packs *p, struct pack *pk);
/* Whether the layer's directory was replaced since the pack was made (a
 * lazy layer by one verified against its digest): the pack serves only the
 * images that hold it, from the old directory. */
bool pack_detached(struct packs *p, struct pack *pk);
/* Whether the layer is complete (a layer that was never lazy is). */
bool pack_complete(struct packs *p, struct pack *pk);

/* How layer digest was verified (lazy.h), from the pack's state when it
 * is loaded (no system call), else from the layer's directory. */
enum lazy_verified packs_layer_verified(struct packs *p, const char *digest);

/* How much of layer digest (of blob size bytes) is local: a lazy layer's
 * share (lazy_layer_bytes), all of any other; ret_completing: whether its
 * background completion runs. */
void packs_layer_bytes(struct packs *p, const char *digest, uint64_t size, uint64_t *ret_local,
		       bool *ret_completing);

/* Garbage collection's removal of a layer: deleted when no loaded image
 * uses it, else pinned (above).  Returns 0 or -errno. */
int packs_remove_layer(struct packs *p, const char *digest);

/* Descriptors open now, for the metrics. */
unsigned packs_open_count(struct packs *p);

/* The pull pipeline: manifest (following indexes), a pull slot, config
 * and layers, each layer in one streaming pass from the registry through
 * SHA-256 into the unpacker.  Private to manager/: ensure (manager.c)
 * decides whether to pull and publishes what a pull fetched. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "errdetail.h"
#include "manager-private.h"
#include "puller.h"

struct reference;

struct pull {
	struct pull_progress *progress;
	struct flight *flight;
	struct manager *m;
	const struct reference *ref;
	const char *canonical;
	/* the process that caused the pull, for its events (their limit per
	 * user: a manifest of many layers is many events); NULL: none */
	const struct caller *who;
	char *repo;
	bool has_slot;		 /* holds a pull slot (puller.h) */
	struct puller_slot slot; /* ... this one */
	bool abandoned;		 /* left the queue: nobody waits for it */
	struct error_detail why; /* the first reason it failed; err set by ensure */
	/* digests the pull counts on, kept by every sweep (manager.inflight)
	 * until pull_inflight_leave() */
	char **inflight;
	size_t n_inflight;
};

/* Records why the pull failed; the first reason wins. */
void pull_fail(struct pull *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The whole transfer for p->ref: everything but the reference file, which
 * the caller publishes.  Called with gc_lock held shared, which it lets go
 * of while it waits for the registry or a slot (garbage collection and rm
 * must not wait for transfers), and holds again on return; what it
 * counts on meanwhile stays through any sweep (pull_inflight_leave()).  Returns 0 with the manifest digest, the index it
 * was picked from (or NULL) and the image's size; or -errno with the
 * reason in p->why.message, or p->abandoned set when it left the queue.
 * Blocks for as long as the transfer takes. */
int pull_image(struct pull *p, char **ret_digest, char **ret_index_digest, uint64_t *ret_size);
/* Lets go of what pull_image() counted on: once its reference is
 * published (which then keeps it), or once it failed.  gc_lock held
 * shared; takes manager.lock. */
void pull_inflight_leave(struct pull *p);

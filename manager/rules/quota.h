/* Cache bytes per user: what the images of a user other than root cost
 * and which of them go when room is needed.  Pure functions over a
 * snapshot the caller takes (gc.c), so that the choice of victims can be
 * tested without a cache or a clock.
 *
 * An image costs its user the blobs its manifest names (config and
 * compressed layers, as the registry sends them), each blob once per user
 * however many of that user's images share it; root's images (owner 0)
 * are charged to nobody. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct quota_blob {
	char *digest;
	uint64_t size;
};

struct quota_image {
	const char *reference; /* borrowed; the tie-break of equal ages */
	uid_t owner;	       /* the user charged; 0: nobody */
	int64_t last_used_ms;
	const struct quota_blob *blobs; /* borrowed */
	size_t n_blobs;
	bool keep;    /* pinned, in use or being pulled: never a victim */
	bool victim;  /* set by quota_make_room() */
	size_t index; /* the caller's */
};

/* The bytes charged to uid by the images of imgs not marked victim, and
 * by extra (NULL: none) when it is uid's.  Returns 0 or -ENOMEM. */
int quota_charge(const struct quota_image *imgs, size_t n, uid_t uid,
		 const struct quota_image *extra, uint64_t *ret_bytes);

/* Marks uid's own images as victims, least recently used first and never
 * one with keep, until uid's charge with extra fits in quota; nobody
 * else's image is ever marked.  Returns 0 with the charge that results in
 * *ret_bytes, -EDQUOT when even every image uid may lose would not make
 * room (then none is marked, *ret_bytes the charge that cannot go),
 * -ENOMEM. */
int quota_make_room(struct quota_image *imgs, size_t n, uid_t uid, uint64_t quota,
		    const struct quota_image *extra, uint64_t *ret_bytes);

/* The order in which GC considers images under pressure: first those of
 * users over quota, least recently used first, then every other image
 * least recently used first.  Returns 0 or -ENOMEM (imgs unsorted). */
int quota_gc_order(struct quota_image *imgs, size_t n, uint64_t quota);

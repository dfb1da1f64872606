/* What the files of the cache (cache.c: layout, blobs, layers, references;
 * objects.c: the content store) share. */
#pragma once

#include <dirent.h>
#include <stdint.h>

#include "cache.h"

struct cache {
	int dirfd;
	int lockfd;
	int blobs_fd;	/* blobs/sha256 */
	int layers_fd;	/* layers */
	int objects_fd; /* objects */
	int refs_fd;	/* refs */
	int tmp_fd;	/* tmp */
};

/* Removes every file of a directory (one level of subdirectories too). */
void empty_dir(int dfd);
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

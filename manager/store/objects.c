/* The content store: regular files big enough to be worth it are kept as
 * files of their own, one per distinct content, so that the kernel can
 * read them directly (FUSE passthrough) and identical files of different
 * layers and images are one inode on disk and one copy in the page cache.
 *
 * A layer directory holds a hard link "o.<hex>" to each object it uses;
 * those links are what keeps an object alive, and what the filesystem
 * opens.  objects/<hex> is the index that lets the next layer with the
 * same content link to the stored copy instead of keeping its own: an
 * object whose only link is its index entry belongs to no layer and is
 * swept.  Losing an index entry (a sweep racing a commit) costs sharing,
 * never content, because layers never read through objects/. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blobproof.h"
#include "cache-private.h"
#include "digest.h"
#include "fileio.h"
#include "macro.h"
#include "strmap.h"

#define OBJECT_PREFIX "o."

static bool is_object_name(const char *name)
{
	return strncmp(name, OBJECT_PREFIX, 2) == 0 && strlen(name + 2) == DIGEST_HEX_LEN;
}

/* One object of a staged layer: shares the stored copy when there is one,
 * else becomes the stored copy. */
static int object_link(struct cache *c, int stage_fd, const char *hex, bool lazy, bool again)
{
	char mine[DIGEST_HEX_LEN + 3], theirs[DIGEST_HEX_LEN + 3];

	struct stat a, b;

	snprintf(mine, sizeof(mine), OBJECT_PREFIX "%s", hex);
	snprintf(theirs, sizeof(theirs), "d.%s", hex);
	/* entered already (when the caller cannot tell) */
	if (again && fstatat(c->objects_fd, hex, &a, AT_SYMLINK_NOFOLLOW) == 0 &&
	    fstatat(stage_fd, mine, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == b.st_ino &&
	    a.st_dev == b.st_dev)
		return 0;
	for (int attempt = 0; attempt < 2; attempt++) {
		if (linkat(c->objects_fd, hex, stage_fd, theirs, 0) == 0) {
			/* the stored inode replaces the staged copy */
			if (renameat(stage_fd, theirs, stage_fd, mine) < 0) {
				int r = negative_errno();

				unlinkat(stage_fd, theirs, 0);
				return r;
			}
			return 0;
		}
		if (errno != ENOENT)
			return negative_errno();
		if (linkat(stage_fd, mine, c->objects_fd, hex, 0) == 0)
			return 0;
		/* a lazy layer has no copy of its own yet */
		if (errno == ENOENT && lazy)
			return 0;
		/* EEXIST: another layer entered the same content meanwhile */
		if (errno != EEXIST)
			return negative_errno();
	}
	return 0; /* keep our own copy: correct, only not shared */
}

/* (the links counted in the sizes change whatever the outcome) */
static int object_enter(struct cache *c, int stage_fd, const char *hex, bool lazy, bool again)
{
	int r = object_link(c, stage_fd, hex, lazy, again);

	cache_touch(c);
	return r;
}

int objects_enter(struct cache *c, int stage_fd, const struct layer_index *li, bool lazy)
{
	struct strmap *done = strmap_new();
	int r = done ? 0 : -ENOMEM;

	for (size_t i = 0; i < li->n_entries && r == 0; i++) {
		const struct layer_entry *e = &li->entries[i];

		/* a content the layer holds twice is entered once */
		if (!e->object || strmap_get(done, e->object))
			continue;
		/* A lazy layer has no copies: it links stored ones, and only
		 * public ones (its table of contents may name the contents of
		 * a private image's files; lazy.c checks again at first use). */
		if (lazy && !cache_object_public(c, e->object))
			continue;
		r = object_enter(c, stage_fd, e->object, lazy, false);
		if (r == 0)
			r = strmap_put(done, e->object, (void *)1);
	}
	strmap_free(done);
	return r;
}

static bool object_name_ok(const char *object)
{
	return strlen(object) == DIGEST_HEX_LEN && !strchr(object, '/');
}

int cache_layer_open_object(struct cache *c, const char *layer_digest, const char *object)
{
	char name[DIGEST_HEX_LEN + 8];

	if (!digest_is_valid(layer_digest) || !object_name_ok(object))
		return -EINVAL;
	snprintf(name, sizeof(name), OBJECT_PREFIX "%s", object);
	return layer_openat(c, digest_hex(layer_digest), name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
}

int cache_object_enter(struct cache *c, int layer_dirfd, const char *object)
{
	if (!object_name_ok(object))
		return -EINVAL;
	return object_enter(c, layer_dirfd, object, false, true);
}

/* Whether the published layer named hex holds o.OBJ as the inode st. */
static bool layer_holds(struct cache *c, const char *hex, const char *object, const struct stat *st)
{
	char path[2 * DIGEST_HEX_LEN + 8];
	struct stat o;

	snprintf(path, sizeof(path), "%s/" OBJECT_PREFIX "%s", hex, object);
	return fstatat(c->layers_fd, path, &o, AT_SYMLINK_NOFOLLOW) == 0 &&
	       o.st_ino == st->st_ino && o.st_dev == st->st_dev;
}

bool cache_object_public(struct cache *c, const char *object)
{
	char digest[DIGEST_STRING_MAX];
	struct dirent *de;
	struct stat st;
	bool public = false;
	DIR *d;

	if (!object_name_ok(object) ||
	    fstatat(c->objects_fd, object, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
	    dir_stream(c->layers_fd, &d) < 0)
		return false;
	/* The layers that hold the stored inode: one that a pull without
	 * credentials brought makes it public (its registry served the
	 * content, checked against its digest, to anybody). */
	while (!public && (de = readdir(d))) {
		if (strlen(de->d_name) != DIGEST_HEX_LEN)
			continue;
		snprintf(digest, sizeof(digest), "sha256:%s", de->d_name);
		public = digest_is_valid(digest) && layer_holds(c, de->d_name, object, &st) &&
			 blobproof_public_at(c->dirfd, digest);
	}
	closedir(d);
	return public;
}

int cache_object_openat(int layer_dirfd, const char *object)
{
	char name[DIGEST_HEX_LEN + 3];
	int fd;

	if (!object_name_ok(object))
		return -EINVAL;
	snprintf(name, sizeof(name), OBJECT_PREFIX "%s", object);
	fd = openat(layer_dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	return fd < 0 ? negative_errno() : fd;
}

static bool inoset_add(struct inoset *set, uint64_t ino)
{
	if (set->n * 2 >= set->cap) {
		size_t cap = set->cap ? set->cap * 2 : 1024;
		uint64_t *slots = calloc(cap, sizeof(*slots));

		if (!slots)
			return true; /* counted twice rather than not at all */
		for (size_t i = 0; i < set->cap; i++)
			if (set->slots[i])
				for (size_t j = set->slots[i] * 0x9e3779b97f4a7c15u % cap;;
				     j = (j + 1) % cap)
					if (!slots[j]) {
						slots[j] = set->slots[i];
						break;
					}
		free(set->slots);
		set->slots = slots;
		set->cap = cap;
	}
	ino++; /* 0 marks a free slot */
	for (size_t j = ino * 0x9e3779b97f4a7c15u % set->cap;; j = (j + 1) % set->cap) {
		if (set->slots[j] == ino)
			return false;
		if (!set->slots[j]) {
			set->slots[j] = ino;
			set->n++;
			return true;
		}
	}
}

void inoset_done(struct inoset *set)
{
	free(set->slots);
	*set = (struct inoset){ 0 };
}

uint64_t objects_layer_bytes(struct cache *c, const char *digest, struct inoset *seen)
{
	_cleanup_close_ int dfd = -1;
	struct dirent *de;
	uint64_t bytes = 0;
	DIR *d;

	if (!digest_is_valid(digest))
		return 0;
	dfd = layer_openat(c, digest_hex(digest), NULL, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || dir_stream(dfd, &d) < 0)
		return 0;
	while ((de = readdir(d))) {
		struct stat st;

		/* a lazy layer's partial files (lazy.h) and their maps are
		 * the layer's own */
		if (strncmp(de->d_name, "p.", 2) == 0) {
			if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
				bytes += (uint64_t)st.st_blocks * 512;
			continue;
		}
		if (!is_object_name(de->d_name) ||
		    fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		/* links: this layer, the index entry, other layers */
		if (seen ? inoset_add(seen, (uint64_t)st.st_ino) : st.st_nlink <= 2)
			bytes += (uint64_t)st.st_blocks * 512;
	}
	closedir(d);
	return bytes;
}

/* Calls fn for every entry of objects/ with its stat. */
static int objects_each(struct cache *c,
			int (*fn)(struct cache *c, const char *hex, const struct stat *st,
				  void *userdata),
			void *userdata)
{
	struct dirent *de;
	DIR *d;
	int r = dir_stream(c->objects_fd, &d);

	if (r < 0)
		return r;
	while (r == 0 && (de = readdir(d))) {
		struct stat st;

		if (strlen(de->d_name) != DIGEST_HEX_LEN ||
		    fstatat(c->objects_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		r = fn(c, de->d_name, &st, userdata);
	}
	closedir(d);
	return r;
}

static int stats_one(struct cache *c, const char *hex, const struct stat *st, void *userdata)
{
	struct cache_objects_stats *s = userdata;

	(void)c;
	(void)hex;
	if (st->st_nlink < 2)
		return 0; /* garbage, swept by the next collection */
	s->objects++;
	s->bytes += (uint64_t)st->st_blocks * 512;
	s->uses += st->st_nlink - 1;
	s->shared_bytes += (uint64_t)(st->st_nlink - 2) * (uint64_t)st->st_size;
	return 0;
}

int cache_objects_stats(struct cache *c, struct cache_objects_stats *ret)
{
	*ret = (struct cache_objects_stats){ 0 };
	return objects_each(c, stats_one, ret);
}

static int sweep_one(struct cache *c, const char *hex, const struct stat *st, void *userdata)
{
	uint64_t *freed = userdata;

	if (st->st_nlink != 1)
		return 0;
	if (unlinkat(c->objects_fd, hex, 0) == 0)
		*freed += (uint64_t)st->st_blocks * 512;
	return 0;
}

int cache_objects_sweep(struct cache *c, uint64_t *ret_freed)
{
	uint64_t freed = 0;
	int r = objects_each(c, sweep_one, &freed);

	cache_touch(c);

	if (ret_freed)
		*ret_freed = freed;
	return r;
}

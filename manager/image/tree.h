/* The merged root filesystem of one image: layer indexes applied in order
 * with overlay semantics (whiteouts remove, opaque directories hide what is
 * below, later entries replace earlier ones, hardlinks share one inode),
 * then frozen into an immutable tree with sorted children for lookups by
 * binary search.  Built once per image; afterwards read by any number of
 * threads without locks (mtimes alone may change: tree_update_times()). */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "layer.h"

struct tree;

struct tree_xattr {
	const char *name;
	const void *value;
	uint32_t size;
};

/* One per inode of every image: kept small (112 bytes), as an image may
 * have a million. */
struct tinode {
	uint32_t mode; /* full st_mode: S_IFMT type and 07777 */
	uint32_t uid, gid;
	uint32_t nlink;
	int64_t mtime_sec;
	uint32_t mtime_nsec;
	uint16_t layer; /* regular files: which layer's pack holds the data */
	uint64_t size;	/* regular files: bytes; symlinks: strlen(link) */
	union {
		uint64_t data_off; /* regular files: offset in that pack */
		uint64_t rdev;	   /* devices; 0 for other types */
	};
	/* regular files stored as an object of that layer: the hex
	 * SHA-256 of the content (layer.h, cache.h); NULL: in the pack */
	const char *object;
	const char *link; /* symlinks: target, verbatim */
	const struct tree_xattr *xattrs;
	/* directories (zero or NULL for other types, which may have
	 * several parents) */
	const struct tinode *parent;	      /* the root is its own parent */
	const char *const *child_names;	      /* sorted by strcmp */
	const struct tinode *const *children; /* same order */
	const struct tree *tree;
	uint32_t n_xattrs;
	uint32_t n_children;
};

/* Applies layers[0..n) (base first) and freezes the result.  Returns 0
 * with a tree owned by the caller, -EBADMSG (reason in errbuf) when a
 * hardlink names a path that does not exist at that point or is a
 * directory, -ENOMEM.  The tree copies what it needs: the layer indexes
 * may be freed afterwards. */
int tree_build(const struct layer_index *const *layers, size_t n, struct tree **ret, char *errbuf,
	       size_t errlen);
void tree_free(struct tree *t);

/* Every inode of a tree has a dense index, 0 for the root, fixed when the
 * tree is built: with the identity of the tree it names the inode, which
 * is how the filesystem makes node ids.  tree_inode() is NULL for an index
 * out of range. */
uint32_t tinode_index(const struct tinode *ino);
const struct tinode *tree_inode(const struct tree *t, uint32_t index);

const struct tinode *tree_root(const struct tree *t);
/* Number of inodes (hardlinked names count once) and sum of regular file
 * sizes, for reports. */
uint64_t tree_inode_count(const struct tree *t);
uint64_t tree_content_bytes(const struct tree *t);

/* Child of directory dir called name, or NULL.  Binary search. */
const struct tinode *tinode_lookup(const struct tinode *dir, const char *name);

/* Resolves a relative path ("usr/bin/env") without following symlinks;
 * NULL when absent.  For tests and tools. */
const struct tinode *tree_resolve(const struct tree *t, const char *path);

/* Fills st from the inode (st_ino, st_dev left 0, st_blocks from size). */
void tinode_fill_stat(const struct tinode *ino, struct stat *st);

/* The inode's mtime, read whole while tree_update_times() may change it
 * (the one way to read mtime_sec and mtime_nsec). */
void tinode_mtime(const struct tinode *ino, struct timespec *ret);

/* The one change a built tree takes: the mtimes of from, a build of the
 * same layers whose indexes gained exact times (a lazy layer verified
 * against its digest), copied into t while readers go on without locks.
 * Returns how many inodes changed, or -EINVAL (nothing changed) when from
 * differs from t in anything but times. */
int tree_update_times(struct tree *t, const struct tree *from);

/* Extended attribute `name` of the inode, or NULL. */
const struct tree_xattr *tinode_getxattr(const struct tinode *ino, const char *name);

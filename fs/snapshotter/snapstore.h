/* The snapshot store of the containerd snapshotter: snapshots' metadata
 * (names, parents, kinds, labels, times) and their directories on local
 * disk, with the overlayfs mounts containerd's own overlay snapshotter
 * gives for them.
 *
 * Layout of its folder DIR: DIR/metadata.json (every snapshot, rewritten
 * whole through a temporary file, flushed and renamed on each change) and
 * DIR/snapshots/<id>/fs (the upper directory, or a lower one once
 * committed; for a remote snapshot a symbolic link to its directory) and
 * .../work (overlayfs's work directory, active snapshots only).  A snapshot's name is never part of a path: containerd's names
 * hold '/' and anything else.  A directory the metadata does not name is
 * a leftover of a change cut short and is removed at open and by
 * snapstore_cleanup.
 *
 * Every call takes the store's lock; any thread may call. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* The values of containerd's Kind enum. */
enum snap_kind {
	SNAP_VIEW = 1,
	SNAP_ACTIVE = 2,
	SNAP_COMMITTED = 3,
};

/* containerd's bound on one label: key and value together. */
#define SNAP_LABEL_MAX 4096
/* A name or key longer than this is refused. */
#define SNAP_NAME_MAX 4096

struct snap_info {
	char *name;
	char *parent; /* "" for none */
	enum snap_kind kind;
	int64_t created_ns; /* wall clock, nanoseconds since the epoch */
	int64_t updated_ns;
	json_t *labels; /* object of strings, never NULL */
};

/* One mount as containerd takes it: type, source and options. */
#define SNAP_MOUNT_OPTIONS_MAX 4
struct snap_mount {
	char *type;
	char *source;
	char *options[SNAP_MOUNT_OPTIONS_MAX];
	size_t n_options;
};

struct snapstore;

/* Opens (creating it, mode 0700) the store in the absolute path dir,
 * loads its metadata and removes directories it does not name.  Returns
 * 0 and a store owned by the caller, or -errno with a one-line reason in
 * errbuf (-EBADMSG: the metadata file cannot be read back). */
int snapstore_open(const char *dir, struct snapstore **ret, char *errbuf, size_t errlen);
/* Accepts NULL. */
void snapstore_free(struct snapstore *s);

/* Checks a name (key, parent or snapshot name) and a set of labels from a
 * request: -EINVAL with the reason in errbuf when they are not valid
 * UTF-8, too long, empty (names), or when labels is not an object of
 * strings. */
int snapstore_check_name(const char *what, const char *name, char *errbuf, size_t errlen);
int snapstore_check_labels(const json_t *labels, char *errbuf, size_t errlen);

/* Creates an active (kind SNAP_ACTIVE) or view (SNAP_VIEW) snapshot named
 * key over the committed snapshot parent ("" for none), labels borrowed
 * (copied).  The new directories and the metadata are on disk when it
 * returns.  Fills *ret_mount (the caller frees it with snap_mount_done).
 * Returns 0, -EEXIST (key exists), -ENOENT (no such parent), -EINVAL (the
 * parent is not committed, bad input), or another -errno; the reason in
 * errbuf. */
int snapstore_prepare(struct snapstore *s, enum snap_kind kind, const char *key, const char *parent,
		      const json_t *labels, struct snap_mount *ret_mount, char *errbuf,
		      size_t errlen);
/* Records a committed snapshot named name over the committed snapshot
 * parent ("" for none), labels borrowed, whose files are the directory
 * path (absolute, not checked here: a layer of pullfs's layers/, which
 * they stay in): a remote snapshot, whose fs in the store is a symbolic
 * link to path, usage 0.  The link and the metadata are on disk when it
 * returns.  Returns 0, or -EEXIST,
 * -ENOENT, -EINVAL as snapstore_prepare. */
int snapstore_add_remote(struct snapstore *s, const char *name, const char *parent,
			 const json_t *labels, const char *path, char *errbuf, size_t errlen);
/* The mounts of an active or view snapshot.  -ENOENT when there is no such
 * snapshot; -EINVAL for a committed one. */
int snapstore_mounts(struct snapstore *s, const char *key, struct snap_mount *ret_mount,
		     char *errbuf, size_t errlen);
/* Commits the active snapshot key as name, with labels (borrowed) as its
 * labels, measuring its upper directory for snapstore_usage; key is gone
 * afterwards.  -ENOENT (no key), -EBUSY (key is not active), -EEXIST
 * (name exists). */
int snapstore_commit(struct snapstore *s, const char *name, const char *key, const json_t *labels,
		     char *errbuf, size_t errlen);
/* Removes a snapshot and its directories.  -ENOENT, or -EBUSY when
 * another snapshot has it as parent. */
int snapstore_remove(struct snapstore *s, const char *key, char *errbuf, size_t errlen);
/* A copy of a snapshot's info into *ret (freed with snap_info_done).
 * -ENOENT. */
int snapstore_stat(struct snapstore *s, const char *key, struct snap_info *ret, char *errbuf,
		   size_t errlen);
/* Updates the labels of the snapshot info->name from info->labels:
 * with no paths, or the path "labels", they replace all of them; a path
 * "labels.KEY" sets KEY to info's value for it, or removes it when info
 * has none.  Any other path is -EINVAL.  The updated info is copied to
 * *ret.  -ENOENT. */
int snapstore_update(struct snapstore *s, const struct snap_info *info, char *const *paths,
		     size_t n_paths, struct snap_info *ret, char *errbuf, size_t errlen);
/* Calls fn for every snapshot, in creation order, with the lock held (fn
 * must not call the store); stops at and returns fn's first nonzero
 * value. */
int snapstore_walk(struct snapstore *s, int (*fn)(void *userdata, const struct snap_info *info),
		   void *userdata);
/* Calls fn with the directory of every remote snapshot (the path
 * snapstore_add_remote recorded), with the lock held (fn must not call
 * the store); stops at and returns fn's first nonzero value. */
int snapstore_walk_remote(struct snapstore *s, int (*fn)(void *userdata, const char *path),
			  void *userdata);
/* Bytes and inodes a snapshot uses on local disk: measured now for an
 * active one (and kept for snapstore_local_bytes), as at its commit for a
 * committed one, 0 for a view.  -ENOENT. */
int snapstore_usage(struct snapstore *s, const char *key, int64_t *ret_size, int64_t *ret_inodes,
		    char *errbuf, size_t errlen);
/* Bytes the snapshots take on local disk, all together: each committed
 * one as measured at its commit, each active one as at its last
 * snapstore_usage (0 before the first; containerd's CRI plugin asks every
 * few seconds), remote ones and views nothing.  A running sum: no lock,
 * no disk access. */
uint64_t snapstore_local_bytes(struct snapstore *s);
/* Removes the directories no snapshot names.  Returns how many, or
 * -errno. */
int snapstore_cleanup(struct snapstore *s);

/* Free the contents; accept a zeroed struct. */
void snap_info_done(struct snap_info *i);
void snap_mount_done(struct snap_mount *m);

/* What layer.c (unpacking), layerindex.c (the index file), layerpath.c
 * (the rules every entry obeys) and the readers of lazy layers' tables of
 * contents (toc.c, tocjson.c) share. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errname.h"
#include "layer.h"

/* Everything wrong with layer content is EBADMSG, with a reason. */
#define layer_fail(errbuf, errlen, ...) errbuf_fail(-EBADMSG, errbuf, errlen, __VA_ARGS__)

#define LAYER_DEFAULT_MAX_ENTRIES UINT64_C(1000000)
#define LAYER_DEFAULT_MAX_EXPANDED (UINT64_C(64) << 30)
#define LAYER_DEFAULT_MAX_PATH 4096u
/* Linux limits: a longer name or xattr could never be served anyway. */
#define LAYER_NAME_MAX 255u
#define LAYER_XATTR_NAME_MAX 255u
#define LAYER_XATTR_SIZE_MAX 65536u
#define LAYER_XATTRS_PER_ENTRY 1024u
/* Names and values of all xattrs of a layer: each is held in memory for
 * as long as an image of the layer is loaded, and a few bytes of gzip
 * can expand to a megabyte of them per entry. */
#define LAYER_XATTR_BYTES_MAX (16u << 20)

/* Every component of a relative path is a real name: not empty, ".", ".."
 * and not longer than LAYER_NAME_MAX.  "" (the root) passes. */
bool layer_path_components_ok(const char *p);
/* A tar name in the form of struct layer_entry's path (malloc'ed into
 * *ret): 0, -ENOMEM, or -EBADMSG with the reason in errbuf. */
/* lim (NULL: none) with every limit it leaves at 0 set to its default. */
struct layer_limits layer_limits_resolve(const struct layer_limits *lim);

int layer_normalise(const char *raw, uint32_t max_path, char **ret, char *errbuf, size_t errlen);

/* A set of paths (borrowed strings), for the hardlink targets and
 * directories a layer has shown so far.  Zeroed is empty; free slots. */
struct pathset {
	const char **slots; /* borrowed from the entries; NULL: free */
	size_t cap, n;
};
bool pathset_has(const struct pathset *ps, const char *s);
/* 0 or -ENOMEM. */
int pathset_add(struct pathset *ps, const char *s);

/* Recognises the overlay markers in the final component of e->path and
 * turns e into LAYER_ENTRY_WHITEOUT (path: the removed path) or
 * LAYER_ENTRY_OPAQUE (path: the directory).  Returns 1 for an aufs
 * internal (".wh..wh.*") to drop, 0, or -EBADMSG for a whiteout of "",
 * "." or "..". */
int layer_whiteout(struct layer_entry *e, char *errbuf, size_t errlen);

/* The paths one layer has placed so far (strings borrowed from its
 * entries, which outlive it).  Zeroed is empty. */
struct layer_places {
	struct pathset seen; /* every non-directory entry: hardlink targets */
	struct pathset dirs; /* every directory entry */
};
/* Makes e a hardlink to raw, normalised into e->link, which must name a
 * non-directory the layer placed before.  0, -EBADMSG with a reason,
 * -ENOMEM. */
int layer_hardlink_target(const struct layer_places *pl, const char *raw, uint32_t max_path,
			  struct layer_entry *e, char *errbuf, size_t errlen);
/* -EBADMSG with a reason when e may not follow what the layer placed: a
 * path given twice, or below a non-directory. */
int layer_places_check(const struct layer_places *pl, struct layer_entry *e, char *errbuf,
		       size_t errlen);
/* Records e (its path is borrowed).  0 or -ENOMEM. */
int layer_places_add(struct layer_places *pl, const struct layer_entry *e);
void layer_places_done(struct layer_places *pl);
/* -ENOSPC for a full disk or quota, -EIO for any other failed write. */
int layer_write_error(void);
/* Frees what an entry owns (not the entry itself). */
void layer_entry_clear(struct layer_entry *e);

static inline void layer_index_freep(struct layer_index **li)
{
	layer_index_free(*li);
}

/* eStargz's own files, at the root of its layers: the table of contents
 * and the prefetch landmarks are no part of the image's tree. */
#define ESTARGZ_TOC_NAME "stargz.index.json"
#define ESTARGZ_PREFETCH_LANDMARK ".prefetch.landmark"
#define ESTARGZ_NO_PREFETCH_LANDMARK ".no.prefetch.landmark"
bool layer_is_estargz_own(const char *path);

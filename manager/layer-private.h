/* What layer.c (unpacking) and layerindex.c (the index file) share. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errname.h"
#include "layer.h"

/* Everything wrong with layer content is EBADMSG, with a reason. */
#define layer_fail(errbuf, errlen, ...) errbuf_fail(-EBADMSG, errbuf, errlen, __VA_ARGS__)

/* Linux limit: a longer name could never be served anyway. */
#define LAYER_NAME_MAX 255u

/* Every component of a relative path is a real name: not empty, ".", ".."
 * and not longer than LAYER_NAME_MAX.  "" (the root) passes. */
bool layer_path_components_ok(const char *p);
/* A tar name in the form of struct layer_entry's path (malloc'ed into
 * *ret): 0, -ENOMEM, or -EBADMSG with the reason in errbuf. */
int layer_normalise(const char *raw, uint32_t max_path, char **ret,
		    char *errbuf, size_t errlen);

/* A set of paths (borrowed strings), for the hardlink targets and
 * directories a layer has shown so far.  Zeroed is empty; free slots. */
struct pathset {
	const char **slots; /* borrowed from the entries; NULL: free */
	size_t cap, n;
};
bool pathset_has(const struct pathset *ps, const char *s);
/* 0 or -ENOMEM. */
int pathset_add(struct pathset *ps, const char *s);
/* -ENOSPC for a full disk or quota, -EIO for any other failed write. */
int layer_write_error(void);
/* Frees what an entry owns (not the entry itself). */
void layer_entry_clear(struct layer_entry *e);

static inline void layer_index_freep(struct layer_index **li)
{
	layer_index_free(*li);
}

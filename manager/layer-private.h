/* What layer.c (unpacking) and layerindex.c (the index file) share. */
#pragma once

#include <stdbool.h>

#include "layer.h"

/* Linux limit: a longer name could never be served anyway. */
#define LAYER_NAME_MAX 255u

/* Every component of a relative path is a real name: not empty, ".", ".."
 * and not longer than LAYER_NAME_MAX.  "" (the root) passes. */
bool layer_path_components_ok(const char *p);
/* -ENOSPC for a full disk or quota, -EIO for any other failed write. */
int layer_write_error(void);
/* Frees what an entry owns (not the entry itself). */
void layer_entry_clear(struct layer_entry *e);

static inline void layer_index_freep(struct layer_index **li)
{
	layer_index_free(*li);
}

/* Reading a whole file into memory, with a cap: the one loop the cache,
 * the layer index and the tools all need. */
#pragma once

#include <stddef.h>

/* Reads fd from its current offset to the end into a new buffer, NUL
 * terminated (the terminator is not counted in *ret_len, which may be
 * NULL).  Returns 0, -EFBIG when there are more than max bytes, -ENOMEM,
 * or the -errno of read(2).  The caller frees *ret. */
int read_full(int fd, size_t max, char **ret, size_t *ret_len);

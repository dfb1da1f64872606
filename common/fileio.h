/* Whole reads and writes: reading a file into memory with a cap, and
 * writing a buffer through short writes and EINTR -- the loops the cache,
 * the layer index and the tools all need. */
#pragma once

#include <dirent.h>

#include <stddef.h>

/* Reads fd from its current offset to the end into a new buffer, NUL
 * terminated (the terminator is not counted in *ret_len, which may be
 * NULL).  Returns 0, -EFBIG when there are more than max bytes, -ENOMEM,
 * or the -errno of read(2).  The caller frees *ret. */
int read_full(int fd, size_t max, char **ret, size_t *ret_len);

/* Writes all len bytes of buf to fd, again after a short write or EINTR.
 * Blocks as write(2) does.  Returns 0, or the -errno of write(2) (-EIO
 * when it wrote nothing without an error); part of buf may have been
 * written then. */
int write_full(int fd, const void *buf, size_t len);

/* A DIR stream over a duplicate of dirfd, from its start (the caller
 * closes the stream; dirfd stays open).  Returns 0 or -errno. */
int dir_stream(int dirfd, DIR **ret);

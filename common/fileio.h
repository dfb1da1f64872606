/* Whole reads and writes: reading a file into memory with a cap, and
 * writing a buffer through short writes and EINTR -- the loops the cache,
 * the layer index and the tools all need -- and the flushes that make what
 * was written survive a power cut. */
#pragma once

#include <dirent.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

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

/* Removes every entry of the directory dfd, subdirectories with what
 * they hold, never following a symbolic link; best effort (what cannot
 * be removed stays).  dfd stays open. */
void empty_dir(int dfd);

/* fdatasync(2) of fd: its data and what is needed to read it back (size,
 * blocks) are on stable storage when this returns 0.  Blocks.  Returns 0
 * or -errno (-EIO when write-back failed). */
int flush_data(int fd);
/* fsync(2) of a directory fd: the entries created, renamed or removed in
 * it so far are on stable storage when this returns 0.  Blocks.  Returns
 * 0 or -errno. */
int flush_dir(int dirfd);
/* syncfs(2) of the filesystem fd is on: every file and directory written
 * there so far, by anyone, is on stable storage when this returns 0.  One
 * call instead of one flush per file.  Blocks.  Returns 0 or -errno. */
int flush_fs(int fd);
/* Process pid's state letter from /proc/PID/stat ('R', 'S', 'Z'...), its
 * name into comm (len bytes, NUL terminated; may be NULL), or -errno
 * (-ENOENT: no such process). */
int proc_stat(pid_t pid, char *comm, size_t len);

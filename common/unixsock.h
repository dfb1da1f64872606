/* Listening Unix stream sockets at a path, as the daemon's sockets (the
 * control socket, the snapshotter's) are made: mode 0600, and a socket
 * left at the path by a daemon that is gone replaced, never one another
 * process serves nor a file that is not a socket. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Binds a new non-blocking, close-on-exec socket to path and listens with
 * backlog.  What is at path already: a socket nothing answers on is
 * replaced, and any socket when predecessors (a previous process of this
 * daemon may still hold it); another file is an error.  what names the
 * socket in errbuf ("control socket").  Not thread-safe as to the umask
 * (the mode is set through it around bind(2)).  Returns 0 with the bound
 * socket in *ret_fd (the caller closes it and unlinks path), or -errno
 * with a one-line reason in errbuf. */
int unixsock_listen(const char *path, const char *what, bool predecessors, int backlog, int *ret_fd,
		    char *errbuf, size_t errlen);

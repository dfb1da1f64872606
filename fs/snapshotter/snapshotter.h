/* containerd's snapshots service (containerd.services.snapshots.v1
 * .Snapshots) served on a Unix socket, for containerd's proxy plugins
 * (docs/containerd.md): an overlayfs snapshotter whose snapshots live in
 * the store of snapstore.h.  Knows no FUSE. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct manager;
struct snapshotter;

/* Opens the store in dir (absolute; made when missing) and serves
 * listen_fd, bound to socket_path by the supervisor, or binds socket_path
 * when listen_fd is -1 (see grpcserver_new for predecessors).  mountpoint
 * and m (both NULL: no remote snapshots) are pullfs's mount and its
 * manager: a Prepare whose labels name a layer runs ensure for its image
 * through m on behalf of the socket's peer, and the snapshot stands on
 * the layer's directory in the mount's layers/.  m is borrowed and must
 * outlive the snapshotter's serving.  Nothing is served
 * before snapshotter_start, so this may run before the daemon forks.
 * Returns 0 and a snapshotter owned by the caller, or -errno with a
 * one-line reason in errbuf. */
int snapshotter_new(const char *socket_path, int listen_fd, bool predecessors, const char *dir,
		    const char *mountpoint, struct manager *m, struct snapshotter **ret,
		    char *errbuf, size_t errlen);
/* Serves from threads of its own.  Returns 0 or -errno. */
int snapshotter_start(struct snapshotter *s);
/* Stops serving, waiting for calls that run.  Accepts NULL. */
void snapshotter_stop(struct snapshotter *s);
/* Whether the image reference (canonical) is one that remote snapshots
 * stand on: for manager_set_in_use(), userdata the snapshotter. */
bool snapshotter_in_use(void *userdata, const char *reference);
/* Bytes the snapshots take on local disk (snapstore_local_bytes): for
 * manager_set_snapshot_bytes(), userdata the snapshotter.  No lock, no
 * disk access. */
uint64_t snapshotter_local_bytes(void *userdata);
/* Stops, removes the socket and frees; the store stays on disk.  Accepts
 * NULL. */
void snapshotter_free(struct snapshotter *s);

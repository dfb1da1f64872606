/* The supervisor (--supervise): a small process of pullfs's own that
 * mounts, holds the /dev/fuse descriptor and the hand-over log
 * (handover.h), and runs the serving process -- the same binary, started
 * again with the descriptors inherited.  When the serving process dies
 * the mount stays: the kernel keeps requests waiting while the descriptor
 * is open, and a new serving process takes the connection over and has
 * them sent again.  `pullfsctl upgrade` starts the binary now installed
 * at the supervisor's path the same way, after a check run of it.
 *
 * The supervisor itself has no threads and does nothing but wait.  When
 * it dies, the serving process gets SIGTERM (PR_SET_PDEATHSIG), unmounts
 * and exits: the mount goes away rather than hang -- unless systemd holds
 * the descriptors in its store (FileDescriptorStoreMax=, $NOTIFY_SOCKET),
 * which gives them to the next start of the unit: the mount then stays,
 * and that start takes it over. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct fuse_args;

/* A serving process: the connection it serves and what it is told of the
 * processes before it (supervisor_child_env()). */
struct handoff {
	int dev_fd;	     /* /dev/fuse, mounted by the supervisor */
	int state_fd;	     /* the hand-over log (handover.h) */
	int sup_fd;	     /* a SOCK_SEQPACKET socket to the supervisor */
	int sup_pid;	     /* the supervisor */
	unsigned generation; /* serving processes before this one */
	unsigned upgrades, recoveries;
	int64_t down_ns;  /* CLOCK_MONOTONIC when the previous one stopped; 0: none */
	bool upgrade;	  /* the previous one was replaced, not crashed */
	bool fdstore;	  /* systemd keeps the descriptors: the mount outlives us all */
	unsigned drained; /* replies the previous one sent while it drained */
	/* the snapshotter's listening socket, bound and held by the
	 * supervisor; -1: none */
	int snap_fd;
};

/* The environment variable a serving process is started with. */
#define SUPERVISOR_ENV "PULLFS_SERVE"

/* Runs the supervisor: mounts mountpoint with args, starts the serving
 * process (argv again, with SUPERVISOR_ENV), detaches from the terminal
 * once it serves unless foreground, and returns when the mount ends: 0
 * after SIGTERM/SIGINT or an unmount, 1 when the first serving process
 * failed to start (its message is on stderr).  check_mountpoint (0 or
 * -errno, its message printed) is called once the cache's lock is held,
 * unless systemd passed the descriptors of a supervisor before.
 * snap_socket (may be NULL): the snapshotter's socket, bound here with
 * the lock held and kept listening for as long as the mount, so that a
 * client connecting while no serving process runs waits in its backlog
 * for the next one instead of being refused. */
int supervisor_run(struct fuse_args *args, const char *mountpoint, const char *cache_dir,
		   const char *snap_socket, bool foreground, char **argv,
		   int (*check_mountpoint)(const char *mp));

/* Whether systemd passed the descriptors of a supervisor before this one
 * (then the mount point is in use and must not be checked: nobody answers
 * it yet). */
bool supervisor_fds_passed(void);

/* In a serving process: reads and removes SUPERVISOR_ENV.  Returns 0 and
 * fills *h (then the process serves), 1 for a check run (*check_version
 * is the hand-over version of the asking supervisor), -ENOENT when the
 * variable is not set (an ordinary start), -EINVAL when it is malformed. */
int supervisor_child_env(struct handoff *h, unsigned *check_version);

/* The FUSE side of pullfs: libfuse3's low-level API over the manager.
 * The only place that knows fuse_req_t and fuse_ino_t. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct manager;
struct fuse_args;
struct control;
struct handoff;

#define FS_DEFAULT_NS_NODES_PER_USER 1024

struct fs_options {
	double content_timeout;	  /* entry/attr timeout inside images; 0: 1 day */
	double image_timeout;	  /* entry timeout of images/<ref>; 0: 60 s */
	double namespace_timeout; /* entry/attr timeout of the namespace; 0: 1 s */
	unsigned max_threads;	  /* FUSE worker threads; 0: 32 */
	struct control *control;  /* bound, served while mounted; NULL: none */
	/* containerd's snapshots service, bound, served while mounted;
	 * NULL: none */
	struct snapshotter *snapshotter;
	bool debug;	     /* -d: FUSE messages on stderr */
	bool no_passthrough; /* read objects through the daemon too */
	/* namespace nodes a user other than root may have made and the
	 * kernel still holds (namespace.c); 0: the default */
	unsigned max_ns_nodes_per_user;
};

struct fs;

int fs_new(struct manager *m, const struct fs_options *opts, struct fs **ret);
void fs_free(struct fs *fs);

/* Mounts at mountpoint with the FUSE options in args, detaches from the
 * terminal unless foreground, serves until SIGINT/SIGTERM or an unmount,
 * then unmounts.  SIGHUP reopens the events log.  Returns 0 after a clean
 * stop, or -errno (with a message printed on stderr) when mounting
 * failed. */
int fs_serve(struct fs *fs, struct fuse_args *args, const char *mountpoint, bool foreground);
/* The same for a serving process under the supervisor: no mount, no
 * detaching; the connection taken over when h->generation > 0.  Returns
 * 0 after a clean stop (the supervisor's SIGTERM, an unmount), or -errno
 * with a message printed. */
int fs_serve_handoff(struct fs *fs, struct fuse_args *args, const char *mountpoint,
		     const struct handoff *h);

/* pullfs's own I/O on the /dev/fuse descriptor, under libfuse: the one
 * place where a message on its way to the kernel is amended with what
 * libfuse cannot express.  Today that is FUSE_PARALLEL_DIROPS in the INIT
 * reply, which libfuse before 3.17 accepts as FUSE_CAP_PARALLEL_DIROPS but
 * never sends, so that the kernel lets one lookup at a time into a
 * directory; and FUSE passthrough (protocol 7.40), which libfuse 3.14 does
 * not know: FUSE_PASSTHROUGH in the INIT reply, and OPEN replies that name
 * a backing file the kernel then reads without asking the daemon. */
#pragma once

#include <stdbool.h>

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#endif
#include <fuse_lowlevel.h>

struct fuseio_options {
	bool parallel_dirops; /* FUSE_PARALLEL_DIROPS in the INIT reply, if offered */
	bool passthrough;     /* FUSE_PASSTHROUGH in the INIT reply, if offered */
	bool debug;	      /* print the INIT reply as sent (stderr, as -d does) */
};

/* Takes over reading and writing se's /dev/fuse descriptor (splice of file
 * data included); call after fuse_session_mount() and before the session
 * loop.  One session per process: libfuse hands the I/O callbacks the
 * session's userdata, not ours, so the state is this module's.  Does not
 * block.  Returns 0, or -errno from libfuse (-ENOMEM), the session then
 * doing its own I/O as before. */
int fuseio_attach(struct fuse_session *se, const struct fuseio_options *opts);

/* Whether the kernel accepted passthrough for this connection (known once
 * INIT is answered). */
bool fuseio_passthrough(void);
/* Registers fd as a backing file with the kernel (it keeps its own
 * reference; fd may be closed afterwards).  Returns the backing id, or
 * -EOPNOTSUPP (no passthrough), -EPERM (no CAP_SYS_ADMIN), -errno. */
int fuseio_backing_open(int fd);
void fuseio_backing_close(int backing_id);
/* fuse_reply_open(), with the file opened in passthrough to backing_id. */
int fuseio_reply_open_backing(fuse_req_t req, const struct fuse_file_info *fi, int backing_id);

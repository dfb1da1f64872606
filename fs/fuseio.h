/* pullfs's own I/O on the /dev/fuse descriptor, under libfuse: the one
 * place where a message on its way to the kernel is amended with what
 * libfuse cannot express.  Today that is FUSE_PARALLEL_DIROPS in the INIT
 * reply, which libfuse before 3.17 accepts as FUSE_CAP_PARALLEL_DIROPS but
 * never sends, so that the kernel lets one lookup at a time into a
 * directory. */
#pragma once

#include <stdbool.h>

struct fuse_session;

struct fuseio_options {
	bool parallel_dirops; /* FUSE_PARALLEL_DIROPS in the INIT reply, if offered */
	bool debug;	      /* print the INIT reply as sent (stderr, as -d does) */
};

/* Takes over reading and writing se's /dev/fuse descriptor (splice of file
 * data included); call after fuse_session_mount() and before the session
 * loop.  One session per process: libfuse hands the I/O callbacks the
 * session's userdata, not ours, so the state is this module's.  Does not
 * block.  Returns 0, or -errno from libfuse (-ENOMEM), the session then
 * doing its own I/O as before. */
int fuseio_attach(struct fuse_session *se, const struct fuseio_options *opts);

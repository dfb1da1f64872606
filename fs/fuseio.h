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
#include <stddef.h>
#include <stdint.h>

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#endif
#include <fuse_lowlevel.h>

struct handover_log;

struct fuseio_options {
	bool parallel_dirops; /* FUSE_PARALLEL_DIROPS in the INIT reply, if offered */
	bool passthrough;     /* FUSE_PASSTHROUGH in the INIT reply, if offered */
	bool debug;	      /* print the INIT reply as sent (stderr, as -d does) */
	int fd;		      /* the /dev/fuse descriptor; -1: the session's own */
	/* Taking over a connection another process negotiated (handover.h):
	 * the kernel's INIT request as that process read it, given to
	 * libfuse as the first request; its reply is not sent, and once it
	 * is made the kernel is asked to send again every request the
	 * other process read and did not answer (FUSE_NOTIFY_RESEND). */
	const void *takeover_init;
	size_t takeover_init_len;
	/* ... and the flags of the reply that process sent, when it noted
	 * them (handover "initr"): only flags in it are taken to be on.
	 * Without them, what a version before the record asked for:
	 * everything but FUSE_DIRECT_IO_ALLOW_MMAP. */
	bool takeover_reply_known;
	uint64_t takeover_reply;
	/* the hand-over log the INIT exchange is noted in (NULL: none) */
	struct handover_log *log;
	/* called once the resend was asked for (from a session thread) */
	void (*taken_over)(void *userdata, int64_t resent_ns, int err);
	void *userdata;
};

/* The I/O of one session: an object, made by fuseio_attach() and passed to
 * every call below.  Before it is made (NULL) the queries answer as for a
 * connection without passthrough, and fuseio_kernel_has_node() -EBADF. */
struct fuseio;

/* Takes over reading and writing se's /dev/fuse descriptor (splice of file
 * data included); call after fuse_session_mount() and before the session
 * loop.  libfuse hands the I/O callbacks the session's userdata, not
 * ours: the session's userdata must begin with a struct fuseio *, which
 * the caller sets to *ret before the loop starts (struct fs has it
 * first).  Does not block.  Returns 0 with the new object in *ret, or
 * -errno (-ENOMEM, or from libfuse), the session then doing its own I/O
 * as before. */
int fuseio_attach(struct fuse_session *se, const struct fuseio_options *opts, struct fuseio **ret);
/* Frees what fuseio_attach() made, once the session loop has ended;
 * accepts NULL. */
void fuseio_detach(struct fuseio *io);

/* An upgrade's drain: no thread reads /dev/fuse once this returns (those
 * in read(2) are interrupted with SIGUSR2, which must have a handler
 * without SA_RESTART; the next read of each waits until the thread is
 * cancelled), and replies from now on are counted (fuseio_drained). */
void fuseio_drain_start(struct fuseio *io);
/* Around a wait only a registry ends, made by a request handler on the
 * thread that read the request (a read of a lazy file waiting for its
 * chunk): a drain does not wait for such a request when the kernel can
 * resend it (it offered FUSE_HAS_RESEND at INIT), and leaves it to the
 * next process. */
void fuseio_wait_begin(struct fuseio *io);
void fuseio_wait_end(struct fuseio *io);
/* After fuseio_drain_start(): returns once every request this process
 * read is answered, but those in fuseio_wait_begin() when the kernel can
 * resend them, the number of which it returns (they are the next
 * process's to answer once it asked for the resend; one may still be
 * answered by this process before it ends, which is as good). */
unsigned fuseio_drain_wait(struct fuseio *io);
unsigned long fuseio_drained(struct fuseio *io);
/* Requests the kernel sent again after a NOTIFY_RESEND (their unique id
 * carries FUSE_UNIQUE_RESEND), read by this process. */
unsigned long fuseio_resent(struct fuseio *io);

/* Asks the kernel to send again what was read and not answered. */
int fuseio_resend(struct fuseio *io);
/* Whether the kernel can resend requests (it offered FUSE_HAS_RESEND at
 * INIT): what this process leaves unanswered, the next one answers. */
bool fuseio_can_resend(const struct fuseio *io);
/* Whether the kernel has an inode for nodeid: 0, -ENOENT when it has
 * none, another -errno when it cannot tell.  Asks with an invalidation of
 * the node's attributes (no pages), written on the descriptor itself, so
 * it works before the session has seen INIT (a takeover). */
int fuseio_kernel_has_node(struct fuseio *io, uint64_t nodeid);
/* When NOTIFY_RESEND went out after a takeover (CLOCK_MONOTONIC ns), 0
 * before; *ret_err the errno of its write, 0 when the kernel took it. */
int64_t fuseio_resent_at_ns(struct fuseio *io, int *ret_err);

/* Whether the kernel accepted passthrough for this connection (known once
 * INIT is answered). */
bool fuseio_passthrough(struct fuseio *io);
/* Whether the kernel maps files opened in direct I/O, shared mappings
 * too (FUSE_DIRECT_IO_ALLOW_MMAP, protocol 7.39; known once INIT is
 * answered; after a takeover, what the kernel offered, which the process
 * before, of this version, asked for). */
bool fuseio_direct_io_mmap(struct fuseio *io);
/* Registers fd as a backing file with the kernel (it keeps its own
 * reference; fd may be closed afterwards).  Returns the backing id, or
 * -EOPNOTSUPP (no passthrough), -EPERM (no CAP_SYS_ADMIN), -errno. */
int fuseio_backing_open(struct fuseio *io, int fd);
void fuseio_backing_close(struct fuseio *io, int backing_id);
/* fuse_reply_open(), with the file opened in passthrough to backing_id. */
int fuseio_reply_open_backing(fuse_req_t req, const struct fuse_file_info *fi, int backing_id);

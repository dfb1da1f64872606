/* I/O on /dev/fuse for libfuse's session loop (fuse_session_custom_io):
 * plain read(2), writev(2) and splice(2), with one look at each message
 * for the INIT exchange.  read() notes the unique id of FUSE_INIT and the
 * flags the kernel offered; writev() adds to the INIT reply the offered
 * flags pullfs wants but libfuse does not send.  Any other message costs
 * a comparison on the way in and a load and a comparison on the way out. */
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)

#include "fuseio.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <inttypes.h>
#include <linux/fuse.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* Written by fuseio_attach() before the session loop starts its threads,
 * read-only afterwards. */
static uint64_t init_wanted; /* FUSE_* INIT flags, flags2 in the high word */
static bool debug;

/* The pending INIT exchange: init_add is stored before init_unique
 * (release) and read after it (acquire).  0: none pending.  A notification
 * also has unique 0, hence the separate test in io_writev(). */
static _Atomic uint64_t init_unique;
static _Atomic uint64_t init_add;

static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
	ssize_t n = read(fd, buf, len);
	const struct fuse_in_header *in = buf;

	if (n >= (ssize_t)sizeof(*in) && in->opcode == FUSE_INIT) {
		const struct fuse_init_in *arg = (const void *)(in + 1);
		size_t arglen = (size_t)n - sizeof(*in);
		uint64_t offered = 0;

		/* Before 7.36 the request ends after flags; flags2 counts
		 * only with FUSE_INIT_EXT.  A major other than 7 gets a bare
		 * version answer from libfuse, and a second INIT. */
		if (arglen >= offsetof(struct fuse_init_in, flags) + sizeof(arg->flags) &&
		    arg->major == 7) {
			offered = arg->flags;
			if ((arg->flags & FUSE_INIT_EXT) &&
			    arglen >= offsetof(struct fuse_init_in, flags2) + sizeof(arg->flags2))
				offered |= (uint64_t)arg->flags2 << 32;
		}
		atomic_store_explicit(&init_add, offered & init_wanted, memory_order_relaxed);
		atomic_store_explicit(&init_unique, in->unique, memory_order_release);
	}
	return n;
}

/* The INIT reply: header and struct fuse_init_out, as libfuse sends it.
 * Amended in a copy; libfuse's own buffers are left alone. */
static ssize_t write_init_reply(int fd, const struct iovec *iov, int count, uint64_t add)
{
	const struct fuse_out_header *out = iov[0].iov_base;
	struct fuse_init_out init = { 0 };
	struct iovec v[2];
	size_t len;
	bool ext;

	if (count != 2 || out->error != 0)
		return writev(fd, iov, count);
	len = iov[1].iov_len;
	if (len > sizeof(init) || len < offsetof(struct fuse_init_out, flags) + sizeof(init.flags))
		return writev(fd, iov, count);
	memcpy(&init, iov[1].iov_base, len);
	/* flags2 only where the kernel reads it: an extended reply. */
	ext = (init.flags & FUSE_INIT_EXT) &&
	      len >= offsetof(struct fuse_init_out, flags2) + sizeof(init.flags2);
	init.flags |= (uint32_t)add;
	if (ext)
		init.flags2 |= (uint32_t)(add >> 32);
	if (debug)
		fuse_log(FUSE_LOG_DEBUG,
			 "fuseio: INIT reply flags=0x%08" PRIx32 " flags2=0x%08" PRIx32 "\n",
			 init.flags, init.flags2);
	v[0] = iov[0];
	v[1].iov_base = &init;
	v[1].iov_len = len;
	return writev(fd, v, 2);
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	uint64_t pending = atomic_load_explicit(&init_unique, memory_order_acquire);

	if (pending && count > 0 && iov[0].iov_len >= sizeof(struct fuse_out_header) &&
	    ((const struct fuse_out_header *)iov[0].iov_base)->unique == pending &&
	    atomic_compare_exchange_strong(&init_unique, &pending, 0))
		return write_init_reply(fd, iov, count,
					atomic_load_explicit(&init_add, memory_order_relaxed));
	return writev(fd, iov, count);
}

/* Without it libfuse leaves out FUSE_CAP_SPLICE_WRITE, which the read
 * path uses to send file data from the pack without a copy. */
static ssize_t io_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
			      unsigned int flags, void *userdata)
{
	return splice(fdin, offin, fdout, offout, len, flags);
}

int fuseio_attach(struct fuse_session *se, const struct fuseio_options *opts)
{
	static const struct fuse_custom_io io = {
		.read = io_read,
		.writev = io_writev,
		.splice_send = io_splice_send,
	};

	init_wanted = opts->parallel_dirops ? FUSE_PARALLEL_DIROPS : 0;
	debug = opts->debug;
	atomic_store(&init_unique, 0);
	return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}

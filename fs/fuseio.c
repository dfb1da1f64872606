/* I/O on /dev/fuse for libfuse's session loop (fuse_session_custom_io):
 * plain read(2), writev(2) and splice(2), with one look at each message
 * for the INIT exchange.  read() notes the unique id of FUSE_INIT and the
 * flags the kernel offered; writev() adds to the INIT reply the offered
 * flags pullfs wants but libfuse does not send.  Any other message costs
 * a comparison on the way in and a load and a comparison on the way out,
 * plus a thread-local load for OPEN replies to be sent in passthrough,
 * and two atomic operations on its reader's own slot (what a drain waits
 * for).
 *
 * Passthrough (protocol 7.40, kernel 6.9) is not in the installed headers
 * (7.38): its constants and the two structures it extends are defined
 * here, by the layout the kernel reads. */
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)

#include "clock.h"
#include "fault.h"
#include "fuseio.h"
#include "handover.h"
#include "macro.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <inttypes.h>
#include <linux/fuse.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#define PFS_FUSE_PASSTHROUGH (UINT64_C(1) << 37)
/* protocol 7.39: shared mappings of files opened with FOPEN_DIRECT_IO */
#define PFS_FUSE_DIRECT_IO_ALLOW_MMAP (UINT64_C(1) << 36)
#define PFS_FOPEN_PASSTHROUGH (1u << 7)
/* protocol 7.40: requeue every request read but not answered; the
 * kernel offers FUSE_HAS_RESEND in INIT when it can */
#define PFS_FUSE_NOTIFY_RESEND 7
#define PFS_FUSE_HAS_RESEND (UINT64_C(1) << 39)

/* struct fuse_init_out of 7.40: max_stack_depth took the first unused
 * word after flags2. */
struct pfs_init_out {
	uint32_t major, minor, max_readahead, flags;
	uint16_t max_background, congestion_threshold;
	uint32_t max_write, time_gran;
	uint16_t max_pages, map_alignment;
	uint32_t flags2, max_stack_depth;
	uint32_t unused[6];
};

/* struct fuse_open_out of 7.40: backing_id took the padding. */
struct pfs_open_out {
	uint64_t fh;
	uint32_t open_flags;
	int32_t backing_id;
};

struct pfs_backing_map {
	int32_t fd;
	uint32_t flags;
	uint64_t padding;
};

#define PFS_DEV_IOC_BACKING_OPEN _IOW(229, 1, struct pfs_backing_map)
#define PFS_DEV_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)

_Static_assert(sizeof(struct pfs_init_out) == 64, "fuse_init_out is 64 bytes");
_Static_assert(sizeof(struct pfs_open_out) == 16, "fuse_open_out is 16 bytes");

/* FUSE_UNIQUE_RESEND (protocol 7.40): a request the kernel sent again */
#define PFS_UNIQUE_RESEND (UINT64_C(1) << 63)

/* The threads that read /dev/fuse, each with a slot of its own, so that
 * a drain can interrupt the reads under way (drain_readers()) and tell
 * when the requests read are answered (fuseio_drain_wait()).  A slot is
 * given back when its thread ends (libfuse ends idle workers), so the
 * slots outnumber the threads alive at once, not those ever started. */
#define READER_SLOTS 1024
enum reader_state {
	READER_IDLE,	/* between requests: in read(2), parked, or not started */
	READER_BUSY,	/* with a request it will answer */
	READER_WAITING, /* with a request waiting for a registry (fuseio_wait_begin) */
};
struct reader {
	struct fuseio *io;
	pthread_t tid;
	atomic_bool used;
	atomic_bool in_read;
	atomic_int state; /* enum reader_state */
};

struct fuseio {
	/* Written by fuseio_attach() before the session loop starts its
	 * threads, read-only afterwards. */
	uint64_t init_wanted; /* FUSE_* INIT flags, flags2 in the high word */
	bool debug;
	int dev_fd;
	struct handover_log *log; /* where the INIT exchange is noted */
	/* Set once the INIT reply granting passthrough went out. */
	atomic_bool passthrough_on;
	/* ... granting shared mappings of files opened in direct I/O. */
	atomic_bool direct_io_mmap_on;

	/* The pending INIT exchange: init_add is stored before init_unique
	 * (release) and read after it (acquire).  0: none pending.  A
	 * notification also has unique 0, hence the separate test in
	 * io_writev(). */
	_Atomic uint64_t init_unique;
	_Atomic uint64_t init_add;

	/* Taking a connection over (fuseio_options.takeover_init): the
	 * first read returns the INIT request the kernel sent the first
	 * process, libfuse's reply to it is not sent, and no other read
	 * reaches the kernel before that reply was made -- libfuse would
	 * answer EIO to a request read before INIT.  Then NOTIFY_RESEND, and
	 * the gate opens. */
	void *takeover_req;
	size_t takeover_len;
	/* the INIT reply of the process that answered INIT, when it said */
	bool takeover_reply_known;
	uint64_t takeover_reply;
	bool takeover_given; /* gate_lock */
	atomic_bool gate_open;
	pthread_mutex_t gate_lock;
	pthread_cond_t gate_cond;
	atomic_int_fast64_t resent_at_ns; /* CLOCK_MONOTONIC; 0: not yet */
	atomic_int resend_err;
	void (*taken_over_fn)(void *userdata, int64_t resent_ns, int err);
	void *taken_over_data;
	atomic_ulong resent;

	/* An upgrade's drain. */
	atomic_bool draining;
	atomic_ulong drained;
	struct reader readers[READER_SLOTS];
	atomic_int n_readers; /* slots ever used: a bound for scans */
	/* each reader's struct reader *, for its destructor */
	pthread_key_t reader_key;
	bool reader_key_made;
	/* The kernel can send again what a process read and did not answer. */
	atomic_bool resend_offered;
	/* A drain waiting for readers (fuseio_drain_wait): woken on each
	 * request a reader is done with while draining. */
	pthread_mutex_t drain_lock;
	pthread_cond_t drain_cond;
};

/* Per thread, by nature: the backing id for the OPEN reply this thread is
 * about to send, and the slot of a thread that reads /dev/fuse. */
static _Thread_local int open_backing_id;
static _Thread_local int reader_slot = -1;

/* The synthetic INIT into buf, or wait for the gate; 0 when the caller
 * reads from the kernel, else the length given. */
static ssize_t takeover_read(struct fuseio *io, void *buf, size_t len)
{
	ssize_t n = 0;

	pthread_mutex_lock(&io->gate_lock);
	if (!io->takeover_given && io->takeover_len <= len) {
		memcpy(buf, io->takeover_req, io->takeover_len);
		io->takeover_given = true;
		n = (ssize_t)io->takeover_len;
	} else {
		while (!atomic_load(&io->gate_open))
			pthread_cond_wait(&io->gate_cond, &io->gate_lock);
	}
	pthread_mutex_unlock(&io->gate_lock);
	return n;
}

/* After libfuse made its INIT reply in a process that took over. */
static int send_resend(int fd)
{
	struct fuse_out_header h = { .len = sizeof(h), .error = PFS_FUSE_NOTIFY_RESEND };

	return write(fd, &h, sizeof(h)) == (ssize_t)sizeof(h) ? 0 : errno ? errno : EIO;
}

static void takeover_done(struct fuseio *io, int fd)
{
	int err = send_resend(fd);

	atomic_store(&io->resend_err, err);
	atomic_store(&io->resent_at_ns, clock_mono_ns());
	pthread_mutex_lock(&io->gate_lock);
	atomic_store(&io->gate_open, true);
	pthread_cond_broadcast(&io->gate_cond);
	pthread_mutex_unlock(&io->gate_lock);
	if (io->taken_over_fn)
		io->taken_over_fn(io->taken_over_data, atomic_load(&io->resent_at_ns), err);
}

int fuseio_resend(struct fuseio *io)
{
	return -send_resend(io->dev_fd);
}

bool fuseio_can_resend(const struct fuseio *io)
{
	return io && atomic_load(&io->resend_offered);
}

int fuseio_kernel_has_node(struct fuseio *io, uint64_t nodeid)
{
	struct {
		struct fuse_out_header h;
		struct fuse_notify_inval_inode_out arg;
	} m = { .h = { .len = sizeof(m), .error = FUSE_NOTIFY_INVAL_INODE },
		.arg = { .ino = nodeid, .off = -1, .len = 0 } };

	if (!io || io->dev_fd < 0)
		return -EBADF;
	return write(io->dev_fd, &m, sizeof(m)) == (ssize_t)sizeof(m) ? 0 : errno ? -errno : -EIO;
}

static void drain_wake(struct fuseio *io)
{
	pthread_mutex_lock(&io->drain_lock);
	pthread_cond_broadcast(&io->drain_cond);
	pthread_mutex_unlock(&io->drain_lock);
}

/* The calling reader's request goes from `from` to `to`; false when it
 * was not in `from`. */
static bool reader_move(struct fuseio *io, int slot, int from, int to)
{
	if (!io || slot < 0 || slot >= READER_SLOTS ||
	    !atomic_compare_exchange_strong(&io->readers[slot].state, &from, to))
		return false;
	if (atomic_load(&io->draining))
		drain_wake(io);
	return true;
}

/* A reader thread ends (pthread key destructor): its slot is free. */
static void reader_gone(void *v)
{
	struct reader *rd = v;

	atomic_store(&rd->in_read, false);
	if (atomic_exchange(&rd->state, READER_IDLE) != READER_IDLE &&
	    atomic_load(&rd->io->draining))
		drain_wake(rd->io);
	atomic_store(&rd->used, false);
}

/* A slot for the calling thread: READER_SLOTS when all are taken (its
 * reads are then neither interrupted nor waited for by a drain). */
static int reader_take(struct fuseio *io)
{
	for (int i = 0; i < READER_SLOTS; i++) {
		bool no = false;
		int n;

		if (!atomic_compare_exchange_strong(&io->readers[i].used, &no, true))
			continue;
		io->readers[i].io = io;
		io->readers[i].tid = pthread_self();
		atomic_store(&io->readers[i].state, READER_IDLE);
		if (pthread_setspecific(io->reader_key, &io->readers[i]) != 0) {
			atomic_store(&io->readers[i].used, false);
			return READER_SLOTS;
		}
		n = atomic_load(&io->n_readers);
		while (n < i + 1 && !atomic_compare_exchange_weak(&io->n_readers, &n, i + 1))
			;
		return i;
	}
	return READER_SLOTS;
}

/* A reader of a draining process reads no more: it waits here until
 * libfuse cancels it (pause() is a cancellation point; nothing is held). */
static void park(void)
{
	for (;;)
		pause();
}

/* The fuseio of a session's userdata (fuseio.h). */
static struct fuseio *of_session(void *session_userdata)
{
	return *(struct fuseio **)session_userdata;
}

static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
	struct fuseio *io = of_session(userdata);
	ssize_t n = 0;
	const struct fuse_in_header *in = buf;
	bool synthetic = false;
	int slot = reader_slot;

	if (slot < 0)
		reader_slot = slot = reader_take(io);
	/* back for another request: the one before was answered (or left
	 * to the next process by a drain) */
	reader_move(io, slot, READER_BUSY, READER_IDLE);
	reader_move(io, slot, READER_WAITING, READER_IDLE);
	/* in_read before draining is looked at, the drain the other way
	 * round: one of the two sees the other */
	if (slot < READER_SLOTS)
		atomic_store(&io->readers[slot].in_read, true);
	if (atomic_load(&io->draining)) {
		if (slot < READER_SLOTS)
			atomic_store(&io->readers[slot].in_read, false);
		park();
	}
	if (!atomic_load_explicit(&io->gate_open, memory_order_acquire))
		synthetic = (n = takeover_read(io, buf, len)) > 0;
	if (!synthetic)
		n = read(fd, buf, len);
	if (slot < READER_SLOTS)
		atomic_store(&io->readers[slot].in_read, false);
	if (n > 0)
		reader_move(io, slot, READER_IDLE, READER_BUSY);
	if (n >= (ssize_t)sizeof(*in) && (in->unique & PFS_UNIQUE_RESEND))
		atomic_fetch_add_explicit(&io->resent, 1, memory_order_relaxed);
	if (n >= (ssize_t)sizeof(*in) && in->opcode == FUSE_INIT) {
		/* for the process that may take over from this one */
		if (!synthetic)
			handover_note(io->log, handover_format_init(buf, (size_t)n));
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
		/* a test plays a kernel without it (tests/upgrade-drain.sh) */
		atomic_store(&io->resend_offered,
			     (offered & PFS_FUSE_HAS_RESEND) && !fault_armed("no-resend"));
		atomic_store_explicit(&io->init_add, offered & io->init_wanted,
				      memory_order_relaxed);
		atomic_store_explicit(&io->init_unique, in->unique, memory_order_release);
	}
	return n;
}

/* The INIT reply: header and struct fuse_init_out, as libfuse sends it.
 * Amended in a copy; libfuse's own buffers are left alone. */
static ssize_t write_init_reply(struct fuseio *io, int fd, const struct iovec *iov, int count,
				uint64_t add, bool swallow)
{
	const struct fuse_out_header *out = iov[0].iov_base;
	struct pfs_init_out init = { 0 };
	struct iovec v[2];
	size_t len;
	bool ext;
	ssize_t n;

	if (count != 2 || out->error != 0 || iov[1].iov_len > sizeof(init) ||
	    iov[1].iov_len < offsetof(struct pfs_init_out, flags) + sizeof(init.flags)) {
		if (!swallow)
			return writev(fd, iov, count);
		/* libfuse refused the INIT it accepted in the first process */
		fuse_log(FUSE_LOG_ERR, "fuseio: the session cannot be taken over: INIT refused\n");
		return (ssize_t)(iov[0].iov_len + (count > 1 ? iov[1].iov_len : 0));
	}
	len = iov[1].iov_len;
	memcpy(&init, iov[1].iov_base, len);
	/* flags2 only where the kernel reads it: an extended reply, which
	 * may be made one when the kernel offered it. */
	ext = len >= offsetof(struct pfs_init_out, flags2) + sizeof(init.flags2) &&
	      ((init.flags & FUSE_INIT_EXT) || (add & FUSE_INIT_EXT));
	if (!ext)
		add &= ~(PFS_FUSE_PASSTHROUGH | PFS_FUSE_DIRECT_IO_ALLOW_MMAP | FUSE_INIT_EXT);
	/* Passthrough needs a stacking depth the kernel can check backing
	 * files against: 1, files on a plain filesystem. */
	if ((add & PFS_FUSE_PASSTHROUGH) &&
	    len >= offsetof(struct pfs_init_out, max_stack_depth) + sizeof(init.max_stack_depth))
		init.max_stack_depth = 1;
	else
		add &= ~PFS_FUSE_PASSTHROUGH;
	/* A taken-over connection has what the first process sent: a flag
	 * it left out stays out, whatever this process would have asked. */
	if (swallow)
		add &= io->takeover_reply_known ? io->takeover_reply
						: ~PFS_FUSE_DIRECT_IO_ALLOW_MMAP;
	/* a test plays a version before the reply was noted, which did not
	 * ask for shared mappings of direct I/O files either */
	bool old_init = !swallow && fault_armed("old-init");
	if (old_init)
		add &= ~PFS_FUSE_DIRECT_IO_ALLOW_MMAP;
	init.flags |= (uint32_t)add;
	if (ext)
		init.flags2 |= (uint32_t)(add >> 32);
	if (io->debug)
		fuse_log(FUSE_LOG_DEBUG,
			 "fuseio: INIT reply flags=0x%08" PRIx32 " flags2=0x%08" PRIx32
			 " max_stack_depth=%" PRIu32 "\n",
			 init.flags, init.flags2, init.max_stack_depth);
	v[0] = iov[0];
	v[1].iov_base = &init;
	v[1].iov_len = len;
	/* for the process that may take over from this one, before the
	 * kernel has the answer */
	if (!swallow && !old_init)
		handover_note(io->log,
			      handover_format_init_reply((uint64_t)init.flags |
							 (ext ? (uint64_t)init.flags2 << 32 : 0)));
	/* taken over: the kernel has had this answer from the first process */
	n = swallow ? (ssize_t)(v[0].iov_len + len) : writev(fd, v, 2);
	if (n >= 0 && (add & PFS_FUSE_PASSTHROUGH))
		atomic_store(&io->passthrough_on, true);
	if (n >= 0 && (add & PFS_FUSE_DIRECT_IO_ALLOW_MMAP))
		atomic_store(&io->direct_io_mmap_on, true);
	return n;
}

/* An OPEN reply to be sent in passthrough (fuseio_reply_open_backing). */
static ssize_t write_open_reply(int fd, const struct iovec *iov, int count, int backing_id)
{
	struct pfs_open_out o;
	struct iovec v[2];

	if (count != 2 || iov[1].iov_len != sizeof(o))
		return writev(fd, iov, count);
	memcpy(&o, iov[1].iov_base, sizeof(o));
	o.open_flags |= PFS_FOPEN_PASSTHROUGH;
	o.open_flags &= ~(uint32_t)FOPEN_KEEP_CACHE;
	o.backing_id = backing_id;
	v[0] = iov[0];
	v[1].iov_base = &o;
	v[1].iov_len = sizeof(o);
	return writev(fd, v, 2);
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct fuseio *io = of_session(userdata);
	uint64_t pending = atomic_load_explicit(&io->init_unique, memory_order_acquire);

	/* a reply (a notification has unique 0) */
	if (atomic_load_explicit(&io->draining, memory_order_relaxed) && count > 0 &&
	    iov[0].iov_len >= sizeof(struct fuse_out_header) &&
	    ((const struct fuse_out_header *)iov[0].iov_base)->unique != 0)
		atomic_fetch_add(&io->drained, 1);

	if (pending && count > 0 && iov[0].iov_len >= sizeof(struct fuse_out_header) &&
	    ((const struct fuse_out_header *)iov[0].iov_base)->unique == pending &&
	    atomic_compare_exchange_strong(&io->init_unique, &pending, 0)) {
		bool swallow = io->takeover_req && !atomic_load(&io->gate_open);
		ssize_t n = write_init_reply(
			io, fd, iov, count,
			atomic_load_explicit(&io->init_add, memory_order_relaxed), swallow);
		if (swallow)
			takeover_done(io, fd);
		return n;
	}
	if (open_backing_id > 0)
		return write_open_reply(fd, iov, count, open_backing_id);
	return writev(fd, iov, count);
}

/* Without it libfuse leaves out FUSE_CAP_SPLICE_WRITE, which the read
 * path uses to send file data from the pack without a copy. */
static ssize_t io_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
			      unsigned int flags, void *userdata)
{
	struct fuseio *io = of_session(userdata);

	/* libfuse splices a whole reply, header and data, in one call */
	if (fdout == io->dev_fd && atomic_load_explicit(&io->draining, memory_order_relaxed))
		atomic_fetch_add(&io->drained, 1);
	return splice(fdin, offin, fdout, offout, len, flags);
}

void fuseio_drain_start(struct fuseio *io)
{
	bool any = true;

	atomic_store(&io->draining, true);
	/* A read(2) of /dev/fuse interrupted by a signal returns EINTR with
	 * no request taken (fs/fuse/dev.c waits interruptibly before it
	 * dequeues); libfuse then reads again, and parks.  Signalled until
	 * none is left in read(2): one that had not yet entered it when the
	 * signal came is in it at the next round. */
	while (any) {
		int n = MIN(atomic_load(&io->n_readers), READER_SLOTS);

		any = false;
		for (int i = 0; i < n; i++) {
			if (!atomic_load(&io->readers[i].in_read))
				continue;
			any = true;
			pthread_kill(io->readers[i].tid, SIGUSR2);
		}
		if (any)
			nanosleep(&(struct timespec){ .tv_nsec = 2000000 }, NULL);
	}
}

void fuseio_wait_begin(struct fuseio *io)
{
	reader_move(io, reader_slot, READER_BUSY, READER_WAITING);
}

void fuseio_wait_end(struct fuseio *io)
{
	reader_move(io, reader_slot, READER_WAITING, READER_BUSY);
}

unsigned fuseio_drain_wait(struct fuseio *io)
{
	bool leave = atomic_load(&io->resend_offered);
	unsigned left = 0;
	bool busy = true;

	pthread_mutex_lock(&io->drain_lock);
	while (busy) {
		int n = MIN(atomic_load(&io->n_readers), READER_SLOTS);

		busy = false;
		left = 0;
		for (int i = 0; i < n && !busy; i++) {
			int st = atomic_load(&io->readers[i].state);

			if (st == READER_WAITING && leave)
				left++;
			else if (st != READER_IDLE)
				busy = true;
		}
		/* woken by each reader done with its request: it changes
		 * its state before it looks at draining, which was set
		 * before this scan, and wakes under drain_lock */
		if (busy)
			pthread_cond_wait(&io->drain_cond, &io->drain_lock);
	}
	pthread_mutex_unlock(&io->drain_lock);
	return left;
}

unsigned long fuseio_drained(struct fuseio *io)
{
	return !io ? 0 : atomic_load(&io->drained);
}

unsigned long fuseio_resent(struct fuseio *io)
{
	return !io ? 0 : atomic_load(&io->resent);
}

int fuseio_attach(struct fuse_session *se, const struct fuseio_options *opts, struct fuseio **ret)
{
	static const struct fuse_custom_io custom = {
		.read = io_read,
		.writev = io_writev,
		.splice_send = io_splice_send,
	};
	struct fuseio *io = calloc(1, sizeof(*io));
	int r;

	if (!io)
		return -ENOMEM;
	pthread_mutex_init(&io->gate_lock, NULL);
	pthread_cond_init(&io->gate_cond, NULL);
	pthread_mutex_init(&io->drain_lock, NULL);
	pthread_cond_init(&io->drain_cond, NULL);
	atomic_store(&io->gate_open, true);
	r = -pthread_key_create(&io->reader_key, reader_gone);
	if (r < 0) {
		fuseio_detach(io);
		return r;
	}
	io->reader_key_made = true;
	io->init_wanted = opts->parallel_dirops ? FUSE_PARALLEL_DIROPS : 0;
	/* files of lazy layers not yet local are opened in direct I/O;
	 * without it the kernel refuses shared mappings of them */
	io->init_wanted |= PFS_FUSE_DIRECT_IO_ALLOW_MMAP | FUSE_INIT_EXT;
	if (opts->passthrough)
		io->init_wanted |= PFS_FUSE_PASSTHROUGH | FUSE_INIT_EXT;
	io->debug = opts->debug;
	io->log = opts->log;
	io->dev_fd = opts->fd >= 0 ? opts->fd : fuse_session_fd(se);
	if (opts->takeover_init) {
		io->takeover_req = malloc(opts->takeover_init_len);
		if (!io->takeover_req) {
			fuseio_detach(io);
			return -ENOMEM;
		}
		memcpy(io->takeover_req, opts->takeover_init, opts->takeover_init_len);
		io->takeover_reply_known = opts->takeover_reply_known;
		io->takeover_reply = opts->takeover_reply;
		io->takeover_len = opts->takeover_init_len;
		io->taken_over_fn = opts->taken_over;
		io->taken_over_data = opts->userdata;
		atomic_store(&io->gate_open, false);
	}
	r = fuse_session_custom_io(se, &custom, io->dev_fd);
	if (r < 0) {
		fuseio_detach(io);
		return r;
	}
	*ret = io;
	return 0;
}

void fuseio_detach(struct fuseio *io)
{
	if (!io)
		return;
	if (io->reader_key_made)
		pthread_key_delete(io->reader_key);
	pthread_mutex_destroy(&io->gate_lock);
	pthread_cond_destroy(&io->gate_cond);
	pthread_mutex_destroy(&io->drain_lock);
	pthread_cond_destroy(&io->drain_cond);
	free(io->takeover_req);
	free(io);
}

int64_t fuseio_resent_at_ns(struct fuseio *io, int *ret_err)
{
	*ret_err = atomic_load(&io->resend_err);
	return atomic_load(&io->resent_at_ns);
}

bool fuseio_passthrough(struct fuseio *io)
{
	return io && atomic_load_explicit(&io->passthrough_on, memory_order_relaxed);
}

bool fuseio_direct_io_mmap(struct fuseio *io)
{
	return io && atomic_load_explicit(&io->direct_io_mmap_on, memory_order_relaxed);
}

int fuseio_backing_open(struct fuseio *io, int fd)
{
	struct pfs_backing_map map = { .fd = fd };
	int id;

	if (!fuseio_passthrough(io))
		return -EOPNOTSUPP;
	id = ioctl(io->dev_fd, PFS_DEV_IOC_BACKING_OPEN, &map);
	if (id < 0)
		return -errno;
	return id > 0 ? id : -EIO;
}

void fuseio_backing_close(struct fuseio *io, int backing_id)
{
	uint32_t id = (uint32_t)backing_id;

	if (io)
		ioctl(io->dev_fd, PFS_DEV_IOC_BACKING_CLOSE, &id);
}

int fuseio_reply_open_backing(fuse_req_t req, const struct fuse_file_info *fi, int backing_id)
{
	int r;

	/* libfuse writes the reply from this thread, inside the call */
	open_backing_id = backing_id;
	r = fuse_reply_open(req, fi);
	open_backing_id = 0;
	return r;
}

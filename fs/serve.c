/* The filesystem's life: its state made and freed, and the session
 * served -- mount, the daemon's fork, the threads started after it, the
 * loop, and the signals on process globals that end it (SIGINT, SIGTERM)
 * or reopen the events log (SIGHUP). */
#include "fs-private.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "control.h"
#include "snapshotter.h"
#include "errdetail.h"
#include "fault.h"
#include "fuseio.h"
#include "handover.h"
#include "macro.h"
#include "strmap.h"
#include "suplink.h"
#include "manager.h"

int fs_new(struct manager *m, const struct fs_options *opts, struct fs **ret)
{
	struct fs *fs = calloc(1, sizeof(*fs));

	if (!fs)
		return -ENOMEM;
	fs->manager = m;
	fs->opts = *opts;
	if (fs->opts.content_timeout <= 0)
		fs->opts.content_timeout = 86400.0;
	if (fs->opts.image_timeout <= 0)
		fs->opts.image_timeout = 60.0;
	if (fs->opts.namespace_timeout <= 0)
		fs->opts.namespace_timeout = 1.0;
	if (fs->opts.max_threads == 0)
		fs->opts.max_threads = 32;
	pthread_mutex_init(&fs->ns_lock, NULL);
	pthread_mutex_init(&fs->backing_lock, NULL);
	pthread_mutex_init(&fs->notify_lock, NULL);
	pthread_mutex_init(&fs->ctl_lock, NULL);
	pthread_cond_init(&fs->notify_cond, NULL);
	pthread_cond_init(&fs->notify_sent_cond, NULL);
	suplink_init(&fs->sup, -1);
	takeover_init(fs);
	fs->handoff.sup_fd = fs->handoff.state_fd = fs->handoff.dev_fd = -1;
	clock_gettime(CLOCK_REALTIME, &fs->started);
	fs->backings = strmap_new();
	fs->lazy_opens = strmap_new();
	fs->foreign = strmap_new();
	fs->notify_keys = strmap_new();
	fs->notify_times = strmap_new();
	fs->dentries = strmap_new();
	fs->dentries_pending = strmap_new();
	fs->killwatch = killwatch_new();
	if (!fs->killwatch || !fs->backings || !fs->lazy_opens || !fs->foreign ||
	    !fs->notify_keys || !fs->notify_times || !fs->dentries || !fs->dentries_pending ||
	    ns_init(fs) < 0) {
		fs_free(fs);
		return -ENOMEM;
	}
	*ret = fs;
	return 0;
}

static int free_nsnode_entry(void *userdata, const char *key, void *value)
{
	nsnode_free(value);
	return 0;
}

static int free_backing_entry(void *userdata, const char *key, void *value)
{
	free(value);
	return 0;
}

void fs_free(struct fs *fs)
{
	if (!fs)
		return;
	free(fs->mountpoint);
	/* The nodes the kernel still held die with the mount. */
	if (fs->nsnodes)
		strmap_foreach(fs->nsnodes, free_nsnode_entry, NULL);
	strmap_free(fs->nsnodes);
	strmap_free(fs->nsinos);
	if (fs->nsusers)
		strmap_foreach(fs->nsusers, free_backing_entry, NULL);
	strmap_free(fs->nsusers);
	strmap_free(fs->notify_keys);
	strmap_free(fs->notify_times);
	dentries_free(fs);
	pthread_mutex_destroy(&fs->ns_lock);
	/* backing files of files still open at the unmount: the kernel
	 * dropped its references with the connection */
	if (fs->backings)
		strmap_foreach(fs->backings, free_backing_entry, NULL);
	strmap_free(fs->backings);
	strmap_free(fs->lazy_opens);
	/* (the images go with the manager) */
	strmap_free(fs->foreign);
	ctl_free_all(fs);
	files_free_all(fs);
	takeover_free(fs);
	fuseio_detach(fs->io);
	/* (after the session: no request is waiting any more) */
	killwatch_free(fs->killwatch);
	pthread_mutex_destroy(&fs->backing_lock);
	pthread_mutex_destroy(&fs->notify_lock);
	pthread_mutex_destroy(&fs->ctl_lock);
	pthread_cond_destroy(&fs->notify_cond);
	pthread_cond_destroy(&fs->notify_sent_cond);
	suplink_done(&fs->sup);
	free(fs);
}

static struct manager *hup_manager;
static struct fuse_session *stop_session;
static int stop_pipe[2] = { -1, -1 };

static void on_sighup(int sig)
{
	manager_reopen_events(hup_manager);
}

/* SIGINT/SIGTERM: end the session as libfuse's own handler would, and
 * wake the thread that cancels pulls -- a worker busy with a slow pull
 * would otherwise hold the unmount until the pull ends. */
static void on_stop(int sig)
{
	int saved = errno;

	if (stop_session)
		fuse_session_exit(stop_session);
	if (stop_pipe[1] >= 0 && write(stop_pipe[1], "x", 1) < 0) {
		/* already woken */
	}
	errno = saved;
}

static pthread_t loop_thread;

/* Wakes the thread of the session loop: a signal that only interrupts. */
static void on_wake(int sig)
{
}

static void *stop_thread(void *arg)
{
	char c;
	ssize_t n;

	while ((n = read(stop_pipe[0], &c, 1)) < 0 && errno == EINTR)
		;
	if (n != 1)
		fprintf(stderr, "pullfs: the stop pipe broke (%s): pulls are cancelled\n",
			n < 0 ? strerror(errno) : "end of file");
	/* The signal may have run on any thread that does not block it (a
	 * stopped process takes it on whichever thread SIGCONT wakes first),
	 * and only the session loop's thread ends the session: it waits in
	 * sem_wait(3) for workers that wait in read(2) for a request. */
	pthread_kill(loop_thread, SIGUSR2);
	manager_cancel(arg);
	return NULL;
}

/* ---- under the supervisor ------------------------------------------- */

/* fuseio's callback once the kernel was asked to resend: the event of the
 * takeover, with how long requests were held. */
static void taken_over(void *userdata, int64_t resent_ns, int err)
{
	struct fs *fs = userdata;
	const struct handoff *h = &fs->handoff;
	char msg[256];
	double held = h->down_ns ? (double)(resent_ns - h->down_ns) / 1e6 : 0;

	fs->held_ms = held;
	if (err)
		snprintf(msg, sizeof(msg),
			 "Serving process %ld took the mount over, but the kernel refused to "
			 "resend requests in flight: %s",
			 (long)getpid(), strerror(err));
	else
		snprintf(msg, sizeof(msg),
			 "Serving process %ld took the mount over %s; requests were held for "
			 "%.1f ms",
			 (long)getpid(),
			 h->upgrade ? "from the previous version" : "after the previous one died",
			 held);
	if (!err && h->upgrade) {
		size_t l = strlen(msg);
		snprintf(msg + l, sizeof(msg) - l,
			 "; the previous one answered %u requests as it drained", h->drained);
	}
	manager_serving_event(fs->manager, h->upgrade ? "Upgraded" : "Recovered", msg);
	takeover_probe(fs);
}

/* The log of the process before, read.  It is compacted later, by this
 * process's compactor, the supervisor swapping the logs (never rewritten
 * in place: a kill in the middle would lose it).  0 with *st, or -errno
 * with a message printed. */
static int read_handover(int fd, struct handover_state *st)
{
	size_t len = 0;
	_cleanup_free_ char *buf = handover_read(fd, &len);
	int r;

	if (!buf) {
		r = -errno;
		fprintf(stderr, "pullfs: cannot read the hand-over state: %s\n", strerror(-r));
		return r;
	}
	r = handover_parse(buf, len, st);
	if (r < 0)
		fprintf(stderr, "pullfs: the hand-over state cannot be read by this version: %s\n",
			strerror(-r));
	return r;
}

/* The control socket's upgrade: the supervisor checks the binary at its
 * path and answers "ok" or "err MESSAGE". */
static int serve_upgrade(void *userdata, json_t **ret, struct error_detail *err)
{
	struct fs *fs = userdata;
	char ans[2200];
	int r;

	if (fs->handoff.sup_fd < 0) {
		error_detail_set(
			err, -EOPNOTSUPP,
			"pullfs runs without its supervisor (--no-supervise): nothing can take "
			"the mount over");
		return -EOPNOTSUPP;
	}
	r = suplink_upgrade(&fs->sup, ans, sizeof(ans));
	if (r == -ENOEXEC) {
		error_detail_set(err, r, "%s", ans);
		return r;
	}
	if (r < 0) {
		error_detail_set(err, r, "cannot reach the supervisor: %s", strerror(-r));
		return r;
	}
	*ret = json_pack("{s:b, s:i, s:s}", "ok", 1, "pid", (json_int_t)getpid(), "binary", ans);
	return *ret ? 0 : -ENOMEM;
}

static atomic_bool draining;

/* The end of a drain: what it answered goes to the supervisor, and the
 * process ends as at a kill (nothing here may answer a request left to
 * the next process, as the cancel of a normal stop would), its cache
 * consistent at every step.  Once: by the thread that waits for the
 * requests (drain_thread) or by the session loop, whichever is first. */
static void drain_end(struct fs *fs, unsigned left)
{
	static atomic_flag ended = ATOMIC_FLAG_INIT;
	char msg[64];

	if (atomic_flag_test_and_set(&ended))
		for (;;)
			pause();
	snprintf(msg, sizeof(msg), "drained %lu", fuseio_drained(fs->io));
	fprintf(stderr,
		"pullfs: serving process %ld drained: %lu requests answered, %u waiting for a "
		"registry left to the next process\n",
		(long)getpid(), fuseio_drained(fs->io), left);
	suplink_tell(&fs->sup, msg);
	fflush(NULL);
	_exit(0);
}

/* Waits for every request read to be answered but those waiting for a
 * registry, which the kernel resends to the next process: a slow registry
 * holds no upgrade.  The session loop cannot end while a worker waits
 * for the registry. */
static void *drain_thread(void *arg)
{
	struct fs *fs = arg;

	drain_end(fs, fuseio_drain_wait(fs->io));
	return NULL;
}

/* After the upgrade's answer went to the client: this process drains.
 * It stops reading /dev/fuse (fuseio_drain_start: the reads under way
 * are interrupted, none taking a request), ends the session loop, whose
 * workers with a request finish it, and exits once the requests it can
 * answer are answered (drain_thread); the supervisor then starts the new
 * binary, which asks the kernel to resend what is left unanswered --
 * lookups waiting for a pull, whose pull the new process resumes, and
 * reads waiting for a registry.  A process that does not end within the
 * supervisor's grace time is killed. */
static void serve_upgrade_answered(void *userdata)
{
	struct fs *fs = userdata;
	pthread_attr_t attr;
	pthread_t t;

	/* No notification to the kernel may be under way once nothing reads
	 * /dev/fuse: one that waits for a directory a request holds would
	 * wait for ever, and the process could not end (the soak found it).
	 * So the notifier stops first, while requests are still answered.
	 * Where the kernel resends, a notification waiting for a lookup
	 * whose pull waits for a slow registry does not hold the upgrade:
	 * it is left behind, the lookup goes to the next process (the
	 * supervisor starts it while this one is held in the kernel), and
	 * its answer lets the notification through. */
	if (!fuseio_can_resend(fs->io))
		ns_notifier_stop(fs);
	else if (!ns_notifier_stop_within(fs, NS_SETTLE_SECONDS))
		fprintf(stderr,
			"pullfs: serving process %ld drains with a notification waiting for a "
			"directory a lookup holds; the next process answers that lookup\n",
			(long)getpid());
	if (fault_armed("drain-gc")) {
		/* a collection while this process drains */
		struct error_detail err = { 0 };
		json_t *j = NULL;

		if (manager_gc(fs->manager, 1, &j, &err) == 0)
			json_decref(j);
	}
	suplink_tell(&fs->sup, "go");
	fuseio_drain_start(fs->io);
	atomic_store(&draining, true);
	/* only now: a request libfuse reads once the session has ended is
	 * dropped unanswered */
	fuse_session_exit(fs->session);
	fprintf(stderr, "pullfs: serving process %ld drains for an upgrade\n", (long)getpid());
	pthread_kill(loop_thread, SIGUSR2);
	/* without the thread, the session loop ends the drain when its
	 * workers are done, as on a kernel that cannot resend */
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, drain_thread, fs) != 0)
		fprintf(stderr, "pullfs: the drain waits for reads waiting for a registry: %s\n",
			strerror(EAGAIN));
	pthread_attr_destroy(&attr);
}

void serve_status(struct fs *fs, json_t *o)
{
	char when[64];
	struct tm tm;

	gmtime_r(&fs->started.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	json_t *v = json_pack(
		"{s:i, s:s, s:b, s:i, s:i, s:i, s:f, s:i, s:i}", "pid", (json_int_t)getpid(),
		"started", when, "supervised", fs->handoff.sup_fd >= 0, "restarts",
		(json_int_t)fs->handoff.generation, "upgrades", (json_int_t)fs->handoff.upgrades,
		"recoveries", (json_int_t)fs->handoff.recoveries, "last_held_ms", fs->held_ms,
		"drained", (json_int_t)fs->handoff.drained, "resent",
		(json_int_t)fuseio_resent(fs->io));

	if (v && fs->log) {
		json_object_set_new(v, "handover_log_bytes",
				    json_integer((json_int_t)handover_log_bytes(fs->log)));
		json_object_set_new(v, "handover_compactions",
				    json_integer((json_int_t)handover_compactions(fs->log)));
	}
	json_object_set_new(o, "serving", v);
}

/* ---- the session ----------------------------------------------------- */

/* The mount ends with requests no thread will read: a lookup the kernel
 * sent after the session ended holds its directory, and a notification
 * of the notifier waits for that directory.  The connection is aborted
 * (fusectl's abort: its requests fail with ENOTCONN), which lets both
 * go.  The connection is named by the mount's device, read from the
 * kernel's cached attributes of the root, which asks nothing of this
 * process. */
static void abort_connection(struct fs *fs)
{
	char path[64];
	struct statx stx;
	int fd;

	fprintf(stderr, "pullfs: a notification waits for a directory a lookup holds and nothing "
			"answers it: the connection is aborted\n");
	if (!fs->mountpoint || statx(AT_FDCWD, fs->mountpoint, AT_STATX_DONT_SYNC, 0, &stx) < 0) {
		fprintf(stderr, "pullfs: cannot find the connection to abort: %s\n",
			strerror(errno));
		return;
	}
	/* the kernel's dev_t: major in the top 12 bits of 32 */
	snprintf(path, sizeof(path), "/sys/fs/fuse/connections/%u/abort",
		 (stx.stx_dev_major << 20) | stx.stx_dev_minor);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "1", 1) != 1)
		fprintf(stderr, "pullfs: cannot abort the connection (%s): %s\n", path,
			strerror(errno));
	else
		fs->aborted = true;
	if (fd >= 0)
		close(fd);
}

static int serve(struct fs *fs, struct fuse_args *args, const char *mountpoint, bool foreground,
		 const struct handoff *h)
{
	struct fuse_loop_config *cfg = NULL;
	struct sigaction sa = { 0 };
	struct handover_state st = { 0 };
	bool mounted = false;
	int r;

	fs->session = fuse_session_new(args, &fs_ops, sizeof(fs_ops), fs);
	if (!fs->session)
		return -EINVAL;
	if (fuse_set_signal_handlers(fs->session) != 0) {
		r = -EIO;
		goto out_destroy;
	}
	/* libfuse ends the session on SIGHUP; here it means "reopen the
	 * events log", as logrotate expects of a daemon. */
	hup_manager = fs->manager;
	sa.sa_handler = on_sighup;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGHUP, &sa, NULL);
	if (pipe2(stop_pipe, O_CLOEXEC) == 0) {
		stop_session = fs->session;
		sa.sa_handler = on_stop;
		/* No SA_RESTART: the worker blocked in read(2) on /dev/fuse
		 * must see EINTR to notice the session ended. */
		sa.sa_flags = 0;
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}

	/* op_init asks for FUSE_CAP_PARALLEL_DIROPS, which libfuse before
	 * 3.17 does not pass on to the kernel. */
	struct fuseio_options io = { .parallel_dirops = true,
				     .passthrough = !fs->opts.no_passthrough,
				     .debug = fs->opts.debug,
				     .fd = -1 };
	if (h) {
		fs->handoff = *h;
		fs->sup.fd = h->sup_fd;
		files_set_epoch(fs, h->generation);
		r = handover_log_new(h->state_fd, &fs->log);
		if (r < 0)
			goto out_signals;
		io.log = fs->log;
		takeover_watch(fs);
		r = read_handover(h->state_fd, &st);
		if (r < 0)
			goto out_signals;
		io.fd = h->dev_fd;
		if (h->generation > 0)
			manager_took_over(fs->manager);
		if (h->generation > 0 && st.init) {
			io.takeover_init = st.init;
			io.takeover_init_len = st.init_len;
			io.takeover_reply_known = st.init_reply_known;
			io.takeover_reply = st.init_reply;
			io.taken_over = taken_over;
			io.userdata = fs;
		}
	} else {
		if (fuse_session_mount(fs->session, mountpoint) != 0) {
			r = -EIO;
			goto out_signals;
		}
		mounted = true;
	}
	r = fuseio_attach(fs->session, &io, &fs->io);
	if (r < 0)
		goto out_unmount;
	if (h && h->generation > 0 && !st.init)
		/* the process before died before it noted INIT: whatever it
		 * read, INIT included, is to be read again */
		fuseio_resend(fs->io);
	if (!h && fuse_daemonize(foreground) != 0) {
		r = -EIO;
		goto out_unmount;
	}
	/* Threads only now: fuse_daemonize forks. */
	fs->mountpoint = realpath(mountpoint, NULL);
	if (h && st.version) {
		unsigned failed = 0;
		r = takeover_restore(fs, &st, &failed);
		if (r < 0)
			goto out_unmount;
		if (failed)
			fprintf(stderr,
				"pullfs: %u nodes of the previous process could not be restored: "
				"the kernel gets ESTALE for them\n",
				failed);
	}
	r = ns_notifier_start(fs);
	if (r < 0)
		goto out_unmount;
	pthread_t stopper;
	loop_thread = pthread_self();
	sa.sa_handler = on_wake;
	sa.sa_flags = 0; /* interrupts read(2) and sem_wait(3) */
	sigaction(SIGUSR2, &sa, NULL);
	bool stopper_started =
		stop_pipe[0] >= 0 && pthread_create(&stopper, NULL, stop_thread, fs->manager) == 0;
	r = manager_start(fs->manager);
	if (r < 0) {
		fprintf(stderr, "pullfs: cannot start the garbage collector: %s\n", strerror(-r));
		goto out_unmount;
	}
	if (fs->opts.control) {
		control_set_upgrade(fs->opts.control, serve_upgrade, serve_upgrade_answered);
		r = control_start(fs->opts.control, ctl_status_for_control, ns_notifier_settle, fs);
		if (r < 0) {
			fprintf(stderr, "pullfs: cannot serve the control socket: %s\n",
				strerror(-r));
			goto out_unmount;
		}
	}
	if (fs->opts.snapshotter) {
		r = snapshotter_start(fs->opts.snapshotter);
		if (r < 0) {
			fprintf(stderr, "pullfs: cannot serve the snapshotter socket: %s\n",
				strerror(-r));
			goto out_unmount;
		}
	}
	cfg = fuse_loop_cfg_create();
	if (!cfg) {
		r = -ENOMEM;
		goto out_unmount;
	}
	fuse_loop_cfg_set_clone_fd(cfg, 0);
	fuse_loop_cfg_set_max_threads(cfg, fs->opts.max_threads);
	fuse_loop_cfg_set_idle_threads(cfg, 8);
	if (h) {
		suplink_tell(&fs->sup, "ready");
		handover_set_swap(fs->log, suplink_swap_log, &fs->sup);
		if (handover_compactor_start(fs->log) < 0)
			fprintf(stderr, "pullfs: the hand-over log will not be compacted: %s\n",
				strerror(ENOMEM));
	}
	r = fuse_session_loop_mt(fs->session, cfg);
	/* A positive value is the signal that ended the loop: a clean stop. */
	r = r > 0 ? 0 : r < 0 ? r : 0;
	handover_compactor_stop(fs->log);
	if (atomic_load(&draining))
		/* Drained for an upgrade: every request read was answered but
		 * those left for the next process (drain_end). */
		drain_end(fs, 0);
	fuse_loop_cfg_destroy(cfg);
	/* Lookups waiting for pulls are answered from the pulls' threads:
	 * they end before the session does. */
	manager_drain(fs->manager);
	control_stop(fs->opts.control);
	snapshotter_stop(fs->opts.snapshotter);
	if (stopper_started) {
		if (write(stop_pipe[1], "x", 1) < 0) {
			/* the thread was woken by a signal already */
		}
		pthread_join(stopper, NULL);
	}
out_unmount:
	/* The mount ends here, but where a service manager keeps /dev/fuse
	 * for the next start (which answers what is left). */
	if (h && h->fdstore)
		ns_notifier_stop(fs);
	else
		ns_notifier_stop_or(fs, NS_SETTLE_SECONDS, abort_connection);
	if (mounted && fs->aborted)
		/* (libfuse takes an aborted connection for one unmounted) */
		umount2(fs->mountpoint, MNT_DETACH);
	else if (mounted)
		fuse_session_unmount(fs->session);
	else if (h && !h->fdstore && getppid() != h->sup_pid && fs->mountpoint)
		/* the supervisor is gone (its death sent SIGTERM): nobody else
		 * will take the mount down */
		umount2(fs->mountpoint, MNT_DETACH);
out_signals:
	fuse_remove_signal_handlers(fs->session);
out_destroy:
	fuse_session_destroy(fs->session);
	fs->session = NULL;
	handover_state_done(&st);
	return r;
}

int fs_serve(struct fs *fs, struct fuse_args *args, const char *mountpoint, bool foreground)
{
	return serve(fs, args, mountpoint, foreground, NULL);
}

int fs_serve_handoff(struct fs *fs, struct fuse_args *args, const char *mountpoint,
		     const struct handoff *h)
{
	return serve(fs, args, mountpoint, true, h);
}

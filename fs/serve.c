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
#include <time.h>
#include <unistd.h>

#include "control.h"
#include "fuseio.h"
#include "strmap.h"
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
	pthread_cond_init(&fs->notify_cond, NULL);
	pthread_cond_init(&fs->notify_sent_cond, NULL);
	clock_gettime(CLOCK_REALTIME, &fs->started);
	fs->backings = strmap_new();
	fs->notify_keys = strmap_new();
	fs->dentries = strmap_new();
	if (!fs->backings || !fs->notify_keys || !fs->dentries || ns_init(fs) < 0) {
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
	strmap_free(fs->notify_keys);
	dentries_free(fs);
	pthread_mutex_destroy(&fs->ns_lock);
	/* backing files of files still open at the unmount: the kernel
	 * dropped its references with the connection */
	if (fs->backings)
		strmap_foreach(fs->backings, free_backing_entry, NULL);
	strmap_free(fs->backings);
	ctl_free_all();
	files_free_all(fs);
	pthread_mutex_destroy(&fs->backing_lock);
	pthread_mutex_destroy(&fs->notify_lock);
	pthread_cond_destroy(&fs->notify_cond);
	pthread_cond_destroy(&fs->notify_sent_cond);
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

static void *stop_thread(void *arg)
{
	char c;

	while (read(stop_pipe[0], &c, 1) < 0 && errno == EINTR)
		;
	manager_cancel(arg);
	return NULL;
}

int fs_serve(struct fs *fs, struct fuse_args *args, const char *mountpoint, bool foreground)
{
	struct fuse_loop_config *cfg = NULL;
	struct sigaction sa = { 0 };
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

	if (fuse_session_mount(fs->session, mountpoint) != 0) {
		r = -EIO;
		goto out_signals;
	}
	/* op_init asks for FUSE_CAP_PARALLEL_DIROPS, which libfuse before
	 * 3.17 does not pass on to the kernel. */
	struct fuseio_options io = { .parallel_dirops = true,
				     .passthrough = !fs->opts.no_passthrough,
				     .debug = fs->opts.debug };
	r = fuseio_attach(fs->session, &io);
	if (r < 0)
		goto out_unmount;
	if (fuse_daemonize(foreground) != 0) {
		r = -EIO;
		goto out_unmount;
	}
	/* Threads only now: fuse_daemonize forks. */
	fs->mountpoint = realpath(mountpoint, NULL);
	r = ns_notifier_start(fs);
	if (r < 0)
		goto out_unmount;
	pthread_t stopper;
	bool stopper_started =
		stop_pipe[0] >= 0 && pthread_create(&stopper, NULL, stop_thread, fs->manager) == 0;
	r = manager_start(fs->manager);
	if (r < 0) {
		fprintf(stderr, "pullfs: cannot start the garbage collector: %s\n", strerror(-r));
		goto out_unmount;
	}
	if (fs->opts.control) {
		r = control_start(fs->opts.control, ctl_status_for_control, ns_notifier_settle, fs);
		if (r < 0) {
			fprintf(stderr, "pullfs: cannot serve the control socket: %s\n",
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
	r = fuse_session_loop_mt(fs->session, cfg);
	/* A positive value is the signal that ended the loop: a clean stop. */
	r = r > 0 ? 0 : r < 0 ? r : 0;
	fuse_loop_cfg_destroy(cfg);
	/* Lookups waiting for pulls are answered from the pulls' threads:
	 * they end before the session does. */
	manager_drain(fs->manager);
	control_stop(fs->opts.control);
	if (stopper_started) {
		if (write(stop_pipe[1], "x", 1) < 0) {
			/* the thread was woken by a signal already */
		}
		pthread_join(stopper, NULL);
	}
out_unmount:
	ns_notifier_stop(fs);
	fuse_session_unmount(fs->session);
out_signals:
	fuse_remove_signal_handlers(fs->session);
out_destroy:
	fuse_session_destroy(fs->session);
	fs->session = NULL;
	return r;
}

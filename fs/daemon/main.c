/* pullfs: the daemon.  Takes its settings from the options (options.c),
 * then hands over to the manager and the filesystem. */
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)

#include <errno.h>
#include <fuse_lowlevel.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <sys/vfs.h>
#include <sys/stat.h>

#include "credentials.h"
#include "control.h"
#include "cache.h"
#include "config.h"
#include "fs.h"
#include "handover.h"
#include "macro.h"
#include "manager.h"
#include "options.h"
#include "snapshotter.h"
#include "supervisor.h"

/* --auth-file, or docker's default place where a missing file is no
 * error.  Exits on a file that cannot be used. */
static struct credentials *load_credentials(const struct settings *s)
{
	_cleanup_free_ char *def = NULL;
	struct credentials *c = NULL;
	char errbuf[512] = "";
	int r;

	if (s->auth_file) {
		r = credentials_load(s->auth_file, true, &c, errbuf, sizeof(errbuf));
	} else {
		r = credentials_default_path(&def);
		if (r == -ENOENT)
			return NULL;
		if (r == 0)
			r = credentials_load(def, false, &c, errbuf, sizeof(errbuf));
	}
	if (r < 0) {
		fprintf(stderr, "pullfs: %s\n", errbuf[0] ? errbuf : strerror(-r));
		exit(1);
	}
	return c;
}

/* A daemon killed with -9 leaves its mount behind, answering ENOTCONN;
 * clear it rather than fail on it. */
static int check_mountpoint(const char *mp)
{
	struct statfs sf;
	struct stat st;

	/* statfs, not stat: the kernel may answer stat from its attribute
	 * cache for a second after the daemon died, statfs always asks. */
	if (statfs(mp, &sf) == 0 && stat(mp, &st) == 0) {
		if (!S_ISDIR(st.st_mode)) {
			fprintf(stderr, "pullfs: mountpoint \"%s\" is not a directory\n", mp);
			return -ENOTDIR;
		}
		return 0;
	}
	/* ECONNABORTED: the pullfs that served it ended while we asked */
	if (errno == ENOTCONN || errno == ECONNABORTED) {
		if (umount2(mp, MNT_DETACH) == 0) {
			fprintf(stderr,
				"pullfs: \"%s\" was a stale mount of a pullfs that is gone; unmounted it\n",
				mp);
			return 0;
		}
		fprintf(stderr,
			"pullfs: \"%s\" is a stale mount of a pullfs that is gone; run: fusermount3 -u %s\n",
			mp, mp);
		return -ENOTCONN;
	}
	fprintf(stderr, "pullfs: mountpoint \"%s\": %s\n", mp, strerror(errno));
	return -errno;
}

/* Every image in memory holds the pack of each of its layers open, one
 * image per reference, and a download holds a socket and a file: a soft
 * limit of 1024 is a few dozen images.  The hard limit is what the
 * administrator (or the unit's LimitNOFILE=) grants.  The soft limit is
 * low only for programs that use select(2), which pullfs does not.  Before
 * any thread: the limit is the process's. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		if (rl.rlim_cur >= rl.rlim_max)
			return;
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
			return;
	}
	fprintf(stderr, "pullfs: cannot raise the limit of open files to the hard limit: %s\n",
		strerror(errno));
}

/* The FUSE arguments: argv[0], the mount options, -d. */
static int fuse_args_of(const struct settings *s, const char *argv0, struct fuse_args *args)
{
	_cleanup_free_ char *opts = NULL;

	/* "ro" comes last so that no -o can make the mount writable. */
	if (asprintf(&opts, "fsname=pullfs,subtype=pullfs,default_permissions%s%s,ro",
		     s->fuse_opts ? "," : "", s->fuse_opts ? s->fuse_opts : "") < 0) {
		opts = NULL;
		return -ENOMEM;
	}
	if (fuse_opt_add_arg(args, argv0) != 0 || fuse_opt_add_arg(args, "-o") != 0 ||
	    fuse_opt_add_arg(args, opts) != 0 || (s->fo.debug && fuse_opt_add_arg(args, "-d") != 0))
		return -ENOMEM;
	return 0;
}

/* The supervisor's check run of this binary before an upgrade: can it
 * take over from the running one?  Prints one line; 0 when it can. */
static int check_run(const struct settings *s, unsigned their_version)
{
	static const char *const dirs[] = { "blobs/sha256", "layers", "objects", "refs" };
	char path[4096];
	struct stat st;

	if (their_version != HANDOVER_VERSION) {
		printf("pullfs %s cannot take over: the running pullfs hands over state of format "
		       "%u, this one reads format %d\n",
		       PULLFS_VERSION, their_version, HANDOVER_VERSION);
		return 3;
	}
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		snprintf(path, sizeof(path), "%s/%s", s->mo.cache_dir, dirs[i]);
		if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
			printf("pullfs %s cannot use the cache \"%s\": \"%s\" is missing\n",
			       PULLFS_VERSION, s->mo.cache_dir, path);
			return 3;
		}
	}
	printf("pullfs %s can take over\n", PULLFS_VERSION);
	return 0;
}

static bool socket_in_cache(const struct settings *s)
{
	_cleanup_free_ char *def = NULL;

	return asprintf(&def, "%s/control.sock", s->mo.cache_dir) >= 0 &&
	       strcmp(def, s->control_socket) == 0;
}

int main(int argc, char **argv)
{
	struct settings s = { 0 };
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct manager *m = NULL;
	struct fs *fs = NULL;
	struct control *ctl = NULL;
	struct snapshotter *snap = NULL;
	struct credentials *creds = NULL;
	struct handoff h;
	unsigned check_version = 0;
	char errbuf[512] = "";
	int status = 1;
	int r, mode;

	settings_parse(&s, argc, argv);
	mode = supervisor_child_env(&h, &check_version);
	if (mode == 1) {
		status = check_run(&s, check_version);
		goto done;
	}
	if (mode < 0 && mode != -ENOENT) {
		fprintf(stderr, "pullfs: bad %s in the environment\n", SUPERVISOR_ENV);
		goto done;
	}
	if (mode == 0) {
		/* A serving process ends with its supervisor (supervisor.h):
		 * cleanly, unmounting, unless systemd keeps the mount for the
		 * next start -- then as after a crash, so that what it had
		 * read is answered by the next one, not cancelled. */
		prctl(PR_SET_PDEATHSIG, h.fdstore ? SIGKILL : SIGTERM);
		if (getppid() != h.sup_pid)
			goto done;
		/* A failure injected by a crash test (common/fault.h) kills
		 * the first serving process only: the next one recovers. */
		if (h.generation > 0)
			unsetenv("PULLFS_FAULT");
		/* started where the supervisor was, for the relative paths
		 * just parsed; detached, it then keeps no directory busy */
		if (!s.foreground && chdir("/") < 0) {
			/* nothing relies on the working directory */
		}
	} else if (!s.no_supervise) {
		/* the mount point is checked with the cache's lock held (a
		 * mount systemd kept for us is there and waits for us) */
		if (fuse_args_of(&s, argv[0], &args) < 0) {
			fprintf(stderr, "pullfs: %s\n", strerror(ENOMEM));
			goto done;
		}
		status = supervisor_run(&args, s.mountpoint, s.mo.cache_dir, s.snapshotter_socket,
					s.foreground, argv, check_mountpoint);
		goto done;
	}
	raise_fd_limit();
	/* A reader that goes away mid-transfer must not kill the daemon. */
	signal(SIGPIPE, SIG_IGN);

	/* under the supervisor the mount is there, and nobody serves it yet */
	if (mode != 0 && check_mountpoint(s.mountpoint) < 0)
		goto done;
	creds = load_credentials(&s);

	s.mo.credentials = creds;
	/* The kernel keeps images/<ref> for as long as a revalidation would
	 * not look anyway, so the next lookup after that runs ensure. */
	s.fo.image_timeout = s.mo.revalidate_interval_s ?: MANAGER_DEFAULT_REVALIDATE_S;
	r = manager_new(&s.mo, &m, errbuf, sizeof(errbuf));
	if (r < 0) {
		fprintf(stderr, "pullfs: %s\n", errbuf[0] ? errbuf : strerror(-r));
		goto done;
	}
	/* Bound before the mount, so that a socket that cannot be served
	 * stops the start with a message, not the daemon's service. */
	errbuf[0] = '\0';
	/* Under a supervisor holding the cache's lock, the socket in the
	 * cache is ours or a predecessor's. */
	r = control_new(s.control_socket,
			mode == 0 && socket_in_cache(&s) && getenv(CACHE_LOCK_ENV), m, &ctl, errbuf,
			sizeof(errbuf));
	if (r < 0) {
		if (errbuf[0])
			fprintf(stderr, "pullfs: %s\n", errbuf);
		else
			fprintf(stderr, "pullfs: cannot serve the control socket \"%s\": %s\n",
				s.control_socket, strerror(-r));
		goto done;
	}
	s.fo.control = ctl;
	if (s.snapshotter_socket) {
		_cleanup_free_ char *dir = NULL;

		if (asprintf(&dir, "%s/snapshotter", s.mo.cache_dir) < 0) {
			dir = NULL;
			fprintf(stderr, "pullfs: %s\n", strerror(ENOMEM));
			goto done;
		}
		errbuf[0] = '\0';
		/* under the supervisor, the socket it holds; else bound
		 * here (a serving process of a supervisor that holds none,
		 * started again, takes over the socket of the one before) */
		r = snapshotter_new(s.snapshotter_socket, mode == 0 ? h.snap_fd : -1,
				    mode == 0 && h.generation > 0, dir, s.mountpoint, m, &snap,
				    errbuf, sizeof(errbuf));
		if (r < 0) {
			fprintf(stderr, "pullfs: %s\n", errbuf[0] ? errbuf : strerror(-r));
			goto done;
		}
		s.fo.snapshotter = snap;
		/* GC keeps, and rm refuses, the images remote snapshots
		 * stand on */
		manager_set_in_use(m, snapshotter_in_use, snap);
		/* and what containerd's own snapshots take counts in the
		 * cache's usage */
		manager_set_snapshot_bytes(m, snapshotter_local_bytes, snap);
	}
	r = fs_new(m, &s.fo, &fs);
	if (r < 0) {
		fprintf(stderr, "pullfs: %s\n", strerror(-r));
		goto done;
	}

	r = fuse_args_of(&s, argv[0], &args);
	if (r < 0)
		goto out;
	if (mode == 0)
		r = fs_serve_handoff(fs, &args, s.mountpoint, &h);
	else
		r = fs_serve(fs, &args, s.mountpoint, s.foreground);
out:
	if (r < 0)
		fprintf(stderr, "pullfs: cannot serve \"%s\": %s\n", s.mountpoint, strerror(-r));
	else
		status = 0;
done:
	fuse_opt_free_args(&args);
	control_free(ctl);
	if (m) {
		manager_set_in_use(m, NULL, NULL);
		manager_set_snapshot_bytes(m, NULL, NULL);
	}
	snapshotter_free(snap);
	fs_free(fs);
	manager_free(m);
	credentials_free(creds);
	settings_done(&s);
	return status;
}

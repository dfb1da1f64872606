/* The supervisor (supervisor.h).  One thread, one poll(2) loop over a
 * signalfd and the socket of the current serving process.  Messages from
 * the serving process, one per datagram:
 *
 *   ready      it serves (the first one: the start succeeded)
 *   upgrade    check the binary at our path; answered "ok PATH" or
 *              "err MESSAGE"
 *   go         the upgrade was answered to its client: replace me
 *
 * A serving process that dies without exiting 0 is replaced at once; one
 * that dies before saying ready is replaced after a back-off that doubles
 * (a binary or cache that cannot start must not spin).  An exit with
 * status 0 is the end of the mount (unmounted, or stopped by its own
 * SIGTERM): the supervisor ends too. */
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)

#include "supervisor.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/un.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "clock.h"
#include "fault.h"
#include "fileio.h"
#include "handover.h"
#include "macro.h"
#include "unixsock.h"

/* Clients of the snapshotter's socket that may wait for a serving
 * process */
#define SUPERVISOR_SNAP_BACKLOG 64
#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS 10000
#define CHECK_TIMEOUT_MS 30000
/* How long an old serving process may drain at an upgrade */
#define DRAIN_GRACE_MS 10000

struct sup {
	char exe[1024];
	/* where pullfs was started: each serving process parses the same
	 * arguments, relative paths included, from there */
	char *start_dir;
	char **argv;
	/* the cache's lock, shared with every serving process (cache.h
	 * CACHE_LOCK_ENV), or -1 */
	int lock_fd;
	int dev_fd, state_fd, sig_fd;
	int snap_fd; /* the snapshotter's listening socket; -1: none */
	int sock;    /* our end of the serving process's socket; -1: none */
	pid_t pid;   /* the serving process; 0: none */
	bool ready, ever_ready, stopping, upgrading;
	unsigned generation, upgrades, recoveries, fast_deaths;
	unsigned log_swaps;  /* parity: the systemd store's name of the log */
	unsigned drained;    /* replies of the last process as it drained */
	int64_t drain_until; /* an upgrade's old process is killed then; 0: none */
	int64_t down_ns;
	int notify_fd; /* the waiting parent (not foreground); -1: none */
	int status;
	bool fdstore; /* systemd holds the descriptors too (FileDescriptorStoreMax=) */
	bool adopted; /* ... and gave them to this start */
};

/* ---- systemd's notification socket ------------------------------------ */

/* One message to $NOTIFY_SOCKET, with fd attached when >= 0.  0, or
 * -errno (-ENOENT: not under systemd). */
static int sd_message(const char *msg, int fd)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = strlen(msg) };
	struct msghdr mh = { .msg_name = &sa, .msg_iov = &iov, .msg_iovlen = 1 };
	socklen_t salen;
	int sock, r = 0;

	if (!path || (path[0] != '/' && path[0] != '@') || strlen(path) >= sizeof(sa.sun_path))
		return -ENOENT;
	strcpy(sa.sun_path, path);
	salen = offsetof(struct sockaddr_un, sun_path) + strlen(path);
	if (path[0] == '@')
		sa.sun_path[0] = '\0';
	else
		salen++;
	mh.msg_namelen = salen;
	if (fd >= 0) {
		struct cmsghdr *c;
		mh.msg_control = cbuf;
		mh.msg_controllen = sizeof(cbuf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return -errno;
	if (sendmsg(sock, &mh, MSG_NOSIGNAL) < 0)
		r = -errno;
	close(sock);
	return r;
}

/* The descriptors systemd kept for a supervisor that died, by name
 * (sd_listen_fds_with_names(3) conventions).  True when both were given. */
static bool fds_passed(int *dev_fd, int *state_fd, unsigned *swaps, int *other_fd)
{
	const char *pid = getenv("LISTEN_PID"), *n = getenv("LISTEN_FDS");
	const char *names = getenv("LISTEN_FDNAMES");
	_cleanup_free_ char *copy = names ? strdup(names) : NULL;
	char *save = NULL;
	int i = 0;

	*dev_fd = *state_fd = *other_fd = -1;
	if (!pid || !n || !copy || atol(pid) != (long)getpid())
		return false;
	for (char *f = strtok_r(copy, ":", &save); f && i < atoi(n);
	     f = strtok_r(NULL, ":", &save), i++) {
		if (!strcmp(f, "fuse"))
			*dev_fd = 3 + i;
		else if (!strcmp(f, "handover") || !strcmp(f, "handover-b")) {
			/* both, when a supervisor died in the middle of a swap:
			 * either is whole; the one stored last is newer */
			*other_fd = *state_fd;
			*state_fd = 3 + i;
			*swaps = f[8] ? 1 : 0;
		}
	}
	return *dev_fd >= 0 && *state_fd >= 0;
}

bool supervisor_fds_passed(void)
{
	int a, b, d;
	unsigned c;

	return fds_passed(&a, &b, &c, &d);
}

/* Tells the parent waiting in the terminal how the start went. */
static void notify_parent(struct sup *s, char status)
{
	if (s->notify_fd < 0)
		return;
	if (write(s->notify_fd, &status, 1) < 0) {
		/* the parent is gone: nobody to tell */
	}
	close(s->notify_fd);
	s->notify_fd = -1;
	if (status == 0) {
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (null >= 0) {
			dup2(null, STDIN_FILENO);
			dup2(null, STDOUT_FILENO);
			dup2(null, STDERR_FILENO);
			close(null);
		}
	}
}

static int spawn(struct sup *s)
{
	int sv[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		int r = -errno;
		close(sv[0]);
		close(sv[1]);
		return r;
	}
	if (pid == 0) {
		char env[256], snap[32] = "";
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (s->start_dir && chdir(s->start_dir) < 0) {
			fprintf(stderr, "pullfs: cannot enter \"%s\" for its relative paths: %s\n",
				s->start_dir, strerror(errno));
			_exit(127);
		}
		/* only these cross the exec */
		fcntl(s->dev_fd, F_SETFD, 0);
		fcntl(s->state_fd, F_SETFD, 0);
		fcntl(sv[1], F_SETFD, 0);
		if (s->snap_fd >= 0) {
			fcntl(s->snap_fd, F_SETFD, 0);
			snprintf(snap, sizeof(snap), ",snap=%d", s->snap_fd);
		}
		if (s->lock_fd >= 0) {
			char num[16];

			fcntl(s->lock_fd, F_SETFD, 0);
			snprintf(num, sizeof(num), "%d", s->lock_fd);
			setenv(CACHE_LOCK_ENV, num, 1);
		} else {
			unsetenv(CACHE_LOCK_ENV);
		}
		snprintf(env, sizeof(env),
			 "gen=%u,dev=%d,state=%d,sup=%d,ppid=%ld,down=%" PRId64
			 ",upgrade=%d,upgrades=%u,recoveries=%u,fdstore=%d,drained=%u%s",
			 s->generation, s->dev_fd, s->state_fd, sv[1], (long)getppid(), s->down_ns,
			 s->upgrading, s->upgrades, s->recoveries, s->fdstore, s->drained, snap);
		setenv(SUPERVISOR_ENV, env, 1);
		execv(s->exe, s->argv);
		fprintf(stderr, "pullfs: cannot start \"%s\": %s\n", s->exe, strerror(errno));
		_exit(127);
	}
	close(sv[1]);
	s->sock = sv[0];
	s->pid = pid;
	s->ready = false;
	s->upgrading = false;
	return 0;
}

/* The check run of the binary at our path: 0, or -ENOEXEC with its
 * message in msg. */
static int check_binary(struct sup *s, char *msg, size_t len)
{
	int out[2];
	size_t got = 0;
	int64_t deadline = clock_mono_ns() + (int64_t)CHECK_TIMEOUT_MS * 1000000;
	int status = 0;
	pid_t pid;

	msg[0] = '\0';
	if (pipe2(out, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		close(out[0]);
		close(out[1]);
		return -errno;
	}
	if (pid == 0) {
		char env[64];
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		dup2(out[1], STDOUT_FILENO);
		dup2(out[1], STDERR_FILENO);
		if (s->start_dir && chdir(s->start_dir) < 0) {
			printf("cannot enter \"%s\": %s\n", s->start_dir, strerror(errno));
			_exit(127);
		}
		snprintf(env, sizeof(env), "check=%d", HANDOVER_VERSION);
		setenv(SUPERVISOR_ENV, env, 1);
		execv(s->exe, s->argv);
		printf("cannot run \"%s\": %s\n", s->exe, strerror(errno));
		_exit(127);
	}
	close(out[1]);
	for (;;) {
		struct pollfd p = { .fd = out[0], .events = POLLIN };
		int64_t left = (deadline - clock_mono_ns()) / 1000000;
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int)left) == 0) {
			kill(pid, SIGKILL);
			snprintf(msg, len, "the check run of \"%s\" did not end within %d s",
				 s->exe, CHECK_TIMEOUT_MS / 1000);
			break;
		}
		n = read(out[0], msg + got, len - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
		msg[got] = '\0';
		if (got == len - 1)
			break;
	}
	close(out[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	msg[strcspn(msg, "\n")] = '\0';
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	if (!msg[0])
		snprintf(msg, len, "the check run of \"%s\" failed", s->exe);
	return -ENOEXEC;
}

/* The systemd store's name of the log: two, used in turn, so that the
 * store holds a whole log at every moment of a swap. */
static const char *log_name(unsigned swaps)
{
	return swaps % 2 ? "handover-b" : "handover";
}

/* The serving process compacted the log into fd (handover.h): hold that
 * one from now on.  The one step that matters is the assignment: before
 * it the old log is the one a next process reads, after it the new. */
static int swap_log(struct sup *s, int fd)
{
	char msg[64];

	if (s->fdstore) {
		snprintf(msg, sizeof(msg), "FDSTORE=1\nFDNAME=%s", log_name(s->log_swaps + 1));
		if (sd_message(msg, fd) < 0) {
			close(fd);
			return -EIO;
		}
		/* both logs in the store (tests/fdstore.sh) */
		fault_point("supervisor-swap");
	}
	close(s->state_fd);
	s->state_fd = fd;
	s->log_swaps++;
	if (s->fdstore) {
		snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s",
			 log_name(s->log_swaps + 1));
		sd_message(msg, -1);
	}
	return 0;
}

static void on_message(struct sup *s)
{
	char buf[256], ans[2200];
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) - 1 };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	ssize_t n = recvmsg(s->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	int fd = -1;
	struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL;

	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
	    c->cmsg_len == CMSG_LEN(sizeof(int)))
		memcpy(&fd, CMSG_DATA(c), sizeof(int));

	if (n <= 0) {
		/* the serving process closed its end: it is dying, SIGCHLD
		 * follows */
		if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
			close(s->sock);
			s->sock = -1;
		}
		return;
	}
	buf[n] = '\0';
	if (!strcmp(buf, "log")) {
		const char *a = fd >= 0 && swap_log(s, fd) == 0 ? "log ok" : "log err";
		if (send(s->sock, a, strlen(a), MSG_NOSIGNAL) < 0) {
			/* it died meanwhile: SIGCHLD follows */
		}
		return;
	}
	if (fd >= 0)
		close(fd); /* not one we asked for */
	if (!strcmp(buf, "ready")) {
		if (!s->ever_ready)
			sd_message("READY=1", -1);
		s->ready = s->ever_ready = true;
		s->fast_deaths = 0;
		notify_parent(s, 0);
	} else if (!strcmp(buf, "upgrade")) {
		char msg[1100];
		if (check_binary(s, msg, sizeof(msg)) == 0)
			snprintf(ans, sizeof(ans), "ok %s", s->exe);
		else
			snprintf(ans, sizeof(ans), "err %s", msg);
		if (send(s->sock, ans, strlen(ans), MSG_NOSIGNAL) < 0) {
			/* it died meanwhile: SIGCHLD follows */
		}
	} else if (!strcmp(buf, "go") && !s->stopping) {
		/* It drains (serve.c): stops reading /dev/fuse, answers what
		 * it read and exits.  Requests wait in the kernel meanwhile;
		 * the next one is started when it is gone, or killed at the
		 * end of the grace time.  What it read and left unanswered
		 * the next one answers (NOTIFY_RESEND). */
		s->upgrading = true;
		s->drained = 0;
		s->down_ns = clock_mono_ns();
		s->drain_until = s->down_ns + (int64_t)DRAIN_GRACE_MS * 1000000;
	} else if (!strncmp(buf, "drained ", 8)) {
		s->drained = (unsigned)strtoul(buf + 8, NULL, 10);
	}
}

/* The serving process is gone: start the next one, or end. */
static void on_child(struct sup *s, int status, int *ret_delay_ms)
{
	bool upgrading = s->upgrading;
	long pid = (long)s->pid;

	/* what it said before it died ("drained N") */
	for (int i = 0; i < 8 && s->sock >= 0; i++)
		on_message(s);
	if (s->sock >= 0) {
		close(s->sock);
		s->sock = -1;
	}
	s->pid = 0;
	*ret_delay_ms = -1;
	s->drain_until = 0;
	if (s->stopping || (!upgrading && WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
		s->stopping = true;
		s->status = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
		return;
	}
	if (!s->ever_ready) {
		/* the first start failed: its message is on stderr */
		s->stopping = true;
		s->status = 1;
		return;
	}
	if (!upgrading) {
		s->drained = 0;
		s->down_ns = clock_mono_ns();
		s->recoveries++;
		if (WIFSIGNALED(status))
			fprintf(stderr,
				"pullfs: serving process %ld was killed by signal %d; "
				"starting another\n",
				pid, WTERMSIG(status));
		else
			fprintf(stderr,
				"pullfs: serving process %ld exited with status %d; "
				"starting another\n",
				pid, WEXITSTATUS(status));
	} else {
		s->upgrades++;
	}
	s->generation++;
	if (!s->ready && !upgrading)
		s->fast_deaths++;
	*ret_delay_ms = 0;
	if (s->fast_deaths > 1) {
		unsigned shift = MIN(s->fast_deaths - 2, 10u);
		*ret_delay_ms = (int)MIN((unsigned)BACKOFF_FIRST_MS << shift, BACKOFF_MAX_MS);
	}
}

/* Whether the serving process is dead but for threads the kernel holds:
 * its main thread exited (a zombie, not reaped because another thread is
 * still in a system call that cannot be interrupted, for example a
 * notification to the kernel waiting for a directory that a request to
 * this very mount holds).  No SIGCHLD comes until that request is
 * answered, which only a new serving process will do. */
static bool leader_gone(pid_t pid)
{
	return proc_stat(pid, NULL, 0) == 'Z';
}

/* Says where the threads of a dying process pid are held: the system call
 * each is in (/proc/PID/task/TID/syscall, its first number), for the log. */
static void print_held(pid_t pid)
{
	char path[64];
	DIR *d;
	struct dirent *e;

	snprintf(path, sizeof(path), "/proc/%ld/task", (long)pid);
	d = opendir(path);
	if (!d)
		return;
	while ((e = readdir(d))) {
		char file[384], comm[32] = "", call[64] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(file, sizeof(file), "%s/%s/comm", path, e->d_name);
		if ((f = fopen(file, "re"))) {
			if (!fgets(comm, sizeof(comm), f))
				comm[0] = 0;
			fclose(f);
		}
		snprintf(file, sizeof(file), "%s/%s/syscall", path, e->d_name);
		if ((f = fopen(file, "re"))) {
			if (!fgets(call, sizeof(call), f))
				call[0] = 0;
			fclose(f);
		}
		comm[strcspn(comm, "\n")] = 0;
		call[strcspn(call, " \n")] = 0;
		fprintf(stderr, "pullfs:   thread %s (%s) held in system call %s\n", e->d_name,
			comm, call[0] ? call : "?");
	}
	closedir(d);
}

/* How often the supervisor looks for a serving process that died that
 * way (leader_gone). */
#define LEADER_CHECK_MS 500

static void loop(struct sup *s)
{
	int delay_ms = -1; /* > -1: start the next serving process then */
	int64_t start_at = 0;
	pid_t gone_pid = 0; /* seen by leader_gone() since gone_since */
	int64_t gone_since = 0;

	while (!(s->stopping && s->pid == 0)) {
		if (s->stopping)
			/* a start meanwhile waits for the lock (cache.h) */
			cache_lock_stopping(s->lock_fd);
		struct pollfd p[2] = { { .fd = s->sig_fd, .events = POLLIN },
				       { .fd = s->sock, .events = POLLIN } };
		int timeout = -1;

		if (delay_ms >= 0 && s->pid == 0 && !s->stopping) {
			int64_t left = (start_at - clock_mono_ns()) / 1000000;
			if (left <= 0) {
				int r = spawn(s);
				delay_ms = -1;
				if (r < 0) {
					fprintf(stderr,
						"pullfs: cannot start a serving process: %s\n",
						strerror(-r));
					delay_ms = BACKOFF_MAX_MS;
					start_at = clock_mono_ns() + (int64_t)delay_ms * 1000000;
				}
				continue;
			}
			timeout = (int)left;
		}
		if (s->drain_until && s->pid) {
			int64_t left = (s->drain_until - clock_mono_ns()) / 1000000;
			if (left <= 0) {
				fprintf(stderr,
					"pullfs: serving process %ld did not drain within %d s; "
					"killed\n",
					(long)s->pid, DRAIN_GRACE_MS / 1000);
				kill(s->pid, SIGKILL);
				s->drain_until = 0;
				continue;
			}
			timeout = timeout < 0 ? (int)left : MIN(timeout, (int)left);
		}
		if (s->pid) {
			int status;

			/* for 0.5 s at least: a process that exits normally
			 * passes through that state for a moment */
			if (!leader_gone(s->pid)) {
				gone_pid = 0;
			} else if (gone_pid != s->pid) {
				gone_pid = s->pid;
				gone_since = clock_mono_ns();
			} else if (clock_mono_ns() - gone_since <
				   (int64_t)LEADER_CHECK_MS * 1000000) {
				/* look again */
			} else if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
				on_child(s, status, &delay_ms);
				start_at = clock_mono_ns() + (int64_t)MAX(delay_ms, 0) * 1000000;
				continue;
			} else {
				fprintf(stderr,
					"pullfs: serving process %ld is dying with a thread held in "
					"the kernel; starting another, which answers what holds it\n",
					(long)s->pid);
				print_held(s->pid);
				gone_pid = 0;
				on_child(s, SIGKILL, &delay_ms);
				start_at = clock_mono_ns() + (int64_t)MAX(delay_ms, 0) * 1000000;
				continue;
			}
			timeout = timeout < 0 ? LEADER_CHECK_MS : MIN(timeout, LEADER_CHECK_MS);
		}
		if (poll(p, s->sock >= 0 ? 2 : 1, timeout) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[0].revents & POLLIN) {
			struct signalfd_siginfo si;
			if (read(s->sig_fd, &si, sizeof(si)) != sizeof(si))
				continue;
			if (si.ssi_signo == SIGCHLD) {
				int status;
				pid_t pid;
				while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
					if (pid != s->pid)
						continue;
					on_child(s, status, &delay_ms);
					start_at = clock_mono_ns() +
						   (int64_t)MAX(delay_ms, 0) * 1000000;
				}
			} else if (si.ssi_signo == SIGHUP) {
				if (s->pid)
					kill(s->pid, SIGHUP);
			} else {
				s->stopping = true;
				cache_lock_stopping(s->lock_fd);
				if (s->pid)
					kill(s->pid, SIGTERM);
			}
		}
		if (s->sock >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
			on_message(s);
	}
}

/* Whether the connection of /dev/fuse descriptor fd was aborted. */
static bool connection_aborted(int fd)
{
	struct pollfd p = { .fd = fd };

	return fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & POLLERR);
}

/* Detaches: the parent waits for the word of the first serving process
 * and exits with it. */
static int daemonize(struct sup *s)
{
	int p[2];
	pid_t pid;
	char c = 1;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0) {
		close(p[1]);
		if (read(p[0], &c, 1) != 1)
			c = 1;
		_exit(c);
	}
	close(p[0]);
	s->notify_fd = p[1];
	setsid();
	if (chdir("/") < 0) {
		/* nothing relies on the working directory */
	}
	return 0;
}

/* The cache's lock for as long as the supervisor lives: a serving
 * process killed with a thread held in the kernel keeps its descriptors
 * until the next one frees that thread, so the next one must not need
 * the lock for itself.  A serving process of a supervisor that died may
 * hold it a moment longer: waited for (cache_lock_take), and with
 * systemd's store then left to the serving processes as without a
 * supervisor. */
static int take_lock(struct sup *s, const char *cache_dir)
{
	char errbuf[512];
	int fd;

	if (!cache_dir)
		return 0;
	fd = cache_lock_take(cache_dir, errbuf, sizeof(errbuf));
	if (fd >= 0) {
		s->lock_fd = fd;
		return 0;
	}
	if (fd == -EBUSY && supervisor_fds_passed())
		return 0;
	fprintf(stderr, "pullfs: %s\n", errbuf);
	return fd;
}

/* Binds the snapshotter's socket for every serving process to come.  0,
 * or -errno with the message printed. */
static int bind_snapshotter(struct sup *s, const char *path)
{
	char errbuf[512] = "";
	int r = unixsock_listen(path, "snapshotter socket", false, SUPERVISOR_SNAP_BACKLOG,
				&s->snap_fd, errbuf, sizeof(errbuf));

	if (r < 0)
		fprintf(stderr, "pullfs: %s\n", errbuf[0] ? errbuf : strerror(-r));
	return r;
}

int supervisor_run(struct fuse_args *args, const char *mountpoint, const char *cache_dir,
		   const char *snap_socket, bool foreground, char **argv,
		   int (*check_mountpoint)(const char *mp))
{
	static const struct fuse_lowlevel_ops none = { 0 };
	struct sup s = { .argv = argv,
			 .lock_fd = -1,
			 .dev_fd = -1,
			 .state_fd = -1,
			 .sig_fd = -1,
			 .snap_fd = -1,
			 .sock = -1,
			 .notify_fd = -1,
			 .status = 1 };
	struct fuse_session *se = NULL;
	_cleanup_free_ char *version = handover_format_version();
	sigset_t mask, old;
	int stale_fd = -1;
	ssize_t n;

	n = readlink("/proc/self/exe", s.exe, sizeof(s.exe) - 1);
	if (n < 0 || !version) {
		fprintf(stderr, "pullfs: cannot find its own binary: %s\n", strerror(errno));
		return 1;
	}
	s.exe[n] = '\0';
	s.start_dir = getcwd(NULL, 0);
	/* the mount point only with the lock held: a pullfs of this cache on
	 * its way out unmounts before it lets go of the lock, and its mount
	 * answers nothing meanwhile */
	if (take_lock(&s, cache_dir) < 0 ||
	    (!supervisor_fds_passed() && check_mountpoint(mountpoint) < 0) ||
	    (snap_socket && bind_snapshotter(&s, snap_socket) < 0)) {
		if (s.lock_fd >= 0)
			close(s.lock_fd);
		free(s.start_dir);
		return 1;
	}
	if (!foreground && daemonize(&s) < 0) {
		fprintf(stderr, "pullfs: cannot detach: %s\n", strerror(errno));
		return 1;
	}
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, &old);
	s.sig_fd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (s.sig_fd < 0) {
		fprintf(stderr, "pullfs: cannot set up the supervisor: %s\n", strerror(errno));
		goto out;
	}
	if (fds_passed(&s.dev_fd, &s.state_fd, &s.log_swaps, &stale_fd)) {
		/* A supervisor before this one died; systemd kept the mount's
		 * descriptor and the log: take over as after a crash. */
		fcntl(s.dev_fd, F_SETFD, FD_CLOEXEC);
		fcntl(s.state_fd, F_SETFD, FD_CLOEXEC);
		if (stale_fd >= 0) {
			/* the supervisor before died in a swap: one log is
			 * enough, and the name is the other's from now on */
			char msg[64];
			snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s",
				 log_name(s.log_swaps + 1));
			sd_message(msg, -1);
			close(stale_fd);
		}
		s.adopted = s.fdstore = s.ever_ready = true;
		s.generation = 1;
		s.recoveries = 1;
		s.down_ns = clock_mono_ns();
		fprintf(stderr, "pullfs: taking over \"%s\" from the descriptors systemd kept\n",
			mountpoint);
		/* a failure injected by a test killed the supervisor before */
		unsetenv("PULLFS_FAULT");
	} else {
		s.state_fd = memfd_create("pullfs-handover", MFD_CLOEXEC);
		if (s.state_fd < 0 ||
		    write(s.state_fd, version, strlen(version)) != (ssize_t)strlen(version)) {
			fprintf(stderr, "pullfs: cannot set up the supervisor: %s\n",
				strerror(errno));
			goto out;
		}
		se = fuse_session_new(args, &none, sizeof(none), NULL);
		if (!se || fuse_session_mount(se, mountpoint) != 0) {
			fprintf(stderr, "pullfs: cannot mount \"%s\"\n", mountpoint);
			goto out;
		}
		s.dev_fd = fuse_session_fd(se);
		/* Under systemd with a descriptor store, the mount outlives a
		 * dead supervisor too. */
		s.fdstore = sd_message("FDSTORE=1\nFDNAME=fuse", s.dev_fd) == 0 &&
			    sd_message("FDSTORE=1\nFDNAME=handover", s.state_fd) == 0;
	}
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (spawn(&s) < 0) {
		fprintf(stderr, "pullfs: cannot start the serving process: %s\n", strerror(errno));
		goto out_unmount;
	}
	loop(&s);
	cache_lock_stopping(s.lock_fd);
out_unmount:
	if (s.fdstore) {
		/* the mount ends here: nothing for a next start to take over */
		sd_message("FDSTOREREMOVE=1\nFDNAME=fuse", -1);
		sd_message("FDSTOREREMOVE=1\nFDNAME=handover", -1);
		sd_message("FDSTOREREMOVE=1\nFDNAME=handover-b", -1);
	}
	if (se && connection_aborted(fuse_session_fd(se)))
		/* the serving process aborted it (a stop that a notification
		 * held), which libfuse takes for an unmount */
		umount2(mountpoint, MNT_DETACH);
	else if (se)
		fuse_session_unmount(se);
	else if (umount2(mountpoint, MNT_DETACH) < 0 && errno != EINVAL)
		fprintf(stderr, "pullfs: cannot unmount \"%s\": %s\n", mountpoint, strerror(errno));
out:
	notify_parent(&s, (char)(s.status ? 1 : 0));
	if (se)
		fuse_session_destroy(se);
	if (s.sig_fd >= 0)
		close(s.sig_fd);
	if (s.state_fd >= 0)
		close(s.state_fd);
	if (s.adopted && s.dev_fd >= 0)
		close(s.dev_fd);
	if (s.sock >= 0)
		close(s.sock);
	if (s.snap_fd >= 0) {
		close(s.snap_fd);
		unlink(snap_socket);
	}
	if (s.lock_fd >= 0)
		close(s.lock_fd);
	free(s.start_dir);
	sigprocmask(SIG_SETMASK, &old, NULL);
	return s.status ? 1 : 0;
}

/* ---- in the serving process ------------------------------------------ */

int supervisor_child_env(struct handoff *h, unsigned *check_version)
{
	const char *env = getenv(SUPERVISOR_ENV);
	_cleanup_free_ char *copy = NULL;
	char *save = NULL;
	unsigned seen = 0;

	if (!env)
		return -ENOENT;
	copy = strdup(env);
	unsetenv(SUPERVISOR_ENV);
	if (!copy)
		return -ENOMEM;
	*h = (struct handoff){ .dev_fd = -1, .state_fd = -1, .sup_fd = -1, .snap_fd = -1 };
	for (char *f = strtok_r(copy, ",", &save); f; f = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(f, '='), *end;
		long long v;

		if (!eq)
			return -EINVAL;
		*eq++ = '\0';
		errno = 0;
		v = strtoll(eq, &end, 10);
		if (errno || *end || !*eq || v < 0)
			return -EINVAL;
		if (!strcmp(f, "check")) {
			*check_version = (unsigned)v;
			return 1;
		}
		if (!strcmp(f, "gen"))
			h->generation = (unsigned)v;
		else if (!strcmp(f, "dev"))
			h->dev_fd = (int)v, seen |= 1;
		else if (!strcmp(f, "state"))
			h->state_fd = (int)v, seen |= 2;
		else if (!strcmp(f, "sup"))
			h->sup_fd = (int)v, seen |= 4;
		else if (!strcmp(f, "ppid"))
			h->sup_pid = (int)v;
		else if (!strcmp(f, "down"))
			h->down_ns = v;
		else if (!strcmp(f, "upgrade"))
			h->upgrade = v != 0;
		else if (!strcmp(f, "upgrades"))
			h->upgrades = (unsigned)v;
		else if (!strcmp(f, "recoveries"))
			h->recoveries = (unsigned)v;
		else if (!strcmp(f, "fdstore"))
			h->fdstore = v != 0;
		else if (!strcmp(f, "drained"))
			h->drained = (unsigned)v;
		else if (!strcmp(f, "snap"))
			h->snap_fd = v > INT_MAX ? -1 : (int)v;
	}
	if (seen != 7)
		return -EINVAL;
	/* ours alone from now on: not to be inherited by anything we run */
	fcntl(h->dev_fd, F_SETFD, FD_CLOEXEC);
	fcntl(h->state_fd, F_SETFD, FD_CLOEXEC);
	fcntl(h->sup_fd, F_SETFD, FD_CLOEXEC);
	if (h->snap_fd >= 0)
		fcntl(h->snap_fd, F_SETFD, FD_CLOEXEC);
	return 0;
}

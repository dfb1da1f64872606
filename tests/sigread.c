/* What integration/lazy-signals.sh and lazy-interrupt.sh run: one file
 * operation by a process that handles signals and expects to go on after
 * them, as a Go program does with the runtime's SIGURG.
 *
 *     sigread [-u USEC] [-h SIGNAL] [-r READY] [-o OUT] read FILE
 *     sigread [-u USEC] [-r READY] stat PATH
 *     sigread [-u USEC] [-r READY] exec FILE [ARG...]
 *
 * -u: another process sends this one SIGURG (handled, SA_RESTART) every
 * USEC microseconds while the operation runs (default 50; 0: none).
 * -h: SIGNAL (a number) is handled too, with SA_RESTART.  -r: READY is
 * created just before the operation starts.  read copies FILE to OUT
 * (default: nowhere) with read(2) in 128 KiB steps; exec runs FILE with
 * execv(), the signals going on into the new program (where SIGURG is
 * ignored again).  Prints "ok" (read: "ok BYTES") and exits 0, or the
 * name of the errno that ended it and exits 1: a handled signal must
 * end nothing. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

static void handled(int sig)
{
	(void)sig;
}

static int handle(int sig)
{
	struct sigaction sa = { .sa_handler = handled, .sa_flags = SA_RESTART };

	sigemptyset(&sa.sa_mask);
	return sigaction(sig, &sa, NULL);
}

/* A child that signals pid every usec microseconds until pid is gone. */
static int storm(pid_t pid, long usec)
{
	pid_t k = fork();

	if (k < 0)
		return -1;
	if (k > 0)
		return 0;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != pid)
		_exit(0);
	for (;;) {
		if (kill(pid, SIGURG) < 0)
			_exit(0);
		usleep((useconds_t)usec);
	}
}

static int fail(const char *what)
{
	const char *name = strerrorname_np(errno);

	printf("%s\n", name ? name : "?");
	fprintf(stderr, "sigread: %s: %s\n", what, strerror(errno));
	return 1;
}

int main(int argc, char **argv)
{
	const char *ready = NULL, *out = NULL;
	long usec = 50;
	int opt;

	while ((opt = getopt(argc, argv, "+u:h:r:o:")) != -1) {
		switch (opt) {
		case 'u':
			usec = atol(optarg);
			break;
		case 'h':
			if (handle(atoi(optarg)) < 0)
				return fail("sigaction");
			break;
		case 'r':
			ready = optarg;
			break;
		case 'o':
			out = optarg;
			break;
		default:
			return 2;
		}
	}
	if (argc - optind < 2) {
		fprintf(stderr, "usage: sigread [-u USEC] [-h SIGNAL] [-r READY] [-o OUT] "
				"read|stat|exec PATH [ARG...]\n");
		return 2;
	}
	const char *op = argv[optind], *path = argv[optind + 1];

	if (handle(SIGURG) < 0)
		return fail("sigaction");
	if (usec > 0 && storm(getpid(), usec) < 0)
		return fail("fork");
	if (ready) {
		int fd = open(ready, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

		if (fd < 0)
			return fail(ready);
		close(fd);
	}
	if (!strcmp(op, "stat")) {
		struct stat st;

		if (stat(path, &st) < 0)
			return fail(path);
		printf("ok\n");
		return 0;
	}
	if (!strcmp(op, "exec")) {
		execv(path, argv + optind + 1);
		return fail(path);
	}
	if (strcmp(op, "read") != 0) {
		fprintf(stderr, "sigread: unknown operation %s\n", op);
		return 2;
	}
	static char buf[128 * 1024];
	long long total = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC), ofd = -1;

	if (fd < 0)
		return fail(path);
	if (out && (ofd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
		return fail(out);
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n < 0)
			return fail(path);
		if (n == 0)
			break;
		if (ofd >= 0 && write(ofd, buf, (size_t)n) != n)
			return fail(out);
		total += n;
	}
	printf("ok %lld\n", total);
	return 0;
}

/* pullfsctl upgrade: replace the serving process with the binary now
 * installed at the supervisor's path, the mount staying up. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "fileio.h"
#include "pullfsctl.h"

#define UPGRADE_WAIT_S 60

void upgrade_usage(FILE *f)
{
	fputs("Usage: pullfsctl [-m MOUNT] upgrade\n"
	      "\n"
	      "Replace the serving process of a pullfs (not --no-supervise) by the\n"
	      "binary now installed at the same path, without unmounting: the new binary\n"
	      "is first run in a check mode (can it read the running one's state and the\n"
	      "cache?) and refused with its reason if not, the old process then serving\n"
	      "on; otherwise the old process stops reading requests, answers those it\n"
	      "has read and exits (killed after 10 s), and the new process takes the\n"
	      "connection over and answers what is left.  Waits until the new process\n"
	      "serves.  Asks\n"
	      "the control socket (op \"upgrade\"), which is for root.\n"
	      "\n"
	      "Options:\n"
	      "  -h, --help  show this help\n",
	      f);
}

/* The pid of the serving process, from the status read through the mount
 * (while no process serves it the read waits); 0 when the document was
 * cut by the switch (read partly from the old process and partly from the
 * new one): the caller reads again. */
static long serving_pid(void)
{
	_cleanup_free_ char *path = NULL, *buf = NULL;
	_cleanup_json_ json_t *st = NULL;
	_cleanup_close_ int fd = -1;
	size_t len = 0;
	json_t *v;
	int r;

	if (asprintf(&path, "%s/.pullfs/status", mount_dir()) < 0)
		return -ENOMEM;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = read_full(fd, STATUS_MAX, &buf, &len);
	if (r < 0)
		return r;
	st = json_loadb(buf, len, 0, NULL);
	v = json_object_get(json_object_get(st, "serving"), "pid");
	return json_is_integer(v) ? (long)json_integer_value(v) : 0;
}

int cmd_upgrade(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *req = NULL, *a = NULL;
	long old, now = 0;
	int c;

	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			upgrade_usage(stdout);
			return 0;
		default:
			return usage_error("upgrade", "bad option");
		}
	}
	if (optind < argc)
		return usage_error("upgrade", "unexpected argument \"%s\"", argv[optind]);
	req = json_pack("{s:s}", "op", "upgrade");
	if (!req || control_call(req, &a) < 0)
		return EXIT_FAILED;
	if (!json_is_true(json_object_get(a, "ok"))) {
		control_failure("upgrade", a);
		return EXIT_FAILED;
	}
	old = json_is_integer(json_object_get(a, "pid"))
		      ? (long)json_integer_value(json_object_get(a, "pid"))
		      : 0;
	/* The status is read through the mount: while no process serves it
	 * the read waits, so each pass sees the old process or the new. */
	for (int i = 0; i < UPGRADE_WAIT_S * 20; i++) {
		now = serving_pid();
		if (now < 0) {
			explain_mount_error("the status", (int)now);
			return EXIT_FAILED;
		}
		if (now && now != old)
			break;
		nanosleep(&(struct timespec){ .tv_nsec = 50 * 1000 * 1000 }, NULL);
	}
	if (!now || now == old) {
		err_msg("the serving process %ld was not replaced within %d s", old,
			UPGRADE_WAIT_S);
		return EXIT_FAILED;
	}
	printf("upgraded: serving process %ld replaced by %ld (%s)\n", old, now,
	       esc(jstr(a, "binary") ? jstr(a, "binary") : "?"));
	return 0;
}

/* pullfsctl pull: images into the cache by looking them up through the
 * mount, so that the daemon's policy, back-off and throttle apply, or by
 * asking the daemon to pull them in the background. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "errname.h"
#include "pullfsctl.h"

void pull_usage(FILE *f)
{
	fputs("Usage: pullfsctl [-m MOUNT] pull [--plain] [--quiet] [--background] REFERENCE...\n"
	      "\n"
	      "Make sure each image is in the cache, by looking it up through the mount\n"
	      "(MOUNT/images/REFERENCE), so the daemon's pull policy, back-off and\n"
	      "throttle apply as to any other lookup.  All references are looked up at\n"
	      "once; the daemon queues them as it queues any pull.\n"
	      "\n"
	      "A reference with neither tag nor digest gets the tag \"latest\", as docker\n"
	      "does; short names (\"alpine:3.19\") mean docker.io.\n"
	      "\n"
	      "On a terminal, a progress line per image: bytes done and total, rate and\n"
	      "layers.  Otherwise, one plain line per change of state (at most every 5 s\n"
	      "while downloading) and one \"REFERENCE: done DIGEST SIZE in TIME\" line per\n"
	      "image.\n"
	      "\n"
	      "An image the daemon starts lazily (eStargz, zstd:chunked) is usable as\n"
	      "soon as its tables of contents are in; pull waits until the background\n"
	      "completion has fetched and verified all of it (state \"completing\", with\n"
	      "the bytes local of the total), and fails with EIO when that completion\n"
	      "stopped.\n"
	      "\n"
	      "With --background, the daemon is asked over the control socket to pull\n"
	      "each image and the command returns at once, printing \"REFERENCE: present\"\n"
	      "or \"REFERENCE: pulling\": such a pull completes even though no process\n"
	      "waits for it, where a queued pull whose lookups were all interrupted\n"
	      "leaves the queue.  Watch it with pullfsctl status or events.\n"
	      "\n"
	      "Options:\n"
	      "  -b, --background  ask the daemon to pull, do not wait\n"
	      "      --plain    plain lines even on a terminal\n"
	      "  -q, --quiet    print nothing but errors\n"
	      "  -h, --help     show this help\n"
	      "\n"
	      "Exit status: 0 when every image is ready; 1 when one failed, with a line\n"
	      "\"pullfsctl: pull REFERENCE: ERRNO: REASON: MESSAGE\" on stderr, where\n"
	      "REASON and MESSAGE are from the latest failure event of that image in the\n"
	      "events log (ENOENT: unknown repository or tag, EAGAIN: back-off, EACCES:\n"
	      "denied, EHOSTUNREACH: registry unreachable, ...); 2 on bad usage.\n",
	      f);
}

/* pull --background: one control request per reference. */
static int pull_background(int n, char **refs, bool quiet)
{
	int failed = 0;

	for (int i = 0; i < n; i++) {
		_cleanup_json_ json_t *req =
			json_pack("{s:s, s:s}", "op", "pull", "reference", refs[i]);
		_cleanup_json_ json_t *a = NULL;

		if (!req || control_call(req, &a) < 0)
			return EXIT_FAILED;
		if (!json_is_true(json_object_get(a, "ok"))) {
			control_failure("pull", a);
			failed = 1;
			continue;
		}
		if (!quiet)
			printf("%s: %s\n", esc(jstr(a, "reference")),
			       json_is_true(json_object_get(a, "present")) ? "present" : "pulling");
	}
	return failed ? EXIT_FAILED : 0;
}

int cmd_pull(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "plain", no_argument, NULL, 'p' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "background", no_argument, NULL, 'b' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_free_ struct job *jobs = NULL;
	_cleanup_json_ json_t *last_status = NULL;
	bool plain = false, quiet = false, background = false, tty;
	size_t n, drawn = 0, started = 0;
	int c, failed = 0;
	struct statfs sf;

	while ((c = getopt_long(argc, argv, "+hqb", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			pull_usage(stdout);
			return 0;
		case 'b':
			background = true;
			break;
		case 'p':
			plain = true;
			break;
		case 'q':
			quiet = true;
			break;
		default:
			return usage_error("pull", "bad option");
		}
	}
	if (optind >= argc)
		return usage_error("pull", "pull needs at least one REFERENCE");
	if (background)
		return pull_background(argc - optind, argv + optind, quiet);
	if (statfs(mount_dir(), &sf) < 0 || (uint32_t)sf.f_type != FUSE_SUPER_MAGIC) {
		explain_mount_error(mount_dir(), -ENOTCONN);
		return EXIT_FAILED;
	}
	n = (size_t)(argc - optind);
	jobs = calloc(n, sizeof(*jobs));
	if (!jobs)
		return EXIT_FAILED;
	for (size_t i = 0; i < n; i++) {
		struct job *j = &jobs[i];
		int r;

		j->arg = argv[optind + i];
		r = canonical_reference(j->arg, true, &j->reference);
		if (r < 0) {
			err_msg("pull %s: %s: invalid reference", j->arg, errno_name(r));
			failed = 1;
			j->phase = JOB_DONE;
			j->err = r;
			j->reported = true;
			j->settled = true;
			continue;
		}
		if (asprintf(&j->path, "%s/images/%s", mount_dir(), j->reference) < 0) {
			j->path = NULL;
			err_msg("out of memory");
			return EXIT_FAILED;
		}
	}
	tty = !plain && !quiet && isatty(STDOUT_FILENO);
	for (size_t i = 0; i < n; i++) {
		struct job *j = &jobs[i];
		int r;

		if (j->phase == JOB_DONE)
			continue;
		j->started = now_monotonic();
		j->started_real = now_realtime();
		r = pthread_create(&j->thread, NULL, job_run, j);
		if (r) {
			err_msg("cannot start a thread: %s", strerror(r));
			j->err = -r;
			j->phase = JOB_DONE;
			continue;
		}
		started++;
		if (!quiet && !tty)
			printf("%s: pulling\n", esc(j->reference));
	}
	fflush(stdout);

	for (;;) {
		bool all_done = true;
		double now = now_monotonic();
		json_t *st = status_try();

		if (st) {
			json_decref(last_status);
			last_status = st;
		}
		for (size_t i = 0; i < n; i++) {
			struct job *j = &jobs[i];
			if (__atomic_load_n(&j->phase, __ATOMIC_ACQUIRE) != JOB_DONE) {
				all_done = false;
				if (st)
					job_update(j, st, now);
			} else if (!j->settled) {
				/* looked up: a lazy image is waited for until
				 * it is complete */
				if (j->err || !j->path)
					j->settled = true;
				else if (st)
					job_follow_completion(j, st, now);
				all_done = all_done && j->settled;
			}
		}
		if (all_done)
			break;
		if (tty)
			draw_tty(jobs, n, last_status, &drawn);
		else if (!quiet)
			draw_plain(jobs, n, now);
		/* Wait up to 200 ms, returning early if all finished. */
		for (int k = 0; k < 20; k++) {
			bool any_running = false;
			/* (a completion is followed at the next poll) */
			for (size_t i = 0; i < n; i++)
				if (!job_over(&jobs[i]))
					any_running = true;
			if (!any_running)
				break;
			poll(NULL, 0, 10);
		}
	}
	for (size_t i = 0; i < n; i++)
		if (jobs[i].path && jobs[i].thread)
			pthread_join(jobs[i].thread, NULL);

	/* One last look, for digests and sizes of what was just pulled, and
	 * for the events of failures. */
	{
		json_t *st = status_try();
		if (st) {
			json_decref(last_status);
			last_status = st;
		}
	}
	if (tty) {
		draw_tty(jobs, n, last_status, &drawn);
	} else if (!quiet) {
		for (size_t i = 0; i < n; i++) {
			char text[512];
			if (jobs[i].err || jobs[i].reported)
				continue;
			job_result_text(&jobs[i], last_status, text, sizeof(text));
			printf("%s: %s\n", esc(jobs[i].reference), esc(text));
		}
		fflush(stdout);
	}
	for (size_t i = 0; i < n; i++) {
		if (!jobs[i].err)
			continue;
		failed = 1;
		if (!jobs[i].reported)
			job_report_failure(&jobs[i], last_status);
	}
	for (size_t i = 0; i < n; i++) {
		free(jobs[i].reference);
		free(jobs[i].path);
	}
	return failed ? EXIT_FAILED : 0;
}

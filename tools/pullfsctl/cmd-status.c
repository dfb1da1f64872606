/* pullfsctl status: the daemon's state from its status document. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pullfsctl.h"
#include "units.h"

void status_usage(FILE *f)
{
	fputs("Usage: pullfsctl [-m MOUNT] status [--json]\n"
	      "\n"
	      "Show the state of the daemon: pulls in flight with their progress (state\n"
	      "waiting, resolving or downloading; bytes and layers done; processes\n"
	      "waiting for them), images started lazily that are not complete yet (the\n"
	      "compressed bytes local of their total, and whether their background\n"
	      "completion runs), references in back-off with the time left and the\n"
	      "error that put them there, queue lengths, and cache usage with the\n"
	      "garbage collection thresholds.  Reads MOUNT/.pullfs/status.\n"
	      "\n"
	      "Options:\n"
	      "      --json     the status document as the daemon wrote it\n"
	      "  -h, --help     show this help\n",
	      f);
}

int cmd_status(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *st = NULL;
	_cleanup_table_ struct table *pt = NULL, *bt = NULL, *lt = NULL;
	const json_t *q, *cache, *objs, *pulls, *backoff, *images, *e;
	char a[32], b[32], d[32];
	bool json = false;
	size_t i;
	int c;

	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			status_usage(stdout);
			return 0;
		case 'j':
			json = true;
			break;
		default:
			return usage_error("status", "bad option");
		}
	}
	if (optind < argc)
		return usage_error("status", "unexpected argument \"%s\"", argv[optind]);
	if (status_load(&st) < 0)
		return EXIT_FAILED;
	if (json) {
		json_dumpf(st, stdout, JSON_INDENT(2));
		putchar('\n');
		return 0;
	}
	printf("Mount:       %s (pullfs %s, pid %.0f)\n",
	       esc(jstr(st, "mountpoint") ? jstr(st, "mountpoint") : mount_dir()),
	       esc(jstr(st, "version") ? jstr(st, "version") : "?"), jnum(st, "pid"));
	printf("Events log:  %s\n", esc(jstr(st, "events_log") ? jstr(st, "events_log") : "-"));
	cache = json_object_get(st, "cache");
	format_size(jnum(cache, "bytes"), a, sizeof(a));
	printf("Cache:       %s: %s in %.0f image%s, %.0f layer%s\n",
	       esc(jstr(st, "cache_dir") ? jstr(st, "cache_dir") : "?"), a, jnum(cache, "images"),
	       jnum(cache, "images") == 1 ? "" : "s", jnum(cache, "layers"),
	       jnum(cache, "layers") == 1 ? "" : "s");
	if (jnum(cache, "fs_bytes") > 0) {
		double used = jnum(cache, "fs_bytes") - jnum(cache, "fs_free_bytes");
		format_size(jnum(cache, "fs_free_bytes"), a, sizeof(a));
		format_size(jnum(cache, "fs_bytes"), b, sizeof(b));
		printf("Filesystem:  %s free of %s (%.0f%% used)\n", a, b,
		       100.0 * used / jnum(cache, "fs_bytes"));
	}
	if (jnum(cache, "max_bytes") > 0) {
		format_size(jnum(cache, "max_bytes"), d, sizeof(d));
		printf("GC:          above %.0f%% (of the filesystem, or of the budget %s), down to %.0f%%\n",
		       jnum(cache, "gc_high_percent"), d, jnum(cache, "gc_low_percent"));
	} else {
		printf("GC:          above %.0f%% of the filesystem, down to %.0f%%\n",
		       jnum(cache, "gc_high_percent"), jnum(cache, "gc_low_percent"));
	}
	objs = json_object_get(st, "objects");
	if (objs && jnum(objs, "count") > 0) {
		format_size(jnum(objs, "bytes"), a, sizeof(a));
		format_size(jnum(objs, "shared_bytes"), b, sizeof(b));
		printf("Objects:     %.0f files of 64 KiB or more, %s, used %.0f times; %s stored once for several layers\n",
		       jnum(objs, "count"), a, jnum(objs, "uses"), b);
	}
	q = json_object_get(st, "queues");
	printf("Pulls:       %.0f running (at most %.0f at once), %.0f queued, %.0f waiting for the throttle\n",
	       jnum(q, "pulls_running"), jnum(q, "max_parallel_pulls"), jnum(q, "pulls_queued"),
	       jnum(q, "throttle_waiting"));

	pulls = json_object_get(st, "pulls");
	printf("\nPulls in flight:%s\n", json_array_size(pulls) ? "" : " none");
	if (json_array_size(pulls)) {
		pt = table_new(6, "", "", "", "", "", "");
		if (!pt)
			return EXIT_FAILED;
		table_add(pt, (const char *const[]){ "REFERENCE", "STATE", "PROGRESS", "LAYERS",
						     "ELAPSED", "WAITERS" });
		json_array_foreach(pulls, i, e)
		{
			char progress[96], layers[32], elapsed[32], waiters[16];
			double total = jnum(e, "bytes_total");
			format_size(jnum(e, "bytes_done"), a, sizeof(a));
			format_size(total, b, sizeof(b));
			if (total > 0)
				snprintf(progress, sizeof(progress), "%s / %s (%.0f%%)", a, b,
					 100.0 * jnum(e, "bytes_done") / total);
			else
				snprintf(progress, sizeof(progress), "%s", "-");
			snprintf(layers, sizeof(layers), "%.0f/%.0f", jnum(e, "layers_done"),
				 jnum(e, "layers_total"));
			snprintf(elapsed, sizeof(elapsed), "%.1fs", jnum(e, "elapsed_s"));
			snprintf(waiters, sizeof(waiters), "%.0f", jnum(e, "waiters"));
			table_add(pt, (const char *const[]){ jstr(e, "reference"), jstr(e, "state"),
							     progress, layers, elapsed, waiters });
		}
		table_print(pt, stdout);
	}

	images = json_object_get(st, "images");
	lt = table_new(3, "", "", "");
	if (!lt)
		return EXIT_FAILED;
	table_add(lt, (const char *const[]){ "REFERENCE", "LOCAL", "COMPLETION" });
	json_array_foreach(images, i, e)
	{
		char local[96];
		double total = jnum(e, "bytes_total");

		if (!json_is_false(json_object_get(e, "complete")))
			continue;
		format_size(jnum(e, "bytes_local"), a, sizeof(a));
		format_size(total, b, sizeof(b));
		snprintf(local, sizeof(local), "%s / %s (%.0f%%)", a, b,
			 total > 0 ? 100.0 * jnum(e, "bytes_local") / total : 0.0);
		table_add(lt, (const char *const[]){ jstr(e, "reference"), local,
						     json_is_true(json_object_get(e, "completing"))
							     ? "running"
							     : "not running" });
	}
	printf("\nLazy images not complete:%s\n", lt->nrows > 1 ? "" : " none");
	if (lt->nrows > 1)
		table_print(lt, stdout);

	backoff = json_object_get(st, "backoff");
	printf("\nBack-off:%s\n", json_array_size(backoff) ? "" : " none");
	if (json_array_size(backoff)) {
		bt = table_new(6, "", "", "", "", "", "");
		if (!bt)
			return EXIT_FAILED;
		table_add(bt, (const char *const[]){ "REFERENCE", "TIME LEFT", "DELAY", "FAILURES",
						     "ERRNO", "MESSAGE" });
		json_array_foreach(backoff, i, e)
		{
			char left[32], delay[32], failures[16];
			snprintf(left, sizeof(left), "%.1fs", jnum(e, "remaining_s"));
			format_duration(jnum(e, "delay_s"), delay, sizeof(delay));
			snprintf(failures, sizeof(failures), "%.0f", jnum(e, "failures"));
			table_add(bt, (const char *const[]){ jstr(e, "reference"), left, delay,
							     failures, jstr(e, "errno"),
							     jstr(e, "message") });
		}
		table_print(bt, stdout);
	}

	const json_t *pr = json_object_get(st, "profiles");
	if (pr) {
		format_size(jnum(pr, "bytes_prefetched"), a, sizeof(a));
		printf("\nStart profiles: %.0f stored; since start %.0f recorded, %.0f imported, "
		       "%.0f used (%.0f files, %s prefetched), %.0f dropped as stale\n",
		       jnum(pr, "count"), jnum(pr, "recorded"), jnum(pr, "imported"),
		       jnum(pr, "used"), jnum(pr, "files_prefetched"), a, jnum(pr, "stale"));
	}
	return 0;
}

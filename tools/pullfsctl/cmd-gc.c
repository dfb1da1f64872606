/* pullfsctl gc: garbage collection now, through the control socket. */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#include "pullfsctl.h"
#include "units.h"

void gc_usage(FILE *f)
{
	fputs("Usage: pullfsctl [-m MOUNT] gc [--to BYTES]\n"
	      "\n"
	      "Collect garbage now: remove least recently used images (never one with\n"
	      "open files or a pull in flight, never a pinned one) until the cache is\n"
	      "below the daemon's low threshold, or below BYTES.  Asks the control\n"
	      "socket (op \"gc\"), which is for root.\n"
	      "\n"
	      "Options:\n"
	      "      --to BYTES  shrink the cache to at most BYTES (suffixes K, M, G, T:\n"
	      "                  binary multiples, e.g. 500M, 2GiB)\n"
	      "  -h, --help      show this help\n",
	      f);
}

int cmd_gc(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "to", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *req = NULL, *a = NULL;
	bool have_to = false;
	uint64_t to = 0;
	int c;

	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			gc_usage(stdout);
			return 0;
		case 't':
			if (parse_size(optarg, &to) < 0)
				return usage_error("gc", "invalid size \"%s\"", optarg);
			have_to = true;
			break;
		default:
			return usage_error("gc", "bad option");
		}
	}
	if (optind < argc)
		return usage_error("gc", "unexpected argument \"%s\"", argv[optind]);
	req = json_pack("{s:s}", "op", "gc");
	if (!req)
		return EXIT_FAILED;
	if (have_to)
		json_object_set_new(req, "to_bytes", json_integer((json_int_t)to));
	if (control_call(req, &a) < 0)
		return EXIT_FAILED;
	if (!json_is_true(json_object_get(a, "ok"))) {
		control_failure("gc", a);
		return EXIT_FAILED;
	}
	return print_removal(a);
}

/* pullfsctl rm: images out of the cache, through the control socket. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pullfsctl.h"
#include "units.h"

void rm_usage(FILE *f)
{
	fputs("Usage: pullfsctl [-m MOUNT] rm REFERENCE...\n"
	      "\n"
	      "Remove images from the cache, with the layers no other cached image\n"
	      "uses.  Refused (EBUSY) as a whole, removing nothing, when one of them has\n"
	      "open files or a pull in flight.  A later lookup pulls the image again.\n"
	      "Asks the control socket (op \"rm\"), which is for root.\n"
	      "\n"
	      "Options:\n"
	      "  -h, --help     show this help\n",
	      f);
}

int print_removal(const json_t *a)
{
	const json_t *removed = json_object_get(a, "removed"), *v;
	char freed[32];
	size_t i;

	json_array_foreach(removed, i, v) if (json_is_string(v))
		printf("removed %s\n", esc(json_string_value(v)));
	format_size(jnum(a, "freed_bytes"), freed, sizeof(freed));
	printf("%zu image%s removed, %s freed\n", json_array_size(removed),
	       json_array_size(removed) == 1 ? "" : "s", freed);
	return 0;
}

int cmd_rm(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *req = NULL, *a = NULL;
	json_t *refs;
	int c;

	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			rm_usage(stdout);
			return 0;
		default:
			return usage_error("rm", "bad option");
		}
	}
	if (optind >= argc)
		return usage_error("rm", "rm needs at least one REFERENCE");
	refs = json_array();
	req = json_pack("{s:s, s:o}", "op", "rm", "references", refs);
	if (!req)
		return EXIT_FAILED;
	for (int i = optind; i < argc; i++)
		json_array_append_new(refs, json_string(argv[i]));
	if (control_call(req, &a) < 0)
		return EXIT_FAILED;
	if (!json_is_true(json_object_get(a, "ok"))) {
		control_failure("rm", a);
		return EXIT_FAILED;
	}
	return print_removal(a);
}

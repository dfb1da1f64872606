/* pullfsctl ls: the cached images of the status document as a table,
 * least recently used last. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pullfsctl.h"
#include "units.h"

void ls_usage(FILE *f)
{
	fputs("Usage: pullfsctl [-m MOUNT] ls [--json] [--no-trunc]\n"
	      "\n"
	      "List the images in the cache, least recently used last:\n"
	      "REFERENCE, DIGEST (of the manifest, its first 12 hex digits unless\n"
	      "--no-trunc), SIZE ON DISK (bytes its unpacked layers and its blobs\n"
	      "take in the cache; a layer shared by two images counts for both; not\n"
	      "the download size that inspect and the Pulled event give), LAST USED\n"
	      "(how long ago), IN USE (open files or held by the kernel) and PINNED\n"
	      "(never removed by garbage collection).\n"
	      "\n"
	      "Options:\n"
	      "      --json     the \"images\" array of the status document, as JSON\n"
	      "      --no-trunc show whole digests\n"
	      "  -h, --help     show this help\n",
	      f);
}

static int by_last_used(const void *a, const void *b)
{
	const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
	const char *tx = jstr(x, "last_used"), *ty = jstr(y, "last_used");
	int c = strcmp(ty ? ty : "", tx ? tx : "");

	if (c)
		return c;
	return strcmp(jstr(x, "reference") ? jstr(x, "reference") : "",
		      jstr(y, "reference") ? jstr(y, "reference") : "");
}

int cmd_ls(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },
		{ "no-trunc", no_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *st = NULL;
	_cleanup_table_ struct table *t = NULL;
	_cleanup_free_ json_t **rows = NULL;
	json_t *images, *im;
	bool json = false, no_trunc = false;
	double now = now_realtime();
	size_t i, n;
	int c;

	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			ls_usage(stdout);
			return 0;
		case 'j':
			json = true;
			break;
		case 'n':
			no_trunc = true;
			break;
		default:
			return usage_error("ls", "bad option");
		}
	}
	if (optind < argc)
		return usage_error("ls", "unexpected argument \"%s\"", argv[optind]);
	if (status_load(&st) < 0)
		return EXIT_FAILED;
	images = json_object_get(st, "images");
	if (!json_is_array(images))
		images = NULL;
	if (json) {
		json_dumpf(images ? images : json_array(), stdout, JSON_INDENT(2));
		putchar('\n');
		return 0;
	}
	n = images ? json_array_size(images) : 0;
	rows = calloc(n + 1, sizeof(*rows));
	t = table_new(6, "", "", "", "", "", "");
	if (!rows || !t)
		return EXIT_FAILED;
	json_array_foreach(images, i, im) rows[i] = im;
	qsort(rows, n, sizeof(*rows), by_last_used);
	table_add(t, (const char *const[]){ "REFERENCE", "DIGEST", "SIZE ON DISK", "LAST USED",
					    "IN USE", "PINNED" });
	for (i = 0; i < n; i++) {
		char size[32], age[64], shortdigest[32];
		const char *digest = jstr(rows[i], "digest");
		const json_t *in_use = json_object_get(rows[i], "in_use");
		const json_t *pinned = json_object_get(rows[i], "pinned");

		format_size(jnum(rows[i], "size"), size, sizeof(size));
		format_age(jstr(rows[i], "last_used"), now, age, sizeof(age));
		/* Like docker's IMAGE ID: 12 hex digits are enough to tell
		 * images apart on one node. */
		if (digest && !no_trunc && !strncmp(digest, "sha256:", 7) && strlen(digest) > 19) {
			snprintf(shortdigest, sizeof(shortdigest), "%.19s", digest);
			digest = shortdigest;
		}
		table_add(t,
			  (const char *const[]){ jstr(rows[i], "reference"), digest ? digest : "-",
						 size, age, json_is_true(in_use) ? "yes" : "no",
						 json_is_true(pinned) ? "yes" : "no" });
	}
	table_print(t, stdout);
	return 0;
}

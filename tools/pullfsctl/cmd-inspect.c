/* pullfsctl inspect: what the cache knows of one image, from the control
 * socket. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pullfsctl.h"
#include "units.h"

void inspect_usage(FILE *f)
{
	fputs("Usage: pullfsctl [-m MOUNT] inspect [--json] REFERENCE\n"
	      "\n"
	      "Show what the cache knows of one image (it is not pulled): manifest\n"
	      "digest, the index it was picked from, platform, media type, download size\n"
	      "(config and compressed layers as the manifest gives them, what the Pulled\n"
	      "event counts; ls shows the size on disk), its layers with digests,\n"
	      "compressed sizes and media types, and from its config the\n"
	      "entrypoint, command, working directory, user, environment and labels.\n"
	      "Asks the control socket (op \"inspect\"), which is for root.\n"
	      "\n"
	      "Options:\n"
	      "      --json     the daemon's answer as JSON (with the whole image config)\n"
	      "  -h, --help     show this help\n",
	      f);
}

static void print_string_array(const char *label, const json_t *a)
{
	_cleanup_free_ char *s = NULL;

	if (!a || json_is_null(a))
		return;
	/* (ASCII only: no control character or bidirectional override) */
	s = json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
	printf("%-12s%s\n", label, s ? s : "?");
}

int cmd_inspect(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *req = NULL, *a = NULL;
	_cleanup_table_ struct table *t = NULL;
	const json_t *layers, *l, *cfg, *cc, *env, *labels, *v;
	bool json = false;
	char size[32];
	const char *key;
	size_t i;
	int c;

	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			inspect_usage(stdout);
			return 0;
		case 'j':
			json = true;
			break;
		default:
			return usage_error("inspect", "bad option");
		}
	}
	if (argc - optind != 1)
		return usage_error("inspect", "inspect takes one REFERENCE");
	req = json_pack("{s:s, s:s}", "op", "inspect", "reference", argv[optind]);
	if (!req || control_call(req, &a) < 0)
		return EXIT_FAILED;
	if (!json_is_true(json_object_get(a, "ok"))) {
		control_failure("inspect", a);
		return EXIT_FAILED;
	}
	json_object_del(a, "ok");
	if (json) {
		json_dumpf(a, stdout, JSON_INDENT(2));
		putchar('\n');
		return 0;
	}
	format_size(jnum(a, "size"), size, sizeof(size));
	printf("%-12s%s\n",
	       "Reference:", esc(jstr(a, "reference") ? jstr(a, "reference") : argv[optind]));
	printf("%-12s%s\n", "Digest:", esc(jstr(a, "digest") ? jstr(a, "digest") : "-"));
	if (jstr(a, "index_digest"))
		printf("%-12s%s\n", "Index:", esc(jstr(a, "index_digest")));
	printf("%-12s%s\n", "Platform:", esc(jstr(a, "platform") ? jstr(a, "platform") : "-"));
	printf("%-12s%s\n",
	       "Media type:", esc(jstr(a, "media_type") ? jstr(a, "media_type") : "-"));
	printf("%-12s%s (download: config and compressed layers; ls shows the size on disk)\n",
	       "Size:", size);
	cfg = json_object_get(a, "config");
	cc = json_object_get(cfg, "config");
	if (jstr(cfg, "created"))
		printf("%-12s%s\n", "Created:", esc(jstr(cfg, "created")));
	print_string_array("Entrypoint:", json_object_get(cc, "Entrypoint"));
	print_string_array("Cmd:", json_object_get(cc, "Cmd"));
	if (jstr(cc, "WorkingDir") && *jstr(cc, "WorkingDir"))
		printf("%-12s%s\n", "WorkingDir:", esc(jstr(cc, "WorkingDir")));
	if (jstr(cc, "User") && *jstr(cc, "User"))
		printf("%-12s%s\n", "User:", esc(jstr(cc, "User")));
	env = json_object_get(cc, "Env");
	if (json_array_size(env)) {
		printf("Env:\n");
		json_array_foreach(env, i, v) if (json_is_string(v))
			printf("  %s\n", esc(json_string_value(v)));
	}
	labels = json_object_get(cc, "Labels");
	if (json_object_size(labels)) {
		printf("Labels:\n");
		json_object_foreach((json_t *)labels, key, v) printf(
			"  %s=%s\n", esc(key), esc(json_is_string(v) ? json_string_value(v) : ""));
	}
	layers = json_object_get(a, "layers");
	printf("Layers:\n");
	t = table_new(3, "", "", "");
	if (!t)
		return EXIT_FAILED;
	table_add(t, (const char *const[]){ "  DIGEST", "COMPRESSED", "MEDIA TYPE" });
	json_array_foreach(layers, i, l)
	{
		_cleanup_free_ char *d = NULL;
		format_size(jnum(l, "size"), size, sizeof(size));
		if (asprintf(&d, "  %s", jstr(l, "digest") ? jstr(l, "digest") : "-") < 0)
			return EXIT_FAILED;
		table_add(t, (const char *const[]){ d, size, jstr(l, "media_type") });
	}
	table_print(t, stdout);
	return 0;
}

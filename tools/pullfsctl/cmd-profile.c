/* pullfsctl profile: export a start profile from this node's cache, or
 * import one recorded on another node (docs/profiles.md), over the
 * control socket. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fileio.h"
#include "pullfsctl.h"

/* What an import reads from its input at most: a profile is smaller
 * (the daemon refuses more than 160 KiB), so more is refused here. */
#define PROFILE_INPUT_MAX (192u << 10)

void profile_usage(FILE *f)
{
	fputs("Usage: pullfsctl [-m MOUNT] profile export REFERENCE >FILE\n"
	      "       pullfsctl [-m MOUNT] profile import REFERENCE <FILE\n"
	      "\n"
	      "A start profile lists the files the first users of an image opened in\n"
	      "the first seconds after its first lookup; pullfs records one per image\n"
	      "digest when an image starts lazily, and prefetches those files at the\n"
	      "next cold lookup of the image.  export writes the stored profile of\n"
	      "REFERENCE's image to standard output; import reads one from standard\n"
	      "input and stores it for the image it names, so that this node's first\n"
	      "start of the image prefetches what another node's start read.\n"
	      "REFERENCE, when cached, must be that image.  A malformed profile is\n"
	      "refused with the line and the reason.  Asks the control socket (ops\n"
	      "\"profile-export\" and \"profile-import\"), which is for root.\n"
	      "\n"
	      "Options:\n"
	      "  -h, --help     show this help\n",
	      f);
}

static int profile_export(const char *ref)
{
	_cleanup_json_ json_t *req = NULL, *a = NULL;
	const json_t *text;

	req = json_pack("{s:s, s:s}", "op", "profile-export", "reference", ref);
	if (!req || control_call(req, &a) < 0)
		return EXIT_FAILED;
	if (!json_is_true(json_object_get(a, "ok"))) {
		control_failure("profile export", a);
		return EXIT_FAILED;
	}
	text = json_object_get(a, "profile");
	if (!json_is_string(text)) {
		err_msg("profile export: the daemon's answer has no profile");
		return EXIT_FAILED;
	}
	if (write_full(STDOUT_FILENO, json_string_value(text), json_string_length(text)) < 0) {
		err_msg("profile export: cannot write the profile: %m");
		return EXIT_FAILED;
	}
	return 0;
}

static int profile_import(const char *ref)
{
	_cleanup_json_ json_t *req = NULL, *a = NULL;
	_cleanup_free_ char *buf = NULL;
	size_t len;
	int r;

	if (isatty(STDIN_FILENO))
		return usage_error("profile", "import reads the profile from standard input");
	r = read_full(STDIN_FILENO, PROFILE_INPUT_MAX, &buf, &len);
	if (r == -EFBIG || r == -E2BIG) {
		err_msg("profile import: the input is over %u KiB: not a profile",
			PROFILE_INPUT_MAX >> 10);
		return EXIT_FAILED;
	}
	if (r < 0) {
		err_msg("profile import: cannot read standard input: %s", strerror(-r));
		return EXIT_FAILED;
	}
	req = json_pack("{s:s, s:s, s:s%}", "op", "profile-import", "reference", ref, "profile",
			buf, len);
	if (!req) {
		err_msg("profile import: the input is not text (a profile is ASCII)");
		return EXIT_FAILED;
	}
	if (control_call(req, &a) < 0)
		return EXIT_FAILED;
	if (!json_is_true(json_object_get(a, "ok"))) {
		control_failure("profile import", a);
		return EXIT_FAILED;
	}
	printf("imported the start profile of %s: %.0f files, %.0f bytes\n", esc(jstr(a, "digest")),
	       jnum(a, "files"), jnum(a, "bytes"));
	return 0;
}

int cmd_profile(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			profile_usage(stdout);
			return 0;
		default:
			return usage_error("profile", "bad option");
		}
	}
	if (argc - optind != 2)
		return usage_error("profile", "profile takes export or import and one REFERENCE");
	if (!strcmp(argv[optind], "export"))
		return profile_export(argv[optind + 1]);
	if (!strcmp(argv[optind], "import"))
		return profile_import(argv[optind + 1]);
	return usage_error("profile", "unknown action \"%s\" (export or import)", argv[optind]);
}

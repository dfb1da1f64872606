/* pullfsctl events: the events log as a kubectl-style table, or as the
 * JSON lines themselves, optionally followed. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pullfsctl.h"
#include "units.h"

void events_usage(FILE *f)
{
	fputs("Usage: pullfsctl [-m MOUNT] events [-f] [--image REF] [--reason R]\n"
	      "                 [--since T] [--json] [--log FILE]\n"
	      "\n"
	      "Show the events log, one event per line, the way `kubectl get events`\n"
	      "does: LAST SEEN (how long ago), TYPE (Normal or Warning), REASON\n"
	      "(Pulling, Pulled, Failed, BackOff, ErrImageNeverPull, InspectFailed),\n"
	      "OBJECT (image/REFERENCE) and MESSAGE; ERRNO is added to a failure's\n"
	      "message.  The log is the one the daemon names in its status, after\n"
	      "the files it was rotated to (LOG.N, the oldest, to LOG.1).  Control\n"
	      "characters in what the log says are shown escaped (\\n, \\x1b).\n"
	      "\n"
	      "Options:\n"
	      "  -f, --follow       keep printing events as they are written, across log\n"
	      "                     rotation and truncation (like tail -F)\n"
	      "      --image REF    only events of this image; REF without tag or digest\n"
	      "                     means every tag of that repository\n"
	      "      --reason R     only events with this reason (case does not matter)\n"
	      "      --since T      only events since T: a duration back from now (30s,\n"
	      "                     10m, 1h30m, 2d) or a time (2026-11-22T04:36:30Z,\n"
	      "                     2026-11-22)\n"
	      "      --json         the matching events as they are in the log (JSON Lines)\n"
	      "      --log FILE     read FILE instead of the log the daemon names (no\n"
	      "                     daemon needed, e.g. for a rotated log)\n"
	      "  -h, --help         show this help\n",
	      f);
}

static void event_cells(const json_t *ev, double now, char *age, size_t agelen, char **object,
			char **message)
{
	const char *msg = jstr(ev, "message"), *en = jstr(ev, "errno");

	format_age(jstr(ev, "time"), now, age, agelen);
	/* kubectl prints "5m", not "5m ago", in its LAST SEEN column. */
	if (strlen(age) > 4 && !strcmp(age + strlen(age) - 4, " ago"))
		age[strlen(age) - 4] = '\0';
	if (asprintf(object, "image/%s", jstr(ev, "image") ? jstr(ev, "image") : "-") < 0)
		*object = NULL;
	if (en && (!msg || !strstr(msg, en))) {
		if (asprintf(message, "%s (%s)", msg ? msg : "", en) < 0)
			*message = NULL;
	} else {
		*message = strdup(msg ? msg : "");
	}
	/* (one event, one line: the table shows a newline escaped) */
}

static int event_table_add(struct table *t, const json_t *ev, double now)
{
	_cleanup_free_ char *object = NULL, *message = NULL;
	char age[64];

	event_cells(ev, now, age, sizeof(age), &object, &message);
	return table_add(t, (const char *const[]){ age, jstr(ev, "type"), jstr(ev, "reason"),
						   object, message });
}

/* The whole lines of f that match, printed (json) or added to t; a line
 * still being written is left for -f. */
static void read_events(FILE *f, const struct event_filter *filt, bool json, struct table *t,
			double now)
{
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	ssize_t n;

	while ((n = getline(&line, &cap, f)) > 0) {
		json_t *ev;
		if (line[n - 1] != '\n') {
			fseeko(f, -n, SEEK_CUR);
			break;
		}
		line[n - 1] = '\0';
		ev = event_parse(line);
		if (!ev)
			continue;
		if (event_matches(ev, filt)) {
			if (json)
				printf("%s\n", line);
			else
				event_table_add(t, ev, now);
		}
		json_decref(ev);
	}
}

struct follow_out {
	bool json;
	const struct table *t; /* the widths of the rows printed so far */
};

/* events -f: each new event as it comes, in the columns of the table
 * printed before, or as it is in the log. */
static void follow_line(const char *line, const json_t *ev, void *userdata)
{
	const struct follow_out *out = userdata;

	if (out->json) {
		fputs(line, stdout);
		putchar('\n');
	} else {
		_cleanup_free_ char *object = NULL, *message = NULL;
		char age[64];

		event_cells(ev, now_realtime(), age, sizeof(age), &object, &message);
		table_print_row(out->t,
				(const char *const[]){ age, jstr(ev, "type"), jstr(ev, "reason"),
						       object, message },
				stdout);
	}
	fflush(stdout);
}

int cmd_events(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "follow", no_argument, NULL, 'f' },
		{ "image", required_argument, NULL, 'i' },
		{ "reason", required_argument, NULL, 'r' },
		{ "since", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "log", required_argument, NULL, 'l' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *st = NULL;
	_cleanup_table_ struct table *t = NULL;
	_cleanup_free_ char *image = NULL;
	_cleanup_fclose_ FILE *f = NULL;
	struct event_filter filt = { 0 };
	const char *log = NULL;
	bool follow = false, json = false;
	double now = now_realtime();
	int c, fd = -1;

	while ((c = getopt_long(argc, argv, "+hf", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			events_usage(stdout);
			return 0;
		case 'f':
			follow = true;
			break;
		case 'i': {
			_cleanup_reference_ struct reference *r = NULL;
			if (reference_parse(optarg, 0, &r) < 0)
				return usage_error("events", "invalid reference \"%s\"", optarg);
			free(image);
			if (r->tag || r->digest) {
				image = reference_to_string(r);
				filt.image_exact = true;
			} else {
				image = reference_repository(r);
				filt.image_exact = false;
			}
			if (!image)
				return EXIT_FAILED;
			filt.image = image;
			break;
		}
		case 'r':
			filt.reason = optarg;
			break;
		case 's': {
			double d;
			if (parse_duration(optarg, &d) == 0)
				filt.since = now - d;
			else if (parse_rfc3339(optarg, &d) == 0)
				filt.since = d;
			else
				return usage_error(
					"events",
					"invalid --since \"%s\" (a duration like 10m or a time like 2026-11-22T04:36:30Z)",
					optarg);
			break;
		}
		case 'j':
			json = true;
			break;
		case 'l':
			log = optarg;
			break;
		default:
			return usage_error("events", "bad option");
		}
	}
	if (optind < argc)
		return usage_error("events", "unexpected argument \"%s\"", argv[optind]);
	if (!log) {
		if (status_load(&st) < 0)
			return EXIT_FAILED;
		log = jstr(st, "events_log");
		if (!log) {
			err_msg("the daemon at \"%s\" writes no events log", mount_dir());
			return EXIT_FAILED;
		}
	}
	t = table_new(5, "LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE");
	if (!t)
		return EXIT_FAILED;
	table_add(t, (const char *const[]){ "LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE" });

	f = fopen(log, "re");
	if (!f && (errno != ENOENT || !follow)) {
		if (errno == ENOENT && !json) {
			/* No event yet is not an error. */
			if (!follow)
				return 0;
		}
		err_msg("cannot read the events log \"%s\": %s", log, strerror(errno));
		return EXIT_FAILED;
	}
	/* the history the daemon rotated away first, the oldest first */
	for (unsigned i = events_rotated_count(log); i > 0; i--) {
		_cleanup_free_ char *old = NULL;
		_cleanup_fclose_ FILE *of = NULL;

		if (asprintf(&old, "%s.%u", log, i) < 0)
			return EXIT_FAILED;
		of = fopen(old, "re");
		if (of)
			read_events(of, &filt, json, t, now);
	}
	if (f)
		read_events(f, &filt, json, t, now);
	if (!json && (t->nrows > 1 || follow))
		table_print(t, stdout);
	if (!json && t->nrows == 1 && !follow)
		fprintf(stderr, "No events found.\n");
	fflush(stdout);
	if (!follow)
		return 0;
	if (f) {
		fd = dup(fileno(f));
		if (fd >= 0)
			lseek(fd, ftello(f), SEEK_SET);
	}
	{
		struct follow_out out = { .json = json, .t = t };
		int r = events_follow(log, fd, &filt, follow_line, &out);
		err_msg("following \"%s\": %s", log, strerror(-r));
	}
	return EXIT_FAILED;
}

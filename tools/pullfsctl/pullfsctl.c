/* pullfsctl: the operator's command line for a running pullfs.  It reads
 * MOUNT/.pullfs/status and the events log, pulls by looking images up
 * through the mount (so the daemon's policy, back-off and throttle apply),
 * and asks the control socket for the operations that change the cache.
 * This file has the global options and the table of verbs; each verb is
 * in its cmd-*.c. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "pullfsctl.h"

struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	void (*help)(FILE *f);
	const char *synopsis; /* for the list of commands in --help */
	const char *summary;
};

static int cmd_help(int argc, char **argv);
static void usage(FILE *f);

static const struct command commands[] = {
	{ "pull", cmd_pull, pull_usage, "pull REFERENCE...",
	  "pull images through the mount, with progress" },
	{ "ls", cmd_ls, ls_usage, "ls [--json]",
	  "list cached images (digest, size, last use, pinned)" },
	{ "inspect", cmd_inspect, inspect_usage, "inspect REFERENCE",
	  "show an image's digest, platform, layers and config" },
	{ "rm", cmd_rm, rm_usage, "rm REFERENCE...", "remove images from the cache" },
	{ "gc", cmd_gc, gc_usage, "gc [--to BYTES]", "remove least recently used images now" },
	{ "upgrade", cmd_upgrade, upgrade_usage, "upgrade",
	  "replace the serving process by the installed binary, mount kept" },
	{ "status", cmd_status, status_usage, "status [--json]",
	  "pulls in flight, back-off, queues, cache usage" },
	{ "events", cmd_events, events_usage, "events [-f] [--image REF] [--reason R] [--since T]",
	  "the events log, like `kubectl get events`" },
	{ "profile", cmd_profile, profile_usage, "profile export|import REFERENCE",
	  "export a start profile to stdout, or import one from stdin" },
	{ "help", cmd_help, usage, "help [COMMAND]", "show this help, or a command's" },
};

static void usage(FILE *f)
{
	fputs("Usage: pullfsctl [-m MOUNT] COMMAND [ARGS...]\n"
	      "Control a running pullfs: pre-pull images, see what is cached, why a\n"
	      "pull failed and how pulls progress, and clean up the cache.\n"
	      "\n"
	      "Commands:\n",
	      f);
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
		const struct command *c = &commands[i];

		/* A synopsis too long for its column has the summary under it. */
		if (strlen(c->synopsis) < 20)
			fprintf(f, "  %-20s%s\n", c->synopsis, c->summary);
		else
			fprintf(f, "  %s\n  %-20s%s\n", c->synopsis, "", c->summary);
	}
	fputs("\n"
	      "Options:\n"
	      "  -m, --mount MOUNT   where pullfs is mounted (default: $PULLFS_MOUNT,\n"
	      "                      else " DEFAULT_MOUNT ")\n"
	      "  -s, --socket PATH   the control socket (default: the one the daemon\n"
	      "                      names in MOUNT/.pullfs/status)\n"
	      "  -h, --help          show this help\n"
	      "  -V, --version       show the version\n"
	      "\n"
	      "pull, ls, status and events read the mount and work for every user the\n"
	      "mount lets in; inspect, rm and gc use the control socket, root only.\n"
	      "`pullfsctl COMMAND --help` describes each command.  Exit status: 0 on\n"
	      "success, 1 on failure, 2 on bad usage.\n",
	      f);
}

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		if (!strcmp(commands[i].name, name))
			return &commands[i];
	return NULL;
}

/* "help" alone is --help; "help COMMAND" is "COMMAND --help". */
static int cmd_help(int argc, char **argv)
{
	const struct command *cmd;

	if (argc < 2) {
		usage(stdout);
		return 0;
	}
	cmd = find_command(argv[1]);
	if (!cmd)
		return usage_error(NULL, "unknown command \"%s\"", argv[1]);
	cmd->help(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ "mount", required_argument, NULL, 'm' },
		{ "socket", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 },
	};
	const struct command *cmd;
	int c;

	arg_mount = getenv("PULLFS_MOUNT");
	if (!arg_mount || !*arg_mount)
		arg_mount = DEFAULT_MOUNT;
	/* "+": stop at the command, whose options are its own. */
	while ((c = getopt_long(argc, argv, "+hVm:s:", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("pullfsctl %s\n", PULLFS_VERSION);
			return 0;
		case 'm':
			arg_mount = optarg;
			break;
		case 's':
			arg_socket = optarg;
			break;
		default:
			return usage_error(NULL, "bad option");
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	cmd = find_command(argv[optind]);
	if (!cmd)
		return usage_error(NULL, "unknown command \"%s\"", argv[optind]);
	argc -= optind;
	argv += optind;
	optind = 1;
	return cmd->run(argc, argv);
}

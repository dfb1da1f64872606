/* The daemon's options, each described once in a table (options.c) that
 * the command line, "-o key=value" (mount(8), fstab) and the config file
 * all read, and that --help is printed from. */
#pragma once

#include <stdbool.h>

#include "fs.h"
#include "manager.h"

struct registry_hosts;

/* What the options set.  The manager's and the filesystem's options are
 * filled in place, ready to hand over; the strings and arrays they point
 * to belong to the settings. */
struct settings {
	struct manager_options mo;
	struct fs_options fo;
	bool foreground;
	bool supervise;		      /* supervisor.h; the default */
	bool no_supervise;	      /* ... unless this */
	char *auth_file;	      /* NULL: docker's default place */
	char *snapshotter_socket;     /* NULL: no snapshotter */
	char *control_socket;	      /* set by settings_parse() */
	char *fuse_opts;	      /* comma-joined -o values that are FUSE's */
	char *mountpoint;	      /* absolute */
	struct registry_hosts *hosts; /* [registry "..."] sections of the config */
};

/* Fills s (zeroed by the caller) from the config file named by --config
 * and the command line, which wins, then checks what no single option
 * can and fills in the defaults that depend on others (the cache
 * directory, the control socket).  Prints the help or the version and
 * exits 0 when asked to; prints one line and exits 2 on bad usage. */
void settings_parse(struct settings *s, int argc, char **argv);

/* Frees what the options allocated, the registry hosts too: only once
 * the manager, which borrows them, is gone. */
void settings_done(struct settings *s);

/* What the files of pullfsctl share: exit codes, messages and tables
 * (output.c), the mount and the control socket (client.c), the events
 * log (evlog.c), the progress of pulls (progress.c) and one entry point
 * per verb (cmd-*.c).  The contract with the daemon is docs/control.md. */
#pragma once

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "macro.h"
#include "reference.h"

#define EXIT_FAILED 1
#define EXIT_USAGE 2

#define DEFAULT_MOUNT "/run/pullfs"
#define FUSE_SUPER_MAGIC 0x65735546
/* Caps on what the daemon may send us: a status document or a control
 * answer larger than this is not something we want to hold. */
#define STATUS_MAX (64u << 20)
#define EVENT_LINE_MAX (1u << 20)

/* jansson's own json_decrefp() is declared only with its json_auto_t. */
static inline void json_unrefp(json_t **p)
{
	json_decref(*p);
}
DEFINE_TRIVIAL_CLEANUP_FUNC(FILE *, fclose);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct reference *, reference_free);
#define _cleanup_json_ _cleanup_(json_unrefp)
#define _cleanup_fclose_ _cleanup_(fclosep)
#define _cleanup_reference_ _cleanup_(reference_freep)

/* ---------------------------------------------------------- output.c */

/* Everything pullfsctl prints for a human goes through these: names and
 * messages come from any user (an image name, a registry's error) and a
 * terminal must not act on them.  C0 and C1 controls, DEL, bidirectional
 * overrides and bytes that are not UTF-8 are shown as \n, \r, \t,
 * \xHH or \uHHHH, a backslash as two; the rest as it is.  JSON output
 * is JSON and does not use them. */
/* The escaped copy of s (NULL: ""), caller frees; NULL without memory. */
char *text_escape(const char *s);
/* The same, for the arguments of a printf: the copy lives until the 16th
 * call after this one on the same thread ("?" without memory). */
const char *esc(const char *s);

/* "pullfsctl: MESSAGE" on stderr, after what stdout still holds. */
void err_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "pullfsctl: MESSAGE (see pullfsctl CMD --help)"; returns EXIT_USAGE.
 * cmd is NULL for the global options. */
int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

double now_realtime(void);
double now_monotonic(void);
/* "2026-11-22T04:36:30.326Z", with a numeric offset or without fraction,
 * or a bare date: seconds since the epoch.  Returns 0 or -EINVAL. */
int parse_rfc3339(const char *s, double *ret);
/* "5m ago" for an RFC 3339 time before now; the text itself when it
 * cannot be read, "-" for NULL. */
void format_age(const char *rfc3339, double now, char *buf, size_t len);

/* Rows of strings printed in aligned columns, kubectl-style: upper-case
 * headers, three spaces between columns, the last column not padded. */
struct table {
	size_t ncols;
	size_t nrows;
	char **cells;
	size_t *width;
};

/* A table of ncols columns, each at least as wide as the header text
 * given for it (the header row itself is the caller's first table_add).
 * NULL without memory. */
struct table *table_new(size_t ncols, ...);
void table_free(struct table *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct table *, table_free);
#define _cleanup_table_ _cleanup_(table_freep)
/* Copies a row of t->ncols cells (NULL prints as empty).  0 or -ENOMEM. */
int table_add(struct table *t, const char *const *cells);
/* One row in the table's widths, without storing it (for -f output). */
void table_print_row(const struct table *t, const char *const *cells, FILE *f);
void table_print(const struct table *t, FILE *f);

/* Members of a JSON object: a string or NULL, a number or 0, whether it
 * is a number. */
const char *jstr(const json_t *o, const char *key);
double jnum(const json_t *o, const char *key);
bool jhas(const json_t *o, const char *key);

/* ---------------------------------------------------------- client.c */

/* -m and -s: the mount (never NULL once main() has run) and the control
 * socket (NULL: the one the status document names). */
extern const char *arg_mount;
extern const char *arg_socket;

const char *mount_dir(void);
/* Explains, once, on stderr why the mount cannot be talked to. */
void explain_mount_error(const char *what, int r);
/* The status document of the daemon at mount_dir(); caller owns it.
 * Prints the reason on failure. */
int status_load(json_t **ret);
/* The same, quietly: NULL when it cannot be read. */
json_t *status_try(void);
/* The entry of reference in one of the status's arrays ("images",
 * "backoff"), borrowed, or NULL. */
const json_t *status_entry(const json_t *status, const char *array, const char *reference);
/* One request on the control socket: one line of JSON out, one back.
 * Blocks until the daemon answers.  Prints the reason when the daemon
 * cannot be reached; an answer with "ok": false is returned as it is. */
int control_call(json_t *req, json_t **ret);
/* Prints the failure of an answer with "ok": false and returns its errno
 * as a negative number. */
int control_failure(const char *cmd, const json_t *a);
/* Canonical form of a reference as the daemon names it; a reference
 * with neither tag nor digest gets "latest" when default_tag. */
int canonical_reference(const char *s, bool default_tag, char **ret);

/* ----------------------------------------------------------- evlog.c */

struct event_filter {
	char *image; /* canonical reference, or repository when !image_exact */
	bool image_exact;
	const char *reason;
	double since; /* epoch seconds; 0: no limit */
};

bool event_matches(const json_t *ev, const struct event_filter *f);
/* One line of the log as a JSON object (caller owns it), or NULL. */
json_t *event_parse(const char *line);
/* The latest failure-like event of image in the log at path (or in the
 * file it was last rotated to): caller owns it; NULL when there is none. */
json_t *events_last_failure(const char *path, const char *image);
/* How many files the log at path was rotated to: PATH.1 to PATH.N. */
unsigned events_rotated_count(const char *path);

/* Called by events_follow() for each event that matches: the line as it
 * is in the log and its parse (borrowed). */
typedef void (*event_fn)(const char *line, const json_t *ev, void *userdata);
/* Follows path like tail -F from the offset of fd (-1 when the log did
 * not exist yet; fd is the follower's from then on).  Never returns
 * except on error, with -errno. */
int events_follow(const char *path, int fd, const struct event_filter *f, event_fn fn,
		  void *userdata);

/* -------------------------------------------------------- progress.c */

enum job_phase {
	JOB_RUNNING,
	JOB_DONE,
};

/* One image of "pullfsctl pull", looked up by a thread of its own. */
struct job {
	const char *arg; /* as given */
	char *reference; /* canonical */
	char *path;	 /* MOUNT/images/<reference> */
	pthread_t thread;
	int phase; /* enum job_phase; written by the thread, atomically */
	int err;   /* negative errno of the lookup, valid once JOB_DONE */
	double started, finished;
	double started_real; /* wall clock, to compare with event times */

	/* From the latest status poll; main thread only. */
	bool seen;
	char state[16];
	double bytes_done, bytes_total, layers_done, layers_total;
	double rate, rate_bytes, rate_time;
	bool rate_measured; /* over a window of its own; until then, from the start */
	/* Plain-line mode: what was printed last. */
	char printed_state[16];
	double printed_layers, printed_time;
	bool reported;
	/* main thread: the lookup returned and the image is whole (or the
	 * lookup failed); until then a lazily started image is completing */
	bool settled;
	bool hurried; /* the daemon was told the image is waited for */
};

/* Whether the job is over: looked up and, for a lazy image, complete. */
static inline bool job_over(const struct job *j)
{
	return __atomic_load_n(&j->phase, __ATOMIC_ACQUIRE) == JOB_DONE && j->settled;
}
/* After the lookup: follows the completion of a lazily started image in
 * the status document; settles the job once the image is complete, or
 * fails it (-EIO) when its completion stopped. */
void job_follow_completion(struct job *j, const json_t *status, double now);

/* The thread of a job: stat(2) of its path, which pulls the image. */
void *job_run(void *p);
/* Takes the job's progress from a status document. */
void job_update(struct job *j, const json_t *status, double now);
/* The result part: "done sha256:… 1.0 MiB in 0.4s" or the failure. */
void job_result_text(const struct job *j, const json_t *status, char *buf, size_t len);
/* Redraws the n lines of a terminal in place; *drawn is how many lines
 * the last call drew. */
void draw_tty(struct job *jobs, size_t n, const json_t *status, size_t *drawn);
/* A line per job whose state changed, or every 5 s while downloading. */
void draw_plain(struct job *jobs, size_t n, double now);
/* Prints the failure of one job with the reason the daemon gave. */
void job_report_failure(const struct job *j, const json_t *status);

/* ------------------------------------------------------------- verbs */

/* Each verb takes its own argv (argv[0] is the verb) and returns the
 * exit status; its usage prints its --help. */
int cmd_pull(int argc, char **argv);
void pull_usage(FILE *f);
int cmd_ls(int argc, char **argv);
void ls_usage(FILE *f);
int cmd_inspect(int argc, char **argv);
void inspect_usage(FILE *f);
int cmd_rm(int argc, char **argv);
void rm_usage(FILE *f);
int cmd_gc(int argc, char **argv);
int cmd_upgrade(int argc, char **argv);
void upgrade_usage(FILE *f);
void gc_usage(FILE *f);
int cmd_status(int argc, char **argv);
void status_usage(FILE *f);
int cmd_events(int argc, char **argv);
void events_usage(FILE *f);
int cmd_profile(int argc, char **argv);
void profile_usage(FILE *f);

/* "removed REF" lines and a total, from the answer of rm or gc. */
int print_removal(const json_t *a);

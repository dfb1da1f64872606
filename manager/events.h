/* The events log: JSON Lines, one event per write(2) on an O_APPEND
 * descriptor, so that `tail -F` and concurrent readers never see half a
 * line.  This is data for operators, written by the manager; it is not a
 * debug log.  Credentials never reach it: callers pass only references,
 * digests and one-line reasons. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* The process whose file access caused an event. */
struct caller {
	pid_t pid;
	uid_t uid;
	gid_t gid;
	char comm[17]; /* "" when unknown */
};

/* Fills c->comm from /proc for c->pid (a read of /proc: callers on a hot
 * path leave it for when an event is written). */
void caller_name(struct caller *c);

enum event_type {
	EVENT_NORMAL,
	EVENT_WARNING,
};

struct event {
	enum event_type type;
	const char *reason;	     /* "Pulling", "Pulled", "Failed", ... */
	const char *image;	     /* canonical reference */
	const char *digest;	     /* NULL when unknown */
	const char *message;	     /* kubelet-style sentence */
	int err;		     /* 0, or the negative errno of a failure */
	const struct caller *caller; /* may be NULL */
	uint64_t bytes_saved;	     /* a partial pull's, written when not 0 */
};

struct events;

/* Opens (creating, mode 0640) path for appending.  path NULL: events are
 * dropped.  Returns 0 or -errno. */
int events_open(const char *path, struct events **ret);
void events_close(struct events *ev);

/* Asks for the file to be reopened before the next event is written (log
 * rotation).  Async-signal-safe: only sets a flag. */
void events_request_reopen(struct events *ev);

/* Writes one event line.  Thread-safe.  Failures to write are counted,
 * never fatal. */
void events_emit(struct events *ev, const struct event *e);

/* Formats realtime `ts` as RFC 3339 UTC with milliseconds into buf (at
 * least 32 bytes). */
void events_format_time(const struct timespec *ts, char *buf, size_t len);

/* The events log: JSON Lines, one event per write(2) on an O_APPEND
 * descriptor, so that `tail -F` and concurrent readers never see half a
 * line.  This is data for operators, written by the manager; it is not a
 * debug log.  Credentials never reach it: callers pass only references,
 * digests and one-line reasons.
 *
 * Two bounds keep it from filling a disk: the events a user other than
 * root causes are rate-limited per uid and reason (evlimit.h), the count
 * of those dropped said in the next one written or, once the limit lifts,
 * in an EventsSuppressed event; and the file is renamed to PATH.1 (PATH.2
 * and on moving up, the oldest dropped) before a line would take it past
 * its cap, a new PATH taking its place, as logrotate would do it. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "clock.h"

/* The process whose file access caused an event, or whose request to
 * containerd's snapshots socket did. */
struct caller {
	pid_t pid;
	uid_t uid;
	gid_t gid;
	char comm[17]; /* "" when unknown */
	/* A request of the snapshots socket (fs/snapshotter/): the key of
	 * the snapshot it prepares and the layer digest its labels name.
	 * Borrowed: the request waits for everything that writes its
	 * events.  NULL for a file access. */
	const char *snapshot;
	const char *layer;
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

/* Where a part of the manager below its top sends its events: the top
 * writes them to the log.  emit may be NULL (events are dropped). */
struct event_sink {
	void (*emit)(void *userdata, const struct event *e);
	void *userdata;
};

/* Formats the message (up to 1 KiB) and hands the event to s. */
void event_sendf(const struct event_sink *s, enum event_type type, const char *reason,
		 const char *image, const char *digest, int err, const struct caller *who,
		 const char *fmt, ...) __attribute__((format(printf, 8, 9)));
void event_vsendf(const struct event_sink *s, enum event_type type, const char *reason,
		  const char *image, const char *digest, int err, const struct caller *who,
		  const char *fmt, va_list ap) __attribute__((format(printf, 8, 0)));

struct events_options {
	const char *path; /* NULL: events are dropped */
	/* The file is rotated before a line would take it past this; 0:
	 * never (an outside logrotate and SIGHUP only). */
	uint64_t max_bytes;
	unsigned keep; /* rotated files kept, PATH.1 to PATH.keep; 0: 1 */
	/* Events a user other than root may cause per reason: burst at
	 * once, then per_minute a minute.  burst 0: no limit. */
	unsigned burst;
	unsigned per_minute;	   /* 0: EVENTS_DEFAULT_PER_MINUTE */
	const struct clock *clock; /* of the limit; NULL: CLOCK_MONOTONIC */
};

#define EVENTS_DEFAULT_MAX_BYTES (10u << 20)
#define EVENTS_DEFAULT_BURST 20
#define EVENTS_DEFAULT_PER_MINUTE 30

struct events;

/* Opens (creating, mode 0640) o->path for appending.  Returns 0 or
 * -errno. */
int events_open(const struct events_options *o, struct events **ret);
/* Writes the counts of dropped events that are still due, then closes. */
void events_close(struct events *ev);

/* Asks for the file to be reopened before the next event is written (log
 * rotation).  Async-signal-safe: only sets a flag. */
void events_request_reopen(struct events *ev);

/* Writes one event line, unless it is one too many of its user's (then
 * it is counted).  Thread-safe.  Failures to write are counted, never
 * fatal. */
void events_emit(struct events *ev, const struct event *e);

/* Writes an EventsSuppressed event for each user and reason whose limit
 * has lifted since events were dropped (events_emit does it too; this is
 * for a timer, so that the count comes when the user stops).
 * Thread-safe. */
void events_flush(struct events *ev);

/* Formats realtime `ts` as RFC 3339 UTC with milliseconds into buf (at
 * least 32 bytes). */
void events_format_time(const struct timespec *ts, char *buf, size_t len);

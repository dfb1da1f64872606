/* The events log, its rotation and its limits per user.  See events.h. */
#include "events.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "errname.h"
#include "evlimit.h"
#include "macro.h"

struct events {
	char *path;
	pthread_mutex_t lock; /* protects fd, limit and the rotation */
	int fd;
	volatile sig_atomic_t reopen;
	unsigned long write_errors;
	uint64_t max_bytes;
	unsigned keep;
	struct evlimit *limit; /* NULL: no limit */
	unsigned burst, per_minute;
};

static int open_log(const char *path)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);

	return fd < 0 ? negative_errno() : fd;
}

int events_open(const struct events_options *o, struct events **ret)
{
	struct events *ev = calloc(1, sizeof(*ev));

	if (!ev)
		return -ENOMEM;
	ev->fd = -1;
	pthread_mutex_init(&ev->lock, NULL);
	ev->max_bytes = o->max_bytes;
	ev->keep = o->keep ?: 1;
	ev->burst = o->burst;
	ev->per_minute = o->per_minute ?: EVENTS_DEFAULT_PER_MINUTE;
	if (o->burst) {
		ev->limit = evlimit_new(ev->burst, ev->per_minute, o->clock);
		if (!ev->limit) {
			events_close(ev);
			return -ENOMEM;
		}
	}
	if (o->path) {
		ev->path = strdup(o->path);
		if (!ev->path) {
			events_close(ev);
			return -ENOMEM;
		}
		int fd = open_log(o->path);
		if (fd < 0) {
			events_close(ev);
			return fd;
		}
		ev->fd = fd;
	}
	*ret = ev;
	return 0;
}

void events_request_reopen(struct events *ev)
{
	if (ev)
		ev->reopen = 1;
}

void events_format_time(const struct timespec *ts, char *buf, size_t len)
{
	struct tm tm;

	gmtime_r(&ts->tv_sec, &tm);
	snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts->tv_nsec / 1000000);
}

static int set_str(json_t *o, const char *k, const char *v)
{
	return v ? json_object_set_new(o, k, json_string(v)) : 0;
}

/* The line of an event, newline-terminated (caller frees), or NULL.
 * suppressed: the user's events of the same reason dropped before it.
 * An EventsSuppressed event (no caller: the daemon writes it) names the
 * user and reason it counts in suppressed_uid and suppressed_reason:
 * pid, uid and comm always come together, for the process that caused
 * an event. */
static char *event_line(const struct event *e, uint64_t suppressed, uid_t suppressed_uid,
			const char *suppressed_reason, size_t *ret_len)
{
	struct timespec now;
	char ts[40];
	json_t *o;
	char *line, *buf;
	size_t len;

	clock_gettime(CLOCK_REALTIME, &now);
	events_format_time(&now, ts, sizeof(ts));
	o = json_object();
	if (!o)
		return NULL;
	set_str(o, "time", ts);
	set_str(o, "type", e->type == EVENT_WARNING ? "Warning" : "Normal");
	set_str(o, "reason", e->reason);
	set_str(o, "image", e->image);
	set_str(o, "digest", e->digest);
	set_str(o, "message", e->message);
	if (e->err)
		set_str(o, "errno", errno_name(e->err));
	if (e->bytes_saved)
		json_object_set_new(o, "bytes_saved", json_integer((json_int_t)e->bytes_saved));
	if (suppressed)
		json_object_set_new(o, "suppressed", json_integer((json_int_t)suppressed));
	if (e->caller && e->caller->pid > 0) {
		json_object_set_new(o, "pid", json_integer(e->caller->pid));
		json_object_set_new(o, "uid", json_integer(e->caller->uid));
		set_str(o, "comm", e->caller->comm);
		set_str(o, "snapshot", e->caller->snapshot);
		set_str(o, "layer", e->caller->layer);
	}
	if (suppressed_uid != (uid_t)-1)
		json_object_set_new(o, "suppressed_uid", json_integer(suppressed_uid));
	set_str(o, "suppressed_reason", suppressed_reason);
	line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	if (!line)
		return NULL;
	/* One write(2) per line: the terminating NUL becomes the newline. */
	len = strlen(line);
	buf = realloc(line, len + 2);
	if (!buf) {
		free(line);
		return NULL;
	}
	buf[len] = '\n';
	buf[len + 1] = '\0';
	*ret_len = len + 1;
	return buf;
}

/* Renames PATH.(i-1) to PATH.i down to PATH to PATH.1: the oldest kept
 * is replaced, so keep files at most. */
static void shift_files(const struct events *ev)
{
	size_t n = strlen(ev->path) + 16;
	_cleanup_free_ char *from = malloc(n), *to = malloc(n);

	if (!from || !to)
		return;
	for (unsigned i = ev->keep; i > 1; i--) {
		snprintf(from, n, "%s.%u", ev->path, i - 1);
		snprintf(to, n, "%s.%u", ev->path, i);
		rename(from, to);
	}
	snprintf(to, n, "%s.1", ev->path);
	rename(ev->path, to);
}

/* Before a line of len bytes: a file it would take past the cap is
 * rotated.  Another process may write the same log (the two serving
 * processes of an upgrade): the lock on the file makes one of them
 * rename it; the other finds PATH is another file and opens that.
 * lock held. */
static void rotate_locked(struct events *ev, size_t len)
{
	struct stat st, now;
	int fd;

	if (!ev->max_bytes || ev->fd < 0 || fstat(ev->fd, &st) < 0 || st.st_size == 0 ||
	    (uint64_t)st.st_size + len <= ev->max_bytes)
		return;
	flock(ev->fd, LOCK_EX);
	if (stat(ev->path, &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev)
		shift_files(ev);
	fd = open_log(ev->path);
	if (fd < 0) {
		/* (the line goes to the renamed file: better than none) */
		flock(ev->fd, LOCK_UN);
		ev->write_errors++;
		return;
	}
	close(ev->fd); /* (and its lock) */
	ev->fd = fd;
}

static void write_locked(struct events *ev, const char *buf, size_t len)
{
	if (ev->reopen) {
		ev->reopen = 0;
		int fd = open_log(ev->path);
		if (fd >= 0) {
			if (ev->fd >= 0)
				close(ev->fd);
			ev->fd = fd;
		} else {
			ev->write_errors++;
		}
	}
	rotate_locked(ev, len);
	if (ev->fd >= 0 && write(ev->fd, buf, len) != (ssize_t)len)
		ev->write_errors++;
}

/* evlimit_fn: one EventsSuppressed event for a count of dropped events.
 * lock held. */
static void write_suppressed(void *userdata, uid_t uid, const char *reason, uint64_t n)
{
	struct events *ev = userdata;
	_cleanup_free_ char *line = NULL;
	char msg[512];
	size_t len;

	if (reason)
		snprintf(msg, sizeof(msg),
			 "Dropped %llu %s events caused by uid %u: more than %u at once or %u a "
			 "minute per user and reason",
			 (unsigned long long)n, reason, (unsigned)uid, ev->burst, ev->per_minute);
	else
		snprintf(msg, sizeof(msg),
			 "Dropped %llu events caused by users other than root: too many users "
			 "and reasons at once to count them apart",
			 (unsigned long long)n);
	line = event_line(&(struct event){ .type = EVENT_WARNING,
					   .reason = "EventsSuppressed",
					   .message = msg },
			  n, uid, reason, &len);
	if (line)
		write_locked(ev, line, len);
}

void events_emit(struct events *ev, const struct event *e)
{
	_cleanup_free_ char *line = NULL, *msg = NULL;
	struct event with = *e;
	uint64_t suppressed = 0;
	size_t len;

	if (!ev || !ev->path)
		return;
	/* What root and the daemon cause is never limited. */
	if (ev->limit && e->caller && e->caller->pid > 0 && e->caller->uid != 0) {
		pthread_mutex_lock(&ev->lock);
		bool admitted = evlimit_admit(ev->limit, e->caller->uid, e->reason, &suppressed);
		pthread_mutex_unlock(&ev->lock);
		if (!admitted)
			return;
		if (suppressed &&
		    asprintf(&msg, "%s (%llu more like it dropped before this one)",
			     e->message ? e->message : "", (unsigned long long)suppressed) >= 0)
			with.message = msg;
	}
	line = event_line(&with, suppressed, (uid_t)-1, NULL, &len);
	if (!line)
		return;
	pthread_mutex_lock(&ev->lock);
	write_locked(ev, line, len);
	evlimit_lifted(ev->limit, write_suppressed, ev);
	pthread_mutex_unlock(&ev->lock);
}

void events_flush(struct events *ev)
{
	if (!ev || !ev->path)
		return;
	pthread_mutex_lock(&ev->lock);
	evlimit_lifted(ev->limit, write_suppressed, ev);
	pthread_mutex_unlock(&ev->lock);
}

void events_close(struct events *ev)
{
	if (!ev)
		return;
	if (ev->path && ev->fd >= 0)
		evlimit_drain(ev->limit, write_suppressed, ev);
	if (ev->fd >= 0)
		close(ev->fd);
	evlimit_free(ev->limit);
	pthread_mutex_destroy(&ev->lock);
	free(ev->path);
	free(ev);
}

void caller_name(struct caller *c)
{
	char path[64];
	ssize_t n;
	int fd;

	c->comm[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%ld/comm", (long)c->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, c->comm, sizeof(c->comm) - 1);
	if (n > 0) {
		c->comm[n] = '\0';
		c->comm[strcspn(c->comm, "\n")] = '\0';
	} else {
		c->comm[0] = '\0';
	}
	close(fd);
}

void event_vsendf(const struct event_sink *s, enum event_type type, const char *reason,
		  const char *image, const char *digest, int err, const struct caller *who,
		  const char *fmt, va_list ap)
{
	char msg[1024];

	if (!s->emit)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	s->emit(s->userdata, &(struct event){
				     .type = type,
				     .reason = reason,
				     .image = image,
				     .digest = digest,
				     .message = msg,
				     .err = err,
				     .caller = who,
			     });
}

void event_sendf(const struct event_sink *s, enum event_type type, const char *reason,
		 const char *image, const char *digest, int err, const struct caller *who,
		 const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	event_vsendf(s, type, reason, image, digest, err, who, fmt, ap);
	va_end(ap);
}

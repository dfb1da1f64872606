#include "events.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "errname.h"
#include "macro.h"

struct events {
	char *path;
	pthread_mutex_t lock; /* protects fd while it is swapped */
	int fd;
	volatile sig_atomic_t reopen;
	unsigned long write_errors;
};

static int open_log(const char *path)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);

	return fd < 0 ? negative_errno() : fd;
}

int events_open(const char *path, struct events **ret)
{
	struct events *ev = calloc(1, sizeof(*ev));

	if (!ev)
		return -ENOMEM;
	ev->fd = -1;
	pthread_mutex_init(&ev->lock, NULL);
	if (path) {
		ev->path = strdup(path);
		if (!ev->path) {
			events_close(ev);
			return -ENOMEM;
		}
		int fd = open_log(path);
		if (fd < 0) {
			events_close(ev);
			return fd;
		}
		ev->fd = fd;
	}
	*ret = ev;
	return 0;
}

void events_close(struct events *ev)
{
	if (!ev)
		return;
	if (ev->fd >= 0)
		close(ev->fd);
	pthread_mutex_destroy(&ev->lock);
	free(ev->path);
	free(ev);
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

void events_emit(struct events *ev, const struct event *e)
{
	struct timespec now;
	char ts[40];
	json_t *o;
	char *line;
	size_t len;

	if (!ev || !ev->path)
		return;
	clock_gettime(CLOCK_REALTIME, &now);
	events_format_time(&now, ts, sizeof(ts));

	o = json_object();
	if (!o)
		return;
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
	if (e->caller && e->caller->pid > 0) {
		json_object_set_new(o, "pid", json_integer(e->caller->pid));
		json_object_set_new(o, "uid", json_integer(e->caller->uid));
		set_str(o, "comm", e->caller->comm);
	}
	line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	if (!line)
		return;
	/* One write(2) per line: turn the terminating NUL into the newline. */
	len = strlen(line);
	char *buf = realloc(line, len + 2);
	if (!buf) {
		free(line);
		return;
	}
	buf[len] = '\n';

	pthread_mutex_lock(&ev->lock);
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
	if (ev->fd >= 0 && write(ev->fd, buf, len + 1) != (ssize_t)(len + 1))
		ev->write_errors++;
	pthread_mutex_unlock(&ev->lock);
	free(buf);
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

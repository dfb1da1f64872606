/* Reading the events log the daemon writes (JSON Lines, docs/events.md):
 * filters, the latest failure of an image, and following the log across
 * rotation like tail -F. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pullfsctl.h"

bool event_matches(const json_t *ev, const struct event_filter *f)
{
	const char *image = jstr(ev, "image"), *reason = jstr(ev, "reason"), *t;
	double when;

	if (f->reason && (!reason || strcasecmp(reason, f->reason)))
		return false;
	if (f->image) {
		size_t n = strlen(f->image);
		if (!image || strncmp(image, f->image, n))
			return false;
		if (f->image_exact ? image[n] != '\0'
				   : (image[n] != ':' && image[n] != '@' && image[n]))
			return false;
	}
	if (f->since > 0) {
		t = jstr(ev, "time");
		if (!t || parse_rfc3339(t, &when) < 0 || when < f->since)
			return false;
	}
	return true;
}

json_t *event_parse(const char *line)
{
	json_t *j = json_loads(line, JSON_DISABLE_EOF_CHECK, NULL);

	if (!json_is_object(j)) {
		json_decref(j);
		return NULL;
	}
	return j;
}

unsigned events_rotated_count(const char *path)
{
	unsigned n = 0;

	for (;;) {
		_cleanup_free_ char *p = NULL;

		if (asprintf(&p, "%s.%u", path, n + 1) < 0 || access(p, F_OK) < 0)
			return n;
		n++;
	}
}

/* The latest failure-like event of image in the file at path, else best
 * (which it replaces). */
static json_t *file_last_failure(const char *path, const char *image, json_t *best)
{
	_cleanup_fclose_ FILE *f = NULL;
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	struct stat st;

	f = fopen(path, "re");
	if (!f)
		return best;
	/* Only the tail matters; a log of many megabytes is not read whole. */
	if (fstat(fileno(f), &st) == 0 && st.st_size > (off_t)(4u << 20)) {
		fseeko(f, st.st_size - (off_t)(4u << 20), SEEK_SET);
		if (getline(&line, &cap, f) < 0)
			return best;
	}
	while (getline(&line, &cap, f) > 0) {
		json_t *ev;
		const char *im, *reason, *type;

		if (!strstr(line, image))
			continue;
		ev = event_parse(line);
		if (!ev)
			continue;
		im = jstr(ev, "image");
		reason = jstr(ev, "reason");
		type = jstr(ev, "type");
		if (im && !strcmp(im, image) &&
		    ((type && !strcmp(type, "Warning")) || jstr(ev, "errno") ||
		     (reason && (!strcmp(reason, "BackOff") || !strcmp(reason, "Failed"))))) {
			json_decref(best);
			best = ev;
		} else {
			json_decref(ev);
		}
	}
	return best;
}

json_t *events_last_failure(const char *path, const char *image)
{
	_cleanup_free_ char *rotated = NULL;
	json_t *best = NULL;

	if (!path)
		return NULL;
	/* a failure just before a rotation is in the rotated file */
	if (asprintf(&rotated, "%s.1", path) >= 0)
		best = file_last_failure(rotated, image, NULL);
	return file_last_failure(path, image, best);
}

/* Reads what fd has now, handing each whole line that matches to fn;
 * buf holds *len bytes of a line begun.  0 at the end, or -errno. */
static int follow_drain(int fd, char *buf, size_t *len, const struct event_filter *f, event_fn fn,
			void *userdata)
{
	for (;;) {
		ssize_t n = read(fd, buf + *len, EVENT_LINE_MAX - *len);
		char *nl;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return negative_errno();
		if (n == 0)
			return 0;
		*len += (size_t)n;
		while ((nl = memchr(buf, '\n', *len))) {
			*nl = '\0';
			json_t *ev = event_parse(buf);
			if (ev && event_matches(ev, f))
				fn(buf, ev, userdata);
			json_decref(ev);
			*len -= (size_t)(nl + 1 - buf);
			memmove(buf, nl + 1, *len);
		}
		if (*len == EVENT_LINE_MAX)
			*len = 0; /* a line that long is not an event */
	}
}

int events_follow(const char *path, int fd, const struct event_filter *f, event_fn fn,
		  void *userdata)
{
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	struct stat st_fd, st_path;
	int r;

	buf = malloc(EVENT_LINE_MAX + 1);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		if (fd >= 0) {
			r = follow_drain(fd, buf, &len, f, fn, userdata);
			if (r < 0)
				return r;
		}
		/* At the end: rotated, truncated, or just nothing new? */
		poll(NULL, 0, 250);
		if (stat(path, &st_path) < 0)
			continue;
		if (fd >= 0 && fstat(fd, &st_fd) == 0) {
			if (st_fd.st_ino == st_path.st_ino && st_fd.st_dev == st_path.st_dev) {
				if (st_path.st_size < lseek(fd, 0, SEEK_CUR)) {
					lseek(fd, 0, SEEK_SET);
					len = 0;
				}
				continue;
			}
			/* Rotated: the lines written to the old file since
			 * the last read first, then the new one from its
			 * start. */
			r = follow_drain(fd, buf, &len, f, fn, userdata);
			close(fd);
			if (r < 0)
				return r;
		}
		fd = open(path, O_RDONLY | O_CLOEXEC);
		len = 0;
	}
}

#include "control.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "errname.h"
#include "macro.h"
#include "manager.h"

#define REQUEST_MAX (64u << 10)

struct control {
	char *path;
	int fd;
	int stop_pipe[2];
	pthread_t thread;
	struct manager *manager;
	control_status_fn status;
	void *userdata;
};

static json_t *failure(int r, const char *msg)
{
	return json_pack("{s:b, s:s, s:s}", "ok", 0, "errno", errno_name(r), "error",
			 msg && *msg ? msg : strerror(r < 0 ? -r : r));
}

static json_t *handle(struct control *c, json_t *req)
{
	const char *op = json_string_value(json_object_get(req, "op"));
	char err[512] = "";
	void *ans = NULL;
	int r;

	if (!op)
		return failure(-EINVAL, "request has no \"op\"");
	if (!strcmp(op, "status")) {
		json_t *s = c->status(c->userdata);
		if (!s)
			return failure(-ENOMEM, NULL);
		json_object_set_new(s, "ok", json_true());
		return s;
	}
	if (!strcmp(op, "inspect")) {
		const char *ref = json_string_value(json_object_get(req, "reference"));
		if (!ref)
			return failure(-EINVAL, "inspect needs \"reference\"");
		r = manager_inspect(c->manager, ref, &ans, err, sizeof(err));
	} else if (!strcmp(op, "rm")) {
		json_t *refs = json_object_get(req, "references");
		size_t n = json_array_size(refs);
		const char **v;
		if (!json_is_array(refs) || n == 0)
			return failure(-EINVAL, "rm needs a non-empty \"references\" array");
		v = calloc(n, sizeof(*v));
		if (!v)
			return failure(-ENOMEM, NULL);
		for (size_t i = 0; i < n; i++)
			if (!(v[i] = json_string_value(json_array_get(refs, i)))) {
				free(v);
				return failure(-EINVAL, "references must be strings");
			}
		r = manager_remove(c->manager, v, n, &ans, err, sizeof(err));
		free(v);
	} else if (!strcmp(op, "gc")) {
		json_t *to = json_object_get(req, "to_bytes");
		if (to && (!json_is_integer(to) || json_integer_value(to) < 0))
			return failure(-EINVAL, "to_bytes must be a non-negative integer");
		/* Absent: the low threshold.  0: as little as possible,
		 * which the manager spells as a target of one byte. */
		uint64_t target = to ? (uint64_t)json_integer_value(to) : 0;
		if (to && target == 0)
			target = 1;
		r = manager_gc(c->manager, target, &ans, err, sizeof(err));
	} else {
		snprintf(err, sizeof(err), "unknown op \"%s\"", op);
		return failure(-EINVAL, err);
	}
	if (r < 0)
		return failure(r, err);
	return ans;
}

static bool peer_allowed(int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return false;
	return cr.uid == 0 || cr.uid == geteuid();
}

static void serve_one(struct control *c, int fd)
{
	_cleanup_free_ char *buf = malloc(REQUEST_MAX + 1);
	size_t len = 0;
	json_t *req, *ans;
	char *out;
	struct timeval tv = { .tv_sec = 5 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (!buf)
		return;
	if (!peer_allowed(fd)) {
		ans = failure(-EACCES, "only root and the daemon's user may use this socket");
		goto reply;
	}
	/* Until a newline, end of input, or the cap. */
	while (len < REQUEST_MAX) {
		ssize_t n = read(fd, buf + len, REQUEST_MAX - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		if (memchr(buf + len - n, '\n', (size_t)n))
			break;
	}
	buf[len] = '\0';
	req = json_loadb(buf, len, JSON_DISABLE_EOF_CHECK, NULL);
	if (!json_is_object(req)) {
		json_decref(req);
		ans = failure(-EINVAL, "request is not a JSON object");
		goto reply;
	}
	ans = handle(c, req);
	json_decref(req);
reply:
	if (!ans)
		return;
	out = json_dumps(ans, JSON_COMPACT);
	json_decref(ans);
	if (!out)
		return;
	size_t olen = strlen(out), done = 0;
	while (done < olen) {
		ssize_t n = write(fd, out + done, olen - done);
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	if (write(fd, "\n", 1) < 0) {
		/* the client went away; nothing to do */
	}
	free(out);
}

static void *control_thread(void *arg)
{
	struct control *c = arg;
	struct pollfd p[2] = {
		{ .fd = c->fd, .events = POLLIN },
		{ .fd = c->stop_pipe[0], .events = POLLIN },
	};

	for (;;) {
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			break;
		if (p[0].revents & POLLIN) {
			int fd = accept4(c->fd, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0) {
				serve_one(c, fd);
				close(fd);
			}
		}
	}
	return NULL;
}

int control_start(const char *path, struct manager *m,
		  control_status_fn status, void *userdata,
		  struct control **ret)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct control *c;
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = c->stop_pipe[0] = c->stop_pipe[1] = -1;
	c->manager = m;
	c->status = status;
	c->userdata = userdata;
	c->path = strdup(path);
	if (!c->path) {
		r = -ENOMEM;
		goto fail;
	}
	strcpy(sa.sun_path, path);
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0 || pipe2(c->stop_pipe, O_CLOEXEC) < 0) {
		r = negative_errno();
		goto fail;
	}
	/* The cache lock is held, so a socket here is a dead daemon's. */
	unlink(path);
	mode_t old = umask(0177);
	r = bind(c->fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0 || listen(c->fd, 16) < 0) {
		r = negative_errno();
		goto fail;
	}
	r = pthread_create(&c->thread, NULL, control_thread, c);
	if (r != 0) {
		r = -r;
		unlink(path);
		goto fail;
	}
	*ret = c;
	return 0;
fail:
	if (c->fd >= 0)
		close(c->fd);
	if (c->stop_pipe[0] >= 0) {
		close(c->stop_pipe[0]);
		close(c->stop_pipe[1]);
	}
	free(c->path);
	free(c);
	return r;
}

void control_stop(struct control *c)
{
	if (!c)
		return;
	if (write(c->stop_pipe[1], "x", 1) == 1)
		pthread_join(c->thread, NULL);
	close(c->fd);
	close(c->stop_pipe[0]);
	close(c->stop_pipe[1]);
	unlink(c->path);
	free(c->path);
	free(c);
}

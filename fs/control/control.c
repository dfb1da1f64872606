/* The control socket's server.  Each connection gets a thread of its own,
 * from accept to answer: a client that is slow to send its request holds
 * only its own thread, and a request that blocks in the manager (gc, rm)
 * holds only its own client.  A poll loop would read requests without
 * threads but still need workers for the manager calls that block, so one
 * thread per connection is the simpler of the two; the threads are bounded
 * by CONTROL_CONNECTIONS_MAX and mostly sleep in poll(2).  Each request
 * must arrive whole within CONTROL_DEADLINE_S of the connect, however the
 * client spreads its bytes. */
#include "control.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "errname.h"
#include "macro.h"
#include "unixsock.h"
#include "manager.h"

/* (a start profile, imported, is at most 160 KiB of text) */
#define REQUEST_MAX_KIB 256
#define REQUEST_MAX (REQUEST_MAX_KIB * 1024u)

enum conn_state {
	CONN_FREE,    /* no thread */
	CONN_READING, /* its thread waits for the request */
	CONN_WORKING, /* its thread runs the request and answers */
	CONN_DONE,    /* its thread has finished and waits to be joined */
};

struct conn {
	struct control *control;
	pthread_t thread;
	enum conn_state state; /* control->lock */
	bool evicted;	       /* control->lock: dropped to make room */
	/* Closed by its thread under control->lock as it becomes CONN_DONE,
	 * so that others may shutdown() it under the lock before that. */
	int fd;
	int64_t accepted_ms; /* CLOCK_MONOTONIC */
};

struct control {
	char *path;
	bool bound; /* path is our socket, to be removed */
	int fd;
	int stop_pipe[2];
	pthread_t acceptor;
	bool started;
	struct manager *manager;
	control_status_fn status;
	control_settle_fn settle;
	control_upgrade_fn upgrade;
	control_answered_fn upgrade_answered;
	void *userdata;
	pthread_mutex_t lock;
	pthread_cond_t conn_done;		    /* a connection became CONN_DONE */
	struct conn conns[CONTROL_CONNECTIONS_MAX]; /* state and fds: lock */
};

DEFINE_TRIVIAL_CLEANUP_FUNC(struct control *, control_free)

static json_t *failure(int r, const char *msg)
{
	return json_pack("{s:b, s:s, s:s}", "ok", 0, "errno", errno_name(r), "error",
			 msg && *msg ? msg : strerror(-r));
}

/* *upgrade_go: an upgrade was accepted, to go ahead once answered. */
static json_t *handle(struct control *c, json_t *req, bool *upgrade_go)
{
	const char *op = json_string_value(json_object_get(req, "op"));
	struct error_detail err = { 0 };
	json_t *ans = NULL;
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
		r = manager_inspect(c->manager, ref, &ans, &err);
	} else if (!strcmp(op, "pull")) {
		const char *ref = json_string_value(json_object_get(req, "reference"));
		if (!ref)
			return failure(-EINVAL, "pull needs \"reference\"");
		r = manager_pull_background(c->manager, ref, &ans, &err);
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
		r = manager_remove(c->manager, v, n, &ans, &err);
		free(v);
		if (r == 0 && c->settle)
			c->settle(c->userdata);
	} else if (!strcmp(op, "profile-export")) {
		const char *ref = json_string_value(json_object_get(req, "reference"));
		if (!ref)
			return failure(-EINVAL, "profile-export needs \"reference\"");
		r = manager_profile_export(c->manager, ref, &ans, &err);
	} else if (!strcmp(op, "profile-import")) {
		const char *ref = json_string_value(json_object_get(req, "reference"));
		json_t *text = json_object_get(req, "profile");
		if (!ref || !json_is_string(text))
			return failure(-EINVAL,
				       "profile-import needs \"reference\" and \"profile\"");
		r = manager_profile_import(c->manager, ref, json_string_value(text),
					   json_string_length(text), &ans, &err);
	} else if (!strcmp(op, "upgrade")) {
		if (!c->upgrade) {
			error_detail_set(&err, -EOPNOTSUPP,
					 "this pullfs cannot be upgraded in place");
			return failure(err.err, err.message);
		}
		r = c->upgrade(c->userdata, &ans, &err);
		*upgrade_go = r == 0;
	} else if (!strcmp(op, "gc")) {
		json_t *to = json_object_get(req, "to_bytes");
		if (to && (!json_is_integer(to) || json_integer_value(to) < 0))
			return failure(-EINVAL, "to_bytes must be a non-negative integer");
		/* Absent: the low threshold.  0: as little as possible,
		 * which the manager spells as a target of one byte. */
		uint64_t target = to ? (uint64_t)json_integer_value(to) : 0;
		if (to && target == 0)
			target = 1;
		r = manager_gc(c->manager, target, &ans, &err);
		if (r == 0 && c->settle)
			c->settle(c->userdata);
	} else {
		error_detail_set(&err, -EINVAL, "unknown op \"%s\"", op);
		return failure(err.err, err.message);
	}
	if (r < 0)
		return failure(r, err.message);
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

/* Waits for events on a non-blocking fd until deadline_ms.  Returns 0
 * when ready, -ETIMEDOUT, or -errno. */
static int wait_fd(int fd, short events, int64_t deadline_ms)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = events };
		int64_t left = deadline_ms - clock_mono_ms();
		int k = poll(&p, 1, (int)MAX(left, 0));

		if (k > 0)
			return 0;
		if (k == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return negative_errno();
	}
}

/* After a read or send on a non-blocking fd failed with errno: 0 to try
 * again (once the fd is ready, for EAGAIN), or the error that ends the
 * exchange. */
static int retry_wait(int fd, short events, int64_t deadline_ms)
{
	if (errno == EINTR)
		return 0;
	if (errno != EAGAIN)
		return negative_errno();
	return wait_fd(fd, events, deadline_ms);
}

/* Until a newline, the end of input or the cap, within the deadline: a
 * client that trickles bytes is held to the whole request's deadline, not
 * to one per read.  buf has room for REQUEST_MAX bytes.  Returns 0 with
 * *ret_len, -ETIMEDOUT, -E2BIG, or the -errno of a failed read. */
static int read_request(int fd, int64_t deadline_ms, char *buf, size_t *ret_len)
{
	size_t len = 0;

	for (;;) {
		ssize_t n = read(fd, buf + len, REQUEST_MAX - len);

		if (n < 0) {
			int r = retry_wait(fd, POLLIN, deadline_ms);
			if (r < 0)
				return r;
			continue;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (memchr(buf + len - n, '\n', (size_t)n))
			break;
		if (len == REQUEST_MAX)
			return -E2BIG;
	}
	*ret_len = len;
	return 0;
}

static int send_all(int fd, const char *data, size_t len, int64_t deadline_ms)
{
	while (len > 0) {
		ssize_t n = send(fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0) {
			int r = retry_wait(fd, POLLOUT, deadline_ms);
			if (r < 0)
				return r;
			continue;
		}
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Writes ans (consumed) as one line.  A client that does not take it by
 * deadline_ms (now: only what fits in the socket at once) gets nothing
 * more; there is nobody to tell. */
static void answer(int fd, json_t *ans, int64_t deadline_ms)
{
	_cleanup_free_ char *out = NULL;

	if (!ans)
		return;
	out = json_dumps(ans, JSON_COMPACT);
	json_decref(ans);
	if (out && send_all(fd, out, strlen(out), deadline_ms) == 0)
		(void)send_all(fd, "\n", 1, deadline_ms);
}

static json_t *answer_for(struct control *c, const char *buf, size_t len, bool *upgrade_go)
{
	json_t *req = json_loadb(buf, len, JSON_DISABLE_EOF_CHECK, NULL);
	json_t *ans;

	if (!json_is_object(req)) {
		json_decref(req);
		return failure(-EINVAL, "request is not a JSON object");
	}
	ans = handle(c, req, upgrade_go);
	json_decref(req);
	return ans;
}

static void *conn_thread(void *arg)
{
	struct conn *cn = arg;
	struct control *c = cn->control;
	_cleanup_free_ char *buf = malloc(REQUEST_MAX);
	json_t *ans = NULL;
	size_t len = 0;
	bool evicted, upgrade_go = false;
	int r = 0;

	if (!buf)
		ans = failure(-ENOMEM, NULL);
	else if (!peer_allowed(cn->fd))
		ans = failure(-EACCES, "only root and the daemon's user may use this socket");
	else
		r = read_request(cn->fd, cn->accepted_ms + CONTROL_DEADLINE_S * 1000, buf, &len);

	pthread_mutex_lock(&c->lock);
	evicted = cn->evicted;
	if (!evicted)
		cn->state = CONN_WORKING;
	pthread_mutex_unlock(&c->lock);

	if (evicted) {
		json_decref(ans);
		ans = failure(-EAGAIN, "dropped: too many control connections, and this one "
				       "had waited longest for its request");
	} else if (r == -ETIMEDOUT)
		ans = failure(r, "request not complete within " STRINGIFY(CONTROL_DEADLINE_S) " s");
	else if (r == -E2BIG)
		ans = failure(r, "request over " STRINGIFY(REQUEST_MAX_KIB) " KiB");
	else if (r == 0 && !ans)
		ans = answer_for(c, buf, len, &upgrade_go);
	/* A dropped client gets what fits at once: its slot is being waited
	 * for. */
	answer(cn->fd, ans, evicted ? 0 : clock_mono_ms() + CONTROL_DEADLINE_S * 1000);

	pthread_mutex_lock(&c->lock);
	close(cn->fd);
	cn->fd = -1;
	cn->state = CONN_DONE;
	pthread_cond_broadcast(&c->conn_done);
	pthread_mutex_unlock(&c->lock);
	/* the client has its answer (and the end of it) before this process
	 * is replaced */
	if (upgrade_go && c->upgrade_answered)
		c->upgrade_answered(c->userdata);
	return NULL;
}

/* Needs c->lock; cn is CONN_DONE, its thread has let go of the lock. */
static void conn_reap(struct conn *cn)
{
	pthread_join(cn->thread, NULL);
	cn->state = CONN_FREE;
	cn->evicted = false;
}

/* A free slot for a new connection, making one by dropping the connection
 * that has waited longest for its request; NULL when every connection is
 * running a request.  Needs c->lock. */
static struct conn *conn_slot(struct control *c)
{
	struct conn *oldest = NULL;

	for (size_t i = 0; i < CONTROL_CONNECTIONS_MAX; i++) {
		struct conn *cn = &c->conns[i];

		if (cn->state == CONN_DONE)
			conn_reap(cn);
		if (cn->state == CONN_FREE)
			return cn;
		if (cn->state == CONN_READING && !cn->evicted &&
		    (!oldest || cn->accepted_ms < oldest->accepted_ms))
			oldest = cn;
	}
	if (!oldest)
		return NULL;
	/* SHUT_RD wakes its thread from poll() with an end of input, and
	 * leaves the write side for the reason. */
	oldest->evicted = true;
	shutdown(oldest->fd, SHUT_RD);
	while (oldest->state != CONN_DONE)
		pthread_cond_wait(&c->conn_done, &c->lock);
	conn_reap(oldest);
	return oldest;
}

/* Hands fd to a thread of its own, or answers at once why not. */
static void conn_add(struct control *c, int fd)
{
	struct conn *cn;
	int r = -EAGAIN;

	pthread_mutex_lock(&c->lock);
	cn = conn_slot(c);
	if (cn) {
		cn->fd = fd;
		cn->accepted_ms = clock_mono_ms();
		cn->state = CONN_READING;
		r = -pthread_create(&cn->thread, NULL, conn_thread, cn);
		if (r < 0) {
			cn->state = CONN_FREE;
			cn->fd = -1;
		}
	}
	pthread_mutex_unlock(&c->lock);
	if (r < 0) {
		answer(fd,
		       failure(r, cn ? "no thread for this connection"
				     : "too many control connections running requests"),
		       0);
		close(fd);
	}
}

static void *acceptor_thread(void *arg)
{
	struct control *c = arg;
	struct pollfd p[2] = {
		{ .fd = c->fd, .events = POLLIN },
		{ .fd = c->stop_pipe[0], .events = POLLIN },
	};
	int timeout = -1;

	for (;;) {
		int fd, k = poll(p, 2, timeout);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 || p[1].revents)
			break;
		timeout = -1;
		if (!(p[0].revents & POLLIN))
			continue;
		fd = accept4(c->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd >= 0)
			conn_add(c, fd);
		else if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
			timeout = 100; /* out of fds or memory: do not spin on the backlog */
	}
	return NULL;
}

int control_new(const char *path, bool predecessors, struct manager *m, struct control **ret,
		char *errbuf, size_t errlen)
{
	_cleanup_(control_freep) struct control *c = NULL;
	int r;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = c->stop_pipe[0] = c->stop_pipe[1] = -1;
	c->manager = m;
	for (size_t i = 0; i < CONTROL_CONNECTIONS_MAX; i++)
		c->conns[i] = (struct conn){ .control = c, .fd = -1 };
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->conn_done, NULL);
	c->path = strdup(path);
	if (!c->path)
		return -ENOMEM;
	if (pipe2(c->stop_pipe, O_CLOEXEC) < 0)
		return negative_errno();
	r = unixsock_listen(path, "control socket", predecessors, CONTROL_CONNECTIONS_MAX, &c->fd,
			    errbuf, errlen);
	if (r < 0)
		return r;
	c->bound = true;
	*ret = TAKE_PTR(c);
	return 0;
}

void control_set_upgrade(struct control *c, control_upgrade_fn upgrade,
			 control_answered_fn answered)
{
	c->upgrade = upgrade;
	c->upgrade_answered = answered;
}

int control_start(struct control *c, control_status_fn status, control_settle_fn settle,
		  void *userdata)
{
	int r;

	c->status = status;
	c->settle = settle;
	c->userdata = userdata;
	r = -pthread_create(&c->acceptor, NULL, acceptor_thread, c);
	if (r < 0)
		return r;
	c->started = true;
	return 0;
}

void control_stop(struct control *c)
{
	pthread_t threads[CONTROL_CONNECTIONS_MAX];
	size_t n = 0;

	if (!c || !c->started)
		return;
	if (write(c->stop_pipe[1], "x", 1) == 1)
		pthread_join(c->acceptor, NULL);
	c->started = false;

	/* No new connections now.  Running requests end on their own; the
	 * shutdown makes waits for the client end at once. */
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < CONTROL_CONNECTIONS_MAX; i++) {
		struct conn *cn = &c->conns[i];

		if (cn->state == CONN_READING || cn->state == CONN_WORKING)
			shutdown(cn->fd, SHUT_RDWR);
		if (cn->state != CONN_FREE)
			threads[n++] = cn->thread;
	}
	pthread_mutex_unlock(&c->lock);
	for (size_t i = 0; i < n; i++)
		pthread_join(threads[i], NULL);
	for (size_t i = 0; i < CONTROL_CONNECTIONS_MAX; i++)
		c->conns[i].state = CONN_FREE;
}

void control_free(struct control *c)
{
	if (!c)
		return;
	control_stop(c);
	if (c->fd >= 0)
		close(c->fd);
	if (c->stop_pipe[0] >= 0) {
		close(c->stop_pipe[0]);
		close(c->stop_pipe[1]);
	}
	if (c->bound)
		unlink(c->path);
	pthread_cond_destroy(&c->conn_done);
	pthread_mutex_destroy(&c->lock);
	free(c->path);
	free(c);
}

const char *control_path(const struct control *c)
{
	return c->path;
}

/* gRPC over HTTP/2 on a Unix socket (grpcserver.h).  libnghttp2 does the
 * HTTP/2: frames, HPACK, flow control, the connection's settings.  This
 * file reads a request's body, takes the one length-prefixed message out
 * of it, calls the method's handler and answers with the handler's
 * messages and a grpc-status trailer. */
#include "grpcserver.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "dlist.h"
#include "errname.h"
#include "macro.h"
#include "unixsock.h"

#define PATH_LEN_MAX 128
#define STREAMS_MAX 16
#define PREFIX 5

struct grpcserver;

struct stream {
	struct dlist_node node; /* in the connection's streams */
	char path[PATH_LEN_MAX];
	bool path_too_long;
	uint8_t *body;
	size_t len;
	bool too_big;
	bool answered;
	struct grpc_reply reply;
	size_t sent;
	char status_text[16];
	char message_enc[3 * sizeof(((struct grpc_reply *)0)->message)];
};

enum conn_state { CONN_FREE, CONN_RUNNING, CONN_DONE };

struct job;

struct conn {
	struct grpcserver *g;
	int fd;
	int wake_fd; /* an eventfd a finished job writes to */
	pthread_mutex_t jobs_lock;
	struct dlist done; /* finished jobs to answer; jobs_lock */
	unsigned running;  /* jobs started and not answered; the conn's thread */
	/* streams begun and not closed: nghttp2_session_del frees its
	 * streams without telling, their user data is freed from here */
	struct dlist streams;
	enum conn_state state; /* guarded by g->lock */
	pthread_t thread;
	struct grpc_peer peer; /* set before the thread starts */
};

struct grpcserver {
	char *path;
	int fd;
	int stop_pipe[2];
	bool bound, started;
	const struct grpc_method *methods;
	size_t n_methods;
	void *userdata;
	pthread_t acceptor;
	pthread_mutex_t lock;
	struct conn conns[GRPC_CONNECTIONS_MAX];
};

/* -------------------------------------------------------------- replies */

int grpc_reply_add(struct grpc_reply *r, size_t len, void (*pack)(const void *msg, uint8_t *out),
		   const void *msg)
{
	uint8_t *p;

	if (len > UINT32_MAX)
		return -EFBIG;
	if (r->cap - r->len < len + PREFIX) {
		size_t cap = MAX(r->cap * 2, r->len + len + PREFIX + 256);

		p = realloc(r->buf, cap);
		if (!p)
			return -ENOMEM;
		r->buf = p;
		r->cap = cap;
	}
	p = r->buf + r->len;
	p[0] = 0; /* not compressed */
	p[1] = (uint8_t)(len >> 24);
	p[2] = (uint8_t)(len >> 16);
	p[3] = (uint8_t)(len >> 8);
	p[4] = (uint8_t)len;
	pack(msg, p + PREFIX);
	r->len += len + PREFIX;
	return 0;
}

void grpc_reply_fail(struct grpc_reply *r, int code, const char *fmt, ...)
{
	va_list ap;

	r->status = code;
	va_start(ap, fmt);
	vsnprintf(r->message, sizeof(r->message), fmt, ap);
	va_end(ap);
	if (code != GRPC_OK)
		r->len = 0;
}

/* grpc-message is percent-encoded: printable ASCII but '%' as it is. */
static void percent_encode(const char *in, char *out, size_t outlen)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (const unsigned char *p = (const unsigned char *)in; *p && o + 4 <= outlen; p++) {
		if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
			out[o++] = (char)*p;
		} else {
			out[o++] = '%';
			out[o++] = hex[*p >> 4];
			out[o++] = hex[*p & 15];
		}
	}
	out[o] = '\0';
}

/* ------------------------------------------------------------ requests */

static void stream_free(struct stream *st)
{
	if (!st)
		return;
	free(st->body);
	free(st->reply.buf);
	free(st);
}

#define NV(n, v)                                                                     \
	{                                                                            \
		(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v),            \
			NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE \
	}

static void status_fields(struct stream *st)
{
	snprintf(st->status_text, sizeof(st->status_text), "%d", st->reply.status);
	percent_encode(st->reply.message, st->message_enc, sizeof(st->message_enc));
}

static ssize_t read_reply(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
			  uint32_t *data_flags, nghttp2_data_source *source, void *user_data)
{
	struct stream *st = source->ptr;
	size_t n = MIN(length, st->reply.len - st->sent);

	memcpy(buf, st->reply.buf + st->sent, n);
	st->sent += n;
	if (st->sent == st->reply.len) {
		nghttp2_nv trailers[] = { NV("grpc-status", st->status_text),
					  NV("grpc-message", st->message_enc) };

		*data_flags |= NGHTTP2_DATA_FLAG_EOF;
		if (nghttp2_submit_trailer(session, stream_id, trailers,
					   st->message_enc[0] ? 2 : 1) == 0)
			*data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
	}
	return (ssize_t)n;
}

static const struct grpc_method *method_of(const struct grpcserver *g, const char *path)
{
	for (size_t i = 0; i < g->n_methods; i++)
		if (strcmp(g->methods[i].path, path) == 0)
			return &g->methods[i];
	return NULL;
}

/* Submits the answer in st->reply (its status fields set here). */
static int submit_reply(nghttp2_session *session, int32_t id, struct stream *st)
{
	status_fields(st);
	if (st->reply.len == 0) {
		/* trailers only */
		nghttp2_nv hdrs[] = { NV(":status", "200"), NV("content-type", "application/grpc"),
				      NV("grpc-status", st->status_text),
				      NV("grpc-message", st->message_enc) };

		return nghttp2_submit_response(session, id, hdrs, st->message_enc[0] ? 4 : 3, NULL);
	}
	nghttp2_nv hdrs[] = { NV(":status", "200"), NV("content-type", "application/grpc") };
	nghttp2_data_provider prd = { .source.ptr = st, .read_callback = read_reply };

	return nghttp2_submit_response(session, id, hdrs, 2, &prd);
}

/* A request's handler, run on a thread of its own so that a slow one (a
 * lookup that pulls an image) holds up no other call of the connection.
 * Owned by that thread until it is on the connection's done list, then
 * by the connection's thread. */
struct job {
	struct conn *cn;
	const struct grpc_method *m;
	int32_t stream_id;
	uint8_t *body; /* the request, its prefix first */
	uint32_t len;  /* of its message */
	struct grpc_reply reply;
	struct dlist_node node;
};

static void job_free(struct job *j)
{
	free(j->body);
	free(j->reply.buf);
	free(j);
}

static void *job_thread(void *arg)
{
	struct job *j = arg;
	struct conn *cn = j->cn;
	uint64_t one = 1;

	j->m->handle(cn->g->userdata, j->m->data, j->body + PREFIX, j->len, &j->reply);
	pthread_mutex_lock(&cn->jobs_lock);
	dlist_push(&cn->done, &j->node);
	pthread_mutex_unlock(&cn->jobs_lock);
	if (write(cn->wake_fd, &one, sizeof(one)) < 0) {
		/* an eventfd's counter does not fill up */
	}
	return NULL;
}

/* Answers the finished jobs whose streams are still open. */
static int collect_jobs(nghttp2_session *session, struct conn *cn)
{
	uint64_t n;
	int r = 0;

	if (read(cn->wake_fd, &n, sizeof(n)) < 0) {
		/* nothing new: the list says so too */
	}
	for (;;) {
		struct dlist_node *node;
		struct stream *st;
		struct job *j;

		pthread_mutex_lock(&cn->jobs_lock);
		node = cn->done.head;
		if (node)
			dlist_remove(&cn->done, node);
		pthread_mutex_unlock(&cn->jobs_lock);
		if (!node)
			return r;
		j = dlist_entry(node, struct job, node);
		cn->running--;
		/* a stream reset meanwhile is gone; ids are never reused */
		st = session ? nghttp2_session_get_stream_user_data(session, j->stream_id) : NULL;
		if (st) {
			free(st->reply.buf);
			st->reply = j->reply;
			j->reply.buf = NULL;
			if (submit_reply(session, j->stream_id, st) != 0)
				r = -EIO;
		}
		job_free(j);
	}
}

/* The request is whole: check its framing, then run its handler on a
 * thread of its own (or here, when no thread can be had), or answer at
 * once with the error. */
static int answer(nghttp2_session *session, struct conn *cn, int32_t id, struct stream *st)
{
	const struct grpc_method *m = st->path_too_long ? NULL : method_of(cn->g, st->path);
	struct grpc_reply *r = &st->reply;
	uint32_t len = 0;
	struct job *j;
	pthread_t t;

	st->answered = true;
	r->peer = cn->peer;
	if (!m)
		grpc_reply_fail(r, GRPC_UNIMPLEMENTED, "unknown method \"%.128s\"", st->path);
	else if (st->too_big)
		grpc_reply_fail(r, GRPC_RESOURCE_EXHAUSTED, "request larger than %u bytes",
				GRPC_MESSAGE_MAX);
	else if (st->len < PREFIX)
		grpc_reply_fail(r, GRPC_INTERNAL, "request without a whole message");
	else if (st->body[0] != 0)
		grpc_reply_fail(r, GRPC_UNIMPLEMENTED, "compressed requests are not supported");
	else if ((len = (uint32_t)st->body[1] << 24 | (uint32_t)st->body[2] << 16 |
			(uint32_t)st->body[3] << 8 | st->body[4]) != st->len - PREFIX)
		grpc_reply_fail(r, GRPC_INTERNAL,
				"request of one message of %u bytes holds %zu bytes", len,
				st->len - PREFIX);
	else if ((j = calloc(1, sizeof(*j)))) {
		*j = (struct job){
			.cn = cn,
			.m = m,
			.stream_id = id,
			.body = st->body,
			.len = len,
			.reply.peer = cn->peer,
		};
		st->body = NULL;
		st->len = 0;
		if (pthread_create(&t, NULL, job_thread, j) == 0) {
			pthread_detach(t);
			cn->running++;
			return 0;
		}
		st->body = TAKE_PTR(j->body);
		st->len = len + PREFIX;
		job_free(j);
		m->handle(cn->g->userdata, m->data, st->body + PREFIX, len, r);
	} else {
		grpc_reply_fail(r, GRPC_RESOURCE_EXHAUSTED, "out of memory");
	}
	return submit_reply(session, id, st);
}

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
	struct conn *cn = user_data;
	struct stream *st;

	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	st = calloc(1, sizeof(*st));
	if (!st)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	if (nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, st) != 0) {
		free(st);
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	}
	dlist_push(&cn->streams, &st->node);
	return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
		     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
		     void *user_data)
{
	struct stream *st;

	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	st = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
	if (!st || namelen != 5 || memcmp(name, ":path", 5) != 0)
		return 0;
	if (valuelen >= sizeof(st->path)) {
		st->path_too_long = true;
		valuelen = sizeof(st->path) - 1;
	}
	memcpy(st->path, value, valuelen);
	st->path[valuelen] = '\0';
	return 0;
}

static int on_data(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data,
		   size_t len, void *user_data)
{
	struct stream *st = nghttp2_session_get_stream_user_data(session, stream_id);
	uint8_t *b;

	if (!st || st->too_big)
		return 0;
	if (len > GRPC_MESSAGE_MAX + PREFIX - st->len) {
		st->too_big = true;
		free(TAKE_PTR(st->body));
		st->len = 0;
		return 0;
	}
	b = realloc(st->body, st->len + len);
	if (!b)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	memcpy(b + st->len, data, len);
	st->body = b;
	st->len += len;
	return 0;
}

static int on_frame(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
	struct stream *st;

	if ((frame->hd.type != NGHTTP2_DATA && frame->hd.type != NGHTTP2_HEADERS) ||
	    !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
		return 0;
	st = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
	if (!st || st->answered)
		return 0;
	return answer(session, user_data, frame->hd.stream_id, st) == 0
		       ? 0
		       : NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int on_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
		    void *user_data)
{
	struct stream *st = nghttp2_session_get_stream_user_data(session, stream_id);

	if (!st)
		return 0;
	dlist_remove(&((struct conn *)user_data)->streams, &st->node);
	stream_free(st);
	nghttp2_session_set_stream_user_data(session, stream_id, NULL);
	return 0;
}

static ssize_t send_bytes(nghttp2_session *session, const uint8_t *data, size_t length, int flags,
			  void *user_data)
{
	struct conn *cn = user_data;
	ssize_t n = send(cn->fd, data, length, MSG_NOSIGNAL);

	if (n >= 0)
		return n;
	if (errno == EAGAIN || errno == EINTR)
		return NGHTTP2_ERR_WOULDBLOCK;
	return NGHTTP2_ERR_CALLBACK_FAILURE;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(nghttp2_session *, nghttp2_session_del)
DEFINE_TRIVIAL_CLEANUP_FUNC(nghttp2_session_callbacks *, nghttp2_session_callbacks_del)

static void serve_conn(struct conn *cn)
{
	_cleanup_(nghttp2_session_callbacks_delp) nghttp2_session_callbacks *cbs = NULL;
	_cleanup_(nghttp2_session_delp) nghttp2_session *session = NULL;
	nghttp2_settings_entry iv[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, STREAMS_MAX },
	};
	uint8_t buf[16384];

	if (nghttp2_session_callbacks_new(&cbs) != 0)
		return;
	nghttp2_session_callbacks_set_send_callback(cbs, send_bytes);
	nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
	if (nghttp2_session_server_new(&session, cbs, cn) != 0 ||
	    nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, iv, ARRAY_SIZE(iv)) != 0)
		return;
	for (;;) {
		struct pollfd p[3] = { { .fd = cn->fd, .events = POLLIN },
				       { .fd = cn->g->stop_pipe[0], .events = POLLIN },
				       { .fd = cn->wake_fd, .events = POLLIN } };
		ssize_t n;

		if (nghttp2_session_send(session) != 0)
			return;
		if (!nghttp2_session_want_read(session) && !nghttp2_session_want_write(session) &&
		    !cn->running)
			return;
		if (nghttp2_session_want_write(session))
			p[0].events |= POLLOUT;
		if (poll(p, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		if (p[1].revents)
			return;
		if (p[2].revents) {
			if (collect_jobs(session, cn) < 0)
				return;
			continue;
		}
		if (p[0].revents & (POLLERR | POLLNVAL))
			return;
		if (!(p[0].revents & (POLLIN | POLLHUP)))
			continue;
		n = recv(cn->fd, buf, sizeof(buf), 0);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0)
			return;
		if (nghttp2_session_mem_recv(session, buf, (size_t)n) < 0)
			return;
	}
}

static void *conn_thread(void *arg)
{
	struct conn *cn = arg;

	cn->wake_fd = eventfd(0, EFD_CLOEXEC);
	if (cn->wake_fd >= 0)
		serve_conn(cn);
	/* the jobs still running write to the connection: waited for */
	while (cn->running) {
		struct pollfd p = { .fd = cn->wake_fd, .events = POLLIN };

		if (poll(&p, 1, -1) > 0)
			collect_jobs(NULL, cn);
	}
	if (cn->wake_fd >= 0)
		close(cn->wake_fd);
	cn->wake_fd = -1;
	while (cn->streams.head) {
		struct stream *st = dlist_entry(cn->streams.head, struct stream, node);

		dlist_remove(&cn->streams, &st->node);
		stream_free(st);
	}
	close(cn->fd);
	pthread_mutex_lock(&cn->g->lock);
	cn->fd = -1;
	cn->state = CONN_DONE;
	pthread_mutex_unlock(&cn->g->lock);
	return NULL;
}

/* A free slot, joining the thread of one that is done; NULL when all
 * run.  With the lock held. */
static struct conn *free_slot(struct grpcserver *g)
{
	for (size_t i = 0; i < GRPC_CONNECTIONS_MAX; i++) {
		struct conn *cn = &g->conns[i];

		if (cn->state == CONN_DONE) {
			pthread_join(cn->thread, NULL);
			cn->state = CONN_FREE;
		}
		if (cn->state == CONN_FREE)
			return cn;
	}
	return NULL;
}

static struct grpc_peer peer_of(int fd)
{
	struct ucred uc;
	socklen_t len = sizeof(uc);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0 || len != sizeof(uc))
		return (struct grpc_peer){ 0 };
	return (struct grpc_peer){ .pid = uc.pid, .uid = uc.uid, .gid = uc.gid };
}

static void *acceptor_thread(void *arg)
{
	struct grpcserver *g = arg;

	for (;;) {
		struct pollfd p[2] = { { .fd = g->fd, .events = POLLIN },
				       { .fd = g->stop_pipe[0], .events = POLLIN } };
		struct conn *cn;
		int fd;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		fd = accept4(g->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			continue;
		pthread_mutex_lock(&g->lock);
		cn = free_slot(g);
		if (cn) {
			cn->fd = fd;
			cn->peer = peer_of(fd);
			cn->state = CONN_RUNNING;
			if (pthread_create(&cn->thread, NULL, conn_thread, cn) != 0) {
				cn->state = CONN_FREE;
				cn->fd = -1;
				cn = NULL;
			}
		}
		pthread_mutex_unlock(&g->lock);
		if (!cn)
			close(fd);
	}
	return NULL;
}

/* --------------------------------------------------------------- life */

int grpcserver_new(const char *path, int listen_fd, bool predecessors,
		   const struct grpc_method *methods, size_t n_methods, void *userdata,
		   struct grpcserver **ret, char *errbuf, size_t errlen)
{
	struct grpcserver *g;
	int r;

	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->fd = g->stop_pipe[0] = g->stop_pipe[1] = -1;
	g->methods = methods;
	g->n_methods = n_methods;
	g->userdata = userdata;
	pthread_mutex_init(&g->lock, NULL);
	for (size_t i = 0; i < GRPC_CONNECTIONS_MAX; i++) {
		g->conns[i] = (struct conn){ .g = g, .fd = -1, .wake_fd = -1 };
		pthread_mutex_init(&g->conns[i].jobs_lock, NULL);
	}
	g->path = strdup(path);
	if (!g->path || pipe2(g->stop_pipe, O_CLOEXEC) < 0) {
		r = g->path ? negative_errno() : -ENOMEM;
		goto fail;
	}
	if (listen_fd >= 0) {
		g->fd = listen_fd;
	} else {
		r = unixsock_listen(path, "snapshotter socket", predecessors, GRPC_CONNECTIONS_MAX,
				    &g->fd, errbuf, errlen);
		if (r < 0)
			goto fail;
		g->bound = true;
	}
	*ret = g;
	return 0;
fail:
	grpcserver_free(g);
	return r;
}

int grpcserver_start(struct grpcserver *g)
{
	int r = -pthread_create(&g->acceptor, NULL, acceptor_thread, g);

	if (r == 0)
		g->started = true;
	return r;
}

void grpcserver_stop(struct grpcserver *g)
{
	if (!g || !g->started)
		return;
	/* the pipe stays readable: every thread polling it ends */
	if (write(g->stop_pipe[1], "x", 1) != 1)
		return;
	pthread_join(g->acceptor, NULL);
	g->started = false;
	for (size_t i = 0; i < GRPC_CONNECTIONS_MAX; i++) {
		struct conn *cn = &g->conns[i];

		pthread_mutex_lock(&g->lock);
		bool joinable = cn->state != CONN_FREE;
		pthread_mutex_unlock(&g->lock);
		if (joinable)
			pthread_join(cn->thread, NULL);
		cn->state = CONN_FREE;
	}
}

void grpcserver_free(struct grpcserver *g)
{
	if (!g)
		return;
	grpcserver_stop(g);
	if (g->fd >= 0)
		close(g->fd);
	if (g->stop_pipe[0] >= 0) {
		close(g->stop_pipe[0]);
		close(g->stop_pipe[1]);
	}
	if (g->bound && g->path)
		unlink(g->path);
	pthread_mutex_destroy(&g->lock);
	for (size_t i = 0; i < GRPC_CONNECTIONS_MAX; i++)
		pthread_mutex_destroy(&g->conns[i].jobs_lock);
	free(g->path);
	free(g);
}

/* A small gRPC server on a Unix socket: HTTP/2 by libnghttp2, gRPC's
 * length-prefixed messages on top, unary and server-streaming methods
 * answered from one table of handlers.  The messages themselves are the
 * handlers' business (protobuf-c in the snapshotter).
 *
 * Each connection has a thread that speaks HTTP/2, and each request's
 * handler a thread of its own: a slow call (a lookup that pulls an image)
 * holds up no other call of the connection.  Handlers are called
 * concurrently. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* gRPC status codes used here. */
enum {
	GRPC_OK = 0,
	GRPC_UNKNOWN = 2,
	GRPC_INVALID_ARGUMENT = 3,
	GRPC_NOT_FOUND = 5,
	GRPC_ALREADY_EXISTS = 6,
	GRPC_RESOURCE_EXHAUSTED = 8,
	GRPC_FAILED_PRECONDITION = 9,
	GRPC_UNIMPLEMENTED = 12,
	GRPC_INTERNAL = 13,
	GRPC_UNAVAILABLE = 14,
};

/* Largest request message taken (gRPC's default receive limit). */
#define GRPC_MESSAGE_MAX (4u << 20)
#define GRPC_CONNECTIONS_MAX 16

/* The process that connected, as the kernel gave it at its connect()
 * (SO_PEERCRED); pid 0 when unknown. */
struct grpc_peer {
	pid_t pid;
	uid_t uid;
	gid_t gid;
};

/* What a handler answers: zero or more messages, then a status.  peer is
 * the caller, set before the handler runs. */
struct grpc_reply {
	uint8_t *buf; /* the messages, each with its 5-byte prefix */
	size_t len, cap;
	int status;
	char message[512];
	struct grpc_peer peer;
};

/* Appends one message of len bytes, packed by pack(msg, out) into the
 * len bytes at out.  Returns 0 or -ENOMEM. */
int grpc_reply_add(struct grpc_reply *r, size_t len, void (*pack)(const void *msg, uint8_t *out),
		   const void *msg);
/* Sets the status and its message (printf format); drops the messages
 * added when code is not GRPC_OK. */
void grpc_reply_fail(struct grpc_reply *r, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* A method: its path ("/package.Service/Method") and its handler, called
 * on a thread of the request's own with the server's userdata, the
 * method's data,
 * the request's message (len bytes, owned by the server) and a reply
 * whose status is GRPC_OK. */
struct grpc_method {
	const char *path;
	void (*handle)(void *userdata, const void *data, const uint8_t *msg, size_t len,
		       struct grpc_reply *reply);
	const void *data;
};

struct grpcserver;

/* Serves listen_fd, a listening socket bound to path by someone else (the
 * supervisor), which the server closes but never unlinks; or, when
 * listen_fd is -1, binds path (mode 0600) and listens, and removes it at
 * grpcserver_free.  A socket already at path is then replaced when
 * nothing answers on it, or always when predecessors (a previous serving
 * process of this daemon may still hold it); any other file there is an
 * error.  methods is borrowed until grpcserver_free.  Returns 0 and a
 * server owned by the caller, or -errno with a one-line reason in
 * errbuf. */
int grpcserver_new(const char *path, int listen_fd, bool predecessors,
		   const struct grpc_method *methods, size_t n_methods, void *userdata,
		   struct grpcserver **ret, char *errbuf, size_t errlen);
/* Serves from threads of its own (after any fork).  Returns 0 or -errno. */
int grpcserver_start(struct grpcserver *g);
/* Stops serving: closes every connection and joins every thread, waiting
 * for handlers that run.  Accepts NULL and a server never started. */
void grpcserver_stop(struct grpcserver *g);
/* Stops, removes the socket and frees.  Accepts NULL. */
void grpcserver_free(struct grpcserver *g);

/* The control socket (docs/control.md): a Unix stream socket that takes
 * one JSON request per connection for what cannot be a write to the
 * read-only mount -- inspect, rm, gc -- and status. */
#pragma once

struct manager;
struct control;

/* Returns the status document (a json_t *, owned by the caller). */
typedef void *(*control_status_fn)(void *userdata);

/* Binds path (replacing a stale socket; mode 0600), and serves it from a
 * thread of its own.  Only root and the daemon's own user may talk to
 * it.  Returns 0 or -errno. */
int control_start(const char *path, struct manager *m,
		  control_status_fn status, void *userdata,
		  struct control **ret);
/* Stops the thread, removes the socket.  Accepts NULL. */
void control_stop(struct control *c);

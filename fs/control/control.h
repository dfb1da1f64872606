/* The control socket (docs/control.md): a Unix stream socket that takes
 * one JSON request per connection for what cannot be a write to the
 * read-only mount -- inspect, rm, gc -- and status. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

struct manager;
struct control;

/* At most this many connections are served at once; at the bound, the
 * connection that has waited longest for its request is dropped with an
 * EAGAIN answer to make room (or, when every one is running a request, the
 * new one gets that answer). */
#define CONTROL_CONNECTIONS_MAX 64
/* A client must have sent its whole request this long after it connected,
 * and the answer must be taken within as long again. */
#define CONTROL_DEADLINE_S 10

/* Returns the status document, owned by the caller; NULL when out of
 * memory. */
typedef json_t *(*control_status_fn)(void *userdata);
/* Returns once the filesystem has acted on what the manager reported
 * (removed names), before the answer of rm or gc goes out. */
typedef void (*control_settle_fn)(void *userdata);

/* The upgrade verb: 0 with the answer, or -errno with the reason in err;
 * once an accepted upgrade was answered, answered(userdata) is called
 * from the connection's thread. */
struct error_detail;
typedef int (*control_upgrade_fn)(void *userdata, json_t **ret, struct error_detail *err);
typedef void (*control_answered_fn)(void *userdata);

/* Binds path and listens, mode 0600, replacing a socket left by a dead
 * daemon (but not one something still answers on, nor a file that is not
 * a socket).  predecessors: whatever is at path is a previous serving
 * process's of this cache, even if it still accepts (one killed with a
 * thread held in the kernel: its descriptors live on), and is replaced.
 * Nothing is served before control_start, so this may run
 * before the daemon forks.  Returns 0 and a new control owned by the
 * caller, or -errno with a one-line reason in errbuf. */
int control_new(const char *path, bool predecessors, struct manager *m, struct control **ret,
		char *errbuf, size_t errlen);

/* Serves the socket from threads of its own (call after any fork).  Only
 * root and the daemon's own user may talk to it.  status makes the status
 * document; settle (may be NULL) follows rm and gc.  Returns 0 or -errno. */
int control_start(struct control *c, control_status_fn status, control_settle_fn settle,
		  void *userdata);

/* Before control_start: serve "upgrade" with these (the same userdata);
 * without, the verb answers EOPNOTSUPP. */
void control_set_upgrade(struct control *c, control_upgrade_fn upgrade,
			 control_answered_fn answered);

/* Stops serving: closes every connection and joins every thread, waiting
 * for requests that are running.  The socket stays bound.  Accepts NULL
 * and a control that was never started. */
void control_stop(struct control *c);

/* Stops, removes the socket and frees.  Accepts NULL. */
void control_free(struct control *c);

/* The path it is bound to; owned by c. */
const char *control_path(const struct control *c);

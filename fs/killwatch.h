/* Whether the thread behind a request is dying, now and while it waits.
 *
 * The kernel sends FUSE_INTERRUPT once per request, for the first signal
 * that reaches the waiting thread, whatever that signal does: one the
 * program handles and continues after (a Go runtime's SIGURG, a timer's
 * SIGALRM) as much as a fatal one.  After it, the thread waits killable
 * only, and a request the daemon has read is waited for even by a dying
 * thread: the daemon's answer is what lets it go.  A read of a regular
 * file is not ended by a handled signal on a local disk, so pullfs
 * answers EINTR only to a thread that is dying, and keeps serving the
 * others.  A fatal signal mostly leaves SIGKILL pending on every thread
 * of its process (complete_signal() in kernel/signal.c; exit_group() and
 * a core dump do the same to the other threads), but not when the
 * thread it falls to had a signal pending already, as one interrupted by
 * a handled signal has: then the fatal signal itself stays pending, to
 * end the process as soon as the request returns.  Either is dying.
 *
 * A signal that turns fatal after the interrupt (a kill -9 of a reader
 * first interrupted by a handled signal) brings no second FUSE_INTERRUPT,
 * so an interrupted request whose thread was not dying is watched: a
 * thread of its own looks at every watched thread a few times a second
 * and calls the entry's dying function for the first one found dying. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "dlist.h"

struct killwatch;

struct killwatch_entry {
	/* Set by the caller before killwatch_add(), read-only afterwards. */
	pid_t tid; /* as the kernel numbered the request's thread */
	/* Called once, on the watcher's thread with no lock of
	 * killwatch's held, when tid is found dying; the entry is no longer
	 * watched then. */
	void (*dying)(struct killwatch_entry *e);
	void *data;		/* the caller's */
	struct dlist_node node; /* killwatch's own, under its lock */
};

/* A watcher with no thread yet (the first killwatch_add() starts it, so
 * that it may be made before the daemon forks); NULL when out of memory. */
struct killwatch *killwatch_new(void);

/* Stops and joins the thread (with the session over, no request waits
 * any more).  NULL is fine. */
void killwatch_free(struct killwatch *kw);

/* True when thread tid (a number of the pid namespace of /proc, which
 * is the mount's) has SIGKILL pending, on itself or its process, or a
 * signal whose default action ends the process that it neither blocks,
 * handles nor ignores (and is neither traced nor the init of its pid
 * namespace).  False when it cannot be told: tid 0 (the kernel's number
 * for a thread outside the mount's pid namespace) or no /proc entry.
 * Reads /proc; does not block otherwise. */
bool killwatch_dying(pid_t tid);

/* The same judgement on the text of a /proc/TID/status (NUL-terminated). */
bool killwatch_status_dying(const char *status);

/* Watches e until killwatch_remove() or its dying function.  Any locks;
 * takes killwatch's own (a dying function must not be waiting for a lock
 * its caller holds).  -ENOMEM or -EAGAIN when the watcher's thread could
 * not start: e is then not watched. */
int killwatch_add(struct killwatch *kw, struct killwatch_entry *e);

/* Stops watching e; once it returns, e's dying function is not running
 * and will not run, so e may be freed.  Must not be called with a lock
 * that e's dying function takes. */
void killwatch_remove(struct killwatch *kw, struct killwatch_entry *e);

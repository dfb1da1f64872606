/* Whether the thread behind a request is dying (killwatch.h): a look at
 * /proc/TID/status, and a thread that looks again while requests whose
 * thread a handled signal interrupted still wait. */
#include "killwatch.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fileio.h"
#include "macro.h"

/* How often a watched thread is looked at: the delay between a fatal
 * signal that came after the interrupt and the answer that lets the
 * thread die. */
#define KILLWATCH_PERIOD_NS (100 * 1000 * 1000L)

struct killwatch {
	pthread_mutex_t lock;
	pthread_cond_t cond;		       /* an entry added, or stop */
	pthread_cond_t done_cond;	       /* a dying function returned */
	struct dlist watched;		       /* of struct killwatch_entry; lock */
	const struct killwatch_entry *running; /* lock: whose dying function runs */
	bool started;			       /* lock */
	bool stop;			       /* lock */
	pthread_t thread;
};

/* The value of a line "KEY:\tVALUE" of status, in base (a list: its
 * last number); 0 when absent. */
static uint64_t status_field(const char *status, const char *key, int base)
{
	size_t klen = strlen(key);

	for (const char *p = status; p; p = strchr(p, '\n')) {
		if (*p == '\n')
			p++;
		if (!strncmp(p, key, klen)) {
			const char *end = p + klen + strcspn(p + klen, "\n");

			while (end > p + klen && (end[-1] == ' ' || end[-1] == '\t'))
				end--;
			while (end > p + klen && end[-1] != ' ' && end[-1] != '\t')
				end--;
			return strtoull(end, NULL, base);
		}
	}
	return 0;
}

#define SIGBIT(sig) (UINT64_C(1) << ((sig)-1))

/* Signals whose default action ends the process: all but those ignored
 * (SIGCHLD, SIGURG, SIGWINCH), continuing and stopping by default. */
#define DEFAULT_FATAL                                                              \
	(~(SIGBIT(SIGCHLD) | SIGBIT(SIGURG) | SIGBIT(SIGWINCH) | SIGBIT(SIGCONT) | \
	   SIGBIT(SIGSTOP) | SIGBIT(SIGTSTP) | SIGBIT(SIGTTIN) | SIGBIT(SIGTTOU)))

bool killwatch_status_dying(const char *status)
{
	uint64_t pending =
		status_field(status, "SigPnd:", 16) | status_field(status, "ShdPnd:", 16);

	if (pending & SIGBIT(SIGKILL))
		return true;
	/* A fatal signal that is not SIGKILL is left pending alone when the
	 * thread had a signal pending already (a handled one that
	 * interrupted it: complete_signal() wakes no thread then, and takes
	 * nobody down early); the thread dies of it as soon as the request
	 * returns, unless it blocks it, handles or ignores it, is traced (a
	 * debugger may cancel the signal) or is the init of its pid
	 * namespace (which ignores such signals). */
	if (status_field(status, "TracerPid:", 10) != 0 || status_field(status, "NSpid:", 10) == 1)
		return false;
	pending &= ~(status_field(status, "SigBlk:", 16) | status_field(status, "SigIgn:", 16) |
		     status_field(status, "SigCgt:", 16));
	return (pending & DEFAULT_FATAL) != 0;
}

bool killwatch_dying(pid_t tid)
{
	_cleanup_free_ char *buf = NULL;
	_cleanup_close_ int fd = -1;
	char path[64];

	if (tid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%ld/status", (long)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read_full(fd, 1 << 20, &buf, NULL) < 0)
		return false;
	return killwatch_status_dying(buf);
}

struct killwatch *killwatch_new(void)
{
	struct killwatch *kw = calloc(1, sizeof(*kw));
	pthread_condattr_t attr;

	if (!kw)
		return NULL;
	pthread_mutex_init(&kw->lock, NULL);
	/* the watcher's deadlines are on the monotonic clock */
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&kw->cond, &attr);
	pthread_condattr_destroy(&attr);
	pthread_cond_init(&kw->done_cond, NULL);
	return kw;
}

/* The first watched entry whose thread is dying, unlinked; NULL if none. */
static struct killwatch_entry *find_dying_locked(struct killwatch *kw)
{
	for (struct dlist_node *n = kw->watched.head; n; n = n->next) {
		struct killwatch_entry *e = dlist_entry(n, struct killwatch_entry, node);

		if (killwatch_dying(e->tid)) {
			dlist_remove(&kw->watched, n);
			return e;
		}
	}
	return NULL;
}

static void *watcher(void *data)
{
	struct killwatch *kw = data;

	pthread_mutex_lock(&kw->lock);
	while (!kw->stop) {
		struct killwatch_entry *e;
		struct timespec until;

		if (!kw->watched.head) {
			pthread_cond_wait(&kw->cond, &kw->lock);
			continue;
		}
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_nsec += KILLWATCH_PERIOD_NS;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		while (!kw->stop &&
		       pthread_cond_timedwait(&kw->cond, &kw->lock, &until) != ETIMEDOUT)
			;
		while (!kw->stop && (e = find_dying_locked(kw))) {
			kw->running = e;
			pthread_mutex_unlock(&kw->lock);
			e->dying(e);
			pthread_mutex_lock(&kw->lock);
			kw->running = NULL;
			pthread_cond_broadcast(&kw->done_cond);
		}
	}
	pthread_mutex_unlock(&kw->lock);
	return NULL;
}

int killwatch_add(struct killwatch *kw, struct killwatch_entry *e)
{
	int r = 0;

	pthread_mutex_lock(&kw->lock);
	if (!kw->started) {
		r = -pthread_create(&kw->thread, NULL, watcher, kw);
		kw->started = r == 0;
	}
	if (r == 0 && !e->node.linked) {
		dlist_push(&kw->watched, &e->node);
		pthread_cond_signal(&kw->cond);
	}
	pthread_mutex_unlock(&kw->lock);
	return r;
}

void killwatch_remove(struct killwatch *kw, struct killwatch_entry *e)
{
	pthread_mutex_lock(&kw->lock);
	while (kw->running == e)
		pthread_cond_wait(&kw->done_cond, &kw->lock);
	dlist_remove(&kw->watched, &e->node);
	pthread_mutex_unlock(&kw->lock);
}

void killwatch_free(struct killwatch *kw)
{
	bool started;

	if (!kw)
		return;
	pthread_mutex_lock(&kw->lock);
	kw->stop = true;
	started = kw->started;
	pthread_cond_signal(&kw->cond);
	pthread_mutex_unlock(&kw->lock);
	if (started)
		pthread_join(kw->thread, NULL);
	pthread_cond_destroy(&kw->cond);
	pthread_cond_destroy(&kw->done_cond);
	pthread_mutex_destroy(&kw->lock);
	free(kw);
}

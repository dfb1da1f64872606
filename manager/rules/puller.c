/* Pull slots with a bounded FIFO queue; see puller.h. */
#include "puller.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "macro.h"
#include "waitlist.h"

/* One blocking wait is cut to this much real time, so that a clock that
 * disagrees with CLOCK_MONOTONIC cannot park a waiter for ages. */
#define MAX_WAIT_SLICE_NS (60 * CLOCK_NS_PER_SEC)

/* A caller in the line, on its stack. */
struct waiter {
	struct dlist_node node;
	const char *key; /* its registry; NULL: none */
};

struct puller {
	unsigned max_parallel;
	unsigned max_queue;
	int64_t share_after_ns; /* < 0: never */
	const struct clock *clock;

	pthread_mutex_t lock;
	pthread_cond_t cond; /* a slot freed, the head moved, shutdown or wake */
	/* All below under lock. */
	unsigned running;
	/* The slots taken with a puller_slot (oldest first): the ones that
	 * may be shared. */
	struct dlist slots;
	/* Of struct waiter.  The first waiter in line that may take a slot
	 * takes it, which keeps the queue FIFO among the pulls a slot is
	 * free for. */
	struct dlist waiters;
	bool shutdown;
	uint64_t entered;
	uint64_t refused;
	uint64_t abandoned;
	uint64_t shared;
};

int puller_new(const struct puller_options *opts, struct puller **ret)
{
	struct puller *p = calloc(1, sizeof(*p));
	pthread_condattr_t attr;
	int r;

	if (!p)
		return -ENOMEM;
	p->max_parallel =
		opts && opts->max_parallel ? opts->max_parallel : PULLER_DEFAULT_MAX_PARALLEL;
	p->max_queue = opts && opts->max_queue ? opts->max_queue : PULLER_DEFAULT_MAX_QUEUE;
	p->share_after_ns = opts && opts->share_after_ns
				    ? opts->share_after_ns
				    : PULLER_DEFAULT_SHARE_AFTER_S * CLOCK_NS_PER_SEC;
	p->clock = opts && opts->clock ? opts->clock : clock_monotonic();
	pthread_mutex_init(&p->lock, NULL);
	r = -pthread_condattr_init(&attr);
	if (r < 0) {
		free(p);
		return r;
	}
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	r = -pthread_cond_init(&p->cond, &attr);
	pthread_condattr_destroy(&attr);
	if (r < 0) {
		pthread_mutex_destroy(&p->lock);
		free(p);
		return r;
	}
	*ret = p;
	return 0;
}

void puller_free(struct puller *p)
{
	if (!p)
		return;
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/* Whether slot s, at now, holds back a pull of registry key. */
static bool slot_blocks(const struct puller *p, const struct puller_slot *s, const char *key,
			int64_t now)
{
	return p->share_after_ns < 0 || !key || strcmp(s->key, key) == 0 ||
	       now - s->since_ns < p->share_after_ns;
}

/* The running pulls that hold back a pull of key at now; with
 * ret_next_ns, when (after now) the next of them stops doing so, or
 * INT64_MAX. */
static unsigned blocking_locked(const struct puller *p, const char *key, int64_t now,
				int64_t *ret_next_ns)
{
	unsigned free_of = 0;
	int64_t next = INT64_MAX;

	for (const struct dlist_node *n = p->slots.head; n; n = n->next) {
		const struct puller_slot *s = dlist_entry(n, struct puller_slot, node);

		if (!slot_blocks(p, s, key, now))
			free_of++;
		else if (p->share_after_ns >= 0 && key && strcmp(s->key, key) != 0)
			next = MIN(next, s->since_ns + p->share_after_ns);
	}
	if (ret_next_ns)
		*ret_next_ns = next;
	return p->running - free_of;
}

static bool may_enter_locked(const struct puller *p, const char *key, int64_t now)
{
	return blocking_locked(p, key, now, NULL) < p->max_parallel;
}

/* Whether me is the first in line that may take a slot at now. */
static bool first_to_enter_locked(const struct puller *p, const struct waiter *me, int64_t now)
{
	for (const struct dlist_node *n = p->waiters.head; n; n = n->next) {
		const struct waiter *w = dlist_entry(n, struct waiter, node);

		if (may_enter_locked(p, w->key, now))
			return w == me;
		if (w == me)
			return false;
	}
	return false;
}

static void enter_locked(struct puller *p, struct puller_slot *slot, const char *key, int64_t now)
{
	if (p->running >= p->max_parallel)
		p->shared++;
	p->running++;
	p->entered++;
	if (slot)
		*slot = (struct puller_slot){ .key = key, .since_ns = now };
	if (slot && key)
		dlist_push(&p->slots, &slot->node);
}

static void wait_until_locked(struct puller *p, int64_t due, int64_t now)
{
	struct timespec ts;

	if (due == INT64_MAX) {
		pthread_cond_wait(&p->cond, &p->lock);
		return;
	}
	ts = clock_mono_deadline(MIN(MAX(due - now, 0), MAX_WAIT_SLICE_NS));
	pthread_cond_timedwait(&p->cond, &p->lock, &ts);
}

int puller_enter(struct puller *p, struct puller_slot *slot, const char *key,
		 const atomic_bool *abandon)
{
	struct waiter me = { .key = slot ? key : NULL };
	int64_t now, next;
	int r = 0;

	pthread_mutex_lock(&p->lock);
	r = waitlist_cancelled(p->shutdown, abandon, &p->abandoned);
	if (r < 0)
		goto out;
	now = clock_now_ns(p->clock);
	if (p->waiters.len == 0 && may_enter_locked(p, me.key, now)) {
		enter_locked(p, slot, me.key, now);
		goto out;
	}
	if (p->waiters.len >= p->max_queue) {
		p->refused++;
		r = -EAGAIN;
		goto out;
	}

	dlist_push(&p->waiters, &me.node);
	for (;;) {
		r = waitlist_cancelled(p->shutdown, abandon, &p->abandoned);
		if (r < 0)
			break;
		now = clock_now_ns(p->clock);
		if (first_to_enter_locked(p, &me, now)) {
			enter_locked(p, slot, me.key, now);
			break;
		}
		/* A slot of another registry may turn shareable with no
		 * one leaving: wake for it. */
		(void)blocking_locked(p, me.key, now, &next);
		wait_until_locked(p, next, now);
	}
	/* With more than one free slot, or when we gave up without a slot,
	 * the next in line may enter; it only learns of its turn from us. */
	dlist_remove(&p->waiters, &me.node);
	pthread_cond_broadcast(&p->cond);
out:
	pthread_mutex_unlock(&p->lock);
	return r;
}

void puller_leave(struct puller *p, struct puller_slot *slot)
{
	pthread_mutex_lock(&p->lock);
	p->running--;
	if (slot)
		dlist_remove(&p->slots, &slot->node);
	/* Broadcast: a signal could wake a waiter that is not at the head. */
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

void puller_wake(struct puller *p)
{
	pthread_mutex_lock(&p->lock);
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

void puller_shutdown(struct puller *p)
{
	pthread_mutex_lock(&p->lock);
	p->shutdown = true;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

void puller_get_stats(struct puller *p, struct puller_stats *ret)
{
	pthread_mutex_lock(&p->lock);
	ret->running = p->running;
	ret->queued = p->waiters.len;
	ret->max_parallel = p->max_parallel;
	ret->max_queue = p->max_queue;
	ret->entered = p->entered;
	ret->refused = p->refused;
	ret->abandoned = p->abandoned;
	ret->shared = p->shared;
	pthread_mutex_unlock(&p->lock);
}

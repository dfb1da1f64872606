/* Pull slots with a bounded FIFO queue; see puller.h. */
#include "puller.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "waitlist.h"

struct puller {
	unsigned max_parallel;
	unsigned max_queue;

	pthread_mutex_t lock;
	pthread_cond_t cond; /* a slot freed, the head moved, shutdown or wake */
	/* All below under lock. */
	unsigned running;
	/* Only the head of the line may take a free slot, which keeps the
	 * queue FIFO. */
	struct dlist waiters;
	bool shutdown;
	uint64_t entered;
	uint64_t refused;
	uint64_t abandoned;
};

int puller_new(const struct puller_options *opts, struct puller **ret)
{
	struct puller *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->max_parallel =
		opts && opts->max_parallel ? opts->max_parallel : PULLER_DEFAULT_MAX_PARALLEL;
	p->max_queue = opts && opts->max_queue ? opts->max_queue : PULLER_DEFAULT_MAX_QUEUE;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
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

int puller_enter(struct puller *p, const atomic_bool *abandon)
{
	struct dlist_node me = { 0 };
	int r = 0;

	pthread_mutex_lock(&p->lock);
	r = waitlist_cancelled(p->shutdown, abandon, &p->abandoned);
	if (r < 0)
		goto out;
	if (p->waiters.len == 0 && p->running < p->max_parallel) {
		p->running++;
		p->entered++;
		goto out;
	}
	if (p->waiters.len >= p->max_queue) {
		p->refused++;
		r = -EAGAIN;
		goto out;
	}

	dlist_push(&p->waiters, &me);
	for (;;) {
		r = waitlist_cancelled(p->shutdown, abandon, &p->abandoned);
		if (r < 0)
			break;
		if (waitlist_is_head(&p->waiters, &me) && p->running < p->max_parallel) {
			p->running++;
			p->entered++;
			break;
		}
		pthread_cond_wait(&p->cond, &p->lock);
	}
	/* With more than one free slot, or when we gave up the head without
	 * a slot, the next in line may enter; it only learns of its turn
	 * from us. */
	if (waitlist_remove(&p->waiters, &me))
		pthread_cond_broadcast(&p->cond);
out:
	pthread_mutex_unlock(&p->lock);
	return r;
}

void puller_leave(struct puller *p)
{
	pthread_mutex_lock(&p->lock);
	p->running--;
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
	pthread_mutex_unlock(&p->lock);
}

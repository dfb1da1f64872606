/* The worker thread of a byte stream; see bytepipe.h. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bytepipe.h"
#include "macro.h"

/* The most the worker takes at once: the producer gets room back while
 * it works through a full ring. */
#define BYTEPIPE_PIECE ((size_t)1 << 20)
/* The worker is woken once this many bytes wait (or a settle or the stop
 * asks): one wake-up for many puts. */
#define BYTEPIPE_WAKE ((size_t)256 << 10)

struct bytepipe {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* head, tail or stop moved */
	unsigned char *ring;
	size_t cap;
	/* bytes ever put and ever consumed: ring[tail % cap] is the next
	 * the worker takes, ring[head % cap] the next the producer fills */
	uint64_t head, tail;
	bool stop;
	/* who sleeps on cond: the worker for bytes, the producer for room or
	 * for the worker to finish (a settle) */
	bool worker_waits, producer_waits;
	bytepipe_fn fn;
	void *userdata;
};

static void *worker(void *arg)
{
	struct bytepipe *p = arg;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		size_t at, n;

		while (p->head == p->tail && !p->stop) {
			p->worker_waits = true;
			pthread_cond_wait(&p->cond, &p->lock);
			p->worker_waits = false;
		}
		if (p->stop)
			break;
		at = (size_t)(p->tail % p->cap);
		n = MIN((size_t)(p->head - p->tail), MIN(p->cap - at, BYTEPIPE_PIECE));
		/* the producer writes only outside [tail, head) */
		pthread_mutex_unlock(&p->lock);
		p->fn(p->userdata, p->ring + at, n);
		pthread_mutex_lock(&p->lock);
		p->tail += n;
		if (p->producer_waits)
			pthread_cond_broadcast(&p->cond);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int bytepipe_new(size_t cap, bytepipe_fn fn, void *userdata, struct bytepipe **ret)
{
	struct bytepipe *p;
	int r;

	if (cap == 0)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->ring = malloc(cap);
	if (!p->ring) {
		free(p);
		return -ENOMEM;
	}
	p->cap = cap;
	p->fn = fn;
	p->userdata = userdata;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	r = pthread_create(&p->thread, NULL, worker, p);
	if (r != 0) {
		pthread_cond_destroy(&p->cond);
		pthread_mutex_destroy(&p->lock);
		free(p->ring);
		free(p);
		return -r;
	}
	*ret = p;
	return 0;
}

void bytepipe_put(struct bytepipe *p, const void *buf, size_t len)
{
	const unsigned char *d = buf;

	while (len > 0) {
		size_t at, n;

		pthread_mutex_lock(&p->lock);
		while (p->head - p->tail == p->cap) {
			if (p->worker_waits)
				pthread_cond_broadcast(&p->cond);
			p->producer_waits = true;
			pthread_cond_wait(&p->cond, &p->lock);
			p->producer_waits = false;
		}
		at = (size_t)(p->head % p->cap);
		n = MIN(len, MIN(p->cap - (size_t)(p->head - p->tail), p->cap - at));
		pthread_mutex_unlock(&p->lock);
		/* the worker reads only inside [tail, head) */
		memcpy(p->ring + at, d, n);
		pthread_mutex_lock(&p->lock);
		p->head += n;
		if (p->worker_waits && p->head - p->tail >= MIN(BYTEPIPE_WAKE, p->cap))
			pthread_cond_broadcast(&p->cond);
		pthread_mutex_unlock(&p->lock);
		d += n;
		len -= n;
	}
}

void bytepipe_settle(struct bytepipe *p)
{
	pthread_mutex_lock(&p->lock);
	while (p->tail != p->head) {
		if (p->worker_waits)
			pthread_cond_broadcast(&p->cond);
		p->producer_waits = true;
		pthread_cond_wait(&p->cond, &p->lock);
		p->producer_waits = false;
	}
	pthread_mutex_unlock(&p->lock);
}

void bytepipe_free(struct bytepipe *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->thread, NULL);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p->ring);
	free(p);
}

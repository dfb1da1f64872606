/* Background hashing of a layer's objects; see objhash.h. */
#include "objhash.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "macro.h"

#define OBJHASH_BLOCK (1u << 20)

struct objhash_job {
	int fd;
	uint64_t size;
	char hex[DIGEST_HEX_LEN + 1];
};

struct objhash {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct objhash_job *jobs; /* lock */
	size_t n, cap, next;	  /* lock: queued, allocated, taken */
	bool closing;		  /* lock: no more jobs */
	int err;		  /* lock */
	char (*hex)[DIGEST_HEX_LEN + 1];
};

static int hash_fd(int fd, uint64_t size, unsigned char *buf, char hex[DIGEST_HEX_LEN + 1])
{
	char digest[DIGEST_STRING_MAX];
	struct hasher *h = hasher_new();
	uint64_t off = 0;

	if (!h)
		return -ENOMEM;
	while (off < size) {
		ssize_t n = pread(fd, buf, (size_t)MIN(size - off, (uint64_t)OBJHASH_BLOCK),
				  (off_t)off);

		if (n <= 0) {
			hasher_free(h);
			return -EIO;
		}
		hasher_update(h, buf, (size_t)n);
		off += (uint64_t)n;
	}
	hasher_final(h, digest);
	hasher_free(h);
	memcpy(hex, digest_hex(digest), DIGEST_HEX_LEN + 1);
	return 0;
}

static void *objhash_thread(void *arg)
{
	struct objhash *q = arg;
	unsigned char *buf = malloc(OBJHASH_BLOCK);

	pthread_mutex_lock(&q->lock);
	for (;;) {
		struct objhash_job job;
		size_t i;
		int r;

		while (q->next == q->n && !q->closing)
			pthread_cond_wait(&q->cond, &q->lock);
		if (q->next == q->n)
			break;
		i = q->next++;
		job = q->jobs[i];
		pthread_mutex_unlock(&q->lock);
		r = buf ? hash_fd(job.fd, job.size, buf, job.hex) : -ENOMEM;
		close(job.fd);
		pthread_mutex_lock(&q->lock);
		/* the array may have moved meanwhile */
		memcpy(q->jobs[i].hex, job.hex, sizeof(job.hex));
		q->jobs[i].fd = -1;
		if (r < 0 && q->err == 0)
			q->err = r;
		pthread_cond_broadcast(&q->cond);
	}
	pthread_mutex_unlock(&q->lock);
	free(buf);
	return NULL;
}

int objhash_start(struct objhash **ret)
{
	struct objhash *q = calloc(1, sizeof(*q));
	int r;

	if (!q)
		return -ENOMEM;
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->cond, NULL);
	r = pthread_create(&q->thread, NULL, objhash_thread, q);
	if (r != 0) {
		pthread_mutex_destroy(&q->lock);
		pthread_cond_destroy(&q->cond);
		free(q);
		return -r;
	}
	*ret = q;
	return 0;
}

int objhash_add(struct objhash *q, int fd, uint64_t size)
{
	pthread_mutex_lock(&q->lock);
	if (q->n == q->cap) {
		size_t cap = q->cap ? q->cap * 2 : 64;
		struct objhash_job *j = realloc(q->jobs, cap * sizeof(*j));

		if (!j) {
			pthread_mutex_unlock(&q->lock);
			close(fd);
			return -ENOMEM;
		}
		q->jobs = j;
		q->cap = cap;
	}
	q->jobs[q->n++] = (struct objhash_job){ .fd = fd, .size = size };
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
	return 0;
}

/* No more jobs; waits for the thread. */
static void objhash_close(struct objhash *q)
{
	pthread_mutex_lock(&q->lock);
	if (q->closing) {
		pthread_mutex_unlock(&q->lock);
		return;
	}
	q->closing = true;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
	pthread_join(q->thread, NULL);
}

int objhash_finish(struct objhash *q, char (**ret)[DIGEST_HEX_LEN + 1], size_t *ret_n)
{
	objhash_close(q);
	if (q->err < 0)
		return q->err;
	free(q->hex);
	q->hex = calloc(q->n ? q->n : 1, sizeof(*q->hex));
	if (!q->hex)
		return -ENOMEM;
	for (size_t i = 0; i < q->n; i++)
		memcpy(q->hex[i], q->jobs[i].hex, sizeof(q->hex[i]));
	*ret = q->hex;
	*ret_n = q->n;
	return 0;
}

void objhash_free(struct objhash *q)
{
	if (!q)
		return;
	objhash_close(q);
	/* jobs never taken (the thread stops only when none is left) */
	for (size_t i = q->next; i < q->n; i++)
		if (q->jobs[i].fd >= 0)
			close(q->jobs[i].fd);
	free(q->jobs);
	free(q->hex);
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->cond);
	free(q);
}

/* The scans of the cache that the status and the metrics show, kept
 * between changes: a reader every few seconds of a cache that holds lazy
 * layers (every file of them one file on disk) would otherwise stat each
 * of those files on every read.  See cache_touch() in cache.h. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "cache-private.h"
#include "strmap.h"

struct cache_memo {
	pthread_mutex_t lock;
	uint64_t generation; /* lock: of what follows */
	bool usage_valid, objects_valid;
	uint64_t usage_bytes;
	unsigned usage_layers;
	struct cache_objects_stats objects;
	struct strmap *layer_bytes; /* digest -> uint64_t *; lock */
};

static int free_value(void *userdata, const char *key, void *value)
{
	(void)userdata;
	(void)key;
	free(value);
	return 0;
}

static void memo_forget_locked(struct cache_memo *mm)
{
	mm->usage_valid = mm->objects_valid = false;
	if (mm->layer_bytes) {
		strmap_foreach(mm->layer_bytes, free_value, NULL);
		strmap_free(mm->layer_bytes);
		mm->layer_bytes = NULL;
	}
}

int cache_memo_new(struct cache *c)
{
	c->memo = calloc(1, sizeof(*c->memo));
	if (!c->memo)
		return -ENOMEM;
	pthread_mutex_init(&c->memo->lock, NULL);
	return 0;
}

void cache_memo_free(struct cache *c)
{
	if (!c->memo)
		return;
	memo_forget_locked(c->memo);
	pthread_mutex_destroy(&c->memo->lock);
	free(c->memo);
	c->memo = NULL;
}

void cache_touch(struct cache *c)
{
	atomic_fetch_add(&c->generation, 1);
}

/* Locks the memo and empties it when the cache changed since it was
 * filled; returns the generation a value computed now belongs to.  The
 * generation is read before the scan: a change during it makes the next
 * call scan again. */
static uint64_t memo_lock(struct cache *c)
{
	uint64_t gen = atomic_load(&c->generation);

	pthread_mutex_lock(&c->memo->lock);
	if (c->memo->generation != gen) {
		memo_forget_locked(c->memo);
		c->memo->generation = gen;
	}
	return gen;
}

int cache_usage_memo(struct cache *c, uint64_t *ret_bytes, unsigned *ret_layers)
{
	struct cache_memo *mm = c->memo;
	uint64_t bytes;
	unsigned layers;
	int r = 0;

	memo_lock(c);
	/* (the scan runs under the lock: two readers at once scan once) */
	if (!mm->usage_valid) {
		r = cache_usage(c, &mm->usage_bytes, &mm->usage_layers);
		mm->usage_valid = r == 0;
	}
	bytes = mm->usage_bytes;
	layers = mm->usage_layers;
	pthread_mutex_unlock(&mm->lock);
	if (r < 0)
		return r;
	*ret_bytes = bytes;
	if (ret_layers)
		*ret_layers = layers;
	return 0;
}

int cache_objects_stats_memo(struct cache *c, struct cache_objects_stats *ret)
{
	struct cache_memo *mm = c->memo;
	int r = 0;

	memo_lock(c);
	if (!mm->objects_valid) {
		r = cache_objects_stats(c, &mm->objects);
		mm->objects_valid = r == 0;
	}
	*ret = r == 0 ? mm->objects : (struct cache_objects_stats){ 0 };
	pthread_mutex_unlock(&mm->lock);
	return r;
}

uint64_t cache_layer_bytes_memo(struct cache *c, const char *digest)
{
	struct cache_memo *mm = c->memo;
	uint64_t *known, bytes;

	memo_lock(c);
	if (!mm->layer_bytes)
		mm->layer_bytes = strmap_new();
	known = mm->layer_bytes ? strmap_get(mm->layer_bytes, digest) : NULL;
	if (known) {
		bytes = *known;
	} else {
		bytes = cache_layer_bytes(c, digest);
		known = malloc(sizeof(*known));
		if (known) {
			*known = bytes;
			if (!mm->layer_bytes || strmap_put(mm->layer_bytes, digest, known) < 0)
				free(known);
		}
	}
	pthread_mutex_unlock(&mm->lock);
	return bytes;
}

#include "strmap.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct strmap_entry {
	struct strmap_entry *next;
	uint64_t hash;
	void *value;
	char key[];
};

struct strmap {
	struct strmap_entry **buckets;
	size_t n_buckets; /* power of two */
	size_t size;
};

/* FNV-1a: short keys, no adversary who controls bucket choice cheaply
 * enough to matter at the sizes this map holds. */
static uint64_t hash_string(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ULL;
	}
	return h;
}

struct strmap *strmap_new(void)
{
	struct strmap *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->n_buckets = 16;
	m->buckets = calloc(m->n_buckets, sizeof(*m->buckets));
	if (!m->buckets) {
		free(m);
		return NULL;
	}
	return m;
}

void strmap_free(struct strmap *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n_buckets; i++) {
		struct strmap_entry *e = m->buckets[i];
		while (e) {
			struct strmap_entry *next = e->next;
			free(e);
			e = next;
		}
	}
	free(m->buckets);
	free(m);
}

static struct strmap_entry **find_slot(const struct strmap *m, const char *key, uint64_t h)
{
	struct strmap_entry **p = &m->buckets[h & (m->n_buckets - 1)];

	for (; *p; p = &(*p)->next)
		if ((*p)->hash == h && strcmp((*p)->key, key) == 0)
			break;
	return p;
}

static void grow(struct strmap *m)
{
	size_t n = m->n_buckets * 2;
	struct strmap_entry **b = calloc(n, sizeof(*b));

	if (!b)
		return; /* a fuller table still works */
	for (size_t i = 0; i < m->n_buckets; i++) {
		struct strmap_entry *e = m->buckets[i];
		while (e) {
			struct strmap_entry *next = e->next;
			e->next = b[e->hash & (n - 1)];
			b[e->hash & (n - 1)] = e;
			e = next;
		}
	}
	free(m->buckets);
	m->buckets = b;
	m->n_buckets = n;
}

int strmap_put(struct strmap *m, const char *key, void *value)
{
	uint64_t h = hash_string(key);
	struct strmap_entry **p = find_slot(m, key, h);
	size_t len;

	if (*p) {
		(*p)->value = value;
		return 0;
	}
	len = strlen(key);
	struct strmap_entry *e = malloc(sizeof(*e) + len + 1);
	if (!e)
		return -ENOMEM;
	memcpy(e->key, key, len + 1);
	e->hash = h;
	e->value = value;
	e->next = NULL;
	*p = e;
	if (++m->size > m->n_buckets)
		grow(m);
	return 0;
}

void *strmap_get(const struct strmap *m, const char *key)
{
	struct strmap_entry **p = find_slot(m, key, hash_string(key));

	return *p ? (*p)->value : NULL;
}

void *strmap_remove(struct strmap *m, const char *key)
{
	struct strmap_entry **p = find_slot(m, key, hash_string(key));
	struct strmap_entry *e = *p;
	void *v;

	if (!e)
		return NULL;
	*p = e->next;
	v = e->value;
	free(e);
	m->size--;
	return v;
}

size_t strmap_size(const struct strmap *m)
{
	return m->size;
}

int strmap_foreach(const struct strmap *m, int (*fn)(void *userdata, const char *key, void *value),
		   void *userdata)
{
	for (size_t i = 0; i < m->n_buckets; i++)
		for (struct strmap_entry *e = m->buckets[i]; e; e = e->next) {
			int r = fn(userdata, e->key, e->value);
			if (r)
				return r;
		}
	return 0;
}

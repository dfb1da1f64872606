/* A small string-keyed hash map (separate chaining, power-of-two buckets).
 * Keys are copied; values are borrowed pointers.  Not thread-safe: callers
 * hold their own lock. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct strmap;

struct strmap *strmap_new(void);
/* Frees the map and its key copies; values are left alone. */
void strmap_free(struct strmap *m);

/* Sets key to value, replacing any earlier value.  Returns 0 or -ENOMEM. */
int strmap_put(struct strmap *m, const char *key, void *value);
void *strmap_get(const struct strmap *m, const char *key);
/* Removes key; returns the value it had, or NULL. */
void *strmap_remove(struct strmap *m, const char *key);
size_t strmap_size(const struct strmap *m);

/* Calls fn for every entry in unspecified order; stops early and returns
 * fn's value when it is not 0.  fn must not change the map. */
int strmap_foreach(const struct strmap *m, int (*fn)(void *userdata, const char *key, void *value),
		   void *userdata);

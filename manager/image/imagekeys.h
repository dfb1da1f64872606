/* Image keys: the part of a node id that names one view of an image (a
 * name and the manifest it resolves to).  A key is derived from what the
 * view names, so that another run of the daemon derives it again; when two
 * views derive one key, the later one probes for the next free key, and
 * the manager stores the key it chose with the reference in the cache.
 *
 * The table maps keys to live views for the filesystem's hot path: lookups
 * take no lock and may run beside one writer (the caller serialises
 * writers).  A key is never 0, so that no image node id is 1 << 63 alone. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IMAGEKEY_MAX ((UINT32_C(1) << 31) - 1)

/* 1..IMAGEKEY_MAX, from the SHA-256 of reference and digest. */
uint32_t imagekey_derive(const char *reference, const char *digest);
/* The FUSE generation of a view of manifest digest (a valid digest): its
 * first 32 bits (the kernel keeps 32), never 0.  A key that comes back for
 * other content comes back with another generation, almost surely. */
uint32_t imagekey_generation(const char *digest);
/* The key probed after key: key + 1, wrapping to 1. */
uint32_t imagekey_next(uint32_t key);

struct imagekeys;

/* Returns 0 with an empty table, or -ENOMEM. */
int imagekeys_new(struct imagekeys **ret);
/* Frees the table; the values are the caller's. */
void imagekeys_free(struct imagekeys *t);

/* The value stored under key, or NULL.  Lock-free; a value removed
 * concurrently may still be returned. */
void *imagekeys_get(const struct imagekeys *t, uint32_t key);

/* Writers; the caller serialises them.  insert returns 0, -EEXIST when key
 * is in the table, -EINVAL for key 0 or above IMAGEKEY_MAX, -ENOMEM.
 * remove returns the value it removed, or NULL. */
int imagekeys_insert(struct imagekeys *t, uint32_t key, void *value);
void *imagekeys_remove(struct imagekeys *t, uint32_t key);
size_t imagekeys_size(const struct imagekeys *t);

/* The first key from preferred on, in probing order, that is neither in
 * the table nor taken(userdata, key) (taken may be NULL).  Returns 0 with
 * *ret_key, or -EMFILE after IMAGEKEY_MAX_PROBES keys. */
#define IMAGEKEY_MAX_PROBES 65536u
int imagekeys_pick(const struct imagekeys *t, uint32_t preferred,
		   bool (*taken)(void *userdata, uint32_t key), void *userdata, uint32_t *ret_key);

/* Calls fn with every value; fn may remove the key it is given, no other
 * writer may run meanwhile. */
void imagekeys_foreach(const struct imagekeys *t,
		       void (*fn)(void *userdata, uint32_t key, void *value), void *userdata);

/* Image keys and the lock-free table of live views by key (imagekeys.h).
 *
 * The table is open addressing with linear probing.  Readers load the
 * current array and walk it with atomic loads only; the one writer at a
 * time fills a slot's value before its key, and empties a slot by marking
 * its key dead before clearing the value, so a reader that matches a key
 * sees that key's value or NULL.  Growing copies the live entries into a
 * new array and publishes it; the old array stays allocated (readers may
 * still be walking it) until the table is freed, which costs less than the
 * array in use, since sizes double. */
#include "imagekeys.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"

#define KEY_EMPTY 0u
#define KEY_DEAD UINT32_MAX
#define MIN_SLOTS 64u

struct slot {
	_Atomic uint32_t key;
	_Atomic(void *) value;
};

struct slots {
	struct slots *retired; /* the array this one replaced */
	size_t mask;
	struct slot s[];
};

struct imagekeys {
	_Atomic(struct slots *) cur;
	size_t live, dead; /* writers only */
};

/* The first 32 bits of a valid digest. */
static uint32_t digest_u32(const char *digest)
{
	const char *hex = digest_hex(digest);
	uint32_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 4 | (uint32_t)(hex[i] <= '9' ? hex[i] - '0' : hex[i] - 'a' + 10);
	return v;
}

uint32_t imagekey_derive(const char *reference, const char *digest)
{
	char d[DIGEST_STRING_MAX];
	uint32_t key = 0;
	size_t lr = strlen(reference), ld = strlen(digest);
	char *buf = malloc(lr + 1 + ld);

	/* "\n" cannot occur in either: one string, one pair. */
	if (buf) {
		memcpy(buf, reference, lr);
		buf[lr] = '\n';
		memcpy(buf + lr + 1, digest, ld);
		if (digest_buffer(buf, lr + 1 + ld, d) == 0)
			key = digest_u32(d);
		free(buf);
	}
	/* Without memory the key is still valid, only not stable: 1 probes
	 * like any other. */
	key &= IMAGEKEY_MAX;
	return key ? key : 1;
}

uint32_t imagekey_generation(const char *digest)
{
	uint32_t g = digest_u32(digest);

	return g ? g : 1;
}

uint32_t imagekey_next(uint32_t key)
{
	return key >= IMAGEKEY_MAX ? 1 : key + 1;
}

static size_t slot_of(uint32_t key, size_t mask)
{
	/* Keys come from a hash, but probing makes runs of neighbours:
	 * spread them. */
	return (size_t)((key * UINT32_C(2654435761)) & mask);
}

static struct slots *slots_new(size_t n)
{
	struct slots *a = calloc(1, sizeof(*a) + n * sizeof(a->s[0]));

	if (a)
		a->mask = n - 1;
	return a;
}

int imagekeys_new(struct imagekeys **ret)
{
	struct imagekeys *t = calloc(1, sizeof(*t));
	struct slots *a = slots_new(MIN_SLOTS);

	if (!t || !a) {
		free(t);
		free(a);
		return -ENOMEM;
	}
	atomic_init(&t->cur, a);
	*ret = t;
	return 0;
}

void imagekeys_free(struct imagekeys *t)
{
	struct slots *a, *next;

	if (!t)
		return;
	for (a = atomic_load(&t->cur); a; a = next) {
		next = a->retired;
		free(a);
	}
	free(t);
}

void *imagekeys_get(const struct imagekeys *t, uint32_t key)
{
	const struct slots *a = atomic_load_explicit(&t->cur, memory_order_acquire);
	size_t i = slot_of(key, a->mask);

	if (key == KEY_EMPTY || key == KEY_DEAD)
		return NULL;
	for (size_t n = 0; n <= a->mask; n++, i = (i + 1) & a->mask) {
		uint32_t k = atomic_load_explicit(&a->s[i].key, memory_order_acquire);
		if (k == key)
			return atomic_load_explicit(&a->s[i].value, memory_order_acquire);
		if (k == KEY_EMPTY)
			break;
	}
	return NULL;
}

/* Index of key's slot in a, or -1. */
static long find(const struct slots *a, uint32_t key)
{
	size_t i = slot_of(key, a->mask);

	for (size_t n = 0; n <= a->mask; n++, i = (i + 1) & a->mask) {
		uint32_t k = atomic_load_explicit(&a->s[i].key, memory_order_relaxed);
		if (k == key)
			return (long)i;
		if (k == KEY_EMPTY)
			break;
	}
	return -1;
}

static void put(struct slots *a, uint32_t key, void *value, size_t *dead)
{
	size_t i = slot_of(key, a->mask);

	for (;;) {
		uint32_t k = atomic_load_explicit(&a->s[i].key, memory_order_relaxed);
		if (k == KEY_EMPTY || k == KEY_DEAD) {
			if (k == KEY_DEAD && dead)
				(*dead)--;
			atomic_store_explicit(&a->s[i].value, value, memory_order_release);
			atomic_store_explicit(&a->s[i].key, key, memory_order_release);
			return;
		}
		i = (i + 1) & a->mask;
	}
}

/* Keeps live + dead + 1 at half the slots at most, so that probing stays
 * short and put() always finds a free slot. */
static int reserve(struct imagekeys *t)
{
	struct slots *a = atomic_load_explicit(&t->cur, memory_order_relaxed), *b;
	size_t n = MIN_SLOTS;

	if ((t->live + t->dead + 1) * 2 <= a->mask + 1)
		return 0;
	while (n < (t->live + 1) * 4)
		n *= 2;
	b = slots_new(n);
	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i <= a->mask; i++) {
		uint32_t k = atomic_load_explicit(&a->s[i].key, memory_order_relaxed);
		if (k != KEY_EMPTY && k != KEY_DEAD)
			put(b, k, atomic_load_explicit(&a->s[i].value, memory_order_relaxed), NULL);
	}
	b->retired = a;
	atomic_store_explicit(&t->cur, b, memory_order_release);
	t->dead = 0;
	return 0;
}

int imagekeys_insert(struct imagekeys *t, uint32_t key, void *value)
{
	int r;

	if (key == KEY_EMPTY || key > IMAGEKEY_MAX)
		return -EINVAL;
	if (find(atomic_load_explicit(&t->cur, memory_order_relaxed), key) >= 0)
		return -EEXIST;
	r = reserve(t);
	if (r < 0)
		return r;
	put(atomic_load_explicit(&t->cur, memory_order_relaxed), key, value, &t->dead);
	t->live++;
	return 0;
}

void *imagekeys_remove(struct imagekeys *t, uint32_t key)
{
	struct slots *a = atomic_load_explicit(&t->cur, memory_order_relaxed);
	long i = key == KEY_EMPTY || key == KEY_DEAD ? -1 : find(a, key);
	void *value;

	if (i < 0)
		return NULL;
	value = atomic_load_explicit(&a->s[i].value, memory_order_relaxed);
	atomic_store_explicit(&a->s[i].key, KEY_DEAD, memory_order_release);
	atomic_store_explicit(&a->s[i].value, NULL, memory_order_release);
	t->live--;
	t->dead++;
	return value;
}

size_t imagekeys_size(const struct imagekeys *t)
{
	return t->live;
}

int imagekeys_pick(const struct imagekeys *t, uint32_t preferred,
		   bool (*taken)(void *userdata, uint32_t key), void *userdata, uint32_t *ret_key)
{
	const struct slots *a = atomic_load_explicit(&t->cur, memory_order_relaxed);
	uint32_t key = preferred == KEY_EMPTY || preferred > IMAGEKEY_MAX ? 1 : preferred;

	for (unsigned n = 0; n < IMAGEKEY_MAX_PROBES; n++, key = imagekey_next(key)) {
		if (find(a, key) < 0 && !(taken && taken(userdata, key))) {
			*ret_key = key;
			return 0;
		}
	}
	return -EMFILE;
}

void imagekeys_foreach(const struct imagekeys *t,
		       void (*fn)(void *userdata, uint32_t key, void *value), void *userdata)
{
	const struct slots *a = atomic_load(&t->cur);

	for (size_t i = 0; i <= a->mask; i++) {
		uint32_t k = atomic_load(&a->s[i].key);
		if (k != KEY_EMPTY && k != KEY_DEAD)
			fn(userdata, k, atomic_load(&a->s[i].value));
	}
}

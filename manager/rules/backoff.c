/* Per-reference back-off after failed pulls; the timeline is documented in
 * backoff.h. */
#include "backoff.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "strmap.h"

struct entry {
	int64_t delay_ns;
	int64_t last_ns; /* clock time of the last failure */
	unsigned failures;
	struct error_detail last;
	char key[];
};

struct backoff {
	int64_t initial_ns;
	int64_t max_ns;
	const struct clock *clock;

	pthread_mutex_t lock;
	struct strmap *entries; /* key -> struct entry *; lock */
	int64_t swept_ns;	/* last sweep of stale entries; lock */
	backoff_hook_fn *hook;	/* lock */
	void *hook_data;
};

static void tell_hook_locked(struct backoff *b, const struct entry *e, int64_t now)
{
	struct backoff_state st;

	if (!b->hook)
		return;
	st = (struct backoff_state){ .delay_ns = e->delay_ns,
				     .idle_ns = now - e->last_ns,
				     .remaining_ns = e->last_ns + e->delay_ns - now,
				     .failures = e->failures,
				     .last = e->last };
	b->hook(b->hook_data, e->key, &st);
}

void backoff_set_hook(struct backoff *b, backoff_hook_fn *fn, void *userdata)
{
	pthread_mutex_lock(&b->lock);
	b->hook = fn;
	b->hook_data = userdata;
	pthread_mutex_unlock(&b->lock);
}

/* A new entry for key in the table, zeroed; NULL when out of memory.
 * b.lock held. */
static struct entry *entry_new_locked(struct backoff *b, const char *key)
{
	size_t len = strlen(key);
	struct entry *e = calloc(1, sizeof(*e) + len + 1);

	if (!e)
		return NULL;
	memcpy(e->key, key, len + 1);
	if (strmap_put(b->entries, e->key, e) < 0) {
		free(e);
		return NULL;
	}
	return e;
}

int backoff_restore(struct backoff *b, const char *key, const struct backoff_state *st)
{
	struct entry *e;
	int64_t now;
	int r = 0;

	if (st->delay_ns < b->initial_ns || st->delay_ns > b->max_ns || st->failures == 0 ||
	    st->idle_ns < 0)
		return -EINVAL;
	pthread_mutex_lock(&b->lock);
	now = clock_now_ns(b->clock);
	e = strmap_get(b->entries, key);
	if (!e && !(e = entry_new_locked(b, key))) {
		r = -ENOMEM;
		goto out;
	}
	e->delay_ns = st->delay_ns;
	e->failures = st->failures;
	e->last = st->last;
	e->last_ns = now - st->idle_ns;
	tell_hook_locked(b, e, now);
out:
	pthread_mutex_unlock(&b->lock);
	return r;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(struct backoff *, backoff_free);

/* Past twice the cap the key is considered healthy again; strictly
 * greater, as in the kubelet. */
static bool entry_stale(const struct backoff *b, const struct entry *e, int64_t now)
{
	return now - e->last_ns > 2 * b->max_ns;
}

int backoff_new(const struct backoff_options *opts, struct backoff **ret)
{
	_cleanup_(backoff_freep) struct backoff *b = NULL;
	int64_t initial = opts ? opts->initial_ns : 0;
	int64_t max = opts ? opts->max_ns : 0;

	if (initial < 0 || max < 0)
		return -EINVAL;
	if (max == 0)
		max = BACKOFF_DEFAULT_MAX_NS;
	if (initial == 0)
		initial = MIN(BACKOFF_DEFAULT_INITIAL_NS, max);
	/* 2*max and now - last must not overflow; a quarter of the range
	 * is still some seventy years. */
	if (initial > max || max > INT64_MAX / 4)
		return -EINVAL;

	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->initial_ns = initial;
	b->max_ns = max;
	b->clock = opts && opts->clock ? opts->clock : clock_monotonic();
	pthread_mutex_init(&b->lock, NULL);
	b->entries = strmap_new();
	if (!b->entries)
		return -ENOMEM;
	b->swept_ns = clock_now_ns(b->clock);
	*ret = TAKE_PTR(b);
	return 0;
}

static int free_entry(void *userdata, const char *key, void *value)
{
	free(value);
	return 0;
}

void backoff_free(struct backoff *b)
{
	if (!b)
		return;
	if (b->entries) {
		strmap_foreach(b->entries, free_entry, NULL);
		strmap_free(b->entries);
	}
	pthread_mutex_destroy(&b->lock);
	free(b);
}

static void state_of(const struct entry *e, int64_t now, struct backoff_state *ret)
{
	int64_t idle = now - e->last_ns;

	ret->remaining_ns = idle < e->delay_ns ? e->delay_ns - idle : 0;
	ret->delay_ns = e->delay_ns;
	ret->idle_ns = idle;
	ret->failures = e->failures;
	ret->last = e->last;
}

struct stale_search {
	const struct backoff *b;
	int64_t now;
	struct entry *found;
};

static int find_stale(void *userdata, const char *key, void *value)
{
	struct stale_search *s = userdata;

	if (!entry_stale(s->b, value, s->now))
		return 0;
	s->found = value;
	return 1;
}

/* strmap_foreach must not see the map change, so stale entries are
 * removed one search at a time; the map only holds failing references. */
static size_t sweep_locked(struct backoff *b, int64_t now)
{
	struct stale_search s = { .b = b, .now = now };
	size_t n = 0;

	while (strmap_foreach(b->entries, find_stale, &s)) {
		strmap_remove(b->entries, s.found->key);
		free(s.found);
		n++;
	}
	b->swept_ns = now;
	return n;
}

static void maybe_sweep_locked(struct backoff *b, int64_t now)
{
	if (now - b->swept_ns >= b->max_ns)
		sweep_locked(b, now);
}

int backoff_check(struct backoff *b, const char *key, struct backoff_state *ret)
{
	int64_t now;
	struct entry *e;
	int r = 0;

	pthread_mutex_lock(&b->lock);
	now = clock_now_ns(b->clock);
	e = strmap_get(b->entries, key);
	if (e && entry_stale(b, e, now)) {
		strmap_remove(b->entries, key);
		free(e);
	} else if (e && now - e->last_ns < e->delay_ns) {
		if (ret)
			state_of(e, now, ret);
		r = -EAGAIN;
	}
	pthread_mutex_unlock(&b->lock);
	return r;
}

int backoff_failure(struct backoff *b, const char *key, const struct error_detail *why)
{
	int64_t now;
	struct entry *e;
	int r = 0;

	pthread_mutex_lock(&b->lock);
	now = clock_now_ns(b->clock);
	maybe_sweep_locked(b, now);
	e = strmap_get(b->entries, key);
	if (e && entry_stale(b, e, now)) {
		e->delay_ns = b->initial_ns;
		e->failures = 1;
	} else if (e) {
		/* Halving the cap first keeps the doubling from overflowing. */
		e->delay_ns = e->delay_ns > b->max_ns / 2 ? b->max_ns : 2 * e->delay_ns;
		e->failures++;
	} else {
		e = entry_new_locked(b, key);
		if (!e) {
			r = -ENOMEM;
			goto out;
		}
		e->delay_ns = b->initial_ns;
		e->failures = 1;
	}
	e->last_ns = now;
	e->last = *why;
	tell_hook_locked(b, e, now);
out:
	pthread_mutex_unlock(&b->lock);
	return r;
}

void backoff_success(struct backoff *b, const char *key)
{
	struct entry *e;

	pthread_mutex_lock(&b->lock);
	e = strmap_remove(b->entries, key);
	if (e && b->hook)
		b->hook(b->hook_data, key, NULL);
	free(e);
	maybe_sweep_locked(b, clock_now_ns(b->clock));
	pthread_mutex_unlock(&b->lock);
}

size_t backoff_gc(struct backoff *b)
{
	size_t n;

	pthread_mutex_lock(&b->lock);
	n = sweep_locked(b, clock_now_ns(b->clock));
	pthread_mutex_unlock(&b->lock);
	return n;
}

struct snapshot {
	const struct backoff *b;
	int64_t now;
	struct backoff_entry *entries;
	size_t n;
};

static int snapshot_one(void *userdata, const char *key, void *value)
{
	struct snapshot *s = userdata;
	const struct entry *e = value;
	struct backoff_entry *out;

	if (entry_stale(s->b, e, s->now))
		return 0;
	out = &s->entries[s->n];
	out->key = strdup(key);
	if (!out->key)
		return -ENOMEM;
	state_of(e, s->now, &out->state);
	s->n++;
	return 0;
}

int backoff_snapshot(struct backoff *b, struct backoff_entry **ret, size_t *ret_n)
{
	struct snapshot s = { .b = b };
	size_t size;
	int r = 0;

	pthread_mutex_lock(&b->lock);
	s.now = clock_now_ns(b->clock);
	size = strmap_size(b->entries);
	if (size > 0) {
		s.entries = calloc(size, sizeof(*s.entries));
		if (!s.entries)
			r = -ENOMEM;
		else
			r = strmap_foreach(b->entries, snapshot_one, &s);
	}
	pthread_mutex_unlock(&b->lock);

	if (r < 0) {
		backoff_entries_free(s.entries, s.n);
		return r;
	}
	if (s.n == 0) {
		free(s.entries);
		s.entries = NULL;
	}
	*ret = s.entries;
	*ret_n = s.n;
	return 0;
}

void backoff_entries_free(struct backoff_entry *entries, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(entries[i].key);
	free(entries);
}

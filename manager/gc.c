/* Garbage collection of the cache: least recently used references first
 * (those of users over their quota before any other, quota.h), then every
 * layer and blob no remaining reference needs.  Thresholds as the
 * kubelet's image GC (start above 85 % of the budget, stop at 80 %), never
 * an image with open files, a pull in flight (a lazy image's background
 * completion included), a pin, or an age under the minimum.  Also the
 * room a user's pull makes among that user's own images. */
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blobproof.h"
#include "profile.h"
#include "cache.h"
#include "digest.h"
#include "fault.h"
#include "layerview.h"
#include "macro.h"
#include "packs.h"
#include "quota.h"
#include "manager-private.h"
#include "reference.h"
#include "strmap.h"

#define DEFAULT_HIGH 85
#define DEFAULT_LOW 80
#define DEFAULT_MIN_AGE_S 120
#define DEFAULT_USER_SHARE 4 /* a user's quota: a quarter of the budget */

struct candidate {
	char *reference;
	char *digest;
	char *index_digest;
	int64_t last_used_ms;
	int64_t pulled_at;
	unsigned open_files;
	bool in_flight;	 /* being pulled */
	bool completing; /* lazy layers being completed in the background */
	bool pinned;
	bool used_outside; /* manager_set_in_use() */
	bool removed;	   /* by this run */
	uint64_t freed;	   /* bytes its removal freed */
	uid_t owner;	   /* the user its name is charged to; 0: root */
	uint32_t key;	   /* of its loaded image; 0: none loaded */
	bool stored;	   /* a user's name with a file in the cache */
	struct quota_blob *blobs;
	size_t n_blobs;
};

static void candidates_free(struct candidate *c, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(c[i].reference);
		free(c[i].digest);
		free(c[i].index_digest);
		refs_blobs_free(c[i].blobs, c[i].n_blobs);
	}
	free(c);
}

static bool pinned(const struct manager *m, const char *reference)
{
	for (size_t i = 0; i < m->opts.n_pins; i++)
		if (fnmatch(m->pins[i], reference, 0) == 0)
			return true;
	return false;
}

struct collect_ctx {
	struct manager *m;
	struct candidate *c;
	size_t n;
	int error;
};

static int collect_one(void *userdata, const char *key, void *value)
{
	struct collect_ctx *ctx = userdata;
	const struct refstate *rs = value;
	struct candidate *c = &ctx->c[ctx->n];
	struct image *img = strmap_get(ctx->m->images, rs->reference);

	memset(c, 0, sizeof(*c));
	c->reference = strdup(rs->reference);
	c->digest = strdup(rs->digest);
	c->index_digest = rs->index_digest ? strdup(rs->index_digest) : NULL;
	if (!c->reference || !c->digest || (rs->index_digest && !c->index_digest)) {
		free(c->reference);
		free(c->digest);
		free(c->index_digest);
		ctx->error = -ENOMEM;
		return -ENOMEM;
	}
	c->last_used_ms = rs->last_used_ms;
	c->pulled_at = rs->pulled_at;
	c->open_files = img ? image_open_count(img) : 0;
	c->in_flight = strmap_get(ctx->m->flights, rs->reference) != NULL;
	c->completing = img && image_completing(img);
	c->pinned = pinned(ctx->m, rs->reference);
	c->used_outside = ctx->m->in_use && ctx->m->in_use(ctx->m->in_use_userdata, rs->reference);
	c->owner = rs->ephemeral ? rs->uid : 0;
	c->key = img ? image_key(img) : 0;
	c->stored = rs->user_stored;
	ctx->n++;
	if (rs->n_blobs) {
		c->blobs = calloc(rs->n_blobs, sizeof(*c->blobs));
		if (!c->blobs)
			ctx->error = -ENOMEM;
		for (size_t i = 0; c->blobs && i < rs->n_blobs; i++) {
			c->blobs[i].size = rs->blobs[i].size;
			c->blobs[i].digest = strdup(rs->blobs[i].digest);
			c->n_blobs++;
			if (!c->blobs[i].digest)
				ctx->error = -ENOMEM;
		}
	}
	return ctx->error;
}

/* A snapshot of every cached reference.  manager.lock held. */
static int collect_locked(struct manager *m, struct candidate **ret, size_t *ret_n)
{
	struct collect_ctx ctx = { .m = m };
	size_t n = strmap_size(m->refs);

	ctx.c = calloc(n ? n : 1, sizeof(*ctx.c));
	if (!ctx.c)
		return -ENOMEM;
	strmap_foreach(m->refs, collect_one, &ctx);
	if (ctx.error) {
		candidates_free(ctx.c, ctx.n);
		return ctx.error;
	}
	*ret = ctx.c;
	*ret_n = ctx.n;
	return 0;
}

/* The candidates as quota.h sees them, in the same order.  A user's name
 * of content that one of root's names also holds is charged to root. */
static struct quota_image *quota_view(const struct candidate *c, size_t n)
{
	struct quota_image *q = calloc(n ? n : 1, sizeof(*q));
	struct strmap *root = strmap_new();
	bool oom = !q || !root;

	for (size_t i = 0; i < n && !oom; i++)
		if (c[i].owner == 0 && strmap_put(root, c[i].digest, (void *)1) < 0)
			oom = true;
	for (size_t i = 0; i < n && !oom; i++)
		q[i] = (struct quota_image){
			.reference = c[i].reference,
			.owner = strmap_get(root, c[i].digest) ? 0 : c[i].owner,
			.last_used_ms = c[i].last_used_ms,
			.blobs = c[i].blobs,
			.n_blobs = c[i].n_blobs,
			.keep = c[i].pinned || c[i].used_outside || c[i].in_flight ||
				c[i].completing || c[i].open_files,
			.index = i,
		};
	strmap_free(root);
	if (oom) {
		free(q);
		return NULL;
	}
	return q;
}

uint64_t gc_user_quota(struct manager *m)
{
	uint64_t total, avail;

	if (m->opts.user_cache_max_bytes)
		return m->opts.user_cache_max_bytes;
	if (m->opts.cache_max_bytes)
		return m->opts.cache_max_bytes / DEFAULT_USER_SHARE;
	/* the budget without --cache-max-bytes (measure()); unknown, no
	 * limit rather than refusing every user's pull */
	if (cache_statfs(m->cache, &total, &avail) < 0)
		return INT64_MAX;
	return total / DEFAULT_USER_SHARE;
}

uint64_t gc_user_charge(struct manager *m, uid_t uid)
{
	struct candidate *c = NULL;
	struct quota_image *q = NULL;
	uint64_t bytes = 0;
	size_t n = 0;

	pthread_mutex_lock(&m->lock);
	if (collect_locked(m, &c, &n) == 0 && (q = quota_view(c, n)))
		(void)quota_charge(q, n, uid, NULL, &bytes);
	pthread_mutex_unlock(&m->lock);
	free(q);
	candidates_free(c, n);
	return bytes;
}

/* The budget and where usage stands against it. */
struct budget {
	uint64_t usage;
	uint64_t budget;
	uint64_t high, low;
};

/* With memo, the cache's usage as last counted unless something changed
 * since (cache_usage_memo()). */
static int measure_as(struct manager *m, struct budget *b, bool memo)
{
	unsigned hi = m->opts.gc_high_percent ?: DEFAULT_HIGH;
	unsigned lo = m->opts.gc_low_percent ?: DEFAULT_LOW;
	int r;

	if (m->opts.cache_max_bytes) {
		r = memo ? cache_usage_memo(m->cache, &b->usage, NULL)
			 : cache_usage(m->cache, &b->usage, NULL);
		if (r < 0)
			return r;
		/* containerd's snapshots are in the cache directory too */
		b->usage += gc_snapshot_bytes(m);
		b->budget = m->opts.cache_max_bytes;
	} else {
		/* Without a byte budget, the whole filesystem is the
		 * budget and its usage counts, as the kubelet sees it. */
		uint64_t total, avail;
		r = cache_statfs(m->cache, &total, &avail);
		if (r < 0)
			return r;
		b->budget = total;
		b->usage = total - MIN(avail, total);
	}
	b->high = b->budget / 100 * hi;
	b->low = b->budget / 100 * lo;
	return 0;
}

static int measure(struct manager *m, struct budget *b)
{
	return measure_as(m, b, false);
}

bool gc_needed(struct manager *m)
{
	struct budget b;

	return measure(m, &b) == 0 && b.usage > b.high;
}

/* ---- sweeping -------------------------------------------------------- */

struct keep_ctx {
	struct manager *m;
	struct strmap *keep; /* digest -> (void *)1 */
	int error;
};

static void keep(struct keep_ctx *k, const char *digest)
{
	if (digest && strmap_put(k->keep, digest, (void *)1) < 0)
		k->error = -ENOMEM;
}

/* Marks a manifest, and what it names, as needed. */
static void keep_manifest(struct keep_ctx *k, const char *digest)
{
	_cleanup_free_ char *buf = NULL;
	struct manifest *mf = NULL;
	size_t len;

	keep(k, digest);
	if (cache_blob_read(k->m->cache, digest, MANIFEST_MAX_BYTES, &buf, &len) < 0 ||
	    manifest_parse(buf, len, NULL, &mf, NULL, 0) < 0)
		return;
	if (mf->kind == MANIFEST_IMAGE) {
		keep(k, mf->config.digest);
		for (size_t i = 0; i < mf->n_layers; i++)
			keep(k, mf->layers[i].digest);
	}
	manifest_free(mf);
}

static int keep_inflight(void *userdata, const char *key, void *value)
{
	keep(userdata, key);
	return 0;
}

static int keep_ref(void *userdata, const char *key, void *value)
{
	struct keep_ctx *k = userdata;
	const struct refstate *rs = value;

	keep_manifest(k, rs->digest);
	keep(k, rs->index_digest);
	return 0;
}

struct settled {
	struct keep_ctx *k;
	char **gone; /* references whose dentries are dropped */
	size_t n;
};

/* A removed name whose dentries the kernel may still hold keeps its
 * image's content: a file opened through them after the sweep would
 * read a deleted object, and the next serving process could not make the
 * image again.  m->lock held. */
static int keep_settling(void *userdata, const char *key, void *value)
{
	struct settled *s = userdata;
	struct manager *m = s->k->m;

	if (m->names_pending && m->names_pending(m->names_userdata, key))
		keep_manifest(s->k, value);
	else
		s->gone[s->n++] = (char *)key;
	return 0;
}

static void keep_settling_locked(struct keep_ctx *k)
{
	struct manager *m = k->m;
	struct settled s = { .k = k, .gone = calloc(strmap_size(m->settling) + 1, sizeof(char *)) };

	if (!s.gone) {
		/* cannot be told: nothing is deleted this time */
		k->error = -ENOMEM;
		return;
	}
	strmap_foreach(m->settling, keep_settling, &s);
	for (size_t i = 0; i < s.n; i++) {
		_cleanup_free_ char *key = strdup(s.gone[i]);

		if (key)
			free(strmap_remove(m->settling, key));
	}
	free(s.gone);
}

struct open_digests {
	char **digests;
	size_t n, cap;
	int error;
	const uint32_t *entered; /* sorted */
	size_t n_entered;
};

static int key_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static void add_open(void *userdata, uint32_t key, void *value)
{
	struct open_digests *o = userdata;
	const struct image *img = value;
	char *d;

	if (image_is_layer_view(img) || o->error)
		return;
	if (image_open_count(img) == 0 &&
	    !(o->n_entered && bsearch(&key, o->entered, o->n_entered, sizeof(key), key_cmp)))
		return;
	if (o->n == o->cap) {
		size_t cap = o->cap ? 2 * o->cap : 16;
		char **v = realloc(o->digests, cap * sizeof(*v));

		if (!v) {
			o->error = -ENOMEM;
			return;
		}
		o->digests = v;
		o->cap = cap;
	}
	d = strdup(image_digest(img));
	if (!d) {
		o->error = -ENOMEM;
		return;
	}
	o->digests[o->n++] = d;
}

/* Marks what every loaded image in use needs, whatever its name resolves
 * to now (a tag moved, a name removed and pulled again into another
 * image, an image a new serving process restored by key): the next
 * process that takes the connection over must be able to make it again
 * for the kernel's nodes.  In use: a file open, or a process's working
 * directory or root in it (images_entered), where files may be opened
 * any time.  The kernel's dentries of names just removed are dropped
 * before (settle_removed()): no path leads into such an image any more. */
static int entered_keys(struct manager *m, uint32_t **ret_keys, size_t *ret_n);

static void keep_open_images(struct keep_ctx *k)
{
	struct manager *m = k->m;
	struct open_digests o = { 0 };
	uint32_t *keys = NULL;
	size_t n = 0;

	if (entered_keys(m, &keys, &n) < 0)
		/* cannot be told: nothing is deleted this time */
		k->error = -ENOMEM;
	o.entered = keys;
	o.n_entered = n;
	images_foreach(m->imgs, add_open, &o);
	free(keys);
	if (o.error)
		k->error = o.error;
	for (size_t i = 0; i < o.n; i++) {
		if (!k->error)
			keep_manifest(k, o.digests[i]);
		free(o.digests[i]);
	}
	free(o.digests);
}

/* The keys of the images a process has its working directory or root in
 * (manager_set_images_entered()), sorted.  Calls the filesystem's hook
 * outside every lock.  Returns 0 (none when there is no hook) or
 * -ENOMEM. */
static int entered_keys(struct manager *m, uint32_t **ret_keys, size_t *ret_n)
{
	int (*entered)(void *userdata, uint32_t **ret_keys, size_t *ret_n);
	void *ud;
	uint32_t *keys = NULL;
	size_t n = 0;
	int r = 0;

	pthread_mutex_lock(&m->lock);
	entered = m->images_entered;
	ud = m->images_entered_userdata;
	if (entered)
		m->hooks_running++;
	pthread_mutex_unlock(&m->lock);
	if (entered) {
		if (entered(ud, &keys, &n) < 0) {
			r = -ENOMEM;
			keys = NULL;
			n = 0;
		}
		pthread_mutex_lock(&m->lock);
		if (--m->hooks_running == 0)
			pthread_cond_broadcast(&m->hooks_cond);
		pthread_mutex_unlock(&m->lock);
	}
	if (n > 1)
		qsort(keys, n, sizeof(*keys), key_cmp);
	*ret_keys = keys;
	*ret_n = n;
	return r;
}

struct sweep_ctx {
	struct manager *m;
	struct strmap *keep;
	uint64_t freed;
};

static int sweep_layer(void *userdata, const char *digest)
{
	struct sweep_ctx *s = userdata;
	uint64_t n;

	if (strmap_get(s->keep, digest))
		return 0;
	/* A loaded image may still read from it (an open file, a working
	 * directory): then it is only moved aside (packs.h). */
	n = cache_layer_bytes(s->m->cache, digest);
	if (packs_remove_layer(s->m->packs, digest) == 0) {
		s->freed += n;
		fault_point("gc-layer");
	}
	return 0;
}

static int sweep_blob(void *userdata, const char *digest)
{
	struct sweep_ctx *s = userdata;
	uint64_t n;

	if (strmap_get(s->keep, digest))
		return 0;
	n = cache_blob_bytes(s->m->cache, digest);
	if (cache_blob_remove(s->m->cache, digest) == 0) {
		/* (an image's start profile goes with its manifest) */
		if (s->m->profiles)
			(void)profiles_remove(s->m->profiles, digest);
		s->freed += n;
		fault_point("gc-blob");
	}
	return 0;
}

/* Whether the cache still holds digest as a layer or a blob. */
static bool still_cached(void *userdata, const char *digest)
{
	struct manager *m = userdata;

	return cache_layer_present(m->cache, digest) || cache_blob_present(m->cache, digest);
}

/* Deletes every layer and blob no reference needs.  Runs with gc_lock
 * held exclusively, so no pull is between publishing a layer and its
 * reference.  Returns the bytes freed. */
static uint64_t sweep(struct manager *m)
{
	struct keep_ctx k = { .m = m };
	struct sweep_ctx s = { .m = m };

	k.keep = strmap_new();
	if (!k.keep)
		return 0;
	pthread_mutex_lock(&m->lock);
	/* keep_ref reads manifests from disk under the lock; GC is rare and
	 * the lock only delays lookups of other references. */
	strmap_foreach(m->refs, keep_ref, &k);
	strmap_foreach(m->inflight, keep_inflight, &k);
	keep_settling_locked(&k);
	pthread_mutex_unlock(&m->lock);
	keep_open_images(&k);
	/* After what is kept was judged: a freeze comes before the hooks
	 * go, so a judgement made without them finds it here. */
	pthread_mutex_lock(&m->lock);
	if (m->gc_frozen)
		k.error = -EAGAIN;
	pthread_mutex_unlock(&m->lock);
	if (k.error == 0) {
		s.keep = k.keep;
		cache_foreach_layer(m->cache, sweep_layer, &s);
		cache_foreach_blob(m->cache, sweep_blob, &s);
		/* objects only removed layers used: their bytes were counted
		 * with those layers (cache_layer_bytes) */
		cache_objects_sweep(m->cache, NULL);
		/* after the blobs: a proof left by a crash here is harmless */
		(void)blobproof_prune(m->proofs, still_cached, m, NULL);
		profiles_prune(m);
	}
	strmap_free(k.keep);
	return s.freed;
}

/* ---- removing references --------------------------------------------- */

/* Forgets reference: its file, its state, and (when nothing else names
 * it) the loaded image; names_changed tells the filesystem.  gc_lock held
 * exclusively. */
static int remove_reference(struct manager *m, const char *reference)
{
	struct refstate *rs;
	int r;

	r = cache_ref_remove(m->cache, reference);
	if (r < 0)
		return r;
	pthread_mutex_lock(&m->lock);
	rs = strmap_get(m->refs, reference);
	if (rs)
		refstate_drop_locked(m, reference);
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static json_t *answer(json_t *removed, uint64_t freed, const struct budget *b)
{
	return json_pack("{s:b, s:o, s:I, s:I, s:I}", "ok", 1, "removed", removed, "freed_bytes",
			 (json_int_t)freed, "usage_bytes", (json_int_t)b->usage, "budget_bytes",
			 (json_int_t)b->budget);
}

void manager_set_in_use(struct manager *m, bool (*in_use)(void *userdata, const char *reference),
			void *userdata)
{
	pthread_mutex_lock(&m->lock);
	m->in_use = in_use;
	m->in_use_userdata = userdata;
	pthread_mutex_unlock(&m->lock);
}

void manager_set_snapshot_bytes(struct manager *m, uint64_t (*fn)(void *userdata), void *userdata)
{
	pthread_mutex_lock(&m->lock);
	m->snapshot_bytes = fn;
	m->snapshot_bytes_userdata = userdata;
	pthread_mutex_unlock(&m->lock);
}

uint64_t gc_snapshot_bytes(struct manager *m)
{
	uint64_t n = 0;

	pthread_mutex_lock(&m->lock);
	if (m->snapshot_bytes)
		n = m->snapshot_bytes(m->snapshot_bytes_userdata);
	pthread_mutex_unlock(&m->lock);
	return n;
}

/* Wakes the collector. */
static void gc_want(struct manager *m)
{
	pthread_mutex_lock(&m->lock);
	m->gc_wanted = true;
	pthread_cond_signal(&m->gc_cond);
	pthread_mutex_unlock(&m->lock);
}

void manager_snapshot_bytes_grew(struct manager *m)
{
	struct budget b;

	/* Without a byte budget the filesystem's usage counts, which holds
	 * them already. */
	if (m->opts.cache_max_bytes && measure_as(m, &b, true) == 0 && b.usage > b.high)
		gc_want(m);
}

void manager_set_gc_prepare(struct manager *m, void (*fn)(void *userdata), void *userdata)
{
	pthread_mutex_lock(&m->lock);
	m->gc_prepare = fn;
	m->gc_prepare_userdata = userdata;
	hooks_quiesce_locked(m);
	pthread_mutex_unlock(&m->lock);
}

void manager_set_images_entered(struct manager *m,
				int (*fn)(void *userdata, uint32_t **ret_keys, size_t *ret_n),
				void *userdata)
{
	pthread_mutex_lock(&m->lock);
	m->images_entered = fn;
	m->images_entered_userdata = userdata;
	hooks_quiesce_locked(m);
	pthread_mutex_unlock(&m->lock);
}

/* Once a hook is removed, its owner may free what it uses: wait for the
 * calls under way.  Lock held. */
void hooks_quiesce_locked(struct manager *m)
{
	while (m->hooks_running > 0)
		pthread_cond_wait(&m->hooks_cond, &m->lock);
}

/* Calls a hook of the filesystem's, read under manager.lock, outside
 * every lock (it may wait for the kernel, which may wait for a lookup). */
static void call_hook(struct manager *m, void (*const *fn)(void *), void *const *userdata)
{
	void (*f)(void *);
	void *ud;

	pthread_mutex_lock(&m->lock);
	f = *fn;
	ud = *userdata;
	if (!f) {
		pthread_mutex_unlock(&m->lock);
		return;
	}
	m->hooks_running++;
	pthread_mutex_unlock(&m->lock);
	f(ud);
	pthread_mutex_lock(&m->lock);
	if (--m->hooks_running == 0)
		pthread_cond_broadcast(&m->hooks_cond);
	pthread_mutex_unlock(&m->lock);
}

/* The filesystem's hook, before anything is judged in use. */
static void prepare(struct manager *m)
{
	call_hook(m, &m->gc_prepare, &m->gc_prepare_userdata);
}

/* Between removing names and the sweep: the filesystem drops the kernel's
 * dentries of the names removed (names_settle), so that an image nothing
 * uses is no longer held (keep_open_images) and its content goes now.
 * Outside gc_lock: the kernel may wait for a lookup that waits for it.
 * gc_lock held exclusively, and again on return. */
static void settle_removed(struct manager *m)
{
	pthread_rwlock_unlock(&m->gc_lock);
	call_hook(m, &m->names_settle, &m->names_userdata);
	pthread_rwlock_wrlock(&m->gc_lock);
}

/* ---- a user's quota ---------------------------------------------------- */

static bool key_entered(const uint32_t *keys, size_t n, uint32_t key)
{
	return key && n && bsearch(&key, keys, n, sizeof(key), key_cmp);
}

int gc_user_room(struct manager *m, const char *canonical, uid_t uid, const struct manifest *mf,
		 struct flight *f, char *msg, size_t len)
{
	struct quota_blob *nb = calloc(mf->n_layers + 1, sizeof(*nb));
	struct quota_image extra = { .reference = canonical, .owner = uid, .blobs = nb };
	struct candidate *c = NULL;
	struct quota_image *q = NULL;
	uint32_t *keys = NULL;
	size_t n = 0, n_keys = 0, n_dropped = 0;
	uint64_t quota = gc_user_quota(m), bytes = 0, need = 0;
	char **dropped = NULL;
	int r;

	if (!nb)
		return -ENOMEM;
	/* borrowed from mf: quota.h only reads them */
	for (size_t i = 0; i <= mf->n_layers; i++) {
		const struct descriptor *d = i ? &mf->layers[i - 1] : &mf->config;
		if (d->digest)
			nb[extra.n_blobs++] = (struct quota_blob){ d->digest, d->size };
		need += d->size;
	}
	/* Not knowing which images processes stand in, none is dropped. */
	r = entered_keys(m, &keys, &n_keys);
	if (r < 0)
		goto out_free;
	pthread_mutex_lock(&m->lock);
	r = collect_locked(m, &c, &n);
	if (r == 0 && !(q = quota_view(c, n)))
		r = -ENOMEM;
	for (size_t i = 0; r == 0 && i < n; i++)
		if (key_entered(keys, n_keys, c[i].key) || !strcmp(c[i].reference, canonical))
			q[i].keep = true;
	if (r == 0)
		r = quota_make_room(q, n, uid, quota, &extra, &bytes);
	if (r == 0 && (dropped = calloc(n ? n : 1, sizeof(*dropped)))) {
		for (size_t i = 0; i < n; i++) {
			if (!q[i].victim)
				continue;
			refstate_drop_locked(m, c[i].reference);
			/* the file goes below, outside the lock */
			if (c[i].stored)
				dropped[n_dropped++] = c[i].reference;
			c[i].removed = true;
			f->quota_dropped = true;
		}
	} else if (r == 0) {
		r = -ENOMEM;
	}
	pthread_mutex_unlock(&m->lock);
	for (size_t i = 0; i < n_dropped; i++)
		(void)cache_ref_remove(m->cache, dropped[i]);
	for (size_t i = 0; i < n; i++)
		if (c[i].removed)
			manager_emit(
				m, EVENT_NORMAL, "ImageGC", c[i].reference, c[i].digest, 0, NULL,
				"Removed image \"%s\" of uid %lu to make room for \"%s\" within "
				"its quota of %llu bytes",
				c[i].reference, (unsigned long)uid, canonical,
				(unsigned long long)quota);
	if (r == -EDQUOT) {
		/* Images a new serving process restored count as in use until
		 * the kernel is asked whether it still holds them, which must
		 * wait for the lookup this pull answers: the collector asks
		 * (prepare()) once it is answered, for the next pull. */
		pthread_mutex_lock(&m->lock);
		m->settle_wanted = true;
		pthread_cond_signal(&m->gc_cond);
		pthread_mutex_unlock(&m->lock);
		snprintf(msg, len,
			 "uid %lu may have %llu bytes of images in the cache: this image (%llu "
			 "bytes) and those of its images that cannot go (in use, being pulled or "
			 "pinned) take %llu",
			 (unsigned long)uid, (unsigned long long)quota, (unsigned long long)need,
			 (unsigned long long)bytes);
	}
out_free:
	free(dropped);
	free(q);
	candidates_free(c, n);
	free(keys);
	free(nb);
	return r;
}

void gc_sweep_dropped(struct manager *m)
{
	prepare(m);
	pthread_rwlock_wrlock(&m->gc_lock);
	settle_removed(m);
	sweep(m);
	pthread_rwlock_unlock(&m->gc_lock);
}

static int run_gc(struct manager *m, uint64_t to_bytes, bool manual, json_t **ret,
		  struct error_detail *err)
{
	struct candidate *c = NULL;
	struct quota_image *q = NULL;
	struct budget b;
	uint64_t freed = 0, target;
	size_t n = 0;
	json_t *removed;
	int64_t now = manager_wall_s();
	unsigned min_age = m->opts.gc_no_min_age ? 0 : (m->opts.gc_min_age_s ?: DEFAULT_MIN_AGE_S);
	int r;

	pthread_mutex_lock(&m->lock);
	r = m->gc_frozen ? -EAGAIN : 0;
	pthread_mutex_unlock(&m->lock);
	if (r < 0)
		return error_detail_set(err, r,
					"the serving process hands the cache over to the "
					"next one: nothing is removed");
	removed = json_array();
	if (!removed)
		return -ENOMEM;
	prepare(m);
	pthread_rwlock_wrlock(&m->gc_lock);
	r = measure(m, &b);
	if (r < 0) {
		error_detail_set(err, r, "cannot measure the cache: %s", strerror(-r));
		goto out;
	}
	target = to_bytes ? to_bytes : b.low;
	/* Leftovers that no reference names go first: they cost nothing. */
	freed += sweep(m);
	measure(m, &b);

	pthread_mutex_lock(&m->lock);
	r = collect_locked(m, &c, &n);
	pthread_mutex_unlock(&m->lock);
	if (r < 0)
		goto out;
	/* The images of users over their quota go first: a user's pressure
	 * falls on that user's images before anyone else's. */
	q = quota_view(c, n);
	r = q ? quota_gc_order(q, n, gc_user_quota(m)) : -ENOMEM;
	if (r < 0)
		goto out;
	for (size_t k = 0; k < n && b.usage > target; k++) {
		size_t i = q[k].index;
		uint64_t before = b.usage, got;

		/* (a lazy image still completing is still being pulled) */
		if (c[i].pinned || c[i].used_outside || c[i].in_flight || c[i].completing ||
		    c[i].open_files || now - c[i].pulled_at < (int64_t)min_age)
			continue;
		if (remove_reference(m, c[i].reference) < 0)
			continue;
		settle_removed(m);
		got = sweep(m);
		freed += got;
		measure(m, &b);
		json_array_append_new(removed, json_string(c[i].reference));
		c[i].removed = true;
		c[i].freed = got ? got : before - MIN(b.usage, before);
	}
	pthread_mutex_lock(&m->lock);
	if (manual)
		m->stats.gc_runs_manual++;
	else
		m->stats.gc_runs_threshold++;
	m->stats.gc_freed_bytes += freed;
	m->stats.gc_removed_images += json_array_size(removed);
	pthread_mutex_unlock(&m->lock);
	r = 0;
out:
	pthread_rwlock_unlock(&m->gc_lock);
	free(q);
	if (r < 0) {
		candidates_free(c, n);
		json_decref(removed);
		return r;
	}
	/* The events say an image is gone once the kernel was told to forget
	 * it (outside gc_lock: the kernel may wait for lookups that wait for
	 * it). */
	if (json_array_size(removed) > 0)
		call_hook(m, &m->names_settle, &m->names_userdata);
	for (size_t i = 0; i < n; i++)
		if (c[i].removed)
			manager_emit(m, EVENT_NORMAL, "ImageGC", c[i].reference, c[i].digest, 0,
				     NULL,
				     "Removed image \"%s\" (last used %llds ago), freed %llu bytes",
				     c[i].reference, (long long)(now - c[i].last_used_ms / 1000),
				     (unsigned long long)c[i].freed);
	if (b.usage > target)
		manager_emit(
			m, EVENT_WARNING, "ImageGCFailed", NULL, NULL, 0, NULL,
			"Image garbage collection freed %llu bytes but usage is %llu bytes, over the target of %llu bytes: the rest is in use, pinned or too young",
			(unsigned long long)freed, (unsigned long long)b.usage,
			(unsigned long long)target);
	else
		manager_emit(
			m, EVENT_NORMAL, "ImageGC", NULL, NULL, 0, NULL,
			"Image garbage collection removed %zu images and freed %llu bytes; usage %llu of %llu bytes",
			json_array_size(removed), (unsigned long long)freed,
			(unsigned long long)b.usage, (unsigned long long)b.budget);
	candidates_free(c, n);
	json_t *ans = answer(removed, freed, &b);
	if (!ans)
		return -ENOMEM;
	*ret = ans;
	return 0;
}

int manager_gc(struct manager *m, uint64_t to_bytes, json_t **ret_json, struct error_detail *err)
{
	return run_gc(m, to_bytes, true, ret_json, err);
}

int manager_remove(struct manager *m, const char *const *references, size_t n, json_t **ret_json,
		   struct error_detail *err)
{
	struct candidate *c = NULL;
	char **canon;
	size_t nc = 0;
	uint64_t freed;
	struct budget b = { 0 };
	json_t *removed = NULL;
	int r = 0;

	canon = calloc(n ? n : 1, sizeof(*canon));
	if (!canon)
		return -ENOMEM;
	for (size_t i = 0; i < n && r == 0; i++) {
		r = manager_canonical(references[i], &canon[i]);
		if (r == -EINVAL)
			error_detail_set(err, r, "invalid reference \"%s\"", references[i]);
	}
	if (r < 0)
		goto out_free;

	prepare(m);
	pthread_rwlock_wrlock(&m->gc_lock);
	pthread_mutex_lock(&m->lock);
	r = collect_locked(m, &c, &nc);
	pthread_mutex_unlock(&m->lock);
	if (r < 0)
		goto out;
	/* All or nothing: check every reference before removing any. */
	for (size_t i = 0; i < n && r == 0; i++) {
		size_t j;
		for (j = 0; j < nc; j++)
			if (!strcmp(c[j].reference, canon[i]))
				break;
		if (j == nc) {
			r = error_detail_set(err, -ENOENT, "image \"%s\" is not in the cache",
					     canon[i]);
		} else if (c[j].open_files) {
			r = error_detail_set(err, -EBUSY, "image \"%s\" is in use (%u open files)",
					     canon[i], c[j].open_files);
		} else if (c[j].in_flight) {
			r = error_detail_set(err, -EBUSY, "image \"%s\" is being pulled", canon[i]);
		} else if (c[j].used_outside) {
			r = error_detail_set(err, -EBUSY,
					     "image \"%s\" is in use by containerd's snapshots",
					     canon[i]);
		}
	}
	if (r < 0)
		goto out;
	removed = json_array();
	if (!removed) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (remove_reference(m, canon[i]) == 0) {
			json_array_append_new(removed, json_string(canon[i]));
			manager_emit(m, EVENT_NORMAL, "ImageRemoved", canon[i], NULL, 0, NULL,
				     "Removed image \"%s\" on request", canon[i]);
		}
	settle_removed(m);
	freed = sweep(m);
	measure(m, &b);
	json_t *ans = answer(removed, freed, &b);
	if (ans)
		*ret_json = ans;
	r = ans ? 0 : -ENOMEM;
out:
	pthread_rwlock_unlock(&m->gc_lock);
	candidates_free(c, nc);
out_free:
	for (size_t i = 0; i < n; i++)
		free(canon[i]);
	free(canon);
	return r;
}

/* ---- the background collector ---------------------------------------- */

/* The collector also lets go of names nobody used for a while, a few
 * times per idle period. */
static void *gc_thread(void *arg)
{
	struct manager *m = arg;
	unsigned idle_s = m->opts.name_idle_s ?: MANAGER_DEFAULT_NAME_IDLE_S;
	unsigned every_s = MAX(1u, MIN(idle_s / 4, 60u));
	struct timespec next;

	clock_gettime(CLOCK_REALTIME, &next);
	next.tv_sec += every_s;
	pthread_mutex_lock(&m->lock);
	for (;;) {
		while (!m->gc_wanted && !m->settle_wanted && !m->stopping) {
			if (pthread_cond_timedwait(&m->gc_cond, &m->lock, &next) != ETIMEDOUT)
				continue;
			names_collect_locked(m, (uid_t)-1, (int64_t)idle_s * 1000);
			/* the count of a user's dropped events, once they stop */
			events_flush(m->events);
			clock_gettime(CLOCK_REALTIME, &next);
			next.tv_sec += every_s;
		}
		if (m->stopping)
			break;
		if (!m->gc_wanted) {
			m->settle_wanted = false;
			pthread_mutex_unlock(&m->lock);
			prepare(m);
			pthread_mutex_lock(&m->lock);
			continue;
		}
		/* run_gc() prepares too */
		m->gc_wanted = m->settle_wanted = false;
		pthread_mutex_unlock(&m->lock);
		json_t *j = NULL;
		if (run_gc(m, 0, false, &j, NULL) == 0)
			json_decref(j);
		pthread_mutex_lock(&m->lock);
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

void manager_freeze_gc(struct manager *m)
{
	pthread_mutex_lock(&m->lock);
	m->gc_frozen = true;
	pthread_mutex_unlock(&m->lock);
}

int gc_start(struct manager *m)
{
	int r = pthread_create(&m->gc_thread, NULL, gc_thread, m);

	if (r != 0)
		return -r;
	m->gc_thread_started = true;
	/* A cache already over its threshold at start is collected now. */
	if (gc_needed(m))
		gc_want(m);
	return 0;
}

void gc_stop(struct manager *m)
{
	if (!m->gc_thread_started)
		return;
	pthread_mutex_lock(&m->lock);
	m->stopping = true;
	pthread_cond_broadcast(&m->gc_cond);
	pthread_mutex_unlock(&m->lock);
	pthread_join(m->gc_thread, NULL);
	m->gc_thread_started = false;
}

/* ---- status ------------------------------------------------------------ */

static int user_uids(void *userdata, const char *key, void *value)
{
	json_t *a = userdata;

	json_array_append_new(a, json_integer(strtoll(key, NULL, 10)));
	return 0;
}

json_t *gc_users_json(struct manager *m, const struct caller *who)
{
	json_t *uids = json_array(), *users = json_array(), *v;
	uint64_t quota = gc_user_quota(m);
	size_t i;

	if (!uids || !users) {
		json_decref(uids);
		json_decref(users);
		return NULL;
	}
	pthread_mutex_lock(&m->lock);
	strmap_foreach(m->users, user_uids, uids);
	pthread_mutex_unlock(&m->lock);
	json_array_foreach(uids, i, v)
	{
		uid_t uid = (uid_t)json_integer_value(v);

		/* a user sees its own figures only */
		if (who && who->uid != 0 && who->uid != uid)
			continue;
		json_array_append_new(users, json_pack("{s:I, s:I, s:I}", "uid", (json_int_t)uid,
						       "bytes", (json_int_t)gc_user_charge(m, uid),
						       "quota_bytes", (json_int_t)quota));
	}
	json_decref(uids);
	return users;
}

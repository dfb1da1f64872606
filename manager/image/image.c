/* Images as the filesystem sees them: a small object per name, with a key
 * that makes its node ids (imagekeys.h), over content shared by every name
 * of one manifest digest.  A further name of a cached digest costs a key
 * and a few dozen bytes, and no descriptor: packs are opened on demand
 * (packs.h). */
#include "manager.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache.h"
#include "errname.h"
#include "imagekeys.h"
#include "layer.h"
#include "macro.h"
#include "memtrim.h"
#include "manifest.h"
#include "lazy.h"
#include "lazy-schedule.h"
#include "packs.h"
#include "strmap.h"
#include "manager-private.h"

/* ---- content, shared by digest ---------------------------------------- */

static void content_free(struct manager *m, struct image_content *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n_layers; i++)
		packs_put(m->packs, c->packs[i]);
	free(c->packs);
	tree_free(c->tree);
	free(c->digest);
	free(c);
}

static void content_put(struct manager *m, struct image_content *c)
{
	bool last;

	pthread_mutex_lock(&m->content_lock);
	last = --c->refs == 0;
	if (last)
		strmap_remove(m->contents, c->digest);
	pthread_mutex_unlock(&m->content_lock);
	if (last)
		content_free(m, c);
}

int manifest_load_cached(struct manager *m, const char *digest, struct manifest **ret)
{
	_cleanup_free_ char *buf = NULL;
	size_t len;
	int r;

	r = cache_blob_read(m->cache, digest, MANIFEST_MAX_BYTES, &buf, &len);
	if (r < 0)
		return r;
	return manifest_parse(buf, len, NULL, ret, NULL, 0);
}

unsigned image_max_entries(const struct manager *m)
{
	return m->opts.max_image_entries ?: MANAGER_DEFAULT_IMAGE_ENTRIES;
}

/* Reads the manifest and the layer indexes and builds the tree. */
static void content_complete_lazy(struct manager *m, struct image_content *c);
static void announce_complete(struct manager *m);

static int content_load(struct manager *m, const char *digest, struct image_content **ret,
			char *errbuf, size_t errlen)
{
	struct manifest *mf = NULL;
	struct layer_index **idx = NULL;
	struct image_content *c = NULL;
	size_t n_idx = 0, n_entries = 0;
	int r;

	r = manifest_load_cached(m, digest, &mf);
	if (r < 0) {
		snprintf(errbuf, errlen, "manifest %s: %s", digest, strerror(-r));
		return r;
	}
	if (mf->kind != MANIFEST_IMAGE) {
		r = -EBADMSG;
		goto out;
	}
	c = calloc(1, sizeof(*c));
	idx = calloc(MAX(mf->n_layers, 1), sizeof(*idx));
	if (!c || !idx || !(c->digest = strdup(digest)) ||
	    !(c->packs = calloc(MAX(mf->n_layers, 1), sizeof(*c->packs)))) {
		r = -ENOMEM;
		goto out;
	}
	c->size = mf->config.size;
	for (; n_idx < mf->n_layers; n_idx++) {
		r = cache_layer_read_index(m->cache, mf->layers[n_idx].digest, &idx[n_idx]);
		if (r < 0) {
			snprintf(errbuf, errlen, "index of layer %s: %s", mf->layers[n_idx].digest,
				 strerror(-r));
			goto out;
		}
		r = packs_get(m->packs, mf->layers[n_idx].digest, &c->packs[n_idx]);
		if (r < 0) {
			snprintf(errbuf, errlen, "pack of layer %s: %s", mf->layers[n_idx].digest,
				 strerror(-r));
			layer_index_free(idx[n_idx]);
			goto out;
		}
		c->n_layers++;
		c->size += mf->layers[n_idx].size;
		n_entries += idx[n_idx]->n_entries;
		/* checked as the indexes come: an image over its budget
		 * fails before it holds more than one layer's worth over it
		 * (a restart included) */
		if (n_entries > image_max_entries(m)) {
			n_idx++;
			r = errbuf_fail(-EFBIG, errbuf, errlen,
					"its layers have more than %u entries, the limit of "
					"--max-image-entries",
					image_max_entries(m));
			goto out;
		}
	}
	r = tree_build((const struct layer_index *const *)idx, mf->n_layers, &c->tree, errbuf,
		       errlen);
	if (r < 0)
		goto out;
	c->refs = 1;
	c->loaded_s = manager_now_f(m);
	content_complete_lazy(m, c);
	*ret = TAKE_PTR(c);
out:
	for (size_t i = 0; i < n_idx; i++)
		layer_index_free(idx[i]);
	free(idx);
	manifest_free(mf);
	content_free(m, c);
	mem_trim_after(n_entries);
	return r;
}

/* The content of digest with a reference, loaded when no name holds it. */
static int content_get(struct manager *m, const char *digest, struct image_content **ret,
		       char *errbuf, size_t errlen)
{
	struct image_content *c, *other;
	int r;

	pthread_mutex_lock(&m->content_lock);
	c = strmap_get(m->contents, digest);
	if (c)
		c->refs++;
	pthread_mutex_unlock(&m->content_lock);
	if (c) {
		*ret = c;
		return 0;
	}
	if (!strncmp(digest, LAYER_CONTENT_PREFIX, strlen(LAYER_CONTENT_PREFIX)))
		r = layer_content_load(m, digest, &c, errbuf, errlen);
	else
		r = content_load(m, digest, &c, errbuf, errlen);
	if (r < 0)
		return r;
	pthread_mutex_lock(&m->content_lock);
	other = strmap_get(m->contents, digest);
	if (other) {
		/* Loaded twice at once: keep the first. */
		other->refs++;
	} else if (strmap_put(m->contents, digest, c) < 0) {
		r = -ENOMEM;
	}
	pthread_mutex_unlock(&m->content_lock);
	if (other || r < 0) {
		content_free(m, c);
		c = other;
	}
	if (r < 0)
		return r;
	/* (a layer may have completed before the content was findable) */
	if (!other)
		announce_complete(m);
	*ret = c;
	return 0;
}

/* ---- keys ------------------------------------------------------------ */

struct taken_ctx {
	struct manager *m;
	const char *reference;
	uint32_t key;
	bool taken;
};

static int key_stored(void *userdata, const char *key, void *value)
{
	struct taken_ctx *c = userdata;
	const struct refstate *rs = value;

	if (rs->key == c->key && strcmp(rs->reference, c->reference) != 0) {
		c->taken = true;
		return 1;
	}
	return 0;
}

/* A key stored for another name is kept for it even while it has no
 * view.  Linear in the names: keys are taken only when a view is made.
 * manager.lock held. */
static bool key_taken(void *userdata, uint32_t key)
{
	struct taken_ctx *c = userdata;
	char name[16];

	snprintf(name, sizeof(name), "%" PRIu32, key);
	if (strmap_get(c->m->reserved_keys, name))
		return true;
	c->key = key;
	c->taken = false;
	strmap_foreach(c->m->refs, key_stored, c);
	return c->taken;
}

/* Gives img the key that reference's state stores for digest, or else
 * the one derived from both, or else the next free one, and makes it
 * findable. */
static int key_assign(struct manager *m, const char *reference, const char *digest,
		      struct image *img)
{
	struct taken_ctx c = { .m = m, .reference = reference };
	uint32_t preferred;
	int r;

	pthread_mutex_lock(&m->lock);
	const struct refstate *rs = strmap_get(m->refs, reference);
	if (rs && rs->key && !strcmp(rs->digest, digest))
		preferred = rs->key;
	else
		preferred = imagekey_derive(reference, digest);
	pthread_mutex_lock(&m->keys_lock);
	r = imagekeys_pick(m->keys, preferred, key_taken, &c, &img->key);
	if (r == 0)
		r = imagekeys_insert(m->keys, img->key, img);
	pthread_mutex_unlock(&m->keys_lock);
	pthread_mutex_unlock(&m->lock);
	return r;
}

/* forgotten: by everything that held the image, not freed with the
 * manager */
static void key_release(struct manager *m, uint32_t key, bool forgotten)
{
	pthread_mutex_lock(&m->keys_lock);
	imagekeys_remove(m->keys, key);
	if (forgotten && m->image_forgotten)
		m->image_forgotten(key);
	pthread_mutex_unlock(&m->keys_lock);
}

void manager_set_image_forgotten(struct manager *m, void (*fn)(uint32_t key))
{
	pthread_mutex_lock(&m->keys_lock);
	m->image_forgotten = fn;
	pthread_mutex_unlock(&m->keys_lock);
}

struct image *manager_image(struct manager *m, uint32_t key)
{
	struct image *img = imagekeys_get(m->keys, key);

	/* A slot emptied and filled again meanwhile holds another image. */
	return img && img->key == key ? img : NULL;
}

/* ---- names ------------------------------------------------------------ */

static void image_free(struct image *img, bool forgotten)
{
	struct manager *m = img->manager;

	if (img->key)
		key_release(m, img->key, forgotten);
	layer_view_free(img->layer);
	content_put(m, img->content);
	free(img);
}

/* A new image of digest, without a key yet, one reference. */
static int image_new(struct manager *m, const char *digest, struct image **ret, char *errbuf,
		     size_t errlen)
{
	struct image *img = calloc(1, sizeof(*img));
	int r;

	if (!img)
		return -ENOMEM;
	r = content_get(m, digest, &img->content, errbuf, errlen);
	if (r < 0) {
		free(img);
		return r;
	}
	img->manager = m;
	img->generation = imagekey_generation(digest);
	atomic_init(&img->refcount, 1);
	*ret = img;
	return 0;
}

int image_load(struct manager *m, const char *reference, const char *digest, struct image **ret,
	       char *errbuf, size_t errlen)
{
	struct image *img;
	int r;

	r = image_new(m, digest, &img, errbuf, errlen);
	if (r < 0)
		return r;
	r = key_assign(m, reference, digest, img);
	if (r < 0) {
		content_put(m, img->content);
		free(img);
		return r;
	}
	*ret = img;
	return 0;
}

/* ---- a given key (a serving process taking over) ---------------------- */

/* After a takeover img goes into the table of names when it is what
 * reference names now (or the name has no state) and the table holds no
 * image of that digest there, or one with another key than the state
 * stores.  Otherwise it lives for the kernel's nodes alone.  manager.lock
 * held. */
static void table_offer_locked(struct manager *m, const char *reference, struct image *img)
{
	const struct refstate *rs = strmap_get(m->refs, reference);
	struct image *had = strmap_get(m->images, reference);

	if (rs && strcmp(rs->digest, image_digest(img)))
		return;
	if (had && !strcmp(image_digest(had), image_digest(img)) &&
	    (!rs || had->key == rs->key || img->key != rs->key))
		return;
	if (strmap_put(m->images, reference, img) < 0)
		return; /* the next lookup loads it again, with another key */
	image_ref(img, 1);
	if (had)
		image_unref(had, 1);
}

int image_load_key(struct manager *m, const char *reference, const char *digest, uint32_t key,
		   struct image **ret, char *errbuf, size_t errlen)
{
	struct image *img, *live;
	int r;

	if (key == 0 || key > IMAGEKEY_MAX)
		return -EINVAL;
	r = image_new(m, digest, &img, errbuf, errlen);
	if (r < 0)
		return r;
	pthread_mutex_lock(&m->lock);
	pthread_mutex_lock(&m->keys_lock);
	live = manager_image(m, key);
	if (live && !strcmp(image_digest(live), digest) && !live->layer) {
		image_ref(live, 1);
	} else if (live) {
		r = -ESTALE; /* the key went to another image */
	} else {
		img->key = key;
		r = imagekeys_insert(m->keys, key, img);
		if (r < 0)
			img->key = 0;
	}
	pthread_mutex_unlock(&m->keys_lock);
	if (r == 0)
		table_offer_locked(m, reference, live ? live : img);
	pthread_mutex_unlock(&m->lock);
	if (live || r < 0) {
		content_put(m, img->content);
		free(img);
		if (r < 0)
			return r;
		img = live;
	}
	*ret = img;
	return 0;
}

static void free_left(void *userdata, uint32_t key, void *value)
{
	image_free(value, false);
}

static void detach_left(void *userdata, uint32_t key, void *value)
{
	layer_view_detach(value);
}

void images_free_all(struct manager *m)
{
	if (!m->keys)
		return;
	/* every image goes, in no order: views must not drop theirs */
	imagekeys_foreach(m->keys, detach_left, NULL);
	imagekeys_foreach(m->keys, free_left, NULL);
}

void image_ref(struct image *img, uint64_t n)
{
	atomic_fetch_add(&img->refcount, n);
}

void image_unref(struct image *img, uint64_t n)
{
	if (!img || n == 0)
		return;
	if (atomic_fetch_sub(&img->refcount, n) == n)
		image_free(img, true);
}

void image_open(struct image *img)
{
	atomic_fetch_add(&img->open_files, 1);
}

void image_close(struct image *img)
{
	atomic_fetch_sub(&img->open_files, 1);
}

uint32_t image_key(const struct image *img)
{
	return img->key;
}

uint32_t image_generation(const struct image *img)
{
	return img->generation;
}

const struct tinode *image_root(const struct image *img)
{
	return tree_root(img->content->tree);
}

const struct tinode *image_inode(const struct image *img, uint32_t index)
{
	return tree_inode(img->content->tree, index);
}

bool image_lazy_pending(struct image *img)
{
	struct manager *m = img->manager;
	bool r;

	pthread_mutex_lock(&m->content_lock);
	r = img->content->lazy_pending;
	pthread_mutex_unlock(&m->content_lock);
	return r;
}

const char *image_digest(const struct image *img)
{
	return img->content->digest;
}

int image_file_fd(struct image *img, const struct tinode *file)
{
	struct image_content *c = img->content;

	if (file->layer >= c->n_layers)
		return -EIO;
	return pack_fd_get(img->manager->packs, c->packs[file->layer]);
}

int image_object_open(struct image *img, const struct tinode *file)
{
	struct image_content *c = img->content;

	if (!file->object || file->layer >= c->n_layers)
		return -EIO;
	return pack_object_open(img->manager->packs, c->packs[file->layer], file->object);
}

bool image_file_lazy(struct image *img, const struct tinode *file)
{
	struct image_content *c = img->content;

	return file->object && file->layer < c->n_layers &&
	       pack_was_lazy(img->manager->packs, c->packs[file->layer]);
}

bool image_file_local(struct image *img, const struct tinode *file)
{
	struct image_content *c = img->content;
	struct lazy_layer *l;

	if (!file->object || file->layer >= c->n_layers)
		return true;
	l = pack_lazy(img->manager->packs, c->packs[file->layer]);
	return !l || lazy_file_local(l, file->object);
}

ssize_t image_lazy_read(struct image *img, const struct tinode *file, uint64_t off, size_t size,
			void *buf, const struct caller *who)
{
	struct image_content *c = img->content;
	struct lazy_layer *l;
	ssize_t n;
	int fd;

	if (!file->object || file->layer >= c->n_layers)
		return -EIO;
	l = pack_lazy(img->manager->packs, c->packs[file->layer]);
	if (l) {
		struct manager *m = img->manager;
		int64_t now = manager_wall_ms(), last;

		n = lazy_read(l, m->registry, file->object, off, size, buf);
		/* said once per 10 s: a registry that is down fails every read */
		last = atomic_load(&m->lazy_warned_ms);
		if (n < 0 && now - last >= 10000 &&
		    atomic_compare_exchange_strong(&m->lazy_warned_ms, &last, now)) {
			_cleanup_free_ char *ref = reference_of(m, c->digest);
			struct caller reader = *who;

			caller_name(&reader);
			manager_emit(m, EVENT_WARNING, "LazyReadFailed", ref, c->digest, (int)n,
				     &reader,
				     "A read of the file with content sha256:%s of image \"%s\" "
				     "(%s) failed: %s (the next read tries again)",
				     file->object, ref ? ref : "(no name left)", c->digest,
				     strerror((int)-n));
		}
		return n;
	}
	/* complete since */
	fd = image_object_open(img, file);
	if (fd < 0)
		return fd;
	n = pread(fd, buf, size, (off_t)off);
	if (n < 0)
		n = negative_errno();
	close(fd);
	return n;
}

/* Background completions of lazy layers running at once, all images
 * together: each streams a blob, and the reads someone waits for come
 * first anyway (lazy.h). */
#define LAZY_COMPLETIONS_MAX 2

/* One lazy layer's background completion: a thread of its own that waits
 * for its schedule (lazy-schedule.h), then fetches, and tries again after a
 * failure until the layer is complete or the manager stops. */
struct completion {
	struct manager *m;
	struct pack *pack;
	struct lazy_layer *lazy;
	struct lazy_schedule sched; /* manager.lock */
	struct dlist_node node;	    /* on manager.completions; manager.lock */
};

/* Waits on flight_cond for at most 200 ms (manager_cancel() does not
 * signal it: the caller looks at the flag again soon).  manager.lock
 * held. */
static void completion_nap(struct manager *m)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 200000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(&m->flight_cond, &m->lock, &ts);
}

/* Waits until the schedule says go, then for a completion slot; false when
 * the manager is cancelled first. */
static bool completion_slot_take(struct completion *cp)
{
	struct manager *m = cp->m;
	struct lazy_stats *st = packs_lazy_stats(m->packs);
	bool ok;

	pthread_mutex_lock(&m->lock);
	for (;;) {
		if (atomic_load(&m->cancelled))
			break;
		lazy_schedule_readers(&cp->sched, atomic_load(&st->reader_ok));
		if (lazy_schedule_due(&cp->sched, NULL) &&
		    m->lazy_completing < LAZY_COMPLETIONS_MAX)
			break;
		completion_nap(m);
	}
	ok = !atomic_load(&m->cancelled);
	if (ok) {
		m->lazy_completing++;
		lazy_schedule_running(&cp->sched);
	}
	pthread_mutex_unlock(&m->lock);
	return ok;
}

static void completion_slot_give(struct manager *m)
{
	pthread_mutex_lock(&m->lock);
	m->lazy_completing--;
	pthread_cond_broadcast(&m->flight_cond);
	pthread_mutex_unlock(&m->lock);
}

struct announce_ctx {
	struct manager *m;
	struct image_completed *done;
	size_t n;
};

static int content_now_complete(void *userdata, const char *key, void *value)
{
	struct announce_ctx *a = userdata;
	struct image_content *c = value;
	struct image_completed *d;

	if (!c->lazy_pending)
		return 0;
	for (size_t i = 0; i < c->n_layers; i++)
		if (!pack_complete(a->m->packs, c->packs[i]))
			return 0;
	d = realloc(a->done, (a->n + 1) * sizeof(*d));
	if (!d)
		return 0;
	a->done = d;
	d[a->n] = (struct image_completed){ .digest = strdup(c->digest),
					    .seconds = manager_now_f(a->m) - c->loaded_s,
					    .size = c->size };
	if (d[a->n].digest)
		a->n++;
	c->lazy_pending = false;
	return 0;
}

/* Reports each loaded image whose last lazy layer just completed to
 * manager.images_completed (its names and their events are the top's). */
static void announce_complete(struct manager *m)
{
	struct announce_ctx a = { .m = m };

	pthread_mutex_lock(&m->content_lock);
	strmap_foreach(m->contents, content_now_complete, &a);
	pthread_mutex_unlock(&m->content_lock);
	if (a.n == 0)
		return;
	m->images_completed(m, a.done, a.n);
	for (size_t i = 0; i < a.n; i++)
		free(a.done[i].digest);
	free(a.done);
}

static void *complete_thread(void *arg)
{
	struct completion *cp = arg;
	struct manager *m = cp->m;
	int r;

	for (;;) {
		unsigned delay, tries;

		r = -ECANCELED;
		/* (replaced by a layer verified against its digest: nothing
		 * left to complete) */
		if (pack_detached(m->packs, cp->pack))
			break;
		if (completion_slot_take(cp)) {
			r = lazy_layer_complete(cp->lazy, m->registry, &m->cancelled);
			completion_slot_give(m);
		}
		if (r == 0 && !lazy_layer_is_complete(cp->lazy))
			r = -EAGAIN; /* a file that did not verify */
		if (r == 0 || r == -ECANCELED)
			break;
		if (lazy_layer_foreign_toc(cp->lazy)) {
			manager_emit(m, EVENT_WARNING, "LazyLayerUnverified", NULL,
				     pack_digest(cp->pack), r, NULL,
				     "Lazy layer %s is not the blob of that digest: the blob holds "
				     "another table of contents than the one the layer was built "
				     "from, or chunks that do not match it; it is never completed, "
				     "and only images naming that table are served from it",
				     pack_digest(cp->pack));
			break;
		}
		pthread_mutex_lock(&m->lock);
		delay = lazy_schedule_failed(&cp->sched);
		tries = cp->sched.failures;
		pthread_mutex_unlock(&m->lock);
		manager_emit(m, EVENT_WARNING, "LazyFetchFailed", NULL, pack_digest(cp->pack), r,
			     NULL,
			     "Fetching the rest of lazy layer %s failed: %s (try %u; tries again "
			     "in %u s, sooner once a read or a lookup of the image gets through; "
			     "its files are fetched when read)",
			     pack_digest(cp->pack), strerror(-r), tries, delay);
	}
	if (r == 0)
		manager_emit(m, EVENT_NORMAL, "LayerCompleted", NULL, pack_digest(cp->pack), 0,
			     NULL, "Layer %s, pulled lazily, is complete and verified %s",
			     pack_digest(cp->pack),
			     lazy_layer_toc_verified(cp->lazy)
				     ? "by its table of contents (every file checked against "
				       "it; the blob was not read whole for its digest)"
				     : "against its digest");
	if (r == 0)
		announce_complete(m);
	else
		pack_completion_failed(m->packs, cp->pack);
	pthread_mutex_lock(&m->lock);
	dlist_remove(&m->completions, &cp->node);
	pthread_mutex_unlock(&m->lock);
	packs_put(m->packs, cp->pack);
	free(cp);
	pthread_mutex_lock(&m->lock);
	if (--m->jobs_running == 0)
		pthread_cond_broadcast(&m->flight_cond);
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

/* The start-up window of a lazily started image (0: none). */
static int64_t completion_window_ns(const struct manager *m)
{
	long ms = m->opts.lazy_completion_delay_ms;

	if (ms == 0)
		ms = MANAGER_DEFAULT_LAZY_DELAY_S * 1000L;
	return ms < 0 ? 0 : (int64_t)ms * 1000000;
}

/* Background completion of the lazy layers of a content just loaded. */
static void content_complete_lazy(struct manager *m, struct image_content *c)
{
	struct lazy_stats *st = packs_lazy_stats(m->packs);

	for (size_t i = 0; i < c->n_layers; i++) {
		struct lazy_layer *l = pack_lazy(m->packs, c->packs[i]);
		struct completion *cp;
		pthread_attr_t attr;
		pthread_t th;

		if (l && !lazy_layer_is_complete(l))
			c->lazy_pending = true;
		if (!l || atomic_load(&m->cancelled) ||
		    !pack_claim_completion(m->packs, c->packs[i]))
			continue;
		cp = calloc(1, sizeof(*cp));
		if (!cp) {
			pack_completion_failed(m->packs, c->packs[i]);
			packs_put(m->packs, c->packs[i]);
			continue;
		}
		*cp = (struct completion){ .m = m, .pack = c->packs[i], .lazy = l };
		lazy_schedule_init(&cp->sched, m->clock, completion_window_ns(m),
				   atomic_load(&st->reader_ok));
		pthread_mutex_lock(&m->lock);
		m->jobs_running++;
		dlist_push(&m->completions, &cp->node);
		pthread_mutex_unlock(&m->lock);
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&th, &attr, complete_thread, cp) != 0) {
			pack_completion_failed(m->packs, c->packs[i]);
			packs_put(m->packs, c->packs[i]);
			pthread_mutex_lock(&m->lock);
			dlist_remove(&m->completions, &cp->node);
			if (--m->jobs_running == 0)
				pthread_cond_broadcast(&m->flight_cond);
			pthread_mutex_unlock(&m->lock);
			free(cp);
		}
		pthread_attr_destroy(&attr);
	}
}

void image_completion_wake(struct image *img, bool waited)
{
	struct manager *m = img->manager;
	struct image_content *c = img->content;

	pthread_mutex_lock(&m->lock);
	for (struct dlist_node *n = m->completions.head; n; n = n->next) {
		struct completion *cp = dlist_entry(n, struct completion, node);

		for (size_t i = 0; i < c->n_layers; i++)
			if (c->packs[i] == cp->pack)
				lazy_schedule_wake(&cp->sched, waited);
	}
	pthread_cond_broadcast(&m->flight_cond);
	pthread_mutex_unlock(&m->lock);
}

int image_completion_phase_locked(struct manager *m, const char *layer_digest,
				  unsigned *ret_failures)
{
	for (struct dlist_node *n = m->completions.head; n; n = n->next) {
		struct completion *cp = dlist_entry(n, struct completion, node);

		if (strcmp(pack_digest(cp->pack), layer_digest) == 0) {
			*ret_failures = cp->sched.failures;
			return (int)cp->sched.phase;
		}
	}
	return -ENOENT;
}

void image_file_fd_put(struct image *img, const struct tinode *file)
{
	pack_fd_put(img->manager->packs, img->content->packs[file->layer]);
}

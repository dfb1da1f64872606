/* Images as the filesystem sees them: a small object per name, with a key
 * that makes its node ids (imagekeys.h), over content shared by every name
 * of one manifest digest.  A further name of a cached digest costs a key,
 * its name and a few dozen bytes, and no descriptor: packs are opened on
 * demand (packs.h).  See image.h. */
#include "image.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "errname.h"
#include "imagekeys.h"
#include "lazy-completer.h"
#include "layer.h"
#include "layerview.h"
#include "macro.h"
#include "memtrim.h"
#include "manifest.h"
#include "lazy.h"
#include "packs.h"
#include "profile.h"
#include "strmap.h"
#include "image-private.h"

/* ---- content, shared by digest ---------------------------------------- */

static void content_free(struct images *imgs, struct image_content *c)
{
	if (!c)
		return;
	content_profile_put(c->profile);
	for (size_t i = 0; i < c->n_layers; i++)
		packs_put(imgs->o.packs, c->packs[i]);
	free(c->packs);
	tree_free(c->tree);
	free(c->digest);
	free(c);
}

static void content_put(struct images *imgs, struct image_content *c)
{
	bool last;

	pthread_mutex_lock(&imgs->content_lock);
	last = --c->refs == 0;
	if (last)
		strmap_remove(imgs->contents, c->digest);
	pthread_mutex_unlock(&imgs->content_lock);
	if (last)
		content_free(imgs, c);
}

int manifest_load_cached(struct cache *cache, const char *digest, struct manifest **ret)
{
	_cleanup_free_ char *buf = NULL;
	size_t len;
	int r;

	r = cache_blob_read(cache, digest, MANIFEST_MAX_BYTES, &buf, &len);
	if (r < 0)
		return r;
	return manifest_parse(buf, len, NULL, ret, NULL, 0);
}

static double images_now_f(const struct images *imgs)
{
	return (double)clock_now_ns(imgs->o.clock) / 1e9;
}

static void content_complete_lazy(struct images *imgs, struct image_content *c);
static void announce_complete(struct images *imgs);

/* Reads the manifest and the layer indexes and builds the tree. */
static int content_load(struct images *imgs, const char *digest, struct image_content **ret,
			char *errbuf, size_t errlen)
{
	struct manifest *mf = NULL;
	struct layer_index **idx = NULL;
	struct image_content *c = NULL;
	size_t n_idx = 0, n_entries = 0;
	int r;

	r = manifest_load_cached(imgs->o.cache, digest, &mf);
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
		r = cache_layer_read_index(imgs->o.cache, mf->layers[n_idx].digest, &idx[n_idx]);
		if (r < 0) {
			snprintf(errbuf, errlen, "index of layer %s: %s", mf->layers[n_idx].digest,
				 strerror(-r));
			goto out;
		}
		r = packs_get(imgs->o.packs, mf->layers[n_idx].digest, &c->packs[n_idx]);
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
		if (n_entries > imgs->o.max_entries) {
			n_idx++;
			r = errbuf_fail(-EFBIG, errbuf, errlen,
					"its layers have more than %u entries, the limit of "
					"--max-image-entries",
					imgs->o.max_entries);
			goto out;
		}
	}
	r = tree_build((const struct layer_index *const *)idx, mf->n_layers, &c->tree, errbuf,
		       errlen);
	if (r < 0)
		goto out;
	c->refs = 1;
	c->loaded_s = images_now_f(imgs);
	c->profile = content_profile_start(imgs, c, mf);
	content_complete_lazy(imgs, c);
	content_profile_handed(c->profile);
	*ret = TAKE_PTR(c);
out:
	for (size_t i = 0; i < n_idx; i++)
		layer_index_free(idx[i]);
	free(idx);
	manifest_free(mf);
	content_free(imgs, c);
	mem_trim_after(n_entries);
	return r;
}

/* The content of digest with a reference, loaded when no name holds it. */
static int content_get(struct images *imgs, const char *digest, struct image_content **ret,
		       char *errbuf, size_t errlen)
{
	struct image_content *c, *other;
	int r;

	pthread_mutex_lock(&imgs->content_lock);
	c = strmap_get(imgs->contents, digest);
	if (c)
		c->refs++;
	pthread_mutex_unlock(&imgs->content_lock);
	if (c) {
		*ret = c;
		return 0;
	}
	if (!strncmp(digest, LAYER_CONTENT_PREFIX, strlen(LAYER_CONTENT_PREFIX)))
		r = layer_content_load(imgs, digest, &c, errbuf, errlen);
	else
		r = content_load(imgs, digest, &c, errbuf, errlen);
	if (r < 0)
		return r;
	pthread_mutex_lock(&imgs->content_lock);
	other = strmap_get(imgs->contents, digest);
	if (other) {
		/* Loaded twice at once: keep the first. */
		other->refs++;
	} else if (strmap_put(imgs->contents, digest, c) < 0) {
		r = -ENOMEM;
	}
	pthread_mutex_unlock(&imgs->content_lock);
	if (other || r < 0) {
		content_free(imgs, c);
		c = other;
	}
	if (r < 0)
		return r;
	/* (a layer may have completed before the content was findable) */
	if (!other)
		announce_complete(imgs);
	*ret = c;
	return 0;
}

/* ---- keys ------------------------------------------------------------ */

int images_key_assign(struct images *imgs, struct image *img, uint32_t preferred,
		      bool (*taken)(void *userdata, uint32_t key), void *userdata)
{
	int r;

	pthread_mutex_lock(&imgs->keys_lock);
	r = imagekeys_pick(imgs->keys, preferred, taken, userdata, &img->key);
	if (r == 0) {
		r = imagekeys_insert(imgs->keys, img->key, img);
		if (r < 0)
			img->key = 0;
	} else {
		img->key = 0;
	}
	pthread_mutex_unlock(&imgs->keys_lock);
	return r;
}

/* forgotten: by everything that held the image, not freed with the
 * images */
static void key_release(struct images *imgs, uint32_t key, bool forgotten)
{
	pthread_mutex_lock(&imgs->keys_lock);
	imagekeys_remove(imgs->keys, key);
	if (forgotten && imgs->forgotten)
		imgs->forgotten(key);
	pthread_mutex_unlock(&imgs->keys_lock);
}

void images_set_forgotten(struct images *imgs, void (*fn)(uint32_t key))
{
	pthread_mutex_lock(&imgs->keys_lock);
	imgs->forgotten = fn;
	pthread_mutex_unlock(&imgs->keys_lock);
}

struct image *images_get(struct images *imgs, uint32_t key)
{
	struct image *img = imagekeys_get(imgs->keys, key);

	/* A slot emptied and filled again meanwhile holds another image. */
	return img && img->key == key ? img : NULL;
}

void images_foreach(struct images *imgs, void (*fn)(void *userdata, uint32_t key, void *img),
		    void *userdata)
{
	pthread_mutex_lock(&imgs->keys_lock);
	imagekeys_foreach(imgs->keys, fn, userdata);
	pthread_mutex_unlock(&imgs->keys_lock);
}

/* ---- names ------------------------------------------------------------ */

static void image_free(struct image *img, bool forgotten)
{
	struct images *imgs = img->images;

	if (img->key)
		key_release(imgs, img->key, forgotten);
	layer_view_free(img->layer);
	content_put(imgs, img->content);
	free(img->name);
	free(img);
}

int images_new_image(struct images *imgs, const char *name, const char *digest, struct image **ret,
		     char *errbuf, size_t errlen)
{
	struct image *img = calloc(1, sizeof(*img));
	int r;

	if (!img || !(img->name = strdup(name))) {
		free(img);
		return -ENOMEM;
	}
	r = content_get(imgs, digest, &img->content, errbuf, errlen);
	if (r < 0) {
		free(img->name);
		free(img);
		return r;
	}
	img->images = imgs;
	img->generation = imagekey_generation(digest);
	atomic_init(&img->refcount, 1);
	*ret = img;
	return 0;
}

int images_load(struct images *imgs, const char *name, const char *digest, struct image **ret,
		char *errbuf, size_t errlen)
{
	struct image *img;
	int r;

	r = images_new_image(imgs, name, digest, &img, errbuf, errlen);
	if (r < 0)
		return r;
	r = imgs->o.key_assign(imgs->o.userdata, imgs, img, name, digest);
	if (r < 0) {
		image_free(img, false);
		return r;
	}
	*ret = img;
	return 0;
}

/* ---- a given key (a serving process taking over) ---------------------- */

int images_key_take(struct images *imgs, struct image *img, uint32_t key, struct image **ret_live)
{
	struct image *live;
	int r = 0;

	if (key == 0 || key > IMAGEKEY_MAX)
		return -EINVAL;
	pthread_mutex_lock(&imgs->keys_lock);
	live = images_get(imgs, key);
	if (live && !strcmp(image_digest(live), image_digest(img)) && !live->layer) {
		image_ref(live, 1);
		atomic_store(&live->restored, true);
	} else if (live) {
		r = -ESTALE; /* the key went to another image */
		live = NULL;
	} else {
		img->key = key;
		atomic_store(&img->restored, true);
		r = imagekeys_insert(imgs->keys, key, img);
		if (r < 0)
			img->key = 0;
	}
	pthread_mutex_unlock(&imgs->keys_lock);
	if (r == 0)
		*ret_live = live;
	return r;
}

/* ---- the table -------------------------------------------------------- */

int images_new(const struct images_options *o, struct images **ret)
{
	struct images *imgs = calloc(1, sizeof(*imgs));

	if (!imgs)
		return -ENOMEM;
	imgs->o = *o;
	pthread_mutex_init(&imgs->content_lock, NULL);
	pthread_mutex_init(&imgs->keys_lock, NULL);
	imgs->contents = strmap_new();
	if (!imgs->contents || imagekeys_new(&imgs->keys) < 0) {
		images_free(imgs);
		return -ENOMEM;
	}
	*ret = imgs;
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

void images_free(struct images *imgs)
{
	if (!imgs)
		return;
	if (imgs->keys) {
		/* every image goes, in no order: views must not drop theirs */
		imagekeys_foreach(imgs->keys, detach_left, NULL);
		imagekeys_foreach(imgs->keys, free_left, NULL);
	}
	strmap_free(imgs->contents);
	imagekeys_free(imgs->keys);
	pthread_mutex_destroy(&imgs->content_lock);
	pthread_mutex_destroy(&imgs->keys_lock);
	free(imgs);
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

void image_kernel_ref(struct image *img, uint64_t n)
{
	atomic_fetch_add(&img->kernel_lookups, n);
	atomic_fetch_add(&img->kernel_refs, n);
	atomic_fetch_add(&img->refcount, n);
}

void image_kernel_adopt(struct image *img)
{
	atomic_fetch_add(&img->kernel_lookups, 1);
	atomic_fetch_add(&img->kernel_refs, 1);
}

void image_kernel_forget(struct image *img, uint64_t n)
{
	if (atomic_load(&img->retired))
		return;
	atomic_fetch_sub(&img->kernel_refs, n);
	image_unref(img, n);
}

uint64_t image_kernel_lookups(const struct image *img)
{
	return atomic_load(&img->kernel_lookups);
}

bool image_kernel_only(const struct image *img)
{
	/* (kernel_refs first: an adopted reference is counted in it before
	 * it stops being the caller's) */
	uint64_t k = atomic_load(&img->kernel_refs);

	return atomic_load(&img->refcount) == k;
}

uint64_t image_retire(struct image *img)
{
	atomic_store(&img->retired, true);
	return atomic_exchange(&img->kernel_refs, 0);
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
	struct images *imgs = img->images;
	bool r;

	pthread_mutex_lock(&imgs->content_lock);
	r = img->content->lazy_pending;
	pthread_mutex_unlock(&imgs->content_lock);
	return r;
}

bool image_completing(struct image *img)
{
	const struct image_content *c = img->content;

	for (size_t i = 0; i < c->n_layers; i++)
		if (pack_completing(img->images->o.packs, c->packs[i]))
			return true;
	return false;
}

const char *image_digest(const struct image *img)
{
	return img->content->digest;
}

const char *image_name(const struct image *img)
{
	return img->name;
}

uint64_t image_refs(const struct image *img)
{
	return atomic_load(&img->refcount);
}

unsigned image_open_count(const struct image *img)
{
	return atomic_load(&img->open_files);
}

int image_file_fd(struct image *img, const struct tinode *file)
{
	struct image_content *c = img->content;

	if (file->layer >= c->n_layers)
		return -EIO;
	return pack_fd_get(img->images->o.packs, c->packs[file->layer]);
}

int image_object_open(struct image *img, const struct tinode *file)
{
	struct image_content *c = img->content;

	if (!file->object || file->layer >= c->n_layers)
		return -EIO;
	return pack_object_open(img->images->o.packs, c->packs[file->layer], file->object);
}

bool image_file_lazy(struct image *img, const struct tinode *file)
{
	struct image_content *c = img->content;

	return file->object && file->layer < c->n_layers &&
	       pack_was_lazy(img->images->o.packs, c->packs[file->layer]);
}

bool image_file_packed(struct image *img, const struct tinode *file)
{
	struct image_content *c = img->content;
	struct lazy_layer *l;

	if (!file->object || file->layer >= c->n_layers)
		return false;
	l = pack_lazy(img->images->o.packs, c->packs[file->layer]);
	return l && lazy_file_packed(l, file->object);
}

bool image_restored(const struct image *img)
{
	return atomic_load(&img->restored);
}

bool image_file_local(struct image *img, const struct tinode *file)
{
	struct image_content *c = img->content;
	struct lazy_layer *l;

	if (!file->object || file->layer >= c->n_layers)
		return true;
	l = pack_lazy(img->images->o.packs, c->packs[file->layer]);
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
	l = pack_lazy(img->images->o.packs, c->packs[file->layer]);
	if (l) {
		struct images *imgs = img->images;
		int64_t now = clock_mono_ms(), last;

		n = lazy_read(l, imgs->o.registry, file->object, off, size, buf);
		/* said once per 10 s: a registry that is down fails every read */
		last = atomic_load(&imgs->lazy_warned_ms);
		if (n < 0 && now - last >= 10000 &&
		    atomic_compare_exchange_strong(&imgs->lazy_warned_ms, &last, now)) {
			/* a view by the image it is a layer of */
			const char *ref = img->layer ? layer_view_reference(img) : img->name;
			struct caller reader = *who;

			caller_name(&reader);
			event_sendf(&imgs->o.events, EVENT_WARNING, "LazyReadFailed", ref,
				    c->digest, (int)n, &reader,
				    "A read of the file with content sha256:%s of image \"%s\" "
				    "(%s) failed: %s (the next read tries again)",
				    file->object, ref, c->digest, strerror((int)-n));
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

/* The background completion of one lazy layer of a loaded content
 * (lazy-completer.h): the job's userdata, holding the pack. */
struct layer_completion {
	struct images *imgs;
	struct pack *pack;
	struct content_profile *profile; /* its prefetch is due; NULL: none */
};

struct announce_ctx {
	struct images *imgs;
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
		if (!pack_complete(a->imgs->o.packs, c->packs[i]))
			return 0;
	d = realloc(a->done, (a->n + 1) * sizeof(*d));
	if (!d)
		return 0;
	a->done = d;
	d[a->n] = (struct image_completed){ .digest = strdup(c->digest),
					    .seconds = images_now_f(a->imgs) - c->loaded_s,
					    .size = c->size };
	if (d[a->n].digest)
		a->n++;
	c->lazy_pending = false;
	return 0;
}

/* Reports each loaded image whose last lazy layer just completed to the
 * completed hook (its names and their events are the owner's). */
static void announce_complete(struct images *imgs)
{
	struct announce_ctx a = { .imgs = imgs };

	pthread_mutex_lock(&imgs->content_lock);
	strmap_foreach(imgs->contents, content_now_complete, &a);
	pthread_mutex_unlock(&imgs->content_lock);
	if (a.n == 0)
		return;
	imgs->o.completed(imgs->o.userdata, a.done, a.n);
	for (size_t i = 0; i < a.n; i++)
		free(a.done[i].digest);
	free(a.done);
}

/* (replaced by a layer verified against its digest: nothing left to
 * complete) */
static bool completion_gone(void *userdata)
{
	struct layer_completion *lc = userdata;

	return pack_detached(lc->imgs->o.packs, lc->pack);
}

static void completion_profiled(void *userdata, const struct lazy_prefetch *pf, int r)
{
	struct layer_completion *lc = userdata;

	content_profile_prefetched(TAKE_PTR(lc->profile), pf, r);
}

void images_set_times_changed(struct images *imgs, void (*fn)(void *userdata, const char *digest),
			      void *userdata)
{
	pthread_mutex_lock(&imgs->content_lock);
	imgs->times_changed = fn;
	imgs->times_userdata = userdata;
	pthread_mutex_unlock(&imgs->content_lock);
}

/* The loaded contents built on one pack, each with a reference. */
struct on_pack {
	const struct pack *pack;
	struct image_content **cs;
	size_t n;
	bool short_of_memory;
};

static int content_on_pack(void *userdata, const char *key, void *value)
{
	struct on_pack *o = userdata;
	struct image_content *c = value, **cs;

	(void)key;
	/* (a single layer's view is built by layerview.c, and keeps its
	 * tree until it is loaded again) */
	if (!strncmp(c->digest, LAYER_CONTENT_PREFIX, strlen(LAYER_CONTENT_PREFIX)))
		return 0;
	for (size_t i = 0; i < c->n_layers; i++) {
		if (c->packs[i] != o->pack)
			continue;
		cs = realloc(o->cs, (o->n + 1) * sizeof(*cs));
		if (!cs) {
			o->short_of_memory = true;
			return 0;
		}
		o->cs = cs;
		o->cs[o->n++] = c;
		c->refs++;
		break;
	}
	return 0;
}

/* c's tree with the mtimes its layers' indexes have now.  Returns how
 * many inodes changed, or -errno. */
static int content_take_times(struct images *imgs, struct image_content *c)
{
	_cleanup_free_ struct layer_index **idx = calloc(MAX(c->n_layers, 1), sizeof(*idx));
	struct tree *t = NULL;
	char err[256];
	size_t n = 0;
	int r = idx ? 0 : -ENOMEM;

	for (; r == 0 && n < c->n_layers; n++)
		r = cache_layer_read_index(imgs->o.cache, pack_digest(c->packs[n]), &idx[n]);
	if (r == 0)
		r = tree_build((const struct layer_index *const *)idx, c->n_layers, &t, err,
			       sizeof(err));
	if (r == 0)
		r = tree_update_times(c->tree, t);
	tree_free(t);
	for (size_t i = 0; idx && i < n; i++)
		layer_index_free(idx[i]);
	return r;
}

/* A lazy layer just completed: when it was verified against its digest,
 * its index has the tar headers' mtimes, which the loaded trees built on
 * it take now (a layer verified by its table of contents changes
 * nothing: no tree does). */
static void contents_take_times(struct images *imgs, const struct pack *pack)
{
	struct on_pack o = { .pack = pack };
	void (*fn)(void *userdata, const char *digest);
	void *userdata;

	pthread_mutex_lock(&imgs->content_lock);
	strmap_foreach(imgs->contents, content_on_pack, &o);
	fn = imgs->times_changed;
	userdata = imgs->times_userdata;
	pthread_mutex_unlock(&imgs->content_lock);
	for (size_t i = 0; i < o.n; i++) {
		if (content_take_times(imgs, o.cs[i]) > 0 && fn)
			fn(userdata, o.cs[i]->digest);
		content_put(imgs, o.cs[i]);
	}
	free(o.cs);
}

static void completion_end(void *userdata, bool complete)
{
	struct layer_completion *lc = userdata;
	struct lazy_layer *l = pack_lazy(lc->imgs->o.packs, lc->pack);

	if (complete && (!l || !lazy_layer_toc_verified(l)))
		contents_take_times(lc->imgs, lc->pack);
	if (complete)
		announce_complete(lc->imgs);
	else
		pack_completion_failed(lc->imgs->o.packs, lc->pack);
	packs_put(lc->imgs->o.packs, lc->pack);
	free(lc);
}

/* Background completion of the lazy layers of a content just loaded. */
static void content_complete_lazy(struct images *imgs, struct image_content *c)
{
	struct packs *packs = imgs->o.packs;

	for (size_t i = 0; i < c->n_layers; i++) {
		struct lazy_layer *l = pack_lazy(packs, c->packs[i]);
		struct layer_completion *lc;

		if (l && !lazy_layer_is_complete(l))
			c->lazy_pending = true;
		if (!l || !pack_claim_completion(packs, c->packs[i]))
			continue;
		const struct strmap *profile = NULL;

		lc = malloc(sizeof(*lc));
		if (lc) {
			profile = content_profile_layer(c->profile, i);
			*lc = (struct layer_completion){ .imgs = imgs,
							 .pack = c->packs[i],
							 .profile = profile ? c->profile : NULL };
		}
		/* (-ECANCELED once the daemon stops) */
		if (!lc ||
		    lazy_completer_start(imgs->o.completer,
					 &(struct lazy_completion_job){
						 .digest = pack_digest(c->packs[i]),
						 .layer = l,
						 .group = c,
						 .gone = completion_gone,
						 .end = completion_end,
						 .profile = profile,
						 .profiled = profile ? completion_profiled : NULL,
						 .userdata = lc,
					 }) < 0) {
			if (lc && lc->profile)
				completion_profiled(lc, &(struct lazy_prefetch){ 0 }, -ECANCELED);
			pack_completion_failed(packs, c->packs[i]);
			packs_put(packs, c->packs[i]);
			free(lc);
		}
	}
}

/* Whether a completion (its job's userdata) is of a layer of content
 * match_data. */
static bool completion_of(void *match_data, void *userdata)
{
	const struct image_content *c = match_data;
	const struct layer_completion *lc = userdata;

	for (size_t i = 0; i < c->n_layers; i++)
		if (c->packs[i] == lc->pack)
			return true;
	return false;
}

void image_profile_note(struct image *img, const struct tinode *file)
{
	content_profile_note(img->content->profile, file);
}

void image_completion_wake(struct image *img, bool waited)
{
	lazy_completer_wake(img->images->o.completer, completion_of, img->content, waited);
}

void image_file_fd_put(struct image *img, const struct tinode *file)
{
	pack_fd_put(img->images->o.packs, img->content->packs[file->layer]);
}

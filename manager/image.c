/* Images as the filesystem sees them: a small object per name, with an id
 * that makes its node ids, over content shared by every name of one
 * manifest digest.  A further name of a cached digest costs an id and a
 * few dozen bytes, and no descriptor: packs are opened on demand (packs.h).
 */
#include "manager.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "layer.h"
#include "macro.h"
#include "manifest.h"
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

static int manifest_load_cached(struct manager *m, const char *digest,
				struct manifest **ret)
{
	_cleanup_free_ char *buf = NULL;
	size_t len;
	int r;

	r = cache_blob_read(m->cache, digest, MANIFEST_MAX_BYTES, &buf, &len);
	if (r < 0)
		return r;
	return manifest_parse(buf, len, NULL, ret, NULL, 0);
}

/* Reads the manifest and the layer indexes and builds the tree. */
static int content_load(struct manager *m, const char *digest,
			struct image_content **ret, char *errbuf, size_t errlen)
{
	struct manifest *mf = NULL;
	struct layer_index **idx = NULL;
	struct image_content *c = NULL;
	size_t n_idx = 0;
	int r;

	r = manifest_load_cached(m, digest, &mf);
	if (r < 0)
		return r;
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
		if (r < 0)
			goto out;
		r = packs_get(m->packs, mf->layers[n_idx].digest, &c->packs[n_idx]);
		if (r < 0) {
			layer_index_free(idx[n_idx]);
			goto out;
		}
		c->n_layers++;
		c->size += mf->layers[n_idx].size;
	}
	r = tree_build((const struct layer_index *const *)idx, mf->n_layers,
		       &c->tree, errbuf, errlen);
	if (r < 0)
		goto out;
	c->refs = 1;
	*ret = TAKE_PTR(c);
out:
	for (size_t i = 0; i < n_idx; i++)
		layer_index_free(idx[i]);
	free(idx);
	manifest_free(mf);
	content_free(m, c);
	return r;
}

/* The content of digest with a reference, loaded when no name holds it. */
static int content_get(struct manager *m, const char *digest,
		       struct image_content **ret, char *errbuf, size_t errlen)
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
	*ret = c;
	return 0;
}

/* ---- ids -------------------------------------------------------------- */

static _Atomic(struct image *) *id_slot(struct manager *m, uint32_t id, bool create)
{
	_Atomic(struct image *) *chunk;
	uint32_t ci = id / IMAGE_ID_CHUNK;

	if (ci >= IMAGE_ID_CHUNKS)
		return NULL;
	chunk = atomic_load(&m->images_by_id[ci]);
	if (!chunk && create) {
		/* Under id_lock: only one thread allocates a chunk. */
		chunk = calloc(IMAGE_ID_CHUNK, sizeof(*chunk));
		if (chunk)
			atomic_store(&m->images_by_id[ci], chunk);
	}
	return chunk ? &chunk[id % IMAGE_ID_CHUNK] : NULL;
}

static int id_alloc(struct manager *m, struct image *img)
{
	_Atomic(struct image *) *slot;
	uint32_t id;

	pthread_mutex_lock(&m->id_lock);
	if (m->n_free_ids > 0) {
		id = m->free_ids[--m->n_free_ids];
	} else if (m->next_id < IMAGE_ID_CHUNK * IMAGE_ID_CHUNKS) {
		id = m->next_id;
	} else {
		pthread_mutex_unlock(&m->id_lock);
		return -EMFILE;
	}
	slot = id_slot(m, id, true);
	if (!slot) {
		if (id != m->next_id)
			m->n_free_ids++;
		pthread_mutex_unlock(&m->id_lock);
		return -ENOMEM;
	}
	if (id == m->next_id)
		m->next_id++;
	img->id = id;
	atomic_store(slot, img);
	pthread_mutex_unlock(&m->id_lock);
	return 0;
}

static void id_release(struct manager *m, uint32_t id)
{
	pthread_mutex_lock(&m->id_lock);
	atomic_store(id_slot(m, id, false), NULL);
	if (m->n_free_ids == m->cap_free_ids) {
		size_t cap = m->cap_free_ids ? m->cap_free_ids * 2 : 64;
		uint32_t *n = realloc(m->free_ids, cap * sizeof(*n));
		if (!n) {
			/* The id is lost, not reused: harmless. */
			pthread_mutex_unlock(&m->id_lock);
			return;
		}
		m->free_ids = n;
		m->cap_free_ids = cap;
	}
	m->free_ids[m->n_free_ids++] = id;
	pthread_mutex_unlock(&m->id_lock);
}

struct image *manager_image(struct manager *m, uint32_t id)
{
	_Atomic(struct image *) *slot = id_slot(m, id, false);

	return slot ? atomic_load(slot) : NULL;
}

/* ---- names ------------------------------------------------------------ */

static void image_free(struct image *img)
{
	struct manager *m = img->manager;

	id_release(m, img->id);
	while (img->dentries) {
		struct image_dentry *d = img->dentries;
		img->dentries = d->next;
		free(d);
	}
	content_put(m, img->content);
	free(img);
}

int image_load(struct manager *m, const char *digest, struct image **ret,
	       char *errbuf, size_t errlen)
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
	atomic_init(&img->refcount, 1);
	r = id_alloc(m, img);
	if (r < 0) {
		content_put(m, img->content);
		free(img);
		return r;
	}
	*ret = img;
	return 0;
}

void images_free_all(struct manager *m)
{
	for (uint32_t ci = 0; ci < IMAGE_ID_CHUNKS; ci++) {
		_Atomic(struct image *) *chunk = atomic_load(&m->images_by_id[ci]);
		if (!chunk)
			continue;
		for (uint32_t i = 0; i < IMAGE_ID_CHUNK; i++) {
			struct image *img = atomic_load(&chunk[i]);
			if (img)
				image_free(img);
		}
		free(chunk);
		atomic_store(&m->images_by_id[ci], NULL);
	}
	free(m->free_ids);
	m->free_ids = NULL;
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
		image_free(img);
}

void image_open(struct image *img)
{
	atomic_fetch_add(&img->open_files, 1);
}

void image_close(struct image *img)
{
	atomic_fetch_sub(&img->open_files, 1);
}

void image_note_dentry(struct image *img, uint64_t parent, const char *name)
{
	struct manager *m = img->manager;
	struct image_dentry *d;
	size_t len = strlen(name);

	pthread_mutex_lock(&m->lock);
	for (d = img->dentries; d; d = d->next)
		if (d->parent == parent && !strcmp(d->name, name))
			break;
	if (!d && (d = malloc(sizeof(*d) + len + 1))) {
		d->parent = parent;
		memcpy(d->name, name, len + 1);
		d->next = img->dentries;
		img->dentries = d;
	}
	pthread_mutex_unlock(&m->lock);
}

uint32_t image_id(const struct image *img)
{
	return img->id;
}

const struct tinode *image_root(const struct image *img)
{
	return tree_root(img->content->tree);
}

const struct tinode *image_inode(const struct image *img, uint32_t index)
{
	return tree_inode(img->content->tree, index);
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
	return pack_object_open(img->manager->packs, c->packs[file->layer],
				file->object);
}

void image_file_fd_put(struct image *img, const struct tinode *file)
{
	pack_fd_put(img->manager->packs, img->content->packs[file->layer]);
}

/* Views of single layers for the Additional Layer Store (layerview.h).
 * The layer's index, as the unpacker or a table of contents made it,
 * turned into the tree overlayfs expects of a lower directory: a whiteout
 * becomes a character device 0/0 under the removed name, an opaque marker
 * becomes the overlay opaque xattr on its directory.  The content (tree
 * and pack) is shared by every view of one layer digest, like an image's
 * content by its manifest digest. */
#include "layerview.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include <jansson.h>

#include "cache.h"
#include "layer.h"
#include "macro.h"
#include "image.h"
#include "manifest.h"
#include "packs.h"
#include "reference.h"
#include "registry.h"
#include "strmap.h"
#include "image-private.h"

/* The config of an image is small; this caps what a cache file can make
 * us parse. */
#define CONFIG_READ_MAX (8u << 20)

/* containers/storage's archive.Compression numbers, as its "info" wants
 * them. */
enum storage_compression {
	STORAGE_UNCOMPRESSED = 0,
	STORAGE_GZIP = 2,
	STORAGE_ZSTD = 4,
};

struct layer_view {
	struct image *image;  /* held (one reference, counted open until released) */
	atomic_bool released; /* layer_view_release(): no longer counted open */
	char *info;	      /* the "info" JSON */
	size_t info_len;
	char *domain, *repo; /* where the blob is, for "blob" reads */
	char *digest;
	char *reference;
	uint64_t blob_size;
	atomic_uint uses; /* "use" notifications */
};

/* ---- the tree in overlay format --------------------------------------- */

/* Only the trusted name is stored: a root engine's overlayfs reads it and
 * hides it, while a user.* xattr would show in every container.  The
 * user.overlay.opaque of a rootless mount ("userxattr") is answered to
 * getxattr alone (layers.c). */
static const struct layer_xattr opaque_xattrs[] = {
	{ .name = (char *)LAYER_VIEW_OPAQUE_XATTR, .value = (void *)"y", .size = 1 },
};

/* Entry e with the opaque xattrs added; the arrays it allocates are
 * recorded in *allocs for freeing. */
static int mark_opaque(struct layer_entry *e, void ***allocs, size_t *n_allocs)
{
	struct layer_xattr *x = calloc(e->n_xattrs + ARRAY_SIZE(opaque_xattrs), sizeof(*x));
	void **a;

	if (!x)
		return -ENOMEM;
	a = realloc(*allocs, (*n_allocs + 1) * sizeof(*a));
	if (!a) {
		free(x);
		return -ENOMEM;
	}
	*allocs = a;
	a[(*n_allocs)++] = x;
	/* an xattr of the same name in the tar gives way to the marker */
	size_t n = 0;
	for (uint32_t i = 0; i < e->n_xattrs; i++)
		if (strcmp(e->xattrs[i].name, opaque_xattrs[0].name))
			x[n++] = e->xattrs[i];
	for (size_t i = 0; i < ARRAY_SIZE(opaque_xattrs); i++)
		x[n++] = opaque_xattrs[i];
	e->xattrs = x;
	e->n_xattrs = (uint32_t)n;
	return 0;
}

/* The rewritten index borrows every string from li. */
int layer_overlay_tree(const struct layer_index *li, struct tree **ret, char *errbuf, size_t errlen)
{
	struct layer_index out = { .data_size = li->data_size };
	_cleanup_free_ void **allocs = NULL;
	size_t n_allocs = 0;
	struct strmap *opaque = strmap_new(), *dirs = strmap_new();
	int r = -ENOMEM;

	out.entries = calloc(li->n_entries ? li->n_entries : 1, sizeof(*out.entries));
	if (!opaque || !dirs || !out.entries)
		goto out;
	for (size_t i = 0; i < li->n_entries; i++) {
		const struct layer_entry *e = &li->entries[i];

		if (e->type == LAYER_ENTRY_OPAQUE && strmap_put(opaque, e->path, (void *)1) < 0)
			goto out;
		if (e->type == LAYER_ENTRY_DIR && strmap_put(dirs, e->path, (void *)1) < 0)
			goto out;
	}
	for (size_t i = 0; i < li->n_entries; i++) {
		struct layer_entry *e = &out.entries[out.n_entries];

		*e = li->entries[i];
		switch (e->type) {
		case LAYER_ENTRY_WHITEOUT:
			e->type = LAYER_ENTRY_CHR;
			e->mode = 0;
			e->uid = e->gid = 0;
			e->rdev = makedev(0, 0);
			e->xattrs = NULL;
			e->n_xattrs = 0;
			break;
		case LAYER_ENTRY_OPAQUE:
			/* the layer's own entry for the directory carries the
			 * mark; a marker without one makes the directory */
			if (strmap_get(dirs, e->path))
				continue;
			if (strmap_put(dirs, e->path, (void *)1) < 0)
				goto out;
			e->type = LAYER_ENTRY_DIR;
			e->mode = 0755;
			e->xattrs = NULL;
			e->n_xattrs = 0;
			r = mark_opaque(e, &allocs, &n_allocs);
			if (r < 0)
				goto out;
			r = -ENOMEM;
			break;
		case LAYER_ENTRY_DIR:
			if (strmap_get(opaque, e->path)) {
				r = mark_opaque(e, &allocs, &n_allocs);
				if (r < 0)
					goto out;
				r = -ENOMEM;
			}
			break;
		default:
			break;
		}
		out.n_entries++;
	}
	{
		const struct layer_index *one = &out;
		r = tree_build(&one, 1, ret, errbuf, errlen);
	}
out:
	for (size_t i = 0; i < n_allocs; i++)
		free(allocs[i]);
	free(out.entries);
	strmap_free(opaque);
	strmap_free(dirs);
	return r;
}

int layer_content_load(struct images *imgs, const char *digest, struct image_content **ret,
		       char *errbuf, size_t errlen)
{
	const char *layer = digest + strlen(LAYER_CONTENT_PREFIX);
	struct layer_index *li = NULL;
	struct image_content *c;
	int r;

	c = calloc(1, sizeof(*c));
	if (!c || !(c->digest = strdup(digest)) || !(c->packs = calloc(1, sizeof(*c->packs)))) {
		if (c)
			free(c->digest);
		free(c);
		return -ENOMEM;
	}
	r = cache_layer_read_index(imgs->o.cache, layer, &li);
	if (r < 0)
		goto fail;
	r = layer_overlay_tree(li, &c->tree, errbuf, errlen);
	layer_index_free(li);
	if (r < 0)
		goto fail;
	r = packs_get(imgs->o.packs, layer, &c->packs[0]);
	if (r < 0)
		goto fail;
	c->n_layers = 1;
	c->refs = 1;
	*ret = c;
	return 0;
fail:
	tree_free(c->tree);
	free(c->packs);
	free(c->digest);
	free(c);
	return r;
}

/* ---- views --------------------------------------------------------------- */

void layer_view_free(struct layer_view *lv)
{
	if (!lv)
		return;
	if (lv->image) {
		if (!atomic_load(&lv->released))
			image_close(lv->image);
		image_unref(lv->image, 1);
	}
	free(lv->info);
	free(lv->domain);
	free(lv->repo);
	free(lv->digest);
	free(lv->reference);
	free(lv);
}

static int storage_compression_of(const char *media_type)
{
	enum layer_compression c;

	if (layer_media_type_compression(media_type, &c) < 0)
		return -1;
	switch (c) {
	case LAYER_GZIP:
		return STORAGE_GZIP;
	case LAYER_ZSTD:
		return STORAGE_ZSTD;
	default:
		return STORAGE_UNCOMPRESSED;
	}
}

/* The uncompressed digest of layer i from the image's config
 * (rootfs.diff_ids), or NULL when the config does not say. */
static char *config_diff_id(struct cache *cache, const char *config_digest, size_t i)
{
	_cleanup_free_ char *buf = NULL;
	json_t *root, *ids, *id;
	char *ret = NULL;
	size_t len;

	if (cache_blob_read(cache, config_digest, CONFIG_READ_MAX, &buf, &len) < 0)
		return NULL;
	root = json_loadb(buf, len, 0, NULL);
	ids = json_object_get(json_object_get(root, "rootfs"), "diff_ids");
	id = json_array_get(ids, i);
	if (json_is_string(id) && !strncmp(json_string_value(id), "sha256:", 7) &&
	    strlen(json_string_value(id)) == 71)
		ret = strdup(json_string_value(id));
	json_decref(root);
	return ret;
}

/* containers/storage's Layer, as much of it as an additional layer
 * supplies: the store fills in id, parent and names itself. */
static int info_json(struct cache *cache, const struct manifest *mf, size_t i, char **ret,
		     size_t *ret_len)
{
	const struct descriptor *d = &mf->layers[i];
	_cleanup_free_ char *diff_id = config_diff_id(cache, mf->config.digest, i);
	json_t *o = json_object();
	int comp = storage_compression_of(d->media_type);
	char *s;

	if (!o)
		return -ENOMEM;
	json_object_set_new(o, "compressed-diff-digest", json_string(d->digest));
	json_object_set_new(o, "compressed-size", json_integer((json_int_t)d->size));
	if (diff_id)
		json_object_set_new(o, "diff-digest", json_string(diff_id));
	if (comp >= 0)
		json_object_set_new(o, "compression", json_integer(comp));
	s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(o);
	if (!s)
		return -ENOMEM;
	*ret_len = strlen(s);
	*ret = s;
	return 0;
}

int manager_layer_view(struct image *img, const char *reference, const char *digest,
		       const struct caller *who, struct image **ret_view)
{
	struct images *imgs = img->images;
	struct manifest *mf = NULL;
	struct reference *ref = NULL;
	struct layer_view *lv = NULL;
	_cleanup_free_ char *content = NULL, *name = NULL;
	struct image *view = NULL;
	char errbuf[256] = "";
	size_t i;
	int r;

	r = manifest_load_cached(imgs->o.cache, image_digest(img), &mf);
	if (r < 0)
		goto out;
	for (i = 0; i < mf->n_layers; i++)
		if (!strcmp(mf->layers[i].digest, digest))
			break;
	if (i == mf->n_layers) {
		event_sendf(&imgs->o.events, EVENT_WARNING, "LayerNotInImage", reference,
			    image_digest(img), -ENOENT, who,
			    "Layer %s is not a layer of image \"%s\" (%s): the engine pulls "
			    "it itself",
			    digest, reference, image_digest(img));
		r = -ENOENT;
		goto out;
	}
	lv = calloc(1, sizeof(*lv));
	if (!lv || asprintf(&content, LAYER_CONTENT_PREFIX "%s", digest) < 0 ||
	    asprintf(&name, "layers:%s@%s", reference, digest) < 0) {
		content = name = NULL;
		r = -ENOMEM;
		goto out;
	}
	r = reference_parse(reference, REFERENCE_DEFAULT_TAG, &ref);
	if (r < 0)
		goto out;
	lv->domain = strdup(ref->domain);
	lv->repo = strdup(ref->path);
	lv->digest = strdup(digest);
	lv->reference = strdup(reference);
	if (!lv->domain || !lv->repo || !lv->digest || !lv->reference) {
		r = -ENOMEM;
		goto out;
	}
	lv->blob_size = mf->layers[i].size;
	r = info_json(imgs->o.cache, mf, i, &lv->info, &lv->info_len);
	if (r < 0)
		goto out;
	r = images_load(imgs, name, content, &view, errbuf, sizeof(errbuf));
	if (r < 0) {
		event_sendf(&imgs->o.events, EVENT_WARNING, "LayerFailed", reference,
			    image_digest(img), r, who,
			    "Layer %s of image \"%s\" cannot be served: %s", digest, reference,
			    *errbuf ? errbuf : strerror(-r));
		goto out;
	}
	lv->image = img;
	image_ref(img, 1);
	image_open(img);
	view->layer = TAKE_PTR(lv);
	*ret_view = view;
out:
	layer_view_free(lv);
	reference_free(ref);
	manifest_free(mf);
	return r;
}

void layer_view_detach(struct image *img)
{
	if (img->layer)
		img->layer->image = NULL;
}

void layer_view_release(struct image *view)
{
	struct layer_view *lv = view->layer;

	if (lv && lv->image && !atomic_exchange(&lv->released, true))
		image_close(lv->image);
}

bool image_is_layer_view(const struct image *img)
{
	return img->layer != NULL;
}

struct image *layer_view_image(const struct image *view)
{
	return view->layer->image;
}

const char *layer_view_reference(const struct image *view)
{
	return view->layer->reference;
}

const char *layer_view_info(const struct image *view, size_t *ret_len)
{
	*ret_len = view->layer->info_len;
	return view->layer->info;
}

uint64_t layer_view_blob_size(const struct image *view)
{
	return view->layer->blob_size;
}

struct blob_buf {
	char *buf;
	size_t used, size;
};

static int blob_sink(void *userdata, const void *data, size_t len)
{
	struct blob_buf *b = userdata;

	if (len > b->size - b->used)
		return -EIO;
	memcpy(b->buf + b->used, data, len);
	b->used += len;
	return 0;
}

ssize_t layer_view_blob_read(struct image *view, uint64_t off, size_t size, void *buf)
{
	struct layer_view *lv = view->layer;
	struct blob_buf b = { .buf = buf, .size = size };
	struct error_detail err = { 0 };
	int r;

	if (off >= lv->blob_size)
		return 0;
	if (size > lv->blob_size - off)
		b.size = size = (size_t)(lv->blob_size - off);
	r = registry_get_blob_range(view->images->o.registry, lv->domain, lv->repo, lv->digest,
				    lv->blob_size, off, size, blob_sink, &b, &err);
	error_detail_clear(&err);
	return r < 0 ? r : (ssize_t)b.used;
}

void layer_view_used(struct image *view, const struct caller *who)
{
	struct layer_view *lv = view->layer;

	atomic_fetch_add(&lv->uses, 1);
	event_sendf(&view->images->o.events, EVENT_NORMAL, "LayerUsed", lv->reference,
		    image_digest(lv->image), 0, who,
		    "Layer %s of image \"%s\" is used by the engine from the layer store",
		    lv->digest, lv->reference);
}

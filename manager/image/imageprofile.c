/* The start profile of a loaded content (profile.h, docs/profiles.md):
 * at a cold load with lazy layers left to fetch, the stored profile of
 * its manifest digest, matched against the merged tree and split by
 * layer for the completions' prefetch; or, when there is none, a
 * recorder of the files this start opens. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "image-private.h"
#include "lazy.h"
#include "macro.h"
#include "manifest.h"
#include "packs.h"
#include "profile.h"
#include "strmap.h"
#include "tree.h"

struct content_profile {
	struct images *imgs;
	char digest[DIGEST_STRING_MAX];
	/* recording this start (NULL: a profile is used instead) */
	struct profile_recorder *rec;
	/* using one: its files by layer of the content, content objects as
	 * keys (NULL for a layer without any) */
	struct strmap **by_layer;
	size_t n_layers;
	size_t n_files;
	uint64_t n_bytes;
	pthread_mutex_t lock;
	unsigned refs;	  /* lock */
	unsigned pending; /* prefetches not reported yet; lock */
	size_t files_there;
	uint64_t fetched;
	unsigned layers_done, layers_failed;
	int64_t started_ns;
};

static void cprofile_free(struct content_profile *cp)
{
	for (size_t i = 0; i < cp->n_layers; i++)
		strmap_free(cp->by_layer[i]);
	free(cp->by_layer);
	profile_recorder_unref(cp->rec);
	pthread_mutex_destroy(&cp->lock);
	free(cp);
}

void content_profile_put(struct content_profile *cp)
{
	bool last;

	if (!cp)
		return;
	pthread_mutex_lock(&cp->lock);
	last = --cp->refs == 0;
	pthread_mutex_unlock(&cp->lock);
	if (last)
		cprofile_free(cp);
}

struct match_ctx {
	struct strmap *want; /* "layer:object" -> profile_file */
	size_t found;
};

/* Splits prof by the content's layers.  Returns the files of prof that
 * are regular files of the merged tree (by layer and content), SIZE_MAX
 * without memory to tell; the maps are filled only when every one of
 * them is. */
static size_t profile_match(struct content_profile *cp, const struct image_content *c,
			    const struct manifest *mf, const struct profile *prof)
{
	struct strmap *want = strmap_new();
	size_t *layer_of = calloc(MAX(prof->n_layers, 1), sizeof(*layer_of));
	size_t found = SIZE_MAX;
	char key[DIGEST_HEX_LEN + 32];

	if (!want || !layer_of)
		goto out;
	for (size_t i = 0; i < prof->n_layers; i++) {
		layer_of[i] = SIZE_MAX;
		for (size_t j = 0; j < mf->n_layers; j++)
			if (!strcmp(prof->layers[i], mf->layers[j].digest)) {
				layer_of[i] = j;
				break;
			}
	}
	for (size_t i = 0; i < prof->n_files; i++) {
		const struct profile_file *f = &prof->files[i];

		if (layer_of[f->layer] == SIZE_MAX)
			continue;
		snprintf(key, sizeof(key), "%zu:%s", layer_of[f->layer], f->object);
		if (strmap_put(want, key, (void *)f) < 0)
			goto out;
	}
	found = 0;
	/* each wanted file once: an object may be several names' */
	for (uint64_t i = 0, n = tree_inode_count(c->tree); i < n; i++) {
		const struct tinode *t = tree_inode(c->tree, (uint32_t)i);

		if (!t || !S_ISREG(t->mode) || !t->object)
			continue;
		snprintf(key, sizeof(key), "%u:%s", (unsigned)t->layer, t->object);
		if (strmap_remove(want, key))
			found++;
	}
	if (found != prof->n_files)
		goto out;
	for (size_t i = 0; i < prof->n_files; i++) {
		const struct profile_file *f = &prof->files[i];
		size_t l = layer_of[f->layer];

		if (l >= cp->n_layers)
			continue;
		if (!cp->by_layer[l] && !(cp->by_layer[l] = strmap_new()))
			break;
		if (strmap_put(cp->by_layer[l], f->object, cp) < 0)
			break;
		cp->n_files++;
		cp->n_bytes += f->size;
	}
out:
	strmap_free(want);
	free(layer_of);
	return found;
}

struct content_profile *content_profile_start(struct images *imgs, const struct image_content *c,
					      const struct manifest *mf)
{
	struct profiles *ps = imgs->o.profiles;
	struct content_profile *cp;
	struct profile *prof = NULL;
	bool any_lazy = false;
	int r;

	if (!ps)
		return NULL;
	for (size_t i = 0; i < c->n_layers; i++) {
		struct lazy_layer *l = pack_lazy(imgs->o.packs, c->packs[i]);

		any_lazy |= l && !lazy_layer_is_complete(l);
	}
	/* a start that waits for no registry needs no profile, and shows
	 * no first reads worth keeping */
	if (!any_lazy)
		return NULL;
	cp = calloc(1, sizeof(*cp));
	if (!cp)
		return NULL;
	cp->by_layer = calloc(MAX(c->n_layers, 1), sizeof(*cp->by_layer));
	if (!cp->by_layer) {
		free(cp);
		return NULL;
	}
	cp->imgs = imgs;
	cp->n_layers = c->n_layers;
	cp->refs = 1;
	cp->started_ns = clock_mono_ns();
	pthread_mutex_init(&cp->lock, NULL);
	snprintf(cp->digest, sizeof(cp->digest), "%s", c->digest);

	r = profiles_load(ps, c->digest, &prof);
	if (r == 0) {
		size_t found = profile_match(cp, c, mf, prof);

		if (found == SIZE_MAX || (found == prof->n_files && cp->n_files < found)) {
			/* no memory to tell: neither used nor dropped */
			profile_free(prof);
			cprofile_free(cp);
			return NULL;
		}
		if (found == prof->n_files) {
			profile_free(prof);
			cp->pending = 1; /* the load's: content_profile_handed() */
			return cp;
		}
		/* not this image's files: made by hand, or for another image */
		for (size_t i = 0; i < cp->n_layers; i++) {
			strmap_free(cp->by_layer[i]);
			cp->by_layer[i] = NULL;
		}
		cp->n_files = 0;
		cp->n_bytes = 0;
		(void)profiles_remove(ps, c->digest);
		atomic_fetch_add(&profiles_stats(ps)->stale, 1);
		event_sendf(&imgs->o.events, EVENT_WARNING, "ProfileStale", NULL, c->digest, 0,
			    NULL,
			    "The start profile of image %s was dropped: %zu of its %zu files are "
			    "not in the image's layers%s",
			    c->digest, prof->n_files - found, prof->n_files,
			    profiles_window_ns(ps) > 0 ? " (this start records a new one)" : "");
		profile_free(prof);
	}
	if (profiles_window_ns(ps) > 0) {
		const char **layers = calloc(MAX(mf->n_layers, 1), sizeof(*layers));

		for (size_t i = 0; layers && i < mf->n_layers; i++)
			layers[i] = mf->layers[i].digest;
		if (layers &&
		    profile_recorder_new(c->digest, layers, mf->n_layers, cp->started_ns,
					 profiles_window_ns(ps), &cp->rec) == 0 &&
		    profiles_watch(ps, cp->rec) < 0) {
			profile_recorder_unref(cp->rec);
			cp->rec = NULL;
		}
		free(layers);
	}
	if (!cp->rec) {
		cprofile_free(cp);
		return NULL;
	}
	return cp;
}

const struct strmap *content_profile_layer(struct content_profile *cp, size_t layer)
{
	if (!cp || layer >= cp->n_layers || !cp->by_layer[layer])
		return NULL;
	pthread_mutex_lock(&cp->lock);
	cp->refs++;
	cp->pending++;
	pthread_mutex_unlock(&cp->lock);
	return cp->by_layer[layer];
}

/* One prefetch (or the load handing them out) is over; the last says
 * what the profile did. */
static void pending_done(struct content_profile *cp)
{
	struct profiles *ps = cp->imgs->o.profiles;
	bool last;

	pthread_mutex_lock(&cp->lock);
	last = --cp->pending == 0 && cp->layers_done > 0;
	pthread_mutex_unlock(&cp->lock);
	if (!last)
		return;
	struct profile_stats *st = profiles_stats(ps);

	atomic_fetch_add(&st->used, 1);
	atomic_fetch_add(&st->files, cp->files_there);
	atomic_fetch_add(&st->bytes, cp->fetched);
	event_sendf(&cp->imgs->o.events, EVENT_NORMAL, "ProfileUsed", NULL, cp->digest, 0, NULL,
		    "Prefetched the start profile of image %s: %zu files in %u lazy layers "
		    "(%" PRIu64 " bytes fetched%s) in %.3fs",
		    cp->digest, cp->files_there, cp->layers_done, cp->fetched,
		    cp->layers_failed ? "; some failed, they are fetched when read" : "",
		    (double)(clock_mono_ns() - cp->started_ns) / 1e9);
}

void content_profile_prefetched(struct content_profile *cp, const struct lazy_prefetch *pf, int r)
{
	pthread_mutex_lock(&cp->lock);
	cp->files_there += pf->files;
	cp->fetched += pf->bytes;
	cp->layers_done++;
	if (r < 0)
		cp->layers_failed++;
	pthread_mutex_unlock(&cp->lock);
	pending_done(cp);
	content_profile_put(cp);
}

void content_profile_handed(struct content_profile *cp)
{
	if (cp && !cp->rec)
		pending_done(cp);
}

void content_profile_note(struct content_profile *cp, const struct tinode *file)
{
	if (!cp || !cp->rec || !file->object || file->size == 0)
		return;
	(void)profile_recorder_note(cp->rec, file->layer, file->object, file->size,
				    clock_mono_ns());
}

/* The reference state table: what each reference names (digest, index,
 * when it was resolved and used), the image each name hands to the
 * filesystem, and publishing a pull's result to the cache and the table.
 * Also the references remembered in the cache, read at start, and the
 * collection of names nobody uses. */
#include "manager.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache.h"
#include "fault.h"
#include "imagekeys.h"
#include "macro.h"
#include "quota.h"
#include "reference.h"
#include "strmap.h"
#include "manager-private.h"

#define PRESENT_EVENT_INTERVAL_S 300

int manager_canonical(const char *reference, char **ret)
{
	struct reference *ref = NULL;
	int r = reference_parse(reference, REFERENCE_DEFAULT_TAG, &ref);

	if (r < 0)
		return r;
	*ret = reference_to_string(ref);
	reference_free(ref);
	return *ret ? 0 : -ENOMEM;
}

/* The key stored for reference and digest was taken when img was made
 * (by a view of other content, or an older view of this one the kernel
 * still holds), so img has the next free one: that one is stored, so
 * that the next run of the daemon gives the same.  Returns true with the
 * reference file to write in *ret when the name is not ephemeral.  Lock
 * held. */
static bool key_moved_locked(struct manager *m, const char *reference, const char *digest,
			     const struct image *img, struct cache_ref *ret)
{
	struct refstate *rs = strmap_get(m->refs, reference);

	if (!rs || rs->key == image_key(img) || strcmp(rs->digest, digest) != 0)
		return false;
	rs->key = image_key(img);
	if (rs->ephemeral)
		return false;
	ret->reference = strdup(rs->reference);
	ret->digest = strdup(rs->digest);
	ret->index_digest = rs->index_digest ? strdup(rs->index_digest) : NULL;
	ret->pulled_at = rs->pulled_at;
	ret->image_key = rs->key;
	ret->credentials = rs->credentials;
	if (!ret->reference || !ret->digest || (rs->index_digest && !ret->index_digest)) {
		cache_ref_done(ret);
		return false;
	}
	return true;
}

/* Returns reference's image for manifest digest, with a reference for the
 * caller, loading it when needed.  Every reference gets an image of its
 * own, even when two name one digest: each is a separate directory tree
 * for the kernel, and a directory inode may have one parent only.  The
 * content behind them is loaded once and shared (image.c).  A reference
 * whose tag moved gets the new image; the old one lives on for whoever
 * still holds it.  Called without the lock. */
int refs_image_get(struct manager *m, const char *reference, const char *digest, struct image **ret,
		   char *errbuf, size_t errlen)
{
	struct cache_ref cr = { 0 };
	struct image *img, *other;
	bool save = false;
	int r;

	pthread_mutex_lock(&m->lock);
	img = strmap_get(m->images, reference);
	if (img && strcmp(image_digest(img), digest) == 0)
		image_ref(img, 1);
	else
		img = NULL;
	pthread_mutex_unlock(&m->lock);
	if (img) {
		*ret = img;
		return 0;
	}

	r = images_load(m->imgs, reference, digest, &img, errbuf, errlen);
	if (r < 0)
		return r;

	pthread_mutex_lock(&m->lock);
	other = strmap_get(m->images, reference);
	if (other && strcmp(image_digest(other), digest) == 0) {
		/* Loaded twice at once; keep the first. */
		image_ref(other, 1);
		pthread_mutex_unlock(&m->lock);
		image_unref(img, 1);
		*ret = other;
		return 0;
	}
	r = strmap_put(m->images, reference, img);
	if (r == 0) {
		image_ref(img, 1); /* the table's reference */
		if (other)
			image_unref(other, 1);
		save = key_moved_locked(m, reference, digest, img, &cr);
	}
	pthread_mutex_unlock(&m->lock);
	if (save) {
		/* Not saved: the same key after a restart is then likely,
		 * not sure. */
		(void)cache_ref_save(m->cache, &cr);
		cache_ref_done(&cr);
	}
	*ret = img;
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
 * image.  Linear in the names: keys are taken only when an image is made.
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

int refs_key_assign(void *userdata, struct images *imgs, struct image *img, const char *name,
		    const char *digest)
{
	struct manager *m = userdata;
	struct taken_ctx c = { .m = m, .reference = name };
	uint32_t preferred;
	int r;

	pthread_mutex_lock(&m->lock);
	const struct refstate *rs = strmap_get(m->refs, name);
	if (rs && rs->key && !strcmp(rs->digest, digest))
		preferred = rs->key;
	else
		preferred = imagekey_derive(name, digest);
	r = images_key_assign(imgs, img, preferred, key_taken, &c);
	pthread_mutex_unlock(&m->lock);
	return r;
}

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
	    (!rs || image_key(had) == rs->key || image_key(img) != rs->key))
		return;
	if (strmap_put(m->images, reference, img) < 0)
		return; /* the next lookup loads it again, with another key */
	image_ref(img, 1);
	if (had)
		image_unref(had, 1);
}

int refs_image_restore(struct manager *m, const char *reference, const char *digest, uint32_t key,
		       struct image **ret, char *errbuf, size_t errlen)
{
	struct image *img, *live = NULL;
	int r;

	if (key == 0 || key > IMAGEKEY_MAX)
		return -EINVAL;
	r = images_new_image(m->imgs, reference, digest, &img, errbuf, errlen);
	if (r < 0)
		return r;
	/* under the lock a lookup takes to choose a key: it never sees the
	 * key taken and the table without the image */
	pthread_mutex_lock(&m->lock);
	r = images_key_take(m->imgs, img, key, &live);
	if (r == 0)
		table_offer_locked(m, reference, live ? live : img);
	pthread_mutex_unlock(&m->lock);
	if (live || r < 0) {
		image_unref(img, 1);
		if (r < 0)
			return r;
		img = live;
	}
	*ret = img;
	return 0;
}

/* ---- references ------------------------------------------------------ */

void refs_blobs_free(struct quota_blob *blobs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(blobs[i].digest);
	free(blobs);
}

int refs_blobs_load(struct manager *m, const char *digest, struct quota_blob **ret, size_t *ret_n)
{
	struct manifest *mf = NULL;
	struct quota_blob *b;
	size_t n = 0;
	int r;

	r = manifest_load_cached(m->cache, digest, &mf);
	if (r < 0)
		return r;
	b = calloc(mf->n_layers + 1, sizeof(*b));
	if (!b) {
		manifest_free(mf);
		return -ENOMEM;
	}
	for (size_t i = 0; i <= mf->n_layers; i++) {
		const struct descriptor *d = i ? &mf->layers[i - 1] : &mf->config;
		if (!d->digest)
			continue;
		b[n] = (struct quota_blob){ .digest = strdup(d->digest), .size = d->size };
		if (!b[n++].digest) {
			refs_blobs_free(b, n);
			manifest_free(mf);
			return -ENOMEM;
		}
	}
	manifest_free(mf);
	*ret = b;
	*ret_n = n;
	return 0;
}

void refstate_free(struct refstate *rs)
{
	if (!rs)
		return;
	refs_blobs_free(rs->blobs, rs->n_blobs);
	free(rs->reference);
	free(rs->digest);
	free(rs->index_digest);
	free(rs);
}

/* The table lets go of reference's image (GC, rm).  Whoever still holds
 * it (an open file, a kernel lookup) keeps it alive.  Lock held. */
void image_drop_locked(struct manager *m, const char *reference)
{
	struct image *img = strmap_remove(m->images, reference);

	if (img)
		image_unref(img, 1);
}

void refstate_drop_locked(struct manager *m, const char *reference)
{
	struct refstate *rs = strmap_remove(m->refs, reference);

	image_drop_locked(m, reference);
	if (!rs)
		return;
	if (m->names_changed) {
		m->names_changed(m->names_userdata, reference, true);
		/* until the kernel's dentries of it are gone (gc.c); without
		 * memory for the note the collector cannot tell, and the
		 * image's content may go while a dentry still leads to it */
		char *digest = rs->digest ? strdup(rs->digest) : NULL;
		if (digest) {
			free(strmap_remove(m->settling, reference));
			if (strmap_put(m->settling, reference, digest) < 0)
				free(digest);
		}
	}
	if (rs->ephemeral) {
		struct user_usage *u = users_get_locked(m, rs->uid);
		if (u && u->names > 0)
			u->names--;
		users_release_locked(m, rs->uid);
	}
	refstate_free(rs);
}

/* Records (under the lock) what reference resolves to now. */
static int refstate_set(struct manager *m, const char *reference, const char *digest,
			const char *index_digest)
{
	struct refstate *rs = strmap_get(m->refs, reference);
	char *d = strdup(digest);
	char *id = index_digest ? strdup(index_digest) : NULL;

	if (!d || (index_digest && !id)) {
		free(d);
		free(id);
		return -ENOMEM;
	}
	if (!rs) {
		rs = calloc(1, sizeof(*rs));
		if (!rs || !(rs->reference = strdup(reference)) ||
		    strmap_put(m->refs, reference, rs) < 0) {
			refstate_free(rs);
			free(d);
			free(id);
			return -ENOMEM;
		}
		if (m->names_changed)
			m->names_changed(m->names_userdata, reference, false);
	}
	_cleanup_free_ char *old = rs->digest;
	free(rs->index_digest);
	rs->digest = d;
	rs->index_digest = id;
	rs->checked_at = manager_now_s(m);
	rs->pulled_at = manager_wall_s();
	rs->last_used_ms = manager_wall_ms();
	return 0;
}

/* Records what reference names now.  A name created by a user other than
 * root stays in memory (see users.c); any other is written to the cache
 * first, as the publish step of a pull, and a name root uses becomes
 * permanent. */
int refs_publish(struct manager *m, const char *reference, const char *digest,
		 const char *index_digest, uint32_t key, const struct caller *who, bool credentials,
		 bool pulled)
{
	bool ephemeral = who && who->uid != 0;
	struct quota_blob *blobs = NULL;
	size_t n_blobs = 0;
	int r;

	fault_point("publish");
	if (ephemeral) {
		pthread_mutex_lock(&m->lock);
		struct refstate *rs = strmap_get(m->refs, reference);
		/* A permanent name stays permanent. */
		ephemeral = !rs || rs->ephemeral;
		pthread_mutex_unlock(&m->lock);
	}
	if (ephemeral) {
		/* Read before the lock.  Unreadable: charged nothing, as
		 * anything the cache lost. */
		(void)refs_blobs_load(m, digest, &blobs, &n_blobs);
	}
	if (!ephemeral || pulled) {
		struct cache_ref cr = {
			.reference = (char *)reference,
			.digest = (char *)digest,
			.index_digest = (char *)index_digest,
			.pulled_at = time(NULL),
			.image_key = key,
			.credentials = credentials,
			.user = ephemeral,
			.uid = ephemeral ? who->uid : 0,
		};
		r = cache_ref_save(m->cache, &cr);
		if (r < 0) {
			refs_blobs_free(blobs, n_blobs);
			return r;
		}
	}
	pthread_mutex_lock(&m->lock);
	r = refstate_set(m, reference, digest, index_digest);
	if (r == 0) {
		struct refstate *rs = strmap_get(m->refs, reference);
		rs->key = key;
		rs->credentials = credentials;
		if (credentials)
			atomic_store(&m->any_credentials, true);
		if (rs->ephemeral && !ephemeral) {
			struct user_usage *u = users_get_locked(m, rs->uid);
			if (u && u->names > 0)
				u->names--;
			users_release_locked(m, rs->uid);
			rs->ephemeral = false;
			rs->user_stored = false;
		} else if (ephemeral && !rs->ephemeral) {
			struct user_usage *u = users_get_locked(m, who->uid);
			if (u)
				u->names++;
			rs->ephemeral = true;
			rs->uid = who->uid;
		}
		if (ephemeral && pulled)
			rs->user_stored = true;
		/* root's names are charged to nobody */
		refs_blobs_free(rs->blobs, rs->n_blobs);
		rs->blobs = rs->ephemeral ? TAKE_PTR(blobs) : NULL;
		rs->n_blobs = rs->blobs ? n_blobs : 0;
	}
	pthread_mutex_unlock(&m->lock);
	refs_blobs_free(blobs, blobs ? n_blobs : 0);
	return r;
}

/* "already present", at most once per PRESENT_EVENT_INTERVAL_S per
 * reference: a node looks its images up far more often than anyone
 * wants to read about it. */
void manager_present_event(struct manager *m, const char *canonical, const char *digest,
			   const struct caller *who)
{
	int64_t now = manager_now_s(m);
	bool due = false;

	pthread_mutex_lock(&m->lock);
	struct refstate *rs = strmap_get(m->refs, canonical);
	if (rs &&
	    (!rs->present_event_at || now - rs->present_event_at >= PRESENT_EVENT_INTERVAL_S)) {
		rs->present_event_at = now;
		due = true;
	}
	pthread_mutex_unlock(&m->lock);
	if (due)
		manager_emit(m, EVENT_NORMAL, "Pulled", canonical, digest, 0, who,
			     "Container image \"%s\" already present on machine", canonical);
}

struct completed_ctx {
	struct manager *m;
	const struct image_completed *done;
	size_t n;
};

static int announce_ref(void *userdata, const char *key, void *value)
{
	struct completed_ctx *a = userdata;
	const struct refstate *rs = value;

	for (size_t i = 0; i < a->n; i++)
		if (!strcmp(rs->digest, a->done[i].digest))
			manager_emit(a->m, EVENT_NORMAL, "Pulled", key, rs->digest, 0, NULL,
				     "Image \"%s\", started lazily, is complete in %.3fs: every "
				     "layer fetched and verified. Image size: %llu bytes.",
				     key, a->done[i].seconds, (unsigned long long)a->done[i].size);
	return 0;
}

void refs_images_completed(void *userdata, const struct image_completed *done, size_t n)
{
	struct manager *m = userdata;
	struct completed_ctx a = { .m = m, .done = done, .n = n };

	pthread_mutex_lock(&m->lock);
	strmap_foreach(m->refs, announce_ref, &a);
	pthread_mutex_unlock(&m->lock);
}

int refs_load(struct manager *m)
{
	struct cache_ref *refs = NULL;
	size_t n = 0;
	int r;

	r = cache_refs_load(m->cache, &refs, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		if (r == 0)
			r = refstate_set(m, refs[i].reference, refs[i].digest,
					 refs[i].index_digest);
		if (r == 0) {
			struct refstate *rs = strmap_get(m->refs, refs[i].reference);
			rs->pulled_at = refs[i].pulled_at;
			rs->last_used_ms = refs[i].pulled_at * 1000;
			/* A file from before keys were stored: derived, as
			 * when it was written. */
			rs->key = refs[i].image_key
					  ? refs[i].image_key
					  : imagekey_derive(refs[i].reference, refs[i].digest);
			/* A file from before this was recorded: pulled with
			 * credentials if its registry has some now. */
			rs->credentials = refs[i].credentials_known
						  ? refs[i].credentials
						  : manager_credentials_for(m, refs[i].reference);
			if (rs->credentials)
				atomic_store(&m->any_credentials, true);
			/* A user's pull: that user's name again, and charged. */
			if (refs[i].user) {
				struct user_usage *u = users_get_locked(m, refs[i].uid);
				if (u)
					u->names++;
				rs->ephemeral = rs->user_stored = true;
				rs->uid = refs[i].uid;
				(void)refs_blobs_load(m, rs->digest, &rs->blobs, &rs->n_blobs);
			}
		}
		cache_ref_done(&refs[i]);
	}
	free(refs);
	/* Revalidation of Always references starts fresh after a restart:
	 * the first lookup re-resolves them. */
	return r;
}

/* ---- collecting idle names ------------------------------------------ */

struct collect_ctx {
	struct manager *m;
	uid_t uid;
	int64_t before_ms;
	char **keys;
	size_t n, cap;
	bool images; /* first pass: images; second: references */
};

static bool collectable(const struct collect_ctx *c, const struct refstate *rs)
{
	return rs && (c->uid == (uid_t)-1 || (rs->ephemeral && rs->uid == c->uid)) &&
	       rs->last_used_ms <= c->before_ms;
}

static int pick(void *userdata, const char *key, void *value)
{
	struct collect_ctx *c = userdata;
	const struct refstate *rs;

	if (c->images) {
		const struct image *img = value;
		/* The table's is the only reference: no kernel lookup, no
		 * open file, no caller. */
		if (image_refs(img) != 1 || image_open_count(img))
			return 0;
		rs = strmap_get(c->m->refs, key);
	} else {
		rs = value;
		if (!rs->ephemeral || strmap_get(c->m->images, key) ||
		    strmap_get(c->m->flights, key))
			return 0;
	}
	if (!collectable(c, rs) && !(c->images && !rs))
		return 0;
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 64;
		char **k = realloc(c->keys, cap * sizeof(*k));
		if (!k)
			return 0;
		c->keys = k;
		c->cap = cap;
	}
	if ((c->keys[c->n] = strdup(key)))
		c->n++;
	return 0;
}

size_t names_collect_locked(struct manager *m, uid_t uid, int64_t idle_ms)
{
	struct collect_ctx c = { .m = m, .uid = uid, .before_ms = manager_wall_ms() - idle_ms };
	size_t dropped = 0;

	/* Strings are collected first: the maps cannot change while they
	 * are walked. */
	c.images = true;
	strmap_foreach(m->images, pick, &c);
	for (size_t i = 0; i < c.n; i++) {
		image_drop_locked(m, c.keys[i]);
		free(c.keys[i]);
	}
	c.n = 0;
	c.images = false;
	strmap_foreach(m->refs, pick, &c);
	for (size_t i = 0; i < c.n; i++) {
		struct refstate *rs = strmap_get(m->refs, c.keys[i]);
		/* Not removed: the name comes back at the next start, and
		 * is collected again. */
		if (rs && rs->user_stored)
			(void)cache_ref_remove(m->cache, c.keys[i]);
		refstate_drop_locked(m, c.keys[i]);
		free(c.keys[i]);
	}
	dropped = c.n;
	free(c.keys);
	return dropped;
}

struct named_ctx {
	const char *digest;
	char *found;
};

static int named(void *userdata, const char *key, void *value)
{
	struct named_ctx *c = userdata;
	const struct refstate *rs = value;

	if (!rs->digest || strcmp(rs->digest, c->digest) != 0)
		return 0;
	c->found = strdup(key);
	return 1;
}

char *reference_of(struct manager *m, const char *digest)
{
	struct named_ctx c = { .digest = digest };

	pthread_mutex_lock(&m->lock);
	strmap_foreach(m->refs, named, &c);
	pthread_mutex_unlock(&m->lock);
	return c.found;
}

static int free_refstate(void *userdata, const char *key, void *value)
{
	refstate_free(value);
	return 0;
}

static int free_image(void *userdata, const char *key, void *value)
{
	image_unref(value, 1);
	return 0;
}

void refs_free_all(struct manager *m)
{
	if (m->refs) {
		strmap_foreach(m->refs, free_refstate, NULL);
		strmap_free(m->refs);
		m->refs = NULL;
	}
	if (m->images) {
		strmap_foreach(m->images, free_image, NULL);
		strmap_free(m->images);
		m->images = NULL;
	}
}

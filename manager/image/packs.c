/* Open packs, shared and bounded; see packs.h. */
#include "packs.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "dlist.h"
#include "lazy.h"
#include "macro.h"
#include "strmap.h"

#define PACKS_DEFAULT_MAX_OPEN 256

struct pack {
	unsigned refs;	/* images naming the layer; packs.lock */
	unsigned users; /* reads holding the fd; packs.lock */
	int fd;		/* -1 when closed; packs.lock */
	bool pinned;	/* the layer was deleted: never close; packs.lock */
	int dirfd;	/* pinned: the retired layer directory, for objects */
	/* lazy layers (lazy.h): loaded at the first read; packs.lock */
	struct lazy_layer *lazy;
	bool lazy_checked, completing;
	/* after a takeover: the layer has a "toc" (was lazy once) */
	bool toc_checked, had_toc;
	char *retired; /* pinned: its name in the cache's tmp/ */
	/* the layer directory it was made for (0/0: there was none) */
	dev_t dev;
	ino_t ino;
	bool unverified; /* made for a lazy layer not verified yet */
	/* its directory was replaced (a lazy layer by one verified against
	 * its digest) or deleted: no longer in by_digest, it serves only the
	 * images that hold it, from its old directory; packs.lock */
	bool detached;
	/* in packs.idle while its descriptor is open and unused */
	struct dlist_node idle;
	char digest[];
};

struct packs {
	struct cache *cache;
	struct lazy_stats lazy_stats;
	unsigned max_open;
	pthread_mutex_t lock;
	struct strmap *by_digest; /* digest -> struct pack *; lock */
	struct dlist idle;	  /* open, unused: least recently used first; lock */
	unsigned n_open;	  /* lock */
	bool took_over;		  /* packs_took_over() */
	/* digest -> (uint64_t *) bytes local of a lazy layer that no pack
	 * holds loaded: only a loaded layer fetches, so the count holds until
	 * the next load (packs_layer_bytes() need not parse its TOC); lock */
	struct strmap *lazy_local;
	/* digest -> (struct toc *) the table of a lazy layer a pull just
	 * published, as it parsed it (packs_offer_toc()), until the layer
	 * is loaded; lock */
	struct strmap *offered;
};

int packs_new(struct cache *cache, unsigned max_open, struct packs **ret)
{
	struct packs *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->by_digest = strmap_new();
	p->lazy_local = strmap_new();
	p->offered = strmap_new();
	if (!p->by_digest || !p->lazy_local || !p->offered) {
		strmap_free(p->by_digest);
		strmap_free(p->lazy_local);
		strmap_free(p->offered);
		free(p);
		return -ENOMEM;
	}
	p->cache = cache;
	p->max_open = max_open ? max_open : PACKS_DEFAULT_MAX_OPEN;
	pthread_mutex_init(&p->lock, NULL);
	*ret = p;
	return 0;
}

static int free_value(void *userdata, const char *key, void *value)
{
	free(value);
	return 0;
}

static int free_toc(void *userdata, const char *key, void *value)
{
	toc_free(value);
	return 0;
}

/* Remembers (local) or forgets (NULL) the bytes local of lazy layer
 * digest.  lock held. */
static void lazy_local_set_locked(struct packs *p, const char *digest, const uint64_t *local)
{
	uint64_t *v = strmap_get(p->lazy_local, digest);

	if (!local) {
		free(strmap_remove(p->lazy_local, digest));
		return;
	}
	if (!v) {
		v = malloc(sizeof(*v));
		if (!v)
			return;
		if (strmap_put(p->lazy_local, digest, v) < 0) {
			free(v);
			return;
		}
	}
	*v = *local;
}

void packs_free(struct packs *p)
{
	if (!p)
		return;
	strmap_free(p->by_digest);
	strmap_foreach(p->lazy_local, free_value, NULL);
	strmap_free(p->lazy_local);
	strmap_foreach(p->offered, free_toc, NULL);
	strmap_free(p->offered);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

static void idle_unlink_locked(struct packs *p, struct pack *pk)
{
	dlist_remove(&p->idle, &pk->idle);
}

static void close_locked(struct packs *p, struct pack *pk)
{
	idle_unlink_locked(p, pk);
	if (pk->fd >= 0) {
		close(pk->fd);
		pk->fd = -1;
		p->n_open--;
	}
}

/* Closes idle descriptors, oldest first, down to the bound. */
static void trim_locked(struct packs *p)
{
	while (p->n_open > p->max_open && p->idle.head)
		close_locked(p, dlist_entry(p->idle.head, struct pack, idle));
}

/* The identity of layer digest's directory now; 0/0 when it has none,
 * and whether it is a lazy layer not verified yet (the only kind another
 * directory may replace: cache.c layer_publish). */
static void layer_dir_id(struct packs *p, const char *digest, dev_t *ret_dev, ino_t *ret_ino,
			 bool *ret_unverified)
{
	int dirfd = cache_layer_open_dir(p->cache, digest);
	struct stat st;

	*ret_dev = 0;
	*ret_ino = 0;
	*ret_unverified = false;
	if (dirfd < 0)
		return;
	if (fstat(dirfd, &st) == 0) {
		*ret_dev = st.st_dev;
		*ret_ino = st.st_ino;
	}
	*ret_unverified = faccessat(dirfd, "lazy", F_OK, 0) == 0;
	close(dirfd);
}

/* pk's directory was replaced: the images holding it keep what they had
 * (its descriptor pinned open, the lazy layer's directory for objects),
 * new ones get a new pack.  lock held. */
static void detach_locked(struct packs *p, struct pack *pk)
{
	strmap_remove(p->by_digest, pk->digest);
	pk->detached = true;
	if (pk->fd >= 0) {
		idle_unlink_locked(p, pk);
		pk->pinned = true;
	}
	if (pk->dirfd < 0 && pk->lazy)
		pk->dirfd = lazy_layer_dup_dir(pk->lazy);
}

int packs_get(struct packs *p, const char *digest, struct pack **ret)
{
	struct pack *pk;
	size_t len = strlen(digest);
	dev_t dev;
	ino_t ino;
	bool unverified;

	layer_dir_id(p, digest, &dev, &ino, &unverified);
	pthread_mutex_lock(&p->lock);
	pk = strmap_get(p->by_digest, digest);
	/* (a layer served from its stage has another directory than the
	 * copy another pull published first: the same content, kept) */
	if (pk && pk->unverified && (pk->dev || pk->ino) && (dev || ino) &&
	    (pk->dev != dev || pk->ino != ino)) {
		detach_locked(p, pk);
		pk = NULL;
	}
	if (!pk) {
		pk = calloc(1, sizeof(*pk) + len + 1);
		if (!pk || strmap_put(p->by_digest, digest, pk) < 0) {
			pthread_mutex_unlock(&p->lock);
			free(pk);
			return -ENOMEM;
		}
		memcpy(pk->digest, digest, len + 1);
		pk->fd = -1;
		pk->dirfd = -1;
		pk->dev = dev;
		pk->ino = ino;
		pk->unverified = unverified;
	}
	pk->refs++;
	pthread_mutex_unlock(&p->lock);
	*ret = pk;
	return 0;
}

void packs_put(struct packs *p, struct pack *pk)
{
	if (!pk)
		return;
	pthread_mutex_lock(&p->lock);
	if (--pk->refs == 0) {
		close_locked(p, pk);
		if (!pk->detached)
			strmap_remove(p->by_digest, pk->digest);
		if (pk->dirfd >= 0)
			close(pk->dirfd);
		if (pk->lazy && !pk->detached && !lazy_layer_is_complete(pk->lazy)) {
			uint64_t local, total;

			lazy_layer_bytes(pk->lazy, &local, &total);
			lazy_local_set_locked(p, pk->digest, &local);
		}
		lazy_layer_free(pk->lazy);
		if (pk->retired)
			cache_retired_discard(p->cache, pk->retired);
		free(pk->retired);
		free(pk);
	}
	pthread_mutex_unlock(&p->lock);
}

int pack_fd_get(struct packs *p, struct pack *pk)
{
	int fd;

	pthread_mutex_lock(&p->lock);
	if (pk->fd < 0) {
		/* (detached: the layer's name is another directory's now) */
		if (pk->detached)
			fd = pk->dirfd < 0 ? -ESTALE
					   : openat(pk->dirfd, "pack", O_RDONLY | O_CLOEXEC);
		else
			fd = cache_layer_open_pack(p->cache, pk->digest);
		if (fd == -1)
			fd = negative_errno();
		if (fd < 0) {
			pthread_mutex_unlock(&p->lock);
			return fd;
		}
		pk->fd = fd;
		p->n_open++;
		trim_locked(p);
	}
	idle_unlink_locked(p, pk);
	pk->users++;
	fd = pk->fd;
	pthread_mutex_unlock(&p->lock);
	return fd;
}

void pack_fd_put(struct packs *p, struct pack *pk)
{
	pthread_mutex_lock(&p->lock);
	if (--pk->users == 0 && !pk->pinned) {
		dlist_push(&p->idle, &pk->idle);
		trim_locked(p);
	}
	pthread_mutex_unlock(&p->lock);
}

void packs_offer_toc(struct packs *p, const char *digest, struct toc *files)
{
	struct toc *old;

	pthread_mutex_lock(&p->lock);
	/* (a few at most: the tables of layers no image loaded soon after
	 * their pull are parsed again if ever loaded) */
	if (strmap_size(p->offered) >= PACKS_OFFERED_MAX) {
		strmap_foreach(p->offered, free_toc, NULL);
		strmap_free(p->offered);
		p->offered = strmap_new();
	}
	old = p->offered ? strmap_remove(p->offered, digest) : NULL;
	if (!p->offered || strmap_put(p->offered, digest, files) < 0) {
		toc_free(files);
		if (!p->offered)
			p->offered = strmap_new();
	}
	pthread_mutex_unlock(&p->lock);
	toc_free(old);
}

struct lazy_layer *pack_lazy(struct packs *p, struct pack *pk)
{
	struct lazy_layer *l;

	pthread_mutex_lock(&p->lock);
	if (!pk->lazy_checked && !pk->detached) {
		struct toc *files = p->offered ? strmap_remove(p->offered, pk->digest) : NULL;

		pk->lazy_checked = true;
		lazy_local_set_locked(p, pk->digest, NULL);
		if (lazy_layer_open_with(p->cache, pk->digest, &p->lazy_stats, files, &pk->lazy) <
		    0)
			pk->lazy = NULL;
	}
	l = pk->lazy;
	pthread_mutex_unlock(&p->lock);
	return l;
}

const char *pack_digest(const struct pack *pk)
{
	return pk->digest;
}

struct lazy_stats *packs_lazy_stats(struct packs *p)
{
	return &p->lazy_stats;
}

void packs_lazy_metrics(struct packs *p, FILE *f)
{
	lazy_stats_metrics(&p->lazy_stats, f);
}

void packs_took_over(struct packs *p)
{
	pthread_mutex_lock(&p->lock);
	p->took_over = true;
	pthread_mutex_unlock(&p->lock);
}

bool pack_was_lazy(struct packs *p, struct pack *pk)
{
	bool r;

	/* the lazy state lives as long as the pack, complete or not */
	if (pack_lazy(p, pk))
		return true;
	pthread_mutex_lock(&p->lock);
	if (p->took_over && !pk->toc_checked) {
		int dirfd = cache_layer_open_dir(p->cache, pk->digest);

		pk->toc_checked = true;
		pk->had_toc = dirfd >= 0 && faccessat(dirfd, "toc", F_OK, 0) == 0;
		if (dirfd >= 0)
			close(dirfd);
	}
	r = p->took_over && pk->had_toc;
	pthread_mutex_unlock(&p->lock);
	return r;
}

bool pack_claim_completion(struct packs *p, struct pack *pk)
{
	bool mine;

	pthread_mutex_lock(&p->lock);
	mine = pk->lazy && !pk->completing;
	pk->completing = true;
	if (mine)
		pk->refs++; /* held by the completion */
	pthread_mutex_unlock(&p->lock);
	return mine;
}

void pack_completion_failed(struct packs *p, struct pack *pk)
{
	pthread_mutex_lock(&p->lock);
	pk->completing = false;
	pthread_mutex_unlock(&p->lock);
}

bool pack_completing(struct packs *p, struct pack *pk)
{
	struct lazy_layer *l = pack_lazy(p, pk);
	bool running;

	pthread_mutex_lock(&p->lock);
	running = pk->completing;
	pthread_mutex_unlock(&p->lock);
	return running && l && !lazy_layer_is_complete(l);
}

bool pack_detached(struct packs *p, struct pack *pk)
{
	bool r;

	pthread_mutex_lock(&p->lock);
	r = pk->detached;
	pthread_mutex_unlock(&p->lock);
	return r;
}

bool pack_complete(struct packs *p, struct pack *pk)
{
	struct lazy_layer *l = pack_lazy(p, pk);

	return !l || lazy_layer_is_complete(l);
}

/* Whether layer digest still has its "lazy" marker (a count remembered
 * for it is then still right: nothing fetched without loading it). */
static bool layer_still_lazy(struct packs *p, const char *digest)
{
	int dirfd = cache_layer_open_dir(p->cache, digest);
	bool r;

	if (dirfd < 0)
		return false;
	/* (complete, verified by its table of contents only: not lazy) */
	r = faccessat(dirfd, "lazy", F_OK, 0) == 0 &&
	    faccessat(dirfd, LAZY_COMPLETE_FILE, F_OK, 0) < 0;
	close(dirfd);
	return r;
}

enum lazy_verified packs_layer_verified(struct packs *p, const char *digest)
{
	struct lazy_layer *l = NULL;
	struct pack *pk;
	bool known;

	pthread_mutex_lock(&p->lock);
	pk = strmap_get(p->by_digest, digest);
	known = pk && pk->lazy_checked;
	if (known)
		l = pk->lazy;
	pthread_mutex_unlock(&p->lock);
	if (!known)
		return lazy_layer_verified(p->cache, digest);
	if (!l)
		return LAZY_VERIFIED_DIGEST;
	if (!lazy_layer_is_complete(l))
		return LAZY_VERIFIED_NONE;
	return lazy_layer_toc_verified(l) ? LAZY_VERIFIED_TOC : LAZY_VERIFIED_DIGEST;
}

void packs_layer_bytes(struct packs *p, const char *digest, uint64_t size, uint64_t *ret_local,
		       bool *ret_completing)
{
	struct lazy_layer *l;
	struct pack *pk;
	uint64_t total;

	*ret_local = size;
	*ret_completing = false;
	pthread_mutex_lock(&p->lock);
	pk = strmap_get(p->by_digest, digest);
	if (!pk || !pk->lazy_checked) {
		const uint64_t *known = strmap_get(p->lazy_local, digest);

		if (known && layer_still_lazy(p, digest)) {
			*ret_local = *known;
			*ret_completing = pk && pk->completing;
			pthread_mutex_unlock(&p->lock);
			return;
		}
		lazy_local_set_locked(p, digest, NULL);
	}
	pthread_mutex_unlock(&p->lock);
	if (packs_get(p, digest, &pk) < 0)
		return;
	l = pack_lazy(p, pk);
	if (l && !lazy_layer_is_complete(l)) {
		lazy_layer_bytes(l, ret_local, &total);
		pthread_mutex_lock(&p->lock);
		*ret_completing = pk->completing;
		pthread_mutex_unlock(&p->lock);
	}
	packs_put(p, pk);
}

int packs_remove_layer(struct packs *p, const char *digest)
{
	struct pack *pk;
	int r;

	pthread_mutex_lock(&p->lock);
	pk = strmap_get(p->by_digest, digest);
	if (!pk) {
		pthread_mutex_unlock(&p->lock);
		return cache_layer_remove(p->cache, digest);
	}
	if (pk->fd < 0) {
		int fd = cache_layer_open_pack(p->cache, pk->digest);

		if (fd < 0) {
			pthread_mutex_unlock(&p->lock);
			return fd;
		}
		pk->fd = fd;
		p->n_open++;
	}
	lazy_local_set_locked(p, digest, NULL);
	r = cache_layer_retire(p->cache, digest, &pk->retired, &pk->dirfd);
	if (r == 0) {
		/* it serves only the images holding it now: a pull of the
		 * same digest publishes a copy that gets a pack of its own
		 * (and that the next sweep deletes, not this one's) */
		strmap_remove(p->by_digest, digest);
		pk->detached = true;
		idle_unlink_locked(p, pk);
		pk->pinned = true;
		/* nothing completes a layer the cache no longer has */
		if (pk->lazy)
			lazy_layer_abandon(pk->lazy);
	}
	pthread_mutex_unlock(&p->lock);
	return r;
}

int pack_object_open(struct packs *p, struct pack *pk, const char *object)
{
	int dirfd, fd;

	pthread_mutex_lock(&p->lock);
	dirfd = pk->dirfd;
	pthread_mutex_unlock(&p->lock);
	/* (a pinned pack's dirfd stays open until the last put, which
	 * cannot happen while the caller holds its image) */
	if (dirfd < 0)
		return cache_layer_open_object(p->cache, pk->digest, object);
	fd = cache_object_openat(dirfd, object);
	return fd;
}

unsigned packs_open_count(struct packs *p)
{
	unsigned n;

	pthread_mutex_lock(&p->lock);
	n = p->n_open;
	pthread_mutex_unlock(&p->lock);
	return n;
}

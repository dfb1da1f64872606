/* The pull pipeline; see pull.h. */
#include "pull.h"
#include "lazy.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blobproof.h"
#include "cache.h"
#include "credentials.h"
#include "digest.h"
#include "errname.h"
#include "fault.h"
#include "layer.h"
#include "layer-private.h"
#include "fileio.h"
#include "strmap.h"
#include "macro.h"
#include "memtrim.h"
#include "manifest.h"
#include "packs.h"
#include "puller.h"
#include "reference.h"
#include "registry.h"

#define CONFIG_MAX_BYTES (16u << 20)
/* Indexes naming indexes: how deep a pull follows them. */
#define INDEX_MAX_DEPTH 4

void pull_fail(struct pull *p, const char *fmt, ...)
{
	va_list ap;

	if (p->why.message[0])
		return; /* the first reason is the one that matters */
	va_start(ap, fmt);
	error_detail_vset(&p->why, 0, p->why.err, fmt, ap);
	va_end(ap);
}

static int registry_failed(struct pull *p, int r, const struct error_detail *e, const char *what)
{
	pull_fail(p, "%s: %s", what, e->message[0] ? e->message : strerror(-r));
	return r;
}

/* Sink that writes into the pipe feeding the unpacker. */
struct pipe_sink_state {
	const atomic_bool *cancelled_flag;
	struct pull_progress *progress;
	int fd;
	uint64_t written;
};

static int pipe_sink(void *userdata, const void *buf, size_t len)
{
	struct pipe_sink_state *ps = userdata;

	ps->written += len;
	atomic_fetch_add(&ps->progress->bytes_done, len);
	if (atomic_load(ps->cancelled_flag))
		return -ECANCELED;
	if (ps->written > (64u << 10))
		fault_point("mid-blob");
	return write_full(ps->fd, buf, len);
}

struct unpack_job {
	int in_fd;
	int pack_fd;
	struct layer_objects objects;
	enum layer_compression compression;
	struct layer_limits lim;
	struct layer_index *index;
	int result;
	char errmsg[256];
};

/* What one layer may hold: the format's limits, and no more entries than
 * the whole image may have (-EFBIG past that). */
static struct layer_limits pull_layer_limits(const struct manager *m)
{
	struct layer_limits lim = { .max_entries = image_max_entries(m) };

	if (lim.max_entries <= LAYER_DEFAULT_MAX_ENTRIES)
		lim.entries_err = -EFBIG;
	else
		lim.max_entries = 0;
	return lim;
}

/* The reason of a layer's failure: one over the image's budget names it. */
static void pull_layer_fail(struct pull *p, const char *digest, int r, const char *msg)
{
	pull_fail(p, "layer %s: %s%s", digest, msg[0] ? msg : strerror(-r),
		  r == -EFBIG ? " (the limit of --max-image-entries)" : "");
}

static void *unpack_thread(void *arg)
{
	struct unpack_job *j = arg;
	char buf[64 << 10];

	j->result = layer_unpack(j->in_fd, j->compression, j->pack_fd, &j->objects, &j->lim,
				 &j->index, j->errmsg, sizeof(j->errmsg));
	/* libarchive stops at the end-of-archive blocks; whatever padding
	 * follows must still reach the hasher for the digest to check out. */
	if (j->result == 0)
		while (read(j->in_fd, buf, sizeof(buf)) > 0)
			;
	close(j->in_fd);
	j->in_fd = -1;
	return NULL;
}

/* Downloads, verifies and unpacks one layer in a single streaming pass:
 * this thread moves bytes from the registry through SHA-256 into a pipe,
 * another inflates and unpacks them, so the two cores overlap.  Nothing is
 * published unless the digest matched and the tar was sound. */
/* A partial pull: the files of a lazy layer just published that the
 * content store had already (any image, any layer) were linked, not
 * fetched; their bytes are counted and said in an event. */
static void lazy_report_shared(struct pull *p, const char *digest, const struct toc *toc)
{
	struct manager *m = p->m;
	struct lazy_stats *st = packs_lazy_stats(m->packs);
	_cleanup_close_ int dirfd = cache_layer_open_dir(m->cache, digest);
	uint64_t saved = dirfd >= 0 ? lazy_toc_present_bytes(dirfd, toc) : 0;
	char msg[512];

	if (saved == 0)
		return;
	atomic_fetch_add(&st->saved_bytes, saved);
	snprintf(msg, sizeof(msg),
		 "Layer %s of \"%s\": files of %llu compressed bytes were in the content store "
		 "already and are not fetched",
		 digest, p->canonical, (unsigned long long)saved);
	events_emit(m->events, &(struct event){ .type = EVENT_NORMAL,
						.reason = "PartialPull",
						.image = p->canonical,
						.digest = digest,
						.message = msg,
						.caller = p->who,
						.bytes_saved = saved });
}

/* A layer with a table of contents is published from it alone (lazy.h):
 * its files come when they are read.  Returns 0 when it was, 1 when the
 * layer is to be pulled whole (no TOC, or one that is not usable: said in
 * a Warning event), -errno when staging failed. */
static int try_lazy(struct pull *p, const struct descriptor *d)
{
	struct manager *m = p->m;
	struct lazy_source src = { .domain = (char *)p->ref->domain,
				   .repo = p->repo,
				   .packs = true };
	struct cache_layer_stage stage;
	_cleanup_free_ char *tocbuf = NULL, *text = NULL;
	struct toc *toc = NULL;
	size_t toclen, n;
	char err[256] = "";
	int r;

	int mode = policy_match_value(m->lazy_rules, p->canonical);

	if (mode == LAZY_MODE_OFF || (mode == LAZY_MODE_UNSET && m->opts.no_lazy))
		return 1;
	r = toc_layer_from_descriptor(d, &src.tl, err, sizeof(err));
	if (r == 0 && src.tl.format == TOC_NONE)
		return 1;
	if (r == 0) {
		const struct layer_limits lim = pull_layer_limits(m);

		r = lazy_fetch_toc(m->registry, &src, d->digest, &lim, &toc, &tocbuf, &toclen, err,
				   sizeof(err));
		/* pulled whole, it would be refused all the same, after the
		 * download */
		if (r == -EFBIG) {
			pull_layer_fail(p, d->digest, r, err);
			return r;
		}
	}
	/* A registry that sends the table under the rate floor would send
	 * the whole blob no faster: the pull fails, not falls back. */
	if (r == -ETIMEDOUT) {
		pull_fail(p, "table of contents of layer %s: %s", d->digest, err);
		return r;
	}
	/* every file with content must be named by its digest: that is
	 * what a chunk-by-chunk fetch is checked against in the end */
	for (size_t i = 0; r == 0 && i < toc->index->n_entries; i++) {
		const struct layer_entry *e = &toc->index->entries[i];

		if (e->type == LAYER_ENTRY_REG && e->size > 0 && !e->object) {
			snprintf(err, sizeof(err),
				 "\"%.200s\" has no digest in the table of contents", e->path);
			r = -EBADMSG;
		}
	}
	if (r == 0)
		r = lazy_source_format(&src, &text);
	if (r < 0) {
		manager_emit(m, EVENT_WARNING, "LazyPullFailed", p->canonical, d->digest, r, p->who,
			     "Layer %s of \"%s\" is pulled whole: %s", d->digest, p->canonical,
			     err[0] ? err : strerror(-r));
		toc_free(toc);
		return 1;
	}
	r = cache_layer_stage(m->cache, d->digest, &stage);
	if (r == 0)
		r = cache_layer_commit_lazy(m->cache, &stage, d->digest, toc->index, text, tocbuf,
					    toclen);
	if (r == 0)
		lazy_report_shared(p, d->digest, toc);
	n = toc->index->n_entries;
	/* the layer's first load takes the table as it is (a failure only
	 * costs a parse) */
	if (r == 0 && toc_keep_files(toc) == 0)
		packs_offer_toc(m->packs, d->digest, TAKE_PTR(toc));
	toc_free(toc);
	mem_trim_after(n);
	if (r < 0) {
		pull_fail(p, "cannot publish lazy layer %s: %s", d->digest, strerror(-r));
		return r;
	}
	atomic_fetch_add(&p->progress->layers_done, 1);
	return 0;
}

static int fetch_layer(struct pull *p, const struct descriptor *d)
{
	struct manager *m = p->m;
	struct cache_layer_stage stage;
	struct unpack_job job = { .in_fd = -1 };
	struct error_detail rerr = { 0 };
	enum layer_compression comp;
	pthread_t th;
	int pfd[2];
	size_t n;
	int r, ur;

	r = layer_media_type_compression(d->media_type, &comp);
	if (r < 0) {
		pull_fail(p, "layer %s has unsupported media type \"%s\"", d->digest,
			  d->media_type);
		return -EBADMSG;
	}
	r = cache_layer_stage(m->cache, d->digest, &stage);
	if (r < 0) {
		pull_fail(p, "cannot stage layer %s: %s", d->digest, strerror(-r));
		return r;
	}
	if (pipe2(pfd, O_CLOEXEC) < 0) {
		r = negative_errno();
		goto fail;
	}
	fcntl(pfd[1], F_SETPIPE_SZ, 1 << 20);
	job.in_fd = pfd[0];
	job.pack_fd = stage.pack_fd;
	job.objects.dirfd = stage.dirfd;
	job.objects.min_size = CACHE_OBJECT_MIN_SIZE;
	{
		struct toc_layer tl;

		job.objects.drop_estargz_own =
			toc_layer_from_descriptor(d, &tl, NULL, 0) == 0 && tl.stargz_files;
	}
	job.compression = comp;
	job.lim = pull_layer_limits(m);
	r = pthread_create(&th, NULL, unpack_thread, &job);
	if (r != 0) {
		close(pfd[0]);
		close(pfd[1]);
		r = -r;
		goto fail;
	}
	struct pipe_sink_state ps = { .fd = pfd[1],
				      .progress = p->progress,
				      .cancelled_flag = &m->cancelled };
	r = registry_get_blob(m->registry, p->ref->domain, p->repo, d->digest, d->size, pipe_sink,
			      &ps, &rerr);
	close(pfd[1]);
	pthread_join(th, NULL);
	ur = job.result;
	if (r < 0 && ur < 0 && (r == -EPIPE || r == -EBADMSG)) {
		/* The unpacker gave up first; its reason is the real one. */
		r = ur;
		pull_layer_fail(p, d->digest, r, job.errmsg);
		goto fail;
	}
	if (r < 0) {
		registry_failed(p, r, &rerr, d->digest);
		goto fail;
	}
	if (ur < 0) {
		r = ur;
		pull_layer_fail(p, d->digest, r, job.errmsg);
		goto fail;
	}
	fault_point("mid-unpack");
	r = cache_layer_commit(m->cache, &stage, d->digest, job.index);
	n = job.index->n_entries;
	layer_index_free(job.index);
	job.index = NULL;
	mem_trim_after(n);
	if (r < 0) {
		pull_fail(p, "cannot publish layer %s: %s", d->digest, strerror(-r));
		goto fail;
	}
	fault_point("layer");
	atomic_fetch_add(&p->progress->layers_done, 1);
	return 0;
fail:
	layer_index_free(job.index);
	cache_layer_abandon(m->cache, &stage);
	return r;
}

/* ---- sharing what the cache holds (blobproof.h) --------------------- */

static bool proof_line(const struct pull *p, char *buf, size_t len)
{
	return blobproof_line(p->ref->domain, p->repo,
			      credentials_configured(p->m->opts.credentials, p->ref->domain), buf,
			      len);
}

/* Whether digest, a layer or config already in the cache, may serve this
 * pull: when a pull without credentials had it (public) or this
 * repository has shown it has it.  Otherwise, when a pull with
 * credentials of this pull's registry host had it, that registry's own
 * authorisation decides: it is asked (HEAD of the blob in this pull's
 * repository, with its credentials) and a yes is recorded.  Anywhere else
 * a HEAD proves nothing (a registry run by whoever causes the pull says
 * yes to any digest), so nothing is asked.  false: the caller fetches the
 * blob as if it were not cached, checked against its digest, so that
 * possession is the proof (and a 404 or 401 fails the pull with its
 * errno, as on a node without the blob); a registry or mirror that does
 * not answer HEAD still serves the pull.  Blocks on the network. */
static bool share_proven(struct pull *p, const char *digest)
{
	struct error_detail e = { 0 };
	char line[512];

	if (!proof_line(p, line, sizeof(line)))
		return false;
	if (blobproof_holds(p->m->proofs, digest, line))
		return true;
	if (!blobproof_domain_had(p->m->proofs, digest, p->ref->domain))
		return false;
	if (registry_head_blob(p->m->registry, p->ref->domain, p->repo, digest, &e) < 0)
		return false;
	(void)blobproof_note(p->m->proofs, digest, line);
	return true;
}

/* Whether the cached layer of d may serve this pull as far as its content
 * goes: a layer built lazily from a table of contents that only a
 * manifest's annotation vouches for (not yet checked against its digest)
 * serves only descriptors naming that same table; anyone can push a
 * manifest that names a popular layer digest with a table of their own. */
static bool layer_shareable(struct pull *p, const struct descriptor *d)
{
	struct toc_layer tl;

	if (toc_layer_from_descriptor(d, &tl, NULL, 0) < 0)
		tl.format = TOC_NONE;
	return lazy_layer_serves(p->m->cache, d->digest, &tl);
}

/* This pull fetched digest from its registry: a proof for the next. */
static void share_note(struct pull *p, const char *digest)
{
	char line[512];

	if (proof_line(p, line, sizeof(line)))
		(void)blobproof_note(p->m->proofs, digest, line);
}

struct layer_queue {
	struct pull *pull;
	const struct manifest *mf;
	pthread_mutex_t lock;
	size_t next;
	int result;
};

static void *layer_worker(void *arg)
{
	struct layer_queue *q = arg;

	for (;;) {
		size_t i;
		int r;

		pthread_mutex_lock(&q->lock);
		if (q->result < 0 || q->next >= q->mf->n_layers) {
			pthread_mutex_unlock(&q->lock);
			return NULL;
		}
		i = q->next++;
		pthread_mutex_unlock(&q->lock);

		const struct descriptor *d = &q->mf->layers[i];
		bool cached = cache_layer_present(q->pull->m->cache, d->digest);
		bool shareable = cached && layer_shareable(q->pull, d);
		if (shareable && share_proven(q->pull, d->digest)) {
			atomic_fetch_add(&q->pull->progress->layers_done, 1);
			atomic_fetch_add(&q->pull->progress->bytes_done, d->size);
			continue;
		}
		/* Not proven, or a lazy layer of another table of contents:
		 * the whole blob, checked against its digest (a lazy start
		 * would read a table of contents only); its publishing
		 * replaces a lazy layer (cache.h). */
		r = cached ? 1 : try_lazy(q->pull, d);
		/* (another pull published the layer lazily meanwhile, from
		 * another table) */
		if (r == 0 && !cached && !layer_shareable(q->pull, d))
			r = 1;
		if (r > 0)
			r = fetch_layer(q->pull, d);
		/* (replacing a lazy layer: the proofs its pulls left came
		 * from a table of contents, not from the blob) */
		if (r == 0 && cached && !shareable)
			(void)blobproof_forget(q->pull->m->proofs, d->digest);
		if (r == 0)
			share_note(q->pull, d->digest);
		if (r < 0) {
			pthread_mutex_lock(&q->lock);
			if (q->result == 0)
				q->result = r;
			pthread_mutex_unlock(&q->lock);
		}
	}
}

static int fetch_layers(struct pull *p, const struct manifest *mf)
{
	struct layer_queue q = { .pull = p, .mf = mf };
	unsigned n = p->m->opts.max_concurrent_downloads;
	pthread_t th[16];
	unsigned started = 0;

	if (n == 0)
		n = 3;
	n = MIN(n, ARRAY_SIZE(th));
	if (n > mf->n_layers)
		n = (unsigned)mf->n_layers;
	pthread_mutex_init(&q.lock, NULL);
	/* The calling thread works too, so one layer needs no new thread. */
	for (unsigned i = 1; i < n; i++)
		if (pthread_create(&th[started], NULL, layer_worker, &q) == 0)
			started++;
	layer_worker(&q);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_destroy(&q.lock);
	return q.result;
}

struct config_buf {
	char *data;
	size_t len;
};

static int config_sink(void *userdata, const void *buf, size_t len)
{
	struct config_buf *c = userdata;
	char *n;

	if (c->len + len > CONFIG_MAX_BYTES)
		return -EBADMSG;
	n = realloc(c->data, c->len + len + 1);
	if (!n)
		return -ENOMEM;
	memcpy(n + c->len, buf, len);
	c->data = n;
	c->len += len;
	return 0;
}

/* GETs the config unless the cache has it and the pull may share it;
 * *ret (malloc'ed data, NULL when cached) is what is to be stored, and
 * noted as shared (share_note) once it is. */
static int fetch_config(struct pull *p, const struct descriptor *d, struct config_buf *ret)
{
	struct config_buf c = { 0 };
	struct error_detail rerr = { 0 };
	int r;

	*ret = (struct config_buf){ 0 };
	if (cache_blob_read(p->m->cache, d->digest, CONFIG_MAX_BYTES, &c.data, &c.len) == 0) {
		free(c.data);
		c.data = NULL;
		c.len = 0;
		if (share_proven(p, d->digest))
			return 0;
	}
	if (d->size > CONFIG_MAX_BYTES) {
		pull_fail(p, "config %s is larger than %u bytes", d->digest, CONFIG_MAX_BYTES);
		return -EBADMSG;
	}
	r = registry_get_blob(p->m->registry, p->ref->domain, p->repo, d->digest, d->size,
			      config_sink, &c, &rerr);
	if (r < 0) {
		free(c.data);
		return registry_failed(p, r, &rerr, "config");
	}
	if (!c.data && !(c.data = strdup("")))
		return -ENOMEM;
	*ret = c;
	return 0;
}

/* The small blobs of a pull (config, manifest, index) stored while the
 * layers download: their flushes stay off the pull's path. */
struct blob_item {
	const char *digest;
	const void *data;
	size_t len;
	const char *what;
};

struct blob_store {
	struct cache *cache;
	struct blob_item blobs[3];
	unsigned n, stored;
	int result;
	const char *failed;
};

static void *blob_store_thread(void *arg)
{
	struct blob_store *b = arg;

	for (unsigned i = 0; i < b->n && b->result == 0; i++) {
		b->result = cache_blob_write(b->cache, b->blobs[i].digest, b->blobs[i].data,
					     b->blobs[i].len);
		if (b->result < 0)
			b->failed = b->blobs[i].what;
		else
			b->stored++;
	}
	return NULL;
}

/* GETs a manifest and parses it; when expected is set (a descriptor from
 * an index) the size must match too. */
static int fetch_manifest(struct pull *p, const char *target, const struct descriptor *expected,
			  struct registry_manifest **ret_raw, struct manifest **ret)
{
	struct registry_manifest *raw = NULL;
	struct error_detail rerr = { 0 };
	char why[256] = "";
	int r;

	r = registry_get_manifest(p->m->registry, p->ref->domain, p->repo, target, &raw, &rerr);
	if (r < 0)
		return registry_failed(p, r, &rerr, "manifest");
	if (expected && raw->len != expected->size) {
		pull_fail(p, "manifest %s: size %zu, index says %llu", expected->digest, raw->len,
			  (unsigned long long)expected->size);
		registry_manifest_free(raw);
		return -EBADMSG;
	}
	r = manifest_parse(raw->body, raw->len, raw->media_type, ret, why, sizeof(why));
	if (r < 0) {
		pull_fail(p, "%s", why[0] ? why : "malformed manifest");
		registry_manifest_free(raw);
		return r;
	}
	*ret_raw = raw;
	return 0;
}

static void platform_string(const struct platform *pl, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s%s%s", pl->os, pl->architecture, pl->variant ? "/" : "",
		 pl->variant ? pl->variant : "");
}

/* A pull takes its slot only once the registry has answered for the
 * manifest: a registry that does not answer holds no slot, so it delays
 * the pulls from other registries by nothing, whatever the number of
 * slots (the kubelet's serial puller holds its one slot for the whole
 * pull).  Waiting for the slot, a pull that nobody waits for any more
 * leaves the queue. */
static int pull_slot_enter(struct pull *p)
{
	struct manager *m = p->m;
	int r;

	atomic_store(&p->progress->state, PULL_WAITING);
	r = puller_enter(m->puller, &p->slot, p->ref->domain, &p->flight->abandon);
	if (r == 0) {
		p->has_slot = true;
		atomic_store(&p->progress->state, PULL_DOWNLOADING);
		return 0;
	}
	if (r == -EAGAIN)
		pull_fail(p, "too many pulls waiting");
	else if (!atomic_load(&m->cancelled))
		p->abandoned = true;
	else
		pull_fail(p, "shutting down");
	return r;
}

/* The whole transfer for one reference; publishes the reference file last.
 * On success *ret_digest / *ret_index_digest name what was published. */
/* One more pull counts on digest.  manager.lock held. */
static int inflight_add_locked(struct pull *p, const char *digest)
{
	char **v;
	uintptr_t n;

	if (!digest)
		return 0;
	v = realloc(p->inflight, (p->n_inflight + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	p->inflight = v;
	v[p->n_inflight] = strdup(digest);
	if (!v[p->n_inflight])
		return -ENOMEM;
	n = (uintptr_t)strmap_get(p->m->inflight, digest) + 1;
	if (strmap_put(p->m->inflight, digest, (void *)n) < 0) {
		free(v[p->n_inflight]);
		return -ENOMEM;
	}
	p->n_inflight++;
	return 0;
}

/* What the pull may count on from here (its manifests, config and
 * layers, present already or to be fetched) is kept by every sweep until
 * pull_inflight_leave(): the pull then waits for slots and registries
 * without gc_lock.  gc_lock held shared, so no sweep is under way. */
static int inflight_enter(struct pull *p, const struct manifest *mf, const char *digest,
			  const char *index_digest)
{
	int r;

	pthread_mutex_lock(&p->m->lock);
	r = inflight_add_locked(p, digest);
	if (r == 0)
		r = inflight_add_locked(p, index_digest);
	if (r == 0)
		r = inflight_add_locked(p, mf->config.digest);
	for (size_t i = 0; r == 0 && i < mf->n_layers; i++)
		r = inflight_add_locked(p, mf->layers[i].digest);
	pthread_mutex_unlock(&p->m->lock);
	return r;
}

void pull_inflight_leave(struct pull *p)
{
	pthread_mutex_lock(&p->m->lock);
	for (size_t i = 0; i < p->n_inflight; i++) {
		uintptr_t n = (uintptr_t)strmap_get(p->m->inflight, p->inflight[i]);

		/* replacing a key's value allocates nothing */
		if (n > 1)
			(void)strmap_put(p->m->inflight, p->inflight[i], (void *)(n - 1));
		else
			strmap_remove(p->m->inflight, p->inflight[i]);
		free(p->inflight[i]);
	}
	pthread_mutex_unlock(&p->m->lock);
	free(p->inflight);
	p->inflight = NULL;
	p->n_inflight = 0;
}

int pull_image(struct pull *p, char **ret_digest, char **ret_index_digest, uint64_t *ret_size)
{
	struct manager *m = p->m;
	struct registry_manifest *raw = NULL, *raw_index = NULL;
	struct manifest *mf = NULL, *index = NULL;
	const char *target = p->ref->digest ? p->ref->digest : p->ref->tag;
	struct config_buf config = { 0 };
	uint64_t size;
	bool unlocked = true;
	int r;

	/* nothing to count on yet: collections go on while the registry
	 * answers */
	pthread_rwlock_unlock(&m->gc_lock);
	r = fetch_manifest(p, target, NULL, &raw, &mf);
	if (r < 0)
		goto out;
	/* An index may name further indexes (valid OCI, rare): follow them
	 * to a bounded depth, keeping the outermost as the one the
	 * reference names. */
	for (unsigned depth = 0; mf->kind == MANIFEST_INDEX; depth++) {
		const struct descriptor *d = manifest_select_platform(mf, &m->platform);
		if (!d) {
			char pl[128];
			platform_string(&m->platform, pl, sizeof(pl));
			pull_fail(p, "no manifest for platform %s in %s", pl, raw->digest);
			r = -ENOEXEC;
			goto out;
		}
		if (depth == INDEX_MAX_DEPTH) {
			pull_fail(p, "index %s nests indexes deeper than %u levels",
				  raw_index->digest, INDEX_MAX_DEPTH);
			r = -EBADMSG;
			goto out;
		}
		/* d points into mf, which lives until the next is fetched. */
		struct manifest *cur = TAKE_PTR(mf);
		struct registry_manifest *cur_raw = TAKE_PTR(raw);
		r = fetch_manifest(p, d->digest, d, &raw, &mf);
		if (!index) {
			index = cur;
			raw_index = cur_raw;
		} else {
			manifest_free(cur);
			registry_manifest_free(cur_raw);
		}
		if (r < 0)
			goto out;
	}
	for (size_t i = 0; i < mf->n_layers; i++) {
		enum layer_compression c;
		if (layer_media_type_compression(mf->layers[i].media_type, &c) < 0) {
			pull_fail(p, "layer %s has unsupported media type \"%s\"",
				  mf->layers[i].digest, mf->layers[i].media_type);
			r = -EBADMSG;
			goto out;
		}
	}
	fault_point("manifest");
	pthread_rwlock_rdlock(&m->gc_lock);
	unlocked = false;
	if (p->flight && p->flight->counted) {
		/* A user's pull fits in that user's quota before it takes a
		 * slot or a byte of layers. */
		char msg[512] = "";
		r = gc_user_room(m, p->canonical, p->flight->uid, mf, p->flight, msg, sizeof(msg));
		if (r < 0) {
			pull_fail(p, "%s", msg[0] ? msg : strerror(-r));
			goto out;
		}
	}
	r = inflight_enter(p, mf, raw->digest, raw_index ? raw_index->digest : NULL);
	if (r < 0) {
		pull_fail(p, "%s", strerror(-r));
		goto out;
	}
	pthread_rwlock_unlock(&m->gc_lock);
	unlocked = true;
	r = pull_slot_enter(p);
	if (r < 0)
		goto out;
	{
		uint64_t total = mf->config.size;
		for (size_t i = 0; i < mf->n_layers; i++)
			total += mf->layers[i].size;
		atomic_store(&p->progress->bytes_total, total);
		atomic_store(&p->progress->layers_total, (unsigned)mf->n_layers);
	}
	r = fetch_config(p, &mf->config, &config);
	if (r < 0)
		goto out;
	fault_point("config");
	{
		struct blob_store bs = { .cache = m->cache };
		pthread_t th;
		bool threaded;

		if (config.data)
			bs.blobs[bs.n++] = (struct blob_item){ mf->config.digest, config.data,
							       config.len, "config" };
		bs.blobs[bs.n++] =
			(struct blob_item){ raw->digest, raw->body, raw->len, "manifest" };
		if (raw_index)
			bs.blobs[bs.n++] = (struct blob_item){ raw_index->digest, raw_index->body,
							       raw_index->len, "manifest" };
		threaded = pthread_create(&th, NULL, blob_store_thread, &bs) == 0;
		if (!threaded)
			blob_store_thread(&bs);
		r = fetch_layers(p, mf);
		if (threaded)
			pthread_join(th, NULL);
		/* stored (the first): the pull had it, whatever the layers did */
		if (config.data && bs.stored > 0)
			share_note(p, mf->config.digest);
		if (r < 0)
			goto out;
		r = bs.result;
		if (r < 0) {
			pull_fail(p, "cannot store %s: %s", bs.failed, strerror(-r));
			goto out;
		}
	}
	size = mf->config.size;
	for (size_t i = 0; i < mf->n_layers; i++)
		size += mf->layers[i].size;
	*ret_digest = strdup(raw->digest);
	*ret_index_digest = raw_index ? strdup(raw_index->digest) : NULL;
	if (!*ret_digest || (raw_index && !*ret_index_digest)) {
		free(*ret_digest);
		free(*ret_index_digest);
		r = -ENOMEM;
		goto out;
	}
	*ret_size = size;
out:
	if (p->has_slot)
		puller_leave(m->puller, &p->slot);
	p->has_slot = false;
	if (unlocked)
		pthread_rwlock_rdlock(&m->gc_lock);
	free(config.data);
	registry_manifest_free(raw);
	registry_manifest_free(raw_index);
	manifest_free(mf);
	manifest_free(index);
	return r;
}

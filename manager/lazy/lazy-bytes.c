/* What a lazy layer holds locally, and the lazy metrics.  See lazy.h. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "fileio.h"
#include "lazy-private.h"
#include "macro.h"
#include "registry.h"
#include "strmap.h"

const double lazy_latency_bounds[LAZY_LATENCY_BUCKETS] = {
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
};

void lazy_stats_observe(struct lazy_stats *s, uint64_t us)
{
	unsigned i = 0;

	while (i < LAZY_LATENCY_BUCKETS && (double)us > lazy_latency_bounds[i] * 1e6)
		i++;
	atomic_fetch_add(&s->latency[i], 1);
	atomic_fetch_add(&s->latency_sum_us, us);
}

/* The blob ranges of present chunks, to count their union: eStargz puts
 * several small files in one gzip member, which their chunks share. */
struct spans {
	struct toc_range *v;
	size_t n, cap;
	bool failed;
};

static void spans_add(struct spans *sp, const struct toc_chunk *c)
{
	if (sp->n == sp->cap) {
		size_t cap = sp->cap ? sp->cap * 2 : 256;
		struct toc_range *v = realloc(sp->v, cap * sizeof(*v));

		if (!v) {
			sp->failed = true;
			return;
		}
		sp->v = v;
		sp->cap = cap;
	}
	sp->v[sp->n++] = (struct toc_range){ c->blob_offset, c->blob_length };
}

static int cmp_span(const void *a, const void *b)
{
	const struct toc_range *x = a, *y = b;

	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static uint64_t spans_union(struct spans *sp)
{
	uint64_t sum = 0, end = 0;

	if (sp->n == 0)
		return 0; /* (v is NULL: not for qsort) */
	qsort(sp->v, sp->n, sizeof(*sp->v), cmp_span);
	for (size_t i = 0; i < sp->n; i++) {
		uint64_t s = MAX(sp->v[i].offset, end), e = sp->v[i].offset + sp->v[i].length;

		if (e > s)
			sum += e - s;
		end = MAX(end, e);
	}
	return sum;
}

/* Whether the file with content object is packed and written (from the
 * disk: the caller found it not in use). */
static bool packed_local(struct lazy_layer *l, const char *object)
{
	ssize_t i = l->slot_of ? toc_find_file(l->toc, object) : -1;
	size_t n;

	if (i < 0 || l->slot_of[i] == SIZE_MAX)
		return false;
	(void)toc_entry_chunks(l->toc, (size_t)i, &n);
	return lazy_pack_marked(l, l->slot_of[i], n, NULL) == n;
}

/* The present chunks of the file with content object, from its state when
 * it is in use, else from the disk. */
static void file_local_spans(struct lazy_layer *l, const char *object, const struct toc_chunk *c,
			     size_t n, struct spans *sp)
{
	char name[DIGEST_HEX_LEN + 8], map[4096];
	_cleanup_close_ int fd = -1;
	struct lazy_file *f;
	ssize_t got;
	off_t at = 0;

	pthread_mutex_lock(&l->lock);
	f = lazy_file_peek_locked(l, object);
	pthread_mutex_unlock(&l->lock);
	if (f) {
		pthread_mutex_lock(&f->lock);
		for (size_t k = 0; k < f->n; k++)
			if (f->complete || f->state[k] == CHUNK_PRESENT)
				spans_add(sp, &c[k]);
		pthread_mutex_unlock(&f->lock);
		return;
	}
	snprintf(name, sizeof(name), "o.%s", object);
	if (packed_local(l, object) || faccessat(l->dirfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
		for (size_t k = 0; k < n; k++)
			spans_add(sp, &c[k]);
		return;
	}
	snprintf(name, sizeof(name), "p.%s.map", object);
	fd = openat(l->dirfd, name, O_RDONLY | O_CLOEXEC);
	while (fd >= 0 && (size_t)at < n && (got = pread(fd, map, sizeof(map), at)) > 0) {
		for (ssize_t i = 0; i < got && (size_t)(at + i) < n; i++)
			if (map[i] == '1')
				spans_add(sp, &c[at + i]);
		at += got;
	}
}

void lazy_changed(struct lazy_layer *l)
{
	atomic_fetch_add(&l->changes, 1);
	cache_touch(l->cache);
}

bool lazy_file_local(struct lazy_layer *l, const char *object)
{
	char name[DIGEST_HEX_LEN + 8];
	struct lazy_file *f;
	bool local;

	if (atomic_load(&l->complete))
		return true;
	pthread_mutex_lock(&l->lock);
	f = lazy_file_peek_locked(l, object);
	pthread_mutex_unlock(&l->lock);
	if (f) {
		pthread_mutex_lock(&f->lock);
		local = f->complete;
		pthread_mutex_unlock(&f->lock);
		return local;
	}
	snprintf(name, sizeof(name), "o.%s", object);
	return packed_local(l, object) || faccessat(l->dirfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

bool lazy_file_packed(struct lazy_layer *l, const char *object)
{
	ssize_t i = l->slot_of ? toc_find_file(l->toc, object) : -1;

	return i >= 0 && l->slot_of[i] != SIZE_MAX;
}

void lazy_layer_bytes(struct lazy_layer *l, uint64_t *ret_local, uint64_t *ret_total)
{
	uint64_t total = l->src.tl.blob_size, local = l->src.where.length;
	/* read before the count: a change during it makes the next call
	 * count again */
	uint64_t changes = atomic_load(&l->changes);
	struct spans sp = { 0 };
	bool known;

	*ret_total = total;
	if (atomic_load(&l->complete)) {
		*ret_local = total;
		return;
	}
	/* A status reader asks for every lazy layer each time: counting
	 * looks at each file of the layer, on disk for those not in use. */
	pthread_mutex_lock(&l->lock);
	known = l->counted && l->counted_changes == changes;
	if (known)
		*ret_local = l->counted_local;
	pthread_mutex_unlock(&l->lock);
	if (known)
		return;
	/* one per content (toc_keep_files()): a content the layer holds
	 * twice counts once */
	for (size_t i = 0; i < l->toc->n_files; i++) {
		const char *o = l->toc->files[i].object;
		const struct toc_chunk *c;
		size_t n;

		c = toc_entry_chunks(l->toc, i, &n);
		file_local_spans(l, o, c, n, &sp);
	}
	if (!sp.failed)
		local += spans_union(&sp);
	free(sp.v);
	/* all of it only once complete (tar headers and padding are in no
	 * chunk) */
	*ret_local = MIN(local, total - 1);
	if (!sp.failed) {
		pthread_mutex_lock(&l->lock);
		l->counted = true;
		l->counted_changes = changes;
		l->counted_local = *ret_local;
		pthread_mutex_unlock(&l->lock);
	}
}

uint64_t lazy_toc_present_bytes(int dirfd, const struct toc *toc)
{
	const struct layer_index *li = toc->index;
	struct strmap *seen = strmap_new(), *held = NULL;
	uint64_t sum = 0;

	/* (one pass over the directory: a layer just published holds a few
	 * of its objects, if any, and the table may name many thousands) */
	if (seen && lazy_objects_held(dirfd, &held) < 0)
		held = NULL;
	for (size_t i = 0; seen && held && i < li->n_entries; i++) {
		const char *o = li->entries[i].object;
		const struct toc_chunk *c;
		size_t n;

		if (!o || !strmap_get(held, o) || strmap_get(seen, o) ||
		    strmap_put(seen, o, (void *)1) < 0)
			continue;
		c = toc_entry_chunks(toc, i, &n);
		sum += lazy_chunks_bytes(c, n);
	}
	strmap_free(held);
	strmap_free(seen);
	return sum;
}

static void counter(FILE *f, const char *name, const char *help, const atomic_uint_fast64_t *v)
{
	fprintf(f, "# HELP pullfs_lazy_%s %s\n# TYPE pullfs_lazy_%s counter\npullfs_lazy_%s %llu\n",
		name, help, name, name, (unsigned long long)atomic_load(v));
}

void lazy_stats_metrics(const struct lazy_stats *s, FILE *f)
{
	uint64_t cum = 0;

	counter(f, "fetches_total", "Range requests for chunks of lazy layers.", &s->fetches);
	counter(f, "fetched_bytes_total", "Compressed bytes fetched for lazy layers.", &s->bytes);
	counter(f, "fetch_failures_total", "Chunk fetches that failed (the reader got the errno).",
		&s->failures);
	counter(f, "files_completed_total", "Files of lazy layers fetched whole and verified.",
		&s->files_complete);
	counter(f, "layers_completed_total", "Lazy layers completed.", &s->layers_complete);
	counter(f, "background_bytes_total", "Compressed bytes the background completion fetched.",
		&s->background_bytes);
	counter(f, "kept_bytes_total",
		"Compressed bytes kept on disk for a lazy layer's blob digest (readers' ranges "
		"ahead of its completion).",
		&s->kept_bytes);
	counter(f, "files_linked_total",
		"Files of lazy layers found in the content store instead of fetched.",
		&s->files_linked);
	counter(f, "saved_bytes_total",
		"Compressed bytes not fetched because the content store had the file.",
		&s->saved_bytes);
	fputs("# HELP pullfs_lazy_fetch_duration_seconds Duration of the fetches readers waited for.\n"
	      "# TYPE pullfs_lazy_fetch_duration_seconds histogram\n",
	      f);
	for (unsigned i = 0; i < LAZY_LATENCY_BUCKETS; i++) {
		cum += atomic_load(&s->latency[i]);
		fprintf(f, "pullfs_lazy_fetch_duration_seconds_bucket{le=\"%g\"} %llu\n",
			lazy_latency_bounds[i], (unsigned long long)cum);
	}
	cum += atomic_load(&s->latency[LAZY_LATENCY_BUCKETS]);
	fprintf(f,
		"pullfs_lazy_fetch_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
		"pullfs_lazy_fetch_duration_seconds_sum %.6f\n"
		"pullfs_lazy_fetch_duration_seconds_count %llu\n",
		(unsigned long long)cum, (double)atomic_load(&s->latency_sum_us) / 1e6,
		(unsigned long long)cum);
}

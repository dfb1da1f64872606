/* The completion of a lazy layer: one pass over the whole blob, checked
 * against the layer's digest and holding the very table of contents the
 * layer was built from, writes every missing chunk; then every file is
 * checked and made an object.  See lazy.h. */
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

/* ---- completion: the whole blob in one pass -------------------------- */

/* A chunk the stream may bring: chunk k of f. */
struct pending {
	struct lazy_file *f;
	size_t k;
};

struct stream {
	struct lazy_layer *l;
	const atomic_bool *cancel;
	struct pending *p;
	size_t n, next;	    /* by blob offset; next: the one being collected */
	uint64_t pos;	    /* bytes of the blob seen */
	unsigned char *buf; /* the blob from buf_start on, buf_len bytes */
	uint64_t buf_start;
	size_t buf_len, cap;
	void *dst;
	uint64_t toc_seen; /* bytes of the table compared */
	bool toc_differs;
	/* chunks that did not match the table: if the blob is the
	 * digest's, the layer can never complete */
	size_t bad_chunks;
};

static const struct toc_chunk *pending_chunk(const struct pending *pd)
{
	return &pd->f->chunks[pd->k];
}

static int cmp_pending(const void *a, const void *b)
{
	uint64_t x = pending_chunk(a)->blob_offset, y = pending_chunk(b)->blob_offset;

	return x < y ? -1 : x > y;
}

/* The bytes of one chunk are in: written unless a reader has it already or
 * is fetching it (readers never wait for the stream). */
static int stream_chunk(struct stream *s, const struct pending *pd, const void *src)
{
	struct lazy_file *f = pd->f;
	int r;

	pthread_mutex_lock(&f->lock);
	if (f->complete || f->state[pd->k] != CHUNK_MISSING) {
		pthread_mutex_unlock(&f->lock);
		return 0;
	}
	f->state[pd->k] = CHUNK_FETCHING;
	pthread_mutex_unlock(&f->lock);
	r = lazy_file_hold(s->l, f);
	if (r == 0) {
		r = lazy_write_chunk(s->l, f, pd->k, src, &s->dst, false);
		lazy_file_put(s->l, f);
	}
	pthread_mutex_lock(&f->lock);
	f->state[pd->k] = r == 0 ? CHUNK_PRESENT : CHUNK_MISSING;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
	if (r == 0)
		lazy_changed(s->l);
	/* the stream goes on to the blob's digest: whether the table or the
	 * registry is wrong */
	if (r == -EBADMSG) {
		s->bad_chunks++;
		r = 0;
	}
	return r;
}

/* The bytes of the blob at s->pos that fall where the table of contents
 * is, compared with the table the layer was built from. */
static void stream_toc(struct stream *s, const unsigned char *d, size_t len)
{
	const struct toc_range *w = &s->l->src.where;
	uint64_t a = MAX(s->pos, w->offset), b = MIN(s->pos + len, w->offset + w->length);

	if (a >= b)
		return;
	if (s->l->toclen != w->length ||
	    memcmp(d + (a - s->pos), s->l->tocbuf + (a - w->offset), (size_t)(b - a)) != 0)
		s->toc_differs = true;
	s->toc_seen += b - a;
}

static int stream_sink(void *userdata, const void *data, size_t len)
{
	struct stream *s = userdata;
	const unsigned char *d = data;

	if (s->cancel && atomic_load(s->cancel))
		return -ECANCELED;
	stream_toc(s, d, len);
	/* A reader is waiting for chunks: the stream pauses, its socket
	 * buffer fills and the sender stops, leaving the link to the
	 * reader's request. */
	while (s->l->stats && atomic_load(&s->l->stats->foreground) > 0 &&
	       !(s->cancel && atomic_load(s->cancel)))
		usleep(2000);
	while (len > 0 && s->next < s->n) {
		const struct toc_chunk *c = pending_chunk(&s->p[s->next]);
		uint64_t end = c->blob_offset + c->blob_length, have;
		size_t take;

		if (s->buf_len == 0 && s->pos < c->blob_offset) {
			/* nothing wanted before the next chunk */
			take = (size_t)MIN((uint64_t)len, c->blob_offset - s->pos);
			d += take;
			len -= take;
			s->pos += take;
			s->buf_start = s->pos;
			continue;
		}
		have = s->buf_start + s->buf_len;
		take = (size_t)MIN((uint64_t)len, end > have ? end - have : 0);
		if (take > s->cap - s->buf_len) {
			size_t cap = s->buf_len + take;
			unsigned char *n = realloc(s->buf, cap);

			if (!n)
				return -ENOMEM;
			s->buf = n;
			s->cap = cap;
		}
		memcpy(s->buf + s->buf_len, d, take);
		s->buf_len += take;
		d += take;
		len -= take;
		s->pos += take;
		if (s->buf_start + s->buf_len < end)
			continue;
		int r = stream_chunk(s, &s->p[s->next], s->buf + (c->blob_offset - s->buf_start));

		if (r < 0)
			return r;
		/* keep only what the next chunk (sorted, maybe overlapping)
		 * still needs */
		if (++s->next < s->n) {
			uint64_t next = pending_chunk(&s->p[s->next])->blob_offset;

			if (next >= s->buf_start + s->buf_len) {
				s->buf_len = 0;
				s->buf_start = s->pos;
			} else {
				size_t drop = (size_t)(next - s->buf_start);

				memmove(s->buf, s->buf + drop, s->buf_len - drop);
				s->buf_len -= drop;
				s->buf_start = next;
			}
		}
	}
	s->pos += len;
	return 0;
}

/* One GET of the whole blob, checked against its digest, writing every
 * chunk that is still missing as it passes.  -EBADMSG with foreign_toc set
 * when the blob is the layer's and its table of contents is not the one
 * the layer was built from, or its chunks are not what that table says. */
static int stream_blob(struct lazy_layer *l, struct registry *reg, struct pending *p, size_t n,
		       const atomic_bool *cancel)
{
	struct stream s = { .l = l, .cancel = cancel, .p = p, .n = n };
	struct error_detail rerr = { 0 };
	int r;

	if (n > 0) /* (nothing missing: the stream only checks) */
		qsort(p, n, sizeof(*p), cmp_pending);
	r = registry_get_blob(reg, l->src.domain, l->src.repo, l->blob_digest, l->src.tl.blob_size,
			      stream_sink, &s, &rerr);
	if (l->stats) {
		atomic_fetch_add(&l->stats->fetches, 1);
		atomic_fetch_add(&l->stats->bytes, s.pos);
		atomic_fetch_add(&l->stats->background_bytes, s.pos);
		if (r < 0)
			atomic_fetch_add(&l->stats->failures, 1);
	}
	free(s.buf);
	free(s.dst);
	if (r == 0 && (s.toc_differs || s.toc_seen != l->src.where.length || s.bad_chunks > 0)) {
		atomic_store(&l->foreign_toc, true);
		r = -EBADMSG;
	}
	return r;
}

int lazy_layer_complete(struct lazy_layer *l, struct registry *reg, const atomic_bool *cancel)
{
	const struct toc *toc = l->toc;
	struct pending *p = NULL;
	size_t n = 0, cap = 0;
	bool all = true;
	int r = 0;

	/* what is missing now; readers may fetch some of it meanwhile */
	for (size_t i = 0; i < toc->n_files && r == 0; i++) {
		struct lazy_file *f;

		r = lazy_file_get(l, toc->files[i].object, &f);
		if (r < 0)
			break;
		pthread_mutex_lock(&f->lock);
		for (size_t k = 0; k < f->n && !f->complete; k++) {
			if (f->state[k] != CHUNK_MISSING)
				continue;
			if (n == cap) {
				struct pending *q =
					realloc(p, (cap = cap ? cap * 2 : 256) * sizeof(*p));

				if (!q) {
					r = -ENOMEM;
					break;
				}
				p = q;
			}
			p[n++] = (struct pending){ .f = f, .k = k };
		}
		pthread_mutex_unlock(&f->lock);
		lazy_file_put(l, f);
	}
	/* the whole blob, even with nothing missing: its digest, and the
	 * table of contents within it, are what prove that this layer is the
	 * descriptor's (the table was trusted through an annotation of one
	 * manifest only, which anyone can write for any layer digest) */
	if (r == 0)
		r = stream_blob(l, reg, p, n, cancel);
	/* what the stream wrote, on stable storage at once rather than file
	 * by file as each is finished */
	if (r == 0 && n > 0)
		r = flush_fs(l->dirfd);
	for (size_t i = 0; r == 0 && i < n; i++)
		atomic_store(&p[i].f->unflushed, false);
	free(p);
	if (r < 0)
		return r;
	/* every file: what the stream did not bring (a reader's fetch that
	 * failed meanwhile) by range, then checked whole and made an object */
	for (size_t i = 0; i < toc->n_files; i++) {
		struct lazy_file *f;

		if (cancel && atomic_load(cancel))
			return -ECANCELED;
		r = lazy_file_get(l, toc->files[i].object, &f);
		if (r < 0)
			return r;
		if (!f->complete)
			r = lazy_ensure_chunks(l, reg, f, 0, f->n ? f->n - 1 : 0, false);
		all = all && f->complete;
		lazy_file_put(l, f);
		if (r < 0)
			return r;
	}
	if (!all)
		return 0;
	/* every o.OBJ is there for good before the layer stops being lazy */
	r = flush_dir(l->dirfd);
	if (r < 0)
		return r;
	if (unlinkat(l->dirfd, "lazy", 0) < 0 && errno != ENOENT)
		return negative_errno();
	atomic_store(&l->complete, true);
	lazy_changed(l);
	if (l->stats)
		atomic_fetch_add(&l->stats->layers_complete, 1);
	return 0;
}

bool lazy_layer_is_complete(struct lazy_layer *l)
{
	return atomic_load(&l->complete);
}

bool lazy_layer_foreign_toc(struct lazy_layer *l)
{
	return atomic_load(&l->foreign_toc);
}

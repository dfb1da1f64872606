/* The completion of a lazy layer: the chunks still missing, by range in
 * blob order (readers first, each byte fetched once), each checked
 * against the table of contents; then every file is checked and made an
 * object.  See lazy.h. */
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
#include "clock.h"
#include "digest.h"
#include "errdetail.h"
#include "fileio.h"
#include "layer.h"
#include "lazy-private.h"
#include "macro.h"
#include "registry.h"
#include "strmap.h"
#include "tarhdr.h"

/* ---- completion: what is missing, by range ------------------------- */

/* One request brings at most this many bytes of the blob. */
#define PLAN_REQUEST_MAX (16u << 20)
/* Bytes between two missing chunks that are fetched along rather than
 * asked for apart (tar headers, small entries between files). */
#define PLAN_GAP_MAX (64u << 10)
/* What the requests wrote is flushed and marked in the maps once it is at
 * least this many bytes of chunks and the last flush at least
 * PLAN_COMMIT_NS old, and when the requests end: a completion killed on
 * its way loses no more than the larger of the two (each flush is a
 * syncfs, which on a fast link would cost more than the transfer). */
#define PLAN_COMMIT_BYTES (2u << 20)
#define PLAN_COMMIT_NS (500 * INT64_C(1000000))
/* The blob's tail after the last missing chunk (its table of contents,
 * fetched at the lookup already) is fetched again for the blob's digest
 * when it is at most this share of the blob, in percent, or at most
 * PLAN_GAP_MAX bytes. */
#define PLAN_TAIL_SHARE 5

/* A chunk the completion may bring: chunk k of f. */
struct pending {
	struct lazy_file *f;
	size_t k;
	bool written; /* by this completion: its map bit is due */
	/* the file's last chunk, its chunks written in order by the
	 * completion's requests, which matched the file's digest as they
	 * came: the file is an object at the commit */
	bool whole;
};

/* The file whose chunks the requests write one after the other from its
 * first, and their hash so far: a file in several chunks is then checked
 * whole without being read back, and its chunks are not hashed each
 * (CHUNK_WRITTEN until the file's hash matched). */
struct whole_hash {
	struct lazy_file *f;
	struct hasher *h; /* NULL: none */
	size_t next;	  /* the chunk it wants next */
};

/* Feeds wh's hash the chunks of its file from wh->next up to upto that
 * readers brought meanwhile (present: each checked alone as it came),
 * read back from the file, so that the file's hash goes on past them.
 * False when one of them is not present (yet).  The file held. */
static bool whole_hash_catch_up(struct whole_hash *wh, size_t upto)
{
	struct lazy_file *f = wh->f;
	_cleanup_free_ char *buf = NULL;

	while (wh->next < upto) {
		const struct toc_chunk *c = &f->chunks[wh->next];
		bool present;

		pthread_mutex_lock(&f->lock);
		present = f->state[wh->next] == CHUNK_PRESENT;
		pthread_mutex_unlock(&f->lock);
		if (!present || f->fd < 0 || (!buf && !(buf = malloc(1 << 20))))
			return false;
		if (lazy_hash_back(f->fd, c->offset, c->size, wh->h, buf, 1 << 20) < 0) {
			wh->next = f->n + 1; /* what it hashed is of no use now */
			return false;
		}
		wh->next++;
	}
	return true;
}

/* Ends the hash of wh's file: with check, what it wrote unchecked is
 * checked by the file's hash when every other chunk is present (read back
 * for it), else chunk by chunk; without (the completion stops), it is
 * fetched again when next wanted.  Returns how many chunks did not match
 * their digests. */
static size_t whole_hash_drop(struct lazy_layer *l, struct whole_hash *wh, bool check)
{
	struct lazy_file *f = wh->f;
	size_t bad = 0;
	bool held, matched = false;

	if (!f) {
		hasher_free(wh->h);
		*wh = (struct whole_hash){ 0 };
		return 0;
	}
	held = check && lazy_file_hold(l, f) == 0;
	if (held && wh->next > 0 && wh->next <= f->n && whole_hash_catch_up(wh, f->n)) {
		char got[DIGEST_STRING_MAX];

		hasher_final(wh->h, got);
		matched = !strcmp(digest_hex(got), f->object);
	}
	hasher_free(wh->h);
	*wh = (struct whole_hash){ 0 };
	pthread_mutex_lock(&f->lock);
	if (held) {
		bad = lazy_written_settle(l, f, matched);
	} else {
		for (size_t k = 0; k < f->n; k++)
			if (f->state[k] == CHUNK_WRITTEN)
				f->state[k] = CHUNK_MISSING;
		pthread_cond_broadcast(&f->cond);
	}
	pthread_mutex_unlock(&f->lock);
	if (held)
		lazy_file_put(l, f);
	return bad;
}

/* The chunks written and not yet flushed nor marked: p[from, ...). */
struct commit {
	struct pending *p;
	size_t from;
	uint64_t bytes;	 /* of chunks written since the last flush */
	int64_t last_ns; /* clock_mono_ns() of the last flush */
};

struct stream {
	struct lazy_layer *l;
	const atomic_bool *cancel;
	struct whole_hash *wh;
	struct lazy_claim *claim; /* the chunks this request claimed */
	struct pending *p;
	size_t n, next;	    /* by blob offset; next: the one being collected */
	uint64_t pos;	    /* offset in the blob of the next byte */
	unsigned char *buf; /* the blob from buf_start on, buf_len bytes */
	uint64_t buf_start;
	size_t buf_len, cap;
	void *dst;
	struct lazy_chain *chain; /* NULL: this request does not continue it */
	struct commit *commit;
	/* chunks that did not match the table */
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

static int plan_commit(struct lazy_layer *l, struct pending *p, size_t n);

/* Flushes and marks what was written of c->p[c->from, end). */
static int commit_upto(struct lazy_layer *l, struct commit *c, size_t end)
{
	int r = plan_commit(l, c->p + c->from, end - c->from);

	c->from = end;
	c->bytes = 0;
	c->last_ns = clock_mono_ns();
	return r;
}

static bool commit_due(const struct commit *c, uint64_t min_bytes)
{
	return c->bytes > 0 && c->bytes >= min_bytes &&
	       clock_mono_ns() - c->last_ns >= PLAN_COMMIT_NS;
}

/* The bytes of one claimed chunk are in: written, unless the claim went
 * (the file was finished meanwhile).  Readers waiting for it go on. */
static int stream_chunk(struct stream *s, struct pending *pd, const void *src)
{
	struct lazy_file *f = pd->f;
	struct whole_hash *wh = s->wh;
	struct hasher *feed;
	bool held, last = false, matched = false;
	int r;

	pthread_mutex_lock(&f->lock);
	if (f->complete || f->state[pd->k] != CHUNK_FETCHING || f->claim[pd->k] != s->claim) {
		bool complete = f->complete;

		pthread_mutex_unlock(&f->lock);
		/* (a reader took this chunk: the file's hash may still take
		 * it from the file once it is there) */
		if (wh->f == f && complete)
			s->bad_chunks += whole_hash_drop(s->l, wh, true);
		return 0;
	}
	pthread_mutex_unlock(&f->lock);
	/* (a packed file is never an object: no hash of it whole; chunks
	 * before this one that readers brought are read back for it) */
	if (wh->f != f && f->n > 1 && !f->packed) {
		s->bad_chunks += whole_hash_drop(s->l, wh, true);
		wh->h = hasher_new();
		wh->f = wh->h ? f : NULL;
	}
	r = lazy_file_hold(s->l, f);
	held = r == 0;
	/* chunks of the file readers brought before this one */
	if (held && wh->f == f && wh->next < pd->k)
		(void)whole_hash_catch_up(wh, pd->k);
	feed = held && wh->f == f && wh->next == pd->k ? wh->h : NULL;
	if (!feed && wh->f == f)
		s->bad_chunks += whole_hash_drop(s->l, wh, true);
	if (held)
		r = lazy_write_chunk(s->l, f, pd->k, src, &s->dst, false, feed);
	if (feed && r == 0 && ++wh->next == f->n) {
		char got[DIGEST_STRING_MAX];

		hasher_final(wh->h, got);
		matched = pd->whole = !strcmp(digest_hex(got), f->object);
		last = true;
	}
	pthread_mutex_lock(&f->lock);
	if (f->claim[pd->k] == s->claim) {
		f->claim[pd->k] = NULL;
		if (r < 0)
			f->state[pd->k] = CHUNK_MISSING;
		else if (feed && pending_chunk(pd)->digest[0])
			f->state[pd->k] = CHUNK_WRITTEN;
		else
			f->state[pd->k] = CHUNK_PRESENT;
	}
	/* (held: the settle may read chunks back) */
	if (last)
		s->bad_chunks += lazy_written_settle(s->l, f, matched);
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
	if (held)
		lazy_file_put(s->l, f);
	if (last) {
		hasher_free(wh->h); /* spent, nothing left to settle */
		*wh = (struct whole_hash){ 0 };
	} else if (feed && r < 0) {
		s->bad_chunks += whole_hash_drop(s->l, wh, true);
	}
	if (r == 0) {
		pd->written = true;
		s->commit->bytes += pending_chunk(pd)->blob_length;
		lazy_changed(s->l);
	}
	/* the request goes on: the blob's digest, if it gets that far,
	 * says whether the table or the registry is wrong */
	if (r == -EBADMSG) {
		s->bad_chunks++;
		r = 0;
	}
	return r;
}

/* Whether the daemon stops or the layer was given up (a completion or a
 * prefetch ends; lazy_layer_abandon()). */
static bool stop_asked(struct lazy_layer *l, const atomic_bool *cancel)
{
	return (cancel && atomic_load(cancel)) || atomic_load(&l->abandoned);
}

/* Waits while readers fetch chunks (whose bytes they keep once they
 * land), or until the completion stops: true when there were some. */
static bool readers_landed(struct lazy_layer *l, const atomic_bool *cancel)
{
	bool waited = false;

	while (l->stats && atomic_load(&l->stats->foreground) > 0 && !stop_asked(l, cancel)) {
		waited = true;
		usleep(2000);
	}
	return waited;
}

/* Whether the bytes between the chain and start, a request's first, are
 * more than are fetched along and hold a chunk. */
static bool chunk_gap(struct lazy_layer *l, const struct lazy_chain *c, uint64_t start)
{
	return start > c->pos && start - c->pos > PLAN_GAP_MAX &&
	       lazy_blob_holds_chunk(l, c->pos, start);
}

static int stream_sink(void *userdata, const void *data, size_t len)
{
	struct stream *s = userdata;
	const unsigned char *d = data;

	if (stop_asked(s->l, s->cancel))
		return -ECANCELED;
	atomic_store(&s->claim->heard_ns, clock_mono_ns());
	/* kept only when the chain does not take them as they pass */
	if (!s->chain || !lazy_chain_feed(s->l, s->chain, s->pos, d, len))
		lazy_blob_keep(s->l, s->pos, d, len);
	/* A reader is fetching chunks of its own: the request pauses, its
	 * socket buffer fills and the sender stops, leaving the link to the
	 * reader's request. */
	(void)readers_landed(s->l, s->cancel);
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

		if (r == 0 && commit_due(s->commit, PLAN_COMMIT_BYTES))
			r = commit_upto(s->l, s->commit,
					(size_t)(s->p - s->commit->p) + s->next + 1);
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

/* Claims the chunks of p[*i...] one request brings: missing chunks close
 * to each other in the blob, at most PLAN_REQUEST_MAX bytes; a chunk a
 * reader has or fetches ends the request (its bytes are not asked for
 * twice).  Sets [*start, *end) and the claimed chunks' range of p; moves
 * *i past them.  Returns the number claimed. */
static size_t plan_claim(struct pending *p, size_t n, size_t *i, struct lazy_claim *claim,
			 uint64_t *start, uint64_t *end, size_t *first)
{
	size_t claimed = 0;

	for (; *i < n; (*i)++) {
		const struct toc_chunk *c = pending_chunk(&p[*i]);
		struct lazy_file *f = p[*i].f;
		bool mine;

		if (claimed > 0 && (c->blob_offset > *end + PLAN_GAP_MAX ||
				    c->blob_offset + c->blob_length - *start > PLAN_REQUEST_MAX))
			break;
		pthread_mutex_lock(&f->lock);
		mine = !f->complete && f->state[p[*i].k] == CHUNK_MISSING;
		/* (not counted in f->fetches: a reader that has every other
		 * chunk finishes the file, whatever this request does) */
		if (mine) {
			f->state[p[*i].k] = CHUNK_FETCHING;
			f->claim[p[*i].k] = claim;
		}
		pthread_mutex_unlock(&f->lock);
		if (!mine) {
			if (claimed > 0)
				break;
			continue;
		}
		if (claimed++ == 0) {
			*first = *i;
			*start = c->blob_offset;
			*end = c->blob_offset + c->blob_length;
		}
		*end = MAX(*end, c->blob_offset + c->blob_length);
	}
	return claimed;
}

/* After a request: its chunks not written go back to missing, readers
 * waiting for them are woken. */
static void plan_release(struct pending *p, size_t n, const struct lazy_claim *claim)
{
	for (size_t i = 0; i < n; i++) {
		struct lazy_file *f = p[i].f;

		pthread_mutex_lock(&f->lock);
		if (f->claim[p[i].k] == claim) {
			f->claim[p[i].k] = NULL;
			f->state[p[i].k] = CHUNK_MISSING;
		}
		pthread_cond_broadcast(&f->cond);
		pthread_mutex_unlock(&f->lock);
	}
}

/* What a request wrote, on stable storage at once (one syncfs rather than
 * a flush per file), then marked in the maps: a completion killed after
 * this fetches none of it again. */
static int plan_commit(struct lazy_layer *l, struct pending *p, size_t n)
{
	bool any = false, unnamed = false, mapless;
	int r;

	for (size_t i = 0; i < n; i++) {
		any |= p[i].written;
		unnamed |= p[i].written && !atomic_load(&p[i].f->named);
	}
	if (!any)
		return 0;
	r = flush_fs(l->dirfd);
	/* the directory only once for each new file's names */
	if (r == 0 && unnamed)
		r = flush_dir(l->dirfd);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		struct lazy_file *f = p[i].f;

		if (!p[i].written)
			continue;
		p[i].written = false;
		atomic_store(&f->named, true);
		pthread_mutex_lock(&l->lock);
		mapless = f->mapless;
		pthread_mutex_unlock(&l->lock);
		/* a file without a map is an object now, by name */
		if (!mapless) {
			if (lazy_file_hold(l, f) < 0)
				continue; /* fetched again after a crash, that is all */
			pthread_mutex_lock(&f->lock);
			/* (a chunk its file's hash has yet to check is not
			 * marked: fetched again after a crash) */
			bool present = !f->complete && f->state[p[i].k] == CHUNK_PRESENT;

			if (present && f->packed)
				(void)lazy_pack_mark(l, f->slot + p[i].k, 1);
			else if (present && f->mapfd >= 0 &&
				 pwrite(f->mapfd, "1", 1, (off_t)p[i].k) == 1)
				atomic_store(&f->unflushed, false);
			pthread_mutex_unlock(&f->lock);
		}
		lazy_file_publish(l, f, p[i].whole);
		p[i].whole = false;
		if (!mapless)
			lazy_file_put(l, f);
	}
	return 0;
}

static void index_freep(struct layer_index **li)
{
	layer_index_free(*li);
}

/* The layer's last index, once every file is complete: the packed files
 * at their places in the pack (lazy-pack.c), and with hdrs (NULL: none),
 * the tar headers read from its blob, which matched its digest, their
 * times: a layer verified so is served as a full pull of the blob serves
 * it.  The new index is on stable storage before the caller goes on (its
 * "lazy" file goes after).  0 or -errno: the index that is there stays, a
 * stray LAZY_INDEX_NEW is written over next time. */
static int index_final(struct lazy_layer *l, const struct tarhdr *hdrs)
{
	_cleanup_(index_freep) struct layer_index *li = NULL;
	_cleanup_close_ int fd = -1, out = -1;
	size_t changed = 0, packed = 0;
	int r;

	fd = openat(l->dirfd, "index", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return negative_errno();
	r = layer_index_read(fd, &li);
	if (r < 0)
		return r;
	/* (headers a full pull would refuse give nothing) */
	r = hdrs ? tarhdr_merge(hdrs, li, &changed) : 0;
	if (r == -ENOMEM)
		return r;
	r = lazy_pack_index(l, li, &packed);
	if (r < 0)
		return r;
	if (changed == 0 && packed == 0)
		return 0;
	out = openat(l->dirfd, LAZY_INDEX_NEW,
		     O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (out < 0)
		return negative_errno();
	r = layer_index_write(li, out);
	if (r == 0)
		r = flush_data(out);
	if (r == 0 && renameat(l->dirfd, LAZY_INDEX_NEW, l->dirfd, "index") < 0)
		r = negative_errno();
	if (r == 0)
		r = flush_dir(l->dirfd);
	return r;
}

/* The requests of one fetch_missing(), and what they did. */
struct plan {
	struct lazy_layer *l;
	struct registry *reg;
	const atomic_bool *cancel;
	struct whole_hash wh;
	struct commit commit;
	uint64_t bytes; /* brought */
	size_t bad;	/* chunks that did not match the table */
};

/* One request: [start, end) of the blob, bringing the n chunks of p it
 * claimed (claim), and continuing chain (NULL: none). */
static int plan_request(struct plan *pl, struct lazy_claim *claim, struct pending *p, size_t n,
			uint64_t start, uint64_t end, struct lazy_chain *chain)
{
	struct lazy_layer *l = pl->l;
	struct stream s = { .l = l,
			    .cancel = pl->cancel,
			    .wh = &pl->wh,
			    .claim = claim,
			    .p = p,
			    .n = n,
			    .pos = start,
			    .buf_start = start,
			    .chain = chain,
			    .commit = &pl->commit };
	struct error_detail rerr = { 0 };
	int r;

	claim->bytes = end - start;
	r = registry_get_blob_range(pl->reg, l->src.domain, l->src.repo, l->blob_digest,
				    l->src.tl.blob_size, start, end - start, stream_sink, &s,
				    &rerr);
	pl->bytes += s.pos - start;
	if (l->stats) {
		atomic_fetch_add(&l->stats->fetches, 1);
		atomic_fetch_add(&l->stats->bytes, s.pos - start);
		atomic_fetch_add(&l->stats->background_bytes, s.pos - start);
		if (r < 0)
			atomic_fetch_add(&l->stats->failures, 1);
	}
	pl->bad += s.bad_chunks;
	free(s.buf);
	free(s.dst);
	return r;
}

/* The blob offset of the first chunk of p[i, n) a request may still
 * claim, or the blob's size. */
static uint64_t next_wanted(struct lazy_layer *l, struct pending *p, size_t n, size_t i)
{
	for (; i < n; i++) {
		struct lazy_file *f = p[i].f;
		bool missing;

		pthread_mutex_lock(&f->lock);
		missing = !f->complete && f->state[p[i].k] == CHUNK_MISSING;
		pthread_mutex_unlock(&f->lock);
		if (missing)
			return pending_chunk(&p[i])->blob_offset;
	}
	return l->src.tl.blob_size;
}

/* Takes the live chain c through what readers kept ahead of it, and
 * through the gaps between kept ranges before want (where the next chunk
 * a request brings begins) that hold no chunk (tar headers, entries
 * without content: bytes nothing else asks for; a chunk there is local,
 * and not fetched twice): a request each, for the chain only. */
static int chain_advance(struct plan *pl, struct lazy_chain *c, uint64_t want)
{
	for (;;) {
		struct lazy_claim claim = { .streams = true, .heard_ns = clock_mono_ns() };
		uint64_t next;
		int r = lazy_chain_catch_up(pl->l, c);

		if (r < 0)
			return r;
		next = lazy_blob_next_kept(pl->l, c->pos);
		if (next >= want || lazy_blob_holds_chunk(pl->l, c->pos, next))
			return 0;
		r = plan_request(pl, &claim, NULL, 0, c->pos, next, c);
		if (r < 0)
			return r;
	}
}

/* The chain c is at the blob's end: the layer is proven when the blob
 * matched its digest and held the table the layer was built from. */
static int chain_end(struct plan *pl, struct lazy_chain *c, bool *ret_proven)
{
	struct lazy_layer *l = pl->l;
	char got[DIGEST_STRING_MAX];
	int r = 0;

	lazy_chain_settle(c);
	hasher_final(c->hasher, got);
	if (strcmp(got, l->blob_digest) != 0) {
		/* not the digest's: a transfer gone wrong, maybe a reader's
		 * that was kept (this try fails, what the table verified
		 * stays; nothing kept is read again) */
		lazy_blob_drop(l);
		r = -EBADMSG;
	} else if (c->toc_differs || c->toc_seen != l->src.where.length || pl->bad > 0) {
		atomic_store(&l->foreign_toc, true);
		r = -EBADMSG;
	} else {
		*ret_proven = l->blob_proven = true;
		/* for the index, once every file is complete */
		l->proven_hdrs = TAKE_PTR(c->hdrs);
	}
	lazy_chain_drop(c);
	return r;
}

/* Fetches every chunk of p (sorted by blob offset) that is still missing,
 * request after request, in blob order, with readers' fetches going first
 * and readers of a chunk a request brings waiting for it; *ret_bytes: the
 * bytes the requests brought.  With ret_proven, the requests continue the
 * layer's chain (lazy-private.h) as long as they can, and *ret_proven is
 * set when it reached the blob's end and the blob matched its digest and
 * held the layer's table of contents (NULL: only the chunks, nothing else
 * of the blob).  -EBADMSG with foreign_toc set when the blob matched its
 * digest but not the table, or chunks of it are not what the table
 * says. */
static int fetch_missing(struct lazy_layer *l, struct registry *reg, struct pending *p, size_t n,
			 const atomic_bool *cancel, bool *ret_proven, uint64_t *ret_bytes)
{
	uint64_t size = l->src.tl.blob_size;
	struct plan pl = { .l = l,
			   .reg = reg,
			   .cancel = cancel,
			   .commit = { .p = p, .last_ns = clock_mono_ns() } };
	struct lazy_chain *chain = NULL;
	size_t i = 0;
	int r = 0;

	if (ret_proven) {
		*ret_proven = false;
		/* (the table is fetched again for it: a blob that matches its
		 * digest and holds another table is told from a transfer
		 * gone wrong) */
		if (!l->chain.hasher)
			(void)lazy_chain_start(l);
		if (l->chain.hasher && !l->chain.suspended)
			chain = &l->chain;
	}
	while (r == 0 && (i < n || chain)) {
		struct lazy_claim claim = { .streams = true, .heard_ns = clock_mono_ns() };
		uint64_t start = size, end = size;
		size_t first = i, claimed;

		if (stop_asked(l, cancel)) {
			r = -ECANCELED;
			break;
		}
		if (chain) {
			r = chain_advance(&pl, chain, next_wanted(l, p, n, i));
			if (r == 0 && chain->pos >= size) {
				r = chain_end(&pl, chain, ret_proven);
				chain = NULL;
				continue;
			}
			if (r < 0)
				break;
		}
		claimed = plan_claim(p, n, &i, &claim, &start, &end, &first);
		/* chunks between the chain and the request, which readers
		 * may be fetching: their bytes, kept once they land, take
		 * the chain on */
		if (chain && claimed && chunk_gap(l, chain, start) && readers_landed(l, cancel)) {
			r = chain_advance(&pl, chain, start);
			if (r < 0) {
				plan_release(p + first, i - first, &claim);
				break;
			}
		}
		if (chain) {
			/* The chain goes on only through bytes asked for in
			 * order: what lies between holds no chunk a request
			 * wants, and is fetched along when small or when it
			 * holds no chunk at all; so is the blob's tail when
			 * small enough for its digest. */
			uint64_t tail = size - (claimed ? MAX(end, chain->pos) : chain->pos);
			bool tail_ok =
				(claimed || chain->pos > 0) &&
				(tail <= PLAN_GAP_MAX || tail * 100 <= size * PLAN_TAIL_SHARE);

			if (claimed ? chunk_gap(l, chain, start) : !tail_ok) {
				/* a gap nobody kept: what comes now is kept,
				 * and the proof goes on from here */
				chain->suspended = true;
				chain = NULL;
			} else {
				start = MIN(start, chain->pos);
				/* the tail, up to what readers kept of it:
				 * the chain reads that back */
				if (claimed == 0 || (i >= n && tail_ok)) {
					uint64_t from = claimed ? MAX(end, chain->pos) : chain->pos;

					end = MAX(from, MIN(size, lazy_blob_next_kept(l, from)));
				}
			}
		}
		if (claimed == 0 && !chain)
			break;
		if (end <= start)
			break;
		r = plan_request(&pl, &claim, p + first, claimed ? i - first : 0, start, end,
				 chain);
		if (claimed)
			plan_release(p + first, i - first, &claim);
		if (r == 0 && claimed && commit_due(&pl.commit, 0))
			r = commit_upto(l, &pl.commit, i);
		if (r == 0 && chain && chain->pos >= size) {
			r = chain_end(&pl, chain, ret_proven);
			chain = NULL;
		}
	}
	/* what was written is kept, whatever ended the requests (a chain
	 * cut short goes on at the next try) */
	if (pl.commit.from < i) {
		int cr = commit_upto(l, &pl.commit, i);

		if (r == 0)
			r = cr;
	}
	pl.bad += whole_hash_drop(l, &pl.wh, !stop_asked(l, cancel));
	*ret_bytes = pl.bytes;
	return r;
}

/* A file written and flushed under name in dirfd, then the name. */
static int write_marker(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);
	int r;

	if (fd < 0)
		return negative_errno();
	r = flush_data(fd);
	close(fd);
	return r < 0 ? r : flush_dir(dirfd);
}

/* Whether file i of the table lies before the blob offset limit. */
static bool file_before(const struct toc *toc, size_t i, uint64_t limit)
{
	size_t n;
	const struct toc_chunk *c = toc_entry_chunks(toc, i, &n);

	return n > 0 && c[0].blob_offset < limit;
}

/* The files a pass takes: those before a blob offset, or (objects not
 * NULL) those whose content objects are keys of a map. */
struct file_pick {
	uint64_t limit;
	const struct strmap *objects;
};

static bool file_picked(const struct toc *toc, size_t i, const struct file_pick *pk)
{
	if (pk->objects)
		return strmap_get(pk->objects, toc->files[i].object) != NULL;
	return file_before(toc, i, pk->limit);
}

/* The chunks still missing of the files picked, sorted by blob offset,
 * in *ret (n in *ret_n); readers may fetch some of them meanwhile. */
static int collect_missing(struct lazy_layer *l, const struct file_pick *pick, struct pending **ret,
			   size_t *ret_n)
{
	const struct toc *toc = l->toc;
	struct pending *p = NULL;
	size_t n = 0, cap = 0;
	int r = 0;

	for (size_t i = 0; i < toc->n_files && r == 0; i++) {
		struct lazy_file *f;

		if (!file_picked(toc, i, pick))
			continue;
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
	if (r < 0) {
		free(p);
		return r;
	}
	if (n > 0)
		qsort(p, n, sizeof(*p), cmp_pending);
	*ret = p;
	*ret_n = n;
	return 0;
}

/* Every file picked: what no request brought (a reader's fetch that
 * failed meanwhile) by range, then checked whole and made an object.
 * *ret_all: whether each of them is. */
static int finish_files(struct lazy_layer *l, struct registry *reg, const atomic_bool *cancel,
			const struct file_pick *pick, bool *ret_all)
{
	const struct toc *toc = l->toc;
	int r = 0;

	*ret_all = true;
	for (size_t i = 0; i < toc->n_files; i++) {
		struct lazy_file *f;

		if (!file_picked(toc, i, pick))
			continue;
		if (stop_asked(l, cancel))
			return -ECANCELED;
		/* (a complete one is not opened for this) */
		if (lazy_file_local(l, toc->files[i].object))
			continue;
		r = lazy_file_get(l, toc->files[i].object, &f);
		if (r < 0)
			return r;
		if (!f->complete)
			r = lazy_ensure_chunks(l, reg, f, 0, f->n ? f->n - 1 : 0, false);
		*ret_all = *ret_all && f->complete;
		lazy_file_put(l, f);
		if (r < 0)
			return r;
	}
	return 0;
}

/* lazy_layer_complete(), once it is known to be needed. */
static int complete_files(struct lazy_layer *l, struct registry *reg, const atomic_bool *cancel)
{
	const struct file_pick all_files = { .limit = UINT64_MAX };
	struct pending *p = NULL;
	size_t n = 0;
	bool all = true, proven = false;
	uint64_t bytes;
	int r;

	r = collect_missing(l, &all_files, &p, &n);
	if (r == 0)
		r = fetch_missing(l, reg, p, n, cancel, &proven, &bytes);
	free(p);
	if (r == 0)
		r = finish_files(l, reg, cancel, &all_files, &all);
	if (r < 0 || !all)
		return r;
	proven = proven || l->blob_proven;
	if (!proven) {
		/* the requests did not read the blob in order: what they and
		 * the readers brought, with what neither did */
		tarhdr_free(TAKE_PTR(l->proven_hdrs));
		r = lazy_blob_prove(l, reg, cancel, &l->proven_hdrs);
		if (r == -ECANCELED)
			return r;
		proven = r > 0;
	}
	/* (a failure to take the headers' times leaves the table's: the
	 * layer is verified all the same; packed files need their places) */
	r = index_final(l, l->proven_hdrs);
	tarhdr_free(TAKE_PTR(l->proven_hdrs));
	if (r < 0 && l->n_packed > 0)
		return r;
	lazy_blob_drop(l);
	lazy_chain_drop(&l->chain);
	/* every o.OBJ is there for good before the layer says so */
	r = flush_dir(l->dirfd);
	if (r < 0)
		return r;
	if (proven) {
		/* verified against its digest: a layer like any other */
		if (unlinkat(l->dirfd, "lazy", 0) < 0 && errno != ENOENT)
			return negative_errno();
	} else {
		r = write_marker(l->dirfd, LAZY_COMPLETE_FILE);
		if (r < 0)
			return r;
		atomic_store(&l->toc_verified, true);
	}
	atomic_store(&l->complete, true);
	lazy_changed(l);
	if (l->stats)
		atomic_fetch_add(&l->stats->layers_complete, 1);
	return 0;
}

/* The files pick takes, fetched now like the completion fetches them
 * (readers first) and made objects; ret->files counts them. */
static int prefetch_picked(struct lazy_layer *l, struct registry *reg, const atomic_bool *cancel,
			   const struct file_pick *pick, struct lazy_prefetch *ret)
{
	struct pending *p = NULL;
	size_t n = 0;
	bool all;
	int r;

	for (size_t i = 0; i < l->toc->n_files; i++)
		ret->files += file_picked(l->toc, i, pick);
	r = collect_missing(l, pick, &p, &n);
	if (r < 0 || n == 0) {
		free(p);
		return r;
	}
	registry_thread_background(true);
	/* only the chunks: no proof of the blob is tried (it would take the
	 * bytes between and after them along, which the completion fetches
	 * again) */
	r = fetch_missing(l, reg, p, n, cancel, NULL, &ret->bytes);
	free(p);
	if (r == 0)
		r = finish_files(l, reg, cancel, pick, &all);
	registry_thread_background(false);
	ret->fetched = true;
	return r;
}

int lazy_layer_prefetch(struct lazy_layer *l, struct registry *reg, const atomic_bool *cancel,
			struct lazy_prefetch *ret)
{
	const struct file_pick pick = { .limit = l->toc->prefetch_end };

	memset(ret, 0, sizeof(*ret));
	if (pick.limit == 0 || atomic_load(&l->complete))
		return 0;
	return prefetch_picked(l, reg, cancel, &pick, ret);
}

int lazy_layer_prefetch_objects(struct lazy_layer *l, struct registry *reg,
				const atomic_bool *cancel, const struct strmap *objects,
				struct lazy_prefetch *ret)
{
	const struct file_pick pick = { .objects = objects };

	memset(ret, 0, sizeof(*ret));
	if (!objects || atomic_load(&l->complete))
		return 0;
	return prefetch_picked(l, reg, cancel, &pick, ret);
}

int lazy_layer_complete(struct lazy_layer *l, struct registry *reg, const atomic_bool *cancel)
{
	int r;

	if (atomic_load(&l->complete))
		return 0;
	registry_thread_background(true);
	r = complete_files(l, reg, cancel);
	registry_thread_background(false);
	return r;
}

void lazy_layer_reads(struct lazy_layer *l, struct lazy_reads *ret)
{
	ret->fetches = atomic_load(&l->reader_fetches);
	ret->bytes = atomic_load(&l->reader_bytes);
	ret->us = atomic_load(&l->reader_us);
	ret->size = l->src.tl.blob_size;
}

void lazy_layer_abandon(struct lazy_layer *l)
{
	atomic_store(&l->abandoned, true);
}

bool lazy_layer_is_complete(struct lazy_layer *l)
{
	return atomic_load(&l->complete);
}

bool lazy_layer_toc_verified(struct lazy_layer *l)
{
	return atomic_load(&l->toc_verified);
}

bool lazy_layer_foreign_toc(struct lazy_layer *l)
{
	return atomic_load(&l->foreign_toc);
}

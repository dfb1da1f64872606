/* A lazy layer's blob, checked against its digest as it passes: the
 * completion's chain (lazy-private.h) hashes it in blob order, and every
 * range a reader fetched (or the completion, once its chain is suspended)
 * is written at its offset into LAZY_BLOB_PART, so that the chain reads
 * back what readers brought ahead of it, and a completion whose requests
 * could not go on in order can still finish the hash: what no request
 * brought (tar headers between files, the table's footer) is fetched
 * then, each byte once, and the kept blob read in order from where the
 * chain stopped.  The tar headers of the bytes hashed are read as they
 * pass (tarhdr.h).  The ranges kept live in memory only: a restart starts
 * the file again (a layer fetched partly before it is verified by its
 * table of contents, as without this file). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bytepipe.h"
#include "digest.h"
#include "errdetail.h"
#include "fileio.h"
#include "lazy-private.h"
#include "macro.h"
#include "registry.h"
#include "tarhdr.h"

/* What lazy_blob_prove() fetches, at most: this share of the blob in
 * percent, or LAZY_BLOB_GAP_MAX bytes, and never a file's chunks (a file
 * the content store gave: fetching it for the proof would spend what
 * sharing saved). */
#define LAZY_BLOB_SHARE 5
#define LAZY_BLOB_GAP_MAX (64u << 10)

/* Adds [a, b) to the kept ranges, merging neighbours.  keep_lock held. */
static int kept_add(struct lazy_layer *l, uint64_t a, uint64_t b)
{
	size_t i = 0, j;

	while (i < l->n_kept && l->kept[i].b < a)
		i++;
	j = i;
	while (j < l->n_kept && l->kept[j].a <= b) {
		a = MIN(a, l->kept[j].a);
		b = MAX(b, l->kept[j].b);
		j++;
	}
	if (i == j) {
		if (l->n_kept == l->cap_kept) {
			size_t cap = l->cap_kept ? l->cap_kept * 2 : 64;
			struct lazy_range *n = reallocarray(l->kept, cap, sizeof(*n));

			if (!n)
				return -ENOMEM;
			l->kept = n;
			l->cap_kept = cap;
		}
		memmove(l->kept + i + 1, l->kept + i, (l->n_kept - i) * sizeof(*l->kept));
		l->n_kept++;
	} else if (j > i + 1) {
		memmove(l->kept + i + 1, l->kept + j, (l->n_kept - j) * sizeof(*l->kept));
		l->n_kept -= j - i - 1;
	}
	l->kept[i] = (struct lazy_range){ a, b };
	return 0;
}

/* Keeps no more: the file goes.  keep_lock held. */
static void keep_stop(struct lazy_layer *l)
{
	l->keep_off = true;
	if (l->keepfd >= 0) {
		close(l->keepfd);
		l->keepfd = -1;
		unlinkat(l->dirfd, LAZY_BLOB_PART, 0);
	}
	free(l->kept);
	l->kept = NULL;
	l->n_kept = l->cap_kept = 0;
}

void lazy_blob_keep(struct lazy_layer *l, uint64_t off, const void *buf, size_t len)
{
	int fd, r;

	if (len == 0 || atomic_load(&l->complete))
		return;
	pthread_mutex_lock(&l->keep_lock);
	/* a layer lazy for good never gets to the proof */
	if (atomic_load(&l->foreign_toc))
		keep_stop(l);
	if (!l->keep_off && l->keepfd < 0) {
		l->keepfd = openat(l->dirfd, LAZY_BLOB_PART,
				   O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (l->keepfd < 0)
			keep_stop(l);
	}
	fd = l->keep_off ? -1 : dup(l->keepfd);
	pthread_mutex_unlock(&l->keep_lock);
	if (fd < 0)
		return;
	/* (a descriptor of its own: keep_stop() may close the layer's
	 * meanwhile) */
	r = pwrite(fd, buf, len, (off_t)off) == (ssize_t)len ? 0 : -EIO;
	close(fd);
	if (r == 0 && l->stats)
		atomic_fetch_add(&l->stats->kept_bytes, len);
	pthread_mutex_lock(&l->keep_lock);
	if (!l->keep_off && (r < 0 || kept_add(l, off, off + len) < 0))
		keep_stop(l); /* a full disk: the layer is verified by its table */
	pthread_mutex_unlock(&l->keep_lock);
}

void lazy_blob_drop(struct lazy_layer *l)
{
	pthread_mutex_lock(&l->keep_lock);
	keep_stop(l);
	pthread_mutex_unlock(&l->keep_lock);
}

struct keep_sink {
	struct lazy_layer *l;
	uint64_t pos;
};

static int keep_sink(void *userdata, const void *buf, size_t len)
{
	struct keep_sink *k = userdata;

	lazy_blob_keep(k->l, k->pos, buf, len);
	k->pos += len;
	return 0;
}

/* The ranges of [from, size) not kept, in *ret (n in *ret_n), and their
 * bytes.  keep_lock held. */
static int kept_missing(struct lazy_layer *l, uint64_t from, uint64_t size, struct lazy_range **ret,
			size_t *ret_n, uint64_t *ret_bytes)
{
	struct lazy_range *m = calloc(l->n_kept + 1, sizeof(*m));
	uint64_t at = from, bytes = 0;
	size_t n = 0;

	if (!m)
		return -ENOMEM;
	for (size_t i = 0; i <= l->n_kept; i++) {
		uint64_t end = i < l->n_kept ? MIN(l->kept[i].a, size) : size;

		if (end > at) {
			m[n++] = (struct lazy_range){ at, end };
			bytes += end - at;
		}
		if (i < l->n_kept)
			at = MAX(at, l->kept[i].b);
	}
	*ret = m;
	*ret_n = n;
	*ret_bytes = bytes;
	return 0;
}

/* Whether a missing range holds bytes of a file's chunks: a file that
 * came from the content store (a partial pull), which the proof would
 * fetch after all. */
static bool holds_file(const struct toc *toc, const struct lazy_range *m, size_t n)
{
	for (size_t i = 0; i < toc->n_chunks; i++) {
		const struct toc_chunk *c = &toc->chunks[i];
		size_t lo = 0, hi = n;

		/* the first range ending after the chunk's start (m sorted) */
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;

			if (m[mid].b <= c->blob_offset)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo < n && m[lo].a < c->blob_offset + c->blob_length)
			return true;
	}
	return false;
}

/* The kept file read in order from the chain's position to end, fed to
 * it. */
static int kept_feed(struct lazy_layer *l, struct lazy_chain *c, int fd, uint64_t end)
{
	_cleanup_free_ unsigned char *buf = malloc(1u << 20);

	if (!buf)
		return -ENOMEM;
	while (c->pos < end) {
		size_t want = (size_t)MIN((uint64_t)(1u << 20), end - c->pos);
		ssize_t got = pread(fd, buf, want, (off_t)c->pos);

		if (got <= 0)
			return got < 0 ? negative_errno() : -EIO;
		lazy_chain_feed(l, c, c->pos, buf, (size_t)got);
	}
	return 0;
}

static int cmp_member(const void *x, const void *y)
{
	const struct lazy_member *a = x, *b = y;

	return a->offset < b->offset ? -1 : a->offset > b->offset;
}

/* l->members, once.  0 or -ENOMEM. */
static int members_make(struct lazy_layer *l)
{
	const struct toc *toc = l->toc;
	size_t n = 0;

	if (l->members)
		return 0;
	l->members = calloc(toc->n_chunks + 1, sizeof(*l->members));
	if (!l->members)
		return -ENOMEM;
	for (size_t i = 0; i < toc->n_files; i++) {
		size_t k;
		const struct toc_chunk *c = toc_entry_chunks(toc, i, &k);

		for (size_t j = 0; j + 1 < k; j++)
			if (c[j].inner_offset == 0 && c[j + 1].inner_offset == 0 &&
			    c[j].blob_length > 0 &&
			    c[j + 1].blob_offset == c[j].blob_offset + c[j].blob_length)
				l->members[n++] =
					(struct lazy_member){ c[j].blob_offset, c[j].blob_length,
							      c[j].size };
	}
	qsort(l->members, n, sizeof(*l->members), cmp_member);
	/* one per place (a content held twice has its chunks twice) */
	l->n_members = 0;
	for (size_t i = 0; i < n; i++)
		if (l->n_members == 0 ||
		    l->members[l->n_members - 1].offset != l->members[i].offset)
			l->members[l->n_members++] = l->members[i];
	return 0;
}

/* Bytes of the blob between pieces of a pipe: enough to ride out a
 * request's bursts while the worker hashes. */
#define CHAIN_PIPE_BYTES ((size_t)4 << 20)

static void chain_work(void *userdata, const void *buf, size_t len);

int lazy_chain_start(struct lazy_layer *l)
{
	struct lazy_chain *c = &l->chain;

	lazy_chain_drop(c);
	c->hasher = hasher_new();
	if (!c->hasher)
		return -ENOMEM;
	if (members_make(l) < 0 || tarhdr_new(l->src.tl.format, &c->hdrs) < 0)
		c->hdrs = NULL; /* the index keeps the table's times */
	if (bytepipe_new(CHAIN_PIPE_BYTES, chain_work, l, &c->pipe) < 0)
		c->pipe = NULL; /* the feeding thread does the work */
	return 0;
}

void lazy_chain_settle(struct lazy_chain *c)
{
	if (c->pipe)
		bytepipe_settle(c->pipe);
}

void lazy_chain_drop(struct lazy_chain *c)
{
	bytepipe_free(c->pipe);
	hasher_free(c->hasher);
	tarhdr_free(c->hdrs);
	*c = (struct lazy_chain){ 0 };
}

/* The bytes d of the blob at c->worked that fall where the table of
 * contents is, compared with the table the layer was built from. */
static void chain_toc(struct lazy_layer *l, struct lazy_chain *c, const unsigned char *d,
		      size_t len)
{
	const struct toc_range *w = &l->src.where;
	uint64_t a = MAX(c->worked, w->offset), b = MIN(c->worked + len, w->offset + w->length);

	if (a >= b)
		return;
	if (l->toclen != w->length ||
	    memcmp(d + (a - c->worked), l->tocbuf + (a - w->offset), (size_t)(b - a)) != 0)
		c->toc_differs = true;
	c->toc_seen += b - a;
}

/* The tar header walk of the bytes d at c->worked: members of content
 * only are passed over. */
static void chain_walk(struct lazy_layer *l, struct lazy_chain *c, const unsigned char *d,
		       size_t len)
{
	uint64_t at = c->worked;

	while (len > 0) {
		const struct lazy_member *m;
		size_t take;

		if (c->walk_past > at) {
			take = (size_t)MIN((uint64_t)len, c->walk_past - at);
			goto next;
		}
		while (c->member < l->n_members && l->members[c->member].offset < at)
			c->member++;
		m = c->member < l->n_members ? &l->members[c->member] : NULL;
		if (m && m->offset == at) {
			c->member++;
			if (tarhdr_skip_content(c->hdrs, m->size) == 0) {
				c->walk_past = at + m->length;
				continue;
			}
			m = c->member < l->n_members ? &l->members[c->member] : NULL;
		}
		take = m ? (size_t)MIN((uint64_t)len, m->offset - at) : len;
		(void)tarhdr_feed(c->hdrs, d, take); /* a failure merges nothing */
	next:
		d += take;
		len -= take;
		at += take;
	}
}

/* The next len bytes of the blob, at c->worked, through the hash, the
 * table's comparison and the header walk. */
static void chain_work(void *userdata, const void *buf, size_t len)
{
	struct lazy_layer *l = userdata;
	struct lazy_chain *c = &l->chain;

	hasher_update(c->hasher, buf, len);
	chain_toc(l, c, buf, len);
	if (c->hdrs)
		chain_walk(l, c, buf, len);
	c->worked += len;
}

bool lazy_chain_feed(struct lazy_layer *l, struct lazy_chain *c, uint64_t off, const void *buf,
		     size_t len)
{
	const unsigned char *d = buf;
	size_t skip;

	if (off > c->pos || !c->hasher)
		return false;
	if (off + len <= c->pos)
		return true;
	skip = (size_t)(c->pos - off);
	d += skip;
	len -= skip;
	if (c->pipe)
		bytepipe_put(c->pipe, d, len);
	else
		chain_work(l, d, len);
	c->pos += len;
	return true;
}

/* The end of the kept range holding off (off itself when none does), and
 * a descriptor of the kept file in *ret_fd when it is past off.
 * keep_lock held. */
static uint64_t kept_reach(struct lazy_layer *l, uint64_t off, int *ret_fd)
{
	*ret_fd = -1;
	for (size_t i = 0; i < l->n_kept && l->kept[i].a <= off; i++) {
		if (l->kept[i].b > off && !l->keep_off && l->keepfd >= 0) {
			*ret_fd = dup(l->keepfd);
			return *ret_fd < 0 ? off : l->kept[i].b;
		}
	}
	return off;
}

int lazy_chain_catch_up(struct lazy_layer *l, struct lazy_chain *c)
{
	for (;;) {
		_cleanup_close_ int fd = -1;
		uint64_t end;
		int r;

		pthread_mutex_lock(&l->keep_lock);
		end = kept_reach(l, c->pos, &fd);
		pthread_mutex_unlock(&l->keep_lock);
		end = MIN(end, l->src.tl.blob_size);
		if (end <= c->pos)
			return 0;
		r = kept_feed(l, c, fd, end);
		if (r < 0)
			return r;
	}
}

static int cmp_span(const void *x, const void *y)
{
	const struct lazy_range *a = x, *b = y;

	return a->a < b->a ? -1 : a->a > b->a;
}

bool lazy_blob_holds_chunk(struct lazy_layer *l, uint64_t a, uint64_t b)
{
	const struct toc *toc = l->toc;
	size_t lo = 0, hi;

	if (!l->spans && toc->n_chunks > 0) {
		l->spans = calloc(toc->n_chunks, sizeof(*l->spans));
		l->span_reach = calloc(toc->n_chunks, sizeof(*l->span_reach));
		if (!l->spans || !l->span_reach) {
			free(l->spans);
			free(l->span_reach);
			l->spans = NULL;
			l->span_reach = NULL;
			return true;
		}
		for (size_t i = 0; i < toc->n_chunks; i++)
			l->spans[i] = (struct lazy_range){ toc->chunks[i].blob_offset,
							   toc->chunks[i].blob_offset +
								   toc->chunks[i].blob_length };
		qsort(l->spans, toc->n_chunks, sizeof(*l->spans), cmp_span);
		for (size_t i = 0; i < toc->n_chunks; i++)
			l->span_reach[i] = MAX(l->spans[i].b, i ? l->span_reach[i - 1] : 0);
		l->n_spans = toc->n_chunks;
	}
	/* the spans beginning before b: one of them reaches past a */
	hi = l->n_spans;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (l->spans[mid].a < b)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo > 0 && l->span_reach[lo - 1] > a;
}

uint64_t lazy_blob_next_kept(struct lazy_layer *l, uint64_t off)
{
	uint64_t next = UINT64_MAX;

	pthread_mutex_lock(&l->keep_lock);
	for (size_t i = 0; i < l->n_kept && next == UINT64_MAX; i++)
		if (l->kept[i].a > off)
			next = l->kept[i].a;
	pthread_mutex_unlock(&l->keep_lock);
	return next;
}

int lazy_blob_prove(struct lazy_layer *l, struct registry *reg, const atomic_bool *cancel,
		    struct tarhdr **ret_hdrs)
{
	uint64_t size = l->src.tl.blob_size, bytes;
	_cleanup_free_ struct lazy_range *missing = NULL;
	_cleanup_close_ int fd = -1;
	struct lazy_chain *c = &l->chain;
	char got[DIGEST_STRING_MAX];
	size_t n = 0;
	int r;

	*ret_hdrs = NULL;
	if (!c->hasher && lazy_chain_start(l) < 0)
		return -ENOMEM;
	/* the table of contents, fetched and checked at the lookup, is not
	 * asked for again: it must be where the blob has it, or the digest
	 * does not match */
	lazy_blob_keep(l, l->src.where.offset, l->tocbuf, l->toclen);
	pthread_mutex_lock(&l->keep_lock);
	r = l->keep_off || l->keepfd < 0 ? 1 : kept_missing(l, c->pos, size, &missing, &n, &bytes);
	if (r == 0)
		fd = dup(l->keepfd);
	pthread_mutex_unlock(&l->keep_lock);
	if (r != 0 || fd < 0 ||
	    (bytes > LAZY_BLOB_GAP_MAX && bytes * 100 > size * LAZY_BLOB_SHARE) ||
	    holds_file(l->toc, missing, n)) {
		lazy_chain_drop(c);
		return r < 0 ? r : 0;
	}
	for (size_t i = 0; i < n; i++) {
		struct keep_sink k = { .l = l, .pos = missing[i].a };
		struct error_detail rerr = { 0 };

		if ((cancel && atomic_load(cancel)) || atomic_load(&l->abandoned))
			return -ECANCELED;
		r = registry_get_blob_range(reg, l->src.domain, l->src.repo, l->blob_digest, size,
					    missing[i].a, missing[i].b - missing[i].a, keep_sink,
					    &k, &rerr);
		if (l->stats) {
			atomic_fetch_add(&l->stats->fetches, 1);
			atomic_fetch_add(&l->stats->bytes, k.pos - missing[i].a);
			atomic_fetch_add(&l->stats->background_bytes, k.pos - missing[i].a);
			if (r < 0)
				atomic_fetch_add(&l->stats->failures, 1);
		}
		if (r < 0)
			return r;
	}
	free(TAKE_PTR(missing));
	pthread_mutex_lock(&l->keep_lock);
	r = l->keep_off || kept_missing(l, c->pos, size, &missing, &n, &bytes) < 0 || bytes ? 1 : 0;
	pthread_mutex_unlock(&l->keep_lock);
	if (r == 0)
		r = kept_feed(l, c, fd, size);
	if (r != 0) {
		/* a range lost meanwhile (a full disk), or unreadable */
		lazy_chain_drop(c);
		return 0;
	}
	lazy_chain_settle(c);
	hasher_final(c->hasher, got);
	r = !strcmp(got, l->blob_digest) && !c->toc_differs;
	if (r)
		*ret_hdrs = TAKE_PTR(c->hdrs);
	lazy_chain_drop(c);
	return r;
}

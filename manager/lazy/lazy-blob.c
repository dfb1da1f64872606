/* A lazy layer's blob kept as its bytes pass: every range a reader or the
 * completion fetched is written at its offset into LAZY_BLOB_PART, so
 * that a completion whose requests could not read the blob in order (a
 * reader fetched first) can still check it against its digest: what no
 * request brought (tar headers between files, the table's footer) is
 * fetched then, each byte once, and the blob read back in order is hashed,
 * and its tar headers read (tarhdr.h).  The ranges kept live in memory
 * only: a restart starts the file again (a layer fetched partly before it
 * is verified by its table of contents, as without this file). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* The ranges of [0, size) not kept, in *ret (n in *ret_n), and their
 * bytes.  keep_lock held. */
static int kept_missing(struct lazy_layer *l, uint64_t size, struct lazy_range **ret, size_t *ret_n,
			uint64_t *ret_bytes)
{
	struct lazy_range *m = calloc(l->n_kept + 1, sizeof(*m));
	uint64_t at = 0, bytes = 0;
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

/* The kept file read in order, hashed and walked for its headers. */
static int kept_hash(int fd, uint64_t size, struct hasher *h, struct tarhdr *hdrs)
{
	_cleanup_free_ unsigned char *buf = malloc(1u << 20);
	uint64_t at = 0;

	if (!buf)
		return -ENOMEM;
	while (at < size) {
		size_t want = (size_t)MIN((uint64_t)(1u << 20), size - at);
		ssize_t got = pread(fd, buf, want, (off_t)at);

		if (got <= 0)
			return got < 0 ? negative_errno() : -EIO;
		hasher_update(h, buf, (size_t)got);
		if (hdrs)
			(void)tarhdr_feed(hdrs, buf, (size_t)got); /* a failure merges nothing */
		at += (uint64_t)got;
	}
	return 0;
}

int lazy_blob_prove(struct lazy_layer *l, struct registry *reg, const atomic_bool *cancel,
		    struct tarhdr **ret_hdrs)
{
	uint64_t size = l->src.tl.blob_size, bytes;
	_cleanup_free_ struct lazy_range *missing = NULL;
	_cleanup_close_ int fd = -1;
	struct hasher *h = NULL;
	struct tarhdr *hdrs = NULL;
	char got[DIGEST_STRING_MAX];
	size_t n = 0;
	int r;

	*ret_hdrs = NULL;
	/* the table of contents, fetched and checked at the lookup, is not
	 * asked for again: it must be where the blob has it, or the digest
	 * does not match */
	lazy_blob_keep(l, l->src.where.offset, l->tocbuf, l->toclen);
	pthread_mutex_lock(&l->keep_lock);
	r = l->keep_off || l->keepfd < 0 ? 1 : kept_missing(l, size, &missing, &n, &bytes);
	if (r == 0)
		fd = dup(l->keepfd);
	pthread_mutex_unlock(&l->keep_lock);
	if (r != 0 || fd < 0)
		return r < 0 ? r : 0;
	if ((bytes > LAZY_BLOB_GAP_MAX && bytes * 100 > size * LAZY_BLOB_SHARE) ||
	    holds_file(l->toc, missing, n))
		return 0;
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
	r = l->keep_off || kept_missing(l, size, &missing, &n, &bytes) < 0 || bytes ? 1 : 0;
	pthread_mutex_unlock(&l->keep_lock);
	if (r != 0)
		return 0; /* a range lost meanwhile (a full disk) */
	h = hasher_new();
	if (!h)
		return -ENOMEM;
	if (tarhdr_new(l->src.tl.format, &hdrs) < 0)
		hdrs = NULL; /* the index keeps the table's times */
	r = kept_hash(fd, size, h, hdrs);
	hasher_final(h, got);
	hasher_free(h);
	if (r < 0 || strcmp(got, l->blob_digest) != 0) {
		tarhdr_free(hdrs);
		return r < 0 ? r : 0;
	}
	*ret_hdrs = hdrs;
	return 1;
}

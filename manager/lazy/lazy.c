/* Lazy layers: their TOC, their files' state and descriptors, chunks fetched
 * for readers (the completion is lazy-complete.c, what is local and the
 * metrics lazy-bytes.c); see lazy.h and docs/content-store.md. */
#include "lazy.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "clock.h"
#include "digest.h"
#include "dlist.h"
#include "errname.h"
#include "fileio.h"
#include "lazy-private.h"
#include "macro.h"
#include "memtrim.h"
#include "registry.h"
#include "tarhdr.h"

/* One Range request fetches at most this many compressed bytes of
 * adjacent missing chunks. */
#define LAZY_RUN_MAX (4u << 20)
/* ... in at most this many ranges (runs of chunks adjacent in the blob) */
#define LAZY_RANGES_MAX 16
/* A chunk is decompressed and written in pieces of at most this. */
#define LAZY_CHUNK_PIECE (1u << 20)
/* A reader's request for a small file (at most LAZY_NEAR_FILE bytes)
 * brings the small files after it in the blob along, up to
 * LAZY_NEAR_BYTES of compressed bytes past its own and LAZY_NEAR_MAX
 * files: files next to each other in a layer are often read together (a
 * directory's modules, a locale's parts), and one request costs less than
 * one each.  Where they are not (a reader who picks a file here and
 * there), their bytes would cost more than the requests they save: the
 * bytes shrink with the share of such files of the layer that were read
 * since. */
#define LAZY_NEAR_FILE (64u << 10)
#define LAZY_NEAR_BYTES (64u << 10)
#define LAZY_NEAR_MAX 16
/* Files of one layer whose descriptors stay open while nobody uses them:
 * a layer of a hundred thousand files must not hold two descriptors for
 * each while its completion runs. */
#define LAZY_IDLE_FILES 64

/* Microseconds, the unit of the lazy fetch statistics. */
static uint64_t now_us(void)
{
	return (uint64_t)clock_mono_ns() / 1000u;
}

/* The compressed bytes of a file's chunks. */
uint64_t lazy_chunks_bytes(const struct toc_chunk *c, size_t n)
{
	uint64_t sum = 0;

	for (size_t k = 0; k < n; k++)
		sum += c[k].blob_length;
	return sum;
}

/* ---- fetching the TOC ------------------------------------------------ */

struct membuf {
	char *data;
	size_t len, cap;
};

static int membuf_sink(void *userdata, const void *buf, size_t len)
{
	struct membuf *b = userdata;

	if (len > b->cap - b->len)
		return -EBADMSG; /* more than the range asked for */
	memcpy(b->data + b->len, buf, len);
	b->len += len;
	return 0;
}

static int fetch_range(struct registry *reg, const struct lazy_source *src, const char *digest,
		       uint64_t off, uint64_t len, struct membuf *b, char *errbuf, size_t errlen)
{
	struct error_detail rerr = { 0 };
	int r;

	b->data = malloc(len ? len : 1);
	b->len = 0;
	b->cap = len;
	if (!b->data)
		return -ENOMEM;
	r = registry_get_blob_range(reg, src->domain, src->repo, digest, src->tl.blob_size, off,
				    len, membuf_sink, b, &rerr);
	if (r == 0 && b->len != len)
		r = -EBADMSG;
	if (r < 0) {
		if (errbuf)
			snprintf(errbuf, errlen, "range %" PRIu64 "+%" PRIu64 " of %s: %s", off,
				 len, digest, rerr.message[0] ? rerr.message : strerror(-r));
		free(b->data);
		b->data = NULL;
	}
	return r;
}

int lazy_fetch_toc(struct registry *reg, struct lazy_source *src, const char *blob_digest,
		   const struct layer_limits *lim, struct toc **ret_toc, char **ret_buf,
		   size_t *ret_len, char *errbuf, size_t errlen)
{
	struct membuf tail = { 0 }, body = { 0 };
	uint64_t n = MIN((uint64_t)TOC_TAIL_BYTES, src->tl.blob_size);
	int r;

	/* zstd:chunked's annotation places the table: one request, not a
	 * round trip for the footer first (the table's digest, which the
	 * manifest covers, is what makes it trusted, not the footer) */
	if (src->tl.format != TOC_ZSTD_CHUNKED) {
		r = fetch_range(reg, src, blob_digest, src->tl.blob_size - n, n, &tail, errbuf,
				errlen);
		if (r < 0)
			return r;
	}
	r = toc_locate(&src->tl, tail.data, tail.len, &src->where, errbuf, errlen);
	free(tail.data);
	if (r < 0)
		return r;
	if (src->where.length > TOC_MAX_BYTES)
		return errbuf_fail(-EBADMSG, errbuf, errlen,
				   "table of contents of %" PRIu64 " bytes", src->where.length);
	r = fetch_range(reg, src, blob_digest, src->where.offset, src->where.length, &body, errbuf,
			errlen);
	if (r < 0)
		return r;
	r = toc_parse(&src->tl, &src->where, body.data, body.len, lim, ret_toc, errbuf, errlen);
	if (r < 0) {
		free(body.data);
		return r;
	}
	*ret_buf = body.data;
	*ret_len = body.len;
	return 0;
}

/* ---- the "lazy" file ------------------------------------------------- */

int lazy_source_format(const struct lazy_source *s, char **ret)
{
	int n = asprintf(ret,
			 "%d %" PRIu64 " %s %" PRIu64 " %" PRIu64 " %" PRIu64 " %d %" PRIu64
			 " %" PRIu64 "\n%s\n%s\n%s",
			 (int)s->tl.format, s->tl.blob_size, s->tl.digest[0] ? s->tl.digest : "-",
			 s->tl.zc_offset, s->tl.zc_length, s->tl.zc_uncompressed,
			 s->tl.stargz_files ? 1 : 0, s->where.offset, s->where.length, s->domain,
			 s->repo, s->packs ? "packs\n" : "");

	return n < 0 ? -ENOMEM : 0;
}

int lazy_source_parse(const char *text, struct lazy_source *ret)
{
	struct lazy_source s = { 0 };
	int format, stargz, used = 0;
	char digest[DIGEST_STRING_MAX], domain[256], repo[256];

	if (sscanf(text,
		   "%d %" SCNu64 " %71s %" SCNu64 " %" SCNu64 " %" SCNu64 " %d %" SCNu64 " %" SCNu64
		   " %255s %255s%n",
		   &format, &s.tl.blob_size, digest, &s.tl.zc_offset, &s.tl.zc_length,
		   &s.tl.zc_uncompressed, &stargz, &s.where.offset, &s.where.length, domain, repo,
		   &used) != 11 ||
	    (format != TOC_ESTARGZ && format != TOC_ZSTD_CHUNKED))
		return -EBADMSG;
	s.tl.format = (enum toc_format)format;
	s.tl.stargz_files = stargz != 0;
	s.packs = !strcmp(text + used, "\npacks\n");
	if (strcmp(digest, "-") != 0)
		snprintf(s.tl.digest, sizeof(s.tl.digest), "%s", digest);
	s.domain = strdup(domain);
	s.repo = strdup(repo);
	if (!s.domain || !s.repo) {
		lazy_source_done(&s);
		return -ENOMEM;
	}
	*ret = s;
	return 0;
}

void lazy_source_done(struct lazy_source *s)
{
	free(s->domain);
	free(s->repo);
	s->domain = s->repo = NULL;
}

/* ---- a lazy layer ---------------------------------------------------- */

static int read_layer_file(int dirfd, const char *name, size_t max, char **ret, size_t *ret_len)
{
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return negative_errno();
	return read_full(fd, max, ret, ret_len);
}

int lazy_layer_dup_dir(struct lazy_layer *l)
{
	int fd = fcntl(l->dirfd, F_DUPFD_CLOEXEC, 0);

	return fd < 0 ? negative_errno() : fd;
}

bool lazy_layer_serves(struct cache *c, const char *digest, const struct toc_layer *tl)
{
	_cleanup_close_ int dirfd = cache_layer_open_dir(c, digest);
	_cleanup_free_ char *text = NULL;
	struct lazy_source s;
	size_t len;
	bool same;
	int r;

	if (dirfd < 0)
		return false;
	r = read_layer_file(dirfd, "lazy", 4096, &text, &len);
	if (r == -ENOENT)
		return true; /* verified against its digest */
	if (r < 0 || !tl || tl->format == TOC_NONE || lazy_source_parse(text, &s) < 0)
		return false;
	same = s.tl.format == tl->format && !strcmp(s.tl.digest, tl->digest);
	lazy_source_done(&s);
	return same;
}

enum lazy_verified lazy_layer_verified(struct cache *c, const char *digest)
{
	_cleanup_close_ int dirfd = cache_layer_open_dir(c, digest);

	if (dirfd < 0)
		return LAZY_VERIFIED_NONE;
	if (faccessat(dirfd, "lazy", F_OK, 0) < 0)
		return LAZY_VERIFIED_DIGEST;
	return faccessat(dirfd, LAZY_COMPLETE_FILE, F_OK, 0) == 0 ? LAZY_VERIFIED_TOC
								  : LAZY_VERIFIED_NONE;
}

static void lazy_file_free(struct lazy_file *f)
{
	if (!f)
		return;
	if (f->fd >= 0)
		close(f->fd);
	if (f->mapfd >= 0)
		close(f->mapfd);
	free(f->state);
	free(f->claim);
	pthread_mutex_destroy(&f->lock);
	pthread_cond_destroy(&f->cond);
	free(f);
}

void lazy_layer_free(struct lazy_layer *l)
{
	if (!l)
		return;
	for (size_t i = 0; l->file_of && i < l->toc->n_files; i++)
		lazy_file_free(l->file_of[i]);
	free(l->file_of);
	toc_free(l->toc);
	free(l->tocbuf);
	lazy_source_done(&l->src);
	free(l->blob_digest);
	if (l->keepfd >= 0)
		close(l->keepfd);
	free(l->kept);
	lazy_chain_drop(&l->chain);
	free(l->by_offset);
	free(l->spans);
	free(l->span_reach);
	free(l->members);
	tarhdr_free(l->proven_hdrs);
	free(l->slot_of);
	free(l->pack_off_of);
	if (l->pack_fd >= 0)
		close(l->pack_fd);
	if (l->pack_mapfd >= 0)
		close(l->pack_mapfd);
	if (l->dirfd >= 0)
		close(l->dirfd);
	pthread_mutex_destroy(&l->keep_lock);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

int lazy_layer_open(struct cache *c, const char *digest, struct lazy_stats *stats,
		    struct lazy_layer **ret)
{
	return lazy_layer_open_with(c, digest, stats, NULL, ret);
}

int lazy_layer_open_with(struct cache *c, const char *digest, struct lazy_stats *stats,
			 struct toc *files, struct lazy_layer **ret)
{
	_cleanup_free_ char *text = NULL, *tocbuf = NULL;
	size_t len, toclen;
	struct lazy_layer *l;
	char err[256];
	int r;

	l = calloc(1, sizeof(*l));
	if (!l) {
		toc_free(files);
		return -ENOMEM;
	}
	l->toc = files; /* (freed with l from here on) */
	pthread_mutex_init(&l->lock, NULL);
	pthread_mutex_init(&l->keep_lock, NULL);
	l->keepfd = l->pack_fd = l->pack_mapfd = -1;
	l->cache = c;
	l->stats = stats;
	l->dirfd = cache_layer_open_dir(c, digest);
	if (l->dirfd < 0) {
		r = l->dirfd;
		goto fail;
	}
	r = read_layer_file(l->dirfd, "lazy", 4096, &text, &len);
	if (r < 0)
		goto fail; /* -ENOENT: complete */
	if (faccessat(l->dirfd, LAZY_COMPLETE_FILE, F_OK, 0) == 0) {
		atomic_store(&l->complete, true);
		atomic_store(&l->toc_verified, true);
	}
	/* what an earlier process kept: its ranges were in its memory (a
	 * file that stays is not kept to) */
	if (unlinkat(l->dirfd, LAZY_BLOB_PART, 0) < 0 && errno != ENOENT)
		l->keep_off = true;
	r = lazy_source_parse(text, &l->src);
	if (r < 0)
		goto fail;
	r = read_layer_file(l->dirfd, "toc", TOC_MAX_BYTES, &tocbuf, &toclen);
	if (r < 0)
		goto fail;
	/* the tree of the image is built from the layer's index: this only
	 * fetches files, and a table holds many entries that are not */
	if (!l->toc)
		r = toc_parse_files(&l->src.tl, &l->src.where, tocbuf, toclen, &l->toc, err,
				    sizeof(err));
	if (r < 0)
		goto fail;
	mem_trim_after(l->toc->n_files);
	l->tocbuf = (unsigned char *)TAKE_PTR(tocbuf);
	l->toclen = toclen;
	l->blob_digest = strdup(digest);
	l->file_of = calloc(MAX(l->toc->n_files, 1), sizeof(*l->file_of));
	if (!l->blob_digest || !l->file_of || lazy_pack_plan(l) < 0) {
		r = -ENOMEM;
		goto fail;
	}
	*ret = l;
	return 0;
fail:
	lazy_layer_free(l);
	return r == -EFBIG ? -EBADMSG : r;
}

/* Opens f's descriptors again after they were parked.  l->lock held,
 * users 0, so f->complete does not change meanwhile. */
static int file_reopen(struct lazy_layer *l, struct lazy_file *f)
{
	char name[DIGEST_HEX_LEN + 8];

	if (f->packed)
		return 0; /* the layer's descriptors */
	if (f->complete) {
		f->fd = cache_object_openat(l->dirfd, f->object);
		return f->fd < 0 ? f->fd : 0;
	}
	if (!f->made)
		return 0;
	snprintf(name, sizeof(name), "p.%s", f->object);
	f->fd = openat(l->dirfd, name, O_RDWR | O_CLOEXEC);
	snprintf(name, sizeof(name), "p.%s.map", f->object);
	if (!f->mapless)
		f->mapfd = openat(l->dirfd, name, O_RDWR | O_CLOEXEC);
	if (f->fd >= 0 && (f->mapfd >= 0 || f->mapless))
		return 0;
	/* (removed behind our back: the next reader sees the error) */
	if (f->fd >= 0)
		close(f->fd);
	if (f->mapfd >= 0)
		close(f->mapfd);
	f->fd = f->mapfd = -1;
	return -EIO;
}

/* Makes f's descriptors usable until lazy_file_put(); l->lock held. */
static int file_hold_locked(struct lazy_layer *l, struct lazy_file *f)
{
	if (f->users == 0) {
		dlist_remove(&l->idle, &f->idle_node);
		if (f->fd < 0) {
			int r = file_reopen(l, f);

			if (r < 0)
				return r;
		}
	}
	f->users++;
	return 0;
}

int lazy_file_hold(struct lazy_layer *l, struct lazy_file *f)
{
	int r;

	pthread_mutex_lock(&l->lock);
	r = file_hold_locked(l, f);
	pthread_mutex_unlock(&l->lock);
	return r;
}

/* Gives up a hold: the file joins the idle ones, and the oldest idle
 * ones beyond LAZY_IDLE_FILES close their descriptors. */
void lazy_file_put(struct lazy_layer *l, struct lazy_file *f)
{
	pthread_mutex_lock(&l->lock);
	if (--f->users == 0)
		dlist_push(&l->idle, &f->idle_node);
	while (l->idle.len > LAZY_IDLE_FILES) {
		struct lazy_file *old = dlist_entry(l->idle.head, struct lazy_file, idle_node);

		dlist_remove(&l->idle, &old->idle_node);
		if (old->fd >= 0)
			close(old->fd);
		if (old->mapfd >= 0)
			close(old->mapfd);
		old->fd = old->mapfd = -1;
	}
	pthread_mutex_unlock(&l->lock);
}

struct lazy_file *lazy_file_peek_locked(struct lazy_layer *l, const char *object)
{
	ssize_t i = toc_find_file(l->toc, object);

	return i < 0 ? NULL : l->file_of[i];
}

/* The state of the file with content object, made at its first use from
 * what is on disk, held (lazy_file_put() gives it back). */
int lazy_file_get(struct lazy_layer *l, const char *object, struct lazy_file **ret)
{
	char name[DIGEST_HEX_LEN + 8];
	struct lazy_file *f = NULL;
	ssize_t i;
	int r = 0;

	pthread_mutex_lock(&l->lock);
	i = toc_find_file(l->toc, object);
	if (i < 0) {
		r = -ENOENT;
		goto out;
	}
	f = l->file_of[i];
	if (f) {
		r = file_hold_locked(l, f);
		goto out;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		r = -ENOMEM;
		goto out;
	}
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	f->fd = f->mapfd = -1;
	snprintf(f->object, sizeof(f->object), "%s", object);
	f->chunks = toc_entry_chunks(l->toc, (size_t)i, &f->n);
	f->size = l->toc->files[i].size;
	f->state = calloc(f->n ? f->n : 1, 1);
	f->claim = calloc(f->n ? f->n : 1, sizeof(*f->claim));
	if (!f->state || !f->claim) {
		r = -ENOMEM;
		goto fail;
	}
	f->slot = lazy_pack_slot(l, (size_t)i);
	if (f->slot != SIZE_MAX) {
		r = lazy_pack_open_locked(l);
		if (r < 0)
			goto fail;
		f->packed = f->made = true;
		atomic_store(&f->named, true);
		f->pack_off = l->pack_off_of[i];
		/* (under the layer's lock, which the map's reader takes:
		 * its descriptor is open, read directly) */
		for (size_t k = 0; k < f->n; k++) {
			char c;

			if (pread(l->pack_mapfd, &c, 1, (off_t)(f->slot + k)) == 1 && c == '1')
				f->state[k] = CHUNK_PRESENT;
		}
		f->complete = true;
		for (size_t k = 0; k < f->n; k++)
			f->complete = f->complete && f->state[k] == CHUNK_PRESENT;
		goto put;
	}
	f->fd = cache_object_openat(l->dirfd, object);
	if (f->fd >= 0) {
		f->complete = true; /* fetched before, or shared at publishing */
		goto put;
	}
	/* stored by another layer (a partial pull): linked, not fetched,
	 * when public (a table of contents may name the contents of a
	 * private image's files, which only their blob may bring); what a
	 * fetch before left is dropped */
	if (cache_object_public(l->cache, object) &&
	    cache_object_enter(l->cache, l->dirfd, object) == 0 &&
	    (f->fd = cache_object_openat(l->dirfd, object)) >= 0) {
		f->complete = true;
		snprintf(name, sizeof(name), "p.%s", object);
		unlinkat(l->dirfd, name, 0);
		snprintf(name, sizeof(name), "p.%s.map", object);
		unlinkat(l->dirfd, name, 0);
		if (l->stats) {
			atomic_fetch_add(&l->stats->files_linked, 1);
			atomic_fetch_add(&l->stats->saved_bytes,
					 lazy_chunks_bytes(f->chunks, f->n));
		}
		goto put;
	}
	/* chunks written before a restart, if any: the map says which
	 * (anything else in it is taken as missing); a data file without
	 * its map is made again */
	snprintf(name, sizeof(name), "p.%s.map", object);
	f->mapfd = openat(l->dirfd, name, O_RDWR | O_CLOEXEC);
	if (f->mapfd >= 0) {
		snprintf(name, sizeof(name), "p.%s", object);
		f->fd = openat(l->dirfd, name, O_RDWR | O_CLOEXEC);
		if (f->fd < 0) {
			close(f->mapfd);
			f->mapfd = -1;
		}
	} else if (errno != ENOENT) {
		r = negative_errno();
		goto fail;
	}
	f->made = f->fd >= 0;
	for (size_t k = 0; f->made && k < f->n; k++) {
		char c;

		if (pread(f->mapfd, &c, 1, (off_t)k) == 1 && c == '1')
			f->state[k] = CHUNK_PRESENT;
	}
put:
	l->file_of[i] = f;
	f->users = 1;
	lazy_changed(l);
out:
	pthread_mutex_unlock(&l->lock);
	*ret = f;
	return r;
fail:
	pthread_mutex_unlock(&l->lock);
	lazy_file_free(f);
	return r;
}

/* Fetches chunks a..e (adjacent in the blob) with one Range request and
 * writes each, verified, at its place; the map byte follows the data. */
/* Decompressed bytes of a chunk, in pieces: written at their place. */
struct chunk_write {
	int fd;
	uint64_t offset;      /* of the chunk in the file */
	struct hasher *whole; /* the file's, fed in order; NULL: none */
};

static int chunk_write_sink(void *userdata, uint64_t off, const void *buf, size_t len)
{
	const struct chunk_write *w = userdata;

	if (pwrite(w->fd, buf, len, (off_t)(w->offset + off)) != (ssize_t)len)
		return errno == ENOSPC ? -ENOSPC : -EIO;
	if (w->whole)
		hasher_update(w->whole, buf, len);
	return 0;
}

/* Whether f is one chunk whose digest is the file's: that chunk, once it
 * matched, is the file checked whole. */
static bool whole_chunk(const struct lazy_file *f)
{
	const struct toc_chunk *c = &f->chunks[0];

	return f->n == 1 && c->offset == 0 && c->size == f->size &&
	       !strncmp(c->digest, "sha256:", 7) && !strcmp(c->digest + 7, f->object);
}

/* Makes f's data file (its size, holes where chunks are missing) and,
 * unless mapless, its map, once; f is held. */
static int file_make(struct lazy_layer *l, struct lazy_file *f, bool mapless)
{
	char name[DIGEST_HEX_LEN + 8];
	int fd = -1, mapfd = -1, r = 0;

	pthread_mutex_lock(&l->lock);
	if (f->made || f->complete)
		goto out;
	snprintf(name, sizeof(name), "p.%s", f->object);
	fd = openat(l->dirfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	snprintf(name, sizeof(name), "p.%s.map", f->object);
	if (fd >= 0 && !mapless)
		mapfd = openat(l->dirfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || (mapfd < 0 && !mapless) || ftruncate(fd, (off_t)f->size) < 0) {
		r = negative_errno();
		if (fd >= 0)
			close(fd);
		if (mapfd >= 0)
			close(mapfd);
		goto out;
	}
	f->fd = fd;
	f->mapfd = mapfd;
	f->made = true;
	f->mapless = mapless;
out:
	pthread_mutex_unlock(&l->lock);
	return r;
}

/* The writeback of what the completion writes starts as it goes (the
 * commit's flush then waits for little more than the last of it), a
 * block of this many bytes at a time: it writes each file, and the pack,
 * in order. */
#define WRITEBACK_BLOCK (UINT64_C(4) << 20)

/* len bytes were written at off of fd: the blocks they complete go. */
static void writeback_start(int fd, uint64_t off, uint64_t len)
{
	uint64_t from = off / WRITEBACK_BLOCK * WRITEBACK_BLOCK,
		 to = (off + len) / WRITEBACK_BLOCK * WRITEBACK_BLOCK;

	if (to > from)
		(void)sync_file_range(fd, (off_t)from, (off_t)(to - from), SYNC_FILE_RANGE_WRITE);
}

/* Chunk k of f from its compressed bytes src: written and verified (its
 * state keeps every reader away from its bytes until it is present), and
 * with mark, flushed and then marked in the map.  Without, the caller
 * flushes and marks (the completion: one syncfs for many
 * chunks).  dst is a buffer the caller keeps (grown here to
 * LAZY_CHUNK_PIECE at most: a chunk of hundreds of MB decompresses
 * through it a piece at a time). */
int lazy_write_chunk(struct lazy_layer *l, struct lazy_file *f, size_t k, const void *src,
		     void **dst, bool mark, struct hasher *whole)
{
	const struct toc_chunk *c = &f->chunks[k];
	size_t piece = (size_t)MAX(MIN(c->size, (uint64_t)LAZY_CHUNK_PIECE), (uint64_t)1);
	struct chunk_write w = { .offset = c->offset, .whole = whole };
	void *n;
	char err[256];
	int r;

	/* (the completion's own file of one chunk needs no map: it is an
	 * object at the commit that flushes it) */
	r = file_make(l, f, !mark && whole_chunk(f));
	if (r < 0)
		return r;
	w.fd = f->packed ? l->pack_fd : f->fd;
	w.offset += f->packed ? f->pack_off : 0;
	n = realloc(*dst, piece);
	if (!n)
		return -ENOMEM;
	*dst = n;
	r = toc_chunk_stream(l->src.tl.format, c, src, c->blob_length, n, piece, chunk_write_sink,
			     &w, !whole, err, sizeof(err));
	if (r == -EBADMSG || r == -EINVAL)
		return -EBADMSG; /* the registry sent what the TOC does not say */
	if (r < 0)
		return r;
	if (!mark) {
		writeback_start(w.fd, w.offset, c->size);
		atomic_store(&f->unflushed, true);
		return 0;
	}
	/* Across a power cut too the map never runs ahead of the data: the
	 * chunk is on stable storage before its bit is written, and the
	 * names of both files before the first bit (a map that outlived
	 * its data file would mark holes present). */
	r = flush_data(w.fd);
	if (r == 0 && !atomic_load(&f->named)) {
		r = flush_dir(l->dirfd);
		if (r == 0)
			atomic_store(&f->named, true);
	}
	if (r < 0)
		return r;
	if (f->packed ? pwrite(l->pack_mapfd, "1", 1, (off_t)(f->slot + k)) != 1
		      : pwrite(f->mapfd, "1", 1, (off_t)k) != 1)
		return errno == ENOSPC ? -ENOSPC : -EIO;
	return 0;
}

int lazy_hash_back(int fd, uint64_t off, uint64_t len, struct hasher *h, void *buf, size_t buf_len)
{
	for (uint64_t done = 0; done < len;) {
		ssize_t n = pread(fd, buf, (size_t)MIN(len - done, (uint64_t)buf_len),
				  (off_t)(off + done));

		if (n <= 0)
			return -EIO;
		hasher_update(h, buf, (size_t)n);
		done += (uint64_t)n;
	}
	return 0;
}

/* Chunk k of f, read back from its file and checked against its own
 * digest: 0, -EBADMSG, or -errno.  f held, f->lock held. */
static int chunk_check(struct lazy_file *f, size_t k)
{
	const struct toc_chunk *c = &f->chunks[k];
	_cleanup_(hasher_freep) struct hasher *h = NULL;
	char got[DIGEST_STRING_MAX];
	_cleanup_free_ char *buf = NULL;
	size_t piece = (size_t)MAX(MIN(c->size, (uint64_t)LAZY_CHUNK_PIECE), (uint64_t)1);
	int r;

	if (!c->digest[0] || f->packed || f->fd < 0)
		return -EBADMSG;
	h = hasher_new();
	buf = malloc(piece);
	if (!h || !buf)
		return -ENOMEM;
	r = lazy_hash_back(f->fd, c->offset, c->size, h, buf, piece);
	if (r < 0)
		return r;
	hasher_final(h, got);
	return strcmp(got, c->digest) == 0 ? 0 : -EBADMSG;
}

size_t lazy_written_settle(struct lazy_layer *l, struct lazy_file *f, bool matched)
{
	size_t bad = 0, good = 0;

	for (size_t k = 0; k < f->n; k++) {
		if (f->state[k] != CHUNK_WRITTEN)
			continue;
		f->state[k] = matched || chunk_check(f, k) == 0 ? CHUNK_PRESENT : CHUNK_MISSING;
		bad += f->state[k] == CHUNK_MISSING;
		good += f->state[k] == CHUNK_PRESENT;
	}
	if (good > 0)
		lazy_changed(l);
	pthread_cond_broadcast(&f->cond);
	return bad;
}

/* ---- neighbours ------------------------------------------------------- */

/* Small files after a reader's file that its request brings along. */
struct near {
	struct lazy_file *files[LAZY_NEAR_MAX]; /* held */
	size_t n;
	uint64_t end; /* in the blob, of the last one's chunks */
};

static uint64_t first_offset(const struct lazy_layer *l, size_t i)
{
	size_t n;
	const struct toc_chunk *c = toc_entry_chunks(l->toc, i, &n);

	return n > 0 ? c[0].blob_offset : UINT64_MAX;
}

static int cmp_first_offset(const void *a, const void *b, void *arg)
{
	uint64_t x = first_offset(arg, *(const size_t *)a),
		 y = first_offset(arg, *(const size_t *)b);

	return x < y ? -1 : x > y;
}

/* l->by_offset, made once; l->lock held. */
static int by_offset_locked(struct lazy_layer *l)
{
	size_t *v, n = 0;

	if (l->by_offset)
		return 0;
	v = malloc(MAX(l->toc->n_files, 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < l->toc->n_files; i++)
		if (first_offset(l, i) != UINT64_MAX)
			v[n++] = i;
	qsort_r(v, n, sizeof(*v), cmp_first_offset, l);
	l->by_offset = v;
	l->n_by_offset = n;
	return 0;
}

/* The table's files after blob offset from whose chunks all end before
 * limit, in blob order, at most LAZY_NEAR_MAX (their indexes in ret). */
static size_t near_candidates(struct lazy_layer *l, uint64_t from, uint64_t limit,
			      size_t ret[LAZY_NEAR_MAX])
{
	size_t lo = 0, hi, n = 0;

	pthread_mutex_lock(&l->lock);
	if (by_offset_locked(l) < 0) {
		pthread_mutex_unlock(&l->lock);
		return 0;
	}
	hi = l->n_by_offset;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (first_offset(l, l->by_offset[mid]) < from)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t j = lo; j < l->n_by_offset && n < LAZY_NEAR_MAX; j++) {
		size_t nc, i = l->by_offset[j];
		const struct toc_chunk *c = toc_entry_chunks(l->toc, i, &nc);

		if (c[nc - 1].blob_offset + c[nc - 1].blob_length > limit)
			break;
		ret[n++] = i;
	}
	pthread_mutex_unlock(&l->lock);
	return n;
}

/* Claims for claim every chunk of the small files after blob offset
 * from, as near_candidates() finds them, up to the first that is not
 * wholly missing (or whose chunks cannot be checked alone): held, each
 * counted in its fetches. */
static void near_claim(struct lazy_layer *l, uint64_t from, const struct lazy_claim *claim,
		       struct near *nb)
{
	uint64_t landed = atomic_load(&l->near_landed), read = atomic_load(&l->near_read);
	uint64_t budget = LAZY_NEAR_BYTES * MIN(read + 1, landed + 1) / (landed + 1);
	size_t cand[LAZY_NEAR_MAX], n = near_candidates(l, from, from + budget, cand);

	*nb = (struct near){ .end = from };
	for (size_t j = 0; j < n; j++) {
		struct lazy_file *g;
		bool ok;

		if (lazy_file_get(l, l->toc->files[cand[j]].object, &g) < 0)
			break;
		pthread_mutex_lock(&g->lock);
		ok = !g->complete && g->n > 0;
		for (size_t k = 0; k < g->n && ok; k++)
			ok = g->state[k] == CHUNK_MISSING && g->chunks[k].digest[0];
		for (size_t k = 0; k < g->n && ok; k++) {
			g->state[k] = CHUNK_FETCHING;
			g->claim[k] = claim;
		}
		if (ok)
			g->fetches++;
		pthread_mutex_unlock(&g->lock);
		if (!ok) {
			lazy_file_put(l, g);
			break;
		}
		nb->files[nb->n++] = g;
		nb->end = g->chunks[g->n - 1].blob_offset + g->chunks[g->n - 1].blob_length;
	}
}

static int finish_file(struct lazy_layer *l, struct lazy_file *f);

/* The files nb claimed, from buf (the blob from start on, len bytes;
 * NULL: the request failed): each chunk written and present, or missing
 * again; a file with every chunk is checked whole and made an object.
 * Given up after. */
static void near_land(struct lazy_layer *l, struct near *nb, const struct lazy_claim *claim,
		      const char *buf, uint64_t start, uint64_t len, void **dst)
{
	for (size_t i = 0; i < nb->n; i++) {
		struct lazy_file *g = nb->files[i];
		bool all = true;

		for (size_t k = 0; k < g->n; k++) {
			const struct toc_chunk *c = &g->chunks[k];
			int r = -EIO;

			if (buf && c->blob_offset + c->blob_length <= start + len)
				r = lazy_write_chunk(l, g, k, buf + (c->blob_offset - start), dst,
						     true, NULL);
			if (r == 0)
				atomic_store(&g->near_unread, true);
			pthread_mutex_lock(&g->lock);
			if (g->claim[k] == claim) {
				g->claim[k] = NULL;
				g->state[k] = r == 0 ? CHUNK_PRESENT : CHUNK_MISSING;
			}
			pthread_cond_broadcast(&g->cond);
			pthread_mutex_unlock(&g->lock);
		}
		pthread_mutex_lock(&g->lock);
		g->fetches--;
		for (size_t k = 0; k < g->n && all; k++)
			all = g->state[k] == CHUNK_PRESENT;
		if (all)
			atomic_fetch_add(&l->near_landed, 1);
		if (all && !g->complete && g->fetches == 0)
			(void)finish_file(l, g);
		pthread_cond_broadcast(&g->cond);
		pthread_mutex_unlock(&g->lock);
		lazy_changed(l);
		lazy_file_put(l, g);
	}
	nb->n = 0;
}

static int fetch_run(struct lazy_layer *l, struct registry *reg, struct lazy_file *f, size_t a,
		     size_t e, bool foreground, struct near *nb, const struct lazy_claim *claim)
{
	const struct toc_chunk *first = &f->chunks[a], *last = &f->chunks[e];
	uint64_t start = first->blob_offset, t0 = now_us();
	uint64_t end = MAX(last->blob_offset + last->blob_length, nb ? nb->end : 0);
	struct membuf b = { 0 };
	void *dst = NULL;
	bool fetched;
	int r;

	r = fetch_range(reg, &l->src, l->blob_digest, start, end - start, &b, NULL, 0);
	fetched = r == 0;
	if (foreground && r == 0)
		atomic_fetch_add(&l->reader_us, now_us() - t0);
	if (l->stats) {
		atomic_fetch_add(&l->stats->fetches, 1);
		if (r < 0)
			atomic_fetch_add(&l->stats->failures, 1);
		else
			atomic_fetch_add(&l->stats->bytes, b.len);
		if (r == 0 && !foreground)
			atomic_fetch_add(&l->stats->background_bytes, b.len);
		if (foreground)
			lazy_stats_observe(l->stats, now_us() - t0);
	}
	if (r == 0)
		lazy_blob_keep(l, start, b.data, b.len);
	for (size_t k = a; k <= e && r == 0; k++)
		r = lazy_write_chunk(l, f, k, b.data + (f->chunks[k].blob_offset - start), &dst,
				     true, NULL);
	if (nb)
		near_land(l, nb, claim, fetched ? b.data : NULL, start, fetched ? b.len : 0, &dst);
	free(dst);
	free(b.data);
	return r;
}

/* f was renamed o.OBJ: its map goes, it is complete, and shared.
 * f->lock held. */
static void file_published(struct lazy_layer *l, struct lazy_file *f)
{
	char name[DIGEST_HEX_LEN + 8];

	if (f->mapfd >= 0) {
		snprintf(name, sizeof(name), "p.%s.map", f->object);
		unlinkat(l->dirfd, name, 0);
		close(f->mapfd);
		f->mapfd = -1;
	}
	f->complete = true;
	if (l->stats)
		atomic_fetch_add(&l->stats->files_complete, 1);
	/* shared with the layers that have the same content (failure only
	 * costs sharing) */
	cache_object_enter(l->cache, l->dirfd, f->object);
	lazy_changed(l);
}

/* A packed file is complete: each chunk matched its digest as it came;
 * what the completion wrote is flushed before its bytes in the map.
 * f->lock held. */
static int finish_packed(struct lazy_layer *l, struct lazy_file *f)
{
	if (atomic_exchange(&f->unflushed, false)) {
		int r = flush_data(l->pack_fd);

		if (r == 0)
			r = lazy_pack_mark(l, f->slot, f->n);
		if (r < 0) {
			atomic_store(&f->unflushed, true);
			return r;
		}
	}
	f->complete = true;
	if (l->stats)
		atomic_fetch_add(&l->stats->files_complete, 1);
	lazy_changed(l);
	return 0;
}

/* Every chunk is there: the whole file must hash to its name before it
 * becomes an object.  f->lock held. */
static int finish_file(struct lazy_layer *l, struct lazy_file *f)
{
	char digest[DIGEST_STRING_MAX], name[DIGEST_HEX_LEN + 8], done[DIGEST_HEX_LEN + 8];
	struct hasher *h;
	char *buf;
	int r = 0;

	if (f->packed)
		return finish_packed(l, f);
	h = hasher_new();
	buf = malloc(1 << 20);
	if (!h || !buf) {
		r = -ENOMEM;
		goto out;
	}
	r = lazy_hash_back(f->fd, 0, f->size, h, buf, 1 << 20);
	if (r < 0)
		goto out;
	hasher_final(h, digest);
	if (strcmp(digest_hex(digest), f->object) != 0) {
		/* fetch it all again next time */
		for (size_t k = 0; k < f->n; k++)
			f->state[k] = CHUNK_MISSING;
		r = ftruncate(f->mapfd, 0) < 0 ? -EIO : -EBADMSG;
		goto out;
	}
	/* chunks a reader fetched were flushed before their bit; those of
	 * the completion by its syncfs, unless this comes first */
	if (atomic_exchange(&f->unflushed, false)) {
		r = flush_data(f->fd);
		if (r < 0) {
			atomic_store(&f->unflushed, true);
			goto out;
		}
	}
	fchmod(f->fd, 0444);
	snprintf(name, sizeof(name), "p.%s", f->object);
	snprintf(done, sizeof(done), "o.%s", f->object);
	if (renameat(l->dirfd, name, l->dirfd, done) < 0) {
		r = negative_errno();
		goto out;
	}
	file_published(l, f);
out:
	hasher_free(h);
	free(buf);
	return r;
}

void lazy_file_publish(struct lazy_layer *l, struct lazy_file *f, bool hashed)
{
	char name[DIGEST_HEX_LEN + 8], done[DIGEST_HEX_LEN + 8];
	bool all = true;

	bool renamed = false;

	pthread_mutex_lock(&f->lock);
	for (size_t k = 0; k < f->n && all; k++)
		all = f->state[k] == CHUNK_PRESENT;
	if (f->packed) {
		/* its bytes flushed by the caller's commit */
		if (!f->complete && all && f->n > 0 && lazy_pack_mark(l, f->slot, f->n) == 0) {
			atomic_store(&f->unflushed, false);
			f->complete = true;
			if (l->stats)
				atomic_fetch_add(&l->stats->files_complete, 1);
			lazy_changed(l);
		}
		pthread_mutex_unlock(&f->lock);
		return;
	}
	/* By name: the caller need not hold f (a file of one chunk is
	 * mostly parked by then, and opening it again for this cost more
	 * than the rest).  Under the layer's lock, which a parked file is
	 * opened again under: it finds p.OBJ, or o.OBJ and f complete. */
	pthread_mutex_lock(&l->lock);
	if (!f->complete && (f->mapless || hashed) && f->made && all) {
		snprintf(name, sizeof(name), "p.%s", f->object);
		snprintf(done, sizeof(done), "o.%s", f->object);
		fchmodat(l->dirfd, name, 0444, 0);
		/* (failing, the file is finished as any other) */
		if (renameat(l->dirfd, name, l->dirfd, done) == 0) {
			f->complete = true;
			renamed = true;
		}
	}
	pthread_mutex_unlock(&l->lock);
	if (renamed) {
		atomic_store(&f->unflushed, false); /* by the commit */
		file_published(l, f);
	}
	pthread_mutex_unlock(&f->lock);
}

/* Makes chunks a..b of f present; foreground: for a reader who waits. */
/* A run of chunks adjacent in the blob, fetched as one range. */
struct run {
	size_t a, e;
};

struct runs_fetch {
	struct membuf *bufs;
};

static int runs_sink(void *userdata, size_t index, const void *buf, size_t len)
{
	struct runs_fetch *rf = userdata;

	return membuf_sink(&rf->bufs[index], buf, len);
}

/* Runs of f's chunks in one request (several ranges where the registry
 * allows it), each chunk verified and written. */
static int fetch_runs(struct lazy_layer *l, struct registry *reg, struct lazy_file *f,
		      const struct run *runs, size_t n, bool foreground, struct near *nb,
		      const struct lazy_claim *claim)
{
	struct registry_range rg[LAZY_RANGES_MAX];
	struct membuf bufs[LAZY_RANGES_MAX] = { 0 };
	struct runs_fetch rf = { .bufs = bufs };
	struct error_detail rerr = { 0 };
	uint64_t t0 = now_us(), bytes = 0;
	void *dst = NULL;
	int r = 0;

	if (n == 1)
		return fetch_run(l, reg, f, runs[0].a, runs[0].e, foreground, nb, claim);
	for (size_t i = 0; i < n && r == 0; i++) {
		const struct toc_chunk *first = &f->chunks[runs[i].a],
				       *last = &f->chunks[runs[i].e];

		rg[i] = (struct registry_range){ first->blob_offset, last->blob_offset +
									     last->blob_length -
									     first->blob_offset };
		bufs[i].cap = rg[i].length;
		bufs[i].data = malloc(rg[i].length);
		if (!bufs[i].data)
			r = -ENOMEM;
	}
	if (r == 0)
		r = registry_get_blob_ranges(reg, l->src.domain, l->src.repo, l->blob_digest,
					     l->src.tl.blob_size, rg, n, runs_sink, &rf, &rerr);
	for (size_t i = 0; i < n && r == 0; i++) {
		bytes += bufs[i].len;
		if (bufs[i].len != rg[i].length)
			r = -EBADMSG;
	}
	if (foreground && r == 0)
		atomic_fetch_add(&l->reader_us, now_us() - t0);
	if (l->stats) {
		atomic_fetch_add(&l->stats->fetches, 1);
		if (r < 0)
			atomic_fetch_add(&l->stats->failures, 1);
		else
			atomic_fetch_add(&l->stats->bytes, bytes);
		if (r == 0 && !foreground)
			atomic_fetch_add(&l->stats->background_bytes, bytes);
		if (foreground)
			lazy_stats_observe(l->stats, now_us() - t0);
	}
	for (size_t i = 0; i < n && r == 0; i++)
		lazy_blob_keep(l, rg[i].offset, bufs[i].data, bufs[i].len);
	for (size_t i = 0; i < n && r == 0; i++)
		for (size_t k = runs[i].a; k <= runs[i].e && r == 0; k++)
			r = lazy_write_chunk(
				l, f, k, bufs[i].data + (f->chunks[k].blob_offset - rg[i].offset),
				&dst, true, NULL);
	for (size_t i = 0; i < n; i++)
		free(bufs[i].data);
	free(dst);
	return r;
}

/* Whether a reader who asks for need compressed bytes waits for chunk k,
 * which another request brings: when that request brings no more than
 * the reader asks for (readers of the same bytes share a fetch), or the
 * chunk is being written already.  Else the reader claims the chunk
 * again and fetches it on its own: a small read never waits for the
 * bytes of a larger one, which a slow registry may take long to send.
 * f->lock held. */
static bool chunk_waited_for(const struct lazy_file *f, size_t k, uint64_t need, bool foreground)
{
	const struct lazy_claim *c = f->claim[k];

	if (!foreground || !c)
		return true;
	if (c->streams)
		return clock_mono_ns() - atomic_load(&c->heard_ns) < LAZY_CLAIM_QUIET_NS;
	return c->bytes <= need;
}

/* Makes chunks a..b of f present; foreground: for a reader who waits. */
int lazy_ensure_chunks(struct lazy_layer *l, struct registry *reg, struct lazy_file *f, size_t a,
		       size_t b, bool foreground)
{
	struct run runs[LAZY_RANGES_MAX];
	uint64_t need = 0;
	int r = 0;

	pthread_mutex_lock(&f->lock);
	for (size_t k = a; k <= b && k < f->n && !f->complete; k++)
		if (f->state[k] != CHUNK_PRESENT)
			need += f->chunks[k].blob_length;
	while (!f->complete && f->n > 0) {
		struct lazy_claim mine = { 0 };
		uint64_t total = 0;
		bool others = false;
		size_t n = 0;

		/* claim the missing chunks one request can bring: runs of
		 * chunks adjacent in the blob, several ranges at most
		 * LAZY_RUN_MAX bytes in all; chunks another request brings
		 * are waited for after, or claimed again */
		for (size_t k = a; k <= b; k++) {
			const struct toc_chunk *c = &f->chunks[k];

			/* written by the completion, whose hash of the whole
			 * file has yet to check it: checked here, alone */
			if (f->state[k] == CHUNK_WRITTEN)
				f->state[k] =
					chunk_check(f, k) == 0 ? CHUNK_PRESENT : CHUNK_MISSING;
			if (f->state[k] == CHUNK_PRESENT)
				continue;
			if (f->state[k] == CHUNK_FETCHING &&
			    chunk_waited_for(f, k, need, foreground)) {
				others = true;
				continue;
			}
			if (n > 0 && total + c->blob_length > LAZY_RUN_MAX)
				break;
			if (n > 0 && runs[n - 1].e == k - 1 &&
			    c->blob_offset ==
				    f->chunks[k - 1].blob_offset + f->chunks[k - 1].blob_length) {
				runs[n - 1].e = k;
			} else if (n < LAZY_RANGES_MAX) {
				runs[n++] = (struct run){ k, k };
			} else {
				break;
			}
			f->state[k] = CHUNK_FETCHING;
			f->claim[k] = &mine;
			total += c->blob_length;
		}
		if (n == 0) {
			/* the completion, which must see the file finished,
			 * waits for the last request under way, which finishes
			 * it; a reader has its bytes */
			if (!others && (foreground || f->fetches == 0))
				break;
			if (foreground) {
				/* a reader looks again now and then: the
				 * request it waits for may stall */
				struct timespec t = clock_real_deadline(250 * INT64_C(1000000));

				pthread_cond_timedwait(&f->cond, &f->lock, &t);
			} else {
				pthread_cond_wait(&f->cond, &f->lock);
			}
			continue;
		}
		mine.bytes = total;
		f->fetches++;
		/* (counted before the claims show: the completion, seeing a
		 * chunk claimed, sees a reader fetching) */
		if (foreground && l->stats)
			atomic_fetch_add(&l->stats->foreground, 1);
		pthread_mutex_unlock(&f->lock);
		/* a reader's small file, all of it: the small files after
		 * it come along; their readers wait for this small request
		 * (their claim's bytes: none beyond theirs) */
		struct near nb = { 0 };
		struct lazy_claim near_mine = { 0 };
		uint64_t run_end =
			f->chunks[runs[0].e].blob_offset + f->chunks[runs[0].e].blob_length;

		if (foreground && n == 1 && f->size <= LAZY_NEAR_FILE && runs[0].a == 0 &&
		    runs[0].e == f->n - 1)
			near_claim(l, run_end, &near_mine, &nb);
		r = fetch_runs(l, reg, f, runs, n, foreground, &nb, &near_mine);
		if (foreground && l->stats) {
			atomic_fetch_sub(&l->stats->foreground, 1);
			if (r == 0)
				atomic_fetch_add(&l->stats->reader_ok, 1);
		}
		if (foreground && r == 0) {
			atomic_fetch_add(&l->reader_fetches, 1);
			atomic_fetch_add(&l->reader_bytes, total);
		}
		pthread_mutex_lock(&f->lock);
		f->fetches--;
		/* the chunks still this request's (a reader may have claimed
		 * some again meanwhile) */
		for (size_t i = 0; i < n; i++)
			for (size_t j = runs[i].a; j <= runs[i].e; j++) {
				if (f->claim[j] != &mine)
					continue;
				f->claim[j] = NULL;
				f->state[j] = r == 0 ? CHUNK_PRESENT : CHUNK_MISSING;
			}
		if (r == 0)
			lazy_changed(l);
		pthread_cond_broadcast(&f->cond);
		if (r < 0)
			break;
	}
	/* (a request still under way may still write: the file is checked
	 * and renamed by the last one; chunks the completion wrote and has
	 * yet to commit, by its commit, which for a file it brought in order
	 * hashed it whole on the way: a reader has its bytes, and checking
	 * the file again would read it all back) */
	if (r == 0 && !f->complete && f->fetches == 0 &&
	    !(foreground && atomic_load(&f->unflushed))) {
		bool all = true;

		for (size_t k = 0; k < f->n && all; k++)
			all = f->state[k] == CHUNK_PRESENT;
		if (all)
			r = finish_file(l, f);
	}
	pthread_mutex_unlock(&f->lock);
	return r;
}

/* Whether each chunk of f can be checked by itself (a digest of its own,
 * or the file's for a file in one chunk). */
static bool chunks_digested(const struct lazy_file *f)
{
	for (size_t k = 0; k < f->n; k++)
		if (!f->chunks[k].digest[0])
			return false;
	return true;
}

static bool lazy_file_complete(struct lazy_file *f)
{
	bool done;

	pthread_mutex_lock(&f->lock);
	done = f->complete;
	pthread_mutex_unlock(&f->lock);
	return done;
}

ssize_t lazy_read(struct lazy_layer *l, struct registry *reg, const char *object, uint64_t off,
		  size_t size, void *buf)
{
	struct lazy_file *f;
	size_t a = 0, b;
	ssize_t n;
	int r;

	r = lazy_file_get(l, object, &f);
	if (r < 0)
		return r;
	if (off >= f->size || size == 0) {
		lazy_file_put(l, f);
		return 0;
	}
	size = (size_t)MIN((uint64_t)size, f->size - off);
	/* (a load first: no write on every read) */
	if (atomic_load(&f->near_unread) && atomic_exchange(&f->near_unread, false)) {
		atomic_fetch_add(&l->reader_fetches, 1);
		atomic_fetch_add(&l->near_read, 1);
	}
	if (!f->complete && f->n > 0) {
		bool whole = !chunks_digested(f);

		while (a + 1 < f->n && f->chunks[a + 1].offset <= off)
			a++;
		b = a;
		while (b + 1 < f->n && f->chunks[b + 1].offset < off + size)
			b++;
		/* a chunk the table gives no digest for is checked only
		 * with the whole file: no byte of it before that */
		if (whole) {
			a = 0;
			b = f->n - 1;
		}
		r = lazy_ensure_chunks(l, reg, f, a, b, true);
		if (r == 0 && whole && !lazy_file_complete(f))
			r = -EBADMSG;
		if (r < 0) {
			lazy_file_put(l, f);
			return r;
		}
	}
	n = f->packed ? pread(l->pack_fd, buf, size, (off_t)(f->pack_off + off))
		      : pread(f->fd, buf, size, (off_t)off);
	if (n < 0)
		n = negative_errno();
	lazy_file_put(l, f);
	return n;
}

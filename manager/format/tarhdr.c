/* The tar headers of a lazy layer's blob, as it streams past: see
 * tarhdr.h.  The reading of each header follows what libarchive, which
 * unpacks a full pull, makes of it (ustar, pax and GNU long names; pax
 * times as "seconds.fraction"); where the two could differ, the entry
 * keeps the table of contents' mtime rather than take one a full pull
 * would not show. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "config.h"
#include "layer-private.h"
#include "macro.h"
#include "strmap.h"
#include "tarhdr.h"
#if HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif

#define BLOCK 512
/* A pax extended header or GNU long name: more than this and the entry
 * it describes is given up (it keeps the table's times). */
#define EXT_MAX (1u << 20)

struct tarhdr {
	enum toc_format format;
#if HAVE_ISAL
	struct inflate_state *st;
#else
	z_stream *z;
#endif
	bool in_member; /* gzip: inside a member */
	ZSTD_DCtx *zd;
	bool in_frame; /* zstd: inside a frame */
	bool failed;

	unsigned char block[BLOCK];
	size_t block_fill;
	uint64_t skip; /* bytes of data (and padding) still to pass */
	/* the content of a pax ('x') or GNU ('L') header being collected */
	char *ext;
	size_t ext_len, ext_want;
	uint64_t ext_skip; /* its padding, or all of it when too long */
	char ext_kind;	   /* 'x', 'L', or 0 */
	bool ext_lost;	   /* a header of the next entry was too long */
	/* what the extended headers said of the next entry */
	char *pax_path, *gnu_path;
	bool pax_size_set, pax_mtime_set;
	uint64_t pax_size;
	int64_t pax_sec;
	uint32_t pax_nsec;

	struct tarhdr_entry *entries;
	size_t n, cap;
};

int tarhdr_new(enum toc_format f, struct tarhdr **ret)
{
	_cleanup_free_ struct tarhdr *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	w->format = f;
	switch (f) {
	case TOC_ESTARGZ:
#if HAVE_ISAL
		w->st = malloc(sizeof(*w->st));
		if (!w->st)
			return -ENOMEM;
#else
		w->z = calloc(1, sizeof(*w->z));
		if (!w->z)
			return -ENOMEM;
		if (inflateInit2(w->z, 16 + MAX_WBITS) != Z_OK) {
			free(w->z);
			return -ENOMEM;
		}
#endif
		break;
	case TOC_ZSTD_CHUNKED:
		w->zd = ZSTD_createDCtx();
		if (!w->zd)
			return -ENOMEM;
		break;
	default:
		return -EINVAL;
	}
	*ret = TAKE_PTR(w);
	return 0;
}

static void ext_reset(struct tarhdr *w)
{
	free(w->pax_path);
	free(w->gnu_path);
	w->pax_path = w->gnu_path = NULL;
	w->pax_size_set = w->pax_mtime_set = false;
	w->ext_lost = false;
}

void tarhdr_free(struct tarhdr *w)
{
	if (!w)
		return;
#if HAVE_ISAL
	free(w->st);
#else
	if (w->z) {
		inflateEnd(w->z);
		free(w->z);
	}
#endif
	ZSTD_freeDCtx(w->zd);
	free(w->ext);
	ext_reset(w);
	for (size_t i = 0; i < w->n; i++)
		free((char *)w->entries[i].path);
	free(w->entries);
	free(w);
}

const struct tarhdr_entry *tarhdr_entries(const struct tarhdr *w, size_t *ret_n)
{
	*ret_n = w->n;
	return w->entries;
}

static int fail(struct tarhdr *w)
{
	w->failed = true;
	return -EBADMSG;
}

/* ---- header fields, read as libarchive reads them ---------------------- */

/* A numeric field: octal digits after optional spaces, or base-256 when
 * its first byte has the high bit.  false when it holds neither. */
static bool field_number(const unsigned char *p, size_t len, int64_t *ret)
{
	uint64_t v = 0;
	size_t i = 0;

	if (p[0] & 0x80) {
		/* base-256, two's complement in the bits after the first */
		uint64_t fill = p[0] & 0x40 ? UINT64_MAX : 0;

		v = (fill << 6) | (p[0] & 0x3f);
		for (i = 1; i < len; i++) {
			if ((v >> 56) != (fill >> 56))
				return false; /* does not fit */
			v = (v << 8) | p[i];
		}
		*ret = (int64_t)v;
		return true;
	}
	while (i < len && p[i] == ' ')
		i++;
	for (; i < len && p[i] >= '0' && p[i] <= '7'; i++) {
		if (v > (UINT64_MAX >> 3))
			return false;
		v = v * 8 + (uint64_t)(p[i] - '0');
	}
	if (v > INT64_MAX)
		return false;
	*ret = (int64_t)v;
	return true;
}

/* The checksum: the header's bytes summed with the checksum field as
 * spaces, unsigned or (old writers) signed. */
static bool checksum_ok(const unsigned char *h)
{
	int64_t want;
	unsigned long u = 0;
	long s = 0;

	if (!field_number(h + 148, 8, &want))
		return false;
	for (size_t i = 0; i < BLOCK; i++) {
		unsigned char c = i >= 148 && i < 156 ? ' ' : h[i];

		u += c;
		s += (signed char)c;
	}
	return (int64_t)u == want || (int64_t)s == want;
}

static bool all_zero(const unsigned char *h)
{
	for (size_t i = 0; i < BLOCK; i++)
		if (h[i])
			return false;
	return true;
}

/* A pax time: optional '-', decimal seconds, optional '.' and up to nine
 * digits of fraction (more are ignored), as libarchive reads it: the
 * sign applies to the seconds only. */
static bool pax_time(const char *s, size_t len, int64_t *ret_sec, uint32_t *ret_nsec)
{
	size_t i = 0;
	bool neg = false;
	uint64_t sec = 0;
	uint32_t nsec = 0, scale = 100000000;

	if (i < len && s[i] == '-') {
		neg = true;
		i++;
	}
	if (i == len || s[i] < '0' || s[i] > '9')
		return false;
	for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
		if (sec > ((uint64_t)INT64_MAX - 9) / 10)
			return false;
		sec = sec * 10 + (uint64_t)(s[i] - '0');
	}
	if (i < len && s[i] == '.')
		for (i++; i < len && s[i] >= '0' && s[i] <= '9' && scale > 0; i++, scale /= 10)
			nsec += (uint32_t)(s[i] - '0') * scale;
	*ret_sec = neg ? -(int64_t)sec : (int64_t)sec;
	*ret_nsec = nsec;
	return true;
}

static bool pax_number(const char *s, size_t len, uint64_t *ret)
{
	uint64_t v = 0;

	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9' || v > (UINT64_MAX - 9) / 10)
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*ret = v;
	return true;
}

/* The records of a pax header: "LEN KEY=VALUE\n" each.  Those that name
 * the entry (path, size) or its mtime are kept; a malformed one gives
 * the entry up. */
static int pax_parse(struct tarhdr *w, const char *p, size_t len)
{
	while (len > 0) {
		uint64_t rec = 0;
		size_t i = 0;
		const char *key, *eq, *val;
		size_t vlen;

		while (i < len && p[i] >= '0' && p[i] <= '9' && rec < EXT_MAX)
			rec = rec * 10 + (uint64_t)(p[i++] - '0');
		if (i == 0 || i >= len || p[i] != ' ' || rec <= i + 1 || rec > len ||
		    p[rec - 1] != '\n') {
			w->ext_lost = true;
			return 0;
		}
		key = p + i + 1;
		eq = memchr(key, '=', (size_t)(p + rec - 1 - key));
		if (!eq) {
			w->ext_lost = true;
			return 0;
		}
		val = eq + 1;
		vlen = (size_t)(p + rec - 1 - val);
		if ((size_t)(eq - key) == 4 && memcmp(key, "path", 4) == 0) {
			free(w->pax_path);
			w->pax_path = strndup(val, vlen);
			if (!w->pax_path)
				return -ENOMEM;
		} else if ((size_t)(eq - key) == 4 && memcmp(key, "size", 4) == 0) {
			if (!pax_number(val, vlen, &w->pax_size))
				w->ext_lost = true;
			w->pax_size_set = true;
		} else if ((size_t)(eq - key) == 5 && memcmp(key, "mtime", 5) == 0) {
			if (!pax_time(val, vlen, &w->pax_sec, &w->pax_nsec))
				w->ext_lost = true;
			w->pax_mtime_set = true;
		}
		p += rec;
		len -= (size_t)rec;
	}
	return 0;
}

static int entry_type(char flag, uint8_t *ret)
{
	switch (flag) {
	case '\0':
	case '0':
	case '7':
		*ret = LAYER_ENTRY_REG;
		return 0;
	case '1':
		*ret = LAYER_ENTRY_HARDLINK;
		return 0;
	case '2':
		*ret = LAYER_ENTRY_SYMLINK;
		return 0;
	case '3':
		*ret = LAYER_ENTRY_CHR;
		return 0;
	case '4':
		*ret = LAYER_ENTRY_BLK;
		return 0;
	case '5':
		*ret = LAYER_ENTRY_DIR;
		return 0;
	case '6':
		*ret = LAYER_ENTRY_FIFO;
		return 0;
	default:
		return -1;
	}
}

/* The name a header gives: pax path, else GNU long name, else the
 * ustar prefix and name. */
static char *header_name(struct tarhdr *w, const unsigned char *h)
{
	char buf[256 + 2];
	size_t nl = strnlen((const char *)h, 100), pl;

	if (w->pax_path)
		return strdup(w->pax_path);
	if (w->gnu_path)
		return strdup(w->gnu_path);
	pl = memcmp(h + 257, "ustar\0", 6) == 0 ? strnlen((const char *)h + 345, 155) : 0;
	if (pl == 0)
		return strndup((const char *)h, nl);
	memcpy(buf, h + 345, pl);
	buf[pl] = '/';
	memcpy(buf + pl + 1, h, nl);
	buf[pl + 1 + nl] = '\0';
	return strdup(buf);
}

static int entry_add(struct tarhdr *w, const unsigned char *h, uint64_t size)
{
	struct layer_entry e = { 0 };
	_cleanup_free_ char *raw = NULL;
	int64_t sec;
	char err[64];
	int r;

	if (w->ext_lost || entry_type((char)h[156], &e.type) < 0)
		return 0; /* left to the table of contents */
	raw = header_name(w, h);
	if (!raw)
		return -ENOMEM;
	if (w->pax_mtime_set) {
		e.mtime_sec = w->pax_sec;
		e.mtime_nsec = w->pax_nsec;
	} else {
		if (!field_number(h + 136, 12, &sec))
			return 0;
		e.mtime_sec = sec;
	}
	r = layer_normalise(raw, layer_limits_resolve(NULL).max_path, &e.path, err, sizeof(err));
	if (r == -ENOMEM)
		return r;
	if (r < 0)
		return 0;
	r = layer_whiteout(&e, err, sizeof(err));
	if (r != 0) {
		free(e.path);
		return r == -ENOMEM ? r : 0;
	}
	if (w->n == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 256;
		struct tarhdr_entry *n = reallocarray(w->entries, cap, sizeof(*n));

		if (!n) {
			free(e.path);
			return -ENOMEM;
		}
		w->entries = n;
		w->cap = cap;
	}
	w->entries[w->n++] = (struct tarhdr_entry){ .path = e.path,
						    .type = e.type,
						    .size = e.type == LAYER_ENTRY_REG ? size : 0,
						    .mtime_sec = e.mtime_sec,
						    .mtime_nsec = e.mtime_nsec };
	return 0;
}

static int ext_done(struct tarhdr *w);

/* One header block. */
static int header(struct tarhdr *w, const unsigned char *h)
{
	int64_t size;
	char flag = (char)h[156];
	int r = 0;

	if (all_zero(h))
		return 0; /* the end of the archive, or padding after it */
	if (!checksum_ok(h) || !field_number(h + 124, 12, &size) || size < 0)
		return fail(w);
	if (flag == 'x' || flag == 'L') {
		w->ext_kind = flag;
		w->ext_len = 0;
		w->ext_want = (uint64_t)size <= EXT_MAX ? (size_t)size : 0;
		w->ext_skip = (uint64_t)size <= EXT_MAX
				      ? (BLOCK - (uint64_t)size % BLOCK) % BLOCK
				      : ((uint64_t)size + BLOCK - 1) / BLOCK * BLOCK;
		if ((uint64_t)size > EXT_MAX)
			w->ext_lost = true;
		if (w->ext_want) {
			char *n = realloc(w->ext, w->ext_want);

			if (!n)
				return -ENOMEM;
			w->ext = n;
		}
		return w->ext_want == 0 && w->ext_skip == 0 ? ext_done(w) : 0;
	}
	if (flag == 'g' || flag == 'K') {
		/* global pax records (libarchive keeps none of their times)
		 * and GNU long link names: not what names an entry */
		w->skip = ((uint64_t)size + BLOCK - 1) / BLOCK * BLOCK;
		return 0;
	}
	if (w->pax_size_set)
		size = (int64_t)w->pax_size;
	r = entry_add(w, h, (uint64_t)size);
	ext_reset(w);
	if (r < 0)
		return r;
	w->skip = ((uint64_t)size + BLOCK - 1) / BLOCK * BLOCK;
	return 0;
}

/* An extended header's content is in. */
static int ext_done(struct tarhdr *w)
{
	int r = 0;

	if (w->ext_kind == 'x' && !w->ext_lost)
		r = pax_parse(w, w->ext, w->ext_len);
	else if (w->ext_kind == 'L' && !w->ext_lost) {
		free(w->gnu_path);
		w->gnu_path = strndup(w->ext, strnlen(w->ext, w->ext_len));
		if (!w->gnu_path)
			r = -ENOMEM;
	}
	w->ext_kind = 0;
	w->ext_len = w->ext_want = 0;
	return r;
}

int tarhdr_feed_tar(struct tarhdr *w, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	int r;

	if (w->failed)
		return -EBADMSG;
	while (len > 0) {
		size_t take;

		if (w->skip > 0) {
			take = (size_t)MIN((uint64_t)len, w->skip);
			w->skip -= take;
		} else if (w->ext_kind && w->ext_len < w->ext_want) {
			take = MIN(len, w->ext_want - w->ext_len);
			memcpy(w->ext + w->ext_len, p, take);
			w->ext_len += take;
		} else if (w->ext_kind && w->ext_skip > 0) {
			take = (size_t)MIN((uint64_t)len, w->ext_skip);
			w->ext_skip -= take;
		} else {
			take = MIN(len, BLOCK - w->block_fill);
			memcpy(w->block + w->block_fill, p, take);
			w->block_fill += take;
		}
		p += take;
		len -= take;
		if (w->ext_kind && w->ext_len == w->ext_want && w->ext_skip == 0) {
			r = ext_done(w);
			if (r < 0)
				return r;
		}
		if (w->block_fill == BLOCK) {
			w->block_fill = 0;
			r = header(w, w->block);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

int tarhdr_skip_content(struct tarhdr *w, uint64_t size)
{
	bool between = w->format == TOC_ESTARGZ ? !w->in_member : !w->in_frame;

	if (w->failed || !between || w->block_fill > 0 || w->ext_kind || w->skip <= size)
		return -EAGAIN;
	w->skip -= size;
	return 0;
}

/* ---- the compressed stream -------------------------------------------- */

#if HAVE_ISAL
/* Each member's header, CRC and length are checked (igzip, as the full
 * pull inflates). */
static int feed_gzip(struct tarhdr *w, const unsigned char *p, size_t len)
{
	struct inflate_state *st = w->st;
	unsigned char out[32 << 10];
	bool more = false; /* output may be waiting in the inflater */
	int r;

	while (len > 0 || more) {
		size_t got, took;

		if (!w->in_member) {
			isal_inflate_reset(st);
			st->crc_flag = ISAL_GZIP;
			w->in_member = true;
		}
		st->next_in = (uint8_t *)p;
		st->avail_in = (uint32_t)MIN(len, (size_t)UINT32_MAX);
		st->next_out = out;
		st->avail_out = sizeof(out);
		if (isal_inflate(st) < 0)
			return fail(w);
		took = (size_t)(st->next_in - p);
		len -= took;
		p = st->next_in;
		got = sizeof(out) - st->avail_out;
		if (st->block_state == ISAL_BLOCK_FINISH)
			w->in_member = false;
		more = w->in_member && got == sizeof(out);
		r = tarhdr_feed_tar(w, out, got);
		if (r < 0)
			return r;
		if (got == 0 && took == 0 && w->in_member)
			return len > 0 ? fail(w) : 0; /* (no progress: never with input) */
	}
	return 0;
}
#else
static int feed_gzip(struct tarhdr *w, const unsigned char *p, size_t len)
{
	unsigned char out[32 << 10];
	bool more = false; /* output may be waiting in the inflater */
	int r;

	while (len > 0 || more) {
		int zr;
		size_t got;

		if (!w->in_member) {
			if (inflateReset(w->z) != Z_OK)
				return fail(w);
			w->in_member = true;
		}
		w->z->next_in = (unsigned char *)p;
		w->z->avail_in = (uInt)MIN(len, (size_t)UINT32_MAX);
		w->z->next_out = out;
		w->z->avail_out = sizeof(out);
		zr = inflate(w->z, Z_NO_FLUSH);
		if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR)
			return fail(w);
		len -= (size_t)(w->z->next_in - p);
		p = w->z->next_in;
		got = sizeof(out) - w->z->avail_out;
		if (zr == Z_STREAM_END)
			w->in_member = false;
		more = zr == Z_OK && got == sizeof(out);
		r = tarhdr_feed_tar(w, out, got);
		if (r < 0)
			return r;
		if (zr == Z_BUF_ERROR && got == 0)
			break; /* wants more input than there is */
	}
	return 0;
}
#endif

static int feed_zstd(struct tarhdr *w, const unsigned char *p, size_t len)
{
	unsigned char out[32 << 10];
	ZSTD_inBuffer in = { p, len, 0 };
	int r;

	for (;;) {
		ZSTD_outBuffer o = { out, sizeof(out), 0 };
		size_t zr = ZSTD_decompressStream(w->zd, &o, &in);

		if (ZSTD_isError(zr))
			return fail(w);
		w->in_frame = zr != 0;
		r = tarhdr_feed_tar(w, out, o.pos);
		if (r < 0)
			return r;
		if (in.pos == in.size && o.pos < o.size)
			break;
	}
	return 0;
}

int tarhdr_feed(struct tarhdr *w, const void *buf, size_t len)
{
	int r;

	if (w->failed)
		return -EBADMSG;
	r = w->format == TOC_ESTARGZ ? feed_gzip(w, buf, len) : feed_zstd(w, buf, len);
	if (r == -ENOMEM)
		w->failed = true;
	return r;
}

/* ---- the merge ---------------------------------------------------------- */

int tarhdr_merge(const struct tarhdr *w, struct layer_index *li, size_t *ret_changed)
{
	struct strmap *m;
	size_t changed = 0;
	int r = 0;

	if (w->failed || w->in_member || w->in_frame || w->block_fill || w->skip || w->ext_kind)
		return -EBADMSG;
	m = strmap_new();
	if (!m)
		return -ENOMEM;
	for (size_t i = 0; i < w->n && r == 0; i++) {
		if (strmap_get(m, w->entries[i].path))
			r = -EBADMSG; /* a path twice: a full pull refuses it */
		else
			r = strmap_put(m, w->entries[i].path, (void *)&w->entries[i]);
	}
	for (size_t i = 0; i < li->n_entries && r == 0; i++) {
		struct layer_entry *e = &li->entries[i];
		const struct tarhdr_entry *t = strmap_get(m, e->path);

		if (!t || t->type != e->type || (e->type == LAYER_ENTRY_REG && t->size != e->size))
			continue;
		if (e->mtime_sec != t->mtime_sec || e->mtime_nsec != t->mtime_nsec)
			changed++;
		e->mtime_sec = t->mtime_sec;
		e->mtime_nsec = t->mtime_nsec;
	}
	strmap_free(m);
	if (r == 0 && ret_changed)
		*ret_changed = changed;
	return r;
}

/* The entries of a lazy image's table of contents.  eStargz and
 * zstd:chunked share one JSON shape (inherited from stargz): an array of
 * entries in tar order, a regular file followed by "chunk" entries for
 * the rest of its content.  Each entry becomes a struct layer_entry under
 * the rules of layerrules.c, each file's chunks are checked to cover it
 * exactly, and every chunk's compressed bytes are placed in the blob:
 *   eStargz: a chunk starts a gzip member at `offset` (or lies
 *     `innerOffset` bytes into one), which ends where the next member of
 *     the blob starts, the last one where the table starts;
 *   zstd:chunked: a chunk is the zstd frames from `offset` to the next
 *     chunk's offset, the last one to the file's `endOffset`. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "base64.h"
#include "errname.h"
#include "layer-private.h"
#include "macro.h"
#include "toc-private.h"

/* A chunk larger than this is refused (the layer is then pulled whole):
 * callers decompress a chunk into memory. */
#define TOC_MAX_CHUNK (256u << 20)

#define ESTARGZ_PREFETCH_LANDMARK ".prefetch.landmark"

struct build {
	enum toc_format f;
	bool stargz_files;
	/* only what toc_keep_files() keeps: no other entry, no path, no
	 * places (the table passed their checks before) */
	bool files_only;
	uint64_t data_end;
	uint64_t max_entries, max_expanded, expanded;
	uint64_t xattr_bytes; /* of every entry so far */
	int entries_err;
	uint32_t max_path;
	struct toc *t;
	size_t cap_entries, cap_chunks;
	size_t *first; /* becomes t->first_chunk */
	size_t cap_first;
	struct layer_places places;
	/* the file whose "chunk" entries may follow */
	bool open;
	char *open_name;   /* its name as the JSON spells it */
	size_t open_first; /* its first chunk in t->chunks */
	uint64_t open_size, open_end;
	char open_digest[DIGEST_STRING_MAX]; /* of the whole file, or "" */
	bool open_kept;			     /* an entry of the tree, not a marker */
	/* eStargz: gzip members of content no entry keeps (the landmarks,
	 * whiteouts with data), which still end the members before them */
	uint64_t *orphans;
	size_t n_orphans, cap_orphans;
	size_t where; /* index of the JSON entry being read */
	char *errbuf;
	size_t errlen;
};

#define bfail(b, fmt, ...) \
	layer_fail((b)->errbuf, (b)->errlen, "toc: entries[%zu]: " fmt, (b)->where, ##__VA_ARGS__)

static void *grow(void *p, size_t *cap, size_t need, size_t size)
{
	size_t n;
	void *q;

	if (need <= *cap)
		return p;
	n = MAX(*cap * 2, MAX(need, (size_t)64));
	q = reallocarray(p, n, size);
	if (q)
		*cap = n;
	return q;
}

/* ---- JSON members ------------------------------------------------------- */

/* An optional integer member in [0, max]; absent is 0. */
static int get_uint(struct build *b, json_t *o, const char *key, uint64_t max, uint64_t *ret)
{
	json_t *v = json_object_get(o, key);
	json_int_t n;

	*ret = 0;
	if (!v)
		return 0;
	if (!json_is_integer(v))
		return bfail(b, "%s is not an integer", key);
	n = json_integer_value(v);
	if (n < 0 || (uint64_t)n > max)
		return bfail(b, "%s %" PRId64 " is out of range", key, (int64_t)n);
	*ret = (uint64_t)n;
	return 0;
}

/* An optional string member; absent is NULL. */
static int get_str(struct build *b, json_t *o, const char *key, const char **ret)
{
	json_t *v = json_object_get(o, key);

	*ret = NULL;
	if (!v)
		return 0;
	if (!json_is_string(v))
		return bfail(b, "%s is not a string", key);
	*ret = json_string_value(v);
	return 0;
}

static int get_digest(struct build *b, json_t *o, const char *key, const char **ret)
{
	int r = get_str(b, o, key, ret);

	if (r < 0)
		return r;
	if (*ret && !digest_is_valid(*ret))
		return bfail(b, "%s is not a sha256 digest", key);
	return 0;
}

static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
	/* days since 1970-01-01 in the proleptic Gregorian calendar, with
	 * March as the first month so that leap days come last */
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static bool digits(const char *s, size_t n, unsigned *ret)
{
	unsigned v = 0;

	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	*ret = v;
	return true;
}

/* RFC 3339 as Go writes it: "2006-01-02T15:04:05[.999999999](Z|+07:00)". */
static int rfc3339_parse(const char *s, int64_t *ret_sec, uint32_t *ret_nsec)
{
	static const unsigned mdays[] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	unsigned y, mo, d, h, mi, se, nsec = 0, oh = 0, om = 0;
	int64_t off = 0, sec;
	const char *p;

	if (strlen(s) < 20 || !digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &mo) ||
	    s[7] != '-' || !digits(s + 8, 2, &d) || s[10] != 'T' || !digits(s + 11, 2, &h) ||
	    s[13] != ':' || !digits(s + 14, 2, &mi) || s[16] != ':' || !digits(s + 17, 2, &se))
		return -EBADMSG;
	if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || h > 23 || mi > 59 || se > 59)
		return -EBADMSG;
	if (mo == 2 && d == 29 && !(y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)))
		return -EBADMSG;
	p = s + 19;
	if (*p == '.') {
		unsigned n = 0, scale = 100000000;

		for (p++; *p >= '0' && *p <= '9'; p++, n++) {
			nsec += (unsigned)(*p - '0') * scale;
			scale /= 10;
		}
		if (n == 0)
			return -EBADMSG;
	}
	if (*p == 'Z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		if (!digits(p + 1, 2, &oh) || p[3] != ':' || !digits(p + 4, 2, &om) || oh > 23 ||
		    om > 59)
			return -EBADMSG;
		off = (int64_t)(oh * 3600 + om * 60) * (*p == '-' ? -1 : 1);
		p += 6;
	} else {
		return -EBADMSG;
	}
	if (*p != '\0')
		return -EBADMSG;
	sec = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se;
	*ret_sec = sec - off;
	*ret_nsec = nsec;
	return 0;
}

static int get_xattrs(struct build *b, json_t *o, struct layer_entry *e)
{
	json_t *x = json_object_get(o, "xattrs"), *v;
	const char *name;
	size_t n;

	if (!x)
		return 0;
	if (!json_is_object(x))
		return bfail(b, "xattrs is not an object");
	n = json_object_size(x);
	if (n == 0)
		return 0;
	if (n > LAYER_XATTRS_PER_ENTRY)
		return bfail(b, "more than %u xattrs", LAYER_XATTRS_PER_ENTRY);
	e->xattrs = calloc(n, sizeof(*e->xattrs));
	if (!e->xattrs)
		return -ENOMEM;
	json_object_foreach(x, name, v)
	{
		struct layer_xattr *xa = &e->xattrs[e->n_xattrs];
		size_t len;
		ssize_t size;

		if (!json_is_string(v))
			return bfail(b, "xattr \"%.100s\" is not a string", name);
		len = json_string_length(v);
		if (name[0] == '\0' || strlen(name) > LAYER_XATTR_NAME_MAX ||
		    len / 4 * 3 > LAYER_XATTR_SIZE_MAX + 2)
			return bfail(b, "bad xattr \"%.100s\"", name);
		xa->name = strdup(name);
		/* +1 so a zero-length value still owns a distinct pointer */
		xa->value = malloc(len / 4 * 3 + 1);
		e->n_xattrs++;
		if (!xa->name || !xa->value)
			return -ENOMEM;
		size = base64_decode(json_string_value(v), len, true, xa->value);
		if (size < 0 || size > (ssize_t)LAYER_XATTR_SIZE_MAX)
			return bfail(b,
				     "xattr \"%.100s\" is not base64 of at "
				     "most %u bytes",
				     name, LAYER_XATTR_SIZE_MAX);
		xa->size = (uint32_t)size;
		b->xattr_bytes += strlen(name) + xa->size;
		if (b->xattr_bytes > LAYER_XATTR_BYTES_MAX)
			return bfail(b, "more than %u bytes of xattrs", LAYER_XATTR_BYTES_MAX);
	}
	return 0;
}

/* ---- chunks -------------------------------------------------------------- */

/* One chunk of the open file from an entry ("reg" for the first). */
static int chunk_add(struct build *b, json_t *o, const struct layer_entry *e)
{
	struct toc *t = b->t;
	struct toc_chunk *c;
	const char *digest, *type;
	uint64_t end;
	int r;

	t->chunks = grow(t->chunks, &b->cap_chunks, t->n_chunks + 1, sizeof(*t->chunks));
	if (!t->chunks)
		return -ENOMEM;
	c = &t->chunks[t->n_chunks];
	*c = (struct toc_chunk){ 0 };
	if ((r = get_uint(b, o, "chunkOffset", INT64_MAX, &c->offset)) < 0 ||
	    (r = get_uint(b, o, "chunkSize", TOC_MAX_CHUNK, &c->size)) < 0 ||
	    (r = get_uint(b, o, "offset", INT64_MAX, &c->blob_offset)) < 0 ||
	    (r = get_uint(b, o, "endOffset", INT64_MAX, &end)) < 0 ||
	    (r = get_uint(b, o, "innerOffset", INT64_MAX, &c->inner_offset)) < 0 ||
	    (r = get_digest(b, o, "chunkDigest", &digest)) < 0 ||
	    (r = get_str(b, o, "chunkType", &type)) < 0)
		return r;
	if (b->f == TOC_ZSTD_CHUNKED) {
		if (type && type[0] && strcmp(type, "zeros") != 0)
			return bfail(b, "unknown chunkType \"%.50s\"", type);
		/* a file's endOffset ends its last chunk; a chunk's own
		 * (written by no tool yet) ends that chunk */
		if (e)
			b->open_end = end;
		else
			c->blob_length = end; /* made a length by file_close */
	}
	if (digest)
		strcpy(c->digest, digest);
	t->n_chunks++;
	return 0;
}

/* The open file is complete: its chunks must tile it. */
static int file_close(struct build *b)
{
	struct toc *t = b->t;
	struct toc_chunk *cs;
	size_t n = t->n_chunks - b->open_first;
	uint64_t at = 0;

	if (!b->open)
		return 0;
	b->open = false;
	if (n == 0)
		return 0;
	cs = t->chunks + b->open_first;
	for (size_t i = 0; i < n; i++) {
		struct toc_chunk *c = &cs[i];
		uint64_t next = i + 1 < n ? cs[i + 1].offset : b->open_size;

		if (c->offset != at || next < at)
			return layer_fail(b->errbuf, b->errlen,
					  "toc: chunks of \"%.200s\" do not "
					  "follow each other",
					  b->open_name);
		/* a size of 0 is "up to the next chunk" */
		if (c->size == 0)
			c->size = next - at;
		if (c->size == 0 || c->size != next - at || c->size > TOC_MAX_CHUNK)
			return layer_fail(b->errbuf, b->errlen,
					  "toc: chunk at %" PRIu64 " of \"%.200s\" "
					  "has a bad size",
					  at, b->open_name);
		at += c->size;
		if (b->f == TOC_ZSTD_CHUNKED) {
			uint64_t end = c->blob_length;

			if (end == 0)
				end = i + 1 < n ? cs[i + 1].blob_offset : b->open_end;
			/* no end given (stargz's writer): member_ends() */
			c->blob_length = end ? end - c->blob_offset : 0;
			if (end && end <= c->blob_offset)
				return layer_fail(b->errbuf, b->errlen,
						  "toc: chunk at %" PRIu64
						  " of \"%.200s\" ends before it "
						  "starts",
						  c->offset, b->open_name);
		}
	}
	/* the last chunk ends at the file's size: the chunks tile it */
	/* a file in one piece: its digest is the chunk's */
	if (n == 1 && !cs[0].digest[0] && b->open_digest[0])
		strcpy(cs[0].digest, b->open_digest);
	if (b->open_kept)
		return 0;
	/* content of something that is not a file of the tree: only where
	 * its gzip members start matters */
	for (size_t i = 0; i < n; i++) {
		b->orphans =
			grow(b->orphans, &b->cap_orphans, b->n_orphans + 1, sizeof(*b->orphans));
		if (!b->orphans)
			return -ENOMEM;
		b->orphans[b->n_orphans++] = cs[i].blob_offset;
	}
	t->n_chunks = b->open_first;
	return 0;
}

/* ---- entries ------------------------------------------------------------- */

static const struct {
	const char *name;
	enum layer_entry_type type;
} entry_types[] = {
	{ "reg", LAYER_ENTRY_REG },	    { "dir", LAYER_ENTRY_DIR },
	{ "symlink", LAYER_ENTRY_SYMLINK }, { "hardlink", LAYER_ENTRY_HARDLINK },
	{ "char", LAYER_ENTRY_CHR },	    { "block", LAYER_ENTRY_BLK },
	{ "fifo", LAYER_ENTRY_FIFO },
};

static int entry_type(struct build *b, const char *s, enum layer_entry_type *ret)
{
	for (size_t i = 0; i < ARRAY_SIZE(entry_types); i++)
		if (strcmp(s, entry_types[i].name) == 0) {
			*ret = entry_types[i].type;
			return 0;
		}
	return bfail(b, "unknown type \"%.50s\"", s);
}

static bool estargz_own(const struct layer_entry *e)
{
	return layer_is_estargz_own(e->path);
}

static int entry_fill(struct build *b, json_t *o, const char *name, enum layer_entry_type type,
		      struct layer_entry *e)
{
	const char *mtime, *link, *digest;
	uint64_t v, major, minor;
	int r;

	r = layer_normalise(name, b->max_path, &e->path, b->errbuf, b->errlen);
	if (r < 0)
		return r;
	e->type = (uint8_t)type;
	if ((r = get_uint(b, o, "mode", UINT32_MAX, &v)) < 0)
		return r;
	e->mode = (uint32_t)v & 07777;
	if ((r = get_uint(b, o, "uid", UINT32_MAX, &v)) < 0)
		return r;
	e->uid = (uint32_t)v;
	if ((r = get_uint(b, o, "gid", UINT32_MAX, &v)) < 0)
		return r;
	e->gid = (uint32_t)v;
	if ((r = get_str(b, o, "modtime", &mtime)) < 0)
		return r;
	if (mtime && rfc3339_parse(mtime, &e->mtime_sec, &e->mtime_nsec) < 0)
		return bfail(b, "modtime \"%.50s\" is not RFC 3339", mtime);

	r = layer_whiteout(e, b->errbuf, b->errlen);
	if (r != 0)
		return r;
	if (e->type == LAYER_ENTRY_WHITEOUT || e->type == LAYER_ENTRY_OPAQUE)
		return 0;

	if ((r = get_str(b, o, "linkName", &link)) < 0)
		return r;
	switch (type) {
	case LAYER_ENTRY_SYMLINK:
		if (!link)
			return bfail(b, "symlink without linkName");
		if (strlen(link) > b->max_path)
			return bfail(b, "symlink target longer than %" PRIu32 " bytes",
				     b->max_path);
		e->link = strdup(link);
		if (!e->link)
			return -ENOMEM;
		break;
	case LAYER_ENTRY_HARDLINK:
		if (!link)
			return bfail(b, "hardlink without linkName");
		r = layer_hardlink_target(&b->places, link, b->max_path, e, b->errbuf, b->errlen);
		if (r < 0)
			return r;
		break;
	case LAYER_ENTRY_CHR:
	case LAYER_ENTRY_BLK:
		if ((r = get_uint(b, o, "devMajor", UINT32_MAX, &major)) < 0 ||
		    (r = get_uint(b, o, "devMinor", UINT32_MAX, &minor)) < 0)
			return r;
		e->rdev = makedev((unsigned)major, (unsigned)minor);
		break;
	case LAYER_ENTRY_REG:
		if ((r = get_uint(b, o, "size", INT64_MAX, &e->size)) < 0)
			return r;
		if (e->size > b->max_expanded - b->expanded)
			return bfail(b, "more than %" PRIu64 " bytes of file content",
				     b->max_expanded);
		b->expanded += e->size;
		if ((r = get_digest(b, o, "digest", &digest)) < 0)
			return r;
		if (digest && e->size > 0) {
			e->object = strdup(digest_hex(digest));
			if (!e->object)
				return -ENOMEM;
		}
		break;
	default:
		break;
	}
	if (e->type != LAYER_ENTRY_DIR && e->path[0] == '\0')
		return bfail(b, "root entry is not a directory");
	return get_xattrs(b, o, e);
}

/* first: where the entry's chunks start in t->chunks (a file's are there
 * already; anything else has none). */
static int entry_push(struct build *b, struct layer_entry *e, size_t first)
{
	struct layer_index *li = b->t->index;

	if (li->n_entries >= b->max_entries)
		return errbuf_fail(b->entries_err, b->errbuf, b->errlen,
				   "toc: more than %" PRIu64 " entries", b->max_entries);
	li->entries = grow(li->entries, &b->cap_entries, li->n_entries + 1, sizeof(*li->entries));
	if (!li->entries)
		return -ENOMEM;
	b->first = grow(b->first, &b->cap_first, li->n_entries + 2, sizeof(*b->first));
	if (!b->first)
		return -ENOMEM;
	b->first[li->n_entries] = first;
	li->entries[li->n_entries++] = *e;
	if (b->files_only) {
		struct layer_entry *kept = &li->entries[li->n_entries - 1];
		char *object = TAKE_PTR(kept->object);

		layer_entry_clear(kept);
		*kept = (struct layer_entry){ .type = LAYER_ENTRY_REG,
					      .size = e->size,
					      .object = object };
		return 0;
	}
	return layer_places_add(&b->places, &li->entries[li->n_entries - 1]);
}

static int entry_next(struct build *b, json_t *o)
{
	struct layer_entry e = { 0 };
	enum layer_entry_type type = LAYER_ENTRY_REG;
	const char *name, *tname;
	bool reg, kept = true;
	int r;

	if (!json_is_object(o))
		return bfail(b, "not an object");
	if ((r = get_str(b, o, "name", &name)) < 0 || (r = get_str(b, o, "type", &tname)) < 0)
		return r;
	if (!name || !tname)
		return bfail(b, "without %s", name ? "type" : "name");

	if (strcmp(tname, "chunk") == 0) {
		if (!b->open || strcmp(name, b->open_name) != 0)
			return bfail(b,
				     "chunk of \"%.200s\", which is not the "
				     "file before it",
				     name);
		return chunk_add(b, o, NULL);
	}
	r = file_close(b);
	if (r < 0)
		return r;
	r = entry_type(b, tname, &type);
	if (r < 0)
		return r;
	/* only regular files have content */
	if (b->files_only && type != LAYER_ENTRY_REG)
		return 0;

	r = entry_fill(b, o, name, type, &e);
	if (r == 1) {
		kept = false; /* an aufs internal */
		r = 0;
	}
	if (r == 0 && kept && b->stargz_files && estargz_own(&e)) {
		if (strcmp(e.path, ESTARGZ_PREFETCH_LANDMARK) == 0)
			r = get_uint(b, o, "offset", INT64_MAX, &b->t->prefetch_end);
		kept = false;
	}
	/* (its chunks, if any, still bound the others: see file_close()) */
	if (r == 0 && kept && b->files_only && !(e.type == LAYER_ENTRY_REG && e.object))
		kept = false;
	if (r == 0 && kept && !b->files_only)
		r = layer_places_check(&b->places, &e, b->errbuf, b->errlen);
	if (r < 0) {
		layer_entry_clear(&e);
		return r;
	}

	/* a file with content opens for its chunks, whatever becomes of
	 * the entry: its gzip members still bound the others */
	reg = type == LAYER_ENTRY_REG;
	if (reg) {
		uint64_t size;
		const char *digest;

		/* e.size only for what stays a file: markers have content
		 * too, sometimes */
		if ((r = get_uint(b, o, "size", INT64_MAX, &size)) < 0) {
			layer_entry_clear(&e);
			return r;
		}
		b->open = true;
		free(b->open_name);
		b->open_name = strdup(name);
		if (!b->open_name) {
			layer_entry_clear(&e);
			return -ENOMEM;
		}
		b->open_first = b->t->n_chunks;
		b->open_size = size;
		b->open_end = 0;
		b->open_kept = kept && e.type == LAYER_ENTRY_REG;
		r = get_digest(b, o, "digest", &digest);
		snprintf(b->open_digest, sizeof(b->open_digest), "%s",
			 r == 0 && digest ? digest : "");
		if (r == 0 && size > 0)
			r = chunk_add(b, o, &e);
		if (r < 0) {
			layer_entry_clear(&e);
			return r;
		}
	}
	if (!kept) {
		layer_entry_clear(&e);
		return 0;
	}
	/* a file's own chunks are there already; an entry that is not a
	 * file of the tree has none, as its orphans go at file_close() */
	r = entry_push(b, &e, b->open ? b->open_first : b->t->n_chunks);
	if (r < 0)
		layer_entry_clear(&e);
	return r;
}

/* ---- the blob ------------------------------------------------------------ */

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int chunk_place_cmp(const void *a, const void *b)
{
	const struct toc_chunk *x = *(const struct toc_chunk *const *)a;
	const struct toc_chunk *y = *(const struct toc_chunk *const *)b;

	if (x->blob_offset != y->blob_offset)
		return x->blob_offset < y->blob_offset ? -1 : 1;
	return x->inner_offset < y->inner_offset ? -1 : x->inner_offset > y->inner_offset ? 1 : 0;
}

/* Where a chunk's compressed bytes end when the table does not say (all
 * of eStargz, stargz's zstd): where the next gzip member or zstd frame of
 * the blob starts, the last one where the table starts.  Every chunk must
 * lie before the table, in at most TOC_MAX_CHUNK bytes. */
static int member_ends(struct build *b)
{
	struct toc *t = b->t;
	_cleanup_free_ uint64_t *starts = NULL;
	size_t n = 0;

	starts = reallocarray(NULL, t->n_chunks + b->n_orphans + 1, sizeof(*starts));
	if (!starts)
		return -ENOMEM;
	for (size_t i = 0; i < t->n_chunks; i++)
		starts[n++] = t->chunks[i].blob_offset;
	for (size_t i = 0; i < b->n_orphans; i++)
		starts[n++] = b->orphans[i];
	qsort(starts, n, sizeof(*starts), u64_cmp);
	for (size_t i = 0; i < t->n_chunks; i++) {
		struct toc_chunk *c = &t->chunks[i];
		uint64_t *k, end = b->data_end;

		if (c->blob_offset >= b->data_end || c->blob_length > b->data_end - c->blob_offset)
			return layer_fail(b->errbuf, b->errlen,
					  "toc: chunk at %" PRIu64 " of the blob "
					  "is not before the table at %" PRIu64,
					  c->blob_offset, b->data_end);
		if (!c->blob_length) {
			k = bsearch(&c->blob_offset, starts, n, sizeof(*starts), u64_cmp);
			/* bsearch may land on any of equal starts: go past
			 * them */
			while (k + 1 < starts + n && k[1] == c->blob_offset)
				k++;
			if (k + 1 < starts + n)
				end = k[1];
			c->blob_length = end - c->blob_offset;
		}
		/* a reader holds a chunk's compressed bytes while it
		 * decompresses them */
		if (c->blob_length > TOC_MAX_CHUNK)
			return layer_fail(b->errbuf, b->errlen,
					  "toc: chunk at %" PRIu64 " of the blob takes %" PRIu64
					  " bytes of it, more than %u",
					  c->blob_offset, c->blob_length, TOC_MAX_CHUNK);
	}
	return 0;
}

/* No two chunks share compressed bytes, but for eStargz's small files
 * that share one gzip member at distinct inner offsets. */
static int chunks_disjoint(struct build *b)
{
	struct toc *t = b->t;
	_cleanup_free_ struct toc_chunk **order = NULL;

	if (t->n_chunks < 2)
		return 0;
	order = reallocarray(NULL, t->n_chunks, sizeof(*order));
	if (!order)
		return -ENOMEM;
	for (size_t i = 0; i < t->n_chunks; i++)
		order[i] = &t->chunks[i];
	qsort(order, t->n_chunks, sizeof(*order), chunk_place_cmp);
	for (size_t i = 1; i < t->n_chunks; i++) {
		const struct toc_chunk *x = order[i - 1], *y = order[i];
		bool ok;

		if (x->blob_offset == y->blob_offset)
			ok = x->inner_offset + x->size <= y->inner_offset;
		else
			ok = x->blob_length <= y->blob_offset - x->blob_offset;
		if (!ok)
			return layer_fail(b->errbuf, b->errlen,
					  "toc: chunks at %" PRIu64 " and %" PRIu64
					  " of the blob overlap",
					  x->blob_offset, y->blob_offset);
	}
	return 0;
}

/* ---- the JSON text, one entry at a time ------------------------------- */

/* The parse never holds more than one entry's JSON tree: a table of
 * 64 MiB is a few million small objects, whose tree would take many
 * times the text.  The top level is walked here; each value is cut out
 * by json_extent() and handed whole to jansson, which checks it strictly,
 * so that text the walk accepts and jansson would refuse is still
 * refused. */
struct jtext {
	const char *p, *end;
};

static void json_skip_ws(struct jtext *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

/* The length of the value that starts at j->p: up to its closing quote,
 * bracket or brace, or up to what ends a number or literal.  0 when the
 * text ends first.  Validity is jansson's to judge. */
static size_t json_extent(const struct jtext *j)
{
	const char *p = j->p;
	size_t depth = 0;
	bool in_str = false;

	if (p >= j->end)
		return 0;
	if (*p != '"' && *p != '{' && *p != '[') {
		while (p < j->end && !strchr(" \t\n\r,]}", *p))
			p++;
		return (size_t)(p - j->p);
	}
	for (; p < j->end; p++) {
		if (in_str) {
			if (*p == '\\') {
				p++; /* the escaped character, a quote maybe */
				continue;
			}
			if (*p != '"')
				continue;
			in_str = false;
			if (depth == 0)
				return (size_t)(p + 1 - j->p);
			continue;
		}
		if (*p == '"')
			in_str = true;
		else if (*p == '{' || *p == '[')
			depth++;
		else if ((*p == '}' || *p == ']') && --depth == 0)
			return (size_t)(p + 1 - j->p);
	}
	return 0;
}

static bool json_literal(const struct jtext *j)
{
	static const char *const lits[] = { "true", "false", "null" };
	size_t n = (size_t)(j->end - j->p);

	for (size_t i = 0; i < ARRAY_SIZE(lits); i++)
		if (n >= strlen(lits[i]) && memcmp(j->p, lits[i], strlen(lits[i])) == 0)
			return true;
	return false;
}

static int json_bad(const struct jtext *j, const char *start, char *errbuf, size_t errlen,
		    const char *what)
{
	return layer_fail(errbuf, errlen, "toc: invalid JSON at byte %zu: %s",
			  (size_t)(j->p - start), what);
}

/* The next value, parsed alone; NULL with the error set. */
static json_t *json_next(struct jtext *j, const char *start, char *errbuf, size_t errlen, int *ret)
{
	size_t n = json_extent(j);
	json_error_t jerr;
	json_t *v;

	if (n == 0) {
		*ret = json_bad(j, start, errbuf, errlen, "truncated");
		return NULL;
	}
	v = json_loadb(j->p, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
	if (!v) {
		*ret = json_error_code(&jerr) == json_error_out_of_memory
			       ? -ENOMEM
			       : layer_fail(errbuf, errlen, "toc: invalid JSON at byte %zu: %s",
					    (size_t)(j->p - start) + (size_t)MAX(jerr.position, 0),
					    jerr.text);
		return NULL;
	}
	j->p += n;
	json_skip_ws(j);
	return v;
}

/* After a member or an element: ',' goes on (true), close ends (false). */
static int json_sep(struct jtext *j, const char *start, char close, char *errbuf, size_t errlen)
{
	if (j->p < j->end && *j->p == ',') {
		j->p++;
		json_skip_ws(j);
		return 1;
	}
	if (j->p < j->end && *j->p == close) {
		j->p++;
		json_skip_ws(j);
		return 0;
	}
	return json_bad(j, start, errbuf, errlen, "expected ',' or a closing bracket");
}

static int entries_walk(struct build *b, struct jtext *j, const char *start)
{
	int r;

	if (j->p >= j->end || *j->p != '[')
		return layer_fail(b->errbuf, b->errlen, "toc: entries is not an array");
	j->p++;
	json_skip_ws(j);
	if (j->p < j->end && *j->p == ']') {
		j->p++;
		json_skip_ws(j);
		return 0;
	}
	for (;; b->where++) {
		_cleanup_(json_decrefp) json_t *o = json_next(j, start, b->errbuf, b->errlen, &r);

		if (!o)
			return r;
		r = entry_next(b, o);
		if (r < 0)
			return r;
		r = json_sep(j, start, ']', b->errbuf, b->errlen);
		if (r <= 0)
			return r;
	}
}

/* The root object: "version" 1 and the "entries", in either order,
 * other members ignored, none twice. */
static int toc_walk(struct build *b, const char *json, size_t len)
{
	_cleanup_(json_decrefp) json_t *seen = json_object();
	struct jtext j = { json, json + len };
	bool version = false, entries = false;
	int r;

	if (!seen)
		return -ENOMEM;
	json_skip_ws(&j);
	/* another JSON value, told apart from what is not JSON at all */
	if (j.p < j.end && (strchr("[\"-0123456789", *j.p) || json_literal(&j)))
		return layer_fail(b->errbuf, b->errlen, "toc: not a JSON object");
	if (j.p >= j.end || *j.p != '{')
		return json_bad(&j, json, b->errbuf, b->errlen, "not an object");
	j.p++;
	json_skip_ws(&j);
	if (j.p < j.end && *j.p == '}') {
		j.p++;
		r = 0;
	} else {
		do {
			_cleanup_(json_decrefp) json_t *key = NULL;
			const char *k;

			if (j.p >= j.end || *j.p != '"')
				return json_bad(&j, json, b->errbuf, b->errlen,
						"expected a member name");
			key = json_next(&j, json, b->errbuf, b->errlen, &r);
			if (!key)
				return r;
			k = json_string_value(key);
			if (json_object_get(seen, k))
				return json_bad(&j, json, b->errbuf, b->errlen,
						"duplicate member name");
			if (json_object_set_new(seen, k, json_null()) < 0)
				return -ENOMEM;
			if (j.p >= j.end || *j.p != ':')
				return json_bad(&j, json, b->errbuf, b->errlen, "expected ':'");
			j.p++;
			json_skip_ws(&j);
			if (strcmp(k, "entries") == 0) {
				r = entries_walk(b, &j, json);
				if (r < 0)
					return r;
				entries = true;
			} else {
				_cleanup_(json_decrefp) json_t *v =
					json_next(&j, json, b->errbuf, b->errlen, &r);

				if (!v)
					return r;
				if (strcmp(k, "version") == 0)
					version = json_is_integer(v) && json_integer_value(v) == 1;
			}
			r = json_sep(&j, json, '}', b->errbuf, b->errlen);
			if (r < 0)
				return r;
		} while (r > 0);
	}
	json_skip_ws(&j);
	if (j.p != j.end)
		return json_bad(&j, json, b->errbuf, b->errlen, "text after the object");
	if (!version)
		return layer_fail(b->errbuf, b->errlen, "toc: version is not 1");
	if (!entries)
		return layer_fail(b->errbuf, b->errlen, "toc: entries is not an array");
	return 0;
}

int toc_from_json(const struct toc_layer *tl, const char *json, size_t len, uint64_t data_end,
		  const struct layer_limits *lim, bool files_only, struct toc **ret, char *errbuf,
		  size_t errlen)
{
	struct build b = {
		.f = tl->format,
		.stargz_files = tl->stargz_files,
		.files_only = files_only,
		.data_end = data_end,
		.errbuf = errbuf,
		.errlen = errlen,
	};
	int r;

	const struct layer_limits l = layer_limits_resolve(lim);

	b.max_entries = l.max_entries;
	b.entries_err = l.entries_err;
	b.max_expanded = l.max_expanded_bytes;
	b.max_path = l.max_path;
	b.t = calloc(1, sizeof(*b.t));
	if (!b.t)
		return -ENOMEM;
	b.t->format = tl->format;
	b.t->index = calloc(1, sizeof(*b.t->index));
	if (!b.t->index) {
		r = -ENOMEM;
		goto out;
	}
	r = toc_walk(&b, json, len);
	if (r < 0)
		goto out;
	r = file_close(&b);
	if (r < 0)
		goto out;
	r = member_ends(&b);
	if (r < 0)
		goto out;
	r = chunks_disjoint(&b);
	if (r < 0)
		goto out;

	b.first = grow(b.first, &b.cap_first, b.t->index->n_entries + 1, sizeof(*b.first));
	if (!b.first) {
		r = -ENOMEM;
		goto out;
	}
	b.first[b.t->index->n_entries] = b.t->n_chunks;
	b.t->first_chunk = TAKE_PTR(b.first);
	if (files_only) {
		r = toc_keep_files(b.t);
		if (r < 0)
			goto out;
	}
	*ret = TAKE_PTR(b.t);
	r = 0;
out:
	toc_free(b.t);
	free(b.first);
	free(b.orphans);
	free(b.open_name);
	layer_places_done(&b.places);
	return r;
}

void toc_free(struct toc *t)
{
	if (!t)
		return;
	layer_index_free(t->index);
	free(t->files);
	free(t->objects);
	free(t->chunks);
	free(t->first_chunk);
	free(t);
}

static int entry_object_cmp(const void *a, const void *b)
{
	const struct layer_entry *x = *(const struct layer_entry *const *)a;
	const struct layer_entry *y = *(const struct layer_entry *const *)b;
	int c = strcmp(x->object, y->object);

	/* the first of equal objects sorts first: the one kept */
	return c ? c : x < y ? -1 : x > y;
}

int toc_keep_files(struct toc *t)
{
	struct layer_index *li = t->index;
	_cleanup_free_ struct layer_entry **order = NULL;
	_cleanup_free_ struct toc_file *files = NULL;
	_cleanup_free_ struct toc_chunk *chunks = NULL;
	_cleanup_free_ size_t *first = NULL;
	_cleanup_free_ char *objects = NULL;
	size_t n = 0, kept = 0, n_chunks = 0, bytes = 0;
	char *cursor;

	for (size_t i = 0; i < li->n_entries; i++)
		n += li->entries[i].object != NULL;
	order = malloc(MAX(n, 1) * sizeof(*order));
	if (!order)
		return -ENOMEM;
	n = 0;
	for (size_t i = 0; i < li->n_entries; i++)
		if (li->entries[i].object)
			order[n++] = &li->entries[i];
	qsort(order, n, sizeof(*order), entry_object_cmp);
	for (size_t i = 0; i < n; i++) {
		if (i > 0 && strcmp(order[i]->object, order[kept - 1]->object) == 0)
			continue;
		order[kept++] = order[i];
		bytes += strlen(order[i]->object) + 1;
		n_chunks += t->first_chunk[order[i] - li->entries + 1] -
			    t->first_chunk[order[i] - li->entries];
	}
	files = malloc(MAX(kept, 1) * sizeof(*files));
	chunks = malloc(MAX(n_chunks, 1) * sizeof(*chunks));
	first = malloc((kept + 1) * sizeof(*first));
	/* one block, not one string each: what is kept is not scattered
	 * among the pages of what is freed */
	objects = malloc(MAX(bytes, 1));
	if (!files || !chunks || !first || !objects)
		return -ENOMEM;
	n_chunks = 0;
	cursor = objects;
	for (size_t i = 0; i < kept; i++) {
		size_t at = (size_t)(order[i] - li->entries), k, len;
		const struct toc_chunk *c = toc_entry_chunks(t, at, &k);

		len = strlen(order[i]->object) + 1;
		files[i].object = memcpy(cursor, order[i]->object, len);
		files[i].size = order[i]->size;
		cursor += len;
		first[i] = n_chunks;
		if (c)
			memcpy(chunks + n_chunks, c, k * sizeof(*c));
		n_chunks += k;
	}
	first[kept] = n_chunks;
	layer_index_free(t->index);
	t->index = NULL;
	t->files = TAKE_PTR(files);
	t->n_files = kept;
	free(t->objects);
	t->objects = TAKE_PTR(objects);
	free(t->chunks);
	t->chunks = TAKE_PTR(chunks);
	t->n_chunks = n_chunks;
	free(t->first_chunk);
	t->first_chunk = TAKE_PTR(first);
	return 0;
}

ssize_t toc_find_file(const struct toc *t, const char *object)
{
	size_t lo = 0, hi = t->n_files;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(object, t->files[mid].object);

		if (c == 0)
			return (ssize_t)mid;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -1;
}

const struct toc_chunk *toc_entry_chunks(const struct toc *t, size_t i, size_t *ret_n)
{
	if (i >= (t->index ? t->index->n_entries : t->n_files)) {
		*ret_n = 0;
		return NULL;
	}
	*ret_n = t->first_chunk[i + 1] - t->first_chunk[i];
	return *ret_n ? t->chunks + t->first_chunk[i] : NULL;
}

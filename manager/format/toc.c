/* The two lazy formats as far as bytes go: which annotations name the
 * table of contents, which footer places it, how it is compressed and
 * which bytes its digest covers, and how one chunk of a file comes out of
 * the blob.  The entries themselves are read in tocjson.c.
 *
 * eStargz: a gzip stream of many members; the table is the JSON file
 * "stargz.index.json", the only entry of a tar in the last member but the
 * footer, an empty gzip member whose extra field spells the table's
 * offset.  The annotation is the digest of the JSON.
 * zstd:chunked: zstd frames; the table is zstd-compressed JSON in a
 * skippable frame, placed by an annotation, whose digest (of the
 * compressed bytes) is another annotation. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "config.h"
#include "errname.h"
#include "macro.h"
#include "toc-private.h"
#include "units.h"
#if HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif

#define ESTARGZ_FOOTER 51u
#define ESTARGZ_FOOTER_LEGACY 47u
/* room for the tar header(s), padding and end blocks around the JSON */
#define ESTARGZ_TAR_SLACK (64u << 10)

/* A skippable frame's header, magic and length, before the table. */
#define ZSTD_SKIPPABLE_HEADER 8u
#define ZSTD_FOOTER_OLD 48u /* 40 bytes of content */
#define ZSTD_FOOTER_NEW 72u /* 64 bytes of content, tar-split included */
#define ZSTD_MANIFEST_TYPE_CRFS 1u

static const unsigned char zstd_skippable_magic[4] = { 0x50, 0x2a, 0x4d, 0x18 };
/* The footer's own magic: containers/storage changed one letter's case
 * when the tar-split part was added. */
static const char zstd_footer_magic_old[8] = "GnUlInUx";
static const char zstd_footer_magic_new[8] = "GNUlInUx";

static uint64_t le64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- the descriptor ----------------------------------------------------- */

/* "offset:length:uncompressed:type", decimal, type 1. */
static int zstd_position_parse(const char *s, struct toc_layer *tl, char *errbuf, size_t errlen)
{
	uint64_t v[4];
	char buf[128];
	char *p = buf;

	if (strlen(s) >= sizeof(buf))
		goto bad;
	strcpy(buf, s);
	for (size_t i = 0; i < ARRAY_SIZE(v); i++) {
		char *colon = strchr(p, ':');

		if ((i < 3) != !!colon)
			goto bad;
		if (colon)
			*colon = '\0';
		if (parse_uint64(p, &v[i]) < 0)
			goto bad;
		if (colon)
			p = colon + 1;
	}
	if (v[3] != ZSTD_MANIFEST_TYPE_CRFS)
		return layer_fail(errbuf, errlen,
				  "toc: zstd:chunked manifest of type %" PRIu64 ", not 1", v[3]);
	if (v[1] == 0 || v[2] == 0 || v[0] < ZSTD_SKIPPABLE_HEADER || v[0] > tl->blob_size ||
	    v[1] > tl->blob_size - v[0])
		return layer_fail(errbuf, errlen,
				  "toc: zstd:chunked manifest at %" PRIu64 "+%" PRIu64
				  " is not inside the %" PRIu64 " byte blob",
				  v[0], v[1], tl->blob_size);
	if (v[2] > TOC_MAX_BYTES || v[1] > ZSTD_compressBound(TOC_MAX_BYTES))
		return layer_fail(errbuf, errlen,
				  "toc: zstd:chunked manifest larger than %u "
				  "bytes",
				  TOC_MAX_BYTES);
	tl->zc_offset = v[0];
	tl->zc_length = v[1];
	tl->zc_uncompressed = v[2];
	return 0;
bad:
	return layer_fail(errbuf, errlen, "toc: bad zstd:chunked manifest position \"%.100s\"", s);
}

static int toc_digest_copy(const char *value, const char *key, struct toc_layer *tl, char *errbuf,
			   size_t errlen)
{
	if (!digest_is_valid(value))
		return layer_fail(errbuf, errlen, "toc: annotation %s is not a sha256 digest", key);
	strcpy(tl->digest, value);
	return 0;
}

int toc_layer_from_descriptor(const struct descriptor *d, struct toc_layer *ret, char *errbuf,
			      size_t errlen)
{
	struct toc_layer tl = { .format = TOC_NONE, .blob_size = d->size };
	enum layer_compression c;
	const char *v, *pos, *key = TOC_ZSTD_CHECKSUM;
	int r;

	if (errbuf && errlen > 0)
		errbuf[0] = '\0';
	if (layer_media_type_compression(d->media_type, &c) < 0)
		goto out;

	if (c == LAYER_GZIP && (v = descriptor_annotation(d, TOC_ESTARGZ_DIGEST))) {
		r = toc_digest_copy(v, TOC_ESTARGZ_DIGEST, &tl, errbuf, errlen);
		if (r < 0)
			return r;
		tl.format = TOC_ESTARGZ;
		tl.stargz_files = true;
	} else if (c == LAYER_ZSTD) {
		v = descriptor_annotation(d, TOC_ZSTD_CHECKSUM);
		pos = descriptor_annotation(d, TOC_ZSTD_POSITION);
		if (!v && !pos) {
			key = TOC_ZSTD_CHECKSUM_OLD;
			v = descriptor_annotation(d, TOC_ZSTD_CHECKSUM_OLD);
			pos = descriptor_annotation(d, TOC_ZSTD_POSITION_OLD);
		}
		if (!v && !pos)
			goto out;
		if (!v || !pos)
			return layer_fail(errbuf, errlen,
					  "toc: zstd:chunked layer without its "
					  "manifest %s",
					  v ? "position" : "checksum");
		r = toc_digest_copy(v, key, &tl, errbuf, errlen);
		if (r < 0)
			return r;
		r = zstd_position_parse(pos, &tl, errbuf, errlen);
		if (r < 0)
			return r;
		tl.format = TOC_ZSTD_CHUNKED;
		/* stargz-snapshotter's zstd:chunked is eStargz in zstd */
		tl.stargz_files = descriptor_annotation(d, TOC_ESTARGZ_DIGEST);
	}
out:
	*ret = tl;
	return 0;
}

/* ---- the footer ------------------------------------------------------- */

/* An empty gzip member whose extra field is xlen bytes ending in
 * "%016xSTARGZ": returns 0 with the offset it spells, -EBADMSG when p is
 * not one. */
static int estargz_footer_parse(const unsigned char *p, size_t len, uint64_t *ret)
{
	static const unsigned char empty_block_and_trailer[13] = { 1, 0, 0, 0xff, 0xff, 0, 0,
								   0, 0, 0, 0,	  0,	0 };
	const unsigned char *hex;
	size_t xlen = len - 10 - 2 - sizeof(empty_block_and_trailer);
	uint64_t off = 0;

	if (p[0] != 0x1f || p[1] != 0x8b || p[2] != 8 || p[3] != 4 || p[10] != (xlen & 0xff) ||
	    p[11] != xlen >> 8)
		return -EBADMSG;
	if (len == ESTARGZ_FOOTER) {
		/* an RFC 1952 subfield: 'S' 'G', its length */
		if (p[12] != 'S' || p[13] != 'G' || p[14] != 22 || p[15] != 0)
			return -EBADMSG;
		hex = p + 16;
	} else {
		hex = p + 12;
	}
	if (memcmp(hex + 16, "STARGZ", 6) != 0 ||
	    memcmp(p + len - sizeof(empty_block_and_trailer), empty_block_and_trailer,
		   sizeof(empty_block_and_trailer)) != 0)
		return -EBADMSG;
	for (int i = 0; i < 16; i++) {
		int c = hex[i], d;

		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return -EBADMSG;
		off = off << 4 | (uint64_t)d;
	}
	*ret = off;
	return 0;
}

static int estargz_locate(const struct toc_layer *tl, const unsigned char *tail, size_t tail_len,
			  struct toc_range *ret, char *errbuf, size_t errlen)
{
	static const size_t sizes[] = { ESTARGZ_FOOTER, ESTARGZ_FOOTER_LEGACY };

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		size_t n = sizes[i];
		uint64_t off;

		if (!tail || tail_len < n || tl->blob_size < n ||
		    estargz_footer_parse(tail + tail_len - n, n, &off) < 0)
			continue;
		if (off >= tl->blob_size - n)
			return layer_fail(errbuf, errlen,
					  "toc: eStargz footer places the table "
					  "at %" PRIu64 ", past the end of the "
					  "%" PRIu64 " byte blob",
					  off, tl->blob_size);
		ret->offset = off;
		ret->length = tl->blob_size - n - off;
		return 0;
	}
	return layer_fail(errbuf, errlen,
			  "toc: no eStargz footer at the end "
			  "of the blob");
}

/* The annotation places the manifest; a footer, when the tail shows one,
 * says the same or the blob is not what the manifest describes. */
static int zstd_locate(const struct toc_layer *tl, const unsigned char *tail, size_t tail_len,
		       struct toc_range *ret, char *errbuf, size_t errlen)
{
	static const struct {
		size_t size;
		const char *magic;
	} footers[] = {
		{ ZSTD_FOOTER_OLD, zstd_footer_magic_old },
		{ ZSTD_FOOTER_NEW, zstd_footer_magic_new },
	};

	for (size_t i = 0; tail && i < ARRAY_SIZE(footers); i++) {
		size_t n = footers[i].size;
		const unsigned char *f = tail + tail_len - n;

		if (tail_len < n || memcmp(tail + tail_len - 8, footers[i].magic, 8) != 0 ||
		    memcmp(f, zstd_skippable_magic, 4) != 0 ||
		    le32(f + 4) != n - ZSTD_SKIPPABLE_HEADER)
			continue;
		f += ZSTD_SKIPPABLE_HEADER;
		if (le64(f) != tl->zc_offset || le64(f + 8) != tl->zc_length ||
		    le64(f + 16) != tl->zc_uncompressed || le64(f + 24) != ZSTD_MANIFEST_TYPE_CRFS)
			return layer_fail(errbuf, errlen,
					  "toc: zstd:chunked footer disagrees "
					  "with the manifest position "
					  "annotation");
		break;
	}
	ret->offset = tl->zc_offset;
	ret->length = tl->zc_length;
	return 0;
}

int toc_locate(const struct toc_layer *tl, const void *tail, size_t tail_len, struct toc_range *ret,
	       char *errbuf, size_t errlen)
{
	if (errbuf && errlen > 0)
		errbuf[0] = '\0';
	if (tail_len > tl->blob_size)
		return layer_fail(errbuf, errlen,
				  "toc: %zu bytes of tail from a %" PRIu64 " byte blob", tail_len,
				  tl->blob_size);
	switch (tl->format) {
	case TOC_ESTARGZ:
		return estargz_locate(tl, tail, tail_len, ret, errbuf, errlen);
	case TOC_ZSTD_CHUNKED:
		return zstd_locate(tl, tail, tail_len, ret, errbuf, errlen);
	default:
		return -EINVAL;
	}
}

/* ---- the table -------------------------------------------------------- */

static void inflate_endp(z_stream **z)
{
	if (*z) {
		inflateEnd(*z);
		free(*z);
	}
}

static int inflate_begin(z_stream **ret)
{
	z_stream *z = calloc(1, sizeof(*z));

	if (!z)
		return -ENOMEM;
	/* 16 + 15: one gzip member, header and trailer checked */
	if (inflateInit2(z, 16 + MAX_WBITS) != Z_OK) {
		free(z);
		return -ENOMEM;
	}
	*ret = z;
	return 0;
}

/* zlib counts in uInt: feed a large buffer in steps. */
static void inflate_feed(z_stream *z, const unsigned char **in, size_t *left)
{
	if (z->avail_in == 0 && *left > 0) {
		uInt n = (uInt)MIN(*left, (size_t)UINT32_MAX);

		z->next_in = (unsigned char *)*in;
		z->avail_in = n;
		*in += n;
		*left -= n;
	}
}

/* The whole gzip member of the table, which must fill the range: the tar
 * in it, uncompressed, into a new buffer. */
static int estargz_inflate_toc(const unsigned char *buf, size_t len, unsigned char **ret,
			       size_t *ret_len, char *errbuf, size_t errlen)
{
	_cleanup_(inflate_endp) z_stream *z = NULL;
	_cleanup_free_ unsigned char *out = NULL;
	const size_t max = TOC_MAX_BYTES + ESTARGZ_TAR_SLACK;
	/* JSON compresses about tenfold: start near that, grow to max */
	size_t cap = MIN(max, MAX(len * 16, (size_t)ESTARGZ_TAR_SLACK)), have = 0;
	int r, zr;

	r = inflate_begin(&z);
	if (r < 0)
		return r;
	out = malloc(cap);
	if (!out)
		return -ENOMEM;
	for (;;) {
		if (have == cap) {
			unsigned char *n;

			if (cap == max)
				return layer_fail(errbuf, errlen,
						  "toc: eStargz table larger "
						  "than %u bytes",
						  TOC_MAX_BYTES);
			cap = MIN(cap * 2, max);
			n = realloc(out, cap);
			if (!n)
				return -ENOMEM;
			out = n;
		}
		z->next_out = out + have;
		z->avail_out = (uInt)(cap - have);
		inflate_feed(z, &buf, &len);
		zr = inflate(z, Z_NO_FLUSH);
		have = cap - z->avail_out;
		if (zr == Z_STREAM_END)
			break;
		if (zr != Z_OK)
			return layer_fail(errbuf, errlen,
					  "toc: eStargz table is not one whole "
					  "gzip member%s%s",
					  z->msg ? ": " : "", z->msg ? z->msg : "");
	}
	if (z->avail_in > 0 || len > 0)
		return layer_fail(errbuf, errlen,
				  "toc: bytes after the gzip member of the "
				  "eStargz table");
	*ret_len = have;
	*ret = TAKE_PTR(out);
	return 0;
}

static void archive_read_freep(struct archive **a)
{
	if (*a)
		archive_read_free(*a);
}

/* The JSON out of the table's tar: its first entry, a regular file named
 * stargz.index.json.  Returns a new buffer. */
static int estargz_toc_json(const unsigned char *tar, size_t tar_len, char **ret, size_t *ret_len,
			    char *errbuf, size_t errlen)
{
	_cleanup_(archive_read_freep) struct archive *a = NULL;
	_cleanup_free_ char *json = NULL;
	struct archive_entry *ae;
	const char *name;
	la_int64_t size;
	la_ssize_t n;

	a = archive_read_new();
	if (!a)
		return -ENOMEM;
	if (archive_read_support_format_tar(a) != ARCHIVE_OK ||
	    archive_read_support_filter_none(a) != ARCHIVE_OK)
		return -ENOMEM;
	if (archive_read_open_memory(a, tar, tar_len) != ARCHIVE_OK ||
	    archive_read_next_header(a, &ae) != ARCHIVE_OK)
		return layer_fail(errbuf, errlen, "toc: the eStargz table is not a tar entry");
	name = archive_entry_pathname(ae);
	if (!name || strcmp(name, ESTARGZ_TOC_NAME) != 0 || archive_entry_filetype(ae) != AE_IFREG)
		return layer_fail(errbuf, errlen,
				  "toc: the eStargz table's tar entry is not a "
				  "file named " ESTARGZ_TOC_NAME);
	size = archive_entry_size(ae);
	if (size <= 0 || size > (la_int64_t)TOC_MAX_BYTES)
		return layer_fail(errbuf, errlen, "toc: eStargz table of %" PRId64 " bytes",
				  (int64_t)size);
	json = malloc((size_t)size);
	if (!json)
		return -ENOMEM;
	n = archive_read_data(a, json, (size_t)size);
	if (n != size)
		return layer_fail(errbuf, errlen,
				  "toc: the eStargz table's tar entry is cut "
				  "short");
	*ret = TAKE_PTR(json);
	*ret_len = (size_t)size;
	return 0;
}

static int toc_digest_check(const void *buf, size_t len, const char *want, const char *what,
			    char *errbuf, size_t errlen)
{
	char have[DIGEST_STRING_MAX];
	int r = digest_buffer(buf, len, have);

	if (r < 0)
		return r;
	if (strcmp(have, want) != 0)
		return layer_fail(errbuf, errlen, "toc: %s has digest %s, the manifest says %s",
				  what, have, want);
	return 0;
}

static int toc_parse_as(const struct toc_layer *tl, const struct toc_range *where, const void *buf,
			size_t len, const struct layer_limits *lim, bool files_only,
			struct toc **ret, char *errbuf, size_t errlen)
{
	_cleanup_free_ unsigned char *tar = NULL;
	_cleanup_free_ char *json = NULL;
	size_t tar_len = 0, json_len = 0;
	uint64_t data_end;
	int r;

	if (errbuf && errlen > 0)
		errbuf[0] = '\0';
	if (len != where->length || where->offset > tl->blob_size ||
	    where->length > tl->blob_size - where->offset)
		return layer_fail(errbuf, errlen,
				  "toc: %zu bytes given for a table of %" PRIu64 " at %" PRIu64,
				  len, where->length, where->offset);

	switch (tl->format) {
	case TOC_ESTARGZ:
		r = estargz_inflate_toc(buf, len, &tar, &tar_len, errbuf, errlen);
		if (r < 0)
			return r;
		r = estargz_toc_json(tar, tar_len, &json, &json_len, errbuf, errlen);
		if (r < 0)
			return r;
		r = toc_digest_check(json, json_len, tl->digest, "the eStargz table", errbuf,
				     errlen);
		if (r < 0)
			return r;
		data_end = where->offset;
		break;
	case TOC_ZSTD_CHUNKED: {
		size_t n;

		r = toc_digest_check(buf, len, tl->digest, "the zstd:chunked manifest", errbuf,
				     errlen);
		if (r < 0)
			return r;
		if (tl->zc_uncompressed > TOC_MAX_BYTES)
			return layer_fail(errbuf, errlen,
					  "toc: zstd:chunked manifest larger "
					  "than %u bytes",
					  TOC_MAX_BYTES);
		json_len = (size_t)tl->zc_uncompressed;
		json = malloc(json_len);
		if (!json)
			return -ENOMEM;
		n = ZSTD_decompress(json, json_len, buf, len);
		if (ZSTD_isError(n) || n != json_len)
			return layer_fail(errbuf, errlen,
					  "toc: zstd:chunked manifest does not "
					  "decompress to %zu bytes%s%s",
					  json_len, ZSTD_isError(n) ? ": " : "",
					  ZSTD_isError(n) ? ZSTD_getErrorName(n) : "");
		/* the manifest's skippable frame header comes first */
		data_end = where->offset - MIN(where->offset, (uint64_t)ZSTD_SKIPPABLE_HEADER);
		break;
	}
	default:
		return -EINVAL;
	}
	return toc_from_json(tl, json, json_len, data_end, lim, files_only, ret, errbuf, errlen);
}

int toc_parse(const struct toc_layer *tl, const struct toc_range *where, const void *buf,
	      size_t len, const struct layer_limits *lim, struct toc **ret, char *errbuf,
	      size_t errlen)
{
	return toc_parse_as(tl, where, buf, len, lim, false, ret, errbuf, errlen);
}

int toc_parse_files(const struct toc_layer *tl, const struct toc_range *where, const void *buf,
		    size_t len, struct toc **ret, char *errbuf, size_t errlen)
{
	return toc_parse_as(tl, where, buf, len, NULL, true, ret, errbuf, errlen);
}

/* ---- chunks ----------------------------------------------------------- */

/* Where the decompressed bytes of a chunk go: skip of them first are not
 * the chunk's (inner_offset), then want bytes through piece to sink,
 * hashed on the way. */
struct chunk_out {
	uint64_t skip, want, at;
	unsigned char *piece;
	size_t piece_len;
	struct hasher *hasher; /* NULL: the chunk has no digest */
	toc_chunk_sink_fn sink;
	void *userdata;
};

/* The buffer the next bytes are decompressed into, and how many of them
 * it takes. */
static void *chunk_out_buf(struct chunk_out *o, unsigned char *scratch, size_t scratch_len,
			   size_t *ret_len)
{
	if (o->skip > 0) {
		*ret_len = (size_t)MIN(o->skip, (uint64_t)scratch_len);
		return scratch;
	}
	*ret_len = (size_t)MIN(o->want, (uint64_t)o->piece_len);
	return o->piece;
}

/* n bytes came out into the buffer chunk_out_buf gave. */
static int chunk_out_took(struct chunk_out *o, size_t n)
{
	int r;

	if (o->skip > 0) {
		o->skip -= n;
		return 0;
	}
	if (n == 0)
		return 0;
	if (o->hasher)
		hasher_update(o->hasher, o->piece, n);
	r = o->sink(o->userdata, o->at, o->piece, n);
	o->want -= n;
	o->at += n;
	return r;
}

#if HAVE_ISAL
/* ISA-L counts in uint32_t: feed a large buffer in steps. */
static void isal_feed(struct inflate_state *st, const unsigned char **in, size_t *left)
{
	if (st->avail_in == 0 && *left > 0) {
		uint32_t n = (uint32_t)MIN(*left, (size_t)UINT32_MAX);

		st->next_in = (uint8_t *)*in;
		st->avail_in = n;
		*in += n;
		*left -= n;
	}
}

/* A chunk is most of a lazy layer's CPU: igzip inflates it about four
 * times faster than zlib.  The trailer is never reached when the member
 * goes on past the chunk; the chunk's digest is what vouches for it. */
static int gzip_chunk(const struct toc_chunk *c, const unsigned char *src, size_t src_len,
		      struct chunk_out *o, char *errbuf, size_t errlen)
{
	_cleanup_free_ struct inflate_state *st = malloc(sizeof(*st));
	unsigned char scratch[16 << 10];
	int r, ir = ISAL_DECOMP_OK;

	if (!st)
		return -ENOMEM;
	isal_inflate_init(st);
	st->crc_flag = ISAL_GZIP;
	while (o->skip > 0 || o->want > 0) {
		uint32_t out_before, in_before;
		size_t len;

		st->next_out = chunk_out_buf(o, scratch, sizeof(scratch), &len);
		st->avail_out = (uint32_t)MIN(len, (size_t)UINT32_MAX);
		isal_feed(st, &src, &src_len);
		out_before = st->avail_out;
		in_before = st->avail_in;
		ir = isal_inflate(st);
		r = chunk_out_took(o, out_before - st->avail_out);
		if (r < 0)
			return r;
		if (ir < 0 || st->block_state == ISAL_BLOCK_FINISH)
			break;
		if (out_before == st->avail_out && in_before == st->avail_in && src_len == 0)
			break; /* the input ran out */
	}
	if (o->skip > 0 || o->want > 0)
		return layer_fail(errbuf, errlen, "toc: gzip chunk at %" PRIu64 " %s",
				  c->blob_offset, ir >= 0 ? "ends early" : "is corrupt");
	return 0;
}
#else
static int gzip_chunk(const struct toc_chunk *c, const unsigned char *src, size_t src_len,
		      struct chunk_out *o, char *errbuf, size_t errlen)
{
	_cleanup_(inflate_endp) z_stream *z = NULL;
	unsigned char scratch[16 << 10];
	int r, zr = Z_OK;

	r = inflate_begin(&z);
	if (r < 0)
		return r;
	/* The member goes on past the chunk (tar headers of the next
	 * entries, other files sharing it): stop once the chunk is out. */
	while (o->skip > 0 || o->want > 0) {
		size_t len;

		z->next_out = chunk_out_buf(o, scratch, sizeof(scratch), &len);
		z->avail_out = (uInt)MIN(len, (size_t)UINT32_MAX);
		inflate_feed(z, &src, &src_len);
		{
			uInt before = z->avail_out;

			zr = inflate(z, Z_NO_FLUSH);
			r = chunk_out_took(o, before - z->avail_out);
			if (r < 0)
				return r;
			if (zr != Z_OK)
				break;
		}
	}
	if (o->skip > 0 || o->want > 0)
		return layer_fail(
			errbuf, errlen, "toc: gzip chunk at %" PRIu64 " %s", c->blob_offset,
			zr == Z_OK || zr == Z_BUF_ERROR || zr == Z_STREAM_END ? "ends early"
									      : "is corrupt");
	return 0;
}
#endif

/* A decompression context per thread, made at its first chunk: a
 * zstd:chunked layer has tens of thousands of chunks, and making a context
 * costs more than decompressing a small one. */
static pthread_key_t dctx_key;
static pthread_once_t dctx_once = PTHREAD_ONCE_INIT;
static bool dctx_keyed;

static void dctx_free(void *d)
{
	ZSTD_freeDCtx(d);
}

static void dctx_make_key(void)
{
	dctx_keyed = pthread_key_create(&dctx_key, dctx_free) == 0;
}

/* This thread's context, ready for a new frame (*owned: a context of the
 * caller's own, to free); NULL: no memory. */
static ZSTD_DCtx *dctx_get(bool *owned)
{
	ZSTD_DCtx *d;

	pthread_once(&dctx_once, dctx_make_key);
	*owned = !dctx_keyed;
	d = dctx_keyed ? pthread_getspecific(dctx_key) : NULL;
	if (d) {
		ZSTD_DCtx_reset(d, ZSTD_reset_session_only);
		return d;
	}
	d = ZSTD_createDCtx();
	if (d && !*owned && pthread_setspecific(dctx_key, d) != 0)
		*owned = true;
	return d;
}

static void dctx_put(ZSTD_DCtx *d, bool owned)
{
	if (owned)
		ZSTD_freeDCtx(d);
}

/* Like gzip_chunk: the frames may go on past the chunk (stargz's own zstd
 * writer puts the next tar header in the chunk's frame). */
static int zstd_chunk(const struct toc_chunk *c, const unsigned char *src, size_t src_len,
		      struct chunk_out *o, char *errbuf, size_t errlen)
{
	bool owned;
	ZSTD_DCtx *d = dctx_get(&owned);
	unsigned char scratch[16 << 10];
	ZSTD_inBuffer in = { src, src_len, 0 };
	size_t zr = 0;
	int r;

	if (!d)
		return -ENOMEM;
	r = 0;
	while (o->skip > 0 || o->want > 0) {
		ZSTD_outBuffer out = { 0 };

		out.dst = chunk_out_buf(o, scratch, sizeof(scratch), &out.size);
		zr = ZSTD_decompressStream(d, &out, &in);
		if (ZSTD_isError(zr))
			break;
		r = chunk_out_took(o, out.pos);
		if (r < 0)
			break;
		if (out.pos == 0 && in.pos == in.size)
			break;
	}
	dctx_put(d, owned);
	if (r < 0)
		return r;
	if (o->skip > 0 || o->want > 0)
		return layer_fail(errbuf, errlen, "toc: zstd chunk at %" PRIu64 " %s%s",
				  c->blob_offset, ZSTD_isError(zr) ? "is corrupt: " : "ends early",
				  ZSTD_isError(zr) ? ZSTD_getErrorName(zr) : "");
	return 0;
}

int toc_chunk_stream(enum toc_format f, const struct toc_chunk *c, const void *src, size_t src_len,
		     void *piece, size_t piece_len, toc_chunk_sink_fn sink, void *userdata,
		     bool check, char *errbuf, size_t errlen)
{
	_cleanup_(hasher_freep) struct hasher *h = NULL;
	struct chunk_out o = { .skip = c->inner_offset,
			       .want = c->size,
			       .piece = piece,
			       .piece_len = piece_len,
			       .sink = sink,
			       .userdata = userdata };
	char have[DIGEST_STRING_MAX];
	int r;

	if (errbuf && errlen > 0)
		errbuf[0] = '\0';
	if (src_len != c->blob_length)
		return layer_fail(errbuf, errlen, "toc: %zu bytes given for a chunk of %" PRIu64,
				  src_len, c->blob_length);
	if (piece_len == 0)
		return -EINVAL;
	if (check && c->digest[0] && !(o.hasher = h = hasher_new()))
		return -ENOMEM;
	switch (f) {
	case TOC_ESTARGZ:
		r = gzip_chunk(c, src, src_len, &o, errbuf, errlen);
		break;
	case TOC_ZSTD_CHUNKED:
		r = zstd_chunk(c, src, src_len, &o, errbuf, errlen);
		break;
	default:
		return -EINVAL;
	}
	if (r < 0 || !h)
		return r;
	hasher_final(h, have);
	if (strcmp(have, c->digest) != 0)
		return layer_fail(errbuf, errlen, "toc: chunk has digest %s, the manifest says %s",
				  have, c->digest);
	return 0;
}

static int copy_sink(void *userdata, uint64_t off, const void *buf, size_t len)
{
	memcpy((unsigned char *)userdata + off, buf, len);
	return 0;
}

int toc_chunk_decompress(enum toc_format f, const struct toc_chunk *c, const void *src,
			 size_t src_len, void *dst, char *errbuf, size_t errlen)
{
	unsigned char piece[16 << 10];

	if (c->size > SIZE_MAX)
		return -ENOMEM;
	return toc_chunk_stream(f, c, src, src_len, piece, sizeof(piece), copy_sink, dst, true,
				errbuf, errlen);
}

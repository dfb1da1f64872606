/* Unit tests for manager/format/toc: blobs of both lazy formats are built here,
 * gzip members and zstd frames with the libraries, the table's JSON by
 * hand, so each case states exactly the bytes it feeds the parser. */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include <cmocka.h>
#include <zlib.h>
#include <zstd.h>

#include "macro.h"
#include "manifest.h"
#include "toc.h"

#include "tocblob.h"

/* What a lazy layer keeps of a table accepted before is the same whether
 * it parsed the whole table and kept the files or parsed the files only. */
static void check_files_only(const struct toc_layer *tl, const struct toc_range *where,
			     const void *p)
{
	struct toc *all = NULL, *files = NULL;
	char err[512];

	assert_int_equal(toc_parse(tl, where, p, where->length, NULL, &all, err, sizeof(err)), 0);
	assert_int_equal(toc_keep_files(all), 0);
	assert_int_equal(toc_parse_files(tl, where, p, where->length, &files, err, sizeof(err)), 0);
	assert_null(files->index);
	assert_int_equal(files->n_files, all->n_files);
	assert_int_equal(files->n_chunks, all->n_chunks);
	assert_int_equal(files->prefetch_end, all->prefetch_end);
	for (size_t i = 0; i < all->n_files; i++) {
		assert_string_equal(files->files[i].object, all->files[i].object);
		assert_int_equal(files->files[i].size, all->files[i].size);
		assert_int_equal(files->first_chunk[i], all->first_chunk[i]);
		assert_int_equal(toc_find_file(files, all->files[i].object), (ssize_t)i);
	}
	assert_int_equal(files->first_chunk[all->n_files], all->first_chunk[all->n_files]);
	if (all->n_chunks > 0)
		assert_memory_equal(files->chunks, all->chunks,
				    all->n_chunks * sizeof(*all->chunks));
	assert_int_equal(toc_find_file(files, "0"), -1);
	toc_free(all);
	toc_free(files);
}

/* Locates and parses the table of b as the lazy puller would. */
static int load(const struct blob *b, const struct toc_layer *tl, const struct layer_limits *lim,
		struct toc **ret, char *err, size_t errlen)
{
	size_t tail = MIN(b->len, (size_t)TOC_TAIL_BYTES);
	struct toc_range where;
	int r;

	r = toc_locate(tl, b->p + b->len - tail, tail, &where, err, errlen);
	if (r < 0)
		return r;
	r = toc_parse(tl, &where, b->p + where.offset, where.length, lim, ret, err, errlen);
	if (r == 0)
		check_files_only(tl, &where, b->p + where.offset);
	return r;
}

/* A printf into a new string. */
static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
	va_list ap;
	char *s;

	va_start(ap, f);
	assert_true(vasprintf(&s, f, ap) >= 0);
	va_end(ap);
	return s;
}

static const struct layer_entry *find(const struct toc *t, const char *path, size_t *ret_i)
{
	for (size_t i = 0; i < t->index->n_entries; i++)
		if (strcmp(t->index->entries[i].path, path) == 0) {
			if (ret_i)
				*ret_i = i;
			return &t->index->entries[i];
		}
	fail_msg("no entry \"%s\"", path);
	return NULL;
}

/* Every chunk of entry path decompresses from b to its content. */
static void check_content(const struct toc *t, const struct blob *b, const char *path,
			  const void *want, size_t len)
{
	const struct toc_chunk *cs;
	unsigned char *buf = malloc(len + 1);
	size_t i, n;
	char err[256];

	assert_non_null(buf);
	find(t, path, &i);
	cs = toc_entry_chunks(t, i, &n);
	for (size_t k = 0; k < n; k++) {
		assert_true(cs[k].blob_offset + cs[k].blob_length <= b->len);
		if (toc_chunk_decompress(t->format, &cs[k], b->p + cs[k].blob_offset,
					 cs[k].blob_length, buf + cs[k].offset, err,
					 sizeof(err)) != 0)
			fail_msg("%s chunk %zu: %s", path, k, err);
	}
	assert_memory_equal(buf, want, len);
	free(buf);
}

/* ---- the descriptor -------------------------------------------------------- */

#define HEX64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define DIG "sha256:" HEX64

static int detect(const char *media_type, const char *ann, uint64_t size, struct toc_layer *tl,
		  char *err)
{
	char *doc = fmt("{\"schemaVersion\":2,\"config\":{\"mediaType\":\"a\","
			"\"digest\":\"%s\",\"size\":1},\"layers\":[{"
			"\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%" PRIu64
			",\"annotations\":{%s}}]}",
			DIG, media_type, DIG, size, ann);
	struct manifest *m = NULL;
	int r;

	assert_int_equal(manifest_parse(doc, strlen(doc), NULL, &m, err, 256), 0);
	r = toc_layer_from_descriptor(&m->layers[0], tl, err, 256);
	manifest_free(m);
	free(doc);
	return r;
}

static void test_detect(void **state)
{
	static const struct {
		const char *media_type, *ann;
		int ret;
		enum toc_format format;
		const char *reason;
	} cases[] = {
		{ MEDIA_OCI_LAYER_GZIP, "", 0, TOC_NONE, NULL },
		{ MEDIA_OCI_LAYER_GZIP, "\"" TOC_ESTARGZ_DIGEST "\":\"" DIG "\"", 0, TOC_ESTARGZ,
		  NULL },
		{ MEDIA_DOCKER_LAYER_GZIP, "\"" TOC_ESTARGZ_DIGEST "\":\"" DIG "\"", 0, TOC_ESTARGZ,
		  NULL },
		{ MEDIA_OCI_LAYER_GZIP, "\"" TOC_ESTARGZ_DIGEST "\":\"sha256:12\"", -EBADMSG,
		  TOC_NONE, "not a sha256 digest" },
		{ MEDIA_OCI_LAYER, "\"" TOC_ESTARGZ_DIGEST "\":\"" DIG "\"", 0, TOC_NONE, NULL },
		{ "application/x-other", "\"" TOC_ESTARGZ_DIGEST "\":\"" DIG "\"", 0, TOC_NONE,
		  NULL },
		{ MEDIA_OCI_LAYER_ZSTD,
		  "\"" TOC_ZSTD_CHECKSUM "\":\"" DIG "\",\"" TOC_ZSTD_POSITION
		  "\":\"100:20:300:1\"",
		  0, TOC_ZSTD_CHUNKED, NULL },
		{ MEDIA_OCI_LAYER_ZSTD,
		  "\"" TOC_ZSTD_CHECKSUM_OLD "\":\"" DIG "\",\"" TOC_ZSTD_POSITION_OLD
		  "\":\"100:20:300:1\"",
		  0, TOC_ZSTD_CHUNKED, NULL },
		{ MEDIA_OCI_LAYER_GZIP,
		  "\"" TOC_ZSTD_CHECKSUM "\":\"" DIG "\",\"" TOC_ZSTD_POSITION
		  "\":\"100:20:300:1\"",
		  0, TOC_NONE, NULL },
		{ MEDIA_OCI_LAYER_ZSTD, "\"" TOC_ZSTD_CHECKSUM "\":\"" DIG "\"", -EBADMSG, TOC_NONE,
		  "without its manifest position" },
		{ MEDIA_OCI_LAYER_ZSTD, "\"" TOC_ZSTD_POSITION "\":\"100:20:300:1\"", -EBADMSG,
		  TOC_NONE, "without its manifest checksum" },
		{ MEDIA_OCI_LAYER_ZSTD,
		  "\"" TOC_ZSTD_CHECKSUM "\":\"" DIG "\",\"" TOC_ZSTD_POSITION
		  "\":\"100:20:300:2\"",
		  -EBADMSG, TOC_NONE, "of type 2" },
		{ MEDIA_OCI_LAYER_ZSTD,
		  "\"" TOC_ZSTD_CHECKSUM "\":\"" DIG "\",\"" TOC_ZSTD_POSITION "\":\"100:20:300\"",
		  -EBADMSG, TOC_NONE, "bad zstd:chunked manifest position" },
		{ MEDIA_OCI_LAYER_ZSTD,
		  "\"" TOC_ZSTD_CHECKSUM "\":\"" DIG "\",\"" TOC_ZSTD_POSITION
		  "\":\"100:20:300:1:5\"",
		  -EBADMSG, TOC_NONE, "bad zstd:chunked manifest position" },
		{ MEDIA_OCI_LAYER_ZSTD,
		  "\"" TOC_ZSTD_CHECKSUM "\":\"" DIG "\",\"" TOC_ZSTD_POSITION "\":\"-1:20:300:1\"",
		  -EBADMSG, TOC_NONE, "bad zstd:chunked manifest position" },
		{ MEDIA_OCI_LAYER_ZSTD,
		  "\"" TOC_ZSTD_CHECKSUM "\":\"" DIG "\",\"" TOC_ZSTD_POSITION "\":\" 1:20:300:1\"",
		  -EBADMSG, TOC_NONE, "bad zstd:chunked manifest position" },
		{ MEDIA_OCI_LAYER_ZSTD,
		  "\"" TOC_ZSTD_CHECKSUM "\":\"" DIG "\",\"" TOC_ZSTD_POSITION
		  "\":\"990:20:300:1\"",
		  -EBADMSG, TOC_NONE, "not inside the 1000 byte blob" },
		{ MEDIA_OCI_LAYER_ZSTD,
		  "\"" TOC_ZSTD_CHECKSUM "\":\"" DIG "\",\"" TOC_ZSTD_POSITION "\":\"100:0:300:1\"",
		  -EBADMSG, TOC_NONE, "not inside" },
		{ MEDIA_OCI_LAYER_ZSTD,
		  "\"" TOC_ZSTD_CHECKSUM "\":\"" DIG "\",\"" TOC_ZSTD_POSITION
		  "\":\"100:20:999999999999:1\"",
		  -EBADMSG, TOC_NONE, "larger than" },
		{ MEDIA_OCI_LAYER_ZSTD,
		  "\"" TOC_ZSTD_CHECKSUM "\":\"" DIG "\",\"" TOC_ZSTD_POSITION
		  "\":\"100:20:99999999999999999999999:1\"",
		  -EBADMSG, TOC_NONE, "bad zstd:chunked" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct toc_layer tl;
		char err[256];
		int r = detect(cases[i].media_type, cases[i].ann, 1000, &tl, err);

		if (r != cases[i].ret)
			fail_msg("case %zu: %d, not %d (%s)", i, r, cases[i].ret, err);
		if (r == 0) {
			assert_int_equal(tl.format, cases[i].format);
			assert_int_equal(tl.blob_size, 1000);
			if (tl.format != TOC_NONE)
				assert_string_equal(tl.digest, DIG);
		} else if (!strstr(err, cases[i].reason)) {
			fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err, cases[i].reason);
		}
	}

	{
		struct toc_layer tl;
		char err[256];

		assert_int_equal(detect(MEDIA_OCI_LAYER_ZSTD,
					"\"" TOC_ZSTD_CHECKSUM "\":\"" DIG "\",\"" TOC_ZSTD_POSITION
					"\":\"100:20:300:1\"",
					1000, &tl, err),
				 0);
		assert_int_equal(tl.zc_offset, 100);
		assert_int_equal(tl.zc_length, 20);
		assert_int_equal(tl.zc_uncompressed, 300);
		assert_false(tl.stargz_files);
		/* stargz's own zstd:chunked carries both */
		assert_int_equal(detect(MEDIA_OCI_LAYER_ZSTD,
					"\"" TOC_ESTARGZ_DIGEST "\":\"" DIG
					"\",\"" TOC_ZSTD_CHECKSUM "\":\"" DIG
					"\",\"" TOC_ZSTD_POSITION "\":\"100:20:300:1\"",
					1000, &tl, err),
				 0);
		assert_int_equal(tl.format, TOC_ZSTD_CHUNKED);
		assert_true(tl.stargz_files);
	}
}

/* ---- footers ------------------------------------------------------------------ */

static void test_locate_estargz(void **state)
{
	struct blob b = { 0 };
	struct toc_layer tl;
	struct toc_range where;
	char err[256];
	size_t toc_at;

	blob_zeros(&b, 100);
	toc_at = b.len;
	put_estargz_end(&b, "{\"version\":1,\"entries\":[]}", false, &tl);
	assert_int_equal(toc_locate(&tl, b.p + b.len - 72, 72, &where, err, sizeof(err)), 0);
	assert_int_equal(where.offset, toc_at);
	assert_int_equal(where.length, b.len - 51 - toc_at);
	/* exactly the footer is enough */
	assert_int_equal(toc_locate(&tl, b.p + b.len - 51, 51, &where, err, sizeof(err)), 0);
	assert_int_equal(toc_locate(&tl, b.p + b.len - 50, 50, &where, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "no eStargz footer"));
	/* a tail longer than the blob */
	tl.blob_size = 60;
	assert_int_equal(toc_locate(&tl, b.p + b.len - 72, 72, &where, err, sizeof(err)), -EBADMSG);
	/* a footer placing the table past its own start */
	tl.blob_size = b.len;
	b.p[b.len - 51 + 16] = 'f';
	assert_int_equal(toc_locate(&tl, b.p + b.len - 51, 51, &where, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "past the end"));
	/* not hex */
	b.p[b.len - 51 + 16] = 'g';
	assert_int_equal(toc_locate(&tl, b.p + b.len - 51, 51, &where, err, sizeof(err)), -EBADMSG);
	b.p[b.len - 51 + 16] = '0';
	/* a flipped magic, a non-empty last block */
	b.p[b.len - 51 + 33] = 'X';
	assert_int_equal(toc_locate(&tl, b.p + b.len - 51, 51, &where, err, sizeof(err)), -EBADMSG);
	b.p[b.len - 51 + 33] = 'Z';
	b.p[b.len - 10] = 1;
	assert_int_equal(toc_locate(&tl, b.p + b.len - 51, 51, &where, err, sizeof(err)), -EBADMSG);
	free(b.p);

	/* the legacy stargz footer */
	b = (struct blob){ 0 };
	blob_zeros(&b, 10);
	put_estargz_end(&b, "{\"version\":1,\"entries\":[]}", true, &tl);
	assert_int_equal(toc_locate(&tl, b.p, b.len, &where, err, sizeof(err)), 0);
	assert_int_equal(where.offset, 10);
	assert_int_equal(where.length, b.len - 47 - 10);
	free(b.p);
}

static void test_locate_zstd(void **state)
{
	struct blob b = { 0 };
	struct toc_layer tl;
	struct toc_range where;
	char err[256];

	blob_zeros(&b, 1000);
	put_zstd_end(&b, "{\"version\":1,\"entries\":[]}", &tl);
	assert_int_equal(toc_locate(&tl, b.p + b.len - 72, 72, &where, err, sizeof(err)), 0);
	assert_int_equal(where.offset, 1008);
	assert_int_equal(where.length, tl.zc_length);
	/* the annotation alone places it */
	assert_int_equal(toc_locate(&tl, NULL, 0, &where, err, sizeof(err)), 0);
	assert_int_equal(where.offset, 1008);
	/* a footer that disagrees with the annotation */
	tl.zc_uncompressed++;
	assert_int_equal(toc_locate(&tl, b.p + b.len - 72, 72, &where, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "disagrees"));
	free(b.p);
}

/* ---- whole tables --------------------------------------------------------- */

static char *content(size_t n, unsigned seed)
{
	char *p = malloc(n);

	assert_non_null(p);
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (char)(seed >> 16);
	}
	return p;
}

/* Every kind of entry, in the shape skopeo writes: a file in two chunks
 * whose last ends at the file's endOffset, small files in one frame. */
static void test_zstd_chunked(void **state)
{
	struct blob b = { 0 };
	struct toc_layer tl;
	struct toc *t = NULL;
	char err[256], d_big[DIGEST_STRING_MAX], d_c0[DIGEST_STRING_MAX], d_c1[DIGEST_STRING_MAX],
		d_small[DIGEST_STRING_MAX];
	char *big = content(5000, 1), *json;
	size_t o_small, o_c0, o_c1, end_big;
	const struct layer_entry *e;
	const struct toc_chunk *cs;
	size_t i, n;

	blob_zeros(&b, 64); /* the first tar header's frame, say */
	o_small = put_zstd(&b, "hello\n", 6);
	blob_zeros(&b, 30);
	o_c0 = put_zstd(&b, big, 3000);
	o_c1 = put_zstd(&b, big + 3000, 2000);
	end_big = b.len;
	blob_zeros(&b, 30);
	sha256("hello\n", 6, d_small);
	sha256(big, 5000, d_big);
	sha256(big, 3000, d_c0);
	sha256(big + 3000, 2000, d_c1);

	json = fmt(
		"{\"version\":1,\"entries\":["
		"{\"type\":\"dir\",\"name\":\"./\",\"mode\":493,\"modtime\":\"2010-01-01T10:00:00Z\"},"
		"{\"type\":\"dir\",\"name\":\"./etc/\",\"mode\":1517,\"uid\":1000,\"gid\":1001,"
		"\"modtime\":\"2020-02-29T23:59:59.123456789+01:30\",\"xattrs\":{\"user.a\":\"AP8Q\",\"user.e\":\"\"}},"
		"{\"type\":\"reg\",\"name\":\"./etc/small\",\"mode\":420,\"size\":6,\"digest\":\"%s\","
		"\"offset\":%zu,\"endOffset\":%zu,\"accesstime\":\"0001-01-01T00:00:00Z\"},"
		"{\"type\":\"reg\",\"name\":\"./big\",\"mode\":2541,\"size\":5000,\"digest\":\"%s\","
		"\"offset\":%zu,\"endOffset\":%zu,\"chunkSize\":3000,\"chunkDigest\":\"%s\"},"
		"{\"type\":\"chunk\",\"name\":\"./big\",\"offset\":%zu,\"chunkOffset\":3000,"
		"\"chunkSize\":2000,\"chunkDigest\":\"%s\",\"chunkType\":\"\"},"
		"{\"type\":\"reg\",\"name\":\"./empty\",\"mode\":384,\"modtime\":\"1969-12-31T23:59:59.5Z\"},"
		"{\"type\":\"hardlink\",\"name\":\"./etc/link\",\"linkName\":\"./etc/small\",\"mode\":420},"
		"{\"type\":\"symlink\",\"name\":\"./etc/sym\",\"linkName\":\"../big\",\"mode\":511},"
		"{\"type\":\"char\",\"name\":\"./null\",\"mode\":438,\"devMajor\":1,\"devMinor\":3},"
		"{\"type\":\"block\",\"name\":\"./loop\",\"mode\":432,\"devMajor\":7,\"devMinor\":300},"
		"{\"type\":\"fifo\",\"name\":\"./fifo\",\"mode\":420},"
		"{\"type\":\"reg\",\"name\":\"./.wh.gone\",\"mode\":420},"
		"{\"type\":\"reg\",\"name\":\"etc/.wh..wh..opq\",\"mode\":420},"
		"{\"type\":\"reg\",\"name\":\"./.wh..wh.plnk\",\"mode\":420},"
		"{\"type\":\"reg\",\"name\":\".no.prefetch.landmark\",\"mode\":420}"
		"],\"tarSplitDigest\":\"\"}",
		d_small, o_small, o_small + 20, d_big, o_c0, end_big, d_c0, o_c1, d_c1);
	put_zstd_end(&b, json, &tl);
	assert_int_equal(load(&b, &tl, NULL, &t, err, sizeof(err)), 0);

	assert_int_equal(t->format, TOC_ZSTD_CHUNKED);
	assert_int_equal(t->index->data_size, 0);
	/* the aufs internal is dropped; a zstd:chunked layer's landmark
	 * name is just a file */
	assert_int_equal(t->index->n_entries, 13);

	e = find(t, "", NULL);
	assert_int_equal(e->type, LAYER_ENTRY_DIR);
	assert_int_equal(e->mode, 0755);
	assert_int_equal(e->mtime_sec, 1262340000);
	e = find(t, "etc", NULL);
	assert_int_equal(e->mode, 02755);
	assert_int_equal(e->uid, 1000);
	assert_int_equal(e->gid, 1001);
	/* 2020-02-29T23:59:59+01:30 is 22:29:59 UTC */
	assert_int_equal(e->mtime_sec, 1583015399);
	assert_int_equal(e->mtime_nsec, 123456789);
	assert_int_equal(e->n_xattrs, 2);
	assert_string_equal(e->xattrs[0].name, "user.a");
	assert_int_equal(e->xattrs[0].size, 3);
	assert_memory_equal(e->xattrs[0].value, "\x00\xff\x10", 3);
	assert_int_equal(e->xattrs[1].size, 0);

	e = find(t, "etc/small", &i);
	assert_int_equal(e->type, LAYER_ENTRY_REG);
	assert_int_equal(e->size, 6);
	assert_string_equal(e->object, digest_hex(d_small));
	cs = toc_entry_chunks(t, i, &n);
	assert_int_equal(n, 1);
	assert_int_equal(cs[0].blob_offset, o_small);
	assert_int_equal(cs[0].blob_length, 20);
	/* one piece: the file's digest is the chunk's */
	assert_string_equal(cs[0].digest, d_small);

	e = find(t, "big", &i);
	assert_int_equal(e->mode, 04755);
	assert_string_equal(e->object, digest_hex(d_big));
	cs = toc_entry_chunks(t, i, &n);
	assert_int_equal(n, 2);
	assert_int_equal(cs[0].offset, 0);
	assert_int_equal(cs[0].size, 3000);
	assert_int_equal(cs[0].blob_offset, o_c0);
	assert_int_equal(cs[0].blob_length, o_c1 - o_c0);
	assert_string_equal(cs[0].digest, d_c0);
	assert_int_equal(cs[1].offset, 3000);
	assert_int_equal(cs[1].size, 2000);
	assert_int_equal(cs[1].blob_offset, o_c1);
	assert_int_equal(cs[1].blob_length, end_big - o_c1);
	check_content(t, &b, "big", big, 5000);
	check_content(t, &b, "etc/small", "hello\n", 6);

	e = find(t, "empty", &i);
	assert_null(e->object);
	assert_int_equal(e->mtime_sec, -1);
	assert_int_equal(e->mtime_nsec, 500000000);
	toc_entry_chunks(t, i, &n);
	assert_int_equal(n, 0);
	e = find(t, "etc/link", &i);
	assert_int_equal(e->type, LAYER_ENTRY_HARDLINK);
	assert_string_equal(e->link, "etc/small");
	toc_entry_chunks(t, i, &n);
	assert_int_equal(n, 0);
	e = find(t, "etc/sym", NULL);
	assert_int_equal(e->type, LAYER_ENTRY_SYMLINK);
	assert_string_equal(e->link, "../big");
	e = find(t, "null", NULL);
	assert_int_equal(e->type, LAYER_ENTRY_CHR);
	assert_int_equal(e->rdev, makedev(1, 3));
	e = find(t, "loop", NULL);
	assert_int_equal(e->type, LAYER_ENTRY_BLK);
	assert_int_equal(e->rdev, makedev(7, 300));
	assert_int_equal(find(t, "fifo", NULL)->type, LAYER_ENTRY_FIFO);
	assert_int_equal(find(t, "gone", NULL)->type, LAYER_ENTRY_WHITEOUT);
	assert_int_equal(t->index->entries[11].type, LAYER_ENTRY_OPAQUE);
	assert_string_equal(t->index->entries[11].path, "etc");
	find(t, ".no.prefetch.landmark", NULL);
	/* out of range */
	toc_entry_chunks(t, 99, &n);
	assert_int_equal(n, 0);

	/* a corrupt chunk: a flipped byte in the frame, then the digest */
	{
		const struct toc_chunk *c;
		unsigned char *copy, out[3000];

		find(t, "big", &i);
		c = toc_entry_chunks(t, i, &n);
		copy = malloc(c->blob_length);
		assert_non_null(copy);
		memcpy(copy, b.p + c->blob_offset, c->blob_length);
		copy[c->blob_length / 2] ^= 1;
		assert_int_equal(toc_chunk_decompress(t->format, c, copy, c->blob_length, out, err,
						      sizeof(err)),
				 -EBADMSG);
		/* right bytes, wrong digest */
		{
			struct toc_chunk wrong = *c;

			wrong.digest[10] ^= 1;
			assert_int_equal(toc_chunk_decompress(t->format, &wrong,
							      b.p + c->blob_offset, c->blob_length,
							      out, err, sizeof(err)),
					 -EBADMSG);
			assert_non_null(strstr(err, "the manifest says"));
		}
		/* cut short, or too long for the chunk */
		assert_int_equal(toc_chunk_decompress(t->format, c, copy, c->blob_length - 1, out,
						      err, sizeof(err)),
				 -EBADMSG);
		free(copy);
	}
	toc_free(t);

	/* the manifest's digest is checked before anything is read */
	tl.digest[20] ^= 1;
	assert_int_equal(load(&b, &tl, NULL, &t, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "the manifest says"));
	free(big);
	free(json);
	free(b.p);
}

/* eStargz as ctr-remote writes it: a landmark first, each file's payload
 * its own gzip member that goes on with the next tar header, a file in
 * chunks whose last says no size; and small files sharing one member at
 * inner offsets. */
static void test_estargz(void **state)
{
	struct blob b = { 0 }, m = { 0 };
	struct toc_layer tl;
	struct toc *t = NULL;
	char err[256], d_big[DIGEST_STRING_MAX], d_c0[DIGEST_STRING_MAX], d_c1[DIGEST_STRING_MAX],
		d_a[DIGEST_STRING_MAX], d_b[DIGEST_STRING_MAX], d_l[DIGEST_STRING_MAX];
	char *big = content(70000, 2), *json, hdr[512] = "next tar header";
	size_t o_land, o_c0, o_c1, o_shared, i, n;
	const struct toc_chunk *cs;
	const struct layer_entry *e;

	put_gzip(&b, hdr, 512);
	o_land = put_gzip(&b, "\x0f", 1);
	/* a payload and the next headers in one member */
	blob_put(&m, big, 65536);
	blob_put(&m, hdr, sizeof(hdr));
	o_c0 = put_gzip(&b, m.p, m.len);
	m.len = 0;
	blob_put(&m, big + 65536, 70000 - 65536);
	blob_put(&m, hdr, sizeof(hdr));
	o_c1 = put_gzip(&b, m.p, m.len);
	m.len = 0;
	blob_put(&m, hdr, sizeof(hdr));
	blob_put(&m, "aaaa", 4);
	blob_put(&m, hdr, sizeof(hdr));
	blob_put(&m, "bbbbbb", 6);
	o_shared = put_gzip(&b, m.p, m.len);
	free(m.p);
	sha256(big, 70000, d_big);
	sha256(big, 65536, d_c0);
	sha256(big + 65536, 70000 - 65536, d_c1);
	sha256("aaaa", 4, d_a);
	sha256("bbbbbb", 6, d_b);
	sha256("\x0f", 1, d_l);

	json = fmt(
		"{\"version\":1,\"entries\":["
		"{\"name\":\".prefetch.landmark\",\"type\":\"reg\",\"size\":1,\"offset\":%zu,"
		"\"digest\":\"%s\",\"chunkDigest\":\"%s\"},"
		"{\"name\":\"big\",\"type\":\"reg\",\"size\":70000,\"modtime\":\"2019-08-20T10:30:43Z\","
		"\"mode\":420,\"offset\":%zu,\"digest\":\"%s\",\"chunkSize\":65536,\"chunkDigest\":\"%s\"},"
		"{\"name\":\"big\",\"type\":\"chunk\",\"offset\":%zu,\"chunkOffset\":65536,\"chunkDigest\":\"%s\"},"
		"{\"name\":\"d/\",\"type\":\"dir\",\"mode\":493},"
		"{\"name\":\"d/a\",\"type\":\"reg\",\"size\":4,\"mode\":420,\"offset\":%zu,\"innerOffset\":512,"
		"\"digest\":\"%s\",\"chunkDigest\":\"%s\"},"
		"{\"name\":\"d/b\",\"type\":\"reg\",\"size\":6,\"mode\":420,\"offset\":%zu,\"innerOffset\":1028,"
		"\"digest\":\"%s\",\"chunkDigest\":\"%s\"},"
		"{\"name\":\"d/e\",\"type\":\"reg\",\"mode\":420,"
		"\"digest\":\"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\"}"
		"]}",
		o_land, d_l, d_l, o_c0, d_big, d_c0, o_c1, d_c1, o_shared, d_a, d_a, o_shared, d_b,
		d_b);
	put_estargz_end(&b, json, false, &tl);
	assert_int_equal(load(&b, &tl, NULL, &t, err, sizeof(err)), 0);
	assert_int_equal(t->format, TOC_ESTARGZ);
	assert_int_equal(t->index->n_entries, 5);
	assert_int_equal(t->prefetch_end, o_land);

	e = find(t, "big", &i);
	assert_string_equal(e->object, digest_hex(d_big));
	assert_int_equal(e->mtime_sec, 1566297043);
	cs = toc_entry_chunks(t, i, &n);
	assert_int_equal(n, 2);
	assert_int_equal(cs[0].blob_offset, o_c0);
	assert_int_equal(cs[0].blob_length, o_c1 - o_c0);
	assert_int_equal(cs[1].size, 70000 - 65536);
	assert_int_equal(cs[1].blob_length, o_shared - o_c1);
	check_content(t, &b, "big", big, 70000);

	e = find(t, "d/b", &i);
	cs = toc_entry_chunks(t, i, &n);
	assert_int_equal(n, 1);
	assert_int_equal(cs[0].inner_offset, 1028);
	/* the last member ends where the table starts */
	assert_int_equal(cs[0].blob_offset + cs[0].blob_length,
			 b.len - 51 - (b.len - 51 - cs[0].blob_offset - cs[0].blob_length));
	check_content(t, &b, "d/a", "aaaa", 4);
	check_content(t, &b, "d/b", "bbbbbb", 6);
	assert_null(find(t, "d/e", NULL)->object);
	toc_free(t);

	/* a JSON edited after the digest was taken */
	json[strlen(json) - 3] = ' ';
	put_estargz_end(&b, json, false, &tl);
	sha256("{}", 2, tl.digest);
	assert_int_equal(load(&b, &tl, NULL, &t, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "the manifest says"));
	free(big);
	free(json);
	free(b.p);
}

/* ---- malformed tables ------------------------------------------------------ */

struct bad_case {
	enum toc_format format;
	const char *json;
	const char *reason;
};

#define E(x) "{\"version\":1,\"entries\":[" x "]}"
#define REG(name, extra) "{\"type\":\"reg\",\"name\":\"" name "\"" extra "}"
#define D1 "\"chunkDigest\":\"" DIG "\""

/* Chunks live in the first 1000 bytes of the blob, the table after. */
static const struct bad_case bad_cases[] = {
	{ TOC_ZSTD_CHUNKED, "not json", "invalid JSON" },
	{ TOC_ZSTD_CHUNKED, "[]", "not a JSON object" },
	{ TOC_ZSTD_CHUNKED, "{\"version\":2,\"entries\":[]}", "version is not 1" },
	{ TOC_ZSTD_CHUNKED, "{\"version\":\"1\",\"entries\":[]}", "version is not 1" },
	{ TOC_ZSTD_CHUNKED, "{\"version\":1}", "entries is not an array" },
	{ TOC_ZSTD_CHUNKED, "{\"version\":1,\"entries\":{}}", "entries is not an array" },
	{ TOC_ZSTD_CHUNKED, "{\"version\":1,\"version\":1,\"entries\":[]}", "invalid JSON" },
	{ TOC_ZSTD_CHUNKED, "{\"version\":1,\"entries\":[],\"entries\":[]}", "invalid JSON" },
	{ TOC_ZSTD_CHUNKED, "{\"version\":1,\"entries\":[]} x", "invalid JSON" },
	{ TOC_ZSTD_CHUNKED, "{\"version\":1,\"entries\":[]", "invalid JSON" },
	{ TOC_ZSTD_CHUNKED, "{\"version\":1,\"entries\":[" REG("a", ""), "invalid JSON" },
	{ TOC_ZSTD_CHUNKED, "{\"version\":1,\"entries\":[" REG("a", "") ",]}", "invalid JSON" },
	{ TOC_ZSTD_CHUNKED, "{\"version\":1,\"entries\":[" REG("a", "") REG("b", "") "]}",
	  "invalid JSON" },
	{ TOC_ZSTD_CHUNKED, "{\"version\":1 \"entries\":[]}", "invalid JSON" },
	{ TOC_ZSTD_CHUNKED, "{\"version\" 1,\"entries\":[]}", "invalid JSON" },
	{ TOC_ZSTD_CHUNKED, "{version:1,\"entries\":[]}", "invalid JSON" },
	{ TOC_ZSTD_CHUNKED, "{\"version\":01,\"entries\":[]}", "invalid JSON" },
	{ TOC_ZSTD_CHUNKED,
	  "{\"version\":1,\"entries\":[{\"name\":\"a\\u0000\",\"type\":\"reg\"}]}",
	  "invalid JSON" },
	{ TOC_ZSTD_CHUNKED, "{\"version\":1,\"entries\":[],\"x\":\"open}", "invalid JSON" },
	{ TOC_ZSTD_CHUNKED, "", "invalid JSON" },
	{ TOC_ZSTD_CHUNKED, E("7"), "entries[0]: not an object" },
	{ TOC_ZSTD_CHUNKED, E("{\"type\":\"reg\"}"), "entries[0]: without name" },
	{ TOC_ZSTD_CHUNKED, E("{\"name\":\"a\"}"), "entries[0]: without type" },
	{ TOC_ZSTD_CHUNKED, E("{\"name\":1,\"type\":\"reg\"}"), "name is not a string" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"type\":\"reg\"")), "invalid JSON" },
	{ TOC_ZSTD_CHUNKED, E("{\"name\":\"a\",\"type\":\"sock\"}"), "unknown type \"sock\"" },
	{ TOC_ZSTD_CHUNKED, E("{\"name\":\"a\",\"type\":\"chunk\"}"),
	  "which is not the file before it" },
	{ TOC_ZSTD_CHUNKED,
	  E(REG("a",
		",\"size\":1,\"offset\":8,\"endOffset\":20,\"chunkSize\":1") ",{\"name\":\"b\",\"type\":\"chunk\",\"offset\":20,\"chunkOffset\":1}"),
	  "which is not the file before it" },
	{ TOC_ZSTD_CHUNKED, E(REG("../a", "")), "bad entry name" },
	{ TOC_ZSTD_CHUNKED, E(REG("a/../b", "")), "bad entry name" },
	{ TOC_ZSTD_CHUNKED, E(REG("/../a", "")), "bad entry name" },
	{ TOC_ZSTD_CHUNKED, E(REG("", "")), "empty entry name" },
	{ TOC_ZSTD_CHUNKED, E(REG("a//b", "")), "bad entry name" },
	{ TOC_ZSTD_CHUNKED, E(REG("./", "")), "root entry is not a directory" },
	{ TOC_ZSTD_CHUNKED, E(REG("a/.wh..", "")), "bad whiteout" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", "") "," REG("a", "")), "appears more than once" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", "") "," REG("a/b", "")), "which is not a directory" },
	{ TOC_ZSTD_CHUNKED, E("{\"type\":\"hardlink\",\"name\":\"b\",\"linkName\":\"a\"}"),
	  "not an earlier file" },
	{ TOC_ZSTD_CHUNKED,
	  E("{\"type\":\"dir\",\"name\":\"a\"},{\"type\":\"hardlink\",\"name\":\"b\",\"linkName\":\"a\"}"),
	  "not an earlier file" },
	{ TOC_ZSTD_CHUNKED, E("{\"type\":\"hardlink\",\"name\":\"b\"}"),
	  "hardlink without linkName" },
	{ TOC_ZSTD_CHUNKED, E("{\"type\":\"symlink\",\"name\":\"b\"}"),
	  "symlink without linkName" },
	{ TOC_ZSTD_CHUNKED, E("{\"type\":\"symlink\",\"name\":\"b\",\"linkName\":7}"),
	  "linkName is not a string" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"mode\":\"0644\"")), "mode is not an integer" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"mode\":420.0")), "mode is not an integer" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"uid\":-1")), "uid -1 is out of range" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"gid\":4294967296")), "out of range" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"size\":-5")), "size -5 is out of range" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"modtime\":\"yesterday\"")), "is not RFC 3339" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"modtime\":\"2019-02-29T00:00:00Z\"")),
	  "is not RFC 3339" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"modtime\":\"2019-01-01T24:00:00Z\"")),
	  "is not RFC 3339" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"modtime\":\"2019-01-01T00:00:00\"")),
	  "is not RFC 3339" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"modtime\":\"2019-01-01T00:00:00.Z\"")),
	  "is not RFC 3339" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"modtime\":\"2019-01-01T00:00:00Zjunk\"")),
	  "is not RFC 3339" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"xattrs\":[]")), "xattrs is not an object" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"xattrs\":{\"user.a\":\"A\"}")), "is not base64" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"xattrs\":{\"user.a\":\"A===\"}")), "is not base64" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"xattrs\":{\"user.a\":\"AB=C\"}")), "is not base64" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"xattrs\":{\"user.a\":\"AB*C\"}")), "is not base64" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"xattrs\":{\"user.a\":1}")), "is not a string" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"xattrs\":{\"\":\"\"}")), "bad xattr" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"digest\":\"sha256:abc\"")),
	  "digest is not a sha256 digest" },
	{ TOC_ZSTD_CHUNKED,
	  E(REG("a", ",\"size\":1,\"offset\":8,\"endOffset\":20,\"chunkDigest\":\"md5:1\"")),
	  "chunkDigest is not a sha256 digest" },
	/* chunks that do not tile their file */
	{ TOC_ZSTD_CHUNKED,
	  E(REG("a",
		",\"size\":10,\"offset\":8,\"endOffset\":30,\"chunkSize\":4") ",{\"name\":\"a\",\"type\":\"chunk\",\"offset\":20,\"chunkOffset\":5,\"chunkSize\":5}"),
	  "chunk at 0 of \"a\" has a bad size" },
	{ TOC_ZSTD_CHUNKED,
	  E(REG("a",
		",\"size\":10,\"offset\":8,\"endOffset\":30,\"chunkSize\":4") ",{\"name\":\"a\",\"type\":\"chunk\",\"offset\":20,\"chunkOffset\":4,\"chunkSize\":5}"),
	  "has a bad size" },
	{ TOC_ZSTD_CHUNKED,
	  E(REG("a",
		",\"size\":10,\"offset\":8,\"endOffset\":30,\"chunkSize\":4,\"chunkOffset\":1")),
	  "do not follow each other" },
	{ TOC_ZSTD_CHUNKED,
	  E(REG("a", ",\"size\":10,\"offset\":8,\"endOffset\":30,\"chunkSize\":11")),
	  "has a bad size" },
	{ TOC_ZSTD_CHUNKED,
	  E(REG("a", ",\"size\":10,\"offset\":8,\"endOffset\":30,\"chunkSize\":999999999999")),
	  "chunkSize 999999999999 is out of range" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", "") ",{\"name\":\"a\",\"type\":\"chunk\",\"offset\":20}"),
	  "has a bad size" },
	{ TOC_ZSTD_CHUNKED,
	  E(REG("a", ",\"size\":10,\"offset\":8,\"endOffset\":30,\"chunkType\":\"holes\"")),
	  "unknown chunkType" },
	/* chunks outside the blob's data or on top of each other */
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"size\":10,\"offset\":990,\"endOffset\":1001")),
	  "is not before the table" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"size\":10,\"offset\":2000,\"endOffset\":2010")),
	  "is not before the table" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"size\":10,\"offset\":30,\"endOffset\":30")),
	  "ends before it starts" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"size\":10,\"offset\":30,\"endOffset\":20")),
	  "ends before it starts" },
	{ TOC_ZSTD_CHUNKED,
	  E(REG("a", ",\"size\":10,\"offset\":8,\"endOffset\":30") "," REG(
		  "b", ",\"size\":10,\"offset\":29,\"endOffset\":40")),
	  "overlap" },
	{ TOC_ZSTD_CHUNKED,
	  E(REG("a", ",\"size\":10,\"offset\":8,\"endOffset\":30") "," REG(
		  "b", ",\"size\":10,\"offset\":8,\"endOffset\":30")),
	  "overlap" },
	{ TOC_ESTARGZ,
	  E(REG("a", ",\"size\":10,\"offset\":8") "," REG("b", ",\"size\":10,\"offset\":8")),
	  "overlap" },
	{ TOC_ESTARGZ,
	  E(REG("a", ",\"size\":10,\"offset\":8,\"innerOffset\":5") "," REG(
		  "b", ",\"size\":10,\"offset\":8,\"innerOffset\":14")),
	  "overlap" },
	{ TOC_ESTARGZ, E(REG("a", ",\"size\":10,\"offset\":5000")), "is not before the table" },
	{ TOC_ESTARGZ, E(REG("a", ",\"size\":10,\"offset\":8,\"chunkSize\":4")),
	  "chunk at 0 of \"a\" has a bad size" },
	{ TOC_ESTARGZ, E(REG("a", ",\"size\":10,\"offset\":8,\"chunkSize\":4") "," REG("b", "")),
	  "chunk at 0 of \"a\" has a bad size" },
	{ TOC_ESTARGZ,
	  E(REG("a",
		",\"size\":10,\"offset\":8,\"chunkSize\":4") ",{\"name\":\"a\",\"type\":\"chunk\",\"offset\":20,\"chunkOffset\":4,\"chunkSize\":0}"
							     ",{\"name\":\"a\",\"type\":\"chunk\",\"offset\":30,\"chunkOffset\":2}"),
	  "do not follow each other" },
	/* limits */
	{ TOC_ZSTD_CHUNKED,
	  E(REG("a", "") "," REG("b", "") "," REG("c", "") "," REG("d", "") "," REG("e", "")),
	  "more than 4 entries" },
	{ TOC_ZSTD_CHUNKED, E(REG("a", ",\"size\":2000000,\"offset\":8,\"endOffset\":20")),
	  "more than 1048576 bytes of file content" },
	{ TOC_ZSTD_CHUNKED,
	  E(REG("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "")),
	  "longer than 64 bytes" },
	{ TOC_ZSTD_CHUNKED,
	  E("{\"type\":\"symlink\",\"name\":\"s\",\"linkName\":\""
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}"),
	  "symlink target longer than 64 bytes" },
};

static int parse_json(enum toc_format f, const char *json, struct toc **ret, char *err,
		      size_t errlen)
{
	const struct layer_limits lim = {
		.max_entries = 4,
		.max_expanded_bytes = 1 << 20,
		.max_path = 64,
	};
	struct blob b = { 0 };
	struct toc_layer tl;
	int r;

	blob_zeros(&b, 1000);
	if (f == TOC_ESTARGZ)
		put_estargz_end(&b, json, false, &tl);
	else
		put_zstd_end(&b, json, &tl);
	r = load(&b, &tl, &lim, ret, err, errlen);
	free(b.p);
	return r;
}

static void test_malformed(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(bad_cases); i++) {
		const struct bad_case *c = &bad_cases[i];
		struct toc *t = NULL;
		char err[512] = "";
		int r = parse_json(c->format, c->json, &t, err, sizeof(err));

		if (r != -EBADMSG)
			fail_msg("case %zu (%.80s): %d, not -EBADMSG", i, c->json, r);
		assert_null(t);
		if (strncmp(err, "toc: ", 5) != 0 && strncmp(err, "layer: ", 7) != 0)
			fail_msg("case %zu: bad reason \"%s\"", i, err);
		if (!strstr(err, c->reason))
			fail_msg("case %zu (%.80s): \"%s\" lacks \"%s\"", i, c->json, err,
				 c->reason);
	}
}

/* What the rules allow must parse: the control group of the cases above. */
static void test_wellformed(void **state)
{
	static const char *const ok[] = {
		E(""),
		E(REG("a",
		      ",\"size\":10,\"offset\":8,\"endOffset\":30,\"chunkSize\":4") ",{\"name\":\"a\",\"type\":\"chunk\",\"offset\":20,\"chunkOffset\":4,\"chunkSize\":6}"),
		E(REG("a", ",\"size\":10,\"offset\":8,\"endOffset\":30,\"chunkType\":\"zeros\"")),
		E(REG("a",
		      ",\"modtime\":\"2019-01-01T00:00:00.1-08:00\",\"xattrs\":{\"user.a\":\"AB==\",\"user.b\":\"ABC=\"}")),
		E("{\"type\":\"dir\",\"name\":\"d\"},{\"type\":\"dir\",\"name\":\"d/\"}"),
		E(REG("a", "") ",{\"type\":\"hardlink\",\"name\":\"b\",\"linkName\":\"./a\"}"),
		E(REG("a/.wh.b", "") "," REG("a/.wh..wh..opq", "") "," REG("a", "")),
		/* markers with content (found by fuzz-toc) */
		E(REG(".wh.b", ",\"size\":3,\"offset\":8,\"endOffset\":20") "," REG(
			".wh..wh.x",
			",\"size\":3,\"offset\":20,\"endOffset\":30") ","
								      "{\"type\":\"dir\",\"name\":\"d\"}"),
		"{\"version\":1,\"entries\":[],\"tarSplitDigest\":\"sha256:x\",\"other\":{}}",
		/* the root walked by hand, each value parsed alone: any order,
		 * any white space, brackets and escapes inside strings */
		" \n{ \"entries\" : [ " REG("a", "") " ,\t" REG(
			"b",
			"") " ] ,\r\n"
			    "\"version\":1 , \"x]}\\\"\":[{\"}\":\"[\\\"]\"},-1.5e3,true,null,\"\"]} \n",
		"{\"version\":1,\"entries\":[" REG("\\u0061\\\"b", "") "]}",
	};

	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		struct toc *t = NULL;
		char err[512] = "";
		int r = parse_json(TOC_ZSTD_CHUNKED, ok[i], &t, err, sizeof(err));

		if (r != 0)
			fail_msg("case %zu (%.80s): %s", i, ok[i], err);
		toc_free(t);
	}
}

/* eStargz tables that are not what the footer promises. */
static void test_estargz_toc_shape(void **state)
{
	struct blob b = { 0 }, tar = { 0 };
	struct toc_layer tl;
	struct toc_range where;
	struct toc *t = NULL;
	char err[256];
	const char *json = E("");

	/* a member that does not fill the range */
	blob_zeros(&b, 10);
	put_estargz_end(&b, json, false, &tl);
	assert_int_equal(toc_locate(&tl, b.p + b.len - 51, 51, &where, err, sizeof(err)), 0);
	where.length -= 0;
	assert_int_equal(toc_parse(&tl, &where, b.p + where.offset, where.length - 1, NULL, &t, err,
				   sizeof(err)),
			 -EBADMSG);
	{
		struct toc_range shorter = { where.offset, where.length - 1 };

		assert_int_equal(toc_parse(&tl, &shorter, b.p + where.offset, shorter.length, NULL,
					   &t, err, sizeof(err)),
				 -EBADMSG);
		assert_non_null(strstr(err, "not one whole gzip member"));
	}
	free(b.p);

	/* the tar's entry has another name */
	b = (struct blob){ 0 };
	put_tar_file(&tar, "other.json", json, strlen(json));
	blob_zeros(&tar, 1024);
	put_gzip(&b, tar.p, tar.len);
	tl = (struct toc_layer){ .format = TOC_ESTARGZ, .blob_size = b.len + 51 };
	sha256(json, strlen(json), tl.digest);
	where = (struct toc_range){ 0, b.len };
	assert_int_equal(toc_parse(&tl, &where, b.p, b.len, NULL, &t, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "stargz.index.json"));
	free(tar.p);
	free(b.p);

	/* a member that inflates past the limit */
	{
		size_t n = TOC_MAX_BYTES + (128u << 10);
		char *zeros = calloc(1, n);

		assert_non_null(zeros);
		b = (struct blob){ 0 };
		put_gzip(&b, zeros, n);
		free(zeros);
		tl.blob_size = b.len + 51;
		where = (struct toc_range){ 0, b.len };
		assert_int_equal(toc_parse(&tl, &where, b.p, b.len, NULL, &t, err, sizeof(err)),
				 -EBADMSG);
		assert_non_null(strstr(err, "larger than"));
		free(b.p);
	}

	/* not gzip at all */
	tl.blob_size = 1000;
	where = (struct toc_range){ 0, 100 };
	assert_int_equal(toc_parse(&tl, &where, (char[100]){ 0 }, 100, NULL, &t, err, sizeof(err)),
			 -EBADMSG);
	assert_null(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_detect),	    cmocka_unit_test(test_locate_estargz),
		cmocka_unit_test(test_locate_zstd), cmocka_unit_test(test_zstd_chunked),
		cmocka_unit_test(test_estargz),	    cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_wellformed),  cmocka_unit_test(test_estargz_toc_shape),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

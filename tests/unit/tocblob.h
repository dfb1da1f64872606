/* Blobs of the lazy formats built in memory for unit tests: gzip members
 * and zstd frames made with the libraries, tar headers and footers by
 * hand.  Included by the tests that need them, after cmocka.h, zlib.h and
 * zstd.h. */
#pragma once

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "macro.h"
#include "toc.h"

struct blob {
	unsigned char *p;
	size_t len, cap;
};

static inline void blob_put(struct blob *b, const void *p, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 4096;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

static inline void blob_zeros(struct blob *b, size_t n)
{
	unsigned char z[256] = { 0 };

	while (n > 0) {
		size_t k = MIN(n, sizeof(z));

		blob_put(b, z, k);
		n -= k;
	}
}

/* One gzip member of p at the end of b; returns where it starts. */
static inline size_t put_gzip(struct blob *b, const void *p, size_t n)
{
	size_t at = b->len;
	uLong bound;
	z_stream z = { 0 };
	unsigned char *out;

	assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY),
			 Z_OK);
	bound = deflateBound(&z, n) + 32;
	out = malloc(bound);
	assert_non_null(out);
	z.next_in = (unsigned char *)p;
	z.avail_in = (uInt)n;
	z.next_out = out;
	z.avail_out = (uInt)bound;
	assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
	blob_put(b, out, bound - z.avail_out);
	deflateEnd(&z);
	free(out);
	return at;
}

/* One zstd frame of p at the end of b; returns where it starts. */
static inline size_t put_zstd(struct blob *b, const void *p, size_t n)
{
	size_t at = b->len, bound = ZSTD_compressBound(n), k;
	unsigned char *out = malloc(bound);

	assert_non_null(out);
	k = ZSTD_compress(out, bound, p, n, 3);
	assert_false(ZSTD_isError(k));
	blob_put(b, out, k);
	free(out);
	return at;
}

static inline void sha256(const void *p, size_t n, char out[DIGEST_STRING_MAX])
{
	assert_int_equal(digest_buffer(p, n, out), 0);
}

/* One ustar header: name (and the ustar prefix, or NULL), type flag,
 * size, and the 12 bytes of the mtime field as they are to be written. */
static inline void put_ustar_header(struct blob *b, const char *name, const char *prefix, char flag,
				    uint64_t size, const unsigned char mtime[12])
{
	unsigned char h[512] = { 0 };
	unsigned sum = 0;

	snprintf((char *)h, 100, "%s", name);
	memcpy(h + 100, "0000644", 8);
	memcpy(h + 108, "0000000", 8);
	memcpy(h + 116, "0000000", 8);
	snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)(size & 077777777777));
	memcpy(h + 136, mtime, 12);
	memset(h + 148, ' ', 8);
	h[156] = (unsigned char)flag;
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	if (prefix)
		snprintf((char *)h + 345, 155, "%s", prefix);
	for (size_t i = 0; i < sizeof(h); i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	blob_put(b, h, sizeof(h));
}

/* A ustar header and data for one regular file. */
static inline void put_tar_file(struct blob *b, const char *name, const void *p, size_t n)
{
	put_ustar_header(b, name, NULL, '0', n, (const unsigned char *)"00000000000");
	blob_put(b, p, n);
	blob_zeros(b, (512 - n % 512) % 512);
}

/* eStargz's end: the table as a tar in one gzip member, then the 51-byte
 * footer (or the 47-byte legacy one) that places it. */
static inline void put_estargz_end(struct blob *b, const char *json, bool legacy,
				   struct toc_layer *tl)
{
	struct blob tar = { 0 };
	unsigned char f[51] = { 0x1f, 0x8b, 8, 4, 0, 0, 0, 0, 0, 0xff };
	size_t toc_at, n = 12;
	char hex[24];

	put_tar_file(&tar, "stargz.index.json", json, strlen(json));
	blob_zeros(&tar, 1024);
	toc_at = put_gzip(b, tar.p, tar.len);
	free(tar.p);

	snprintf(hex, sizeof(hex), "%016zxSTARGZ", toc_at);
	f[10] = legacy ? 22 : 26;
	if (!legacy) {
		memcpy(f + 12, "SG\x16\x00", 4);
		n = 16;
	}
	memcpy(f + n, hex, 22);
	n += 22;
	memcpy(f + n, "\x01\x00\x00\xff\xff", 5);
	n += 5 + 8;
	blob_put(b, f, n);

	*tl = (struct toc_layer){ .format = TOC_ESTARGZ,
				  .blob_size = b->len,
				  .stargz_files = true };
	sha256(json, strlen(json), tl->digest);
}

static inline void put_le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* zstd:chunked's end: the table compressed in a skippable frame, then the
 * footer skopeo 1.9 writes. */
static inline void put_zstd_end(struct blob *b, const char *json, struct toc_layer *tl)
{
	size_t n = strlen(json), bound = ZSTD_compressBound(n), k;
	unsigned char *z = malloc(bound), head[8] = { 0x50, 0x2a, 0x4d, 0x18 };
	unsigned char foot[48] = { 0x50, 0x2a, 0x4d, 0x18, 40 };
	size_t at;

	assert_non_null(z);
	k = ZSTD_compress(z, bound, json, n, 3);
	assert_false(ZSTD_isError(k));
	head[4] = (unsigned char)k;
	head[5] = (unsigned char)(k >> 8);
	head[6] = (unsigned char)(k >> 16);
	blob_put(b, head, 8);
	at = b->len;
	blob_put(b, z, k);
	put_le64(foot + 8, at);
	put_le64(foot + 16, k);
	put_le64(foot + 24, n);
	put_le64(foot + 32, 1);
	memcpy(foot + 40, "GnUlInUx", 8);
	blob_put(b, foot, sizeof(foot));

	*tl = (struct toc_layer){ .format = TOC_ZSTD_CHUNKED,
				  .blob_size = b->len,
				  .zc_offset = at,
				  .zc_length = k,
				  .zc_uncompressed = n };
	sha256(z, k, tl->digest);
	free(z);
}

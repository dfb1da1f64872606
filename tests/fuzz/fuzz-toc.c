/* Fuzz target for the tables of contents of lazy images.  The first byte
 * of an input picks what the rest is:
 *   0, 1  the JSON of a table, read as zstd:chunked or as eStargz (the
 *         digest and the compression are what the other modes test);
 *   2     the tail of an eStargz blob: footer, gzip member, tar entry, up
 *         to the digest check against a fixed annotation;
 *   3     a zstd:chunked manifest frame whose digest the harness takes,
 *         so the zstd decoder and then the JSON parser get the bytes;
 *   4, 5  one gzip or zstd chunk: three bytes of size, one of inner
 *         offset, then the compressed bytes.
 * Whatever is accepted must keep the promises lazy pulling relies on:
 * normalised names, each file's chunks tiling it, every chunk inside the
 * blob's data and apart from the others. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "toc-private.h"

#define DATA_END (UINT64_C(1) << 20)

static void check_toc(const struct toc *t, uint64_t data_end)
{
	const struct layer_index *li = t->index;

	FUZZ_CHECK(t->first_chunk[0] == 0);
	FUZZ_CHECK(t->first_chunk[li->n_entries] == t->n_chunks);
	for (size_t i = 0; i < li->n_entries; i++) {
		const struct layer_entry *e = &li->entries[i];
		const struct toc_chunk *cs;
		uint64_t at = 0;
		size_t n;

		fuzz_check_path(e->path);
		FUZZ_CHECK(e->type <= LAYER_ENTRY_OPAQUE && e->mode <= 07777);
		if (e->type == LAYER_ENTRY_HARDLINK)
			fuzz_check_path(e->link);
		if (e->object)
			FUZZ_CHECK(strlen(e->object) == 64);
		FUZZ_CHECK(t->first_chunk[i] <= t->first_chunk[i + 1]);
		cs = toc_entry_chunks(t, i, &n);
		if (e->type != LAYER_ENTRY_REG || e->size == 0) {
			FUZZ_CHECK(n == 0);
			continue;
		}
		FUZZ_CHECK(n > 0);
		for (size_t k = 0; k < n; k++) {
			FUZZ_CHECK(cs[k].offset == at && cs[k].size > 0);
			FUZZ_CHECK(cs[k].blob_length > 0 && cs[k].blob_offset < data_end &&
				   cs[k].blob_length <= data_end - cs[k].blob_offset);
			FUZZ_CHECK(!cs[k].digest[0] || digest_is_valid(cs[k].digest));
			at += cs[k].size;
		}
		FUZZ_CHECK(at == e->size);
	}
}

static void json_mode(enum toc_format f, const uint8_t *data, size_t size)
{
	const struct toc_layer tl = { .format = f, .stargz_files = f == TOC_ESTARGZ };
	const struct layer_limits lim = { .max_entries = 5000, .max_expanded_bytes = 1u << 30 };
	struct toc *t = NULL;
	char err[512];
	int r;

	r = toc_from_json(&tl, (const char *)data, size, DATA_END, &lim, false, &t, err,
			  sizeof(err));
	if (r < 0) {
		FUZZ_CHECK(r == -EBADMSG || r == -ENOMEM);
		return;
	}
	check_toc(t, DATA_END);
	toc_free(t);
}

static void estargz_blob(const uint8_t *data, size_t size)
{
	struct toc_layer tl = { .format = TOC_ESTARGZ, .blob_size = size, .stargz_files = true };
	size_t tail = size < TOC_TAIL_BYTES ? size : TOC_TAIL_BYTES;
	struct toc_range where;
	struct toc *t = NULL;
	char err[512];
	int r;

	strcpy(tl.digest, "sha256:"
			  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	r = toc_locate(&tl, data + size - tail, tail, &where, err, sizeof(err));
	if (r < 0) {
		FUZZ_CHECK(r == -EBADMSG);
		return;
	}
	FUZZ_CHECK(where.offset + where.length <= size);
	r = toc_parse(&tl, &where, data + where.offset, where.length, NULL, &t, err, sizeof(err));
	FUZZ_CHECK(r == -EBADMSG || r == -ENOMEM);
}

static void zstd_blob(const uint8_t *data, size_t size)
{
	struct toc_layer tl = { .format = TOC_ZSTD_CHUNKED };
	struct toc_range where;
	struct toc *t = NULL;
	char err[512];
	int r;

	if (size < 3)
		return;
	tl.zc_uncompressed = (uint64_t)data[0] << 8 | data[1];
	data += 2;
	size -= 2;
	tl.blob_size = 8 + size;
	tl.zc_offset = 8;
	tl.zc_length = size;
	FUZZ_CHECK(digest_buffer(data, size, tl.digest) == 0);
	r = toc_locate(&tl, NULL, 0, &where, err, sizeof(err));
	FUZZ_CHECK(r == 0 && where.offset == 8 && where.length == size);
	r = toc_parse(&tl, &where, data, size, NULL, &t, err, sizeof(err));
	if (r < 0) {
		FUZZ_CHECK(r == -EBADMSG || r == -ENOMEM);
		return;
	}
	check_toc(t, 0); /* the frame starts the blob: no room for chunks */
	toc_free(t);
}

static void chunk_mode(enum toc_format f, const uint8_t *data, size_t size)
{
	struct toc_chunk c = { 0 };
	unsigned char *out;
	char err[512];
	int r;

	if (size < 4)
		return;
	c.size = ((uint64_t)data[0] << 16 | (uint64_t)data[1] << 8 | data[2]) + 1;
	c.inner_offset = data[3];
	c.blob_length = size - 4;
	out = malloc(c.size);
	FUZZ_CHECK(out);
	r = toc_chunk_decompress(f, &c, data + 4, size - 4, out, err, sizeof(err));
	FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -ENOMEM);
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	switch (data[0]) {
	case 0:
		json_mode(TOC_ZSTD_CHUNKED, data + 1, size - 1);
		break;
	case 1:
		json_mode(TOC_ESTARGZ, data + 1, size - 1);
		break;
	case 2:
		if (size > 1)
			estargz_blob(data + 1, size - 1);
		break;
	case 3:
		zstd_blob(data + 1, size - 1);
		break;
	case 4:
		chunk_mode(TOC_ESTARGZ, data + 1, size - 1);
		break;
	case 5:
		chunk_mode(TOC_ZSTD_CHUNKED, data + 1, size - 1);
		break;
	default:
		break;
	}
	return 0;
}

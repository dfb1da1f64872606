/* Fuzz target for the tar headers of a lazy layer's blob.  The first byte
 * of an input picks what the rest is: 0, plain tar bytes; 1, a gzip
 * stream (eStargz's members); 2, zstd frames.  The rest is fed in pieces
 * whose sizes the second byte sets.  Whatever the walker keeps must be
 * what the layer rules allow, and a merge into an index of those same
 * entries may change their mtimes only. */
#include <string.h>

#include "fuzz.h"
#include "tarhdr.h"

static void merge_check(const struct tarhdr *w)
{
	const struct tarhdr_entry *e;
	struct layer_index li = { 0 };
	size_t n;

	e = tarhdr_entries(w, &n);
	for (size_t i = 0; i < n; i++) {
		fuzz_check_path(e[i].path);
		FUZZ_CHECK(e[i].type <= LAYER_ENTRY_OPAQUE);
		FUZZ_CHECK(e[i].mtime_nsec < 1000000000);
	}
	li.entries = calloc(n ? n : 1, sizeof(*li.entries));
	if (!li.entries)
		return;
	for (size_t i = 0; i < n; i++)
		li.entries[i] = (struct layer_entry){ .path = (char *)e[i].path,
						      .type = e[i].type,
						      .size = e[i].size + (i % 3 == 0) };
	li.n_entries = n;
	if (tarhdr_merge(w, &li, NULL) == 0)
		for (size_t i = 0; i < n; i++) {
			FUZZ_CHECK(li.entries[i].path == e[i].path);
			FUZZ_CHECK(li.entries[i].type == e[i].type);
			FUZZ_CHECK(li.entries[i].size == e[i].size + (i % 3 == 0));
		}
	free(li.entries);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const enum toc_format formats[] = { TOC_ESTARGZ, TOC_ESTARGZ, TOC_ZSTD_CHUNKED };
	struct tarhdr *w;
	size_t step;

	if (size < 2 || data[0] > 2)
		return 0;
	step = (size_t)data[1] * 61 + 1;
	if (tarhdr_new(formats[data[0]], &w) < 0)
		return 0;
	for (size_t at = 2; at < size; at += step) {
		size_t len = size - at < step ? size - at : step;

		if ((data[0] == 0 ? tarhdr_feed_tar(w, data + at, len)
				  : tarhdr_feed(w, data + at, len)) < 0)
			break;
	}
	merge_check(w);
	tarhdr_free(w);
	return 0;
}

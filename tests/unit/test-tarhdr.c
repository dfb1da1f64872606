/* The tar headers of a lazy layer's blob and their times merged into the
 * index its table of contents gave (manager/format/tarhdr.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <zlib.h>
#include <zstd.h>

#include "tarhdr.h"
#include "tocblob.h"

static const unsigned char *octal(int64_t t)
{
	static unsigned char m[12];

	snprintf((char *)m, sizeof(m), "%011llo", (unsigned long long)t);
	return m;
}

/* An extended header of kind flag ('x', 'L') holding text, padded. */
static void put_ext(struct blob *b, char flag, const char *text)
{
	size_t n = strlen(text);

	put_ustar_header(b, "././@PaxHeader", NULL, flag, n, octal(0));
	blob_put(b, text, n);
	blob_zeros(b, (512 - n % 512) % 512);
}

/* A pax record "LEN key=value\n". */
static char *pax(const char *key, const char *value)
{
	static char rec[512];
	size_t body = strlen(key) + strlen(value) + 3, len = body + 1;

	while (snprintf(NULL, 0, "%zu", len) + body != len)
		len++;
	snprintf(rec, sizeof(rec), "%zu %s=%s\n", len, key, value);
	return rec;
}

/* An entry with a pax mtime; size bytes of data follow when it has any. */
static void put_entry(struct blob *b, const char *name, char flag, uint64_t size,
		      const char *pax_mtime)
{
	if (pax_mtime)
		put_ext(b, 'x', pax("mtime", pax_mtime));
	put_ustar_header(b, name, NULL, flag, size, octal(1234567890));
	for (uint64_t i = 0; i < size; i++)
		blob_put(b, "x", 1);
	blob_zeros(b, (512 - size % 512) % 512);
}

static struct layer_index *index_of(size_t n, const struct layer_entry *e)
{
	struct layer_index *li = calloc(1, sizeof(*li));

	assert_non_null(li);
	li->entries = calloc(n, sizeof(*e));
	assert_non_null(li->entries);
	for (size_t i = 0; i < n; i++) {
		li->entries[i] = e[i];
		li->entries[i].path = strdup(e[i].path);
	}
	li->n_entries = n;
	return li;
}

/* The tar of a small layer, as eStargz lays it out: headers in the
 * members between file contents. */
static void tar_layer(struct blob *t)
{
	put_entry(t, "./", '5', 0, "1234567890.5");
	put_entry(t, "./d/", '5', 0, "1234567890.123456789");
	put_entry(t, "./d/f", '0', 5, "1234567890.000000001");
	put_entry(t, "./d/l", '2', 0, "1234567891.25");
	put_entry(t, "./d/.wh.gone", '0', 0, "1234567890.75");
	put_entry(t, "./d/g", '0', 3, NULL);
	blob_zeros(t, 1024);
}

static const struct layer_entry layer_entries[] = {
	{ .path = "", .type = LAYER_ENTRY_DIR, .mtime_sec = 1234567890 },
	{ .path = "d", .type = LAYER_ENTRY_DIR, .mtime_sec = 1234567890 },
	{ .path = "d/f", .type = LAYER_ENTRY_REG, .size = 5, .mtime_sec = 1234567890 },
	{ .path = "d/l", .type = LAYER_ENTRY_SYMLINK, .mtime_sec = 1234567891 },
	{ .path = "d/gone", .type = LAYER_ENTRY_WHITEOUT, .mtime_sec = 1234567890 },
	{ .path = "d/g", .type = LAYER_ENTRY_REG, .size = 3, .mtime_sec = 1234567890 },
};

static void check_exact(const struct layer_index *li)
{
	static const uint32_t want[] = { 500000000, 123456789, 1, 250000000, 750000000, 0 };

	for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
		assert_int_equal(li->entries[i].mtime_nsec, want[i]);
		assert_int_equal(li->entries[i].mtime_sec, i == 3 ? 1234567891 : 1234567890);
	}
}

/* The tar cut into gzip members (or zstd frames) at odd places, fed in
 * pieces of step bytes. */
static struct tarhdr *walk(enum toc_format f, const struct blob *t, size_t step)
{
	struct blob z = { 0 };
	struct tarhdr *w;
	size_t cuts[] = { 0, 700, 1536, 1537, 4000, t->len };

	for (size_t i = 0; i + 1 < ARRAY_SIZE(cuts); i++) {
		size_t a = MIN(cuts[i], t->len), b = MIN(cuts[i + 1], t->len);

		if (f == TOC_ESTARGZ)
			put_gzip(&z, t->p + a, b - a);
		else
			put_zstd(&z, t->p + a, b - a);
	}
	assert_int_equal(tarhdr_new(f, &w), 0);
	for (size_t at = 0; at < z.len; at += step)
		assert_int_equal(tarhdr_feed(w, z.p + at, MIN(step, z.len - at)), 0);
	free(z.p);
	return w;
}

static void test_merge_formats(void **state)
{
	struct blob t = { 0 };
	enum toc_format fs[] = { TOC_ESTARGZ, TOC_ZSTD_CHUNKED };
	size_t steps[] = { 1, 7, 512, 1 << 20 };

	(void)state;
	tar_layer(&t);
	for (size_t i = 0; i < ARRAY_SIZE(fs); i++)
		for (size_t k = 0; k < ARRAY_SIZE(steps); k++) {
			struct tarhdr *w = walk(fs[i], &t, steps[k]);
			struct layer_index *li = index_of(ARRAY_SIZE(layer_entries), layer_entries);
			size_t changed = 0, n;

			assert_int_equal(tarhdr_merge(w, li, &changed), 0);
			assert_int_equal(changed, 5);
			check_exact(li);
			tarhdr_entries(w, &n);
			assert_int_equal(n, 6);
			layer_index_free(li);
			tarhdr_free(w);
		}
	free(t.p);
}

/* Headers that disagree with the table in type, size or name give their
 * entry nothing; the others still take their times. */
static void test_hostile_disagreement(void **state)
{
	struct blob t = { 0 };
	struct layer_entry e[ARRAY_SIZE(layer_entries)];
	struct tarhdr *w;
	struct layer_index *li;

	(void)state;
	tar_layer(&t);
	memcpy(e, layer_entries, sizeof(e));
	e[1].type = LAYER_ENTRY_SYMLINK; /* the header says directory */
	e[2].size = 6;			 /* the header says 5 */
	e[3].path = "d/other";		 /* no header of that name */
	w = walk(TOC_ESTARGZ, &t, 4096);
	li = index_of(ARRAY_SIZE(e), e);
	assert_int_equal(tarhdr_merge(w, li, NULL), 0);
	assert_int_equal(li->entries[0].mtime_nsec, 500000000);
	assert_int_equal(li->entries[1].mtime_nsec, 0);
	assert_int_equal(li->entries[2].mtime_nsec, 0);
	assert_int_equal(li->entries[3].mtime_nsec, 0);
	assert_int_equal(li->entries[4].mtime_nsec, 750000000);
	assert_int_equal(li->entries[2].size, 6);
	assert_int_equal(li->entries[1].type, LAYER_ENTRY_SYMLINK);
	layer_index_free(li);
	tarhdr_free(w);
	free(t.p);
}

/* What a full pull refuses, or a stream cut short, merges nothing. */
static void test_refused(void **state)
{
	struct blob t = { 0 }, z = { 0 };
	struct tarhdr *w;
	struct layer_index *li;

	(void)state;
	/* a path twice */
	tar_layer(&t);
	t.len -= 1024;
	put_entry(&t, "d/f", '0', 5, "1.5");
	blob_zeros(&t, 1024);
	w = walk(TOC_ESTARGZ, &t, 4096);
	li = index_of(ARRAY_SIZE(layer_entries), layer_entries);
	assert_int_equal(tarhdr_merge(w, li, NULL), -EBADMSG);
	for (size_t i = 0; i < li->n_entries; i++)
		assert_int_equal(li->entries[i].mtime_nsec, 0);
	tarhdr_free(w);

	/* ends inside a file's data */
	t.len = 0;
	tar_layer(&t);
	put_entry(&t, "d/h", '0', 5000, NULL);
	t.len -= 100;
	w = walk(TOC_ESTARGZ, &t, 4096);
	assert_int_equal(tarhdr_merge(w, li, NULL), -EBADMSG);
	tarhdr_free(w);

	/* a header whose checksum is wrong */
	t.len = 0;
	tar_layer(&t);
	t.p[1024 + 512 + 100] ^= 1;
	put_gzip(&z, t.p, t.len);
	assert_int_equal(tarhdr_new(TOC_ESTARGZ, &w), 0);
	assert_int_equal(tarhdr_feed(w, z.p, z.len), -EBADMSG);
	assert_int_equal(tarhdr_merge(w, li, NULL), -EBADMSG);
	tarhdr_free(w);

	/* not gzip at all */
	assert_int_equal(tarhdr_new(TOC_ESTARGZ, &w), 0);
	assert_int_equal(tarhdr_feed(w, t.p, t.len), -EBADMSG);
	tarhdr_free(w);
	for (size_t i = 0; i < li->n_entries; i++)
		assert_int_equal(li->entries[i].mtime_nsec, 0);
	layer_index_free(li);
	free(t.p);
	free(z.p);
}

/* Names and times in their other forms: GNU long names, the ustar
 * prefix, base-256 and octal times, pax times as libarchive reads them. */
/* A file's content in members of its own (chunks that are not its last):
 * the walker passes over them without their bytes, and the headers are
 * the same; where it is not between members, or would pass the end of the
 * content, it refuses; a member that holds more than it was told of puts
 * it out of step, and nothing is merged. */
static void test_skip_content(void **state)
{
	enum toc_format fs[] = { TOC_ESTARGZ, TOC_ZSTD_CHUNKED };

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(fs); i++)
		for (int lie = 0; lie < 2; lie++) {
			struct blob t = { 0 }, m[4] = { 0 };
			struct tarhdr *w;
			struct layer_index *li;
			size_t data, cuts[5], changed = 0;
			static const struct layer_entry e[] = {
				{ .path = "", .type = LAYER_ENTRY_DIR },
				{ .path = "big", .type = LAYER_ENTRY_REG, .size = 3000 },
				{ .path = "after", .type = LAYER_ENTRY_SYMLINK },
			};

			put_entry(&t, "./", '5', 0, "1234567890.5");
			put_ext(&t, 'x', pax("mtime", "1234567890.25"));
			put_ustar_header(&t, "./big", NULL, '0', 3000, octal(1234567890));
			data = t.len;
			blob_zeros(&t, 3000 + (512 - 3000 % 512) % 512);
			put_entry(&t, "./after", '2', 0, "1234567891.75");
			blob_zeros(&t, 1024);
			cuts[0] = 0;
			cuts[1] = data;
			cuts[2] = data + 1000;
			cuts[3] = data + 2000;
			cuts[4] = t.len;
			for (size_t k = 0; k < 4; k++) {
				if (fs[i] == TOC_ESTARGZ)
					put_gzip(&m[k], t.p + cuts[k], cuts[k + 1] - cuts[k]);
				else
					put_zstd(&m[k], t.p + cuts[k], cuts[k + 1] - cuts[k]);
			}
			assert_int_equal(tarhdr_new(fs[i], &w), 0);
			/* before the content: not inside it */
			assert_int_equal(tarhdr_skip_content(w, 1000), -EAGAIN);
			assert_int_equal(tarhdr_feed(w, m[0].p, m[0].len), 0);
			/* inside a member: not between two */
			assert_int_equal(tarhdr_feed(w, m[1].p, 3), 0);
			assert_int_equal(tarhdr_skip_content(w, 1000), -EAGAIN);
			assert_int_equal(tarhdr_feed(w, m[1].p + 3, m[1].len - 3), 0);
			/* the last of the content: not all of what is left */
			assert_int_equal(tarhdr_skip_content(w, 3000), -EAGAIN);
			assert_int_equal(tarhdr_skip_content(w, lie ? 900 : 1000), 0);
			assert_int_equal(tarhdr_feed(w, m[3].p, m[3].len), lie ? -EBADMSG : 0);
			li = index_of(ARRAY_SIZE(e), e);
			if (lie) {
				assert_int_equal(tarhdr_merge(w, li, &changed), -EBADMSG);
			} else {
				assert_int_equal(tarhdr_merge(w, li, &changed), 0);
				assert_int_equal(changed, 3);
				assert_int_equal(li->entries[1].mtime_nsec, 250000000);
				assert_int_equal(li->entries[2].mtime_sec, 1234567891);
				assert_int_equal(li->entries[2].mtime_nsec, 750000000);
			}
			layer_index_free(li);
			tarhdr_free(w);
			for (size_t k = 0; k < 4; k++)
				free(m[k].p);
			free(t.p);
		}
}

static void test_header_forms(void **state)
{
	static const struct {
		const char *pax_mtime;
		int64_t sec;
		uint32_t nsec;
	} times[] = {
		{ "1234567890.123456789", 1234567890, 123456789 },
		{ "1234567890.1234567891", 1234567890, 123456789 },
		{ "1234567890.5", 1234567890, 500000000 },
		{ "1234567890", 1234567890, 0 },
		{ "-1.5", -1, 500000000 },
		{ "0.000000001", 0, 1 },
	};
	char longname[300];
	unsigned char b256[12] = { 0x80 };
	struct blob t = { 0 };
	struct tarhdr *w;
	const struct tarhdr_entry *e;
	size_t n;

	(void)state;
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	longname[100] = '/';
	put_ext(&t, 'L', longname);
	put_ustar_header(&t, "cut", NULL, '0', 0, octal(7));
	put_ustar_header(&t, "name", "some/prefix", '5', 0, octal(8));
	b256[11] = 0x10; /* 16 */
	put_ustar_header(&t, "b256", NULL, '6', 0, b256);
	for (size_t i = 0; i < ARRAY_SIZE(times); i++) {
		char name[16];

		snprintf(name, sizeof(name), "t%zu", i);
		put_entry(&t, name, '0', 0, times[i].pax_mtime);
	}
	put_ext(&t, 'x', pax("path", "from/pax"));
	put_ustar_header(&t, "ignored", NULL, '3', 0, octal(9));
	blob_zeros(&t, 1024);

	assert_int_equal(tarhdr_new(TOC_ESTARGZ, &w), 0);
	assert_int_equal(tarhdr_feed_tar(w, t.p, t.len), 0);
	e = tarhdr_entries(w, &n);
	assert_int_equal(n, 4 + ARRAY_SIZE(times));
	assert_string_equal(e[0].path, longname);
	assert_int_equal(e[0].mtime_sec, 7);
	assert_string_equal(e[1].path, "some/prefix/name");
	assert_int_equal(e[1].type, LAYER_ENTRY_DIR);
	assert_int_equal(e[2].mtime_sec, 16);
	assert_int_equal(e[2].type, LAYER_ENTRY_FIFO);
	for (size_t i = 0; i < ARRAY_SIZE(times); i++) {
		assert_int_equal(e[3 + i].mtime_sec, times[i].sec);
		assert_int_equal(e[3 + i].mtime_nsec, times[i].nsec);
	}
	assert_string_equal(e[n - 1].path, "from/pax");
	assert_int_equal(e[n - 1].type, LAYER_ENTRY_CHR);
	tarhdr_free(w);
	free(t.p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_merge_formats), cmocka_unit_test(test_hostile_disagreement),
		cmocka_unit_test(test_refused),	      cmocka_unit_test(test_header_forms),
		cmocka_unit_test(test_skip_content),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

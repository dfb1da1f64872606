/* Unit tests for manager/lazy/lazy: a zstd:chunked layer built here is served by
 * the fake registry, published from its table of contents into a cache in
 * a temporary directory, and read chunk by chunk: reads fetch only what
 * they need, with few requests; readers of one chunk share its fetch; a
 * chunk the registry sends wrong is never served; what was fetched
 * survives a restart; completion makes every file an object; the
 * completer runs a completion on a thread of its own and reports its end
 * and events. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <dirent.h>
#include <zlib.h>
#include <zstd.h>

#include "cache.h"
#include "fake-transport.h"
#include "lazy.h"
#include "lazy-completer.h"
#include "packs.h"
#include "registry.h"
#include "tocblob.h"

#define CHUNK 4096
#define NCHUNKS 5

/* Bytes hashed since the test set it to 0 (hasher_update wrapped at link
 * time). */
static atomic_uint_fast64_t hashed_bytes;

void __wrap_hasher_update(struct hasher *h, const void *buf, size_t len);
void __real_hasher_update(struct hasher *h, const void *buf, size_t len);

void __wrap_hasher_update(struct hasher *h, const void *buf, size_t len)
{
	atomic_fetch_add(&hashed_bytes, len);
	__real_hasher_update(h, buf, len);
}

struct fixture {
	char dir[64];
	struct cache *cache;
	struct fake_transport *fake;
	struct registry *reg;
	char blob[DIGEST_STRING_MAX];
	char blob2[DIGEST_STRING_MAX]; /* another layer with the same file */
	char object[DIGEST_HEX_LEN + 1];
	unsigned char content[CHUNK * NCHUNKS];
	int mode;	     /* of the file in the next make_layer()'s table */
	struct toc_layer tl; /* the last make_layer()'s */
	size_t size;	     /* and its blob's */
	bool packs;	     /* layers published keep small files in a pack */
};

static void publish_blob(struct fixture *f, struct blob *b, const struct toc_layer *tl,
			 char *ret_blob, bool publish);
static void publish_as(struct fixture *f, const struct toc_layer *tl, const char *blob,
		       const char *digest);

/* A layer with one file of five zstd frames and its table, after pad
 * bytes of zeros; published (but not fetched) when publish is set. */
static void make_layer(struct fixture *f, size_t pad, char *ret_blob, bool publish)
{
	struct blob b = { 0 };
	struct toc_layer tl;
	size_t at[NCHUNKS], end;
	char d[DIGEST_STRING_MAX], cd[NCHUNKS][DIGEST_STRING_MAX];
	char json[8192];
	size_t n;

	for (size_t i = 0; i < sizeof(f->content); i++)
		f->content[i] = (unsigned char)(i * 131 + i / 97);
	blob_zeros(&b, pad);
	for (int k = 0; k < NCHUNKS; k++) {
		at[k] = put_zstd(&b, f->content + k * CHUNK, CHUNK);
		sha256(f->content + k * CHUNK, CHUNK, cd[k]);
	}
	end = b.len;
	blob_zeros(&b, 32);
	sha256(f->content, sizeof(f->content), d);
	snprintf(f->object, sizeof(f->object), "%s", digest_hex(d));
	n = (size_t)snprintf(json, sizeof(json),
			     "{\"version\":1,\"entries\":["
			     "{\"type\":\"dir\",\"name\":\"./\",\"mode\":493},"
			     "{\"type\":\"reg\",\"name\":\"./f\",\"mode\":%d,\"size\":%zu,"
			     "\"digest\":\"%s\",\"offset\":%zu,\"endOffset\":%zu,"
			     "\"chunkSize\":%d,\"chunkDigest\":\"%s\"}",
			     f->mode ? f->mode : 420, sizeof(f->content), d, at[0], end, CHUNK,
			     cd[0]);
	for (int k = 1; k < NCHUNKS; k++)
		n += (size_t)snprintf(json + n, sizeof(json) - n,
				      ",{\"type\":\"chunk\",\"name\":\"./f\",\"offset\":%zu,"
				      "\"chunkOffset\":%d,\"chunkSize\":%d,\"chunkDigest\":\"%s\"}",
				      at[k], k * CHUNK, CHUNK, cd[k]);
	snprintf(json + n, sizeof(json) - n, "]}");
	put_zstd_end(&b, json, &tl);
	f->tl = tl;
	f->size = b.len;
	publish_blob(f, &b, &tl, ret_blob, publish);
}

/* Puts the layer b (its table described by tl) in the registry and, with
 * publish, publishes it lazily as the pull does. */
static void publish_blob(struct fixture *f, struct blob *b, const struct toc_layer *tl,
			 char *ret_blob, bool publish)
{
	fake_put_blob(f->fake, "app", b->p, b->len, ret_blob);
	free(b->p);
	if (publish)
		publish_as(f, tl, ret_blob, ret_blob);
}

/* What the pull does: fetch and verify the table of blob (tl), publish
 * layer digest from it (another digest: a manifest that claims it). */
static void publish_as(struct fixture *f, const struct toc_layer *tl, const char *blob,
		       const char *digest)
{
	struct lazy_source src = { .domain = "registry.test", .repo = "app", .packs = f->packs };
	struct cache_layer_stage st;
	struct toc *toc = NULL;
	char err[256], *text = NULL, *tocbuf;
	size_t toclen;

	src.tl = *tl;
	assert_int_equal(
		lazy_fetch_toc(f->reg, &src, blob, NULL, &toc, &tocbuf, &toclen, err, sizeof(err)),
		0);
	assert_int_equal(lazy_source_format(&src, &text), 0);
	assert_int_equal(cache_layer_stage(f->cache, digest, &st), 0);
	assert_int_equal(
		cache_layer_commit_lazy(f->cache, &st, digest, toc->index, text, tocbuf, toclen),
		0);
	toc_free(toc);
	free(tocbuf);
	free(text);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct registry_options ro = { .max_retries = 0 };
	char err[256];

	assert_non_null(f);
	strcpy(f->dir, "/tmp/test-lazy.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_int_equal(cache_open(f->dir, &f->cache, err, sizeof(err)), 0);
	f->fake = fake_transport_new();
	ro.transport = fake_transport_get(f->fake);
	assert_int_equal(registry_new(&ro, &f->reg), 0);
	make_layer(f, 64, f->blob, true);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[128];

	registry_free(f->reg);
	fake_transport_free(f->fake);
	cache_close(f->cache);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

static unsigned ranges(struct fixture *f)
{
	char m[128];

	snprintf(m, sizeof(m), "GET /v2/app/blobs/%s bytes=", f->blob);
	return fake_count(f->fake, m);
}

static bool layer_has(struct fixture *f, const char *prefix, const char *suffix)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/layers/%s/%s%s%s", f->dir, digest_hex(f->blob), prefix,
		 f->object, suffix);
	return access(path, F_OK) == 0;
}

static void test_read_fetches_what_it_needs(void **state)
{
	struct fixture *f = *state;
	struct lazy_layer *l;
	unsigned char buf[CHUNK * 2];
	unsigned before = ranges(f);

	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), 0);
	/* the middle of chunk 1 and the start of chunk 2: one request */
	assert_int_equal(lazy_read(l, f->reg, f->object, CHUNK + 100, CHUNK, buf), CHUNK);
	assert_memory_equal(buf, f->content + CHUNK + 100, CHUNK);
	assert_int_equal(ranges(f), before + 1);
	/* again: no request */
	assert_int_equal(lazy_read(l, f->reg, f->object, CHUNK, 100, buf), 100);
	assert_memory_equal(buf, f->content + CHUNK, 100);
	assert_int_equal(ranges(f), before + 1);
	/* past the end: short, then nothing */
	assert_int_equal(lazy_read(l, f->reg, f->object, sizeof(f->content) - 10, 100, buf), 10);
	assert_int_equal(lazy_read(l, f->reg, f->object, sizeof(f->content), 100, buf), 0);
	assert_true(layer_has(f, "p.", ""));
	assert_false(layer_has(f, "o.", ""));
	/* a file of another content is not in this layer */
	assert_int_equal(lazy_read(l, f->reg, "00", 0, 1, buf), -ENOENT);
	lazy_layer_free(l);
}

struct reader {
	struct fixture *f;
	struct lazy_layer *l;
	ssize_t r;
	unsigned char buf[100];
};

static void *read_chunk0(void *arg)
{
	struct reader *rd = arg;

	rd->r = lazy_read(rd->l, rd->f->reg, rd->f->object, 10, sizeof(rd->buf), rd->buf);
	return NULL;
}

static void test_readers_share_a_fetch(void **state)
{
	struct fixture *f = *state;
	struct reader rd[4];
	pthread_t th[4];
	struct lazy_layer *l;
	unsigned before = ranges(f);

	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), 0);
	fake_fault(f->fake, "bytes=", FAKE_HOLD, 0, -1);
	for (int i = 0; i < 4; i++) {
		rd[i] = (struct reader){ .f = f, .l = l };
		assert_int_equal(pthread_create(&th[i], NULL, read_chunk0, &rd[i]), 0);
	}
	fake_wait_held(f->fake, 1);
	usleep(50 * 1000); /* the others are waiting for the chunk now */
	fake_release(f->fake);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(rd[i].r, sizeof(rd[i].buf));
		assert_memory_equal(rd[i].buf, f->content + 10, sizeof(rd[i].buf));
	}
	assert_int_equal(ranges(f), before + 1);
	fake_clear_faults(f->fake);
	lazy_layer_free(l);
}

struct large_reader {
	struct fixture *f;
	struct lazy_layer *l;
	uint64_t off;
	size_t size;
	ssize_t r;
	unsigned char buf[CHUNK * NCHUNKS];
};

static void *read_range(void *arg)
{
	struct large_reader *rd = arg;

	rd->r = lazy_read(rd->l, rd->f->reg, rd->f->object, rd->off, rd->size, rd->buf);
	return NULL;
}

/* A reader of one chunk that a larger request is bringing (held: a slow
 * registry) does not wait for it: it fetches that chunk on its own.  The
 * larger read still ends right, and the file is finished once both are
 * done. */
static void test_small_read_not_behind_large(void **state)
{
	struct fixture *f = *state;
	struct large_reader *big = calloc(1, sizeof(*big)), *small = calloc(1, sizeof(*small));
	struct timespec until;
	pthread_t tb, ts;
	struct lazy_layer *l;
	unsigned before = ranges(f);
	int joined;

	assert_non_null(big);
	assert_non_null(small);
	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), 0);
	/* the whole file: one range from its first chunk, after 64 bytes */
	fake_fault(f->fake, "bytes=64-", FAKE_HOLD, 0, 1);
	*big = (struct large_reader){ .f = f, .l = l, .size = CHUNK * NCHUNKS };
	assert_int_equal(pthread_create(&tb, NULL, read_range, big), 0);
	fake_wait_held(f->fake, 1);
	*small = (struct large_reader){ .f = f, .l = l, .off = 2 * CHUNK + 10, .size = 100 };
	assert_int_equal(pthread_create(&ts, NULL, read_range, small), 0);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	joined = pthread_timedjoin_np(ts, NULL, &until);
	if (joined != 0) {
		fake_release(f->fake);
		pthread_join(ts, NULL);
	}
	assert_int_equal(joined, 0); /* not behind the held request */
	assert_int_equal(small->r, 100);
	assert_memory_equal(small->buf, f->content + 2 * CHUNK + 10, 100);
	assert_int_equal(ranges(f), before + 2);
	assert_false(layer_has(f, "o.", ""));
	fake_release(f->fake);
	pthread_join(tb, NULL);
	assert_int_equal(big->r, CHUNK * NCHUNKS);
	assert_memory_equal(big->buf, f->content, CHUNK * NCHUNKS);
	assert_true(layer_has(f, "o.", ""));
	assert_false(layer_has(f, "p.", ""));
	fake_clear_faults(f->fake);
	lazy_layer_free(l);
	free(big);
	free(small);
}

struct completer {
	struct fixture *f;
	struct lazy_layer *l;
	struct registry *reg; /* NULL: the fixture's */
	int r;
};

static void *complete_layer(void *arg)
{
	struct completer *c = arg;

	c->r = lazy_layer_complete(c->l, c->reg ? c->reg : c->f->reg, NULL);
	return NULL;
}

/* Whether a range that request i of the log asks for overlaps one that a
 * request before from asked for (requests without a range: none). */
/* Whether request i asks for bytes of the blob that a request before
 * from asked for already, but for the table of contents of tl (NULL: no
 * exception), which the completion's hash of the blob asks for again. */
static bool asked_again_but(struct fake_transport *fake, unsigned from, unsigned i,
			    const struct toc_layer *tl)
{
	const char *line = fake_request(fake, i), *r;
	unsigned long long a, b;
	int n;

	if (!line || !(r = strstr(line, "bytes=")))
		return false;
	for (r += 6; sscanf(r, "%llu-%llu%n", &a, &b, &n) == 2; r += n + (r[n] == ',')) {
		for (unsigned k = 0; k < from; k++) {
			const char *q = strstr(fake_request(fake, k), "bytes=");
			unsigned long long x, y;
			int m;

			if (!strstr(fake_request(fake, k), "/blobs/"))
				continue;
			for (q = q ? q + 6 : NULL; q && sscanf(q, "%llu-%llu%n", &x, &y, &m) == 2;
			     q += m + (q[m] == ','))
				if (a <= y && x <= b &&
				    !(tl && x >= tl->zc_offset &&
				      y < tl->zc_offset + tl->zc_length))
					return true;
		}
		if (r[n] != ',')
			break;
	}
	return false;
}

static bool asked_again(struct fake_transport *fake, unsigned from, unsigned i)
{
	return asked_again_but(fake, from, i, NULL);
}

/* Some chunks of a held request fetched again by smaller reads: the
 * completion asks for none of the others (the held request brings them),
 * waits for it, and then finds the file finished and the layer
 * complete. */
static void test_complete_waits_for_request_under_way(void **state)
{
	struct fixture *f = *state;
	struct large_reader *big = calloc(1, sizeof(*big)), *small = calloc(1, sizeof(*small));
	struct completer c;
	pthread_t tb, tc;
	struct lazy_layer *l;

	assert_non_null(big);
	assert_non_null(small);
	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), 0);
	fake_fault(f->fake, "bytes=64-", FAKE_HOLD, 0, 1);
	*big = (struct large_reader){ .f = f, .l = l, .size = CHUNK * NCHUNKS };
	assert_int_equal(pthread_create(&tb, NULL, read_range, big), 0);
	fake_wait_held(f->fake, 1);
	/* two reads, each of less than the held request brings */
	*small = (struct large_reader){ .f = f, .l = l, .size = 2 * CHUNK };
	read_range(small);
	assert_int_equal(small->r, 2 * CHUNK);
	*small = (struct large_reader){ .f = f, .l = l, .off = 2 * CHUNK, .size = 3 * CHUNK };
	read_range(small);
	assert_int_equal(small->r, 3 * CHUNK);
	c = (struct completer){ .f = f, .l = l };
	assert_int_equal(pthread_create(&tc, NULL, complete_layer, &c), 0);
	/* (the completion waits for the held request, whether or not it is
	 * there yet when the request goes on) */
	usleep(100 * 1000);
	unsigned before = fake_count(f->fake, "GET /v2/app/blobs/");
	fake_release(f->fake);
	pthread_join(tb, NULL);
	pthread_join(tc, NULL);
	assert_int_equal(big->r, CHUNK * NCHUNKS);
	assert_memory_equal(big->buf, f->content, CHUNK * NCHUNKS);
	assert_int_equal(c.r, 0);
	assert_true(lazy_layer_is_complete(l));
	assert_true(layer_has(f, "o.", ""));
	/* nothing asked for twice: the completion's own requests ask only
	 * for what no read brought (the bytes around the chunks), and the
	 * blob, kept as it came, is verified against its digest */
	for (unsigned i = before; fake_request(f->fake, i); i++)
		assert_false(asked_again(f->fake, before, i));
	assert_false(lazy_layer_toc_verified(l));
	assert_int_equal(lazy_layer_verified(f->cache, f->blob), LAZY_VERIFIED_DIGEST);
	fake_clear_faults(f->fake);
	lazy_layer_free(l);
	free(big);
	free(small);
}

/* A layer whose first chunk lies more than a request would fetch along
 * past the blob's start, with nothing but padding before it: the
 * completion fetches the padding for the blob's digest rather than keep
 * everything after it for a proof at the end. */
static void test_complete_fetches_chunkless_gap(void **state)
{
	struct fixture *f = *state;
	struct lazy_stats st = { 0 };
	struct lazy_layer *l;

	make_layer(f, 100 << 10, f->blob, true);
	assert_int_equal(lazy_layer_open(f->cache, f->blob, &st, &l), 0);
	assert_int_equal(lazy_layer_complete(l, f->reg, NULL), 0);
	assert_true(lazy_layer_is_complete(l));
	assert_int_equal(lazy_layer_verified(f->cache, f->blob), LAZY_VERIFIED_DIGEST);
	assert_int_equal(atomic_load(&st.kept_bytes), 0);
	lazy_layer_free(l);
}

#define BIG_CHUNK (80u << 10)
#define BIG_CHUNKS 4

/* A file of a layer make_files() builds: pad bytes of zeros before it,
 * then chunks zstd frames of chunk bytes that do not compress. */
struct file_spec {
	const char *name;
	size_t pad, chunk, chunks;
	unsigned char *content; /* set: malloc()ed, the caller frees */
	size_t at[8];		/* set: the blob offsets of its frames */
	char object[DIGEST_HEX_LEN + 1];
};

/* A zstd:chunked layer of the files fs, published lazily; f->object is
 * the first file's. */
static void make_files(struct fixture *f, struct file_spec *fs, size_t n_files)
{
	struct blob b = { 0 };
	struct toc_layer tl;
	char d[DIGEST_STRING_MAX], cd[DIGEST_STRING_MAX], json[8192];
	uint32_t x = 2463534242u;
	size_t n;

	n = (size_t)snprintf(json, sizeof(json),
			     "{\"version\":1,\"entries\":["
			     "{\"type\":\"dir\",\"name\":\"./\",\"mode\":493}");
	for (size_t i = 0; i < n_files; i++) {
		struct file_spec *s = &fs[i];
		size_t size = s->chunk * s->chunks, end;

		assert_true(s->chunks <= ARRAY_SIZE(s->at));
		s->content = malloc(size);
		assert_non_null(s->content);
		for (size_t j = 0; j < size; j++) {
			x ^= x << 13;
			x ^= x >> 17;
			x ^= x << 5;
			s->content[j] = (unsigned char)x;
		}
		blob_zeros(&b, s->pad);
		for (size_t k = 0; k < s->chunks; k++)
			s->at[k] = put_zstd(&b, s->content + k * s->chunk, s->chunk);
		end = b.len;
		sha256(s->content, size, d);
		snprintf(s->object, sizeof(s->object), "%s", digest_hex(d));
		n += (size_t)snprintf(
			json + n, sizeof(json) - n,
			",{\"type\":\"reg\",\"name\":\"./%s\",\"mode\":420,\"size\":%zu,"
			"\"digest\":\"%s\",\"offset\":%zu,\"endOffset\":%zu",
			s->name, size, d, s->at[0], end);
		for (size_t k = 0; k < s->chunks; k++) {
			sha256(s->content + k * s->chunk, s->chunk, cd);
			if (k > 0)
				n += (size_t)snprintf(json + n, sizeof(json) - n,
						      ",{\"type\":\"chunk\",\"name\":\"./%s\","
						      "\"offset\":%zu",
						      s->name, s->at[k]);
			n += (size_t)snprintf(json + n, sizeof(json) - n,
					      ",\"chunkOffset\":%zu,\"chunkSize\":%zu,"
					      "\"chunkDigest\":\"%s\"}",
					      k * s->chunk, s->chunk, cd);
		}
		assert_true(n < sizeof(json));
	}
	snprintf(json + n, sizeof(json) - n, "]}");
	blob_zeros(&b, 32);
	put_zstd_end(&b, json, &tl);
	f->tl = tl;
	f->size = b.len;
	snprintf(f->object, sizeof(f->object), "%s", fs[0].object);
	publish_blob(f, &b, &tl, f->blob, true);
}

struct big_reader {
	struct fixture *f;
	struct lazy_layer *l;
	uint64_t off;
	ssize_t r;
	unsigned char buf[64];
};

static void *read_big(void *arg)
{
	struct big_reader *rd = arg;

	rd->r = lazy_read(rd->l, rd->f->reg, rd->f->object, rd->off, sizeof(rd->buf), rd->buf);
	return NULL;
}

/* A reader read the first chunk; another fetches the second (held: a
 * slow registry) when the completion, with connections of its own,
 * starts.  The completion waits for those bytes, which the reader keeps,
 * and takes the blob's digest through both readers' bytes and its own as
 * they pass: it keeps nothing of its own for a proof at the end. */
static void test_complete_waits_for_readers_chunk(void **state)
{
	struct fixture *f = *state;
	struct lazy_stats st = { 0 };
	struct big_reader rd = { .f = f };
	struct completer c = { .f = f };
	struct registry_options ro = { .max_retries = 0 };
	/* (from the blob's first byte: the chain needs no request of its
	 * own before the first chunk) */
	struct file_spec fs = { .name = "f", .chunk = BIG_CHUNK, .chunks = BIG_CHUNKS };
	const size_t *at = fs.at;
	char m[64];
	pthread_t tr, tc;

	ro.transport = fake_transport_get(f->fake);
	assert_int_equal(registry_new(&ro, &c.reg), 0);
	make_files(f, &fs, 1);
	assert_int_equal(lazy_layer_open(f->cache, f->blob, &st, &rd.l), 0);
	c.l = rd.l;
	rd.off = 100;
	read_big(&rd);
	assert_int_equal(rd.r, sizeof(rd.buf));
	rd.off = BIG_CHUNK + 100;
	snprintf(m, sizeof(m), "bytes=%zu-", at[1]);
	fake_fault(f->fake, m, FAKE_HOLD, 0, 1);
	assert_int_equal(pthread_create(&tr, NULL, read_big, &rd), 0);
	fake_wait_held(f->fake, 1);
	assert_int_equal(pthread_create(&tc, NULL, complete_layer, &c), 0);
	/* (time for the completion to bring the first chunk and reach the
	 * one the reader fetches; the test holds either way) */
	usleep(200 * 1000);
	fake_release(f->fake);
	pthread_join(tr, NULL);
	pthread_join(tc, NULL);
	assert_int_equal(rd.r, sizeof(rd.buf));
	assert_memory_equal(rd.buf, fs.content + rd.off, sizeof(rd.buf));
	assert_int_equal(c.r, 0);
	assert_true(lazy_layer_is_complete(rd.l));
	assert_int_equal(lazy_layer_verified(f->cache, f->blob), LAZY_VERIFIED_DIGEST);
	/* the readers' chunks, and nothing of the completion's */
	assert_int_equal(atomic_load(&st.kept_bytes), at[2] - at[0]);
	fake_clear_faults(f->fake);
	lazy_layer_free(rd.l);
	registry_free(c.reg);
	free(fs.content);
}

/* A file the completion brought whole, its next request held before it
 * commits: a reader has its bytes, and leaves the file to the commit,
 * which publishes it hashed whole on the way (the reader reads none of it
 * back to check it). */
static void test_reader_leaves_file_to_commit(void **state)
{
	struct fixture *f = *state;
	struct file_spec fs[2] = {
		{ .name = "a", .chunk = CHUNK, .chunks = 4 },
		{ .name = "b", .pad = 100 << 10, .chunk = CHUNK, .chunks = 1 },
	};
	struct completer c = { .f = f };
	unsigned char buf[64];
	bool partial, object;
	char m[64];
	pthread_t tc;
	ssize_t n;

	make_files(f, fs, 2);
	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &c.l), 0);
	/* the second request: the padding before b, fetched for the blob's
	 * digest, and b */
	snprintf(m, sizeof(m), "bytes=%zu-", fs[1].at[0] - fs[1].pad);
	fake_fault(f->fake, m, FAKE_HOLD, 0, 1);
	assert_int_equal(pthread_create(&tc, NULL, complete_layer, &c), 0);
	fake_wait_held(f->fake, 1);
	n = lazy_read(c.l, f->reg, fs[0].object, CHUNK, sizeof(buf), buf);
	partial = layer_has(f, "p.", "");
	object = layer_has(f, "o.", "");
	fake_release(f->fake);
	pthread_join(tc, NULL);
	assert_int_equal(n, sizeof(buf));
	assert_memory_equal(buf, fs[0].content + CHUNK, sizeof(buf));
	assert_true(partial);
	assert_false(object);
	assert_int_equal(c.r, 0);
	assert_true(lazy_layer_is_complete(c.l));
	assert_true(layer_has(f, "o.", ""));
	assert_int_equal(lazy_layer_verified(f->cache, f->blob), LAZY_VERIFIED_DIGEST);
	fake_clear_faults(f->fake);
	lazy_layer_free(c.l);
	free(fs[0].content);
	free(fs[1].content);
}

/* The completion brings a file of several chunks in order: the file's
 * hash over all of them checks each chunk, which is not hashed alone as
 * well.  What is hashed: the blob (its digest) and the file, once. */
static void test_complete_hashes_chunks_once(void **state)
{
	struct fixture *f = *state;
	struct file_spec fs = { .name = "f", .chunk = BIG_CHUNK, .chunks = BIG_CHUNKS };
	struct lazy_layer *l;
	uint64_t hashed;

	make_files(f, &fs, 1);
	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), 0);
	atomic_store(&hashed_bytes, 0);
	assert_int_equal(lazy_layer_complete(l, f->reg, NULL), 0);
	hashed = atomic_load(&hashed_bytes);
	assert_true(lazy_layer_is_complete(l));
	assert_int_equal(lazy_layer_verified(f->cache, f->blob), LAZY_VERIFIED_DIGEST);
	assert_true(layer_has(f, "o.", ""));
	if (hashed > f->size + BIG_CHUNK * BIG_CHUNKS)
		fail_msg("%" PRIu64 " bytes hashed for a blob of %zu bytes and a file of %u",
			 hashed, f->size, BIG_CHUNK * BIG_CHUNKS);
	lazy_layer_free(l);
	free(fs.content);
}

/* A reader brought a chunk in the middle of a file first: the
 * completion's hash of the file reads that chunk back and goes on, and
 * checks none of its own chunks alone.  What is hashed: the reader's
 * chunk, the blob, and the file once. */
static void test_complete_hash_takes_readers_chunk(void **state)
{
	struct fixture *f = *state;
	struct file_spec fs = { .name = "f", .chunk = BIG_CHUNK, .chunks = BIG_CHUNKS };
	unsigned char buf[64];
	struct lazy_layer *l;
	uint64_t hashed;

	make_files(f, &fs, 1);
	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), 0);
	atomic_store(&hashed_bytes, 0);
	assert_int_equal(lazy_read(l, f->reg, fs.object, BIG_CHUNK + 10, sizeof(buf), buf),
			 sizeof(buf));
	assert_int_equal(lazy_layer_complete(l, f->reg, NULL), 0);
	hashed = atomic_load(&hashed_bytes);
	assert_true(lazy_layer_is_complete(l));
	assert_true(layer_has(f, "o.", ""));
	if (hashed > BIG_CHUNK + f->size + BIG_CHUNK * BIG_CHUNKS)
		fail_msg("%" PRIu64 " bytes hashed for a blob of %zu bytes and a file of %u",
			 hashed, f->size, BIG_CHUNK * BIG_CHUNKS);
	lazy_layer_free(l);
	free(fs.content);
}

#define HUGE_CHUNK (6u << 20)

/* A chunk the completion wrote is not checked until its file's hash is
 * done; a reader who wants it before checks it alone.  Here the file's
 * first request wrote two of its three chunks and its last request is
 * held; the first chunk's bytes in the file are then damaged: the reader
 * gets the right bytes (fetched again), not those. */
static void test_reader_checks_unchecked_chunk(void **state)
{
	struct fixture *f = *state;
	struct file_spec fs = { .name = "f", .chunk = HUGE_CHUNK, .chunks = 3 };
	struct completer c = { .f = f };
	unsigned char buf1[64], buf2[64], junk[64];
	char m[64], path[256];
	unsigned before, after1, after2;
	pthread_t tc;
	ssize_t n1, n2;
	int fd;

	make_files(f, &fs, 1);
	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &c.l), 0);
	snprintf(m, sizeof(m), "bytes=%zu-", fs.at[2]);
	fake_fault(f->fake, m, FAKE_HOLD, 0, 1);
	assert_int_equal(pthread_create(&tc, NULL, complete_layer, &c), 0);
	fake_wait_held(f->fake, 1);
	snprintf(path, sizeof(path), "%s/layers/%s/p.%s", f->dir, digest_hex(f->blob), f->object);
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	memset(junk, 'x', sizeof(junk));
	assert_int_equal(pwrite(fd, junk, sizeof(junk), 0), sizeof(junk));
	close(fd);
	/* (the request let go before any check: a failed one ends the test
	 * without the completion left waiting) */
	before = ranges(f);
	n1 = lazy_read(c.l, f->reg, f->object, 0, sizeof(buf1), buf1);
	after1 = ranges(f);
	/* the second chunk is right: read without a request */
	n2 = lazy_read(c.l, f->reg, f->object, HUGE_CHUNK + 10, sizeof(buf2), buf2);
	after2 = ranges(f);
	fake_release(f->fake);
	pthread_join(tc, NULL);
	assert_int_equal(n1, sizeof(buf1));
	assert_memory_equal(buf1, fs.content, sizeof(buf1));
	assert_int_equal(after1, before + 1);
	assert_int_equal(n2, sizeof(buf2));
	assert_memory_equal(buf2, fs.content + HUGE_CHUNK + 10, sizeof(buf2));
	assert_int_equal(after2, after1);
	assert_int_equal(c.r, 0);
	assert_true(lazy_layer_is_complete(c.l));
	assert_true(layer_has(f, "o.", ""));
	fake_clear_faults(f->fake);
	lazy_layer_free(c.l);
	free(fs.content);
}

/* A reader of a small file brings the small files after it in the blob
 * along in its request: reading them then asks for nothing, and each is
 * an object already; a file farther away is a request of its own. */
static void test_small_files_come_together(void **state)
{
	struct fixture *f = *state;
	struct file_spec fs[6] = {
		{ .name = "a", .chunk = 2000, .chunks = 1 },
		{ .name = "b", .pad = 600, .chunk = 3000, .chunks = 1 },
		{ .name = "c", .pad = 600, .chunk = 1000, .chunks = 2 },
		{ .name = "d", .pad = 600, .chunk = 5000, .chunks = 1 },
		{ .name = "e", .pad = 600, .chunk = 100, .chunks = 1 },
		{ .name = "far", .pad = 100 << 10, .chunk = 2000, .chunks = 1 },
	};
	unsigned char buf[8192];
	unsigned before, got[6];
	struct lazy_layer *l;
	char path[256];

	make_files(f, fs, ARRAY_SIZE(fs));
	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), 0);
	before = ranges(f);
	for (size_t i = 0; i < ARRAY_SIZE(fs); i++) {
		size_t size = fs[i].chunk * fs[i].chunks;

		assert_int_equal(lazy_read(l, f->reg, fs[i].object, 0, sizeof(buf), buf), size);
		assert_memory_equal(buf, fs[i].content, size);
		got[i] = ranges(f) - before;
	}
	for (size_t i = 0; i + 1 < ARRAY_SIZE(fs); i++) {
		assert_int_equal(got[i], 1);
		snprintf(path, sizeof(path), "%s/layers/%s/o.%s", f->dir, digest_hex(f->blob),
			 fs[i].object);
		assert_int_equal(access(path, F_OK), 0);
	}
	assert_int_equal(got[5], 2);
	lazy_layer_free(l);
	for (size_t i = 0; i < ARRAY_SIZE(fs); i++)
		free(fs[i].content);
}

/* Small files brought along and then not read make the next requests
 * bring fewer bytes along: here the sixteen after the first read, none of
 * them read, leave room for one file after the next read, not three. */
static void test_unread_neighbours_shrink(void **state)
{
	struct fixture *f = *state;
	static char names[24][8];
	struct file_spec fs[24];
	unsigned char buf[4096];
	unsigned before, got[3];
	const size_t order[3] = { 0, 18, 20 };
	struct lazy_layer *l;

	for (size_t i = 0; i < ARRAY_SIZE(fs); i++) {
		snprintf(names[i], sizeof(names[i]), "f%zu", i);
		fs[i] = (struct file_spec){ .name = names[i], .chunk = 2000, .chunks = 1 };
	}
	make_files(f, fs, ARRAY_SIZE(fs));
	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), 0);
	before = ranges(f);
	for (size_t i = 0; i < ARRAY_SIZE(order); i++) {
		assert_int_equal(lazy_read(l, f->reg, fs[order[i]].object, 0, sizeof(buf), buf),
				 2000);
		assert_memory_equal(buf, fs[order[i]].content, 2000);
		got[i] = ranges(f) - before;
	}
	/* f0 brought f1..f16; f18 brought f19 only; f20 asked for alone */
	assert_int_equal(got[0], 1);
	assert_int_equal(got[1], 2);
	assert_int_equal(got[2], 3);
	assert_int_equal(lazy_read(l, f->reg, fs[19].object, 0, sizeof(buf), buf), 2000);
	assert_int_equal(ranges(f) - before, 3);
	lazy_layer_free(l);
	for (size_t i = 0; i < ARRAY_SIZE(fs); i++)
		free(fs[i].content);
}

/* The table a pull parsed, offered to the packs, is what the layer's
 * first load uses: the layer opens from it, not from its file (damaged
 * here), and serves reads.  The next load parses the file. */
static void test_first_load_takes_offered_table(void **state)
{
	struct fixture *f = *state;
	struct lazy_source src = { .domain = "registry.test", .repo = "app" };
	struct packs *packs;
	struct pack *pk;
	struct toc *toc = NULL;
	struct lazy_layer *l;
	unsigned char buf[64];
	char err[256], path[256], *tocbuf = NULL;
	size_t toclen;
	int fd;

	src.tl = f->tl;
	assert_int_equal(lazy_fetch_toc(f->reg, &src, f->blob, NULL, &toc, &tocbuf, &toclen, err,
					sizeof(err)),
			 0);
	free(tocbuf);
	assert_int_equal(toc_keep_files(toc), 0);
	snprintf(path, sizeof(path), "%s/layers/%s/toc", f->dir, digest_hex(f->blob));
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "{", 1), 1);
	close(fd);
	assert_int_equal(packs_new(f->cache, 0, &packs), 0);
	packs_offer_toc(packs, f->blob, toc);
	assert_int_equal(packs_get(packs, f->blob, &pk), 0);
	l = pack_lazy(packs, pk);
	assert_non_null(l);
	assert_int_equal(lazy_read(l, f->reg, f->object, CHUNK + 10, sizeof(buf), buf),
			 sizeof(buf));
	assert_memory_equal(buf, f->content + CHUNK + 10, sizeof(buf));
	packs_put(packs, pk);
	/* taken: a load after this one reads the (damaged) file */
	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), -EBADMSG);
	packs_free(packs);
}

static void test_wrong_chunk_never_served(void **state)
{
	struct fixture *f = *state;
	struct lazy_layer *l;
	unsigned char buf[64];

	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), 0);
	fake_fault(f->fake, "bytes=", FAKE_CORRUPT, 0, 1);
	assert_int_equal(lazy_read(l, f->reg, f->object, 3 * CHUNK, sizeof(buf), buf), -EBADMSG);
	/* fetched again, right this time */
	assert_int_equal(lazy_read(l, f->reg, f->object, 3 * CHUNK, sizeof(buf), buf), sizeof(buf));
	assert_memory_equal(buf, f->content + 3 * CHUNK, sizeof(buf));
	/* a registry that is down: its errno, nothing served */
	fake_fault(f->fake, "bytes=", FAKE_REFUSE, 0, -1);
	assert_int_equal(lazy_read(l, f->reg, f->object, 0, sizeof(buf), buf), -EHOSTUNREACH);
	fake_clear_faults(f->fake);
	lazy_layer_free(l);
}

static void test_restart_and_complete(void **state)
{
	struct fixture *f = *state;
	struct lazy_layer *l;
	unsigned char buf[CHUNK];
	unsigned before;
	char path[256];
	int fd;

	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), 0);
	assert_int_equal(lazy_read(l, f->reg, f->object, 0, 10, buf), 10);
	lazy_layer_free(l);
	/* a new process: chunk 0 is on disk, the registry is not asked */
	before = ranges(f);
	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), 0);
	assert_int_equal(lazy_read(l, f->reg, f->object, 100, 100, buf), 100);
	assert_memory_equal(buf, f->content + 100, 100);
	assert_int_equal(ranges(f), before);
	/* the rest: the file becomes an object, the layer complete */
	assert_int_equal(lazy_layer_complete(l, f->reg, NULL), 0);
	assert_true(layer_has(f, "o.", ""));
	assert_false(layer_has(f, "p.", ""));
	assert_false(layer_has(f, "p.", ".map"));
	/* read in order from byte 0 (chunk 0 again: under 64 KiB), the blob
	 * matched its digest: a layer like any other */
	assert_false(lazy_layer_toc_verified(l));
	lazy_layer_free(l);
	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), -ENOENT);
	snprintf(path, sizeof(path), "%s/objects/%s", f->dir, f->object);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, buf, sizeof(buf), 2 * CHUNK), sizeof(buf));
	assert_memory_equal(buf, f->content + 2 * CHUNK, sizeof(buf));
	close(fd);
}

/* Chunks 1 and 3 read, then the whole file: chunks 0, 2 and 4 come in
 * one request of three ranges, or (first_only: a registry that answers
 * several ranges with the first only) the other two by a request each. */
static void read_around(struct fixture *f, bool first_only)
{
	struct lazy_layer *l;
	static unsigned char buf[CHUNK * NCHUNKS];
	unsigned before, all;

	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), 0);
	assert_int_equal(lazy_read(l, f->reg, f->object, CHUNK + 1, 10, buf), 10);
	assert_int_equal(lazy_read(l, f->reg, f->object, 3 * CHUNK + 1, 10, buf), 10);
	before = ranges(f);
	all = fake_count(f->fake, "GET ");
	if (first_only)
		fake_fault(f->fake, "bytes=", FAKE_FIRST_RANGE, 0, -1);
	assert_int_equal(lazy_read(l, f->reg, f->object, 0, sizeof(buf), buf), sizeof(buf));
	assert_memory_equal(buf, f->content, sizeof(buf));
	assert_int_equal(ranges(f), before + (first_only ? 3 : 1));
	/* (the first request asked for all three) */
	assert_non_null(strstr(fake_request(f->fake, all), ","));
	fake_clear_faults(f->fake);
	lazy_layer_free(l);
}

static void test_several_ranges(void **state)
{
	read_around(*state, false);
}

static void test_first_range_only(void **state)
{
	read_around(*state, true);
}

/* The value of metric name in the stats' text, or -1. */
static long long metric(const struct lazy_stats *st, const char *name)
{
	char *text = NULL, *at;
	size_t len = 0;
	FILE *mf = open_memstream(&text, &len);
	long long v = -1;

	assert_non_null(mf);
	lazy_stats_metrics(st, mf);
	fclose(mf);
	for (at = text; at && *at; at = strchr(at, '\n') ? strchr(at, '\n') + 1 : NULL)
		if (!strncmp(at, name, strlen(name)) && at[strlen(name)] == ' ')
			v = atoll(at + strlen(name) + 1);
	free(text);
	return v;
}

static void test_bytes_and_metrics(void **state)
{
	struct fixture *f = *state;
	struct lazy_stats st = { 0 };
	struct lazy_layer *l;
	unsigned char buf[100];
	uint64_t local, total, first;

	assert_int_equal(lazy_layer_open(f->cache, f->blob, &st, &l), 0);
	lazy_layer_bytes(l, &local, &total);
	first = local;
	assert_true(local > 0 && local < total);
	/* one fetch a reader waits for: counted in the histogram */
	assert_int_equal(lazy_read(l, f->reg, f->object, 10, sizeof(buf), buf), sizeof(buf));
	lazy_layer_bytes(l, &local, &total);
	assert_true(local > first && local < total);
	assert_int_equal(metric(&st, "pullfs_lazy_fetch_duration_seconds_count"), 1);
	assert_int_equal(metric(&st, "pullfs_lazy_fetch_duration_seconds_bucket{le=\"+Inf\"}"), 1);
	assert_int_equal(metric(&st, "pullfs_lazy_background_bytes_total"), 0);
	/* what is on disk says the same to a new process */
	{
		struct lazy_layer *again;
		uint64_t l2, t2;

		assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &again), 0);
		lazy_layer_bytes(again, &l2, &t2);
		assert_int_equal(l2, local);
		assert_int_equal(t2, total);
		lazy_layer_free(again);
	}
	/* the background completion is counted apart, and not in the
	 * histogram */
	assert_int_equal(lazy_layer_complete(l, f->reg, NULL), 0);
	assert_true(lazy_layer_is_complete(l));
	lazy_layer_bytes(l, &local, &total);
	assert_int_equal(local, total);
	assert_true(metric(&st, "pullfs_lazy_background_bytes_total") > 0);
	assert_int_equal(metric(&st, "pullfs_lazy_fetch_duration_seconds_count"), 1);
	lazy_layer_free(l);
}

/* Marks layer digest as brought by a pull without credentials. */
static void make_public(struct fixture *f, const char *digest)
{
	char path[256];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/proofs", f->dir);
	(void)mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/proofs/%s", f->dir, digest_hex(digest));
	fp = fopen(path, "w");
	assert_non_null(fp);
	fputs("*\n", fp);
	fclose(fp);
}

/* A second layer holding the same file: once the first layer's copy is in
 * the content store and that layer is public, the second one links it and
 * fetches nothing.  While the first layer is one only pulls with
 * credentials brought, its copy is not linked: the second layer's table
 * of contents may only name the file, so it is fetched. */
static void partial_pull(struct fixture *f, bool public)
{
	struct lazy_stats st = { 0 };
	struct lazy_layer *a, *b;
	unsigned char buf[CHUNK];
	unsigned before;
	char m[128];

	make_layer(f, 200, f->blob2, true);
	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &a), 0);
	assert_int_equal(lazy_layer_complete(a, f->reg, NULL), 0);
	lazy_layer_free(a);
	if (public)
		make_public(f, f->blob);
	snprintf(m, sizeof(m), "GET /v2/app/blobs/%s", f->blob2);
	before = fake_count(f->fake, m);
	assert_int_equal(lazy_layer_open(f->cache, f->blob2, &st, &b), 0);
	assert_int_equal(lazy_read(b, f->reg, f->object, 2 * CHUNK, CHUNK, buf), CHUNK);
	assert_memory_equal(buf, f->content + 2 * CHUNK, CHUNK);
	if (!public) {
		assert_true(fake_count(f->fake, m) > before);
		assert_int_equal(metric(&st, "pullfs_lazy_files_linked_total"), 0);
		lazy_layer_free(b);
		return;
	}
	assert_int_equal(fake_count(f->fake, m), before);
	assert_int_equal(metric(&st, "pullfs_lazy_files_linked_total"), 1);
	assert_true(metric(&st, "pullfs_lazy_saved_bytes_total") > 0);
	/* and the layer completes without a request (nothing is missing),
	 * verified by its table of contents */
	assert_int_equal(lazy_layer_complete(b, f->reg, NULL), 0);
	assert_true(lazy_layer_is_complete(b));
	assert_true(lazy_layer_toc_verified(b));
	assert_int_equal(fake_count(f->fake, m), before);
	lazy_layer_free(b);
}

static void test_partial_pull_links(void **state)
{
	partial_pull(*state, true);
}

static void test_partial_pull_private(void **state)
{
	partial_pull(*state, false);
}

/* Publishing a layer whose files are stored already links them then, when
 * the layer that brought them is public; not otherwise. */
static void present_at_publishing(struct fixture *f, bool public)
{
	struct lazy_layer *a;
	struct toc *toc = NULL;
	char err[256];
	int dirfd;
	char *tocbuf;
	size_t toclen;
	struct lazy_source src = { .domain = "registry.test", .repo = "app" };

	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &a), 0);
	assert_int_equal(lazy_layer_complete(a, f->reg, NULL), 0);
	lazy_layer_free(a);
	if (public)
		make_public(f, f->blob);
	make_layer(f, 300, f->blob2, true);
	/* the same table, parsed again to measure what it spared */
	assert_int_equal(lazy_layer_open(f->cache, f->blob2, NULL, &a), 0);
	lazy_layer_free(a);
	dirfd = cache_layer_open_dir(f->cache, f->blob2);
	assert_true(dirfd >= 0);
	{
		char path[256], *text = NULL;
		size_t len;
		FILE *lf;

		snprintf(path, sizeof(path), "%s/layers/%s/lazy", f->dir, digest_hex(f->blob2));
		lf = fopen(path, "r");
		assert_non_null(lf);
		text = calloc(1, 4096);
		len = fread(text, 1, 4095, lf);
		fclose(lf);
		assert_true(len > 0);
		assert_int_equal(lazy_source_parse(text, &src), 0);
		free(text);
	}
	assert_int_equal(lazy_fetch_toc(f->reg, &src, f->blob2, NULL, &toc, &tocbuf, &toclen, err,
					sizeof(err)),
			 0);
	if (public)
		assert_true(lazy_toc_present_bytes(dirfd, toc) > 0);
	else
		assert_int_equal(lazy_toc_present_bytes(dirfd, toc), 0);
	toc_free(toc);
	free(tocbuf);
	lazy_source_done(&src);
	close(dirfd);
}

static void test_present_at_publishing(void **state)
{
	present_at_publishing(*state, true);
}

static void test_private_not_at_publishing(void **state)
{
	present_at_publishing(*state, false);
}

static unsigned open_fds(void)
{
	char path[64];
	unsigned n = 0;

	for (int fd = 0; fd < 4096; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n += access(path, F_OK) == 0;
	}
	return n;
}

#define MANY_FILES 300

/* Names in the directory of layer digest that begin with prefix. */
static unsigned names_like(struct fixture *f, const char *digest, const char *prefix)
{
	char path[256];
	struct dirent *de;
	unsigned n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/layers/%s", f->dir, digest_hex(digest));
	d = opendir(path);
	assert_non_null(d);
	while ((de = readdir(d)))
		n += !strncmp(de->d_name, prefix, strlen(prefix));
	closedir(d);
	return n;
}

/* A layer of many small files: its completion, and reads of every file
 * before and after it, keep a bounded number of descriptors open.  In a
 * layer that packs them, they make no file each: read before a restart,
 * they are there after it, and once complete, the index has each at its
 * place in the pack, in the blob's order, as a full unpack does. */
static void many_files(struct fixture *f, bool packs)
{
	struct blob b = { 0 };
	struct toc_layer tl;
	struct lazy_layer *l;
	char blob[DIGEST_STRING_MAX], objects[MANY_FILES][DIGEST_HEX_LEN + 1];
	char *json = malloc(MANY_FILES * 400), content[64], buf[64];
	size_t n = 0, len, at, end;
	unsigned before;

	assert_non_null(json);
	n += (size_t)snprintf(json, 64, "{\"version\":1,\"entries\":[");
	for (int i = 0; i < MANY_FILES; i++) {
		char d[DIGEST_STRING_MAX];

		len = (size_t)snprintf(content, sizeof(content), "file number %d\n", i);
		at = put_zstd(&b, content, len);
		end = b.len;
		sha256(content, len, d);
		snprintf(objects[i], sizeof(objects[i]), "%s", digest_hex(d));
		n += (size_t)snprintf(json + n, 400,
				      "%s{\"type\":\"reg\",\"name\":\"./f%d\",\"mode\":420,"
				      "\"size\":%zu,\"digest\":\"%s\",\"offset\":%zu,"
				      "\"endOffset\":%zu,\"chunkSize\":%zu,\"chunkDigest\":\"%s\"}",
				      i ? "," : "", i, len, d, at, end, len, d);
	}
	snprintf(json + n, 8, "]}");
	blob_zeros(&b, 32);
	put_zstd_end(&b, json, &tl);
	free(json);
	f->packs = packs;
	publish_blob(f, &b, &tl, blob, true);

	before = open_fds();
	assert_int_equal(lazy_layer_open(f->cache, blob, NULL, &l), 0);
	/* a reader first, then the completion, then readers again */
	for (int i = 0; i < MANY_FILES; i += 3) {
		len = (size_t)snprintf(content, sizeof(content), "file number %d\n", i);
		assert_int_equal(lazy_read(l, f->reg, objects[i], 0, sizeof(buf), buf), len);
		assert_memory_equal(buf, content, len);
	}
	assert_true(open_fds() <= before + 1 + 2 * 64);
	if (packs) {
		char m[128];
		unsigned asked;

		assert_int_equal(names_like(f, blob, "p."), 0);
		assert_int_equal(names_like(f, blob, "o."), 0);
		assert_int_equal(names_like(f, blob, "pack"), 2);
		/* what was read is there after a restart */
		lazy_layer_free(l);
		assert_int_equal(lazy_layer_open(f->cache, blob, NULL, &l), 0);
		snprintf(m, sizeof(m), "GET /v2/app/blobs/%s", blob);
		asked = fake_count(f->fake, m);
		for (int i = 0; i < MANY_FILES; i += 3) {
			len = (size_t)snprintf(content, sizeof(content), "file number %d\n", i);
			assert_int_equal(lazy_read(l, f->reg, objects[i], 0, sizeof(buf), buf),
					 len);
			assert_memory_equal(buf, content, len);
		}
		assert_int_equal(fake_count(f->fake, m), asked);
	}
	assert_int_equal(lazy_layer_complete(l, f->reg, NULL), 0);
	assert_true(lazy_layer_is_complete(l));
	assert_true(open_fds() <= before + 1 + 2 * 64);
	for (int i = 0; i < MANY_FILES; i++) {
		len = (size_t)snprintf(content, sizeof(content), "file number %d\n", i);
		assert_int_equal(lazy_read(l, f->reg, objects[i], 0, sizeof(buf), buf), len);
		assert_memory_equal(buf, content, len);
	}
	assert_true(open_fds() <= before + 1 + 2 * 64);
	lazy_layer_free(l);
	assert_int_equal(open_fds(), before);
	if (packs) {
		struct layer_index *li;
		uint64_t place = 0;

		assert_int_equal(names_like(f, blob, "p."), 0);
		assert_int_equal(names_like(f, blob, "o."), 0);
		assert_int_equal(cache_layer_read_index(f->cache, blob, &li), 0);
		for (size_t i = 0; i < li->n_entries; i++) {
			const struct layer_entry *e = &li->entries[i];

			if (e->type != LAYER_ENTRY_REG)
				continue;
			assert_null(e->object);
			assert_int_equal(e->data_off, place);
			place += e->size;
		}
		assert_int_equal(li->data_size, place);
		layer_index_free(li);
	}
}

static void test_many_files_few_descriptors(void **state)
{
	many_files(*state, false);
}

static void test_many_files_packed(void **state)
{
	many_files(*state, true);
}

/* A file of five chunks under 64 KiB, in a layer that packs: a chunk read
 * is there after a restart; completed, the file is in the pack at its
 * place, checked chunk by chunk, and no file of its own was made. */
static void test_packed_restart_and_complete(void **state)
{
	struct fixture *f = *state;
	static unsigned char buf[CHUNK * NCHUNKS];
	struct layer_index *li;
	struct lazy_layer *l;
	unsigned before;
	char path[256];
	int fd;

	f->packs = true;
	make_layer(f, 96, f->blob2, true);
	assert_int_equal(lazy_layer_open(f->cache, f->blob2, NULL, &l), 0);
	assert_int_equal(lazy_read(l, f->reg, f->object, CHUNK + 5, 10, buf), 10);
	assert_memory_equal(buf, f->content + CHUNK + 5, 10);
	lazy_layer_free(l);
	before = fake_count(f->fake, "GET /v2/app/blobs/");
	assert_int_equal(lazy_layer_open(f->cache, f->blob2, NULL, &l), 0);
	assert_int_equal(lazy_read(l, f->reg, f->object, CHUNK + 100, 100, buf), 100);
	assert_memory_equal(buf, f->content + CHUNK + 100, 100);
	assert_int_equal(fake_count(f->fake, "GET /v2/app/blobs/"), before);
	assert_int_equal(lazy_layer_complete(l, f->reg, NULL), 0);
	assert_false(lazy_layer_toc_verified(l));
	assert_int_equal(lazy_read(l, f->reg, f->object, 0, sizeof(buf), buf), sizeof(buf));
	assert_memory_equal(buf, f->content, sizeof(buf));
	lazy_layer_free(l);
	assert_int_equal(names_like(f, f->blob2, "p."), 0);
	assert_int_equal(names_like(f, f->blob2, "o."), 0);
	assert_int_equal(lazy_layer_open(f->cache, f->blob2, NULL, &l), -ENOENT);
	assert_int_equal(cache_layer_read_index(f->cache, f->blob2, &li), 0);
	for (size_t i = 0; i < li->n_entries; i++)
		if (li->entries[i].type == LAYER_ENTRY_REG) {
			assert_null(li->entries[i].object);
			assert_int_equal(li->entries[i].data_off, 0);
		}
	assert_int_equal(li->data_size, sizeof(buf));
	layer_index_free(li);
	snprintf(path, sizeof(path), "%s/layers/%s/pack", f->dir, digest_hex(f->blob2));
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	memset(buf, 0, sizeof(buf));
	assert_int_equal(pread(fd, buf, sizeof(buf), 0), sizeof(buf));
	assert_memory_equal(buf, f->content, sizeof(buf));
	close(fd);
}

/* The status's byte count of a lazy layer that no image holds loaded comes
 * from memory, not from parsing its TOC again: with the TOC gone from the
 * disk it is still right; a reader's fetch (a load) makes it fresh. */
static void test_bytes_remembered(void **state)
{
	struct fixture *f = *state;
	struct lazy_layer *l;
	struct packs *p;
	struct pack *pk;
	unsigned char buf[100];
	uint64_t local, total, got, first;
	bool completing;
	char toc[256], away[300];

	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), 0);
	lazy_layer_bytes(l, &local, &total);
	lazy_layer_free(l);
	assert_int_equal(packs_new(f->cache, 0, &p), 0);
	packs_layer_bytes(p, f->blob, total, &first, &completing);
	assert_int_equal(first, local);
	assert_false(completing);
	snprintf(toc, sizeof(toc), "%s/layers/%s/toc", f->dir, digest_hex(f->blob));
	snprintf(away, sizeof(away), "%s.away", toc);
	assert_int_equal(rename(toc, away), 0);
	packs_layer_bytes(p, f->blob, total, &got, &completing);
	assert_int_equal(got, first);
	assert_int_equal(rename(away, toc), 0);
	/* a read through a loaded layer: the count follows */
	assert_int_equal(packs_get(p, f->blob, &pk), 0);
	l = pack_lazy(p, pk);
	assert_non_null(l);
	assert_int_equal(lazy_read(l, f->reg, f->object, 10, sizeof(buf), buf), sizeof(buf));
	packs_put(p, pk);
	assert_int_equal(rename(toc, away), 0);
	packs_layer_bytes(p, f->blob, total, &got, &completing);
	assert_true(got > first && got < total);
	assert_int_equal(rename(away, toc), 0);
	packs_free(p);
}

/* A zstd:chunked layer's table of contents comes in one request: its
 * annotation places it, no footer is fetched first. */
static void test_toc_one_request(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(ranges(f), 1);
}

static bool layer_lazy(struct fixture *f, const char *digest)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/layers/%s/lazy", f->dir, digest_hex(digest));
	return access(path, F_OK) == 0;
}

/* Every chunk read already: the completion asks for what no read brought
 * (the bytes around the chunks), each byte once but the table's, and the
 * blob, the reads' bytes taken from where they were kept, is verified
 * against its digest.  After a restart (nothing kept),
 * it asks for nothing, and the layer is complete, verified by its table
 * of contents only (it keeps its "lazy" file, so that it is shared only
 * under that table). */
static void test_complete_nothing_missing(void **state)
{
	struct fixture *f = *state;
	struct lazy_layer *l;
	unsigned char buf[CHUNK * NCHUNKS];
	char path[256];
	unsigned before;

	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), 0);
	assert_int_equal(lazy_read(l, f->reg, f->object, 0, sizeof(buf), buf), sizeof(buf));
	before = fake_count(f->fake, "GET /v2/app/blobs/");
	assert_int_equal(lazy_layer_complete(l, f->reg, NULL), 0);
	assert_true(lazy_layer_is_complete(l));
	assert_true(fake_count(f->fake, "GET /v2/app/blobs/") > before);
	for (unsigned i = before; fake_request(f->fake, i); i++)
		assert_false(asked_again_but(f->fake, before, i, &f->tl));
	assert_false(lazy_layer_toc_verified(l));
	assert_false(layer_lazy(f, f->blob));
	snprintf(path, sizeof(path), "%s/layers/%s/blob.part", f->dir, digest_hex(f->blob));
	assert_int_equal(access(path, F_OK), -1);
	lazy_layer_free(l);
}

static void test_complete_nothing_missing_restarted(void **state)
{
	struct fixture *f = *state;
	struct lazy_layer *l;
	unsigned char buf[CHUNK * NCHUNKS];
	char m[128];
	unsigned before;

	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), 0);
	assert_int_equal(lazy_read(l, f->reg, f->object, 0, sizeof(buf), buf), sizeof(buf));
	lazy_layer_free(l);
	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), 0);
	snprintf(m, sizeof(m), "GET /v2/app/blobs/%s", f->blob);
	before = fake_count(f->fake, m);
	assert_int_equal(lazy_layer_complete(l, f->reg, NULL), 0);
	assert_true(lazy_layer_is_complete(l));
	assert_true(lazy_layer_toc_verified(l));
	assert_true(layer_lazy(f, f->blob));
	assert_int_equal(lazy_layer_verified(f->cache, f->blob), LAZY_VERIFIED_TOC);
	assert_int_equal(fake_count(f->fake, m), before);
	lazy_layer_free(l);
	/* and so it opens again: complete, nothing to fetch */
	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), 0);
	assert_true(lazy_layer_is_complete(l));
	lazy_layer_free(l);
}

/* Nothing read: the completion reads the blob in order and checks it
 * against the layer's digest.  A blob sent corrupted fails that try and
 * leaves the layer lazy and not complete; the next try has nothing left
 * to fetch but what the corruption spoilt, and completes the layer
 * verified by its table of contents.  (Sent right the first time, the
 * layer is verified against its digest: test_restart_and_complete.) */
static void test_complete_checks_digest(void **state)
{
	struct fixture *f = *state;
	struct lazy_layer *l;
	char m[128];

	assert_int_equal(lazy_layer_open(f->cache, f->blob, NULL, &l), 0);
	snprintf(m, sizeof(m), "GET /v2/app/blobs/%s", f->blob);
	fake_fault(f->fake, m, FAKE_CORRUPT, 0, -1);
	assert_true(lazy_layer_complete(l, f->reg, NULL) < 0);
	assert_false(lazy_layer_is_complete(l));
	assert_false(lazy_layer_foreign_toc(l));
	assert_true(layer_lazy(f, f->blob));
	assert_int_equal(lazy_layer_verified(f->cache, f->blob), LAZY_VERIFIED_NONE);
	fake_clear_faults(f->fake);
	assert_int_equal(lazy_layer_complete(l, f->reg, NULL), 0);
	assert_true(lazy_layer_is_complete(l));
	assert_true(lazy_layer_toc_verified(l));
	assert_int_equal(lazy_layer_verified(f->cache, f->blob), LAZY_VERIFIED_TOC);
	lazy_layer_free(l);
}

/* Publishes layer digest X (into x) as a manifest naming it would, with
 * the table of another blob whose chunks are X's (the same file, another
 * mode). */
static void foreign_layer(struct fixture *f, char *x)
{
	char y[DIGEST_STRING_MAX];
	struct toc_layer tl;
	size_t size;

	make_layer(f, 300, x, false);
	size = f->size;
	/* a mode whose table compresses to as many bytes (the blob's size
	 * is the descriptor's) */
	for (int mode = 256; f->size != size || f->mode == 0; mode++) {
		assert_true(mode < 512);
		if (mode == 420)
			continue;
		f->mode = mode;
		make_layer(f, 300, y, false);
	}
	tl = f->tl;
	publish_as(f, &tl, y, x);
}

/* Reads of such a layer verify chunk by chunk, and so does X's digest,
 * but the table in X is not the layer's: never complete. */
static void test_complete_foreign_toc(void **state)
{
	struct fixture *f = *state;
	char x[DIGEST_STRING_MAX];
	struct lazy_layer *l;
	unsigned char buf[CHUNK];

	foreign_layer(f, x);
	assert_int_equal(lazy_layer_open(f->cache, x, NULL, &l), 0);
	assert_int_equal(lazy_read(l, f->reg, f->object, CHUNK, CHUNK, buf), CHUNK);
	assert_memory_equal(buf, f->content + CHUNK, CHUNK);
	assert_int_equal(lazy_layer_complete(l, f->reg, NULL), -EBADMSG);
	assert_true(lazy_layer_foreign_toc(l));
	assert_false(lazy_layer_is_complete(l));
	assert_true(layer_lazy(f, x));
	lazy_layer_free(l);
}

/* ---- the completer (lazy-completer.h) ---------------------------------- */

struct job_seen {
	bool gone;     /* what gone() answers */
	int ended;     /* end() calls */
	bool complete; /* end()'s */
	char reasons[4][32];
	unsigned n_events;
	char event_digest[DIGEST_STRING_MAX];
};

static bool job_gone(void *userdata)
{
	return ((struct job_seen *)userdata)->gone;
}

static void job_end(void *userdata, bool complete)
{
	struct job_seen *s = userdata;

	s->ended++;
	s->complete = complete;
}

static void job_event(void *userdata, const struct event *e)
{
	struct job_seen *s = userdata;

	if (s->n_events < 4)
		snprintf(s->reasons[s->n_events], sizeof(s->reasons[0]), "%s", e->reason);
	s->n_events++;
	snprintf(s->event_digest, sizeof(s->event_digest), "%s", e->digest ? e->digest : "");
}

/* Completes (or tries to complete) layer digest with a completer of its
 * own and waits for it: returns what lazy_completer_start() did. */
static int complete_in_background(struct fixture *f, const char *digest, struct job_seen *seen,
				  bool cancelled)
{
	struct lazy_stats stats = { 0 };
	atomic_bool stop = cancelled;
	struct lazy_completer *lc;
	struct lazy_layer *l;
	unsigned failures;
	int r;

	assert_int_equal(lazy_completer_new(
				 &(struct lazy_completer_options){
					 .clock = clock_monotonic(),
					 .registry = f->reg,
					 .stats = &stats,
					 .cancelled = &stop,
					 .events = { .emit = job_event, .userdata = seen },
				 },
				 &lc),
			 0);
	assert_int_equal(lazy_layer_open(f->cache, digest, &stats, &l), 0);
	r = lazy_completer_start(lc, &(struct lazy_completion_job){ .digest = digest,
								    .layer = l,
								    .gone = job_gone,
								    .end = job_end,
								    .userdata = seen });
	lazy_completer_drain(lc);
	assert_int_equal(lazy_completer_count(lc), 0);
	assert_int_equal(lazy_completer_phase(lc, digest, &failures), -ENOENT);
	lazy_completer_free(lc);
	lazy_layer_free(l);
	return r;
}

/* A layer whose window is over completes at once: one end(), complete,
 * and a LayerCompleted event naming the layer. */
static void test_completer_completes(void **state)
{
	struct fixture *f = *state;
	struct job_seen seen = { 0 };

	assert_int_equal(complete_in_background(f, f->blob, &seen, false), 0);
	assert_int_equal(seen.ended, 1);
	assert_true(seen.complete);
	assert_int_equal(seen.n_events, 1);
	assert_string_equal(seen.reasons[0], "LayerCompleted");
	assert_string_equal(seen.event_digest, f->blob);
	assert_true(layer_has(f, "o.", ""));
}

/* A layer that went (replaced by a verified one) is not fetched; the
 * completion ends, not complete, without an event. */
static void test_completer_layer_gone(void **state)
{
	struct fixture *f = *state;
	struct job_seen seen = { .gone = true };
	unsigned before = ranges(f);

	assert_int_equal(complete_in_background(f, f->blob, &seen, false), 0);
	assert_int_equal(seen.ended, 1);
	assert_false(seen.complete);
	assert_int_equal(seen.n_events, 0);
	assert_int_equal(ranges(f), before);
}

/* Once the daemon stops, nothing starts, and end() is never called. */
static void test_completer_cancelled(void **state)
{
	struct fixture *f = *state;
	struct job_seen seen = { 0 };

	assert_int_equal(complete_in_background(f, f->blob, &seen, true), -ECANCELED);
	assert_int_equal(seen.ended, 0);
	assert_int_equal(seen.n_events, 0);
}

/* A layer whose blob holds another table is given up at the first try,
 * with a LazyLayerUnverified event, not retried. */
static void test_completer_gives_up_foreign(void **state)
{
	struct fixture *f = *state;
	struct job_seen seen = { 0 };
	char x[DIGEST_STRING_MAX];

	foreign_layer(f, x);
	assert_int_equal(complete_in_background(f, x, &seen, false), 0);
	assert_int_equal(seen.ended, 1);
	assert_false(seen.complete);
	assert_int_equal(seen.n_events, 1);
	assert_string_equal(seen.reasons[0], "LazyLayerUnverified");
	assert_string_equal(seen.event_digest, x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_read_fetches_what_it_needs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_readers_share_a_fetch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_small_read_not_behind_large, setup, teardown),
		cmocka_unit_test_setup_teardown(test_complete_waits_for_request_under_way, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_complete_fetches_chunkless_gap, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_complete_waits_for_readers_chunk, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_reader_leaves_file_to_commit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_complete_hashes_chunks_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_complete_hash_takes_readers_chunk, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_reader_checks_unchecked_chunk, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_small_files_come_together, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unread_neighbours_shrink, setup, teardown),
		cmocka_unit_test_setup_teardown(test_first_load_takes_offered_table, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_wrong_chunk_never_served, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restart_and_complete, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bytes_and_metrics, setup, teardown),
		cmocka_unit_test_setup_teardown(test_several_ranges, setup, teardown),
		cmocka_unit_test_setup_teardown(test_first_range_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_partial_pull_links, setup, teardown),
		cmocka_unit_test_setup_teardown(test_partial_pull_private, setup, teardown),
		cmocka_unit_test_setup_teardown(test_present_at_publishing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_private_not_at_publishing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_files_packed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_packed_restart_and_complete, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_files_few_descriptors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bytes_remembered, setup, teardown),
		cmocka_unit_test_setup_teardown(test_toc_one_request, setup, teardown),
		cmocka_unit_test_setup_teardown(test_complete_nothing_missing_restarted, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_complete_nothing_missing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_complete_checks_digest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_complete_foreign_toc, setup, teardown),
		cmocka_unit_test_setup_teardown(test_completer_completes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_completer_layer_gone, setup, teardown),
		cmocka_unit_test_setup_teardown(test_completer_cancelled, setup, teardown),
		cmocka_unit_test_setup_teardown(test_completer_gives_up_foreign, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

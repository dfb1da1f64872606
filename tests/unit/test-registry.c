/* Unit tests for the registry client over the fake transport: manifests
 * by tag and by digest, HEAD, the errno of every failure with its retries,
 * blobs checked against their digest, resumed after a broken connection,
 * and ranges of blobs, from a registry that honours Range and from one
 * that sends the whole blob. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "credentials.h"
#include "fake-transport.h"
#include "macro.h"
#include "manifest.h"
#include "registry.h"

#define DOMAIN "registry.test"
#define REPO "team/app"
#define MEDIA_TYPE "application/vnd.oci.image.manifest.v1+json"
#define BLOB_LEN 5000u

struct fixture {
	struct fake_transport *fake;
	struct registry *r;
	char blob[BLOB_LEN];
	char blob_digest[DIGEST_STRING_MAX];
	char manifest_digest[DIGEST_STRING_MAX];
};

struct collected {
	char *data;
	size_t len;
	int fail_with; /* the sink answers this once it has data */
};

static int collect(void *userdata, const void *buf, size_t len)
{
	struct collected *c = userdata;

	if (c->fail_with)
		return c->fail_with;
	c->data = realloc(c->data, c->len + len);
	assert_non_null(c->data);
	memcpy(c->data + c->len, buf, len);
	c->len += len;
	return 0;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->fake = fake_transport_new();
	for (size_t i = 0; i < BLOB_LEN; i++)
		f->blob[i] = (char)(i * 7 + i / 251);
	fake_put_blob(f->fake, REPO, f->blob, BLOB_LEN, f->blob_digest);
	fake_put_manifest(f->fake, REPO, "1", MEDIA_TYPE, "{\"schemaVersion\":2}",
			  f->manifest_digest);
	assert_int_equal(registry_new(
				 &(struct registry_options){
					 .transport = fake_transport_get(f->fake),
					 .max_retries = 2,
					 .retry_base_ms = 1,
				 },
				 &f->r),
			 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	registry_free(f->r);
	fake_transport_free(f->fake);
	free(f);
	return 0;
}

static void test_manifest(void **state)
{
	struct fixture *f = *state;
	struct registry_manifest *m = NULL;
	struct error_detail err;

	assert_int_equal(registry_get_manifest(f->r, DOMAIN, REPO, "1", &m, &err), 0);
	assert_string_equal(m->body, "{\"schemaVersion\":2}");
	assert_int_equal(m->len, strlen(m->body));
	assert_string_equal(m->digest, f->manifest_digest);
	assert_string_equal(m->media_type, MEDIA_TYPE);
	registry_manifest_free(m);

	assert_int_equal(registry_get_manifest(f->r, DOMAIN, REPO, f->manifest_digest, &m, &err),
			 0);
	assert_string_equal(m->digest, f->manifest_digest);
	registry_manifest_free(m);
	assert_int_equal(fake_count(f->fake, "GET /v2/team/app/manifests/"), 2);

	/* By digest, the body must hash to it. */
	fake_fault(f->fake, "manifests/sha256:", FAKE_CORRUPT, 0, 1);
	assert_int_equal(registry_get_manifest(f->r, DOMAIN, REPO, f->manifest_digest, &m, &err),
			 -EBADMSG);
	assert_non_null(strstr(err.message, "hashes to"));
}

static void test_head(void **state)
{
	struct fixture *f = *state;
	struct error_detail err;
	char *digest = NULL;

	assert_int_equal(registry_head_manifest(f->r, DOMAIN, REPO, "1", &digest, &err), 0);
	assert_string_equal(digest, f->manifest_digest);
	free(digest);
	assert_int_equal(fake_count(f->fake, "HEAD "), 1);
	assert_int_equal(fake_count(f->fake, "GET "), 0);

	/* Without Docker-Content-Digest: the body, hashed here. */
	fake_fault(f->fake, "HEAD ", FAKE_NO_DIGEST, 0, 1);
	assert_int_equal(registry_head_manifest(f->r, DOMAIN, REPO, "1", &digest, &err), 0);
	assert_string_equal(digest, f->manifest_digest);
	free(digest);
	assert_int_equal(fake_count(f->fake, "GET /v2/team/app/manifests/1"), 1);

	assert_int_equal(registry_head_manifest(f->r, DOMAIN, REPO, "2", &digest, &err), -ENOENT);
}

/* A blob's HEAD: yes for the repository that has it, the errno of a no
 * for another, nothing of the body fetched. */
static void test_head_blob(void **state)
{
	struct fixture *f = *state;
	struct error_detail err;

	assert_int_equal(registry_head_blob(f->r, DOMAIN, REPO, f->blob_digest, &err), 0);
	assert_int_equal(fake_count(f->fake, "HEAD /v2/team/app/blobs/"), 1);
	assert_int_equal(fake_count(f->fake, "GET "), 0);
	assert_int_equal(registry_head_blob(f->r, DOMAIN, "team/other", f->blob_digest, &err),
			 -ENOENT);
	fake_fault(f->fake, "HEAD ", FAKE_STATUS, 403, 1);
	assert_int_equal(registry_head_blob(f->r, DOMAIN, REPO, f->blob_digest, &err), -EACCES);
	assert_int_equal(registry_head_blob(f->r, DOMAIN, REPO, "sha256:nothex", &err), -EINVAL);
	assert_int_equal(fake_count(f->fake, "GET "), 0);
}

struct errno_row {
	enum fake_fault_kind kind;
	long status;
	int expect;
	unsigned requests; /* with max_retries 2 */
	const char *message;
};

static const struct errno_row errno_rows[] = {
	{ FAKE_STATUS, 404, -ENOENT, 1, "MANIFEST_UNKNOWN: fake says 404" },
	{ FAKE_STATUS, 401, -EACCES, 1, "requires authentication and there are no credentials" },
	{ FAKE_STATUS, 403, -EACCES, 1, "DENIED" },
	{ FAKE_STATUS, 400, -EIO, 1, "fake says 400" },
	{ FAKE_STATUS, 500, -EIO, 3, "fake says 500" },
	{ FAKE_STATUS, 429, -EIO, 3, "TOOMANYREQUESTS" },
	{ FAKE_STATUS, 502, -EHOSTUNREACH, 3, "fake says 502" },
	{ FAKE_STATUS, 503, -EHOSTUNREACH, 3, "fake says 503" },
	{ FAKE_STATUS, 504, -EHOSTUNREACH, 3, "fake says 504" },
	{ FAKE_REFUSE, 0, -EHOSTUNREACH, 3, "cannot reach registry.test" },
	{ FAKE_TIMEOUT, 0, -ETIMEDOUT, 3, "timed out" },
};

static void test_errno_rows(void **state)
{
	struct fixture *f = *state;

	for (size_t i = 0; i < ARRAY_SIZE(errno_rows); i++) {
		const struct errno_row *row = &errno_rows[i];
		struct registry_manifest *m = NULL;
		struct error_detail err;
		unsigned before = fake_count(f->fake, "GET ");

		fake_clear_faults(f->fake);
		fake_fault(f->fake, "GET ", row->kind, row->status, -1);
		assert_int_equal(registry_get_manifest(f->r, DOMAIN, REPO, "1", &m, &err),
				 row->expect);
		assert_null(m);
		assert_int_equal(fake_count(f->fake, "GET ") - before, row->requests);
		if (!strstr(err.message, row->message))
			fail_msg("row %zu: \"%s\" does not say \"%s\"", i, err.message,
				 row->message);
		assert_int_equal(err.http_status, row->kind == FAKE_STATUS ? row->status : 0);
	}

	/* A transient failure that goes away: retried into success. */
	fake_clear_faults(f->fake);
	fake_fault(f->fake, "GET ", FAKE_STATUS, 503, 2);
	struct registry_manifest *m = NULL;
	assert_int_equal(registry_get_manifest(f->r, DOMAIN, REPO, "1", &m, NULL), 0);
	registry_manifest_free(m);
}

static void test_invalid_names(void **state)
{
	struct fixture *f = *state;
	struct registry_manifest *m = NULL;
	struct error_detail err;
	struct collected c = { 0 };

	assert_int_equal(registry_get_manifest(f->r, "bad/host", REPO, "1", &m, &err), -EINVAL);
	assert_int_equal(registry_get_manifest(f->r, DOMAIN, "Team/app", "1", &m, &err), -EINVAL);
	assert_int_equal(registry_get_manifest(f->r, DOMAIN, "a/../b", "1", &m, &err), -EINVAL);
	assert_int_equal(registry_get_manifest(f->r, DOMAIN, REPO, "-1", &m, &err), -EINVAL);
	assert_int_equal(registry_get_manifest(f->r, DOMAIN, REPO, "1?x", &m, &err), -EINVAL);
	assert_int_equal(registry_get_manifest(f->r, DOMAIN, REPO, "sha256:00", &m, &err), -EINVAL);
	assert_int_equal(registry_get_blob(f->r, DOMAIN, REPO, "latest", 1, collect, &c, &err),
			 -EINVAL);
	assert_non_null(strstr(err.message, "invalid"));
	assert_null(fake_request(f->fake, 0));
}

/* Fetches the whole blob and checks it. */
static void blob_ok(struct fixture *f)
{
	struct error_detail err;
	struct collected c = { 0 };

	assert_int_equal(
		registry_get_blob(f->r, DOMAIN, REPO, f->blob_digest, BLOB_LEN, collect, &c, &err),
		0);
	assert_int_equal(c.len, BLOB_LEN);
	assert_memory_equal(c.data, f->blob, BLOB_LEN);
	free(c.data);
}

static void test_blob(void **state)
{
	struct fixture *f = *state;
	struct error_detail err;
	struct collected c = { 0 };

	blob_ok(f);

	/* The bytes reach the sink, the digest says no afterwards. */
	fake_fault(f->fake, "blobs/", FAKE_CORRUPT, 0, 1);
	assert_int_equal(
		registry_get_blob(f->r, DOMAIN, REPO, f->blob_digest, BLOB_LEN, collect, &c, &err),
		-EBADMSG);
	assert_non_null(strstr(err.message, "hashes to"));
	free(c.data);

	/* A length other than the descriptor's is refused before any byte. */
	c = (struct collected){ 0 };
	assert_int_equal(registry_get_blob(f->r, DOMAIN, REPO, f->blob_digest, BLOB_LEN + 1,
					   collect, &c, &err),
			 -EBADMSG);
	assert_non_null(strstr(err.message, "announces 5000 bytes"));
	assert_int_equal(c.len, 0);

	/* A sink that says no ends it: no retry, its errno. */
	c = (struct collected){ .fail_with = -ENOSPC };
	assert_int_equal(
		registry_get_blob(f->r, DOMAIN, REPO, f->blob_digest, BLOB_LEN, collect, &c, &err),
		-ENOSPC);
	assert_int_equal(fake_count(f->fake, "GET /v2/team/app/blobs/"), 4);

	c = (struct collected){ 0 };
	fake_remove(f->fake, "/v2/team/app/blobs/");
	assert_int_equal(
		registry_get_blob(
			f->r, DOMAIN, REPO,
			"sha256:0000000000000000000000000000000000000000000000000000000000000000",
			BLOB_LEN, collect, &c, &err),
		-ENOENT);
	assert_non_null(strstr(err.message, "BLOB_UNKNOWN"));
}

static void test_blob_resume(void **state)
{
	struct fixture *f = *state;

	/* Broken twice: resumed from where each attempt stopped, without
	 * using up the two retries. */
	fake_fault(f->fake, "GET /v2/team/app/blobs/", FAKE_BREAK, 2500, 1);
	fake_fault(f->fake, "bytes=2500-", FAKE_BREAK, 1000, 1);
	fake_fault(f->fake, "bytes=3500-", FAKE_BREAK, 100, 1);
	blob_ok(f);
	assert_int_equal(fake_count(f->fake, "GET "), 4);
	assert_non_null(strstr(fake_request(f->fake, 3), " bytes=3600-"));

	/* A server that answers the resume with the whole blob: the bytes
	 * already seen are skipped. */
	fake_fault(f->fake, "GET /v2/team/app/blobs/", FAKE_BREAK, 1234, 1);
	fake_fault(f->fake, "bytes=1234-", FAKE_WHOLE, 0, 1);
	blob_ok(f);
}

/* A clock that moves 10 s each time the floor reads it. */
static int64_t ticking_now;

static int64_t ticking_ms(void)
{
	return ticking_now += 10000;
}

static void test_blob_trickle(void **state)
{
	struct fixture *f = *state;
	struct registry *r;
	struct error_detail err;
	struct collected c = { 0 };

	/* A registry that sends a byte and breaks, again and again: every
	 * resume makes progress, so only the floor across them ends it, with
	 * ETIMEDOUT and no retry. */
	assert_int_equal(registry_new(
				 &(struct registry_options){
					 .transport = fake_transport_get(f->fake),
					 .max_retries = 2,
					 .retry_base_ms = 1,
					 .min_rate_bytes_per_s = 100,
					 .rate_window_s = 30,
					 .now_ms = ticking_ms,
				 },
				 &r),
			 0);
	fake_fault(f->fake, "GET /v2/team/app/blobs/", FAKE_BREAK, 1, -1);
	assert_int_equal(
		registry_get_blob(r, DOMAIN, REPO, f->blob_digest, BLOB_LEN, collect, &c, &err),
		-ETIMEDOUT);
	assert_non_null(strstr(err.message, "under the minimum of 100 bytes/s"));
	assert_in_range(fake_count(f->fake, "GET "), 1, 3);
	free(c.data);
	c = (struct collected){ 0 };

	/* A range too, several ranges too. */
	assert_int_equal(registry_get_blob_range(r, DOMAIN, REPO, f->blob_digest, BLOB_LEN, 100,
						 4000, collect, &c, &err),
			 -ETIMEDOUT);
	free(c.data);
	fake_clear_faults(f->fake);

	/* A blob that comes whole within its window. */
	c = (struct collected){ 0 };
	assert_int_equal(
		registry_get_blob(r, DOMAIN, REPO, f->blob_digest, BLOB_LEN, collect, &c, &err), 0);
	assert_int_equal(c.len, BLOB_LEN);
	free(c.data);
	registry_free(r);
}

/* Fetches a range and checks it against the blob. */
static void range_ok(struct fixture *f, uint64_t offset, uint64_t length)
{
	struct error_detail err;
	struct collected c = { 0 };

	assert_int_equal(registry_get_blob_range(f->r, DOMAIN, REPO, f->blob_digest, BLOB_LEN,
						 offset, length, collect, &c, &err),
			 0);
	assert_int_equal(c.len, length);
	if (length)
		assert_memory_equal(c.data, f->blob + offset, length);
	free(c.data);
}

static void test_blob_range(void **state)
{
	struct fixture *f = *state;
	struct error_detail err;
	struct collected c = { 0 };
	unsigned before;

	range_ok(f, 1000, 2345);
	assert_non_null(strstr(fake_request(f->fake, 0), " bytes=1000-3344"));
	range_ok(f, BLOB_LEN - 1, 1);
	range_ok(f, 0, BLOB_LEN);

	/* 200 with the whole blob: skipped to the range, cut after it. */
	fake_fault(f->fake, "blobs/", FAKE_WHOLE, 0, 1);
	range_ok(f, 1500, 100);

	/* Broken inside the range: resumed at the first byte missing. */
	fake_fault(f->fake, "bytes=10-4009", FAKE_BREAK, 1500, 1);
	range_ok(f, 10, 4000);
	assert_int_equal(fake_count(f->fake, "bytes=1510-4009"), 1);

	/* Nothing to fetch, or outside the blob. */
	before = fake_count(f->fake, "GET ");
	range_ok(f, BLOB_LEN, 0);
	assert_int_equal(registry_get_blob_range(f->r, DOMAIN, REPO, f->blob_digest, BLOB_LEN,
						 BLOB_LEN - 10, 11, collect, &c, &err),
			 -EINVAL);
	assert_int_equal(registry_get_blob_range(f->r, DOMAIN, REPO, f->blob_digest, BLOB_LEN,
						 UINT64_MAX, 2, collect, &c, &err),
			 -EINVAL);
	assert_int_equal(fake_count(f->fake, "GET "), before);
	assert_int_equal(c.len, 0);

	/* Errors as for a whole blob. */
	fake_fault(f->fake, "blobs/", FAKE_STATUS, 403, 1);
	assert_int_equal(registry_get_blob_range(f->r, DOMAIN, REPO, f->blob_digest, BLOB_LEN, 0,
						 10, collect, &c, &err),
			 -EACCES);
}

/* Several ranges: each range's bytes, in order, kept apart. */
struct ranges_got {
	char *data[4];
	size_t len[4];
	size_t calls;
};

static int collect_ranges(void *userdata, size_t index, const void *buf, size_t len)
{
	struct ranges_got *g = userdata;

	assert_true(index < 4);
	g->data[index] = realloc(g->data[index], g->len[index] + len);
	assert_non_null(g->data[index]);
	memcpy(g->data[index] + g->len[index], buf, len);
	g->len[index] += len;
	g->calls++;
	return 0;
}

static void ranges_ok(struct fixture *f, const struct registry_range *rg, size_t n)
{
	struct error_detail err;
	struct ranges_got g = { 0 };

	assert_int_equal(registry_get_blob_ranges(f->r, DOMAIN, REPO, f->blob_digest, BLOB_LEN, rg,
						  n, collect_ranges, &g, &err),
			 0);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(g.len[i], rg[i].length);
		assert_memory_equal(g.data[i], f->blob + rg[i].offset, rg[i].length);
		free(g.data[i]);
	}
}

static void test_blob_ranges(void **state)
{
	static const struct registry_range rg[] = {
		{ 10, 1500 }, { 2000, 3 }, { 2003, 997 }, { BLOB_LEN - 700, 700 }
	};
	struct fixture *f = *state;
	struct error_detail err;
	struct ranges_got g = { 0 };
	unsigned before = fake_count(f->fake, "GET ");

	/* one request, a multipart answer split by part (its headers cut
	 * across the transport's pieces) */
	ranges_ok(f, rg, 4);
	assert_int_equal(fake_count(f->fake, "GET "), before + 1);
	assert_non_null(
		strstr(fake_request(f->fake, before), " bytes=10-1509,2000-2002,2003-2999,"));

	/* the whole blob instead: cut into the ranges, one request */
	before = fake_count(f->fake, "GET ");
	fake_fault(f->fake, "blobs/", FAKE_WHOLE, 0, 1);
	ranges_ok(f, rg, 4);
	assert_int_equal(fake_count(f->fake, "GET "), before + 1);

	/* the first range only: the others by a request each */
	before = fake_count(f->fake, "GET ");
	fake_fault(f->fake, "blobs/", FAKE_FIRST_RANGE, 0, 1);
	ranges_ok(f, rg, 4);
	assert_int_equal(fake_count(f->fake, "GET "), before + 4);

	/* broken inside a part: asked again, nothing handed twice */
	before = fake_count(f->fake, "GET ");
	fake_fault(f->fake, "blobs/", FAKE_BREAK, 1700, 1);
	ranges_ok(f, rg, 4);
	assert_int_equal(fake_count(f->fake, "GET "), before + 2);

	/* more parts than ranges (each twice): a broken answer, not read
	 * on for as long as the registry sends */
	fake_fault(f->fake, "blobs/", FAKE_REPEAT_PART, 2, 1);
	assert_int_equal(registry_get_blob_ranges(f->r, DOMAIN, REPO, f->blob_digest, BLOB_LEN, rg,
						  4, collect_ranges, &g, &err),
			 -EBADMSG);
	assert_non_null(strstr(err.message, "more parts or bytes"));
	for (size_t i = 0; i < 4; i++)
		free(g.data[i]);
	g = (struct ranges_got){ 0 };

	/* one range: a plain Range request */
	ranges_ok(f, rg + 1, 1);
	assert_non_null(
		strstr(fake_request(f->fake, fake_count(f->fake, "GET ") - 1), " bytes=2000-2002"));

	/* out of order, overlapping, empty or outside: refused unasked */
	before = fake_count(f->fake, "GET ");
	assert_int_equal(
		registry_get_blob_ranges(f->r, DOMAIN, REPO, f->blob_digest, BLOB_LEN,
					 (const struct registry_range[]){ { 100, 10 }, { 50, 10 } },
					 2, collect_ranges, &g, &err),
		-EINVAL);
	assert_int_equal(
		registry_get_blob_ranges(f->r, DOMAIN, REPO, f->blob_digest, BLOB_LEN,
					 (const struct registry_range[]){ { 0, 10 }, { 5, 10 } }, 2,
					 collect_ranges, &g, &err),
		-EINVAL);
	assert_int_equal(registry_get_blob_ranges(
				 f->r, DOMAIN, REPO, f->blob_digest, BLOB_LEN,
				 (const struct registry_range[]){ { 0, 10 }, { BLOB_LEN, 1 } }, 2,
				 collect_ranges, &g, &err),
			 -EINVAL);
	assert_int_equal(fake_count(f->fake, "GET "), before);
	assert_int_equal(g.calls, 0);
}

/* A second client, with credentials for DOMAIN. */
static struct registry *client_with_credentials(struct fixture *f, struct credentials **ret_creds)
{
	static const char json[] =
		"{\"auths\":{\"" DOMAIN "\":{\"username\":\"bob\",\"password\":\"secret\"}}}";
	struct registry *r = NULL;
	char why[256];

	assert_int_equal(credentials_parse(json, strlen(json), ret_creds, why, sizeof(why)), 0);
	assert_int_equal(registry_new(
				 &(struct registry_options){
					 .transport = fake_transport_get(f->fake),
					 .credentials = *ret_creds,
					 .max_retries = -1,
				 },
				 &r),
			 0);
	return r;
}

static void test_basic_auth(void **state)
{
	struct fixture *f = *state;
	struct credentials *creds = NULL;
	struct registry *r = client_with_credentials(f, &creds);
	struct registry_manifest *m = NULL;
	struct error_detail err;

	/* A 401 answered once with the credentials; the next request
	 * carries them at once. */
	fake_fault(f->fake, "GET /v2/team/app/manifests/1", FAKE_STATUS, 401, 1);
	assert_int_equal(registry_get_manifest(r, DOMAIN, REPO, "1", &m, &err), 0);
	registry_manifest_free(m);
	assert_int_equal(fake_count(f->fake, "GET /v2/team/app/manifests/1 user=bob"), 1);
	assert_int_equal(registry_get_manifest(r, DOMAIN, REPO, "1", &m, &err), 0);
	registry_manifest_free(m);
	assert_int_equal(fake_count(f->fake, "GET "), 3);
	assert_int_equal(fake_count(f->fake, "GET /v2/team/app/manifests/1 user=bob"), 2);

	/* Refused: EACCES, not a loop. */
	fake_fault(f->fake, "user=bob", FAKE_STATUS, 401, -1);
	assert_int_equal(registry_get_manifest(r, DOMAIN, REPO, "1", &m, &err), -EACCES);
	assert_non_null(strstr(err.message, "refused the credentials"));

	/* Without credentials there is nothing to answer with. */
	fake_fault(f->fake, "GET /v2/team/app/manifests/1", FAKE_STATUS, 401, 1);
	assert_int_equal(registry_get_manifest(f->r, DOMAIN, REPO, "1", &m, &err), -EACCES);
	assert_non_null(strstr(err.message, "no credentials"));
	registry_free(r);
	credentials_free(creds);
}

static void test_token_auth(void **state)
{
	struct fixture *f = *state;
	struct credentials *creds = NULL;
	struct registry *r = client_with_credentials(f, &creds);
	struct error_detail err;
	struct collected c = { 0 };

	fake_set_challenge(f->fake,
			   "Bearer realm=\"https://auth.test/token\",service=\"" DOMAIN "\"");
	fake_put(f->fake, "/token", "application/json", "{\"token\":\"t-1\",\"expires_in\":300}");
	fake_fault(f->fake, "GET /v2/team/app/blobs/", FAKE_STATUS, 401, 1);
	assert_int_equal(
		registry_get_blob(r, DOMAIN, REPO, f->blob_digest, BLOB_LEN, collect, &c, &err), 0);
	free(c.data);
	c = (struct collected){ 0 };
	/* The token asked for with the credentials, then sent. */
	assert_int_equal(fake_count(f->fake, "GET /token user=bob"), 1);
	assert_int_equal(fake_count(f->fake, "GET /v2/team/app/blobs/"), 2);
	assert_int_equal(fake_count(f->fake, " bearer=t-1"), 1);

	/* Cached: the next request carries it without a 401 first. */
	range_ok(f, 0, 1); /* the client without credentials is unaffected */
	assert_int_equal(registry_get_blob_range(r, DOMAIN, REPO, f->blob_digest, BLOB_LEN, 0, 10,
						 collect, &c, &err),
			 0);
	free(c.data);
	c = (struct collected){ 0 };
	assert_int_equal(fake_count(f->fake, " bearer=t-1"), 2);
	assert_int_equal(fake_count(f->fake, "GET /token"), 1);

	/* A token server that refuses: EACCES in our words. */
	fake_fault(f->fake, "bearer=t-1", FAKE_STATUS, 401, -1);
	fake_fault(f->fake, "GET /token", FAKE_STATUS, 403, -1);
	assert_int_equal(registry_get_blob_range(r, DOMAIN, REPO, f->blob_digest, BLOB_LEN, 0, 10,
						 collect, &c, &err),
			 -EACCES);
	assert_non_null(
		strstr(err.message, "token server auth.test/token refused the credentials"));
	registry_free(r);
	credentials_free(creds);

	/* Credentials go to a realm only as safely as to the registry. */
	r = client_with_credentials(f, &creds);
	fake_set_challenge(f->fake,
			   "Bearer realm=\"http://auth.test/token\",service=\"" DOMAIN "\"");
	fake_fault(f->fake, "GET /v2/team/app/blobs/", FAKE_STATUS, 401, 1);
	assert_int_equal(registry_get_blob_range(r, DOMAIN, REPO, f->blob_digest, BLOB_LEN, 0, 10,
						 collect, &c, &err),
			 -EACCES);
	assert_non_null(strstr(err.message, "is not HTTPS"));
	assert_int_equal(fake_count(f->fake, "GET /token"), 2);
	registry_free(r);
	credentials_free(creds);
}

struct url_case {
	const char *url;
	const char *where;
};

static const struct url_case url_cases[] = {
	{ "https://registry.test/v2/a/manifests/1", "registry.test/v2/a/manifests/1" },
	{ "http://127.0.0.1:5000/v2/a/blobs/x?ns=docker.io", "127.0.0.1:5000/v2/a/blobs/x" },
	{ "https://user:pass@store.test/blob?X-Signature=secret#f", "store.test/blob" },
	{ "https://[::1]:5000/token", "[::1]:5000/token" },
	{ "https://auth.test", "auth.test/" },
	{ "https://auth.test?x=1", "auth.test/" },
	{ "ftp://auth.test/x", "(unknown host)" },
	{ "https://", "(unknown host)" },
	{ NULL, "(unknown host)" },
};

/* What messages say of a URL never carries user info or a query. */
static void test_describe_url(void **state)
{
	char out[TRANSPORT_WHERE_MAX];

	for (size_t i = 0; i < ARRAY_SIZE(url_cases); i++) {
		transport_describe_url(url_cases[i].url, out, sizeof(out));
		assert_string_equal(out, url_cases[i].where);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_manifest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_head, setup, teardown),
		cmocka_unit_test_setup_teardown(test_head_blob, setup, teardown),
		cmocka_unit_test_setup_teardown(test_errno_rows, setup, teardown),
		cmocka_unit_test_setup_teardown(test_invalid_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_blob, setup, teardown),
		cmocka_unit_test_setup_teardown(test_blob_resume, setup, teardown),
		cmocka_unit_test_setup_teardown(test_blob_trickle, setup, teardown),
		cmocka_unit_test_setup_teardown(test_blob_range, setup, teardown),
		cmocka_unit_test_setup_teardown(test_blob_ranges, setup, teardown),
		cmocka_unit_test_setup_teardown(test_basic_auth, setup, teardown),
		cmocka_unit_test_setup_teardown(test_token_auth, setup, teardown),
		cmocka_unit_test(test_describe_url),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

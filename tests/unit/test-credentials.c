/* Unit tests for docker config.json parsing and credential lookup (no
 * helper programs are run here; the integration tests run one). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "credentials.h"

static struct credentials *parse(const char *json)
{
	struct credentials *c = NULL;
	char why[256] = "";

	assert_int_equal(credentials_parse(json, strlen(json), &c, why, sizeof(why)), 0);
	return c;
}

static void test_auths(void **state)
{
	/* "dXNlcjpwYTpzcw==" is "user:pa:ss": the password may hold ':' */
	struct credentials *c = parse(
		"{\"auths\":{"
		"\"https://index.docker.io/v1/\":{\"auth\":\"dXNlcjpwYTpzcw==\"},"
		"\"registry.example.com:5000\":{\"username\":\"bob\",\"password\":\"secret\"},"
		"\"http://ghcr.io/v2/\":{\"auth\":\"\",\"identitytoken\":\"refresh-me\"},"
		"\"empty.example.com\":{}"
		"}}");
	struct credential cr = { 0 };

	assert_int_equal(credentials_lookup(c, "docker.io", 0, &cr), 0);
	assert_string_equal(cr.username, "user");
	assert_string_equal(cr.password, "pa:ss");
	assert_null(cr.identity_token);
	credential_clear(&cr);

	assert_int_equal(credentials_lookup(c, "registry.example.com:5000", 0, &cr), 0);
	assert_string_equal(cr.username, "bob");
	assert_string_equal(cr.password, "secret");
	credential_clear(&cr);

	assert_int_equal(credentials_lookup(c, "ghcr.io", 0, &cr), 0);
	assert_null(cr.username);
	assert_string_equal(cr.identity_token, "refresh-me");
	credential_clear(&cr);

	assert_int_equal(credentials_lookup(c, "registry.example.com", 0, &cr), -ENOENT);
	assert_int_equal(credentials_lookup(c, "empty.example.com", 0, &cr), -ENOENT);
	assert_int_equal(credentials_lookup(c, "quay.io", 0, &cr), -ENOENT);
	assert_int_equal(credentials_lookup(NULL, "quay.io", 0, &cr), -ENOENT);
	credentials_free(c);
}

/* Whether a registry has credentials, without running anything. */
static void test_configured(void **state)
{
	struct credentials *c = parse("{\"auths\":{\"https://reg.example.com/v1/\":{\"auth\":"
				      "\"dTpw\"},\"empty.example.com\":{}},"
				      "\"credHelpers\":{\"helped.example.com\":\"x\"}}");

	assert_true(credentials_configured(c, "reg.example.com"));
	assert_true(credentials_configured(c, "helped.example.com"));
	assert_false(credentials_configured(c, "empty.example.com")); /* no user, no token */
	assert_false(credentials_configured(c, "other.example.com"));
	assert_false(credentials_configured(NULL, "reg.example.com"));
	credentials_free(c);
	/* A credsStore may know any host. */
	c = parse("{\"credsStore\":\"x\"}");
	assert_true(credentials_configured(c, "other.example.com"));
	credentials_free(c);
}

static void test_normalize(void **state)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "https://index.docker.io/v1/", "docker.io" },
		{ "index.docker.io", "docker.io" },
		{ "registry-1.docker.io", "docker.io" },
		{ "docker.io", "docker.io" },
		{ "HTTP://Registry.Example.COM:5000/v2/", "registry.example.com:5000" },
		{ "127.0.0.1:5000", "127.0.0.1:5000" },
	};
	char out[256];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		credentials_normalize_host(cases[i].in, out, sizeof(out));
		assert_string_equal(out, cases[i].out);
	}
}

static void test_malformed(void **state)
{
	static const char *bad[] = {
		"",
		"[]",
		"{\"auths\":[]}",
		"{\"auths\":{\"x\":{\"auth\":\"!!!\"}}}",
		"{\"auths\":{\"x\":{\"auth\":\"bm9jb2xvbg==\"}}}", /* "nocolon" */
		"{\"auths\":{\"x\":{\"auth\":\"YQBiOmM=\"}}}",	   /* NUL inside */
		"{\"auths\":{\"x\":1}}",
		"{\"credHelpers\":{\"x\":\"../../bin/sh\"}}",
		"{\"credHelpers\":{\"x\":\"a b\"}}",
		"{\"credsStore\":\"/bin/sh\"}",
		"{\"credHelpers\":[]}",
	};
	struct credentials *c = NULL;
	char why[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why[0] = '\0';
		if (credentials_parse(bad[i], strlen(bad[i]), &c, why, sizeof(why)) != -EINVAL)
			fail_msg("config %zu accepted: %s", i, bad[i]);
		assert_true(why[0] != '\0');
		/* the message never carries the secret */
		assert_null(strstr(why, "bm9jb2xvbg"));
	}
}

static void test_helpers_parse(void **state)
{
	struct credentials *c = parse("{\"credHelpers\":{\"gcr.io\":\"gcloud\"},"
				      "\"credsStore\":\"pass\",\"auths\":{\"gcr.io\":{}}}");
	credentials_free(c);
}

static void test_missing_file(void **state)
{
	struct credentials *c = NULL;
	char why[256] = "";
	struct credential cr;

	assert_int_equal(
		credentials_load("/nonexistent/pullfs/config.json", false, &c, why, sizeof(why)),
		0);
	assert_int_equal(credentials_lookup(c, "docker.io", 0, &cr), -ENOENT);
	credentials_free(c);
	assert_int_equal(
		credentials_load("/nonexistent/pullfs/config.json", true, &c, why, sizeof(why)),
		-ENOENT);
	assert_non_null(strstr(why, "/nonexistent/pullfs/config.json"));
}

static void test_cache(void **state)
{
	struct credentials *c = parse("{\"auths\":{\"registry.example.com:5000\":"
				      "{\"username\":\"bob\",\"password\":\"secret\"}}}");
	struct credentials_cache *cc = NULL, *none = NULL;
	struct credential cr = { 0 };

	assert_int_equal(credentials_cache_new(c, 60000, &cc), 0);
	/* Twice: the second answer comes from the cache, a copy of its own. */
	for (int i = 0; i < 2; i++) {
		assert_int_equal(credentials_cache_lookup(cc, "registry.example.com:5000", 0, &cr),
				 0);
		assert_string_equal(cr.username, "bob");
		assert_string_equal(cr.password, "secret");
		credential_clear(&cr);
		assert_int_equal(credentials_cache_lookup(cc, "quay.io", 0, &cr), -ENOENT);
	}
	credentials_cache_free(cc);

	assert_int_equal(credentials_cache_new(NULL, 60000, &none), 0);
	assert_int_equal(credentials_cache_lookup(none, "quay.io", 0, &cr), -ENOENT);
	credentials_cache_free(none);
	credentials_cache_free(NULL);
	credentials_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_auths),	      cmocka_unit_test(test_configured),
		cmocka_unit_test(test_normalize),     cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_helpers_parse), cmocka_unit_test(test_missing_file),
		cmocka_unit_test(test_cache),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

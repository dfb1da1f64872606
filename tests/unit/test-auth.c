/* Unit tests for WWW-Authenticate parsing, token responses and the token
 * cache: a table of well-formed and hostile challenges. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "auth.h"

struct challenge_case {
	const char *in;
	int rc;
	enum auth_scheme scheme;
	const char *realm, *service, *scope;
};

static const struct challenge_case challenge_cases[] = {
	{ "Bearer realm=\"https://auth.docker.io/token\",service=\"registry.docker.io\",scope=\"repository:library/alpine:pull\"",
	  0, AUTH_SCHEME_BEARER, "https://auth.docker.io/token", "registry.docker.io",
	  "repository:library/alpine:pull" },
	{ "bearer Realm=\"http://127.0.0.1:1/t\" , Service=svc", 0, AUTH_SCHEME_BEARER,
	  "http://127.0.0.1:1/t", "svc", "" },
	{ "Bearer realm=\"https://a/t\",scope=\"repository:a/b:pull,push repository:c:pull\"", 0,
	  AUTH_SCHEME_BEARER, "https://a/t", "", "repository:a/b:pull,push repository:c:pull" },
	{ "Bearer realm=\"https://a/t\",error=\"invalid_token\",error_description=\"x,y\"", 0,
	  AUTH_SCHEME_BEARER, "https://a/t", "", "" },
	{ "Bearer realm=\"https://a/t\\\"q\"", 0, AUTH_SCHEME_BEARER, "https://a/t\"q", "", "" },
	{ "Basic realm=\"Registry Realm\"", 0, AUTH_SCHEME_BASIC, "Registry Realm", "", "" },
	{ "Basic", 0, AUTH_SCHEME_BASIC, "", "", "" },
	{ "  Basic   realm=x,", 0, AUTH_SCHEME_BASIC, "x", "", "" },
	/* hostile or foreign */
	{ "", -EINVAL },
	{ "Negotiate abc", -EINVAL },
	{ "Digest realm=\"x\"", -EINVAL },
	{ "Bearer", -EINVAL },				    /* no realm */
	{ "Bearer realm=\"file:///etc/passwd\"", -EINVAL }, /* not http(s) */
	{ "Bearer realm=\"gopher://x/\"", -EINVAL },
	{ "Bearer realm=\"https://a/t", -EINVAL },			   /* unterminated */
	{ "Bearer realm=\"https://a/t\\", -EINVAL },			   /* dangling escape */
	{ "Bearer realm=\"https://a/\rX-Evil: 1\"", -EINVAL },		   /* control byte */
	{ "Bearer realm=\"https://a/t\" service=x", -EINVAL },		   /* missing comma */
	{ "Bearer realm=\"https://a/t\",realm=\"https://b/t\"", -EINVAL }, /* twice */
	{ "Bearer =x", -EINVAL },
	{ "Bearer realm", -EINVAL },
	{ "Bearer realm=", -EINVAL },
	{ "BearerX realm=\"https://a\"", -EINVAL },
	{ "Bearer realm=\"https://a\",,", -EINVAL },
};

static void test_challenge_table(void **state)
{
	for (size_t i = 0; i < sizeof(challenge_cases) / sizeof(challenge_cases[0]); i++) {
		const struct challenge_case *c = &challenge_cases[i];
		struct auth_challenge ch;
		int r = auth_challenge_parse(c->in, &ch);

		if (r != c->rc)
			fail_msg("case %zu \"%s\": got %d, want %d", i, c->in, r, c->rc);
		if (r < 0)
			continue;
		assert_int_equal(ch.scheme, c->scheme);
		assert_string_equal(ch.realm, c->realm);
		assert_string_equal(ch.service, c->service);
		assert_string_equal(ch.scope, c->scope);
	}
}

static void test_challenge_caps(void **state)
{
	struct auth_challenge ch;
	size_t n = AUTH_PARAM_MAX + 100;
	char *big = malloc(n + 64);

	assert_non_null(big);
	/* A realm longer than the cap. */
	strcpy(big, "Bearer realm=\"https://");
	size_t at = strlen(big);
	memset(big + at, 'a', AUTH_PARAM_MAX);
	strcpy(big + at + AUTH_PARAM_MAX, "\"");
	assert_int_equal(auth_challenge_parse(big, &ch), -EINVAL);
	/* A header longer than the cap, even of harmless parameters. */
	free(big);
	big = malloc(AUTH_HEADER_MAX + 64);
	assert_non_null(big);
	strcpy(big, "Bearer realm=\"https://a/t\"");
	while (strlen(big) < AUTH_HEADER_MAX + 10)
		strcat(big, ",x=y");
	assert_int_equal(auth_challenge_parse(big, &ch), -EINVAL);
	assert_int_equal(auth_challenge_parse(NULL, &ch), -EINVAL);
	free(big);
}

static void test_token_parse(void **state)
{
	char *tok = NULL, *refresh = NULL;
	int64_t exp = 0;
	const char *a = "{\"token\":\"abc.def\",\"expires_in\":300,\"refresh_token\":\"r1\"}";
	const char *b = "{\"access_token\":\"xyz\"}";
	const char *c = "{\"token\":\"\",\"access_token\":\"xyz\",\"expires_in\":5}";

	assert_int_equal(auth_token_parse(a, strlen(a), &tok, &exp, &refresh), 0);
	assert_string_equal(tok, "abc.def");
	assert_int_equal(exp, 300);
	assert_string_equal(refresh, "r1");
	auth_secret_free(tok);
	auth_secret_free(refresh);

	assert_int_equal(auth_token_parse(b, strlen(b), &tok, &exp, NULL), 0);
	assert_string_equal(tok, "xyz");
	assert_int_equal(exp, 60); /* the spec's default */
	auth_secret_free(tok);

	assert_int_equal(auth_token_parse(c, strlen(c), &tok, &exp, NULL), 0);
	assert_string_equal(tok, "xyz");
	assert_int_equal(exp, 60); /* below the minimum */
	auth_secret_free(tok);

	static const char *bad[] = {
		"",
		"null",
		"[]",
		"{}",
		"{\"token\":1}",
		"{\"token\":\"\"}",
		"{\"token\":\"a b\"}",
		"{\"token\":\"a\\r\\nX: y\"}",
		"{\"token\":\"x\",\"token\":\"y\"}",
		"{\"token\":\"abc\"",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (auth_token_parse(bad[i], strlen(bad[i]), &tok, &exp, NULL) != -EBADMSG)
			fail_msg("token body %zu \"%s\" accepted", i, bad[i]);
}

static void test_cache(void **state)
{
	struct auth_cache *c;
	struct auth_challenge ch = { .scheme = AUTH_SCHEME_BEARER }, got;
	char *t = NULL;

	assert_int_equal(auth_cache_new(&c), 0);
	assert_int_equal(auth_cache_get(c, "https://r", "s", "repository:a:pull", 0, &t), -ENOENT);
	assert_int_equal(auth_cache_put(c, "https://r", "s", "repository:a:pull", "T1", 100), 0);
	assert_int_equal(auth_cache_get(c, "https://r", "s", "repository:a:pull", 99, &t), 0);
	assert_string_equal(t, "T1");
	free(t);
	/* expired, another scope, another service */
	assert_int_equal(auth_cache_get(c, "https://r", "s", "repository:a:pull", 100, &t),
			 -ENOENT);
	assert_int_equal(auth_cache_get(c, "https://r", "s", "repository:b:pull", 1, &t), -ENOENT);
	assert_int_equal(auth_cache_get(c, "https://r", "x", "repository:a:pull", 1, &t), -ENOENT);
	/* replaced; a drop of a stale token leaves the new one */
	assert_int_equal(auth_cache_put(c, "https://r", "s", "repository:a:pull", "T2", 200), 0);
	auth_cache_drop(c, "https://r", "s", "repository:a:pull", "T1");
	assert_int_equal(auth_cache_get(c, "https://r", "s", "repository:a:pull", 1, &t), 0);
	assert_string_equal(t, "T2");
	free(t);
	auth_cache_drop(c, "https://r", "s", "repository:a:pull", "T2");
	assert_int_equal(auth_cache_get(c, "https://r", "s", "repository:a:pull", 1, &t), -ENOENT);

	assert_int_equal(auth_cache_recall(c, "h:1", &got), -ENOENT);
	strcpy(ch.realm, "https://r");
	strcpy(ch.scope, "repository:a:pull");
	assert_int_equal(auth_cache_remember(c, "h:1", &ch), 0);
	assert_int_equal(auth_cache_recall(c, "h:1", &got), 0);
	assert_string_equal(got.realm, "https://r");
	assert_string_equal(got.scope, ""); /* not carried to other requests */
	auth_cache_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_challenge_table),
		cmocka_unit_test(test_challenge_caps),
		cmocka_unit_test(test_token_parse),
		cmocka_unit_test(test_cache),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

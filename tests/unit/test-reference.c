/* Unit tests for registry/reference: the string grammar with docker's
 * normalisation, and the path-form helpers used under images/. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "macro.h"
#include "reference.h"

#define HEX64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define DIGEST "sha256:" HEX64

DEFINE_TRIVIAL_CLEANUP_FUNC(struct reference *, reference_free)

struct parse_case {
	const char *input;
	unsigned flags;
	int ret;
	const char *domain;
	const char *path;
	const char *tag;
	const char *digest;
};

/* Strings built at run time for the length limits. */
static char tag128[REFERENCE_TAG_MAX + 8];
static char tag129[REFERENCE_TAG_MAX + 8];
static char name_at_limit[REFERENCE_NAME_MAX + 8];
static char name_over_limit[REFERENCE_NAME_MAX + 8];
static char short_over_limit[REFERENCE_NAME_MAX + 8];

static const struct parse_case parse_cases[] = {
	/* docker.io normalisation */
	{ "alpine", 0, 0, "docker.io", "library/alpine", NULL, NULL },
	{ "alpine", REFERENCE_DEFAULT_TAG, 0, "docker.io", "library/alpine", "latest", NULL },
	{ "alpine:3.19", 0, 0, "docker.io", "library/alpine", "3.19", NULL },
	{ "alpine:3.19", REFERENCE_DEFAULT_TAG, 0, "docker.io", "library/alpine", "3.19", NULL },
	{ "foo/bar", 0, 0, "docker.io", "foo/bar", NULL, NULL },
	{ "docker.io/foo", 0, 0, "docker.io", "library/foo", NULL, NULL },
	{ "docker.io/library/foo", 0, 0, "docker.io", "library/foo", NULL, NULL },
	{ "index.docker.io/foo/bar", 0, 0, "docker.io", "foo/bar", NULL, NULL },
	{ "index.docker.io/busybox:1.36", 0, 0, "docker.io", "library/busybox", "1.36", NULL },
	{ "localhost:5000", 0, 0, "docker.io", "library/localhost", "5000", NULL },
	{ "redis:7", 0, 0, "docker.io", "library/redis", "7", NULL },

	/* domains */
	{ "localhost/a", 0, 0, "localhost", "a", NULL, NULL },
	{ "localhost:5000/a", 0, 0, "localhost:5000", "a", NULL, NULL },
	{ "127.0.0.1:5000/a/b/c:tag", 0, 0, "127.0.0.1:5000", "a/b/c", "tag", NULL },
	{ "[::1]:5000/x", 0, 0, "[::1]:5000", "x", NULL, NULL },
	{ "[fe80::1]/x:1", 0, 0, "[fe80::1]", "x", "1", NULL },
	{ "registry.example.com/team/app", 0, 0, "registry.example.com", "team/app", NULL, NULL },
	{ "Registry.Example.COM/app", 0, 0, "Registry.Example.COM", "app", NULL, NULL },
	{ "my-reg.example.com:443/app", 0, 0, "my-reg.example.com:443", "app", NULL, NULL },
	{ "ghcr.io/a/b/c/d", 0, 0, "ghcr.io", "a/b/c/d", NULL, NULL },
	{ "-bad.example.com/app", 0, -EINVAL },
	{ "bad-.example.com/app", 0, -EINVAL },
	{ "bad..example.com/app", 0, -EINVAL },
	{ "example.com:/app", 0, -EINVAL },
	{ "example.com:50a/app", 0, -EINVAL },
	{ "example.com:5000:1/app", 0, -EINVAL },
	/* ports: 1 to 65535, leading zeros as docker takes them */
	{ "127.0.0.1:1/a", 0, 0, "127.0.0.1:1", "a", NULL, NULL },
	{ "127.0.0.1:65535/a", 0, 0, "127.0.0.1:65535", "a", NULL, NULL },
	{ "localhost:05000/a", 0, 0, "localhost:05000", "a", NULL, NULL },
	{ "127.0.0.1:99999/x:1", 0, -EINVAL },
	{ "127.0.0.1:65536/x", 0, -EINVAL },
	{ "127.0.0.1:0/x", 0, -EINVAL },
	{ "localhost:00000/x", 0, -EINVAL },
	{ "localhost:99999999999999999999999/x", 0, -EINVAL },
	{ "[::1]:70000/x", 0, -EINVAL },
	{ "registry.example.com:65536/x", REFERENCE_DEFAULT_TAG, -EINVAL },
	{ "[::1/app", 0, -EINVAL },
	{ "[]:5000/app", 0, -EINVAL },
	{ "[::g]/app", 0, -EINVAL },
	{ "[::1]x/app", 0, -EINVAL },
	{ "exa_mple.com/app", 0, -EINVAL },

	/* path components */
	{ "a/b.c_d__e-f---g", 0, 0, "docker.io", "a/b.c_d__e-f---g", NULL, NULL },
	/* a dot makes the first component a domain, and "_" is not allowed there */
	{ "a.b_c/d", 0, -EINVAL },
	{ "Alpine", 0, -EINVAL },
	{ "foo/Bar", 0, -EINVAL },
	{ "example.com/Foo", 0, -EINVAL },
	{ "a___b", 0, -EINVAL },
	{ "a..b", 0, -EINVAL },
	{ "a._b", 0, -EINVAL },
	{ ".a", 0, -EINVAL },
	{ "a-", 0, -EINVAL },
	{ "/alpine", 0, -EINVAL },
	{ "alpine/", 0, -EINVAL },
	{ "foo//bar", 0, -EINVAL },
	{ "example.com/", 0, -EINVAL },
	{ "example.com//a", 0, -EINVAL },
	{ "", 0, -EINVAL },
	{ ":tag", 0, -EINVAL },
	{ "@" DIGEST, 0, -EINVAL },
	{ "foo bar", 0, -EINVAL },
	{ HEX64, 0, -EINVAL },

	/* tags */
	{ "a:_x", 0, 0, "docker.io", "library/a", "_x", NULL },
	{ "a:V1.2-rc_3", 0, 0, "docker.io", "library/a", "V1.2-rc_3", NULL },
	{ "a:", 0, -EINVAL },
	{ "a:.x", 0, -EINVAL },
	{ "a:-x", 0, -EINVAL },
	{ "a:x:y", 0, -EINVAL },
	{ "a:x/y", 0, -EINVAL },
	{ "a:x+y", 0, -EINVAL },

	/* digests */
	{ "a@" DIGEST, 0, 0, "docker.io", "library/a", NULL, DIGEST },
	{ "a@" DIGEST, REFERENCE_DEFAULT_TAG, 0, "docker.io", "library/a", NULL, DIGEST },
	{ "a:1@" DIGEST, REFERENCE_DEFAULT_TAG, 0, "docker.io", "library/a", "1", DIGEST },
	{ "localhost:5000/a/b:t@" DIGEST, 0, 0, "localhost:5000", "a/b", "t", DIGEST },
	{ "a@sha256:0123", 0, -EINVAL },
	{ "a@sha256:" HEX64 "0", 0, -EINVAL },
	{ "a@sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef", 0, -EINVAL },
	{ "a@sha512:" HEX64 HEX64, 0, -EINVAL },
	{ "a@" HEX64, 0, -EINVAL },
	{ "a@:" HEX64, 0, -EINVAL },
	{ "a@", 0, -EINVAL },
	{ "a@" DIGEST "@" DIGEST, 0, -EINVAL },
	{ "a@" DIGEST ":t", 0, -EINVAL },
};

/* Cases whose input is filled in by init_long_cases(). */
static struct parse_case long_cases[] = {
	{ tag128, 0, 0, "docker.io", "library/a", NULL, NULL },
	{ tag129, 0, -EINVAL },
	{ name_at_limit, 0, 0, "example.com", NULL, NULL, NULL },
	{ name_over_limit, 0, -EINVAL },
	{ short_over_limit, 0, -EINVAL },
};

static void init_long_cases(void)
{
	size_t n;

	/* "a:" + 128 tag characters */
	strcpy(tag128, "a:");
	memset(tag128 + 2, 't', REFERENCE_TAG_MAX);
	tag128[2 + REFERENCE_TAG_MAX] = '\0';
	long_cases[0].tag = tag128 + 2;
	strcpy(tag129, tag128);
	strcat(tag129, "t");

	/* "example.com/" + path making exactly 255 */
	strcpy(name_at_limit, "example.com/");
	n = strlen(name_at_limit);
	memset(name_at_limit + n, 'p', REFERENCE_NAME_MAX - n);
	name_at_limit[REFERENCE_NAME_MAX] = '\0';
	long_cases[2].path = name_at_limit + n;
	strcpy(name_over_limit, name_at_limit);
	strcat(name_over_limit, "p");

	/* The limit applies after "docker.io/library/" is added. */
	n = REFERENCE_NAME_MAX - strlen("docker.io/library/") + 1;
	memset(short_over_limit, 'q', n);
	short_over_limit[n] = '\0';
}

static void check_parse_case(const struct parse_case *c)
{
	_cleanup_(reference_freep) struct reference *r = NULL;
	int ret;

	ret = reference_parse(c->input, c->flags, &r);
	if (ret != c->ret)
		fail_msg("\"%s\": expected %d, got %d", c->input, c->ret, ret);
	if (c->ret < 0) {
		assert_null(r);
		return;
	}
	assert_non_null(r);
	assert_string_equal(r->domain, c->domain);
	if (c->path)
		assert_string_equal(r->path, c->path);
	if (c->tag)
		assert_string_equal(r->tag, c->tag);
	else
		assert_null(r->tag);
	if (c->digest)
		assert_string_equal(r->digest, c->digest);
	else
		assert_null(r->digest);
}

static void test_parse_table(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(parse_cases); i++)
		check_parse_case(&parse_cases[i]);
}

static void test_parse_lengths(void **state)
{
	init_long_cases();
	for (size_t i = 0; i < ARRAY_SIZE(long_cases); i++)
		check_parse_case(&long_cases[i]);
}

struct string_case {
	const char *input;
	unsigned flags;
	const char *string;
	const char *repository;
};

static const struct string_case string_cases[] = {
	{ "alpine", 0, "docker.io/library/alpine", "docker.io/library/alpine" },
	{ "alpine", REFERENCE_DEFAULT_TAG, "docker.io/library/alpine:latest",
	  "docker.io/library/alpine" },
	{ "index.docker.io/foo/bar:1", 0, "docker.io/foo/bar:1", "docker.io/foo/bar" },
	{ "[::1]:5000/x@" DIGEST, 0, "[::1]:5000/x@" DIGEST, "[::1]:5000/x" },
	{ "127.0.0.1:5000/a/b/c:tag@" DIGEST, 0, "127.0.0.1:5000/a/b/c:tag@" DIGEST,
	  "127.0.0.1:5000/a/b/c" },
	{ "localhost/a:b", 0, "localhost/a:b", "localhost/a" },
};

static void test_to_string(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(string_cases); i++) {
		const struct string_case *c = &string_cases[i];
		_cleanup_(reference_freep) struct reference *r = NULL;
		_cleanup_(reference_freep) struct reference *again = NULL;
		_cleanup_free_ char *s = NULL, *s2 = NULL, *repo = NULL;

		assert_int_equal(reference_parse(c->input, c->flags, &r), 0);
		s = reference_to_string(r);
		assert_non_null(s);
		assert_string_equal(s, c->string);
		repo = reference_repository(r);
		assert_non_null(repo);
		assert_string_equal(repo, c->repository);

		/* The canonical form is a fixed point. */
		assert_int_equal(reference_parse(s, 0, &again), 0);
		s2 = reference_to_string(again);
		assert_non_null(s2);
		assert_string_equal(s2, s);
	}
}

/* Every valid table entry survives a round trip through its string. */
static void test_round_trip_table(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(parse_cases); i++) {
		const struct parse_case *c = &parse_cases[i];
		_cleanup_(reference_freep) struct reference *r = NULL;
		_cleanup_(reference_freep) struct reference *again = NULL;
		_cleanup_free_ char *s = NULL;

		if (c->ret < 0)
			continue;
		assert_int_equal(reference_parse(c->input, c->flags, &r), 0);
		s = reference_to_string(r);
		assert_non_null(s);
		if (reference_parse(s, 0, &again) != 0)
			fail_msg("\"%s\" -> \"%s\" does not parse", c->input, s);
		assert_string_equal(again->domain, r->domain);
		assert_string_equal(again->path, r->path);
	}
}

struct bool_case {
	const char *input;
	bool expected;
};

static const struct bool_case host_cases[] = {
	{ "localhost", true },
	{ "localhost:5000", true },
	{ "127.0.0.1", true },
	{ "127.0.0.1:5000", true },
	{ "registry.example.com", true },
	{ "registry.example.com:443", true },
	{ "Registry.Example.com", true },
	{ "[::1]", true },
	{ "[::1]:5000", true },
	/* the shape of a host: its references are then refused as invalid,
	 * not read as docker.io short names */
	{ "127.0.0.1:99999", true },
	{ "localhost:0", true },
	{ "alpine", false },
	{ "alpine:3.19", false },
	{ "redis:7", false },
	{ "library", false },
	{ "localhost:", false },
	{ "localhost:abc", false },
	{ "example.com:5000:1", false },
	{ "foo.bar:latest", false },
	{ "busybox@" DIGEST, false },
	{ "a..b", false },
	{ ".example.com", false },
	{ "example.com.", false },
	{ "[::1", false },
	{ "[]", false },
	{ "[::1]:", false },
	{ "", false },
	{ NULL, false },
};

static const struct bool_case closes_cases[] = {
	{ "busybox:1.36", true },
	{ "busybox@" DIGEST, true },
	{ "busybox:1.36@" DIGEST, true },
	{ "alpine:3.19", true },
	{ "a:b", true },
	{ "busybox", false },
	{ "library", false },
	{ "busybox:", false },
	{ "busybox@", false },
	{ "busybox@sha256:abc", false },
	{ "Busybox:1", false },
	{ "busybox:.1", false },
	{ ":1.36", false },
	{ "@" DIGEST, false },
	{ "", false },
	{ NULL, false },
};

static const struct bool_case path_component_cases[] = {
	{ "alpine", true },	{ "a", true },	   { "0", true },     { "a.b", true },
	{ "a_b", true },	{ "a__b", true },  { "a-b", true },   { "a---b", true },
	{ "a.b-c_d__e", true }, { "", false },	   { "A", false },    { "aB", false },
	{ "a___b", false },	{ "a..b", false }, { "a.-b", false }, { "-a", false },
	{ "a_", false },	{ ".a", false },   { "a/b", false },  { "a:b", false },
	{ NULL, false },
};

static void check_bool_table(const char *name, bool (*fn)(const char *),
			     const struct bool_case *cases, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (fn(cases[i].input) != cases[i].expected)
			fail_msg("%s(\"%s\") should be %s", name,
				 cases[i].input ? cases[i].input : "(null)",
				 cases[i].expected ? "true" : "false");
}

static void test_component_is_host(void **state)
{
	check_bool_table("reference_component_is_host", reference_component_is_host, host_cases,
			 ARRAY_SIZE(host_cases));
}

static void test_component_closes(void **state)
{
	check_bool_table("reference_component_closes", reference_component_closes, closes_cases,
			 ARRAY_SIZE(closes_cases));
}

static void test_path_component_is_valid(void **state)
{
	check_bool_table("reference_path_component_is_valid", reference_path_component_is_valid,
			 path_component_cases, ARRAY_SIZE(path_component_cases));
}

static const struct bool_case domain_cases[] = {
	{ "docker.io", true },	  { "127.0.0.1:5000", true },
	{ "[::1]:5000", true },	  { "localhost", true },
	{ "127.0.0.1:0", false }, { "127.0.0.1:65536", false },
	{ "host/x", false },	  { "host?x", false },
	{ "user@host", false },	  { "", false },
	{ NULL, false },
};

static const struct bool_case path_cases[] = {
	{ "library/alpine", true }, { "a/b/c", true }, { "a", true },	{ "a//b", false },
	{ "a/../b", false },	    { "/a", false },   { "a/", false }, { "a?b", false },
	{ "A/b", false },	    { "", false },     { NULL, false },
};

static const struct bool_case tag_cases[] = {
	{ "latest", true }, { "3.19", true }, { "_x", true },	{ "V1-rc.2", true },
	{ ".x", false },    { "-x", false },  { "a/b", false }, { "a#b", false },
	{ "", false },	    { NULL, false },
};

static void test_parts_are_valid(void **state)
{
	char tag[REFERENCE_TAG_MAX + 2];

	check_bool_table("reference_domain_is_valid", reference_domain_is_valid, domain_cases,
			 ARRAY_SIZE(domain_cases));
	check_bool_table("reference_path_is_valid", reference_path_is_valid, path_cases,
			 ARRAY_SIZE(path_cases));
	check_bool_table("reference_tag_is_valid", reference_tag_is_valid, tag_cases,
			 ARRAY_SIZE(tag_cases));
	memset(tag, 'a', REFERENCE_TAG_MAX);
	tag[REFERENCE_TAG_MAX] = '\0';
	assert_true(reference_tag_is_valid(tag));
	tag[REFERENCE_TAG_MAX] = 'a';
	tag[REFERENCE_TAG_MAX + 1] = '\0';
	assert_false(reference_tag_is_valid(tag));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_table),
		cmocka_unit_test(test_parse_lengths),
		cmocka_unit_test(test_to_string),
		cmocka_unit_test(test_round_trip_table),
		cmocka_unit_test(test_component_is_host),
		cmocka_unit_test(test_component_closes),
		cmocka_unit_test(test_path_component_is_valid),
		cmocka_unit_test(test_parts_are_valid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

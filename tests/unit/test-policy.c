/* Unit tests for pull policy: the kubelet default for every kind of
 * reference, pattern rules (glob semantics, first match wins), the
 * config-file spelling of a rule, and the order of precedence. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "policy.h"

#define DIGEST "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void test_default_for(void **state)
{
	static const struct {
		const char *tag, *digest;
		enum pull_policy want;
	} cases[] = {
		{ NULL, NULL, PULL_ALWAYS }, /* no tag at all */
		{ "", "", PULL_ALWAYS },     /* empty means absent */
		{ "latest", NULL, PULL_ALWAYS },
		{ "latest", DIGEST, PULL_ALWAYS }, /* the tag alone decides */
		{ "1.2", NULL, PULL_IF_NOT_PRESENT },
		{ "Latest", NULL, PULL_IF_NOT_PRESENT }, /* tags are case-sensitive */
		{ "latest-1", NULL, PULL_IF_NOT_PRESENT },
		{ NULL, DIGEST, PULL_IF_NOT_PRESENT },
		{ "", DIGEST, PULL_IF_NOT_PRESENT },
		{ "1.2", DIGEST, PULL_IF_NOT_PRESENT },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(policy_default_for(cases[i].tag, cases[i].digest), cases[i].want);
}

static void test_match(void **state)
{
	static const struct {
		const char *reference;
		enum pull_policy want;
	} cases[] = {
		{ "127.0.0.1:5000/prod/app:1", PULL_NEVER },
		{ "127.0.0.1:5000/prod/a/b:1", PULL_NEVER }, /* any depth */
		{ "127.0.0.1:5000/prod/a@" DIGEST, PULL_NEVER },
		{ "127.0.0.1:5000/prod:1", PULL_POLICY_UNSET }, /* not below prod/ */
		{ "127.0.0.1:5000/production/a:1", PULL_POLICY_UNSET },
		{ "127.0.0.1:5000/prod/special:1", PULL_NEVER }, /* earlier rule wins */
		{ "127.0.0.1:5000/dev/app:latest", PULL_IF_NOT_PRESENT },
		{ "127.0.0.1:5000/dev/app:1", PULL_POLICY_UNSET },
		{ "docker.io/library/alpine:3.19", PULL_ALWAYS },
		{ "docker.io/library/alpine:3", PULL_POLICY_UNSET }, /* ? is one character */
		{ "docker.io/bitnami/redis:7", PULL_POLICY_UNSET },
		{ "registry.example.com/x:1", PULL_POLICY_UNSET },
	};
	struct policy *p = NULL;

	assert_int_equal(policy_new(&p), 0);
	assert_int_equal(policy_add(p, "127.0.0.1:5000/prod/*", PULL_NEVER), 0);
	assert_int_equal(policy_add(p, "127.0.0.1:5000/prod/special:*", PULL_ALWAYS), 0);
	assert_int_equal(policy_add(p, "127.0.0.1:5000/*:latest", PULL_IF_NOT_PRESENT), 0);
	assert_int_equal(policy_add(p, "docker.io/library/alpine:3.??", PULL_ALWAYS), 0);
	assert_int_equal(policy_count(p), 4);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(policy_match(p, cases[i].reference), cases[i].want);
	policy_free(p);
	policy_free(NULL);
	assert_int_equal(policy_match(NULL, "a/b:1"), PULL_POLICY_UNSET);
}

static void test_match_all_and_classes(void **state)
{
	struct policy *p = NULL;

	assert_int_equal(policy_new(&p), 0);
	assert_int_equal(policy_add(p, "*/team[0-9]/*", PULL_IF_NOT_PRESENT), 0);
	assert_int_equal(policy_add(p, "*", PULL_NEVER), 0);
	assert_int_equal(policy_match(p, "example.com/team7/app:1"), PULL_IF_NOT_PRESENT);
	assert_int_equal(policy_match(p, "example.com/teamx/app:1"), PULL_NEVER);
	assert_int_equal(policy_match(p, "docker.io/library/busybox:1.36"), PULL_NEVER);
	policy_free(p);
}

static void test_add_invalid(void **state)
{
	struct policy *p = NULL;

	assert_int_equal(policy_new(&p), 0);
	assert_int_equal(policy_add(p, "", PULL_NEVER), -EINVAL);
	assert_int_equal(policy_add(p, "*", PULL_POLICY_UNSET), -EINVAL);
	assert_int_equal(policy_add(p, "*", (enum pull_policy)42), -EINVAL);
	assert_int_equal(policy_count(p), 0);
	policy_free(p);
}

static void test_many_rules(void **state)
{
	struct policy *p = NULL;
	char pattern[64];

	/* Past the first growth of the rule array. */
	assert_int_equal(policy_new(&p), 0);
	for (int i = 0; i < 100; i++) {
		snprintf(pattern, sizeof(pattern), "example.com/r%d:*", i);
		assert_int_equal(policy_add(p, pattern, i % 2 ? PULL_NEVER : PULL_ALWAYS), 0);
	}
	assert_int_equal(policy_count(p), 100);
	assert_int_equal(policy_match(p, "example.com/r98:1"), PULL_ALWAYS);
	assert_int_equal(policy_match(p, "example.com/r99:1"), PULL_NEVER);
	assert_int_equal(policy_match(p, "example.com/r100:1"), PULL_POLICY_UNSET);
	policy_free(p);
}

static void test_add_spec(void **state)
{
	static const struct {
		const char *spec;
		int r;
	} cases[] = {
		{ "127.0.0.1:5000/prod/* never", 0 },
		{ "  docker.io/*:latest\tIfNotPresent  \n", 0 },
		{ "example.com/* Always", 0 },
		{ "example.com/* if-not-present", 0 },
		{ "", -EINVAL },
		{ "   ", -EINVAL },
		{ "example.com/*", -EINVAL }, /* no policy */
		{ "example.com/* sometimes", -EINVAL },
		{ "example.com/* never please", -EINVAL }, /* a third word */
		{ "example.com/* Default", -EINVAL },
	};
	struct policy *p = NULL;

	assert_int_equal(policy_new(&p), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(policy_add_spec(p, cases[i].spec), cases[i].r);
	assert_int_equal(policy_count(p), 4);
	assert_int_equal(policy_match(p, "127.0.0.1:5000/prod/x:1"), PULL_NEVER);
	assert_int_equal(policy_match(p, "docker.io/library/alpine:latest"), PULL_IF_NOT_PRESENT);
	assert_int_equal(policy_match(p, "example.com/a:1"), PULL_ALWAYS);
	policy_free(p);
}

static void test_add_rule(void **state)
{
	static const struct {
		const char *rule;
		int r;
	} cases[] = {
		{ "example.com/app:*=never", 0 },
		{ "docker.io/*=IfNotPresent", 0 },
		{ "registry.local/* always", 0 }, /* the config file's form */
		{ "=never", -EINVAL },		  /* no pattern */
		{ "example.com/*=sometimes", -EINVAL },
		{ "example.com/*", -EINVAL },
	};
	struct policy *p = NULL;

	assert_int_equal(policy_new(&p), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(policy_add_rule(p, cases[i].rule), cases[i].r);
	assert_int_equal(policy_count(p), 3);
	assert_int_equal(policy_match(p, "example.com/app:1"), PULL_NEVER);
	assert_int_equal(policy_match(p, "docker.io/library/alpine:latest"), PULL_IF_NOT_PRESENT);
	assert_int_equal(policy_match(p, "registry.local/x:1"), PULL_ALWAYS);
	policy_free(p);
}

static void test_resolve_precedence(void **state)
{
	struct policy *p = NULL;

	assert_int_equal(policy_new(&p), 0);
	assert_int_equal(policy_add(p, "127.0.0.1:5000/prod/*", PULL_NEVER), 0);

	/* A matching rule beats the mount-wide policy and the default. */
	assert_int_equal(
		policy_resolve(p, PULL_ALWAYS, "127.0.0.1:5000/prod/a:latest", "latest", NULL),
		PULL_NEVER);
	/* No rule: the mount-wide policy. */
	assert_int_equal(
		policy_resolve(p, PULL_NEVER, "127.0.0.1:5000/dev/a:latest", "latest", NULL),
		PULL_NEVER);
	/* Neither: the kubelet default. */
	assert_int_equal(
		policy_resolve(p, PULL_POLICY_UNSET, "127.0.0.1:5000/dev/a:latest", "latest", NULL),
		PULL_ALWAYS);
	assert_int_equal(policy_resolve(p, PULL_POLICY_UNSET, "127.0.0.1:5000/dev/a:1", "1", NULL),
			 PULL_IF_NOT_PRESENT);
	assert_int_equal(policy_resolve(NULL, PULL_POLICY_UNSET, "127.0.0.1:5000/dev/a@" DIGEST,
					NULL, DIGEST),
			 PULL_IF_NOT_PRESENT);
	policy_free(p);
}

/* Lazy rules: the same table and forms, values of their own. */
static void test_lazy_rules(void **state)
{
	struct policy *p = NULL;

	assert_int_equal(policy_new(&p), 0);
	assert_int_equal(policy_add_rule_parsed(p, "127.0.0.1:5000/big/*=off", lazy_mode_parse), 0);
	assert_int_equal(policy_add_rule_parsed(p, "*:dev auto", lazy_mode_parse), 0);
	/* a pull policy is no lazy mode, nor the reverse */
	assert_int_equal(policy_add_rule_parsed(p, "a/*=never", lazy_mode_parse), -EINVAL);
	assert_int_equal(policy_add_rule_parsed(p, "=off", lazy_mode_parse), -EINVAL);
	assert_int_equal(policy_add_rule_parsed(p, "x off extra", lazy_mode_parse), -EINVAL);
	assert_int_equal(policy_add_rule(p, "a/*=off"), -EINVAL);
	assert_int_equal(policy_count(p), 2);
	assert_int_equal(policy_match_value(p, "127.0.0.1:5000/big/model:1"), LAZY_MODE_OFF);
	assert_int_equal(policy_match_value(p, "127.0.0.1:5000/app:dev"), LAZY_MODE_AUTO);
	assert_int_equal(policy_match_value(p, "127.0.0.1:5000/app:1"), LAZY_MODE_UNSET);
	assert_int_equal(policy_match_value(NULL, "127.0.0.1:5000/app:1"), LAZY_MODE_UNSET);
	policy_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_for),
		cmocka_unit_test(test_match),
		cmocka_unit_test(test_match_all_and_classes),
		cmocka_unit_test(test_add_invalid),
		cmocka_unit_test(test_many_rules),
		cmocka_unit_test(test_add_spec),
		cmocka_unit_test(test_add_rule),
		cmocka_unit_test(test_resolve_precedence),
		cmocka_unit_test(test_lazy_rules),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

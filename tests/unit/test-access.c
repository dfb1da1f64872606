/* Unit tests for access rules: the syntax (users, groups, names resolved
 * at once, bad rules refused with a reason), first match wins, root and
 * the operator always let in, the defaults (everybody may pull, only root
 * sees what was pulled with credentials), a pull with credentials held to
 * the private rules too, supplementary groups asked for only when a group
 * entry is left, and the rate limit of the events. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "access.h"

static int groups_asked;
static gid_t fake_groups[4];
static size_t n_fake_groups;

static int fake_groups_of(const struct caller *who, gid_t *groups, size_t max)
{
	groups_asked++;
	for (size_t i = 0; i < n_fake_groups && i < max; i++)
		groups[i] = fake_groups[i];
	return (int)n_fake_groups;
}

static struct access *make(const char *const *pull, size_t np, const char *const *priv, size_t nv)
{
	struct access *a = NULL;
	char err[256] = "";

	assert_int_equal(access_new(pull, np, priv, nv, fake_groups_of, &a, err, sizeof(err)), 0);
	return a;
}

static struct caller user(uid_t uid, gid_t gid)
{
	return (struct caller){ .pid = 1, .uid = uid, .gid = gid };
}

static void test_syntax(void **state)
{
	static const char *const good[] = {
		"reg.example.com/*=1000",
		"reg.example.com/*=*",
		"*=root",
		"*=@0,1000,@4242",
		"a=b=1000", /* the last "=" separates */
	};
	static const struct {
		const char *rule, *why;
	} bad[] = {
		{ "nopattern", "want PATTERN=WHO" },
		{ "=1000", "want PATTERN=WHO" },
		{ "reg/*=", "want PATTERN=WHO" },
		{ "reg/*=,", "want PATTERN=WHO" },
		{ "reg/*=no-such-user-xyz", "unknown user \"no-such-user-xyz\"" },
		{ "reg/*=@no-such-group-xyz", "unknown group \"no-such-group-xyz\"" },
		{ "reg/*=@", "unknown group" },
		{ "reg/*=4294967295", "unknown user" }, /* (uid_t)-1 is nobody's */
		{ "reg/*=-1", "unknown user" },
	};
	char err[256];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_int_equal(access_rule_check(good[i], err, sizeof(err)), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_int_equal(access_rule_check(bad[i].rule, err, sizeof(err)), -EINVAL);
		if (!strstr(err, bad[i].why))
			fail_msg("rule \"%s\": reason \"%s\" lacks \"%s\"", bad[i].rule, err,
				 bad[i].why);
	}
}

static void test_defaults(void **state)
{
	struct access *a = make(NULL, 0, NULL, 0);
	struct caller u = user(1000, 1000), root = user(0, 0);
	char why[256];

	/* Everybody may cause a pull without credentials. */
	assert_true(access_may_pull(a, "reg/x:1", false, &u, why, sizeof(why)));
	/* Only root sees what was pulled with credentials, and so only root
	 * causes such a pull. */
	assert_false(access_may_see(a, "reg/x:1", &u, why, sizeof(why)));
	assert_non_null(strstr(why, "uid 1000"));
	assert_false(access_may_pull(a, "reg/x:1", true, &u, why, sizeof(why)));
	assert_non_null(strstr(why, "credentials"));
	assert_true(access_may_see(a, "reg/x:1", &root, why, sizeof(why)));
	assert_true(access_may_pull(a, "reg/x:1", true, &root, why, sizeof(why)));
	/* The operator (no caller) always may. */
	assert_true(access_may_see(a, "reg/x:1", NULL, why, sizeof(why)));
	assert_true(access_may_pull(a, "reg/x:1", true, NULL, why, sizeof(why)));
	access_free(a);
}

static void test_rules(void **state)
{
	static const char *const pull[] = {
		"reg/open/*=*",
		"reg/*=1000,@4343",
	};
	static const char *const priv[] = {
		"reg/team/special:*=2000",
		"reg/team/*=1000,@4242",
	};
	struct access *a = make(pull, 2, priv, 2);
	char why[256];

	struct caller u1000 = user(1000, 1000), u2000 = user(2000, 2000),
		      nobody = user(65534, 65534);
	struct caller g4343 = user(3000, 4343), g4242 = user(3001, 4242);

	assert_true(access_may_pull(a, "reg/open/x:1", false, &nobody, why, sizeof(why)));
	assert_false(access_may_pull(a, "reg/other:1", false, &nobody, why, sizeof(why)));
	assert_non_null(strstr(why, "reg/*=1000,@4343"));
	assert_non_null(strstr(why, "uid 65534"));
	assert_true(access_may_pull(a, "reg/other:1", false, &u1000, why, sizeof(why)));
	assert_true(access_may_pull(a, "reg/other:1", false, &g4343, why, sizeof(why)));
	/* No rule matches another registry: everybody. */
	assert_true(access_may_pull(a, "elsewhere/x:1", false, &nobody, why, sizeof(why)));

	/* First match wins: special is 2000's only. */
	assert_true(access_may_see(a, "reg/team/special:1", &u2000, why, sizeof(why)));
	assert_false(access_may_see(a, "reg/team/special:1", &u1000, why, sizeof(why)));
	assert_true(access_may_see(a, "reg/team/app:1", &u1000, why, sizeof(why)));
	assert_false(access_may_see(a, "reg/team/app:1", &u2000, why, sizeof(why)));
	assert_true(access_may_see(a, "reg/team/app:1", &g4242, why, sizeof(why)));
	/* A pull with credentials: both rules. */
	assert_true(access_may_pull(a, "reg/team/app:1", true, &u1000, why, sizeof(why)));
	assert_false(access_may_pull(a, "reg/team/app:1", true, &g4343, why, sizeof(why)));
	access_free(a);
}

static void test_supplementary_groups(void **state)
{
	static const char *const priv[] = { "reg/*=1000,@4242" };
	struct access *a = make(NULL, 0, priv, 1);
	struct caller u = user(2000, 2000);
	char why[256];

	/* Matched by uid: the groups are not read. */
	groups_asked = 0;
	struct caller u1000 = user(1000, 1000);
	assert_true(access_may_see(a, "reg/x:1", &u1000, why, sizeof(why)));
	assert_int_equal(groups_asked, 0);
	/* Matched by the primary group: not read either. */
	struct caller g = user(2000, 4242);
	assert_true(access_may_see(a, "reg/x:1", &g, why, sizeof(why)));
	assert_int_equal(groups_asked, 0);
	/* A supplementary group. */
	fake_groups[0] = 10;
	fake_groups[1] = 4242;
	n_fake_groups = 2;
	assert_true(access_may_see(a, "reg/x:1", &u, why, sizeof(why)));
	assert_int_equal(groups_asked, 1);
	n_fake_groups = 1;
	assert_false(access_may_see(a, "reg/x:1", &u, why, sizeof(why)));
	access_free(a);

	/* No group entry: nothing to read. */
	static const char *const users_only[] = { "reg/*=1000" };
	a = make(NULL, 0, users_only, 1);
	groups_asked = 0;
	assert_false(access_may_see(a, "reg/x:1", &u, why, sizeof(why)));
	assert_int_equal(groups_asked, 0);
	access_free(a);
}

struct collected {
	char text[256];
};

static int collect(void *userdata, bool everybody, bool group, uint32_t id)
{
	struct collected *c = userdata;
	size_t used = strlen(c->text);

	snprintf(c->text + used, sizeof(c->text) - used, "%s%s%u ", everybody ? "*" : "",
		 group ? "@" : "", everybody ? 0u : id);
	return 0;
}

/* The readers of the first matching rule, for the image root's ACL. */
static void test_readers(void **state)
{
	static const char *const priv[] = {
		"reg/team/*=1000,@4242,2000",
		"reg/open/*=*",
	};
	struct access *a = make(NULL, 0, priv, 2);
	struct collected c = { "" };

	assert_int_equal(access_readers(a, "reg/team/app:1", collect, &c), 0);
	assert_string_equal(c.text, "1000 @4242 2000 ");
	c.text[0] = '\0';
	assert_int_equal(access_readers(a, "reg/open/app:1", collect, &c), 0);
	assert_string_equal(c.text, "*0 ");
	c.text[0] = '\0';
	assert_int_equal(access_readers(a, "elsewhere/app:1", collect, &c), 0);
	assert_string_equal(c.text, ""); /* root only */
	access_free(a);
}

static void test_event_rate(void **state)
{
	struct access *a = make(NULL, 0, NULL, 0);

	assert_true(access_event_due(a, 1000, "AccessDenied", "reg/x:1", 100000));
	assert_false(access_event_due(a, 1000, "AccessDenied", "reg/x:1", 100500));
	/* Another user, reference or reason is another event. */
	assert_true(access_event_due(a, 1001, "AccessDenied", "reg/x:1", 100500));
	assert_true(access_event_due(a, 1000, "AccessDenied", "reg/y:1", 100500));
	assert_true(access_event_due(a, 1000, "PullDenied", "reg/x:1", 100500));
	assert_true(access_event_due(a, 1000, "AccessDenied", "reg/x:1", 110000));
	/* Many users: the memory stays bounded, and old entries make room. */
	for (uid_t u = 0; u < 5000; u++)
		access_event_due(a, 2000 + u, "AccessDenied", "reg/x:1", 200000);
	assert_true(access_event_due(a, 99999, "AccessDenied", "reg/x:1", 300000));
	assert_false(access_event_due(a, 99999, "AccessDenied", "reg/x:1", 300001));
	access_free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_syntax),	cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_rules),	cmocka_unit_test(test_supplementary_groups),
		cmocka_unit_test(test_readers), cmocka_unit_test(test_event_rate),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

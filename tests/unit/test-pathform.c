/* Unit tests for registry/pathform: what one component below a directory
 * of images/ is -- a host, a repository directory, the image of a
 * reference, a short name's symlink, or nothing valid. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pathform.h"
#include "reference.h"

#define HEX64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define DIGEST "sha256:" HEX64

static const struct pathform_dir top = { 0, false, "" };
static const struct pathform_dir host = { 1, false, "localhost:5000" };
static const struct pathform_dir team = { 2, false, "localhost:5000/team" };
static const struct pathform_dir bad_port = { 1, false, "127.0.0.1:99999" };
static const struct pathform_dir short_dir = { 1, true, "docker.io/library" };

struct step_case {
	const struct pathform_dir *dir;
	const char *name;
	enum pathform_kind kind;
	const char *prefix;    /* HOST, DIR; REFERENCE: text; SHORT_LINK: target */
	unsigned depth;	       /* HOST, DIR, SHORT_LINK */
	bool short_form;       /* HOST, DIR, SHORT_LINK */
	const char *canonical; /* REFERENCE: the parsed reference, NULL: none */
};

static const struct step_case cases[] = {
	/* hosts, in the first position only */
	{ &top, "localhost:5000", PATHFORM_HOST, "localhost:5000", 1, false, NULL },
	{ &top, "localhost", PATHFORM_HOST, "localhost", 1, false, NULL },
	{ &top, "registry.example.com", PATHFORM_HOST, "registry.example.com", 1, false, NULL },
	{ &top, "docker.io", PATHFORM_HOST, "docker.io", 1, false, NULL },
	{ &top, "[::1]:5000", PATHFORM_HOST, "[::1]:5000", 1, false, NULL },
	{ &top, "known", PATHFORM_HOST, "known", 1, false, NULL },
	{ &host, "localhost:5000", PATHFORM_REFERENCE, "localhost:5000/localhost:5000", 0, false,
	  "localhost:5000/localhost:5000" },

	/* repository directories */
	{ &top, "busybox", PATHFORM_DIR, "docker.io/busybox", 1, true, NULL },
	{ &top, "library", PATHFORM_DIR, "docker.io/library", 1, true, NULL },
	{ &host, "app", PATHFORM_DIR, "localhost:5000/app", 2, false, NULL },
	{ &team, "a.b__c-d", PATHFORM_DIR, "localhost:5000/team/a.b__c-d", 3, false, NULL },
	{ &short_dir, "sub", PATHFORM_DIR, "docker.io/library/sub", 2, true, NULL },

	/* the component that closes a reference */
	{ &host, "app:1", PATHFORM_REFERENCE, "localhost:5000/app:1", 0, false,
	  "localhost:5000/app:1" },
	{ &team, "app@" DIGEST, PATHFORM_REFERENCE, "localhost:5000/team/app@" DIGEST, 0, false,
	  "localhost:5000/team/app@" DIGEST },
	{ &team, "app:v2@" DIGEST, PATHFORM_REFERENCE, "localhost:5000/team/app:v2@" DIGEST, 0,
	  false, "localhost:5000/team/app:v2@" DIGEST },
	/* outside the grammar: left to ensure, which reports it */
	{ &bad_port, "app:1", PATHFORM_REFERENCE, "127.0.0.1:99999/app:1", 0, false, NULL },

	/* docker.io short names: symlinks up to images/ and down again */
	{ &top, "busybox:1.36", PATHFORM_SHORT_LINK, "docker.io/library/busybox:1.36", 1, true,
	  NULL },
	{ &top, "redis:7", PATHFORM_SHORT_LINK, "docker.io/library/redis:7", 1, true, NULL },
	{ &short_dir, "busybox:1.36", PATHFORM_SHORT_LINK, "../docker.io/library/busybox:1.36", 2,
	  true, NULL },

	/* nothing of the path form */
	{ &top, "Busybox", PATHFORM_INVALID, NULL, 0, false, NULL },
	{ &top, "busybox:", PATHFORM_INVALID, NULL, 0, false, NULL },
	{ &host, "App", PATHFORM_INVALID, NULL, 0, false, NULL },
	{ &host, "app@sha256:short", PATHFORM_INVALID, NULL, 0, false, NULL },
	{ &host, "-app", PATHFORM_INVALID, NULL, 0, false, NULL },
	/* not there: names programs probe beside a directory (ENOENT) */
	{ &top, ".git", PATHFORM_INVALID, NULL, 0, false, NULL },
	{ &team, ".#app:1.lck", PATHFORM_INVALID, NULL, 0, false, NULL },
	{ &team, "app1.nspawn", PATHFORM_INVALID, NULL, 0, false, NULL },
	{ &team, "app:1.nspawn", PATHFORM_INVALID, NULL, 0, false, NULL },
	{ &top, "alpine3.nspawn", PATHFORM_INVALID, NULL, 0, false, NULL },
};

static unsigned asked;

static bool known_host(void *userdata, const char *name)
{
	asked++;
	return strcmp(name, "known") == 0;
}

static void check_case(const struct step_case *c)
{
	struct pathform_step s;

	assert_int_equal(pathform_step(c->dir, c->name, known_host, NULL, &s), 0);
	assert_int_equal(s.kind, c->kind);
	switch (c->kind) {
	case PATHFORM_HOST:
	case PATHFORM_DIR:
		assert_string_equal(s.dir.prefix, c->prefix);
		assert_int_equal(s.dir.depth, c->depth);
		assert_int_equal(s.dir.short_form, c->short_form);
		break;
	case PATHFORM_SHORT_LINK:
		assert_string_equal(s.target, c->prefix);
		assert_int_equal(s.dir.depth, c->depth);
		assert_true(s.dir.short_form);
		break;
	case PATHFORM_REFERENCE:
		assert_string_equal(s.text, c->prefix);
		if (c->canonical) {
			char *canonical;

			assert_non_null(s.ref);
			canonical = reference_to_string(s.ref);
			assert_string_equal(canonical, c->canonical);
			free(canonical);
		} else {
			assert_null(s.ref);
		}
		break;
	case PATHFORM_INVALID:
		/* invalid, or a name programs probe: not there */
		assert_int_equal(s.err, c->name[0] == '.' || strstr(c->name, ".nspawn") ? -ENOENT
											: -EINVAL);
		assert_non_null(s.why);
		break;
	}
	pathform_step_done(&s);
}

static void test_steps(void **state)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		print_message("%s below \"%s\"\n", cases[i].name, cases[i].dir->prefix);
		check_case(&cases[i]);
	}
}

/* The daemon's list of hosts is asked only about a first component that
 * does not look like a host. */
static void test_known_host_asked(void **state)
{
	struct pathform_step s;

	asked = 0;
	assert_int_equal(pathform_step(&top, "localhost:5000", known_host, NULL, &s), 0);
	pathform_step_done(&s);
	assert_int_equal(pathform_step(&host, "app", known_host, NULL, &s), 0);
	pathform_step_done(&s);
	assert_int_equal(asked, 0);
	assert_int_equal(pathform_step(&top, "myregistry", known_host, NULL, &s), 0);
	assert_int_equal(asked, 1);
	assert_int_equal(s.kind, PATHFORM_DIR);
	pathform_step_done(&s);
	/* Without a list, a host is only what looks like one. */
	assert_int_equal(pathform_step(&top, "known", NULL, NULL, &s), 0);
	assert_int_equal(s.kind, PATHFORM_DIR);
	assert_string_equal(s.dir.prefix, "docker.io/known");
	pathform_step_done(&s);
}

/* A short name over the length of a reference closes nothing valid. */
static void test_short_name_too_long(void **state)
{
	char name[REFERENCE_NAME_MAX + 16];
	struct pathform_step s;

	memset(name, 'a', REFERENCE_NAME_MAX);
	strcpy(name + REFERENCE_NAME_MAX, ":1");
	assert_int_equal(pathform_step(&top, name, NULL, NULL, &s), 0);
	assert_int_equal(s.kind, PATHFORM_INVALID);
	assert_int_equal(s.err, -EINVAL);
	pathform_step_done(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_steps),
		cmocka_unit_test(test_known_host_asked),
		cmocka_unit_test(test_short_name_too_long),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

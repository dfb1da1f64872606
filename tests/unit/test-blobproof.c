/* Unit tests for the proofs that a pull may have a blob: the line of a
 * pull with and without credentials, "*" standing for every pull, a line
 * held only when whole (one cut short by a crash proves nothing, and no
 * line proves a repository whose name it only begins), no duplicates, and
 * bad digests refused. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "blobproof.h"

#define DIGEST "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define HEX "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

struct fixture {
	char dir[64];
	struct blobproof *b;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	snprintf(f->dir, sizeof(f->dir), "/tmp/test-blobproof.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_int_equal(blobproof_open(f->dir, &f->b), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[128];

	blobproof_close(f->b);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

static char *proof_file(struct fixture *f)
{
	static char path[256];

	snprintf(path, sizeof(path), "%s/proofs/%s", f->dir, HEX);
	return path;
}

static void write_file(const char *path, const char *text)
{
	FILE *fp = fopen(path, "w");

	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
}

static void test_lines(void **state)
{
	char buf[64];

	assert_true(blobproof_line("reg:5000", "team/app", true, buf, sizeof(buf)));
	assert_string_equal(buf, "reg:5000/team/app");
	assert_true(blobproof_line("reg:5000", "team/app", false, buf, sizeof(buf)));
	assert_string_equal(buf, "*");
	assert_false(blobproof_line("reg:5000", "team/app", true, buf, 8));
}

static void test_note_and_hold(void **state)
{
	struct fixture *f = *state;
	struct stat st;

	assert_false(blobproof_holds(f->b, DIGEST, "reg/team/app"));
	assert_int_equal(blobproof_note(f->b, DIGEST, "reg/team/app"), 0);
	assert_true(blobproof_holds(f->b, DIGEST, "reg/team/app"));
	/* another repository, or one whose name only begins the same */
	assert_false(blobproof_holds(f->b, DIGEST, "reg/team/other"));
	assert_false(blobproof_holds(f->b, DIGEST, "reg/team/ap"));
	assert_false(blobproof_holds(f->b, DIGEST, "reg/team/app2"));
	/* a line is kept once */
	assert_int_equal(blobproof_note(f->b, DIGEST, "reg/team/app"), 0);
	assert_int_equal(stat(proof_file(f), &st), 0);
	assert_int_equal(st.st_size, strlen("reg/team/app\n"));
	/* public: every pull holds it */
	assert_int_equal(blobproof_note(f->b, DIGEST, "*"), 0);
	assert_true(blobproof_holds(f->b, DIGEST, "other/x/y"));
	/* forgotten: nobody, until noted again */
	assert_int_equal(blobproof_forget(f->b, DIGEST), 0);
	assert_false(blobproof_holds(f->b, DIGEST, "other/x/y"));
	assert_false(blobproof_holds(f->b, DIGEST, "reg/team/app"));
	assert_int_equal(blobproof_forget(f->b, DIGEST), 0);
	assert_int_equal(blobproof_note(f->b, DIGEST, "reg/team/app"), 0);
	assert_true(blobproof_holds(f->b, DIGEST, "reg/team/app"));
}

static void test_cut_short(void **state)
{
	struct fixture *f = *state;

	/* the last line lost its end in a crash */
	write_file(proof_file(f), "reg/team/app\n*");
	assert_true(blobproof_holds(f->b, DIGEST, "reg/team/app"));
	assert_false(blobproof_holds(f->b, DIGEST, "other/x/y"));
	write_file(proof_file(f), "reg/team/ap");
	assert_false(blobproof_holds(f->b, DIGEST, "reg/team/ap"));
	/* a line noted after one cut short is whole */
	write_file(proof_file(f), "reg/te");
	assert_int_equal(blobproof_note(f->b, DIGEST, "reg/te"), 0);
	assert_true(blobproof_holds(f->b, DIGEST, "reg/te"));
	assert_false(blobproof_holds(f->b, DIGEST, "reg/tereg/te"));
}

static void test_bad_input(void **state)
{
	struct fixture *f = *state;

	assert_false(blobproof_holds(f->b, "sha256:../../etc", "*"));
	assert_int_equal(blobproof_note(f->b, "sha256:../../etc", "*"), -EINVAL);
	assert_int_equal(blobproof_note(f->b, "md5:abc", "*"), -EINVAL);
	assert_int_equal(blobproof_note(f->b, DIGEST, "a\n*"), -EINVAL);
	assert_false(blobproof_holds(f->b, DIGEST, "*"));
}

/* A HEAD is trusted on the registry host of a pull with credentials that
 * had the blob, nowhere else. */
static void test_domain_had(void **state)
{
	struct fixture *f = *state;

	assert_false(blobproof_domain_had(f->b, DIGEST, "reg:5000"));
	assert_int_equal(blobproof_note(f->b, DIGEST, "reg:5000/team/app"), 0);
	assert_true(blobproof_domain_had(f->b, DIGEST, "reg:5000"));
	/* another host, one whose name only begins the same or goes on */
	assert_false(blobproof_domain_had(f->b, DIGEST, "reg:500"));
	assert_false(blobproof_domain_had(f->b, DIGEST, "reg"));
	assert_false(blobproof_domain_had(f->b, DIGEST, "reg:50001"));
	assert_false(blobproof_domain_had(f->b, DIGEST, "evil.example"));
	assert_false(blobproof_domain_had(f->b, DIGEST, ""));
	assert_false(blobproof_domain_had(f->b, DIGEST, "reg:5000/team"));
	assert_false(blobproof_domain_had(f->b, "sha256:../x", "reg:5000"));
	/* a line cut short proves nothing */
	write_file(proof_file(f), "evil.example/a\nother/x");
	assert_true(blobproof_domain_had(f->b, DIGEST, "evil.example"));
	assert_false(blobproof_domain_had(f->b, DIGEST, "other"));
	/* an empty repository is no line of a pull */
	write_file(proof_file(f), "bare/\n");
	assert_false(blobproof_domain_had(f->b, DIGEST, "bare"));
	/* public: anybody may have it */
	write_file(proof_file(f), "*\n");
	assert_true(blobproof_domain_had(f->b, DIGEST, "evil.example"));
}

#define DIGEST2 "sha256:1111111111111111111111111111111111111111111111111111111111111111"

static bool only_first(void *userdata, const char *digest)
{
	int *calls = userdata;

	(*calls)++;
	return strcmp(digest, DIGEST) == 0;
}

/* GC drops the proofs of what the cache no longer holds, and nothing
 * else in proofs/. */
static void test_prune(void **state)
{
	struct fixture *f = *state;
	char other[256];
	unsigned removed = 99;
	int calls = 0;

	assert_int_equal(blobproof_note(f->b, DIGEST, "*"), 0);
	assert_int_equal(blobproof_note(f->b, DIGEST2, "reg/team/app"), 0);
	snprintf(other, sizeof(other), "%s/proofs/not-a-proof", f->dir);
	write_file(other, "x");
	assert_int_equal(blobproof_prune(f->b, only_first, &calls, &removed), 0);
	assert_int_equal(calls, 2);
	assert_int_equal(removed, 1);
	assert_true(blobproof_holds(f->b, DIGEST, "*"));
	assert_false(blobproof_holds(f->b, DIGEST2, "reg/team/app"));
	assert_int_equal(access(other, F_OK), 0);
	assert_int_equal(blobproof_prune(f->b, only_first, &calls, &removed), 0);
	assert_int_equal(removed, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lines),
		cmocka_unit_test_setup_teardown(test_note_and_hold, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cut_short, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_input, setup, teardown),
		cmocka_unit_test_setup_teardown(test_domain_had, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prune, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lines),
		cmocka_unit_test_setup_teardown(test_note_and_hold, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cut_short, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_input, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

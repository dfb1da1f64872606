/* Unit tests for manager/lazy/profile: the start profile's text (parsed
 * strictly, written back), the recorder's window and limits, and the
 * store in a cache directory (crash-safe writes, damaged files). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "profile.h"

#define IMG "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define L0 "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define L1 "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define O1 "0101010101010101010101010101010101010101010101010101010101010101"
#define O2 "0202020202020202020202020202020202020202020202020202020202020202"
#define HEAD "pullfs-profile 1\nimage " IMG "\nrecorded 1700000000\nwindow-ms 10000\n"
#define S(x) ((int64_t)(x)*1000000000)

static int parse(const char *text, struct profile **ret, char *err)
{
	return profile_parse(text, strlen(text), ret, err, 256);
}

static void test_parse_good(void **state)
{
	(void)state;
	const char *text = HEAD "layer " L0 "\nlayer " L1 "\nfile 1 " O1 " 300\nfile 0 " O2 " 7\n";
	struct profile *p;
	char err[256] = "";

	assert_int_equal(parse(text, &p, err), 0);
	assert_string_equal(p->image, IMG);
	assert_int_equal(p->recorded, 1700000000);
	assert_int_equal(p->window_ms, 10000);
	assert_int_equal(p->n_layers, 2);
	assert_string_equal(p->layers[1], L1);
	assert_int_equal(p->n_files, 2);
	assert_int_equal(p->files[0].layer, 1);
	assert_string_equal(p->files[0].object, O1);
	assert_int_equal(p->files[1].size, 7);
	assert_int_equal(p->bytes, 307);

	/* written back, the same text */
	char *out;
	size_t len;

	assert_int_equal(profile_format(p, &out, &len), 0);
	assert_int_equal(len, strlen(text));
	assert_memory_equal(out, text, len);
	free(out);
	profile_free(p);

	/* the last line without its newline is accepted */
	text = HEAD "layer " L0 "\nfile 0 " O1 " 300";
	assert_int_equal(parse(text, &p, err), 0);
	assert_int_equal(p->n_files, 1);
	profile_free(p);
}

/* Each malformed text, refused with the reason. */
static void test_parse_bad(void **state)
{
	(void)state;
	static const struct {
		const char *text, *reason;
	} cases[] = {
		{ "", "ends early" },
		{ "pullfs-profile 2\n", "not a pullfs profile" },
		{ "{\"json\": true}\n", "not a pullfs profile" },
		{ "pullfs-profile 1\nimage sha256:1234\n", "line 2" },
		{ "pullfs-profile 1\nimage " IMG "\nrecorded -5\n", "line 3" },
		{ "pullfs-profile 1\nimage " IMG "\nrecorded 1\nwindow 5\n", "line 4" },
		{ HEAD, "ends early" },
		{ HEAD "layer " L0 "\n", "ends early" },
		{ HEAD "file 0 " O1 " 5\n", "expected a \"layer\" line" },
		{ HEAD "layer " L0 "\nfile 1 " O1 " 5\n", "no layer 1" },
		{ HEAD "layer " L0 "\nfile 0 " O1 " 0\n", "positive" },
		{ HEAD "layer " L0 "\nfile 0 " O1 " 05\n", "positive" },
		{ HEAD "layer " L0 "\nfile 0 ABCDEF " O1 " 5\n", "separated" },
		{ HEAD "layer " L0 "\nfile 0 " O1 "0 5\n", "64 lowercase hex" },
		{ HEAD "layer " L0 "\nfile 0 "
		       "ABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABAB 5\n",
		  "64 lowercase hex" },
		{ HEAD "layer " L0 "\nfile 0 " O1 " 5\nfile 0 " O1 " 5\n", "the same file twice" },
		{ HEAD "layer " L0 "\nfile 0 " O1 " 5\nlayer " L1 "\n",
		  "expected a \"file\" line" },
		{ HEAD "layer " L0 "\nfile 0 " O1 "  5\n", "separated" },
		{ HEAD "layer " L0 "\nfile 0 " O1 " 5\r\n", "control character" },
		{ HEAD "layer " L0 "\nfile 0 " O1 " 5\n\n", "separated" },
		{ HEAD "layer " L0 "\nfile 0 " O1 " 268435457\n", "more than 256 MiB" },
		{ HEAD "layer " L0 "\nfile 0 " O1 " 5\nextra 1\n", "expected a \"file\" line" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct profile *p = NULL;
		char err[256] = "";
		int r = parse(cases[i].text, &p, err);

		if (r != -EBADMSG || !strstr(err, cases[i].reason))
			fail_msg("case %zu: %d \"%s\", wanted -EBADMSG with \"%s\"", i, r, err,
				 cases[i].reason);
		assert_null(p);
	}
}

/* The limits: files, and the text's length. */
static void test_parse_limits(void **state)
{
	(void)state;
	size_t cap = PROFILE_TEXT_MAX + 2, len;
	char *text = malloc(cap), err[256] = "";
	struct profile *p;

	assert_non_null(text);
	len = (size_t)snprintf(text, cap, HEAD "layer " L0 "\n");
	for (unsigned i = 0; i < PROFILE_FILES_MAX; i++)
		len += (size_t)snprintf(text + len, cap - len, "file 0 %064x 1\n", i);
	assert_int_equal(profile_parse(text, len, &p, err, sizeof(err)), 0);
	assert_int_equal(p->n_files, PROFILE_FILES_MAX);
	profile_free(p);
	/* one more file */
	len += (size_t)snprintf(text + len, cap - len, "file 0 %064x 1\n", PROFILE_FILES_MAX);
	assert_int_equal(profile_parse(text, len, &p, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "more than 1024 files"));
	/* a text over the limit is not read at all */
	memset(text, 'x', cap);
	assert_int_equal(profile_parse(text, PROFILE_TEXT_MAX + 1, &p, err, sizeof(err)), -E2BIG);
	free(text);
}

/* The recorder: first-open order, once per file, the window, limits. */
static void test_recorder(void **state)
{
	(void)state;
	const char *layers[] = { L0, L1 };
	struct profile_recorder *r;
	struct profile *p;

	assert_int_equal(profile_recorder_new(IMG, layers, 2, S(100), S(10), &r), 0);
	assert_int_equal(profile_recorder_note(r, 1, O2, 50, S(101)), 1);
	assert_int_equal(profile_recorder_note(r, 0, O1, 70, S(102)), 1);
	/* again: once */
	assert_int_equal(profile_recorder_note(r, 1, O2, 50, S(103)), 0);
	/* the same content in the other layer is another file */
	assert_int_equal(profile_recorder_note(r, 0, O2, 50, S(103)), 1);
	/* no such layer, no object, empty */
	assert_int_equal(profile_recorder_note(r, 2, O1, 50, S(103)), -EINVAL);
	assert_int_equal(profile_recorder_note(r, 0, "abc", 50, S(103)), -EINVAL);
	assert_int_equal(profile_recorder_note(r, 1, O1, 0, S(103)), 0);
	/* over the bytes, or too large a file: left out, a smaller one
	 * still fits */
	assert_int_equal(profile_recorder_note(r, 1, O1, PROFILE_FILE_MAX + 1, S(104)), 0);
	assert_int_equal(profile_recorder_note(r, 1, O1, PROFILE_BYTES_MAX, S(104)), 0);
	assert_int_equal(profile_recorder_note(r, 1, O1, 10, S(104)), 1);
	/* after the window */
	assert_int_equal(profile_recorder_note(r, 1, "03", 10, S(110)), -ESTALE);
	assert_int_equal(profile_recorder_deadline(r), S(110));

	assert_int_equal(profile_recorder_finish(r, 1234, &p), 0);
	assert_non_null(p);
	assert_int_equal(p->n_files, 4);
	assert_string_equal(p->files[0].object, O2);
	assert_int_equal(p->files[0].layer, 1);
	assert_string_equal(p->files[1].object, O1);
	assert_int_equal(p->bytes, 180);
	assert_int_equal(p->recorded, 1234);
	assert_int_equal(p->window_ms, 10000);
	assert_int_equal(p->n_layers, 2);
	/* closed: nothing more */
	assert_int_equal(profile_recorder_note(r, 0, O1, 1, S(101)), -ESTALE);

	/* what it wrote parses to the same */
	char *text, err[256] = "";
	size_t len;
	struct profile *q;

	assert_int_equal(profile_format(p, &text, &len), 0);
	assert_int_equal(profile_parse(text, len, &q, err, sizeof(err)), 0);
	assert_int_equal(q->n_files, 4);
	assert_int_equal(q->bytes, 180);
	free(text);
	profile_free(q);
	profile_free(p);
	profile_recorder_unref(r);

	/* nothing opened: no profile */
	assert_int_equal(profile_recorder_new(IMG, layers, 2, S(100), S(10), &r), 0);
	assert_int_equal(profile_recorder_finish(r, 1, &p), 0);
	assert_null(p);
	profile_recorder_unref(r);
	assert_int_equal(profile_recorder_new("sha256:12", layers, 2, 0, 1, &r), -EINVAL);
}

/* At most PROFILE_FILES_MAX files. */
static void test_recorder_count(void **state)
{
	(void)state;
	const char *layers[] = { L0 };
	struct profile_recorder *r;
	char obj[65];

	assert_int_equal(profile_recorder_new(IMG, layers, 1, 0, S(10), &r), 0);
	for (unsigned i = 0; i < PROFILE_FILES_MAX; i++) {
		snprintf(obj, sizeof(obj), "%064x", i);
		assert_int_equal(profile_recorder_note(r, 0, obj, 1, 1), 1);
	}
	snprintf(obj, sizeof(obj), "%064x", PROFILE_FILES_MAX);
	assert_int_equal(profile_recorder_note(r, 0, obj, 1, 1), 0);
	profile_recorder_unref(r);
}

static void test_store(void **state)
{
	(void)state;
	char dir[] = "/tmp/test-profile-XXXXXX", path[256], err[256] = "";
	const char *text = HEAD "layer " L0 "\nfile 0 " O1 " 300\n";
	struct profiles *ps;
	struct profile *p, *q;
	uint64_t n, bytes;
	int fd;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/profiles", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	/* a killed writer's temporary file goes at start */
	snprintf(path, sizeof(path), "%s/profiles/.tmp.1.0", dir);
	fd = open(path, O_WRONLY | O_CREAT, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(
		profiles_new(&(struct profiles_options){ .cache_dir = dir }, &ps, err, sizeof(err)),
		0);
	assert_int_equal(access(path, F_OK), -1);

	assert_int_equal(profiles_load(ps, IMG, &p), -ENOENT);
	assert_int_equal(parse(text, &p, err), 0);
	assert_int_equal(profiles_save(ps, p), 0);
	assert_int_equal(profiles_load(ps, IMG, &q), 0);
	assert_int_equal(q->n_files, 1);
	assert_string_equal(q->files[0].object, O1);
	profile_free(q);
	profiles_count(ps, &n, &bytes);
	assert_int_equal(n, 1);
	assert_int_equal(bytes, strlen(text));

	/* a damaged file is no profile, and goes */
	snprintf(path, sizeof(path), "%s/profiles/%s", dir, IMG + 7);
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "pullfs-profile 1\nimage", 22), 22);
	close(fd);
	assert_int_equal(profiles_load(ps, IMG, &q), -ENOENT);
	assert_int_equal(access(path, F_OK), -1);

	/* a file under another image's name: no profile of this one */
	assert_int_equal(profiles_save(ps, p), 0);
	char other[256];
	snprintf(other, sizeof(other), "%s/profiles/%064d", dir, 2);
	assert_int_equal(rename(path, other), 0);
	char img2[80];
	snprintf(img2, sizeof(img2), "sha256:%064d", 2);
	assert_int_equal(profiles_load(ps, img2, &q), -ENOENT);

	assert_int_equal(profiles_save(ps, p), 0);
	assert_int_equal(profiles_remove(ps, IMG), 0);
	assert_int_equal(profiles_remove(ps, IMG), -ENOENT);
	profile_free(p);
	profiles_free(ps);
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	assert_int_equal(system(path), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_good),     cmocka_unit_test(test_parse_bad),
		cmocka_unit_test(test_parse_limits),   cmocka_unit_test(test_recorder),
		cmocka_unit_test(test_recorder_count), cmocka_unit_test(test_store),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

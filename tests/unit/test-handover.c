/* handover: the records of the hand-over log, written and read back; what
 * a log that grew by appends means (the last record wins, a closed
 * backing is gone, a torn last line does not count); logs refused; the
 * compaction of this process's log (only the live records kept, records
 * noted during it in both logs, a compaction that does not reach the
 * supervisor leaving the old log whole and in use). */
#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "handover.h"
#include "macro.h"

static int parse(const char *text, struct handover_state *st)
{
	return handover_parse(text, strlen(text), st);
}

static void test_round_trip(void **state)
{
	static const unsigned char init[] = { 0x38, 0, 0, 0, 0x1a, 0, 0, 0, 0xff, 0x25, 0x0a };
	char *ns[] = { "127.0.0.1:5000", "127.0.0.1:5000/a b", "x/100%\n", "docker.io/library" };
	struct handover_image images[] = {
		{ 7, "sha256:aa", "127.0.0.1:5000/test/busybox:1" },
		{ 0x7fffffff, "sha256:bb", "weird name%with\tblanks" },
	};
	struct handover_backing backings[] = { { 1, "ab12" }, { 42, "o b%j" } };
	struct handover_backoff backoffs[] = {
		{ "127.0.0.1:5000/x:1", 3, 40000000000, 123456789, -ENOENT, "manifest: not found" },
		{ "r:2", 1, 10, 0, 0, "" },
	};
	struct handover_state in = {
		.version = HANDOVER_VERSION,
		.init = (void *)init,
		.init_len = sizeof(init),
		.init_reply_known = true,
		.init_reply = UINT64_C(0x1000000f0c3a00fb),
		.ns_keys = ns,
		.n_ns_keys = ARRAY_SIZE(ns),
		.images = images,
		.n_images = ARRAY_SIZE(images),
		.backings = backings,
		.n_backings = ARRAY_SIZE(backings),
		.backoffs = backoffs,
		.n_backoffs = ARRAY_SIZE(backoffs),
	};
	struct handover_state out;
	char *text = handover_format_state(&in);

	assert_non_null(text);
	/* one record a line, whatever the strings hold */
	size_t lines = 0;
	for (const char *p = text; *p; p++)
		lines += *p == '\n';
	assert_int_equal(lines, 3 + ARRAY_SIZE(ns) + ARRAY_SIZE(images) + ARRAY_SIZE(backings) +
					ARRAY_SIZE(backoffs));
	assert_int_equal(parse(text, &out), 0);
	assert_int_equal(out.version, HANDOVER_VERSION);
	assert_int_equal(out.init_len, sizeof(init));
	assert_memory_equal(out.init, init, sizeof(init));
	assert_true(out.init_reply_known);
	assert_true(out.init_reply == UINT64_C(0x1000000f0c3a00fb));
	assert_int_equal(out.n_ns_keys, ARRAY_SIZE(ns));
	for (size_t i = 0; i < ARRAY_SIZE(ns); i++)
		assert_string_equal(out.ns_keys[i], ns[i]);
	assert_int_equal(out.n_images, ARRAY_SIZE(images));
	for (size_t i = 0; i < ARRAY_SIZE(images); i++) {
		assert_int_equal(out.images[i].key, images[i].key);
		assert_string_equal(out.images[i].digest, images[i].digest);
		assert_string_equal(out.images[i].reference, images[i].reference);
	}
	assert_int_equal(out.n_backings, ARRAY_SIZE(backings));
	for (size_t i = 0; i < ARRAY_SIZE(backings); i++) {
		assert_int_equal(out.backings[i].id, backings[i].id);
		assert_string_equal(out.backings[i].object, backings[i].object);
	}
	assert_int_equal(out.n_backoffs, ARRAY_SIZE(backoffs));
	for (size_t i = 0; i < ARRAY_SIZE(backoffs); i++) {
		const struct handover_backoff *b = NULL;
		for (size_t j = 0; j < out.n_backoffs; j++)
			if (!strcmp(out.backoffs[j].reference, backoffs[i].reference))
				b = &out.backoffs[j];
		assert_non_null(b);
		assert_int_equal(b->failures, backoffs[i].failures);
		assert_int_equal(b->delay_ns, backoffs[i].delay_ns);
		assert_int_equal(b->last_ns, backoffs[i].last_ns);
		assert_int_equal(b->err, backoffs[i].err);
		assert_string_equal(b->message, backoffs[i].message);
	}
	handover_state_done(&out);
	free(text);
}

/* A log as appends leave it. */
static void test_log_semantics(void **state)
{
	struct handover_state st;
	const char *log = "v 1\n"
			  "ns a\n"
			  "ns a/b\n"
			  "ns a\n"
			  "img 5 sha256:old a/b/c:1\n"
			  "bk 3 obj3\n"
			  "bk 4 obj4\n"
			  "future-record with fields\n"
			  "img 5 sha256:new a/b/c:1\n"
			  "img 6 sha256:six six:1\n"
			  "img 7 sha256:seven seven:1\n"
			  "imgx 6\n"
			  "imgx 7\n"
			  "img 7 sha256:seven seven:2\n"
			  "imgx 8\n"
			  "bkx 3\n"
			  "init 0102\n"
			  "init 0304\n"
			  "bo a/b/c:1 1 10 5 2 =first\n"
			  "bo a/b/c:1 2 20 9 2 =second\n"
			  "bo gone:1 1 10 5 2 =\n"
			  "bok gone:1\n"
			  "bk 9 torn";

	assert_int_equal(parse(log, &st), 0);
	assert_int_equal(st.n_ns_keys, 2);
	assert_string_equal(st.ns_keys[0], "a");
	assert_string_equal(st.ns_keys[1], "a/b");
	/* a key gone and handed out again counts from its last record */
	assert_int_equal(st.n_images, 2);
	for (size_t i = 0; i < st.n_images; i++) {
		if (st.images[i].key == 5) {
			assert_string_equal(st.images[i].digest, "sha256:new");
		} else {
			assert_int_equal(st.images[i].key, 7);
			assert_string_equal(st.images[i].reference, "seven:2");
		}
	}
	assert_int_equal(st.n_backings, 1);
	assert_int_equal(st.backings[0].id, 4);
	assert_string_equal(st.backings[0].object, "obj4");
	assert_int_equal(st.init_len, 2);
	assert_memory_equal(st.init, "\x03\x04", 2);
	assert_int_equal(st.n_backoffs, 1);
	assert_string_equal(st.backoffs[0].reference, "a/b/c:1");
	assert_int_equal(st.backoffs[0].failures, 2);
	assert_int_equal(st.backoffs[0].delay_ns, 20);
	assert_string_equal(st.backoffs[0].message, "second");
	handover_state_done(&st);

	/* a log with nothing but its version: a process that saw no INIT */
	assert_int_equal(parse("v 1\n", &st), 0);
	assert_null(st.init);
	assert_false(st.init_reply_known);
	assert_int_equal(st.n_ns_keys + st.n_images + st.n_backings, 0);
	handover_state_done(&st);
}

static void test_refused(void **state)
{
	static const struct {
		const char *log;
		int r;
	} cases[] = {
		{ "", -EBADMSG },
		{ "v 1", -EBADMSG }, /* torn: no record at all */
		{ "ns a\n", -EBADMSG },
		{ "v 2\n", -EPROTO },
		{ "v x\n", -EBADMSG },
		{ "v 1\ninit 012\n", -EBADMSG },
		{ "v 1\ninit 01zz\n", -EBADMSG },
		{ "v 1\ninit\n", -EBADMSG },
		{ "v 1\ninitr\n", -EBADMSG },
		{ "v 1\ninitr 1g\n", -EBADMSG },
		{ "v 1\ninitr 10000000000000000\n", -EBADMSG },
		{ "v 1\nns\n", -EBADMSG },
		{ "v 1\nns a b\n", -EBADMSG },
		{ "v 1\nns %zz\n", -EBADMSG },
		{ "v 1\nns a%00b\n", -EBADMSG },
		{ "v 1\nns a%4\n", -EBADMSG },
		{ "v 1\nimg 0 sha256:a r\n", -EBADMSG },
		{ "v 1\nimg 4294967296 sha256:a r\n", -EBADMSG },
		{ "v 1\nimg -1 sha256:a r\n", -EBADMSG },
		{ "v 1\nimg 1 sha256:a\n", -EBADMSG },
		{ "v 1\nimgx 0\n", -EBADMSG },
		{ "v 1\nimgx 1 sha256:a\n", -EBADMSG },
		{ "v 1\nimgx x\n", -EBADMSG },
		{ "v 1\nbk 0 o\n", -EBADMSG },
		{ "v 1\nbk 2147483648 o\n", -EBADMSG },
		{ "v 1\nbk 1\n", -EBADMSG },
		{ "v 1\nbkx 1 o\n", -EBADMSG },
		{ "v 1\nbkx +1\n", -EBADMSG },
		{ "v 1\nbo r 0 10 5 2 =m\n", -EBADMSG },
		{ "v 1\nbo r 1 10 5 2 m\n", -EBADMSG },
		{ "v 1\nbo r 1 -10 5 2 =m\n", -EBADMSG },
		{ "v 1\nbo r 1 10 5 5000 =m\n", -EBADMSG },
		{ "v 1\nbo r 1 10 5 2\n", -EBADMSG },
		{ "v 1\nbok\n", -EBADMSG },
	};
	struct handover_state st;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		memset(&st, 0x55, sizeof(st));
		if (parse(cases[i].log, &st) != cases[i].r)
			fail_msg("\"%s\": not refused with %d", cases[i].log, cases[i].r);
	}
	/* a NUL inside is no text */
	assert_int_equal(handover_parse("v 1\nns a\0b\n", 11, &st), -EBADMSG);
}

static void test_records(void **state)
{
	char *s;

	/* images/ itself is every process's, never a record */
	assert_null(handover_format_ns(""));
	s = handover_format_ns("a b/%");
	assert_string_equal(s, "ns a%20b/%25\n");
	free(s);
	s = handover_format_backing_closed(12);
	assert_string_equal(s, "bkx 12\n");
	free(s);
	s = handover_format_init("\x00\xff", 2);
	assert_string_equal(s, "init 00ff\n");
	free(s);
	s = handover_format_init_reply(UINT64_C(0x1000000000));
	assert_string_equal(s, "initr 1000000000\n");
	free(s);
}

/* ---- compaction ---- */

static char *contents(int fd)
{
	static char buf[1 << 20];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

	assert_true(n >= 0);
	buf[n] = '\0';
	return buf;
}

/* The supervisor of the test: holds what it is given when `accept`; notes
 * one record as another thread would while the swap is on its way. */
static int held_fd = -1;
static bool accept_swap;

static int fake_swap(int fd, void *userdata)
{
	handover_note(userdata, handover_format_ns("during/the/swap"));
	if (!accept_swap)
		return -ECONNRESET; /* killed before the supervisor swapped */
	held_fd = dup(fd);
	return 0;
}

static int log_with(const char *text)
{
	int fd = memfd_create("test-handover", 0);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	return fd;
}

static void test_compaction(void **state)
{
	struct handover_state st;
	char *got;
	int old = log_with("v 1\n"), old_copy = dup(old);
	struct handover_log *log;

	assert_int_equal(handover_log_new(old, &log), 0);
	handover_set_swap(log, fake_swap, log);
	handover_note(log, handover_format_ns("gone/1"));
	handover_note(log, handover_format_ns("live/1"));
	handover_note(log, handover_format_image(3, "sha256:aa", "r:1"));
	handover_note(log, handover_format_image(3, "sha256:bb", "r:1"));
	handover_note(log, handover_format_image(4, "sha256:cc", "gone:1"));
	handover_note(log, handover_format_image_gone(4));
	handover_note(log, handover_format_backing(5, "obj"));
	handover_note(log, handover_format_backing_closed(5));
	handover_note(log, handover_format_backing(6, "obj6"));
	handover_note(log, handover_format_ns_forgotten("gone/1"));
	handover_note(log, handover_format_ns_forgotten("never/noted"));
	handover_note(log, handover_format_ns("gone/1/again"));

	/* the supervisor keeps the old log: it stays whole, and in use */
	accept_swap = false;
	assert_int_equal(handover_compact(log), -ECONNRESET);
	assert_int_equal(handover_log_fd(log), old);
	handover_note(log, handover_format_ns("after/refusal"));
	assert_non_null(strstr(contents(old_copy), "ns gone/1\n"));
	assert_non_null(strstr(contents(old_copy), "ns after/refusal\n"));
	assert_non_null(strstr(contents(old_copy), "ns during/the/swap\n"));

	accept_swap = true;
	assert_int_equal(handover_compact(log), 0);
	assert_int_not_equal(handover_log_fd(log), old);
	assert_true(held_fd >= 0);
	handover_note(log, handover_format_ns("after/swap"));
	got = contents(held_fd);
	/* exactly the live records, then what came during and after */
	assert_string_equal(got, "v 1\n"
				 "ns live/1\n"
				 "ns gone/1/again\n"
				 "ns during/the/swap\n"
				 "ns after/refusal\n"
				 "img 3 sha256:bb r:1\n"
				 "bk 6 obj6\n"
				 "ns during/the/swap\n"
				 "ns after/swap\n");
	assert_int_equal(handover_parse(got, strlen(got), &st), 0);
	assert_int_equal(st.n_ns_keys, 5);
	assert_int_equal(st.n_images, 1);
	assert_int_equal(st.n_backings, 1);
	handover_state_done(&st);
	assert_int_equal(handover_log_bytes(log), strlen(got));
	assert_int_equal(handover_compactions(log), 1);
	close(held_fd);
	close(old_copy);
	handover_log_free(log);
}

static void test_ns_forgotten(void **state)
{
	struct handover_state st;

	/* dropped, then made again: live once, at its new place */
	assert_int_equal(parse("v 1\nns a\nns b\nnsx a\nns c\nns a\nnsx b\nnsx zz\n", &st), 0);
	assert_int_equal(st.n_ns_keys, 2);
	assert_string_equal(st.ns_keys[0], "c");
	assert_string_equal(st.ns_keys[1], "a");
	handover_state_done(&st);
	assert_int_equal(parse("v 1\nnsx\n", &st), -EBADMSG);
}

/* The user a node is charged to: with its "ns", kept by a later "ns" of
 * it, dropped with it, and kept by a compaction. */
static void test_ns_owners(void **state)
{
	_cleanup_free_ char *rec = handover_format_ns_owned("a b", 65534), *text = NULL;
	struct handover_state st;

	assert_string_equal(rec, "ns a%20b\nnsu a%20b 65534\n");
	assert_null(handover_format_ns_owned("a", HANDOVER_NO_OWNER));
	assert_int_equal(parse("v 1\nns a\nnsu a 1000\nns b\nns c\nnsu c 7\nns a\nnsx c\n"
			       "ns c\nnsu zz 5\n",
			       &st),
			 0);
	assert_int_equal(st.n_ns_keys, 3);
	assert_string_equal(st.ns_keys[0], "a");
	assert_int_equal(st.ns_owners[0], 1000);
	assert_string_equal(st.ns_keys[1], "b");
	assert_int_equal(st.ns_owners[1], HANDOVER_NO_OWNER);
	assert_string_equal(st.ns_keys[2], "c");
	assert_int_equal(st.ns_owners[2], HANDOVER_NO_OWNER);
	text = handover_format_state(&st);
	assert_non_null(text);
	assert_string_equal(text, "v 1\nns a\nnsu a 1000\nns b\nns c\n");
	handover_state_done(&st);
	assert_int_equal(parse("v 1\nns a\nnsu a\n", &st), -EBADMSG);
	assert_int_equal(parse("v 1\nns a\nnsu a -1\n", &st), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),   cmocka_unit_test(test_log_semantics),
		cmocka_unit_test(test_refused),	     cmocka_unit_test(test_records),
		cmocka_unit_test(test_ns_forgotten), cmocka_unit_test(test_compaction),
		cmocka_unit_test(test_ns_owners),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

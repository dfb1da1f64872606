/* Unit tests for the events log: rotation at the cap (the tail kept, one
 * line per write, the oldest file dropped), the limit of a user's events
 * with its count in the next line and in EventsSuppressed, root and the
 * daemon never limited, the fields of a snapshots socket's request. */
#include <jansson.h>
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

#include "events.h"

#define S(x) ((int64_t)(x)*CLOCK_NS_PER_SEC)

struct fixture {
	char dir[64];
	char path[96];
	struct clock clock;
	int64_t now;
};

static int64_t fake_now(const struct clock *c)
{
	return *(const int64_t *)c->userdata;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/test-events.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/events.log", f->dir);
	f->clock.now_ns = fake_now;
	f->clock.userdata = &f->now;
	f->now = S(5000);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char p[128];

	for (int i = 0; i < 5; i++) {
		snprintf(p, sizeof(p), "%s%s%.0d", f->path, i ? "." : "", i);
		unlink(p);
	}
	rmdir(f->dir);
	free(f);
	return 0;
}

/* Lines of a file, each checked to be one JSON object; -1 when absent. */
static int count_lines(const char *path, const char *needle, int *ret_matching)
{
	FILE *fp = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	int n = 0, m = 0;

	if (!fp)
		return -1;
	while (getline(&line, &cap, fp) > 0) {
		json_t *j = json_loads(line, 0, NULL);

		assert_non_null(j);
		json_decref(j);
		n++;
		if (needle && strstr(line, needle))
			m++;
	}
	free(line);
	fclose(fp);
	if (ret_matching)
		*ret_matching = m;
	return n;
}

static void emit(struct events *ev, const char *reason, uid_t uid, int i)
{
	struct caller who = { .pid = 1234, .uid = uid, .comm = "test" };
	char msg[64];

	snprintf(msg, sizeof(msg), "event number %d", i);
	events_emit(ev, &(struct event){ .type = EVENT_WARNING,
					 .reason = reason,
					 .image = "registry.test/x:1",
					 .message = msg,
					 .caller = uid == (uid_t)-1 ? NULL : &who });
}

static void test_rotation(void **state)
{
	struct fixture *f = *state;
	struct events *ev;
	char p1[128], p2[128], p3[128];
	struct stat st;

	snprintf(p1, sizeof(p1), "%s.1", f->path);
	snprintf(p2, sizeof(p2), "%s.2", f->path);
	snprintf(p3, sizeof(p3), "%s.3", f->path);
	assert_int_equal(
		events_open(
			&(struct events_options){ .path = f->path, .max_bytes = 4096, .keep = 2 },
			&ev),
		0);
	for (int i = 0; i < 200; i++)
		emit(ev, "Pulled", 0, i);
	events_close(ev);
	/* capped, whole lines only, two old files and no third */
	assert_int_equal(stat(f->path, &st), 0);
	assert_true(st.st_size <= 4096);
	assert_int_equal(stat(p1, &st), 0);
	assert_true(st.st_size <= 4096 && st.st_size > 2048);
	assert_int_equal(stat(p2, &st), 0);
	assert_int_not_equal(stat(p3, &st), 0);
	int m = 0;
	assert_true(count_lines(f->path, "\"event number 199\"", &m) > 0);
	assert_int_equal(m, 1); /* the tail is in the current file */
	assert_true(count_lines(p1, NULL, NULL) > 0);
	assert_true(count_lines(p2, NULL, NULL) > 0);
}

/* A request of containerd's snapshots socket: its snapshot key and layer
 * beside the process; a file access has neither. */
static void test_snapshot_caller(void **state)
{
	struct fixture *f = *state;
	struct events *ev;
	struct caller who = { .pid = 42,
			      .uid = 0,
			      .comm = "containerd",
			      .snapshot = "default/7/extract-1 sha256:ab",
			      .layer = "sha256:cd" };
	int m;

	assert_int_equal(events_open(&(struct events_options){ .path = f->path }, &ev), 0);
	events_emit(ev, &(struct event){ .type = EVENT_NORMAL,
					 .reason = "Pulling",
					 .image = "registry.test/x:1",
					 .message = "m",
					 .caller = &who });
	emit(ev, "Pulled", 0, 1);
	events_close(ev);
	assert_int_equal(count_lines(f->path,
				     "\"comm\":\"containerd\",\"snapshot\":"
				     "\"default/7/extract-1 sha256:ab\",\"layer\":\"sha256:cd\"",
				     &m),
			 2);
	assert_int_equal(m, 1);
	assert_int_equal(count_lines(f->path, "\"snapshot\"", &m), 2);
	assert_int_equal(m, 1);
}

static void test_user_limited(void **state)
{
	struct fixture *f = *state;
	struct events *ev;
	int m;

	assert_int_equal(events_open(&(struct events_options){ .path = f->path,
							       .burst = 5,
							       .per_minute = 60,
							       .clock = &f->clock },
				     &ev),
			 0);
	for (int i = 0; i < 1000; i++)
		emit(ev, "InspectFailed", 65534, i);
	/* root and the daemon in the middle of the flood */
	emit(ev, "InspectFailed", 0, -1);
	emit(ev, "LayerCompleted", (uid_t)-1, -2);
	assert_int_equal(count_lines(f->path, "\"uid\":65534", &m), 7);
	assert_int_equal(m, 5);
	/* one second on: the next of the user's says what was dropped */
	f->now += S(1);
	emit(ev, "InspectFailed", 65534, 1000);
	assert_int_equal(count_lines(f->path, "\"suppressed\":995", &m), 8);
	assert_int_equal(m, 1);
	/* dropped again, then the user stops: the count comes on a flush once
	 * the limit lifted */
	for (int i = 0; i < 10; i++)
		emit(ev, "InspectFailed", 65534, 2000 + i);
	events_flush(ev);
	assert_int_equal(count_lines(f->path, "EventsSuppressed", &m), 8);
	assert_int_equal(m, 0);
	f->now += S(1);
	events_flush(ev);
	assert_int_equal(count_lines(f->path, "EventsSuppressed", &m), 9);
	assert_int_equal(m, 1);
	assert_int_equal(count_lines(f->path,
				     "\"suppressed\":10,\"suppressed_uid\":65534,"
				     "\"suppressed_reason\":\"InspectFailed\"",
				     &m),
			 9);
	assert_int_equal(m, 1);
	events_close(ev);
}

static void test_no_limit(void **state)
{
	struct fixture *f = *state;
	struct events *ev;

	assert_int_equal(events_open(&(struct events_options){ .path = f->path }, &ev), 0);
	for (int i = 0; i < 300; i++)
		emit(ev, "InspectFailed", 65534, i);
	events_close(ev);
	assert_int_equal(count_lines(f->path, NULL, NULL), 300);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_rotation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_snapshot_caller, setup, teardown),
		cmocka_unit_test_setup_teardown(test_user_limited, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_limit, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

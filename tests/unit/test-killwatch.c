/* killwatch: which /proc/TID/status texts say a thread is dying (a table
 * of pending, blocked, handled and ignored signals, traced threads and
 * namespace inits), the same judgement on real processes (none, this
 * thread, a child with a signal pending that it blocks), and a watched
 * entry of a live thread removed without its dying function called. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "killwatch.h"

/* A status text with these masks (hex, as the kernel writes them). */
static const char *status(const char *pnd, const char *shd, const char *blk, const char *ign,
			  const char *cgt, int tracer, const char *nspid)
{
	static char buf[1024];

	snprintf(buf, sizeof(buf),
		 "Name:\tsh\nState:\tS (sleeping)\nTgid:\t42\nPid:\t42\nTracerPid:\t%d\n"
		 "NSpid:\t%s\nThreads:\t1\nSigQ:\t1/63432\nSigPnd:\t%s\nShdPnd:\t%s\n"
		 "SigBlk:\t%s\nSigIgn:\t%s\nSigCgt:\t%s\nCapInh:\t0000000000000000\n",
		 tracer, nspid, pnd, shd, blk, ign, cgt);
	return buf;
}

#define Z "0000000000000000"
#define KILL "0000000000000100" /* SIGKILL, 9 */
#define TERM "0000000000004000" /* SIGTERM, 15 */
#define URG "0000000000400000"	/* SIGURG, 23 */
#define CHLD "0000000000010000" /* SIGCHLD, 17 */
#define QUIT "0000000000000004" /* SIGQUIT, 3 */
#define RT "0000000100000000"	/* SIGRTMIN+1, 33 */

static void test_status_table(void **state)
{
	static const struct {
		const char *what, *pnd, *shd, *blk, *ign, *cgt;
		int tracer;
		const char *nspid;
		bool dying;
	} t[] = {
		{ "nothing pending", Z, Z, Z, Z, Z, 0, "42", false },
		{ "SIGKILL on the thread", KILL, Z, Z, Z, Z, 0, "42", true },
		{ "SIGKILL on the process", Z, KILL, Z, Z, Z, 0, "42", true },
		{ "SIGKILL, traced", KILL, Z, Z, Z, Z, 7, "42", true },
		{ "SIGKILL, namespace init", KILL, Z, Z, Z, Z, 0, "42\t1", true },
		{ "SIGTERM, default", Z, TERM, Z, Z, Z, 0, "42", true },
		{ "SIGTERM beside a handled SIGURG", Z, "0000000000404000", Z, Z, URG, 0, "42",
		  true },
		{ "SIGTERM handled", Z, TERM, Z, Z, TERM, 0, "42", false },
		{ "SIGTERM ignored", Z, TERM, Z, TERM, Z, 0, "42", false },
		{ "SIGTERM blocked", Z, TERM, TERM, Z, Z, 0, "42", false },
		{ "SIGTERM, traced", Z, TERM, Z, Z, Z, 7, "42", false },
		{ "SIGTERM, namespace init", TERM, Z, Z, Z, Z, 0, "42\t1", false },
		{ "SIGQUIT, default (a core dump)", QUIT, Z, Z, Z, Z, 0, "42", true },
		{ "a real-time signal, default", Z, RT, Z, Z, Z, 0, "42", true },
		{ "SIGURG handled", Z, URG, Z, Z, URG, 0, "42", false },
		{ "SIGURG, default (ignored)", URG, Z, Z, Z, Z, 0, "42", false },
		{ "SIGCHLD, default (ignored)", Z, CHLD, Z, Z, Z, 0, "42", false },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		bool got = killwatch_status_dying(status(t[i].pnd, t[i].shd, t[i].blk, t[i].ign,
							 t[i].cgt, t[i].tracer, t[i].nspid));

		if (got != t[i].dying)
			fail_msg("%s: dying is %d, not %d", t[i].what, got, t[i].dying);
	}
	/* lines missing: nothing can be told */
	assert_false(killwatch_status_dying(""));
	assert_false(killwatch_status_dying("Name:\tx\nSigPnd:\n"));
}

static void test_processes(void **state)
{
	int ready[2], hold[2];
	pid_t child;
	char c;

	(void)state;
	assert_false(killwatch_dying(0));
	assert_false(killwatch_dying(-1));
	assert_false(killwatch_dying(INT32_MAX)); /* (above any pid_max) */
	assert_false(killwatch_dying(gettid()));

	/* A child with SIGTERM pending and blocked lives on. */
	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(hold), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		sigset_t set;

		sigemptyset(&set);
		sigaddset(&set, SIGTERM);
		sigprocmask(SIG_BLOCK, &set, NULL);
		close(ready[0]);
		close(hold[1]);
		if (write(ready[1], "r", 1) != 1)
			_exit(2);
		(void)!read(hold[0], &c, 1);
		_exit(0);
	}
	close(ready[1]);
	close(hold[0]);
	assert_int_equal(read(ready[0], &c, 1), 1);
	assert_int_equal(kill(child, SIGTERM), 0);
	assert_false(killwatch_dying(child));

	/* Watched and removed: its dying function is never called. */
	struct killwatch *kw = killwatch_new();
	/* (no dying function: a call would crash the test) */
	struct killwatch_entry e = { .tid = child };

	assert_non_null(kw);
	assert_int_equal(killwatch_add(kw, &e), 0);
	assert_int_equal(killwatch_add(kw, &e), 0); /* (once is enough) */
	killwatch_remove(kw, &e);
	killwatch_remove(kw, &e);
	killwatch_free(kw);
	killwatch_free(NULL);

	close(hold[1]); /* the child reads EOF and exits */
	int st;
	assert_int_equal(waitpid(child, &st, 0), child);
	close(ready[0]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_status_table),
		cmocka_unit_test(test_processes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

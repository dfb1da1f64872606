/* read_full: whole files and pipes, exactly at and over the cap, empty.
 * write_full: through short writes and EINTR, and its errors. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fileio.h"

static int file_with(size_t n)
{
	int fd = memfd_create("t", MFD_CLOEXEC);
	char *data = malloc(n ? n : 1);

	assert_true(fd >= 0);
	for (size_t i = 0; i < n; i++)
		data[i] = (char)('a' + i % 26);
	assert_int_equal(write(fd, data, n), (ssize_t)n);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	free(data);
	return fd;
}

static void test_sizes(void **state)
{
	static const size_t sizes[] = { 0, 1, 4095, 65535, 65536, 65537, 300000 };

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		int fd = file_with(sizes[i]);
		char *buf = NULL;
		size_t len = 99;

		assert_int_equal(read_full(fd, sizes[i], &buf, &len), 0);
		assert_int_equal(len, sizes[i]);
		assert_int_equal(buf[len], '\0');
		if (len)
			assert_int_equal(buf[len - 1], 'a' + (len - 1) % 26);
		free(buf);
		if (sizes[i]) {
			assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
			buf = NULL;
			assert_int_equal(read_full(fd, sizes[i] - 1, &buf, &len), -EFBIG);
			assert_null(buf);
		}
		close(fd);
	}
}

static void test_pipe(void **state)
{
	int p[2];
	char *buf = NULL;
	size_t len;

	/* No size to go by: the buffer grows as the data comes. */
	assert_int_equal(pipe(p), 0);
	assert_int_equal(write(p[1], "hello, pipe", 11), 11);
	close(p[1]);
	assert_int_equal(read_full(p[0], 1 << 20, &buf, &len), 0);
	assert_int_equal(len, 11);
	assert_string_equal(buf, "hello, pipe");
	free(buf);
	close(p[0]);
}

#define BIG (1u << 20)
#define MIN_CHUNK(n) ((n) < 4096 ? (n) : 4096)

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
	alarms++;
}

struct drain {
	int fd;
	char *buf;
	size_t len;
};

/* Reads the pipe slowly, so that the writer blocks and the timer's
 * signals cut its write(2)s short or interrupt them. */
static void *drain_thread(void *p)
{
	struct drain *d = p;
	ssize_t n;

	while ((n = read(d->fd, d->buf + d->len, MIN_CHUNK(BIG - d->len))) > 0) {
		d->len += (size_t)n;
		usleep(200);
	}
	return NULL;
}

static void test_write_interrupted(void **state)
{
	struct sigaction sa = { .sa_handler = on_alarm }; /* no SA_RESTART */
	struct itimerval it = { { 0, 500 }, { 0, 500 } }, off = { 0 };
	struct drain d = { 0 };
	char *data = malloc(BIG);
	sigset_t alrm, old;
	pthread_t t;
	int p[2];

	assert_non_null(data);
	for (size_t i = 0; i < BIG; i++)
		data[i] = (char)(i * 7 + i / 4096);
	d.buf = calloc(1, BIG);
	assert_non_null(d.buf);
	assert_int_equal(pipe(p), 0);
	d.fd = p[0];
	/* Only this thread takes the signal: the reader starts with it
	 * blocked. */
	sigemptyset(&alrm);
	sigaddset(&alrm, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &alrm, &old);
	assert_int_equal(pthread_create(&t, NULL, drain_thread, &d), 0);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	assert_int_equal(sigaction(SIGALRM, &sa, NULL), 0);
	assert_int_equal(setitimer(ITIMER_REAL, &it, NULL), 0);

	assert_int_equal(write_full(p[1], data, BIG), 0);

	setitimer(ITIMER_REAL, &off, NULL);
	close(p[1]);
	pthread_join(t, NULL);
	close(p[0]);
	assert_true(alarms > 0);
	assert_int_equal(d.len, BIG);
	assert_memory_equal(d.buf, data, BIG);
	free(d.buf);
	free(data);
}

static void test_write_errors(void **state)
{
	int p[2];

	assert_int_equal(write_full(-1, "x", 1), -EBADF);
	assert_int_equal(pipe(p), 0);
	assert_int_equal(write_full(p[1], "", 0), 0);
	assert_int_equal(write_full(p[0], "x", 1), -EBADF);
	signal(SIGPIPE, SIG_IGN);
	close(p[0]);
	assert_int_equal(write_full(p[1], "x", 1), -EPIPE);
	close(p[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_pipe),
		cmocka_unit_test(test_write_interrupted),
		cmocka_unit_test(test_write_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

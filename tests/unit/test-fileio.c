/* read_full: whole files and pipes, exactly at and over the cap, empty. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_pipe),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

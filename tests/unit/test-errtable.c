/* The errno table is the contract with every program that touches the
 * mount: pin it row by row to SPEC section 5. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "errname.h"
#include "errtable.h"

static const struct {
	int err;
	const char *name;
	const char *reason;
} expected[] = {
	{ EINVAL, "EINVAL", "InspectFailed" },
	{ ENOENT, "ENOENT", "Failed" },
	{ EPERM, "EPERM", "ErrImageNeverPull" },
	{ EACCES, "EACCES", "Failed" },
	{ EAGAIN, "EAGAIN", "BackOff" },
	{ EHOSTUNREACH, "EHOSTUNREACH", "Failed" },
	{ ETIMEDOUT, "ETIMEDOUT", "Failed" },
	{ ENOEXEC, "ENOEXEC", "Failed" },
	{ EBADMSG, "EBADMSG", "Failed" },
	{ ENOSPC, "ENOSPC", "Failed" },
	{ EDQUOT, "EDQUOT", "Failed" },
	{ EFBIG, "EFBIG", "Failed" },
	{ EROFS, "EROFS", "Failed" },
	{ EIO, "EIO", "Failed" },
};

static void test_rows_match_spec(void **state)
{
	assert_int_equal(errtable_len, sizeof(expected) / sizeof(expected[0]));
	for (unsigned i = 0; i < errtable_len; i++) {
		assert_int_equal(errtable[i].err, expected[i].err);
		assert_string_equal(errno_name(-errtable[i].err), expected[i].name);
		assert_string_equal(errtable[i].reason, expected[i].reason);
		assert_string_equal(errtable_reason(-expected[i].err), expected[i].reason);
		assert_non_null(errtable[i].cause);
	}
}

static void test_normalize(void **state)
{
	for (unsigned i = 0; i < errtable_len; i++)
		assert_int_equal(errtable_normalize(-errtable[i].err), -errtable[i].err);
	/* Anything outside the table is "anything else". */
	assert_int_equal(errtable_normalize(-ENOMEM), -EIO);
	assert_int_equal(errtable_normalize(-EPIPE), -EIO);
	assert_int_equal(errtable_normalize(-ENOTSUP), -EIO);
	assert_int_equal(errtable_normalize(-ECONNRESET), -EIO);
	assert_string_equal(errtable_reason(-ENOMEM), "Failed");
}

static void test_errno_names(void **state)
{
	assert_string_equal(errno_name(-EBADMSG), "EBADMSG");
	assert_string_equal(errno_name(-EHOSTUNREACH), "EHOSTUNREACH");
	assert_string_equal(errno_name(0), "OK");
	assert_string_equal(errno_name(-4095), "EUNKNOWN");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows_match_spec),
		cmocka_unit_test(test_normalize),
		cmocka_unit_test(test_errno_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

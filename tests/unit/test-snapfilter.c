/* snapfilter: containerd's filter syntax over snapshots, table-driven:
 * what each filter selects from a few snapshots, and what is refused. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "snapfilter.h"

static struct snap_info snaps[3];

static int setup(void **state)
{
	snaps[0] = (struct snap_info){ .name = "ns/1/sha256:aa",
				       .parent = "",
				       .kind = SNAP_COMMITTED,
				       .labels = json_pack("{s:s}", "containerd.io/snapshot.ref",
							   "sha256:aa") };
	snaps[1] =
		(struct snap_info){ .name = "ns/2/sha256:bb",
				    .parent = "ns/1/sha256:aa",
				    .kind = SNAP_COMMITTED,
				    .labels = json_pack("{s:s, s:s}", "containerd.io/snapshot.ref",
							"sha256:bb", "a_b", "x,y") };
	snaps[2] = (struct snap_info){ .name = "ctr",
				       .parent = "ns/2/sha256:bb",
				       .kind = SNAP_ACTIVE,
				       .labels = json_object() };
	return 0;
}

static int teardown(void **state)
{
	for (size_t i = 0; i < 3; i++)
		json_decref(snaps[i].labels);
	return 0;
}

/* Which of snaps a list of filters selects, as "012" digits. */
static void selected(const char *const *filters, size_t n, char *out)
{
	struct snapfilter *f = NULL;
	char eb[256];

	assert_int_equal(snapfilter_parse(filters, n, &f, eb, sizeof(eb)), 0);
	for (size_t i = 0; i < 3; i++)
		if (snapfilter_match(f, &snaps[i]))
			*out++ = (char)('0' + i);
	*out = '\0';
	snapfilter_free(f);
}

static void test_match(void **state)
{
	static const struct {
		const char *filter;
		const char *want;
	} cases[] = {
		{ "", "012" },
		{ "name==ctr", "2" },
		{ "name!=ctr", "01" },
		{ "kind==committed", "01" },
		{ "kind==active", "2" },
		{ "parent", "12" },
		{ "parent==\"ns/1/sha256:aa\"", "1" },
		{ "labels.\"containerd.io/snapshot.ref\"==sha256:bb", "1" },
		{ "labels.\"containerd.io/snapshot.ref\"==sha256:bb,parent==\"ns/1/sha256:aa\"",
		  "1" },
		{ "labels.\"containerd.io/snapshot.ref\"==sha256:bb,parent==other", "" },
		{ "labels.\"containerd.io/snapshot.ref\"", "01" },
		{ "labels.a_b==\"x,y\"", "1" },
		{ "name~=^ns/", "01" },
		{ "name~=/sha256:b+$/", "1" },
		{ "name~=/^sha256/", "" },
		{ "name~=/sha256:b+$/,kind==active", "" },
		{ "name~=\"b+$\"", "1" },
	};
	char out[4];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *f[] = { cases[i].filter };

		selected(f, 1, out);
		if (strcmp(out, cases[i].want) != 0)
			fail_msg("filter '%s' selected '%s', expected '%s'", cases[i].filter, out,
				 cases[i].want);
	}
	{
		/* a list: any of them */
		const char *f[] = { "name==ctr", "kind==committed,parent" };

		selected(f, 2, out);
		assert_string_equal(out, "12");
		selected(NULL, 0, out);
		assert_string_equal(out, "012");
	}
}

static void test_refused(void **state)
{
	static const char *const bad[] = {
		"bogus==1",
		"labels",
		"labels.",
		"name=ctr",
		"name==\"open",
		"name~=(",
		"name==a,",
		",name==a",
		"name==\"a\"b",
		"labels.\"k==v",
		"name==\"\\q\"",
		"kind<>x",
		/* exponential in glibc's regcomp */
		"name~=a+++++++++++++++++++++++++++++++",
		"name~=(((((((((a*)*)*)*)*)*)*)*)*)*",
	};
	struct snapfilter *f = NULL;
	char eb[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *one[] = { bad[i] };

		eb[0] = '\0';
		if (snapfilter_parse(one, 1, &f, eb, sizeof(eb)) != -EINVAL)
			fail_msg("filter '%s' was not refused", bad[i]);
		assert_non_null(strstr(eb, "filter"));
	}
	{
		/* more selectors than the bound */
		char big[1024] = "";
		const char *one[] = { big };

		for (int i = 0; i < 70; i++)
			strcat(big, i ? ",name==a" : "name==a");
		assert_int_equal(snapfilter_parse(one, 1, &f, eb, sizeof(eb)), -EINVAL);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_match, setup, teardown),
		cmocka_unit_test(test_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

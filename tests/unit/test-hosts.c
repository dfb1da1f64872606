/* Unit tests for the registry host configuration: the mirror line, its
 * errors, and the order in which endpoints are tried. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "hosts.h"

static int setup(void **state)
{
	struct registry_hosts *h;

	if (registry_hosts_new(&h) < 0)
		return -1;
	*state = h;
	return 0;
}

static int teardown(void **state)
{
	registry_hosts_free(*state);
	return 0;
}

static int set(struct registry_hosts *h, const char *reg, const char *k, const char *v)
{
	char why[256] = "";

	return registry_hosts_set(h, reg, k, v, why, sizeof(why));
}

static void test_order_and_caps(void **state)
{
	struct registry_hosts *h = *state;
	struct hosts_endpoint e[HOSTS_MAX_ENDPOINTS];
	size_t n;

	assert_int_equal(set(h, "docker.io", "mirror", "http://127.0.0.1:5001 insecure"), 0);
	assert_int_equal(set(h, "docker.io", "mirror",
			     "https://m.example.com/cache capabilities=pull ca-file=/etc/ca.pem"),
			 0);
	assert_int_equal(set(h, "docker.io", "mirror", "m2.example.com:8443/x/v2/ override-path"),
			 0);

	/* by tag: only mirrors that may resolve, then the registry */
	n = registry_hosts_endpoints(h, "docker.io", "registry-1.docker.io", false,
				     HOSTS_CAP_RESOLVE, e);
	assert_int_equal(n, 3);
	assert_false(e[0].https);
	assert_string_equal(e[0].host, "127.0.0.1:5001");
	assert_string_equal(e[0].path, "/v2");
	assert_true(e[0].mirror);
	assert_string_equal(e[0].ns, "docker.io");
	assert_true(e[1].https);
	assert_string_equal(e[1].host, "m2.example.com:8443");
	assert_string_equal(e[1].path, "/x/v2");
	assert_false(e[2].mirror);
	assert_true(e[2].https);
	assert_string_equal(e[2].host, "registry-1.docker.io");
	assert_string_equal(e[2].path, "/v2");

	/* by digest and blobs: every mirror in order */
	n = registry_hosts_endpoints(h, "docker.io", "registry-1.docker.io", false, HOSTS_CAP_PULL,
				     e);
	assert_int_equal(n, 4);
	assert_string_equal(e[1].host, "m.example.com");
	assert_string_equal(e[1].path, "/cache/v2");
	assert_string_equal(e[1].ca_file, "/etc/ca.pem");
	assert_string_equal(e[2].host, "m2.example.com:8443");
	assert_string_equal(e[3].host, "registry-1.docker.io");

	/* another registry has no mirrors */
	n = registry_hosts_endpoints(h, "quay.io", "quay.io", false, HOSTS_CAP_PULL, e);
	assert_int_equal(n, 1);
	assert_string_equal(e[0].host, "quay.io");
	assert_true(e[0].https);
	n = registry_hosts_endpoints(NULL, "quay.io", "quay.io", true, HOSTS_CAP_PULL, e);
	assert_int_equal(n, 1);
	assert_false(e[0].https);
}

static void test_registry_keys(void **state)
{
	struct registry_hosts *h = *state;
	struct hosts_endpoint e[HOSTS_MAX_ENDPOINTS];

	assert_false(registry_hosts_insecure(h, "r.example.com:5000"));
	assert_false(registry_hosts_known(h, "r.example.com:5000"));
	assert_false(registry_hosts_known(NULL, "r.example.com:5000"));
	assert_int_equal(set(h, "r.example.com:5000", "insecure", "true"), 0);
	assert_true(registry_hosts_known(h, "r.example.com:5000"));
	assert_false(registry_hosts_known(h, "r.example.com"));
	assert_int_equal(set(h, "r.example.com:5000", "ca-file", "/ca.pem"), 0);
	assert_int_equal(set(h, "r.example.com:5000", "client-cert", "/c.pem"), 0);
	assert_int_equal(set(h, "r.example.com:5000", "client-key", "/k.pem"), 0);
	assert_true(registry_hosts_insecure(h, "r.example.com:5000"));
	assert_int_equal(registry_hosts_endpoints(h, "r.example.com:5000", "r.example.com:5000",
						  false, HOSTS_CAP_PULL, e),
			 1);
	assert_false(e[0].https);
	assert_string_equal(e[0].ca_file, "/ca.pem");
	assert_string_equal(e[0].client_cert, "/c.pem");
	assert_string_equal(e[0].client_key, "/k.pem");
}

static void test_errors(void **state)
{
	struct registry_hosts *h = *state;
	static const char *bad_mirrors[] = {
		"",
		"http://127.0.0.1:5001", /* plain HTTP without insecure */
		"ftp://x",
		"https://",
		"https://a b", /* second word is no option */
		"https://x capabilities=push",
		"https://x capabilities=",
		"https://x capabilities=pull,bogus",
		"https://x ca-file=relative.pem",
		"https://x/a?b",
		"https://x/a/../b",
		"https://us@er:pw@x",
		"https://x unknown",
		"https:// override-path",
		"https://x override-path", /* override with no path */
	};
	char why[256];

	for (size_t i = 0; i < sizeof(bad_mirrors) / sizeof(bad_mirrors[0]); i++) {
		why[0] = '\0';
		if (registry_hosts_set(h, "docker.io", "mirror", bad_mirrors[i], why,
				       sizeof(why)) >= 0)
			fail_msg("mirror \"%s\" accepted", bad_mirrors[i]);
		assert_true(why[0] != '\0');
	}
	assert_int_equal(set(h, "docker.io", "insecure", "maybe"), -EINVAL);
	assert_int_equal(set(h, "docker.io", "ca-file", "rel"), -EINVAL);
	assert_int_equal(set(h, "docker.io", "bogus", "1"), -EINVAL);
	assert_int_equal(set(h, "bad/name", "insecure", "true"), -EINVAL);
	assert_int_equal(set(h, "", "insecure", "true"), -EINVAL);
	for (int i = 0; i < HOSTS_MAX_MIRRORS; i++)
		assert_int_equal(set(h, "many.io", "mirror", "https://m.example.com"), 0);
	assert_int_equal(set(h, "many.io", "mirror", "https://m.example.com"), -E2BIG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_order_and_caps, setup, teardown),
		cmocka_unit_test_setup_teardown(test_registry_keys, setup, teardown),
		cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

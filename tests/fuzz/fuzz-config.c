/* Fuzz target for the config file: the line splitter, and the registry
 * section keys it hands to hosts.h.  Keys come out trimmed, non-empty and
 * without "="; a parse never reads past its input. */
#include <stdio.h>
#include <string.h>

#include "conffile.h"
#include "fuzz.h"
#include "hosts.h"

static int on_line(void *userdata, const char *section, const char *key, const char *value,
		   char *errbuf, size_t errlen)
{
	struct registry_hosts *h = userdata;
	size_t n = strlen(key);

	FUZZ_CHECK(n > 0 && !strchr(key, '='));
	FUZZ_CHECK(key[0] != ' ' && key[0] != '\t' && key[n - 1] != ' ' && key[n - 1] != '\t');
	FUZZ_CHECK(strlen(section) < CONFIG_SECTION_MAX);
	if (section[0])
		return registry_hosts_set(h, section, key, value, errbuf, errlen);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct registry_hosts *h = NULL;
	char why[300];
	unsigned line = 0;
	FILE *f;

	if (size == 0 || registry_hosts_new(&h) < 0)
		return 0;
	f = fmemopen((void *)data, size, "r");
	if (f) {
		if (config_parse(f, on_line, h, &line, why, sizeof(why)) < 0)
			FUZZ_CHECK(line >= 1);
		fclose(f);
	}
	registry_hosts_free(h);
	return 0;
}

/* The config file's syntax: "key = value" lines, "#" comments, and
 * [registry "HOST[:PORT]"] sections whose keys belong to that registry.
 * This module only splits lines; what keys mean is the caller's.  Kept
 * apart from the daemon's main() so that it can be fuzzed. */
#pragma once

#include <stddef.h>
#include <stdio.h>

#define CONFIG_LINE_MAX 4096
#define CONFIG_SECTION_MAX 256

/* Called for each "key = value": section is "" outside any section.  A
 * value in double quotes has them removed.  Returns 0, or a negative
 * errno with a reason in errbuf to stop the parse. */
typedef int (*config_fn)(void *userdata, const char *section, const char *key, const char *value,
			 char *errbuf, size_t errlen);

/* Reads f to the end.  Returns 0, fn's error, or -EINVAL for a line that
 * is too long, a malformed section header or a line without "=".  On
 * failure *ret_line (may be NULL) is the 1-based line and errbuf says
 * why. */
int config_parse(FILE *f, config_fn fn, void *userdata, unsigned *ret_line, char *errbuf,
		 size_t errlen);

/* The one entry point every fuzz target defines.  libFuzzer calls it for
 * each input; replay.c calls it for each checked-in corpus file, so the
 * same code runs under a plain gcc build as an ordinary test. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A property that must hold for every input; failing it is a finding, so
 * it aborts (libFuzzer saves the input, the replay test fails). */
#define FUZZ_CHECK(cond)                                                                         \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                                 \
		}                                                                                \
	} while (0)

/* A path as the layer rules keep it: relative, no empty, "." or ".."
 * component, none over 255 bytes (the root itself is "", no component). */
static inline void fuzz_check_path(const char *p)
{
	FUZZ_CHECK(p);
	while (*p) {
		size_t len = strcspn(p, "/");

		FUZZ_CHECK(len > 0 && len <= 255);
		FUZZ_CHECK(!(p[0] == '.' && (len == 1 || (len == 2 && p[1] == '.'))));
		p += len;
		if (*p == '/') {
			p++;
			FUZZ_CHECK(*p);
		}
	}
}

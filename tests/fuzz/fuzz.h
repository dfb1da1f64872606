/* The one entry point every fuzz target defines.  libFuzzer calls it for
 * each input; replay.c calls it for each checked-in corpus file, so the
 * same code runs under a plain gcc build as an ordinary test. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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

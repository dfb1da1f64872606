/* Giving memory back after loading a large table: parsing an index or a
 * table of contents makes and frees many small blocks, which glibc keeps
 * in its arenas (one per thread that loaded) unless asked to return them,
 * so one large image would otherwise keep its load's peak as the
 * daemon's resident size for good. */
#pragma once

#include <malloc.h>
#include <stddef.h>

/* Below this many entries a load leaves too little behind to be worth a
 * walk of the heap. */
#define MEM_TRIM_MIN_ENTRIES 20000u

static inline void mem_trim_after(size_t entries)
{
	if (entries >= MEM_TRIM_MIN_ENTRIES)
		malloc_trim(0);
}

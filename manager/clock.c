/* The real clock behind struct clock. */
#include "clock.h"

#include <time.h>

static int64_t monotonic_now_ns(const struct clock *c)
{
	struct timespec ts;

	/* CLOCK_MONOTONIC cannot fail with a valid clock id and pointer. */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * CLOCK_NS_PER_SEC + ts.tv_nsec;
}

static const struct clock monotonic = {
	.now_ns = monotonic_now_ns,
};

const struct clock *clock_monotonic(void)
{
	return &monotonic;
}

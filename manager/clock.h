/* The clock the manager's timing logic reads (back-off windows, the pull
 * token bucket).  It is a table of one function pointer so that unit tests
 * can drive time by hand instead of sleeping. */
#pragma once

#include <stdint.h>

#define CLOCK_NS_PER_SEC INT64_C(1000000000)

struct clock {
	/* Nanoseconds on a clock that never goes backwards; the origin is
	 * arbitrary.  Must be safe to call from any thread. */
	int64_t (*now_ns)(const struct clock *c);
	void *userdata; /* for now_ns; the real clock has none */
};

/* The real CLOCK_MONOTONIC clock: a static object, never freed, safe from
 * any thread. */
const struct clock *clock_monotonic(void);

static inline int64_t clock_now_ns(const struct clock *c)
{
	return c->now_ns(c);
}

/* The real clock behind struct clock and the direct readings. */
#include "clock.h"

int64_t clock_mono_ns(void)
{
	struct timespec ts;

	/* CLOCK_MONOTONIC cannot fail with a valid clock id and pointer. */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * CLOCK_NS_PER_SEC + ts.tv_nsec;
}

int64_t clock_mono_ms(void)
{
	return clock_mono_ns() / 1000000;
}

struct timespec clock_mono_deadline(int64_t ns)
{
	int64_t at = clock_mono_ns() + ns;

	return (struct timespec){ .tv_sec = at / CLOCK_NS_PER_SEC,
				  .tv_nsec = at % CLOCK_NS_PER_SEC };
}

struct timespec clock_real_deadline(int64_t ns)
{
	struct timespec t;
	int64_t at;

	clock_gettime(CLOCK_REALTIME, &t);
	at = (int64_t)t.tv_nsec + ns;
	t.tv_sec += (time_t)(at / CLOCK_NS_PER_SEC);
	t.tv_nsec = (long)(at % CLOCK_NS_PER_SEC);
	return t;
}

static int64_t monotonic_now_ns(const struct clock *c)
{
	return clock_mono_ns();
}

static const struct clock monotonic = {
	.now_ns = monotonic_now_ns,
};

const struct clock *clock_monotonic(void)
{
	return &monotonic;
}

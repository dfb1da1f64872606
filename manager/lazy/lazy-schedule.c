/* The timing of lazy layers' background completion.  See lazy-schedule.h. */
#include "lazy-schedule.h"

#include <stddef.h>

#include "macro.h"

void lazy_schedule_init(struct lazy_schedule *s, const struct clock *clock, int64_t window_ns,
			uint64_t reader_count)
{
	*s = (struct lazy_schedule){ .clock = clock,
				     .usable_ns = clock_now_ns(clock),
				     .window_ns = MAX(window_ns, 0),
				     .reader_seen = reader_count,
				     .phase = LAZY_PHASE_WINDOW };
}

void lazy_schedule_readers(struct lazy_schedule *s, uint64_t reader_count, bool fetching)
{
	bool more = reader_count != s->reader_seen;

	if (!more && !fetching)
		return;
	s->reader_seen = reader_count;
	s->last_reader_ns = clock_now_ns(s->clock);
	if (more && s->phase == LAZY_PHASE_RETRYING)
		s->now = true;
}

void lazy_schedule_wake(struct lazy_schedule *s, bool waited)
{
	if (s->phase == LAZY_PHASE_RETRYING || (waited && s->phase == LAZY_PHASE_WINDOW))
		s->now = true;
}

unsigned lazy_schedule_retry_s(unsigned n)
{
	unsigned s = LAZY_RETRY_FIRST_S;

	for (unsigned i = 1; i < n && s < LAZY_RETRY_MAX_S; i++)
		s *= 2;
	return MIN(s, LAZY_RETRY_MAX_S);
}

/* When the start-up window ends: window after the start; once readers
 * fetched, a quiet spell after their last fetch (their start is over,
 * however early), but never before a part of the window, nor beyond the
 * cap. */
static int64_t window_end(const struct lazy_schedule *s)
{
	int64_t end = s->usable_ns + s->window_ns;

	if (s->window_ns == 0)
		return s->usable_ns;
	if (s->last_reader_ns)
		end = MAX(s->usable_ns + s->window_ns / LAZY_WINDOW_MIN_DIV,
			  s->last_reader_ns + s->window_ns / LAZY_WINDOW_QUIET_DIV);
	return MIN(end, s->usable_ns + LAZY_WINDOW_CAP * s->window_ns);
}

bool lazy_schedule_due(const struct lazy_schedule *s, int64_t *ret_wait_ns)
{
	int64_t now = clock_now_ns(s->clock), at;

	if (s->phase == LAZY_PHASE_RUNNING || s->now)
		at = now;
	else if (s->phase == LAZY_PHASE_WINDOW)
		at = window_end(s);
	else
		at = s->retry_at_ns;
	if (ret_wait_ns)
		*ret_wait_ns = MAX(at - now, 0);
	return at <= now;
}

bool lazy_schedule_link_fast(const struct lazy_schedule *s, uint64_t rate, uint64_t rest)
{
	const uint64_t ns = (uint64_t)CLOCK_NS_PER_SEC;

	if (rate == 0 || s->window_ns <= 0)
		return false;
	/* rest / rate <= window, in nanoseconds (the product saturates) */
	return (rest >= UINT64_MAX / ns ? UINT64_MAX : rest * ns) / rate <= (uint64_t)s->window_ns;
}

void lazy_schedule_running(struct lazy_schedule *s)
{
	s->phase = LAZY_PHASE_RUNNING;
	s->now = false;
}

unsigned lazy_schedule_failed(struct lazy_schedule *s)
{
	unsigned delay = lazy_schedule_retry_s(++s->failures);

	s->phase = LAZY_PHASE_RETRYING;
	s->now = false;
	s->retry_at_ns = clock_now_ns(s->clock) + (int64_t)delay * CLOCK_NS_PER_SEC;
	return delay;
}

/* The retry schedule of registry requests. */
#include "retry.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int64_t retry_delay_ms(const struct retry_policy *p, unsigned retry, int64_t waited_ms,
		       int64_t retry_after_ms)
{
	int64_t d;

	if (retry >= p->max_retries)
		return -1;
	if (retry_after_ms >= 0) {
		d = retry_after_ms;
	} else {
		d = p->base_ms;
		for (unsigned i = 0; i < retry && d < p->max_delay_ms; i++)
			d *= 2;
		if (d > p->max_delay_ms)
			d = p->max_delay_ms;
	}
	if (waited_ms + d > p->max_total_ms)
		return -1;
	return d;
}

int64_t retry_after_parse(const char *value, time_t now)
{
	struct tm tm = { 0 };
	const char *end;
	char *e;
	long long s;
	time_t t;

	if (!value)
		return -1;
	while (*value == ' ' || *value == '\t')
		value++;
	if (*value >= '0' && *value <= '9') {
		s = strtoll(value, &e, 10);
		while (*e == ' ' || *e == '\t')
			e++;
		if (*e || s < 0 || s > 86400LL * 365)
			return -1;
		return (int64_t)s * 1000;
	}
	end = strptime(value, "%a, %d %b %Y %H:%M:%S GMT", &tm);
	if (!end || *end)
		return -1;
	t = timegm(&tm);
	if (t == (time_t)-1)
		return -1;
	return t <= now ? 0 : (int64_t)(t - now) * 1000;
}

bool retry_status_is_transient(long status)
{
	return status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

void rate_floor_start(struct rate_floor *f, int64_t now_ms, uint64_t got)
{
	f->start_ms = now_ms;
	f->start_got = got;
}

int rate_floor_check(struct rate_floor *f, int64_t now_ms, uint64_t got, uint64_t total,
		     uint64_t *ret_got_in_window)
{
	uint64_t need, brought;

	if (f->min_bytes_per_s == 0 || f->window_ms <= 0 || now_ms - f->start_ms < f->window_ms)
		return 0;
	brought = got - f->start_got;
	if (__builtin_mul_overflow(f->min_bytes_per_s, (uint64_t)f->window_ms, &need))
		need = UINT64_MAX;
	else
		need /= 1000;
	/* The end of a blob need not fill a whole window. */
	if (total > f->start_got && need > total - f->start_got)
		need = total - f->start_got;
	if (brought < need) {
		if (ret_got_in_window)
			*ret_got_in_window = brought;
		return -ETIMEDOUT;
	}
	rate_floor_start(f, now_ms, got);
	return 0;
}

/* The retry schedule of registry requests. */
#include "retry.h"

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

#include "units.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"

size_t decimal_len(const char *s)
{
	size_t n = strspn(s, "0123456789");

	if (n > 0 && s[n] == '.' && s[n + 1] >= '0' && s[n + 1] <= '9')
		n += 1 + strspn(s + n + 1, "0123456789");
	return n;
}

int parse_uint64(const char *s, uint64_t *ret)
{
	unsigned long long n;

	if (!*s || s[strspn(s, "0123456789")])
		return -EINVAL;
	errno = 0;
	n = strtoull(s, NULL, 10);
	if (errno)
		return -ERANGE;
	*ret = n;
	return 0;
}

int parse_size(const char *s, uint64_t *ret)
{
	static const char units[] = "KMGT";
	size_t n = decimal_len(s);
	const char *end = s + n, *u;
	double bytes;

	if (n == 0)
		return -EINVAL;
	bytes = strtod(s, NULL);
	u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
	if (u) {
		for (const char *p = units; p <= u; p++)
			bytes *= 1024.0;
		end++;
		if (*end == 'i')
			end++;
	} else if (memchr(s, '.', n)) {
		return -EINVAL;
	}
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end)
		return -EINVAL;
	/* 2^64: the first value a uint64_t cannot hold. */
	if (bytes >= 18446744073709551616.0)
		return -ERANGE;
	*ret = (uint64_t)bytes;
	return 0;
}

int parse_duration(const char *s, double *ret)
{
	double total = 0;

	if (!*s)
		return -EINVAL;
	while (*s) {
		size_t n = decimal_len(s);
		double v;

		if (n == 0)
			return -EINVAL;
		v = strtod(s, NULL);
		switch (s[n]) {
		case '\0':
		case 's':
			break;
		case 'm':
			v *= 60;
			break;
		case 'h':
			v *= 3600;
			break;
		case 'd':
			v *= 86400;
			break;
		default:
			return -EINVAL;
		}
		total += v;
		s += s[n] ? n + 1 : n;
	}
	*ret = total;
	return 0;
}

void format_size(double bytes, char *buf, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB" };
	size_t u = 0;

	if (bytes < 1024) {
		snprintf(buf, len, "%.0f B", bytes < 0 ? 0 : bytes);
		return;
	}
	bytes /= 1024;
	while (bytes >= 1024 && u + 1 < ARRAY_SIZE(units)) {
		bytes /= 1024;
		u++;
	}
	snprintf(buf, len, bytes < 10 ? "%.1f %s" : "%.0f %s", bytes, units[u]);
}

void format_duration(double seconds, char *buf, size_t len)
{
	long long s = (long long)seconds, m, h;

	if (s < 0)
		s = 0;
	m = s / 60;
	h = s / 3600;
	if (s < 120)
		snprintf(buf, len, "%llds", s);
	else if (m < 10)
		snprintf(buf, len, s % 60 ? "%lldm%llds" : "%lldm", m, s % 60);
	else if (m < 180)
		snprintf(buf, len, "%lldm", m);
	else if (h < 8)
		snprintf(buf, len, m % 60 ? "%lldh%lldm" : "%lldh", h, m % 60);
	else if (h < 48)
		snprintf(buf, len, "%lldh", h);
	else if (h < 192)
		snprintf(buf, len, h % 24 ? "%lldd%lldh" : "%lldd", h / 24, h % 24);
	else if (h < 24 * 365 * 2)
		snprintf(buf, len, "%lldd", h / 24);
	else
		snprintf(buf, len, "%lldy", h / (24 * 365));
}

/* What pullfsctl prints besides the verbs' own lines: messages on
 * stderr, aligned tables, times read from the daemon's documents, and
 * members of those documents. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pullfsctl.h"
#include "units.h"

void err_msg(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("pullfsctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fputs("pullfsctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see pullfsctl %s%s--help)\n", cmd ? cmd : "", cmd ? " " : "");
	return EXIT_USAGE;
}

double now_realtime(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

double now_monotonic(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int parse_rfc3339(const char *s, double *ret)
{
	struct tm tm = { 0 };
	const char *p;
	double frac = 0;
	long off = 0;

	p = strptime(s, "%Y-%m-%d", &tm);
	if (!p)
		return -EINVAL;
	if (*p == 'T' || *p == 't' || *p == ' ') {
		p = strptime(p + 1, "%H:%M:%S", &tm);
		if (!p)
			return -EINVAL;
		if (*p == '.') {
			char *end;
			frac = strtod(p, &end);
			p = end;
		}
		if (*p == 'Z' || *p == 'z') {
			p++;
		} else if (*p == '+' || *p == '-') {
			int hh, mm;
			if (sscanf(p + 1, "%2d:%2d", &hh, &mm) != 2)
				return -EINVAL;
			off = (hh * 3600L + mm * 60L) * (*p == '-' ? -1 : 1);
			p += 6;
		}
	}
	if (*p)
		return -EINVAL;
	*ret = (double)timegm(&tm) - (double)off + frac;
	return 0;
}

/* Display width of UTF-8 text, counting code points. */
static size_t text_width(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			n++;
	return n;
}

struct table *table_new(size_t ncols, ...)
{
	struct table *t = calloc(1, sizeof(*t));
	va_list ap;

	if (!t)
		return NULL;
	t->ncols = ncols;
	t->width = calloc(ncols, sizeof(*t->width));
	if (!t->width) {
		free(t);
		return NULL;
	}
	va_start(ap, ncols);
	for (size_t i = 0; i < ncols; i++)
		t->width[i] = text_width(va_arg(ap, const char *));
	va_end(ap);
	/* The header is row 0, added by the caller's first table_add. */
	return t;
}

void table_free(struct table *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	free(t->width);
	free(t);
}

int table_add(struct table *t, const char *const *cells)
{
	char **n = realloc(t->cells, (t->nrows + 1) * t->ncols * sizeof(*n));

	if (!n)
		return -ENOMEM;
	t->cells = n;
	for (size_t i = 0; i < t->ncols; i++) {
		char *c = strdup(cells[i] ? cells[i] : "");
		if (!c) {
			for (size_t j = 0; j < i; j++)
				free(n[t->nrows * t->ncols + j]);
			return -ENOMEM;
		}
		n[t->nrows * t->ncols + i] = c;
		t->width[i] = MAX(t->width[i], text_width(c));
	}
	t->nrows++;
	return 0;
}

void table_print_row(const struct table *t, const char *const *cells, FILE *f)
{
	for (size_t i = 0; i < t->ncols; i++) {
		const char *c = cells[i] ? cells[i] : "";
		if (i + 1 == t->ncols) {
			fputs(c, f);
			break;
		}
		fputs(c, f);
		for (size_t w = text_width(c); w < t->width[i] + 3; w++)
			fputc(' ', f);
	}
	fputc('\n', f);
}

void table_print(const struct table *t, FILE *f)
{
	for (size_t r = 0; r < t->nrows; r++)
		table_print_row(t, (const char *const *)&t->cells[r * t->ncols], f);
}

const char *jstr(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? s : NULL;
}

double jnum(const json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_number(v) ? json_number_value(v) : 0;
}

bool jhas(const json_t *o, const char *key)
{
	return json_is_number(json_object_get(o, key));
}

void format_age(const char *rfc3339, double now, char *buf, size_t len)
{
	double t;

	if (!rfc3339 || parse_rfc3339(rfc3339, &t) < 0) {
		snprintf(buf, len, "%s", rfc3339 ? rfc3339 : "-");
		return;
	}
	format_duration(now - t, buf, len);
	if (strlen(buf) + 5 < len)
		strcat(buf, " ago");
}

/* What pullfsctl prints besides the verbs' own lines: text made safe for
 * a terminal, messages on stderr, aligned tables, times read from the
 * daemon's documents, and members of those documents. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pullfsctl.h"
#include "clock.h"
#include "units.h"

/* The length of the UTF-8 sequence at s that encodes one code point
 * (shortest form, not a surrogate, at most U+10FFFF) and the code point;
 * 0 when it is not one. */
static size_t utf8_char(const unsigned char *s, uint32_t *ret)
{
	size_t n;
	uint32_t c;

	if (s[0] < 0x80) {
		*ret = s[0];
		return 1;
	}
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2, c = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3, c = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4, c = s[0] & 0x07;
	else
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	if ((n == 3 && c < 0x800) || (n == 4 && (c < 0x10000 || c > 0x10ffff)) ||
	    (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*ret = c;
	return n;
}

/* Code points a terminal acts on or that change how the text around
 * them is shown: C0 and C1 controls, DEL, and the bidirectional
 * overrides and isolates (text that reads other than it is). */
static bool acts_on_terminal(uint32_t c)
{
	return c < 0x20 || (c >= 0x7f && c <= 0x9f) || (c >= 0x202a && c <= 0x202e) ||
	       (c >= 0x2066 && c <= 0x2069);
}

char *text_escape(const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	/* at most 6 bytes out ("\u202e") for each byte in */
	char *out = malloc(strlen((const char *)p) * 6 + 1), *o = out;

	if (!out)
		return NULL;
	while (*p) {
		uint32_t c;
		size_t n = utf8_char(p, &c);

		if (n == 0) {
			o += sprintf(o, "\\x%02x", *p++);
			continue;
		}
		if (!acts_on_terminal(c) && c != '\\') {
			memcpy(o, p, n);
			o += n;
		} else if (c == '\n' || c == '\r' || c == '\t' || c == '\\') {
			*o++ = '\\';
			*o++ = c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : '\\';
		} else if (c < 0x80) {
			o += sprintf(o, "\\x%02x", (unsigned)c);
		} else {
			o += sprintf(o, "\\u%04x", (unsigned)c);
		}
		p += n;
	}
	*o = '\0';
	return out;
}

const char *esc(const char *s)
{
	static __thread char *ring[16];
	static __thread unsigned next;
	char *e = text_escape(s);

	free(ring[next]);
	ring[next] = e;
	next = (next + 1) % ARRAY_SIZE(ring);
	return e ? e : "?";
}

/* "pullfsctl: MESSAGE" on f, the message escaped (it quotes names). */
static void vmessage(FILE *f, const char *fmt, va_list ap)
{
	_cleanup_free_ char *msg = NULL;

	fputs("pullfsctl: ", f);
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	fputs(esc(msg ? msg : fmt), f);
}

void err_msg(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	va_start(ap, fmt);
	vmessage(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmessage(stderr, fmt, ap);
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
	return (double)clock_mono_ns() / 1e9;
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
		char *c = text_escape(cells[i]);
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

/* A row of cells already escaped. */
static void print_row(const struct table *t, const char *const *cells, FILE *f)
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

void table_print_row(const struct table *t, const char *const *cells, FILE *f)
{
	_cleanup_free_ char **e = calloc(t->ncols, sizeof(*e));

	for (size_t i = 0; e && i < t->ncols; i++)
		e[i] = text_escape(cells[i]);
	if (e)
		print_row(t, (const char *const *)e, f);
	for (size_t i = 0; e && i < t->ncols; i++)
		free(e[i]);
}

void table_print(const struct table *t, FILE *f)
{
	for (size_t r = 0; r < t->nrows; r++)
		print_row(t, (const char *const *)&t->cells[r * t->ncols], f);
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

/* List filters of the snapshots service (snapfilter.h). */
#include "snapfilter.h"

#include <errno.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "errname.h"
#include "macro.h"

/* Bounds that keep one request's filter small. */
#define FILTER_TEXT_MAX 16384
#define SELECTORS_MAX 64
/* glibc's regcomp() copies the tree under a repetition for each one
 * around it: "a++++..." takes exponential time and memory.  Patterns are
 * short and their repetitions few; beyond these bounds they are
 * refused. */
#define REGEX_LEN_MAX 256
#define REGEX_REPEATS_MAX 8

enum field { F_NAME, F_PARENT, F_KIND, F_LABEL };
enum op { OP_PRESENT, OP_EQ, OP_NE, OP_MATCH };

struct selector {
	enum field field;
	enum op op;
	char *label; /* F_LABEL */
	char *value;
	regex_t re; /* OP_MATCH */
};

struct conjunction {
	struct selector *sel;
	size_t n;
};

struct snapfilter {
	struct conjunction *any;
	size_t n;
};

static void selector_done(struct selector *s)
{
	free(s->label);
	free(s->value);
	if (s->op == OP_MATCH)
		regfree(&s->re);
}

void snapfilter_free(struct snapfilter *f)
{
	if (!f)
		return;
	for (size_t i = 0; i < f->n; i++) {
		for (size_t k = 0; k < f->any[i].n; k++)
			selector_done(&f->any[i].sel[k]);
		free(f->any[i].sel);
	}
	free(f->any);
	free(f);
}

static bool field_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_';
}

/* A quoted string at *p (opening quote q, "" or //), unescaped into a new
 * string; *p moves past the closing quote. */
static int quoted(const char **p, char **ret, char *errbuf, size_t errlen)
{
	char q = **p, *out, *o;
	const char *s = *p + 1;

	out = o = malloc(strlen(s) + 1);
	if (!out)
		return -ENOMEM;
	for (; *s && *s != q; s++) {
		if (*s == '\\') {
			s++;
			switch (*s) {
			case 'n':
				*o++ = '\n';
				continue;
			case 't':
				*o++ = '\t';
				continue;
			case '\\':
			case '"':
			case '/':
				*o++ = *s;
				continue;
			default:
				free(out);
				errbuf_fail(-EINVAL, errbuf, errlen,
					    "filter: unknown escape in a quoted string");
				return -EINVAL;
			}
		}
		*o++ = *s;
	}
	if (*s != q) {
		free(out);
		errbuf_fail(-EINVAL, errbuf, errlen, "filter: unterminated quoted string");
		return -EINVAL;
	}
	*o = '\0';
	*p = s + 1;
	*ret = out;
	return 0;
}

/* One part of a field path: an identifier or a quoted string. */
static int field_part(const char **p, char **ret, char *errbuf, size_t errlen)
{
	const char *s = *p;

	if (*s == '"')
		return quoted(p, ret, errbuf, errlen);
	while (field_char(*s))
		s++;
	if (s == *p) {
		errbuf_fail(-EINVAL, errbuf, errlen, "filter: a field name is expected");
		return -EINVAL;
	}
	*ret = strndup(*p, (size_t)(s - *p));
	if (!*ret)
		return -ENOMEM;
	*p = s;
	return 0;
}

static bool regex_bounded(const char *re)
{
	size_t n = 0;

	if (strlen(re) > REGEX_LEN_MAX)
		return false;
	for (; *re; re++)
		if (strchr("*+?{", *re))
			n++;
	return n <= REGEX_REPEATS_MAX;
}

static int selector_parse(const char **p, struct selector *sel, char *errbuf, size_t errlen)
{
	_cleanup_free_ char *first = NULL;
	const char *s;
	int r;

	r = field_part(p, &first, errbuf, errlen);
	if (r < 0)
		return r;
	if (strcmp(first, "name") == 0)
		sel->field = F_NAME;
	else if (strcmp(first, "parent") == 0)
		sel->field = F_PARENT;
	else if (strcmp(first, "kind") == 0)
		sel->field = F_KIND;
	else if (strcmp(first, "labels") == 0 && **p == '.') {
		(*p)++;
		sel->field = F_LABEL;
		r = field_part(p, &sel->label, errbuf, errlen);
		if (r < 0)
			return r;
	} else
		return errbuf_fail(-EINVAL, errbuf, errlen, "filter: unknown field \"%.64s\"",
				   first);
	s = *p;
	if (*s == ',' || !*s) {
		sel->op = OP_PRESENT;
		return 0;
	}
	if (s[0] == '=' && s[1] == '=')
		sel->op = OP_EQ;
	else if (s[0] == '!' && s[1] == '=')
		sel->op = OP_NE;
	else if (s[0] == '~' && s[1] == '=')
		sel->op = OP_MATCH;
	else
		return errbuf_fail(-EINVAL, errbuf, errlen, "filter: an operator is expected");
	s += 2;
	if (*s == '"' || *s == '/') {
		r = quoted(&s, &sel->value, errbuf, errlen);
		if (r < 0)
			return r;
	} else {
		size_t n = strcspn(s, ",");

		sel->value = strndup(s, n);
		if (!sel->value)
			return -ENOMEM;
		s += n;
	}
	if (*s && *s != ',')
		return errbuf_fail(-EINVAL, errbuf, errlen,
				   "filter: ',' or the end is expected after a value");
	*p = s;
	if (sel->op == OP_MATCH && !regex_bounded(sel->value)) {
		sel->op = OP_EQ; /* nothing compiled to free */
		return errbuf_fail(-EINVAL, errbuf, errlen,
				   "filter: regular expression over %d bytes or %d repetitions",
				   REGEX_LEN_MAX, REGEX_REPEATS_MAX);
	}
	if (sel->op == OP_MATCH && regcomp(&sel->re, sel->value, REG_EXTENDED | REG_NOSUB) != 0) {
		sel->op = OP_EQ; /* nothing compiled to free */
		return errbuf_fail(-EINVAL, errbuf, errlen,
				   "filter: invalid regular expression \"%.64s\"", sel->value);
	}
	return 0;
}

static int conjunction_parse(const char *text, struct conjunction *c, char *errbuf, size_t errlen)
{
	const char *p = text;

	if (strlen(text) > FILTER_TEXT_MAX)
		return errbuf_fail(-EINVAL, errbuf, errlen, "filter: longer than %d bytes",
				   FILTER_TEXT_MAX);
	while (*p) {
		int r;

		if (c->n == SELECTORS_MAX)
			return errbuf_fail(-EINVAL, errbuf, errlen,
					   "filter: more than %d selectors", SELECTORS_MAX);
		if (!c->sel) {
			c->sel = calloc(SELECTORS_MAX, sizeof(*c->sel));
			if (!c->sel)
				return -ENOMEM;
		}
		r = selector_parse(&p, &c->sel[c->n], errbuf, errlen);
		c->n++; /* parts parsed are freed with it */
		if (r < 0)
			return r;
		if (*p == ',' && !*++p)
			return errbuf_fail(-EINVAL, errbuf, errlen, "filter: ends with ','");
	}
	return 0;
}

int snapfilter_parse(const char *const *filters, size_t n, struct snapfilter **ret, char *errbuf,
		     size_t errlen)
{
	struct snapfilter *f = calloc(1, sizeof(*f));
	int r = 0;

	if (!f)
		return -ENOMEM;
	if (n) {
		f->any = calloc(n, sizeof(*f->any));
		if (!f->any) {
			free(f);
			return -ENOMEM;
		}
	}
	for (size_t i = 0; i < n && r == 0; i++, f->n++)
		r = conjunction_parse(filters[i], &f->any[i], errbuf, errlen);
	if (r < 0) {
		snapfilter_free(f);
		return r;
	}
	*ret = f;
	return 0;
}

static const char *kind_text(enum snap_kind k)
{
	return k == SNAP_VIEW ? "view" : k == SNAP_ACTIVE ? "active" : "committed";
}

static bool selector_match(const struct selector *sel, const struct snap_info *info)
{
	const char *v = NULL;

	switch (sel->field) {
	case F_NAME:
		v = info->name;
		break;
	case F_PARENT:
		v = info->parent;
		break;
	case F_KIND:
		v = kind_text(info->kind);
		break;
	case F_LABEL:
		v = json_string_value(json_object_get(info->labels, sel->label));
		break;
	}
	switch (sel->op) {
	case OP_PRESENT:
		return v && v[0];
	case OP_EQ:
		return v && strcmp(v, sel->value) == 0;
	case OP_NE:
		return !v || strcmp(v, sel->value) != 0;
	case OP_MATCH:
		return v && regexec(&sel->re, v, 0, NULL, 0) == 0;
	}
	return false;
}

bool snapfilter_match(const struct snapfilter *f, const struct snap_info *info)
{
	if (!f || f->n == 0)
		return true;
	for (size_t i = 0; i < f->n; i++) {
		bool all = true;

		for (size_t k = 0; k < f->any[i].n && all; k++)
			all = selector_match(&f->any[i].sel[k], info);
		if (all)
			return true;
	}
	return false;
}

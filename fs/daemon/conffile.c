#include "conffile.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

/* `[registry "NAME"]` -> NAME in out; false when the line is not that. */
static bool parse_section(char *line, char *out, size_t outlen)
{
	char *p, *q, *end = line + strlen(line) - 1;

	if (end <= line || *end != ']')
		return false;
	*end = '\0';
	p = trim(line + 1);
	if (strncmp(p, "registry", 8) != 0)
		return false;
	p = trim(p + 8);
	if (*p != '"')
		return false;
	q = strchr(p + 1, '"');
	if (!q || q == p + 1 || *trim(q + 1) || (size_t)(q - p - 1) >= outlen)
		return false;
	memcpy(out, p + 1, (size_t)(q - p - 1));
	out[q - p - 1] = '\0';
	return true;
}

int config_parse(FILE *f, config_fn fn, void *userdata, unsigned *ret_line, char *errbuf,
		 size_t errlen)
{
	char line[CONFIG_LINE_MAX];
	char section[CONFIG_SECTION_MAX] = "";
	unsigned lineno = 0;
	int r = 0;

	while (fgets(line, sizeof(line), f)) {
		char *key, *val, *eq;
		size_t vlen;

		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			snprintf(errbuf, errlen, "line too long");
			r = -EINVAL;
			break;
		}
		key = trim(line);
		if (!*key || *key == '#')
			continue;
		if (*key == '[') {
			if (!parse_section(key, section, sizeof(section))) {
				snprintf(errbuf, errlen, "expected [registry \"HOST[:PORT]\"]");
				r = -EINVAL;
				break;
			}
			continue;
		}
		eq = strchr(key, '=');
		if (!eq) {
			snprintf(errbuf, errlen, "expected \"key = value\"");
			r = -EINVAL;
			break;
		}
		*eq = '\0';
		key = trim(key);
		val = trim(eq + 1);
		if (!*key) {
			snprintf(errbuf, errlen, "expected \"key = value\"");
			r = -EINVAL;
			break;
		}
		vlen = strlen(val);
		if (vlen >= 2 && val[0] == '"' && val[vlen - 1] == '"') {
			val[vlen - 1] = '\0';
			val++;
		}
		r = fn(userdata, section, key, val, errbuf, errlen);
		if (r < 0)
			break;
	}
	if (r < 0 && ret_line)
		*ret_line = lineno;
	return r;
}

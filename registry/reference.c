/* Image references.  The grammar is docker's (distribution/reference),
 * scanned by hand rather than with regular expressions: every rule is a
 * small character class, and a scanner gives exact positions for the
 * domain/path/tag/digest split without allocating. */
#include "reference.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "macro.h"

#define LEGACY_DOMAIN "index.docker.io"
#define OFFICIAL_PREFIX "library/"

DEFINE_TRIVIAL_CLEANUP_FUNC(struct reference *, reference_free)

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || is_digit(c);
}

static bool is_alnum(char c)
{
	return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

static bool is_hex(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool is_word(char c)
{
	return is_alnum(c) || c == '_';
}

/* [a-z0-9]+(([._]|__|[-]+)[a-z0-9]+)* over s[0..n). */
static bool path_component_valid(const char *s, size_t n)
{
	size_t i = 0;

	for (;;) {
		size_t start = i;

		while (i < n && is_lower_alnum(s[i]))
			i++;
		if (i == start)
			return false; /* empty run: leading, trailing or doubled separator */
		if (i == n)
			return true;

		if (s[i] == '.') {
			i++;
		} else if (s[i] == '_') {
			i++;
			if (i < n && s[i] == '_')
				i++;
		} else if (s[i] == '-') {
			while (i < n && s[i] == '-')
				i++;
		} else {
			return false;
		}
	}
}

/* [a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])? */
static bool domain_component_valid(const char *s, size_t n)
{
	if (n == 0 || !is_alnum(s[0]) || !is_alnum(s[n - 1]))
		return false;
	for (size_t i = 1; i + 1 < n; i++)
		if (!is_alnum(s[i]) && s[i] != '-')
			return false;
	return true;
}

static bool port_syntax_valid(const char *s, size_t n)
{
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!is_digit(s[i]))
			return false;
	return true;
}

/* docker's grammar stops at [0-9]+; a port outside 1..65535 would only
 * fail later, as a URL curl refuses, with the wrong errno. */
static bool port_in_range(const char *s, size_t n)
{
	unsigned long port = 0;

	for (size_t i = 0; i < n; i++) {
		port = port * 10 + (unsigned long)(s[i] - '0');
		if (port > 65535)
			return false;
	}
	return port > 0;
}

/* Splits a domain into host and optional port.  *ret_host_len covers the
 * host including IPv6 brackets; returns false on bad syntax, and, with
 * check_port, on a port outside 1..65535.  When ret_has_dot is set it
 * tells whether a dotted host name was seen. */
static bool domain_scan(const char *s, size_t n, bool check_port, size_t *ret_host_len,
			bool *ret_has_dot)
{
	size_t host_len;
	bool has_dot = false;

	if (n > 0 && s[0] == '[') {
		const char *close = memchr(s, ']', n);

		if (!close || close == s + 1)
			return false;
		for (const char *p = s + 1; p < close; p++)
			if (!is_hex(*p) && *p != ':')
				return false;
		host_len = (size_t)(close - s) + 1;
	} else {
		const char *colon = memchr(s, ':', n);
		size_t start = 0;

		host_len = colon ? (size_t)(colon - s) : n;
		for (size_t i = 0; i <= host_len; i++) {
			if (i < host_len && s[i] != '.')
				continue;
			if (!domain_component_valid(s + start, i - start))
				return false;
			if (i < host_len)
				has_dot = true;
			start = i + 1;
		}
	}

	if (host_len < n) {
		const char *port = s + host_len + 1;
		size_t port_len = n - host_len - 1;

		if (s[host_len] != ':' || !port_syntax_valid(port, port_len) ||
		    (check_port && !port_in_range(port, port_len)))
			return false;
	}

	*ret_host_len = host_len;
	if (ret_has_dot)
		*ret_has_dot = has_dot;
	return true;
}

static bool domain_valid(const char *s, size_t n)
{
	size_t host_len;

	return domain_scan(s, n, true, &host_len, NULL);
}

/* Components separated by single "/"; no empty components. */
static bool path_valid(const char *s, size_t n)
{
	size_t start = 0;

	for (size_t i = 0; i <= n; i++) {
		if (i < n && s[i] != '/')
			continue;
		if (!path_component_valid(s + start, i - start))
			return false;
		start = i + 1;
	}
	return true;
}

/* [\w][\w.-]{0,127} */
static bool tag_valid(const char *s, size_t n)
{
	if (n == 0 || n > REFERENCE_TAG_MAX || !is_word(s[0]))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!is_word(s[i]) && s[i] != '.' && s[i] != '-')
			return false;
	return true;
}

/* docker refuses a bare 64-hex name: it would be mistaken for an image
 * id. */
static bool is_bare_identifier(const char *s)
{
	size_t n = strlen(s);

	if (n != DIGEST_HEX_LEN)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!is_digit(s[i]) && !(s[i] >= 'a' && s[i] <= 'f'))
			return false;
	return true;
}

/* docker's rule for the string form: the first component names a registry
 * when it could not be a repository name on docker.io. */
static bool first_component_is_domain(const char *s, size_t n)
{
	return memchr(s, '.', n) || memchr(s, ':', n) ||
	       (n == strlen("localhost") && memcmp(s, "localhost", n) == 0);
}

int reference_parse(const char *s, unsigned flags, struct reference **ret)
{
	_cleanup_(reference_freep) struct reference *r = NULL;
	const char *at, *name_end, *last_slash, *tag_colon, *first_slash;
	const char *domain = NULL, *path;
	size_t len, name_len, domain_len = 0, path_len, total;
	bool official;

	if (!s || !ret)
		return -EINVAL;
	len = strlen(s);
	if (len == 0 || is_bare_identifier(s))
		return -EINVAL;

	at = strchr(s, '@');
	if (at && !digest_is_valid(at + 1))
		return -EINVAL;
	name_end = at ? at : s + len;

	/* A ':' after the last '/' starts the tag; earlier ones belong to a
	 * port in the domain. */
	last_slash = memrchr(s, '/', (size_t)(name_end - s));
	tag_colon = memchr(last_slash ? last_slash + 1 : s, ':',
			   (size_t)(name_end - (last_slash ? last_slash + 1 : s)));
	if (tag_colon && !tag_valid(tag_colon + 1, (size_t)(name_end - tag_colon - 1)))
		return -EINVAL;
	name_len = (size_t)((tag_colon ? tag_colon : name_end) - s);

	path = s;
	path_len = name_len;
	first_slash = memchr(s, '/', name_len);
	if (first_slash && first_component_is_domain(s, (size_t)(first_slash - s))) {
		domain = s;
		domain_len = (size_t)(first_slash - s);
		path = first_slash + 1;
		path_len = name_len - domain_len - 1;
		if (!domain_valid(domain, domain_len))
			return -EINVAL;
	}
	if (!path_valid(path, path_len))
		return -EINVAL;

	if (!domain || (domain_len == strlen(LEGACY_DOMAIN) &&
			memcmp(domain, LEGACY_DOMAIN, domain_len) == 0)) {
		domain = REFERENCE_DEFAULT_DOMAIN;
		domain_len = strlen(REFERENCE_DEFAULT_DOMAIN);
	}
	official = domain_len == strlen(REFERENCE_DEFAULT_DOMAIN) &&
		   memcmp(domain, REFERENCE_DEFAULT_DOMAIN, domain_len) == 0 &&
		   !memchr(path, '/', path_len);

	total = domain_len + 1 + (official ? strlen(OFFICIAL_PREFIX) : 0) + path_len;
	if (total > REFERENCE_NAME_MAX)
		return -EINVAL;

	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->domain = strndup(domain, domain_len);
	if (!r->domain)
		return -ENOMEM;
	if (asprintf(&r->path, "%s%.*s", official ? OFFICIAL_PREFIX : "", (int)path_len, path) <
	    0) {
		r->path = NULL;
		return -ENOMEM;
	}
	if (tag_colon) {
		r->tag = strndup(tag_colon + 1, (size_t)(name_end - tag_colon - 1));
		if (!r->tag)
			return -ENOMEM;
	} else if (!at && (flags & REFERENCE_DEFAULT_TAG)) {
		r->tag = strdup("latest");
		if (!r->tag)
			return -ENOMEM;
	}
	if (at) {
		r->digest = strdup(at + 1);
		if (!r->digest)
			return -ENOMEM;
	}

	*ret = TAKE_PTR(r);
	return 0;
}

char *reference_to_string(const struct reference *r)
{
	char *s;

	if (asprintf(&s, "%s/%s%s%s%s%s", r->domain, r->path, r->tag ? ":" : "",
		     r->tag ? r->tag : "", r->digest ? "@" : "", r->digest ? r->digest : "") < 0)
		return NULL;
	return s;
}

char *reference_repository(const struct reference *r)
{
	char *s;

	if (asprintf(&s, "%s/%s", r->domain, r->path) < 0)
		return NULL;
	return s;
}

void reference_free(struct reference *r)
{
	if (!r)
		return;
	free(r->domain);
	free(r->path);
	free(r->tag);
	free(r->digest);
	free(r);
}

bool reference_component_is_host(const char *component)
{
	size_t n, host_len;
	bool has_dot;

	if (!component)
		return false;
	n = strlen(component);
	/* Only the shape: "127.0.0.1:99999" still names a host, so that its
	 * images fail as invalid references rather than read as docker.io
	 * short names. */
	if (!domain_scan(component, n, false, &host_len, &has_dot))
		return false;
	if (component[0] == '[' || has_dot)
		return true;
	return host_len == strlen("localhost") && memcmp(component, "localhost", host_len) == 0;
}

bool reference_component_closes(const char *component)
{
	const char *at, *colon, *name_end;

	if (!component)
		return false;
	at = strchr(component, '@');
	if (at && !digest_is_valid(at + 1))
		return false;
	name_end = at ? at : component + strlen(component);
	colon = memchr(component, ':', (size_t)(name_end - component));
	if (!colon && !at)
		return false;
	if (colon && !tag_valid(colon + 1, (size_t)(name_end - colon - 1)))
		return false;
	return path_component_valid(component, (size_t)((colon ? colon : name_end) - component));
}

bool reference_path_component_is_valid(const char *component)
{
	return component && path_component_valid(component, strlen(component));
}

bool reference_domain_is_valid(const char *domain)
{
	return domain && domain_valid(domain, strlen(domain));
}

bool reference_path_is_valid(const char *path)
{
	return path && path_valid(path, strlen(path));
}

bool reference_tag_is_valid(const char *tag)
{
	return tag && tag_valid(tag, strlen(tag));
}

/* Registry host configuration and mirror selection. */
#include "hosts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "macro.h"

#define HOSTS_MAX_REGISTRIES 256

struct mirror {
	bool https;
	char host[HOSTS_HOST_MAX];
	char path[HOSTS_PATH_MAX];
	unsigned caps;
	char *ca_file, *client_cert, *client_key;
};

struct registry_section {
	char *name;
	bool insecure;
	char *ca_file, *client_cert, *client_key;
	struct mirror mirrors[HOSTS_MAX_MIRRORS];
	size_t n_mirrors;
};

struct registry_hosts {
	struct registry_section *sections;
	size_t n_sections;
};

int registry_hosts_new(struct registry_hosts **ret)
{
	*ret = calloc(1, sizeof(**ret));
	return *ret ? 0 : -ENOMEM;
}

static void mirror_clear(struct mirror *m)
{
	free(m->ca_file);
	free(m->client_cert);
	free(m->client_key);
}

void registry_hosts_free(struct registry_hosts *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->n_sections; i++) {
		struct registry_section *s = &h->sections[i];

		free(s->name);
		free(s->ca_file);
		free(s->client_cert);
		free(s->client_key);
		for (size_t j = 0; j < s->n_mirrors; j++)
			mirror_clear(&s->mirrors[j]);
	}
	free(h->sections);
	free(h);
}

static const struct registry_section *section_find(const struct registry_hosts *h, const char *name)
{
	if (!h)
		return NULL;
	for (size_t i = 0; i < h->n_sections; i++)
		if (strcmp(h->sections[i].name, name) == 0)
			return &h->sections[i];
	return NULL;
}

bool hosts_name_is_sane(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || strchr(".-:[]", *s)))
			return false;
	return true;
}

static bool path_is_sane(const char *s)
{
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || strchr("._~/-", *s)))
			return false;
	return true;
}

static int set_path_field(char **field, const char *key, const char *v, char *errbuf, size_t errlen)
{
	char *d;

	if (v[0] != '/') {
		snprintf(errbuf, errlen, "%s needs an absolute path", key);
		return -EINVAL;
	}
	d = strdup(v);
	if (!d)
		return -ENOMEM;
	free(*field);
	*field = d;
	return 0;
}

static int parse_bool(const char *v, bool *ret)
{
	if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "1"))
		*ret = true;
	else if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "0"))
		*ret = false;
	else
		return -EINVAL;
	return 0;
}

static int parse_caps(const char *v, unsigned *ret)
{
	unsigned caps = 0;

	while (*v) {
		size_t n = strcspn(v, ",");

		if (n == 4 && !strncmp(v, "pull", 4))
			caps |= HOSTS_CAP_PULL;
		else if (n == 7 && !strncmp(v, "resolve", 7))
			caps |= HOSTS_CAP_RESOLVE;
		else if (n == 4 && !strncmp(v, "push", 4))
			; /* pullfs never pushes; accepted for hosts.toml habits */
		else
			return -EINVAL;
		v += n;
		if (*v == ',')
			v++;
	}
	if (!caps)
		return -EINVAL;
	*ret = caps;
	return 0;
}

/* "URL opt opt ..." -> m.  The URL is scheme://host[:port][/path]. */
static int parse_mirror(char *value, struct mirror *m, char *errbuf, size_t errlen)
{
	char *save = NULL, *url, *tok, *p, *slash;
	bool insecure = false, override_path = false;
	size_t n;
	int r;

	*m = (struct mirror){ .caps = HOSTS_CAP_PULL | HOSTS_CAP_RESOLVE };
	url = strtok_r(value, " \t", &save);
	if (!url) {
		snprintf(errbuf, errlen, "mirror needs a URL");
		return -EINVAL;
	}
	for (tok = strtok_r(NULL, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
		char *eq = strchr(tok, '=');

		if (eq)
			*eq++ = '\0';
		if (!strcmp(tok, "insecure") && !eq) {
			insecure = true;
		} else if (!strcmp(tok, "override-path") && !eq) {
			override_path = true;
		} else if (!strcmp(tok, "capabilities") && eq) {
			if (parse_caps(eq, &m->caps) < 0) {
				snprintf(errbuf, errlen,
					 "invalid capabilities \"%s\" (pull, resolve)", eq);
				return -EINVAL;
			}
		} else if (!strcmp(tok, "ca-file") && eq) {
			if ((r = set_path_field(&m->ca_file, tok, eq, errbuf, errlen)) < 0)
				return r;
		} else if (!strcmp(tok, "client-cert") && eq) {
			if ((r = set_path_field(&m->client_cert, tok, eq, errbuf, errlen)) < 0)
				return r;
		} else if (!strcmp(tok, "client-key") && eq) {
			if ((r = set_path_field(&m->client_key, tok, eq, errbuf, errlen)) < 0)
				return r;
		} else {
			snprintf(errbuf, errlen, "unknown mirror option \"%s\"", tok);
			return -EINVAL;
		}
	}

	if (!strncasecmp(url, "https://", 8)) {
		m->https = true;
		p = url + 8;
	} else if (!strncasecmp(url, "http://", 7)) {
		p = url + 7;
	} else if (strstr(url, "://")) {
		snprintf(errbuf, errlen, "mirror URL must be http:// or https://");
		return -EINVAL;
	} else {
		m->https = true;
		p = url;
	}
	if (!m->https && !insecure) {
		snprintf(errbuf, errlen, "plain HTTP mirror \"%s\" needs the \"insecure\" option",
			 url);
		return -EINVAL;
	}
	slash = strchr(p, '/');
	n = slash ? (size_t)(slash - p) : strlen(p);
	if (n == 0 || n >= sizeof(m->host)) {
		snprintf(errbuf, errlen, "mirror URL \"%s\" has no usable host", url);
		return -EINVAL;
	}
	memcpy(m->host, p, n);
	m->host[n] = '\0';
	if (!hosts_name_is_sane(m->host)) {
		snprintf(errbuf, errlen, "mirror URL \"%s\" has an invalid host", url);
		return -EINVAL;
	}
	p = slash ? slash : "";
	if (!path_is_sane(p) || strstr(p, "/../") || strstr(p, "/./")) {
		snprintf(errbuf, errlen,
			 "mirror URL \"%s\": the path may only hold letters, digits and ._~/-",
			 url);
		return -EINVAL;
	}
	/* Like containerd: the path is a prefix in front of /v2 unless
	 * override-path says it is the API root itself. */
	n = strlen(p);
	while (n > 0 && p[n - 1] == '/')
		n--;
	if (override_path)
		r = snprintf(m->path, sizeof(m->path), "%.*s", (int)n, p);
	else
		r = snprintf(m->path, sizeof(m->path), "%.*s/v2", (int)n, p);
	if (r < 0 || (size_t)r >= sizeof(m->path) || (override_path && n == 0)) {
		snprintf(errbuf, errlen, "mirror URL \"%s\": unusable path", url);
		return -EINVAL;
	}
	return 0;
}

static int section_get(struct registry_hosts *h, const char *name, struct registry_section **ret)
{
	struct registry_section *s;

	for (size_t i = 0; i < h->n_sections; i++)
		if (strcmp(h->sections[i].name, name) == 0) {
			*ret = &h->sections[i];
			return 0;
		}
	if (h->n_sections >= HOSTS_MAX_REGISTRIES)
		return -E2BIG;
	s = realloc(h->sections, (h->n_sections + 1) * sizeof(*s));
	if (!s)
		return -ENOMEM;
	h->sections = s;
	s = &h->sections[h->n_sections];
	*s = (struct registry_section){ 0 };
	s->name = strdup(name);
	if (!s->name)
		return -ENOMEM;
	h->n_sections++;
	*ret = s;
	return 0;
}

int registry_hosts_set(struct registry_hosts *h, const char *registry, const char *key,
		       const char *value, char *errbuf, size_t errlen)
{
	struct registry_section *s;
	int r;

	if (!hosts_name_is_sane(registry) || strlen(registry) >= HOSTS_HOST_MAX) {
		snprintf(errbuf, errlen, "invalid registry name \"%s\"", registry);
		return -EINVAL;
	}
	r = section_get(h, registry, &s);
	if (r == -E2BIG)
		snprintf(errbuf, errlen, "more than %d registry sections", HOSTS_MAX_REGISTRIES);
	if (r < 0)
		return r;

	if (!strcmp(key, "mirror")) {
		_cleanup_free_ char *copy = strdup(value);
		struct mirror m;

		if (!copy)
			return -ENOMEM;
		if (s->n_mirrors >= HOSTS_MAX_MIRRORS) {
			snprintf(errbuf, errlen, "more than %d mirrors for \"%s\"",
				 HOSTS_MAX_MIRRORS, registry);
			return -E2BIG;
		}
		r = parse_mirror(copy, &m, errbuf, errlen);
		if (r < 0) {
			mirror_clear(&m);
			return r;
		}
		s->mirrors[s->n_mirrors++] = m;
		return 0;
	}
	if (!strcmp(key, "insecure")) {
		if (parse_bool(value, &s->insecure) < 0) {
			snprintf(errbuf, errlen, "insecure must be true or false");
			return -EINVAL;
		}
		return 0;
	}
	if (!strcmp(key, "ca-file"))
		return set_path_field(&s->ca_file, key, value, errbuf, errlen);
	if (!strcmp(key, "client-cert"))
		return set_path_field(&s->client_cert, key, value, errbuf, errlen);
	if (!strcmp(key, "client-key"))
		return set_path_field(&s->client_key, key, value, errbuf, errlen);
	snprintf(errbuf, errlen, "unknown registry key \"%s\"", key);
	return -EINVAL;
}

bool registry_hosts_insecure(const struct registry_hosts *h, const char *registry)
{
	const struct registry_section *s = section_find(h, registry);

	return s && s->insecure;
}

bool registry_hosts_known(const struct registry_hosts *h, const char *registry)
{
	return section_find(h, registry) != NULL;
}

size_t registry_hosts_endpoints(const struct registry_hosts *h, const char *domain,
				const char *api_host, bool insecure, unsigned cap,
				struct hosts_endpoint ret[HOSTS_MAX_ENDPOINTS])
{
	const struct registry_section *s = section_find(h, domain);
	struct hosts_endpoint *e;
	size_t n = 0;

	for (size_t i = 0; s && i < s->n_mirrors; i++) {
		const struct mirror *m = &s->mirrors[i];

		if ((m->caps & cap) != cap)
			continue;
		e = &ret[n++];
		*e = (struct hosts_endpoint){ .https = m->https,
					      .mirror = true,
					      .ns = s->name,
					      .caps = m->caps,
					      .ca_file = m->ca_file,
					      .client_cert = m->client_cert,
					      .client_key = m->client_key };
		snprintf(e->host, sizeof(e->host), "%s", m->host);
		snprintf(e->path, sizeof(e->path), "%s", m->path);
	}
	e = &ret[n++];
	*e = (struct hosts_endpoint){ .https = !insecure && !(s && s->insecure),
				      .caps = HOSTS_CAP_PULL | HOSTS_CAP_RESOLVE,
				      .ca_file = s ? s->ca_file : NULL,
				      .client_cert = s ? s->client_cert : NULL,
				      .client_key = s ? s->client_key : NULL };
	snprintf(e->host, sizeof(e->host), "%s", api_host);
	snprintf(e->path, sizeof(e->path), "/v2");
	return n;
}

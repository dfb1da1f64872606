/* Per-registry host configuration: the ordered mirrors tried before a
 * registry (containerd hosts.toml semantics: each mirror has capabilities
 * "pull" and/or "resolve", and one that fails or lacks the content passes
 * the request on to the next, then to the registry itself), plain HTTP for
 * insecure registries, and TLS files per registry and per mirror.  Built
 * from the [registry "NAME"] sections of the config file; read-only and
 * thread-safe once built. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

enum {
	HOSTS_CAP_PULL = 1u << 0,    /* blobs, and manifests by digest */
	HOSTS_CAP_RESOLVE = 1u << 1, /* manifests by tag */
};

#define HOSTS_MAX_MIRRORS 8
#define HOSTS_MAX_ENDPOINTS (HOSTS_MAX_MIRRORS + 1)
#define HOSTS_HOST_MAX 256
#define HOSTS_PATH_MAX 256

/* One place a request may go.  The strings point into the configuration
 * (or are NULL) and live as long as it. */
struct hosts_endpoint {
	bool https;
	char host[HOSTS_HOST_MAX]; /* "host[:port]" as it goes into the URL */
	char path[HOSTS_PATH_MAX]; /* API root, e.g. "/v2" or "/cache/v2" */
	bool mirror;		   /* false: the registry itself */
	const char *ns;		   /* mirrors: the registry, for "?ns=" */
	unsigned caps;
	const char *ca_file;
	const char *client_cert;
	const char *client_key;
};

struct registry_hosts;

/* Returns 0 or -ENOMEM. */
int registry_hosts_new(struct registry_hosts **ret);
void registry_hosts_free(struct registry_hosts *h);

/* Applies one "key = value" line of the section [registry "registry"].
 * Keys:
 *   mirror = URL [capabilities=pull,resolve] [insecure] [override-path]
 *            [ca-file=PATH] [client-cert=PATH] [client-key=PATH]
 *   insecure = true|false
 *   ca-file = PATH      client-cert = PATH      client-key = PATH
 * Paths must be absolute; an http:// mirror needs "insecure".  Returns 0,
 * or -EINVAL / -E2BIG / -ENOMEM with one line in errbuf. */
int registry_hosts_set(struct registry_hosts *h, const char *registry, const char *key,
		       const char *value, char *errbuf, size_t errlen);

/* True when s has only the characters of a host[:port] ("[::1]:5000"
 * included): nothing that could change which host or path a URL names. */
bool hosts_name_is_sane(const char *s);

/* True when the config has a section for registry (h may be NULL). */
bool registry_hosts_known(const struct registry_hosts *h, const char *registry);

/* True when the config marks registry insecure (plain HTTP). */
bool registry_hosts_insecure(const struct registry_hosts *h, const char *registry);

/* The endpoints for a request needing cap on registry `domain`, in the
 * order to try them: each configured mirror that has cap, then the
 * registry itself at api_host over HTTPS unless insecure.  h may be NULL.
 * Returns how many were written into ret (at least 1). */
size_t registry_hosts_endpoints(const struct registry_hosts *h, const char *domain,
				const char *api_host, bool insecure, unsigned cap,
				struct hosts_endpoint ret[HOSTS_MAX_ENDPOINTS]);

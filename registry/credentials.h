/* Registry credentials the way docker keeps them: a config.json with
 * "auths" (base64 "auth", or "username"/"password", or "identitytoken"),
 * "credHelpers" per registry and a default "credsStore", the last two run
 * as docker-credential-<name> programs.  Secrets are wiped before their
 * memory is freed and never appear in an error message. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct credential {
	char *username;
	char *password;
	char *identity_token; /* an OAuth2 refresh token, used instead of a password */
};

/* Wipes and frees the fields (not the struct). */
void credential_clear(struct credential *c);

struct credentials;

/* $DOCKER_CONFIG/config.json, else $HOME/.docker/config.json.  ret owned
 * by the caller.  Returns 0, -ENOENT (neither variable set) or -ENOMEM. */
int credentials_default_path(char **ret);

/* Reads and parses path.  A missing file is an empty set unless
 * must_exist.  errbuf gets one line naming the file, never its content.
 * Returns 0, -ENOENT, -EACCES, -EINVAL (malformed), -EFBIG or -ENOMEM. */
int credentials_load(const char *path, bool must_exist, struct credentials **ret, char *errbuf,
		     size_t errlen);

/* The same from a buffer, for tests.  Returns 0, -EINVAL or -ENOMEM. */
int credentials_parse(const char *json, size_t len, struct credentials **ret, char *errbuf,
		      size_t errlen);

void credentials_free(struct credentials *c);

/* The credential for a registry host ("registry.example.com:5000";
 * "docker.io" also matches docker's own keys for Docker Hub).  A
 * credential helper configured for host (or credsStore) is run, blocking
 * for at most helper_timeout_ms.  c may be NULL.  Returns 0 with ret
 * filled (caller clears it), -ENOENT when there is none, -ETIMEDOUT,
 * -EIO (a helper that failed or answered garbage) or -ENOMEM. */
int credentials_lookup(const struct credentials *c, const char *host, int helper_timeout_ms,
		       struct credential *ret);

/* Whether a pull from host would present credentials: an "auths" entry
 * with a user or a token, a helper for host, or a credsStore (which may
 * know the host; only running it would tell).  Runs nothing; c may be
 * NULL.  Thread-safe. */
bool credentials_configured(const struct credentials *c, const char *host);

/* How a host is written as a key of "auths" after stripping scheme and
 * path, docker.io's aliases folded to "docker.io", into out.  Pure. */
void credentials_normalize_host(const char *key, char *out, size_t outlen);

struct credentials_cache;

/* A thread-safe cache in front of credentials_lookup(): the answer for a
 * host (a credential, or that there is none) is kept for ttl_ms on the
 * monotonic clock.  c may be NULL (every lookup: -ENOENT) and is borrowed:
 * it must outlive the cache.  Returns 0 or -ENOMEM. */
int credentials_cache_new(const struct credentials *c, int64_t ttl_ms,
			  struct credentials_cache **ret);
void credentials_cache_free(struct credentials_cache *cc);

/* credentials_lookup() through the cache; a helper runs without the
 * cache's lock held, so two threads may both run it for one host.  Blocks
 * for at most helper_timeout_ms.  Same returns; failures other than
 * -ENOENT are not cached. */
int credentials_cache_lookup(struct credentials_cache *cc, const char *host, int helper_timeout_ms,
			     struct credential *ret);

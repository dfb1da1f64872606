/* Registry authentication: parsing a WWW-Authenticate challenge and a
 * token server's answer, the cache of bearer tokens keyed by realm,
 * service and scope, and answering a challenge with credentials or a
 * token from the realm (the one part that goes to the network). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Caps on what a server may make us hold. */
#define AUTH_HEADER_MAX 4096u		/* one WWW-Authenticate value */
#define AUTH_PARAM_MAX 1024u		/* realm, service or scope */
#define AUTH_TOKEN_BODY_MAX (64u << 10) /* a token server's response */
#define AUTH_TOKEN_MAX (16u << 10)	/* the token itself */

enum auth_scheme {
	AUTH_SCHEME_NONE,
	AUTH_SCHEME_BASIC,
	AUTH_SCHEME_BEARER,
};

struct auth_challenge {
	enum auth_scheme scheme;
	char realm[AUTH_PARAM_MAX];
	char service[AUTH_PARAM_MAX];
	char scope[AUTH_PARAM_MAX];
};

/* Parses one WWW-Authenticate header value ("Bearer realm=\"...\",
 * service=\"...\",scope=\"...\"" or "Basic realm=\"...\"").  Scheme names
 * and parameter names are case-insensitive; values may be quoted (with
 * backslash escapes) or bare tokens; unknown parameters are skipped.  A
 * Bearer challenge needs a realm that is an http or https URL.  Pure.
 * Returns 0, or -EINVAL for anything malformed, over the caps, or of
 * another scheme (ret untouched then). */
int auth_challenge_parse(const char *value, struct auth_challenge *ret);

/* Parses a token server's JSON answer: "token" or "access_token" (the
 * first one present and non-empty), "expires_in" in seconds (absent or
 * below 60: 60, as the distribution token spec says), and "refresh_token"
 * when present.  ret_token and ret_refresh (may be NULL) are owned by the
 * caller.  Returns 0, -EBADMSG (not JSON, no token, over the caps, a token
 * with bytes that cannot go into a header) or -ENOMEM. */
int auth_token_parse(const char *body, size_t len, char **ret_token, int64_t *ret_expires_in_s,
		     char **ret_refresh);

/* "repository:<repo>:pull", the scope pullfs asks for. */
int auth_scope_pull(const char *repo, char **ret);

struct auth_cache;

/* A thread-safe map (realm, service, scope) -> token with its expiry on a
 * monotonic clock in nanoseconds supplied by the caller.  Returns 0 or
 * -ENOMEM. */
int auth_cache_new(struct auth_cache **ret);
void auth_cache_free(struct auth_cache *c);

/* A copy of the token (caller frees) when one is cached and now_ns is
 * before its expiry.  Returns 0, -ENOENT or -ENOMEM. */
int auth_cache_get(struct auth_cache *c, const char *realm, const char *service, const char *scope,
		   int64_t now_ns, char **ret_token);

/* Stores a token valid until expires_ns, replacing any older one.
 * Returns 0 or -ENOMEM. */
int auth_cache_put(struct auth_cache *c, const char *realm, const char *service, const char *scope,
		   const char *token, int64_t expires_ns);

/* Forgets the token, if it is still this one (a 401 showed it stale). */
void auth_cache_drop(struct auth_cache *c, const char *realm, const char *service,
		     const char *scope, const char *token);

/* Wipes a secret before freeing it. */
void auth_secret_free(char *s);

/* What the last 401 from a host asked for, so that the next request to
 * that host can carry credentials at once instead of earning a 401 first.
 * host is "host[:port]" of the endpoint.  Returns 0 or -ENOMEM / -ENOENT. */
int auth_cache_remember(struct auth_cache *c, const char *host, const struct auth_challenge *ch);
int auth_cache_recall(struct auth_cache *c, const char *host, struct auth_challenge *ret);

struct credential;
struct credentials_cache;
struct hosts_endpoint;
struct error_detail;
struct registry_transport;
struct transport_auth;

/* Where the answer to a challenge comes from; all borrowed. */
struct auth_source {
	const struct registry_transport *transport; /* for the token realm */
	struct auth_cache *tokens;
	struct credentials_cache *creds;
};

/* What a request to endpoint ep (of the registry of reference domain,
 * for repository repo) carries after challenge ch: for Basic the
 * credentials of the host (a mirror only ever gets its own), for Bearer a
 * token for "repository:<repo>:pull" from the cache or, when there is
 * none or force says the cached one just failed, from the realm (a GET,
 * or the refresh-token grant with an identity token) and then cached.
 * Fills ret_auth with pointers into *token and *cred, which the caller
 * owns and frees (auth_secret_free(), credential_clear()) after the
 * request.  Blocks (a credential helper, the token server).  Returns 0
 * (ret_auth may stay empty: Basic without credentials), or -EACCES (the
 * realm refused or sent no token, or is not HTTPS for an HTTPS registry),
 * the errno of the token request, -ENOMEM, with err filled. */
int auth_answer(const struct auth_source *src, const struct hosts_endpoint *ep, const char *domain,
		const char *repo, const struct auth_challenge *ch, bool force,
		struct transport_auth *ret_auth, char **token, struct credential *cred,
		struct error_detail *err);

/* WWW-Authenticate parsing, token responses and the bearer token cache.
 * Everything here is reached with bytes a server chose, so every length is
 * capped and every token is checked before it can go into a header. */
#include "auth.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "macro.h"
#include "strmap.h"

#define CACHE_MAX_ENTRIES 1024u

struct token_entry {
	char *token;
	int64_t expires_ns;
};

struct auth_cache {
	pthread_mutex_t lock;
	struct strmap *tokens;	   /* protected by lock; key realm\n service\n scope */
	struct strmap *challenges; /* protected by lock; host -> struct auth_challenge */
};

void auth_secret_free(char *s)
{
	if (!s)
		return;
	explicit_bzero(s, strlen(s));
	free(s);
}

static bool is_tchar(char c)
{
	/* RFC 9110 token characters */
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static const char *skip_ows(const char *p)
{
	while (*p == ' ' || *p == '\t')
		p++;
	return p;
}

/* Reads a token or a quoted string at *pp into out (cap bytes including
 * the NUL).  Returns 0 or -EINVAL. */
static int read_value(const char **pp, char *out, size_t cap)
{
	const char *p = *pp;
	size_t n = 0;

	if (*p == '"') {
		for (p++; *p != '"'; p++) {
			if (!*p)
				return -EINVAL;
			if (*p == '\\') {
				p++;
				if (!*p)
					return -EINVAL;
			}
			if ((unsigned char)*p < 0x20 || *p == 0x7f)
				return -EINVAL;
			if (n + 1 >= cap)
				return -EINVAL;
			out[n++] = *p;
		}
		p++;
	} else {
		/* token68 may end in '=' padding */
		for (; is_tchar(*p) || *p == '/' || *p == '=' || *p == ':'; p++) {
			if (n + 1 >= cap)
				return -EINVAL;
			out[n++] = *p;
		}
		if (n == 0)
			return -EINVAL;
	}
	out[n] = '\0';
	*pp = p;
	return 0;
}

static bool realm_is_url(const char *s)
{
	return strncasecmp(s, "https://", 8) == 0 || strncasecmp(s, "http://", 7) == 0;
}

int auth_challenge_parse(const char *value, struct auth_challenge *ret)
{
	struct auth_challenge ch = { 0 };
	const char *p;
	char name[64], scratch[AUTH_PARAM_MAX];
	size_t n;

	if (!value || strnlen(value, AUTH_HEADER_MAX + 1) > AUTH_HEADER_MAX)
		return -EINVAL;
	p = skip_ows(value);
	for (n = 0; is_tchar(p[n]); n++)
		;
	if (n == 6 && strncasecmp(p, "Bearer", 6) == 0)
		ch.scheme = AUTH_SCHEME_BEARER;
	else if (n == 5 && strncasecmp(p, "Basic", 5) == 0)
		ch.scheme = AUTH_SCHEME_BASIC;
	else
		return -EINVAL;
	p += n;
	if (*p && *p != ' ' && *p != '\t')
		return -EINVAL;
	p = skip_ows(p);

	while (*p) {
		char *dst;
		int r;

		for (n = 0; is_tchar(p[n]); n++)
			if (n + 1 >= sizeof(name))
				return -EINVAL;
		if (n == 0)
			return -EINVAL;
		memcpy(name, p, n);
		name[n] = '\0';
		p = skip_ows(p + n);
		if (*p != '=')
			return -EINVAL;
		p = skip_ows(p + 1);

		if (strcasecmp(name, "realm") == 0)
			dst = ch.realm;
		else if (strcasecmp(name, "service") == 0)
			dst = ch.service;
		else if (strcasecmp(name, "scope") == 0)
			dst = ch.scope;
		else
			dst = scratch;
		if (dst != scratch && dst[0])
			return -EINVAL; /* a parameter given twice is ambiguous */
		r = read_value(&p, dst, AUTH_PARAM_MAX);
		if (r < 0)
			return r;
		p = skip_ows(p);
		if (*p == ',')
			p = skip_ows(p + 1);
		else if (*p)
			return -EINVAL;
	}

	if (ch.scheme == AUTH_SCHEME_BEARER && !realm_is_url(ch.realm))
		return -EINVAL;
	*ret = ch;
	return 0;
}

static bool token_is_header_safe(const char *t)
{
	if (!*t)
		return false;
	for (; *t; t++)
		if ((unsigned char)*t <= 0x20 || (unsigned char)*t >= 0x7f)
			return false;
	return true;
}

int auth_token_parse(const char *body, size_t len, char **ret_token,
		     int64_t *ret_expires_in_s, char **ret_refresh)
{
	json_auto_t *root = NULL;
	const char *tok, *refresh = NULL;
	json_t *exp;
	int64_t expires = 60;
	char *t, *rt = NULL;

	if (!body || len > AUTH_TOKEN_BODY_MAX)
		return -EBADMSG;
	root = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(root))
		return -EBADMSG;
	tok = json_string_value(json_object_get(root, "token"));
	if (!tok || !*tok)
		tok = json_string_value(json_object_get(root, "access_token"));
	if (!tok || strlen(tok) > AUTH_TOKEN_MAX || !token_is_header_safe(tok))
		return -EBADMSG;
	exp = json_object_get(root, "expires_in");
	if (json_is_integer(exp) && json_integer_value(exp) > 60)
		expires = MIN(json_integer_value(exp), (json_int_t)365 * 86400);
	if (ret_refresh) {
		refresh = json_string_value(json_object_get(root, "refresh_token"));
		if (refresh && (strlen(refresh) > AUTH_TOKEN_MAX || !token_is_header_safe(refresh)))
			refresh = NULL;
	}

	t = strdup(tok);
	if (!t)
		return -ENOMEM;
	if (refresh && !(rt = strdup(refresh))) {
		auth_secret_free(t);
		return -ENOMEM;
	}
	*ret_token = t;
	*ret_expires_in_s = expires;
	if (ret_refresh)
		*ret_refresh = rt;
	return 0;
}

int auth_scope_pull(const char *repo, char **ret)
{
	char *s;

	if (asprintf(&s, "repository:%s:pull", repo) < 0)
		return -ENOMEM;
	*ret = s;
	return 0;
}

int auth_cache_new(struct auth_cache **ret)
{
	struct auth_cache *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->tokens = strmap_new();
	c->challenges = strmap_new();
	if (!c->tokens || !c->challenges) {
		strmap_free(c->tokens);
		strmap_free(c->challenges);
		free(c);
		return -ENOMEM;
	}
	pthread_mutex_init(&c->lock, NULL);
	*ret = c;
	return 0;
}

static void entry_free(struct token_entry *e)
{
	if (!e)
		return;
	auth_secret_free(e->token);
	free(e);
}

static int free_token_cb(void *userdata, const char *key, void *value)
{
	entry_free(value);
	return 0;
}

static int free_plain_cb(void *userdata, const char *key, void *value)
{
	free(value);
	return 0;
}

void auth_cache_free(struct auth_cache *c)
{
	if (!c)
		return;
	strmap_foreach(c->tokens, free_token_cb, NULL);
	strmap_free(c->tokens);
	strmap_foreach(c->challenges, free_plain_cb, NULL);
	strmap_free(c->challenges);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static char *cache_key(const char *realm, const char *service, const char *scope)
{
	char *k;

	if (asprintf(&k, "%s\n%s\n%s", realm, service ? service : "",
		     scope ? scope : "") < 0)
		return NULL;
	return k;
}

int auth_cache_get(struct auth_cache *c, const char *realm,
		   const char *service, const char *scope, int64_t now_ns,
		   char **ret_token)
{
	_cleanup_free_ char *k = cache_key(realm, service, scope);
	struct token_entry *e;
	char *t = NULL;
	int r = -ENOENT;

	if (!k)
		return -ENOMEM;
	pthread_mutex_lock(&c->lock);
	e = strmap_get(c->tokens, k);
	if (e && now_ns < e->expires_ns) {
		t = strdup(e->token);
		r = t ? 0 : -ENOMEM;
	}
	pthread_mutex_unlock(&c->lock);
	if (r == 0)
		*ret_token = t;
	return r;
}

static int drop_expired_cb(void *userdata, const char *key, void *value)
{
	const char **victim = userdata;
	(void)value;
	*victim = key;
	return 1;
}

int auth_cache_put(struct auth_cache *c, const char *realm,
		   const char *service, const char *scope, const char *token,
		   int64_t expires_ns)
{
	_cleanup_free_ char *k = cache_key(realm, service, scope);
	struct token_entry *e, *old;
	int r;

	if (!k)
		return -ENOMEM;
	e = calloc(1, sizeof(*e));
	if (!e || !(e->token = strdup(token))) {
		free(e);
		return -ENOMEM;
	}
	e->expires_ns = expires_ns;

	pthread_mutex_lock(&c->lock);
	if (strmap_size(c->tokens) >= CACHE_MAX_ENTRIES && !strmap_get(c->tokens, k)) {
		/* A bound, not a policy: any one entry can go, it is only a
		 * token that will be fetched again. */
		const char *victim = NULL;

		strmap_foreach(c->tokens, drop_expired_cb, &victim);
		if (victim) {
			_cleanup_free_ char *vk = strdup(victim);
			if (vk)
				entry_free(strmap_remove(c->tokens, vk));
		}
	}
	old = strmap_get(c->tokens, k);
	r = strmap_put(c->tokens, k, e);
	if (r < 0)
		entry_free(e);
	else
		entry_free(old);
	pthread_mutex_unlock(&c->lock);
	return r;
}

void auth_cache_drop(struct auth_cache *c, const char *realm,
		     const char *service, const char *scope, const char *token)
{
	_cleanup_free_ char *k = cache_key(realm, service, scope);
	struct token_entry *e;

	if (!k)
		return;
	pthread_mutex_lock(&c->lock);
	e = strmap_get(c->tokens, k);
	if (e && (!token || strcmp(e->token, token) == 0))
		entry_free(strmap_remove(c->tokens, k));
	pthread_mutex_unlock(&c->lock);
}

int auth_cache_remember(struct auth_cache *c, const char *host,
			const struct auth_challenge *ch)
{
	struct auth_challenge *copy, *old;
	int r;

	copy = malloc(sizeof(*copy));
	if (!copy)
		return -ENOMEM;
	*copy = *ch;
	copy->scope[0] = '\0'; /* the scope belongs to one request */
	pthread_mutex_lock(&c->lock);
	old = strmap_get(c->challenges, host);
	if (!old && strmap_size(c->challenges) >= CACHE_MAX_ENTRIES) {
		pthread_mutex_unlock(&c->lock);
		free(copy);
		return 0;
	}
	r = strmap_put(c->challenges, host, copy);
	if (r < 0)
		free(copy);
	else
		free(old);
	pthread_mutex_unlock(&c->lock);
	return r;
}

int auth_cache_recall(struct auth_cache *c, const char *host,
		      struct auth_challenge *ret)
{
	struct auth_challenge *ch;
	int r = -ENOENT;

	pthread_mutex_lock(&c->lock);
	ch = strmap_get(c->challenges, host);
	if (ch) {
		*ret = *ch;
		r = 0;
	}
	pthread_mutex_unlock(&c->lock);
	return r;
}

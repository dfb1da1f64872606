/* WWW-Authenticate parsing, token responses, the bearer token cache, and
 * the answer to a challenge: Basic credentials, or a token fetched from
 * the challenge's realm.  Everything here is reached with bytes a server
 * chose, so every length is capped and every token is checked before it
 * can go into a header. */
#include "auth.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "clock.h"
#include "credentials.h"
#include "errname.h"
#include "hosts.h"
#include "macro.h"
#include "request.h"
#include "strmap.h"

#define CACHE_MAX_ENTRIES 1024u
#define HELPER_TIMEOUT_MS 10000

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
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
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

int auth_token_parse(const char *body, size_t len, char **ret_token, int64_t *ret_expires_in_s,
		     char **ret_refresh)
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

	if (asprintf(&k, "%s\n%s\n%s", realm, service ? service : "", scope ? scope : "") < 0)
		return NULL;
	return k;
}

int auth_cache_get(struct auth_cache *c, const char *realm, const char *service, const char *scope,
		   int64_t now_ns, char **ret_token)
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

int auth_cache_put(struct auth_cache *c, const char *realm, const char *service, const char *scope,
		   const char *token, int64_t expires_ns)
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

void auth_cache_drop(struct auth_cache *c, const char *realm, const char *service,
		     const char *scope, const char *token)
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

int auth_cache_remember(struct auth_cache *c, const char *host, const struct auth_challenge *ch)
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

int auth_cache_recall(struct auth_cache *c, const char *host, struct auth_challenge *ret)
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

/* ---- answering a challenge ------------------------------------------ */

/* application/x-www-form-urlencoded, and query strings: everything but
 * the unreserved characters percent-encoded.  NULL on allocation
 * failure. */
static char *form_escape(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = malloc(strlen(s) * 3 + 1), *o = out;

	if (!out)
		return NULL;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    strchr("-._~", c)) {
			*o++ = (char)c;
		} else {
			*o++ = '%';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		}
	}
	*o = '\0';
	return out;
}

/* The credential for an endpoint: for the registry itself, the one of its
 * reference domain; a mirror only gets its own, so that a registry's
 * credentials never reach a mirror.  Returns 0, -ENOENT or -errno. */
static int creds_for(const struct auth_source *src, const struct hosts_endpoint *ep,
		     const char *domain, struct credential *ret)
{
	return credentials_cache_lookup(src->creds, ep->mirror ? ep->host : domain,
					HELPER_TIMEOUT_MS, ret);
}

/* Asks the challenge's realm for a token for scope: GET with Basic
 * credentials (or none), or the OAuth2 refresh-token grant as a POST when
 * the credential is an identity token. */
static int token_fetch(const struct auth_source *src, const struct hosts_endpoint *ep,
		       const struct auth_challenge *ch, const char *scope,
		       const struct credential *cred, char **ret_token, int64_t *ret_expires_s,
		       struct error_detail *err)
{
	struct request q = { .err = err,
			     .kind = BODY_BUFFER,
			     .buf_max = AUTH_TOKEN_BODY_MAX,
			     .buf_what = "token response",
			     .wipe_body = true };
	struct transport_auth basic = { 0 };
	_cleanup_free_ char *url = NULL;
	_cleanup_free_ char *e_service = NULL, *e_scope = NULL, *e_user = NULL;
	char *post = NULL, *e_refresh = NULL;
	char realm[TRANSPORT_WHERE_MAX];
	struct hosts_endpoint tep = *ep;
	const char *identity = cred ? cred->identity_token : NULL;
	int k;

	transport_describe_url(ch->realm, realm, sizeof(realm));
	snprintf(q.where, sizeof(q.where), "%s", realm);
	/* Credentials go to the realm only as safely as to the registry. */
	if (ep->https && strncasecmp(ch->realm, "https://", 8) != 0)
		return error_detail_set_http(err, 401, -EACCES, "token realm %s of %s is not HTTPS",
					     realm, ep->host);
	tep.https = strncasecmp(ch->realm, "https://", 8) == 0;

	e_service = form_escape(ch->service);
	e_scope = form_escape(scope);
	if (cred && cred->username)
		e_user = form_escape(cred->username);
	if (identity)
		e_refresh = form_escape(identity);
	if (!e_service || !e_scope || (cred && cred->username && !e_user) ||
	    (identity && !e_refresh)) {
		k = error_detail_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	if (identity) {
		if (asprintf(
			    &post,
			    "grant_type=refresh_token&service=%s&scope=%s&client_id=pullfs&refresh_token=%s",
			    e_service, e_scope, e_refresh) < 0) {
			post = NULL;
			k = error_detail_set(err, -ENOMEM, "out of memory");
			goto out;
		}
		url = strdup(ch->realm);
	} else {
		if (asprintf(&url, "%s%cservice=%s&scope=%s%s%s", ch->realm,
			     strchr(ch->realm, '?') ? '&' : '?', e_service, e_scope,
			     e_user ? "&account=" : "", e_user ? e_user : "") < 0)
			url = NULL;
		if (cred && cred->username) {
			basic.username = cred->username;
			basic.password = cred->password;
		}
	}
	if (!url) {
		k = error_detail_set(err, -ENOMEM, "out of memory");
		goto out;
	}

	k = request_perform(src->transport, &q, post ? "POST" : "GET", url, &tep, &basic, NULL,
			    post);
	if (k < 0) {
		long status = q.resp.status;

		/* Whatever the token server said, say it in our words: its
		 * body may echo what it was sent. */
		if (status == 401 || status == 403)
			k = error_detail_set_http(err, status, -EACCES,
						  "token server %s refused %s", realm,
						  cred ? "the credentials" : "anonymous access");
		else if (status >= 400)
			k = error_detail_set_http(
				err, status, k, "token server %s answered HTTP %ld", realm, status);
		goto out;
	}
	k = auth_token_parse(q.buf ? q.buf : "", q.len, ret_token, ret_expires_s, NULL);
	if (k == -EBADMSG)
		k = error_detail_set_http(err, q.resp.status, -EACCES,
					  "token server %s sent no usable token", realm);
	else if (k < 0)
		k = error_detail_set_http(err, q.resp.status, k, "out of memory");
out:
	if (post) {
		explicit_bzero(post, strlen(post));
		free(post);
	}
	auth_secret_free(e_refresh);
	request_done(&q);
	return k;
}

int auth_answer(const struct auth_source *src, const struct hosts_endpoint *ep, const char *domain,
		const char *repo, const struct auth_challenge *ch, bool force,
		struct transport_auth *ret_auth, char **token, struct credential *cred,
		struct error_detail *err)
{
	_cleanup_free_ char *scope = NULL;
	int64_t expires_s = 0, now;
	int k;

	*ret_auth = (struct transport_auth){ 0 };
	if (ch->scheme == AUTH_SCHEME_BASIC) {
		k = creds_for(src, ep, domain, cred);
		if (k == -ENOENT || (k == 0 && !cred->username))
			return 0;
		if (k < 0)
			return error_detail_set(err, k, "cannot get credentials for %s: %s",
						ep->mirror ? ep->host : domain, errno_name(k));
		ret_auth->username = cred->username;
		ret_auth->password = cred->password;
		return 0;
	}

	if (auth_scope_pull(repo, &scope) < 0)
		return error_detail_set(err, -ENOMEM, "out of memory");
	now = clock_mono_ns();
	if (!force && auth_cache_get(src->tokens, ch->realm, ch->service, scope, now, token) == 0) {
		ret_auth->bearer_token = *token;
		return 0;
	}
	k = creds_for(src, ep, domain, cred);
	if (k < 0 && k != -ENOENT)
		return error_detail_set(err, k, "cannot get credentials for %s: %s",
					ep->mirror ? ep->host : domain, errno_name(k));
	k = token_fetch(src, ep, ch, scope, k == 0 ? cred : NULL, token, &expires_s, err);
	if (k < 0)
		return k;
	/* Renew a little early, so that a token is not sent as it expires. */
	(void)auth_cache_put(src->tokens, ch->realm, ch->service, scope, *token,
			     now + (expires_s - MIN(expires_s / 10, (int64_t)30)) * 1000000000LL);
	ret_auth->bearer_token = *token;
	return 0;
}

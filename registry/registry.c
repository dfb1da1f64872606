/* The registry client over libcurl.  Every request goes through
 * request_run(): it borrows an easy handle from a small pool, sets the
 * same hardened options on it, routes the body of a successful response to
 * a manifest buffer or a blob sink and the body of a failed one to a small
 * capped buffer, and turns the outcome into one negative errno plus a
 * one-line message.  Nothing outside this file sees a CURLcode or an HTTP
 * status as an error code. */
#include "registry.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "auth.h"
#include "config.h"
#include "credentials.h"
#include "digest.h"
#include "errname.h"
#include "hosts.h"
#include "macro.h"
#include "manifest.h"
#include "reference.h"
#include "retry.h"
#include "strmap.h"

/* Idle easy handles kept for reuse.  libcurl's shared connection cache is
 * documented as unsafe across concurrent threads (curl known bug "A shared
 * connection cache is not thread-safe"), so connections are reused by
 * keeping the easy handle that owns them instead: curl_easy_reset() leaves
 * live connections in the handle. */
#define REGISTRY_POOL_MAX 16

#define ERROR_BODY_MAX (16u << 10)
#define MAX_REDIRECTS 5L
#define LOW_SPEED_BYTES_PER_S 1024L
#define DEFAULT_CONNECT_TIMEOUT_MS 10000L
#define DEFAULT_LOW_SPEED_TIME_S 30L
#define MAX_RESUMES 20u
#define HELPER_TIMEOUT_MS 10000
#define CRED_CACHE_TTL_MS (300LL * 1000)

struct registry {
	char **insecure_hosts;
	size_t n_insecure_hosts;
	long connect_timeout_ms;
	long low_speed_time_s;
	char *user_agent;
	const struct registry_hosts *hosts;	    /* borrowed, read-only */
	const struct credentials *credentials;	    /* borrowed, read-only */
	struct retry_policy retry;
	const atomic_bool *cancel; /* borrowed; may be NULL */
	struct auth_cache *auth;		    /* locks itself */
	/* Credentials per host as the lookup (maybe a helper) gave them:
	 * a Basic registry is asked for them on every request.  Locks
	 * itself. */
	struct credentials_cache *creds;

	/* DNS cache and TLS sessions, shared by every handle; libcurl takes
	 * share_locks[kind] around each access. */
	CURLSH *share;
	pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
	size_t n_share_locks; /* how many of share_locks are initialised */

	pthread_mutex_t pool_lock;
	bool pool_lock_ready;
	CURL *idle[REGISTRY_POOL_MAX]; /* protected by pool_lock */
	size_t n_idle;		       /* protected by pool_lock */
};

enum body_kind {
	BODY_NONE,   /* HEAD: no body expected */
	BODY_BUFFER, /* manifest or token: into buf, at most buf_max bytes */
	BODY_SINK,   /* blob: hashed, counted and handed to sink */
};

/* State of one request, reachable from the curl callbacks. */
struct request {
	CURL *curl;
	struct registry_error *err;
	char where[256]; /* host/path of the URL asked for, for messages */

	enum body_kind kind;

	char *buf;
	size_t len, cap, buf_max;
	const char *buf_what; /* BODY_BUFFER: what it holds, for messages */

	registry_sink_fn sink;
	void *userdata;
	struct hasher *hasher;
	uint64_t size;	  /* bytes the descriptor promises */
	uint64_t got;	  /* bytes handed to the sink */
	bool length_seen; /* Content-Length of the 2xx response checked */

	/* Body of a non-2xx response, for the registry's error text. */
	char *errbody;
	size_t errlen;
	long errbody_status;
	size_t skipped; /* bytes of redirect bodies thrown away */

	/* Set by a callback that stopped the transfer; wins over the
	 * CURLcode that the abort produces. */
	int failure;

	/* Captured from the final response before the handle goes back. */
	long status;
	char *content_type;
	char *docker_digest;

	char curl_msg[CURL_ERROR_SIZE];

	/* Per attempt. */
	CURLcode rc;
	uint64_t skip;		/* bytes of this response already seen (Range ignored) */
	int64_t retry_after_ms; /* -1: the response had none */
	bool sink_failed;	/* the sink said no: nothing is retried */
	bool have_challenge;
	struct auth_challenge challenge; /* of a 401 */
	bool wipe_body;		/* the buffer holds a secret (a token response) */
};

/* Credentials for one request.  Nothing fills this yet: pulls are
 * anonymous.  Bearer-token and Basic auth will fill it, and
 * auth_apply() hands it to curl through CURLOPT_HTTPAUTH with
 * CURLOPT_XOAUTH2_BEARER or CURLOPT_USERNAME/CURLOPT_PASSWORD, never as a
 * literal "Authorization:" header in CURLOPT_HTTPHEADER.  That way curl's
 * own rule applies (CURLOPT_UNRESTRICTED_AUTH stays off): the credential
 * is dropped as soon as a redirect leaves the host and port, which keeps a
 * registry token away from the object store that serves the blob. */
struct registry_auth {
	const char *bearer_token;
	const char *username;
	const char *password;
};

DEFINE_TRIVIAL_CLEANUP_FUNC(struct curl_slist *, curl_slist_free_all)
DEFINE_TRIVIAL_CLEANUP_FUNC(CURLU *, curl_url_cleanup)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct hasher *, hasher_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct registry_manifest *, registry_manifest_free)

static void curl_freep(char **p)
{
	curl_free(*p);
}
#define _cleanup_curl_free_ _cleanup_(curl_freep)

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_FAILED_INIT;

static void global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* Error text may come from the network: keep it to one printable line. */
static void message_sanitize(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
			*s = ' ';
}

__attribute__((format(printf, 4, 5))) static int
error_set(struct registry_error *err, long status, int r, const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return r;
	err->http_status = (int)status;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	message_sanitize(err->message);
	return r;
}

static void error_clear(struct registry_error *err)
{
	if (!err)
		return;
	err->http_status = 0;
	err->message[0] = '\0';
}

/* "host[:port]/path" of url, without user info, query or fragment: a
 * redirect target may be a signed URL whose query string is a secret. */
static void url_describe(const char *url, char *out, size_t outlen)
{
	_cleanup_(curl_url_cleanupp) CURLU *u = curl_url();
	_cleanup_curl_free_ char *host = NULL;
	_cleanup_curl_free_ char *port = NULL;
	_cleanup_curl_free_ char *path = NULL;

	if (!u || !url || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
		snprintf(out, outlen, "(unknown host)");
		return;
	}
	(void)curl_url_get(u, CURLUPART_PORT, &port, 0);
	(void)curl_url_get(u, CURLUPART_PATH, &path, 0);
	snprintf(out, outlen, "%s%s%s%s", host, port ? ":" : "",
		 port ? port : "", path ? path : "");
}

/* Host part of the URL curl ended on (after redirects), for messages about
 * the connection rather than the resource. */
static void request_host(const struct request *q, char *out, size_t outlen)
{
	_cleanup_(curl_url_cleanupp) CURLU *u = curl_url();
	_cleanup_curl_free_ char *host = NULL;
	_cleanup_curl_free_ char *port = NULL;
	char *eff = NULL;

	if (curl_easy_getinfo(q->curl, CURLINFO_EFFECTIVE_URL, &eff) != CURLE_OK ||
	    !u || !eff || curl_url_set(u, CURLUPART_URL, eff, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
		snprintf(out, outlen, "(unknown host)");
		return;
	}
	(void)curl_url_get(u, CURLUPART_PORT, &port, 0);
	snprintf(out, outlen, "%s%s%s", host, port ? ":" : "", port ? port : "");
}

static void request_where_now(const struct request *q, char *out, size_t outlen)
{
	char *eff = NULL;

	if (curl_easy_getinfo(q->curl, CURLINFO_EFFECTIVE_URL, &eff) == CURLE_OK && eff)
		url_describe(eff, out, outlen);
	else
		snprintf(out, outlen, "%s", q->where);
}

static size_t host_part_len(const char *domain)
{
	const char *end;

	if (domain[0] == '[') {
		end = strchr(domain, ']');
		return end ? (size_t)(end - domain) + 1 : strlen(domain);
	}
	end = strchr(domain, ':');
	return end ? (size_t)(end - domain) : strlen(domain);
}

/* An entry names either exactly this "host:port" or the bare host, which
 * then covers every port on it. */
static bool registry_is_insecure(const struct registry *r, const char *domain)
{
	size_t hlen = host_part_len(domain);

	if (registry_hosts_insecure(r->hosts, domain))
		return true;

	for (size_t i = 0; i < r->n_insecure_hosts; i++) {
		const char *e = r->insecure_hosts[i];

		if (strcmp(e, domain) == 0)
			return true;
		if (strlen(e) == hlen && strncmp(e, domain, hlen) == 0)
			return true;
	}
	return false;
}

static const char *api_host(const char *domain)
{
	/* docker.io is the name in references; the API lives elsewhere. */
	if (strcmp(domain, "docker.io") == 0)
		return "registry-1.docker.io";
	return domain;
}

/* The pieces of a URL come from references that were parsed already, but
 * a stray '?', '#', '@' or "/../" here would change which host or path
 * curl asks for, so they are checked against the grammar again. */
static int check_names(const char *domain, const char *repo,
		       struct registry_error *err)
{
	if (!reference_domain_is_valid(domain))
		return error_set(err, 0, -EINVAL, "invalid registry host \"%s\"",
				 domain ? domain : "");
	if (!reference_path_is_valid(repo))
		return error_set(err, 0, -EINVAL, "invalid repository \"%s\"",
				 repo ? repo : "");
	return 0;
}

static int check_manifest_ref(const char *ref, bool *ret_by_digest,
			      struct registry_error *err)
{
	if (ref && strchr(ref, ':')) {
		if (!digest_is_valid(ref))
			return error_set(err, 0, -EINVAL, "invalid digest \"%s\"", ref);
		*ret_by_digest = true;
		return 0;
	}
	if (!reference_tag_is_valid(ref))
		return error_set(err, 0, -EINVAL, "invalid tag \"%s\"", ref ? ref : "");
	*ret_by_digest = false;
	return 0;
}

static void share_lock(CURL *c, curl_lock_data data, curl_lock_access access,
		       void *userp)
{
	struct registry *r = userp;

	if ((unsigned)data < CURL_LOCK_DATA_LAST)
		pthread_mutex_lock(&r->share_locks[data]);
}

static void share_unlock(CURL *c, curl_lock_data data, void *userp)
{
	struct registry *r = userp;

	if ((unsigned)data < CURL_LOCK_DATA_LAST)
		pthread_mutex_unlock(&r->share_locks[data]);
}

int registry_new(const struct registry_options *opts, struct registry **ret)
{
	struct registry *r;

	pthread_once(&global_once, global_init);
	if (global_rc != CURLE_OK)
		return -ENOMEM;

	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;

	r->connect_timeout_ms = opts && opts->connect_timeout_ms > 0
					? opts->connect_timeout_ms
					: DEFAULT_CONNECT_TIMEOUT_MS;
	r->low_speed_time_s = opts && opts->low_speed_time_s > 0
				      ? opts->low_speed_time_s
				      : DEFAULT_LOW_SPEED_TIME_S;
	r->hosts = opts ? opts->hosts : NULL;
	r->cancel = opts ? opts->cancel : NULL;
	r->credentials = opts ? opts->credentials : NULL;
	r->retry = RETRY_POLICY_DEFAULT;
	if (opts && opts->max_retries > 0)
		r->retry.max_retries = (unsigned)opts->max_retries;
	else if (opts && opts->max_retries < 0)
		r->retry.max_retries = 0;
	if (opts && opts->retry_base_ms > 0)
		r->retry.base_ms = opts->retry_base_ms;
	if (auth_cache_new(&r->auth) < 0)
		goto fail;
	if (credentials_cache_new(r->credentials, CRED_CACHE_TTL_MS, &r->creds) < 0)
		goto fail;
	if (opts && opts->user_agent)
		r->user_agent = strdup(opts->user_agent);
	else
		r->user_agent = strdup("pullfs/" PULLFS_VERSION);
	if (!r->user_agent)
		goto fail;

	if (opts && opts->n_insecure_hosts > 0) {
		r->insecure_hosts = calloc(opts->n_insecure_hosts, sizeof(char *));
		if (!r->insecure_hosts)
			goto fail;
		for (size_t i = 0; i < opts->n_insecure_hosts; i++) {
			r->insecure_hosts[i] = strdup(opts->insecure_hosts[i]);
			if (!r->insecure_hosts[i])
				goto fail;
			r->n_insecure_hosts = i + 1;
		}
	}

	if (pthread_mutex_init(&r->pool_lock, NULL) != 0)
		goto fail;
	r->pool_lock_ready = true;
	for (size_t i = 0; i < ARRAY_SIZE(r->share_locks); i++) {
		if (pthread_mutex_init(&r->share_locks[i], NULL) != 0)
			goto fail;
		r->n_share_locks = i + 1;
	}

	r->share = curl_share_init();
	if (!r->share ||
	    curl_share_setopt(r->share, CURLSHOPT_USERDATA, r) != CURLSHE_OK ||
	    curl_share_setopt(r->share, CURLSHOPT_LOCKFUNC, share_lock) != CURLSHE_OK ||
	    curl_share_setopt(r->share, CURLSHOPT_UNLOCKFUNC, share_unlock) != CURLSHE_OK ||
	    curl_share_setopt(r->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
	    curl_share_setopt(r->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK)
		goto fail;

	*ret = r;
	return 0;

fail:
	registry_free(r);
	return -ENOMEM;
}

void registry_free(struct registry *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n_idle; i++)
		curl_easy_cleanup(r->idle[i]);
	/* After the handles: a handle still attached keeps the share busy. */
	if (r->share)
		curl_share_cleanup(r->share);
	for (size_t i = 0; i < r->n_share_locks; i++)
		pthread_mutex_destroy(&r->share_locks[i]);
	if (r->pool_lock_ready)
		pthread_mutex_destroy(&r->pool_lock);
	for (size_t i = 0; i < r->n_insecure_hosts; i++)
		free(r->insecure_hosts[i]);
	free(r->insecure_hosts);
	free(r->user_agent);
	auth_cache_free(r->auth);
	credentials_cache_free(r->creds);
	free(r);
}

void registry_manifest_free(struct registry_manifest *m)
{
	if (!m)
		return;
	free(m->media_type);
	free(m->digest);
	free(m->body);
	free(m);
}

static CURL *pool_take(struct registry *r)
{
	CURL *c = NULL;

	pthread_mutex_lock(&r->pool_lock);
	if (r->n_idle > 0)
		c = r->idle[--r->n_idle];
	pthread_mutex_unlock(&r->pool_lock);
	return c ? c : curl_easy_init();
}

static void pool_give(struct registry *r, CURL *c)
{
	/* Options go, live connections and caches stay. */
	curl_easy_reset(c);
	pthread_mutex_lock(&r->pool_lock);
	if (r->n_idle < REGISTRY_POOL_MAX) {
		r->idle[r->n_idle++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&r->pool_lock);
	if (c)
		curl_easy_cleanup(c);
}

static CURLcode auth_apply(CURL *c, const struct registry_auth *a)
{
	CURLcode rc = CURLE_OK;

	if (a->bearer_token) {
		rc = curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
		if (rc == CURLE_OK)
			rc = curl_easy_setopt(c, CURLOPT_XOAUTH2_BEARER, a->bearer_token);
	} else if (a->username) {
		rc = curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
		if (rc == CURLE_OK)
			rc = curl_easy_setopt(c, CURLOPT_USERNAME, a->username);
		if (rc == CURLE_OK)
			rc = curl_easy_setopt(c, CURLOPT_PASSWORD, a->password ? a->password : "");
	}
	return rc;
}

static size_t body_abort(struct request *q, int r)
{
	q->failure = r;
	return 0; /* short count: curl stops with CURLE_WRITE_ERROR */
}

static size_t body_keep_error(struct request *q, long status, const char *data,
			      size_t n)
{
	if (status >= 300 && status < 400) {
		/* The body of a redirect curl is following is noise, but an
		 * endless one must not keep the transfer alive. */
		q->skipped += n;
		if (q->skipped > ERROR_BODY_MAX) {
			char where[256];

			request_where_now(q, where, sizeof(where));
			error_set(q->err, status, -EIO,
				  "redirect from %s has an oversized body", where);
			return body_abort(q, -EIO);
		}
		return n;
	}

	if (status != q->errbody_status) {
		q->errlen = 0;
		q->errbody_status = status;
	}
	if (!q->errbody) {
		q->errbody = malloc(ERROR_BODY_MAX);
		if (!q->errbody) {
			error_set(q->err, status, -ENOMEM, "out of memory");
			return body_abort(q, -ENOMEM);
		}
	}
	if (q->errlen + n > ERROR_BODY_MAX) {
		/* Enough to explain the failure: stop reading.  The status
		 * still decides the errno, not the abort. */
		memcpy(q->errbody + q->errlen, data, ERROR_BODY_MAX - q->errlen);
		q->errlen = ERROR_BODY_MAX;
		return 0;
	}
	memcpy(q->errbody + q->errlen, data, n);
	q->errlen += n;
	return n;
}

static size_t body_buffer(struct request *q, long status, const char *data,
			  size_t n)
{
	if (n > q->buf_max - q->len) {
		char where[256];

		request_where_now(q, where, sizeof(where));
		error_set(q->err, status, -EBADMSG,
			  "%s from %s is larger than %zu bytes", q->buf_what, where,
			  q->buf_max);
		return body_abort(q, -EBADMSG);
	}
	if (q->len + n > q->cap) {
		size_t cap = MAX(q->cap * 2, (size_t)16384);
		char *p;

		cap = MIN(MAX(cap, q->len + n), q->buf_max);
		p = realloc(q->buf, cap + 1);
		if (!p) {
			error_set(q->err, status, -ENOMEM, "out of memory");
			return body_abort(q, -ENOMEM);
		}
		q->buf = p;
		q->cap = cap;
	}
	memcpy(q->buf + q->len, data, n);
	q->len += n;
	return n;
}

/* Where a 206 starts: "bytes START-END/TOTAL". */
static bool content_range_start(CURL *c, uint64_t *ret)
{
	struct curl_header *h = NULL;
	unsigned long long start;
	char unit[8];

	if (curl_easy_header(c, "Content-Range", 0, CURLH_HEADER, -1, &h) != CURLHE_OK ||
	    !h->value)
		return false;
	if (sscanf(h->value, "%7s %llu-", unit, &start) != 2 || strcmp(unit, "bytes") != 0)
		return false;
	*ret = start;
	return true;
}

/* The first bytes of a blob response: is it the rest we asked for (206
 * from our offset), the whole blob again (200: skip what we have), or
 * something else? */
static size_t body_sink_start(struct request *q, long status)
{
	curl_off_t cl = -1;
	uint64_t expect = q->size, start;
	char where[256];

	q->length_seen = true;
	if (q->got > 0 && status == 206) {
		if (!content_range_start(q->curl, &start) || start != q->got) {
			request_where_now(q, where, sizeof(where));
			error_set(q->err, status, -EBADMSG,
				  "%s answers a Range request from byte %" PRIu64
				  " with another range", where, q->got);
			return body_abort(q, -EBADMSG);
		}
		expect = q->size - q->got;
	} else if (status == 206) {
		request_where_now(q, where, sizeof(where));
		error_set(q->err, status, -EBADMSG, "%s sends a partial blob unasked", where);
		return body_abort(q, -EBADMSG);
	} else {
		/* A 200 to a Range request: the whole blob again. */
		q->skip = q->got;
	}
	/* A wrong Content-Length is known before the first byte is worth
	 * downloading. */
	if (curl_easy_getinfo(q->curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) == CURLE_OK &&
	    cl >= 0 && (uint64_t)cl != expect) {
		request_where_now(q, where, sizeof(where));
		error_set(q->err, status, -EBADMSG,
			  "%s announces %" PRIu64 " bytes, the descriptor says %" PRIu64,
			  where, (uint64_t)cl + (status == 206 ? q->got : 0), q->size);
		return body_abort(q, -EBADMSG);
	}
	return 1;
}

static size_t body_sink(struct request *q, long status, const char *data,
			size_t n)
{
	size_t whole = n;
	char where[256];
	int r;

	if (!q->length_seen && body_sink_start(q, status) == 0)
		return 0;
	if (q->skip > 0) {
		size_t d = (size_t)MIN((uint64_t)n, q->skip);

		q->skip -= d;
		data += d;
		n -= d;
		if (n == 0)
			return whole;
	}
	if ((uint64_t)n > q->size - q->got) {
		request_where_now(q, where, sizeof(where));
		error_set(q->err, status, -EBADMSG,
			  "%s sends more than the %" PRIu64 " bytes of the descriptor",
			  where, q->size);
		return body_abort(q, -EBADMSG);
	}
	hasher_update(q->hasher, data, n);
	q->got += n;
	r = q->sink(q->userdata, data, n);
	if (r < 0) {
		q->sink_failed = true;
		error_set(q->err, status, r, "blob sink failed: %s", errno_name(r));
		return body_abort(q, r);
	}
	return whole;
}

static size_t request_write(char *data, size_t size, size_t nmemb, void *userp)
{
	struct request *q = userp;
	size_t n = size * nmemb;
	long status = 0;

	/* The status of the response whose body this is: a redirect body
	 * or an error body must never reach the sink. */
	curl_easy_getinfo(q->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status < 200 || status > 299)
		return body_keep_error(q, status, data, n);

	switch (q->kind) {
	case BODY_BUFFER:
		return body_buffer(q, status, data, n);
	case BODY_SINK:
		return body_sink(q, status, data, n);
	case BODY_NONE:
	default:
		return n;
	}
}

/* The registry's own explanation, {"errors":[{"code":..., "message":...}]},
 * as "CODE: message"; false when the body is not that. */
static bool error_body_describe(const struct request *q, char *out, size_t outlen)
{
	json_auto_t *root = NULL;
	json_t *first;
	const char *code, *msg;

	if (!q->errbody || q->errlen == 0)
		return false;
	root = json_loadb(q->errbody, q->errlen, 0, NULL);
	first = json_array_get(json_object_get(root, "errors"), 0);
	code = json_string_value(json_object_get(first, "code"));
	msg = json_string_value(json_object_get(first, "message"));
	if (!code && !msg)
		return false;
	if (code && msg)
		snprintf(out, outlen, "%s: %s", code, msg);
	else
		snprintf(out, outlen, "%s", code ? code : msg);
	return true;
}

static int status_to_errno(long status)
{
	switch (status) {
	case 404:
		return -ENOENT;
	case 401:
	case 403:
		return -EACCES;
	case 502:
	case 503:
	case 504:
		return -EHOSTUNREACH;
	default:
		/* 429 included, until retries with Retry-After exist. */
		return -EIO;
	}
}

/* A TLS alert from the server while reading: with TLS 1.3 this is how a
 * refused client certificate shows, after the handshake seemed done.  It
 * is about configuration, not the network: no retry, EIO. */
static bool tls_alert(const struct request *q)
{
	return (q->rc == CURLE_RECV_ERROR || q->rc == CURLE_SEND_ERROR) &&
	       strstr(q->curl_msg, "SSL") && strstr(q->curl_msg, "alert");
}

static int curl_to_errno(struct request *q, CURLcode rc)
{
	char host[256];
	const char *why = q->curl_msg[0] ? q->curl_msg : curl_easy_strerror(rc);

	request_host(q, host, sizeof(host));
	switch (rc) {
	case CURLE_OUT_OF_MEMORY:
		return error_set(q->err, 0, -ENOMEM, "out of memory");
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_COULDNT_CONNECT:
		return error_set(q->err, 0, -EHOSTUNREACH, "cannot reach %s: %s",
				 host, why);
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
		q->rc = rc;
		if (tls_alert(q))
			return error_set(q->err, 0, -EIO,
					 "TLS with %s failed (client certificate refused?): %s",
					 host, why);
		/* fall through */
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		/* The connection broke under the transfer: as transient as
		 * a refused connect, and retried the same way. */
		return error_set(q->err, q->status, -EHOSTUNREACH,
				 "connection to %s broke: %s", host, why);
	case CURLE_OPERATION_TIMEDOUT:
		return error_set(q->err, q->status, -ETIMEDOUT,
				 "%s timed out: %s", host, why);
	case CURLE_ABORTED_BY_CALLBACK:
		return error_set(q->err, 0, -ECANCELED,
				 "request to %s cancelled: pullfs is stopping", host);
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
	case CURLE_SSL_INVALIDCERTSTATUS:
		return error_set(q->err, 0, -EIO,
				 "TLS certificate of %s does not verify: %s", host, why);
	case CURLE_SSL_CONNECT_ERROR:
		return error_set(q->err, 0, -EIO, "TLS handshake with %s failed: %s",
				 host, why);
	case CURLE_TOO_MANY_REDIRECTS:
		return error_set(q->err, q->status, -EIO,
				 "more than %ld redirects, last at %s", MAX_REDIRECTS, host);
	case CURLE_UNSUPPORTED_PROTOCOL:
		return error_set(q->err, q->status, -EIO,
				 "%s redirects to a protocol that is not allowed: %s",
				 q->where, why);
	default:
		return error_set(q->err, q->status, -EIO, "request to %s failed: %s",
				 host, why);
	}
}

/* Copies what the callers need out of the handle and picks the errno.
 * A failure recorded by a callback wins; then an HTTP error status (even
 * when reading its body was cut short); then the curl result. */
static int request_finish(struct request *q, CURLcode rc)
{
	struct curl_header *h = NULL;
	char *ct = NULL;
	char where[256];
	char why[400];

	curl_easy_getinfo(q->curl, CURLINFO_RESPONSE_CODE, &q->status);

	if (q->failure < 0)
		return q->failure;

	if (q->status >= 400) {
		request_where_now(q, where, sizeof(where));
		if (error_body_describe(q, why, sizeof(why)))
			return error_set(q->err, q->status, status_to_errno(q->status),
					 "%s", why);
		return error_set(q->err, q->status, status_to_errno(q->status),
				 "HTTP %ld from %s", q->status, where);
	}
	if (rc != CURLE_OK)
		return curl_to_errno(q, rc);
	if (q->status < 200 || q->status > 299) {
		request_where_now(q, where, sizeof(where));
		return error_set(q->err, q->status, -EIO,
				 "unexpected HTTP %ld from %s", q->status, where);
	}

	if (curl_easy_getinfo(q->curl, CURLINFO_CONTENT_TYPE, &ct) == CURLE_OK && ct) {
		q->content_type = strdup(ct);
		if (!q->content_type)
			return error_set(q->err, q->status, -ENOMEM, "out of memory");
	}
	if (curl_easy_header(q->curl, "Docker-Content-Digest", 0, CURLH_HEADER,
			     -1, &h) == CURLHE_OK && h->value) {
		q->docker_digest = strdup(h->value);
		if (!q->docker_digest)
			return error_set(q->err, q->status, -ENOMEM, "out of memory");
	}
	return 0;
}


static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static bool cancelled(const struct registry *r)
{
	return r->cancel && atomic_load(r->cancel);
}

/* Sleeps between retries in slices, so that a stop is noticed. */
static void sleep_ms(const struct registry *r, int64_t ms)
{
	while (ms > 0 && !cancelled(r)) {
		int64_t slice = ms < 100 ? ms : 100;
		struct timespec ts = { .tv_sec = 0, .tv_nsec = slice * 1000000L };

		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
		ms -= slice;
	}
}

/* curl calls this about once a second and on every chunk: the way to
 * stop a transfer that is waiting for a slow server. */
static int progress_cancel(void *userdata, curl_off_t dltotal, curl_off_t dlnow,
			   curl_off_t ultotal, curl_off_t ulnow)
{
	return cancelled(userdata) ? 1 : 0;
}

#define SETOPT(c, opt, val)                                                   \
	do {                                                                  \
		if (curl_easy_setopt((c), (opt), (val)) != CURLE_OK)          \
			goto setopt_failed;                                   \
	} while (0)

static int request_setup(struct registry *r, struct request *q, CURL *c,
			 const char *url, const struct hosts_endpoint *ep,
			 const struct curl_slist *headers, bool head,
			 const struct registry_auth *auth)
{
	/* A registry reached over HTTPS may not bounce us to plain HTTP. */
	const char *protocols = ep->https ? "https" : "http,https";
	char range[48];

	SETOPT(c, CURLOPT_URL, url);
	SETOPT(c, CURLOPT_SHARE, r->share);
	SETOPT(c, CURLOPT_PROTOCOLS_STR, protocols);
	SETOPT(c, CURLOPT_REDIR_PROTOCOLS_STR, protocols);
	SETOPT(c, CURLOPT_FOLLOWLOCATION, 1L);
	SETOPT(c, CURLOPT_MAXREDIRS, MAX_REDIRECTS);
	SETOPT(c, CURLOPT_UNRESTRICTED_AUTH, 0L);
	SETOPT(c, CURLOPT_NOSIGNAL, 1L);
	if (r->cancel) {
		SETOPT(c, CURLOPT_XFERINFOFUNCTION, progress_cancel);
		SETOPT(c, CURLOPT_XFERINFODATA, r);
		SETOPT(c, CURLOPT_NOPROGRESS, 0L);
	}
	SETOPT(c, CURLOPT_CONNECTTIMEOUT_MS, r->connect_timeout_ms);
	SETOPT(c, CURLOPT_LOW_SPEED_LIMIT, LOW_SPEED_BYTES_PER_S);
	SETOPT(c, CURLOPT_LOW_SPEED_TIME, r->low_speed_time_s);
	SETOPT(c, CURLOPT_TCP_KEEPALIVE, 1L);
	SETOPT(c, CURLOPT_TCP_KEEPIDLE, 60L);
	SETOPT(c, CURLOPT_TCP_KEEPINTVL, 30L);
	SETOPT(c, CURLOPT_SSL_VERIFYPEER, 1L);
	SETOPT(c, CURLOPT_SSL_VERIFYHOST, 2L);
	if (ep->ca_file)
		SETOPT(c, CURLOPT_CAINFO, ep->ca_file);
	if (ep->client_cert)
		SETOPT(c, CURLOPT_SSLCERT, ep->client_cert);
	if (ep->client_key)
		SETOPT(c, CURLOPT_SSLKEY, ep->client_key);
	SETOPT(c, CURLOPT_USERAGENT, r->user_agent);
	SETOPT(c, CURLOPT_ERRORBUFFER, q->curl_msg);
	SETOPT(c, CURLOPT_WRITEFUNCTION, request_write);
	SETOPT(c, CURLOPT_WRITEDATA, q);
	if (headers)
		SETOPT(c, CURLOPT_HTTPHEADER, headers);
	if (head)
		SETOPT(c, CURLOPT_NOBODY, 1L);
	if (q->kind == BODY_SINK && q->got > 0) {
		snprintf(range, sizeof(range), "%" PRIu64 "-", q->got);
		SETOPT(c, CURLOPT_RANGE, range);
	}
	if (auth && auth_apply(c, auth) != CURLE_OK)
		goto setopt_failed;
	return 0;

setopt_failed:
	/* Only an allocation failure or a libcurl without an option we
	 * rely on for safety gets here; neither may run the request. */
	return error_set(q->err, 0, -ENOMEM, "cannot configure libcurl for %s",
			 q->where);
}

static void request_reset(struct request *q)
{
	q->errlen = 0;
	q->errbody_status = 0;
	q->skipped = 0;
	q->failure = 0;
	q->status = 0;
	q->curl_msg[0] = '\0';
	q->length_seen = false;
	q->skip = 0;
	q->retry_after_ms = -1;
	q->rc = CURLE_OK;
	q->have_challenge = false;
	free(q->content_type);
	q->content_type = NULL;
	free(q->docker_digest);
	q->docker_digest = NULL;
	if (q->kind == BODY_BUFFER) {
		if (q->wipe_body && q->buf)
			explicit_bzero(q->buf, q->len);
		q->len = 0;
	}
}

/* What the response said about authentication and about when to come
 * back, read before the handle is reset. */
static void request_capture(struct request *q)
{
	struct curl_header *h = NULL;
	size_t amount = 1;

	if (q->status == 401) {
		for (size_t i = 0; i < amount; i++) {
			struct auth_challenge ch;

			if (curl_easy_header(q->curl, "WWW-Authenticate", i, CURLH_HEADER,
					     -1, &h) != CURLHE_OK)
				break;
			amount = MIN(h->amount, (size_t)16);
			if (auth_challenge_parse(h->value, &ch) < 0)
				continue;
			/* Bearer wins over Basic when a server offers both. */
			if (!q->have_challenge || ch.scheme == AUTH_SCHEME_BEARER) {
				q->challenge = ch;
				q->have_challenge = true;
			}
		}
	}
	if (retry_status_is_transient(q->status) &&
	    curl_easy_header(q->curl, "Retry-After", 0, CURLH_HEADER, -1, &h) == CURLHE_OK)
		q->retry_after_ms = retry_after_parse(h->value, time(NULL));
}

static int perform_once(struct registry *r, struct request *q, const char *url,
			const struct hosts_endpoint *ep,
			const struct curl_slist *headers, bool head,
			const struct registry_auth *auth)
{
	CURL *c;
	int k;

	request_reset(q);
	c = pool_take(r);
	if (!c)
		return error_set(q->err, 0, -ENOMEM, "out of memory");
	q->curl = c;
	k = request_setup(r, q, c, url, ep, headers, head, auth);
	if (k >= 0) {
		q->rc = curl_easy_perform(c);
		k = request_finish(q, q->rc);
		request_capture(q);
	}
	q->curl = NULL;
	pool_give(r, c);
	return k;
}

static void request_done(struct request *q)
{
	if (q->wipe_body && q->buf)
		explicit_bzero(q->buf, q->len);
	free(q->buf);
	free(q->errbody);
	free(q->content_type);
	free(q->docker_digest);
}

/* The credential for an endpoint: for the registry itself, the one of its
 * reference domain; a mirror only gets its own, so that a registry's
 * credentials never reach a mirror.  Returns 0, -ENOENT or -errno. */
static int creds_for(struct registry *r, const struct hosts_endpoint *ep,
		     const char *domain, struct credential *ret)
{
	return credentials_cache_lookup(r->creds, ep->mirror ? ep->host : domain,
					HELPER_TIMEOUT_MS, ret);
}

static void realm_describe(const char *realm, char *out, size_t outlen)
{
	url_describe(realm, out, outlen);
}

/* Asks the challenge's realm for a token for scope: GET with Basic
 * credentials (or none), or the OAuth2 refresh-token grant as a POST when
 * the credential is an identity token. */
static int token_fetch(struct registry *r, const struct hosts_endpoint *ep,
		       const struct auth_challenge *ch, const char *scope,
		       const struct credential *cred, char **ret_token,
		       int64_t *ret_expires_s, struct registry_error *err)
{
	struct request q = { .err = err, .kind = BODY_BUFFER, .buf_max = AUTH_TOKEN_BODY_MAX,
			     .buf_what = "token response", .wipe_body = true };
	struct registry_auth basic = { 0 };
	_cleanup_free_ char *url = NULL;
	char *post = NULL;
	char realm[256];
	char *e_service = NULL, *e_scope = NULL, *e_user = NULL, *e_refresh = NULL;
	struct hosts_endpoint tep = *ep;
	bool identity = cred && cred->identity_token;
	CURL *c = NULL;
	int k;

	realm_describe(ch->realm, realm, sizeof(realm));
	snprintf(q.where, sizeof(q.where), "%s", realm);
	/* Credentials go to the realm only as safely as to the registry. */
	if (ep->https && strncasecmp(ch->realm, "https://", 8) != 0)
		return error_set(err, 401, -EACCES,
				 "token realm %s of %s is not HTTPS", realm, ep->host);
	tep.https = strncasecmp(ch->realm, "https://", 8) == 0;

	c = pool_take(r);
	if (!c)
		return error_set(err, 0, -ENOMEM, "out of memory");
	e_service = curl_easy_escape(c, ch->service, 0);
	e_scope = curl_easy_escape(c, scope, 0);
	if (cred && cred->username)
		e_user = curl_easy_escape(c, cred->username, 0);
	if (identity)
		e_refresh = curl_easy_escape(c, cred->identity_token, 0);
	if (!e_service || !e_scope || (cred && cred->username && !e_user) ||
	    (identity && !e_refresh)) {
		k = error_set(err, 0, -ENOMEM, "out of memory");
		goto out;
	}
	if (identity) {
		if (asprintf(&post, "grant_type=refresh_token&service=%s&scope=%s&client_id=pullfs&refresh_token=%s",
			     e_service, e_scope, e_refresh) < 0) {
			post = NULL;
			k = error_set(err, 0, -ENOMEM, "out of memory");
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
		k = error_set(err, 0, -ENOMEM, "out of memory");
		goto out;
	}

	q.curl = c;
	request_reset(&q);
	k = request_setup(r, &q, c, url, &tep, NULL, false, &basic);
	if (k >= 0 && post && curl_easy_setopt(c, CURLOPT_POSTFIELDS, post) != CURLE_OK)
		k = error_set(err, 0, -ENOMEM, "out of memory");
	if (k >= 0) {
		q.rc = curl_easy_perform(c);
		k = request_finish(&q, q.rc);
	}
	if (k < 0) {
		/* Whatever the token server said, say it in our words: its
		 * body may echo what it was sent. */
		if (q.status == 401 || q.status == 403)
			k = error_set(err, q.status, -EACCES, "token server %s refused %s", realm,
				      cred ? "the credentials" : "anonymous access");
		else if (q.status >= 400)
			k = error_set(err, q.status, k, "token server %s answered HTTP %ld",
				      realm, q.status);
		goto out;
	}
	k = auth_token_parse(q.buf ? q.buf : "", q.len, ret_token, ret_expires_s, NULL);
	if (k == -EBADMSG)
		k = error_set(err, q.status, -EACCES, "token server %s sent no usable token", realm);
	else if (k < 0)
		k = error_set(err, q.status, k, "out of memory");
out:
	if (post) {
		explicit_bzero(post, strlen(post));
		free(post);
	}
	if (e_refresh)
		explicit_bzero(e_refresh, strlen(e_refresh));
	curl_free(e_service);
	curl_free(e_scope);
	curl_free(e_user);
	curl_free(e_refresh);
	q.curl = NULL;
	pool_give(r, c);
	request_done(&q);
	return k;
}

/* What a request carries after ch: fills auth (pointing into *token or
 * *cred, both owned by the caller).  force: the cached token just failed.
 * Returns 0 (auth may stay empty: no credentials for Basic) or -errno. */
static int auth_prepare(struct registry *r, struct request *q,
			const struct hosts_endpoint *ep, const char *domain,
			const char *repo, const struct auth_challenge *ch,
			bool force, struct registry_auth *auth, char **token,
			struct credential *cred)
{
	_cleanup_free_ char *scope = NULL;
	int64_t expires_s = 0, now;
	int k;

	*auth = (struct registry_auth){ 0 };
	if (ch->scheme == AUTH_SCHEME_BASIC) {
		k = creds_for(r, ep, domain, cred);
		if (k == -ENOENT || (k == 0 && !cred->username))
			return 0;
		if (k < 0)
			return error_set(q->err, 0, k, "cannot get credentials for %s: %s",
					 ep->mirror ? ep->host : domain, errno_name(k));
		auth->username = cred->username;
		auth->password = cred->password;
		return 0;
	}

	if (auth_scope_pull(repo, &scope) < 0)
		return error_set(q->err, 0, -ENOMEM, "out of memory");
	now = mono_ns();
	if (!force && auth_cache_get(r->auth, ch->realm, ch->service, scope, now, token) == 0) {
		auth->bearer_token = *token;
		return 0;
	}
	k = creds_for(r, ep, domain, cred);
	if (k < 0 && k != -ENOENT)
		return error_set(q->err, 0, k, "cannot get credentials for %s: %s",
				 ep->mirror ? ep->host : domain, errno_name(k));
	k = token_fetch(r, ep, ch, scope, k == 0 ? cred : NULL, token, &expires_s, q->err);
	if (k < 0)
		return k;
	/* Renew a little early, so that a token is not sent as it expires. */
	(void)auth_cache_put(r->auth, ch->realm, ch->service, scope, *token,
			     now + (expires_s - MIN(expires_s / 10, (int64_t)30)) * 1000000000LL);
	auth->bearer_token = *token;
	return 0;
}

/* One try at an endpoint, with what the host asked for last time; a 401
 * is answered once with fresh credentials. */
static int attempt_run(struct registry *r, struct request *q, const char *url,
		       const struct hosts_endpoint *ep, const char *domain,
		       const char *repo, const struct curl_slist *headers, bool head)
{
	struct auth_challenge known, ch;
	struct registry_auth auth = { 0 };
	struct credential cred = { 0 };
	char *token = NULL;
	bool had = auth_cache_recall(r->auth, ep->host, &known) == 0;
	bool sent_basic;
	int k;

	if (had) {
		k = auth_prepare(r, q, ep, domain, repo, &known, false, &auth, &token, &cred);
		if (k < 0)
			goto out;
	}
	sent_basic = auth.username != NULL;
	k = perform_once(r, q, url, ep, headers, head, &auth);
	if (q->status != 401 || !q->have_challenge)
		goto out;

	ch = q->challenge;
	if (sent_basic && ch.scheme == AUTH_SCHEME_BASIC) {
		k = error_set(q->err, 401, -EACCES, "%s refused the credentials for %s",
			      ep->host, ep->mirror ? ep->host : domain);
		goto out;
	}
	if (token && ch.scheme == AUTH_SCHEME_BEARER) {
		_cleanup_free_ char *scope = NULL;

		if (auth_scope_pull(repo, &scope) == 0)
			auth_cache_drop(r->auth, ch.realm, ch.service, scope, token);
	}
	(void)auth_cache_remember(r->auth, ep->host, &ch);
	auth_secret_free(TAKE_PTR(token));
	credential_clear(&cred);
	k = auth_prepare(r, q, ep, domain, repo, &ch, true, &auth, &token, &cred);
	if (k < 0)
		goto out;
	if (!auth.username && !auth.bearer_token) {
		k = error_set(q->err, 401, -EACCES,
			      "%s requires authentication and there are no credentials for %s",
			      ep->host, ep->mirror ? ep->host : domain);
		goto out;
	}
	k = perform_once(r, q, url, ep, headers, head, &auth);
	if (q->status == 401 && auth.bearer_token) {
		/* A fresh token that does not open the door: no use keeping it. */
		_cleanup_free_ char *scope = NULL;

		if (auth_scope_pull(repo, &scope) == 0)
			auth_cache_drop(r->auth, ch.realm, ch.service, scope, token);
	}
	if (q->status == 401)
		k = error_set(q->err, 401, -EACCES, "%s refused the %s for %s", ep->host,
			      auth.bearer_token ? "token" : "credentials",
			      ep->mirror ? ep->host : domain);
out:
	auth_secret_free(token);
	credential_clear(&cred);
	return k;
}

static bool attempt_is_transient(const struct request *q)
{
	if (q->failure < 0)
		return false; /* a callback judged the response */
	if (retry_status_is_transient(q->status))
		return true;
	if (q->status >= 400 || tls_alert(q))
		return false;
	switch (q->rc) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
	case CURLE_OPERATION_TIMEDOUT:
		return true;
	default:
		return false;
	}
}

/* An endpoint, with retries when it is the last one: a mirror that fails
 * passes the request on at once instead. */
static int endpoint_run(struct registry *r, struct request *q, const char *url,
			const struct hosts_endpoint *ep, bool last,
			const char *domain, const char *repo,
			const struct curl_slist *headers, bool head)
{
	int64_t waited = 0, d;
	unsigned retry = 0, resumes = 0;
	int k;

	for (;;) {
		uint64_t before = q->got;

		k = attempt_run(r, q, url, ep, domain, repo, headers, head);
		if (k >= 0 || !attempt_is_transient(q))
			return k;
		/* Progress is not failure: a broken blob picks up where it
		 * stopped, without waiting and without using up a retry. */
		if (q->kind == BODY_SINK && q->got > before && resumes < MAX_RESUMES) {
			resumes++;
			continue;
		}
		if (!last)
			return k;
		d = retry_delay_ms(&r->retry, retry++, waited, q->retry_after_ms);
		if (d < 0)
			return k;
		sleep_ms(r, d);
		waited += d;
	}
}

static bool may_fall_through(const struct request *q, int k)
{
	if (k == -ENOMEM || k == -EINVAL || q->sink_failed)
		return false;
	/* Bytes the sink took cannot be taken back: a blob that went wrong
	 * after them is over. */
	if (k == -EBADMSG && q->kind == BODY_SINK && q->got > 0)
		return false;
	return true;
}

static int op_run(struct registry *r, struct request *q, const char *domain,
		  const char *repo, const char *kind, const char *ref,
		  unsigned cap, const struct curl_slist *headers, bool head)
{
	struct hosts_endpoint eps[HOSTS_MAX_ENDPOINTS];
	size_t n = registry_hosts_endpoints(r->hosts, domain, api_host(domain),
					    registry_is_insecure(r, domain), cap, eps);
	int k = -EIO;

	for (size_t i = 0; i < n; i++) {
		const struct hosts_endpoint *ep = &eps[i];
		_cleanup_free_ char *url = NULL;

		if (asprintf(&url, "%s://%s%s/%s/%s/%s%s%s", ep->https ? "https" : "http",
			     ep->host, ep->path, repo, kind, ref,
			     ep->mirror ? "?ns=" : "", ep->mirror ? ep->ns : "") < 0)
			return error_set(q->err, 0, -ENOMEM, "out of memory");
		url_describe(url, q->where, sizeof(q->where));
		k = endpoint_run(r, q, url, ep, i + 1 == n, domain, repo, headers, head);
		if (k >= 0 || i + 1 == n || !may_fall_through(q, k))
			return k;
	}
	return k;
}

/* What a GET and a HEAD of a manifest share: the names checked, whether
 * the reference is a digest, the Accept header. */
static int manifest_request_begin(const char *domain, const char *repo,
				  const char *tag_or_digest, bool *ret_by_digest,
				  struct curl_slist **ret_headers,
				  struct registry_error *err)
{
	int k;

	error_clear(err);
	k = check_names(domain, repo, err);
	if (k < 0)
		return k;
	k = check_manifest_ref(tag_or_digest, ret_by_digest, err);
	if (k < 0)
		return k;
	*ret_headers = curl_slist_append(NULL, "Accept: " MANIFEST_ACCEPT);
	if (!*ret_headers)
		return error_set(err, 0, -ENOMEM, "out of memory");
	return 0;
}

int registry_get_manifest(struct registry *r, const char *domain,
			  const char *repo, const char *tag_or_digest,
			  struct registry_manifest **ret,
			  struct registry_error *err)
{
	_cleanup_(curl_slist_free_allp) struct curl_slist *headers = NULL;
	_cleanup_(registry_manifest_freep) struct registry_manifest *m = NULL;
	struct request q = { .err = err, .kind = BODY_BUFFER, .buf_max = MANIFEST_MAX_BYTES,
			     .buf_what = "manifest" };
	char digest[DIGEST_STRING_MAX];
	bool by_digest;
	int k;

	k = manifest_request_begin(domain, repo, tag_or_digest, &by_digest,
				   &headers, err);
	if (k < 0)
		return k;

	k = op_run(r, &q, domain, repo, "manifests", tag_or_digest,
		   by_digest ? HOSTS_CAP_PULL : HOSTS_CAP_RESOLVE, headers, false);
	if (k < 0)
		goto out;

	k = digest_buffer(q.buf ? q.buf : "", q.len, digest);
	if (k < 0) {
		error_set(err, q.status, k, "out of memory");
		goto out;
	}
	if (by_digest && strcmp(digest, tag_or_digest) != 0) {
		k = error_set(err, q.status, -EBADMSG,
			      "manifest from %s hashes to %s", q.where, digest);
		goto out;
	}

	m = calloc(1, sizeof(*m));
	if (!m || !(m->digest = strdup(digest))) {
		k = error_set(err, q.status, -ENOMEM, "out of memory");
		goto out;
	}
	if (!q.buf && !(q.buf = malloc(1))) {
		k = error_set(err, q.status, -ENOMEM, "out of memory");
		goto out;
	}
	q.buf[q.len] = '\0'; /* body_buffer() keeps one spare byte */
	m->body = TAKE_PTR(q.buf);
	m->len = q.len;
	m->media_type = TAKE_PTR(q.content_type);
	*ret = TAKE_PTR(m);
	k = 0;
out:
	request_done(&q);
	return k;
}

int registry_head_manifest(struct registry *r, const char *domain,
			   const char *repo, const char *tag_or_digest,
			   char **ret_digest, struct registry_error *err)
{
	_cleanup_(curl_slist_free_allp) struct curl_slist *headers = NULL;
	_cleanup_(registry_manifest_freep) struct registry_manifest *m = NULL;
	struct request q = { .err = err, .kind = BODY_NONE };
	bool by_digest;
	int k;

	k = manifest_request_begin(domain, repo, tag_or_digest, &by_digest,
				   &headers, err);
	if (k < 0)
		return k;

	k = op_run(r, &q, domain, repo, "manifests", tag_or_digest,
		   by_digest ? HOSTS_CAP_PULL : HOSTS_CAP_RESOLVE, headers, true);
	if (k < 0)
		goto out;

	if (q.docker_digest && digest_is_valid(q.docker_digest)) {
		if (by_digest && strcmp(q.docker_digest, tag_or_digest) != 0) {
			k = error_set(err, q.status, -EBADMSG,
				      "%s reports digest %s", q.where, q.docker_digest);
			goto out;
		}
		*ret_digest = TAKE_PTR(q.docker_digest);
		k = 0;
		goto out;
	}

	/* No usable header (absent, or an algorithm other than sha256):
	 * fetch the body and hash it ourselves. */
	k = registry_get_manifest(r, domain, repo, tag_or_digest, &m, err);
	if (k < 0)
		goto out;
	*ret_digest = TAKE_PTR(m->digest);
out:
	request_done(&q);
	return k;
}

int registry_get_blob(struct registry *r, const char *domain,
		      const char *repo, const char *digest, uint64_t size,
		      registry_sink_fn sink, void *userdata,
		      struct registry_error *err)
{
	_cleanup_(hasher_freep) struct hasher *hasher = NULL;
	struct request q = { .err = err, .kind = BODY_SINK, .sink = sink,
			     .userdata = userdata, .size = size };
	char got[DIGEST_STRING_MAX];
	int k;

	error_clear(err);
	k = check_names(domain, repo, err);
	if (k < 0)
		return k;
	if (!digest || !digest_is_valid(digest))
		return error_set(err, 0, -EINVAL, "invalid digest \"%s\"",
				 digest ? digest : "");
	hasher = hasher_new();
	if (!hasher)
		return error_set(err, 0, -ENOMEM, "out of memory");
	q.hasher = hasher;

	k = op_run(r, &q, domain, repo, "blobs", digest, HOSTS_CAP_PULL, NULL, false);
	if (k < 0)
		goto out;

	if (q.got != size) {
		k = error_set(err, q.status, -EBADMSG,
			      "blob from %s ends after %" PRIu64 " of %" PRIu64 " bytes",
			      q.where, q.got, size);
		goto out;
	}
	hasher_final(hasher, got);
	if (strcmp(got, digest) != 0) {
		k = error_set(err, q.status, -EBADMSG,
			      "blob from %s hashes to %s", q.where, got);
		goto out;
	}
	k = 0;
out:
	request_done(&q);
	return k;
}

/* The transport over libcurl.  Each request borrows an easy handle from a
 * small pool and sets the same hardened options on it: http/https only (an
 * https endpoint may not be redirected to http), connect and low-speed
 * timeouts, credentials given to curl as credentials so that it drops them
 * when a redirect leaves the host.  Bodies of redirects are thrown away,
 * bodies of errors kept (capped) for the registry's explanation, and the
 * body of a 2xx response goes to the caller.  A CURLcode never leaves this
 * file: it becomes an errno and one line of text. */
#include "transport.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hosts.h"
#include "macro.h"
#include "registry.h"

/* Idle easy handles kept for reuse.  libcurl's shared connection cache is
 * documented as unsafe across concurrent threads (curl known bug "A shared
 * connection cache is not thread-safe"), so connections are reused by
 * keeping the easy handle that owns them instead: curl_easy_reset() leaves
 * live connections in the handle. */
#define POOL_MAX 16

#define MAX_REDIRECTS 5L
#define LOW_SPEED_BYTES_PER_S 1024L

struct curl_transport {
	struct registry_transport base;
	long connect_timeout_ms;
	long low_speed_time_s;
	char *user_agent;
	char *user_agent_background; /* user_agent, " (background)" */
	const atomic_bool *cancel;   /* borrowed; may be NULL */

	/* DNS cache and TLS sessions, shared by every handle; libcurl takes
	 * share_locks[kind] around each access. */
	CURLSH *share;
	pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
	size_t n_share_locks; /* how many of share_locks are initialised */

	pthread_mutex_t pool_lock;
	bool pool_lock_ready;
	CURL *idle[POOL_MAX]; /* protected by pool_lock */
	size_t n_idle;	      /* protected by pool_lock */
};

/* One request in progress, reachable from the curl callbacks. */
struct curl_call {
	const struct curl_transport *t;
	const struct transport_request *req;
	struct transport_response *resp;
	struct error_detail *err;
	CURL *curl;
	char where[TRANSPORT_WHERE_MAX]; /* of the URL asked for */
	size_t skipped;			 /* bytes of redirect bodies thrown away */
	long body_status;		 /* status whose 2xx body is being passed on */
	/* Set by a callback that stopped the transfer; wins over the
	 * CURLcode that the abort produces. */
	int failure;
	bool enough; /* the caller had what it wanted */
	char curl_msg[CURL_ERROR_SIZE];
};

DEFINE_TRIVIAL_CLEANUP_FUNC(struct curl_slist *, curl_slist_free_all)

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_FAILED_INIT;

static void global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void share_lock(CURL *c, curl_lock_data data, curl_lock_access access, void *userp)
{
	struct curl_transport *t = userp;

	if ((unsigned)data < CURL_LOCK_DATA_LAST)
		pthread_mutex_lock(&t->share_locks[data]);
}

static void share_unlock(CURL *c, curl_lock_data data, void *userp)
{
	struct curl_transport *t = userp;

	if ((unsigned)data < CURL_LOCK_DATA_LAST)
		pthread_mutex_unlock(&t->share_locks[data]);
}

static CURL *pool_take(struct curl_transport *t)
{
	CURL *c = NULL;

	pthread_mutex_lock(&t->pool_lock);
	if (t->n_idle > 0)
		c = t->idle[--t->n_idle];
	pthread_mutex_unlock(&t->pool_lock);
	return c ? c : curl_easy_init();
}

static void pool_give(struct curl_transport *t, CURL *c)
{
	/* Options go, live connections and caches stay. */
	curl_easy_reset(c);
	pthread_mutex_lock(&t->pool_lock);
	if (t->n_idle < POOL_MAX) {
		t->idle[t->n_idle++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&t->pool_lock);
	if (c)
		curl_easy_cleanup(c);
}

/* Where the handle is now (after redirects), for messages. */
static void call_where_now(const struct curl_call *cc, char *out, size_t outlen)
{
	char *eff = NULL;

	if (curl_easy_getinfo(cc->curl, CURLINFO_EFFECTIVE_URL, &eff) == CURLE_OK && eff)
		transport_describe_url(eff, out, outlen);
	else
		snprintf(out, outlen, "%s", cc->where);
}

/* Host part of the URL curl ended on, for messages about the connection
 * rather than the resource. */
static void call_host(const struct curl_call *cc, char *out, size_t outlen)
{
	char *eff = NULL;

	if (curl_easy_getinfo(cc->curl, CURLINFO_EFFECTIVE_URL, &eff) != CURLE_OK || !eff) {
		snprintf(out, outlen, "(unknown host)");
		return;
	}
	transport_describe_url(eff, out, outlen);
	out[strcspn(out, "/")] = '\0';
}

static bool header_value(CURL *c, const char *name, size_t index, const char **ret,
			 size_t *ret_amount)
{
	struct curl_header *h = NULL;

	if (curl_easy_header(c, name, index, CURLH_HEADER, -1, &h) != CURLHE_OK || !h->value)
		return false;
	*ret = h->value;
	if (ret_amount)
		*ret_amount = h->amount;
	return true;
}

/* "bytes START-END/TOTAL" */
static int64_t content_range_start(CURL *c)
{
	const char *v;
	unsigned long long start;
	char unit[8];

	if (!header_value(c, "Content-Range", 0, &v, NULL) ||
	    sscanf(v, "%7s %llu-", unit, &start) != 2 || strcmp(unit, "bytes") != 0 ||
	    start > INT64_MAX)
		return -1;
	return (int64_t)start;
}

static size_t call_abort(struct curl_call *cc, int r)
{
	cc->failure = r;
	return 0; /* short count: curl stops with CURLE_WRITE_ERROR */
}

static size_t keep_error_body(struct curl_call *cc, long status, const char *data, size_t n)
{
	struct transport_response *resp = cc->resp;

	if (status >= 300 && status < 400) {
		/* The body of a redirect curl is following is noise, but an
		 * endless one must not keep the transfer alive. */
		cc->skipped += n;
		if (cc->skipped > TRANSPORT_ERROR_BODY_MAX) {
			char where[TRANSPORT_WHERE_MAX];

			call_where_now(cc, where, sizeof(where));
			error_detail_set_http(cc->err, status, -EIO,
					      "redirect from %s has an oversized body", where);
			return call_abort(cc, -EIO);
		}
		return n;
	}

	if (status != resp->status) {
		resp->error_len = 0;
		resp->status = status;
	}
	if (!resp->error_body) {
		/* Without memory for it the status alone must do. */
		resp->error_body = malloc(TRANSPORT_ERROR_BODY_MAX);
		if (!resp->error_body)
			return n;
	}
	if (resp->error_len + n > TRANSPORT_ERROR_BODY_MAX) {
		/* Enough to explain the failure: stop reading.  The status
		 * still decides the errno, not the abort. */
		memcpy(resp->error_body + resp->error_len, data,
		       TRANSPORT_ERROR_BODY_MAX - resp->error_len);
		resp->error_len = TRANSPORT_ERROR_BODY_MAX;
		return 0;
	}
	memcpy(resp->error_body + resp->error_len, data, n);
	resp->error_len += n;
	return n;
}

static size_t call_write(char *data, size_t size, size_t nmemb, void *userp)
{
	struct curl_call *cc = userp;
	struct transport_response *resp = cc->resp;
	size_t n = size * nmemb;
	long status = 0;
	char *ct = NULL;
	int k;

	/* The status of the response whose body this is: a redirect body
	 * or an error body must never reach the caller. */
	curl_easy_getinfo(cc->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status < 200 || status > 299)
		return keep_error_body(cc, status, data, n);

	if (cc->body_status != status) {
		curl_off_t cl = -1;

		cc->body_status = status;
		resp->status = status;
		if (curl_easy_getinfo(cc->curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) !=
		    CURLE_OK)
			cl = -1;
		resp->content_length = cl >= 0 ? (int64_t)cl : -1;
		resp->range_start = status == 206 ? content_range_start(cc->curl) : -1;
		call_where_now(cc, resp->where, sizeof(resp->where));
		/* a multipart answer is parsed as it streams */
		if (!resp->content_type &&
		    curl_easy_getinfo(cc->curl, CURLINFO_CONTENT_TYPE, &ct) == CURLE_OK && ct &&
		    !(resp->content_type = strdup(ct)))
			return call_abort(cc, -ENOMEM);
	}
	if (!cc->req->body)
		return n;
	k = cc->req->body(cc->req->userdata, resp, data, n);
	if (k < 0)
		return call_abort(cc, k);
	if (k == TRANSPORT_BODY_ENOUGH) {
		cc->enough = true;
		return 0;
	}
	return n;
}

/* curl calls this about once a second and on every chunk: the way to
 * stop a transfer that is waiting for a slow server, because pullfs is
 * stopping or because the caller's tick says so. */
static int progress_tick(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
			 curl_off_t ulnow)
{
	struct curl_call *cc = userdata;
	int k;

	if (cc->t->cancel && atomic_load(cc->t->cancel))
		return 1;
	if (!cc->req->tick)
		return 0;
	k = cc->req->tick(cc->req->userdata);
	if (k < 0) {
		cc->failure = k;
		return 1;
	}
	return 0;
}

static CURLcode auth_apply(CURL *c, const struct transport_auth *a)
{
	CURLcode rc = CURLE_OK;

	/* Given to curl as credentials, never as an "Authorization:"
	 * header: with CURLOPT_UNRESTRICTED_AUTH off, curl drops them as
	 * soon as a redirect leaves the host and port. */
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

#define RECV_BUFFER_BYTES (512L << 10)

#define SETOPT(c, opt, val)                                          \
	do {                                                         \
		if (curl_easy_setopt((c), (opt), (val)) != CURLE_OK) \
			goto setopt_failed;                          \
	} while (0)

static int call_setup(struct curl_call *cc, const struct curl_slist *headers)
{
	const struct curl_transport *t = cc->t;
	const struct transport_request *req = cc->req;
	const struct hosts_endpoint *ep = req->ep;
	CURL *c = cc->curl;
	/* A registry reached over HTTPS may not bounce us to plain HTTP. */
	const char *protocols = ep->https ? "https" : "http,https";
	char range[48];

	SETOPT(c, CURLOPT_URL, req->url);
	SETOPT(c, CURLOPT_SHARE, t->share);
	SETOPT(c, CURLOPT_PROTOCOLS_STR, protocols);
	SETOPT(c, CURLOPT_REDIR_PROTOCOLS_STR, protocols);
	SETOPT(c, CURLOPT_FOLLOWLOCATION, 1L);
	SETOPT(c, CURLOPT_MAXREDIRS, MAX_REDIRECTS);
	SETOPT(c, CURLOPT_UNRESTRICTED_AUTH, 0L);
	SETOPT(c, CURLOPT_NOSIGNAL, 1L);
	if (t->cancel || req->tick) {
		SETOPT(c, CURLOPT_XFERINFOFUNCTION, progress_tick);
		SETOPT(c, CURLOPT_XFERINFODATA, cc);
		SETOPT(c, CURLOPT_NOPROGRESS, 0L);
	}
	SETOPT(c, CURLOPT_CONNECTTIMEOUT_MS, t->connect_timeout_ms);
	SETOPT(c, CURLOPT_LOW_SPEED_LIMIT, LOW_SPEED_BYTES_PER_S);
	SETOPT(c, CURLOPT_LOW_SPEED_TIME, t->low_speed_time_s);
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
	SETOPT(c, CURLOPT_USERAGENT, req->background ? t->user_agent_background : t->user_agent);
	SETOPT(c, CURLOPT_ERRORBUFFER, cc->curl_msg);
	SETOPT(c, CURLOPT_WRITEFUNCTION, call_write);
	SETOPT(c, CURLOPT_WRITEDATA, cc);
	/* Blobs come in reads of up to this much rather than curl's 16 KiB:
	 * on a fast link each read is a poll and a recv, and at 16 KiB they
	 * cost more than what is done with the bytes. */
	SETOPT(c, CURLOPT_BUFFERSIZE, RECV_BUFFER_BYTES);
	if (headers)
		SETOPT(c, CURLOPT_HTTPHEADER, headers);
	if (strcmp(req->method, "HEAD") == 0)
		SETOPT(c, CURLOPT_NOBODY, 1L);
	if (strcmp(req->method, "POST") == 0)
		SETOPT(c, CURLOPT_POSTFIELDS, req->post_fields ? req->post_fields : "");
	if (req->has_range && req->range_list) {
		SETOPT(c, CURLOPT_RANGE, req->range_list);
	} else if (req->has_range) {
		transport_range_format(req, range, sizeof(range));
		SETOPT(c, CURLOPT_RANGE, range);
	}
	if (auth_apply(c, &req->auth) != CURLE_OK)
		goto setopt_failed;
	return 0;

setopt_failed:
	/* Only an allocation failure or a libcurl without an option we
	 * rely on for safety gets here; neither may run the request. */
	return error_detail_set(cc->err, -ENOMEM, "cannot configure libcurl for %s", cc->where);
}

static int dup_header(CURL *c, const char *name, size_t index, char **ret)
{
	const char *v;

	if (!header_value(c, name, index, &v, NULL))
		return 0;
	*ret = strdup(v);
	return *ret ? 0 : -ENOMEM;
}

/* The headers the registry client reads, before the handle goes back. */
static int call_capture(struct curl_call *cc)
{
	struct transport_response *resp = cc->resp;
	char *ct = NULL;
	size_t amount = 1;

	if (!resp->content_type &&
	    curl_easy_getinfo(cc->curl, CURLINFO_CONTENT_TYPE, &ct) == CURLE_OK && ct &&
	    !(resp->content_type = strdup(ct)))
		return -ENOMEM;
	if (dup_header(cc->curl, "Docker-Content-Digest", 0, &resp->docker_digest) < 0 ||
	    dup_header(cc->curl, "Retry-After", 0, &resp->retry_after) < 0)
		return -ENOMEM;
	if (resp->status != 401)
		return 0;
	for (size_t i = 0; i < amount && i < TRANSPORT_CHALLENGES_MAX; i++) {
		const char *v;

		if (!header_value(cc->curl, "WWW-Authenticate", i, &v, &amount))
			break;
		resp->challenges[i] = strdup(v);
		if (!resp->challenges[i])
			return -ENOMEM;
		resp->n_challenges = i + 1;
	}
	return 0;
}

/* A TLS alert from the server while reading: with TLS 1.3 this is how a
 * refused client certificate shows, after the handshake seemed done.  It
 * is about configuration, not the network: no retry, EIO. */
static bool tls_alert(const struct curl_call *cc, CURLcode rc)
{
	return (rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR) && strstr(cc->curl_msg, "SSL") &&
	       strstr(cc->curl_msg, "alert");
}

static int curl_to_errno(struct curl_call *cc, CURLcode rc)
{
	struct error_detail *err = cc->err;
	long status = cc->resp->status;
	const char *why = cc->curl_msg[0] ? cc->curl_msg : curl_easy_strerror(rc);
	char host[TRANSPORT_WHERE_MAX];

	call_host(cc, host, sizeof(host));
	switch (rc) {
	case CURLE_OUT_OF_MEMORY:
		return error_detail_set(err, -ENOMEM, "out of memory");
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
		cc->resp->transient = true;
		/* fall through */
	case CURLE_COULDNT_RESOLVE_PROXY:
		return error_detail_set(err, -EHOSTUNREACH, "cannot reach %s: %s", host, why);
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
		if (tls_alert(cc, rc))
			return error_detail_set(
				err, -EIO, "TLS with %s failed (client certificate refused?): %s",
				host, why);
		/* fall through */
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		/* The connection broke under the transfer: as transient as
		 * a refused connect, and retried the same way. */
		cc->resp->transient = true;
		return error_detail_set_http(err, status, -EHOSTUNREACH,
					     "connection to %s broke: %s", host, why);
	case CURLE_OPERATION_TIMEDOUT:
		cc->resp->transient = true;
		return error_detail_set_http(err, status, -ETIMEDOUT, "%s timed out: %s", host,
					     why);
	case CURLE_ABORTED_BY_CALLBACK:
		return error_detail_set(err, -ECANCELED,
					"request to %s cancelled: pullfs is stopping", host);
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
	case CURLE_SSL_INVALIDCERTSTATUS:
		return error_detail_set(err, -EIO, "TLS certificate of %s does not verify: %s",
					host, why);
	case CURLE_SSL_CONNECT_ERROR:
		return error_detail_set(err, -EIO, "TLS handshake with %s failed: %s", host, why);
	case CURLE_TOO_MANY_REDIRECTS:
		return error_detail_set_http(err, status, -EIO,
					     "more than %ld redirects, last at %s", MAX_REDIRECTS,
					     host);
	case CURLE_UNSUPPORTED_PROTOCOL:
		return error_detail_set_http(err, status, -EIO,
					     "%s redirects to a protocol that is not allowed: %s",
					     cc->where, why);
	default:
		return error_detail_set_http(err, status, -EIO, "request to %s failed: %s", host,
					     why);
	}
}

/* A failure a callback recorded wins; then any response that arrived
 * (an error status even when reading its body was cut short); then the
 * CURLcode. */
static int call_finish(struct curl_call *cc, CURLcode rc)
{
	struct transport_response *resp = cc->resp;
	long status = 0;

	curl_easy_getinfo(cc->curl, CURLINFO_RESPONSE_CODE, &status);
	resp->status = status;
	call_where_now(cc, resp->where, sizeof(resp->where));
	if (cc->failure < 0)
		return cc->failure;
	if (call_capture(cc) < 0)
		return error_detail_set_http(cc->err, status, -ENOMEM, "out of memory");
	if (rc == CURLE_OK || cc->enough || status >= 400)
		return 0;
	return curl_to_errno(cc, rc);
}

static int curl_perform(const struct registry_transport *base, const struct transport_request *req,
			struct transport_response *resp, struct error_detail *err)
{
	struct curl_transport *t = (struct curl_transport *)base;
	_cleanup_(curl_slist_free_allp) struct curl_slist *headers = NULL;
	struct curl_call cc = { .t = t, .req = req, .resp = resp, .err = err };
	_cleanup_free_ char *accept = NULL;
	int k;

	transport_describe_url(req->url, cc.where, sizeof(cc.where));
	if (req->accept) {
		if (asprintf(&accept, "Accept: %s", req->accept) < 0) {
			accept = NULL;
			return error_detail_set(err, -ENOMEM, "out of memory");
		}
		headers = curl_slist_append(NULL, accept);
		if (!headers)
			return error_detail_set(err, -ENOMEM, "out of memory");
	}
	cc.curl = pool_take(t);
	if (!cc.curl)
		return error_detail_set(err, -ENOMEM, "out of memory");
	k = call_setup(&cc, headers);
	if (k >= 0)
		k = call_finish(&cc, curl_easy_perform(cc.curl));
	pool_give(t, cc.curl);
	return k;
}

int transport_curl_new(const struct transport_curl_options *opts, struct registry_transport **ret)
{
	struct curl_transport *t;

	pthread_once(&global_once, global_init);
	if (global_rc != CURLE_OK)
		return -ENOMEM;

	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->base.perform = curl_perform;
	t->base.userdata = t;
	t->connect_timeout_ms = opts->connect_timeout_ms;
	t->low_speed_time_s = opts->low_speed_time_s;
	t->cancel = opts->cancel;
	t->user_agent = strdup(opts->user_agent);
	if (t->user_agent &&
	    asprintf(&t->user_agent_background, "%s (background)", opts->user_agent) < 0)
		t->user_agent_background = NULL;
	if (!t->user_agent || !t->user_agent_background)
		goto fail;
	if (pthread_mutex_init(&t->pool_lock, NULL) != 0)
		goto fail;
	t->pool_lock_ready = true;
	for (size_t i = 0; i < ARRAY_SIZE(t->share_locks); i++) {
		if (pthread_mutex_init(&t->share_locks[i], NULL) != 0)
			goto fail;
		t->n_share_locks = i + 1;
	}

	t->share = curl_share_init();
	if (!t->share || curl_share_setopt(t->share, CURLSHOPT_USERDATA, t) != CURLSHE_OK ||
	    curl_share_setopt(t->share, CURLSHOPT_LOCKFUNC, share_lock) != CURLSHE_OK ||
	    curl_share_setopt(t->share, CURLSHOPT_UNLOCKFUNC, share_unlock) != CURLSHE_OK ||
	    curl_share_setopt(t->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
	    curl_share_setopt(t->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK)
		goto fail;

	*ret = &t->base;
	return 0;

fail:
	transport_curl_free(&t->base);
	return -ENOMEM;
}

void transport_curl_free(struct registry_transport *base)
{
	struct curl_transport *t = (struct curl_transport *)base;

	if (!t)
		return;
	for (size_t i = 0; i < t->n_idle; i++)
		curl_easy_cleanup(t->idle[i]);
	/* After the handles: a handle still attached keeps the share busy. */
	if (t->share)
		curl_share_cleanup(t->share);
	for (size_t i = 0; i < t->n_share_locks; i++)
		pthread_mutex_destroy(&t->share_locks[i]);
	if (t->pool_lock_ready)
		pthread_mutex_destroy(&t->pool_lock);
	free(t->user_agent);
	free(t->user_agent_background);
	free(t);
}

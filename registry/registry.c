/* The registry client's operations: a manifest GET or HEAD and a blob
 * GET, whole or a range.  Each goes to the endpoints of its registry in
 * order (mirrors that can serve it, then the registry), answers a 401 with
 * credentials or a token once, retries the last endpoint on transient
 * failures and resumes a broken blob where it stopped.  The HTTP itself is
 * the transport's (transport.h); a request's body and errno are
 * request.c's. */
#include "registry.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "auth.h"
#include "clock.h"
#include "config.h"
#include "credentials.h"
#include "digest.h"
#include "hosts.h"
#include "macro.h"
#include "manifest.h"
#include "reference.h"
#include "request.h"
#include "retry.h"
#include "transport.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 10000L
#define DEFAULT_LOW_SPEED_TIME_S 30L
#define MAX_RESUMES 20u
#define DEFAULT_MIN_RATE 1024
#define DEFAULT_RATE_WINDOW_S 30L
#define CRED_CACHE_TTL_MS (300LL * 1000)

struct registry {
	char **insecure_hosts;
	size_t n_insecure_hosts;
	const struct registry_hosts *hosts; /* borrowed, read-only */
	struct retry_policy retry;
	uint64_t min_rate; /* bytes/s; 0: no floor */
	int64_t rate_window_ms;
	int64_t (*now_ms)(void);
	const atomic_bool *cancel;		  /* borrowed; may be NULL */
	struct registry_transport *own_transport; /* libcurl, unless one was given */
	/* transport, the token cache (locks itself) and the credentials
	 * cache (locks itself; a Basic registry is asked for them on every
	 * request). */
	struct auth_source auth;
};

DEFINE_TRIVIAL_CLEANUP_FUNC(struct registry_manifest *, registry_manifest_free)

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
 * the transport asks for, so they are checked against the grammar again. */
static int check_names(const char *domain, const char *repo, struct error_detail *err)
{
	if (!reference_domain_is_valid(domain))
		return error_detail_set(err, -EINVAL, "invalid registry host \"%s\"",
					domain ? domain : "");
	if (!reference_path_is_valid(repo))
		return error_detail_set(err, -EINVAL, "invalid repository \"%s\"",
					repo ? repo : "");
	return 0;
}

static int check_manifest_ref(const char *ref, bool *ret_by_digest, struct error_detail *err)
{
	if (ref && strchr(ref, ':')) {
		if (!digest_is_valid(ref))
			return error_detail_set(err, -EINVAL, "invalid digest \"%s\"", ref);
		*ret_by_digest = true;
		return 0;
	}
	if (!reference_tag_is_valid(ref))
		return error_detail_set(err, -EINVAL, "invalid tag \"%s\"", ref ? ref : "");
	*ret_by_digest = false;
	return 0;
}

int registry_new(const struct registry_options *opts, struct registry **ret)
{
	static const struct registry_options none = { 0 };
	struct transport_curl_options co;
	struct registry *r;

	if (!opts)
		opts = &none;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;

	r->hosts = opts->hosts;
	r->cancel = opts->cancel;
	r->retry = RETRY_POLICY_DEFAULT;
	if (opts->max_retries > 0)
		r->retry.max_retries = (unsigned)opts->max_retries;
	else if (opts->max_retries < 0)
		r->retry.max_retries = 0;
	if (opts->retry_base_ms > 0)
		r->retry.base_ms = opts->retry_base_ms;
	r->min_rate = opts->min_rate_bytes_per_s > 0	? (uint64_t)opts->min_rate_bytes_per_s
		      : opts->min_rate_bytes_per_s == 0 ? DEFAULT_MIN_RATE
							: 0;
	/* A transfer allowed to stall for the low-speed time is not failed
	 * sooner by the floor: the floor is for what that abort misses (a
	 * trickle it resumes, or one just above its limit). */
	r->rate_window_ms =
		MAX(opts->rate_window_s > 0 ? opts->rate_window_s : DEFAULT_RATE_WINDOW_S,
		    opts->low_speed_time_s > 0 ? opts->low_speed_time_s
					       : DEFAULT_LOW_SPEED_TIME_S) *
		1000;
	r->now_ms = opts->now_ms ? opts->now_ms : clock_mono_ms;
	if (auth_cache_new(&r->auth.tokens) < 0)
		goto fail;
	if (credentials_cache_new(opts->credentials, CRED_CACHE_TTL_MS, &r->auth.creds) < 0)
		goto fail;

	if (opts->n_insecure_hosts > 0) {
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

	if (opts->transport) {
		r->auth.transport = opts->transport;
	} else {
		co = (struct transport_curl_options){
			.connect_timeout_ms = opts->connect_timeout_ms > 0
						      ? opts->connect_timeout_ms
						      : DEFAULT_CONNECT_TIMEOUT_MS,
			.low_speed_time_s = opts->low_speed_time_s > 0 ? opts->low_speed_time_s
								       : DEFAULT_LOW_SPEED_TIME_S,
			.user_agent =
				opts->user_agent ? opts->user_agent : "pullfs/" PULLFS_VERSION,
			.cancel = opts->cancel,
		};
		if (transport_curl_new(&co, &r->own_transport) < 0)
			goto fail;
		r->auth.transport = r->own_transport;
	}

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
	transport_curl_free(r->own_transport);
	for (size_t i = 0; i < r->n_insecure_hosts; i++)
		free(r->insecure_hosts[i]);
	free(r->insecure_hosts);
	auth_cache_free(r->auth.tokens);
	credentials_cache_free(r->auth.creds);
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

static void token_drop(struct registry *r, const struct auth_challenge *ch, const char *repo,
		       const char *token)
{
	_cleanup_free_ char *scope = NULL;

	if (auth_scope_pull(repo, &scope) == 0)
		auth_cache_drop(r->auth.tokens, ch->realm, ch->service, scope, token);
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

/* One try at an endpoint, with what the host asked for last time; a 401
 * is answered once with fresh credentials. */
static int attempt_run(struct registry *r, struct request *q, const char *method, const char *url,
		       const struct hosts_endpoint *ep, const char *domain, const char *repo,
		       const char *accept)
{
	struct auth_challenge known, ch;
	struct transport_auth auth = { 0 };
	struct credential cred = { 0 };
	char *token = NULL;
	bool had = auth_cache_recall(r->auth.tokens, ep->host, &known) == 0;
	bool sent_basic;
	int k;

	if (had) {
		k = auth_answer(&r->auth, ep, domain, repo, &known, false, &auth, &token, &cred,
				q->err);
		if (k < 0)
			goto out;
	}
	sent_basic = auth.username != NULL;
	k = request_perform(r->auth.transport, q, method, url, ep, &auth, accept, NULL);
	if (q->resp.status != 401 || !q->have_challenge)
		goto out;

	ch = q->challenge;
	if (sent_basic && ch.scheme == AUTH_SCHEME_BASIC) {
		k = error_detail_set_http(q->err, 401, -EACCES, "%s refused the credentials for %s",
					  ep->host, ep->mirror ? ep->host : domain);
		goto out;
	}
	if (token && ch.scheme == AUTH_SCHEME_BEARER)
		token_drop(r, &ch, repo, token);
	(void)auth_cache_remember(r->auth.tokens, ep->host, &ch);
	auth_secret_free(TAKE_PTR(token));
	credential_clear(&cred);
	k = auth_answer(&r->auth, ep, domain, repo, &ch, true, &auth, &token, &cred, q->err);
	if (k < 0)
		goto out;
	if (!auth.username && !auth.bearer_token) {
		k = error_detail_set_http(
			q->err, 401, -EACCES,
			"%s requires authentication and there are no credentials for %s", ep->host,
			ep->mirror ? ep->host : domain);
		goto out;
	}
	k = request_perform(r->auth.transport, q, method, url, ep, &auth, accept, NULL);
	/* A fresh token that does not open the door: no use keeping it. */
	if (q->resp.status == 401 && auth.bearer_token)
		token_drop(r, &ch, repo, token);
	if (q->resp.status == 401)
		k = error_detail_set_http(q->err, 401, -EACCES, "%s refused the %s for %s",
					  ep->host, auth.bearer_token ? "token" : "credentials",
					  ep->mirror ? ep->host : domain);
out:
	auth_secret_free(token);
	credential_clear(&cred);
	return k;
}

/* An endpoint, with retries when it is the last one: a mirror that fails
 * passes the request on at once instead. */
static int endpoint_run(struct registry *r, struct request *q, const char *method, const char *url,
			const struct hosts_endpoint *ep, bool last, const char *domain,
			const char *repo, const char *accept)
{
	int64_t waited = 0, d;
	unsigned retry = 0, resumes = 0;
	int k;

	/* Each endpoint has its windows: a mirror that trickled hands the
	 * rest to the next one with a fresh start. */
	if (r->min_rate > 0 && q->kind != BODY_NONE) {
		q->floor = (struct rate_floor){ .min_bytes_per_s = r->min_rate,
						.window_ms = r->rate_window_ms };
		rate_floor_start(&q->floor, r->now_ms(), q->got);
		q->now_ms = r->now_ms;
	}
	for (;;) {
		uint64_t before = q->got;

		k = attempt_run(r, q, method, url, ep, domain, repo, accept);
		if (k >= 0 || !request_is_transient(q))
			return k;
		/* However the resumes and retries go, a blob keeps to the
		 * floor. */
		if (request_floor_check(q) < 0)
			return q->failure;
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
		if (request_floor_check(q) < 0)
			return q->failure;
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

static int op_run(struct registry *r, struct request *q, const char *method, const char *domain,
		  const char *repo, const char *kind, const char *ref, unsigned cap,
		  const char *accept)
{
	struct hosts_endpoint eps[HOSTS_MAX_ENDPOINTS];
	size_t n = registry_hosts_endpoints(r->hosts, domain, api_host(domain),
					    registry_is_insecure(r, domain), cap, eps);
	int k = -EIO;

	for (size_t i = 0; i < n; i++) {
		const struct hosts_endpoint *ep = &eps[i];
		_cleanup_free_ char *url = NULL;

		if (asprintf(&url, "%s://%s%s/%s/%s/%s%s%s", ep->https ? "https" : "http", ep->host,
			     ep->path, repo, kind, ref, ep->mirror ? "?ns=" : "",
			     ep->mirror ? ep->ns : "") < 0)
			return error_detail_set(q->err, -ENOMEM, "out of memory");
		transport_describe_url(url, q->where, sizeof(q->where));
		k = endpoint_run(r, q, method, url, ep, i + 1 == n, domain, repo, accept);
		if (k >= 0 || i + 1 == n || !may_fall_through(q, k))
			return k;
	}
	return k;
}

/* What a GET and a HEAD of a manifest share: the names checked and
 * whether the reference is a digest. */
static int manifest_request_begin(const char *domain, const char *repo, const char *tag_or_digest,
				  bool *ret_by_digest, struct error_detail *err)
{
	int k;

	error_detail_clear(err);
	k = check_names(domain, repo, err);
	if (k < 0)
		return k;
	return check_manifest_ref(tag_or_digest, ret_by_digest, err);
}

int registry_get_manifest(struct registry *r, const char *domain, const char *repo,
			  const char *tag_or_digest, struct registry_manifest **ret,
			  struct error_detail *err)
{
	_cleanup_(registry_manifest_freep) struct registry_manifest *m = NULL;
	struct request q = { .err = err,
			     .kind = BODY_BUFFER,
			     .buf_max = MANIFEST_MAX_BYTES,
			     .buf_what = "manifest" };
	char digest[DIGEST_STRING_MAX];
	bool by_digest;
	int k;

	k = manifest_request_begin(domain, repo, tag_or_digest, &by_digest, err);
	if (k < 0)
		return k;

	k = op_run(r, &q, "GET", domain, repo, "manifests", tag_or_digest,
		   by_digest ? HOSTS_CAP_PULL : HOSTS_CAP_RESOLVE, MANIFEST_ACCEPT);
	if (k < 0)
		goto out;

	k = digest_buffer(q.buf ? q.buf : "", q.len, digest);
	if (k < 0) {
		error_detail_set_http(err, q.resp.status, k, "out of memory");
		goto out;
	}
	if (by_digest && strcmp(digest, tag_or_digest) != 0) {
		k = error_detail_set_http(err, q.resp.status, -EBADMSG,
					  "manifest from %s hashes to %s", q.where, digest);
		goto out;
	}

	m = calloc(1, sizeof(*m));
	if (!m || !(m->digest = strdup(digest))) {
		k = error_detail_set_http(err, q.resp.status, -ENOMEM, "out of memory");
		goto out;
	}
	if (!q.buf && !(q.buf = malloc(1))) {
		k = error_detail_set_http(err, q.resp.status, -ENOMEM, "out of memory");
		goto out;
	}
	q.buf[q.len] = '\0'; /* the buffer keeps one spare byte */
	m->body = TAKE_PTR(q.buf);
	m->len = q.len;
	m->media_type = TAKE_PTR(q.resp.content_type);
	*ret = TAKE_PTR(m);
	k = 0;
out:
	request_done(&q);
	return k;
}

int registry_head_manifest(struct registry *r, const char *domain, const char *repo,
			   const char *tag_or_digest, char **ret_digest, struct error_detail *err)
{
	_cleanup_(registry_manifest_freep) struct registry_manifest *m = NULL;
	struct request q = { .err = err, .kind = BODY_NONE };
	const char *reported;
	bool by_digest;
	int k;

	k = manifest_request_begin(domain, repo, tag_or_digest, &by_digest, err);
	if (k < 0)
		return k;

	k = op_run(r, &q, "HEAD", domain, repo, "manifests", tag_or_digest,
		   by_digest ? HOSTS_CAP_PULL : HOSTS_CAP_RESOLVE, MANIFEST_ACCEPT);
	if (k < 0)
		goto out;

	reported = q.resp.docker_digest;
	if (reported && digest_is_valid(reported)) {
		if (by_digest && strcmp(reported, tag_or_digest) != 0) {
			k = error_detail_set_http(err, q.resp.status, -EBADMSG,
						  "%s reports digest %s", q.where, reported);
			goto out;
		}
		*ret_digest = TAKE_PTR(q.resp.docker_digest);
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

/* What a whole blob and a range share: the names checked, the request
 * run over the endpoints, and every byte asked for delivered. */
static int blob_run(struct registry *r, struct request *q, const char *domain, const char *repo,
		    const char *digest)
{
	int k;

	error_detail_clear(q->err);
	k = check_names(domain, repo, q->err);
	if (k < 0)
		return k;
	if (!digest || !digest_is_valid(digest))
		return error_detail_set(q->err, -EINVAL, "invalid digest \"%s\"",
					digest ? digest : "");
	if (q->size == 0 && q->ranged)
		return 0;
	k = op_run(r, q, "GET", domain, repo, "blobs", digest, HOSTS_CAP_PULL, NULL);
	if (k < 0)
		return k;
	if (q->got != q->size)
		return error_detail_set_http(q->err, q->resp.status, -EBADMSG,
					     "blob from %s ends after %" PRIu64 " of %" PRIu64
					     " bytes",
					     q->where, q->got, q->size);
	return 0;
}

int registry_head_blob(struct registry *r, const char *domain, const char *repo, const char *digest,
		       struct error_detail *err)
{
	struct request q = { .err = err, .kind = BODY_NONE };
	int k;

	error_detail_clear(err);
	k = check_names(domain, repo, err);
	if (k < 0)
		return k;
	if (!digest || !digest_is_valid(digest))
		return error_detail_set(err, -EINVAL, "invalid digest \"%s\"",
					digest ? digest : "");
	k = op_run(r, &q, "HEAD", domain, repo, "blobs", digest, HOSTS_CAP_PULL, NULL);
	request_done(&q);
	return k < 0 ? k : 0;
}

int registry_get_blob(struct registry *r, const char *domain, const char *repo, const char *digest,
		      uint64_t size, registry_sink_fn sink, void *userdata,
		      struct error_detail *err)
{
	_cleanup_(hasher_freep) struct hasher *hasher = hasher_new();
	struct request q = { .err = err,
			     .kind = BODY_SINK,
			     .sink = sink,
			     .userdata = userdata,
			     .blob_size = size,
			     .size = size,
			     .hasher = hasher };
	char got[DIGEST_STRING_MAX];
	int k;

	if (!hasher)
		return error_detail_set(err, -ENOMEM, "out of memory");
	k = blob_run(r, &q, domain, repo, digest);
	if (k < 0)
		goto out;
	hasher_final(hasher, got);
	if (strcmp(got, digest) != 0) {
		k = error_detail_set_http(err, q.resp.status, -EBADMSG, "blob from %s hashes to %s",
					  q.where, got);
		goto out;
	}
	k = 0;
out:
	request_done(&q);
	return k;
}

int registry_get_blob_range(struct registry *r, const char *domain, const char *repo,
			    const char *digest, uint64_t size, uint64_t offset, uint64_t length,
			    registry_sink_fn sink, void *userdata, struct error_detail *err)
{
	struct request q = { .err = err,
			     .kind = BODY_SINK,
			     .sink = sink,
			     .userdata = userdata,
			     .blob_size = size,
			     .offset = offset,
			     .size = length,
			     .ranged = true };
	int k;

	if (offset > size || length > size - offset)
		return error_detail_set(err, -EINVAL,
					"bytes %" PRIu64 "+%" PRIu64
					" are outside a blob of %" PRIu64,
					offset, length, size);
	k = blob_run(r, &q, domain, repo, digest);
	request_done(&q);
	return k;
}

/* What one range of the fallback requests brings, to the caller's sink. */
struct one_range {
	registry_range_sink_fn sink;
	void *userdata;
	size_t index;
};

static int one_range_sink(void *userdata, const void *buf, size_t len)
{
	struct one_range *o = userdata;

	return o->sink(o->userdata, o->index, buf, len);
}

int registry_get_blob_ranges(struct registry *r, const char *domain, const char *repo,
			     const char *digest, uint64_t size, const struct registry_range *ranges,
			     size_t n, registry_range_sink_fn sink, void *userdata,
			     struct error_detail *err)
{
	_cleanup_free_ uint64_t *got = calloc(n ? n : 1, sizeof(*got));
	_cleanup_free_ char *list = NULL;
	struct request q = { .err = err,
			     .kind = BODY_RANGES,
			     .blob_size = size,
			     .ranges = ranges,
			     .n_ranges = n,
			     .range_got = got,
			     .range_sink = sink,
			     .userdata = userdata };
	size_t len = 0;
	FILE *f;
	int k;

	if (!got)
		return error_detail_set(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		if (ranges[i].length == 0 || ranges[i].offset > size ||
		    ranges[i].length > size - ranges[i].offset ||
		    (i > 0 && ranges[i].offset < ranges[i - 1].offset + ranges[i - 1].length))
			return error_detail_set(err, -EINVAL,
						"range %zu of %zu is empty, outside the blob or "
						"out of order",
						i, n);
	if (n == 0)
		return 0;
	if (n == 1)
		return registry_get_blob_range(r, domain, repo, digest, size, ranges[0].offset,
					       ranges[0].length, one_range_sink,
					       &(struct one_range){ sink, userdata, 0 }, err);
	f = open_memstream(&list, &len);
	if (!f)
		return error_detail_set(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%s%" PRIu64 "-%" PRIu64, i ? "," : "", ranges[i].offset,
			ranges[i].offset + ranges[i].length - 1);
	if (fclose(f) != 0 || !list)
		return error_detail_set(err, -ENOMEM, "out of memory");
	q.range_list = list;
	q.size = 0;
	for (size_t i = 0; i < n; i++)
		q.size += ranges[i].length;
	k = blob_run(r, &q, domain, repo, digest);
	request_done(&q);
	/* -EBADMSG with no callback's failure: blob_run's count, the answer
	 * brought less than every range */
	if (k < 0 && (k != -EBADMSG || q.failure < 0 || q.sink_failed))
		return k;
	/* what the answer did not bring (a registry that sends the first
	 * range only, or refused a multipart answer), a request per range */
	for (size_t i = 0; i < n; i++) {
		if (got[i] == ranges[i].length)
			continue;
		k = registry_get_blob_range(r, domain, repo, digest, size,
					    ranges[i].offset + got[i], ranges[i].length - got[i],
					    one_range_sink,
					    &(struct one_range){ sink, userdata, i }, err);
		if (k < 0)
			return k;
	}
	return 0;
}

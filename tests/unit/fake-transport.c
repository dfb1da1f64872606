/* The registry in memory of fake-transport.h. */
#include "fake-transport.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "macro.h"
#include "registry.h"

#define LOG_MAX 4096
#define CHUNK 1000 /* body bytes per callback: several for any real blob */

struct fake_object {
	char *path;
	char *media_type;
	char digest[DIGEST_STRING_MAX];
	char *data;
	size_t len;
	struct fake_object *next;
};

struct fake_fault {
	char *match;
	enum fake_fault_kind kind;
	long arg;
	int times; /* left; -1: forever */
	struct fake_fault *next;
};

struct fake_transport {
	struct registry_transport base;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct fake_object *objects; /* protected by lock */
	struct fake_fault *faults;   /* protected by lock, in the order added */
	char *log[LOG_MAX];	     /* protected by lock */
	unsigned n_log;
	char *challenge;      /* protected by lock */
	unsigned held;	      /* protected by lock */
	unsigned release_gen; /* protected by lock */
};

static char *xstrdup(const char *s)
{
	char *d = strdup(s);

	assert_non_null(d);
	return d;
}

/* The object at path, copied so that it can be served without the lock;
 * false when there is none. */
static bool object_copy_locked(struct fake_transport *f, const char *path, struct fake_object *ret)
{
	for (struct fake_object *o = f->objects; o; o = o->next) {
		if (strcmp(o->path, path) != 0)
			continue;
		*ret = *o;
		ret->media_type = o->media_type ? xstrdup(o->media_type) : NULL;
		ret->data = malloc(o->len + 1);
		assert_non_null(ret->data);
		memcpy(ret->data, o->data, o->len);
		return true;
	}
	return false;
}

static void object_free(struct fake_object *o)
{
	free(o->path);
	free(o->media_type);
	free(o->data);
	free(o);
}

static void remove_locked(struct fake_transport *f, const char *path)
{
	for (struct fake_object **p = &f->objects; *p; p = &(*p)->next) {
		if (strcmp((*p)->path, path) == 0) {
			struct fake_object *o = *p;

			*p = o->next;
			object_free(o);
			return;
		}
	}
}

static void put(struct fake_transport *f, const char *path, const char *media_type,
		const void *data, size_t len, const char *digest)
{
	struct fake_object *o = calloc(1, sizeof(*o));

	assert_non_null(o);
	o->path = xstrdup(path);
	o->media_type = media_type ? xstrdup(media_type) : NULL;
	o->data = malloc(len + 1);
	assert_non_null(o->data);
	memcpy(o->data, data, len);
	o->len = len;
	snprintf(o->digest, sizeof(o->digest), "%s", digest);
	pthread_mutex_lock(&f->lock);
	remove_locked(f, path);
	o->next = f->objects;
	f->objects = o;
	pthread_mutex_unlock(&f->lock);
}

void fake_put_blob(struct fake_transport *f, const char *repo, const void *data, size_t len,
		   char ret_digest[DIGEST_STRING_MAX])
{
	char digest[DIGEST_STRING_MAX], path[512];

	assert_int_equal(digest_buffer(data, len, digest), 0);
	snprintf(path, sizeof(path), "/v2/%s/blobs/%s", repo, digest);
	put(f, path, "application/octet-stream", data, len, digest);
	if (ret_digest)
		memcpy(ret_digest, digest, DIGEST_STRING_MAX);
}

void fake_put_manifest(struct fake_transport *f, const char *repo, const char *tag,
		       const char *media_type, const char *body, char ret_digest[DIGEST_STRING_MAX])
{
	char digest[DIGEST_STRING_MAX], path[512];
	size_t len = strlen(body);

	assert_int_equal(digest_buffer(body, len, digest), 0);
	snprintf(path, sizeof(path), "/v2/%s/manifests/%s", repo, digest);
	put(f, path, media_type, body, len, digest);
	if (tag) {
		snprintf(path, sizeof(path), "/v2/%s/manifests/%s", repo, tag);
		put(f, path, media_type, body, len, digest);
	}
	if (ret_digest)
		memcpy(ret_digest, digest, DIGEST_STRING_MAX);
}

void fake_put(struct fake_transport *f, const char *path, const char *media_type, const char *data)
{
	put(f, path, media_type, data, strlen(data), "");
}

void fake_set_challenge(struct fake_transport *f, const char *challenge)
{
	pthread_mutex_lock(&f->lock);
	free(f->challenge);
	f->challenge = xstrdup(challenge);
	pthread_mutex_unlock(&f->lock);
}

void fake_remove(struct fake_transport *f, const char *path)
{
	pthread_mutex_lock(&f->lock);
	remove_locked(f, path);
	pthread_mutex_unlock(&f->lock);
}

void fake_fault(struct fake_transport *f, const char *match, enum fake_fault_kind kind, long arg,
		int times)
{
	struct fake_fault *x = calloc(1, sizeof(*x)), **p;

	assert_non_null(x);
	x->match = xstrdup(match);
	x->kind = kind;
	x->arg = arg;
	x->times = times;
	pthread_mutex_lock(&f->lock);
	for (p = &f->faults; *p; p = &(*p)->next)
		;
	*p = x;
	pthread_mutex_unlock(&f->lock);
}

static void faults_free(struct fake_fault *x)
{
	while (x) {
		struct fake_fault *next = x->next;

		free(x->match);
		free(x);
		x = next;
	}
}

void fake_clear_faults(struct fake_transport *f)
{
	pthread_mutex_lock(&f->lock);
	faults_free(f->faults);
	f->faults = NULL;
	pthread_mutex_unlock(&f->lock);
}

unsigned fake_count(struct fake_transport *f, const char *match)
{
	unsigned n = 0;

	pthread_mutex_lock(&f->lock);
	for (unsigned i = 0; i < f->n_log; i++)
		if (strstr(f->log[i], match))
			n++;
	pthread_mutex_unlock(&f->lock);
	return n;
}

const char *fake_request(struct fake_transport *f, unsigned i)
{
	const char *s;

	/* The lines are never freed before the fake is. */
	pthread_mutex_lock(&f->lock);
	s = i < f->n_log ? f->log[i] : NULL;
	pthread_mutex_unlock(&f->lock);
	return s;
}

void fake_wait_held(struct fake_transport *f, unsigned n)
{
	pthread_mutex_lock(&f->lock);
	while (f->held < n)
		pthread_cond_wait(&f->cond, &f->lock);
	pthread_mutex_unlock(&f->lock);
}

void fake_release(struct fake_transport *f)
{
	pthread_mutex_lock(&f->lock);
	f->release_gen++;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

/* Logs the request and picks its fault (consuming one of its times). */
static struct fake_fault take_fault_locked(struct fake_transport *f, const char *line)
{
	struct fake_fault none = { .kind = FAKE_STATUS, .arg = 0 };

	assert_true(f->n_log < LOG_MAX);
	f->log[f->n_log++] = xstrdup(line);
	for (struct fake_fault *x = f->faults; x; x = x->next) {
		if (x->times == 0 || !strstr(line, x->match))
			continue;
		if (x->times > 0)
			x->times--;
		return *x;
	}
	return none;
}

static const char *error_code(long status, bool manifest)
{
	switch (status) {
	case 401:
		return "UNAUTHORIZED";
	case 403:
		return "DENIED";
	case 404:
		return manifest ? "MANIFEST_UNKNOWN" : "BLOB_UNKNOWN";
	case 429:
		return "TOOMANYREQUESTS";
	default:
		return "UNAVAILABLE";
	}
}

static void error_response(struct transport_response *resp, long status, bool manifest,
			   const char *challenge)
{
	resp->status = status;
	if (asprintf(&resp->error_body,
		     "{\"errors\":[{\"code\":\"%s\",\"message\":\"fake says %ld\"}]}",
		     error_code(status, manifest), status) < 0)
		fail_msg("out of memory");
	resp->error_len = strlen(resp->error_body);
	if (status == 401) {
		resp->challenges[0] = xstrdup(challenge);
		resp->n_challenges = 1;
	}
}

/* Several ranges (req->range_list): a multipart/byteranges answer, its
 * first part without a CRLF before the delimiter as Go writes it. */
static int serve_multipart(const struct transport_request *req, struct transport_response *resp,
			   struct error_detail *err, const struct fake_fault *fault,
			   struct fake_object *o)
{
	_cleanup_free_ char *body = NULL;
	size_t len = 0, n, done = 0;
	const char *p = req->range_list;
	bool first = true;
	FILE *f = open_memstream(&body, &len);
	int k;

	assert_non_null(f);
	while (*p) {
		char *end;
		uint64_t a = strtoull(p, &end, 10), b;

		assert_true(*end == '-');
		b = strtoull(end + 1, &end, 10);
		assert_true(a <= b && b < o->len);
		if (fault->kind == FAKE_CORRUPT && first)
			o->data[a] ^= 0x55;
		for (long r = 0; r < (fault->kind == FAKE_REPEAT_PART ? fault->arg : 1); r++) {
			fprintf(f,
				"%s--FAKEB\r\nContent-Type: application/octet-stream\r\n"
				"Content-Range: bytes %" PRIu64 "-%" PRIu64 "/%zu\r\n\r\n",
				first ? "" : "\r\n", a, b, o->len);
			fwrite(o->data + a, 1, (size_t)(b - a + 1), f);
			first = false;
		}
		p = *end == ',' ? end + 1 : end;
	}
	fputs("\r\n--FAKEB--\r\n", f);
	assert_int_equal(fclose(f), 0);
	resp->status = 206;
	free(resp->content_type);
	resp->content_type = xstrdup("multipart/byteranges; boundary=FAKEB");
	resp->content_length = (int64_t)len;
	n = len;
	if (fault->kind == FAKE_BREAK && (uint64_t)fault->arg < n)
		n = (size_t)fault->arg;
	while (done < n) {
		size_t c = MIN(n - done, (size_t)CHUNK);

		k = req->body(req->userdata, resp, body + done, c);
		if (k < 0)
			return k;
		if (k == TRANSPORT_BODY_ENOUGH)
			return 0;
		done += c;
	}
	if (n < len) {
		resp->transient = true;
		return error_detail_set_http(err, resp->status, -EHOSTUNREACH,
					     "connection to %s broke: fake", resp->where);
	}
	return 0;
}

static int serve(const struct transport_request *req, struct transport_response *resp,
		 struct error_detail *err, const struct fake_fault *fault, struct fake_object *o)
{
	uint64_t start = 0, end = o->len ? o->len - 1 : 0;
	size_t n, done = 0;
	int k;

	resp->status = 200;
	resp->content_type = o->media_type ? xstrdup(o->media_type) : NULL;
	if (fault->kind != FAKE_NO_DIGEST)
		resp->docker_digest = xstrdup(o->digest);
	if (req->range_list && fault->kind != FAKE_WHOLE && fault->kind != FAKE_FIRST_RANGE &&
	    strcmp(req->method, "HEAD") != 0)
		return serve_multipart(req, resp, err, fault, o);
	if (req->range_list && fault->kind == FAKE_FIRST_RANGE) {
		char *dash;

		start = strtoull(req->range_list, &dash, 10);
		end = MIN(end, (uint64_t)strtoull(dash + 1, NULL, 10));
		resp->status = 206;
		resp->range_start = (int64_t)start;
	} else if (req->has_range && fault->kind != FAKE_WHOLE) {
		start = req->range_start;
		if (req->range_end != TRANSPORT_RANGE_OPEN && req->range_end < end)
			end = req->range_end;
		if (start >= o->len) {
			error_response(resp, 416, false, NULL);
			return 0;
		}
		resp->status = 206;
		resp->range_start = (int64_t)start;
	}
	n = o->len ? (size_t)(end - start + 1) : 0;
	resp->content_length = (int64_t)n;
	if (strcmp(req->method, "HEAD") == 0)
		return 0;
	if (fault->kind == FAKE_CORRUPT && n > 0)
		o->data[start] ^= 0x55;
	if (fault->kind == FAKE_BREAK && (uint64_t)fault->arg < n)
		n = (size_t)fault->arg;
	while (done < n) {
		size_t c = MIN(n - done, (size_t)CHUNK);

		k = req->body(req->userdata, resp, o->data + start + done, c);
		if (k < 0)
			return k;
		if (k == TRANSPORT_BODY_ENOUGH)
			return 0;
		done += c;
	}
	if (fault->kind == FAKE_BREAK && (uint64_t)fault->arg < (uint64_t)resp->content_length) {
		resp->transient = true;
		return error_detail_set_http(err, resp->status, -EHOSTUNREACH,
					     "connection to %s broke: fake", resp->where);
	}
	return 0;
}

static int fake_perform(const struct registry_transport *t, const struct transport_request *req,
			struct transport_response *resp, struct error_detail *err)
{
	struct fake_transport *f = t->userdata;
	struct fake_object o = { 0 };
	struct fake_fault fault;
	const char *path = strstr(req->url, "://");
	char line[1024], objpath[512], range[512] = "", who[160] = "";
	_cleanup_free_ char *challenge = NULL;
	bool found, manifest;
	int k;

	path = path ? strchr(path + 3, '/') : NULL;
	if (!path) {
		fail_msg("not a URL the fake serves: %s", req->url);
		return -EINVAL;
	}
	if (req->has_range) {
		memcpy(range, " bytes=", 7);
		transport_range_format(req, range + 7, sizeof(range) - 7);
	}
	snprintf(objpath, sizeof(objpath), "%.*s", (int)strcspn(path, "?"), path);
	if (req->auth.bearer_token)
		snprintf(who, sizeof(who), " bearer=%s", req->auth.bearer_token);
	else if (req->auth.username)
		snprintf(who, sizeof(who), " user=%s", req->auth.username);
	snprintf(line, sizeof(line), "%s %s%s%s", req->method, objpath, range, who);
	transport_describe_url(req->url, resp->where, sizeof(resp->where));
	manifest = strstr(path, "/manifests/") != NULL;

	pthread_mutex_lock(&f->lock);
	fault = take_fault_locked(f, line);
	if (fault.kind == FAKE_HOLD) {
		unsigned gen = f->release_gen;

		f->held++;
		pthread_cond_broadcast(&f->cond);
		while (f->release_gen == gen)
			pthread_cond_wait(&f->cond, &f->lock);
		f->held--;
	}
	found = object_copy_locked(f, objpath, &o);
	challenge = xstrdup(f->challenge ? f->challenge : "Basic realm=\"fake\"");
	pthread_mutex_unlock(&f->lock);

	switch (fault.kind) {
	case FAKE_REFUSE:
		resp->transient = true;
		k = error_detail_set(err, -EHOSTUNREACH,
				     "cannot reach %s: Connection refused (fake)", resp->where);
		break;
	case FAKE_TIMEOUT:
		resp->transient = true;
		k = error_detail_set(err, -ETIMEDOUT, "%s timed out: no answer (fake)",
				     resp->where);
		break;
	case FAKE_STATUS:
		if (fault.arg) {
			error_response(resp, fault.arg, manifest, challenge);
			k = 0;
			break;
		}
		/* fall through */
	default:
		if (!found) {
			error_response(resp, 404, manifest, challenge);
			k = 0;
			break;
		}
		k = serve(req, resp, err, &fault, &o);
	}
	free(o.media_type);
	free(o.data);
	return k;
}

struct fake_transport *fake_transport_new(void)
{
	struct fake_transport *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(pthread_mutex_init(&f->lock, NULL), 0);
	assert_int_equal(pthread_cond_init(&f->cond, NULL), 0);
	f->base.perform = fake_perform;
	f->base.userdata = f;
	return f;
}

void fake_transport_free(struct fake_transport *f)
{
	if (!f)
		return;
	while (f->objects) {
		struct fake_object *o = f->objects;

		f->objects = o->next;
		object_free(o);
	}
	faults_free(f->faults);
	free(f->challenge);
	for (unsigned i = 0; i < f->n_log; i++)
		free(f->log[i]);
	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

const struct registry_transport *fake_transport_get(struct fake_transport *f)
{
	return &f->base;
}

/* The HTTP transport under the registry client: one request to one URL,
 * behind a table of functions, so that the client's logic (errno rows,
 * authentication, retries, resumes, mirrors) runs the same over libcurl
 * and over a fake that a test builds.  A transport knows nothing of
 * registries: it moves bytes, reports the headers the client reads, and
 * turns failures of the connection into an errno.  HTTP statuses are the
 * client's to judge (request.c). */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hosts_endpoint;
struct error_detail;

#define TRANSPORT_WHERE_MAX 256
#define TRANSPORT_ERROR_BODY_MAX (16u << 10) /* kept of a failed response's body */
#define TRANSPORT_CHALLENGES_MAX 16	     /* WWW-Authenticate values kept */
#define TRANSPORT_RANGE_OPEN UINT64_MAX	     /* range_end: to the end */

/* A body callback's answer: keep reading, or the request has what it
 * wanted (a range cut from a whole blob) and may end now as a success.  A
 * negative errno stops the transfer with that error instead. */
enum {
	TRANSPORT_BODY_MORE = 0,
	TRANSPORT_BODY_ENOUGH = 1,
};

/* What a request carries to prove who asks: a bearer token, or Basic
 * username and password, or nothing.  A transport must not send it after a
 * redirect to another host or port (the blob store behind a registry never
 * sees a registry token). */
struct transport_auth {
	const char *bearer_token;
	const char *username;
	const char *password;
};

/* What the transport saw of the final response.  Strings are allocated by
 * the transport (malloc) and freed by transport_response_clear(). */
struct transport_response {
	long status;		/* 0: no response arrived */
	int64_t content_length; /* -1: not announced */
	int64_t range_start;	/* first byte of a Content-Range "bytes A-B/N"; -1: none */
	/* "host[:port]/path" of the URL the response came from (after
	 * redirects), without user info, query or fragment: signed URLs
	 * carry secrets there. */
	char where[TRANSPORT_WHERE_MAX];
	char *content_type;			    /* NULL: none */
	char *docker_digest;			    /* Docker-Content-Digest; NULL: none */
	char *retry_after;			    /* NULL: none */
	char *challenges[TRANSPORT_CHALLENGES_MAX]; /* WWW-Authenticate values */
	size_t n_challenges;
	/* The body of a response with status >= 400, at most
	 * TRANSPORT_ERROR_BODY_MAX bytes (reading stops there); NULL: none. */
	char *error_body;
	size_t error_len;
	/* Set with a failure of the transport: the connection broke, was
	 * refused or timed out, and the same request may work later. */
	bool transient;
};

struct transport_request {
	const char *url;		 /* http or https */
	const struct hosts_endpoint *ep; /* TLS files; an https endpoint never redirects to http */
	const char *method;		 /* "GET", "HEAD" or "POST" */
	const char *accept;		 /* Accept header; NULL: none */
	const char *post_fields;	 /* POST: a urlencoded form */
	bool has_range;			 /* Range: bytes=range_start-range_end */
	uint64_t range_start;
	uint64_t range_end; /* inclusive, or TRANSPORT_RANGE_OPEN */
	/* several ranges instead, "A-B,C-D,..." (has_range set too): the
	 * answer may be multipart/byteranges */
	const char *range_list;
	/* work no caller waits for (registry_thread_background()): the
	 * User-Agent says so */
	bool background;
	struct transport_auth auth;
	/* Called with the body of a 2xx response, in order, and never with
	 * the body of a redirect or of an error; resp has the status and
	 * headers of that response.  Returns TRANSPORT_BODY_MORE,
	 * TRANSPORT_BODY_ENOUGH or -errno. */
	int (*body)(void *userdata, const struct transport_response *resp, const void *buf,
		    size_t len);
	/* NULL, or called about once a second while the request runs,
	 * whether bytes come or not (with userdata): a -errno stops the
	 * transfer with that error, as from body. */
	int (*tick)(void *userdata);
	void *userdata;
};

struct registry_transport {
	/* Performs one request, following redirects.  Blocks; called from
	 * many threads at once.  resp comes reset
	 * (transport_response_reset()) and is filled as far as the
	 * response got.
	 * Returns 0 when a response arrived, whatever its status; the value
	 * of req->body when that stopped the transfer with an error (err
	 * untouched: the callback said why); or -EHOSTUNREACH, -ETIMEDOUT,
	 * -ECANCELED, -EIO, -ENOMEM with one line in err (may be NULL) and
	 * resp->transient set when trying again may help. */
	int (*perform)(const struct registry_transport *t, const struct transport_request *req,
		       struct transport_response *resp, struct error_detail *err);
	void *userdata; /* the transport's own */
};

/* Empties resp for the next attempt (or for good): frees its strings and
 * sets every field to "none".  resp must be zeroed or reset before. */
void transport_response_reset(struct transport_response *resp);

/* Helpers for transports. */

/* The value of the Range request's "bytes=" ("A-B", or "A-" when open,
 * or the range_list), into out (at least 48 bytes; a longer list is
 * cut). */
void transport_range_format(const struct transport_request *req, char *out, size_t outlen);

/* "host[:port]/path" of url, as in transport_response.where; "(unknown
 * host)" when url is not an http(s) URL. */
void transport_describe_url(const char *url, char *out, size_t outlen);

/* The libcurl transport (transport-curl.c). */
struct transport_curl_options {
	long connect_timeout_ms;
	long low_speed_time_s; /* abort below 1 KiB/s for this long */
	const char *user_agent;
	/* When it turns true, every transfer stops with -ECANCELED.
	 * Borrowed; may be NULL. */
	const atomic_bool *cancel;
};

/* Every field of opts is required but cancel.  Returns 0 or -ENOMEM. */
int transport_curl_new(const struct transport_curl_options *opts, struct registry_transport **ret);
/* No request may be in flight. */
void transport_curl_free(struct registry_transport *t);

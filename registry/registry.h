/* The registry client: Docker Registry HTTP API v2 / OCI distribution over
 * libcurl, or over a transport the caller supplies (transport.h).  Fetches manifests into capped buffers and streams blobs to a
 * caller-supplied sink while hashing them; a blob is reported good only
 * when its digest and size match the descriptor.  HTTP statuses and curl
 * errors become negative errno values here and nowhere else. */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errdetail.h"

struct registry_hosts;
struct credentials;
struct registry_transport;

struct registry_options {
	/* Hosts ("127.0.0.1:5000", "localhost:5000") spoken to over plain
	 * HTTP; every other registry is HTTPS, verified against the system
	 * CAs. */
	const char *const *insecure_hosts;
	size_t n_insecure_hosts;
	long connect_timeout_ms; /* 0: 10 s */
	long low_speed_time_s;	 /* abort a transfer slower than 1 KiB/s for this long; 0: 30 s */
	/* The floor under a blob's rate across its resumes and retries, and
	 * under each attempt at a manifest (retry.h): every window of
	 * rate_window_s must bring min_rate_bytes_per_s times the window (or
	 * the rest of the body), else the request fails with -ETIMEDOUT.  0: 1 KiB/s over 30 s;
	 * min_rate_bytes_per_s < 0: no floor.  The window is never shorter
	 * than low_speed_time_s. */
	int64_t min_rate_bytes_per_s;
	long rate_window_s;
	/* For tests: the floor's clock in ms; NULL: CLOCK_MONOTONIC. */
	int64_t (*now_ms)(void);
	const char *user_agent; /* NULL: "pullfs/<version>" */
	/* Mirrors, insecure registries and TLS files per registry (hosts.h);
	 * NULL: none.  Borrowed: must outlive the client. */
	const struct registry_hosts *hosts;
	/* Credentials (credentials.h); NULL: anonymous only.  Borrowed. */
	const struct credentials *credentials;
	/* Retries after a connection error, 5xx or 429 (exponential back-off
	 * from retry_base_ms, Retry-After honoured, at most 30 s of waiting
	 * per request); retry_base_ms 0: 500 ms.  max_retries < 0: 3. */
	int max_retries;
	long retry_base_ms;
	/* When set and true, every transfer in progress stops and every call
	 * fails with -ECANCELED (the daemon is stopping).  Borrowed. */
	const atomic_bool *cancel;
	/* How requests are made (transport.h); NULL: libcurl, with the
	 * timeouts and user agent above (which a given transport ignores).
	 * Borrowed: must outlive the client. */
	const struct registry_transport *transport;
};

struct registry;

/* Creates a client.  Thread-safe after creation: calls may run from many
 * threads at once; DNS and TLS sessions are shared, and idle connections
 * are kept (per pooled curl handle) for the next call.  registry_free()
 * must not race with calls in flight.  Returns 0 or -ENOMEM. */
int registry_new(const struct registry_options *opts, struct registry **ret);
void registry_free(struct registry *r);

struct registry_manifest {
	char *media_type; /* Content-Type as sent (parameters kept), may be NULL */
	char *digest;	  /* sha256 of body, computed locally */
	char *body;	  /* NUL-terminated for convenience; len excludes it */
	size_t len;
};
void registry_manifest_free(struct registry_manifest *m);

/* Every request below goes first to the mirrors configured for domain that
 * have the capability it needs (hosts.h), in order, and then to the
 * registry itself; a mirror that fails or lacks the content passes the
 * request on.  The last endpoint is retried on transient failures.  A 401
 * is answered with Basic credentials or a bearer token obtained from the
 * challenge's realm (cached per realm, service and scope until it
 * expires); the Authorization never follows a redirect to another host.
 *
 * GET /v2/<repo>/manifests/<tag_or_digest> on domain (a reference domain,
 * "docker.io" is mapped to its API host).  The body is capped at
 * MANIFEST_MAX_BYTES; when tag_or_digest is a digest the body must hash to
 * it.  Blocks.  Returns 0 and a manifest owned by the caller, or:
 * -ENOENT (404), -EACCES (401/403), -EHOSTUNREACH (connect/DNS failure,
 * 502/503/504), -ETIMEDOUT, -EBADMSG (digest mismatch, over the cap),
 * -EIO (anything else), -EINVAL (domain, repo or tag_or_digest outside
 * the reference grammar), -ENOMEM; err (may be NULL) says why in words
 * and is only meaningful after a failure. */
int registry_get_manifest(struct registry *r, const char *domain, const char *repo,
			  const char *tag_or_digest, struct registry_manifest **ret,
			  struct error_detail *err);

/* HEAD of the same URL: the digest the registry reports for the tag
 * (Docker-Content-Digest), into ret_digest (caller frees).  When the
 * header is missing or not a sha256 digest, falls back to a GET and hashes
 * the body.  Same errors. */
int registry_head_manifest(struct registry *r, const char *domain, const char *repo,
			   const char *tag_or_digest, char **ret_digest, struct error_detail *err);

/* Called with each chunk of blob data in order; returns 0 or -errno to
 * abort the transfer with that error. */
typedef int (*registry_sink_fn)(void *userdata, const void *buf, size_t len);

/* GET /v2/<repo>/blobs/<digest>, following redirects, feeding every byte
 * to sink exactly once and in order.  The data is hashed as it streams; a
 * Content-Length other than `size` is refused before the sink sees a
 * byte, while more than `size` bytes or a different digest give -EBADMSG
 * after the sink has seen data, so the sink must treat everything as
 * unverified until this returns 0.  A connection that breaks mid-body is
 * resumed with a Range request from the first byte not yet seen (on the
 * same endpoint, or the next one); a server that answers the Range with
 * the whole blob has the bytes already seen skipped.  Retries exhausted:
 * -EHOSTUNREACH.  Blocks.  Errors as
 * registry_get_manifest, plus whatever the sink returned, unchanged. */
int registry_get_blob(struct registry *r, const char *domain, const char *repo, const char *digest,
		      uint64_t size, registry_sink_fn sink, void *userdata,
		      struct error_detail *err);

/* HEAD /v2/<repo>/blobs/<digest>: whether the registry lets these
 * credentials have the blob in that repository, without a byte of it.
 * Blocks.  Returns 0 (2xx), or the errors of registry_get_manifest
 * (-ENOENT for a 404, -EACCES for 401/403). */
int registry_head_blob(struct registry *r, const char *domain, const char *repo, const char *digest,
		       struct error_detail *err);

/* Marks the requests the calling thread makes from now on (on) as work
 * no caller waits for, or not (off): their User-Agent ends in
 * " (background)", so that a registry's logs (and a test's proxy) tell a
 * lazy layer's completion from a reader's fetch.  Per thread. */
void registry_thread_background(bool on);

/* One range of a blob, for registry_get_blob_ranges(). */
struct registry_range {
	uint64_t offset;
	uint64_t length;
};

/* Receives bytes of range index of a registry_get_blob_ranges() call. */
typedef int (*registry_range_sink_fn)(void *userdata, size_t index, const void *buf, size_t len);

/* GET of n ranges of the blob in one request ("Range: bytes=A-B,C-D"),
 * where the registry allows it: its multipart/byteranges answer is split
 * by part.  A registry that answers with one range (the first, or one
 * covering several) or with the whole blob works too; what one request
 * did not bring comes with a request per range (registry_get_blob_range).
 * The ranges must be sorted by offset and not overlap, none empty.  sink
 * gets the bytes of each range exactly once and in order (ranges may
 * interleave only as they arrive).  Nothing is hashed.  Blocks.  Errors
 * as registry_get_blob_range; -EBADMSG for a multipart answer that is not
 * well formed. */
int registry_get_blob_ranges(struct registry *r, const char *domain, const char *repo,
			     const char *digest, uint64_t size, const struct registry_range *ranges,
			     size_t n, registry_range_sink_fn sink, void *userdata,
			     struct error_detail *err);

/* GET of bytes [offset, offset + length) of the blob (a blob of `size`
 * bytes as its descriptor says), with "Range: bytes=A-B", feeding them to
 * sink exactly once and in order.  A registry that answers with the whole
 * blob (200) has the bytes before offset skipped and the transfer stopped
 * after the last one wanted; a 206 must start at the byte asked for.
 * Nothing is hashed: a range cannot be checked against the digest, so the
 * caller must trust the bytes only as far as it checks them itself.
 * length 0: returns 0 without a request.  A broken connection is resumed
 * from the first byte not yet seen, like registry_get_blob.  Blocks.
 * Errors as registry_get_blob, plus -EINVAL for a range outside the
 * blob. */
int registry_get_blob_range(struct registry *r, const char *domain, const char *repo,
			    const char *digest, uint64_t size, uint64_t offset, uint64_t length,
			    registry_sink_fn sink, void *userdata, struct error_detail *err);

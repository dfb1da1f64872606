/* One registry request over a transport: where its body goes (a capped
 * buffer for manifests and tokens, a hashing sink for blobs, nothing for
 * HEAD), and how its outcome becomes one negative errno and one line of
 * text.  Internal to registry/. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "registry.h"
#include "retry.h"
#include "transport.h"

enum body_kind {
	BODY_NONE,   /* HEAD: no body expected */
	BODY_BUFFER, /* manifest or token: into buf, at most buf_max bytes */
	BODY_SINK,   /* blob: counted, maybe hashed, and handed to sink */
	BODY_RANGES, /* several ranges of a blob, each to range_sink */
};

/* BODY_RANGES: how the answer came, and where a multipart one stands. */
enum ranges_mode {
	RANGES_START,	  /* nothing seen yet */
	RANGES_STREAM,	  /* a 200 (the blob) or a 206 of one range: bytes from stream_pos */
	RANGES_PART_HEAD, /* multipart: reading a part's delimiter and headers */
	RANGES_PART_DATA, /* multipart: part_left bytes of a part from stream_pos */
	RANGES_END,	  /* multipart: the closing delimiter came */
};

#define RANGES_HEAD_MAX 1024 /* a part's delimiter and headers, at most */

/* State of one request across its attempts (retries, resumes, the next
 * mirror).  Set up by the caller with designated initialisers; released
 * with request_done(). */
struct request {
	struct error_detail *err;
	char where[TRANSPORT_WHERE_MAX]; /* of the URL asked for, for messages */

	enum body_kind kind;

	/* BODY_BUFFER */
	char *buf; /* one spare byte past len for a NUL */
	size_t len, cap, buf_max;
	const char *buf_what; /* what it holds, for messages */
	bool wipe_body;	      /* it holds a secret (a token response) */

	/* BODY_SINK: bytes [offset, offset + size) of a blob of blob_size
	 * bytes; ranged: the caller asked for a range (always sent), else
	 * the whole blob (a Range only to resume). */
	registry_sink_fn sink;
	void *userdata;
	struct hasher *hasher; /* NULL: not hashed */
	uint64_t blob_size;
	uint64_t offset;
	uint64_t size;
	bool ranged;
	uint64_t got;	  /* bytes handed to the sink */
	bool sink_failed; /* the sink said no: nothing is retried */

	/* BODY_RANGES: the ranges (sorted, not overlapping), the bytes of
	 * each handed to range_sink (in order, once), and the answer's
	 * parsing state (reset with each attempt) */
	const struct registry_range *ranges;
	size_t n_ranges;
	uint64_t *range_got;
	registry_range_sink_fn range_sink;
	enum ranges_mode mode;
	uint64_t stream_pos, part_left;
	char boundary[80];	/* "--" and up to 70 characters (RFC 2046) */
	const char *range_list; /* "A-B,C-D,...", the Range sent */
	char head[RANGES_HEAD_MAX + 1];
	size_t head_len;
	/* of this answer: its parts so far, and their bytes */
	size_t parts;
	uint64_t part_bytes;

	/* The floor under the transfer's rate, and the clock it reads
	 * (NULL: no floor): across attempts for BODY_SINK and BODY_RANGES,
	 * per attempt for BODY_BUFFER (whose bytes start again). */
	struct rate_floor floor;
	int64_t (*now_ms)(void);
	bool in_attempt;

	/* Of the last attempt. */
	struct transport_response resp;
	int transport_r;	/* what the transport returned */
	int failure;		/* set by a body callback that stopped the transfer */
	bool length_seen;	/* the start of the 2xx body was checked */
	uint64_t skip;		/* bytes of this response before the ones wanted */
	int64_t retry_after_ms; /* -1: the response had none */
	bool have_challenge;
	struct auth_challenge challenge; /* of a 401 */
};

/* One attempt: method ("GET", "HEAD", "POST") of url at ep, with auth
 * (may be NULL) and accept / post_fields (may be NULL).  A BODY_SINK
 * request asks for the bytes it still lacks with a Range.  Blocks.
 * Returns 0 for a 2xx response whose body went where q says, or -errno
 * with q->err filled: a body callback's failure first, then the errno of
 * an HTTP error status (404: -ENOENT, 401/403: -EACCES, 502/503/504:
 * -EHOSTUNREACH, others -EIO), then the transport's failure. */
int request_perform(const struct registry_transport *t, struct request *q, const char *method,
		    const char *url, const struct hosts_endpoint *ep,
		    const struct transport_auth *auth, const char *accept, const char *post_fields);

/* Whether the failure of the last attempt may go away by itself: a 429,
 * 500, 502, 503 or 504, or a connection that failed or broke. */
bool request_is_transient(const struct request *q);

/* Whether the blob has kept to q->floor so far: 0, or -ETIMEDOUT with
 * q->err saying how little came (and the request is no longer
 * transient).  For between the attempts; during one, the transfer is
 * checked as its bytes come and as the transport ticks. */
int request_floor_check(struct request *q);

void request_done(struct request *q);

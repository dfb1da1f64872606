/* A request's body and its outcome.  The transport hands over the body of
 * a 2xx response; here it is checked against what was asked (a blob's
 * announced length, the start of a partial answer), capped, hashed and
 * passed on, and the status of a failed response becomes the errno of
 * the table in registry.h. */
#include "request.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "digest.h"
#include "errname.h"
#include "macro.h"
#include "retry.h"

static int body_buffer(struct request *q, const struct transport_response *resp, const char *data,
		       size_t n)
{
	if (n > q->buf_max - q->len)
		return error_detail_set_http(q->err, resp->status, -EBADMSG,
					     "%s from %s is larger than %zu bytes", q->buf_what,
					     resp->where, q->buf_max);
	if (q->len + n > q->cap) {
		size_t cap = MAX(q->cap * 2, (size_t)16384);
		char *p;

		cap = MIN(MAX(cap, q->len + n), q->buf_max);
		p = realloc(q->buf, cap + 1);
		if (!p)
			return error_detail_set_http(q->err, resp->status, -ENOMEM,
						     "out of memory");
		q->buf = p;
		q->cap = cap;
	}
	memcpy(q->buf + q->len, data, n);
	q->len += n;
	return TRANSPORT_BODY_MORE;
}

/* The first bytes of a blob response: is it the part we asked for (206
 * from the first byte we lack), the whole blob (200: skip to that byte),
 * or something else? */
static int body_sink_start(struct request *q, const struct transport_response *resp)
{
	uint64_t from = q->offset + q->got, expect;
	int64_t cl = resp->content_length;

	q->length_seen = true;
	if (resp->status == 206) {
		if (!q->ranged && q->got == 0)
			return error_detail_set_http(q->err, resp->status, -EBADMSG,
						     "%s sends a partial blob unasked",
						     resp->where);
		if (resp->range_start < 0 || (uint64_t)resp->range_start != from)
			return error_detail_set_http(q->err, resp->status, -EBADMSG,
						     "%s answers a Range request from byte %" PRIu64
						     " with another range",
						     resp->where, from);
		expect = q->size - q->got;
	} else {
		/* A 200 to a Range request: the whole blob. */
		q->skip = from;
		expect = q->blob_size;
	}
	/* A wrong Content-Length is known before the first byte is worth
	 * downloading. */
	if (cl < 0 || (uint64_t)cl == expect)
		return 0;
	if (q->ranged && resp->status == 206)
		return error_detail_set_http(q->err, resp->status, -EBADMSG,
					     "%s announces %" PRIu64
					     " bytes for a range of %" PRIu64,
					     resp->where, (uint64_t)cl, expect);
	return error_detail_set_http(q->err, resp->status, -EBADMSG,
				     "%s announces %" PRIu64 " bytes, the descriptor says %" PRIu64,
				     resp->where, (uint64_t)cl + (resp->status == 206 ? q->got : 0),
				     q->blob_size);
}

static int body_sink(struct request *q, const struct transport_response *resp, const char *data,
		     size_t n)
{
	bool enough = false;
	int r;

	if (!q->length_seen) {
		r = body_sink_start(q, resp);
		if (r < 0)
			return r;
	}
	if (q->skip > 0) {
		size_t d = (size_t)MIN((uint64_t)n, q->skip);

		q->skip -= d;
		data += d;
		n -= d;
		if (n == 0)
			return TRANSPORT_BODY_MORE;
	}
	if ((uint64_t)n > q->size - q->got) {
		/* The rest of a whole blob sent for a range is not wanted. */
		if (!q->ranged || resp->status == 206)
			return error_detail_set_http(
				q->err, resp->status, -EBADMSG,
				"%s sends more than the %" PRIu64 " bytes %s", resp->where, q->size,
				q->ranged ? "of the range" : "of the descriptor");
		n = (size_t)(q->size - q->got);
	}
	if (q->ranged && resp->status != 206 && q->got + n == q->size)
		enough = true;
	if (q->hasher)
		hasher_update(q->hasher, data, n);
	q->got += n;
	r = q->sink(q->userdata, data, n);
	if (r < 0) {
		q->sink_failed = true;
		return error_detail_set_http(q->err, resp->status, r, "blob sink failed: %s",
					     errno_name(r));
	}
	return enough ? TRANSPORT_BODY_ENOUGH : TRANSPORT_BODY_MORE;
}

/* ---- several ranges ---------------------------------------------------- */

/* Bytes [pos, pos + n) of the blob to the ranges they fall in: each
 * range's bytes once and in order (what a retry sends again, and what
 * lies past a gap, is left). */
static int ranges_deliver(struct request *q, const struct transport_response *resp, uint64_t pos,
			  const char *data, size_t n)
{
	uint64_t end = pos + n;
	bool all = true;

	for (size_t i = 0; i < q->n_ranges; i++) {
		const struct registry_range *g = &q->ranges[i];
		uint64_t want = g->offset + q->range_got[i];
		uint64_t s = MAX(pos, want), e = MIN(end, g->offset + g->length);

		if (s == want && s < e) {
			int r = q->range_sink(q->userdata, i, data + (s - pos), (size_t)(e - s));

			if (r < 0) {
				q->sink_failed = true;
				return error_detail_set_http(q->err, resp->status, r,
							     "blob sink failed: %s", errno_name(r));
			}
			q->range_got[i] += e - s;
			q->got += e - s;
		}
		all = all && q->range_got[i] == g->length;
	}
	return all ? TRANSPORT_BODY_ENOUGH : TRANSPORT_BODY_MORE;
}

/* How the answer comes: the parts of a multipart/byteranges (its
 * boundary), one range from its Content-Range, or the whole blob. */
static int ranges_start(struct request *q, const struct transport_response *resp)
{
	const char *ct = resp->content_type, *b;
	size_t len;

	q->stream_pos = 0;
	q->mode = RANGES_STREAM;
	if (resp->status != 206)
		return 0; /* the blob from its first byte */
	if (!ct || strncasecmp(ct, "multipart/byteranges", 20) != 0) {
		if (resp->range_start < 0)
			return error_detail_set_http(q->err, resp->status, -EBADMSG,
						     "%s answers ranges with no Content-Range",
						     resp->where);
		q->stream_pos = (uint64_t)resp->range_start;
		return 0;
	}
	b = strcasestr(ct, "boundary=");
	if (b) {
		b += 9;
		if (*b == '"')
			b++;
		len = strcspn(b, "\"; \t");
	}
	if (!b || len == 0 || len >= sizeof(q->boundary) - 4)
		return error_detail_set_http(
			q->err, resp->status, -EBADMSG,
			"%s answers with multipart ranges and no usable boundary", resp->where);
	snprintf(q->boundary, sizeof(q->boundary), "--%.*s", (int)len, b);
	q->mode = RANGES_PART_HEAD;
	q->head_len = 0;
	return 0;
}

/* Where the last range asked for ends: no answer brings anything of use
 * past it. */
static uint64_t ranges_end(const struct request *q)
{
	const struct registry_range *g = &q->ranges[q->n_ranges - 1];

	return g->offset + g->length;
}

/* A part's delimiter and headers are in q->head: where its bytes go.  A
 * registry may send fewer parts than ranges (several in one) but not
 * more, nor more bytes than the ranges span: past that the answer could
 * go on for ever. */
static int ranges_part_begin(struct request *q, const struct transport_response *resp)
{
	const char *d = memmem(q->head, q->head_len, q->boundary, strlen(q->boundary)), *cr;
	uint64_t a, b, total, span = ranges_end(q) - q->ranges[0].offset;

	q->head[q->head_len] = '\0';
	cr = strcasestr(q->head, "\ncontent-range:");
	if (!d || !cr ||
	    sscanf(cr + 15, " bytes %" SCNu64 "-%" SCNu64 "/%" SCNu64, &a, &b, &total) != 3 ||
	    b < a || total != q->blob_size || b >= total)
		return error_detail_set_http(q->err, resp->status, -EBADMSG,
					     "%s sends a part of a multipart answer without a "
					     "valid Content-Range",
					     resp->where);
	q->parts++;
	q->part_bytes += b - a + 1;
	if (q->parts > q->n_ranges || q->part_bytes > span)
		return error_detail_set_http(q->err, resp->status, -EBADMSG,
					     "%s answers %zu ranges of %" PRIu64
					     " bytes with more parts or bytes than that",
					     resp->where, q->n_ranges, span);
	q->stream_pos = a;
	q->part_left = b - a + 1;
	q->mode = RANGES_PART_DATA;
	return 0;
}

static int body_ranges(struct request *q, const struct transport_response *resp, const char *data,
		       size_t n)
{
	size_t blen;
	int r;

	if (q->mode == RANGES_START) {
		r = ranges_start(q, resp);
		if (r < 0)
			return r;
	}
	blen = strlen(q->boundary);
	while (n > 0) {
		size_t take;

		switch (q->mode) {
		case RANGES_STREAM:
			r = ranges_deliver(q, resp, q->stream_pos, data, n);
			q->stream_pos += n;
			/* the rest cannot be of use (what is missing comes
			 * with a request per range) */
			if (r == TRANSPORT_BODY_MORE && q->stream_pos >= ranges_end(q))
				r = TRANSPORT_BODY_ENOUGH;
			return r;
		case RANGES_PART_DATA:
			take = (size_t)MIN((uint64_t)n, q->part_left);
			r = ranges_deliver(q, resp, q->stream_pos, data, take);
			if (r < 0)
				return r;
			q->stream_pos += take;
			q->part_left -= take;
			data += take;
			n -= take;
			if (q->part_left == 0) {
				q->mode = RANGES_PART_HEAD;
				q->head_len = 0;
			}
			if (r == TRANSPORT_BODY_ENOUGH)
				return r;
			break;
		case RANGES_PART_HEAD:
			/* byte by byte: the part's data must not be taken
			 * for headers */
			if (q->head_len == RANGES_HEAD_MAX)
				return error_detail_set_http(q->err, resp->status, -EBADMSG,
							     "%s sends a multipart delimiter or "
							     "headers over %d bytes",
							     resp->where, RANGES_HEAD_MAX);
			q->head[q->head_len++] = *data++;
			n--;
			if (q->head_len >= blen + 2 &&
			    !memcmp(q->head + q->head_len - 2, "--", 2) &&
			    !memcmp(q->head + q->head_len - blen - 2, q->boundary, blen)) {
				q->mode = RANGES_END;
			} else if (q->head_len >= 4 &&
				   !memcmp(q->head + q->head_len - 4, "\r\n\r\n", 4)) {
				r = ranges_part_begin(q, resp);
				if (r < 0)
					return r;
			}
			break;
		case RANGES_END:
		default:
			return TRANSPORT_BODY_ENOUGH; /* the epilogue is not read */
		}
	}
	return TRANSPORT_BODY_MORE;
}

int request_floor_check(struct request *q)
{
	uint64_t brought = 0;
	int k;

	uint64_t got = q->got, total = q->size;

	if (!q->now_ms || q->kind == BODY_NONE)
		return 0;
	if (q->kind == BODY_BUFFER) {
		/* Each attempt starts from nothing: only a running one is
		 * measured, against its announced length or the cap. */
		if (!q->in_attempt)
			return 0;
		got = q->len;
		total = q->resp.content_length >= 0 ? (uint64_t)q->resp.content_length : q->buf_max;
	}
	k = rate_floor_check(&q->floor, q->now_ms(), got, total, &brought);
	if (k == 0)
		return 0;
	q->failure = k;
	return error_detail_set_http(
		q->err, q->resp.status, k,
		"%s sent %" PRIu64 " bytes in %" PRId64 " s, under the minimum of %" PRIu64
		" bytes/s (%" PRIu64 " of %" PRIu64 " bytes received)",
		q->where, brought, q->floor.window_ms / 1000, q->floor.min_bytes_per_s, got, total);
}

/* The transport's pulse, about once a second even while no byte comes. */
static int request_tick(void *userdata)
{
	return request_floor_check(userdata);
}

static int request_body(void *userdata, const struct transport_response *resp, const void *data,
			size_t n)
{
	struct request *q = userdata;
	int r;

	switch (q->kind) {
	case BODY_BUFFER:
		r = body_buffer(q, resp, data, n);
		break;
	case BODY_SINK:
		r = body_sink(q, resp, data, n);
		break;
	case BODY_RANGES:
		r = body_ranges(q, resp, data, n);
		break;
	case BODY_NONE:
	default:
		return TRANSPORT_BODY_MORE;
	}
	if (r < 0) {
		q->failure = r;
		return r;
	}
	if (r == TRANSPORT_BODY_MORE) {
		int k = request_floor_check(q);

		if (k < 0)
			return k;
	}
	return r;
}

/* The registry's own explanation, {"errors":[{"code":..., "message":...}]},
 * as "CODE: message"; false when the body is not that. */
static bool error_body_describe(const struct transport_response *resp, char *out, size_t outlen)
{
	json_auto_t *root = NULL;
	json_t *first;
	const char *code, *msg;

	if (!resp->error_body || resp->error_len == 0)
		return false;
	root = json_loadb(resp->error_body, resp->error_len, 0, NULL);
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
		/* 429 included: retried, then EIO. */
		return -EIO;
	}
}

static void request_reset(struct request *q)
{
	transport_response_reset(&q->resp);
	q->transport_r = 0;
	q->failure = 0;
	q->length_seen = false;
	q->skip = 0;
	q->mode = RANGES_START;
	q->head_len = 0;
	q->parts = 0;
	q->part_bytes = 0;
	q->retry_after_ms = -1;
	q->have_challenge = false;
	if (q->kind == BODY_BUFFER) {
		if (q->wipe_body && q->buf)
			explicit_bzero(q->buf, q->len);
		q->len = 0;
	}
}

/* What the response said about authentication and about when to come
 * back. */
static void request_capture(struct request *q)
{
	const struct transport_response *resp = &q->resp;

	if (resp->status == 401) {
		for (size_t i = 0; i < resp->n_challenges; i++) {
			struct auth_challenge ch;

			if (auth_challenge_parse(resp->challenges[i], &ch) < 0)
				continue;
			/* Bearer wins over Basic when a server offers both. */
			if (!q->have_challenge || ch.scheme == AUTH_SCHEME_BEARER) {
				q->challenge = ch;
				q->have_challenge = true;
			}
		}
	}
	if (retry_status_is_transient(resp->status) && resp->retry_after)
		q->retry_after_ms = retry_after_parse(resp->retry_after, time(NULL));
}

static int request_finish(struct request *q)
{
	const struct transport_response *resp = &q->resp;
	char why[400];

	if (q->failure < 0)
		return q->failure;
	if (resp->status >= 400) {
		if (error_body_describe(resp, why, sizeof(why)))
			return error_detail_set_http(q->err, resp->status,
						     status_to_errno(resp->status), "%s", why);
		return error_detail_set_http(q->err, resp->status, status_to_errno(resp->status),
					     "HTTP %ld from %s", resp->status, resp->where);
	}
	if (q->transport_r < 0)
		return q->transport_r;
	if (resp->status < 200 || resp->status > 299)
		return error_detail_set_http(q->err, resp->status, -EIO,
					     "unexpected HTTP %ld from %s", resp->status,
					     resp->where);
	return 0;
}

static _Thread_local bool thread_background;

void registry_thread_background(bool on)
{
	thread_background = on;
}

int request_perform(const struct registry_transport *t, struct request *q, const char *method,
		    const char *url, const struct hosts_endpoint *ep,
		    const struct transport_auth *auth, const char *accept, const char *post_fields)
{
	struct transport_request req = {
		.url = url,
		.ep = ep,
		.method = method,
		.accept = accept,
		.post_fields = post_fields,
		.background = thread_background,
		.auth = auth ? *auth : (struct transport_auth){ 0 },
		.body = request_body,
		.tick = q->now_ms ? request_tick : NULL,
		.userdata = q,
	};
	int k;

	request_reset(q);
	if (q->kind == BODY_SINK && (q->ranged || q->got > 0)) {
		req.has_range = true;
		req.range_start = q->offset + q->got;
		req.range_end = q->ranged ? q->offset + q->size - 1 : TRANSPORT_RANGE_OPEN;
	}
	if (q->kind == BODY_RANGES) {
		req.has_range = true;
		req.range_list = q->range_list;
	}
	if (q->kind == BODY_BUFFER && q->now_ms)
		rate_floor_start(&q->floor, q->now_ms(), 0);
	q->in_attempt = true;
	q->transport_r = t->perform(t, &req, &q->resp, q->err);
	q->in_attempt = false;
	k = request_finish(q);
	request_capture(q);
	return k;
}

bool request_is_transient(const struct request *q)
{
	if (q->failure < 0)
		return false; /* a callback judged the response */
	if (retry_status_is_transient(q->resp.status))
		return true;
	if (q->resp.status >= 400)
		return false;
	return q->transport_r < 0 && q->resp.transient;
}

void request_done(struct request *q)
{
	if (q->wipe_body && q->buf)
		explicit_bzero(q->buf, q->len);
	free(q->buf);
	transport_response_reset(&q->resp);
}

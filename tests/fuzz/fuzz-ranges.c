/* Fuzz target for the answer to a request of several ranges: a registry's
 * multipart/byteranges body (or one range, or the whole blob), cut into
 * pieces as a transport hands them over.  Whatever it sends, each range's
 * bytes reach the sink in order, never more than the range holds, and a
 * success means every range came whole.
 *
 * Input: byte 0 picks the answer (multipart, one range from byte 1024,
 * the whole blob), byte 1 the size of the pieces, the rest is the body.
 * The requests that fetch what the answer lacked get correct bytes. */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "registry.h"
#include "transport.h"

#define BLOB 4096

static const struct registry_range ranges[] = {
	{ 10, 100 }, { 200, 1 }, { 201, 799 }, { 1024, 2048 }, { 4000, 96 },
};
#define N (sizeof(ranges) / sizeof(ranges[0]))

struct input {
	const uint8_t *data;
	size_t size;
};

static uint8_t blob_byte(uint64_t at)
{
	return (uint8_t)(at * 31 + at / 7);
}

static int perform(const struct registry_transport *t, const struct transport_request *req,
		   struct transport_response *resp, struct error_detail *err)
{
	const struct input *in = t->userdata;
	size_t piece = in->data[1] % 64 + 1, done = 0;
	const uint8_t *body = in->data + 2;
	size_t len = in->size - 2;
	uint8_t fill[BLOB];

	resp->status = 206;
	if (!req->range_list) {
		/* a fallback: the range it asks for, right */
		for (uint64_t i = req->range_start; i <= req->range_end && i < BLOB; i++)
			fill[i - req->range_start] = blob_byte(i);
		resp->range_start = (int64_t)req->range_start;
		body = fill;
		len = (size_t)(req->range_end - req->range_start + 1);
	} else if (in->data[0] % 3 == 0) {
		resp->content_type = strdup("multipart/byteranges; boundary=B");
	} else if (in->data[0] % 3 == 1) {
		resp->range_start = 1024;
	} else {
		resp->status = 200;
	}
	while (done < len) {
		size_t c = len - done < piece ? len - done : piece;
		int k = req->body(req->userdata, resp, body + done, c);

		if (k < 0)
			return k;
		if (k == TRANSPORT_BODY_ENOUGH)
			return 0;
		done += c;
	}
	return 0;
}

struct got {
	uint64_t len[N];
};

static int sink(void *userdata, size_t index, const void *buf, size_t len)
{
	struct got *g = userdata;

	FUZZ_CHECK(index < N);
	FUZZ_CHECK(len <= ranges[index].length - g->len[index]);
	g->len[index] += len;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct input in = { data, size };
	struct registry_transport t = { .perform = perform, .userdata = &in };
	struct registry_options ro = { .max_retries = 0, .transport = &t };
	struct registry *r = NULL;
	struct error_detail err;
	struct got g = { 0 };
	int k;

	if (size < 2 || registry_new(&ro, &r) < 0)
		return 0;
	k = registry_get_blob_ranges(
		r, "registry.test", "app",
		"sha256:0000000000000000000000000000000000000000000000000000000000000000", BLOB,
		ranges, N, sink, &g, &err);
	for (size_t i = 0; k == 0 && i < N; i++)
		FUZZ_CHECK(g.len[i] == ranges[i].length);
	registry_free(r);
	return 0;
}

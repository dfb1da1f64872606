/* What every transport shares: the response it fills, the description of
 * a URL for messages. */
#include "transport.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "registry.h"

void transport_response_reset(struct transport_response *resp)
{
	free(resp->content_type);
	free(resp->docker_digest);
	free(resp->retry_after);
	for (size_t i = 0; i < resp->n_challenges; i++)
		free(resp->challenges[i]);
	free(resp->error_body);
	*resp = (struct transport_response){ .content_length = -1, .range_start = -1 };
}

void transport_describe_url(const char *url, char *out, size_t outlen)
{
	const char *p, *auth_end, *at, *path, *end;

	if (!url || (strncasecmp(url, "http://", 7) != 0 && strncasecmp(url, "https://", 8) != 0)) {
		snprintf(out, outlen, "(unknown host)");
		return;
	}
	p = strstr(url, "://") + 3;
	auth_end = p + strcspn(p, "/?#");
	/* User info ends at the last '@' of the authority. */
	at = memrchr(p, '@', (size_t)(auth_end - p));
	if (at)
		p = at + 1;
	if (p == auth_end) {
		snprintf(out, outlen, "(unknown host)");
		return;
	}
	path = auth_end;
	end = path + strcspn(path, "?#");
	snprintf(out, outlen, "%.*s%.*s%s", (int)(auth_end - p), p, (int)(end - path), path,
		 end == path ? "/" : "");
}

void transport_range_format(const struct transport_request *req, char *out, size_t outlen)
{
	if (req->range_list)
		snprintf(out, outlen, "%s", req->range_list);
	else if (req->range_end == TRANSPORT_RANGE_OPEN)
		snprintf(out, outlen, "%" PRIu64 "-", req->range_start);
	else
		snprintf(out, outlen, "%" PRIu64 "-%" PRIu64, req->range_start, req->range_end);
}

/* Fuzz target for what a registry's authentication sends us: the
 * WWW-Authenticate challenge and the token server's JSON answer.  Both
 * must refuse or accept without reading or writing out of bounds, and
 * what they accept must respect the caps. */
#include <string.h>
#include <strings.h>

#include "auth.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct auth_challenge ch;
	char *s, *token = NULL, *refresh = NULL;
	int64_t expires = 0;

	/* The first byte picks the parser, the rest is its input. */
	if (size < 1)
		return 0;
	s = malloc(size);
	if (!s)
		return 0;
	memcpy(s, data + 1, size - 1);
	s[size - 1] = '\0';
	if (data[0] & 1) {
		if (auth_challenge_parse(s, &ch) == 0) {
			FUZZ_CHECK(ch.scheme == AUTH_SCHEME_BASIC ||
				   ch.scheme == AUTH_SCHEME_BEARER);
			FUZZ_CHECK(strlen(ch.realm) < AUTH_PARAM_MAX);
			FUZZ_CHECK(strlen(ch.service) < AUTH_PARAM_MAX);
			FUZZ_CHECK(strlen(ch.scope) < AUTH_PARAM_MAX);
			if (ch.scheme == AUTH_SCHEME_BEARER)
				FUZZ_CHECK(!strncasecmp(ch.realm, "http://", 7) ||
					   !strncasecmp(ch.realm, "https://", 8));
		}
	} else if (auth_token_parse((const char *)data + 1, size - 1, &token, &expires, &refresh) ==
		   0) {
		FUZZ_CHECK(token && *token && strlen(token) <= AUTH_TOKEN_MAX);
		FUZZ_CHECK(expires >= 60);
		/* Nothing that could split or end an HTTP header. */
		FUZZ_CHECK(!strpbrk(token, "\r\n"));
		auth_secret_free(token);
		auth_secret_free(refresh);
	}
	free(s);
	return 0;
}

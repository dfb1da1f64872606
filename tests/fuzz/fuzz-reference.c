/* Fuzz target for the reference grammar: whatever parses must print to a
 * canonical string that parses again to the same reference, and the path
 * form predicates must agree with the parser on what they accept. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "reference.h"

static bool str_same(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void check_round_trip(const char *s, unsigned flags)
{
	struct reference *r = NULL, *again = NULL;
	char *canon, *canon2, *repo;

	if (reference_parse(s, flags, &r) < 0)
		return;
	FUZZ_CHECK(r->domain && r->path);
	FUZZ_CHECK(!r->tag || strlen(r->tag) <= REFERENCE_TAG_MAX);
	FUZZ_CHECK(strlen(r->domain) + 1 + strlen(r->path) <= REFERENCE_NAME_MAX);
	if (flags & REFERENCE_DEFAULT_TAG)
		FUZZ_CHECK(r->tag || r->digest);

	canon = reference_to_string(r);
	repo = reference_repository(r);
	FUZZ_CHECK(canon && repo);
	FUZZ_CHECK(strncmp(canon, repo, strlen(repo)) == 0);

	FUZZ_CHECK(reference_parse(canon, 0, &again) == 0);
	FUZZ_CHECK(strcmp(r->domain, again->domain) == 0);
	FUZZ_CHECK(strcmp(r->path, again->path) == 0);
	FUZZ_CHECK(str_same(r->tag, again->tag));
	FUZZ_CHECK(str_same(r->digest, again->digest));
	canon2 = reference_to_string(again);
	FUZZ_CHECK(canon2 && strcmp(canon, canon2) == 0);

	free(canon);
	free(canon2);
	free(repo);
	reference_free(r);
	reference_free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s;

	/* references are C strings: what follows a NUL is never seen */
	s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';

	check_round_trip(s, 0);
	check_round_trip(s, REFERENCE_DEFAULT_TAG);

	/* the path form looks at one component at a time */
	if (!strchr(s, '/')) {
		bool closes = reference_component_closes(s);

		(void)reference_component_is_host(s);
		if (reference_path_component_is_valid(s))
			FUZZ_CHECK(!closes);
	}
	free(s);
	return 0;
}

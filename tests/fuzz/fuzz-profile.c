/* Fuzz target for the start profile's text (manager/lazy/profile.c), the
 * bytes `pullfsctl profile import` hands the daemon.  Whatever is
 * accepted keeps the promises the use of a profile relies on (layer
 * indexes in range, valid digests and content names, no file twice, the
 * limits), and writing it back gives a text that parses to the same. */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "profile.h"

static void check_profile(const struct profile *p)
{
	uint64_t bytes = 0;

	FUZZ_CHECK(digest_is_valid(p->image));
	FUZZ_CHECK(p->n_layers >= 1 && p->n_layers <= PROFILE_LAYERS_MAX);
	FUZZ_CHECK(p->n_files >= 1 && p->n_files <= PROFILE_FILES_MAX);
	for (size_t i = 0; i < p->n_layers; i++)
		FUZZ_CHECK(digest_is_valid(p->layers[i]));
	for (size_t i = 0; i < p->n_files; i++) {
		const struct profile_file *f = &p->files[i];

		FUZZ_CHECK(f->layer < p->n_layers);
		FUZZ_CHECK(strlen(f->object) == DIGEST_HEX_LEN);
		FUZZ_CHECK(f->size > 0);
		for (size_t j = 0; j < i; j++)
			FUZZ_CHECK(p->files[j].layer != f->layer ||
				   strcmp(p->files[j].object, f->object) != 0);
		bytes += f->size;
	}
	FUZZ_CHECK(bytes == p->bytes && bytes <= PROFILE_BYTES_MAX);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct profile *p = NULL, *q = NULL;
	char err[256], *text;
	size_t len;
	int r;

	r = profile_parse((const char *)data, size, &p, err, sizeof(err));
	FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -E2BIG || r == -ENOMEM);
	if (r < 0) {
		FUZZ_CHECK(!p);
		return 0;
	}
	check_profile(p);
	if (profile_format(p, &text, &len) == 0) {
		FUZZ_CHECK(profile_parse(text, len, &q, err, sizeof(err)) == 0);
		FUZZ_CHECK(q->n_files == p->n_files && q->bytes == p->bytes &&
			   q->recorded == p->recorded && !strcmp(q->image, p->image));
		profile_free(q);
		free(text);
	}
	profile_free(p);
	return 0;
}

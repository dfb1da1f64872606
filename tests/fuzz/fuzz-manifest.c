/* Fuzz target for manifest and index parsing.  The first byte picks the
 * Content-Type the "registry" sent, the rest is the body.  A parsed
 * document must only hold what the rest of pullfs relies on: valid
 * digests, known kinds, and a platform choice that is one of its own
 * entries. */
#include <errno.h>
#include <string.h>

#include "digest.h"
#include "fuzz.h"
#include "manifest.h"

static const char *const content_types[] = {
	NULL,
	MEDIA_OCI_MANIFEST,
	MEDIA_OCI_INDEX,
	MEDIA_DOCKER_MANIFEST,
	MEDIA_DOCKER_LIST,
	"application/json; charset=utf-8",
	"text/html",
	" " MEDIA_OCI_INDEX " ; q=1",
};

static void check_descriptor(const struct descriptor *d)
{
	FUZZ_CHECK(d->media_type && d->media_type[0]);
	FUZZ_CHECK(d->digest && digest_is_valid(d->digest));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const platforms[] = {
		"linux/amd64", "linux/arm64/v8", "linux/arm/v7", "linux/arm64", "windows/amd64",
	};
	struct manifest *m = NULL;
	char err[256];
	const char *ct;
	int r;

	if (size < 1)
		return 0;
	ct = content_types[data[0] % (sizeof(content_types) / sizeof(content_types[0]))];
	r = manifest_parse((const char *)data + 1, size - 1, ct, &m, err, sizeof(err));
	if (r < 0) {
		FUZZ_CHECK(r == -EBADMSG || r == -ENOMEM);
		FUZZ_CHECK(r == -ENOMEM || strncmp(err, "manifest: ", 10) == 0);
		FUZZ_CHECK(memchr(err, '\0', sizeof(err)));
		return 0;
	}
	FUZZ_CHECK(m->media_type);
	if (m->kind == MANIFEST_IMAGE) {
		check_descriptor(&m->config);
		for (size_t i = 0; i < m->n_layers; i++) {
			enum layer_compression c;

			check_descriptor(&m->layers[i]);
			(void)layer_media_type_compression(m->layers[i].media_type, &c);
		}
		FUZZ_CHECK(m->n_manifests == 0);
	} else {
		FUZZ_CHECK(m->kind == MANIFEST_INDEX);
		FUZZ_CHECK(m->n_layers == 0);
		for (size_t i = 0; i < m->n_manifests; i++)
			check_descriptor(&m->manifests[i]);
	}

	for (size_t i = 0; i < sizeof(platforms) / sizeof(platforms[0]); i++) {
		struct platform p;
		const struct descriptor *d;

		FUZZ_CHECK(platform_parse(platforms[i], &p) == 0);
		d = manifest_select_platform(m, &p);
		if (d) {
			FUZZ_CHECK(m->kind == MANIFEST_INDEX);
			FUZZ_CHECK(d >= m->manifests && d < m->manifests + m->n_manifests);
			/* A nested index may name no platform; anything
			 * else chosen is for this one. */
			if (d->platform.os && d->platform.architecture) {
				FUZZ_CHECK(strcmp(d->platform.os, p.os) == 0);
				FUZZ_CHECK(strcmp(d->platform.architecture, p.architecture) == 0);
			} else {
				FUZZ_CHECK(d->media_type && (strstr(d->media_type, "index") ||
							     strstr(d->media_type, "list")));
			}
		}
		platform_done(&p);
	}
	manifest_free(m);
	return 0;
}

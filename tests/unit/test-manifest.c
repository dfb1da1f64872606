/* Unit tests for registry/manifest: the four document kinds, strict
 * validation with readable reasons, platform selection and the media type
 * tables. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "macro.h"
#include "manifest.h"

#define HEX(c)                                                                                    \
	c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c \
		c c c c c c c c c c c c c c c c c c c
#define D_CONFIG "sha256:" HEX("c")
#define D_L0 "sha256:" HEX("0")
#define D_L1 "sha256:" HEX("1")
#define D_L2 "sha256:" HEX("2")
#define D_AMD64 "sha256:" HEX("a")
#define D_ARM64 "sha256:" HEX("b")
#define D_ARM64_PLAIN "sha256:" HEX("d")
#define D_ARMV6 "sha256:" HEX("e")
#define D_ARMV7 "sha256:" HEX("f")
#define D_ATTEST "sha256:" HEX("9")
#define D_NESTED "sha256:" HEX("8")

DEFINE_TRIVIAL_CLEANUP_FUNC(struct manifest *, manifest_free)

#define LAYER(type, digest, size) \
	"{\"mediaType\":\"" type "\",\"digest\":\"" digest "\",\"size\":" size "}"

#define OCI_MANIFEST_BODY(media_type_member)                                                      \
	"{\"schemaVersion\":2," media_type_member "\"config\":{\"mediaType\":\"" MEDIA_OCI_CONFIG \
	"\","                                                                                     \
	"\"digest\":\"" D_CONFIG "\",\"size\":1469},"                                             \
	"\"layers\":[" LAYER(MEDIA_OCI_LAYER_GZIP, D_L0, "3623807") "," LAYER(                    \
		MEDIA_OCI_LAYER_ZSTD, D_L1,                                                       \
		"0") "," LAYER(MEDIA_OCI_LAYER, D_L2,                                             \
			       "9007199254740993") "],"                                           \
						   "\"annotations\":{\"org.opencontainers.image.created\":\"now\"}}"

static const char oci_manifest[] = OCI_MANIFEST_BODY("\"mediaType\":\"" MEDIA_OCI_MANIFEST "\",");
static const char oci_manifest_untyped[] = OCI_MANIFEST_BODY("");

static const char docker_manifest[] = "{\n"
				      "  \"schemaVersion\": 2,\n"
				      "  \"mediaType\": \"" MEDIA_DOCKER_MANIFEST "\",\n"
				      "  \"config\": {\n"
				      "    \"mediaType\": \"" MEDIA_DOCKER_CONFIG "\",\n"
				      "    \"size\": 7023,\n"
				      "    \"digest\": \"" D_CONFIG "\"\n"
				      "  },\n"
				      "  \"layers\": [\n"
				      "    {\n"
				      "      \"mediaType\": \"" MEDIA_DOCKER_LAYER_GZIP "\",\n"
				      "      \"size\": 32654,\n"
				      "      \"digest\": \"" D_L0 "\"\n"
				      "    },\n"
				      "    {\n"
				      "      \"mediaType\": \"" MEDIA_DOCKER_LAYER_FOREIGN "\",\n"
				      "      \"size\": 16724,\n"
				      "      \"digest\": \"" D_L1 "\",\n"
				      "      \"urls\": [\"https://example.com/layer\"]\n"
				      "    }\n"
				      "  ]\n"
				      "}\n";

#define ENTRY(type, digest, platform) \
	"{\"mediaType\":\"" type "\",\"digest\":\"" digest "\",\"size\":529" platform "}"
#define PLAT(os, arch) ",\"platform\":{\"os\":\"" os "\",\"architecture\":\"" arch "\"}"
#define PLATV(os, arch, variant)                                                                \
	",\"platform\":{\"os\":\"" os "\",\"architecture\":\"" arch "\",\"variant\":\"" variant \
	"\"}"

/* A buildx-style index: images plus attestation manifests for
 * unknown/unknown, and a nested index that must never be selected. */
#define OCI_INDEX_BODY(media_type_member)                                                                                                                               \
	"{\"schemaVersion\":2," media_type_member                                                                                                                       \
	"\"manifests\":[" ENTRY(MEDIA_OCI_MANIFEST, D_AMD64, PLAT("linux", "amd64")) "," ENTRY(                                                                         \
		MEDIA_OCI_MANIFEST, D_ARM64,                                                                                                                            \
		PLATV("linux", "arm64",                                                                                                                                 \
		      "v8")) "," ENTRY(MEDIA_OCI_MANIFEST, D_ARMV6,                                                                                                     \
				       PLATV("linux", "arm",                                                                                                            \
					     "v6")) "," ENTRY(MEDIA_OCI_INDEX, D_NESTED,                                                                                \
							      PLATV("linux", "arm",                                                                                     \
								    "v7")) "," ENTRY(MEDIA_OCI_MANIFEST,                                                                \
										     D_ARMV7,                                                                           \
										     PLATV("linux",                                                                     \
											   "arm",                                                                       \
											   "v7")) ","                                                                   \
												  "{\"mediaType\":\"" MEDIA_OCI_MANIFEST                                \
												  "\",\"digest\":\"" D_ATTEST                                           \
												  "\",\"size\":840,\"annotations\":{\"vnd.docker.reference.type\":"     \
												  "\"attestation-manifest\",\"vnd.docker.reference.digest\":\"" D_AMD64 \
												  "\"}" PLAT(                                                           \
													  "unknown",                                                    \
													  "unknown") "}"                                                \
														     "]}"

static const char oci_index[] = OCI_INDEX_BODY("\"mediaType\":\"" MEDIA_OCI_INDEX "\",");
static const char oci_index_untyped[] = OCI_INDEX_BODY("");

static const char docker_list[] =
	"{\"schemaVersion\":2,\"mediaType\":\"" MEDIA_DOCKER_LIST "\","
	"\"manifests\":["
	"{\"mediaType\":\"" MEDIA_DOCKER_MANIFEST "\",\"size\":7143,"
	"\"digest\":\"" D_AMD64 "\",\"platform\":{\"architecture\":\"amd64\","
	"\"os\":\"linux\",\"os.features\":[\"sse4\"]}},"
	"{\"mediaType\":\"" MEDIA_DOCKER_MANIFEST "\",\"size\":7682,"
	"\"digest\":\"" D_ARM64_PLAIN "\",\"platform\":{\"architecture\":\"arm64\","
	"\"os\":\"linux\"}},"
	"{\"mediaType\":\"" MEDIA_DOCKER_MANIFEST "\",\"size\":7682,"
	"\"digest\":\"" D_ARMV6 "\",\"platform\":{\"architecture\":\"arm\","
	"\"os\":\"linux\",\"variant\":\"v6\"}},"
	"{\"mediaType\":\"" MEDIA_DOCKER_MANIFEST "\",\"size\":7682,"
	"\"digest\":\"" D_ARMV7 "\",\"platform\":{\"architecture\":\"arm\","
	"\"os\":\"linux\"}},"
	"{\"mediaType\":\"" MEDIA_DOCKER_MANIFEST "\",\"size\":1000,"
	"\"digest\":\"" D_L0 "\",\"platform\":{\"architecture\":\"amd64\","
	"\"os\":\"windows\",\"os.version\":\"10.0.17763.1\"}}"
	"]}";

static int parse(const char *body, const char *content_type, struct manifest **ret, char *errbuf,
		 size_t errlen)
{
	return manifest_parse(body, strlen(body), content_type, ret, errbuf, errlen);
}

static void check_image(const struct manifest *m)
{
	assert_int_equal(m->kind, MANIFEST_IMAGE);
	assert_int_equal(m->n_manifests, 0);
	assert_null(m->manifests);
	assert_string_equal(m->config.digest, D_CONFIG);
}

static void test_oci_manifest(void **state)
{
	static const char *const content_types[] = {
		NULL,
		"",
		MEDIA_OCI_MANIFEST,
		"application/json",
		"application/json; charset=utf-8",
		" " MEDIA_OCI_MANIFEST " ; charset=utf-8",
	};

	for (size_t i = 0; i < ARRAY_SIZE(content_types); i++) {
		_cleanup_(manifest_freep) struct manifest *m = NULL;
		char err[256];

		if (parse(oci_manifest, content_types[i], &m, err, sizeof(err)) != 0)
			fail_msg("content type \"%s\": %s",
				 content_types[i] ? content_types[i] : "(null)", err);
		check_image(m);
		assert_string_equal(m->media_type, MEDIA_OCI_MANIFEST);
		assert_string_equal(m->config.media_type, MEDIA_OCI_CONFIG);
		assert_int_equal(m->config.size, 1469);
		assert_int_equal(m->n_layers, 3);
		assert_string_equal(m->layers[0].media_type, MEDIA_OCI_LAYER_GZIP);
		assert_string_equal(m->layers[0].digest, D_L0);
		assert_int_equal(m->layers[0].size, 3623807);
		assert_string_equal(m->layers[1].media_type, MEDIA_OCI_LAYER_ZSTD);
		assert_int_equal(m->layers[1].size, 0);
		assert_string_equal(m->layers[2].digest, D_L2);
		assert_true(m->layers[2].size == UINT64_C(9007199254740993));
		assert_null(m->layers[0].platform.os);
	}
}

static void test_docker_manifest(void **state)
{
	_cleanup_(manifest_freep) struct manifest *m = NULL;

	assert_int_equal(parse(docker_manifest, MEDIA_DOCKER_MANIFEST, &m, NULL, 0), 0);
	check_image(m);
	assert_string_equal(m->media_type, MEDIA_DOCKER_MANIFEST);
	assert_string_equal(m->config.media_type, MEDIA_DOCKER_CONFIG);
	assert_int_equal(m->config.size, 7023);
	assert_int_equal(m->n_layers, 2);
	assert_string_equal(m->layers[0].media_type, MEDIA_DOCKER_LAYER_GZIP);
	assert_int_equal(m->layers[0].size, 32654);
	assert_string_equal(m->layers[1].media_type, MEDIA_DOCKER_LAYER_FOREIGN);
	assert_string_equal(m->layers[1].digest, D_L1);
}

static void test_oci_index(void **state)
{
	_cleanup_(manifest_freep) struct manifest *m = NULL;

	assert_int_equal(parse(oci_index, MEDIA_OCI_INDEX, &m, NULL, 0), 0);
	assert_int_equal(m->kind, MANIFEST_INDEX);
	assert_string_equal(m->media_type, MEDIA_OCI_INDEX);
	assert_int_equal(m->n_layers, 0);
	assert_null(m->layers);
	assert_int_equal(m->n_manifests, 6);
	assert_string_equal(m->manifests[0].platform.os, "linux");
	assert_string_equal(m->manifests[0].platform.architecture, "amd64");
	assert_null(m->manifests[0].platform.variant);
	assert_string_equal(m->manifests[1].platform.variant, "v8");
	assert_string_equal(m->manifests[3].media_type, MEDIA_OCI_INDEX);
	assert_string_equal(m->manifests[5].digest, D_ATTEST);
	assert_int_equal(m->manifests[5].size, 840);
	assert_string_equal(m->manifests[5].platform.os, "unknown");
}

static void test_docker_list(void **state)
{
	_cleanup_(manifest_freep) struct manifest *m = NULL;

	assert_int_equal(parse(docker_list, NULL, &m, NULL, 0), 0);
	assert_int_equal(m->kind, MANIFEST_INDEX);
	assert_string_equal(m->media_type, MEDIA_DOCKER_LIST);
	assert_int_equal(m->n_manifests, 5);
	assert_string_equal(m->manifests[0].media_type, MEDIA_DOCKER_MANIFEST);
	assert_int_equal(m->manifests[0].size, 7143);
	assert_string_equal(m->manifests[2].platform.variant, "v6");
	assert_string_equal(m->manifests[4].platform.os, "windows");
}

struct infer_case {
	const char *body;
	const char *content_type;
	enum manifest_kind kind;
	const char *media_type;
};

static void test_infer_type(void **state)
{
	static const struct infer_case cases[] = {
		{ oci_manifest_untyped, NULL, MANIFEST_IMAGE, MEDIA_OCI_MANIFEST },
		{ oci_manifest_untyped, "application/json", MANIFEST_IMAGE, MEDIA_OCI_MANIFEST },
		{ oci_manifest_untyped, MEDIA_DOCKER_MANIFEST, MANIFEST_IMAGE,
		  MEDIA_DOCKER_MANIFEST },
		{ oci_index_untyped, NULL, MANIFEST_INDEX, MEDIA_OCI_INDEX },
		{ oci_index_untyped, MEDIA_DOCKER_LIST, MANIFEST_INDEX, MEDIA_DOCKER_LIST },
		{ "{\"schemaVersion\":2,\"manifests\":[]}", NULL, MANIFEST_INDEX, MEDIA_OCI_INDEX },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		_cleanup_(manifest_freep) struct manifest *m = NULL;
		char err[256];

		if (parse(cases[i].body, cases[i].content_type, &m, err, sizeof(err)) != 0)
			fail_msg("case %zu: %s", i, err);
		assert_int_equal(m->kind, cases[i].kind);
		assert_string_equal(m->media_type, cases[i].media_type);
	}
}

struct bad_case {
	const char *body;
	const char *content_type;
	const char *reason; /* expected errbuf, after "manifest: " */
};

#define CFG "\"config\":{\"mediaType\":\"a\",\"digest\":\"" D_CONFIG "\",\"size\":1}"
#define IMG(layers) "{\"schemaVersion\":2," CFG ",\"layers\":[" layers "]}"
#define IDX(entries) "{\"schemaVersion\":2,\"manifests\":[" entries "]}"
#define L_OK LAYER(MEDIA_OCI_LAYER_GZIP, D_L0, "1")
#define LAYER_ANN(members)                                         \
	"{\"mediaType\":\"x\",\"digest\":\"" D_L0 "\",\"size\":1," \
	"\"annotations\":{" members "}}"

static const struct bad_case bad_cases[] = {
	{ "", NULL, "empty document" },
	{ "not json", NULL, NULL },
	{ "{\"schemaVersion\":2,", NULL, NULL },
	{ "[]", NULL, "document is not a JSON object" },
	{ "\"x\"", NULL, NULL },
	{ "null", NULL, NULL },
	{ "{\"schemaVersion\":2,\"schemaVersion\":2,\"manifests\":[]}", NULL, NULL },
	{ "{\"manifests\":[]}", NULL, "schemaVersion is missing" },
	{ "{\"schemaVersion\":1,\"manifests\":[]}", NULL, "schemaVersion is not 2" },
	{ "{\"schemaVersion\":\"2\",\"manifests\":[]}", NULL, "schemaVersion is not 2" },
	{ "{\"schemaVersion\":2.0,\"manifests\":[]}", NULL, "schemaVersion is not 2" },
	{ "{\"schemaVersion\":2}", NULL,
	  "cannot tell whether this is an index or an image manifest" },
	{ "{\"schemaVersion\":2,\"manifests\":[]," CFG ",\"layers\":[]}", NULL,
	  "cannot tell whether this is an index or an image manifest" },
	{ "{\"schemaVersion\":2,\"layers\":[]}", NULL,
	  "cannot tell whether this is an index or an image manifest" },
	{ "{\"schemaVersion\":2,\"mediaType\":7,\"manifests\":[]}", NULL,
	  "mediaType is not a string" },
	{ "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.artifact.manifest.v1+json\",\"manifests\":[]}",
	  NULL, "unsupported mediaType \"application/vnd.oci.artifact.manifest.v1+json\"" },

	/* mediaType against Content-Type */
	{ oci_manifest, MEDIA_OCI_INDEX,
	  "mediaType \"" MEDIA_OCI_MANIFEST "\" does not match content type \"" MEDIA_OCI_INDEX
	  "\"" },
	{ oci_index, MEDIA_DOCKER_LIST,
	  "mediaType \"" MEDIA_OCI_INDEX "\" does not match content type \"" MEDIA_DOCKER_LIST
	  "\"" },
	{ docker_manifest, MEDIA_OCI_MANIFEST, NULL },
	{ oci_manifest, "application/vnd.docker.distribution.manifest.v1+prettyjws",
	  "unsupported content type \"application/vnd.docker.distribution.manifest.v1+prettyjws\"" },
	/* The content type decides the shape when the document is silent. */
	{ oci_index_untyped, MEDIA_OCI_MANIFEST, "config is missing" },
	{ oci_manifest_untyped, MEDIA_OCI_INDEX, "manifests is missing" },

	/* image manifests */
	{ "{\"schemaVersion\":2,\"mediaType\":\"" MEDIA_OCI_MANIFEST "\",\"layers\":[]}", NULL,
	  "config is missing" },
	{ "{\"schemaVersion\":2,\"config\":[],\"layers\":[]}", NULL, "config is not an object" },
	{ "{\"schemaVersion\":2," CFG ",\"layers\":{}}", NULL, "layers is not an array" },
	{ "{\"schemaVersion\":2,\"mediaType\":\"" MEDIA_OCI_MANIFEST "\"," CFG "}", NULL,
	  "layers is missing" },
	{ IMG(L_OK ",7"), NULL, "layers[1] is not an object" },
	{ IMG(L_OK ",{\"digest\":\"" D_L1 "\",\"size\":1}"), NULL,
	  "layers[1].mediaType is missing" },
	{ IMG("{\"mediaType\":\"\",\"digest\":\"" D_L1 "\",\"size\":1}"), NULL,
	  "layers[0].mediaType is missing" },
	{ IMG("{\"mediaType\":1,\"digest\":\"" D_L1 "\",\"size\":1}"), NULL,
	  "layers[0].mediaType is not a string" },
	{ IMG(L_OK "," L_OK ",{\"mediaType\":\"x\",\"size\":1}"), NULL,
	  "layers[2].digest is missing" },
	{ IMG(L_OK "," L_OK "," LAYER("x", "sha256:abc", "1")), NULL,
	  "layers[2].digest is not a sha256 digest" },
	{ IMG(LAYER("x", "sha512:" HEX("a") HEX("a"), "1")), NULL,
	  "layers[0].digest is not a sha256 digest" },
	{ IMG(LAYER("x", "sha256:" HEX("A"), "1")), NULL,
	  "layers[0].digest is not a sha256 digest" },
	{ IMG("{\"mediaType\":\"x\",\"digest\":5,\"size\":1}"), NULL,
	  "layers[0].digest is not a string" },
	{ IMG(LAYER("x", D_L0, "-1")), NULL, "layers[0].size is negative" },
	{ IMG(LAYER_ANN("\"a\":1")), NULL, "layers[0].annotations.a is not a string" },
	{ IMG(L_OK "," LAYER_ANN("\"a\":\"b\",\"c\":null")), NULL,
	  "layers[1].annotations.c is not a string" },
	{ IMG("{\"mediaType\":\"x\",\"digest\":\"" D_L0 "\",\"size\":1,\"annotations\":[]}"), NULL,
	  "layers[0].annotations is not an object" },
	{ IMG(LAYER_ANN("\"a\":\"b\",\"a\":\"c\"")), NULL, NULL },
	{ IMG(LAYER("x", D_L0, "1.5")), NULL, "layers[0].size is not an integer" },
	{ IMG(LAYER("x", D_L0, "\"1\"")), NULL, "layers[0].size is not an integer" },
	{ IMG(LAYER("x", D_L0, "99999999999999999999")), NULL, NULL },
	{ IMG("{\"mediaType\":\"x\",\"digest\":\"" D_L0 "\"}"), NULL, "layers[0].size is missing" },
	{ "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"a\",\"digest\":\"sha256:x\",\"size\":1},\"layers\":[]}",
	  NULL, "config.digest is not a sha256 digest" },

	/* indexes */
	{ "{\"schemaVersion\":2,\"mediaType\":\"" MEDIA_OCI_INDEX "\"}", NULL,
	  "manifests is missing" },
	{ "{\"schemaVersion\":2,\"manifests\":{}}", NULL, "manifests is not an array" },
	{ IDX("\"x\""), NULL, "manifests[0] is not an object" },
	{ IDX(ENTRY(MEDIA_OCI_MANIFEST, D_AMD64, ",\"platform\":\"linux/amd64\"")), NULL,
	  "manifests[0].platform is not an object" },
	{ IDX(ENTRY(MEDIA_OCI_MANIFEST, D_AMD64,
		    ",\"platform\":{\"os\":1,\"architecture\":\"amd64\"}")),
	  NULL, "manifests[0].platform.os is not a string" },
	{ IDX(ENTRY(MEDIA_OCI_MANIFEST, D_AMD64,
		    ",\"platform\":{\"os\":\"linux\",\"architecture\":[]}")),
	  NULL, "manifests[0].platform.architecture is not a string" },
	{ IDX(ENTRY(MEDIA_OCI_MANIFEST, D_AMD64, PLAT("linux", "amd64")) "," ENTRY(
		  MEDIA_OCI_MANIFEST, D_ARM64,
		  ",\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\",\"variant\":8}")),
	  NULL, "manifests[1].platform.variant is not a string" },
	{ IDX(ENTRY(MEDIA_OCI_MANIFEST, D_AMD64, ",\"platform\":{\"architecture\":\"amd64\"}")),
	  NULL, "manifests[0].platform.os is missing" },
	{ IDX(ENTRY(MEDIA_OCI_MANIFEST, D_AMD64, ",\"platform\":{\"os\":\"linux\"}")), NULL,
	  "manifests[0].platform.architecture is missing" },
	{ IDX(ENTRY(MEDIA_OCI_MANIFEST, "sha256:" HEX("a") "a", "")), NULL,
	  "manifests[0].digest is not a sha256 digest" },
};

static void test_malformed(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(bad_cases); i++) {
		const struct bad_case *c = &bad_cases[i];
		struct manifest *m = NULL;
		char err[512];
		int r;

		r = parse(c->body, c->content_type, &m, err, sizeof(err));
		if (r != -EBADMSG)
			fail_msg("case %zu (%.60s): expected -EBADMSG, got %d", i, c->body, r);
		assert_null(m);
		if (strncmp(err, "manifest: ", strlen("manifest: ")) != 0 || !strchr(err, ' ') ||
		    strchr(err, '\n'))
			fail_msg("case %zu: bad reason \"%s\"", i, err);
		if (c->reason && strcmp(err + strlen("manifest: "), c->reason) != 0)
			fail_msg("case %zu: expected \"%s\", got \"%s\"", i, c->reason, err);

		/* errbuf is optional. */
		assert_int_equal(parse(c->body, c->content_type, &m, NULL, 0), -EBADMSG);
		assert_null(m);
	}
}

/* Layer annotations are kept (the lazy formats put their table of
 * contents there); the manifest's own are not a descriptor's. */
static void test_annotations(void **state)
{
	static const char body[] =
		"{\"schemaVersion\":2," CFG ",\"layers\":["
		"{\"mediaType\":\"" MEDIA_OCI_LAYER_ZSTD "\",\"digest\":\"" D_L0
		"\",\"size\":10,\"annotations\":{"
		"\"io.github.containers.zstd-chunked.manifest-position\":\"1:2:3:1\","
		"\"k\":\"\",\"x\":\"\\u00fc\"}}," L_OK "],"
		"\"annotations\":{\"top\":\"level\"}}";
	_cleanup_(manifest_freep) struct manifest *m = NULL;
	char err[256];

	assert_int_equal(parse(body, NULL, &m, err, sizeof(err)), 0);
	assert_int_equal(m->n_layers, 2);
	assert_int_equal(m->layers[0].n_annotations, 3);
	assert_string_equal(m->layers[0].annotations[0].key,
			    "io.github.containers.zstd-chunked.manifest-position");
	assert_string_equal(
		descriptor_annotation(&m->layers[0],
				      "io.github.containers.zstd-chunked.manifest-position"),
		"1:2:3:1");
	assert_string_equal(descriptor_annotation(&m->layers[0], "k"), "");
	assert_string_equal(descriptor_annotation(&m->layers[0], "x"), "\xc3\xbc");
	assert_null(descriptor_annotation(&m->layers[0], "top"));
	assert_null(descriptor_annotation(&m->layers[0], "K"));
	assert_int_equal(m->layers[1].n_annotations, 0);
	assert_null(descriptor_annotation(&m->layers[1], "k"));
	assert_null(descriptor_annotation(&m->config, "top"));
}

static void test_errbuf_truncated(void **state)
{
	struct manifest *m = NULL;
	char err[16];

	memset(err, 'x', sizeof(err));
	assert_int_equal(parse("[]", NULL, &m, err, sizeof(err)), -EBADMSG);
	assert_non_null(memchr(err, '\0', sizeof(err)));
	assert_int_equal(strncmp(err, "manifest: ", 10), 0);
	assert_int_equal(parse("[]", NULL, &m, err, 1), -EBADMSG);
	assert_int_equal(err[0], '\0');
}

static void test_size_limit(void **state)
{
	struct manifest *m = NULL;
	_cleanup_free_ char *big = NULL;
	size_t len = MANIFEST_MAX_BYTES + 1;
	char err[256];

	/* Valid JSON padded with whitespace: only the size is wrong. */
	big = malloc(len);
	assert_non_null(big);
	memset(big, ' ', len);
	memcpy(big, oci_manifest, strlen(oci_manifest));
	assert_int_equal(manifest_parse(big, len, NULL, &m, err, sizeof(err)), -EBADMSG);
	assert_null(m);
	assert_non_null(strstr(err, "limit"));

	{
		_cleanup_(manifest_freep) struct manifest *ok = NULL;

		assert_int_equal(manifest_parse(big, len - 1, NULL, &ok, err, sizeof(err)), 0);
		assert_int_equal(ok->n_layers, 3);
	}
}

static void test_not_nul_terminated(void **state)
{
	_cleanup_(manifest_freep) struct manifest *m = NULL;
	_cleanup_free_ char *copy = NULL;
	size_t len = strlen(oci_index);

	/* Only len bytes belong to the document. */
	copy = malloc(len + 5);
	assert_non_null(copy);
	memcpy(copy, oci_index, len);
	memcpy(copy + len, "junk!", 5);
	assert_int_equal(manifest_parse(copy, len, NULL, &m, NULL, 0), 0);
	assert_int_equal(m->n_manifests, 6);
}

struct select_case {
	const char *body;
	const char *os;
	const char *arch;
	const char *variant;
	const char *digest; /* NULL: nothing fits */
};

#define ARM64_ONLY_PLAIN IDX(ENTRY(MEDIA_OCI_MANIFEST, D_ARM64_PLAIN, PLAT("linux", "arm64")))
#define ARM64_BOTH                                                                      \
	IDX(ENTRY(MEDIA_OCI_MANIFEST, D_ARM64_PLAIN, PLAT("linux", "arm64")) "," ENTRY( \
		MEDIA_OCI_MANIFEST, D_ARM64, PLATV("linux", "arm64", "v9")))
#define ARM_PLAIN_THEN_V7                                                             \
	IDX(ENTRY(MEDIA_OCI_MANIFEST, D_ARM64_PLAIN, PLAT("linux", "arm")) "," ENTRY( \
		MEDIA_OCI_MANIFEST, D_ARMV7, PLATV("linux", "arm", "v7")))
#define ARM_V6_ONLY IDX(ENTRY(MEDIA_OCI_MANIFEST, D_ARMV6, PLATV("linux", "arm", "v6")))
#define NO_PLATFORM IDX(ENTRY(MEDIA_OCI_MANIFEST, D_AMD64, ""))
#define ONLY_ATTEST IDX(ENTRY(MEDIA_OCI_MANIFEST, D_ATTEST, PLAT("unknown", "unknown")))
#define WRONG_TYPE                                                              \
	IDX(ENTRY(MEDIA_OCI_INDEX, D_NESTED, PLAT("linux", "amd64")) "," ENTRY( \
		"application/vnd.in-toto+json", D_ATTEST, PLAT("linux", "amd64")))

static const struct select_case select_cases[] = {
	{ oci_index, "linux", "amd64", NULL, D_AMD64 },
	{ oci_index, "linux", "arm64", "v8", D_ARM64 },
	/* arm64 means arm64/v8 */
	{ oci_index, "linux", "arm64", NULL, D_ARM64 },
	{ oci_index, "linux", "arm", "v6", D_ARMV6 },
	/* the nested index with the same platform comes first but is skipped */
	{ oci_index, "linux", "arm", "v7", D_ARMV7 },
	{ oci_index, "linux", "arm", "v5", NULL },
	{ oci_index, "linux", "386", NULL, NULL },
	{ oci_index, "windows", "amd64", NULL, NULL },
	{ oci_index, "linux", "AMD64", NULL, NULL },
	{ oci_index, "unknown", "unknown", NULL, D_ATTEST },
	{ docker_list, "linux", "amd64", NULL, D_AMD64 },
	{ docker_list, "windows", "amd64", NULL, D_L0 },
	{ docker_list, "linux", "arm64", "v8", D_ARM64_PLAIN },
	{ docker_list, "linux", "arm64", NULL, D_ARM64_PLAIN },
	{ docker_list, "linux", "arm", "v6", D_ARMV6 },
	/* no v7 entry: the variant-less arm entry is the fallback */
	{ docker_list, "linux", "arm", "v7", D_ARMV7 },
	{ ARM64_ONLY_PLAIN, "linux", "arm64", "v8", D_ARM64_PLAIN },
	{ ARM64_ONLY_PLAIN, "linux", "arm64", "v9", D_ARM64_PLAIN },
	{ ARM64_BOTH, "linux", "arm64", "v9", D_ARM64 },
	{ ARM64_BOTH, "linux", "arm64", "v8", D_ARM64_PLAIN },
	/* an exact variant beats an earlier variant-less entry */
	{ ARM_PLAIN_THEN_V7, "linux", "arm", "v7", D_ARMV7 },
	{ ARM_PLAIN_THEN_V7, "linux", "arm", "v6", D_ARM64_PLAIN },
	{ ARM_PLAIN_THEN_V7, "linux", "arm", NULL, D_ARM64_PLAIN },
	{ ARM_V6_ONLY, "linux", "arm", "v7", NULL },
	{ ARM_V6_ONLY, "linux", "arm", NULL, D_ARMV6 },
	{ NO_PLATFORM, "linux", "amd64", NULL, NULL },
	{ ONLY_ATTEST, "linux", "amd64", NULL, NULL },
	/* A nested index for the platform, or for none, is for the caller to
	 * follow; an image that fits comes first; attestations never. */
	{ WRONG_TYPE, "linux", "amd64", NULL, D_NESTED },
	{ WRONG_TYPE, "linux", "arm64", NULL, NULL },
	{ IDX(ENTRY(MEDIA_OCI_INDEX, D_NESTED, "")), "linux", "arm64", NULL, D_NESTED },
	{ IDX(ENTRY(MEDIA_OCI_INDEX, D_NESTED, "") "," ENTRY(MEDIA_OCI_MANIFEST, D_AMD64,
							     PLAT("linux", "amd64"))),
	  "linux", "amd64", NULL, D_AMD64 },
	{ IDX(""), "linux", "amd64", NULL, NULL },
};

static void test_select_platform(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(select_cases); i++) {
		const struct select_case *c = &select_cases[i];
		_cleanup_(manifest_freep) struct manifest *m = NULL;
		const struct descriptor *d;
		struct platform p = {
			.os = (char *)c->os,
			.architecture = (char *)c->arch,
			.variant = (char *)c->variant,
		};

		assert_int_equal(parse(c->body, NULL, &m, NULL, 0), 0);
		d = manifest_select_platform(m, &p);
		if (!c->digest && d)
			fail_msg("case %zu: expected no match, got %s", i, d->digest);
		if (c->digest && (!d || strcmp(d->digest, c->digest) != 0))
			fail_msg("case %zu (%s/%s/%s): expected %s, got %s", i, c->os, c->arch,
				 c->variant ? c->variant : "-", c->digest,
				 d ? d->digest : "nothing");
	}
}

static void test_select_not_index(void **state)
{
	_cleanup_(manifest_freep) struct manifest *m = NULL;
	struct platform p = { .os = (char *)"linux", .architecture = (char *)"amd64" };

	assert_int_equal(parse(oci_manifest, NULL, &m, NULL, 0), 0);
	assert_null(manifest_select_platform(m, &p));
}

static void test_platform_native(void **state)
{
	_cleanup_(manifest_freep) struct manifest *m = NULL;
	struct platform p = {};

	platform_native(&p);
	assert_string_equal(p.os, "linux");
	assert_non_null(p.architecture);
#if defined(__x86_64__)
	assert_string_equal(p.architecture, "amd64");
	assert_null(p.variant);
#elif defined(__aarch64__)
	assert_string_equal(p.architecture, "arm64");
	assert_string_equal(p.variant, "v8");
#endif
	/* The native platform finds itself in a list that has it. */
	if (strcmp(p.architecture, "amd64") == 0 || strcmp(p.architecture, "arm64") == 0) {
		assert_int_equal(parse(oci_index, NULL, &m, NULL, 0), 0);
		assert_non_null(manifest_select_platform(m, &p));
	}
}

struct platform_case {
	const char *input;
	int ret;
	const char *os;
	const char *arch;
	const char *variant;
};

static const struct platform_case platform_cases[] = {
	{ "linux/amd64", 0, "linux", "amd64", NULL },
	{ "linux/arm64/v8", 0, "linux", "arm64", "v8" },
	{ "linux/arm/v7", 0, "linux", "arm", "v7" },
	{ "Linux/AMD64", 0, "linux", "amd64", NULL },
	{ "linux/x86_64", 0, "linux", "amd64", NULL },
	{ "linux/aarch64", 0, "linux", "arm64", NULL },
	{ "linux/ppc64le", 0, "linux", "ppc64le", NULL },
	{ "linux", -EINVAL },
	{ "", -EINVAL },
	{ "/amd64", -EINVAL },
	{ "linux/", -EINVAL },
	{ "linux//v7", -EINVAL },
	{ "linux/arm/", -EINVAL },
	{ "linux/arm/v7/x", -EINVAL },
	{ "linux/am d64", -EINVAL },
	{ NULL, -EINVAL },
};

static void test_platform_parse(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(platform_cases); i++) {
		const struct platform_case *c = &platform_cases[i];
		struct platform p = {};
		int r = platform_parse(c->input, &p);

		if (r != c->ret)
			fail_msg("\"%s\": expected %d, got %d", c->input ? c->input : "(null)",
				 c->ret, r);
		if (r < 0) {
			assert_null(p.os);
			continue;
		}
		assert_string_equal(p.os, c->os);
		assert_string_equal(p.architecture, c->arch);
		if (c->variant)
			assert_string_equal(p.variant, c->variant);
		else
			assert_null(p.variant);
		platform_done(&p);
		assert_null(p.os);
		platform_done(&p);
	}
}

struct compression_case {
	const char *media_type;
	int ret;
	enum layer_compression compression;
};

static void test_layer_compression(void **state)
{
	static const struct compression_case cases[] = {
		{ MEDIA_OCI_LAYER, 0, LAYER_UNCOMPRESSED },
		{ MEDIA_OCI_LAYER_GZIP, 0, LAYER_GZIP },
		{ MEDIA_OCI_LAYER_ZSTD, 0, LAYER_ZSTD },
		{ MEDIA_OCI_LAYER_ND, 0, LAYER_UNCOMPRESSED },
		{ MEDIA_OCI_LAYER_ND_GZIP, 0, LAYER_GZIP },
		{ MEDIA_OCI_LAYER_ND_ZSTD, 0, LAYER_ZSTD },
		{ MEDIA_DOCKER_LAYER_GZIP, 0, LAYER_GZIP },
		{ MEDIA_DOCKER_LAYER_FOREIGN, 0, LAYER_GZIP },
		{ MEDIA_OCI_CONFIG, -ENOTSUP },
		{ MEDIA_OCI_MANIFEST, -ENOTSUP },
		{ "application/vnd.in-toto+json", -ENOTSUP },
		{ "application/vnd.oci.image.layer.v1.tar+bzip2", -ENOTSUP },
		{ "application/vnd.oci.image.layer.v1.tar+gzip+encrypted", -ENOTSUP },
		{ "", -ENOTSUP },
		{ NULL, -ENOTSUP },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		enum layer_compression c = (enum layer_compression) - 1;
		int r = layer_media_type_compression(cases[i].media_type, &c);

		if (r != cases[i].ret)
			fail_msg("\"%s\": expected %d, got %d",
				 cases[i].media_type ? cases[i].media_type : "(null)", cases[i].ret,
				 r);
		if (r == 0)
			assert_int_equal(c, cases[i].compression);
		else
			assert_int_equal(c, (enum layer_compression) - 1);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_oci_manifest),	  cmocka_unit_test(test_annotations),
		cmocka_unit_test(test_docker_manifest),	  cmocka_unit_test(test_oci_index),
		cmocka_unit_test(test_docker_list),	  cmocka_unit_test(test_infer_type),
		cmocka_unit_test(test_malformed),	  cmocka_unit_test(test_errbuf_truncated),
		cmocka_unit_test(test_size_limit),	  cmocka_unit_test(test_not_nul_terminated),
		cmocka_unit_test(test_select_platform),	  cmocka_unit_test(test_select_not_index),
		cmocka_unit_test(test_platform_native),	  cmocka_unit_test(test_platform_parse),
		cmocka_unit_test(test_layer_compression),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

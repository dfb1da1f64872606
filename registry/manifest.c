/* Manifest and index parsing.  Registry bytes are untrusted, so the parser
 * is strict: every descriptor the rest of pullfs will act on has a known
 * shape, a valid sha256 digest and a size that fits, and the first problem
 * found is reported by its JSON path so a user can see what the registry
 * got wrong. */
#include "manifest.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/utsname.h>

#include "digest.h"
#include "macro.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(struct manifest *, manifest_free)

/* Where the first error goes; errbuf may be NULL. */
struct parse_ctx {
	char *errbuf;
	size_t errlen;
};

__attribute__((format(printf, 2, 3))) static int fail(struct parse_ctx *ctx, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!ctx->errbuf || ctx->errlen == 0)
		return -EBADMSG;
	n = snprintf(ctx->errbuf, ctx->errlen, "manifest: ");
	if (n < 0 || (size_t)n >= ctx->errlen)
		return -EBADMSG;
	va_start(ap, fmt);
	vsnprintf(ctx->errbuf + n, ctx->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -EBADMSG;
}

static bool media_type_is_image(const char *t)
{
	return t && (strcmp(t, MEDIA_OCI_MANIFEST) == 0 || strcmp(t, MEDIA_DOCKER_MANIFEST) == 0);
}

static bool media_type_is_index(const char *t)
{
	return t && (strcmp(t, MEDIA_OCI_INDEX) == 0 || strcmp(t, MEDIA_DOCKER_LIST) == 0);
}

/* Content types that say nothing about the document: registries and
 * proxies send these for any JSON. */
static bool content_type_is_generic(const char *t, size_t n)
{
	static const char *const generic[] = {
		"application/json",
		"text/plain",
		"application/octet-stream",
		"binary/octet-stream",
	};

	if (n == 0)
		return true;
	for (size_t i = 0; i < ARRAY_SIZE(generic); i++)
		if (strlen(generic[i]) == n && strncasecmp(t, generic[i], n) == 0)
			return true;
	return false;
}

/* The media type inside a Content-Type header value, without parameters
 * or surrounding blanks; NULL when the header carries no information.
 * Returns 0, -EBADMSG for a type pullfs does not parse, -ENOMEM. */
static int content_type_normalise(struct parse_ctx *ctx, const char *content_type,
				  const char **ret_type)
{
	static const char *const known[] = {
		MEDIA_OCI_MANIFEST,
		MEDIA_OCI_INDEX,
		MEDIA_DOCKER_MANIFEST,
		MEDIA_DOCKER_LIST,
	};
	const char *p, *end;
	size_t n;

	*ret_type = NULL;
	if (!content_type)
		return 0;
	p = content_type;
	while (*p == ' ' || *p == '\t')
		p++;
	end = p + strcspn(p, ";");
	while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	n = (size_t)(end - p);
	if (content_type_is_generic(p, n))
		return 0;
	for (size_t i = 0; i < ARRAY_SIZE(known); i++) {
		if (strlen(known[i]) == n && strncasecmp(p, known[i], n) == 0) {
			*ret_type = known[i];
			return 0;
		}
	}
	return fail(ctx, "unsupported content type \"%.*s\"", (int)MIN(n, 100u), p);
}

/* Optional string member: absent is fine, anything but a string is not. */
static int get_opt_string(struct parse_ctx *ctx, json_t *obj, const char *key, const char *where,
			  const char **ret)
{
	json_t *v = json_object_get(obj, key);

	*ret = NULL;
	if (!v)
		return 0;
	if (!json_is_string(v))
		return fail(ctx, "%s%s is not a string", where, key);
	*ret = json_string_value(v);
	return 0;
}

static int dup_string(const char *s, char **ret)
{
	if (!s) {
		*ret = NULL;
		return 0;
	}
	*ret = strdup(s);
	return *ret ? 0 : -ENOMEM;
}

static void descriptor_done(struct descriptor *d)
{
	free(d->media_type);
	free(d->digest);
	platform_done(&d->platform);
	for (size_t i = 0; i < d->n_annotations; i++) {
		free(d->annotations[i].key);
		free(d->annotations[i].value);
	}
	free(d->annotations);
}

/* The annotations object: a map of strings to strings (OCI image spec),
 * anything else is refused rather than half-read. */
static int annotations_parse(struct parse_ctx *ctx, json_t *obj, const char *where,
			     struct descriptor *d)
{
	const char *key;
	json_t *v;
	size_t n;

	if (!json_is_object(obj))
		return fail(ctx, "%sannotations is not an object", where);
	n = json_object_size(obj);
	if (n == 0)
		return 0;
	/* bounded by MANIFEST_MAX_BYTES like every array here */
	d->annotations = calloc(n, sizeof(*d->annotations));
	if (!d->annotations)
		return -ENOMEM;
	json_object_foreach(obj, key, v)
	{
		struct annotation *a = &d->annotations[d->n_annotations];

		if (!json_is_string(v))
			return fail(ctx, "%sannotations.%.100s is not a string", where, key);
		a->key = strdup(key);
		a->value = strdup(json_string_value(v));
		d->n_annotations++;
		if (!a->key || !a->value)
			return -ENOMEM;
	}
	return 0;
}

const char *descriptor_annotation(const struct descriptor *d, const char *key)
{
	for (size_t i = 0; i < d->n_annotations; i++)
		if (strcmp(d->annotations[i].key, key) == 0)
			return d->annotations[i].value;
	return NULL;
}

/* The platform object of an index entry. */
static int platform_from_json(struct parse_ctx *ctx, json_t *obj, const char *where,
			      struct platform *p)
{
	const char *os, *arch, *variant;
	char pwhere[64];
	int r;

	snprintf(pwhere, sizeof(pwhere), "%splatform.", where);
	if (!json_is_object(obj))
		return fail(ctx, "%splatform is not an object", where);
	if ((r = get_opt_string(ctx, obj, "os", pwhere, &os)) < 0 ||
	    (r = get_opt_string(ctx, obj, "architecture", pwhere, &arch)) < 0 ||
	    (r = get_opt_string(ctx, obj, "variant", pwhere, &variant)) < 0)
		return r;
	/* Both are required by the OCI image spec when platform is given;
	 * an entry without them could never be selected. */
	if (!os)
		return fail(ctx, "%sos is missing", pwhere);
	if (!arch)
		return fail(ctx, "%sarchitecture is missing", pwhere);
	if (dup_string(os, &p->os) < 0 || dup_string(arch, &p->architecture) < 0 ||
	    dup_string(variant && *variant ? variant : NULL, &p->variant) < 0)
		return -ENOMEM;
	return 0;
}

/* Fills *d from obj; where is the JSON path prefix for messages, like
 * "layers[2].".  On failure *d may be partly filled; the caller frees it
 * with descriptor_done(). */
static int descriptor_parse(struct parse_ctx *ctx, json_t *obj, const char *where,
			    bool with_platform, struct descriptor *d)
{
	const char *media_type, *digest;
	json_t *size, *platform, *annotations;
	json_int_t sz;
	int r;

	if (!json_is_object(obj))
		return fail(ctx, "%.*s is not an object", (int)strlen(where) - 1, where);

	r = get_opt_string(ctx, obj, "mediaType", where, &media_type);
	if (r < 0)
		return r;
	if (!media_type || !*media_type)
		return fail(ctx, "%smediaType is missing", where);

	r = get_opt_string(ctx, obj, "digest", where, &digest);
	if (r < 0)
		return r;
	if (!digest)
		return fail(ctx, "%sdigest is missing", where);
	if (!digest_is_valid(digest))
		return fail(ctx, "%sdigest is not a sha256 digest", where);

	size = json_object_get(obj, "size");
	if (!size)
		return fail(ctx, "%ssize is missing", where);
	if (!json_is_integer(size))
		return fail(ctx, "%ssize is not an integer", where);
	sz = json_integer_value(size);
	if (sz < 0)
		return fail(ctx, "%ssize is negative", where);

	if (dup_string(media_type, &d->media_type) < 0 || dup_string(digest, &d->digest) < 0)
		return -ENOMEM;
	d->size = (uint64_t)sz;

	annotations = json_object_get(obj, "annotations");
	if (annotations) {
		r = annotations_parse(ctx, annotations, where, d);
		if (r < 0)
			return r;
	}

	platform = json_object_get(obj, "platform");
	if (!with_platform || !platform)
		return 0;
	return platform_from_json(ctx, platform, where, &d->platform);
}

/* Parses the array member key into a new descriptor array. */
static int descriptor_array_parse(struct parse_ctx *ctx, json_t *root, const char *key,
				  bool with_platform, struct descriptor **ret, size_t *ret_n)
{
	json_t *arr = json_object_get(root, key);
	struct descriptor *ds;
	size_t n;

	if (!arr)
		return fail(ctx, "%s is missing", key);
	if (!json_is_array(arr))
		return fail(ctx, "%s is not an array", key);

	n = json_array_size(arr);
	/* Each descriptor holds several hundred bytes of JSON at least, so
	 * MANIFEST_MAX_BYTES already bounds n well below overflow. */
	ds = calloc(n ? n : 1, sizeof(*ds));
	if (!ds)
		return -ENOMEM;

	for (size_t i = 0; i < n; i++) {
		char where[48];
		int r;

		snprintf(where, sizeof(where), "%s[%zu].", key, i);
		r = descriptor_parse(ctx, json_array_get(arr, i), where, with_platform, &ds[i]);
		if (r < 0) {
			for (size_t j = 0; j <= i; j++)
				descriptor_done(&ds[j]);
			free(ds);
			return r;
		}
	}

	*ret = ds;
	*ret_n = n;
	return 0;
}

/* Decides what the document is: its own mediaType, else the Content-Type,
 * else its shape. */
static int manifest_type_resolve(struct parse_ctx *ctx, json_t *root, const char *content_type,
				 const char **ret_type)
{
	const char *doc_type, *ct;
	int r;

	r = get_opt_string(ctx, root, "mediaType", "", &doc_type);
	if (r < 0)
		return r;
	r = content_type_normalise(ctx, content_type, &ct);
	if (r < 0)
		return r;

	if (doc_type) {
		if (!media_type_is_image(doc_type) && !media_type_is_index(doc_type))
			return fail(ctx, "unsupported mediaType \"%.100s\"", doc_type);
		if (ct && strcmp(ct, doc_type) != 0)
			return fail(ctx, "mediaType \"%s\" does not match content type \"%s\"",
				    doc_type, ct);
		*ret_type = doc_type;
		return 0;
	}
	if (ct) {
		*ret_type = ct;
		return 0;
	}

	{
		bool has_manifests = json_object_get(root, "manifests");
		bool has_image = json_object_get(root, "layers") && json_object_get(root, "config");

		if (has_manifests == has_image)
			return fail(ctx,
				    "cannot tell whether this is an index or an image manifest");
		/* A document without mediaType is OCI: Docker's formats
		 * always carry one. */
		*ret_type = has_manifests ? MEDIA_OCI_INDEX : MEDIA_OCI_MANIFEST;
	}
	return 0;
}

int manifest_parse(const char *body, size_t len, const char *content_type, struct manifest **ret,
		   char *errbuf, size_t errlen)
{
	struct parse_ctx ctx = { .errbuf = errbuf, .errlen = errlen };
	_cleanup_(json_decrefp) json_t *root = NULL;
	_cleanup_(manifest_freep) struct manifest *m = NULL;
	const char *type = NULL;
	json_t *version;
	json_error_t jerr;
	int r;

	if (errbuf && errlen)
		errbuf[0] = '\0';
	if (!body || len == 0)
		return fail(&ctx, "empty document");
	if (len > MANIFEST_MAX_BYTES)
		return fail(&ctx, "document of %zu bytes exceeds the %u byte limit", len,
			    MANIFEST_MAX_BYTES);

	root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		if (json_error_code(&jerr) == json_error_out_of_memory)
			return -ENOMEM;
		return fail(&ctx, "invalid JSON at line %d column %d: %s", jerr.line, jerr.column,
			    jerr.text);
	}
	if (!json_is_object(root))
		return fail(&ctx, "document is not a JSON object");

	version = json_object_get(root, "schemaVersion");
	if (!version)
		return fail(&ctx, "schemaVersion is missing");
	if (!json_is_integer(version) || json_integer_value(version) != 2)
		return fail(&ctx, "schemaVersion is not 2");

	r = manifest_type_resolve(&ctx, root, content_type, &type);
	if (r < 0)
		return r;

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->media_type = strdup(type);
	if (!m->media_type)
		return -ENOMEM;

	if (media_type_is_index(type)) {
		m->kind = MANIFEST_INDEX;
		r = descriptor_array_parse(&ctx, root, "manifests", true, &m->manifests,
					   &m->n_manifests);
		if (r < 0)
			return r;
	} else {
		m->kind = MANIFEST_IMAGE;
		if (!json_object_get(root, "config"))
			return fail(&ctx, "config is missing");
		r = descriptor_parse(&ctx, json_object_get(root, "config"), "config.", false,
				     &m->config);
		if (r < 0)
			return r;
		r = descriptor_array_parse(&ctx, root, "layers", false, &m->layers, &m->n_layers);
		if (r < 0)
			return r;
	}

	*ret = TAKE_PTR(m);
	return 0;
}

void manifest_free(struct manifest *m)
{
	if (!m)
		return;
	free(m->media_type);
	descriptor_done(&m->config);
	for (size_t i = 0; i < m->n_layers; i++)
		descriptor_done(&m->layers[i]);
	free(m->layers);
	for (size_t i = 0; i < m->n_manifests; i++)
		descriptor_done(&m->manifests[i]);
	free(m->manifests);
	free(m);
}

/* arm64 images are v8 whether or not the index says so. */
static const char *variant_normalise(const char *arch, const char *variant)
{
	if (variant && strcmp(arch, "arm64") == 0 && strcmp(variant, "v8") == 0)
		return NULL;
	return variant;
}

static bool str_eq(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

const struct descriptor *manifest_select_platform(const struct manifest *m,
						  const struct platform *p)
{
	const struct descriptor *best = NULL;
	const char *want;
	int best_rank = 0;

	if (!m || !p || !p->os || !p->architecture || m->kind != MANIFEST_INDEX)
		return NULL;
	want = variant_normalise(p->architecture, p->variant);

	for (size_t i = 0; i < m->n_manifests; i++) {
		const struct descriptor *d = &m->manifests[i];
		const char *have;
		int rank;

		if (!media_type_is_image(d->media_type) || !d->platform.os ||
		    !d->platform.architecture || strcmp(d->platform.os, p->os) != 0 ||
		    strcmp(d->platform.architecture, p->architecture) != 0)
			continue;

		have = variant_normalise(d->platform.architecture, d->platform.variant);
		if (str_eq(have, want))
			return d;
		/* An entry without variant is generic enough to run on a
		 * specific one; an entry with a variant is a guess when the
		 * caller named none, so it ranks last. */
		if (want && !have)
			rank = 2;
		else if (!want && have)
			rank = 1;
		else
			continue;
		if (rank > best_rank) {
			best = d;
			best_rank = rank;
		}
	}
	if (best)
		return best;
	/* No image fits: a nested index for this platform, or for none in
	 * particular, is followed by the caller. */
	for (size_t i = 0; i < m->n_manifests; i++) {
		const struct descriptor *d = &m->manifests[i];

		const char *have;

		if (!media_type_is_index(d->media_type))
			continue;
		if (!d->platform.os || !d->platform.architecture)
			return d;
		have = variant_normalise(d->platform.architecture, d->platform.variant);
		if (strcmp(d->platform.os, p->os) == 0 &&
		    strcmp(d->platform.architecture, p->architecture) == 0 &&
		    (!have || str_eq(have, want)))
			return d;
	}
	return NULL;
}

void platform_native(struct platform *ret)
{
	static const struct {
		const char *machine;
		const char *arch;
		const char *variant;
	} map[] = {
		{ "x86_64", "amd64", NULL },  { "amd64", "amd64", NULL },
		{ "aarch64", "arm64", "v8" }, { "arm64", "arm64", "v8" },
		{ "armv8l", "arm", "v7" },    { "armv7l", "arm", "v7" },
		{ "armv6l", "arm", "v6" },    { "armv5tel", "arm", "v5" },
		{ "i686", "386", NULL },      { "i586", "386", NULL },
		{ "i386", "386", NULL },      { "ppc64le", "ppc64le", NULL },
		{ "s390x", "s390x", NULL },   { "riscv64", "riscv64", NULL },
		{ "mips64", "mips64", NULL }, { "loongarch64", "loong64", NULL },
	};
	struct utsname u;

	ret->os = (char *)"linux";
	if (uname(&u) == 0) {
		for (size_t i = 0; i < ARRAY_SIZE(map); i++) {
			if (strcmp(u.machine, map[i].machine) == 0) {
				ret->architecture = (char *)map[i].arch;
				ret->variant = (char *)map[i].variant;
				return;
			}
		}
	}

	/* Unknown kernel name: fall back to what this binary was built for. */
#if defined(__x86_64__)
	ret->architecture = (char *)"amd64";
	ret->variant = NULL;
#elif defined(__aarch64__)
	ret->architecture = (char *)"arm64";
	ret->variant = (char *)"v8";
#elif defined(__arm__)
	ret->architecture = (char *)"arm";
	ret->variant = (char *)"v7";
#elif defined(__i386__)
	ret->architecture = (char *)"386";
	ret->variant = NULL;
#else
	ret->architecture = (char *)"unknown";
	ret->variant = NULL;
#endif
}

static bool platform_part_valid(const char *s, size_t n)
{
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

static char *lower_ndup(const char *s, size_t n)
{
	char *d = strndup(s, n);

	if (d)
		for (char *p = d; *p; p++)
			if (*p >= 'A' && *p <= 'Z')
				*p = (char)(*p - 'A' + 'a');
	return d;
}

int platform_parse(const char *s, struct platform *ret)
{
	/* Spellings users bring from uname or other tools. */
	static const struct {
		const char *alias;
		const char *arch;
	} arch_alias[] = {
		{ "x86_64", "amd64" }, { "x86-64", "amd64" }, { "aarch64", "arm64" },
		{ "i386", "386" },     { "i686", "386" },
	};
	struct platform p = {};
	const char *parts[3];
	size_t lens[3], n = 0;
	const char *cur = s;

	if (!s)
		return -EINVAL;
	for (;;) {
		const char *slash = strchr(cur, '/');
		size_t l = slash ? (size_t)(slash - cur) : strlen(cur);

		if (n == ARRAY_SIZE(parts) || !platform_part_valid(cur, l))
			return -EINVAL;
		parts[n] = cur;
		lens[n++] = l;
		if (!slash)
			break;
		cur = slash + 1;
	}
	if (n < 2)
		return -EINVAL;

	p.os = lower_ndup(parts[0], lens[0]);
	p.architecture = lower_ndup(parts[1], lens[1]);
	if (n == 3)
		p.variant = lower_ndup(parts[2], lens[2]);
	if (!p.os || !p.architecture || (n == 3 && !p.variant)) {
		platform_done(&p);
		return -ENOMEM;
	}
	for (size_t i = 0; i < ARRAY_SIZE(arch_alias); i++) {
		if (strcmp(p.architecture, arch_alias[i].alias) == 0) {
			char *a = strdup(arch_alias[i].arch);

			if (!a) {
				platform_done(&p);
				return -ENOMEM;
			}
			free(p.architecture);
			p.architecture = a;
			break;
		}
	}

	*ret = p;
	return 0;
}

void platform_done(struct platform *p)
{
	if (!p)
		return;
	free(p->os);
	free(p->architecture);
	free(p->variant);
	p->os = p->architecture = p->variant = NULL;
}

int layer_media_type_compression(const char *media_type, enum layer_compression *ret)
{
	static const struct {
		const char *type;
		enum layer_compression compression;
	} map[] = {
		{ MEDIA_OCI_LAYER, LAYER_UNCOMPRESSED }, { MEDIA_OCI_LAYER_GZIP, LAYER_GZIP },
		{ MEDIA_OCI_LAYER_ZSTD, LAYER_ZSTD },	 { MEDIA_OCI_LAYER_ND, LAYER_UNCOMPRESSED },
		{ MEDIA_OCI_LAYER_ND_GZIP, LAYER_GZIP }, { MEDIA_OCI_LAYER_ND_ZSTD, LAYER_ZSTD },
		{ MEDIA_DOCKER_LAYER_GZIP, LAYER_GZIP }, { MEDIA_DOCKER_LAYER_FOREIGN, LAYER_GZIP },
	};

	if (!media_type)
		return -ENOTSUP;
	for (size_t i = 0; i < ARRAY_SIZE(map); i++) {
		if (strcmp(media_type, map[i].type) == 0) {
			*ret = map[i].compression;
			return 0;
		}
	}
	return -ENOTSUP;
}

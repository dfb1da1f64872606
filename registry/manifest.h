/* OCI and Docker schema 2 manifests, indexes and manifest lists: parsing
 * into descriptors, and choosing the manifest for a platform.  Pure logic on
 * bytes already in memory; nothing here does I/O. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MEDIA_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define MEDIA_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define MEDIA_OCI_CONFIG "application/vnd.oci.image.config.v1+json"
#define MEDIA_OCI_LAYER "application/vnd.oci.image.layer.v1.tar"
#define MEDIA_OCI_LAYER_GZIP "application/vnd.oci.image.layer.v1.tar+gzip"
#define MEDIA_OCI_LAYER_ZSTD "application/vnd.oci.image.layer.v1.tar+zstd"
#define MEDIA_OCI_LAYER_ND "application/vnd.oci.image.layer.nondistributable.v1.tar"
#define MEDIA_OCI_LAYER_ND_GZIP "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
#define MEDIA_OCI_LAYER_ND_ZSTD "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd"
#define MEDIA_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define MEDIA_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"
#define MEDIA_DOCKER_CONFIG "application/vnd.docker.container.image.v1+json"
#define MEDIA_DOCKER_LAYER_GZIP "application/vnd.docker.image.rootfs.diff.tar.gzip"
#define MEDIA_DOCKER_LAYER_FOREIGN "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"

/* The Accept header value for manifest requests: every type above that
 * names a manifest or an index. */
#define MANIFEST_ACCEPT \
	MEDIA_OCI_MANIFEST ", " MEDIA_OCI_INDEX ", " MEDIA_DOCKER_MANIFEST ", " MEDIA_DOCKER_LIST

#define MANIFEST_MAX_BYTES (4u << 20)

enum layer_compression {
	LAYER_UNCOMPRESSED,
	LAYER_GZIP,
	LAYER_ZSTD,
};

struct platform {
	char *os;	    /* "linux" */
	char *architecture; /* "amd64" */
	char *variant;	    /* "v8" or NULL */
};

struct annotation {
	char *key;
	char *value;
};

struct descriptor {
	char *media_type;
	char *digest; /* validated "sha256:..." */
	uint64_t size;
	struct platform platform; /* index entries only; fields may be NULL */
	/* The descriptor's own annotations, in document order (the lazy
	 * formats name their table of contents there). */
	struct annotation *annotations;
	size_t n_annotations;
};

enum manifest_kind {
	MANIFEST_IMAGE, /* OCI image manifest or Docker schema 2 manifest */
	MANIFEST_INDEX, /* OCI index or Docker manifest list */
};

struct manifest {
	enum manifest_kind kind;
	char *media_type;
	struct descriptor config;  /* MANIFEST_IMAGE */
	struct descriptor *layers; /* MANIFEST_IMAGE, base layer first */
	size_t n_layers;
	struct descriptor *manifests; /* MANIFEST_INDEX */
	size_t n_manifests;
};

/* Parses a manifest or index.  content_type is the Content-Type the
 * registry sent (may be NULL); the document's own mediaType wins when
 * present, and the two must agree when both are set.  Every digest, size
 * and media type is checked.  Returns 0 with a new manifest in *ret, or
 * -EBADMSG (with a one-line reason in errbuf when errbuf is not NULL) for
 * anything malformed, -ENOMEM. */
int manifest_parse(const char *body, size_t len, const char *content_type, struct manifest **ret,
		   char *errbuf, size_t errlen);
void manifest_free(struct manifest *m);

/* The value of annotation key on d (borrowed from d), NULL when absent. */
const char *descriptor_annotation(const struct descriptor *d, const char *key);

/* Picks the best entry of an index for platform p: os and architecture
 * must match; the variant must match when both sides name one (an entry
 * without variant is taken when no exact variant exists).  When no image
 * manifest fits, the first nested index whose platform is this one or
 * unset is returned, for the caller to follow.  Returns the descriptor
 * (borrowed from m) or NULL when none fits. */
const struct descriptor *manifest_select_platform(const struct manifest *m,
						  const struct platform *p);

/* The platform of this machine, in OCI terms (uname machine -> "amd64",
 * "arm64" with variant "v8", "arm" with "v7", ...).  Strings are static. */
void platform_native(struct platform *ret);

/* Parses "os/arch[/variant]" into *ret (strings owned by ret, free with
 * platform_done()).  -EINVAL on bad syntax. */
int platform_parse(const char *s, struct platform *ret);
void platform_done(struct platform *p);

/* Maps a layer media type to its compression.  Returns 0, or -ENOTSUP
 * for media types that are not tar layers pullfs can unpack. */
int layer_media_type_compression(const char *media_type, enum layer_compression *ret);

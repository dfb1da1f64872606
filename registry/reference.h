/* Image references: the Docker/OCI reference grammar ("name[:tag][@digest]"
 * with an optional registry host), normalised the way docker does it
 * ("alpine" -> "docker.io/library/alpine"), and the rules of the path form
 * that pullfs uses under images/. */
#pragma once

#include <stdbool.h>

#define REFERENCE_DEFAULT_DOMAIN "docker.io"
#define REFERENCE_NAME_MAX 255 /* domain + "/" + path, as docker limits it */
#define REFERENCE_TAG_MAX 128

struct reference {
	char *domain; /* "docker.io", "127.0.0.1:5000", "[::1]:5000"; never NULL */
	char *path;   /* repository path, "library/alpine"; never NULL */
	char *tag;    /* "3.19" or NULL */
	char *digest; /* "sha256:<64 hex>" or NULL */
};

enum {
	/* Give a reference with neither tag nor digest the tag "latest". */
	REFERENCE_DEFAULT_TAG = 1 << 0,
};

/* Parses s (e.g. "alpine:3.19", "localhost:5000/a/b@sha256:...") with
 * docker's normalisation: "index.docker.io" and a missing domain become
 * "docker.io", a one-component docker.io path gets "library/".
 * Returns 0 and a new reference owned by the caller in *ret, or -EINVAL
 * for anything outside the grammar (uppercase in the repository, tags
 * over 128 characters, bad digests, names over 255 characters), -ENOMEM. */
int reference_parse(const char *s, unsigned flags, struct reference **ret);

/* Canonical string "domain/path[:tag][@digest]"; caller frees; NULL on
 * allocation failure. */
char *reference_to_string(const struct reference *r);

/* "domain/path" only; caller frees. */
char *reference_repository(const struct reference *r);

void reference_free(struct reference *r);

/* Path form: true when the first component under images/ names a registry
 * host.  That is the case for "localhost", "localhost:PORT", anything with a
 * dot before an optional numeric ":PORT" ("127.0.0.1:5000",
 * "registry.example.com") and bracketed IPv6 ("[::1]:5000").  "alpine:3.19"
 * and "redis:7" are not hosts: they are docker.io short names. */
bool reference_component_is_host(const char *component);

/* Path form: true when a component closes a reference, i.e. carries a tag
 * or a digest ("busybox:1.36", "busybox@sha256:..."); components before it
 * are repository path components.  Only syntax is checked. */
bool reference_component_closes(const char *component);

/* True when component is a valid repository path component on its own
 * (lowercase alphanumerics separated by ".", "_", "__" or runs of "-"). */
bool reference_path_component_is_valid(const char *component);

/* The parts of a parsed reference, each checked on its own against the
 * grammar: a domain ("127.0.0.1:5000", ports 1..65535), a repository path
 * ("library/alpine") and a tag.  NULL is not valid. */
bool reference_domain_is_valid(const char *domain);
bool reference_path_is_valid(const char *path);
bool reference_tag_is_valid(const char *tag);

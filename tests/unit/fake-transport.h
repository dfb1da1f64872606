/* A registry in memory behind the transport table of registry/transport.h,
 * for unit tests of the registry client and of everything above it.  It
 * serves GET and HEAD of /v2/<repo>/manifests/<tag or digest> and
 * /v2/<repo>/blobs/<digest> for whatever host the URL names, answers a
 * Range with a 206, and fails on demand in the ways a real registry or
 * network does.  Every function asserts (cmocka) instead of failing. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "digest.h"
#include "transport.h"

struct fake_transport;

struct fake_transport *fake_transport_new(void);
/* No request may be in flight. */
void fake_transport_free(struct fake_transport *f);
/* For registry_options.transport; lives as long as f. */
const struct registry_transport *fake_transport_get(struct fake_transport *f);

/* Serves data as blob of repo; its digest into ret_digest (may be NULL). */
void fake_put_blob(struct fake_transport *f, const char *repo, const void *data, size_t len,
		   char ret_digest[DIGEST_STRING_MAX]);
/* Serves body as a manifest of repo by its digest and, when tag is set,
 * by tag (a tag that pointed elsewhere moves). */
void fake_put_manifest(struct fake_transport *f, const char *repo, const char *tag,
		       const char *media_type, const char *body,
		       char ret_digest[DIGEST_STRING_MAX]);
/* Serves data at path (a token realm's "/token"; a query is ignored). */
void fake_put(struct fake_transport *f, const char *path, const char *media_type, const char *data);
/* The WWW-Authenticate of a 401 (default "Basic realm=\"fake\""). */
void fake_set_challenge(struct fake_transport *f, const char *challenge);
/* Stops serving the object at path ("/v2/app/manifests/1"). */
void fake_remove(struct fake_transport *f, const char *path);

enum fake_fault_kind {
	FAKE_STATUS,	  /* answers with status arg (and an error body, and a
			 * Basic challenge for a 401) */
	FAKE_REFUSE,	  /* the connection is refused: -EHOSTUNREACH */
	FAKE_TIMEOUT,	  /* the server says nothing: -ETIMEDOUT */
	FAKE_BREAK,	  /* the connection breaks after arg bytes of body */
	FAKE_CORRUPT,	  /* the body with its first byte changed */
	FAKE_WHOLE,	  /* a Range is ignored: 200 and the whole body */
	FAKE_NO_DIGEST,	  /* no Docker-Content-Digest header */
	FAKE_HOLD,	  /* the request waits for fake_release(), then is served */
	FAKE_FIRST_RANGE, /* several ranges asked: 206 with the first only */
	FAKE_REPEAT_PART, /* several ranges asked: each part sent arg times */
};

/* The next `times` requests (-1: every one) whose log line ("GET
 * /v2/app/manifests/1", with " bytes=A-B" when ranged, " user=NAME" or
 * " bearer=TOKEN" when it carries credentials) contains match get the
 * fault; the first matching fault with times left wins. */
void fake_fault(struct fake_transport *f, const char *match, enum fake_fault_kind kind, long arg,
		int times);
void fake_clear_faults(struct fake_transport *f);

/* How many requests so far had a log line containing match. */
unsigned fake_count(struct fake_transport *f, const char *match);
/* The log line of request number i (0: the first), or NULL. */
const char *fake_request(struct fake_transport *f, unsigned i);

/* Waits until n requests are held by FAKE_HOLD. */
void fake_wait_held(struct fake_transport *f, unsigned n);
/* Lets every held request go on. */
void fake_release(struct fake_transport *f);

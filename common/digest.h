/* Content digests ("sha256:<64 hex>"): validation and streaming hashing.
 * Only sha256 is accepted; it is what every registry serves and what the
 * OCI image spec requires implementations to support. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"

#define DIGEST_SHA256_PREFIX "sha256:"
#define DIGEST_HEX_LEN 64
#define DIGEST_STRING_MAX (sizeof(DIGEST_SHA256_PREFIX) - 1 + DIGEST_HEX_LEN + 1)

/* True when s is "sha256:" followed by exactly 64 lowercase hex digits. */
bool digest_is_valid(const char *s);

/* Pointer to the 64 hex digits of a valid digest (no allocation). */
static inline const char *digest_hex(const char *digest)
{
	return digest + sizeof(DIGEST_SHA256_PREFIX) - 1;
}

struct hasher;

/* Returns a new SHA-256 hasher, NULL on allocation failure. */
struct hasher *hasher_new(void);
void hasher_free(struct hasher *h);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct hasher *, hasher_free)
void hasher_update(struct hasher *h, const void *buf, size_t len);
/* Writes "sha256:<hex>" into out (DIGEST_STRING_MAX bytes).  The hasher
 * is reset and can be used again. */
void hasher_final(struct hasher *h, char out[DIGEST_STRING_MAX]);

/* One-shot digest of a buffer into out. Returns 0 or -ENOMEM. */
int digest_buffer(const void *buf, size_t len, char out[DIGEST_STRING_MAX]);

/* Standard base64 (RFC 4648's alphabet, "+/"): decoding Docker's
 * config.json "auth" fields and the xattr values of zstd:chunked tables,
 * encoding the references of layers/ paths. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The characters base64_encode() writes for len bytes, padding included
 * (not the terminating NUL). */
#define BASE64_ENCODED_LEN(len) (((len) + 2) / 3 * 4)

/* Encodes in[0..len) into out, "=" padded as Go's StdEncoding does, and
 * NUL-terminates it: out holds BASE64_ENCODED_LEN(len) + 1 bytes.
 * Returns the length written, without the NUL. */
size_t base64_encode(const unsigned char *in, size_t len, char *out);

/* The most bytes base64_decode() writes for len characters. */
#define BASE64_DECODED_MAX(len) ((len) / 4 * 3 + 3)

/* Decodes s[0..len) into out.  strict: the length is a multiple of four and
 * "=" pads the last group exactly (as Go's encoding/json writes []byte);
 * else padding is optional and the first "=" ends the input.  Returns the
 * decoded length, or -1 for anything malformed. */
ssize_t base64_decode(const char *s, size_t len, bool strict, unsigned char *out);

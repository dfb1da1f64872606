#include "digest.h"

#include <errno.h>
#include <openssl/evp.h>
#include <string.h>

struct hasher {
	EVP_MD_CTX *ctx;
};

bool digest_is_valid(const char *s)
{
	size_t plen = sizeof(DIGEST_SHA256_PREFIX) - 1;

	if (!s || strncmp(s, DIGEST_SHA256_PREFIX, plen) != 0)
		return false;
	s += plen;
	for (size_t i = 0; i < DIGEST_HEX_LEN; i++) {
		char c = s[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return false;
	}
	return s[DIGEST_HEX_LEN] == '\0';
}

struct hasher *hasher_new(void)
{
	struct hasher *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->ctx = EVP_MD_CTX_new();
	if (!h->ctx || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
		hasher_free(h);
		return NULL;
	}
	return h;
}

void hasher_free(struct hasher *h)
{
	if (!h)
		return;
	EVP_MD_CTX_free(h->ctx);
	free(h);
}

void hasher_update(struct hasher *h, const void *buf, size_t len)
{
	EVP_DigestUpdate(h->ctx, buf, len);
}

void hasher_final(struct hasher *h, char out[DIGEST_STRING_MAX])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	size_t plen = sizeof(DIGEST_SHA256_PREFIX) - 1;

	EVP_DigestFinal_ex(h->ctx, md, &n);
	memcpy(out, DIGEST_SHA256_PREFIX, plen);
	for (unsigned int i = 0; i < n && i < DIGEST_HEX_LEN / 2; i++) {
		out[plen + 2 * i] = hex[md[i] >> 4];
		out[plen + 2 * i + 1] = hex[md[i] & 15];
	}
	out[plen + DIGEST_HEX_LEN] = '\0';
	EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL);
}

int digest_buffer(const void *buf, size_t len, char out[DIGEST_STRING_MAX])
{
	struct hasher *h = hasher_new();

	if (!h)
		return -ENOMEM;
	hasher_update(h, buf, len);
	hasher_final(h, out);
	hasher_free(h);
	return 0;
}

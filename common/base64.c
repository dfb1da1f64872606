/* Base64; see base64.h. */
#include "base64.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t base64_encode(const unsigned char *in, size_t len, char *out)
{
	size_t o = 0;

	for (size_t i = 0; i < len; i += 3) {
		unsigned v = (unsigned)in[i] << 16;

		if (i + 1 < len)
			v |= (unsigned)in[i + 1] << 8;
		if (i + 2 < len)
			v |= in[i + 2];
		out[o++] = alphabet[v >> 18 & 63];
		out[o++] = alphabet[v >> 12 & 63];
		out[o++] = i + 1 < len ? alphabet[v >> 6 & 63] : '=';
		out[o++] = i + 2 < len ? alphabet[v & 63] : '=';
	}
	out[o] = '\0';
	return o;
}

static int base64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

ssize_t base64_decode(const char *s, size_t len, bool strict, unsigned char *out)
{
	size_t n = 0, data = len, pad = 0;
	unsigned acc = 0, bits = 0;

	if (strict) {
		if (len % 4 != 0)
			return -1;
		while (pad < 2 && data > 0 && s[data - 1] == '=') {
			data--;
			pad++;
		}
	}
	for (size_t i = 0; i < data; i++) {
		int v;

		if (s[i] == '=' && !strict)
			break;
		v = base64_value((unsigned char)s[i]);
		if (v < 0)
			return -1;
		acc = (acc << 6) | (unsigned)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[n++] = (unsigned char)(acc >> bits);
		}
		acc &= (1u << bits) - 1;
	}
	/* a last group of one character is no byte at all */
	if (strict && data % 4 == 1)
		return -1;
	return (ssize_t)n;
}

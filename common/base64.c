/* Base64 decoding; see base64.h. */
#include "base64.h"

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

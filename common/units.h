/* Sizes, durations and plain numbers as people write and read them:
 * "20G", "1.5TiB", "1h30m", "300"; "3.2 MiB", "5m12s".  The parsers take
 * digits and units only -- no blanks, signs, hex, exponents, "nan" or
 * "inf", all of which strtoul(3) and strtod(3) would let through -- so
 * the daemon's options and the CLI's arguments mean one thing each. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Length of the decimal number at the start of s ("12", "1.5"; no "1."
 * nor ".5"), 0 when s does not start with one. */
size_t decimal_len(const char *s);

/* Digits only, at most UINT64_MAX.  Returns 0, -EINVAL for anything but
 * digits (an empty string too), or -ERANGE on overflow. */
int parse_uint64(const char *s, uint64_t *ret);

/* "1073741824", "512M", "20G", "1.5TiB", "100B": bytes, K/M/G/T (either
 * case) being binary multiples, an optional "i" after them and an
 * optional "B".  A fraction needs a unit.  Returns 0, -EINVAL, or -ERANGE
 * for 2^64 and above. */
int parse_size(const char *s, uint64_t *ret);

/* "90", "90s", "1.5m", "1h30m", "2d": seconds.  A number without unit
 * counts as seconds and ends the string.  Returns 0 or -EINVAL. */
int parse_duration(const char *s, double *ret);

/* "512 B", "1.5 KiB", "20 GiB": binary multiples, one decimal below 10.
 * A negative size prints as "0 B".  buf is cut to len, NUL included. */
void format_size(double bytes, char *buf, size_t len);

/* Like kubectl's HumanDuration, two units at the most: "45s", "3m12s",
 * "47m", "5h3m", "2d4h", "3y".  buf is cut to len, NUL included. */
void format_duration(double seconds, char *buf, size_t len);

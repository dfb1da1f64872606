/* The rules for names in layers: normalising a tar name, and the set of
 * paths a layer has shown so far.  Shared by the unpacker and the
 * table-of-contents readers of lazy layers. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "errname.h"
#include "layer-private.h"
#include "macro.h"


/* ---- path rules ------------------------------------------------------ */

/* Checks that every component of a relative path is a real name: not
 * empty, ".", ".." and not longer than NAME_MAX.  "" (the root) passes. */
bool layer_path_components_ok(const char *p)
{
	if (*p == '\0')
		return true;
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);

		if (len == 0 || len > LAYER_NAME_MAX)
			return false;
		if (p[0] == '.' && (len == 1 || (len == 2 && p[1] == '.')))
			return false;
		if (!slash)
			return true;
		p = slash + 1;
	}
}

/* Turns a tar name into the normalised form of struct layer_entry.  Only a
 * leading "./" and trailing slashes are dropped: anything else unusual is
 * refused rather than reinterpreted, since two tools disagreeing about what
 * "a//b" or "a/./b" means is how overlay escapes happen. */
int layer_normalise(const char *raw, uint32_t max_path, char **ret,
			   char *errbuf, size_t errlen)
{
	const char *p = raw;
	size_t len;
	char *s;

	if (*p == '\0')
		return layer_fail(errbuf, errlen, "layer: empty entry name");
	if (*p == '/')
		return layer_fail(errbuf, errlen,
				  "layer: absolute entry name \"%.200s\"", raw);
	if (strcmp(p, ".") == 0)
		p = "";
	else if (p[0] == '.' && p[1] == '/')
		p += 2;

	len = strlen(p);
	while (len > 0 && p[len - 1] == '/')
		len--;
	if (len > max_path)
		return layer_fail(errbuf, errlen,
				  "layer: entry name longer than %" PRIu32
				  " bytes",
				  max_path);

	s = strndup(p, len);
	if (!s)
		return -ENOMEM;
	if (!layer_path_components_ok(s)) {
		free(s);
		return layer_fail(errbuf, errlen,
				  "layer: bad entry name \"%.200s\"", raw);
	}
	*ret = s;
	return 0;
}

/* ---- set of paths seen in this layer (hardlink targets) -------------- */


static uint64_t layer_hash(const char *s)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * UINT64_C(0x100000001b3);
	return h;
}

bool pathset_has(const struct pathset *ps, const char *s)
{
	if (ps->cap == 0)
		return false;
	for (size_t i = layer_hash(s) & (ps->cap - 1);;
	     i = (i + 1) & (ps->cap - 1)) {
		if (!ps->slots[i])
			return false;
		if (strcmp(ps->slots[i], s) == 0)
			return true;
	}
}

static void pathset_put(const char **slots, size_t cap, const char *s)
{
	size_t i = layer_hash(s) & (cap - 1);

	while (slots[i]) {
		if (strcmp(slots[i], s) == 0)
			return;
		i = (i + 1) & (cap - 1);
	}
	slots[i] = s;
}

int pathset_add(struct pathset *ps, const char *s)
{
	if ((ps->n + 1) * 2 > ps->cap) {
		size_t cap = ps->cap ? ps->cap * 2 : 64;
		const char **slots = calloc(cap, sizeof(*slots));

		if (!slots)
			return -ENOMEM;
		for (size_t i = 0; i < ps->cap; i++)
			if (ps->slots[i])
				pathset_put(slots, cap, ps->slots[i]);
		free(ps->slots);
		ps->slots = slots;
		ps->cap = cap;
	}
	if (!pathset_has(ps, s)) {
		pathset_put(ps->slots, ps->cap, s);
		ps->n++;
	}
	return 0;
}


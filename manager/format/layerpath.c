/* The rules for names in layers: normalising a tar name, the overlay
 * markers, and the paths a layer may place once it has placed others.
 * Shared by the unpacker and the table-of-contents readers of lazy
 * layers, so that a lazily read layer is the same tree as an unpacked
 * one. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "errname.h"
#include "layer-private.h"
#include "macro.h"

#define WH_PREFIX ".wh."
#define WH_OPAQUE ".wh..wh..opq"
#define WH_META_PREFIX ".wh..wh."

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

/* Turns a tar name into the normalised form of struct layer_entry.  Only
 * leading slashes, a leading "./" and trailing slashes are dropped:
 * anything else unusual is refused rather than reinterpreted, since two
 * tools disagreeing about what "a//b" or "a/./b" means is how overlay
 * escapes happen. */
int layer_normalise(const char *raw, uint32_t max_path, char **ret, char *errbuf, size_t errlen)
{
	const char *p = raw;
	size_t len;
	char *s;

	if (*p == '\0')
		return layer_fail(errbuf, errlen, "layer: empty entry name");
	/* Names are resolved inside the root, as every extractor of layers
	 * does: "/etc/x" is "etc/x", and "/" the root (umoci insert writes
	 * both).  Nothing is ever resolved against the host. */
	while (*p == '/')
		p++;
	if (strcmp(p, ".") == 0)
		p = "";
	else if (p[0] == '.' && p[1] == '/')
		p += 2;

	len = strlen(p);
	while (len > 0 && p[len - 1] == '/')
		len--;
	if (len > max_path)
		return layer_fail(errbuf, errlen, "layer: entry name longer than %" PRIu32 " bytes",
				  max_path);

	s = strndup(p, len);
	if (!s)
		return -ENOMEM;
	if (!layer_path_components_ok(s)) {
		free(s);
		return layer_fail(errbuf, errlen, "layer: bad entry name \"%.200s\"", raw);
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
	for (size_t i = layer_hash(s) & (ps->cap - 1);; i = (i + 1) & (ps->cap - 1)) {
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

/* ---- overlay markers ---------------------------------------------------- */

int layer_whiteout(struct layer_entry *e, char *errbuf, size_t errlen)
{
	char *base = strrchr(e->path, '/');
	size_t dirlen;
	const char *victim;
	char *s;

	base = base ? base + 1 : e->path;
	if (strncmp(base, WH_PREFIX, strlen(WH_PREFIX)) != 0)
		return 0;
	dirlen = base == e->path ? 0 : (size_t)(base - e->path - 1);

	if (strcmp(base, WH_OPAQUE) == 0) {
		e->type = LAYER_ENTRY_OPAQUE;
		e->path[dirlen] = '\0';
		return 0;
	}
	if (strncmp(base, WH_META_PREFIX, strlen(WH_META_PREFIX)) == 0)
		return 1;

	victim = base + strlen(WH_PREFIX);
	if (victim[0] == '\0' || strcmp(victim, ".") == 0 || strcmp(victim, "..") == 0)
		return layer_fail(errbuf, errlen, "layer: bad whiteout \"%.200s\"", e->path);
	/* Removing the prefix only shortens the path: rebuild in place. */
	s = e->path + (base - e->path);
	memmove(s, victim, strlen(victim) + 1);
	e->type = LAYER_ENTRY_WHITEOUT;
	return 0;
}

/* ---- places a layer has taken ------------------------------------------- */

int layer_hardlink_target(const struct layer_places *pl, const char *raw, uint32_t max_path,
			  struct layer_entry *e, char *errbuf, size_t errlen)
{
	int r = layer_normalise(raw, max_path, &e->link, errbuf, errlen);

	if (r < 0)
		return r;
	if (!pathset_has(&pl->seen, e->link))
		return layer_fail(errbuf, errlen,
				  "layer: hardlink \"%.200s\" to \"%.200s\", "
				  "not an earlier file of the layer",
				  e->path, e->link);
	e->type = LAYER_ENTRY_HARDLINK;
	return 0;
}

/* Within one layer a path names one thing.  A second entry for a path
 * (other than a directory given again) and an entry below a path that the
 * layer made a symlink or a file are refused: extractors disagree about
 * which copy wins and whether "a/x" after a symlink "a" goes through the
 * link, and such disagreement is how content hides from scanners or
 * lands outside the root.  Whiteouts only act on lower layers, so they
 * may share a path with an entry of their own layer. */
int layer_places_check(const struct layer_places *pl, struct layer_entry *e, char *errbuf,
		       size_t errlen)
{
	bool marker = e->type == LAYER_ENTRY_WHITEOUT || e->type == LAYER_ENTRY_OPAQUE;

	if (!marker && (pathset_has(&pl->seen, e->path) ||
			(e->type != LAYER_ENTRY_DIR && pathset_has(&pl->dirs, e->path))))
		return layer_fail(errbuf, errlen, "layer: \"%.200s\" appears more than once",
				  e->path);
	for (char *s = strchr(e->path, '/'); s; s = strchr(s + 1, '/')) {
		bool below;

		*s = '\0';
		below = pathset_has(&pl->seen, e->path);
		*s = '/';
		if (below)
			return layer_fail(errbuf, errlen,
					  "layer: \"%.200s\" is below \"%.*s\", "
					  "which is not a directory",
					  e->path, (int)MIN(s - e->path, 200), e->path);
	}
	return 0;
}

int layer_places_add(struct layer_places *pl, const struct layer_entry *e)
{
	switch (e->type) {
	case LAYER_ENTRY_DIR:
		return pathset_add(&pl->dirs, e->path);
	case LAYER_ENTRY_WHITEOUT:
	case LAYER_ENTRY_OPAQUE:
		return 0;
	default:
		return pathset_add(&pl->seen, e->path);
	}
}

void layer_places_done(struct layer_places *pl)
{
	free(pl->seen.slots);
	free(pl->dirs.slots);
	*pl = (struct layer_places){ 0 };
}

bool layer_is_estargz_own(const char *path)
{
	return strcmp(path, ESTARGZ_TOC_NAME) == 0 ||
	       strcmp(path, ESTARGZ_PREFETCH_LANDMARK) == 0 ||
	       strcmp(path, ESTARGZ_NO_PREFETCH_LANDMARK) == 0;
}

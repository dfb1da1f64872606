/* The path form under images/; see pathform.h. */
#include "pathform.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "reference.h"

char *pathform_join(const char *a, const char *b)
{
	char *s;

	if (!*a)
		return strdup(b);
	if (asprintf(&s, "%s/%s", a, b) < 0)
		return NULL;
	return s;
}

static int invalid(struct pathform_step *s, const char *why)
{
	s->kind = PATHFORM_INVALID;
	s->err = -EINVAL;
	s->why = why;
	return 0;
}

/* Not there: see pathform.h. */
static int absent(struct pathform_step *s, const char *why)
{
	s->kind = PATHFORM_INVALID;
	s->err = -ENOENT;
	s->why = why;
	return 0;
}

static bool is_probe(const char *name)
{
	size_t len = strlen(name), n = strlen(PATHFORM_NSPAWN_SUFFIX);

	return name[0] == '.' || (len >= n && !strcmp(name + len - n, PATHFORM_NSPAWN_SUFFIX));
}

static int directory(struct pathform_step *s, enum pathform_kind kind, unsigned depth,
		     bool short_form, char *prefix)
{
	if (!prefix)
		return -ENOMEM;
	s->kind = kind;
	s->dir.depth = depth;
	s->dir.short_form = short_form;
	s->dir.prefix = prefix;
	return 0;
}

/* The image of a reference on a host.  A text outside the grammar is
 * left to ensure, which says so in the events log. */
static int closes_reference(const struct pathform_dir *dir, const char *name,
			    struct pathform_step *s)
{
	int r;

	s->kind = PATHFORM_REFERENCE;
	s->text = pathform_join(dir->prefix, name);
	if (!s->text)
		return -ENOMEM;
	r = reference_parse(s->text, REFERENCE_DEFAULT_TAG, &s->ref);
	return r == -EINVAL ? 0 : r;
}

/* The symlink of a docker.io short name: up to images/, then down the
 * canonical path, so both spellings lead to one image. */
static int short_link(const struct pathform_dir *dir, const char *name, struct pathform_step *s)
{
	_cleanup_free_ char *full = NULL, *canonical = NULL;
	struct reference *ref = NULL;
	char *target;
	int r;

	full = pathform_join(dir->prefix, name);
	if (!full)
		return -ENOMEM;
	r = reference_parse(full, 0, &ref);
	if (r == -EINVAL)
		return invalid(s, "not a valid reference");
	if (r < 0)
		return r;
	canonical = reference_to_string(ref);
	reference_free(ref);
	if (!canonical)
		return -ENOMEM;
	target = malloc(3 * dir->depth + strlen(canonical) + 1);
	if (!target)
		return -ENOMEM;
	target[0] = '\0';
	for (unsigned i = 0; i < dir->depth; i++)
		strcat(target, "../");
	strcat(target, canonical);
	s->kind = PATHFORM_SHORT_LINK;
	s->target = target;
	s->dir.depth = dir->depth + 1;
	s->dir.short_form = true;
	return 0;
}

int pathform_step(const struct pathform_dir *dir, const char *name,
		  pathform_known_host_fn *known_host, void *userdata, struct pathform_step *ret)
{
	bool is_host, closes;
	int r;

	*ret = (struct pathform_step){ 0 };
	if (is_probe(name))
		return absent(ret, "a hidden name or a settings file, never an image path");
	/* A host opens a reference only in the first position; elsewhere,
	 * and for names that are not hosts, the short-name rules apply. */
	is_host = dir->depth == 0 &&
		  (reference_component_is_host(name) || (known_host && known_host(userdata, name)));
	closes = !is_host && reference_component_closes(name);
	if (is_host)
		r = directory(ret, PATHFORM_HOST, 1, false, strdup(name));
	else if (closes && dir->depth > 0 && !dir->short_form)
		r = closes_reference(dir, name, ret);
	else if (closes)
		r = short_link(dir, name, ret);
	else if (!reference_path_component_is_valid(name))
		r = invalid(ret, "neither a host, a repository path component nor a tag or digest");
	else if (dir->depth == 0)
		r = directory(ret, PATHFORM_DIR, 1, true,
			      pathform_join(REFERENCE_DEFAULT_DOMAIN, name));
	else
		r = directory(ret, PATHFORM_DIR, dir->depth + 1, dir->short_form,
			      pathform_join(dir->prefix, name));
	if (r < 0)
		pathform_step_done(ret);
	return r;
}

void pathform_step_done(struct pathform_step *s)
{
	if (!s)
		return;
	free(s->dir.prefix);
	free(s->text);
	reference_free(s->ref);
	free(s->target);
	*s = (struct pathform_step){ 0 };
}

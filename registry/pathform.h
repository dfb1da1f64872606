/* The path form of references under images/: what one more component
 * below a directory of it is.
 *
 *   images/<host>/<path>/.../<last>:<tag>       a reference on a host
 *   images/<path>/.../<last>:<tag>              a docker.io short name
 *
 * A registry host ("localhost:5000", "registry.example.com", one the
 * daemon knows) opens a reference, in the first position only; repository
 * path components are directories; the component with a tag or a digest
 * closes the reference.  Below a host the closing component names the
 * image; in a docker.io short name it is a symlink to the canonical path
 * (images/busybox:1.36 -> docker.io/library/busybox:1.36), so that both
 * spellings are one image.
 *
 * Some names no image path can have are what programs probe beside a
 * directory on any filesystem: hidden names (".git", lock files such as
 * systemd-nspawn's ".#NAME.lck"; no host, repository component or tag
 * begins with '.') and systemd-nspawn's settings file "NAME.nspawn" (a tag
 * never ends so in practice).  These are not there (ENOENT), as on a
 * disk: creating one then fails with EROFS, the mount being read-only.
 * Other names outside the path form are invalid (EINVAL).  Knows nothing
 * of FUSE. */
#pragma once

#include <stdbool.h>

struct reference;

#define PATHFORM_NSPAWN_SUFFIX ".nspawn"

/* A directory of the path form. */
struct pathform_dir {
	unsigned depth;	    /* components below images/, 0 for images/ */
	bool short_form;    /* inside a docker.io short name */
	const char *prefix; /* canonical components so far, "" for images/ */
};

enum pathform_kind {
	PATHFORM_INVALID,    /* nothing of the path form: see err and why */
	PATHFORM_HOST,	     /* a directory: a registry host */
	PATHFORM_DIR,	     /* a directory: a repository path component */
	PATHFORM_REFERENCE,  /* the image of a reference */
	PATHFORM_SHORT_LINK, /* a symlink from a short name to the image */
};

/* What a component is.  HOST, DIR and SHORT_LINK: where the node it
 * makes stands, in dir (a prefix for the directories only).  REFERENCE: the reference it closes, parsed, in ref; ref is NULL when
 * text is outside the grammar, which only ensure reports (its events).
 * SHORT_LINK: the symlink's target, relative to the link's directory. */
struct pathform_step {
	enum pathform_kind kind;
	/* INVALID: -EINVAL, or -ENOENT for a name programs probe (above) */
	int err;
	const char *why; /* INVALID: a static phrase */
	struct {
		unsigned depth;
		bool short_form;
		char *prefix;
	} dir;		       /* HOST, DIR, SHORT_LINK */
	char *text;	       /* REFERENCE: the reference as the path spells it */
	struct reference *ref; /* REFERENCE: parsed, or NULL */
	char *target;	       /* SHORT_LINK */
};

/* Whether a first component that does not look like a host is one the
 * daemon knows (a configured registry, an image pulled from it). */
typedef bool pathform_known_host_fn(void *userdata, const char *host);

/* Classifies component name of directory dir into *ret, which the caller
 * clears with pathform_step_done().  known_host is asked only about a
 * first component that does not look like a host; it may be NULL.  Does
 * not block.  Returns 0 (an invalid component included), or -ENOMEM. */
/* "a/b", or b alone when a is "" (the top): a new string, NULL when out of
 * memory. */
char *pathform_join(const char *a, const char *b);

int pathform_step(const struct pathform_dir *dir, const char *name,
		  pathform_known_host_fn *known_host, void *userdata, struct pathform_step *ret);

/* Frees what a step holds; the step may be zeroed or half filled. */
void pathform_step_done(struct pathform_step *s);

/* What the two halves of the tree share: the build nodes tree-build.c
 * makes and tree.c freezes.  Not for use outside manager/. */
#pragma once

#include <stdint.h>

#include "tree.h"

/* The longest name of one path component. */
#define TREE_NAME_MAX 255

struct bdent;

struct bnode {
	const struct layer_entry *e; /* metadata; NULL: implicit directory */
	uint32_t refs;		     /* names pointing here */
	uint32_t idx;		     /* freeze: 1 + position, 0: unseen */
	uint16_t layer;
	uint8_t type; /* enum layer_entry_type, never HARDLINK */
	/* directories */
	struct bnode *parent;
	struct bdent *children; /* unordered sibling list */
	uint32_t n_children;
};

struct bdent {
	const char *name; /* borrowed from a layer entry path, not terminated */
	uint32_t len;
	uint32_t hash;
	struct bnode *dir;
	struct bnode *ino;
	struct bdent *hnext;
	struct bdent *prev, *next; /* siblings */
};

/* Copies the nodes reachable from root into a frozen tree; sets their
 * idx, touches nothing else.  Returns 0 with a tree owned by the caller,
 * or -ENOMEM. */
int tree_freeze(struct bnode *root, struct tree **ret);

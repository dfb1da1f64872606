/* The merged tree of an image.  Building works on mutable nodes that only
 * borrow strings from the layer indexes; freezing copies what survived into
 * a few flat arrays (inodes in breadth-first order, children sorted by
 * name, one string arena) and drops the build structures, so a frozen tree
 * costs a fixed few bytes per name and is safe to share between threads. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "errname.h"
#include "macro.h"
#include "tree.h"

#define TREE_NAME_MAX 255

/* ---- build phase ------------------------------------------------------ */

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

/* One hash table for every directory, keyed by (directory, name), keeps
 * build memory at two pointers per name. */
struct builder {
	struct bnode *root;
	struct bdent **buckets;
	size_t n_buckets, n_dents;
	char *errbuf;
	size_t errlen;
};

/* Everything wrong with layer content is EBADMSG, with a reason. */
#define tree_fail(errbuf, errlen, ...) errbuf_fail(-EBADMSG, errbuf, errlen, __VA_ARGS__)

static uint32_t tree_hash(const struct bnode *dir, const char *name,
			  size_t len)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325) ^ (uintptr_t)dir;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)name[i]) * UINT64_C(0x100000001b3);
	return (uint32_t)(h ^ (h >> 32));
}

static struct bnode *bnode_new(uint8_t type, const struct layer_entry *e,
			       uint16_t layer)
{
	struct bnode *n = calloc(1, sizeof(*n));

	if (!n)
		return NULL;
	n->type = type;
	n->e = e;
	n->layer = layer;
	return n;
}

static struct bdent *builder_lookup(const struct builder *b,
				    const struct bnode *dir, const char *name,
				    size_t len)
{
	uint32_t h = tree_hash(dir, name, len);

	for (struct bdent *d = b->buckets[h & (b->n_buckets - 1)]; d;
	     d = d->hnext)
		if (d->hash == h && d->dir == dir && d->len == len &&
		    memcmp(d->name, name, len) == 0)
			return d;
	return NULL;
}

static void builder_unhash(struct builder *b, struct bdent *d)
{
	struct bdent **pp = &b->buckets[d->hash & (b->n_buckets - 1)];

	while (*pp != d)
		pp = &(*pp)->hnext;
	*pp = d->hnext;
	b->n_dents--;
}

static int builder_grow(struct builder *b)
{
	size_t n = b->n_buckets * 2;
	struct bdent **nb = calloc(n, sizeof(*nb));

	if (!nb)
		return -ENOMEM;
	for (size_t i = 0; i < b->n_buckets; i++) {
		struct bdent *d = b->buckets[i];

		while (d) {
			struct bdent *next = d->hnext;

			d->hnext = nb[d->hash & (n - 1)];
			nb[d->hash & (n - 1)] = d;
			d = next;
		}
	}
	free(b->buckets);
	b->buckets = nb;
	b->n_buckets = n;
	return 0;
}

/* Adds name -> ino to dir, taking a reference.  The name must be absent. */
static int builder_link(struct builder *b, struct bnode *dir,
			const char *name, size_t len, struct bnode *ino)
{
	struct bdent *d;

	if (b->n_dents >= b->n_buckets && builder_grow(b) < 0)
		return -ENOMEM;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->name = name;
	d->len = (uint32_t)len;
	d->hash = tree_hash(dir, name, len);
	d->dir = dir;
	d->ino = ino;
	d->hnext = b->buckets[d->hash & (b->n_buckets - 1)];
	b->buckets[d->hash & (b->n_buckets - 1)] = d;
	b->n_dents++;
	d->next = dir->children;
	if (dir->children)
		dir->children->prev = d;
	dir->children = d;
	dir->n_children++;
	ino->refs++;
	if (ino->type == LAYER_ENTRY_DIR)
		ino->parent = dir;
	return 0;
}

static void builder_detach(struct builder *b, struct bdent *d)
{
	builder_unhash(b, d);
	if (d->prev)
		d->prev->next = d->next;
	else
		d->dir->children = d->next;
	if (d->next)
		d->next->prev = d->prev;
	d->dir->n_children--;
}

/* Drops one reference to ino, freeing it (and a directory's whole
 * subtree) when it was the last name.  Walks down through the parent
 * pointers instead of recursing, so depth costs no stack and freeing
 * never needs memory. */
static void builder_unref(struct builder *b, struct bnode *ino)
{
	struct bnode *cur;

	if (--ino->refs > 0)
		return;
	if (ino->type != LAYER_ENTRY_DIR) {
		free(ino);
		return;
	}
	cur = ino;
	for (;;) {
		struct bdent *d = cur->children;
		struct bnode *child;

		if (!d) {
			struct bnode *up = cur->parent;
			bool done = cur == ino;

			free(cur);
			if (done)
				return;
			cur = up;
			continue;
		}
		builder_detach(b, d);
		child = d->ino;
		free(d);
		if (--child->refs > 0)
			continue;
		if (child->type == LAYER_ENTRY_DIR)
			cur = child; /* its parent pointer leads back */
		else
			free(child);
	}
}

/* Points an existing name at a new inode, releasing the old one. */
static void builder_replace(struct builder *b, struct bdent *d,
			    struct bnode *ino)
{
	struct bnode *old = d->ino;

	d->ino = ino;
	ino->refs++;
	if (ino->type == LAYER_ENTRY_DIR)
		ino->parent = d->dir;
	builder_unref(b, old);
}

static void builder_remove(struct builder *b, struct bdent *d)
{
	struct bnode *ino = d->ino;

	builder_detach(b, d);
	free(d);
	builder_unref(b, ino);
}

/* Splits off the next component of *p.  Returns its length (0 at the
 * end) or -EBADMSG for an empty, "." or ".." component: the layer module
 * already refuses those, this keeps a hand-made index honest too. */
static int tree_next_component(const char **p, const char **ret_name)
{
	const char *s = *p, *slash;
	size_t len;

	if (*s == '\0')
		return 0;
	slash = strchr(s, '/');
	len = slash ? (size_t)(slash - s) : strlen(s);
	if (len == 0 || len > TREE_NAME_MAX ||
	    (s[0] == '.' && (len == 1 || (len == 2 && s[1] == '.'))))
		return -EBADMSG;
	if (slash && slash[1] == '\0')
		return -EBADMSG;
	*ret_name = s;
	*p = slash ? slash + 1 : s + len;
	return (int)len;
}

/* Finds the directory holding the last component of path, without
 * changing anything; NULL when a component is missing or not a
 * directory. */
static int builder_find(const struct builder *b, const char *path,
			struct bdent **ret)
{
	struct bnode *dir = b->root;
	struct bdent *d = NULL;
	const char *p = path, *name;
	int len;

	while ((len = tree_next_component(&p, &name)) > 0) {
		if (!dir) {
			*ret = NULL;
			return 0;
		}
		d = builder_lookup(b, dir, name, (size_t)len);
		if (!d) {
			*ret = NULL;
			return 0;
		}
		dir = d->ino->type == LAYER_ENTRY_DIR ? d->ino : NULL;
	}
	if (len < 0)
		return len;
	*ret = d;
	return 0;
}

/* Walks to the directory that should hold the last component of path,
 * creating missing directories and replacing non-directories on the way,
 * as overlayfs would see a later layer's tree. */
static int builder_parent(struct builder *b, const char *path,
			  struct bnode **ret_dir, const char **ret_name,
			  size_t *ret_len)
{
	struct bnode *dir = b->root;
	const char *p = path, *name, *next_name;
	int len, next;

	len = tree_next_component(&p, &name);
	if (len <= 0)
		return -EBADMSG;
	for (;;) {
		struct bdent *d;
		struct bnode *n;
		int r;

		next = tree_next_component(&p, &next_name);
		if (next < 0)
			return next;
		if (next == 0)
			break;
		d = builder_lookup(b, dir, name, (size_t)len);
		if (d && d->ino->type == LAYER_ENTRY_DIR) {
			dir = d->ino;
		} else {
			n = bnode_new(LAYER_ENTRY_DIR, NULL, 0);
			if (!n)
				return -ENOMEM;
			if (d) {
				builder_replace(b, d, n);
			} else {
				r = builder_link(b, dir, name, (size_t)len, n);
				if (r < 0) {
					free(n);
					return r;
				}
			}
			dir = n;
		}
		name = next_name;
		len = next;
	}
	*ret_dir = dir;
	*ret_name = name;
	*ret_len = (size_t)len;
	return 0;
}

static int builder_whiteout(struct builder *b, const struct layer_entry *e)
{
	struct bdent *d;
	int r;

	if (e->path[0] == '\0')
		return tree_fail(b->errbuf, b->errlen,
				 "tree: whiteout of the root");
	r = builder_find(b, e->path, &d);
	if (r < 0)
		return tree_fail(b->errbuf, b->errlen,
				 "tree: bad path \"%.200s\"", e->path);
	if (d)
		builder_remove(b, d);
	return 0;
}

static int builder_opaque(struct builder *b, const struct layer_entry *e)
{
	struct bnode *dir = b->root;
	struct bdent *d = NULL;
	int r;

	if (e->path[0] != '\0') {
		r = builder_find(b, e->path, &d);
		if (r < 0)
			return tree_fail(b->errbuf, b->errlen,
					 "tree: bad path \"%.200s\"", e->path);
		if (!d || d->ino->type != LAYER_ENTRY_DIR)
			return 0;
		dir = d->ino;
	}
	/* Markers are applied before the layer's own entries, so every child
	 * here came from a lower layer. */
	while (dir->children)
		builder_remove(b, dir->children);
	return 0;
}

static int builder_add(struct builder *b, const struct layer_entry *e,
		       uint16_t layer)
{
	struct bnode *dir, *ino = NULL, *target = NULL;
	struct bdent *d;
	const char *name;
	size_t len;
	int r;

	if (e->path[0] == '\0') {
		if (e->type != LAYER_ENTRY_DIR)
			return tree_fail(b->errbuf, b->errlen,
					 "tree: root entry is not a directory");
		b->root->e = e;
		return 0;
	}

	if (e->type == LAYER_ENTRY_HARDLINK) {
		r = e->link ? builder_find(b, e->link, &d) : -EBADMSG;
		if (r < 0 || !d || d->ino->type == LAYER_ENTRY_DIR)
			return tree_fail(b->errbuf, b->errlen,
					 "tree: hardlink \"%.200s\" to missing "
					 "or directory \"%.200s\"",
					 e->path, e->link ? e->link : "");
		target = d->ino;
		/* held so that replacing parents on the way cannot free it */
		target->refs++;
	}

	r = builder_parent(b, e->path, &dir, &name, &len);
	if (r < 0) {
		if (target)
			builder_unref(b, target);
		return r == -EBADMSG ? tree_fail(b->errbuf, b->errlen,
						 "tree: bad path \"%.200s\"",
						 e->path)
				     : r;
	}
	d = builder_lookup(b, dir, name, len);

	if (target) {
		ino = target;
	} else if (e->type == LAYER_ENTRY_DIR && d &&
		   d->ino->type == LAYER_ENTRY_DIR) {
		d->ino->e = e;
		return 0;
	} else {
		if (e->type > LAYER_ENTRY_SOCK)
			return tree_fail(b->errbuf, b->errlen,
					 "tree: bad entry type %u",
					 (unsigned)e->type);
		ino = bnode_new(e->type, e, layer);
		if (!ino)
			return -ENOMEM;
	}

	if (d) {
		if (d->ino != ino)
			builder_replace(b, d, ino);
	} else {
		r = builder_link(b, dir, name, len, ino);
		if (r < 0) {
			if (target)
				builder_unref(b, target);
			else
				free(ino);
			return r;
		}
	}
	if (target)
		builder_unref(b, target);
	return 0;
}

static int builder_apply(struct builder *b, const struct layer_index *li,
			 uint16_t layer)
{
	int r;

	for (size_t i = 0; i < li->n_entries; i++) {
		const struct layer_entry *e = &li->entries[i];

		if (!e->path)
			return tree_fail(b->errbuf, b->errlen,
					 "tree: entry without a path");
		if (e->type == LAYER_ENTRY_WHITEOUT)
			r = builder_whiteout(b, e);
		else if (e->type == LAYER_ENTRY_OPAQUE)
			r = builder_opaque(b, e);
		else
			continue;
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < li->n_entries; i++) {
		const struct layer_entry *e = &li->entries[i];

		if (e->type == LAYER_ENTRY_WHITEOUT ||
		    e->type == LAYER_ENTRY_OPAQUE)
			continue;
		r = builder_add(b, e, layer);
		if (r < 0)
			return r;
	}
	return 0;
}

/* ---- frozen tree ------------------------------------------------------ */

struct tree {
	struct tinode *inodes; /* breadth-first; [0] is the root */
	size_t n_inodes;
	const char **names; /* every directory's child_names, back to back */
	const struct tinode **kids;
	struct tree_xattr *xattrs;
	char *strings;
	uint64_t content_bytes;
};

struct child_pair {
	const char *name;
	const struct tinode *ino;
};

static int child_pair_cmp(const void *a, const void *b)
{
	return strcmp(((const struct child_pair *)a)->name,
		      ((const struct child_pair *)b)->name);
}

static uint32_t tree_type_bits(uint8_t type)
{
	switch (type) {
	case LAYER_ENTRY_DIR:
		return S_IFDIR;
	case LAYER_ENTRY_SYMLINK:
		return S_IFLNK;
	case LAYER_ENTRY_CHR:
		return S_IFCHR;
	case LAYER_ENTRY_BLK:
		return S_IFBLK;
	case LAYER_ENTRY_FIFO:
		return S_IFIFO;
	case LAYER_ENTRY_SOCK:
		return S_IFSOCK;
	default:
		return S_IFREG;
	}
}

static char *arena_put(char **cursor, const void *p, size_t n)
{
	char *s = *cursor;

	if (n > 0)
		memcpy(s, p, n);
	s[n] = '\0';
	*cursor = s + n + 1;
	return s;
}

static void tree_fill_inode(struct tree *t, const struct bnode *n,
			    struct tinode *ti, char **cursor,
			    struct tree_xattr **xcursor)
{
	const struct layer_entry *e = n->e;

	ti->tree = t;
	ti->mode = tree_type_bits(n->type) | (e ? e->mode & 07777 : 0755);
	ti->nlink = n->refs;
	if (!e)
		return;
	ti->uid = e->uid;
	ti->gid = e->gid;
	ti->mtime_sec = e->mtime_sec;
	ti->mtime_nsec = e->mtime_nsec;
	if (n->type == LAYER_ENTRY_REG) {
		ti->layer = n->layer;
		ti->size = e->size;
		ti->data_off = e->data_off;
		if (e->object)
			ti->object = arena_put(cursor, e->object,
					       strlen(e->object));
	}
	if (n->type == LAYER_ENTRY_CHR || n->type == LAYER_ENTRY_BLK)
		ti->rdev = e->rdev;
	if (n->type == LAYER_ENTRY_SYMLINK && e->link) {
		size_t len = strlen(e->link);

		ti->link = arena_put(cursor, e->link, len);
		ti->size = len;
	}
	if (e->n_xattrs > 0) {
		struct tree_xattr *x = *xcursor;

		for (uint32_t i = 0; i < e->n_xattrs; i++) {
			x[i].name = arena_put(cursor, e->xattrs[i].name,
					      strlen(e->xattrs[i].name));
			x[i].value = arena_put(cursor, e->xattrs[i].value,
					       e->xattrs[i].size);
			x[i].size = e->xattrs[i].size;
		}
		ti->xattrs = x;
		ti->n_xattrs = e->n_xattrs;
		*xcursor = x + e->n_xattrs;
	}
}

static size_t tree_inode_bytes(const struct bnode *n, size_t *n_xattrs)
{
	const struct layer_entry *e = n->e;
	size_t bytes = 0;

	if (!e)
		return 0;
	if (n->type == LAYER_ENTRY_SYMLINK && e->link)
		bytes += strlen(e->link) + 1;
	if (n->type == LAYER_ENTRY_REG && e->object)
		bytes += strlen(e->object) + 1;
	for (uint32_t i = 0; i < e->n_xattrs; i++)
		bytes += strlen(e->xattrs[i].name) + 1 + e->xattrs[i].size + 1;
	*n_xattrs += e->n_xattrs;
	return bytes;
}

static void tree_freep(struct tree **t)
{
	tree_free(*t);
}

/* Copies the surviving build nodes into a frozen tree.  Breadth-first
 * order numbers every inode once however many names it has, and puts each
 * directory's children next to each other in memory. */
static int tree_freeze(struct builder *b, struct tree **ret)
{
	_cleanup_(tree_freep) struct tree *t = NULL;
	_cleanup_free_ struct bnode **order = NULL;
	_cleanup_free_ struct child_pair *pairs = NULL;
	size_t n = 0, cap = 1024, n_dents = 0, bytes = 0, n_xattrs = 0;
	size_t max_children = 0, kid_pos = 0;
	struct tree_xattr *xcursor;
	char *cursor;

	order = malloc(cap * sizeof(*order));
	if (!order)
		return -ENOMEM;
	order[n++] = b->root;
	b->root->idx = 1;
	for (size_t i = 0; i < n; i++) {
		struct bnode *dir = order[i];

		bytes += tree_inode_bytes(dir, &n_xattrs);
		if (dir->type != LAYER_ENTRY_DIR)
			continue;
		max_children = MAX(max_children, dir->n_children);
		for (struct bdent *d = dir->children; d; d = d->next) {
			n_dents++;
			bytes += d->len + 1;
			if (d->ino->idx)
				continue;
			if (n == cap) {
				struct bnode **no =
					reallocarray(order, cap * 2,
						     sizeof(*order));

				if (!no)
					return -ENOMEM;
				order = no;
				cap *= 2;
			}
			d->ino->idx = (uint32_t)++n;
			order[n - 1] = d->ino;
		}
	}

	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->inodes = calloc(n, sizeof(*t->inodes));
	t->names = malloc(MAX(n_dents, 1) * sizeof(*t->names));
	t->kids = malloc(MAX(n_dents, 1) * sizeof(*t->kids));
	t->xattrs = malloc(MAX(n_xattrs, 1) * sizeof(*t->xattrs));
	t->strings = malloc(MAX(bytes, 1));
	pairs = malloc(MAX(max_children, 1) * sizeof(*pairs));
	if (!t->inodes || !t->names || !t->kids || !t->xattrs ||
	    !t->strings || !pairs)
		return -ENOMEM;
	t->n_inodes = n;
	cursor = t->strings;
	xcursor = t->xattrs;

	for (size_t i = 0; i < n; i++) {
		struct bnode *bn = order[i];
		struct tinode *ti = &t->inodes[i];
		uint32_t subdirs = 0, k = 0;

		tree_fill_inode(t, bn, ti, &cursor, &xcursor);
		if (bn->type == LAYER_ENTRY_REG)
			t->content_bytes += ti->size;
		if (bn->type != LAYER_ENTRY_DIR)
			continue;
		ti->parent = i == 0 ? ti : &t->inodes[bn->parent->idx - 1];
		for (struct bdent *d = bn->children; d; d = d->next, k++) {
			pairs[k].name = arena_put(&cursor, d->name, d->len);
			pairs[k].ino = &t->inodes[d->ino->idx - 1];
			if (d->ino->type == LAYER_ENTRY_DIR)
				subdirs++;
		}
		qsort(pairs, k, sizeof(*pairs), child_pair_cmp);
		for (uint32_t j = 0; j < k; j++) {
			t->names[kid_pos + j] = pairs[j].name;
			t->kids[kid_pos + j] = pairs[j].ino;
		}
		ti->n_children = k;
		ti->child_names = t->names + kid_pos;
		ti->children = t->kids + kid_pos;
		ti->nlink = 2 + subdirs;
		kid_pos += k;
	}
	*ret = TAKE_PTR(t);
	return 0;
}

static void builder_free(struct builder *b)
{
	if (b->root) {
		b->root->refs = 1;
		builder_unref(b, b->root);
	}
	free(b->buckets);
}

int tree_build(const struct layer_index *const *layers, size_t n,
	       struct tree **ret, char *errbuf, size_t errlen)
{
	struct builder b = {.errbuf = errbuf, .errlen = errlen};
	int r;

	if (errbuf && errlen > 0)
		errbuf[0] = '\0';
	if (n > (size_t)UINT16_MAX + 1)
		return tree_fail(errbuf, errlen, "tree: more than %u layers",
				 UINT16_MAX + 1);
	b.n_buckets = 1024;
	b.buckets = calloc(b.n_buckets, sizeof(*b.buckets));
	b.root = bnode_new(LAYER_ENTRY_DIR, NULL, 0);
	if (!b.buckets || !b.root) {
		r = -ENOMEM;
		goto out;
	}
	b.root->parent = b.root;

	for (size_t i = 0; i < n; i++) {
		r = builder_apply(&b, layers[i], (uint16_t)i);
		if (r < 0)
			goto out;
	}
	r = tree_freeze(&b, ret);
out:
	builder_free(&b);
	return r;
}

void tree_free(struct tree *t)
{
	if (!t)
		return;
	free(t->inodes);
	free(t->names);
	free(t->kids);
	free(t->xattrs);
	free(t->strings);
	free(t);
}

uint32_t tinode_index(const struct tinode *ino)
{
	return (uint32_t)(ino - ino->tree->inodes);
}

const struct tinode *tree_inode(const struct tree *t, uint32_t index)
{
	return index < t->n_inodes ? &t->inodes[index] : NULL;
}

const struct tinode *tree_root(const struct tree *t)
{
	return &t->inodes[0];
}

uint64_t tree_inode_count(const struct tree *t)
{
	return t->n_inodes;
}

uint64_t tree_content_bytes(const struct tree *t)
{
	return t->content_bytes;
}

const struct tinode *tinode_lookup(const struct tinode *dir, const char *name)
{
	size_t lo = 0, hi = dir->n_children;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name, dir->child_names[mid]);

		if (c == 0)
			return dir->children[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

const struct tinode *tree_resolve(const struct tree *t, const char *path)
{
	const struct tinode *cur = tree_root(t);
	char name[TREE_NAME_MAX + 1];

	while (*path) {
		const char *slash = strchr(path, '/');
		size_t len = slash ? (size_t)(slash - path) : strlen(path);

		if (len > TREE_NAME_MAX)
			return NULL;
		if (len == 0 || (len == 1 && path[0] == '.')) {
			/* "a//b", "./a" and a trailing "/" mean what a
			 * shell would make of them */
		} else if (len == 2 && path[0] == '.' && path[1] == '.') {
			if (!S_ISDIR(cur->mode))
				return NULL;
			cur = cur->parent;
		} else {
			if (!S_ISDIR(cur->mode))
				return NULL;
			memcpy(name, path, len);
			name[len] = '\0';
			cur = tinode_lookup(cur, name);
			if (!cur)
				return NULL;
		}
		path += len;
		if (*path == '/')
			path++;
	}
	return cur;
}

void tinode_fill_stat(const struct tinode *ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_mode = ino->mode;
	st->st_nlink = ino->nlink;
	st->st_uid = ino->uid;
	st->st_gid = ino->gid;
	st->st_size = S_ISDIR(ino->mode) ? 4096 : (off_t)ino->size;
	st->st_rdev = ino->rdev;
	st->st_blksize = 4096;
	st->st_blocks = (st->st_size + 511) / 512;
	st->st_mtim.tv_sec = ino->mtime_sec;
	st->st_mtim.tv_nsec = ino->mtime_nsec;
	st->st_atim = st->st_mtim;
	st->st_ctim = st->st_mtim;
}

const struct tree_xattr *tinode_getxattr(const struct tinode *ino,
					 const char *name)
{
	for (uint32_t i = 0; i < ino->n_xattrs; i++)
		if (strcmp(ino->xattrs[i].name, name) == 0)
			return &ino->xattrs[i];
	return NULL;
}

/* Building the merged tree of an image: the layers applied in order with
 * overlay rules (whiteouts, opaque directories, replacement, hardlinks) on
 * mutable nodes that only borrow strings from the layer indexes, then
 * handed to tree.c to freeze. */
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
#include "tree-private.h"

/* Build nodes come from blocks of many, with a free list, not one
 * allocation each: a million entries would otherwise pay a million
 * allocator headers at the peak of a load, and scatter what is freed. */
struct pool {
	size_t size;   /* of one item, at least a pointer */
	char **blocks; /* POOL_BLOCK items each */
	size_t n_blocks;
	size_t used;	 /* items handed out of the last block */
	void *free_list; /* items given back, each holding the next */
};

#define POOL_BLOCK 4096u

static void *pool_get(struct pool *p)
{
	void *x = p->free_list;

	if (x) {
		p->free_list = *(void **)x;
	} else {
		if (p->n_blocks == 0 || p->used == POOL_BLOCK) {
			char **nb = reallocarray(p->blocks, p->n_blocks + 1, sizeof(*nb));

			if (!nb)
				return NULL;
			p->blocks = nb;
			nb[p->n_blocks] = malloc(POOL_BLOCK * p->size);
			if (!nb[p->n_blocks])
				return NULL;
			p->n_blocks++;
			p->used = 0;
		}
		x = p->blocks[p->n_blocks - 1] + p->used++ * p->size;
	}
	return memset(x, 0, p->size);
}

static void pool_put(struct pool *p, void *x)
{
	*(void **)x = p->free_list;
	p->free_list = x;
}

static void pool_done(struct pool *p)
{
	for (size_t i = 0; i < p->n_blocks; i++)
		free(p->blocks[i]);
	free(p->blocks);
}

/* One hash table for every directory, keyed by (directory, name), keeps
 * build memory at two pointers per name. */
struct builder {
	struct pool nodes, dents;
	struct bnode *root;
	struct bdent **buckets;
	size_t n_buckets, n_dents;
	char *errbuf;
	size_t errlen;
};

/* Everything wrong with layer content is EBADMSG, with a reason. */
#define tree_fail(errbuf, errlen, ...) errbuf_fail(-EBADMSG, errbuf, errlen, __VA_ARGS__)

static uint32_t tree_hash(const struct bnode *dir, const char *name, size_t len)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325) ^ (uintptr_t)dir;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)name[i]) * UINT64_C(0x100000001b3);
	return (uint32_t)(h ^ (h >> 32));
}

static struct bnode *bnode_new(struct builder *b, uint8_t type, const struct layer_entry *e,
			       uint16_t layer)
{
	struct bnode *n = pool_get(&b->nodes);

	if (!n)
		return NULL;
	n->type = type;
	n->e = e;
	n->layer = layer;
	return n;
}

static struct bdent *builder_lookup(const struct builder *b, const struct bnode *dir,
				    const char *name, size_t len)
{
	uint32_t h = tree_hash(dir, name, len);

	for (struct bdent *d = b->buckets[h & (b->n_buckets - 1)]; d; d = d->hnext)
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
static int builder_link(struct builder *b, struct bnode *dir, const char *name, size_t len,
			struct bnode *ino)
{
	struct bdent *d;

	if (b->n_dents >= b->n_buckets && builder_grow(b) < 0)
		return -ENOMEM;
	d = pool_get(&b->dents);
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
		pool_put(&b->nodes, ino);
		return;
	}
	cur = ino;
	for (;;) {
		struct bdent *d = cur->children;
		struct bnode *child;

		if (!d) {
			struct bnode *up = cur->parent;
			bool done = cur == ino;

			pool_put(&b->nodes, cur);
			if (done)
				return;
			cur = up;
			continue;
		}
		builder_detach(b, d);
		child = d->ino;
		pool_put(&b->dents, d);
		if (--child->refs > 0)
			continue;
		if (child->type == LAYER_ENTRY_DIR)
			cur = child; /* its parent pointer leads back */
		else
			pool_put(&b->nodes, child);
	}
}

/* Points an existing name at a new inode, releasing the old one. */
static void builder_replace(struct builder *b, struct bdent *d, struct bnode *ino)
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
	pool_put(&b->dents, d);
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
static int builder_find(const struct builder *b, const char *path, struct bdent **ret)
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
static int builder_parent(struct builder *b, const char *path, struct bnode **ret_dir,
			  const char **ret_name, size_t *ret_len)
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
			n = bnode_new(b, LAYER_ENTRY_DIR, NULL, 0);
			if (!n)
				return -ENOMEM;
			if (d) {
				builder_replace(b, d, n);
			} else {
				r = builder_link(b, dir, name, (size_t)len, n);
				if (r < 0) {
					pool_put(&b->nodes, n);
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
		return tree_fail(b->errbuf, b->errlen, "tree: whiteout of the root");
	r = builder_find(b, e->path, &d);
	if (r < 0)
		return tree_fail(b->errbuf, b->errlen, "tree: bad path \"%.200s\"", e->path);
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
			return tree_fail(b->errbuf, b->errlen, "tree: bad path \"%.200s\"",
					 e->path);
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

static int builder_add(struct builder *b, const struct layer_entry *e, uint16_t layer)
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
		return r == -EBADMSG ? tree_fail(b->errbuf, b->errlen, "tree: bad path \"%.200s\"",
						 e->path)
				     : r;
	}
	d = builder_lookup(b, dir, name, len);

	if (target) {
		ino = target;
	} else if (e->type == LAYER_ENTRY_DIR && d && d->ino->type == LAYER_ENTRY_DIR) {
		d->ino->e = e;
		return 0;
	} else {
		if (e->type > LAYER_ENTRY_SOCK)
			return tree_fail(b->errbuf, b->errlen, "tree: bad entry type %u",
					 (unsigned)e->type);
		ino = bnode_new(b, e->type, e, layer);
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
				pool_put(&b->nodes, ino);
			return r;
		}
	}
	if (target)
		builder_unref(b, target);
	return 0;
}

static int builder_apply(struct builder *b, const struct layer_index *li, uint16_t layer)
{
	int r;

	for (size_t i = 0; i < li->n_entries; i++) {
		const struct layer_entry *e = &li->entries[i];

		if (!e->path)
			return tree_fail(b->errbuf, b->errlen, "tree: entry without a path");
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

		if (e->type == LAYER_ENTRY_WHITEOUT || e->type == LAYER_ENTRY_OPAQUE)
			continue;
		r = builder_add(b, e, layer);
		if (r < 0)
			return r;
	}
	return 0;
}

static void builder_free(struct builder *b)
{
	/* every node and name is in the pools */
	pool_done(&b->nodes);
	pool_done(&b->dents);
	free(b->buckets);
}

int tree_build(const struct layer_index *const *layers, size_t n, struct tree **ret, char *errbuf,
	       size_t errlen)
{
	struct builder b = {
		.nodes.size = sizeof(struct bnode),
		.dents.size = sizeof(struct bdent),
		.errbuf = errbuf,
		.errlen = errlen,
	};
	int r;

	if (errbuf && errlen > 0)
		errbuf[0] = '\0';
	if (n > (size_t)UINT16_MAX + 1)
		return tree_fail(errbuf, errlen, "tree: more than %u layers", UINT16_MAX + 1);
	b.n_buckets = 1024;
	b.buckets = calloc(b.n_buckets, sizeof(*b.buckets));
	b.root = bnode_new(&b, LAYER_ENTRY_DIR, NULL, 0);
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
	r = tree_freeze(b.root, ret);
out:
	builder_free(&b);
	return r;
}

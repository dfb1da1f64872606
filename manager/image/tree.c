/* The frozen tree of an image: freezing copies the build nodes that
 * survived (tree-build.c) into a few flat arrays (inodes in breadth-first
 * order, children sorted by name, one string arena), so a frozen tree
 * costs a fixed few bytes per name and is safe to share between threads;
 * then lookups, stat and extended attributes on it. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "macro.h"
#include "tree.h"
#include "tree-private.h"

struct tree {
	struct tinode *inodes; /* breadth-first; [0] is the root */
	size_t n_inodes;
	const char **names; /* every directory's child_names, back to back */
	const struct tinode **kids;
	struct tree_xattr *xattrs;
	char *strings;
	uint64_t content_bytes;
	/* mtimes of the inodes being changed by tree_update_times() while
	 * odd: readers read them again (a sequence lock, so that they stay
	 * free of locks) */
	atomic_uint times_seq;
};

/* tree_update_times() writers, one at a time. */
static pthread_mutex_t times_writer = PTHREAD_MUTEX_INITIALIZER;

struct child_pair {
	const char *name;
	const struct tinode *ino;
};

static int child_pair_cmp(const void *a, const void *b)
{
	return strcmp(((const struct child_pair *)a)->name, ((const struct child_pair *)b)->name);
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

static void tree_fill_inode(struct tree *t, const struct bnode *n, struct tinode *ti, char **cursor,
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
			ti->object = arena_put(cursor, e->object, strlen(e->object));
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
			x[i].name = arena_put(cursor, e->xattrs[i].name, strlen(e->xattrs[i].name));
			x[i].value = arena_put(cursor, e->xattrs[i].value, e->xattrs[i].size);
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
int tree_freeze(struct bnode *root, struct tree **ret)
{
	_cleanup_(tree_freep) struct tree *t = NULL;
	_cleanup_free_ struct bnode **order = NULL;
	_cleanup_free_ struct child_pair *pairs = NULL;
	size_t n = 0, cap = 1024, n_dents = 0, bytes = 0, n_xattrs = 0;
	size_t max_children = 0, kid_pos = 0;
	struct tree_xattr *xcursor;
	char *cursor;

	order = reallocarray(NULL, cap, sizeof(*order));
	if (!order)
		return -ENOMEM;
	order[n++] = root;
	root->idx = 1;
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
				struct bnode **no = reallocarray(order, cap * 2, sizeof(*order));

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
	if (!t->inodes || !t->names || !t->kids || !t->xattrs || !t->strings || !pairs)
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

void tinode_mtime(const struct tinode *ino, struct timespec *ret)
{
	const struct tree *t = ino->tree;
	unsigned seq;

	for (;;) {
		seq = atomic_load_explicit(&t->times_seq, memory_order_acquire);
		if (seq & 1)
			continue;
		ret->tv_sec = __atomic_load_n(&ino->mtime_sec, __ATOMIC_RELAXED);
		ret->tv_nsec = __atomic_load_n(&ino->mtime_nsec, __ATOMIC_RELAXED);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&t->times_seq, memory_order_relaxed) == seq)
			return;
	}
}

/* Whether a and b are the same inode of two builds: everything but the
 * times. */
static bool same_but_times(const struct tinode *a, const struct tinode *b)
{
	if (a->mode != b->mode || a->uid != b->uid || a->gid != b->gid || a->nlink != b->nlink ||
	    a->size != b->size || a->n_children != b->n_children || a->n_xattrs != b->n_xattrs ||
	    tinode_index(a->parent ? a->parent : a) != tinode_index(b->parent ? b->parent : b))
		return false;
	for (uint32_t i = 0; i < a->n_children; i++)
		if (strcmp(a->child_names[i], b->child_names[i]) != 0 ||
		    tinode_index(a->children[i]) != tinode_index(b->children[i]))
			return false;
	return true;
}

int tree_update_times(struct tree *t, const struct tree *from)
{
	int changed = 0;

	if (t->n_inodes != from->n_inodes)
		return -EINVAL;
	for (size_t i = 0; i < t->n_inodes; i++)
		if (!same_but_times(&t->inodes[i], &from->inodes[i]))
			return -EINVAL;
	pthread_mutex_lock(&times_writer);
	atomic_fetch_add_explicit(&t->times_seq, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	for (size_t i = 0; i < t->n_inodes; i++) {
		struct tinode *a = &t->inodes[i];
		const struct tinode *b = &from->inodes[i];

		if (a->mtime_sec == b->mtime_sec && a->mtime_nsec == b->mtime_nsec)
			continue;
		__atomic_store_n(&a->mtime_sec, b->mtime_sec, __ATOMIC_RELAXED);
		__atomic_store_n(&a->mtime_nsec, b->mtime_nsec, __ATOMIC_RELAXED);
		changed++;
	}
	atomic_fetch_add_explicit(&t->times_seq, 1, memory_order_release);
	pthread_mutex_unlock(&times_writer);
	return changed;
}

void tinode_fill_stat(const struct tinode *ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_mode = ino->mode;
	st->st_nlink = ino->nlink;
	st->st_uid = ino->uid;
	st->st_gid = ino->gid;
	st->st_size = S_ISDIR(ino->mode) ? 4096 : (off_t)ino->size;
	st->st_rdev = S_ISCHR(ino->mode) || S_ISBLK(ino->mode) ? ino->rdev : 0;
	st->st_blksize = 4096;
	st->st_blocks = (st->st_size + 511) / 512;
	tinode_mtime(ino, &st->st_mtim);
	st->st_atim = st->st_mtim;
	st->st_ctim = st->st_mtim;
}

const struct tree_xattr *tinode_getxattr(const struct tinode *ino, const char *name)
{
	for (uint32_t i = 0; i < ino->n_xattrs; i++)
		if (strcmp(ino->xattrs[i].name, name) == 0)
			return &ino->xattrs[i];
	return NULL;
}

_Static_assert(sizeof(void *) != 8 || sizeof(struct tinode) == 112,
	       "struct tinode grew: every inode of every image pays for it");

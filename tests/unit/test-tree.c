/* Unit tests for the merged tree: overlay rules, hardlinks and the frozen
 * lookup structures, on layer indexes written directly in C. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cmocka.h>

#include "tree.h"

/* Shorthands for table entries: {path, type, mode, ..., link}. */
#define REG(p, sz, off)                                                                   \
	{                                                                                 \
		.path = (char *)(p), .type = LAYER_ENTRY_REG, .mode = 0644, .size = (sz), \
		.data_off = (off)                                                         \
	}
#define DIR_(p, m)                                                        \
	{                                                                 \
		.path = (char *)(p), .type = LAYER_ENTRY_DIR, .mode = (m) \
	}
#define SYM(p, t)                                                               \
	{                                                                       \
		.path = (char *)(p), .type = LAYER_ENTRY_SYMLINK, .mode = 0777, \
		.link = (char *)(t)                                             \
	}
#define HL(p, t)                                                                       \
	{                                                                              \
		.path = (char *)(p), .type = LAYER_ENTRY_HARDLINK, .link = (char *)(t) \
	}
#define WH(p)                                                     \
	{                                                         \
		.path = (char *)(p), .type = LAYER_ENTRY_WHITEOUT \
	}
#define OPQ(p)                                                  \
	{                                                       \
		.path = (char *)(p), .type = LAYER_ENTRY_OPAQUE \
	}

#define LAYER(arr)                                                            \
	{                                                                     \
		.entries = (arr), .n_entries = sizeof(arr) / sizeof((arr)[0]) \
	}

static struct tree *build(const struct layer_index *const *layers, size_t n)
{
	struct tree *t = NULL;
	char err[256];
	int r = tree_build(layers, n, &t, err, sizeof(err));

	if (r != 0)
		fprintf(stderr, "tree_build: %d %s\n", r, err);
	assert_int_equal(r, 0);
	assert_non_null(t);
	return t;
}

static const struct tinode *must(const struct tree *t, const char *path)
{
	const struct tinode *ino = tree_resolve(t, path);

	if (!ino)
		fprintf(stderr, "missing %s\n", path);
	assert_non_null(ino);
	return ino;
}

static void test_later_layer_wins(void **state)
{
	struct layer_entry l0[] = { DIR_("etc", 0755), REG("etc/a", 10, 0), REG("etc/b", 20, 10) };
	struct layer_entry l1[] = { REG("etc/a", 5, 100), DIR_("etc", 0700) };
	struct layer_index i0 = LAYER(l0), i1 = LAYER(l1);
	const struct layer_index *layers[] = { &i0, &i1 };
	struct tree *t = build(layers, 2);
	const struct tinode *a = must(t, "etc/a"), *b = must(t, "etc/b");
	const struct tinode *etc = must(t, "etc");

	assert_int_equal(a->size, 5);
	assert_int_equal(a->data_off, 100);
	assert_int_equal(a->layer, 1);
	assert_int_equal(b->layer, 0);
	assert_int_equal(b->size, 20);
	/* a DIR entry over a directory updates metadata, keeps children */
	assert_int_equal(etc->mode, S_IFDIR | 0700);
	assert_int_equal(etc->n_children, 2);
	assert_int_equal(tree_content_bytes(t), 25);
	assert_int_equal(tree_inode_count(t), 4);
	tree_free(t);
}

static void test_whiteout_file_and_subtree(void **state)
{
	struct layer_entry l0[] = { REG("f", 1, 0), DIR_("d", 0755), DIR_("d/e", 0755),
				    REG("d/e/x", 1, 1), REG("keep", 1, 2) };
	struct layer_entry l1[] = { WH("f"), WH("d"), WH("nothere"), WH("keep/sub") };
	struct layer_index i0 = LAYER(l0), i1 = LAYER(l1);
	const struct layer_index *layers[] = { &i0, &i1 };
	struct tree *t = build(layers, 2);

	assert_null(tree_resolve(t, "f"));
	assert_null(tree_resolve(t, "d"));
	assert_null(tree_resolve(t, "d/e/x"));
	must(t, "keep");
	assert_int_equal(tree_root(t)->n_children, 1);
	assert_int_equal(tree_inode_count(t), 2);
	tree_free(t);
}

static void test_whiteout_only_hides_lower(void **state)
{
	/* the whiteout comes after the same-layer file: the file stays */
	struct layer_entry l0[] = { REG("a", 1, 0) };
	struct layer_entry l1[] = { REG("a", 7, 0), WH("a") };
	struct layer_index i0 = LAYER(l0), i1 = LAYER(l1);
	const struct layer_index *layers[] = { &i0, &i1 };
	struct tree *t = build(layers, 2);

	assert_int_equal(must(t, "a")->size, 7);
	tree_free(t);
}

static void test_opaque(void **state)
{
	struct layer_entry l0[] = { DIR_("d", 0755), REG("d/old", 1, 0), DIR_("d/sub", 0755),
				    REG("d/sub/x", 1, 1), REG("other", 1, 2) };
	/* the marker after the layer's own children: order must not matter */
	struct layer_entry l1[] = { DIR_("d", 0711), REG("d/new", 2, 0), OPQ("d"), OPQ("missing"),
				    OPQ("other") };
	struct layer_index i0 = LAYER(l0), i1 = LAYER(l1);
	const struct layer_index *layers[] = { &i0, &i1 };
	struct tree *t = build(layers, 2);
	const struct tinode *d = must(t, "d");

	assert_int_equal(d->n_children, 1);
	assert_string_equal(d->child_names[0], "new");
	assert_int_equal(d->mode, S_IFDIR | 0711);
	assert_int_equal(d->nlink, 2);
	assert_null(tree_resolve(t, "d/old"));
	assert_null(tree_resolve(t, "d/sub"));
	must(t, "other");
	tree_free(t);
}

static void test_opaque_root(void **state)
{
	struct layer_entry l0[] = { REG("a", 1, 0), DIR_("b", 0755) };
	struct layer_entry l1[] = { REG("c", 1, 0), OPQ("") };
	struct layer_index i0 = LAYER(l0), i1 = LAYER(l1);
	const struct layer_index *layers[] = { &i0, &i1 };
	struct tree *t = build(layers, 2);

	assert_int_equal(tree_root(t)->n_children, 1);
	must(t, "c");
	tree_free(t);
}

static void test_replace_types(void **state)
{
	struct layer_entry l0[] = { DIR_("d", 0755), REG("d/x", 1, 0), DIR_("d/y", 0755),
				    REG("f", 1, 1), REG("g", 1, 2) };
	struct layer_entry l1[] = {
		SYM("d", "elsewhere"),		       /* file replaces a directory */
		DIR_("f", 0750),		       /* directory replaces a file */
		REG("f/in", 3, 0), REG("g/h/i", 4, 3), /* parent file becomes a directory */
	};
	struct layer_index i0 = LAYER(l0), i1 = LAYER(l1);
	const struct layer_index *layers[] = { &i0, &i1 };
	struct tree *t = build(layers, 2);
	const struct tinode *d = must(t, "d"), *f = must(t, "f");
	const struct tinode *g = must(t, "g");

	assert_true(S_ISLNK(d->mode));
	assert_string_equal(d->link, "elsewhere");
	assert_int_equal(d->size, 9);
	assert_null(tree_resolve(t, "d/x"));
	assert_int_equal(f->mode, S_IFDIR | 0750);
	must(t, "f/in");
	assert_int_equal(g->mode, S_IFDIR | 0755);
	assert_int_equal(must(t, "g/h/i")->size, 4);
	assert_int_equal(tree_inode_count(t), 7);
	tree_free(t);
}

static void test_implicit_parents(void **state)
{
	struct layer_entry l0[] = { REG("a/b/c/file", 1, 0) };
	struct layer_entry l1[] = { DIR_("a/b", 0700), REG("a/b/c/two", 1, 0) };
	struct layer_index i0 = LAYER(l0), i1 = LAYER(l1);
	const struct layer_index *layers[] = { &i0, &i1 };
	struct tree *t = build(layers, 2);
	const struct tinode *a = must(t, "a"), *b = must(t, "a/b");
	const struct tinode *c = must(t, "a/b/c");
	struct stat st;

	assert_int_equal(a->mode, S_IFDIR | 0755);
	assert_int_equal(a->uid, 0);
	assert_int_equal(a->mtime_sec, 0);
	assert_int_equal(b->mode, S_IFDIR | 0700);
	/* an implicit parent does not reset an existing directory */
	assert_int_equal(c->n_children, 2);
	assert_ptr_equal(c->parent, b);
	assert_ptr_equal(b->parent, a);
	assert_ptr_equal(a->parent, tree_root(t));
	assert_ptr_equal(tree_root(t)->parent, tree_root(t));
	assert_ptr_equal(tree_resolve(t, "a/b/c/.."), b);
	tinode_fill_stat(a, &st);
	assert_int_equal(st.st_nlink, 3);
	assert_int_equal(st.st_size, 4096);
	tree_free(t);
}

static void test_root_entry(void **state)
{
	struct layer_entry l0[] = { { .path = (char *)"",
				      .type = LAYER_ENTRY_DIR,
				      .mode = 0700,
				      .uid = 5,
				      .mtime_sec = 42 },
				    DIR_("x", 0755) };
	struct layer_index i0 = LAYER(l0);
	const struct layer_index *layers[] = { &i0 };
	struct tree *t = build(layers, 1);
	const struct tinode *root = tree_root(t);

	assert_int_equal(root->mode, S_IFDIR | 0700);
	assert_int_equal(root->uid, 5);
	assert_int_equal(root->mtime_sec, 42);
	assert_int_equal(root->nlink, 3);
	assert_ptr_equal(tree_resolve(t, ""), root);
	tree_free(t);
}

static void test_hardlinks(void **state)
{
	struct layer_entry l0[] = { REG("bin/a", 100, 0), HL("bin/b", "bin/a"), HL("c", "bin/a") };
	struct layer_entry l1[] = { WH("c") };
	struct layer_entry l2[] = { REG("bin/a", 50, 0) };
	struct layer_index i0 = LAYER(l0), i1 = LAYER(l1), i2 = LAYER(l2);
	const struct layer_index *layers[] = { &i0, &i1, &i2 };
	struct tree *t;
	const struct tinode *a, *b;

	t = build(layers, 1);
	a = must(t, "bin/a");
	assert_ptr_equal(a, must(t, "bin/b"));
	assert_ptr_equal(a, must(t, "c"));
	assert_int_equal(a->nlink, 3);
	assert_int_equal(tree_inode_count(t), 3);
	assert_int_equal(tree_content_bytes(t), 100);
	tree_free(t);

	/* one name whited out above */
	t = build(layers, 2);
	a = must(t, "bin/a");
	assert_ptr_equal(a, must(t, "bin/b"));
	assert_int_equal(a->nlink, 2);
	tree_free(t);

	/* the target replaced: the other name keeps the old inode */
	t = build(layers, 3);
	a = must(t, "bin/a");
	b = must(t, "bin/b");
	assert_ptr_not_equal(a, b);
	assert_int_equal(a->nlink, 1);
	assert_int_equal(b->nlink, 1);
	assert_int_equal(a->size, 50);
	assert_int_equal(a->layer, 2);
	assert_int_equal(b->size, 100);
	assert_int_equal(b->layer, 0);
	assert_int_equal(tree_content_bytes(t), 150);
	tree_free(t);
}

static void test_hardlink_replaces_target_parent(void **state)
{
	/* "x/y" -> "x": the walk turns x into a directory, yet the link
	 * still reaches the file that was there */
	struct layer_entry l0[] = { REG("x", 3, 0), HL("x/y", "x"), HL("z", "z2"), REG("z2", 1, 3),
				    HL("z2", "z2") };
	struct layer_index i0 = LAYER(l0);
	const struct layer_index *layers[] = { &i0 };
	struct tree *t = NULL;
	char err[256];

	i0.n_entries = 2;
	t = build(layers, 1);
	assert_true(S_ISDIR(must(t, "x")->mode));
	assert_int_equal(must(t, "x/y")->size, 3);
	assert_int_equal(must(t, "x/y")->nlink, 1);
	tree_free(t);

	/* a link to itself changes nothing */
	i0.entries = l0 + 3;
	i0.n_entries = 2;
	t = build(layers, 1);
	assert_int_equal(must(t, "z2")->nlink, 1);
	tree_free(t);

	/* to a path that does not exist yet */
	i0.entries = l0 + 2;
	i0.n_entries = 2;
	assert_int_equal(tree_build(layers, 1, &t, err, sizeof(err)), -EBADMSG);
	assert_true(strstr(err, "hardlink") != NULL);
}

static void test_hardlink_errors(void **state)
{
	struct layer_entry to_dir[] = { DIR_("d", 0755), HL("l", "d") };
	struct layer_entry to_missing[] = { HL("l", "nope") };
	struct layer_entry to_root[] = { HL("l", "") };
	struct layer_entry bad_path[] = { REG("a/../b", 1, 0) };
	struct layer_entry root_file[] = { REG("", 1, 0) };
	struct layer_entry wh_root[] = { WH("") };
	struct {
		struct layer_entry *e;
		size_t n;
	} cases[] = {
		{ to_dir, 2 },	 { to_missing, 1 }, { to_root, 1 },
		{ bad_path, 1 }, { root_file, 1 },  { wh_root, 1 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct layer_index li = { .entries = cases[i].e, .n_entries = cases[i].n };
		const struct layer_index *layers[] = { &li };
		struct tree *t = NULL;
		char err[256] = "";

		assert_int_equal(tree_build(layers, 1, &t, err, sizeof(err)), -EBADMSG);
		assert_null(t);
		assert_true(err[0] != '\0');
	}
}

static void test_sorted_lookup_and_many(void **state)
{
	enum { N = 20000 };
	struct layer_entry *e = calloc(N + 1, sizeof(*e));
	char(*names)[32] = calloc(N, sizeof(*names));
	struct layer_index li = { .entries = e, .n_entries = N + 1 };
	const struct layer_index *layers[] = { &li };
	const struct tinode *d;
	struct tree *t;

	assert_non_null(e);
	assert_non_null(names);
	e[0] = (struct layer_entry)DIR_("big", 0755);
	for (int i = 0; i < N; i++) {
		/* reverse order so that sorting has work to do */
		snprintf(names[i], sizeof(names[i]), "big/f%05d", N - 1 - i);
		e[i + 1] = (struct layer_entry)REG(names[i], 1, (uint64_t)i);
	}
	t = build(layers, 1);
	d = must(t, "big");
	assert_int_equal(d->n_children, N);
	for (uint32_t i = 1; i < d->n_children; i++)
		assert_true(strcmp(d->child_names[i - 1], d->child_names[i]) < 0);
	assert_int_equal(tinode_lookup(d, "f12345")->data_off, N - 1 - 12345);
	assert_null(tinode_lookup(d, "f99999"));
	assert_null(tinode_lookup(d, ""));
	assert_int_equal(tree_inode_count(t), N + 2);
	tree_free(t);
	free(e);
	free(names);
}

static void test_metadata_and_xattrs(void **state)
{
	static const char cap[] = { 1, 0, 0, 2, 0 };
	struct layer_xattr xa[] = {
		{ .name = (char *)"user.foo", .value = (char *)"bar", .size = 3 },
		{ .name = (char *)"security.capability",
		  .value = (char *)cap,
		  .size = sizeof(cap) },
	};
	struct layer_entry l0[] = {
		{ .path = (char *)"f",
		  .type = LAYER_ENTRY_REG,
		  .mode = 04755,
		  .uid = 1000,
		  .gid = 100,
		  .mtime_sec = 1700000000,
		  .mtime_nsec = 123,
		  .size = 1000,
		  .xattrs = xa,
		  .n_xattrs = 2 },
		{ .path = (char *)"dev/null",
		  .type = LAYER_ENTRY_CHR,
		  .mode = 0666,
		  .rdev = makedev(1, 3) },
		{ .path = (char *)"dev/sda",
		  .type = LAYER_ENTRY_BLK,
		  .mode = 0660,
		  .rdev = makedev(8, 0) },
		{ .path = (char *)"p", .type = LAYER_ENTRY_FIFO, .mode = 0600 },
		{ .path = (char *)"s", .type = LAYER_ENTRY_SOCK, .mode = 0600 },
		{ .path = (char *)"tmp", .type = LAYER_ENTRY_DIR, .mode = 01777 },
	};
	struct layer_index i0 = LAYER(l0);
	const struct layer_index *layers[] = { &i0 };
	struct tree *t = build(layers, 1);
	const struct tinode *f = must(t, "f");
	const struct tree_xattr *x;
	struct stat st;

	tinode_fill_stat(f, &st);
	assert_int_equal(st.st_mode, S_IFREG | 04755);
	assert_int_equal(st.st_uid, 1000);
	assert_int_equal(st.st_gid, 100);
	assert_int_equal(st.st_size, 1000);
	assert_int_equal(st.st_blocks, 2);
	assert_int_equal(st.st_blksize, 4096);
	assert_int_equal(st.st_nlink, 1);
	assert_int_equal(st.st_mtim.tv_sec, 1700000000);
	assert_int_equal(st.st_mtim.tv_nsec, 123);
	assert_int_equal(st.st_ctim.tv_sec, 1700000000);

	x = tinode_getxattr(f, "user.foo");
	assert_non_null(x);
	assert_int_equal(x->size, 3);
	assert_memory_equal(x->value, "bar", 3);
	x = tinode_getxattr(f, "security.capability");
	assert_non_null(x);
	assert_int_equal(x->size, sizeof(cap));
	assert_memory_equal(x->value, cap, sizeof(cap));
	assert_null(tinode_getxattr(f, "user.nope"));

	tinode_fill_stat(must(t, "dev/null"), &st);
	assert_int_equal(st.st_mode, S_IFCHR | 0666);
	assert_int_equal(major(st.st_rdev), 1);
	assert_int_equal(minor(st.st_rdev), 3);
	tinode_fill_stat(must(t, "dev/sda"), &st);
	assert_true(S_ISBLK(st.st_mode));
	assert_int_equal(st.st_rdev, makedev(8, 0));
	assert_true(S_ISFIFO(must(t, "p")->mode));
	assert_true(S_ISSOCK(must(t, "s")->mode));
	assert_int_equal(must(t, "tmp")->mode, S_IFDIR | 01777);
	assert_int_equal(tree_root(t)->nlink, 4);
	tree_free(t);
}

static void test_resolve(void **state)
{
	struct layer_entry l0[] = { REG("usr/bin/env", 1, 0), SYM("bin", "usr/bin") };
	struct layer_index i0 = LAYER(l0);
	const struct layer_index *layers[] = { &i0 };
	struct tree *t = build(layers, 1);

	must(t, "usr/bin/env");
	assert_ptr_equal(tree_resolve(t, "usr//bin/env/"), must(t, "usr/bin/env"));
	/* symlinks are not followed */
	assert_true(S_ISLNK(must(t, "bin")->mode));
	assert_null(tree_resolve(t, "bin/env"));
	assert_null(tree_resolve(t, "usr/bin/env/x"));
	assert_null(tree_resolve(t, "nope"));
	tree_free(t);
}

static void test_empty(void **state)
{
	struct tree *t = NULL;
	struct stat st;

	assert_int_equal(tree_build(NULL, 0, &t, NULL, 0), 0);
	assert_int_equal(tree_inode_count(t), 1);
	tinode_fill_stat(tree_root(t), &st);
	assert_int_equal(st.st_mode, S_IFDIR | 0755);
	assert_int_equal(st.st_nlink, 2);
	tree_free(t);
	tree_free(NULL);
}

/* A second build of the same layers with other mtimes gives its times to
 * the first tree (the lazy layers' exact times); a build that differs in
 * anything else gives nothing. */
static void test_update_times(void **state)
{
	struct layer_entry l0[] = { DIR_("etc", 0755), REG("etc/a", 10, 0), SYM("etc/l", "a"),
				    HL("etc/h", "etc/a") };
	struct layer_entry l1[] = { REG("etc/b", 5, 100) };
	struct layer_index i0 = LAYER(l0), i1 = LAYER(l1);
	const struct layer_index *layers[] = { &i0, &i1 };
	struct tree *t, *exact, *other;
	struct timespec ts;
	struct stat st;

	(void)state;
	t = build(layers, 2);
	l0[1].mtime_sec = 1234567890;
	l0[1].mtime_nsec = 123456789;
	l0[0].mtime_nsec = 5;
	l1[0].mtime_sec = 7;
	exact = build(layers, 2);
	assert_int_equal(tree_update_times(t, exact), 3);
	tinode_mtime(must(t, "etc/a"), &ts);
	assert_int_equal(ts.tv_sec, 1234567890);
	assert_int_equal(ts.tv_nsec, 123456789);
	tinode_fill_stat(must(t, "etc/h"), &st);
	assert_int_equal(st.st_mtim.tv_nsec, 123456789);
	tinode_fill_stat(must(t, "etc"), &st);
	assert_int_equal(st.st_mtim.tv_nsec, 5);
	tinode_fill_stat(must(t, "etc/b"), &st);
	assert_int_equal(st.st_mtim.tv_sec, 7);
	assert_int_equal(tree_update_times(t, exact), 0);
	/* a size, a mode, a name: not the same tree */
	l1[0].size = 6;
	other = build(layers, 2);
	assert_int_equal(tree_update_times(t, other), -EINVAL);
	tree_free(other);
	l1[0].size = 5;
	l0[2].link = (char *)"b";
	l1[0].path = (char *)"etc/c";
	l1[0].mtime_sec = 8;
	other = build(layers, 2);
	assert_int_equal(tree_update_times(t, other), -EINVAL);
	tinode_fill_stat(must(t, "etc/b"), &st);
	assert_int_equal(st.st_mtim.tv_sec, 7);
	tree_free(other);
	tree_free(exact);
	tree_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_later_layer_wins),
		cmocka_unit_test(test_whiteout_file_and_subtree),
		cmocka_unit_test(test_whiteout_only_hides_lower),
		cmocka_unit_test(test_opaque),
		cmocka_unit_test(test_opaque_root),
		cmocka_unit_test(test_replace_types),
		cmocka_unit_test(test_implicit_parents),
		cmocka_unit_test(test_root_entry),
		cmocka_unit_test(test_hardlinks),
		cmocka_unit_test(test_hardlink_replaces_target_parent),
		cmocka_unit_test(test_hardlink_errors),
		cmocka_unit_test(test_sorted_lookup_and_many),
		cmocka_unit_test(test_metadata_and_xattrs),
		cmocka_unit_test(test_resolve),
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_update_times),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

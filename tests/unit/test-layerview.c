/* Unit tests for the tree of a single layer in overlayfs's format (the
 * layer store's diff/): whiteouts and opaque markers become what
 * overlayfs reads in a lower directory; nothing else changes. */
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

#include "layer.h"
#include "layerview.h"
#include "tree.h"

#define ENTRY(p, t, m)                                        \
	{                                                     \
		.path = (char *)(p), .type = (t), .mode = (m) \
	}

static struct tree *overlay(struct layer_entry *e, size_t n)
{
	struct layer_index li = { .entries = e, .n_entries = n };
	struct tree *t = NULL;
	char err[256];

	assert_int_equal(layer_overlay_tree(&li, &t, err, sizeof(err)), 0);
	assert_non_null(t);
	return t;
}

static bool is_opaque(const struct tinode *ino)
{
	const struct tree_xattr *x = tinode_getxattr(ino, LAYER_VIEW_OPAQUE_XATTR);

	return x && x->size == 1 && !memcmp(x->value, "y", 1);
}

static void test_whiteouts_become_devices(void **state)
{
	struct layer_entry e[] = {
		ENTRY("del", LAYER_ENTRY_DIR, 0755),
		{ .path = (char *)"del/file",
		  .type = LAYER_ENTRY_WHITEOUT,
		  .mode = 0644,
		  .uid = 7,
		  .gid = 8 },
		ENTRY("gone", LAYER_ENTRY_WHITEOUT, 0644),
		ENTRY("kept", LAYER_ENTRY_REG, 0640),
	};
	struct tree *t = overlay(e, 4);
	const struct tinode *w = tree_resolve(t, "del/file"), *g = tree_resolve(t, "gone");

	assert_non_null(w);
	assert_non_null(g);
	assert_int_equal(w->mode, S_IFCHR);
	assert_int_equal(w->rdev, makedev(0, 0));
	assert_int_equal(w->uid, 0);
	assert_int_equal(w->gid, 0);
	assert_int_equal(g->mode, S_IFCHR);
	assert_int_equal(tree_resolve(t, "kept")->mode, S_IFREG | 0640);
	assert_null(tree_resolve(t, "del/.wh.file"));
	assert_false(is_opaque(tree_resolve(t, "del")));
	tree_free(t);
}

static void test_opaque_marks_the_layer_directory(void **state)
{
	struct layer_xattr own[] = {
		{ .name = (char *)"user.keep", .value = (void *)"1", .size = 1 },
		{ .name = (char *)LAYER_VIEW_OPAQUE_XATTR, .value = (void *)"n", .size = 1 }
	};
	struct layer_entry e[] = {
		{ .path = (char *)"opq",
		  .type = LAYER_ENTRY_DIR,
		  .mode = 0700,
		  .uid = 5,
		  .xattrs = own,
		  .n_xattrs = 2 },
		ENTRY("opq", LAYER_ENTRY_OPAQUE, 0644),
		ENTRY("opq/upper", LAYER_ENTRY_REG, 0644),
	};
	struct tree *t = overlay(e, 3);
	const struct tinode *d = tree_resolve(t, "opq");

	assert_non_null(d);
	assert_int_equal(d->mode, S_IFDIR | 0700);
	assert_int_equal(d->uid, 5);
	assert_true(is_opaque(d));
	/* the marker's value wins over a stale one from the tar; the
	 * directory's other xattrs stay */
	assert_int_equal(d->n_xattrs, 2);
	assert_non_null(tinode_getxattr(d, "user.keep"));
	assert_int_equal(d->n_children, 1);
	assert_string_equal(d->child_names[0], "upper");
	tree_free(t);
}

static void test_opaque_without_directory_entry(void **state)
{
	struct layer_entry e[] = {
		ENTRY("a/b", LAYER_ENTRY_OPAQUE, 0644),
		ENTRY("a/b/c", LAYER_ENTRY_REG, 0644),
		ENTRY("", LAYER_ENTRY_OPAQUE, 0644),
	};
	struct tree *t = overlay(e, 3);
	const struct tinode *b = tree_resolve(t, "a/b");

	assert_non_null(b);
	assert_int_equal(b->mode, S_IFDIR | 0755);
	assert_true(is_opaque(b));
	assert_false(is_opaque(tree_resolve(t, "a")));
	assert_true(is_opaque(tree_root(t)));
	assert_non_null(tree_resolve(t, "a/b/c"));
	tree_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_whiteouts_become_devices),
		cmocka_unit_test(test_opaque_marks_the_layer_directory),
		cmocka_unit_test(test_opaque_without_directory_entry),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

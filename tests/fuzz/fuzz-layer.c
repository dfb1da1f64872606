/* Fuzz target for layer merging: arbitrary bytes as an uncompressed layer
 * tar go through layer_unpack into a pack in memory, the index through
 * its file format and back, and then through tree_build, alone and
 * stacked on itself (so whiteouts and opaque markers meet real entries).
 * Whatever is accepted must keep the promises the filesystem relies on:
 * normalised names, file data inside the pack, an index that reads back
 * as it was written, a tree of real names in sorted order. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "layer.h"
#include "tree.h"

static bool name_ok(const char *s, size_t len)
{
	if (len == 0 || len > 255 || memchr(s, '/', len) || memchr(s, '\0', len))
		return false;
	return !(s[0] == '.' && (len == 1 || (len == 2 && s[1] == '.')));
}

static void check_path(const char *p)
{
	FUZZ_CHECK(p);
	if (*p == '\0')
		return;
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);

		FUZZ_CHECK(name_ok(p, len));
		if (!slash)
			return;
		p = slash + 1;
	}
}

static bool same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void check_index(const struct layer_index *li)
{
	for (size_t i = 0; i < li->n_entries; i++) {
		const struct layer_entry *e = &li->entries[i];

		check_path(e->path);
		FUZZ_CHECK(e->type <= LAYER_ENTRY_OPAQUE);
		FUZZ_CHECK(e->mode <= 07777);
		if (e->type == LAYER_ENTRY_REG)
			FUZZ_CHECK(e->data_off <= li->data_size &&
				   e->size <= li->data_size - e->data_off);
		if (e->type == LAYER_ENTRY_HARDLINK) {
			FUZZ_CHECK(e->link && e->link[0]);
			check_path(e->link);
		}
		if (e->type == LAYER_ENTRY_SYMLINK)
			FUZZ_CHECK(e->link);
		if (e->path[0] == '\0')
			FUZZ_CHECK(e->type == LAYER_ENTRY_DIR || e->type == LAYER_ENTRY_OPAQUE);
	}
}

static void check_same_index(const struct layer_index *a, const struct layer_index *b)
{
	FUZZ_CHECK(a->n_entries == b->n_entries);
	FUZZ_CHECK(a->data_size == b->data_size);
	for (size_t i = 0; i < a->n_entries; i++) {
		const struct layer_entry *x = &a->entries[i], *y = &b->entries[i];

		FUZZ_CHECK(strcmp(x->path, y->path) == 0);
		FUZZ_CHECK(same_str(x->link, y->link));
		FUZZ_CHECK(x->type == y->type && x->mode == y->mode && x->uid == y->uid &&
			   x->gid == y->gid && x->mtime_sec == y->mtime_sec &&
			   x->mtime_nsec == y->mtime_nsec && x->size == y->size &&
			   x->data_off == y->data_off && x->rdev == y->rdev &&
			   x->n_xattrs == y->n_xattrs);
		for (uint32_t j = 0; j < x->n_xattrs; j++) {
			FUZZ_CHECK(strcmp(x->xattrs[j].name, y->xattrs[j].name) == 0);
			FUZZ_CHECK(x->xattrs[j].size == y->xattrs[j].size);
			FUZZ_CHECK(memcmp(x->xattrs[j].value, y->xattrs[j].value,
					  x->xattrs[j].size) == 0);
		}
	}
}

static void check_dir(const struct tinode *dir, uint64_t data_size, unsigned depth)
{
	FUZZ_CHECK(S_ISDIR(dir->mode));
	FUZZ_CHECK(depth < 4096);
	for (uint32_t i = 0; i < dir->n_children; i++) {
		const struct tinode *c = dir->children[i];
		const char *name = dir->child_names[i];

		FUZZ_CHECK(name_ok(name, strlen(name)));
		if (i > 0)
			FUZZ_CHECK(strcmp(dir->child_names[i - 1], name) < 0);
		FUZZ_CHECK(tinode_lookup(dir, name) == c);
		if (S_ISREG(c->mode))
			FUZZ_CHECK(c->data_off <= data_size && c->size <= data_size - c->data_off);
		if (S_ISLNK(c->mode))
			FUZZ_CHECK(c->link && strlen(c->link) == c->size);
		if (S_ISDIR(c->mode)) {
			FUZZ_CHECK(c->parent == dir);
			check_dir(c, data_size, depth + 1);
		}
	}
}

static void check_tree(const struct layer_index *const *layers, size_t n, uint64_t data_size)
{
	struct tree *t = NULL;
	char err[512];
	int r = tree_build(layers, n, &t, err, sizeof(err));

	if (r < 0) {
		FUZZ_CHECK(r == -EBADMSG || r == -ENOMEM);
		return;
	}
	FUZZ_CHECK(tree_root(t)->parent == tree_root(t));
	check_dir(tree_root(t), data_size, 0);
	tree_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* small limits keep one input cheap; the limit checks run too */
	const struct layer_limits lim = {
		.max_entries = 20000,
		.max_expanded_bytes = 64u << 20,
	};
	struct layer_index *li = NULL, *back = NULL;
	int in = -1, pack = -1, idx = -1;
	char err[512];
	int r;

	in = memfd_create("fuzz-tar", MFD_CLOEXEC);
	pack = memfd_create("fuzz-pack", MFD_CLOEXEC);
	idx = memfd_create("fuzz-index", MFD_CLOEXEC);
	FUZZ_CHECK(in >= 0 && pack >= 0 && idx >= 0);
	FUZZ_CHECK(write(in, data, size) == (ssize_t)size);
	FUZZ_CHECK(lseek(in, 0, SEEK_SET) == 0);

	r = layer_unpack(in, LAYER_UNCOMPRESSED, pack, NULL, &lim, &li, err, sizeof(err));
	if (r < 0) {
		FUZZ_CHECK(r == -EBADMSG || r == -ENOMEM);
		goto out;
	}
	check_index(li);
	{
		struct stat st;

		FUZZ_CHECK(fstat(pack, &st) == 0);
		FUZZ_CHECK((uint64_t)st.st_size == li->data_size);
	}

	FUZZ_CHECK(layer_index_write(li, idx) == 0);
	FUZZ_CHECK(lseek(idx, 0, SEEK_SET) == 0);
	r = layer_index_read(idx, &back);
	FUZZ_CHECK(r == 0);
	check_same_index(li, back);

	{
		const struct layer_index *one[] = { li };
		const struct layer_index *two[] = { li, back };

		check_tree(one, 1, li->data_size);
		check_tree(two, 2, li->data_size);
	}
out:
	layer_index_free(li);
	layer_index_free(back);
	close(in);
	close(pack);
	close(idx);
	return 0;
}

/* The pack of a lazy layer.  A full unpack appends the contents of the
 * small files to one pack (layer.h) rather than making a file of each;
 * a lazy layer does the same with the files of its table that are under
 * CACHE_OBJECT_MIN_SIZE bytes and whose chunks each have a digest (each
 * chunk is checked as it comes; the file's own digest names an object,
 * which a packed file never becomes).  Each has, in the blob's order, a
 * place in "pack" after the ones before it, and a slot per chunk in
 * "pack.map", whose byte is '1' once the chunk's bytes are on stable
 * storage (written after them, as a chunk map is).  Making a file, its map, its
 * rename and its entry in the content store cost more than its bytes: on
 * a layer of many small files, most of its completion.  Once the layer is
 * complete, its index names their places in the pack instead of their
 * objects (lazy_pack_index()), and the layer is laid out as a full pull's.
 * A small file the content store gave the layer at publishing (an object
 * of its own already) stays one.  Layers published before packs (their
 * "lazy" file does not say "packs") keep an object per file. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include "cache.h"
#include "fileio.h"
#include "strmap.h"
#include "layer.h"
#include "lazy-private.h"
#include "macro.h"

/* Whether the table's file i goes into the pack. */
static bool packable(const struct toc *toc, size_t i)
{
	const struct toc_file *f = &toc->files[i];
	size_t n;
	const struct toc_chunk *c = toc_entry_chunks(toc, i, &n);

	if (f->size == 0 || f->size >= CACHE_OBJECT_MIN_SIZE || n == 0)
		return false;
	for (size_t k = 0; k < n; k++)
		if (strncmp(c[k].digest, "sha256:", 7) != 0)
			return false;
	return true;
}

struct by_blob {
	uint64_t offset;
	size_t i;
};

static int cmp_by_blob(const void *x, const void *y)
{
	const struct by_blob *a = x, *b = y;

	if (a->offset != b->offset)
		return a->offset < b->offset ? -1 : 1;
	return a->i < b->i ? -1 : a->i > b->i;
}

int lazy_objects_held(int dirfd, struct strmap **ret)
{
	struct strmap *m = strmap_new();
	struct dirent *de;
	DIR *d;
	int r = 0;

	if (!m)
		return -ENOMEM;
	if (dir_stream(dirfd, &d) < 0) {
		strmap_free(m);
		return -ENOMEM;
	}
	while (r == 0 && (de = readdir(d)))
		if (!strncmp(de->d_name, "o.", 2))
			r = strmap_put(m, de->d_name + 2, (void *)1);
	closedir(d);
	if (r < 0) {
		strmap_free(m);
		return r;
	}
	*ret = m;
	return 0;
}

int lazy_pack_plan(struct lazy_layer *l)
{
	const struct toc *toc = l->toc;
	_cleanup_free_ struct by_blob *order = NULL;
	struct strmap *held = NULL;
	size_t n = 0;
	uint64_t at = 0;
	size_t slot = 0;

	if (!l->src.packs || toc->n_files == 0)
		return 0;
	if (lazy_objects_held(l->dirfd, &held) < 0)
		return -ENOMEM;
	l->slot_of = malloc(toc->n_files * sizeof(*l->slot_of));
	l->pack_off_of = calloc(toc->n_files, sizeof(*l->pack_off_of));
	order = malloc(toc->n_files * sizeof(*order));
	if (!l->slot_of || !l->pack_off_of || !order) {
		strmap_free(held);
		return -ENOMEM;
	}
	for (size_t i = 0; i < toc->n_files; i++) {
		size_t k;

		l->slot_of[i] = SIZE_MAX;
		if (packable(toc, i) && !strmap_get(held, toc->files[i].object))
			order[n++] =
				(struct by_blob){ toc_entry_chunks(toc, i, &k)[0].blob_offset, i };
	}
	strmap_free(held);
	/* in the blob's order, as a full unpack lays them out */
	qsort(order, n, sizeof(*order), cmp_by_blob);
	for (size_t j = 0; j < n; j++) {
		size_t k;

		(void)toc_entry_chunks(toc, order[j].i, &k);
		l->slot_of[order[j].i] = slot;
		l->pack_off_of[order[j].i] = at;
		at += toc->files[order[j].i].size;
		slot += k;
	}
	l->n_packed = n;
	l->pack_size = at;
	return 0;
}

size_t lazy_pack_slot(const struct lazy_layer *l, size_t i)
{
	return l->slot_of ? l->slot_of[i] : SIZE_MAX;
}

int lazy_pack_open_locked(struct lazy_layer *l)
{
	struct stat st;
	int fd, mapfd, r;

	if (l->pack_fd >= 0)
		return 0;
	fd = openat(l->dirfd, "pack", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return negative_errno();
	mapfd = openat(l->dirfd, "pack.map", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	r = mapfd < 0 || fstat(fd, &st) < 0 ? negative_errno() : 0;
	/* holes where the files are missing */
	if (r == 0 && (uint64_t)st.st_size < l->pack_size && ftruncate(fd, (off_t)l->pack_size) < 0)
		r = negative_errno();
	/* a map byte never outlives the names (each file's bytes are
	 * flushed before its byte) */
	if (r == 0)
		r = flush_dir(l->dirfd);
	if (r < 0) {
		close(fd);
		if (mapfd >= 0)
			close(mapfd);
		return r;
	}
	l->pack_fd = fd;
	l->pack_mapfd = mapfd;
	return 0;
}

size_t lazy_pack_marked(struct lazy_layer *l, size_t slot, size_t n, uint8_t *state)
{
	_cleanup_close_ int own = -1;
	char map[256];
	size_t marked = 0;
	int fd;

	pthread_mutex_lock(&l->lock);
	fd = l->pack_mapfd;
	pthread_mutex_unlock(&l->lock);
	/* (the descriptor stays until the layer is freed) */
	if (fd < 0)
		fd = own = openat(l->dirfd, "pack.map", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	for (size_t k = 0; fd >= 0 && k < n;) {
		ssize_t got = pread(fd, map, MIN(sizeof(map), n - k), (off_t)(slot + k));

		if (got <= 0)
			break;
		for (ssize_t j = 0; j < got; j++, k++) {
			if (map[j] != '1')
				continue;
			marked++;
			if (state)
				state[k] = CHUNK_PRESENT;
		}
	}
	return marked;
}

int lazy_pack_mark(struct lazy_layer *l, size_t slot, size_t n)
{
	char ones[256];

	memset(ones, '1', sizeof(ones));
	for (size_t k = 0; k < n;) {
		size_t len = MIN(sizeof(ones), n - k);

		if (pwrite(l->pack_mapfd, ones, len, (off_t)(slot + k)) != (ssize_t)len)
			return errno == ENOSPC ? -ENOSPC : -EIO;
		k += len;
	}
	return 0;
}

int lazy_pack_index(struct lazy_layer *l, struct layer_index *li, size_t *ret_changed)
{
	size_t changed = 0;

	*ret_changed = 0;
	if (!l->slot_of)
		return 0;
	for (size_t i = 0; i < li->n_entries; i++) {
		struct layer_entry *e = &li->entries[i];
		ssize_t k;

		if (e->type != LAYER_ENTRY_REG || !e->object)
			continue;
		k = toc_find_file(l->toc, e->object);
		if (k < 0 || l->slot_of[k] == SIZE_MAX)
			continue;
		free(e->object);
		e->object = NULL;
		e->data_off = l->pack_off_of[k];
		changed++;
	}
	if (changed)
		li->data_size = l->pack_size;
	*ret_changed = changed;
	return 0;
}

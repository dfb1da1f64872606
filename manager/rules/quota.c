/* Cache bytes per user (quota.h): the charge of a user's images and the
 * choice of what goes, for a pull over quota and for GC under pressure. */
#include "quota.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "strmap.h"

static void add_blobs(struct strmap *seen, const struct quota_image *img, uint64_t *bytes, int *err)
{
	for (size_t i = 0; i < img->n_blobs && !*err; i++) {
		const struct quota_blob *b = &img->blobs[i];

		if (strmap_get(seen, b->digest))
			continue;
		if (strmap_put(seen, b->digest, (void *)1) < 0)
			*err = -ENOMEM;
		else
			*bytes += b->size;
	}
}

int quota_charge(const struct quota_image *imgs, size_t n, uid_t uid,
		 const struct quota_image *extra, uint64_t *ret_bytes)
{
	struct strmap *seen;
	uint64_t bytes = 0;
	int err = 0;

	if (uid == 0) {
		*ret_bytes = 0;
		return 0;
	}
	seen = strmap_new();
	if (!seen)
		return -ENOMEM;
	for (size_t i = 0; i < n && !err; i++)
		if (imgs[i].owner == uid && !imgs[i].victim)
			add_blobs(seen, &imgs[i], &bytes, &err);
	if (extra && extra->owner == uid && !err)
		add_blobs(seen, extra, &bytes, &err);
	strmap_free(seen);
	if (err)
		return err;
	*ret_bytes = bytes;
	return 0;
}

static int by_age(const void *a, const void *b)
{
	const struct quota_image *x = *(const struct quota_image *const *)a;
	const struct quota_image *y = *(const struct quota_image *const *)b;

	if (x->last_used_ms != y->last_used_ms)
		return x->last_used_ms < y->last_used_ms ? -1 : 1;
	return strcmp(x->reference, y->reference);
}

int quota_make_room(struct quota_image *imgs, size_t n, uid_t uid, uint64_t quota,
		    const struct quota_image *extra, uint64_t *ret_bytes)
{
	struct quota_image **mine;
	size_t n_mine = 0, marked = 0;
	uint64_t bytes;
	int r;

	r = quota_charge(imgs, n, uid, extra, &bytes);
	if (r < 0 || bytes <= quota || uid == 0) {
		if (r == 0)
			*ret_bytes = bytes;
		return r;
	}
	mine = calloc(n ? n : 1, sizeof(*mine));
	if (!mine)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		if (imgs[i].owner == uid && !imgs[i].keep && !imgs[i].victim)
			mine[n_mine++] = &imgs[i];
	qsort(mine, n_mine, sizeof(*mine), by_age);
	/* One at a time: a blob shared by two of the user's images is freed
	 * only with the second. */
	for (; marked < n_mine && bytes > quota && r == 0; marked++) {
		mine[marked]->victim = true;
		r = quota_charge(imgs, n, uid, extra, &bytes);
	}
	if (r == 0 && bytes > quota) {
		r = -EDQUOT;
		/* every image the user may lose is marked: bytes is what
		 * it cannot let go of, the new image included */
		for (size_t i = 0; i < marked; i++)
			mine[i]->victim = false;
	}
	if (r < 0 && r != -EDQUOT)
		for (size_t i = 0; i < marked; i++)
			mine[i]->victim = false;
	free(mine);
	if (r == 0 || r == -EDQUOT)
		*ret_bytes = bytes;
	return r;
}

struct ordered {
	struct quota_image img;
	bool over;
};

static int by_pressure(const void *a, const void *b)
{
	const struct ordered *x = a, *y = b;

	if (x->over != y->over)
		return x->over ? -1 : 1;
	if (x->img.last_used_ms != y->img.last_used_ms)
		return x->img.last_used_ms < y->img.last_used_ms ? -1 : 1;
	return strcmp(x->img.reference, y->img.reference);
}

int quota_gc_order(struct quota_image *imgs, size_t n, uint64_t quota)
{
	struct ordered *o = calloc(n ? n : 1, sizeof(*o));
	int r = 0;

	if (!o)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		o[i].img = imgs[i];
	for (size_t i = 0; i < n && r == 0; i++) {
		uint64_t bytes;
		bool seen = false;

		if (imgs[i].owner == 0)
			continue;
		/* one charge per user */
		for (size_t j = 0; j < i && !seen; j++)
			seen = imgs[j].owner == imgs[i].owner;
		if (seen)
			continue;
		r = quota_charge(imgs, n, imgs[i].owner, NULL, &bytes);
		for (size_t j = i; j < n && r == 0; j++)
			if (imgs[j].owner == imgs[i].owner)
				o[j].over = bytes > quota;
	}
	if (r == 0) {
		qsort(o, n, sizeof(*o), by_pressure);
		for (size_t i = 0; i < n; i++)
			imgs[i] = o[i].img;
	}
	free(o);
	return r;
}

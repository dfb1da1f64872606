/* The layer index file: the entries of an unpacked layer in a small
 * checksummed binary form, read back with every field checked again. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "digest.h"
#include "fileio.h"
#include "layer-private.h"
#include "macro.h"

/* ---- index file -------------------------------------------------------
 *
 * All integers little-endian.
 *   "PFSLIDX1" u32 version u32 flags(0) u64 n_entries u64 data_size
 *   per entry: u8 type, u32 mode, u32 uid, u32 gid, i64 mtime_sec,
 *     u32 mtime_nsec, u64 size, u64 data_off, u64 rdev,
 *     str path, str link, str object (version 2 only),
 *     u32 n_xattrs, { str name, bytes value }*
 *   u32 crc32 of everything before it
 * str/bytes: u32 length then the bytes; a str of length 0xffffffff is
 * NULL.  Strings never contain NUL. */

#define LIDX_MAGIC "PFSLIDX1"
/* Version 1 (before objects) is still read: all its files are in the
 * pack. */
#define LIDX_VERSION 2u
#define LIDX_NULL_STR UINT32_MAX
#define LIDX_HEADER_SIZE (8 + 4 + 4 + 8 + 8)
/* Smallest possible entry: the type byte, four u32 (mode, uid, gid,
 * mtime_nsec), four u64 (mtime_sec, size, data_off, rdev), an empty path,
 * a NULL link and no xattrs (three u32).  Bounds the entry count before
 * anything is allocated, so it must never be more than the real size. */
#define LIDX_MIN_ENTRY (1 + 4 * 4 + 8 * 4 + 4 + 4 + 4)
#define LIDX_MIN_XATTR (4 + 1 + 4)
/* The index of a layer at the entry limit stays well below this. */
#define LIDX_MAX_FILE (UINT64_C(1) << 32)

struct wbuf {
	uint8_t *p;
	size_t len, cap;
	bool oom;
};

static void wbuf_put(struct wbuf *b, const void *data, size_t n)
{
	if (b->oom)
		return;
	if (n > b->cap - b->len) {
		size_t cap = b->cap ? b->cap : 4096;
		uint8_t *p;

		while (n > cap - b->len) {
			if (cap > SIZE_MAX / 2) {
				b->oom = true;
				return;
			}
			cap *= 2;
		}
		p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, n);
	b->len += n;
}

static void wbuf_u8(struct wbuf *b, uint8_t v)
{
	wbuf_put(b, &v, 1);
}

static void wbuf_u32(struct wbuf *b, uint32_t v)
{
	uint8_t x[4];

	for (int i = 0; i < 4; i++)
		x[i] = (uint8_t)(v >> (8 * i));
	wbuf_put(b, x, sizeof(x));
}

static void wbuf_u64(struct wbuf *b, uint64_t v)
{
	uint8_t x[8];

	for (int i = 0; i < 8; i++)
		x[i] = (uint8_t)(v >> (8 * i));
	wbuf_put(b, x, sizeof(x));
}

static void wbuf_bytes(struct wbuf *b, const void *p, uint32_t n)
{
	wbuf_u32(b, n);
	wbuf_put(b, p, n);
}

static void wbuf_str(struct wbuf *b, const char *s)
{
	if (!s) {
		wbuf_u32(b, LIDX_NULL_STR);
		return;
	}
	wbuf_bytes(b, s, (uint32_t)strlen(s));
}

/* zlib's crc32 takes uInt lengths: feed it in pieces. */
static uint32_t layer_crc32(const uint8_t *p, size_t len)
{
	uLong crc = crc32(0L, Z_NULL, 0);

	for (size_t off = 0; off < len;) {
		uInt n = (uInt)MIN(len - off, (size_t)1 << 30);

		crc = crc32(crc, p + off, n);
		off += n;
	}
	return (uint32_t)crc;
}

int layer_index_write(const struct layer_index *li, int fd)
{
	_cleanup_free_ uint8_t *data = NULL;
	struct wbuf b = { 0 };
	int r;

	wbuf_put(&b, LIDX_MAGIC, 8);
	wbuf_u32(&b, LIDX_VERSION);
	wbuf_u32(&b, 0);
	wbuf_u64(&b, li->n_entries);
	wbuf_u64(&b, li->data_size);
	for (size_t i = 0; i < li->n_entries; i++) {
		const struct layer_entry *e = &li->entries[i];

		if (!e->path || strlen(e->path) >= LIDX_NULL_STR ||
		    (e->link && strlen(e->link) >= LIDX_NULL_STR)) {
			free(b.p);
			return -EINVAL;
		}
		wbuf_u8(&b, e->type);
		wbuf_u32(&b, e->mode);
		wbuf_u32(&b, e->uid);
		wbuf_u32(&b, e->gid);
		wbuf_u64(&b, (uint64_t)e->mtime_sec);
		wbuf_u32(&b, e->mtime_nsec);
		wbuf_u64(&b, e->size);
		wbuf_u64(&b, e->data_off);
		wbuf_u64(&b, e->rdev);
		wbuf_str(&b, e->path);
		wbuf_str(&b, e->link);
		wbuf_str(&b, e->object);
		wbuf_u32(&b, e->n_xattrs);
		for (uint32_t j = 0; j < e->n_xattrs; j++) {
			wbuf_str(&b, e->xattrs[j].name);
			wbuf_bytes(&b, e->xattrs[j].value, e->xattrs[j].size);
		}
	}
	wbuf_u32(&b, layer_crc32(b.p, b.len));
	data = b.p;
	if (b.oom)
		return -ENOMEM;

	r = write_full(fd, b.p, b.len);
	return r == -ENOSPC || r == -EDQUOT ? -ENOSPC : r < 0 ? -EIO : 0;
}

struct rbuf {
	const uint8_t *p;
	size_t len, pos;
	bool bad;
};

static const uint8_t *rbuf_take(struct rbuf *r, size_t n)
{
	const uint8_t *p;

	if (r->bad || n > r->len - r->pos) {
		r->bad = true;
		return NULL;
	}
	p = r->p + r->pos;
	r->pos += n;
	return p;
}

static uint8_t rbuf_u8(struct rbuf *r)
{
	const uint8_t *p = rbuf_take(r, 1);

	return p ? p[0] : 0;
}

static uint32_t rbuf_u32(struct rbuf *r)
{
	const uint8_t *p = rbuf_take(r, 4);
	uint32_t v = 0;

	if (p)
		for (int i = 0; i < 4; i++)
			v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static uint64_t rbuf_u64(struct rbuf *r)
{
	const uint8_t *p = rbuf_take(r, 8);
	uint64_t v = 0;

	if (p)
		for (int i = 0; i < 8; i++)
			v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* Returns 0 with *ret set (NULL for a NULL string when allowed),
 * -EBADMSG or -ENOMEM. */
static int rbuf_str(struct rbuf *r, bool nullable, char **ret)
{
	uint32_t n = rbuf_u32(r);
	const uint8_t *p;
	char *s;

	if (r->bad)
		return -EBADMSG;
	if (n == LIDX_NULL_STR) {
		if (!nullable)
			return -EBADMSG;
		*ret = NULL;
		return 0;
	}
	p = rbuf_take(r, n);
	if (!p || memchr(p, '\0', n))
		return -EBADMSG;
	s = malloc((size_t)n + 1);
	if (!s)
		return -ENOMEM;
	memcpy(s, p, n);
	s[n] = '\0';
	*ret = s;
	return 0;
}

static bool object_name_ok(const char *s)
{
	size_t n = 0;

	for (; s[n]; n++)
		if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
			return false;
	return n == DIGEST_HEX_LEN;
}

static int layer_index_parse_entry(struct rbuf *r, uint32_t version, uint64_t data_size,
				   struct layer_entry *e)
{
	uint32_t n_xattrs;
	int k;

	e->type = rbuf_u8(r);
	e->mode = rbuf_u32(r);
	e->uid = rbuf_u32(r);
	e->gid = rbuf_u32(r);
	e->mtime_sec = (int64_t)rbuf_u64(r);
	e->mtime_nsec = rbuf_u32(r);
	e->size = rbuf_u64(r);
	e->data_off = rbuf_u64(r);
	e->rdev = rbuf_u64(r);
	if (r->bad || e->type > LAYER_ENTRY_OPAQUE || e->mode > 07777 ||
	    e->mtime_nsec >= 1000000000u)
		return -EBADMSG;

	k = rbuf_str(r, false, &e->path);
	if (k < 0)
		return k;
	if (!layer_path_components_ok(e->path))
		return -EBADMSG;
	k = rbuf_str(r, true, &e->link);
	if (k < 0)
		return k;
	if ((e->type == LAYER_ENTRY_SYMLINK || e->type == LAYER_ENTRY_HARDLINK) !=
	    (e->link != NULL))
		return -EBADMSG;
	if (e->type == LAYER_ENTRY_HARDLINK &&
	    (e->link[0] == '\0' || !layer_path_components_ok(e->link)))
		return -EBADMSG;
	if (version >= 2) {
		k = rbuf_str(r, true, &e->object);
		if (k < 0)
			return k;
	}
	if (e->object && (e->type != LAYER_ENTRY_REG || e->data_off != 0 || e->size == 0 ||
			  !object_name_ok(e->object)))
		return -EBADMSG;
	if (e->type == LAYER_ENTRY_REG && !e->object &&
	    (e->data_off > data_size || e->size > data_size - e->data_off))
		return -EBADMSG;
	if (e->path[0] == '\0' && e->type != LAYER_ENTRY_DIR && e->type != LAYER_ENTRY_OPAQUE)
		return -EBADMSG;

	n_xattrs = rbuf_u32(r);
	if (r->bad || n_xattrs > (r->len - r->pos) / LIDX_MIN_XATTR)
		return -EBADMSG;
	if (n_xattrs == 0)
		return 0;
	e->xattrs = calloc(n_xattrs, sizeof(*e->xattrs));
	if (!e->xattrs)
		return -ENOMEM;
	for (; e->n_xattrs < n_xattrs; e->n_xattrs++) {
		struct layer_xattr *x = &e->xattrs[e->n_xattrs];
		uint32_t size;
		const uint8_t *v;

		k = rbuf_str(r, false, &x->name);
		if (k < 0)
			return k;
		size = rbuf_u32(r);
		v = rbuf_take(r, size);
		if (!v || x->name[0] == '\0') {
			free(x->name);
			x->name = NULL;
			return -EBADMSG;
		}
		x->value = malloc((size_t)size + 1);
		if (!x->value) {
			free(x->name);
			x->name = NULL;
			return -ENOMEM;
		}
		memcpy(x->value, v, size);
		x->size = size;
	}
	return 0;
}

static int layer_index_parse(const uint8_t *data, size_t len, struct layer_index **ret)
{
	_cleanup_(layer_index_freep) struct layer_index *li = NULL;
	struct rbuf r = { .p = data, .len = len };
	uint32_t stored, version;
	uint64_t n;

	if (len < LIDX_HEADER_SIZE + 4 || memcmp(data, LIDX_MAGIC, 8) != 0)
		return -EBADMSG;
	stored = (uint32_t)data[len - 4] | (uint32_t)data[len - 3] << 8 |
		 (uint32_t)data[len - 2] << 16 | (uint32_t)data[len - 1] << 24;
	if (stored != layer_crc32(data, len - 4))
		return -EBADMSG;
	r.len = len - 4;

	rbuf_take(&r, 8);
	version = rbuf_u32(&r);
	if (version < 1 || version > LIDX_VERSION || rbuf_u32(&r) != 0)
		return -EBADMSG;
	n = rbuf_u64(&r);
	li = calloc(1, sizeof(*li));
	if (!li)
		return -ENOMEM;
	li->data_size = rbuf_u64(&r);
	if (r.bad || n > (r.len - r.pos) / LIDX_MIN_ENTRY)
		return -EBADMSG;
	if (n > 0) {
		li->entries = calloc((size_t)n, sizeof(*li->entries));
		if (!li->entries)
			return -ENOMEM;
	}
	for (; li->n_entries < n; li->n_entries++) {
		/* counted first so a half-parsed entry is freed too */
		int k = layer_index_parse_entry(&r, version, li->data_size,
						&li->entries[li->n_entries]);

		if (k < 0) {
			li->n_entries++;
			return k;
		}
	}
	if (r.pos != r.len)
		return -EBADMSG;
	*ret = TAKE_PTR(li);
	return 0;
}

int layer_index_read(int fd, struct layer_index **ret)
{
	_cleanup_free_ char *buf = NULL;
	size_t len;
	int r;

	r = read_full(fd, LIDX_MAX_FILE, &buf, &len);
	if (r < 0)
		return r == -EFBIG ? -EBADMSG : r;
	return layer_index_parse((const uint8_t *)buf, len, ret);
}

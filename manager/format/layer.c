/* Layer unpacking: one OCI/Docker layer tar stream becomes a data pack
 * (regular file bytes, appended) and an in-memory index of entries, and the
 * index round-trips through a small checksummed binary file in the cache.
 * Everything taken from the tar is validated here once, so the tree and the
 * filesystem can rely on normalised paths. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <wchar.h>
#include <zlib.h>

#include "digest.h"
#include "gzsrc.h"
#include "objhash.h"
#include "layer-private.h"
#include "fileio.h"
#include "errname.h"
#include "macro.h"

/* libarchive hands out blocks of this size; large blocks mean few reads
 * from a pipe or a socket-backed fd. */
#define LAYER_READ_BLOCK (1u << 20)

static void archive_read_freep(struct archive **a)
{
	if (*a)
		archive_read_free(*a);
}

/* ---- unpacking ------------------------------------------------------- */

/* An object written and being hashed: entry index, temporary name. */
struct pending_object {
	size_t entry;
	uint64_t number;
};

struct unpack {
	struct archive *a;
	int data_fd;
	const struct layer_objects *objs;
	struct objhash *hash; /* objs only */
	struct pending_object *pending;
	size_t n_pending, cap_pending;
	uint64_t pack_end;
	uint64_t expanded;
	uint64_t xattr_bytes; /* of every entry so far */
	uint64_t headers;
	uint64_t max_entries, max_expanded;
	int entries_err;
	uint32_t max_path;
	struct layer_index *li;
	size_t cap;
	struct layer_places places;
	char *errbuf;
	size_t errlen;
};

void layer_entry_clear(struct layer_entry *e)
{
	free(e->path);
	free(e->link);
	free(e->object);
	for (uint32_t i = 0; i < e->n_xattrs; i++) {
		free(e->xattrs[i].name);
		free(e->xattrs[i].value);
	}
	free(e->xattrs);
}

static int layer_archive_fail(struct unpack *u)
{
	const char *msg = archive_error_string(u->a);

	return layer_fail(u->errbuf, u->errlen, "layer: %s", msg ? msg : "unreadable archive");
}

int layer_write_error(void)
{
	if (errno == ENOSPC || errno == EDQUOT)
		return -ENOSPC;
	return -EIO;
}

static int layer_pwrite_all(int fd, const void *buf, size_t size, uint64_t off)
{
	const char *p = buf;

	while (size > 0) {
		ssize_t n = pwrite(fd, p, size, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return layer_write_error();
		}
		if (n == 0)
			return -EIO;
		p += n;
		size -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* The name libarchive decoded or, when it could not convert it to the
 * locale, the best other form it kept: layer names are bytes to us.
 * Returns 0, or -EBADMSG (no reason set) or -ENOMEM. */
static int layer_raw_name(struct archive_entry *ae, bool hardlink, const char **ret,
			  char **ret_free)
{
	const char *s;
	const wchar_t *w;
	size_t n;
	char *buf;

	s = hardlink ? archive_entry_hardlink(ae) : archive_entry_pathname(ae);
	if (!s)
		s = hardlink ? archive_entry_hardlink_utf8(ae) : archive_entry_pathname_utf8(ae);
	if (s) {
		*ret = s;
		*ret_free = NULL;
		return 0;
	}
	w = hardlink ? archive_entry_hardlink_w(ae) : archive_entry_pathname_w(ae);
	if (!w)
		return -EBADMSG;
	n = wcstombs(NULL, w, 0);
	if (n == (size_t)-1)
		return -EBADMSG;
	buf = malloc(n + 1);
	if (!buf)
		return -ENOMEM;
	wcstombs(buf, w, n + 1);
	*ret = buf;
	*ret_free = buf;
	return 0;
}

static int layer_copy_xattrs(struct unpack *u, struct archive_entry *ae, struct layer_entry *e)
{
	int n = archive_entry_xattr_reset(ae);
	const char *name;
	const void *value;
	size_t size;

	if (n <= 0)
		return 0;
	if ((unsigned)n > LAYER_XATTRS_PER_ENTRY)
		return layer_fail(u->errbuf, u->errlen, "layer: \"%.200s\" has more than %u xattrs",
				  e->path, LAYER_XATTRS_PER_ENTRY);
	e->xattrs = calloc((size_t)n, sizeof(*e->xattrs));
	if (!e->xattrs)
		return -ENOMEM;
	for (int k = 0; k < n && archive_entry_xattr_next(ae, &name, &value, &size) == ARCHIVE_OK;
	     k++) {
		struct layer_xattr *x = &e->xattrs[e->n_xattrs];
		void *copy;

		if (!name || name[0] == '\0' || strlen(name) > LAYER_XATTR_NAME_MAX ||
		    size > LAYER_XATTR_SIZE_MAX)
			return layer_fail(u->errbuf, u->errlen, "layer: bad xattr on \"%.200s\"",
					  e->path);
		u->xattr_bytes += strlen(name) + size;
		if (u->xattr_bytes > LAYER_XATTR_BYTES_MAX)
			return layer_fail(u->errbuf, u->errlen,
					  "layer: more than %u bytes of xattrs",
					  LAYER_XATTR_BYTES_MAX);
		/* +1 so a zero-length value still owns a distinct pointer */
		copy = malloc(size + 1);
		if (!copy)
			return -ENOMEM;
		if (size > 0)
			memcpy(copy, value, size);
		/* pax headers written by libarchive carry each xattr twice
		 * (SCHILY.xattr and LIBARCHIVE.xattr): the last one wins */
		for (uint32_t i = 0; i < e->n_xattrs; i++)
			if (strcmp(e->xattrs[i].name, name) == 0) {
				x = &e->xattrs[i];
				break;
			}
		if (x == &e->xattrs[e->n_xattrs]) {
			x->name = strdup(name);
			if (!x->name) {
				free(copy);
				return -ENOMEM;
			}
			e->n_xattrs++;
		} else {
			free(x->value);
		}
		x->value = copy;
		x->size = (uint32_t)size;
	}
	return 0;
}

/* Hands the data blocks of the current entry to fn in order, after
 * checking that they lie inside the entry's size. */
/* A tar that ends right after its last member's data, without the padding
 * of that data and without end-of-archive blocks, as umoci insert writes
 * them: GNU tar, containerd and podman take it as ended, and so does
 * pullfs (the blob's digest was checked; only padding is missing, never a
 * header or data). */
static bool ends_in_last_padding(struct archive *a)
{
	const char *msg = archive_error_string(a);
	unsigned needed;
	char tail;

	return msg &&
	       sscanf(msg, "Truncated input file (needed %u bytes, only 0 available%c", &needed,
		      &tail) == 2 &&
	       tail == ')' && needed < 512;
}

static int layer_each_block(struct unpack *u, struct layer_entry *e,
			    int (*fn)(void *userdata, const void *buf, size_t size, uint64_t off),
			    void *userdata)
{
	uint64_t end = 0;

	for (;;) {
		const void *buf;
		size_t size;
		la_int64_t off;
		int r = archive_read_data_block(u->a, &buf, &size, &off);

		if (r == ARCHIVE_EOF)
			return 0;
		/* every byte of the entry came, only its padding is missing */
		if (r == ARCHIVE_FATAL && end == e->size && ends_in_last_padding(u->a))
			return 0;
		if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
			return layer_archive_fail(u);
		if (size == 0)
			continue;
		if (off < 0 || (uint64_t)off > e->size || size > e->size - (uint64_t)off)
			return layer_fail(u->errbuf, u->errlen,
					  "layer: data of \"%.200s\" exceeds "
					  "its size",
					  e->path);
		r = fn(userdata, buf, size, (uint64_t)off);
		if (r < 0)
			return r;
		end = MAX(end, (uint64_t)off + size);
	}
}

struct pack_copy {
	int fd;
	uint64_t base;
	uint64_t end; /* of the data written, from base */
};

static int pack_block(void *userdata, const void *buf, size_t size, uint64_t off)
{
	struct pack_copy *pc = userdata;

	pc->end = MAX(pc->end, off + size);
	return layer_pwrite_all(pc->fd, buf, size, pc->base + off);
}

/* Streams one regular file into an object of its own (struct
 * layer_objects) under a temporary name, "t.<entry number>"; objhash
 * hashes it on another thread, and layer_unpack() renames it to
 * "o.<hex digest>" at the end, when it sets e->object (a second file of
 * the layer with the same content then just replaces the first under that
 * name).  Until then e->object is "". */
static int layer_copy_object(struct unpack *u, struct layer_entry *e)
{
	int dirfd = u->objs->dirfd;
	char tmp[32];
	struct pack_copy pc = { .base = 0 };
	int r;

	if (u->n_pending == u->cap_pending) {
		size_t cap = u->cap_pending ? u->cap_pending * 2 : 64;
		struct pending_object *n = reallocarray(u->pending, cap, sizeof(*n));

		if (!n)
			return -ENOMEM;
		u->pending = n;
		u->cap_pending = cap;
	}
	snprintf(tmp, sizeof(tmp), "t.%" PRIu64, u->headers);
	pc.fd = openat(dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
	if (pc.fd < 0)
		return layer_write_error();
	r = layer_each_block(u, e, pack_block, &pc);
	/* the trailing hole of a sparse file */
	if (r == 0 && pc.end < e->size && ftruncate(pc.fd, (off_t)e->size) < 0)
		r = layer_write_error();
	if (r == 0 && !(e->object = strdup("")))
		r = -ENOMEM;
	if (r < 0) {
		close(pc.fd);
		unlinkat(dirfd, tmp, 0);
		return r;
	}
	/* No write-back started here: the layer is flushed in the
	 * background once it is served (cache.h), and starting it during
	 * the unpack cost the unpack's thread the time to submit it. */
	r = objhash_add(u->hash, pc.fd, e->size);
	if (r < 0)
		return r;
	/* the entry goes in at this index once this returns */
	u->pending[u->n_pending++] =
		(struct pending_object){ .entry = u->li->n_entries, .number = u->headers };
	return 0;
}

/* Names every object of the layer by its digest, once all are hashed. */
static int layer_name_objects(struct unpack *u)
{
	char(*hex)[DIGEST_HEX_LEN + 1];
	size_t n;
	int r = objhash_finish(u->hash, &hex, &n);

	if (r < 0)
		return r == -ENOMEM ? r : -EIO;
	for (size_t i = 0; i < u->n_pending && i < n; i++) {
		struct layer_entry *e = &u->li->entries[u->pending[i].entry];
		char tmp[32], name[DIGEST_HEX_LEN + 3];

		snprintf(tmp, sizeof(tmp), "t.%" PRIu64, u->pending[i].number);
		snprintf(name, sizeof(name), "o.%s", hex[i]);
		if (renameat(u->objs->dirfd, tmp, u->objs->dirfd, name) < 0)
			return layer_write_error();
		free(e->object);
		e->object = strdup(hex[i]);
		if (!e->object)
			return -ENOMEM;
	}
	return 0;
}

/* Streams one regular file's bytes to the end of the pack, or into an
 * object when it is large enough.  Blocks are written at their own
 * offsets, so the gaps libarchive reports for sparse entries stay holes. */
static int layer_copy_data(struct unpack *u, struct layer_entry *e)
{
	struct pack_copy pc = { .fd = u->data_fd, .base = e->data_off };

	if (u->objs && e->size > 0 && e->size >= u->objs->min_size) {
		e->data_off = 0;
		return layer_copy_object(u, e);
	}
	return layer_each_block(u, e, pack_block, &pc);
}

static int layer_classify(struct unpack *u, struct archive_entry *ae, struct layer_entry *e)
{
	switch (archive_entry_filetype(ae)) {
	case AE_IFREG:
		e->type = LAYER_ENTRY_REG;
		break;
	case AE_IFDIR:
		e->type = LAYER_ENTRY_DIR;
		break;
	case AE_IFLNK:
		e->type = LAYER_ENTRY_SYMLINK;
		break;
	case AE_IFCHR:
		e->type = LAYER_ENTRY_CHR;
		break;
	case AE_IFBLK:
		e->type = LAYER_ENTRY_BLK;
		break;
	case AE_IFIFO:
		e->type = LAYER_ENTRY_FIFO;
		break;
	case AE_IFSOCK:
		e->type = LAYER_ENTRY_SOCK;
		break;
	default:
		return layer_fail(u->errbuf, u->errlen,
				  "layer: \"%.200s\" has an unknown file type", e->path);
	}
	return 0;
}

static int layer_fill_entry(struct unpack *u, struct archive_entry *ae, struct layer_entry *e)
{
	_cleanup_free_ char *name_buf = NULL;
	const char *raw, *hl;
	la_int64_t uid, gid;
	long nsec;
	int r;

	r = layer_raw_name(ae, false, &raw, &name_buf);
	if (r == -EBADMSG)
		return layer_fail(u->errbuf, u->errlen, "layer: entry without a readable name");
	if (r < 0)
		return r;
	r = layer_normalise(raw, u->max_path, &e->path, u->errbuf, u->errlen);
	if (r < 0)
		return r;

	uid = archive_entry_uid(ae);
	gid = archive_entry_gid(ae);
	if (uid < 0 || uid > UINT32_MAX || gid < 0 || gid > UINT32_MAX)
		return layer_fail(u->errbuf, u->errlen,
				  "layer: \"%.200s\" has an out-of-range owner", e->path);
	e->uid = (uint32_t)uid;
	e->gid = (uint32_t)gid;
	e->mode = (uint32_t)archive_entry_perm(ae) & 07777;
	e->mtime_sec = archive_entry_mtime(ae);
	nsec = archive_entry_mtime_nsec(ae);
	e->mtime_nsec = nsec >= 0 && nsec < 1000000000 ? (uint32_t)nsec : 0;

	r = layer_whiteout(e, u->errbuf, u->errlen);
	if (r != 0)
		return r;
	if (e->type == LAYER_ENTRY_WHITEOUT || e->type == LAYER_ENTRY_OPAQUE)
		return 0;

	hl = archive_entry_hardlink(ae);
	if (!hl)
		hl = archive_entry_hardlink_utf8(ae);
	if (hl || archive_entry_hardlink_w(ae)) {
		_cleanup_free_ char *hl_buf = NULL;

		r = layer_raw_name(ae, true, &hl, &hl_buf);
		if (r == -EBADMSG)
			return layer_fail(u->errbuf, u->errlen,
					  "layer: unreadable hardlink target");
		if (r < 0)
			return r;
		r = layer_hardlink_target(&u->places, hl, u->max_path, e, u->errbuf, u->errlen);
		if (r < 0)
			return r;
	} else {
		r = layer_classify(u, ae, e);
		if (r < 0)
			return r;
	}

	switch (e->type) {
	case LAYER_ENTRY_SYMLINK: {
		const char *target = archive_entry_symlink(ae);

		if (!target)
			target = archive_entry_symlink_utf8(ae);
		if (!target)
			return layer_fail(u->errbuf, u->errlen,
					  "layer: symlink \"%.200s\" without "
					  "a readable target",
					  e->path);
		if (strlen(target) > u->max_path)
			return layer_fail(u->errbuf, u->errlen,
					  "layer: symlink target longer than "
					  "%" PRIu32 " bytes",
					  u->max_path);
		e->link = strdup(target);
		if (!e->link)
			return -ENOMEM;
		break;
	}
	case LAYER_ENTRY_CHR:
	case LAYER_ENTRY_BLK:
		e->rdev = makedev(archive_entry_rdevmajor(ae), archive_entry_rdevminor(ae));
		break;
	case LAYER_ENTRY_REG: {
		la_int64_t size = archive_entry_size_is_set(ae) ? archive_entry_size(ae) : 0;

		if (size < 0)
			return layer_fail(u->errbuf, u->errlen,
					  "layer: \"%.200s\" has a negative "
					  "size",
					  e->path);
		e->size = (uint64_t)size;
		if (e->size > u->max_expanded - u->expanded)
			return layer_fail(u->errbuf, u->errlen,
					  "layer: more than %" PRIu64 " bytes of file content",
					  u->max_expanded);
		u->expanded += e->size;
		e->data_off = u->pack_end;
		break;
	}
	default:
		break;
	}

	if (e->type != LAYER_ENTRY_DIR) {
		/* A root entry that is not a directory would leave nothing
		 * to mount. */
		if (e->path[0] == '\0')
			return layer_fail(u->errbuf, u->errlen,
					  "layer: root entry is not a "
					  "directory");
	}
	return layer_copy_xattrs(u, ae, e);
}

static int layer_push(struct unpack *u, struct layer_entry *e)
{
	struct layer_index *li = u->li;

	if (li->n_entries == u->cap) {
		size_t cap = u->cap ? u->cap * 2 : 256;
		struct layer_entry *n = reallocarray(li->entries, cap, sizeof(*n));

		if (!n)
			return -ENOMEM;
		li->entries = n;
		u->cap = cap;
	}
	li->entries[li->n_entries++] = *e;
	return 0;
}

static int layer_next(struct unpack *u, struct archive_entry *ae)
{
	struct layer_entry e = { 0 };
	int r;

	if (++u->headers > u->max_entries)
		return errbuf_fail(u->entries_err, u->errbuf, u->errlen,
				   "layer: more than %" PRIu64 " entries", u->max_entries);

	r = layer_fill_entry(u, ae, &e);
	if (r == 0 && u->objs && u->objs->drop_estargz_own && layer_is_estargz_own(e.path))
		r = 1; /* skipped, its data with it */
	if (r == 0)
		r = layer_places_check(&u->places, &e, u->errbuf, u->errlen);
	if (r != 0) {
		layer_entry_clear(&e);
		return r < 0 ? r : 0;
	}
	if (e.type == LAYER_ENTRY_REG) {
		r = layer_copy_data(u, &e);
		if (r < 0) {
			layer_entry_clear(&e);
			return r;
		}
		if (!e.object)
			u->pack_end = e.data_off + e.size;
	}
	r = layer_push(u, &e);
	if (r < 0) {
		layer_entry_clear(&e);
		return r;
	}
	/* the entries own the string; the set borrows it */
	return layer_places_add(&u->places, &u->li->entries[u->li->n_entries - 1]);
}

struct layer_limits layer_limits_resolve(const struct layer_limits *lim)
{
	struct layer_limits l = lim ? *lim : (struct layer_limits){ 0 };

	if (!l.max_entries)
		l.max_entries = LAYER_DEFAULT_MAX_ENTRIES;
	if (!l.entries_err)
		l.entries_err = -EBADMSG;
	if (!l.max_expanded_bytes)
		l.max_expanded_bytes = LAYER_DEFAULT_MAX_EXPANDED;
	if (!l.max_path)
		l.max_path = LAYER_DEFAULT_MAX_PATH;
	return l;
}

int layer_unpack(int in_fd, enum layer_compression c, int data_fd, const struct layer_objects *objs,
		 const struct layer_limits *lim, struct layer_index **ret, char *errbuf,
		 size_t errlen)
{
	_cleanup_(archive_read_freep) struct archive *a = NULL;
	_cleanup_(layer_index_freep) struct layer_index *li = NULL;
	struct unpack u = {
		.data_fd = data_fd,
		.objs = objs,
		.errbuf = errbuf,
		.errlen = errlen,
	};
	struct gzsrc gz = { .fd = -1 };
	int r;

	if (errbuf && errlen > 0)
		errbuf[0] = '\0';
	const struct layer_limits l = layer_limits_resolve(lim);

	u.max_entries = l.max_entries;
	u.entries_err = l.entries_err;
	u.max_expanded = l.max_expanded_bytes;
	u.max_path = l.max_path;

	li = calloc(1, sizeof(*li));
	if (!li)
		return -ENOMEM;
	u.li = li;

	a = archive_read_new();
	if (!a)
		return -ENOMEM;
	u.a = a;
	/* tar covers ustar, pax and GNU; nothing else is a layer. */
	if (archive_read_support_format_tar(a) != ARCHIVE_OK)
		return -ENOMEM;
	switch (c) {
	case LAYER_UNCOMPRESSED:
	case LAYER_GZIP:
		r = archive_read_support_filter_none(a);
		break;
	case LAYER_ZSTD:
		/* zstd frames carry their own checksum, which libzstd
		 * verifies */
		r = archive_read_support_filter_zstd(a);
		break;
	default:
		return -EINVAL;
	}
	/* ARCHIVE_WARN means libarchive would fork an external program
	 * for this filter: never from inside the daemon. */
	if (r != ARCHIVE_OK)
		return -ENOTSUP;

	if (c == LAYER_GZIP) {
		r = gzsrc_init(&gz, in_fd);
		if (r < 0)
			goto out;
		r = archive_read_open(a, &gz, NULL, gzsrc_read, NULL);
	} else {
		r = archive_read_open_fd(a, in_fd, LAYER_READ_BLOCK);
	}
	if (r != ARCHIVE_OK) {
		r = layer_archive_fail(&u);
		goto out;
	}

	if (objs) {
		r = objhash_start(&u.hash);
		if (r < 0)
			goto out;
	}
	for (;;) {
		struct archive_entry *ae;

		r = archive_read_next_header(a, &ae);
		if (r == ARCHIVE_EOF || (r == ARCHIVE_FATAL && ends_in_last_padding(a)))
			break;
		/* A name that does not convert to the locale is only a
		 * warning, with EILSEQ (layer_raw_name copes); any other one means
		 * libarchive skipped part of a header -- a malformed or
		 * oversized pax record -- and would go on with the rest, a
		 * guess another extractor need not share. */
		if (r != ARCHIVE_OK && (r != ARCHIVE_WARN || archive_errno(a) != EILSEQ)) {
			r = layer_archive_fail(&u);
			goto out;
		}
		r = layer_next(&u, ae);
		if (r < 0)
			goto out;
	}

	/* Trailing holes of a sparse last file only exist once the pack is
	 * stretched to its full length. */
	if (ftruncate(data_fd, (off_t)u.pack_end) < 0) {
		r = layer_write_error();
		goto out;
	}
	li->data_size = u.pack_end;
	if (u.hash) {
		r = layer_name_objects(&u);
		if (r < 0)
			goto out;
	}
	*ret = TAKE_PTR(li);
	r = 0;
out:
	objhash_free(u.hash);
	free(u.pending);
	/* the archive reads through gz until it is closed */
	archive_read_free(TAKE_PTR(a));
	gzsrc_free(&gz);
	layer_places_done(&u.places);
	return r;
}

void layer_index_free(struct layer_index *li)
{
	if (!li)
		return;
	for (size_t i = 0; i < li->n_entries; i++)
		layer_entry_clear(&li->entries[i]);
	free(li->entries);
	free(li);
}

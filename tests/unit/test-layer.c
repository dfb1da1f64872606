/* Unit tests for layer unpacking and the index file: tars are made in
 * memory with libarchive's writer, so every case is self-contained. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "layer.h"

/* One tar member to write.  `data` NULL with size > 0 writes zeros. */
struct member {
	const char *path;
	unsigned type; /* AE_IF* */
	unsigned mode;
	const char *data;
	size_t size;
	const char *link;     /* symlink target */
	const char *hardlink; /* hardlink target */
	unsigned uid, gid;
	unsigned rmajor, rminor;
	const char *xname, *xvalue;
	/* sparse: one data extent at sparse_off of sparse_len bytes */
	int64_t sparse_off, sparse_len;
};

struct fixture {
	int tar_fd;
	int pack_fd;
	struct layer_index *li;
	char err[512];
};

static int memfd(const char *name)
{
	int fd = memfd_create(name, MFD_CLOEXEC);

	assert_true(fd >= 0);
	return fd;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	f->tar_fd = memfd("tar");
	f->pack_fd = memfd("pack");
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	layer_index_free(f->li);
	close(f->tar_fd);
	close(f->pack_fd);
	free(f);
	return 0;
}

static void write_tar(int fd, enum layer_compression c, const struct member *m, size_t n)
{
	struct archive *a = archive_write_new();
	char zeros[4096] = { 0 };

	assert_non_null(a);
	assert_int_equal(ftruncate(fd, 0), 0);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	assert_int_equal(archive_write_set_format_pax(a), ARCHIVE_OK);
	if (c == LAYER_GZIP)
		assert_int_equal(archive_write_add_filter_gzip(a), ARCHIVE_OK);
	else if (c == LAYER_ZSTD)
		assert_int_equal(archive_write_add_filter_zstd(a), ARCHIVE_OK);
	assert_int_equal(archive_write_open_fd(a, fd), ARCHIVE_OK);

	for (size_t i = 0; i < n; i++) {
		struct archive_entry *e = archive_entry_new();

		archive_entry_set_pathname(e, m[i].path);
		archive_entry_set_filetype(e, m[i].type ? m[i].type : AE_IFREG);
		archive_entry_set_perm(e, m[i].mode ? m[i].mode : 0644);
		archive_entry_set_uid(e, m[i].uid);
		archive_entry_set_gid(e, m[i].gid);
		archive_entry_set_mtime(e, 1700000000, 5000);
		if (m[i].link)
			archive_entry_set_symlink(e, m[i].link);
		if (m[i].hardlink) {
			archive_entry_set_hardlink(e, m[i].hardlink);
			archive_entry_set_size(e, 0);
		}
		if (m[i].rmajor || m[i].rminor) {
			archive_entry_set_rdevmajor(e, m[i].rmajor);
			archive_entry_set_rdevminor(e, m[i].rminor);
		}
		if (m[i].xname)
			archive_entry_xattr_add_entry(e, m[i].xname, m[i].xvalue,
						      strlen(m[i].xvalue));
		if (archive_entry_filetype(e) == AE_IFREG && !m[i].hardlink)
			archive_entry_set_size(e, (la_int64_t)m[i].size);
		if (m[i].sparse_len)
			archive_entry_sparse_add_entry(e, m[i].sparse_off, m[i].sparse_len);
		assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
		if (archive_entry_filetype(e) == AE_IFREG && !m[i].hardlink) {
			if (m[i].data) {
				assert_int_equal(archive_write_data(a, m[i].data, m[i].size),
						 (la_ssize_t)m[i].size);
			} else {
				/* the writer skips the holes itself */
				for (size_t left = m[i].size; left > 0;) {
					size_t k = left < sizeof(zeros) ? left : sizeof(zeros);

					assert_true(archive_write_data(a, zeros, k) >= 0);
					left -= k;
				}
			}
		}
		archive_entry_free(e);
	}
	assert_int_equal(archive_write_close(a), ARCHIVE_OK);
	archive_write_free(a);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
}

static int unpack(struct fixture *f, enum layer_compression c, const struct layer_limits *lim)
{
	layer_index_free(f->li);
	f->li = NULL;
	f->err[0] = '\0';
	return layer_unpack(f->tar_fd, c, f->pack_fd, NULL, lim, &f->li, f->err, sizeof(f->err));
}

static const struct layer_entry *find(const struct layer_index *li, const char *path, uint8_t type)
{
	for (size_t i = 0; i < li->n_entries; i++)
		if (strcmp(li->entries[i].path, path) == 0 && li->entries[i].type == type)
			return &li->entries[i];
	fprintf(stderr, "no entry %s type %u\n", path, type);
	fail();
	return NULL;
}

static void assert_pack(int fd, const struct layer_entry *e, const char *want)
{
	char buf[256];

	assert_int_equal(e->size, strlen(want));
	assert_true(e->size <= sizeof(buf));
	assert_int_equal(pread(fd, buf, e->size, (off_t)e->data_off), (ssize_t)e->size);
	assert_memory_equal(buf, want, e->size);
}

static const struct member rich[] = {
	{ .path = "./", .type = AE_IFDIR, .mode = 0755 },
	{ .path = "./etc/", .type = AE_IFDIR, .mode = 0755 },
	{ .path = "./etc/hostname", .data = "box\n", .size = 4 },
	{ .path = "etc/passwd", .data = "root:x:0:0\n", .size = 11, .uid = 1000, .gid = 1000 },
	{ .path = "usr/bin/su", .mode = 04755, .data = "ELF", .size = 3 },
	{ .path = "tmp", .type = AE_IFDIR, .mode = 01777 },
	{ .path = "bin", .type = AE_IFLNK, .mode = 0777, .link = "usr/bin" },
	{ .path = "lnk", .type = AE_IFLNK, .mode = 0777, .link = "../../../etc/shadow" },
	{ .path = "usr/bin/su2", .hardlink = "usr/bin/su" },
	{ .path = "dev/null", .type = AE_IFCHR, .mode = 0666, .rmajor = 1, .rminor = 3 },
	{ .path = "dev/sda", .type = AE_IFBLK, .mode = 0660, .rmajor = 8 },
	{ .path = "run/fifo", .type = AE_IFIFO, .mode = 0600 },
	{ .path = "usr/bin/ping",
	  .mode = 0755,
	  .data = "P",
	  .size = 1,
	  .xname = "security.capability",
	  .xvalue = "\x01\x02"
		    "cap" },
	{ .path = "x", .data = "x", .size = 1, .xname = "user.foo", .xvalue = "bar" },
	{ .path = "old/.wh.gone" },
	{ .path = "old/.wh..wh..opq" },
	{ .path = ".wh..wh..opq" },
	{ .path = "old/.wh..wh.plnk", .type = AE_IFDIR },
	{ .path = "empty", .size = 0 },
};

/* the aufs ".wh..wh.plnk" member is skipped */
#define ARRAY_COUNT_RICH (sizeof(rich) / sizeof(rich[0]) - 1)

static void check_rich(struct fixture *f)
{
	const struct layer_index *li = f->li;
	const struct layer_entry *e;

	assert_int_equal(li->n_entries, ARRAY_COUNT_RICH);
	e = find(li, "", LAYER_ENTRY_DIR);
	assert_int_equal(e->mode, 0755);
	e = find(li, "etc", LAYER_ENTRY_DIR);
	assert_pack(f->pack_fd, find(li, "etc/hostname", LAYER_ENTRY_REG), "box\n");
	e = find(li, "etc/passwd", LAYER_ENTRY_REG);
	assert_pack(f->pack_fd, e, "root:x:0:0\n");
	assert_int_equal(e->uid, 1000);
	assert_int_equal(e->gid, 1000);
	assert_int_equal(e->mtime_sec, 1700000000);
	assert_int_equal(e->mtime_nsec, 5000);
	e = find(li, "usr/bin/su", LAYER_ENTRY_REG);
	assert_int_equal(e->mode, 04755);
	assert_pack(f->pack_fd, e, "ELF");
	assert_int_equal(find(li, "tmp", LAYER_ENTRY_DIR)->mode, 01777);
	assert_string_equal(find(li, "bin", LAYER_ENTRY_SYMLINK)->link, "usr/bin");
	/* symlink targets are data, kept verbatim */
	assert_string_equal(find(li, "lnk", LAYER_ENTRY_SYMLINK)->link, "../../../etc/shadow");
	assert_string_equal(find(li, "usr/bin/su2", LAYER_ENTRY_HARDLINK)->link, "usr/bin/su");
	e = find(li, "dev/null", LAYER_ENTRY_CHR);
	assert_int_equal(e->rdev, makedev(1, 3));
	assert_int_equal(e->mode, 0666);
	assert_int_equal(find(li, "dev/sda", LAYER_ENTRY_BLK)->rdev, makedev(8, 0));
	find(li, "run/fifo", LAYER_ENTRY_FIFO);
	e = find(li, "usr/bin/ping", LAYER_ENTRY_REG);
	assert_int_equal(e->n_xattrs, 1);
	assert_string_equal(e->xattrs[0].name, "security.capability");
	assert_int_equal(e->xattrs[0].size, 5);
	assert_memory_equal(e->xattrs[0].value,
			    "\x01\x02"
			    "cap",
			    5);
	e = find(li, "x", LAYER_ENTRY_REG);
	assert_int_equal(e->n_xattrs, 1);
	assert_string_equal(e->xattrs[0].name, "user.foo");
	assert_memory_equal(e->xattrs[0].value, "bar", 3);
	find(li, "old/gone", LAYER_ENTRY_WHITEOUT);
	find(li, "old", LAYER_ENTRY_OPAQUE);
	find(li, "", LAYER_ENTRY_OPAQUE);
	assert_int_equal(find(li, "empty", LAYER_ENTRY_REG)->size, 0);
	for (size_t i = 0; i < li->n_entries; i++)
		assert_null(strstr(li->entries[i].path, ".wh."));
	assert_int_equal(li->data_size, 4 + 11 + 3 + 1 + 1);
	assert_int_equal(lseek(f->pack_fd, 0, SEEK_END), li->data_size);
}

/* Names as umoci insert writes them: a "/" root entry and absolute names,
 * resolved inside the root like a leading "./". */
static void test_unpack_absolute_names(void **state)
{
	struct fixture *f = *state;
	const struct member m[] = {
		{ .path = "/", .type = AE_IFDIR, .mode = 0755 },
		{ .path = "/etc/", .type = AE_IFDIR, .mode = 0755 },
		{ .path = "/etc/hello", .data = "hi\n", .size = 3 },
		{ .path = "//twice", .data = "x", .size = 1 },
		{ .path = "./dot", .data = "y", .size = 1 },
		{ .path = "/etc/link", .hardlink = "/etc/hello" },
	};

	write_tar(f->tar_fd, LAYER_UNCOMPRESSED, m, sizeof(m) / sizeof(m[0]));
	assert_int_equal(unpack(f, LAYER_UNCOMPRESSED, NULL), 0);
	assert_non_null(find(f->li, "", LAYER_ENTRY_DIR));
	assert_non_null(find(f->li, "etc", LAYER_ENTRY_DIR));
	assert_non_null(find(f->li, "etc/hello", LAYER_ENTRY_REG));
	assert_non_null(find(f->li, "twice", LAYER_ENTRY_REG));
	assert_non_null(find(f->li, "dot", LAYER_ENTRY_REG));
	assert_string_equal(find(f->li, "etc/link", LAYER_ENTRY_HARDLINK)->link, "etc/hello");
}

/* A tar that ends right after its last member's data (umoci insert's) is
 * complete; one cut inside data or inside a header is not. */
static void test_unpack_missing_padding(void **state)
{
	struct fixture *f = *state;
	const struct member m[] = {
		{ .path = "a", .data = "first\n", .size = 6 },
		{ .path = "b", .data = "hello\n", .size = 6 },
	};
	char buf[8] = "", tar[8192];
	ssize_t n;
	off_t at = -1;

	write_tar(f->tar_fd, LAYER_UNCOMPRESSED, m, 2);
	/* where b's data starts (after its pax and ustar headers) */
	n = pread(f->tar_fd, tar, sizeof(tar), 0);
	assert_true(n > 0);
	for (ssize_t i = 0; i + 6 <= n; i += 512)
		if (memcmp(tar + i, "hello\n", 6) == 0)
			at = i;
	assert_true(at > 512);
	/* everything up to b's data, its padding and the end blocks gone */
	assert_int_equal(ftruncate(f->tar_fd, at + 6), 0);
	assert_int_equal(unpack(f, LAYER_UNCOMPRESSED, NULL), 0);
	assert_int_equal(
		pread(f->pack_fd, buf, 6, (off_t)find(f->li, "b", LAYER_ENTRY_REG)->data_off), 6);
	assert_string_equal(buf, "hello\n");
	/* b's data cut short */
	assert_int_equal(ftruncate(f->pack_fd, 0), 0);
	assert_int_equal(ftruncate(f->tar_fd, at + 3), 0);
	assert_int_equal(lseek(f->tar_fd, 0, SEEK_SET), 0);
	assert_int_equal(unpack(f, LAYER_UNCOMPRESSED, NULL), -EBADMSG);
	/* b's header cut short */
	assert_int_equal(ftruncate(f->pack_fd, 0), 0);
	assert_int_equal(ftruncate(f->tar_fd, at - 512 + 300), 0);
	assert_int_equal(lseek(f->tar_fd, 0, SEEK_SET), 0);
	assert_int_equal(unpack(f, LAYER_UNCOMPRESSED, NULL), -EBADMSG);
}

static void test_unpack_rich(void **state)
{
	static const enum layer_compression comps[] = { LAYER_UNCOMPRESSED, LAYER_GZIP,
							LAYER_ZSTD };
	struct fixture *f = *state;

	for (size_t i = 0; i < sizeof(comps) / sizeof(comps[0]); i++) {
		assert_int_equal(ftruncate(f->tar_fd, 0), 0);
		assert_int_equal(ftruncate(f->pack_fd, 0), 0);
		write_tar(f->tar_fd, comps[i], rich, sizeof(rich) / sizeof(rich[0]));
		assert_int_equal(unpack(f, comps[i], NULL), 0);
		check_rich(f);
	}
}

static void test_unpack_sparse(void **state)
{
	struct fixture *f = *state;
	/* 1 MiB apparent, 4 KiB of data in the middle, a trailing hole */
	const struct member m[] = {
		{ .path = "a", .data = "A", .size = 1 },
		{ .path = "sparse", .size = 1 << 20, .sparse_off = 65536, .sparse_len = 4096 },
	};
	const struct layer_entry *e;
	char buf[16];
	struct stat st;

	write_tar(f->tar_fd, LAYER_UNCOMPRESSED, m, 2);
	assert_int_equal(unpack(f, LAYER_UNCOMPRESSED, NULL), 0);
	e = find(f->li, "sparse", LAYER_ENTRY_REG);
	assert_int_equal(e->size, 1 << 20);
	assert_int_equal(e->data_off, 1);
	assert_int_equal(f->li->data_size, 1 + (1 << 20));
	assert_int_equal(fstat(f->pack_fd, &st), 0);
	assert_int_equal(st.st_size, 1 + (1 << 20));
	/* the holes were not written out */
	assert_true((uint64_t)st.st_blocks * 512 < (1 << 19));
	assert_int_equal(pread(f->pack_fd, buf, sizeof(buf), (off_t)(e->data_off + (1 << 20) - 16)),
			 16);
	for (size_t i = 0; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0);
}

static void test_unpack_empty_layer(void **state)
{
	struct fixture *f = *state;

	write_tar(f->tar_fd, LAYER_GZIP, NULL, 0);
	assert_int_equal(unpack(f, LAYER_GZIP, NULL), 0);
	assert_int_equal(f->li->n_entries, 0);
	assert_int_equal(f->li->data_size, 0);
}

struct hostile {
	const char *what;
	struct member m[3];
	size_t n;
	const char *reason; /* substring of the error */
};

static const struct hostile hostile[] = {
	{ "dotdot", { { .path = "../x", .data = "x", .size = 1 } }, 1, "bad entry" },
	{ "absolute dotdot",
	  { { .path = "/../etc/passwd", .data = "x", .size = 1 } },
	  1,
	  "bad entry" },
	{ "inner dotdot", { { .path = "a/../../b", .data = "x", .size = 1 } }, 1, "bad entry" },
	{ "inner dot", { { .path = "a/./b", .data = "x", .size = 1 } }, 1, "bad entry" },
	{ "double slash", { { .path = "a//b", .data = "x", .size = 1 } }, 1, "bad entry" },
	{ "hardlink dotdot",
	  { { .path = "x", .data = "x", .size = 1 }, { .path = "y", .hardlink = "../x" } },
	  2,
	  "bad entry" },
	{ "hardlink unseen",
	  { { .path = "y", .hardlink = "later" }, { .path = "later", .data = "x", .size = 1 } },
	  2,
	  "hardlink" },
	{ "hardlink to dir",
	  { { .path = "d", .type = AE_IFDIR, .mode = 0755 }, { .path = "y", .hardlink = "d" } },
	  2,
	  "hardlink" },
	{ "whiteout dot", { { .path = "a/.wh.." } }, 1, "whiteout" },
	{ "whiteout dotdot", { { .path = ".wh..." } }, 1, "whiteout" },
	{ "whiteout empty", { { .path = "a/.wh." } }, 1, "whiteout" },
	{ "root as file", { { .path = ".", .data = "x", .size = 1 } }, 1, "root" },
	{ "duplicate file",
	  { { .path = "f", .data = "1", .size = 1 }, { .path = "f", .data = "2", .size = 1 } },
	  2,
	  "more than once" },
	{ "file then dir",
	  { { .path = "f", .data = "1", .size = 1 },
	    { .path = "f", .type = AE_IFDIR, .mode = 0755 } },
	  2,
	  "more than once" },
	{ "dir then symlink",
	  { { .path = "d", .type = AE_IFDIR, .mode = 0755 },
	    { .path = "d", .type = AE_IFLNK, .link = "/etc" } },
	  2,
	  "more than once" },
	{ "write through symlink",
	  { { .path = "a", .type = AE_IFLNK, .link = "/tmp" },
	    { .path = "a/x", .data = "x", .size = 1 } },
	  2,
	  "below \"a\"" },
	{ "below a file",
	  { { .path = "f", .data = "1", .size = 1 }, { .path = "f/g/h", .data = "x", .size = 1 } },
	  2,
	  "below \"f\"" },
};

static void test_unpack_hostile(void **state)
{
	struct fixture *f = *state;

	for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
		const struct hostile *h = &hostile[i];

		assert_int_equal(ftruncate(f->tar_fd, 0), 0);
		assert_int_equal(ftruncate(f->pack_fd, 0), 0);
		write_tar(f->tar_fd, LAYER_UNCOMPRESSED, h->m, h->n);
		if (unpack(f, LAYER_UNCOMPRESSED, NULL) != -EBADMSG || !strstr(f->err, h->reason)) {
			fprintf(stderr, "case \"%s\": \"%s\"\n", h->what, f->err);
			fail();
		}
		assert_null(f->li);
	}
}

static void test_unpack_limits(void **state)
{
	struct fixture *f = *state;
	const struct member m[] = {
		{ .path = "a", .data = "aaaa", .size = 4 },
		{ .path = "b", .data = "bbbb", .size = 4 },
		{ .path = "c/d/e", .data = "c", .size = 1 },
	};
	struct layer_limits lim = { 0 };

	write_tar(f->tar_fd, LAYER_UNCOMPRESSED, m, 3);
	assert_int_equal(unpack(f, LAYER_UNCOMPRESSED, NULL), 0);

	lim = (struct layer_limits){ .max_entries = 2 };
	assert_int_equal(lseek(f->tar_fd, 0, SEEK_SET), 0);
	assert_int_equal(unpack(f, LAYER_UNCOMPRESSED, &lim), -EBADMSG);
	assert_string_equal(f->err, "layer: more than 2 entries");

	lim = (struct layer_limits){ .max_expanded_bytes = 8 };
	assert_int_equal(lseek(f->tar_fd, 0, SEEK_SET), 0);
	assert_int_equal(unpack(f, LAYER_UNCOMPRESSED, &lim), -EBADMSG);
	assert_non_null(strstr(f->err, "more than 8 bytes"));

	lim = (struct layer_limits){ .max_path = 4 };
	assert_int_equal(lseek(f->tar_fd, 0, SEEK_SET), 0);
	assert_int_equal(unpack(f, LAYER_UNCOMPRESSED, &lim), -EBADMSG);
	assert_non_null(strstr(f->err, "longer than 4"));

	lim = (struct layer_limits){ .max_entries = 3, .max_expanded_bytes = 9, .max_path = 5 };
	assert_int_equal(lseek(f->tar_fd, 0, SEEK_SET), 0);
	assert_int_equal(unpack(f, LAYER_UNCOMPRESSED, &lim), 0);
}

static void test_unpack_corrupt(void **state)
{
	struct fixture *f = *state;
	struct member m[] = {
		{ .path = "big", .size = 200000 },
		{ .path = "small", .data = "s", .size = 1 },
	};
	char *big = malloc(200000);
	struct stat st;
	unsigned char *buf;

	assert_non_null(big);
	/* incompressible so that a flipped byte lands in real data */
	for (size_t i = 0; i < 200000; i++)
		big[i] = (char)(rand() & 0xff);
	m[0].data = big;

	/* corrupt gzip */
	write_tar(f->tar_fd, LAYER_GZIP, m, 2);
	assert_int_equal(fstat(f->tar_fd, &st), 0);
	buf = malloc((size_t)st.st_size);
	assert_non_null(buf);
	assert_int_equal(pread(f->tar_fd, buf, (size_t)st.st_size, 0), st.st_size);
	for (off_t i = st.st_size / 2; i < st.st_size / 2 + 64; i++)
		buf[i] ^= 0x5a;
	assert_int_equal(pwrite(f->tar_fd, buf, (size_t)st.st_size, 0), st.st_size);
	assert_int_equal(unpack(f, LAYER_GZIP, NULL), -EBADMSG);
	assert_true(f->err[0] != '\0');

	/* garbage that is not gzip at all */
	assert_int_equal(ftruncate(f->tar_fd, 0), 0);
	assert_int_equal(pwrite(f->tar_fd, "\x1f\x8b\x08garbage!", 11, 0), 11);
	assert_int_equal(unpack(f, LAYER_GZIP, NULL), -EBADMSG);

	/* truncated tar, uncompressed and zstd */
	for (int z = 0; z < 2; z++) {
		enum layer_compression c = z ? LAYER_ZSTD : LAYER_UNCOMPRESSED;

		assert_int_equal(ftruncate(f->tar_fd, 0), 0);
		assert_int_equal(ftruncate(f->pack_fd, 0), 0);
		write_tar(f->tar_fd, c, m, 2);
		assert_int_equal(fstat(f->tar_fd, &st), 0);
		assert_int_equal(ftruncate(f->tar_fd, st.st_size / 2), 0);
		assert_int_equal(unpack(f, c, NULL), -EBADMSG);
		assert_true(f->err[0] != '\0');
	}

	/* zstd bytes announced as gzip */
	assert_int_equal(ftruncate(f->tar_fd, 0), 0);
	write_tar(f->tar_fd, LAYER_ZSTD, m + 1, 1);
	assert_int_equal(unpack(f, LAYER_GZIP, NULL), -EBADMSG);

	free(buf);
	free(big);
}

/* ---- index file ------------------------------------------------------- */

static void assert_same_index(const struct layer_index *a, const struct layer_index *b)
{
	assert_int_equal(a->n_entries, b->n_entries);
	assert_int_equal(a->data_size, b->data_size);
	for (size_t i = 0; i < a->n_entries; i++) {
		const struct layer_entry *x = &a->entries[i], *y = &b->entries[i];

		assert_string_equal(x->path, y->path);
		assert_int_equal(x->type, y->type);
		assert_int_equal(x->mode, y->mode);
		assert_int_equal(x->uid, y->uid);
		assert_int_equal(x->gid, y->gid);
		assert_int_equal(x->mtime_sec, y->mtime_sec);
		assert_int_equal(x->mtime_nsec, y->mtime_nsec);
		assert_int_equal(x->size, y->size);
		assert_int_equal(x->data_off, y->data_off);
		assert_int_equal(x->rdev, y->rdev);
		if (x->link)
			assert_string_equal(x->link, y->link);
		else
			assert_null(y->link);
		if (x->object)
			assert_string_equal(x->object, y->object);
		else
			assert_null(y->object);
		assert_int_equal(x->n_xattrs, y->n_xattrs);
		for (uint32_t j = 0; j < x->n_xattrs; j++) {
			assert_string_equal(x->xattrs[j].name, y->xattrs[j].name);
			assert_int_equal(x->xattrs[j].size, y->xattrs[j].size);
			assert_memory_equal(x->xattrs[j].value, y->xattrs[j].value,
					    x->xattrs[j].size);
		}
	}
}

static size_t write_index(struct fixture *f, int fd, unsigned char **ret)
{
	struct stat st;
	unsigned char *buf;

	write_tar(f->tar_fd, LAYER_UNCOMPRESSED, rich, sizeof(rich) / sizeof(rich[0]));
	assert_int_equal(unpack(f, LAYER_UNCOMPRESSED, NULL), 0);
	assert_int_equal(layer_index_write(f->li, fd), 0);
	assert_int_equal(fstat(fd, &st), 0);
	buf = malloc((size_t)st.st_size);
	assert_non_null(buf);
	assert_int_equal(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	*ret = buf;
	return (size_t)st.st_size;
}

static void test_index_round_trip(void **state)
{
	struct fixture *f = *state;
	struct layer_index *back = NULL, empty = { 0 };
	unsigned char *buf;
	int fd = memfd("idx");

	(void)write_index(f, fd, &buf);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	assert_int_equal(layer_index_read(fd, &back), 0);
	assert_same_index(f->li, back);
	layer_index_free(back);
	free(buf);

	/* an empty layer */
	assert_int_equal(ftruncate(fd, 0), 0);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	assert_int_equal(layer_index_write(&empty, fd), 0);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	back = NULL;
	assert_int_equal(layer_index_read(fd, &back), 0);
	assert_int_equal(back->n_entries, 0);
	layer_index_free(back);
	layer_index_free(NULL);
	close(fd);
}

/* Entries with names shorter than four bytes make an index smaller than
 * a too generous "smallest entry" bound would allow. */
static void test_index_short_names(void **state)
{
	struct layer_entry e[] = {
		{ .path = (char *)"", .type = LAYER_ENTRY_DIR, .mode = 0755 },
		{ .path = (char *)"a", .type = LAYER_ENTRY_REG, .mode = 0644 },
		{ .path = (char *)"b", .type = LAYER_ENTRY_DIR, .mode = 0755 },
		{ .path = (char *)"b/c", .type = LAYER_ENTRY_FIFO, .mode = 0600 },
	};
	struct layer_index li = { .entries = e, .n_entries = 4 };
	struct layer_index *back = NULL;
	int fd = memfd("idx");

	(void)state;
	assert_int_equal(layer_index_write(&li, fd), 0);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	assert_int_equal(layer_index_read(fd, &back), 0);
	assert_same_index(&li, back);
	layer_index_free(back);
	close(fd);
}

static int read_bytes(const unsigned char *buf, size_t len, struct layer_index **ret)
{
	int fd = memfd("idx");
	int r;

	if (len)
		assert_int_equal(write(fd, buf, len), (ssize_t)len);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	r = layer_index_read(fd, ret);
	close(fd);
	return r;
}

static void test_index_corrupt(void **state)
{
	struct fixture *f = *state;
	struct layer_index *back = NULL;
	unsigned char *buf;
	int fd = memfd("idx");
	size_t len = write_index(f, fd, &buf);

	close(fd);
	assert_int_equal(read_bytes(buf, len, &back), 0);
	layer_index_free(back);

	/* every single flipped byte, every truncation */
	for (size_t i = 0; i < len; i++) {
		back = NULL;
		buf[i] ^= 0x10;
		assert_int_equal(read_bytes(buf, len, &back), -EBADMSG);
		assert_null(back);
		buf[i] ^= 0x10;
	}
	for (size_t cut = 0; cut < len; cut += 7) {
		back = NULL;
		assert_int_equal(read_bytes(buf, cut, &back), -EBADMSG);
		assert_null(back);
	}
	free(buf);
}

/* A correct checksum over bad content: the parser must still refuse. */
static void test_index_hostile_content(void **state)
{
	static const unsigned char head[] = "PFSLIDX1";
	unsigned char buf[256];
	struct layer_index *back = NULL;
	size_t len = 0;
	uint32_t crc;

#define PUT32(v)                                                                 \
	do {                                                                     \
		for (int k_ = 0; k_ < 4; k_++)                                   \
			buf[len++] = (unsigned char)((uint32_t)(v) >> (8 * k_)); \
	} while (0)
#define PUT64(v)                                                                 \
	do {                                                                     \
		for (int k_ = 0; k_ < 8; k_++)                                   \
			buf[len++] = (unsigned char)((uint64_t)(v) >> (8 * k_)); \
	} while (0)

	memcpy(buf, head, 8);
	len = 8;
	PUT32(1);
	PUT32(0);
	PUT64(UINT64_C(1) << 60); /* absurd entry count */
	PUT64(0);
	crc = (uint32_t)crc32(0L, buf, (uInt)len);
	PUT32(crc);
	assert_int_equal(read_bytes(buf, len, &back), -EBADMSG);

	/* one entry whose path is "../x" */
	len = 8;
	PUT32(1);
	PUT32(0);
	PUT64(1);
	PUT64(0);
	buf[len++] = LAYER_ENTRY_DIR;
	PUT32(0755);
	PUT32(0);
	PUT32(0);
	PUT64(0);
	PUT32(0);
	PUT64(0);
	PUT64(0);
	PUT64(0);
	PUT32(4);
	memcpy(buf + len, "../x", 4);
	len += 4;
	PUT32(UINT32_MAX);
	PUT32(0);
	crc = (uint32_t)crc32(0L, buf, (uInt)len);
	PUT32(crc);
	assert_int_equal(read_bytes(buf, len, &back), -EBADMSG);

	/* the same with a good path parses */
	memcpy(buf + len - 4 - 4 - 4 - 4, "ok/x", 4);
	len -= 4;
	crc = (uint32_t)crc32(0L, buf, (uInt)len);
	PUT32(crc);
	assert_int_equal(read_bytes(buf, len, &back), 0);
	assert_string_equal(back->entries[0].path, "ok/x");
	layer_index_free(back);
#undef PUT32
#undef PUT64
}

/* Files at the size threshold and above become objects named by their
 * digest; smaller ones stay in the pack; holes stay holes; identical
 * content is one name; the index keeps the object names. */
static void test_unpack_objects(void **state)
{
	struct fixture *f = *state;
	char dir[] = "/tmp/test-layer-objects.XXXXXX";
	static char big[20000];
	const struct member m[] = {
		{ .path = "small", .data = "tiny", .size = 4 },
		{ .path = "big", .data = big, .size = sizeof(big) },
		{ .path = "again", .data = big, .size = sizeof(big) },
		{ .path = "link", .hardlink = "big" },
		{ .path = "sparse", .size = 1 << 20, .sparse_off = 65536, .sparse_len = 4096 },
	};
	struct layer_objects objs = { .min_size = 16384 };
	const struct layer_entry *e, *g;
	struct layer_index *back = NULL;
	char name[80], cmd[128];
	struct stat st;
	int fd, idx;

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)(i * 7);
	assert_non_null(mkdtemp(dir));
	objs.dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(objs.dirfd >= 0);
	write_tar(f->tar_fd, LAYER_UNCOMPRESSED, m, sizeof(m) / sizeof(m[0]));
	f->err[0] = '\0';
	assert_int_equal(layer_unpack(f->tar_fd, LAYER_UNCOMPRESSED, f->pack_fd, &objs, NULL,
				      &f->li, f->err, sizeof(f->err)),
			 0);
	/* the small file alone is in the pack */
	assert_int_equal(f->li->data_size, 4);
	assert_null(find(f->li, "small", LAYER_ENTRY_REG)->object);
	e = find(f->li, "big", LAYER_ENTRY_REG);
	g = find(f->li, "again", LAYER_ENTRY_REG);
	assert_non_null(e->object);
	assert_string_equal(e->object, g->object);
	/* named by the SHA-256 of the content, as sha256sum computes it */
	{
		FILE *p;
		char line[128];

		snprintf(cmd, sizeof(cmd), "sha256sum %s/o.%s", dir, e->object);
		p = popen(cmd, "r");
		assert_non_null(p);
		assert_non_null(fgets(line, sizeof(line), p));
		pclose(p);
		line[64] = '\0';
		assert_string_equal(line, e->object);
	}
	snprintf(name, sizeof(name), "o.%s", e->object);
	fd = openat(objs.dirfd, name, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, sizeof(big));
	close(fd);
	/* the sparse file: its own object, holes kept */
	e = find(f->li, "sparse", LAYER_ENTRY_REG);
	assert_non_null(e->object);
	snprintf(name, sizeof(name), "o.%s", e->object);
	assert_int_equal(fstatat(objs.dirfd, name, &st, 0), 0);
	assert_int_equal(st.st_size, 1 << 20);
	assert_true((uint64_t)st.st_blocks * 512 < (1 << 19));
	/* two objects, no temporary file left */
	snprintf(cmd, sizeof(cmd), "test $(ls %s | wc -l) = 2", dir);
	assert_int_equal(system(cmd), 0);
	/* the object names survive the index file */
	idx = memfd("idx");
	assert_int_equal(layer_index_write(f->li, idx), 0);
	assert_int_equal(lseek(idx, 0, SEEK_SET), 0);
	assert_int_equal(layer_index_read(idx, &back), 0);
	assert_same_index(f->li, back);
	layer_index_free(back);
	close(idx);
	close(objs.dirfd);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_unpack_rich, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unpack_absolute_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unpack_missing_padding, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unpack_objects, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unpack_sparse, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unpack_empty_layer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unpack_hostile, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unpack_limits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unpack_corrupt, setup, teardown),
		cmocka_unit_test_setup_teardown(test_index_round_trip, setup, teardown),
		cmocka_unit_test(test_index_short_names),
		cmocka_unit_test_setup_teardown(test_index_corrupt, setup, teardown),
		cmocka_unit_test_setup_teardown(test_index_hostile_content, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Layers: one tar stream (uncompressed, gzip or zstd) read through
 * libarchive into a data pack (the bytes of the small regular files,
 * appended to one file), objects (each larger regular file in a file of
 * its own, struct layer_objects) and an index of entries (path, type,
 * metadata, where the data is).  Tar names are only ever strings here:
 * nothing is created on the host filesystem from them, so "..", absolute
 * names and symlink tricks have nothing to escape through. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "manifest.h" /* enum layer_compression */

enum layer_entry_type {
	LAYER_ENTRY_REG,
	LAYER_ENTRY_DIR,
	LAYER_ENTRY_SYMLINK,
	LAYER_ENTRY_HARDLINK, /* `link` is the path of the earlier entry */
	LAYER_ENTRY_CHR,
	LAYER_ENTRY_BLK,
	LAYER_ENTRY_FIFO,
	LAYER_ENTRY_SOCK,
	LAYER_ENTRY_WHITEOUT, /* ".wh.NAME": `path` is the removed path */
	LAYER_ENTRY_OPAQUE,   /* ".wh..wh..opq": `path` is the opaque directory */
};

struct layer_xattr {
	char *name;
	void *value;
	uint32_t size;
};

struct layer_entry {
	/* Normalised relative path: no leading "/" or "./", no trailing "/",
	 * no "." or ".." components, no empty components; "" is the root. */
	char *path;
	uint8_t type;  /* enum layer_entry_type */
	uint32_t mode; /* permission bits including setuid/setgid/sticky (07777) */
	uint32_t uid, gid;
	int64_t mtime_sec;
	uint32_t mtime_nsec;
	uint64_t size;	   /* regular files: apparent size */
	uint64_t data_off; /* regular files: offset of the content in the pack */
	/* Regular files stored as objects of their own (struct
	 * layer_objects): the lowercase hex SHA-256 of the content, and
	 * data_off is 0.  NULL: the content is in the pack. */
	char *object;
	uint64_t rdev; /* devices: makedev(major, minor) */
	char *link;    /* symlink target (verbatim) or hardlink target path */
	struct layer_xattr *xattrs;
	uint32_t n_xattrs;
};

struct layer_index {
	struct layer_entry *entries; /* in tar order */
	size_t n_entries;
	uint64_t data_size; /* bytes in the pack */
};

struct layer_limits {
	uint64_t max_entries;	     /* 0: 1,000,000 */
	uint64_t max_expanded_bytes; /* total regular file bytes; 0: 64 GiB */
	uint32_t max_path;	     /* bytes in a path; 0: 4096 */
	/* what more than max_entries fails with: 0 is -EBADMSG (a layer
	 * that breaks the format's limit); the caller's budget of entries
	 * per image passes -EFBIG */
	int entries_err;
};

/* Where regular files of at least min_size bytes go instead of the pack:
 * each becomes a file of its own in dirfd called "o." followed by the hex
 * SHA-256 of its content, so that identical files share one name and a
 * file can back a FUSE passthrough open (its offsets are the file's).
 * min_size 0 puts every non-empty regular file there. */
struct layer_objects {
	int dirfd;
	uint64_t min_size;
	/* an eStargz layer pulled whole: its table of contents and
	 * landmark files are left out, as a lazy pull leaves them */
	bool drop_estargz_own;
};

/* Reads the layer tar stream from in_fd (read from its current offset to
 * the end), decompressing per c, appends file contents to data_fd (which
 * must be empty; sparse files keep their holes), or to objects in
 * objs->dirfd when objs is not NULL, and returns the index.
 * Rejects with -EBADMSG, and a reason in errbuf: corrupt compression or
 * tar (gzip CRC and length trailers are verified; a tar that ends right
 * after its last member's data is complete), ".." components (absolute
 * names are taken inside the root), hardlinks to paths not seen earlier
 * in the layer or outside it, whiteouts of "." / ".." / the root, limits
 * exceeded.
 * -ENOSPC / -EIO from writing the pack.  aufs internals (".wh..wh.*"
 * other than the opaque marker) are dropped; an xattr given twice keeps
 * its last value.  Blocks. */
int layer_unpack(int in_fd, enum layer_compression c, int data_fd, const struct layer_objects *objs,
		 const struct layer_limits *lim, struct layer_index **ret, char *errbuf,
		 size_t errlen);

/* Serialises the index to fd at its current offset (a versioned binary
 * format with a CRC32).  Does not fsync: the caller makes the file durable
 * and renames it into place.  Returns 0 or -errno. */
int layer_index_write(const struct layer_index *li, int fd);

/* Reads what layer_index_write wrote, from fd's current offset to its
 * end.  Every length and path is checked again, so a damaged cache file
 * cannot smuggle in what layer_unpack refuses.  -EBADMSG for anything
 * truncated, corrupt or of another version, -ENOMEM, -errno from read. */
int layer_index_read(int fd, struct layer_index **ret);

void layer_index_free(struct layer_index *li);

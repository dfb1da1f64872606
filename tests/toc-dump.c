/* toc-dump: what the table of contents of a lazy layer says, beside what a
 * full unpack of the same blob gives, for tests/integration/toc.sh.
 *
 *   toc-dump toc DESCRIPTOR.json BLOB [OUTDIR]
 *       reads the table as the lazy puller would (footer, digest, JSON),
 *       prints one line per entry, decompresses every chunk of every
 *       file (each checked against its digest and the file against its
 *       own) and writes each file's content to OUTDIR/o.<sha256>.
 *   toc-dump chunks DESCRIPTOR.json BLOB
 *       the same checks, printing instead one line per chunk: the file's
 *       path, the chunk's offset and size in the file.
 *   toc-dump unpack DESCRIPTOR.json BLOB OUTDIR
 *       layer_unpack() of the whole blob, every file an object in OUTDIR,
 *       the entries printed the same way.
 *
 * DESCRIPTOR.json is the layer's descriptor from the manifest (media
 * type, digest, size, annotations).  Exit 0 on success, 1 with a message
 * on stderr for anything refused. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "digest.h"
#include "fileio.h"
#include "layer.h"
#include "macro.h"
#include "manifest.h"
#include "toc.h"

static int die(const char *what, int r, const char *err)
{
	fprintf(stderr, "toc-dump: %s: %s%s%s\n", what, strerror(-r), err && err[0] ? ": " : "",
		err ? err : "");
	return 1;
}

static char *read_all(const char *path, size_t *ret_len)
{
	FILE *f = fopen(path, "rbe");
	char *buf = NULL;
	size_t len = 0, cap = 0;

	if (!f)
		return NULL;
	for (;;) {
		size_t n;

		if (len + 4096 > cap) {
			char *nb = realloc(buf, cap = cap * 2 + 65536);

			if (!nb) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = nb;
		}
		n = fread(buf + len, 1, cap - len, f);
		if (n == 0)
			break;
		len += n;
	}
	fclose(f);
	*ret_len = len;
	return buf;
}

/* The descriptor, through the manifest parser: a one-layer manifest. */
static int load_descriptor(const char *path, struct manifest **ret)
{
	static const char head[] =
		"{\"schemaVersion\":2,\"mediaType\":\"" MEDIA_OCI_MANIFEST
		"\",\"config\":{\"mediaType\":\"" MEDIA_OCI_CONFIG "\",\"digest\":\"sha256:"
		"0000000000000000000000000000000000000000000000000000000000000000"
		"\",\"size\":1},\"layers\":[";
	_cleanup_free_ char *desc = NULL, *doc = NULL;
	char err[512];
	size_t len;
	int r;

	desc = read_all(path, &len);
	if (!desc)
		return die(path, negative_errno(), NULL);
	doc = malloc(sizeof(head) + len + 3);
	if (!doc)
		return die(path, -ENOMEM, NULL);
	memcpy(doc, head, sizeof(head) - 1);
	memcpy(doc + sizeof(head) - 1, desc, len);
	memcpy(doc + sizeof(head) - 1 + len, "]}", 3);
	r = manifest_parse(doc, strlen(doc), NULL, ret, err, sizeof(err));
	if (r < 0)
		return die(path, r, err);
	return 0;
}

/* The xattr with the least name after last. */
static const struct layer_xattr *next_xattr(const struct layer_entry *e, const char *last)
{
	const struct layer_xattr *best = NULL;

	for (uint32_t i = 0; i < e->n_xattrs; i++)
		if (strcmp(e->xattrs[i].name, last) > 0 &&
		    (!best || strcmp(e->xattrs[i].name, best->name) < 0))
			best = &e->xattrs[i];
	return best;
}

static void print_entry(const struct layer_entry *e)
{
	const struct layer_xattr *x;
	static const char *const types[] = {
		"reg",	 "dir",	 "symlink", "hardlink", "char",
		"block", "fifo", "sock",    "whiteout", "opaque",
	};

	printf("%s\t%s\t%04o\t%" PRIu32 ":%" PRIu32 "\t%" PRId64 ".%09" PRIu32 "\t%" PRIu64
	       "\t%u:%u\t%s\t%s\t",
	       e->path, types[e->type], e->mode, e->uid, e->gid, e->mtime_sec, e->mtime_nsec,
	       e->size, major(e->rdev), minor(e->rdev), e->link ? e->link : "-",
	       e->object ? e->object : "-");
	/* in name order: a tar and a JSON map need not agree on theirs */
	for (const char *last = ""; (x = next_xattr(e, last)); last = x->name) {
		const unsigned char *v = x->value;

		printf("%s%s=", last[0] ? "," : "", x->name);
		for (uint32_t k = 0; k < x->size; k++)
			printf("%02x", v[k]);
	}
	printf("\n");
}

static int write_object(const char *outdir, const char *hex, const void *buf, uint64_t size)
{
	char path[4096];
	int fd, r;

	snprintf(path, sizeof(path), "%s/o.%s", outdir, hex);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);
	if (fd < 0)
		return negative_errno();
	r = write_full(fd, buf, (size_t)size);
	close(fd);
	return r;
}

/* Every chunk of every file out of the blob, each file checked against
 * its own digest as well. */
static bool print_chunks;

static int check_content(const struct toc *t, const unsigned char *blob, const char *outdir,
			 unsigned *ret_chunks)
{
	char err[512];

	for (size_t i = 0; i < t->index->n_entries; i++) {
		const struct layer_entry *e = &t->index->entries[i];
		const struct toc_chunk *cs;
		_cleanup_free_ unsigned char *buf = NULL;
		char digest[DIGEST_STRING_MAX];
		size_t n;
		int r;

		cs = toc_entry_chunks(t, i, &n);
		if (e->type != LAYER_ENTRY_REG || e->size == 0) {
			if (n != 0)
				return die(e->path, -EBADMSG, "chunks of no file");
			continue;
		}
		buf = malloc(e->size);
		if (!buf)
			return die(e->path, -ENOMEM, NULL);
		for (size_t k = 0; k < n; k++) {
			r = toc_chunk_decompress(t->format, &cs[k], blob + cs[k].blob_offset,
						 cs[k].blob_length, buf + cs[k].offset, err,
						 sizeof(err));
			if (r < 0)
				return die(e->path, r, err);
			if (!cs[k].digest[0])
				return die(e->path, -EBADMSG, "chunk without digest");
			if (print_chunks)
				printf("%s\t%" PRIu64 "\t%" PRIu64 "\n", e->path, cs[k].offset,
				       cs[k].size);
			(*ret_chunks)++;
		}
		if (digest_buffer(buf, e->size, digest) < 0)
			return die(e->path, -ENOMEM, NULL);
		if (!e->object || strcmp(e->object, digest_hex(digest)) != 0)
			return die(e->path, -EBADMSG, "content digest differs");
		if (outdir) {
			r = write_object(outdir, e->object, buf, e->size);
			if (r < 0)
				return die(outdir, r, NULL);
		}
	}
	return 0;
}

static int cmd_toc(const struct toc_layer *tl, const unsigned char *blob, size_t blob_len,
		   const char *outdir)
{
	size_t tail = MIN(blob_len, (size_t)TOC_TAIL_BYTES);
	struct toc_range where;
	struct toc *t = NULL;
	unsigned chunks = 0;
	char err[512];
	int r;

	r = toc_locate(tl, blob + blob_len - tail, tail, &where, err, sizeof(err));
	if (r < 0)
		return die("locate", r, err);
	r = toc_parse(tl, &where, blob + where.offset, where.length, NULL, &t, err, sizeof(err));
	if (r < 0)
		return die("parse", r, err);
	for (size_t i = 0; i < t->index->n_entries && !print_chunks; i++)
		print_entry(&t->index->entries[i]);
	r = check_content(t, blob, outdir, &chunks);
	fprintf(stderr,
		"toc-dump: %s table of %" PRIu64 " bytes at %" PRIu64
		", %zu entries, %u chunks decompressed and verified, "
		"prefetch up to %" PRIu64 "\n",
		tl->format == TOC_ESTARGZ ? "eStargz" : "zstd:chunked", where.length, where.offset,
		t->index->n_entries, chunks, t->prefetch_end);
	toc_free(t);
	return r;
}

static int cmd_unpack(const struct descriptor *d, const char *blob_path, const char *outdir)
{
	struct layer_objects objs = { .min_size = 0 };
	struct layer_index *li = NULL;
	enum layer_compression c;
	char err[512];
	int in, pack, r;

	r = layer_media_type_compression(d->media_type, &c);
	if (r < 0)
		return die(d->media_type, r, NULL);
	in = open(blob_path, O_RDONLY | O_CLOEXEC);
	pack = memfd_create("toc-dump-pack", MFD_CLOEXEC);
	objs.dirfd = open(outdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (in < 0 || pack < 0 || objs.dirfd < 0)
		return die(blob_path, negative_errno(), NULL);
	r = layer_unpack(in, c, pack, &objs, NULL, &li, err, sizeof(err));
	close(in);
	close(pack);
	close(objs.dirfd);
	if (r < 0)
		return die("unpack", r, err);
	for (size_t i = 0; i < li->n_entries; i++)
		print_entry(&li->entries[i]);
	layer_index_free(li);
	return 0;
}

int main(int argc, char **argv)
{
	struct manifest *m = NULL;
	struct toc_layer tl;
	unsigned char *blob;
	struct stat st;
	char err[512];
	int fd, r;

	if (argc < 4 || argc > 5 ||
	    (strcmp(argv[1], "toc") != 0 && strcmp(argv[1], "unpack") != 0 &&
	     strcmp(argv[1], "chunks") != 0) ||
	    (strcmp(argv[1], "unpack") == 0 && argc != 5)) {
		fprintf(stderr, "usage: toc-dump toc DESCRIPTOR.json BLOB [OUTDIR]\n"
				"       toc-dump chunks DESCRIPTOR.json BLOB\n"
				"       toc-dump unpack DESCRIPTOR.json BLOB OUTDIR\n");
		return 2;
	}
	if (load_descriptor(argv[2], &m) != 0)
		return 1;
	print_chunks = strcmp(argv[1], "chunks") == 0;
	if (strcmp(argv[1], "unpack") == 0) {
		r = cmd_unpack(&m->layers[0], argv[3], argv[4]);
		manifest_free(m);
		return r;
	}

	r = toc_layer_from_descriptor(&m->layers[0], &tl, err, sizeof(err));
	manifest_free(m);
	if (r < 0)
		return die("descriptor", r, err);
	if (tl.format == TOC_NONE)
		return die("descriptor", -ENOTSUP, "not a lazy layer");
	fd = open(argv[3], O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0)
		return die(argv[3], negative_errno(), NULL);
	if ((uint64_t)st.st_size != tl.blob_size || st.st_size == 0)
		return die(argv[3], -EBADMSG, "not the size the descriptor says");
	blob = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (blob == MAP_FAILED)
		return die(argv[3], negative_errno(), NULL);
	r = cmd_toc(&tl, blob, (size_t)st.st_size, argc == 5 ? argv[4] : NULL);
	munmap(blob, (size_t)st.st_size);
	return r;
}

/* Inflating gzip layers for libarchive; see gzsrc.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gzsrc.h"
#include "macro.h"

void gzsrc_free(struct gzsrc *g)
{
#if HAVE_ISAL
	free(g->st);
#else
	if (g->z_ready)
		inflateEnd(&g->z);
#endif
	free(g->in);
	free(g->out);
}

int gzsrc_init(struct gzsrc *g, int fd)
{
	*g = (struct gzsrc){ .fd = fd };
	g->in = malloc(GZSRC_BLOCK);
	g->out = malloc(GZSRC_BLOCK);
	if (!g->in || !g->out)
		return -ENOMEM;
#if HAVE_ISAL
	g->st = malloc(sizeof(*g->st));
	if (!g->st)
		return -ENOMEM;
	isal_inflate_init(g->st);
	g->st->crc_flag = ISAL_GZIP; /* header parsed, CRC and size checked */
#else
	/* 16 + MAX_WBITS: gzip wrapper only, trailers verified */
	if (inflateInit2(&g->z, 16 + MAX_WBITS) != Z_OK)
		return -ENOMEM;
	g->z_ready = true;
#endif
	return 0;
}

/* Reads more compressed input when all of it was consumed. */
static int gzsrc_fill(struct archive *a, struct gzsrc *g)
{
	ssize_t n;

	do
		n = read(g->fd, g->in, GZSRC_BLOCK);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		archive_set_error(a, errno, "reading the layer: %s", strerror(errno));
		return -1;
	}
	if (n == 0)
		g->in_eof = true;
	g->next_in = g->in;
	g->in_len = (size_t)n;
	return 0;
}

#if HAVE_ISAL
static const char *isal_error(int r)
{
	switch (r) {
	case ISAL_INCORRECT_CHECKSUM:
		return "CRC or length trailer does not match";
	case ISAL_INVALID_WRAPPER:
		return "not a gzip stream";
	case ISAL_UNSUPPORTED_METHOD:
		return "unsupported compression method";
	default:
		return "corrupt deflate data";
	}
}

/* One step of inflating: 0 and *produced, 1 at the end of a member,
 * -1 with the archive error set. */
static int gz_step(struct archive *a, struct gzsrc *g, size_t *produced)
{
	struct inflate_state *st = g->st;
	int r;

	st->next_in = (uint8_t *)g->next_in;
	st->avail_in = (uint32_t)g->in_len;
	st->next_out = g->out;
	st->avail_out = GZSRC_BLOCK;
	r = isal_inflate(st);
	g->in_len = st->avail_in;
	g->next_in = st->next_in;
	*produced = GZSRC_BLOCK - st->avail_out;
	if (r < 0) {
		archive_set_error(a, EILSEQ, "gzip: %s", isal_error(r));
		return -1;
	}
	return st->block_state == ISAL_BLOCK_FINISH ? 1 : 0;
}

static void gz_next_member(struct gzsrc *g)
{
	isal_inflate_reset(g->st);
	g->st->crc_flag = ISAL_GZIP;
}
#else
static int gz_step(struct archive *a, struct gzsrc *g, size_t *produced)
{
	int r;

	g->z.next_in = (Bytef *)g->next_in;
	g->z.avail_in = (uInt)g->in_len;
	g->z.next_out = g->out;
	g->z.avail_out = GZSRC_BLOCK;
	r = inflate(&g->z, Z_NO_FLUSH);
	g->in_len = g->z.avail_in;
	g->next_in = g->z.next_in;
	*produced = GZSRC_BLOCK - g->z.avail_out;
	if (r == Z_STREAM_END)
		return 1;
	if (r != Z_OK && r != Z_BUF_ERROR) {
		archive_set_error(a, EILSEQ, "gzip: %s", g->z.msg ? g->z.msg : "corrupt data");
		return -1;
	}
	return 0;
}

static void gz_next_member(struct gzsrc *g)
{
	inflateReset(&g->z);
}
#endif

la_ssize_t gzsrc_read(struct archive *a, void *data, const void **buf)
{
	struct gzsrc *g = data;

	for (;;) {
		size_t produced = 0;
		int r;

		if (g->done)
			return 0;
		if (g->in_len == 0 && !g->in_eof && gzsrc_fill(a, g) < 0)
			return -1;
		r = gz_step(a, g, &produced);
		if (r < 0)
			return -1;
		if (r == 1) {
			/* Concatenated members are one stream; anything else
			 * after the first member (padding) is ignored, as
			 * gzip(1) does. */
			if (g->in_len == 0 && !g->in_eof && gzsrc_fill(a, g) < 0)
				return -1;
			if (g->in_len > 0 && g->next_in[0] == 0x1f)
				gz_next_member(g);
			else
				g->done = true;
		} else if (produced == 0 && g->in_len == 0 && g->in_eof) {
			archive_set_error(a, EILSEQ, "gzip: truncated stream");
			return -1;
		}
		if (produced > 0) {
			*buf = g->out;
			return (la_ssize_t)produced;
		}
	}
}

/* libarchive's gzip filter does not check the CRC and length trailers, so
 * a damaged stored block would unpack as silently wrong bytes.  Here the
 * stream is inflated first, trailers checked, and libarchive is fed the
 * tar through a read callback.  ISA-L's igzip inflates about four times
 * faster than zlib on this machine, which is most of a cold pull's CPU;
 * zlib remains for builds without it. */
#pragma once

#include <archive.h>
#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#if HAVE_ISAL
#include <isa-l/igzip_lib.h>
#else
#include <zlib.h>
#endif

/* Bytes read from the fd and handed to libarchive per call: large blocks
 * mean few reads from a pipe. */
#define GZSRC_BLOCK (1u << 20)

struct gzsrc {
	int fd;
#if HAVE_ISAL
	struct inflate_state *st;
#else
	z_stream z;
	bool z_ready;
#endif
	bool in_eof;
	bool done;
	unsigned char *in, *out;
	size_t in_len; /* valid bytes at in for the next call */
	const unsigned char *next_in;
};

/* Prepares g to inflate the gzip stream read from fd: 0 or -ENOMEM. */
int gzsrc_init(struct gzsrc *g, int fd);
/* Frees what gzsrc_init allocated; safe on a zeroed or half-made g. */
void gzsrc_free(struct gzsrc *g);
/* libarchive read callback (archive_read_open with g as client data):
 * inflated tar bytes, or -1 with the reason set on a. */
la_ssize_t gzsrc_read(struct archive *a, void *data, const void **buf);

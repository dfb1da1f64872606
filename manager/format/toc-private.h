/* What toc.c (formats: annotations, footers, compression, digests) and
 * tocjson.c (the JSON entries) share. */
#pragma once

#include <stdbool.h>

#include "layer-private.h" /* layer_fail() */
#include "toc.h"

/* Builds the toc from the verified JSON of a table of contents (json,
 * len; not NUL-terminated).  Every chunk must end at or before data_end,
 * where the table itself begins; eStargz's last gzip member ends there.
 * With files_only, what toc_keep_files() would keep is all that is ever
 * held, and the rules on paths are not checked (see toc_parse_files()). */
int toc_from_json(const struct toc_layer *tl, const char *json, size_t len, uint64_t data_end,
		  const struct layer_limits *lim, bool files_only, struct toc **ret, char *errbuf,
		  size_t errlen);

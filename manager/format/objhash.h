/* Hashing a layer's objects beside the unpacking: the unpacker hands each
 * object over once it is written, a thread of its own reads it back from
 * the page cache and hashes it, and the digests are collected at the end
 * of the layer.  The unpacker (inflate, tar, writes) is what a cold pull
 * waits for; the hashing then runs on the other core. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "digest.h"

struct objhash;

int objhash_start(struct objhash **ret);
/* Queues the object written in fd (owned by the queue from now on, closed
 * after hashing), size bytes, holes read as zeros.  Returns 0 or
 * -ENOMEM (fd closed then too). */
int objhash_add(struct objhash *q, int fd, uint64_t size);
/* Waits for every queued object and returns their hex digests in the
 * order they were queued (*ret owned by q).  Returns 0 or -EIO when one
 * could not be read back. */
int objhash_finish(struct objhash *q, char (**ret)[DIGEST_HEX_LEN + 1], size_t *ret_n);
/* Stops the thread (after what it is hashing) and frees everything. */
void objhash_free(struct objhash *q);

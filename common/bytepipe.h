/* A byte stream handed to a worker thread: the producer copies bytes in,
 * the worker consumes them in order, a piece at a time, straight from the
 * ring.  It moves work that only looks at the bytes (a digest, a parse)
 * off a thread whose own work is the bottleneck, for the cost of a copy. */
#pragma once

#include <stddef.h>

struct bytepipe;

/* Consumes len bytes of the stream (the next after the previous call's);
 * called on the worker thread only. */
typedef void (*bytepipe_fn)(void *userdata, const void *buf, size_t len);

/* A pipe of cap bytes whose worker calls fn: 0, -ENOMEM, or the error
 * pthread_create() gave. */
int bytepipe_new(size_t cap, bytepipe_fn fn, void *userdata, struct bytepipe **ret);
/* Copies buf into the stream, waiting while the ring is full. */
void bytepipe_put(struct bytepipe *p, const void *buf, size_t len);
/* Returns once the worker consumed every byte put so far: what fn wrote
 * is then the caller's to read. */
void bytepipe_settle(struct bytepipe *p);
/* Stops the worker, dropping what it has not consumed (fn is not called
 * again), and frees p; NULL is fine. */
void bytepipe_free(struct bytepipe *p);

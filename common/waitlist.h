/* A FIFO line of threads waiting for their turn at something (a pull slot,
 * a token).  The list is intrusive and each node lives on its waiter's
 * stack for as long as it waits, so joining never allocates and a waiter
 * can leave from any place in the line, not only the head.
 *
 * A struct dlist of struct dlist_node.  Not thread-safe: the lock of the
 * struct that embeds the list protects the list and every node on it.  A waiter's abandon flag is the one
 * thing set from outside that lock. */
#pragma once

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlist.h"

/* Whether a caller, on entry or woken in the line, must give up: returns
 * -ECANCELED when the owner is shutting down, or when the caller's abandon
 * flag (may be NULL) is set, which is counted in *abandoned; else 0. */
static inline int waitlist_cancelled(bool shutdown, const atomic_bool *abandon, uint64_t *abandoned)
{
	if (shutdown)
		return -ECANCELED;
	if (abandon && atomic_load(abandon)) {
		(*abandoned)++;
		return -ECANCELED;
	}
	return 0;
}

static inline bool waitlist_is_head(const struct dlist *l, const struct dlist_node *n)
{
	return l->head == n;
}

/* Takes n, which must be on l, off the list.  Returns true when n was the
 * head: the next in line, if any, is now the head and must be woken to
 * see it. */
static inline bool waitlist_remove(struct dlist *l, struct dlist_node *n)
{
	bool was_head = l->head == n;

	dlist_remove(l, n);
	return was_head;
}

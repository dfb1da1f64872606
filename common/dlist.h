/* An intrusive doubly linked list: the nodes live inside the things on
 * the list (or on a waiter's stack), so joining never allocates and a node
 * leaves from any place in O(1).  Used as FIFO lines and LRU orders.  Not
 * thread-safe: the lock of whatever embeds the list protects it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct dlist_node {
	struct dlist_node *prev, *next;
	bool linked;
};

struct dlist {
	struct dlist_node *head, *tail; /* head: oldest */
	unsigned len;
};

/* The struct of type `type` whose member `member` is node n. */
#define dlist_entry(n, type, member) ((type *)((char *)(n)-offsetof(type, member)))

static inline void dlist_push(struct dlist *l, struct dlist_node *n)
{
	n->prev = l->tail;
	n->next = NULL;
	if (l->tail)
		l->tail->next = n;
	else
		l->head = n;
	l->tail = n;
	n->linked = true;
	l->len++;
}

/* Takes n off l; nothing when n is on no list. */
static inline void dlist_remove(struct dlist *l, struct dlist_node *n)
{
	if (!n->linked)
		return;
	if (n->prev)
		n->prev->next = n->next;
	else
		l->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		l->tail = n->prev;
	n->prev = n->next = NULL;
	n->linked = false;
	l->len--;
}

/* The image roots the kernel holds as dentries, by the canonical reference
 * they were looked up as.  The manager only reports which names it
 * removed (its names_changed hook); the notifier thread (namespace.c)
 * then asks the kernel to drop those dentries, so that a removed image is
 * let go of as soon as nothing else holds it and the next lookup of the
 * name runs ensure again.  Namespace nodes evicted for their user's limit
 * (namespace.c) go the same way. */
#include "fs-private.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "strmap.h"

/* A name has a dentry per path form that reached it (a few); older ones
 * beyond this are under directories the kernel has since forgotten, so
 * they are let go of rather than kept for as long as the name lives. */
#define DENTRIES_PER_NAME 8

struct root_dentry {
	struct root_dentry *next;
	fuse_ino_t parent;
	char *reference; /* once its name is removed (dentries_gone) */
	char name[];
};

/* A dentry of parent, every field set; NULL when out of memory. */
static struct root_dentry *dentry_new(fuse_ino_t parent, const char *name)
{
	size_t len = strlen(name);
	struct root_dentry *d = malloc(sizeof(*d) + len + 1);

	if (!d)
		return NULL;
	d->next = NULL;
	d->parent = parent;
	d->reference = NULL;
	memcpy(d->name, name, len + 1);
	return d;
}

static void list_free(struct root_dentry *list)
{
	while (list) {
		struct root_dentry *d = list;

		list = d->next;
		free(d->reference);
		free(d);
	}
}

/* One dentry of reference more (+1) or fewer (-1) to invalidate.
 * notify_lock held. */
static void pending_add(struct fs *fs, const char *reference, int delta)
{
	uintptr_t n = (uintptr_t)strmap_get(fs->dentries_pending, reference);

	n += delta;
	if (n == 0)
		strmap_remove(fs->dentries_pending, reference);
	else
		(void)strmap_put(fs->dentries_pending, reference, (void *)n);
}

bool dentries_pending_locked(struct fs *fs, const char *reference)
{
	return strmap_get(fs->dentries_pending, reference) != NULL;
}

void dentries_note(struct fs *fs, const char *reference, fuse_ino_t parent, const char *name)
{
	struct root_dentry *head, *d;

	pthread_mutex_lock(&fs->notify_lock);
	head = strmap_get(fs->dentries, reference);
	for (d = head; d; d = d->next)
		if (d->parent == parent && !strcmp(d->name, name))
			goto out;
	/* Short of memory the dentry is not noted: the kernel keeps it until
	 * its entry timeout even if the name is removed. */
	d = dentry_new(parent, name);
	if (!d)
		goto out;
	d->next = head;
	if (strmap_put(fs->dentries, reference, d) < 0) {
		free(d);
		goto out;
	}
	for (unsigned i = 1; d->next; d = d->next, i++)
		if (i == DENTRIES_PER_NAME) {
			list_free(d->next);
			d->next = NULL;
			break;
		}
out:
	pthread_mutex_unlock(&fs->notify_lock);
}

void dentries_removed_locked(struct fs *fs, const char *reference)
{
	struct root_dentry *d = strmap_remove(fs->dentries, reference), *last;

	if (!d)
		return;
	for (last = d;; last = last->next) {
		/* without memory for it, the collector is not told to wait
		 * for this one */
		last->reference = strdup(reference);
		if (last->reference)
			pending_add(fs, reference, +1);
		if (!last->next)
			break;
	}
	last->next = fs->dentries_gone;
	fs->dentries_gone = d;
}

void dentries_drop(struct fs *fs, fuse_ino_t parent, const char *name)
{
	struct root_dentry *d;

	pthread_mutex_lock(&fs->notify_lock);
	/* Short of memory, or stopped for an upgrade: the node stays until
	 * the kernel lets go of it by itself. */
	if (!fs->notify_stop && (d = dentry_new(parent, name))) {
		d->next = fs->dentries_gone;
		fs->dentries_gone = d;
		fs->notify_queued++;
		pthread_cond_signal(&fs->notify_cond);
	}
	pthread_mutex_unlock(&fs->notify_lock);
}

void dentries_invalidate(struct fs *fs, struct root_dentry *list)
{
	while (list) {
		struct root_dentry *d = list;

		list = d->next;
		/* once the notifier stops, what is left is not dropped: the
		 * process is on its way out */
		pthread_mutex_lock(&fs->notify_lock);
		bool stopping = fs->notify_stop;
		pthread_mutex_unlock(&fs->notify_lock);
		if (!stopping) {
			/* A dentry the kernel dropped meanwhile is ENOENT:
			 * ignored. */
			atomic_store(&fs->notify_writing_ns, clock_mono_ns());
			fuse_lowlevel_notify_inval_entry(fs->session, d->parent, d->name,
							 strlen(d->name));
			atomic_store(&fs->notify_writing_ns, 0);
		}
		if (d->reference) {
			pthread_mutex_lock(&fs->notify_lock);
			pending_add(fs, d->reference, -1);
			pthread_mutex_unlock(&fs->notify_lock);
		}
		free(d->reference);
		free(d);
	}
}

static int free_entry(void *userdata, const char *key, void *value)
{
	list_free(value);
	return 0;
}

void dentries_free(struct fs *fs)
{
	if (fs->dentries)
		strmap_foreach(fs->dentries, free_entry, NULL);
	strmap_free(fs->dentries);
	list_free(fs->dentries_gone);
	strmap_free(fs->dentries_pending);
}

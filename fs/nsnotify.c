/* The namespace's notifier: when the manager adds or removes names, the
 * kernel's cached listings of the directories above them and the dentries
 * of removed image roots are invalidated from a thread of its own. */
#include "fs-private.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fault.h"
#include "macro.h"
#include "manager.h"
#include "strmap.h"

/* ---- invalidation of cached listings --------------------------------- */

/* The manager's names_changed hook: notes the directories above
 * reference ("", "host", "host/repo", ...) for the notifier, and the
 * dentries of a removed name.  Called with the manager's lock held.
 * When memory is short the note is lost and the kernel shows the old
 * listing until the directory's attributes time out. */
static void names_changed(void *userdata, const char *reference, bool removed)
{
	struct fs *fs = userdata;
	_cleanup_free_ char *key = strdup(reference);
	char *slash;

	pthread_mutex_lock(&fs->notify_lock);
	if (!fs->notify_stop) {
		if (removed)
			dentries_removed_locked(fs, reference);
		if (key) {
			strmap_put(fs->notify_keys, "", NULL);
			for (slash = key; (slash = strchr(slash, '/')); *slash++ = '/') {
				*slash = '\0';
				strmap_put(fs->notify_keys, key, NULL);
			}
		}
		fs->notify_queued++;
		pthread_cond_signal(&fs->notify_cond);
	}
	pthread_mutex_unlock(&fs->notify_lock);
}

/* The manager's names_pending hook (called with its lock held). */
static bool names_pending(void *userdata, const char *reference)
{
	struct fs *fs = userdata;
	bool r;

	pthread_mutex_lock(&fs->notify_lock);
	r = dentries_pending_locked(fs, reference);
	pthread_mutex_unlock(&fs->notify_lock);
	return r;
}

struct inval_batch {
	struct fs *fs;
	struct timespec now;
	fuse_ino_t *inos;
	size_t n;
};

/* Bumps the mtime of the node for key, if the kernel knows one, and
 * picks its ino.  fs.ns_lock held. */
static int inval_pick(void *userdata, const char *key, void *value)
{
	struct inval_batch *b = userdata;
	struct nsnode *n = *key ? strmap_get(b->fs->nsnodes, key) : &b->fs->images;

	if (n && n->kind == NS_DIR && !n->short_form) {
		n->mtime = b->now;
		b->inos[b->n++] = n->ino;
	}
	return 0;
}

/* The manager's times_changed hook: the images of digest have new
 * mtimes, which the kernel may hold the old ones of for a day (the
 * attribute timeout of image nodes).  Called without locks.  When memory
 * is short the note is lost and the kernel shows the old mtimes until
 * they time out. */
static void times_changed(void *userdata, const char *digest)
{
	struct fs *fs = userdata;

	pthread_mutex_lock(&fs->notify_lock);
	/* (a value that is not NULL: strmap_get() finds it) */
	if (!fs->notify_stop && strmap_put(fs->notify_times, digest, fs) == 0) {
		fs->notify_queued++;
		pthread_cond_signal(&fs->notify_cond);
	}
	pthread_mutex_unlock(&fs->notify_lock);
}

struct times_batch {
	const struct strmap *digests;
	fuse_ino_t *inos;
	size_t n, cap;
};

/* The node of every inode of img when its digest is one of the batch's.
 * With the table of keys locked, so the image and its tree stay. */
static void times_pick(void *userdata, uint32_t key, void *value)
{
	struct times_batch *b = userdata;
	struct image *img = value;
	const struct tinode *t;

	(void)key;
	if (!strmap_get(b->digests, image_digest(img)))
		return;
	for (uint32_t i = 0; (t = image_inode(img, i)); i++) {
		if (b->n == b->cap) {
			size_t cap = b->cap ? b->cap * 2 : 1024;
			fuse_ino_t *n = reallocarray(b->inos, cap, sizeof(*n));

			if (!n)
				return; /* the rest time out */
			b->inos = n;
			b->cap = cap;
		}
		b->inos[b->n++] = node_ino(img, t);
	}
}

/* Drops the kernel's attributes of every node of the images of digests
 * (the pages it caches stay: contents do not change).  From the
 * notifier's thread, without its lock. */
static void times_invalidate(struct fs *fs, const struct strmap *digests)
{
	struct times_batch b = { .digests = digests };

	if (strmap_size(digests) == 0)
		return;
	manager_images_foreach(fs->manager, times_pick, &b);
	for (size_t i = 0; i < b.n; i++) {
		atomic_store(&fs->notify_writing_ns, clock_mono_ns());
		fuse_lowlevel_notify_inval_inode(fs->session, b.inos[i], -1, 0);
		atomic_store(&fs->notify_writing_ns, 0);
	}
	free(b.inos);
}

/* PULLFS_FAULT=notify-late: a notification under way when the stop comes
 * (one that drops a dentry in images/, 300 ms after the stop).
 * fs.notify_lock held, and again on return. */
static void notify_at_stop(struct fs *fs)
{
	static const char name[] = "notify-late";

	if (!fault_armed("notify-late"))
		return;
	pthread_mutex_unlock(&fs->notify_lock);
	usleep(300000);
	atomic_store(&fs->notify_writing_ns, clock_mono_ns());
	fuse_lowlevel_notify_inval_entry(fs->session, fs->images.ino, name, sizeof(name) - 1);
	atomic_store(&fs->notify_writing_ns, 0);
	pthread_mutex_lock(&fs->notify_lock);
}

/* While restored images wait to be retired, the notifier looks at them
 * this often (takeover_retire()). */
#define RETIRE_EVERY_NS (1000 * INT64_C(1000000))

/* takeover_retire() from the notifier's thread, outside fs.notify_lock
 * (held, and again on return): it asks the kernel. */
static void retire_unlocked(struct fs *fs)
{
	pthread_mutex_unlock(&fs->notify_lock);
	takeover_retire(fs);
	pthread_mutex_lock(&fs->notify_lock);
}

void ns_notifier_wake(struct fs *fs)
{
	pthread_mutex_lock(&fs->notify_lock);
	pthread_cond_signal(&fs->notify_cond);
	pthread_mutex_unlock(&fs->notify_lock);
}

/* Sends the invalidations from a thread of its own: never from a request
 * handler, nor under a lock a request handler may wait for.  A node the
 * kernel forgets meanwhile makes an invalidation it ignores (ENOENT); the
 * restored images waiting to be retired are looked at between batches. */
static void *notifier(void *arg)
{
	struct fs *fs = arg;

	pthread_mutex_lock(&fs->notify_lock);
	for (;;) {
		while (!fs->notify_stop && fs->notify_sent == fs->notify_queued) {
			struct timespec ts = clock_real_deadline(RETIRE_EVERY_NS);

			if (!atomic_load(&fs->takeover.retire_due)) {
				pthread_cond_wait(&fs->notify_cond, &fs->notify_lock);
			} else if (pthread_cond_timedwait(&fs->notify_cond, &fs->notify_lock,
							  &ts) == ETIMEDOUT) {
				retire_unlocked(fs);
			}
		}
		if (fs->notify_stop) {
			notify_at_stop(fs);
			break;
		}
		uint64_t batch = fs->notify_queued;
		struct strmap *keys = fs->notify_keys, *fresh = strmap_new();
		if (!fresh) {
			/* Try again with the same keys later. */
			pthread_mutex_unlock(&fs->notify_lock);
			sleep(1);
			pthread_mutex_lock(&fs->notify_lock);
			continue;
		}
		fs->notify_keys = fresh;
		struct strmap *times = NULL, *fresh_times = strmap_new();
		if (fresh_times) {
			times = fs->notify_times;
			fs->notify_times = fresh_times;
		}
		struct root_dentry *gone = TAKE_PTR(fs->dentries_gone);
		pthread_mutex_unlock(&fs->notify_lock);

		struct inval_batch b = { .fs = fs };
		b.inos = calloc(strmap_size(keys), sizeof(*b.inos));
		clock_gettime(CLOCK_REALTIME, &b.now);
		if (b.inos) {
			pthread_mutex_lock(&fs->ns_lock);
			strmap_foreach(keys, inval_pick, &b);
			pthread_mutex_unlock(&fs->ns_lock);
		}
		strmap_free(keys);
		for (size_t i = 0; i < b.n; i++) {
			atomic_store(&fs->notify_writing_ns, clock_mono_ns());
			fuse_lowlevel_notify_inval_inode(fs->session, b.inos[i], 0, 0);
			atomic_store(&fs->notify_writing_ns, 0);
		}
		free(b.inos);
		if (times)
			times_invalidate(fs, times);
		strmap_free(times);
		dentries_invalidate(fs, gone);
		pthread_mutex_lock(&fs->notify_lock);
		fs->notify_sent = batch;
		pthread_cond_broadcast(&fs->notify_sent_cond);
		/* a name removed may have been all that held one */
		if (atomic_load(&fs->takeover.n_retiring) > 0)
			retire_unlocked(fs);
	}
	pthread_mutex_unlock(&fs->notify_lock);
	return NULL;
}

int ns_notifier_start(struct fs *fs)
{
	int r = pthread_create(&fs->notifier, NULL, notifier, fs);

	if (r != 0)
		return -r;
	fs->notifier_started = true;
	manager_set_names_changed(fs->manager, names_changed, ns_notifier_settle, names_pending,
				  fs);
	manager_set_gc_prepare(fs->manager, takeover_settle, fs);
	manager_set_images_entered(fs->manager, takeover_entered_keys, fs);
	manager_set_times_changed(fs->manager, times_changed, fs);
	return 0;
}

/* Ends the notifier, waiting for the notification under way at most
 * until `until` (NULL: for ever); then late(fs), if given, and a wait for
 * ever; false when it was left behind. */
static bool notifier_end(struct fs *fs, const struct timespec *until, void (*late)(struct fs *fs))
{
	/* stop first, so that a settle under way returns; removing the
	 * hooks then waits for the calls that are still running */
	pthread_mutex_lock(&fs->notify_lock);
	fs->notify_stop = true;
	pthread_cond_signal(&fs->notify_cond);
	pthread_cond_broadcast(&fs->notify_sent_cond);
	pthread_mutex_unlock(&fs->notify_lock);
	/* Without the hooks the collector cannot tell which images the
	 * kernel still reaches: from here on it deletes nothing (this
	 * process is on its way out, for an upgrade or a stop). */
	manager_freeze_gc(fs->manager);
	manager_set_names_changed(fs->manager, NULL, NULL, NULL, NULL);
	manager_set_gc_prepare(fs->manager, NULL, NULL);
	manager_set_images_entered(fs->manager, NULL, NULL);
	manager_set_times_changed(fs->manager, NULL, NULL);
	if (!fs->notifier_started)
		return true;
	if (until && pthread_timedjoin_np(fs->notifier, NULL, until) != 0) {
		if (!late) {
			pthread_detach(fs->notifier);
			fs->notifier_started = false;
			return false;
		}
		late(fs);
		until = NULL;
	}
	if (!until)
		pthread_join(fs->notifier, NULL);
	fs->notifier_started = false;
	return true;
}

void ns_notifier_stop(struct fs *fs)
{
	notifier_end(fs, NULL, NULL);
}

bool ns_notifier_stop_within(struct fs *fs, unsigned seconds)
{
	struct timespec until = clock_real_deadline(seconds * CLOCK_NS_PER_SEC);

	return notifier_end(fs, &until, NULL);
}

void ns_notifier_stop_or(struct fs *fs, unsigned seconds, void (*late)(struct fs *fs))
{
	struct timespec until = clock_real_deadline(seconds * CLOCK_NS_PER_SEC);

	notifier_end(fs, &until, late);
}

/* Whether the notifier has been in one notification for a second: held
 * by a lookup of that directory. */
static bool notifier_held(struct fs *fs)
{
	int64_t since = atomic_load(&fs->notify_writing_ns);

	return since && clock_mono_ns() - since > CLOCK_NS_PER_SEC;
}

void ns_notifier_settle(void *userdata)
{
	struct fs *fs = userdata;
	/* Bounded: dropping a dentry waits for its directory, which a lookup
	 * holds for as long as its pull waits for a registry.  What is not
	 * dropped by then stays (names_pending) for a later collection. */
	int64_t end = clock_mono_ns() + NS_SETTLE_SECONDS * CLOCK_NS_PER_SEC, left;

	pthread_mutex_lock(&fs->notify_lock);
	uint64_t target = fs->notify_queued;
	while (!fs->notify_stop && fs->notifier_started && fs->notify_sent < target &&
	       !notifier_held(fs) && (left = end - clock_mono_ns()) > 0) {
		/* looked at again every 100 ms: the notifier may get held */
		struct timespec t = clock_real_deadline(MIN(left, 100 * INT64_C(1000000)));

		pthread_cond_timedwait(&fs->notify_sent_cond, &fs->notify_lock, &t);
	}
	pthread_mutex_unlock(&fs->notify_lock);
}

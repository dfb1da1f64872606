/* What manager.c, gc.c and status.c share: the manager's state.  Not for
 * use outside manager/. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "manager.h"
#include "manifest.h"

struct cache;
struct registry;
struct policy;
struct backoff;
struct throttle;
struct puller;
struct strmap;

#define PULL_DURATION_BUCKETS 18

struct image {
	atomic_uint_fast64_t refcount;
	atomic_uint open_files; /* regular files the filesystem has open */
	struct manager *manager;
	char *digest; /* manifest digest */
	struct tree *tree;
	int *packs; /* one read-only fd per layer */
	size_t n_layers;
	uint64_t size; /* config + compressed layers, as the registry sent it */
	/* Where the kernel has this image's root as a dentry, so that GC can
	 * ask it to forget; under manager.lock. */
	struct image_dentry *dentries;
	/* Every live image, for the end: the kernel's references die with
	 * the mount without forgets.  manager.all_lock. */
	struct image *all_prev, *all_next;
};

struct image_dentry {
	struct image_dentry *next;
	uint64_t parent; /* opaque to the manager: the filesystem's parent id */
	char name[];
};

/* What the manager knows of one reference. */
struct refstate {
	char *reference;
	char *digest;	    /* image manifest */
	char *index_digest; /* index it came from, or NULL */
	int64_t checked_at; /* monotonic seconds of the last resolve */
	int64_t present_event_at; /* rate limit of "already present" */
	int64_t pulled_at;  /* unix seconds */
	int64_t last_used_ms; /* unix milliseconds of the last ensure */
};

enum pull_state {
	PULL_WAITING,
	PULL_RESOLVING,
	PULL_DOWNLOADING,
};

/* Progress of one pull, read by the status view without the pull's
 * cooperation. */
struct pull_progress {
	atomic_uint_fast64_t bytes_done;
	atomic_uint_fast64_t bytes_total;
	atomic_uint layers_done;
	atomic_uint layers_total;
	atomic_int state; /* enum pull_state */
	int64_t started_ns;  /* realtime */
};

/* One pull in progress, shared by every ensure of its reference. */
struct flight {
	unsigned waiters; /* under manager.lock */
	bool done;
	int result;
	struct image *image; /* holds one reference; each waiter takes its own */
	struct pull_progress progress;
};

struct manager_stats {
	/* [policy - 1][present][pull_required] */
	uint64_t ensure[3][2][2];
	uint64_t pull_buckets[PULL_DURATION_BUCKETS + 1];
	uint64_t pull_count;
	double pull_seconds;
	uint64_t pulls_ok, pulls_failed;
	uint64_t failures_by_errno[16]; /* by errtable row */
	uint64_t gc_runs_threshold, gc_runs_manual;
	uint64_t gc_freed_bytes, gc_removed_images;
};

struct manager {
	struct manager_options opts;
	char **insecure;
	char **pins;
	struct platform platform; /* strings owned when platform_owned */
	bool platform_owned;
	struct cache *cache;
	struct events *events;
	struct registry *registry;
	struct policy *policy;
	struct backoff *backoff;
	struct throttle *throttle;
	struct puller *puller;
	const struct clock *clock;
	char *cache_dir;
	char *events_path;

	/* Pulls take it shared, GC exclusive: GC never deletes a layer a
	 * pull is counting on. */
	pthread_rwlock_t gc_lock;

	pthread_mutex_t lock;
	struct strmap *refs;	/* reference -> struct refstate *; lock */
	struct strmap *images;	/* reference -> struct image * (one ref held); lock */
	/* "pid\nreference" -> struct recent_failure *: what a process was just
	 * told; lock. */
	struct strmap *recent;
	pthread_mutex_t all_lock;
	struct image *all_images; /* all_lock */
	struct strmap *flights; /* reference -> struct flight *; lock */
	/* Broadcast when a flight ends or a waiter is interrupted; lock. */
	pthread_cond_t flight_cond;
	unsigned jobs_running; /* flight jobs on threads of their own; lock */
	struct strmap *registry_bytes; /* domain -> (uint64_t *); lock */
	struct manager_stats stats;    /* lock */

	void (*forget_dentry)(void *userdata, uint64_t parent, const char *name);
	void *forget_userdata;

	/* the background GC thread */
	pthread_t gc_thread;
	bool gc_thread_started;
	bool gc_wanted;	  /* lock */
	bool stopping;	  /* lock */
	atomic_bool cancelled; /* manager_cancel(): pulls give up */
	pthread_cond_t gc_cond;
};

int64_t manager_wall_s(void);
int64_t manager_wall_ms(void);

void manager_emit(struct manager *m, enum event_type type, const char *reason,
		  const char *image, const char *digest, int err,
		  const struct caller *who, const char *fmt, ...)
	__attribute__((format(printf, 8, 9)));

/* Drops the table's reference to reference's image.  manager.lock held. */
void image_drop_locked(struct manager *m, const char *reference);
void refstate_free(struct refstate *rs);

/* gc.c: true when usage is over the high threshold. */
bool gc_needed(struct manager *m);

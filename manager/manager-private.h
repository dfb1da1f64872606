/* What the files of the manager share: its state, and the calls between
 * them.  Not for use outside manager/.
 *
 * The manager stands on floors, one folder each; a file calls (and
 * includes) its own floor and those below, never one above.  From the
 * bottom, over common/ and registry/:
 *
 *   rules/   decisions and counters over plain data: pull policy, access
 *            rules, back-off, the pull token bucket and puller slots, user
 *            quotas, the errno table, the event ring and its rate limit
 *   format/  a layer's bytes (tar, gzip, zstd, eStargz and zstd:chunked
 *            tables of contents) to an index; knows no cache
 *   store/   the content store on disk: layout, blobs, objects, layers and
 *            where each is (a stage while being published, else layers/),
 *            the background publisher, proofs of verified blobs
 *   lazy/    lazy layers: fetching chunks, completing a layer, when one
 *            layer's background completion should run (lazy-schedule),
 *            and the threads and slots that run them all (lazy-completer)
 *   image/   images (image.h): the merged tree, node keys, the packs of
 *            their layers, views of one layer, in a state of their own
 *            (struct images); the top chooses their keys and hears of
 *            their events and completions through its callbacks
 *   manager/ the top: the life cycle (manager.c), ensure (ensure.c: one
 *            pull job per reference shared by its callers, and what the
 *            job decides), admission of each caller (admit.c), the name
 *            table (refs.c), per-user limits (users.c), the pull (pull.c),
 *            GC (gc.c), the status (status.c) and events (emit.c)
 *
 * A floor that needs one above (an event to write, a key to choose, a
 * completion to report) is given callbacks by it: the completer tells
 * image/ through each job's, image/ tells the top through struct
 * images_options.  tests/check-floors.py checks the direction on the
 * includes.
 * Within the top, calls go down this order: manager.c and status.c,
 * ensure.c, pull.c, gc.c, profile-ops.c, refs.c, admit.c and users.c,
 * emit.c. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "manager.h"
#include "manifest.h"

struct cache;
struct registry;
struct policy;
struct backoff;
struct throttle;
struct puller;
struct strmap;
struct reference;
struct packs;
struct manifest;
struct quota_blob;
struct lazy_completer;
struct images;
struct image_completed;

#define PULL_DURATION_BUCKETS 18

/* What the manager knows of one reference. */
struct refstate {
	char *reference;
	char *digest;		  /* image manifest */
	char *index_digest;	  /* index it came from, or NULL */
	int64_t checked_at;	  /* monotonic seconds of the last resolve */
	int64_t present_event_at; /* rate limit of "already present" */
	int64_t pulled_at;	  /* unix seconds */
	int64_t last_used_ms;	  /* unix milliseconds of the last ensure */
	/* Created by a lookup of a user other than root: kept in memory only,
	 * counted against that user's limit, and collected when idle. */
	bool ephemeral;
	uid_t uid; /* who created it, when ephemeral */
	/* An ephemeral name whose pull that user caused: its file in the
	 * cache says so, and its content stays charged to the user across
	 * restarts until the name goes. */
	bool user_stored;
	/* What an ephemeral name costs its user (quota.h): the blobs of its
	 * manifest; NULL for root's names. */
	struct quota_blob *blobs;
	size_t n_blobs;
	/* Pulled with the registry's credentials: seen only by whom the
	 * private access rules admit (access.h). */
	bool credentials;
	/* The image key of (reference, digest), as stored in the cache or
	 * derived; refs_key_assign() gives it to the image made for the name
	 * when free. */
	uint32_t key;
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
	atomic_int state;   /* enum pull_state */
	int64_t started_ns; /* realtime */
};

/* One pull in progress, shared by every ensure of its reference.  The
 * job that runs it owns it; callers wait as struct ensure_call. */
struct flight {
	struct ensure_call *calls; /* waiting callers; manager.lock */
	unsigned n_calls;	   /* manager.lock */
	bool keep;		   /* the operator's: completes with no caller */
	bool queued;		   /* waiting for a token or a slot; manager.lock */
	/* Nobody waits any more and it has not started: leave the queue. */
	atomic_bool abandon;
	bool counted; /* charged to uid's pulls */
	/* A caller that may cause pulls waits for it: it may revalidate and
	 * pull (access.h); otherwise it serves what is cached or fails. */
	atomic_bool may_pull;
	uid_t uid;
	/* Names of uid were dropped to make room for this pull within its
	 * quota: their content is swept once the pull is over. */
	bool quota_dropped;
	struct pull_progress progress;
};

/* Per-user usage, for the limits on names and pulls of users other than
 * root.  manager.lock. */
struct user_usage {
	unsigned names;	   /* ephemeral references */
	unsigned pulls;	   /* flights started */
	int64_t warned_ms; /* last limit event, rate-limited */
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
	struct policy *lazy_rules; /* values: enum lazy_mode */
	struct access *access;
	struct blobproof *proofs;  /* blobproof.h */
	struct profiles *profiles; /* start profiles (profile.h); NULL: off */
	/* Set once a name pulled with credentials is known: until then no
	 * access check needs to look at the names. */
	atomic_bool any_credentials;
	atomic_bool kernel_enforces_access; /* manager_set_kernel_enforces_access() */
	struct backoff *backoff;
	struct throttle *throttle;
	struct puller *puller;
	const struct clock *clock;
	char *cache_dir;
	char *events_path;

	/* Ensure takes it shared, GC exclusive: GC never deletes a layer a
	 * pull is counting on.  A pull lets go of it while it waits for a
	 * registry or a slot, with what it counts on in inflight. */
	pthread_rwlock_t gc_lock;

	pthread_mutex_t lock;
	/* digest -> how many pulls count on it (a count as a pointer): every
	 * sweep keeps it; lock */
	struct strmap *inflight;
	struct strmap *refs; /* reference -> struct refstate *; lock */
	/* keys in decimal -> 1: the kernel holds nodes of them that no image
	 * here could be made again for (manager_reserve_key()); lock */
	struct strmap *reserved_keys;
	struct strmap *images; /* reference -> struct image * (one ref held); lock */
	/* "pid\nreference" -> struct recent_failure *: what a process was just
	 * told; lock. */
	struct strmap *recent;
	struct packs *packs;
	/* The loaded images: contents by digest, live images by key
	 * (image.h); its lock is taken after lock when both are. */
	struct images *imgs;
	struct strmap *flights; /* reference -> struct flight *; lock */
	struct strmap *users;	/* decimal uid -> struct user_usage *; lock */
	/* Broadcast when the last flight job ends; lock. */
	pthread_cond_t flight_cond;
	unsigned jobs_running;	       /* flight jobs on threads of their own; lock */
	struct strmap *registry_bytes; /* domain -> (uint64_t *); lock */
	struct manager_stats stats;    /* lock */

	/* manager_set_names_changed(); lock */
	manager_names_changed_fn *names_changed;
	/* waits until the filesystem acted on what names_changed told it */
	void (*names_settle)(void *userdata);
	bool (*names_pending)(void *userdata, const char *reference);
	/* names removed whose dentries the filesystem may not have dropped
	 * yet: reference -> its image's manifest digest (owned); lock */
	struct strmap *settling;
	void *names_userdata;
	/* manager_set_gc_prepare(); lock */
	void (*gc_prepare)(void *userdata);
	void *gc_prepare_userdata;
	/* manager_set_in_use(); lock */
	bool (*in_use)(void *userdata, const char *reference);
	void *in_use_userdata;
	/* manager_set_snapshot_bytes(); lock */
	uint64_t (*snapshot_bytes)(void *userdata);
	void *snapshot_bytes_userdata;
	/* manager_set_images_entered(); lock */
	int (*images_entered)(void *userdata, uint32_t **ret_keys, size_t *ret_n);
	void *images_entered_userdata;
	/* hooks called outside the lock and not returned yet (call_hook();
	 * lock): a setter that removes a hook waits for hooks_cond */
	unsigned hooks_running;
	pthread_cond_t hooks_cond;

	/* the background GC thread */
	pthread_t gc_thread;
	bool gc_thread_started;
	bool gc_wanted; /* lock */
	/* the collector only calls gc_prepare (a user's pull found no
	 * room, gc_user_room()); lock */
	bool settle_wanted;
	bool stopping; /* lock */
	/* manager_freeze_gc(): nothing leaves the cache any more; lock */
	bool gc_frozen;
	atomic_bool cancelled; /* manager_cancel(): pulls give up */
	/* the background completions of lazy layers (lazy-completer.h) */
	struct lazy_completer *completer;
	pthread_cond_t gc_cond;
};

/* The budget of entries of one image (--max-image-entries). */
static inline unsigned image_max_entries(const struct manager *m)
{
	return m->opts.max_image_entries ?: MANAGER_DEFAULT_IMAGE_ENTRIES;
}

/* The manager's clock (clock.h, a fake one in tests) in seconds. */
static inline int64_t manager_now_s(const struct manager *m)
{
	return clock_now_ns(m->clock) / CLOCK_NS_PER_SEC;
}

static inline double manager_now_f(const struct manager *m)
{
	return (double)clock_now_ns(m->clock) / 1e9;
}

/* The time of day, for what is stored or shown: unix seconds and
 * milliseconds. */
static inline int64_t manager_wall_s(void)
{
	return (int64_t)time(NULL);
}

static inline int64_t manager_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Writes one event to the events log, its message formatted (emit.c);
 * the floors below are given the log as a sink (events.h). */
struct event_sink manager_event_sink(struct manager *m);
void manager_emit(struct manager *m, enum event_type type, const char *reason, const char *image,
		  const char *digest, int err, const struct caller *who, const char *fmt, ...)
	__attribute__((format(printf, 8, 9)));

/* refs.c: the reference state table (manager.refs) and the images handed
 * out by name (manager.images). */
void refstate_free(struct refstate *rs);
/* Drops the table's reference to reference's image.  manager.lock held. */
void image_drop_locked(struct manager *m, const char *reference);
/* Forgets reference's state and its image; manager.lock held. */
void refstate_drop_locked(struct manager *m, const char *reference);
/* a reference naming manifest digest (malloc'ed), or NULL */
char *reference_of(struct manager *m, const char *digest);
/* reference's image for manifest digest, loaded when no name holds it;
 * one reference for the caller.  Takes manager.lock.  Returns 0, or what
 * images_load returns. */
int refs_image_get(struct manager *m, const char *reference, const char *digest, struct image **ret,
		   char *errbuf, size_t errlen);
/* Records that reference names digest now: in the cache first unless the
 * name is ephemeral (a user other than root made it), then in the table.
 * Takes manager.lock.  A name a user other than root pulled (pulled) is
 * written with that user's uid, so that its charge survives a restart.
 * Returns 0, -ENOMEM, or the cache's -errno. */
int refs_publish(struct manager *m, const char *reference, const char *digest,
		 const char *index_digest, uint32_t key, const struct caller *who, bool credentials,
		 bool pulled);
/* The rate-limited "already present" event.  Takes manager.lock. */
void manager_present_event(struct manager *m, const char *canonical, const char *digest,
			   const struct caller *who);
/* The images' hooks (image.h), userdata the manager.  The Pulled event
 * of each image of done, for each name that holds it: takes
 * manager.lock.  The key of an image loaded under name: the one name's
 * state stores for digest, or one derived from both, or the next free
 * one that no other name keeps (nor manager.reserved_keys): takes
 * manager.lock, then the images' lock. */
void refs_images_completed(void *userdata, const struct image_completed *done, size_t n);
int refs_key_assign(void *userdata, struct images *imgs, struct image *img, const char *name,
		    const char *digest);
/* The image of reference at manifest digest with exactly key, as a
 * process before handed it out (fs/takeover.c): the live one of that key,
 * or one loaded from the cache.  It becomes reference's image in the
 * table when the name's state names digest and the table has none of
 * that digest with the state's key.  One reference for the caller; takes
 * manager.lock.  -ESTALE when key is another image's, -EINVAL for a key
 * out of range, or what images_load returns. */
int refs_image_restore(struct manager *m, const char *reference, const char *digest, uint32_t key,
		       struct image **ret, char *errbuf, size_t errlen);
/* Fills the table from the references stored in the cache; at start,
 * before any other thread runs.  Returns 0 or -errno. */
int refs_load(struct manager *m);
/* Frees both tables and what they hold; at the end. */
void refs_free_all(struct manager *m);
/* Lets go of names nobody uses: images held only by the table and not
 * used for idle_ms, and then ephemeral references with no image.  Only
 * uid's names when uid is not (uid_t)-1.  Returns how many references
 * went. */
size_t names_collect_locked(struct manager *m, uid_t uid, int64_t idle_ms);

/* users.c: limits per user (manager.lock held).  users_admit_*_locked
 * return 0, or -EAGAIN with the limit event's message in msg. */
struct user_usage *users_get_locked(struct manager *m, uid_t uid);
void users_release_locked(struct manager *m, uid_t uid);
/* True when uid holds as many names as it may: collect its idle ones
 * (names_collect_locked) before users_admit_name_locked. */
bool users_names_full_locked(struct manager *m, uid_t uid);
int users_admit_name_locked(struct manager *m, uid_t uid, char *msg, size_t len);
int users_admit_pull_locked(struct manager *m, uid_t uid, char *msg, size_t len);

/* What one flight's decision came to, for the metrics. */
struct ensure_outcome {
	bool present;	    /* the reference was cached before */
	bool pull_required; /* the registry had to be asked */
	bool pulled;	    /* a pull ran and succeeded */
	int failed;	    /* negative errno of a failed pull, 0 */
	bool abandoned;	    /* left the queue with nobody waiting */
	double seconds;	    /* of the pull */
	uint64_t bytes;	    /* transferred by the pull */
};

/* admit.c, for ensure.c: whether who may cause a pull of ref (the
 * reason in why when not); and whether who may see the content digest
 * that canonical names now: 0, or -EACCES with an AccessDenied event. */
bool manager_may_pull(struct manager *m, const struct reference *ref, const char *canonical,
		      const struct caller *who, char *why, size_t len);
int manager_admit(struct manager *m, const char *canonical, const char *digest,
		  const struct caller *who);
/* Whether a pull of reference (canonical) would present the registry's
 * credentials (credentials.h): what "pulled with credentials" records. */
bool manager_credentials_for(struct manager *m, const char *reference);
/* The rate-limited PullDenied event. */
void manager_pull_denied(struct manager *m, const char *canonical, const struct caller *who,
			 const char *why);
/* gc.c: true when usage is over the high threshold. */
bool gc_needed(struct manager *m);
/* gc.c: manager_set_snapshot_bytes()'s count, 0 without one.  Takes
 * manager.lock. */
uint64_t gc_snapshot_bytes(struct manager *m);
/* gc.c: the bytes a user other than root may have charged (quota.h):
 * --user-cache-max-bytes, or a quarter of the budget. */
uint64_t gc_user_quota(struct manager *m);
/* gc.c: the bytes charged to uid now.  Takes manager.lock. */
uint64_t gc_user_charge(struct manager *m, uid_t uid);
/* gc.c, for a pull by uid of canonical (manifest mf), before any layer
 * is fetched: drops uid's own least recently used names that nothing
 * holds (not pinned, in use or being pulled) until the image fits in
 * uid's quota, setting f->quota_dropped when one went.  gc_lock held
 * shared; takes manager.lock.  Returns 0, or -EDQUOT with the reason in
 * msg (nothing dropped), -ENOMEM. */
int gc_user_room(struct manager *m, const char *canonical, uid_t uid, const struct manifest *mf,
		 struct flight *f, char *msg, size_t len);
/* gc.c: [{uid, bytes, quota_bytes}] of the users other than root who
 * hold names or pulls (only who's own unless who is root); NULL on
 * -ENOMEM.  Takes manager.lock. */
json_t *gc_users_json(struct manager *m, const struct caller *who);
/* gc.c: deletes the content of names dropped (gc_user_room) that nothing
 * else needs.  Takes gc_lock exclusively: call without it. */
void gc_sweep_dropped(struct manager *m);
/* refs.c: the blobs of the cached manifest digest as quota.h counts
 * them; 0, or what manifest_load_cached returns. */
int refs_blobs_load(struct manager *m, const char *digest, struct quota_blob **ret, size_t *ret_n);
void refs_blobs_free(struct quota_blob *blobs, size_t n);
/* gc.c: starts the background collector's thread (after the daemon has
 * forked), and stops it; gc_stop does nothing when it never started.
 * gc_start returns 0 or -errno. */
int gc_start(struct manager *m);
void hooks_quiesce_locked(struct manager *m);
void gc_stop(struct manager *m);

/* profile-ops.c: start profiles in the status ("profiles"), in the
 * metrics, and the removal of those whose image manifest left the cache
 * (imported ones after a day: an import may come before its pull). */
json_t *profiles_status_json(struct manager *m);
void profiles_metrics(struct manager *m, FILE *f);
void profiles_prune(struct manager *m);

/* The image manager: turns "somebody looked up images/<ref>" into a ready
 * image, the way the kubelet's EnsureImageExists does -- pull policy,
 * single flight per reference, pull, verify, unpack, publish -- and tells
 * the events log about every decision.  This is the narrow interface the
 * filesystem sees: references in, refcounted immutable images out. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "backoff.h"
#include "clock.h"
#include "errdetail.h"
#include "events.h"
#include "image.h"
#include "policy.h"

struct reference;
struct registry_hosts;
struct registry_transport;
struct credentials;

struct manager_options {
	const char *cache_dir;	/* required */
	const char *events_log; /* NULL: <cache_dir>/events.log */
	/* The events log's cap, rotated files and limits per user
	 * (events.h: 0 is no cap, one file, no limit, the default rate). */
	uint64_t events_max_bytes;
	unsigned events_keep;
	unsigned events_burst;
	unsigned events_per_minute;
	enum pull_policy pull_policy; /* mount-wide override; UNSET: per reference */
	const char *const *insecure_hosts;
	size_t n_insecure_hosts;
	const char *platform;		   /* "os/arch[/variant]"; NULL: this machine */
	unsigned max_concurrent_downloads; /* layers per pull; 0: 3 */
	unsigned revalidate_interval_s;	   /* Always: re-resolve at most this often; 0: 60 */
	/* Per-reference rules, "PATTERN=POLICY" or "PATTERN POLICY" (see
	 * policy.h); they win over pull_policy. */
	const char *const *policy_rules;
	size_t n_policy_rules;
	unsigned backoff_initial_s; /* 0: 10 */
	unsigned backoff_max_s;	    /* 0: 300 */
	double registry_qps;	    /* pull starts per second; 0: no limit */
	unsigned registry_burst;    /* 0: 10 */
	bool pull_qps_fail_fast;    /* refuse with EAGAIN instead of queueing */
	/* --lazy off: eStargz and zstd:chunked layers pulled whole too
	 * (lazy.h) */
	bool no_lazy;
	/* Per-reference lazy rules, "PATTERN=auto|off" (policy.h); they win
	 * over no_lazy. */
	const char *const *lazy_rules;
	size_t n_lazy_rules;
	/* The start-up window of a lazily started image: its background
	 * completion waits this long after it became usable (lazy-schedule.h);
	 * 0: MANAGER_DEFAULT_LAZY_DELAY_MS, negative: no window. */
	long lazy_completion_delay_ms;
	/* How long after an image's first lookup its start profile records
	 * the files opened (profile.h); 0: MANAGER_DEFAULT_PROFILE_WINDOW_S,
	 * negative: no recording (stored profiles are still used). */
	long profile_window_ms;
	unsigned max_parallel_pulls; /* 0: 1, serialised like the kubelet */
	unsigned max_queued_pulls;   /* waiters for a pull slot or a token; 0: 100 */
	/* Limits per user other than root (users.c). */
	unsigned max_names_per_user; /* ephemeral names in use; 0: 256 */
	unsigned max_pulls_per_user; /* pulls in progress; 0: 8 */
	unsigned name_idle_s;	     /* collect names unused this long; 0: 300 */
	/* Entries of an image's layers together (what its tree, and a lazy
	 * layer's table, cost in memory): more fail with -EFBIG; 0:
	 * MANAGER_DEFAULT_IMAGE_ENTRIES. */
	unsigned max_image_entries;
	/* Who may cause pulls and who may see images pulled with
	 * credentials: "PATTERN=WHO[,WHO...]" rules (access.h). */
	const char *const *pull_access_rules;
	size_t n_pull_access_rules;
	const char *const *private_access_rules;
	size_t n_private_access_rules;
	/* For tests: the callers' supplementary groups (NULL: /proc). */
	int (*access_groups)(const struct caller *who, gid_t *groups, size_t max);
	unsigned max_open_packs;   /* pack descriptors kept open; 0: 256 */
	const struct clock *clock; /* NULL: CLOCK_MONOTONIC */
	/* Registry client (registry/): mirrors and TLS per registry, and
	 * credentials; borrowed, must outlive the manager; NULL: none. */
	const struct registry_hosts *registry_hosts;
	const struct credentials *credentials;
	long connect_timeout_ms; /* 0: 10 s */
	long low_speed_time_s;	 /* 0: 30 s */
	/* The floor under a blob transfer's rate across its resumes
	 * (registry.h): bytes/s, 0: 1 KiB/s, < 0: none; its window, 0: 30 s. */
	int64_t min_transfer_rate;
	unsigned transfer_rate_window_s;
	/* How long a pull's slot holds back the pulls of other registries
	 * (puller.h); 0: 60 s, < 0: as long as it is held. */
	int64_t pull_slot_share_s;
	/* For tests: the registry's transport (registry/transport.h; NULL:
	 * libcurl), borrowed; retries of a failed request (0: 3, < 0: none). */
	const struct registry_transport *registry_transport;
	int registry_max_retries;
	/* Garbage collection (see gc.c). */
	uint64_t cache_max_bytes; /* byte budget; 0: the cache filesystem's size */
	unsigned gc_high_percent; /* start above this share of the budget; 0: 85 */
	unsigned gc_low_percent;  /* ... and stop at this one; 0: 80 */
	unsigned gc_min_age_s;	  /* never remove an image pulled less ago; 0: 120 */
	bool gc_no_min_age;	  /* ... unless this says there is no minimum */
	const char *const *pins;  /* globs of references GC never removes */
	/* bytes charged to one user other than root (quota.h); 0: a quarter
	 * of the budget */
	uint64_t user_cache_max_bytes;
	size_t n_pins;
};

#define MANAGER_DEFAULT_REVALIDATE_S 60
#define MANAGER_DEFAULT_LAZY_DELAY_S 2
/* The recording window of start profiles, in seconds. */
#define MANAGER_DEFAULT_PROFILE_WINDOW_S 10
#define MANAGER_DEFAULT_NAMES_PER_USER 256
#define MANAGER_DEFAULT_PULLS_PER_USER 8
#define MANAGER_DEFAULT_NAME_IDLE_S 300
#define MANAGER_DEFAULT_IMAGE_ENTRIES 1000000

struct manager;
struct image;

/* Opens the cache (see cache.h), the events log and the registry client.
 * Starts no threads.  Returns 0, or -errno with a one-line reason in
 * errbuf. */
int manager_new(const struct manager_options *opts, struct manager **ret, char *errbuf,
		size_t errlen);
/* Frees the manager; every image reference must have been dropped. */
void manager_free(struct manager *m);

/* Async-signal-safe: the events log is reopened before its next line. */
void manager_reopen_events(struct manager *m);

/* Ensure without blocking the caller: manager_ensure_start() answers at
 * once from memory when it can, and otherwise registers the caller with
 * the reference's single flight (starting it on a thread of its own) and
 * returns; done(userdata, r, img) is then called exactly once, from
 * another thread and without locks, with the result and, on success, an
 * image reference that passes to the callee.
 *
 * ensure_call_cancel() takes the caller out (a FUSE interrupt): true when
 * it did, and done will never be called; false when done has been or is
 * being called.  It may be called only while done cannot have returned:
 * the caller serialises the two (fs.c does it with the request's lock).
 * A flight that loses its last caller before it left the queue leaves it
 * (it is dropped, without back-off); once past the queue a pull finishes
 * for the next caller. */
struct ensure_call;
typedef void ensure_done_fn(void *userdata, int r, struct image *img);

/* reference: any form the grammar accepts; who may be NULL (the
 * operator: no per-user limit).  Returns 1 with an image reference in
 * *ret_img when answered at once, 0 with *ret_call when done will be
 * called, or a negative errno at once.  Errors follow the errno table
 * (errtable.h): -EINVAL, -ENOENT, -EPERM, -EACCES, -EAGAIN (back-off, a
 * full queue, a per-user limit), -EHOSTUNREACH, -ETIMEDOUT, -ENOEXEC,
 * -EBADMSG, -ENOSPC, -EIO; -ECANCELED when the daemon stops. */
int manager_ensure_start(struct manager *m, const char *reference, const struct caller *who,
			 ensure_done_fn *done, void *userdata, struct ensure_call **ret_call,
			 struct image **ret_img);
/* The same for a reference already parsed (registry/reference.h, with
 * the default tag), which it takes whatever it returns: the filesystem
 * parses the path form once and hands the result on. */
int manager_ensure_start_ref(struct manager *m, struct reference *ref, const struct caller *who,
			     ensure_done_fn *done, void *userdata, struct ensure_call **ret_call,
			     struct image **ret_img);
bool ensure_call_cancel(struct ensure_call *call);

/* The operator's background pull (pullfsctl pull --background): ensure
 * with no caller, which completes even though nobody waits for it.
 * Returns 0 at once with {ok, reference, present}, a json_t owned by the
 * caller, or -errno with the reason in err (an invalid reference,
 * back-off, a full queue). */
int manager_pull_background(struct manager *m, const char *reference, json_t **ret_json,
			    struct error_detail *err);

/* Writes the InspectFailed event of a reference outside the grammar, as
 * ensure does for one it is given: for the filesystem, which refuses such
 * a name before ensure runs. */
void manager_invalid_reference(struct manager *m, const char *text, const struct caller *who);

/* Writes the Warning UserLimit event of what (a path below images/) that
 * the filesystem refused to who with EAGAIN, because of why (its own
 * per-user limits); the caller rate-limits. */
void manager_user_limit(struct manager *m, const char *what, const struct caller *who,
			const char *why);

/* Whether the content digest names was pulled with credentials under a
 * name still known (so that the filesystem lets the kernel keep none of
 * its lookups).  Takes manager.lock. */
bool manager_digest_private(struct manager *m, const char *digest);

/* The canonical form of a reference given in any form the grammar
 * accepts (the default tag added): 0 with a new string, -EINVAL,
 * -ENOMEM. */
int manager_canonical(const char *reference, char **ret);

/* Who may see img's content, for the kernel to enforce (a
 * POSIX ACL on the image root): returns 0 when everybody may (no name of
 * it was pulled with credentials, or one was pulled without, or a rule
 * admits everybody), 1 with the users and groups the rules of its names
 * admit (root aside; none: root only), or -ENOMEM.  Takes manager.lock;
 * the caller frees the arrays. */
struct image_readers {
	uint32_t *users, *groups;
	size_t n_users, n_groups;
};
int manager_image_readers(struct manager *m, const struct image *img, struct image_readers *ret);
/* Whether who may see a name and digest (its manifest's; NULL for a name
 * not pulled yet, judged by whether its pull would use credentials) in a
 * listing or a status: the rule of manager_admit_image(), with no event.
 * who NULL (the operator) and root see everything.  Takes manager.lock;
 * may read /proc. */
bool manager_name_visible(struct manager *m, const char *canonical, const char *digest,
			  const struct caller *who);
/* manager_digest_private() for an image, a layer view included (by the
 * image it is a layer of). */
bool manager_image_private(struct manager *m, const struct image *img);
/* Whether who may see img (a layer view by its image): 0, or -EACCES
 * with a rate-limited AccessDenied event for canonical.  For what the
 * kernel's ACL cannot cover (files a refused user could open). */
int manager_admit_image(struct manager *m, const struct image *img, const char *canonical,
			const struct caller *who);
void image_readers_done(struct image_readers *r);

/* The kernel enforces who may see private images (the filesystem gives
 * it their ACLs): a refused user is then still given the image's root by
 * a lookup, with its event, since a lookup that fails makes the kernel
 * drop that entry for everybody, and with it the mounts below it. */
void manager_set_kernel_enforces_access(struct manager *m, bool on);

/* True when host is a registry the manager knows by name: an insecure
 * registry from the options or the domain of a cached image. */
bool manager_is_known_host(struct manager *m, const char *host);

/* Lists the cache below a canonical prefix of path components ("" for the
 * hosts, "127.0.0.1:5000", "127.0.0.1:5000/test", ...): calls fn once per
 * distinct next component, with is_image set when that component closes a
 * reference.  A component is shown to who only when a reference below it
 * is one who may see (manager_name_visible(); who NULL: all).
 * ret_private (may be NULL) is set when a reference below the prefix is
 * private, so that the listing depends on who asks.  Never asks a
 * registry.  Returns 0, -ENOMEM or fn's value. */
int manager_list(struct manager *m, const char *prefix, const struct caller *who,
		 int (*fn)(void *userdata, const char *name, bool is_image), void *userdata,
		 bool *ret_private);

/* Makes every pull in progress give up with -ECANCELED at its next
 * chunk of data, and every pull waiting for a slot or a token at once;
 * for a prompt unmount.  Thread-safe; not async-signal-safe. */
void manager_cancel(struct manager *m);

/* Cancels every flight and waits until their callers have had their
 * answers; before the filesystem's session goes away. */
void manager_drain(struct manager *m);

/* From now on nothing leaves the cache: a collection, rm or quota drop
 * may still forget names, but deletes no content (a sweep under way
 * deletes only what it judged unneeded before).  For a serving process
 * that hands the kernel's nodes over to the next one: once it removes the
 * filesystem's hooks it cannot tell what the kernel still reaches (names
 * whose dentries live on, images a process stands in), and the next
 * process must be able to make each of those images again.  Call before
 * removing the hooks.  Thread-safe. */
void manager_freeze_gc(struct manager *m);

/* The cache directory, as given. */
const char *manager_cache_dir(const struct manager *m);

/* Starts the background garbage collector.  Call after the daemon has
 * forked (threads do not survive fork).  Returns 0 or -errno. */
int manager_start(struct manager *m);

/* The filesystem's hook for cached listings and removed names:
 * fn(userdata, reference, removed) is called whenever a canonical
 * reference comes into (removed false) or goes out of (removed true: rm,
 * GC, an idle name collected) what manager_list() shows, with manager
 * locks held, so it must only take note (no blocking, no call into the
 * manager).  After the call that sets it returns, the previous hook is no
 * longer running nor called: set NULL before its userdata goes away. */
typedef void manager_names_changed_fn(void *userdata, const char *reference, bool removed);
/* settle (may be NULL) waits, for a bounded time, until the filesystem
 * has acted on the changes fn was told of; garbage collection calls it
 * before it sweeps.  pending (may be NULL) says whether a removed name
 * may still lead into its image (the kernel's dentries of it not dropped
 * yet: the kernel may hold them for as long as a lookup in the same
 * directory waits for a registry); garbage collection keeps what such an
 * image is made from until it does not. */
/* The filesystem took its connection over from another process: files the
 * other served through the daemon must stay so (packs_took_over()). */
void manager_took_over(struct manager *m);

void manager_set_names_changed(struct manager *m, manager_names_changed_fn *fn,
			       void (*settle)(void *userdata),
			       bool (*pending)(void *userdata, const char *reference),
			       void *userdata);
/* fn (NULL: none) is called, without locks, before garbage collection and
 * rm look at which images are in use: the filesystem lets go there of
 * images it counts as in use only because it cannot tell (fs/takeover.c).
 * It may block (it asks the kernel).  Set NULL before userdata goes. */
void manager_set_gc_prepare(struct manager *m, void (*fn)(void *userdata), void *userdata);
/* in_use (NULL: none) says whether a cached reference (canonical) is in
 * use outside the filesystem (containerd's snapshots stand on its layers):
 * GC keeps such an image and rm refuses it (EBUSY).  Called with the
 * manager's lock held: it must take no lock a caller of the manager may
 * hold.  Set NULL before userdata goes. */
void manager_set_in_use(struct manager *m, bool (*in_use)(void *userdata, const char *reference),
			void *userdata);
/* fn (NULL: none) gives the bytes containerd's snapshots take on local
 * disk in the cache directory (fs/snapshotter/: containers' writable
 * layers, layers containerd unpacked itself): with a byte budget they
 * count in the usage GC holds to it, and the status and metrics show
 * them.  Called with the manager's lock held: it must be cheap, take no
 * lock a caller of the manager may hold, and not block.  Set NULL before
 * userdata goes. */
void manager_set_snapshot_bytes(struct manager *m, uint64_t (*fn)(void *userdata), void *userdata);
/* Says that the snapshots' bytes grew (a commit): when usage is now above
 * the high threshold the collector runs, as after a pull.  Reads the
 * cache's usage as the status does (cache_usage_memo(): a scan only when
 * the cache changed since the last one); does not wait for the
 * collection. */
void manager_snapshot_bytes_grew(struct manager *m);
/* fn (NULL: none) gives the keys of the images some process has its
 * working directory or its root in (an array for the caller to free, and
 * its length; 0 or -errno): GC keeps what such an image is made from even
 * with no file open in it, because files may be opened there any time
 * and a serving process that takes the connection over must make the
 * image again.  Called under GC's lock; it must not call the manager nor
 * wait for a request.  Set NULL before userdata goes. */
void manager_set_images_entered(struct manager *m,
				int (*fn)(void *userdata, uint32_t **ret_keys, size_t *ret_n),
				void *userdata);
/* fn (NULL: none) is called when an image with a key is freed because
 * nothing held it any more, the kernel's lookups included (the kernel
 * forgot every node of it), before another image can take its key: with
 * the table of keys locked, so it must not call the manager.  Not called
 * for the images freed with the manager. */
void manager_set_image_forgotten(struct manager *m, void (*fn)(uint32_t key));

/* fn (NULL: none) is called, without locks, with the manifest digest of
 * each loaded image whose tree took exact mtimes (a lazy layer of it
 * verified against its digest; images_set_times_changed()).  Set NULL
 * before userdata goes. */
void manager_set_times_changed(struct manager *m, void (*fn)(void *userdata, const char *digest),
			       void *userdata);
/* fn for every live image with a key (struct image *), with the table of
 * keys locked: it must not call the manager; image_ref() keeps one for
 * after. */
void manager_images_foreach(struct manager *m, void (*fn)(void *userdata, uint32_t key, void *img),
			    void *userdata);

/* A JSON document for MOUNT/.pullfs/status (docs/control.md), without the
 * fields only the filesystem knows, and without the pulls, images and
 * back-off entries of private images who may not see
 * (manager_name_visible(); who NULL: all).  Returns 0 with a json_t owned
 * by the caller, or -ENOMEM. */
int manager_status(struct manager *m, const struct caller *who, json_t **ret_json);

/* Appends the manager's metrics in Prometheus text format to f. */
void manager_metrics(struct manager *m, FILE *f);

/* Control operations (docs/control.md); each returns 0 with a JSON
 * answer owned by the caller, or -errno with the reason in err. */
int manager_inspect(struct manager *m, const char *reference, json_t **ret_json,
		    struct error_detail *err);
int manager_remove(struct manager *m, const char *const *references, size_t n, json_t **ret_json,
		   struct error_detail *err);
/* to_bytes 0: down to the low threshold. */
int manager_gc(struct manager *m, uint64_t to_bytes, json_t **ret_json, struct error_detail *err);
/* Start profiles (docs/profiles.md): the stored profile of reference's
 * image as text ("profile" in the answer), and a profile's text stored
 * for its image (-EBADMSG with the reason for a malformed one, -EINVAL
 * when reference is cached as another image). */
int manager_profile_export(struct manager *m, const char *reference, json_t **ret_json,
			   struct error_detail *err);
int manager_profile_import(struct manager *m, const char *reference, const char *text, size_t len,
			   json_t **ret_json, struct error_detail *err);

/* For a serving process that takes the filesystem over from another
 * (fs/takeover.c): the image reference named at manifest digest, from
 * the cache only, with exactly key (the one the kernel's nodes carry,
 * whatever the name names now), or, key 0, the name's image as a lookup
 * gets it.  0 with one image reference, -ENOENT when the cache lacks part
 * of it, -ESTALE when key is another image's, -EBADMSG, -ENOMEM.  Blocks
 * on the cache. */
int manager_restore_image(struct manager *m, const char *reference, const char *digest,
			  uint32_t key, struct image **ret);
/* A key the kernel still holds nodes of, given out by a process before,
 * whose image could not be made again (its content is gone): never given
 * to another image in this process, so that those nodes answer ESTALE
 * rather than another image's content, and their FORGETs count against
 * nothing. */
void manager_reserve_key(struct manager *m, uint32_t key);
/* Back-off across a takeover (backoff.h): a hook told of every change of
 * the table (failures and successes, by canonical reference), and an entry
 * made again as the process before left it. */
void manager_set_backoff_hook(struct manager *m, backoff_hook_fn *fn, void *userdata);
int manager_restore_backoff(struct manager *m, const char *reference,
			    const struct backoff_state *st);
/* An event about the serving process itself (an upgrade, a recovery),
 * reason one word, message a sentence. */
void manager_serving_event(struct manager *m, const char *reason, const char *message);

/* The live image of key, without locks (image.h: image_key()); NULL
 * when none. */
struct image *manager_image(struct manager *m, uint32_t key);

/* Ensure: the callers of a lookup, the one pull job per reference they
 * share (single flight), and the decision that job makes: from the table
 * or the cache when the policy allows, a revalidation of a moved tag under
 * Always, back-off before any registry traffic, then a pull (pull.c) whose
 * result is published (refs.c), with the events of each outcome.  The
 * answers are given from the job's thread (no caller thread waits); a
 * flight that loses its last caller in the queue leaves it.  Also the
 * per-process memo of a failure, and the operator's background pull.
 * Whether a caller is admitted is admit.c's. */
#include "manager.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access.h"
#include "backoff.h"
#include "cache.h"
#include "credentials.h"
#include "errname.h"
#include "errtable.h"
#include "layerview.h"
#include "macro.h"
#include "pull.h"
#include "puller.h"
#include "reference.h"
#include "registry.h"
#include "strmap.h"
#include "throttle.h"
#include "manager-private.h"

#define emit manager_emit

static enum pull_policy manager_policy_of(const struct manager *m, const struct reference *ref,
					  const char *canonical)
{
	return policy_resolve(m->policy, m->opts.pull_policy, canonical, ref->tag, ref->digest);
}

/* The decision of one flight (from the cache, or a pull). */
static int manager_decide(struct manager *m, const struct reference *ref, const char *canonical,
			  enum pull_policy policy, const struct caller *who, double t_wait,
			  struct flight *f, struct ensure_outcome *out, struct image **ret)
{
	struct pull_progress *progress = &f->progress;
	struct pull p = { .m = m,
			  .ref = ref,
			  .canonical = canonical,
			  .who = who,
			  .progress = progress,
			  .flight = f };
	_cleanup_free_ char *known = NULL, *known_index = NULL;
	_cleanup_free_ char *digest = NULL, *index_digest = NULL;
	char errbuf[256] = "";
	uint64_t size = 0;
	bool revalidate = false;
	double t0;
	int r;

	pthread_mutex_lock(&m->lock);
	struct refstate *rs = strmap_get(m->refs, canonical);
	if (rs) {
		known = strdup(rs->digest);
		known_index = rs->index_digest ? strdup(rs->index_digest) : NULL;
		unsigned iv = m->opts.revalidate_interval_s ?: MANAGER_DEFAULT_REVALIDATE_S;
		revalidate = policy == PULL_ALWAYS && manager_now_s(m) - rs->checked_at >= iv &&
			     atomic_load(&f->may_pull);
	}
	pthread_mutex_unlock(&m->lock);
	if (rs && !known)
		return -ENOMEM;
	out->present = known || (ref->digest && cache_blob_present(m->cache, ref->digest));

	/* A digest reference whose manifest is already here needs no
	 * network, whatever name it was pulled by. */
	if (!known && ref->digest && cache_blob_present(m->cache, ref->digest)) {
		struct image *img;
		if (refs_image_get(m, canonical, ref->digest, &img, errbuf, sizeof(errbuf)) == 0) {
			/* Nothing pulled: the name is as private as the
			 * names that brought the content. */
			refs_publish(m, canonical, ref->digest, NULL, image_key(img), who,
				     manager_digest_private(m, image_digest(img)), false);
			manager_present_event(m, canonical, ref->digest, who);
			*ret = img;
			return 0;
		}
	}

	if (known && !revalidate) {
		r = refs_image_get(m, canonical, known, ret, errbuf, sizeof(errbuf));
		if (r == 0) {
			image_completion_wake(*ret, false);
			manager_present_event(m, canonical, known, who);
			return 0;
		}
		/* The cache lost part of it: pull again if allowed. */
		free(known);
		known = NULL;
	}

	if (!known && policy == PULL_NEVER) {
		emit(m, EVENT_WARNING, errtable_reason(-EPERM), canonical, NULL, -EPERM, who,
		     "Container image \"%s\" is not present with pull policy of Never", canonical);
		return -EPERM;
	}

	/* Back-off comes before any registry traffic, revalidation
	 * included: a registry that just failed is not asked again early. */
	struct backoff_state bs;
	if (backoff_check(m->backoff, canonical, &bs) == -EAGAIN) {
		emit(m, EVENT_NORMAL, errtable_reason(-EAGAIN), canonical, NULL, -EAGAIN, who,
		     "Back-off pulling image \"%s\": %s", canonical,
		     bs.last.message[0] ? bs.last.message : errno_name(bs.last.err));
		return -EAGAIN;
	}

	if (!atomic_load(&f->may_pull)) {
		/* Only callers who may not pull wait for this flight. */
		char why[512] = "the caller may not cause pulls";
		if (who)
			manager_may_pull(m, ref, canonical, who, why, sizeof(why));
		if (who)
			manager_pull_denied(m, canonical, who, why);
		return -EACCES;
	}

	p.repo = strdup(ref->path);
	if (!p.repo)
		return -ENOMEM;
	out->pull_required = true;

	if (known && revalidate) {
		struct error_detail rerr = { 0 };
		_cleanup_free_ char *now = NULL;
		r = registry_head_manifest(m->registry, ref->domain, ref->path,
					   ref->digest ? ref->digest : ref->tag, &now, &rerr);
		if (r == 0 && (!strcmp(now, known) || (known_index && !strcmp(now, known_index)))) {
			free(p.repo);
			pthread_mutex_lock(&m->lock);
			struct refstate *cur = strmap_get(m->refs, canonical);
			if (cur)
				cur->checked_at = manager_now_s(m);
			pthread_mutex_unlock(&m->lock);
			r = refs_image_get(m, canonical, known, ret, errbuf, sizeof(errbuf));
			if (r == 0)
				manager_present_event(m, canonical, known, who);
			return r;
		}
		/* A moved tag or an unreachable registry: pull, which
		 * reports the failure properly if there is one. */
	}

	/* the rate's wait, without gc_lock: collections go on meanwhile */
	pthread_rwlock_unlock(&m->gc_lock);
	r = throttle_acquire(m->throttle, &f->abandon);
	pthread_rwlock_rdlock(&m->gc_lock);
	if (r == -ECANCELED && !atomic_load(&m->cancelled)) {
		p.abandoned = true;
		goto failed;
	}
	if (r < 0) {
		pull_fail(&p, r == -EAGAIN ? "pull QPS exceeded" : "shutting down");
		goto failed;
	}
	t0 = manager_now_f(m);
	atomic_store(&progress->state, PULL_RESOLVING);
	emit(m, EVENT_NORMAL, "Pulling", canonical, NULL, 0, who, "Pulling image \"%s\"",
	     canonical);
	r = pull_image(&p, &digest, &index_digest, &size);
	if (r == 0)
		r = refs_image_get(m, canonical, digest, ret, errbuf, sizeof(errbuf));
	if (r == 0) {
		r = refs_publish(m, canonical, digest, index_digest, image_key(*ret), who,
				 credentials_configured(m->opts.credentials, ref->domain), true);
		if (r < 0) {
			image_unref(*ret, 1);
			pull_fail(&p, "cannot record reference: %s", strerror(-r));
		}
	} else if (errbuf[0]) {
		pull_fail(&p, "%s", errbuf);
	}
	/* published (the reference keeps it now) or failed */
	pull_inflight_leave(&p);
	if (r < 0)
		goto failed;
	free(p.repo);
	backoff_success(m->backoff, canonical);
	double t1 = manager_now_f(m);
	out->pulled = true;
	out->seconds = t1 - t0;
	out->bytes = atomic_load(&progress->bytes_done);
	if (image_lazy_pending(*ret))
		/* Pulled follows once the background has fetched the rest */
		emit(m, EVENT_NORMAL, "Usable", canonical, digest, 0, who,
		     "Image \"%s\" usable in %.3fs (%.3fs including waiting), before its "
		     "content: manifest, config and the lazy layers' tables of contents "
		     "fetched (%llu bytes); the rest comes when read and in the background",
		     canonical, t1 - t0, t1 - t_wait, (unsigned long long)out->bytes);
	else
		emit(m, EVENT_NORMAL, "Pulled", canonical, digest, 0, who,
		     "Successfully pulled image \"%s\" in %.3fs (%.3fs including waiting). "
		     "Image size: %llu bytes (config and compressed layers, as downloaded).",
		     canonical, t1 - t0, t1 - t_wait, (unsigned long long)size);
	return 0;

failed:
	free(p.repo);
	if (p.abandoned) {
		/* Nobody asked for it any more: no failure, no back-off. */
		out->abandoned = true;
		emit(m, EVENT_NORMAL, "PullAbandoned", canonical, NULL, 0, who,
		     "Pull of image \"%s\" left the queue: no process waits for it any more",
		     canonical);
		return -EAGAIN;
	}
	r = errtable_normalize(r);
	p.why.err = r;
	/* backoff_failure also forgets entries untouched for twice the cap. */
	backoff_failure(m->backoff, canonical, &p.why);
	out->failed = r;
	/* "Failed" whatever the errno: a full pull queue is EAGAIN but no
	 * back-off. */
	emit(m, EVENT_WARNING, "Failed", canonical, digest, r, who,
	     "Failed to pull image \"%s\": %s", canonical, error_detail_message(&p.why));
	return r;
}

static void record_outcome_locked(struct manager *m, enum pull_policy policy, const char *domain,
				  const struct ensure_outcome *o)
{
	static const double buckets[PULL_DURATION_BUCKETS] = {
		1,   5,	  10,  20,  30,	 60,   120,  180,  240,
		300, 360, 480, 600, 900, 1200, 1800, 2700, 3600,
	};
	struct manager_stats *st = &m->stats;
	unsigned pi = policy >= PULL_ALWAYS && policy <= PULL_NEVER ? policy - 1 : 1;

	st->ensure[pi][o->present][o->pull_required]++;
	if (o->pulled) {
		unsigned b = 0;
		while (b < PULL_DURATION_BUCKETS && o->seconds > buckets[b])
			b++;
		st->pull_buckets[b]++;
		st->pull_count++;
		st->pull_seconds += o->seconds;
		st->pulls_ok++;
		uint64_t *bytes = strmap_get(m->registry_bytes, domain);
		if (!bytes && (bytes = calloc(1, sizeof(*bytes))) &&
		    strmap_put(m->registry_bytes, domain, bytes) < 0) {
			free(bytes);
			bytes = NULL;
		}
		if (bytes)
			*bytes += o->bytes;
	}
	if (o->failed && o->failed != -EAGAIN) {
		st->pulls_failed++;
		for (unsigned i = 0; i < errtable_len && i < ARRAY_SIZE(st->failures_by_errno); i++)
			if (-errtable[i].err == o->failed)
				st->failures_by_errno[i]++;
	}
}

static void touch_locked(struct manager *m, const char *canonical)
{
	struct refstate *rs = strmap_get(m->refs, canonical);

	if (rs)
		rs->last_used_ms = manager_wall_ms();
}

/* Fast path under the lock: a cached, loaded image that needs no
 * revalidation.  Returns true and a reference in *ret when served. */
static bool ensure_cached_locked(struct manager *m, const char *canonical, enum pull_policy policy,
				 struct image **ret)
{
	struct refstate *rs = strmap_get(m->refs, canonical);
	struct image *img;
	unsigned iv = m->opts.revalidate_interval_s ?: MANAGER_DEFAULT_REVALIDATE_S;

	if (!rs || !(img = strmap_get(m->images, canonical)) ||
	    strcmp(image_digest(img), rs->digest) != 0)
		return false;
	if (policy == PULL_ALWAYS && manager_now_s(m) - rs->checked_at >= iv)
		return false;
	image_ref(img, 1);
	*ret = img;
	return true;
}

/* One caller waiting for a flight. */
struct ensure_call {
	struct manager *manager;
	struct ensure_call *prev, *next; /* flight.calls; manager.lock */
	/* NULL once the flight's end claimed the call; manager.lock */
	struct flight *flight;
	ensure_done_fn *done;
	void *userdata;
	struct caller who;
	bool has_who;
};

static void call_link_locked(struct flight *f, struct ensure_call *c)
{
	c->flight = f;
	c->prev = NULL;
	c->next = f->calls;
	if (f->calls)
		f->calls->prev = c;
	f->calls = c;
	f->n_calls++;
	/* A late caller keeps a pull in the queue that was about to leave. */
	atomic_store(&f->abandon, false);
}

/* One flight's work, on a thread of its own.  Owns everything in it. */
struct flight_job {
	struct manager *m;
	struct flight *f;
	struct reference *ref;
	char *canonical;
	enum pull_policy policy;
	struct caller who;
	bool has_who;
	double t_wait;
};

static void recent_remember_locked(struct manager *m, const struct caller *who,
				   const char *canonical, int err);

static void flight_run(struct flight_job *j)
{
	struct manager *m = j->m;
	struct flight *f = j->f;
	struct ensure_outcome out = { 0 };
	struct ensure_call *calls, *c, *next;
	struct image *img = NULL;
	int r;

	pthread_rwlock_rdlock(&m->gc_lock);
	r = manager_decide(m, j->ref, j->canonical, j->policy, j->has_who ? &j->who : NULL,
			   j->t_wait, f, &out, &img);
	pthread_rwlock_unlock(&m->gc_lock);
	bool dropped = f->quota_dropped;
	bool want_gc = out.pulled && gc_needed(m);

	pthread_mutex_lock(&m->lock);
	if (!out.abandoned)
		record_outcome_locked(m, j->policy, j->ref->domain, &out);
	if (r == 0)
		touch_locked(m, j->canonical);
	if (want_gc) {
		m->gc_wanted = true;
		pthread_cond_signal(&m->gc_cond);
	}
	strmap_remove(m->flights, j->canonical);
	calls = f->calls;
	f->calls = NULL;
	for (c = calls; c; c = c->next) {
		c->flight = NULL;
		if (r < 0 && c->has_who)
			recent_remember_locked(m, &c->who, j->canonical, r);
	}
	if (f->counted) {
		struct user_usage *u = users_get_locked(m, f->uid);
		if (u && u->pulls > 0)
			u->pulls--;
		users_release_locked(m, f->uid);
	}
	pthread_mutex_unlock(&m->lock);

	/* Outside the lock: a callback may reply to the kernel. */
	for (c = calls; c; c = next) {
		int cr = r;
		next = c->next;
		/* Each caller's own: a flight is shared by users who may see
		 * its image and users who may not. */
		if (cr == 0)
			cr = manager_admit(m, j->canonical, image_digest(img),
					   c->has_who ? &c->who : NULL);
		if (cr == 0)
			image_ref(img, 1);
		c->done(c->userdata, cr, cr == 0 ? img : NULL);
		free(c);
	}
	if (r == 0)
		image_unref(img, 1);
	/* After the answers: the kernel forgets the names dropped only once
	 * the lookups of their directory are answered. */
	if (dropped)
		gc_sweep_dropped(m);
	free(f);
	reference_free(j->ref);
	free(j->canonical);
	free(j);

	pthread_mutex_lock(&m->lock);
	if (--m->jobs_running == 0)
		pthread_cond_broadcast(&m->flight_cond);
	pthread_mutex_unlock(&m->lock);
}

static void *flight_thread(void *arg)
{
	flight_run(arg);
	return NULL;
}

/* The kernel revalidates a cached image directory with a lookup, and when
 * that lookup fails it drops the entry and looks the name up once more,
 * all within one system call of one process.  That second lookup must
 * get the same answer, not EAGAIN from the back-off the first one just
 * started: so a process's failure is remembered for a moment. */
#define RECENT_FAILURE_NS (200 * 1000000LL)

struct recent_failure {
	int64_t at_ns;
	int err;
};

static int recent_key(const struct caller *who, const char *canonical, char **ret)
{
	if (!who || who->pid <= 0)
		return -ENOENT;
	return asprintf(ret, "%ld\n%s", (long)who->pid, canonical) < 0 ? -ENOMEM : 0;
}

static int prune_recent(void *userdata, const char *key, void *value)
{
	struct manager *m = userdata;
	struct recent_failure *rf = value;

	/* Removing while iterating is not allowed: mark, collect below. */
	if (clock_now_ns(m->clock) - rf->at_ns > RECENT_FAILURE_NS)
		rf->err = 0;
	return 0;
}

struct drop_ctx {
	char **keys;
	size_t n, cap;
};

static int collect_stale(void *userdata, const char *key, void *value)
{
	struct drop_ctx *d = userdata;
	struct recent_failure *rf = value;

	if (rf->err == 0 && d->n < d->cap)
		d->keys[d->n++] = strdup(key);
	return 0;
}

static void recent_remember_locked(struct manager *m, const struct caller *who,
				   const char *canonical, int err)
{
	_cleanup_free_ char *key = NULL;
	struct recent_failure *rf;

	if (recent_key(who, canonical, &key) < 0)
		return;
	if (strmap_size(m->recent) > 256) {
		struct drop_ctx d = { .cap = strmap_size(m->recent) };
		d.keys = calloc(d.cap, sizeof(char *));
		strmap_foreach(m->recent, prune_recent, m);
		if (d.keys) {
			strmap_foreach(m->recent, collect_stale, &d);
			for (size_t i = 0; i < d.n; i++) {
				free(strmap_remove(m->recent, d.keys[i]));
				free(d.keys[i]);
			}
			free(d.keys);
		}
	}
	rf = strmap_get(m->recent, key);
	if (!rf) {
		rf = calloc(1, sizeof(*rf));
		if (!rf || strmap_put(m->recent, key, rf) < 0) {
			free(rf);
			return;
		}
	}
	rf->at_ns = clock_now_ns(m->clock);
	rf->err = err;
}

/* The error this process was told a moment ago, or 0. */
static int recent_lookup_locked(struct manager *m, const struct caller *who, const char *canonical)
{
	_cleanup_free_ char *key = NULL;
	struct recent_failure *rf;

	if (recent_key(who, canonical, &key) < 0)
		return 0;
	rf = strmap_get(m->recent, key);
	if (!rf || rf->err == 0 || clock_now_ns(m->clock) - rf->at_ns > RECENT_FAILURE_NS)
		return 0;
	return rf->err;
}

/* A new flight for canonical, its job started on a thread of its own.
 * Takes ref.  manager.lock held.  A user other than root is held to the
 * per-user limits; *limit_msg says why when that refuses it. */
static int flight_start_locked(struct manager *m, struct reference *ref, const char *canonical,
			       enum pull_policy policy, const struct caller *who, double t_wait,
			       struct flight **ret, char *limit_msg, size_t limit_len)
{
	bool user = who && who->uid != 0;
	struct flight_job *job = NULL;
	struct flight *f = NULL;
	pthread_attr_t attr;
	pthread_t th;
	int r;

	if (user && !strmap_get(m->refs, canonical)) {
		/* At the limit: the user's idle names go first. */
		if (users_names_full_locked(m, who->uid))
			names_collect_locked(m, who->uid, 0);
		r = users_admit_name_locked(m, who->uid, limit_msg, limit_len);
		if (r < 0)
			goto fail;
	}
	if (user) {
		r = users_admit_pull_locked(m, who->uid, limit_msg, limit_len);
		if (r < 0)
			goto fail;
	}
	f = calloc(1, sizeof(*f));
	job = calloc(1, sizeof(*job));
	if (!f || !job || !(job->canonical = strdup(canonical)) ||
	    strmap_put(m->flights, canonical, f) < 0) {
		r = -ENOMEM;
		goto fail_counted;
	}
	f->counted = user;
	f->uid = user ? who->uid : 0;
	f->progress.started_ns = manager_wall_ms() * 1000000;
	*job = (struct flight_job){
		.m = m,
		.f = f,
		.ref = ref,
		.canonical = job->canonical,
		.policy = policy,
		.has_who = who != NULL,
		.t_wait = t_wait,
	};
	if (who)
		job->who = *who;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = -pthread_create(&th, &attr, flight_thread, job);
	pthread_attr_destroy(&attr);
	if (r < 0) {
		strmap_remove(m->flights, canonical);
		job->ref = NULL;
		goto fail_counted;
	}
	m->jobs_running++;
	*ret = f;
	return 0;
fail_counted:
	if (user) {
		struct user_usage *u = users_get_locked(m, who->uid);
		if (u && u->pulls > 0)
			u->pulls--;
		users_release_locked(m, who->uid);
	}
	if (job)
		free(job->canonical);
	free(job);
	free(f);
fail:
	reference_free(ref);
	return r;
}

/* Everything ensure does before it waits, for a parsed reference, which
 * it takes.  done NULL: nobody waits (the operator's background pull).
 * keep: the flight completes even when every caller leaves. */
static int ensure_begin(struct manager *m, struct reference *ref, const struct caller *who,
			bool keep, ensure_done_fn *done, void *userdata,
			struct ensure_call **ret_call, struct image **ret_img)
{
	_cleanup_free_ char *canonical = NULL;
	struct ensure_call *call = NULL;
	struct flight *f;
	struct image *img = NULL;
	enum pull_policy policy;
	char limit_msg[256] = "", why[512] = "";
	bool may_pull, cached_digest, pull_denied = false;
	double t_wait = manager_now_f(m);
	int r;

	canonical = reference_to_string(ref);
	if (!canonical) {
		reference_free(ref);
		return -ENOMEM;
	}
	policy = manager_policy_of(m, ref, canonical);
	if (done && !(call = calloc(1, sizeof(*call)))) {
		reference_free(ref);
		return -ENOMEM;
	}

	/* Who may cause a pull is known before the lock: groups may be read
	 * from /proc.  One who may not still gets what is cached. */
	may_pull = manager_may_pull(m, ref, canonical, who, why, sizeof(why));
	cached_digest = !may_pull && ref->digest && cache_blob_present(m->cache, ref->digest);

	pthread_mutex_lock(&m->lock);
	if (ensure_cached_locked(m, canonical, policy, &img)) {
		record_outcome_locked(m, policy, ref->domain,
				      &(struct ensure_outcome){ .present = true });
		touch_locked(m, canonical);
		pthread_mutex_unlock(&m->lock);
		reference_free(ref);
		free(call);
		r = manager_admit(m, canonical, image_digest(img), who);
		if (r < 0) {
			image_unref(img, 1);
			return r;
		}
		manager_present_event(m, canonical, image_digest(img), who);
		*ret_img = img;
		return 1;
	}
	r = recent_lookup_locked(m, who, canonical);
	f = strmap_get(m->flights, canonical);
	if (r == 0 && !f && !may_pull && !cached_digest && !strmap_get(m->refs, canonical)) {
		r = -EACCES;
		pull_denied = true;
	}
	if (r == 0 && !f) {
		r = flight_start_locked(m, TAKE_PTR(ref), canonical, policy, who, t_wait, &f,
					limit_msg, sizeof(limit_msg));
	}
	if (r == 0) {
		if (may_pull)
			atomic_store(&f->may_pull, true);
		if (keep)
			f->keep = true;
		if (call) {
			call->manager = m;
			call->done = done;
			call->userdata = userdata;
			call->has_who = who != NULL;
			if (who)
				call->who = *who;
			call_link_locked(f, call);
			*ret_call = TAKE_PTR(call);
		}
	}
	pthread_mutex_unlock(&m->lock);
	reference_free(ref);
	free(call);
	if (limit_msg[0])
		emit(m, EVENT_WARNING, "UserLimit", canonical, NULL, -EAGAIN, who,
		     "Refused image \"%s\": %s", canonical, limit_msg);
	if (pull_denied)
		manager_pull_denied(m, canonical, who, why);
	return r;
}

/* reference parsed, or -EINVAL said in the events log. */
static int ensure_parse(struct manager *m, const char *reference, const struct caller *who,
			struct reference **ret)
{
	int r = reference_parse(reference, REFERENCE_DEFAULT_TAG, ret);

	if (r == -EINVAL)
		manager_invalid_reference(m, reference, who);
	return r;
}

int manager_ensure_start(struct manager *m, const char *reference, const struct caller *who,
			 ensure_done_fn *done, void *userdata, struct ensure_call **ret_call,
			 struct image **ret_img)
{
	struct reference *ref = NULL;
	int r = ensure_parse(m, reference, who, &ref);

	if (r < 0)
		return r;
	return ensure_begin(m, ref, who, false, done, userdata, ret_call, ret_img);
}

int manager_ensure_start_ref(struct manager *m, struct reference *ref, const struct caller *who,
			     ensure_done_fn *done, void *userdata, struct ensure_call **ret_call,
			     struct image **ret_img)
{
	return ensure_begin(m, ref, who, false, done, userdata, ret_call, ret_img);
}

bool ensure_call_cancel(struct ensure_call *call)
{
	struct manager *m;
	struct flight *f;
	bool wake = false;

	if (!call)
		return false;
	/* The call's flight is alive while the call is linked to it. */
	m = call->manager;
	pthread_mutex_lock(&m->lock);
	f = call->flight;
	if (!f) {
		pthread_mutex_unlock(&m->lock);
		return false;
	}
	if (call->prev)
		call->prev->next = call->next;
	else
		f->calls = call->next;
	if (call->next)
		call->next->prev = call->prev;
	call->flight = NULL;
	if (--f->n_calls == 0 && !f->keep) {
		atomic_store(&f->abandon, true);
		wake = true;
	}
	pthread_mutex_unlock(&m->lock);
	if (wake) {
		throttle_wake(m->throttle);
		puller_wake(m->puller);
	}
	free(call);
	return true;
}

int manager_pull_background(struct manager *m, const char *reference, json_t **ret_json,
			    struct error_detail *err)
{
	_cleanup_free_ char *canonical = NULL;
	struct reference *ref = NULL;
	struct image *img = NULL;
	int r;

	r = reference_parse(reference, REFERENCE_DEFAULT_TAG, &ref);
	if (r < 0) {
		if (r == -EINVAL)
			error_detail_set(err, r, "invalid reference \"%s\"", reference);
		return r;
	}
	canonical = reference_to_string(ref);
	if (!canonical) {
		reference_free(ref);
		return -ENOMEM;
	}
	r = ensure_begin(m, ref, NULL, true, NULL, NULL, NULL, &img);
	if (r < 0)
		return error_detail_set(err, r, "cannot pull \"%s\": %s", canonical, strerror(-r));
	if (r == 1) {
		/* asked for the whole image: its completion starts now */
		image_completion_wake(img, true);
		image_unref(img, 1);
	}
	json_t *answer =
		json_pack("{s:b, s:s, s:b}", "ok", 1, "reference", canonical, "present", r == 1);
	if (!answer)
		return -ENOMEM;
	*ret_json = answer;
	return 0;
}

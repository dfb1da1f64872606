/* The background completions of lazy layers: threads, slots, schedules.
 * See lazy-completer.h. */
#include "lazy-completer.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlist.h"
#include "lazy.h"
#include "lazy-schedule.h"
#include "macro.h"

struct lazy_completer {
	struct lazy_completer_options o;
	pthread_mutex_t lock;
	/* Broadcast when a slot is given back, a completion is woken or
	 * ends. */
	pthread_cond_t cond;
	struct dlist completions; /* waiting or running; lock */
	unsigned count;		  /* on completions; lock */
	unsigned running;	  /* holding a slot; lock */
};

/* One layer's completion, on a thread of its own. */
struct completion {
	struct lazy_completer *lc;
	struct lazy_completion_job job;
	char *digest;
	struct lazy_schedule sched; /* lc->lock */
	struct lazy_reads reads;    /* the layer's when the completion began */
	/* the link measured fast enough to end the window (lc->lock); the
	 * event told */
	uint64_t fast_rate, fast_rest;
	bool fast_told;
	struct dlist_node node; /* on lc->completions; lc->lock */
};

int lazy_completer_new(const struct lazy_completer_options *o, struct lazy_completer **ret)
{
	struct lazy_completer *lc = calloc(1, sizeof(*lc));

	if (!lc)
		return -ENOMEM;
	lc->o = *o;
	pthread_mutex_init(&lc->lock, NULL);
	pthread_cond_init(&lc->cond, NULL);
	*ret = lc;
	return 0;
}

void lazy_completer_free(struct lazy_completer *lc)
{
	if (!lc)
		return;
	pthread_cond_destroy(&lc->cond);
	pthread_mutex_destroy(&lc->lock);
	free(lc);
}

static bool cancelled(const struct lazy_completer *lc)
{
	return atomic_load(lc->o.cancelled);
}

/* Waits on cond for at most 200 ms, and at most wait_ns (the owner's
 * cancel does not signal it: the caller looks at the flag again soon).
 * lc->lock held. */
static void completer_nap(struct lazy_completer *lc, int64_t wait_ns)
{
	struct timespec ts =
		clock_real_deadline(MAX(MIN(wait_ns, 200 * INT64_C(1000000)), INT64_C(1000000)));

	pthread_cond_timedwait(&lc->cond, &lc->lock, &ts);
}

/* Whether readers read the layers of group in bulk since their
 * completions began (lazy.h).  lc->lock held. */
static bool group_bulk_read(struct lazy_completer *lc, const void *group)
{
	struct lazy_reads sum = { 0 }, now;

	for (struct dlist_node *d = lc->completions.head; d; d = d->next) {
		struct completion *o = dlist_entry(d, struct completion, node);

		if (o->job.group != group)
			continue;
		lazy_layer_reads(o->job.layer, &now);
		sum.fetches += now.fetches - o->reads.fetches;
		sum.bytes += now.bytes - o->reads.bytes;
	}
	return sum.bytes >= LAZY_BULK_BYTES || sum.fetches >= LAZY_BULK_FETCHES;
}

/* Whether the rest of group arrives, at the rate its readers' fetches
 * got (once they brought LAZY_RATE_MIN_BYTES), within cp's start-up
 * window; sets cp->fast_rate and fast_rest.  lc->lock held. */
static bool group_link_fast(struct lazy_completer *lc, struct completion *cp)
{
	uint64_t bytes = 0, us = 0, rest = 0, rate;
	struct lazy_reads now;

	for (struct dlist_node *d = lc->completions.head; d; d = d->next) {
		struct completion *o = dlist_entry(d, struct completion, node);

		if (o->job.group != cp->job.group)
			continue;
		lazy_layer_reads(o->job.layer, &now);
		bytes += now.bytes;
		us += now.us;
		rest += now.size - MIN(now.bytes, now.size);
	}
	/* (fetches at once are summed one after the other: the rate is
	 * never overrated) */
	rate = bytes >= LAZY_RATE_MIN_BYTES ? bytes * 1000000u / MAX(us, (uint64_t)1) : 0;
	if (!lazy_schedule_link_fast(&cp->sched, rate, rest))
		return false;
	cp->fast_rate = rate;
	cp->fast_rest = rest;
	return true;
}

/* Waits until the schedule says go (unless scheduled is false: a
 * prefetch), then for a slot; false when the daemon stops or the layer is
 * gone first. */
static bool slot_take(struct completion *cp, bool scheduled)
{
	struct lazy_completer *lc = cp->lc;
	bool ok, gone = false;

	pthread_mutex_lock(&lc->lock);
	for (;;) {
		int64_t wait_ns = 0;

		if (cancelled(lc))
			break;
		lazy_schedule_readers(&cp->sched, atomic_load(&lc->o.stats->reader_ok),
				      atomic_load(&lc->o.stats->foreground) > 0);
		/* readers who read the image in bulk end its window */
		if (scheduled && cp->sched.phase == LAZY_PHASE_WINDOW &&
		    group_bulk_read(lc, cp->job.group))
			lazy_schedule_wake(&cp->sched, true);
		/* a link on which waiting only delays the image ends it too */
		if (scheduled && cp->sched.phase == LAZY_PHASE_WINDOW && !cp->sched.now &&
		    lc->o.measure_link && group_link_fast(lc, cp))
			lazy_schedule_wake(&cp->sched, true);
		if ((!scheduled || lazy_schedule_due(&cp->sched, &wait_ns)) &&
		    lc->running < LAZY_COMPLETIONS_MAX)
			break;
		/* (a slot given back signals) */
		completer_nap(lc, scheduled && wait_ns > 0 ? wait_ns : INT64_MAX);
		/* (outside the lock: the owner's hook takes its own) */
		pthread_mutex_unlock(&lc->lock);
		gone = cp->job.gone(cp->job.userdata);
		pthread_mutex_lock(&lc->lock);
		if (gone)
			break;
	}
	ok = !cancelled(lc) && !gone;
	if (ok) {
		lc->running++;
		if (scheduled)
			lazy_schedule_running(&cp->sched);
	}
	pthread_mutex_unlock(&lc->lock);
	return ok;
}

static void slot_give(struct lazy_completer *lc)
{
	pthread_mutex_lock(&lc->lock);
	lc->running--;
	pthread_cond_broadcast(&lc->cond);
	pthread_mutex_unlock(&lc->lock);
}

/* The files before eStargz's prefetch landmark, at once: the start-up
 * window is for what readers ask, and those files are what the image's
 * builder saw its workload read first.  Once; what fails is fetched when
 * read, or by the completion. */
static void prefetch_layer(struct completion *cp)
{
	struct lazy_completer *lc = cp->lc;
	struct lazy_prefetch pf, pp = { 0 };
	int64_t t0 = clock_now_ns(lc->o.clock);
	int r, rp = -ECANCELED;

	if (cp->job.gone(cp->job.userdata) || !slot_take(cp, false)) {
		if (cp->job.profiled)
			cp->job.profiled(cp->job.userdata, &pp, rp);
		return;
	}
	r = lazy_layer_prefetch(cp->job.layer, lc->o.registry, lc->o.cancelled, &pf);
	if (cp->job.profile)
		rp = lazy_layer_prefetch_objects(cp->job.layer, lc->o.registry, lc->o.cancelled,
						 cp->job.profile, &pp);
	slot_give(lc);
	if (cp->job.profiled)
		cp->job.profiled(cp->job.userdata, &pp, rp);
	if (r == 0 && pf.fetched)
		event_sendf(&lc->o.events, EVENT_NORMAL, "LayerPrefetched", NULL, cp->digest, 0,
			    NULL,
			    "Prefetched the %zu files before the prefetch landmark of lazy layer "
			    "%s (%" PRIu64 " bytes fetched) in %.3fs",
			    pf.files, cp->digest, pf.bytes,
			    (double)(clock_now_ns(lc->o.clock) - t0) / 1e9);
	else if (r < 0 && r != -ECANCELED)
		event_sendf(&lc->o.events, EVENT_WARNING, "LazyFetchFailed", NULL, cp->digest, r,
			    NULL,
			    "Prefetching the files before the prefetch landmark of lazy layer %s "
			    "failed: %s (they are fetched when read, and by the completion)",
			    cp->digest, strerror(-r));
}

/* Says once that the link ended the window (group_link_fast()). */
static void tell_fast(struct completion *cp)
{
	struct lazy_completer *lc = cp->lc;
	uint64_t rate, rest;

	pthread_mutex_lock(&lc->lock);
	rate = cp->fast_told ? 0 : cp->fast_rate;
	rest = cp->fast_rest;
	cp->fast_told = true;
	pthread_mutex_unlock(&lc->lock);
	if (rate)
		event_sendf(&lc->o.events, EVENT_NORMAL, "LazyCompletionNow", NULL, cp->digest, 0,
			    NULL,
			    "Completing lazy layer %s before the end of its start-up window: "
			    "its image's readers fetched at %.1f MB/s, at which the %.1f MB "
			    "left take %.2fs, less than the window's %.1fs",
			    cp->digest, (double)rate / 1e6, (double)rest / 1e6,
			    (double)rest / (double)rate, (double)lc->o.window_ns / 1e9);
}

/* One try after another until the layer is complete (0), cannot be, or
 * the daemon stops. */
static int complete_layer(struct completion *cp)
{
	struct lazy_completer *lc = cp->lc;
	const struct event_sink *ev = &lc->o.events;
	int r;

	prefetch_layer(cp);
	for (;;) {
		unsigned delay, tries;

		r = -ECANCELED;
		if (cp->job.gone(cp->job.userdata))
			return r;
		if (slot_take(cp, true)) {
			tell_fast(cp);
			r = lazy_layer_complete(cp->job.layer, lc->o.registry, lc->o.cancelled);
			slot_give(lc);
		}
		if (r == 0 && !lazy_layer_is_complete(cp->job.layer))
			r = -EAGAIN; /* a file that did not verify */
		if (r == 0 || r == -ECANCELED)
			return r;
		if (lazy_layer_foreign_toc(cp->job.layer)) {
			event_sendf(ev, EVENT_WARNING, "LazyLayerUnverified", NULL, cp->digest, r,
				    NULL,
				    "Lazy layer %s is not the blob of that digest: the blob holds "
				    "another table of contents than the one the layer was built "
				    "from, or chunks that do not match it; it is never completed, "
				    "and only images naming that table are served from it",
				    cp->digest);
			return r;
		}
		pthread_mutex_lock(&lc->lock);
		delay = lazy_schedule_failed(&cp->sched);
		tries = cp->sched.failures;
		pthread_mutex_unlock(&lc->lock);
		event_sendf(ev, EVENT_WARNING, "LazyFetchFailed", NULL, cp->digest, r, NULL,
			    "Fetching the rest of lazy layer %s failed: %s (try %u; tries again "
			    "in %u s, sooner once a read or a lookup of the image gets through; "
			    "its files are fetched when read)",
			    cp->digest, strerror(-r), tries, delay);
	}
}

/* Takes cp off the completer and frees it. */
static void completion_remove(struct completion *cp)
{
	struct lazy_completer *lc = cp->lc;

	pthread_mutex_lock(&lc->lock);
	dlist_remove(&lc->completions, &cp->node);
	if (--lc->count == 0)
		pthread_cond_broadcast(&lc->cond);
	pthread_mutex_unlock(&lc->lock);
	free(cp->digest);
	free(cp);
}

static void *completion_thread(void *arg)
{
	struct completion *cp = arg;
	struct lazy_completer *lc = cp->lc;
	int r = complete_layer(cp);

	if (r == 0)
		event_sendf(&lc->o.events, EVENT_NORMAL, "LayerCompleted", NULL, cp->digest, 0,
			    NULL, "Layer %s, pulled lazily, is complete and verified %s",
			    cp->digest,
			    lazy_layer_toc_verified(cp->job.layer)
				    ? "by its table of contents (every file checked against it; "
				      "the blob was not read whole for its digest)"
				    : "against its digest");
	cp->job.end(cp->job.userdata, r == 0);
	completion_remove(cp);
	return NULL;
}

int lazy_completer_start(struct lazy_completer *lc, const struct lazy_completion_job *job)
{
	struct completion *cp;
	pthread_attr_t attr;
	pthread_t th;
	int r = 0;

	if (cancelled(lc))
		return -ECANCELED;
	cp = calloc(1, sizeof(*cp));
	if (!cp || !(cp->digest = strdup(job->digest))) {
		free(cp);
		return -ENOMEM;
	}
	cp->lc = lc;
	cp->job = *job;
	cp->job.digest = cp->digest;
	lazy_schedule_init(&cp->sched, lc->o.clock, lc->o.window_ns,
			   atomic_load(&lc->o.stats->reader_ok));
	lazy_layer_reads(job->layer, &cp->reads);
	pthread_mutex_lock(&lc->lock);
	lc->count++;
	dlist_push(&lc->completions, &cp->node);
	pthread_mutex_unlock(&lc->lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&th, &attr, completion_thread, cp) != 0) {
		completion_remove(cp);
		r = -EAGAIN;
	}
	pthread_attr_destroy(&attr);
	return r;
}

void lazy_completer_wake(struct lazy_completer *lc, bool (*match)(void *match_data, void *userdata),
			 void *match_data, bool waited)
{
	pthread_mutex_lock(&lc->lock);
	for (struct dlist_node *n = lc->completions.head; n; n = n->next) {
		struct completion *cp = dlist_entry(n, struct completion, node);

		if (match(match_data, cp->job.userdata))
			lazy_schedule_wake(&cp->sched, waited);
	}
	pthread_cond_broadcast(&lc->cond);
	pthread_mutex_unlock(&lc->lock);
}

int lazy_completer_phase(struct lazy_completer *lc, const char *digest, unsigned *ret_failures)
{
	int r = -ENOENT;

	pthread_mutex_lock(&lc->lock);
	for (struct dlist_node *n = lc->completions.head; n; n = n->next) {
		struct completion *cp = dlist_entry(n, struct completion, node);

		if (strcmp(cp->digest, digest) == 0) {
			*ret_failures = cp->sched.failures;
			r = (int)cp->sched.phase;
			break;
		}
	}
	pthread_mutex_unlock(&lc->lock);
	return r;
}

unsigned lazy_completer_count(struct lazy_completer *lc)
{
	unsigned n;

	pthread_mutex_lock(&lc->lock);
	n = lc->count;
	pthread_mutex_unlock(&lc->lock);
	return n;
}

void lazy_completer_drain(struct lazy_completer *lc)
{
	pthread_mutex_lock(&lc->lock);
	while (lc->count)
		pthread_cond_wait(&lc->cond, &lc->lock);
	pthread_mutex_unlock(&lc->lock);
}

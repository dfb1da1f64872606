/* Ensure's decision for one flight: from the table or the cache when the
 * policy allows, a revalidation of a moved tag under Always, back-off
 * before any registry traffic, then a pull (pull.c) whose result is
 * published (refs.c), with the events of each outcome. */
#include "manager.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backoff.h"
#include "cache.h"
#include "errname.h"
#include "errtable.h"
#include "macro.h"
#include "pull.h"
#include "reference.h"
#include "registry.h"
#include "strmap.h"
#include "throttle.h"
#include "manager-private.h"

enum pull_policy manager_policy_of(const struct manager *m, const struct reference *ref,
				   const char *canonical)
{
	return policy_resolve(m->policy, m->opts.pull_policy, canonical, ref->tag, ref->digest);
}

#define emit manager_emit

int manager_decide(struct manager *m, const struct reference *ref, const char *canonical,
		   enum pull_policy policy, const struct caller *who, double t_wait,
		   struct flight *f, struct ensure_outcome *out, struct image **ret)
{
	struct pull_progress *progress = &f->progress;
	struct pull p = {
		.m = m, .ref = ref, .canonical = canonical, .progress = progress, .flight = f
	};
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
		revalidate = policy == PULL_ALWAYS && manager_now_s(m) - rs->checked_at >= iv;
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
			refs_publish(m, canonical, ref->digest, NULL, image_key(img), who);
			manager_present_event(m, canonical, ref->digest, who);
			*ret = img;
			return 0;
		}
	}

	if (known && !revalidate) {
		r = refs_image_get(m, canonical, known, ret, errbuf, sizeof(errbuf));
		if (r == 0) {
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

	r = throttle_acquire(m->throttle, &f->abandon);
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
		r = refs_publish(m, canonical, digest, index_digest, image_key(*ret), who);
		if (r < 0) {
			image_unref(*ret, 1);
			pull_fail(&p, "cannot record reference: %s", strerror(-r));
		}
	} else if (errbuf[0]) {
		pull_fail(&p, "%s", errbuf);
	}
	if (r < 0)
		goto failed;
	free(p.repo);
	backoff_success(m->backoff, canonical);
	double t1 = manager_now_f(m);
	out->pulled = true;
	out->seconds = t1 - t0;
	out->bytes = atomic_load(&progress->bytes_done);
	emit(m, EVENT_NORMAL, "Pulled", canonical, digest, 0, who,
	     "Successfully pulled image \"%s\" in %.3fs (%.3fs including waiting). "
	     "Image size: %llu bytes.",
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

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

#include "access.h"
#include "backoff.h"
#include "cache.h"
#include "credentials.h"
#include "errname.h"
#include "errtable.h"
#include "layerview.h"
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

void manager_invalid_reference(struct manager *m, const char *text, const struct caller *who)
{
	emit(m, EVENT_WARNING, errtable_reason(-EINVAL), text, NULL, -EINVAL, who,
	     "Failed to apply default image tag \"%s\": invalid reference format", text);
}

void manager_user_limit(struct manager *m, const char *what, const struct caller *who,
			const char *why)
{
	emit(m, EVENT_WARNING, "UserLimit", what, NULL, -EAGAIN, who, "Refused \"%s\": %s", what,
	     why);
}

/* ---- access (access.h) ---------------------------------------------- */

bool manager_credentials_for(struct manager *m, const char *reference)
{
	struct reference *ref = NULL;
	bool r;

	if (reference_parse(reference, REFERENCE_DEFAULT_TAG, &ref) < 0)
		return false;
	r = credentials_configured(m->opts.credentials, ref->domain);
	reference_free(ref);
	return r;
}

bool manager_may_pull(struct manager *m, const struct reference *ref, const char *canonical,
		      const struct caller *who, char *why, size_t len)
{
	if (!who || who->uid == 0)
		return true;
	return access_may_pull(m->access, canonical,
			       credentials_configured(m->opts.credentials, ref->domain), who, why,
			       len);
}

void manager_pull_denied(struct manager *m, const char *canonical, const struct caller *who,
			 const char *why)
{
	if (access_event_due(m->access, who->uid, "PullDenied", canonical, manager_wall_ms()))
		emit(m, EVENT_WARNING, "PullDenied", canonical, NULL, -EACCES, who,
		     "Refused to pull image \"%s\": %s", canonical, why);
}

/* The names of one digest, and whether one of them was pulled without
 * credentials. */
struct digest_names {
	const char *digest;
	char **names; /* those pulled with credentials */
	size_t n, cap;
	bool open; /* one was pulled without */
	bool oom;
};

static int pick_names(void *userdata, const char *key, void *value)
{
	struct digest_names *p = userdata;
	const struct refstate *rs = value;

	if (strcmp(rs->digest, p->digest) != 0)
		return 0;
	if (!rs->credentials) {
		p->open = true;
		return 0;
	}
	if (p->n == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 4;
		char **n = reallocarray(p->names, cap, sizeof(*n));
		if (!n) {
			p->oom = true;
			return 0;
		}
		p->names = n;
		p->cap = cap;
	}
	if ((p->names[p->n] = strdup(key)))
		p->n++;
	else
		p->oom = true;
	return 0;
}

static void digest_names_get(struct manager *m, const char *digest, struct digest_names *p)
{
	*p = (struct digest_names){ .digest = digest };
	pthread_mutex_lock(&m->lock);
	strmap_foreach(m->refs, pick_names, p);
	pthread_mutex_unlock(&m->lock);
}

static void digest_names_done(struct digest_names *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->names[i]);
	free(p->names);
}

bool manager_digest_private(struct manager *m, const char *digest)
{
	struct digest_names p;
	bool r;

	if (!atomic_load(&m->any_credentials))
		return false;
	digest_names_get(m, digest, &p);
	r = !p.open && (p.n > 0 || p.oom);
	digest_names_done(&p);
	return r;
}

/* Every name of a digest serves the same bytes (a digest reference is
 * served from the cache whatever name brought the manifest), so the check
 * is on the content: it is seen by everybody when one of its names was
 * pulled without credentials (anybody could pull it so), and otherwise by
 * whoever a rule of one of its names admits. */
static bool digest_visible(struct manager *m, const char *digest, const struct caller *who,
			   char *why, size_t len)
{
	struct digest_names p;
	bool r = false;

	if (!who || who->uid == 0 || !atomic_load(&m->any_credentials))
		return true;
	digest_names_get(m, digest, &p);
	if (p.open || (p.n == 0 && !p.oom))
		r = true;
	/* Groups may be read from /proc: outside the lock. */
	for (size_t i = 0; i < p.n && !r; i++)
		if (access_may_see(m->access, p.names[i], who, i ? NULL : why, i ? 0 : len))
			r = true;
	digest_names_done(&p);
	return r;
}

static int admit(struct manager *m, const char *canonical, const char *digest,
		 const struct caller *who)
{
	char why[512] = "";

	if (digest_visible(m, digest, who, why, sizeof(why)))
		return 0;
	if (access_event_due(m->access, who->uid, "AccessDenied", canonical, manager_wall_ms()))
		emit(m, EVENT_WARNING, "AccessDenied", canonical, digest, -EACCES, who,
		     "Refused image \"%s\": it was pulled with registry credentials, and %s",
		     canonical, why[0] ? why : "its names could not be read");
	return -EACCES;
}

bool manager_name_visible(struct manager *m, const char *canonical, const char *digest,
			  const struct caller *who)
{
	if (!who || who->uid == 0 || !atomic_load(&m->any_credentials))
		return true;
	if (digest)
		return digest_visible(m, digest, who, NULL, 0);
	/* Not pulled yet (a pull in flight, a back-off entry): as private as
	 * its pull would be. */
	return !manager_credentials_for(m, canonical) ||
	       access_may_see(m->access, canonical, who, NULL, 0);
}

int manager_admit(struct manager *m, const char *canonical, const char *digest,
		  const struct caller *who)
{
	int r = admit(m, canonical, digest, who);

	/* The kernel refuses the user by the image root's ACL. */
	if (r < 0 && atomic_load(&m->kernel_enforces_access))
		r = 0;
	return r;
}

/* The manifest digest whose names decide who sees img: its own, or that
 * of the image a layer view is a layer of. */
static const char *access_digest(const struct image *img)
{
	return image_digest(image_is_layer_view(img) ? layer_view_image(img) : img);
}

bool manager_image_private(struct manager *m, const struct image *img)
{
	return manager_digest_private(m, access_digest(img));
}

int manager_admit_image(struct manager *m, const struct image *img, const char *canonical,
			const struct caller *who)
{
	return admit(m, canonical, access_digest(img), who);
}

void manager_set_kernel_enforces_access(struct manager *m, bool on)
{
	atomic_store(&m->kernel_enforces_access, on);
}

struct readers_ctx {
	struct image_readers *r;
	bool everybody;
	bool oom;
};

static bool id_add(uint32_t **ids, size_t *n, uint32_t id)
{
	uint32_t *grown;

	for (size_t i = 0; i < *n; i++)
		if ((*ids)[i] == id)
			return true;
	grown = reallocarray(*ids, *n + 1, sizeof(**ids));
	if (!grown)
		return false;
	*ids = grown;
	(*ids)[(*n)++] = id;
	return true;
}

static int reader_add(void *userdata, bool everybody, bool group, uint32_t id)
{
	struct readers_ctx *c = userdata;

	if (everybody)
		c->everybody = true;
	else if (!id_add(group ? &c->r->groups : &c->r->users,
			 group ? &c->r->n_groups : &c->r->n_users, id))
		c->oom = true;
	return 0;
}

static int id_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

int manager_image_readers(struct manager *m, const struct image *img, struct image_readers *ret)
{
	struct readers_ctx c = { .r = ret };
	const char *digest = access_digest(img);
	struct digest_names p;
	bool private;

	*ret = (struct image_readers){ 0 };
	if (!atomic_load(&m->any_credentials))
		return 0;
	digest_names_get(m, digest, &p);
	if (p.oom) {
		digest_names_done(&p);
		return -ENOMEM;
	}
	for (size_t i = 0; i < p.n; i++)
		access_readers(m->access, p.names[i], reader_add, &c);
	private = !p.open && p.n > 0 && !c.everybody;
	digest_names_done(&p);
	if (c.oom || !private) {
		image_readers_done(ret);
		return c.oom ? -ENOMEM : 0;
	}
	/* The order an ACL wants: by id within each kind. */
	if (ret->n_users > 1)
		qsort(ret->users, ret->n_users, sizeof(*ret->users), id_cmp);
	if (ret->n_groups > 1)
		qsort(ret->groups, ret->n_groups, sizeof(*ret->groups), id_cmp);
	return 1;
}

void image_readers_done(struct image_readers *r)
{
	free(r->users);
	free(r->groups);
	*r = (struct image_readers){ 0 };
}

int manager_decide(struct manager *m, const struct reference *ref, const char *canonical,
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

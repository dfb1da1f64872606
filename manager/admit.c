/* Admission of the callers of ensure: whether one may cause a pull (the
 * access rules, access.h), whether one may see what a name holds (names
 * pulled with the registry's credentials are private), which users and
 * groups may read an image, and the events of a refusal. */
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

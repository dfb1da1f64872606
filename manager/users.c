/* What one user other than root can make the daemon hold.  On an
 * allow_other mount any local user can look names up: each new name of a
 * cached digest costs memory and no network, each new pull a place in the
 * queue.  So names created by such users live in memory only, are
 * collected when nobody uses them (refs.c), and are capped per user, as
 * are the pulls they start; hitting a cap refuses that user's lookup with
 * EAGAIN and says so in the events log, and never touches anyone
 * else's. */
#include "manager.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strmap.h"
#include "manager-private.h"

#define LIMIT_EVENT_INTERVAL_MS 10000

static void uid_key(uid_t uid, char *buf, size_t len)
{
	snprintf(buf, len, "%lu", (unsigned long)uid);
}

struct user_usage *users_get_locked(struct manager *m, uid_t uid)
{
	struct user_usage *u;
	char key[24];

	uid_key(uid, key, sizeof(key));
	u = strmap_get(m->users, key);
	if (!u && (u = calloc(1, sizeof(*u))) && strmap_put(m->users, key, u) < 0) {
		free(u);
		u = NULL;
	}
	return u;
}

void users_release_locked(struct manager *m, uid_t uid)
{
	char key[24];
	struct user_usage *u;

	uid_key(uid, key, sizeof(key));
	u = strmap_get(m->users, key);
	if (u && u->names == 0 && u->pulls == 0)
		free(strmap_remove(m->users, key));
}

/* A limit was hit: -EAGAIN, with the event's message in msg, or "" when
 * one was written for this user a moment ago. */
static int refuse(struct user_usage *u, uid_t uid, unsigned limit, const char *what,
		  const char *until, char *msg, size_t len)
{
	int64_t now = manager_wall_ms();

	msg[0] = '\0';
	if (!u->warned_ms || now - u->warned_ms >= LIMIT_EVENT_INTERVAL_MS) {
		u->warned_ms = now;
		snprintf(msg, len, "uid %lu has %u %s, its limit: %s", (unsigned long)uid, limit,
			 what, until);
	}
	return -EAGAIN;
}

static unsigned names_limit(const struct manager *m)
{
	return m->opts.max_names_per_user ?: MANAGER_DEFAULT_NAMES_PER_USER;
}

bool users_names_full_locked(struct manager *m, uid_t uid)
{
	struct user_usage *u;
	char key[24];

	uid_key(uid, key, sizeof(key));
	u = strmap_get(m->users, key);
	return u && u->names >= names_limit(m);
}

int users_admit_name_locked(struct manager *m, uid_t uid, char *msg, size_t len)
{
	unsigned limit = names_limit(m);
	struct user_usage *u = users_get_locked(m, uid);

	if (!u)
		return -ENOMEM;
	if (u->names < limit)
		return 0;
	return refuse(u, uid, limit, "image names in use",
		      "a new name is refused until one is no longer used", msg, len);
}

int users_admit_pull_locked(struct manager *m, uid_t uid, char *msg, size_t len)
{
	unsigned limit = m->opts.max_pulls_per_user ?: MANAGER_DEFAULT_PULLS_PER_USER;
	struct user_usage *u = users_get_locked(m, uid);

	if (!u)
		return -ENOMEM;
	if (u->pulls >= limit)
		return refuse(u, uid, limit, "pulls in progress",
			      "a further pull is refused until one ends", msg, len);
	u->pulls++;
	return 0;
}

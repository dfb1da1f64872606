/* Rate limits of the events users cause.  See evlimit.h. */
#include "evlimit.h"

#include <stdlib.h>
#include <string.h>

#include "macro.h"

struct bucket {
	uid_t uid;
	char *reason;
	/* The generic cell rate algorithm: the time at which the bucket
	 * would be full again.  An event is admitted while this is at most
	 * (burst - 1) intervals ahead of now, and moves it one interval on. */
	int64_t tat_ns;
	uint64_t suppressed; /* dropped since the last event written */
};

struct evlimit {
	const struct clock *clock;
	int64_t interval_ns, slack_ns;
	struct bucket *v;
	size_t n;
	size_t pending;	    /* buckets with suppressed != 0 */
	uint64_t untracked; /* dropped for want of a bucket */
};

struct evlimit *evlimit_new(unsigned burst, unsigned per_minute, const struct clock *clock)
{
	struct evlimit *l = calloc(1, sizeof(*l));

	if (!l)
		return NULL;
	l->clock = clock ? clock : clock_monotonic();
	l->interval_ns = 60 * CLOCK_NS_PER_SEC / MAX(per_minute, 1u);
	l->slack_ns = (int64_t)(MAX(burst, 1u) - 1) * l->interval_ns;
	return l;
}

void evlimit_free(struct evlimit *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].reason);
	free(l->v);
	free(l);
}

/* A bucket that admits whatever comes and holds no count is as good as
 * none. */
static bool bucket_idle(const struct bucket *b, int64_t now)
{
	return b->tat_ns <= now && b->suppressed == 0;
}

static struct bucket *bucket_get(struct evlimit *l, uid_t uid, const char *reason, int64_t now)
{
	struct bucket *b;

	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].uid == uid && !strcmp(l->v[i].reason, reason))
			return &l->v[i];
	if (l->n == EVLIMIT_MAX_BUCKETS) {
		/* (one pass over a bounded table, only when it is full) */
		size_t k = 0;

		for (size_t i = 0; i < l->n; i++) {
			if (bucket_idle(&l->v[i], now))
				free(l->v[i].reason);
			else
				l->v[k++] = l->v[i];
		}
		l->n = k;
		if (l->n == EVLIMIT_MAX_BUCKETS)
			return NULL;
	}
	if (l->n % 64 == 0) {
		b = realloc(l->v, (l->n + 64) * sizeof(*b));
		if (!b)
			return NULL;
		l->v = b;
	}
	b = &l->v[l->n];
	*b = (struct bucket){ .uid = uid, .reason = strdup(reason), .tat_ns = now };
	if (!b->reason)
		return NULL;
	l->n++;
	return b;
}

bool evlimit_admit(struct evlimit *l, uid_t uid, const char *reason, uint64_t *ret_suppressed)
{
	int64_t now = clock_now_ns(l->clock);
	struct bucket *b = bucket_get(l, uid, reason ? reason : "", now);
	int64_t tat;

	*ret_suppressed = 0;
	if (!b) {
		l->untracked++;
		return false;
	}
	tat = MAX(b->tat_ns, now);
	if (tat - now > l->slack_ns) {
		if (b->suppressed++ == 0)
			l->pending++;
		return false;
	}
	b->tat_ns = tat + l->interval_ns;
	if (b->suppressed) {
		*ret_suppressed = b->suppressed;
		b->suppressed = 0;
		l->pending--;
	}
	return true;
}

static void hand_over(struct evlimit *l, bool all, evlimit_fn *fn, void *userdata)
{
	int64_t now = clock_now_ns(l->clock);

	for (size_t i = 0; i < l->n && l->pending; i++) {
		struct bucket *b = &l->v[i];

		/* lifted: the next event of this bucket would be admitted */
		if (!b->suppressed || (!all && MAX(b->tat_ns, now) - now > l->slack_ns))
			continue;
		fn(userdata, b->uid, b->reason, b->suppressed);
		b->suppressed = 0;
		l->pending--;
	}
	if (l->untracked) {
		fn(userdata, (uid_t)-1, NULL, l->untracked);
		l->untracked = 0;
	}
}

void evlimit_lifted(struct evlimit *l, evlimit_fn *fn, void *userdata)
{
	if (l && (l->pending || l->untracked))
		hand_over(l, false, fn, userdata);
}

void evlimit_drain(struct evlimit *l, evlimit_fn *fn, void *userdata)
{
	if (l && (l->pending || l->untracked))
		hand_over(l, true, fn, userdata);
}

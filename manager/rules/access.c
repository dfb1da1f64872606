/* Rules of who may cause pulls and who may see images pulled with
 * credentials; see access.h. */
#include "access.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fileio.h"
#include "macro.h"
#include "policy.h"
#include "strmap.h"

#define MAX_GROUPS 256
#define EVENT_INTERVAL_MS 10000
#define EVENT_MEMO_MAX 1024

struct who_entry {
	bool everybody;
	bool group;
	uint32_t id; /* uid or gid */
};

struct access_rule {
	char *pattern;
	char *text; /* as given, for the events */
	struct who_entry *who;
	size_t n_who;
};

struct rule_list {
	struct access_rule *rules;
	size_t n;
};

struct access {
	struct rule_list pull, private;
	access_groups_fn *groups;
	pthread_mutex_t lock;
	struct strmap *memo; /* "uid\nreference" -> int64_t * last event ms; lock */
};

static void rule_done(struct access_rule *r)
{
	free(r->pattern);
	free(r->text);
	free(r->who);
}

static void list_done(struct rule_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		rule_done(&l->rules[i]);
	free(l->rules);
}

static int fail(char *errbuf, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *errbuf, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errbuf, errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* A number of digits only, below 2^32 - 1 (which is nobody's id). */
static bool parse_id(const char *s, uint32_t *ret)
{
	unsigned long long v = 0;

	if (!*s)
		return false;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return false;
		v = v * 10 + (unsigned)(*s - '0');
		if (v >= UINT32_MAX)
			return false;
	}
	*ret = (uint32_t)v;
	return true;
}

static int parse_who(const char *s, struct who_entry *ret, char *errbuf, size_t errlen)
{
	*ret = (struct who_entry){ 0 };
	if (!strcmp(s, "*")) {
		ret->everybody = true;
		return 0;
	}
	if (*s == '@') {
		char buf[4096];
		struct group gr, *g = NULL;

		ret->group = true;
		if (parse_id(s + 1, &ret->id))
			return 0;
		if (s[1] && getgrnam_r(s + 1, &gr, buf, sizeof(buf), &g) == 0 && g) {
			ret->id = g->gr_gid;
			return 0;
		}
		return fail(errbuf, errlen, "unknown group \"%s\"", s + 1);
	}
	char buf[4096];
	struct passwd pw, *p = NULL;

	if (parse_id(s, &ret->id))
		return 0;
	if (*s && getpwnam_r(s, &pw, buf, sizeof(buf), &p) == 0 && p) {
		ret->id = p->pw_uid;
		return 0;
	}
	return fail(errbuf, errlen, "unknown user \"%s\"", s);
}

static int parse_rule(const char *text, struct access_rule *ret, char *errbuf, size_t errlen)
{
	const char *eq = strrchr(text, '=');
	_cleanup_free_ char *list = NULL;
	struct access_rule r = { 0 };
	char *save = NULL, *tok;
	int k;

	if (!eq || eq == text || !eq[1])
		return fail(errbuf, errlen,
			    "invalid access rule \"%s\" (want PATTERN=WHO[,WHO...])", text);
	r.pattern = strndup(text, (size_t)(eq - text));
	r.text = strdup(text);
	list = strdup(eq + 1);
	if (!r.pattern || !r.text || !list) {
		rule_done(&r);
		return -ENOMEM;
	}
	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		struct who_entry *w = reallocarray(r.who, r.n_who + 1, sizeof(*w));

		if (!w) {
			rule_done(&r);
			return -ENOMEM;
		}
		r.who = w;
		k = parse_who(tok, &r.who[r.n_who], errbuf, errlen);
		if (k < 0) {
			size_t used = strlen(errbuf);
			snprintf(errbuf + used, errlen > used ? errlen - used : 0,
				 " in rule \"%s\"", text);
			rule_done(&r);
			return k;
		}
		r.n_who++;
	}
	if (!r.n_who) {
		rule_done(&r);
		return fail(errbuf, errlen,
			    "invalid access rule \"%s\" (want PATTERN=WHO[,WHO...])", text);
	}
	*ret = r;
	return 0;
}

int access_rule_check(const char *rule, char *errbuf, size_t errlen)
{
	struct access_rule r;
	int k = parse_rule(rule, &r, errbuf, errlen);

	if (k == 0)
		rule_done(&r);
	return k;
}

static int list_fill(struct rule_list *l, const char *const *rules, size_t n, char *errbuf,
		     size_t errlen)
{
	if (!n)
		return 0;
	l->rules = calloc(n, sizeof(*l->rules));
	if (!l->rules)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int k = parse_rule(rules[i], &l->rules[i], errbuf, errlen);
		if (k < 0)
			return k;
		l->n++;
	}
	return 0;
}

/* Reads the Groups line of /proc/PID/status, counted only when the file's
 * fsuid and fsgid (the fourth fields of Uid and Gid) are the request's. */
static int proc_groups(const struct caller *who, gid_t *groups, size_t max)
{
	_cleanup_free_ char *buf = NULL;
	_cleanup_close_ int fd = -1;
	char path[64];
	size_t len;
	unsigned long id[4];
	bool uid_ok = false, gid_ok = false;
	int n = 0, r;

	if (who->pid <= 0)
		return -ESRCH;
	snprintf(path, sizeof(path), "/proc/%ld/status", (long)who->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = read_full(fd, 64 << 10, &buf, &len);
	if (r < 0)
		return r;
	for (char *line = buf, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (sscanf(line, "Uid: %lu %lu %lu %lu", &id[0], &id[1], &id[2], &id[3]) == 4)
			uid_ok = id[3] == (unsigned long)who->uid;
		else if (sscanf(line, "Gid: %lu %lu %lu %lu", &id[0], &id[1], &id[2], &id[3]) == 4)
			gid_ok = id[3] == (unsigned long)who->gid;
		else if (!strncmp(line, "Groups:", 7)) {
			char *p = line + 7, *end;
			while ((size_t)n < max) {
				unsigned long g = strtoul(p, &end, 10);
				if (end == p)
					break;
				groups[n++] = (gid_t)g;
				p = end;
			}
		}
	}
	return uid_ok && gid_ok ? n : -ESRCH;
}

int access_new(const char *const *pull_rules, size_t n_pull, const char *const *private_rules,
	       size_t n_private, access_groups_fn *groups, struct access **ret, char *errbuf,
	       size_t errlen)
{
	struct access *a = calloc(1, sizeof(*a));
	int r;

	if (!a)
		return -ENOMEM;
	pthread_mutex_init(&a->lock, NULL);
	a->groups = groups ? groups : proc_groups;
	a->memo = strmap_new();
	r = a->memo ? 0 : -ENOMEM;
	if (r == 0)
		r = list_fill(&a->pull, pull_rules, n_pull, errbuf, errlen);
	if (r == 0)
		r = list_fill(&a->private, private_rules, n_private, errbuf, errlen);
	if (r < 0) {
		access_free(a);
		return r;
	}
	*ret = a;
	return 0;
}

static int memo_free(void *userdata, const char *key, void *value)
{
	free(value);
	return 0;
}

void access_free(struct access *a)
{
	if (!a)
		return;
	list_done(&a->pull);
	list_done(&a->private);
	if (a->memo) {
		strmap_foreach(a->memo, memo_free, NULL);
		strmap_free(a->memo);
	}
	pthread_mutex_destroy(&a->lock);
	free(a);
}

static const struct access_rule *rule_for(const struct rule_list *l, const char *canonical)
{
	for (size_t i = 0; i < l->n; i++)
		if (policy_pattern_matches(l->rules[i].pattern, canonical))
			return &l->rules[i];
	return NULL;
}

/* Whether who is one of the rule's entries: users and the primary group
 * first, the supplementary groups only when a group entry is left. */
static bool rule_admits(struct access *a, const struct access_rule *r, const struct caller *who)
{
	gid_t groups[MAX_GROUPS];
	bool any_group = false;
	int n;

	for (size_t i = 0; i < r->n_who; i++) {
		const struct who_entry *w = &r->who[i];
		if (w->everybody || (!w->group && w->id == who->uid) ||
		    (w->group && w->id == who->gid))
			return true;
		any_group |= w->group;
	}
	if (!any_group)
		return false;
	n = a->groups(who, groups, ARRAY_SIZE(groups));
	for (int k = 0; k < n; k++)
		for (size_t i = 0; i < r->n_who; i++)
			if (r->who[i].group && r->who[i].id == groups[k])
				return true;
	return false;
}

static bool may_see(struct access *a, const char *canonical, const struct caller *who, char *why,
		    size_t len)
{
	const struct access_rule *r = rule_for(&a->private, canonical);

	if (r && rule_admits(a, r, who))
		return true;
	if (r)
		snprintf(why, len, "uid %lu is not admitted by --private-access-rule \"%s\"",
			 (unsigned long)who->uid, r->text);
	else
		snprintf(why, len,
			 "uid %lu is not root and no --private-access-rule matches the reference",
			 (unsigned long)who->uid);
	return false;
}

bool access_may_pull(struct access *a, const char *canonical, bool with_credentials,
		     const struct caller *who, char *why, size_t len)
{
	const struct access_rule *r;

	if (!who || who->uid == 0)
		return true;
	r = rule_for(&a->pull, canonical);
	if (r && !rule_admits(a, r, who)) {
		snprintf(why, len,
			 "uid %lu may not cause pulls: not admitted by --pull-access-rule \"%s\"",
			 (unsigned long)who->uid, r->text);
		return false;
	}
	if (with_credentials && !may_see(a, canonical, who, why, len)) {
		/* Nobody causes a pull with credentials whose result they
		 * could not see. */
		size_t used = why ? strlen(why) : 0;
		if (why)
			snprintf(why + used, len > used ? len - used : 0,
				 ", and the pull would use the registry's credentials");
		return false;
	}
	return true;
}

bool access_may_see(struct access *a, const char *canonical, const struct caller *who, char *why,
		    size_t len)
{
	if (!who || who->uid == 0)
		return true;
	return may_see(a, canonical, who, why, len);
}

int access_readers(struct access *a, const char *canonical,
		   int (*fn)(void *userdata, bool everybody, bool group, uint32_t id),
		   void *userdata)
{
	const struct access_rule *r = rule_for(&a->private, canonical);
	int k;

	for (size_t i = 0; r && i < r->n_who; i++)
		if ((k = fn(userdata, r->who[i].everybody, r->who[i].group, r->who[i].id)) != 0)
			return k;
	return 0;
}

struct prune_ctx {
	int64_t before;
	char **keys;
	size_t n, cap;
};

static int pick_old(void *userdata, const char *key, void *value)
{
	struct prune_ctx *c = userdata;

	if (*(int64_t *)value < c->before && c->n < c->cap && (c->keys[c->n] = strdup(key)))
		c->n++;
	return 0;
}

bool access_event_due(struct access *a, uid_t uid, const char *reason, const char *canonical,
		      int64_t now_ms)
{
	_cleanup_free_ char *key = NULL;
	int64_t *at;
	bool due = true;

	if (asprintf(&key, "%lu\n%s\n%s", (unsigned long)uid, reason, canonical) < 0)
		return true;
	pthread_mutex_lock(&a->lock);
	if (strmap_size(a->memo) >= EVENT_MEMO_MAX) {
		struct prune_ctx c = { .before = now_ms - EVENT_INTERVAL_MS,
				       .cap = strmap_size(a->memo) };
		c.keys = calloc(c.cap, sizeof(char *));
		if (c.keys)
			strmap_foreach(a->memo, pick_old, &c);
		for (size_t i = 0; i < c.n; i++) {
			free(strmap_remove(a->memo, c.keys[i]));
			free(c.keys[i]);
		}
		free(c.keys);
	}
	at = strmap_get(a->memo, key);
	if (at && now_ms - *at < EVENT_INTERVAL_MS) {
		due = false;
	} else if (at) {
		*at = now_ms;
	} else if (strmap_size(a->memo) < EVENT_MEMO_MAX && (at = malloc(sizeof(*at)))) {
		*at = now_ms;
		if (strmap_put(a->memo, key, at) < 0)
			free(at);
	}
	pthread_mutex_unlock(&a->lock);
	return due;
}

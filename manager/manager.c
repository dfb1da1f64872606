/* The manager's life cycle (options, the parts it is made of, start,
 * cancel, drain, free) and the listing of the names it knows. */
#include "manager.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "backoff.h"
#include "blobproof.h"
#include "profile.h"
#include "cache.h"
#include "hosts.h"
#include "lazy-completer.h"
#include "macro.h"
#include "manifest.h"
#include "packs.h"
#include "access.h"
#include "policy.h"
#include "puller.h"
#include "registry.h"
#include "strmap.h"
#include "throttle.h"
#include "manager-private.h"

/* ---- listing --------------------------------------------------------- */

/* A reference below the prefix whose visibility is judged outside the
 * lock (it may read /proc). */
struct list_item {
	char *name; /* the component shown */
	char *reference;
	char *digest;
	bool image;
};

struct list_ctx {
	const char *prefix;
	size_t plen;
	struct strmap *seen;	 /* name -> (void *)1 image, (void *)2 directory */
	struct list_item *items; /* when names are judged: every reference */
	size_t n_items;
	bool judge;
	int error;
};

static int list_item_add(struct list_ctx *c, const char *name, const char *key,
			 const struct refstate *rs, bool image)
{
	struct list_item *grown = reallocarray(c->items, c->n_items + 1, sizeof(*grown));
	struct list_item *it;

	if (!grown)
		return -ENOMEM;
	c->items = grown;
	it = &c->items[c->n_items];
	*it = (struct list_item){ .name = strdup(name),
				  .reference = strdup(key),
				  .digest = strdup(rs->digest),
				  .image = image };
	c->n_items++;
	return it->name && it->reference && it->digest ? 0 : -ENOMEM;
}

static int list_one(void *userdata, const char *key, void *value)
{
	struct list_ctx *c = userdata;
	const char *rest;
	char name[512];
	size_t n;
	bool image;

	if (c->plen) {
		if (strncmp(key, c->prefix, c->plen) != 0 || key[c->plen] != '/')
			return 0;
		rest = key + c->plen + 1;
	} else {
		rest = key;
	}
	n = strcspn(rest, "/");
	image = rest[n] == '\0';
	if (n == 0 || n >= sizeof(name))
		return 0;
	memcpy(name, rest, n);
	name[n] = '\0';
	if (c->judge) {
		if (list_item_add(c, name, key, value, image) < 0)
			c->error = -ENOMEM;
	} else if (strmap_put(c->seen, name, (void *)(uintptr_t)(image ? 1 : 2)) < 0) {
		c->error = -ENOMEM;
	}
	return 0;
}

struct list_emit {
	int (*fn)(void *userdata, const char *name, bool is_image);
	void *userdata;
};

static int list_emit_one(void *userdata, const char *key, void *value)
{
	struct list_emit *e = userdata;

	return e->fn(e->userdata, key, (uintptr_t)value == 1);
}

/* Keeps the components of the references who may see; notes whether any
 * reference is private. */
static int list_judge(struct manager *m, struct list_ctx *c, const struct caller *who,
		      bool *ret_private)
{
	for (size_t i = 0; i < c->n_items; i++) {
		struct list_item *it = &c->items[i];
		uintptr_t kind = it->image ? 1 : 2;

		if (manager_digest_private(m, it->digest)) {
			if (ret_private)
				*ret_private = true;
			if (!manager_name_visible(m, it->reference, it->digest, who))
				continue;
		}
		/* A name both closes a reference and leads to others
		 * ("a/b" and "a/b/c"): it is an image if one says so. */
		if ((uintptr_t)strmap_get(c->seen, it->name) == 1)
			kind = 1;
		if (strmap_put(c->seen, it->name, (void *)kind) < 0)
			return -ENOMEM;
	}
	return 0;
}

int manager_list(struct manager *m, const char *prefix, const struct caller *who,
		 int (*fn)(void *userdata, const char *name, bool is_image), void *userdata,
		 bool *ret_private)
{
	struct list_ctx c = { .prefix = prefix, .plen = strlen(prefix) };
	struct list_emit e = { .fn = fn, .userdata = userdata };
	int r;

	if (ret_private)
		*ret_private = false;
	c.seen = strmap_new();
	if (!c.seen)
		return -ENOMEM;
	/* Without credentials nothing is private: the names as they are. */
	c.judge = atomic_load(&m->any_credentials);
	pthread_mutex_lock(&m->lock);
	strmap_foreach(m->refs, list_one, &c);
	pthread_mutex_unlock(&m->lock);
	r = c.error;
	if (r == 0 && c.judge)
		r = list_judge(m, &c, who, ret_private);
	if (r == 0)
		r = strmap_foreach(c.seen, list_emit_one, &e);
	for (size_t i = 0; i < c.n_items; i++) {
		free(c.items[i].name);
		free(c.items[i].reference);
		free(c.items[i].digest);
	}
	free(c.items);
	strmap_free(c.seen);
	return r;
}

struct image *manager_image(struct manager *m, uint32_t key)
{
	return images_get(m->imgs, key);
}

void manager_set_image_forgotten(struct manager *m, void (*fn)(uint32_t key))
{
	images_set_forgotten(m->imgs, fn);
}

void manager_set_times_changed(struct manager *m, void (*fn)(void *userdata, const char *digest),
			       void *userdata)
{
	images_set_times_changed(m->imgs, fn, userdata);
}

void manager_images_foreach(struct manager *m, void (*fn)(void *userdata, uint32_t key, void *img),
			    void *userdata)
{
	images_foreach(m->imgs, fn, userdata);
}

void manager_took_over(struct manager *m)
{
	packs_took_over(m->packs);
}

void manager_set_names_changed(struct manager *m, manager_names_changed_fn *fn,
			       void (*settle)(void *userdata),
			       bool (*pending)(void *userdata, const char *reference),
			       void *userdata)
{
	pthread_mutex_lock(&m->lock);
	m->names_changed = fn;
	m->names_settle = settle;
	m->names_pending = pending;
	m->names_userdata = userdata;
	hooks_quiesce_locked(m);
	pthread_mutex_unlock(&m->lock);
}

struct host_ctx {
	const char *host;
	size_t len;
};

static int host_match(void *userdata, const char *key, void *value)
{
	struct host_ctx *h = userdata;

	return strncmp(key, h->host, h->len) == 0 && key[h->len] == '/';
}

bool manager_is_known_host(struct manager *m, const char *host)
{
	struct host_ctx h = { .host = host, .len = strlen(host) };
	bool found;

	for (size_t i = 0; i < m->opts.n_insecure_hosts; i++)
		if (!strcmp(m->insecure[i], host))
			return true;
	/* A registry with a section in the config file is one the operator
	 * named: "myregistry:5000" is then a host, not a docker.io name. */
	if (m->opts.registry_hosts && registry_hosts_known(m->opts.registry_hosts, host))
		return true;
	pthread_mutex_lock(&m->lock);
	found = strmap_foreach(m->refs, host_match, &h) != 0;
	pthread_mutex_unlock(&m->lock);
	return found;
}

/* ---- life cycle ------------------------------------------------------ */

void manager_cancel(struct manager *m)
{
	atomic_store(&m->cancelled, true);
	throttle_shutdown(m->throttle);
	puller_shutdown(m->puller);
}

void manager_drain(struct manager *m)
{
	/* Flights and the completions of lazy layers run on threads of
	 * their own: stop them and wait (a flight may start a completion,
	 * which sees the flag). */
	pthread_mutex_lock(&m->lock);
	bool busy = m->jobs_running > 0;
	pthread_mutex_unlock(&m->lock);
	if (!busy && (!m->completer || lazy_completer_count(m->completer) == 0))
		return;
	manager_cancel(m);
	pthread_mutex_lock(&m->lock);
	while (m->jobs_running)
		pthread_cond_wait(&m->flight_cond, &m->lock);
	pthread_mutex_unlock(&m->lock);
	if (m->completer)
		lazy_completer_drain(m->completer);
}

int manager_start(struct manager *m)
{
	return gc_start(m);
}

const char *manager_cache_dir(const struct manager *m)
{
	return m->cache_dir;
}

void manager_reopen_events(struct manager *m)
{
	if (m)
		events_request_reopen(m->events);
}

/* Policy rules, back-off, throttle and pull slots, from the options. */
static int setup_ensure(struct manager *m, const struct manager_options *opts, char *errbuf,
			size_t errlen)
{
	int r;

	r = policy_new(&m->policy);
	if (r < 0)
		return r;
	for (size_t i = 0; i < opts->n_policy_rules; i++) {
		const char *rule = opts->policy_rules[i];

		r = policy_add_rule(m->policy, rule);
		if (r < 0) {
			snprintf(
				errbuf, errlen,
				"invalid pull policy rule \"%s\" (want PATTERN=always|if-not-present|never)",
				rule);
			return r;
		}
	}
	r = policy_new(&m->lazy_rules);
	for (size_t i = 0; r == 0 && i < opts->n_lazy_rules; i++) {
		r = policy_add_rule_parsed(m->lazy_rules, opts->lazy_rules[i], lazy_mode_parse);
		if (r < 0)
			snprintf(errbuf, errlen, "invalid lazy rule \"%s\" (want PATTERN=auto|off)",
				 opts->lazy_rules[i]);
	}
	if (r < 0)
		return r;
	r = access_new(opts->pull_access_rules, opts->n_pull_access_rules,
		       opts->private_access_rules, opts->n_private_access_rules,
		       opts->access_groups, &m->access, errbuf, errlen);
	if (r < 0)
		return r;
	r = backoff_new(
		&(struct backoff_options){
			.initial_ns = (int64_t)(opts->backoff_initial_s ?: 10) * CLOCK_NS_PER_SEC,
			.max_ns = (int64_t)(opts->backoff_max_s ?: 300) * CLOCK_NS_PER_SEC,
			.clock = m->clock,
		},
		&m->backoff);
	if (r < 0)
		return r;
	r = throttle_new(
		&(struct throttle_options){
			.qps = opts->registry_qps,
			.burst = opts->registry_burst,
			.max_waiters = opts->max_queued_pulls,
			.fail_fast = opts->pull_qps_fail_fast,
			.clock = m->clock,
		},
		&m->throttle);
	if (r < 0)
		return r;
	return puller_new(
		&(struct puller_options){
			.max_parallel = opts->max_parallel_pulls,
			.max_queue = opts->max_queued_pulls,
			.share_after_ns = opts->pull_slot_share_s > 0
						  ? opts->pull_slot_share_s * CLOCK_NS_PER_SEC
					  : opts->pull_slot_share_s < 0 ? -1
									: 0,
			.clock = m->clock,
		},
		&m->puller);
}

/* A quarter of the descriptors this process may have, for packs kept
 * open between reads; the rest is for pulls, the control socket and the
 * events log. */
static unsigned default_open_packs(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 256;
	return (unsigned)MAX(MIN(rl.rlim_cur / 4, 4096), 16);
}

/* The start-up window of a lazily started image (0: none). */
static int64_t completion_window_ns(const struct manager_options *opts)
{
	long ms = opts->lazy_completion_delay_ms;

	if (ms == 0)
		ms = MANAGER_DEFAULT_LAZY_DELAY_S * 1000L;
	return ms < 0 ? 0 : (int64_t)ms * 1000000;
}

/* The recording window of start profiles (0: none). */
static int64_t profile_window_ns(const struct manager_options *opts)
{
	long ms = opts->profile_window_ms;

	if (ms == 0)
		ms = MANAGER_DEFAULT_PROFILE_WINDOW_S * 1000L;
	return ms < 0 ? 0 : (int64_t)ms * 1000000;
}

int manager_new(const struct manager_options *opts, struct manager **ret, char *errbuf,
		size_t errlen)
{
	struct manager *m;
	_cleanup_free_ char *evpath = NULL;
	struct registry_options ro = { 0 };
	int r;

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->opts = *opts;
	m->opts.policy_rules = NULL;
	m->opts.n_policy_rules = 0;
	m->opts.lazy_rules = NULL;
	m->opts.n_lazy_rules = 0;
	m->clock = opts->clock ? opts->clock : clock_monotonic();
	m->opts.pins = NULL;
	m->opts.n_pins = 0;
	m->opts.pull_access_rules = m->opts.private_access_rules = NULL;
	m->opts.n_pull_access_rules = m->opts.n_private_access_rules = 0;
	pthread_mutex_init(&m->lock, NULL);
	pthread_rwlock_init(&m->gc_lock, NULL);
	pthread_cond_init(&m->gc_cond, NULL);
	pthread_cond_init(&m->flight_cond, NULL);
	pthread_cond_init(&m->hooks_cond, NULL);
	m->recent = strmap_new();
	if (!m->recent) {
		r = -ENOMEM;
		goto fail;
	}
	m->registry_bytes = strmap_new();
	m->users = strmap_new();
	if (!m->users) {
		r = -ENOMEM;
		goto fail;
	}
	m->cache_dir = strdup(opts->cache_dir);
	m->pins = calloc(opts->n_pins + 1, sizeof(char *));
	if (!m->registry_bytes || !m->cache_dir || !m->pins) {
		r = -ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < opts->n_pins; i++)
		if (!(m->pins[i] = strdup(opts->pins[i]))) {
			r = -ENOMEM;
			goto fail;
		}
	m->opts.n_pins = opts->n_pins;
	m->refs = strmap_new();
	m->images = strmap_new();
	m->flights = strmap_new();
	m->reserved_keys = strmap_new();
	m->inflight = strmap_new();
	m->settling = strmap_new();
	m->insecure = calloc(opts->n_insecure_hosts + 1, sizeof(char *));
	if (!m->refs || !m->images || !m->flights || !m->reserved_keys || !m->inflight ||
	    !m->settling || !m->insecure) {
		r = -ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < opts->n_insecure_hosts; i++)
		if (!(m->insecure[i] = strdup(opts->insecure_hosts[i]))) {
			r = -ENOMEM;
			goto fail;
		}
	m->opts.insecure_hosts = (const char *const *)m->insecure;
	m->opts.cache_dir = NULL;
	m->opts.events_log = NULL;
	m->opts.platform = NULL;

	if (opts->platform) {
		r = platform_parse(opts->platform, &m->platform);
		if (r < 0) {
			snprintf(errbuf, errlen, "invalid platform \"%s\"", opts->platform);
			goto fail;
		}
		m->platform_owned = true;
	} else {
		platform_native(&m->platform);
	}

	r = cache_open(opts->cache_dir, &m->cache, errbuf, errlen);
	if (r < 0)
		goto fail;
	r = blobproof_open(opts->cache_dir, &m->proofs);
	if (r < 0) {
		snprintf(errbuf, errlen, "cannot open \"%s/proofs\": %s", opts->cache_dir,
			 strerror(-r));
		goto fail;
	}
	r = packs_new(m->cache, opts->max_open_packs ?: default_open_packs(), &m->packs);
	if (r < 0)
		goto fail;

	if (opts->events_log) {
		evpath = strdup(opts->events_log);
	} else if (asprintf(&evpath, "%s/events.log", opts->cache_dir) < 0) {
		evpath = NULL;
	}
	if (!evpath) {
		r = -ENOMEM;
		goto fail;
	}
	m->events_path = strdup(evpath);
	if (!m->events_path) {
		r = -ENOMEM;
		goto fail;
	}
	r = events_open(
		&(struct events_options){
			.path = evpath,
			.max_bytes = opts->events_max_bytes,
			.keep = opts->events_keep,
			.burst = opts->events_burst,
			.per_minute = opts->events_per_minute,
			.clock = m->clock,
		},
		&m->events);
	if (r < 0) {
		snprintf(errbuf, errlen, "cannot open events log \"%s\": %s", evpath, strerror(-r));
		goto fail;
	}

	ro.insecure_hosts = m->opts.insecure_hosts;
	ro.n_insecure_hosts = opts->n_insecure_hosts;
	ro.hosts = opts->registry_hosts;
	ro.cancel = &m->cancelled;
	ro.credentials = opts->credentials;
	ro.connect_timeout_ms = opts->connect_timeout_ms;
	ro.low_speed_time_s = opts->low_speed_time_s;
	ro.min_rate_bytes_per_s = opts->min_transfer_rate;
	ro.rate_window_s = opts->transfer_rate_window_s;
	ro.transport = opts->registry_transport;
	ro.max_retries = opts->registry_max_retries;
	r = registry_new(&ro, &m->registry);
	if (r < 0) {
		snprintf(errbuf, errlen, "cannot set up the registry client: %s", strerror(-r));
		goto fail;
	}
	r = lazy_completer_new(
		&(struct lazy_completer_options){
			.clock = m->clock,
			.registry = m->registry,
			.stats = packs_lazy_stats(m->packs),
			.window_ns = completion_window_ns(opts),
			/* an explicit delay is kept to */
			.measure_link = opts->lazy_completion_delay_ms == 0,
			.cancelled = &m->cancelled,
			.events = manager_event_sink(m),
		},
		&m->completer);
	if (r < 0)
		goto fail;
	r = profiles_new(
		&(struct profiles_options){
			.cache_dir = opts->cache_dir,
			.window_ns = profile_window_ns(opts),
			.events = manager_event_sink(m),
		},
		&m->profiles, errbuf, errlen);
	if (r < 0)
		goto fail;
	r = images_new(
		&(struct images_options){
			.cache = m->cache,
			.packs = m->packs,
			.registry = m->registry,
			.completer = m->completer,
			.profiles = m->profiles,
			.clock = m->clock,
			.max_entries = image_max_entries(m),
			.events = manager_event_sink(m),
			.completed = refs_images_completed,
			.key_assign = refs_key_assign,
			.userdata = m,
		},
		&m->imgs);
	if (r < 0)
		goto fail;
	r = setup_ensure(m, opts, errbuf, errlen);
	if (r < 0)
		goto fail;
	r = refs_load(m);
	if (r < 0) {
		snprintf(errbuf, errlen, "cannot read cached references: %s", strerror(-r));
		goto fail;
	}
	*ret = m;
	return 0;
fail:
	manager_free(m);
	return r;
}

static int free_value(void *userdata, const char *key, void *value)
{
	free(value);
	return 0;
}

void manager_free(struct manager *m)
{
	if (!m)
		return;
	manager_drain(m);
	gc_stop(m);
	if (m->registry_bytes) {
		strmap_foreach(m->registry_bytes, free_value, NULL);
		strmap_free(m->registry_bytes);
	}
	if (m->pins)
		for (size_t i = 0; m->pins[i]; i++)
			free(m->pins[i]);
	free(m->pins);
	free(m->cache_dir);
	free(m->events_path);
	pthread_rwlock_destroy(&m->gc_lock);
	pthread_cond_destroy(&m->gc_cond);
	pthread_cond_destroy(&m->flight_cond);
	pthread_cond_destroy(&m->hooks_cond);
	refs_free_all(m);
	strmap_free(m->flights);
	strmap_free(m->reserved_keys);
	strmap_free(m->inflight);
	if (m->settling)
		strmap_foreach(m->settling, free_value, NULL);
	strmap_free(m->settling);
	if (m->recent) {
		strmap_foreach(m->recent, free_value, NULL);
		strmap_free(m->recent);
	}
	/* What the kernel still held when the mount went away. */
	images_free(m->imgs);
	profiles_free(m->profiles);
	lazy_completer_free(m->completer);
	if (m->users) {
		strmap_foreach(m->users, free_value, NULL);
		strmap_free(m->users);
	}
	packs_free(m->packs);
	throttle_free(m->throttle);
	puller_free(m->puller);
	backoff_free(m->backoff);
	policy_free(m->policy);
	policy_free(m->lazy_rules);
	access_free(m->access);
	blobproof_close(m->proofs);
	registry_free(m->registry);
	events_close(m->events);
	cache_close(m->cache);
	if (m->platform_owned)
		platform_done(&m->platform);
	if (m->insecure)
		for (size_t i = 0; m->insecure[i]; i++)
			free(m->insecure[i]);
	free(m->insecure);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

/* ---- a serving process taking over ------------------------------------ */

int manager_restore_image(struct manager *m, const char *reference, const char *digest,
			  uint32_t key, struct image **ret)
{
	char errbuf[256] = "";
	int r = key ? refs_image_restore(m, reference, digest, key, ret, errbuf, sizeof(errbuf))
		    : refs_image_get(m, reference, digest, ret, errbuf, sizeof(errbuf));

	if (r < 0 && errbuf[0])
		fprintf(stderr, "pullfs: restoring \"%s\": %s\n", reference, errbuf);
	return r == -EBADMSG && errbuf[0] ? -EBADMSG : r;
}

void manager_reserve_key(struct manager *m, uint32_t key)
{
	char name[16];

	snprintf(name, sizeof(name), "%" PRIu32, key);
	pthread_mutex_lock(&m->lock);
	/* (short of memory the key may go to another image: its nodes then
	 * show that image, as before a restart) */
	strmap_put(m->reserved_keys, name, (void *)1);
	pthread_mutex_unlock(&m->lock);
}

void manager_set_backoff_hook(struct manager *m, backoff_hook_fn *fn, void *userdata)
{
	backoff_set_hook(m->backoff, fn, userdata);
}

int manager_restore_backoff(struct manager *m, const char *reference,
			    const struct backoff_state *st)
{
	return backoff_restore(m->backoff, reference, st);
}

void manager_serving_event(struct manager *m, const char *reason, const char *message)
{
	manager_emit(m, EVENT_NORMAL, reason, NULL, NULL, 0, NULL, "%s", message);
}

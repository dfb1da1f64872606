/* What the manager shows operators: the status document, the metrics and
 * image inspection (docs/control.md). */
#include <errno.h>
#include <fnmatch.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backoff.h"
#include "config.h"
#include "cache.h"
#include "errname.h"
#include "errtable.h"
#include "events.h"
#include "lazy-completer.h"
#include "lazy-schedule.h"
#include "lazy.h"
#include "macro.h"
#include "packs.h"
#include "manager-private.h"
#include "puller.h"
#include "reference.h"
#include "strmap.h"
#include "throttle.h"

static json_t *time_string_ms(int64_t unix_ms)
{
	struct timespec ts = { .tv_sec = (time_t)(unix_ms / 1000),
			       .tv_nsec = (long)(unix_ms % 1000) * 1000000 };
	char buf[40];

	events_format_time(&ts, buf, sizeof(buf));
	return json_string(buf);
}

struct status_ctx {
	struct manager *m;
	json_t *array;
};

static int status_pull(void *userdata, const char *key, void *value)
{
	struct status_ctx *s = userdata;
	const struct flight *f = value;
	const struct pull_progress *p = &f->progress;
	static const char *const states[] = { "waiting", "resolving", "downloading" };
	int st = atomic_load(&p->state);
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	json_array_append_new(
		s->array,
		json_pack("{s:s, s:o, s:f, s:I, s:I, s:i, s:i, s:i, s:s}", "reference", key,
			  "started", time_string_ms(p->started_ns / 1000000), "elapsed_s",
			  (double)now.tv_sec + (double)now.tv_nsec / 1e9 -
				  (double)p->started_ns / 1e9,
			  "bytes_done", (json_int_t)atomic_load(&p->bytes_done), "bytes_total",
			  (json_int_t)atomic_load(&p->bytes_total), "layers_done",
			  (int)atomic_load(&p->layers_done), "layers_total",
			  (int)atomic_load(&p->layers_total), "waiters", (int)f->n_calls, "state",
			  st >= 0 && st <= 2 ? states[st] : "unknown"));
	return 0;
}

struct image_bytes {
	uint64_t disk;	/* what it takes in the cache: blobs and layers */
	uint64_t local; /* of its compressed layers and config, what is here */
	uint64_t total;
	bool completing;	     /* a lazy layer's completion runs */
	int phase;		     /* of the lazy layers' completions: -1 none */
	enum lazy_verified verified; /* the least verified of its layers */
};

static const char *verified_name(enum lazy_verified v)
{
	return v == LAZY_VERIFIED_DIGEST ? "digest" : v == LAZY_VERIFIED_TOC ? "toc" : "no";
}

/* What the status calls the completion of an image whose layers' phases
 * (lazy-schedule.h) are summed up in phase. */
static const char *completion_name(int phase)
{
	switch (phase) {
	case LAZY_PHASE_WINDOW:
		return "waiting";
	case LAZY_PHASE_RUNNING:
		return "running";
	case LAZY_PHASE_RETRYING:
		return "retrying";
	default:
		return "stopped";
	}
}

/* Folds the phase of one layer's completion into that of its image: one
 * running wins, then one waiting for its window, then one retrying. */
static int phase_fold(int image, int layer)
{
	static const int rank[] = {
		[LAZY_PHASE_WINDOW] = 2, [LAZY_PHASE_RUNNING] = 3, [LAZY_PHASE_RETRYING] = 1
	};

	if (layer < 0)
		return image;
	if (image < 0 || rank[layer] > rank[image])
		return layer;
	return image;
}

/* The bytes of one image (lazy layers are partly local). */
static void image_bytes(struct manager *m, const char *digest, const char *index_digest,
			struct image_bytes *ret)
{
	_cleanup_free_ char *buf = NULL;
	struct manifest *mf = NULL;
	size_t len;

	*ret = (struct image_bytes){ .disk = cache_blob_bytes(m->cache, digest),
				     .phase = -1,
				     .verified = LAZY_VERIFIED_DIGEST };
	if (index_digest)
		ret->disk += cache_blob_bytes(m->cache, index_digest);
	if (cache_blob_read(m->cache, digest, MANIFEST_MAX_BYTES, &buf, &len) < 0 ||
	    manifest_parse(buf, len, NULL, &mf, NULL, 0) < 0)
		return;
	if (mf->kind == MANIFEST_IMAGE) {
		ret->disk += cache_blob_bytes(m->cache, mf->config.digest);
		ret->local = ret->total = mf->config.size;
		for (size_t i = 0; i < mf->n_layers; i++) {
			uint64_t local;
			unsigned failures = 0;
			bool completing;
			int phase;

			ret->disk += cache_layer_bytes_memo(m->cache, mf->layers[i].digest);
			packs_layer_bytes(m->packs, mf->layers[i].digest, mf->layers[i].size,
					  &local, &completing);
			phase = lazy_completer_phase(m->completer, mf->layers[i].digest, &failures);
			/* pullfsctl pull stops waiting once it has failed a few
			 * times; it goes on trying */
			if (phase == LAZY_PHASE_RETRYING && failures >= LAZY_FAILURES_REPORTED)
				completing = false;
			ret->completing |= completing;
			if (completing || phase == LAZY_PHASE_RETRYING)
				ret->phase = phase_fold(ret->phase, phase);
			ret->local += local;
			ret->total += mf->layers[i].size;
			ret->verified = MIN(ret->verified,
					    packs_layer_verified(m->packs, mf->layers[i].digest));
		}
	}
	manifest_free(mf);
}

static int status_image(void *userdata, const char *key, void *value)
{
	struct status_ctx *s = userdata;
	const struct refstate *rs = value;
	struct image *img = strmap_get(s->m->images, key);
	unsigned open = img ? image_open_count(img) : 0;
	/* The table holds one reference; any other is the kernel's or a
	 * caller's. */
	bool in_use = img && (open || image_refs(img) > 1);
	bool pinned = false;
	struct image_bytes b;

	for (size_t i = 0; i < s->m->opts.n_pins; i++)
		if (fnmatch(s->m->pins[i], key, 0) == 0)
			pinned = true;
	image_bytes(s->m, rs->digest, rs->index_digest, &b);
	json_array_append_new(
		s->array,
		json_pack("{s:s, s:s, s:I, s:I, s:I, s:b, s:b, s:s, s:s, s:o, s:o, s:b, s:i, s:b}",
			  "reference", key, "digest", rs->digest, "size", (json_int_t)b.disk,
			  "bytes_local", (json_int_t)b.local, "bytes_total", (json_int_t)b.total,
			  "complete", b.local == b.total, "completing", b.completing, "completion",
			  b.local == b.total ? "done" : completion_name(b.phase), "verified",
			  verified_name(b.verified), "pulled", time_string_ms(rs->pulled_at * 1000),
			  "last_used", time_string_ms(rs->last_used_ms), "in_use", in_use,
			  "open_files", (int)open, "pinned", pinned));
	return 0;
}

/* Drops from array the entries whose "reference" (and "digest", when
 * there is one) who may not see; returns how many are left. */
static size_t status_filter(struct manager *m, json_t *array, const struct caller *who)
{
	for (size_t i = json_array_size(array); i-- > 0;) {
		json_t *e = json_array_get(array, i);
		const char *ref = json_string_value(json_object_get(e, "reference"));
		const char *digest = json_string_value(json_object_get(e, "digest"));

		if (ref && !manager_name_visible(m, ref, digest, who))
			json_array_remove(array, i);
	}
	return json_array_size(array);
}

int manager_status(struct manager *m, const struct caller *who, json_t **ret_json)
{
	struct status_ctx s = { .m = m };
	struct backoff_entry *be = NULL;
	struct puller_stats ps;
	struct throttle_stats ts;
	uint64_t bytes = 0, fs_total = 0, fs_free = 0;
	unsigned layers = 0;
	size_t nbe = 0;
	json_t *o, *pulls, *images, *backoff;

	o = json_object();
	pulls = json_array();
	images = json_array();
	backoff = json_array();
	if (!o || !pulls || !images || !backoff) {
		json_decref(o);
		json_decref(pulls);
		json_decref(images);
		json_decref(backoff);
		return -ENOMEM;
	}
	pthread_mutex_lock(&m->lock);
	s.array = pulls;
	strmap_foreach(m->flights, status_pull, &s);
	s.array = images;
	strmap_foreach(m->refs, status_image, &s);
	size_t n_images = strmap_size(m->refs);
	pthread_mutex_unlock(&m->lock);

	if (backoff_snapshot(m->backoff, &be, &nbe) == 0) {
		for (size_t i = 0; i < nbe; i++)
			json_array_append_new(
				backoff,
				json_pack("{s:s, s:f, s:f, s:i, s:s, s:s}", "reference", be[i].key,
					  "remaining_s", (double)be[i].state.remaining_ns / 1e9,
					  "delay_s", (double)be[i].state.delay_ns / 1e9, "failures",
					  (int)be[i].state.failures, "errno",
					  errno_name(be[i].state.last.err), "message",
					  be[i].state.last.message));
		backoff_entries_free(be, nbe);
	}
	/* No name or digest of a private image for who may not see it. */
	status_filter(m, pulls, who);
	status_filter(m, backoff, who);
	n_images = status_filter(m, images, who);
	puller_get_stats(m->puller, &ps);
	throttle_get_stats(m->throttle, &ts);
	cache_usage_memo(m->cache, &bytes, &layers);
	uint64_t snap_bytes = gc_snapshot_bytes(m);
	cache_statfs(m->cache, &fs_total, &fs_free);
	struct cache_objects_stats os;
	if (cache_objects_stats_memo(m->cache, &os) < 0)
		os = (struct cache_objects_stats){ 0 };
	/* files stored once however many layers hold them (cache.h) */
	json_object_set_new(o, "objects",
			    json_pack("{s:I, s:I, s:I, s:I}", "count", (json_int_t)os.objects,
				      "bytes", (json_int_t)os.bytes, "uses", (json_int_t)os.uses,
				      "shared_bytes", (json_int_t)os.shared_bytes));

	json_object_set_new(o, "profiles", profiles_status_json(m));
	json_object_set_new(o, "version", json_string(PULLFS_VERSION));
	json_object_set_new(o, "cache_dir", json_string(m->cache_dir));
	json_object_set_new(o, "events_log", json_string(m->events_path));
	json_object_set_new(o, "pulls", pulls);
	json_object_set_new(o, "images", images);
	json_object_set_new(o, "backoff", backoff);
	json_object_set_new(o, "users", gc_users_json(m, who));
	json_object_set_new(o, "queues",
			    json_pack("{s:i, s:i, s:i, s:i, s:I}", "pulls_running", (int)ps.running,
				      "pulls_queued", (int)ps.queued, "max_parallel_pulls",
				      (int)ps.max_parallel, "throttle_waiting", (int)ts.waiting,
				      "pulls_abandoned",
				      (json_int_t)(ps.abandoned + ts.abandoned)));
	json_object_set_new(o, "cache",
			    json_pack("{s:I, s:I, s:i, s:i, s:i, s:I, s:I, s:I, s:i, s:i}", "bytes",
				      (json_int_t)bytes, "snapshot_bytes", (json_int_t)snap_bytes,
				      "images", (int)n_images, "layers", (int)layers, "publishing",
				      (int)cache_layers_publishing(m->cache), "fs_bytes",
				      (json_int_t)fs_total, "fs_free_bytes", (json_int_t)fs_free,
				      "max_bytes", (json_int_t)m->opts.cache_max_bytes,
				      "gc_high_percent", (int)(m->opts.gc_high_percent ?: 85),
				      "gc_low_percent", (int)(m->opts.gc_low_percent ?: 80)));
	*ret_json = o;
	return 0;
}

/* ---- metrics --------------------------------------------------------- */

static int metric_registry_bytes(void *userdata, const char *key, void *value)
{
	fprintf(userdata, "pullfs_pulled_bytes_total{registry=\"%s\"} %llu\n", key,
		(unsigned long long)*(uint64_t *)value);
	return 0;
}

void manager_metrics(struct manager *m, FILE *f)
{
	static const double buckets[PULL_DURATION_BUCKETS] = {
		1,   5,	  10,  20,  30,	 60,   120,  180,  240,
		300, 360, 480, 600, 900, 1200, 1800, 2700, 3600,
	};
	static const char *const policies[3] = { "Always", "IfNotPresent", "Never" };
	struct manager_stats st;
	struct backoff_entry *be = NULL;
	struct puller_stats ps;
	struct throttle_stats ts;
	size_t nbe = 0;
	uint64_t bytes = 0, cum = 0;
	unsigned layers = 0;
	size_t n_images;

	if (backoff_snapshot(m->backoff, &be, &nbe) == 0)
		backoff_entries_free(be, nbe);
	puller_get_stats(m->puller, &ps);
	throttle_get_stats(m->throttle, &ts);
	cache_usage_memo(m->cache, &bytes, &layers);
	uint64_t snap_bytes = gc_snapshot_bytes(m);
	struct cache_objects_stats os;
	if (cache_objects_stats_memo(m->cache, &os) < 0)
		os = (struct cache_objects_stats){ 0 };
	profiles_metrics(m, f);
	fprintf(f,
		"# HELP pullfs_objects Distinct file contents stored as objects.\n"
		"# TYPE pullfs_objects gauge\n"
		"pullfs_objects %llu\n"
		"# HELP pullfs_object_bytes Bytes the objects take on disk.\n"
		"# TYPE pullfs_object_bytes gauge\n"
		"pullfs_object_bytes %llu\n"
		"# HELP pullfs_object_shared_bytes Bytes stored once that layers hold more than once.\n"
		"# TYPE pullfs_object_shared_bytes gauge\n"
		"pullfs_object_shared_bytes %llu\n",
		(unsigned long long)os.objects, (unsigned long long)os.bytes,
		(unsigned long long)os.shared_bytes);

	packs_lazy_metrics(m->packs, f);
	fputs("# HELP pullfs_image_pull_duration_seconds Duration of successful image pulls.\n"
	      "# TYPE pullfs_image_pull_duration_seconds histogram\n",
	      f);
	pthread_mutex_lock(&m->lock);
	st = m->stats;
	n_images = strmap_size(m->refs);
	for (unsigned i = 0; i < PULL_DURATION_BUCKETS; i++) {
		cum += st.pull_buckets[i];
		fprintf(f, "pullfs_image_pull_duration_seconds_bucket{le=\"%g\"} %llu\n",
			buckets[i], (unsigned long long)cum);
	}
	cum += st.pull_buckets[PULL_DURATION_BUCKETS];
	fprintf(f,
		"pullfs_image_pull_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
		"pullfs_image_pull_duration_seconds_sum %.6f\n"
		"pullfs_image_pull_duration_seconds_count %llu\n",
		(unsigned long long)cum, st.pull_seconds, (unsigned long long)st.pull_count);

	fputs("# HELP pullfs_ensure_requests_total Lookups of images/<ref> that ran ensure.\n"
	      "# TYPE pullfs_ensure_requests_total counter\n",
	      f);
	for (unsigned p = 0; p < 3; p++)
		for (unsigned pr = 0; pr < 2; pr++)
			for (unsigned rq = 0; rq < 2; rq++)
				fprintf(f,
					"pullfs_ensure_requests_total{pull_policy=\"%s\",present_locally=\"%s\",pull_required=\"%s\"} %llu\n",
					policies[p], pr ? "true" : "false", rq ? "true" : "false",
					(unsigned long long)st.ensure[p][pr][rq]);

	fputs("# HELP pullfs_pulled_bytes_total Bytes transferred from each registry by successful pulls.\n"
	      "# TYPE pullfs_pulled_bytes_total counter\n",
	      f);
	strmap_foreach(m->registry_bytes, metric_registry_bytes, f);
	pthread_mutex_unlock(&m->lock);

	fprintf(f,
		"# HELP pullfs_pulls_total Pulls that ran, by result.\n"
		"# TYPE pullfs_pulls_total counter\n"
		"pullfs_pulls_total{result=\"success\"} %llu\n"
		"pullfs_pulls_total{result=\"failure\"} %llu\n",
		(unsigned long long)st.pulls_ok, (unsigned long long)st.pulls_failed);
	fputs("# HELP pullfs_pull_failures_total Failed pulls by the errno the caller got.\n"
	      "# TYPE pullfs_pull_failures_total counter\n",
	      f);
	for (unsigned i = 0; i < errtable_len && i < ARRAY_SIZE(st.failures_by_errno); i++)
		fprintf(f, "pullfs_pull_failures_total{errno=\"%s\"} %llu\n",
			errno_name(-errtable[i].err), (unsigned long long)st.failures_by_errno[i]);
	fprintf(f,
		"# HELP pullfs_backoff_entries References in pull back-off.\n"
		"# TYPE pullfs_backoff_entries gauge\n"
		"pullfs_backoff_entries %zu\n"
		"# HELP pullfs_pulls_in_flight Pulls running now.\n"
		"# TYPE pullfs_pulls_in_flight gauge\n"
		"pullfs_pulls_in_flight %u\n"
		"# HELP pullfs_pulls_queued Pulls waiting for a pull slot.\n"
		"# TYPE pullfs_pulls_queued gauge\n"
		"pullfs_pulls_queued %u\n"
		"# HELP pullfs_pulls_abandoned_total Queued pulls that left the queue because nobody waited for them.\n"
		"# TYPE pullfs_pulls_abandoned_total counter\n"
		"pullfs_pulls_abandoned_total %llu\n"
		"# HELP pullfs_pack_descriptors Layer packs open now.\n"
		"# TYPE pullfs_pack_descriptors gauge\n"
		"pullfs_pack_descriptors %u\n"
		"# HELP pullfs_cache_bytes Bytes the cache takes on disk.\n"
		"# TYPE pullfs_cache_bytes gauge\n"
		"pullfs_cache_bytes %llu\n"
		"# HELP pullfs_cache_images Cached image references.\n"
		"# TYPE pullfs_cache_images gauge\n"
		"pullfs_cache_images %zu\n"
		"# HELP pullfs_cache_layers Unpacked layers in the cache.\n"
		"# TYPE pullfs_cache_layers gauge\n"
		"pullfs_cache_layers %u\n"
		"# HELP pullfs_snapshot_bytes Bytes containerd's snapshots take on local disk.\n"
		"# TYPE pullfs_snapshot_bytes gauge\n"
		"pullfs_snapshot_bytes %llu\n"
		"# HELP pullfs_gc_runs_total Garbage collection runs.\n"
		"# TYPE pullfs_gc_runs_total counter\n"
		"pullfs_gc_runs_total{trigger=\"threshold\"} %llu\n"
		"pullfs_gc_runs_total{trigger=\"manual\"} %llu\n"
		"# HELP pullfs_gc_freed_bytes_total Bytes freed by garbage collection.\n"
		"# TYPE pullfs_gc_freed_bytes_total counter\n"
		"pullfs_gc_freed_bytes_total %llu\n"
		"# HELP pullfs_gc_removed_images_total Images removed by garbage collection.\n"
		"# TYPE pullfs_gc_removed_images_total counter\n"
		"pullfs_gc_removed_images_total %llu\n",
		nbe, ps.running, ps.queued, (unsigned long long)(ps.abandoned + ts.abandoned),
		packs_open_count(m->packs), (unsigned long long)bytes, n_images, layers,
		(unsigned long long)snap_bytes, (unsigned long long)st.gc_runs_threshold,
		(unsigned long long)st.gc_runs_manual, (unsigned long long)st.gc_freed_bytes,
		(unsigned long long)st.gc_removed_images);
}

/* ---- inspect --------------------------------------------------------- */

static json_t *descriptor_json(const struct descriptor *d)
{
	return json_pack("{s:s, s:I, s:s}", "digest", d->digest, "size", (json_int_t)d->size,
			 "media_type", d->media_type);
}

int manager_inspect(struct manager *m, const char *reference, json_t **ret_json,
		    struct error_detail *err)
{
	_cleanup_free_ char *canonical = NULL, *digest = NULL, *index_digest = NULL;
	_cleanup_free_ char *mbuf = NULL, *cbuf = NULL;
	struct manifest *mf = NULL;
	size_t mlen, clen;
	json_t *o = NULL, *layers, *config;
	char why[ERROR_DETAIL_MAX] = "";
	int r;

	r = manager_canonical(reference, &canonical);
	if (r < 0) {
		if (r == -EINVAL)
			error_detail_set(err, r, "invalid reference \"%s\"", reference);
		return r;
	}
	pthread_mutex_lock(&m->lock);
	struct refstate *rs = strmap_get(m->refs, canonical);
	if (rs) {
		digest = strdup(rs->digest);
		index_digest = rs->index_digest ? strdup(rs->index_digest) : NULL;
	}
	pthread_mutex_unlock(&m->lock);
	if (!digest)
		return error_detail_set(err, -ENOENT, "image \"%s\" is not in the cache",
					canonical);
	r = cache_blob_read(m->cache, digest, MANIFEST_MAX_BYTES, &mbuf, &mlen);
	if (r >= 0)
		r = manifest_parse(mbuf, mlen, NULL, &mf, why, sizeof(why));
	if (r < 0) {
		if (why[0])
			return error_detail_set(err, r, "%s", why);
		return error_detail_set(err, r, "cannot read the manifest of \"%s\": %s", canonical,
					strerror(-r));
	}
	if (mf->kind != MANIFEST_IMAGE) {
		manifest_free(mf);
		return error_detail_set(err, -EBADMSG,
					"manifest of \"%s\" is not an image manifest", canonical);
	}
	layers = json_array();
	uint64_t size = mf->config.size;
	for (size_t i = 0; i < mf->n_layers; i++) {
		json_array_append_new(layers, descriptor_json(&mf->layers[i]));
		size += mf->layers[i].size;
	}
	config = NULL;
	if (cache_blob_read(m->cache, mf->config.digest, 16u << 20, &cbuf, &clen) == 0)
		config = json_loadb(cbuf, clen, 0, NULL);
	const char *os = NULL, *arch = NULL, *variant = NULL;
	if (config) {
		os = json_string_value(json_object_get(config, "os"));
		arch = json_string_value(json_object_get(config, "architecture"));
		variant = json_string_value(json_object_get(config, "variant"));
	}
	char platform[128];
	snprintf(platform, sizeof(platform), "%s/%s%s%s", os ? os : "?", arch ? arch : "?",
		 variant ? "/" : "", variant ? variant : "");
	o = json_pack("{s:b, s:s, s:s, s:s?, s:s, s:s, s:I, s:o, s:o, s:o}", "ok", 1, "reference",
		      canonical, "digest", digest, "index_digest", index_digest, "platform",
		      platform, "media_type", mf->media_type, "size", (json_int_t)size,
		      "config_descriptor", descriptor_json(&mf->config), "layers", layers, "config",
		      config ? config : json_null());
	manifest_free(mf);
	if (!o)
		return -ENOMEM;
	*ret_json = o;
	return 0;
}

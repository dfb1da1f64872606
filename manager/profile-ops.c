/* The operator's side of start profiles (docs/profiles.md): export and
 * import over the control socket, their status and metrics, and their
 * removal with their image.  The recording and the use are the images'
 * (manager/image/imageprofile.c); the file and its store are
 * manager/lazy/profile.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache.h"
#include "errdetail.h"
#include "macro.h"
#include "profile.h"
#include "reference.h"
#include "strmap.h"
#include "manager-private.h"

/* The image manifest digest reference stands for: the one its cached name
 * has (*ret_cached true), else the digest it names itself (which may be
 * an index's).  *ret NULL when neither.  -EOPNOTSUPP without a store of
 * profiles. */
static int reference_digest(struct manager *m, const char *reference, char **ret_canonical,
			    char **ret, bool *ret_cached, struct error_detail *err)
{
	_cleanup_free_ char *canonical = NULL;
	struct reference *ref = NULL;
	char *digest = NULL;
	bool cached = false;
	int r;

	*ret_canonical = *ret = NULL;
	*ret_cached = false;
	if (!m->profiles)
		return error_detail_set(err, -EOPNOTSUPP, "start profiles are off");
	r = manager_canonical(reference, &canonical);
	if (r < 0)
		return r == -EINVAL
			       ? error_detail_set(err, r, "invalid reference \"%s\"", reference)
			       : r;
	pthread_mutex_lock(&m->lock);
	struct refstate *rs = strmap_get(m->refs, canonical);
	if (rs && !(digest = strdup(rs->digest)))
		r = -ENOMEM;
	pthread_mutex_unlock(&m->lock);
	cached = digest != NULL;
	if (r == 0 && !digest && reference_parse(reference, REFERENCE_DEFAULT_TAG, &ref) == 0) {
		if (ref->digest && !(digest = strdup(ref->digest)))
			r = -ENOMEM;
		reference_free(ref);
	}
	if (r < 0)
		return r;
	*ret_canonical = TAKE_PTR(canonical);
	*ret = digest;
	*ret_cached = cached;
	return 0;
}

int manager_profile_export(struct manager *m, const char *reference, json_t **ret_json,
			   struct error_detail *err)
{
	_cleanup_free_ char *canonical = NULL, *digest = NULL, *text = NULL;
	struct profile *prof = NULL;
	bool cached = false;
	size_t len;
	int r;

	r = reference_digest(m, reference, &canonical, &digest, &cached, err);
	if (r < 0)
		return r;
	if (!digest)
		return error_detail_set(err, -ENOENT, "image \"%s\" is not in the cache",
					canonical);
	r = profiles_load(m->profiles, digest, &prof);
	if (r == -ENOENT)
		return error_detail_set(err, r, "image \"%s\" (%s) has no start profile", canonical,
					digest);
	if (r < 0)
		return error_detail_set(err, r, "the start profile of \"%s\": %s", canonical,
					strerror(-r));
	r = profile_format(prof, &text, &len);
	if (r == 0) {
		*ret_json =
			json_pack("{s:b, s:s, s:s, s:I, s:I, s:s%}", "ok", 1, "reference",
				  canonical, "digest", digest, "files", (json_int_t)prof->n_files,
				  "bytes", (json_int_t)prof->bytes, "profile", text, len);
		if (!*ret_json)
			r = -ENOMEM;
	}
	profile_free(prof);
	return r;
}

int manager_profile_import(struct manager *m, const char *reference, const char *text, size_t len,
			   json_t **ret_json, struct error_detail *err)
{
	_cleanup_free_ char *canonical = NULL, *digest = NULL;
	struct profile *prof = NULL;
	char why[ERROR_DETAIL_MAX] = "";
	bool cached = false;
	int r;

	r = reference_digest(m, reference, &canonical, &digest, &cached, err);
	if (r < 0)
		return r;
	r = profile_parse(text, len, &prof, why, sizeof(why));
	if (r < 0)
		return error_detail_set(err, r == -E2BIG ? -EBADMSG : r,
					"not a valid start profile: %s",
					why[0] ? why : strerror(-r));
	/* A cached name must be of the profile's image; a name not cached
	 * yet is not resolved (an import asks no registry): the profile
	 * waits under its digest for an image of that digest. */
	if (cached && digest && strcmp(digest, prof->image) != 0) {
		r = error_detail_set(err, -EINVAL,
				     "the profile is of image %s, and \"%s\" is image %s",
				     prof->image, canonical, digest);
		profile_free(prof);
		return r;
	}
	r = profiles_save(m->profiles, prof);
	if (r < 0) {
		profile_free(prof);
		return error_detail_set(err, r, "cannot store the profile: %s", strerror(-r));
	}
	atomic_fetch_add(&profiles_stats(m->profiles)->imported, 1);
	manager_emit(m, EVENT_NORMAL, "ProfileImported", cached ? canonical : NULL, prof->image, 0,
		     NULL, "Imported a start profile of image %s: %zu files (%" PRIu64 " bytes)",
		     prof->image, prof->n_files, prof->bytes);
	*ret_json = json_pack("{s:b, s:s, s:s, s:I, s:I}", "ok", 1, "reference", canonical,
			      "digest", prof->image, "files", (json_int_t)prof->n_files, "bytes",
			      (json_int_t)prof->bytes);
	profile_free(prof);
	return *ret_json ? 0 : -ENOMEM;
}

json_t *profiles_status_json(struct manager *m)
{
	uint64_t n = 0, bytes = 0;
	struct profile_stats *st;

	if (!m->profiles)
		return json_pack("{s:I, s:I}", "count", (json_int_t)0, "bytes", (json_int_t)0);
	st = profiles_stats(m->profiles);
	profiles_count(m->profiles, &n, &bytes);
	return json_pack(
		"{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "count", (json_int_t)n, "bytes",
		(json_int_t)bytes, "recorded", (json_int_t)atomic_load(&st->recorded), "used",
		(json_int_t)atomic_load(&st->used), "stale", (json_int_t)atomic_load(&st->stale),
		"imported", (json_int_t)atomic_load(&st->imported), "files_prefetched",
		(json_int_t)atomic_load(&st->files), "bytes_prefetched",
		(json_int_t)atomic_load(&st->bytes));
}

void profiles_metrics(struct manager *m, FILE *f)
{
	uint64_t n = 0, bytes = 0;
	struct profile_stats *st;

	if (!m->profiles)
		return;
	st = profiles_stats(m->profiles);
	profiles_count(m->profiles, &n, &bytes);
	fprintf(f,
		"# HELP pullfs_profiles Start profiles stored in the cache.\n"
		"# TYPE pullfs_profiles gauge\npullfs_profiles %" PRIu64 "\n"
		"# HELP pullfs_profiles_recorded_total Start profiles recorded.\n"
		"# TYPE pullfs_profiles_recorded_total counter\n"
		"pullfs_profiles_recorded_total %" PRIu64 "\n"
		"# HELP pullfs_profiles_used_total Cold lookups that prefetched a start profile.\n"
		"# TYPE pullfs_profiles_used_total counter\npullfs_profiles_used_total %" PRIu64
		"\n"
		"# HELP pullfs_profiles_stale_total Start profiles dropped as stale.\n"
		"# TYPE pullfs_profiles_stale_total counter\npullfs_profiles_stale_total %" PRIu64
		"\n"
		"# HELP pullfs_profiles_imported_total Start profiles imported.\n"
		"# TYPE pullfs_profiles_imported_total counter\n"
		"pullfs_profiles_imported_total %" PRIu64 "\n"
		"# HELP pullfs_profile_prefetched_files_total Files of lazy layers prefetched from "
		"start profiles.\n"
		"# TYPE pullfs_profile_prefetched_files_total counter\n"
		"pullfs_profile_prefetched_files_total %" PRIu64 "\n"
		"# HELP pullfs_profile_prefetched_bytes_total Compressed bytes those prefetches "
		"fetched.\n"
		"# TYPE pullfs_profile_prefetched_bytes_total counter\n"
		"pullfs_profile_prefetched_bytes_total %" PRIu64 "\n",
		n, (uint64_t)atomic_load(&st->recorded), (uint64_t)atomic_load(&st->used),
		(uint64_t)atomic_load(&st->stale), (uint64_t)atomic_load(&st->imported),
		(uint64_t)atomic_load(&st->files), (uint64_t)atomic_load(&st->bytes));
}

/* An imported profile waits this long for its image to be pulled. */
#define PROFILE_ORPHAN_S (24 * 3600)

/* A profile whose image manifest is not in the cache: GC removed the
 * manifest without it (a crash between the two), or an import whose
 * image never came. */
static int prune_one(void *userdata, const char *image, int64_t stored)
{
	struct manager *m = userdata;

	if (!cache_blob_present(m->cache, image) && time(NULL) - stored > PROFILE_ORPHAN_S)
		(void)profiles_remove(m->profiles, image);
	return 0;
}

void profiles_prune(struct manager *m)
{
	if (m->profiles)
		(void)profiles_foreach(m->profiles, prune_one, m);
}

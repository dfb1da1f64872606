/* Start profiles: which files the first users of an image read in the
 * first seconds after its first lookup, recorded per image manifest
 * digest, kept in the cache (CACHE/profiles/HEX) and fetched early, in
 * a completion slot below readers' demand, at the next cold lookup of
 * the image.  See docs/profiles.md.
 *
 * This module has three parts: the profile file (its text, parsed
 * strictly and written back), the recorder that builds one from the
 * opens of an image's files, and the store of profiles in the cache with
 * the thread that writes each recording once its window is over. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clock.h"
#include "digest.h"
#include "events.h"

/* What one profile holds at most: files, the sum of their sizes, the
 * layers it names and the length of its text. */
#define PROFILE_FILES_MAX 1024u
#define PROFILE_BYTES_MAX (256ull << 20)
#define PROFILE_LAYERS_MAX 256u
#define PROFILE_TEXT_MAX (160u << 10)
/* A file larger than this is not recorded: a start seldom reads one
 * whole (model weights, archives), and fetching it whole early would take
 * the link from what the start reads next. */
#define PROFILE_FILE_MAX (32ull << 20)
/* The first line of a profile file. */
#define PROFILE_MAGIC "pullfs-profile 1"

struct profile_file {
	unsigned layer; /* index in profile.layers */
	char object[DIGEST_HEX_LEN + 1];
	uint64_t size;
};

struct profile {
	char image[DIGEST_STRING_MAX]; /* the image manifest's digest */
	int64_t recorded;	       /* unix seconds */
	uint64_t window_ms;	       /* how long after the first lookup */
	char (*layers)[DIGEST_STRING_MAX];
	size_t n_layers;
	struct profile_file *files; /* in the order they were first opened */
	size_t n_files;
	uint64_t bytes; /* the sum of the files' sizes */
};

/* Parses a profile's text (len bytes, not NUL-terminated).  Everything
 * is checked: the first line, digests, object names, layer indexes,
 * every limit above, no file twice, no line unknown.  Returns 0 with a
 * new profile (profile_free()), -EBADMSG with the line and the reason in
 * errbuf, -E2BIG for a text over PROFILE_TEXT_MAX, -ENOMEM. */
int profile_parse(const char *text, size_t len, struct profile **ret, char *errbuf, size_t errlen);
/* The text of p, NUL-terminated, in *ret (caller frees) and its length.
 * Returns 0 or -ENOMEM. */
int profile_format(const struct profile *p, char **ret, size_t *ret_len);
void profile_free(struct profile *p);

/* ---- recording ------------------------------------------------------ */

/* Records the files opened in the window after start_ns (an image's first
 * lookup), in the order of their first open, within the limits above.
 * Thread-safe; reference-counted (the image that is read holds one, the
 * store's writer another). */
struct profile_recorder;

/* layers: the image's layer digests in manifest order (copied).  Returns
 * 0 or -ENOMEM / -E2BIG (more than PROFILE_LAYERS_MAX layers). */
int profile_recorder_new(const char *image, const char *const *layers, size_t n_layers,
			 int64_t start_ns, int64_t window_ns, struct profile_recorder **ret);
void profile_recorder_ref(struct profile_recorder *r);
void profile_recorder_unref(struct profile_recorder *r);
/* Notes one open of the file with content object in layer (an index into
 * the layers given) of size bytes at now_ns.  Returns 1 when the file is
 * new to the profile, 0 when it is there already or over a limit (a file
 * over PROFILE_FILE_MAX, or that would take the profile past
 * PROFILE_BYTES_MAX, is left out; the next ones may fit), -ESTALE once the window is over, -EINVAL for a
 * layer out of range. */
int profile_recorder_note(struct profile_recorder *r, unsigned layer, const char *object,
			  uint64_t size, int64_t now_ns);
/* When the window ends (monotonic ns). */
int64_t profile_recorder_deadline(const struct profile_recorder *r);
/* Closes the recorder (later notes get -ESTALE) and returns what it
 * recorded as a profile stamped with recorded (unix seconds), or NULL in
 * *ret when no file was opened.  Returns 0 or -ENOMEM. */
int profile_recorder_finish(struct profile_recorder *r, int64_t recorded, struct profile **ret);

/* ---- the store ------------------------------------------------------ */

struct profile_stats {
	atomic_uint_fast64_t recorded; /* profiles written at a window's end */
	atomic_uint_fast64_t used;     /* cold lookups that prefetched one */
	atomic_uint_fast64_t stale;    /* dropped: files not in their image */
	atomic_uint_fast64_t imported; /* by pullfsctl profile import */
	atomic_uint_fast64_t files;    /* files a profile's prefetch fetched */
	atomic_uint_fast64_t bytes;    /* compressed bytes that took */
};

struct profiles_options {
	const char *cache_dir;
	/* how long a recording lasts after an image's first lookup; 0:
	 * nothing is recorded */
	int64_t window_ns;
	/* ProfileRecorded events (the writer's); sent without locks */
	struct event_sink events;
};

struct profiles;

/* Opens (makes) CACHE/profiles/, removes temporary files a killed
 * process left there, and starts the writer's thread.  Returns 0 or
 * -errno with a reason in errbuf. */
int profiles_new(const struct profiles_options *o, struct profiles **ret, char *errbuf,
		 size_t errlen);
/* Stops the writer and frees everything: recordings whose window is over
 * are written, the others dropped (a profile cut short would stay: the
 * next process records the image's next cold start instead).  Takes
 * NULL. */
void profiles_free(struct profiles *p);
struct profile_stats *profiles_stats(struct profiles *p);
/* The recording window (0: recording is off). */
int64_t profiles_window_ns(const struct profiles *p);

/* The stored profile of image (a manifest digest).  -ENOENT when there is
 * none; a file that does not parse is removed and -ENOENT returned. */
int profiles_load(struct profiles *p, const char *image, struct profile **ret);
/* Stores p under its image, replacing one there: written to a temporary
 * file in profiles/, flushed, renamed over.  Returns 0 or -errno. */
int profiles_save(struct profiles *p, const struct profile *prof);
/* Removes the profile of image; 0 or -ENOENT. */
int profiles_remove(struct profiles *p, const char *image);
/* How many profiles are stored, and their bytes. */
void profiles_count(struct profiles *p, uint64_t *ret_n, uint64_t *ret_bytes);
/* Calls fn with the image digest of each stored profile and when it was
 * stored (unix seconds); stops when fn returns non-zero and returns
 * that. */
int profiles_foreach(struct profiles *p,
		     int (*fn)(void *userdata, const char *image, int64_t stored), void *userdata);

/* Hands a new recorder to the writer, which writes its profile once its
 * window is over (unless a profile of the image is stored by then: an
 * import wins) and says so in a ProfileRecorded event.  Takes a
 * reference of its own.  Returns 0, -ECANCELED when the store stops. */
int profiles_watch(struct profiles *p, struct profile_recorder *r);

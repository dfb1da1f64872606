/* The background completions of lazy layers, all layers of a daemon
 * together: a thread per layer that waits for the layer's schedule
 * (lazy-schedule.h) and then for one of LAZY_COMPLETIONS_MAX slots,
 * completes the layer (lazy_layer_complete()), and after a failure tries
 * again until the layer is complete, cannot be, or the daemon stops.
 *
 * This decides when a completion runs and how many run at once; what is
 * fetched is lazy.c's, and what a layer belongs to is its owner's (the
 * image contents, image.c), told through a job's callbacks. */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "clock.h"
#include "events.h"

struct lazy_layer;
struct lazy_prefetch;
struct lazy_stats;
struct strmap;
struct registry;

/* Completions running at once: each streams a blob, and the reads someone
 * waits for come first anyway (lazy.h). */
#define LAZY_COMPLETIONS_MAX 2
/* The readers' bytes that measure the link (measure_link): fewer, on a
 * shaped link, may have come in the burst its queue lets through. */
#define LAZY_RATE_MIN_BYTES (1u << 20)

struct lazy_completer_options {
	const struct clock *clock;
	struct registry *registry; /* borrowed */
	/* the readers' fetch counts, which move the schedules (borrowed) */
	struct lazy_stats *stats;
	/* the start-up window of a layer just loaded (lazy-schedule.h); 0:
	 * none */
	int64_t window_ns;
	/* the window ends early when the readers' fetches show a link on
	 * which the rest of the image arrives within it
	 * (lazy_schedule_link_fast(); a LazyCompletionNow event says so) */
	bool measure_link;
	/* the daemon stops: completions give up (borrowed, set by the
	 * owner) */
	const atomic_bool *cancelled;
	/* LayerCompleted, LazyFetchFailed and LazyLayerUnverified events,
	 * named by layer digest; sent without locks */
	struct event_sink events;
};

/* What one completion works on, given by its owner. */
struct lazy_completion_job {
	const char *digest;	  /* the layer's; copied */
	struct lazy_layer *layer; /* borrowed until end() */
	/* The layers of one image share it (compared, never dereferenced):
	 * readers who fetched LAZY_BULK_BYTES of them together, or made
	 * LAZY_BULK_FETCHES fetches, read the image rather than start from
	 * it, and the start-up window of each ends (the completion's
	 * requests in blob order serve them better than their chunk by
	 * chunk fetches). */
	const void *group;
	/* Whether nothing is left to complete (the layer was replaced by
	 * one verified against its digest); checked before each try. */
	bool (*gone)(void *userdata);
	/* The completion is over: the layer is complete (true) or given up.
	 * Called once, without locks, last but for the completer's own
	 * bookkeeping. */
	void (*end)(void *userdata, bool complete);
	/* A start profile's files in this layer (their content objects as
	 * keys; NULL: none), fetched at once after the prefetch landmark's,
	 * in the same slot (lazy_layer_prefetch_objects()); borrowed until
	 * profiled() is called, which it is once, before end(), with what
	 * the prefetch did and its result (-ECANCELED: not tried). */
	const struct strmap *profile;
	void (*profiled)(void *userdata, const struct lazy_prefetch *pf, int r);
	void *userdata;
};

struct lazy_completer;

/* Returns 0 with a completer that runs nothing yet, or -ENOMEM. */
int lazy_completer_new(const struct lazy_completer_options *o, struct lazy_completer **ret);
/* Frees it; lazy_completer_drain() first. */
void lazy_completer_free(struct lazy_completer *lc);

/* Starts the completion of job->layer on a thread of its own.  Returns 0
 * (job->end will be called), or -ECANCELED when the daemon stops, -ENOMEM,
 * -EAGAIN when no thread can be made (job->end is then never called). */
int lazy_completer_start(struct lazy_completer *lc, const struct lazy_completion_job *job);

/* Wakes the completions whose job userdata match(match_data, userdata)
 * accepts (lazy_schedule_wake(), waited as there).  Does not block. */
void lazy_completer_wake(struct lazy_completer *lc, bool (*match)(void *match_data, void *userdata),
			 void *match_data, bool waited);

/* The phase (enum lazy_phase) of the completion of layer digest and its
 * failures in a row, or -ENOENT when none runs or waits.  Takes the
 * completer's lock, which nothing holds while it takes another: callers
 * may hold theirs. */
int lazy_completer_phase(struct lazy_completer *lc, const char *digest, unsigned *ret_failures);

/* How many completions run or wait. */
unsigned lazy_completer_count(struct lazy_completer *lc);
/* Waits until no completion runs or waits; the owner has set cancelled
 * before. */
void lazy_completer_drain(struct lazy_completer *lc);

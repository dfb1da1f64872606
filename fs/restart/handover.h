/* What a serving process leaves for the one that takes its /dev/fuse
 * connection over (supervisor.c): the kernel's INIT request, so that the
 * next process can give libfuse the same negotiation without a new one,
 * and what the kernel may still name -- namespace directories, images
 * handed out by key, backing files registered for passthrough.
 *
 * The state is a log of text lines, one record each, appended with one
 * write(2) before the kernel hears of what the record describes, so a
 * process killed at any moment leaves a log that covers everything the
 * kernel knows.  A last line without its newline (killed mid-write) is
 * ignored.  Strings are escaped (%XX for '%', blanks and non-ASCII), so
 * a record is always one line of space-separated fields:
 *
 *   v 1                       format version, first
 *   init HEX                  the kernel's INIT request as read
 *   initr FLAGS               the flags of the INIT reply the process that
 *                             read INIT sent (hex, flags2 in the high 32
 *                             bits), written before the reply
 *   ns KEY                    a namespace node (path below images/, or
 *                             "/layers/..." in the layer store)
 *   nsx KEY                   ... the kernel forgot it
 *   nsu KEY UID               ... it is charged to user UID (namespace.c),
 *                             written with its "ns" in one write
 *   img KEY DIGEST REFERENCE  an image handed out under image key KEY; a
 *                             view of one layer (layers/) is noted with
 *                             REFERENCE "layer:LAYER-DIGEST:IMAGE-REF"
 *                             and the image's manifest DIGEST
 *   imgx KEY                  ... the kernel forgot every node of it, or
 *                             a process could not make it again
 *   bk ID OBJECT              backing id ID registered for OBJECT
 *   bkx ID                    ... and closed
 *   bo REF N DELAY LAST ERR =MESSAGE
 *                             REF in back-off after N failures, DELAY ns
 *                             from LAST (CLOCK_MONOTONIC ns, the same for
 *                             every process), the last one -ERR
 *   bok REF                   ... and out of it
 *
 * Records of an unknown kind are skipped, for a newer writer.
 *
 * The log is bounded: once it is more than twice its size after the last
 * compaction (and at least HANDOVER_COMPACT_MIN), the serving process
 * writes what it says, compacted, to a new memfd and asks the supervisor
 * to hold that one instead (handover_set_swap); records noted meanwhile go
 * to both.  The supervisor swaps in one step, so a kill at any moment
 * leaves it one whole log: the old one, or the compacted one.  The pure
 * parts (format, parse) are what the unit test covers. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HANDOVER_VERSION 1
#define HANDOVER_NO_OWNER UINT32_MAX

struct handover_image {
	uint32_t key;
	char *digest;
	char *reference;
};

struct handover_backing {
	int id;
	char *object;
};

struct handover_backoff {
	char *reference;
	unsigned failures;
	int64_t delay_ns, last_ns;
	int err; /* negative errno */
	char *message;
};

struct handover_state {
	unsigned version;
	void *init; /* NULL when no INIT was seen */
	size_t init_len;
	/* the INIT reply's flags; unknown when the process that answered
	 * INIT did not note them (a version before the record) */
	bool init_reply_known;
	uint64_t init_reply;
	char **ns_keys; /* distinct */
	/* for each of ns_keys, the user it is charged to, or
	 * HANDOVER_NO_OWNER; NULL: nobody at all */
	uint32_t *ns_owners;
	size_t n_ns_keys;
	struct handover_image *images; /* distinct keys, the last record wins */
	size_t n_images;
	struct handover_backing *backings; /* registered and not closed */
	size_t n_backings;
	struct handover_backoff *backoffs; /* the last record of each, if "bo" */
	size_t n_backoffs;
};

/* Parses a log.  Returns 0 with *ret filled (free with
 * handover_state_done()), -EBADMSG for a log without a version record, a
 * bad field or a version this build cannot read (-EPROTO), -ENOMEM. */
int handover_parse(const char *text, size_t len, struct handover_state *ret);
void handover_state_done(struct handover_state *s);

/* One record, with its newline, in a new string (NULL: out of memory). */
char *handover_format_version(void);
char *handover_format_init(const void *req, size_t len);
char *handover_format_init_reply(uint64_t flags);
char *handover_format_ns(const char *key);
/* "ns" and "nsu" of a node charged to uid, as one string. */
char *handover_format_ns_owned(const char *key, uint32_t uid);
char *handover_format_image(uint32_t key, const char *digest, const char *reference);
char *handover_format_ns_forgotten(const char *key);
char *handover_format_image_gone(uint32_t key);
char *handover_format_backing(int id, const char *object);
char *handover_format_backing_closed(int id);
char *handover_format_backoff(const struct handover_backoff *b);
char *handover_format_backoff_cleared(const char *reference);
/* The whole state as a log, compacted; NULL when out of memory. */
char *handover_format_state(const struct handover_state *s);

/* The log of this process, an object: written by every thread that tells
 * the kernel of something (takeover.h), compacted by a thread of its
 * own.  handover_log_new() takes fd, the descriptor of the log the
 * supervisor holds, open for appending from now on; a log compacted into
 * a new descriptor closes the one before, and handover_log_free() closes
 * the one it has then.  Before any thread that notes.  0 or -ENOMEM. */
struct handover_log;
int handover_log_new(int fd, struct handover_log **ret);
/* Stops the compactor and frees; accepts NULL. */
void handover_log_free(struct handover_log *log);
/* A note writes its record at once (O_APPEND, one write), before the
 * caller lets the kernel know; a failed write is counted, not fatal: the
 * next process then knows less.  Takes the record; NULL is counted as
 * lost.  log NULL (no supervisor): the record is dropped. */
void handover_note(struct handover_log *log, char *record);
unsigned long handover_lost(struct handover_log *log);

/* The whole log in fd, read from its start, in a new buffer of *ret_len
 * bytes; NULL with errno set. */
char *handover_read(int fd, size_t *ret_len);

#define HANDOVER_COMPACT_MIN 16384

/* Gives the supervisor fd, the compacted log, to hold in place of the
 * log; 0 once it does (then this process writes to fd), -errno when it
 * keeps the old one. */
typedef int (*handover_swap_fn)(int fd, void *userdata);
void handover_set_swap(struct handover_log *log, handover_swap_fn fn, void *userdata);
/* Compacts the log now (the fault points "handover-compacted", before the
 * swap, and "handover-swapped", after it, are for the crash tests).
 * 0, -EBUSY (one under way), -EOPNOTSUPP (no swap), -errno. */
int handover_compact(struct handover_log *log);
/* A thread that compacts the log whenever it is due; stopped by
 * handover_compactor_stop() or handover_log_free(). */
int handover_compactor_start(struct handover_log *log);
void handover_compactor_stop(struct handover_log *log);
/* The size of the log, the compactions made, and the descriptor written
 * to now (for the tests). */
size_t handover_log_bytes(struct handover_log *log);
unsigned long handover_compactions(struct handover_log *log);
int handover_log_fd(struct handover_log *log);

/* Which pulls have shown that they may have a blob.  Layers and configs
 * are shared by digest: a manifest of any reference, from any registry,
 * that names a blob already in the cache is served from the cache.  For a
 * blob that only pulls with credentials brought in, that would hand its
 * content to whoever names its digest, so (as containerd and the kubelet
 * do) a pull reuses such a blob only once it has shown that its own
 * repository has it.
 *
 * The proofs of a blob are lines in proofs/HEX under the cache directory:
 * "*" when a pull without credentials had the blob (anybody could fetch it
 * so: it is public), "DOMAIN/REPO" when a pull with credentials of that
 * repository had it.  Lines are appended; only whole lines count, so a
 * line cut short by a crash proves nothing.  A blob with no file (brought
 * in before proofs were kept, or a crash before its line) is unproven:
 * the next pull that wants it shows it once more.  A lost line costs one
 * request, never privacy. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct blobproof;

/* Opens (creating it if needed) proofs/ under cache_dir.  Returns 0 with
 * the state owned by the caller, or -errno. */
int blobproof_open(const char *cache_dir, struct blobproof **ret);
void blobproof_close(struct blobproof *b); /* accepts NULL */

/* The proof a pull of domain/repo gives: "*" without credentials,
 * "DOMAIN/REPO" with them.  Into buf of len bytes; false when it does not
 * fit. */
bool blobproof_line(const char *domain, const char *repo, bool with_credentials, char *buf,
		    size_t len);

/* Whether digest is public or proven by line.  Blocks on the disk
 * (a small read).  Thread-safe. */
bool blobproof_holds(struct blobproof *b, const char *digest, const char *line);

/* Whether a pull without credentials had digest ("*"), from the cache
 * directory's descriptor (for the cache itself, which has no struct
 * blobproof).  Blocks on the disk.  Thread-safe. */
bool blobproof_public_at(int cache_dirfd, const char *digest);

/* Whether digest is public, or a pull with credentials of domain (any
 * repository) had it: then that registry's own authorisation decides who
 * else may have it, and a HEAD there with a pull's credentials is proof.
 * Elsewhere a HEAD proves nothing (a registry the user runs answers yes to
 * anything); only the blob itself, fetched and checked against its
 * digest, does.  Thread-safe. */
bool blobproof_domain_had(struct blobproof *b, const char *digest, const char *domain);

/* Records line for digest (nothing when it is there already).  Returns 0
 * or -errno; a failure only costs a request later. */
int blobproof_note(struct blobproof *b, const char *digest, const char *line);

/* Deletes every proof of digest: the pulls they came from did not show
 * that they had the blob after all (a lazy layer's pulls, from a table
 * of contents only, once a pull that fetched the blob replaced it).
 * Returns 0 or -errno. */
int blobproof_forget(struct blobproof *b, const char *digest);

/* Deletes the proofs of every digest present() says the cache no longer
 * holds (GC, once the blobs are gone: a proof without its blob is
 * harmless, a blob whose proof went first only costs a check again).
 * The count removed goes to *ret_removed when set.  Returns 0 or the
 * first -errno (the others are still tried). */
int blobproof_prune(struct blobproof *b, bool (*present)(void *userdata, const char *digest),
		    void *userdata, unsigned *ret_removed);

/* Who may do what on a shared node: who may cause a pull, and who may see
 * an image that was pulled with registry credentials.  The kubelet's
 * KEP-2535 ("ensure secret pulled images") asks the same of a pod: an
 * image pulled with credentials is not handed to one that cannot show
 * them.  A process on a pullfs mount shows who it is by its uid and
 * groups, so the operator names, per reference pattern, the users and
 * groups that stand for the credentials of those references.
 *
 * A rule is "PATTERN=WHO[,WHO...]": PATTERN is matched against the
 * canonical reference as --pull-policy-rule's patterns are (policy.h),
 * the first matching rule wins, and WHO is "*" (everybody), a user (a
 * name or a number) or a group ("@" and a name or a number).  Root is
 * always let in.  Names are resolved once, when the rule is added.
 *
 * Groups: the request gives the caller's fsuid and fsgid; supplementary
 * groups are read from /proc/PID/status only when a group entry is still
 * to be matched, and only counted when that file's fsuid and fsgid are the
 * request's (a process that changed its credentials or a pid used again
 * since the request counts with its primary group alone). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "events.h"

struct access;

/* The caller's supplementary groups: fills up to max into groups and
 * returns how many, or -errno.  The default reads /proc (see above). */
typedef int access_groups_fn(const struct caller *who, gid_t *groups, size_t max);

/* Checks one rule without keeping it: 0, or -EINVAL with the reason in
 * errbuf (no "=", an empty pattern or list, an unknown user or group). */
int access_rule_check(const char *rule, char *errbuf, size_t errlen);

/* pull_rules: who may cause a pull of a reference not in the cache (no
 * match: everybody).  private_rules: who may see an image pulled with
 * credentials (no match: root only).  groups NULL: read /proc.  Returns 0
 * with the state owned by the caller, -EINVAL with the reason in errbuf,
 * or -ENOMEM. */
int access_new(const char *const *pull_rules, size_t n_pull, const char *const *private_rules,
	       size_t n_private, access_groups_fn *groups, struct access **ret, char *errbuf,
	       size_t errlen);
void access_free(struct access *a); /* accepts NULL */

/* Whether who may cause a pull of canonical.  with_credentials: the pull
 * would present credentials, so who must also be one who may see the
 * result.  When not, why gets the sentence for the event.  who NULL (the
 * operator) and root may.  Thread-safe; may read /proc. */
bool access_may_pull(struct access *a, const char *canonical, bool with_credentials,
		     const struct caller *who, char *why, size_t len);

/* Whether who may see the image that canonical names, pulled with
 * credentials (the caller knows it was).  Same conventions. */
bool access_may_see(struct access *a, const char *canonical, const struct caller *who, char *why,
		    size_t len);

/* Calls fn for each entry of the private access rule that matches
 * canonical (none when no rule does: root only): a user or a group id, or
 * everybody.  Returns 0 or what fn returned. */
int access_readers(struct access *a, const char *canonical,
		   int (*fn)(void *userdata, bool everybody, bool group, uint32_t id),
		   void *userdata);

/* True at most once per uid, reason and reference every few seconds: a
 * refused lookup is retried by every path walk, and the log wants it
 * once. */
bool access_event_due(struct access *a, uid_t uid, const char *reason, const char *canonical,
		      int64_t now_ms);

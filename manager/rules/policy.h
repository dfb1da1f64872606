/* Pull policy decisions: the kubelet's default rule and the
 * per-reference-pattern rules of the config file.
 *
 * A rule is a pattern and a policy.  Patterns are fnmatch(3) globs with no
 * flags, matched against the whole canonical reference string
 * ("domain/path[:tag][@digest]", as reference_to_string prints it):
 *
 *   - "*" matches any run of characters, "/" and ":" included, so
 *     "127.0.0.1:5000/prod/" followed by "*" covers every repository
 *     below prod/ at any depth, with any tag or digest;
 *   - "?" and "[...]" match one character, "\" escapes the next one;
 *   - nothing is implied: "127.0.0.1:5000/prod" matches no reference (a
 *     canonical reference always has a tag or a digest), and
 *     "127.0.0.1:5000/prod*" also matches ".../production/x:1".
 *
 * Rules are tried in the order they were added; the first match wins.
 *
 * The same tables, patterns and forms serve other per-reference settings
 * (the lazy rules: PATTERN=auto|off), with values of their own. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

enum pull_policy {
	PULL_POLICY_UNSET, /* kubelet rule: :latest or no tag -> Always, else IfNotPresent */
	PULL_ALWAYS,
	PULL_IF_NOT_PRESENT,
	PULL_NEVER,
};

/* "always", "if-not-present", "never" (also the kubelet spellings
 * "Always", "IfNotPresent", "Never").  Returns 0 or -EINVAL. */
int pull_policy_parse(const char *s, enum pull_policy *ret);
const char *pull_policy_name(enum pull_policy p); /* "Always", ... */

struct policy;

/* Returns 0 and an empty rule list owned by the caller in *ret, or
 * -ENOMEM. */
int policy_new(struct policy **ret);
void policy_free(struct policy *p); /* accepts NULL */

/* Appends a rule (pattern is copied).  Returns 0, -EINVAL for an empty
 * pattern or PULL_POLICY_UNSET, -ENOMEM.  Not thread-safe: build the list
 * before sharing it; lookups may then run from any thread. */
int policy_add(struct policy *p, const char *pattern, enum pull_policy pp);

/* Appends a rule written as in the config file: "PATTERN POLICY",
 * separated by blanks, POLICY in any spelling pull_policy_parse accepts
 * ("example.com/app:* never").  Returns 0, -EINVAL for anything else,
 * -ENOMEM. */
int policy_add_spec(struct policy *p, const char *spec);

/* Appends a rule of the command line, "PATTERN=POLICY", or one in the
 * form policy_add_spec reads.  Returns 0, -EINVAL, -ENOMEM. */
int policy_add_rule(struct policy *p, const char *rule);

/* Rules of another setting, in the forms policy_add_rule reads: parse
 * turns the VALUE text into a nonzero int (0 is "no rule"), or returns
 * -EINVAL.  Returns 0, -EINVAL, -ENOMEM. */
typedef int policy_value_parse_fn(const char *name, int *ret);
int policy_add_rule_parsed(struct policy *p, const char *rule, policy_value_parse_fn *parse);

/* Whether layers with a table of contents are published from it (lazy.h)
 * for a reference: --lazy-rule PATTERN=auto|off, else --lazy. */
enum lazy_mode {
	LAZY_MODE_UNSET,
	LAZY_MODE_AUTO,
	LAZY_MODE_OFF,
};
/* "auto" or "off", for policy_add_rule_parsed.  Returns 0 or -EINVAL. */
int lazy_mode_parse(const char *s, int *ret);

size_t policy_count(const struct policy *p);

/* The value of the first rule whose pattern matches canonical, or 0 when
 * none does (or p is NULL). */
int policy_match_value(const struct policy *p, const char *canonical);
/* Whether a rule's pattern matches a canonical reference, by the rules
 * above; every rule list of references (access.h too) matches this way. */
bool policy_pattern_matches(const char *pattern, const char *canonical);

/* The policy of the first rule whose pattern matches canonical, or
 * PULL_POLICY_UNSET when none does (or p is NULL). */
enum pull_policy policy_match(const struct policy *p, const char *canonical);

/* The kubelet's default: a tag "latest", or no tag and no digest, is
 * PULL_ALWAYS (the name is expected to move); any other tag, a digest
 * alone, or a tag other than "latest" with a digest is
 * PULL_IF_NOT_PRESENT.  Like the kubelet, only the tag decides when there
 * is one: "latest" with a digest is PULL_ALWAYS.  NULL and "" both mean
 * absent. */
enum pull_policy policy_default_for(const char *tag, const char *digest);

/* The policy for one reference: the first matching rule of p (may be
 * NULL), else the mount-wide policy unless it is PULL_POLICY_UNSET, else
 * policy_default_for(tag, digest).  Rules come first because they name
 * references specifically while the mount-wide option is a blanket
 * setting.  Never returns PULL_POLICY_UNSET. */
enum pull_policy policy_resolve(const struct policy *p, enum pull_policy mount_wide,
				const char *canonical, const char *tag, const char *digest);

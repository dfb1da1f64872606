/* Pull policy rules and the kubelet default; see policy.h. */
#include "policy.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"

struct rule {
	char *pattern;
	int value; /* enum pull_policy, or the setting's own */
};

struct policy {
	struct rule *rules;
	size_t n_rules;
	size_t allocated;
};

int pull_policy_parse(const char *s, enum pull_policy *ret)
{
	if (!strcmp(s, "always") || !strcmp(s, "Always"))
		*ret = PULL_ALWAYS;
	else if (!strcmp(s, "if-not-present") || !strcmp(s, "IfNotPresent"))
		*ret = PULL_IF_NOT_PRESENT;
	else if (!strcmp(s, "never") || !strcmp(s, "Never"))
		*ret = PULL_NEVER;
	else
		return -EINVAL;
	return 0;
}

const char *pull_policy_name(enum pull_policy p)
{
	switch (p) {
	case PULL_ALWAYS:
		return "Always";
	case PULL_IF_NOT_PRESENT:
		return "IfNotPresent";
	case PULL_NEVER:
		return "Never";
	default:
		return "Default";
	}
}

int policy_new(struct policy **ret)
{
	struct policy *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	*ret = p;
	return 0;
}

void policy_free(struct policy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n_rules; i++)
		free(p->rules[i].pattern);
	free(p->rules);
	free(p);
}

static int pull_policy_value(const char *s, int *ret)
{
	enum pull_policy pp;
	int r = pull_policy_parse(s, &pp);

	if (r == 0)
		*ret = (int)pp;
	return r;
}

static int rule_append(struct policy *p, const char *pattern, int value)
{
	_cleanup_free_ char *copy = NULL;

	if (!*pattern || value == 0)
		return -EINVAL;
	copy = strdup(pattern);
	if (!copy)
		return -ENOMEM;
	if (p->n_rules == p->allocated) {
		size_t n = p->allocated ? 2 * p->allocated : 8;
		struct rule *r = reallocarray(p->rules, n, sizeof(*r));

		if (!r)
			return -ENOMEM;
		p->rules = r;
		p->allocated = n;
	}
	p->rules[p->n_rules++] = (struct rule){ TAKE_PTR(copy), value };
	return 0;
}

int policy_add(struct policy *p, const char *pattern, enum pull_policy pp)
{
	if (pp != PULL_ALWAYS && pp != PULL_IF_NOT_PRESENT && pp != PULL_NEVER)
		return -EINVAL;
	return rule_append(p, pattern, (int)pp);
}

static int add_spec(struct policy *p, const char *spec, policy_value_parse_fn *parse)
{
	static const char blanks[] = " \t\r\n";
	_cleanup_free_ char *buf = strdup(spec);
	char *save = NULL, *pattern, *name;
	int value;

	if (!buf)
		return -ENOMEM;
	pattern = strtok_r(buf, blanks, &save);
	name = pattern ? strtok_r(NULL, blanks, &save) : NULL;
	if (!name || strtok_r(NULL, blanks, &save))
		return -EINVAL;
	if (parse(name, &value) < 0)
		return -EINVAL;
	return rule_append(p, pattern, value);
}

int policy_add_spec(struct policy *p, const char *spec)
{
	return add_spec(p, spec, pull_policy_value);
}

int policy_add_rule_parsed(struct policy *p, const char *rule, policy_value_parse_fn *parse)
{
	const char *eq = strrchr(rule, '=');
	int value;

	if (eq && eq != rule && parse(eq + 1, &value) == 0) {
		_cleanup_free_ char *pattern = strndup(rule, (size_t)(eq - rule));
		return pattern ? rule_append(p, pattern, value) : -ENOMEM;
	}
	return add_spec(p, rule, parse);
}

int policy_add_rule(struct policy *p, const char *rule)
{
	return policy_add_rule_parsed(p, rule, pull_policy_value);
}

int lazy_mode_parse(const char *s, int *ret)
{
	if (!strcmp(s, "auto"))
		*ret = LAZY_MODE_AUTO;
	else if (!strcmp(s, "off"))
		*ret = LAZY_MODE_OFF;
	else
		return -EINVAL;
	return 0;
}

size_t policy_count(const struct policy *p)
{
	return p ? p->n_rules : 0;
}

bool policy_pattern_matches(const char *pattern, const char *canonical)
{
	return fnmatch(pattern, canonical, 0) == 0;
}

int policy_match_value(const struct policy *p, const char *canonical)
{
	if (!p)
		return 0;
	for (size_t i = 0; i < p->n_rules; i++)
		if (policy_pattern_matches(p->rules[i].pattern, canonical))
			return p->rules[i].value;
	return 0;
}

enum pull_policy policy_match(const struct policy *p, const char *canonical)
{
	return (enum pull_policy)policy_match_value(p, canonical);
}

enum pull_policy policy_default_for(const char *tag, const char *digest)
{
	if (tag && *tag)
		return strcmp(tag, "latest") == 0 ? PULL_ALWAYS : PULL_IF_NOT_PRESENT;
	if (digest && *digest)
		return PULL_IF_NOT_PRESENT;
	return PULL_ALWAYS;
}

enum pull_policy policy_resolve(const struct policy *p, enum pull_policy mount_wide,
				const char *canonical, const char *tag, const char *digest)
{
	enum pull_policy pp = policy_match(p, canonical);

	if (pp != PULL_POLICY_UNSET)
		return pp;
	if (mount_wide != PULL_POLICY_UNSET)
		return mount_wide;
	return policy_default_for(tag, digest);
}

/* The filters of the snapshots service's List: containerd's filter
 * syntax (its "filters" package) over the fields of a snapshot.  A filter
 * is selectors joined by ',' that must all hold; a list of filters
 * matches what any one of them matches, and an empty list everything.  A
 * selector is a field path -- name, parent, kind, labels.KEY, a part
 * quoted with "" when it holds other characters than letters, digits and
 * '_' -- alone (the field is present and not empty) or followed by ==,
 * != or ~= (a POSIX extended regular expression of at most 256 bytes and
 * 8 repetition operators) and a value, bare or quoted with "" or //. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "snapstore.h"

struct snapfilter;

/* Parses the filters.  Returns 0 and a filter owned by the caller, or
 * -EINVAL with the reason in errbuf, or -ENOMEM. */
int snapfilter_parse(const char *const *filters, size_t n, struct snapfilter **ret, char *errbuf,
		     size_t errlen);
/* Whether info is selected.  f may be NULL: everything is. */
bool snapfilter_match(const struct snapfilter *f, const struct snap_info *info);
/* Accepts NULL. */
void snapfilter_free(struct snapfilter *f);

/* Fuzz target for what the containerd snapshotter takes from a request
 * before its store: List's filters (the input, split at newlines, as up
 * to eight filters) and the checks of names.  A filter that parses
 * selects the same snapshots every time it is asked, one filter of a
 * list selects nothing the list does not, and a name the checks accept
 * is one the metadata file (JSON) can hold. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "snapfilter.h"
#include "snapstore.h"

#define FILTERS_MAX 8

static void check_filters(const char *const *f, size_t n, const struct snap_info *snaps,
			  size_t n_snaps)
{
	struct snapfilter *all = NULL, *first = NULL;

	if (snapfilter_parse(f, n, &all, NULL, 0) < 0)
		return;
	FUZZ_CHECK(snapfilter_parse(f, n ? 1 : 0, &first, NULL, 0) == 0);
	for (size_t i = 0; i < n_snaps; i++) {
		bool m = snapfilter_match(all, &snaps[i]);

		FUZZ_CHECK(m == snapfilter_match(all, &snaps[i]));
		if (snapfilter_match(first, &snaps[i]))
			FUZZ_CHECK(m);
	}
	snapfilter_free(all);
	snapfilter_free(first);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct snap_info snaps[3] = {
		{ .name = "ns/1/sha256:aa", .parent = "", .kind = SNAP_COMMITTED },
		{ .name = "ns/2/b", .parent = "ns/1/sha256:aa", .kind = SNAP_ACTIVE },
		{ .name = "v", .parent = "ns/2/b", .kind = SNAP_VIEW },
	};
	const char *filters[FILTERS_MAX];
	size_t n = 0;
	char *s, *p;
	json_t *j;

	/* filters and names are C strings: what follows a NUL is never seen */
	s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';

	if (snapstore_check_name("name", s, NULL, 0) == 0) {
		j = json_string(s);
		FUZZ_CHECK(j);
		json_decref(j);
	}

	snaps[0].labels = json_pack("{s:s}", "containerd.io/snapshot.ref", "sha256:aa");
	snaps[1].labels = json_pack("{s:s, s:s}", "a", "x,y", "containerd.io/snapshot.ref", "b");
	snaps[2].labels = json_object();
	for (p = s; n < FILTERS_MAX; n++) {
		filters[n] = p;
		p = strchr(p, '\n');
		if (!p) {
			n++;
			break;
		}
		*p++ = '\0';
	}
	check_filters(filters, n, snaps, 3);
	for (size_t i = 0; i < 3; i++)
		json_decref(snaps[i].labels);
	free(s);
	return 0;
}

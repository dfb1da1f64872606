/* Unit tests of ensure (manager.h) on the fake transport and a clock moved
 * by hand: the pull policies, the back-off timeline, revalidation of tags
 * under Always, single flight, a tag that moves, and the errno of every
 * way a pull fails.  Images are built here: a config, a tar layer made in
 * memory and a manifest, served by the fake registry. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "fake-transport.h"
#include "macro.h"
#include "manager.h"
#include "manifest.h"

#define DOMAIN "registry.test"
#define REPO "app"
#define START_S 1000
#define BACKOFF_INITIAL_S 10
#define BACKOFF_MAX_S 40
#define REVALIDATE_S 60

struct test_clock {
	struct clock base;
	atomic_llong now_ns;
};

struct fixture {
	struct fake_transport *fake;
	struct test_clock clock;
	char dir[64];
	struct manager *m;
};

static int64_t test_now_ns(const struct clock *c)
{
	const struct test_clock *tc = c->userdata;

	return atomic_load(&tc->now_ns);
}

/* Moves the clock by seconds (fractions allowed). */
static void advance(struct fixture *f, double seconds)
{
	atomic_fetch_add(&f->clock.now_ns, (long long)(seconds * 1e9));
}

/* A layer holding etc/hostname with content: a plain tar, in memory. */
static size_t make_layer(const char *content, char *buf, size_t cap)
{
	struct archive *a = archive_write_new();
	struct archive_entry *e = archive_entry_new();
	size_t used = 0, len = strlen(content);

	assert_non_null(a);
	assert_non_null(e);
	assert_int_equal(archive_write_set_format_pax(a), ARCHIVE_OK);
	assert_int_equal(archive_write_open_memory(a, buf, cap, &used), ARCHIVE_OK);
	archive_entry_set_pathname(e, "etc/hostname");
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0644);
	archive_entry_set_size(e, (la_int64_t)len);
	archive_entry_set_mtime(e, 1700000000, 0);
	assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
	assert_int_equal(archive_write_data(a, content, len), (la_ssize_t)len);
	archive_entry_free(e);
	assert_int_equal(archive_write_close(a), ARCHIVE_OK);
	archive_write_free(a);
	return used;
}

/* Serves an image of one layer under tag (NULL: by digest only); its
 * manifest digest into ret_digest (may be NULL). */
static void put_image(struct fixture *f, const char *tag, const char *hostname,
		      char ret_digest[DIGEST_STRING_MAX])
{
	static const char config[] = "{\"architecture\":\"amd64\",\"os\":\"linux\"}";
	char layer[64 << 10], config_digest[DIGEST_STRING_MAX];
	char layer_digest[DIGEST_STRING_MAX];
	size_t layer_len = make_layer(hostname, layer, sizeof(layer));
	char manifest[1024];

	fake_put_blob(f->fake, REPO, config, strlen(config), config_digest);
	fake_put_blob(f->fake, REPO, layer, layer_len, layer_digest);
	snprintf(manifest, sizeof(manifest),
		 "{\"schemaVersion\":2,\"mediaType\":\"" MEDIA_OCI_MANIFEST "\","
		 "\"config\":{\"mediaType\":\"" MEDIA_OCI_CONFIG
		 "\",\"digest\":\"%s\",\"size\":%zu},"
		 "\"layers\":[{\"mediaType\":\"" MEDIA_OCI_LAYER
		 "\",\"digest\":\"%s\",\"size\":%zu}]}",
		 config_digest, strlen(config), layer_digest, layer_len);
	fake_put_manifest(f->fake, REPO, tag, MEDIA_OCI_MANIFEST, manifest, ret_digest);
}

/* A manager on the fixture's cache, transport and clock. */
static void start(struct fixture *f, enum pull_policy policy)
{
	struct manager_options o = {
		.cache_dir = f->dir,
		.pull_policy = policy,
		.clock = &f->clock.base,
		.backoff_initial_s = BACKOFF_INITIAL_S,
		.backoff_max_s = BACKOFF_MAX_S,
		.revalidate_interval_s = REVALIDATE_S,
		.registry_transport = fake_transport_get(f->fake),
		.registry_max_retries = -1,
	};
	char why[256] = "";

	if (manager_new(&o, &f->m, why, sizeof(why)) < 0)
		fail_msg("manager_new: %s", why);
}

static void stop(struct fixture *f)
{
	if (!f->m)
		return;
	manager_drain(f->m);
	manager_free(f->m);
	f->m = NULL;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->fake = fake_transport_new();
	f->clock.base.now_ns = test_now_ns;
	f->clock.base.userdata = &f->clock;
	atomic_store(&f->clock.now_ns, (long long)START_S * CLOCK_NS_PER_SEC);
	snprintf(f->dir, sizeof(f->dir), "/tmp/pullfs-test-ensure-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	*state = f;
	return 0;
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	return remove(path);
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	stop(f);
	fake_transport_free(f->fake);
	nftw(f->dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

/* One caller's answer, handed over from the flight's thread. */
struct answer {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int r;
	struct image *img;
};

static void answer_done(void *userdata, int r, struct image *img)
{
	struct answer *a = userdata;

	pthread_mutex_lock(&a->lock);
	a->r = r;
	a->img = img;
	a->done = true;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
}

static void answer_init(struct answer *a)
{
	*a = (struct answer){ 0 };
	pthread_mutex_init(&a->lock, NULL);
	pthread_cond_init(&a->cond, NULL);
}

static void ensure_begin(struct fixture *f, const char *ref, struct answer *a)
{
	struct ensure_call *call = NULL;
	struct image *img = NULL;
	char canonical[256];
	int r;

	answer_init(a);
	snprintf(canonical, sizeof(canonical), DOMAIN "/" REPO ":%s", ref);
	r = manager_ensure_start(f->m, canonical, NULL, answer_done, a, &call, &img);
	if (r != 0)
		answer_done(a, r > 0 ? 0 : r, r > 0 ? img : NULL);
}

/* Waits for the answer; its image reference (on success) passes to the
 * caller.  Returns its errno. */
static int ensure_wait(struct answer *a)
{
	pthread_mutex_lock(&a->lock);
	while (!a->done)
		pthread_cond_wait(&a->cond, &a->lock);
	pthread_mutex_unlock(&a->lock);
	pthread_mutex_destroy(&a->lock);
	pthread_cond_destroy(&a->cond);
	if (a->r == 0)
		assert_non_null(a->img);
	return a->r;
}

static int ensure_end(struct answer *a, char ret_digest[DIGEST_STRING_MAX])
{
	int r = ensure_wait(a);

	if (r == 0) {
		if (ret_digest)
			snprintf(ret_digest, DIGEST_STRING_MAX, "%s", image_digest(a->img));
		image_unref(a->img, 1);
	}
	return r;
}

/* Ensures DOMAIN/REPO:tag, blocking; the image's digest into ret_digest
 * (may be NULL).  Returns 0 or -errno. */
static int ensure(struct fixture *f, const char *tag, char ret_digest[DIGEST_STRING_MAX])
{
	struct answer a;

	ensure_begin(f, tag, &a);
	return ensure_end(&a, ret_digest);
}

static unsigned requests(struct fixture *f)
{
	return fake_count(f->fake, " /v2/");
}

/* Events of reason (and, when set, with text in their line) so far. */
static unsigned events(struct fixture *f, const char *reason, const char *text)
{
	char path[128], line[4096], want[64];
	unsigned n = 0;
	FILE *fp;

	snprintf(path, sizeof(path), "%s/events.log", f->dir);
	snprintf(want, sizeof(want), "\"reason\":\"%s\"", reason);
	fp = fopen(path, "re");
	if (!fp)
		return 0;
	while (fgets(line, sizeof(line), fp))
		if (strstr(line, want) && (!text || strstr(line, text)))
			n++;
	fclose(fp);
	return n;
}

/* ---- policies -------------------------------------------------------- */

static void test_if_not_present(void **state)
{
	struct fixture *f = *state;
	char want[DIGEST_STRING_MAX], got[DIGEST_STRING_MAX];

	put_image(f, "1", "one", want);
	start(f, PULL_POLICY_UNSET); /* a tag other than latest: IfNotPresent */
	assert_int_equal(ensure(f, "1", got), 0);
	assert_string_equal(got, want);
	assert_int_equal(fake_count(f->fake, "GET /v2/app/manifests/1"), 1);
	assert_int_equal(fake_count(f->fake, "GET /v2/app/blobs/"), 2);
	assert_int_equal(events(f, "Pulled", "Successfully pulled"), 1);

	/* Cached: no registry, however long after, even with it gone. */
	fake_fault(f->fake, "/v2/", FAKE_REFUSE, 0, -1);
	for (int i = 0; i < 3; i++) {
		advance(f, 2 * REVALIDATE_S);
		assert_int_equal(ensure(f, "1", got), 0);
		assert_string_equal(got, want);
	}
	assert_int_equal(requests(f), 3);
	/* "already present" once, however many lookups (rate-limited). */
	assert_int_equal(events(f, "Pulled", "already present"), 1);
}

static void test_never(void **state)
{
	struct fixture *f = *state;

	put_image(f, "1", "one", NULL);
	put_image(f, "latest", "latest", NULL);
	start(f, PULL_NEVER);
	assert_int_equal(ensure(f, "1", NULL), -EPERM);
	assert_int_equal(ensure(f, "latest", NULL), -EPERM);
	assert_int_equal(requests(f), 0);
	assert_int_equal(events(f, "ErrImageNeverPull",
				"Container image \\\"" DOMAIN "/" REPO
				":1\\\" is not present with pull policy of Never"),
			 1);
	assert_int_equal(events(f, "Pulling", NULL), 0);
	stop(f);

	/* Pulled by another manager: Never serves what is there. */
	start(f, PULL_IF_NOT_PRESENT);
	assert_int_equal(ensure(f, "1", NULL), 0);
	stop(f);
	start(f, PULL_NEVER);
	assert_int_equal(ensure(f, "1", NULL), 0);
	assert_int_equal(ensure(f, "latest", NULL), -EPERM);
	assert_int_equal(requests(f), 3);
}

/* Always: asked again once the revalidation interval is over, with a HEAD
 * only when the digest did not change. */
static void test_always_revalidates(void **state)
{
	struct fixture *f = *state;
	char want[DIGEST_STRING_MAX], got[DIGEST_STRING_MAX];

	put_image(f, "1", "one", want);
	start(f, PULL_ALWAYS);
	assert_int_equal(ensure(f, "1", got), 0);
	assert_int_equal(requests(f), 3);

	advance(f, REVALIDATE_S - 1);
	assert_int_equal(ensure(f, "1", got), 0);
	assert_int_equal(requests(f), 3);

	advance(f, 1);
	assert_int_equal(ensure(f, "1", got), 0);
	assert_string_equal(got, want);
	assert_int_equal(fake_count(f->fake, "HEAD /v2/app/manifests/1"), 1);
	assert_int_equal(requests(f), 4);
	assert_int_equal(events(f, "Pulling", NULL), 1);

	/* Checked just now: the interval starts again. */
	advance(f, REVALIDATE_S - 1);
	assert_int_equal(ensure(f, "1", got), 0);
	assert_int_equal(requests(f), 4);

	/* The registry gone at the next revalidation: the pull fails (as
	 * the kubelet's would), and nothing is served. */
	advance(f, 1);
	fake_fault(f->fake, "/v2/", FAKE_REFUSE, 0, -1);
	assert_int_equal(ensure(f, "1", NULL), -EHOSTUNREACH);
	assert_int_equal(events(f, "Failed", "EHOSTUNREACH"), 1);
}

/* ":latest" is Always by default; the tag moves to other content. */
static void test_moved_tag(void **state)
{
	struct fixture *f = *state;
	char a[DIGEST_STRING_MAX], b[DIGEST_STRING_MAX], got[DIGEST_STRING_MAX];
	struct answer held;
	struct image *old;

	put_image(f, "latest", "a", a);
	start(f, PULL_POLICY_UNSET);
	assert_int_equal(ensure(f, "latest", got), 0);
	assert_string_equal(got, a);

	/* Held across the move: an image reference stays what it was. */
	ensure_begin(f, "latest", &held);
	assert_int_equal(ensure_wait(&held), 0);
	old = held.img;

	put_image(f, "latest", "b", b);
	assert_string_not_equal(a, b);
	advance(f, REVALIDATE_S - 1);
	assert_int_equal(ensure(f, "latest", got), 0);
	assert_string_equal(got, a);

	advance(f, 1);
	assert_int_equal(ensure(f, "latest", got), 0);
	assert_string_equal(got, b);
	assert_int_equal(fake_count(f->fake, "HEAD /v2/app/manifests/latest"), 1);
	assert_int_equal(fake_count(f->fake, "GET /v2/app/manifests/latest"), 2);
	assert_int_equal(events(f, "Pulling", NULL), 2);
	assert_int_equal(events(f, "Pulled", b), 1);
	assert_string_equal(image_digest(old), a);
	image_unref(old, 1);

	/* Same digest at the next revalidation: a HEAD, nothing else. */
	advance(f, REVALIDATE_S);
	assert_int_equal(ensure(f, "latest", got), 0);
	assert_string_equal(got, b);
	assert_int_equal(fake_count(f->fake, "HEAD "), 2);
	assert_int_equal(fake_count(f->fake, "GET "), 2 + 2 + 1);
}

/* ---- back-off -------------------------------------------------------- */

/* Refused while inside the window (without asking the registry), asked
 * again from its end on. */
static void window(struct fixture *f, const char *tag, double seconds, int err)
{
	unsigned before = requests(f);

	assert_int_equal(ensure(f, tag, NULL), -EAGAIN);
	advance(f, seconds - 0.001);
	assert_int_equal(ensure(f, tag, NULL), -EAGAIN);
	assert_int_equal(requests(f), before);
	advance(f, 0.001);
	assert_int_equal(ensure(f, tag, NULL), err);
	assert_true(requests(f) > before);
}

static void test_backoff_timeline(void **state)
{
	struct fixture *f = *state;

	start(f, PULL_POLICY_UNSET);
	/* Not in the registry yet: 10 s, 20 s, 40 s, then the cap. */
	assert_int_equal(ensure(f, "latest", NULL), -ENOENT);
	assert_int_equal(requests(f), 1);
	window(f, "latest", 10, -ENOENT);
	window(f, "latest", 20, -ENOENT);
	window(f, "latest", 40, -ENOENT);
	window(f, "latest", 40, -ENOENT);
	assert_int_equal(events(f, "Failed", "ENOENT"), 5);
	/* The refusal names the failure it follows. */
	assert_int_equal(
		events(f, "BackOff", "Back-off pulling image \\\"" DOMAIN "/" REPO ":latest\\\": "),
		8);
	assert_int_equal(events(f, "BackOff", "MANIFEST_UNKNOWN"), 8);
	/* Each reference has its own. */
	assert_int_equal(ensure(f, "other", NULL), -ENOENT);

	/* Pushed: allowed at the end of the window, and pulled. */
	put_image(f, "latest", "x", NULL);
	advance(f, BACKOFF_MAX_S);
	assert_int_equal(ensure(f, "latest", NULL), 0);

	/* A success forgot the entry: the next failure (the tag deleted, seen
	 * at revalidation) starts again at 10 s, not at the cap. */
	fake_remove(f->fake, "/v2/app/manifests/latest");
	advance(f, REVALIDATE_S);
	assert_int_equal(ensure(f, "latest", NULL), -ENOENT);
	window(f, "latest", BACKOFF_INITIAL_S, -ENOENT);

	/* An entry untouched for twice the cap is forgotten too. */
	advance(f, 2 * BACKOFF_MAX_S + 1);
	assert_int_equal(ensure(f, "latest", NULL), -ENOENT);
	window(f, "latest", BACKOFF_INITIAL_S, -ENOENT);
}

/* ---- single flight --------------------------------------------------- */

#define FLIGHT_CALLERS 16

static void test_single_flight(void **state)
{
	struct fixture *f = *state;
	struct answer a[FLIGHT_CALLERS];
	char want[DIGEST_STRING_MAX], got[DIGEST_STRING_MAX];

	put_image(f, "1", "one", want);
	start(f, PULL_POLICY_UNSET);
	fake_fault(f->fake, "GET /v2/app/manifests/1", FAKE_HOLD, 0, 1);
	ensure_begin(f, "1", &a[0]);
	fake_wait_held(f->fake, 1);
	for (size_t i = 1; i < FLIGHT_CALLERS; i++)
		ensure_begin(f, "1", &a[i]);
	fake_release(f->fake);
	for (size_t i = 0; i < FLIGHT_CALLERS; i++) {
		assert_int_equal(ensure_end(&a[i], got), 0);
		assert_string_equal(got, want);
	}
	assert_int_equal(fake_count(f->fake, "GET /v2/app/manifests/1"), 1);
	assert_int_equal(fake_count(f->fake, "GET /v2/app/blobs/"), 2);
	assert_int_equal(events(f, "Pulling", NULL), 1);

	/* A failure (a tag the registry does not have) is shared the same
	 * way, and backs off once. */
	fake_fault(f->fake, "GET /v2/app/manifests/2", FAKE_HOLD, 0, 1);
	ensure_begin(f, "2", &a[0]);
	fake_wait_held(f->fake, 1);
	for (size_t i = 1; i < FLIGHT_CALLERS; i++)
		ensure_begin(f, "2", &a[i]);
	fake_release(f->fake);
	for (size_t i = 0; i < FLIGHT_CALLERS; i++)
		assert_int_equal(ensure_end(&a[i], NULL), -ENOENT);
	assert_int_equal(fake_count(f->fake, "GET /v2/app/manifests/2"), 1);
	assert_int_equal(events(f, "Failed", NULL), 1);
	assert_int_equal(ensure(f, "2", NULL), -EAGAIN);
}

/* ---- errno rows ------------------------------------------------------ */

struct errno_row {
	const char *match; /* requests that fail */
	enum fake_fault_kind kind;
	long status;
	int expect;
};

static const struct errno_row errno_rows[] = {
	{ "manifests/", FAKE_STATUS, 404, -ENOENT },
	{ "blobs/", FAKE_STATUS, 404, -ENOENT },
	{ "manifests/", FAKE_STATUS, 401, -EACCES },
	{ "manifests/", FAKE_STATUS, 403, -EACCES },
	{ "blobs/", FAKE_STATUS, 403, -EACCES },
	{ "manifests/", FAKE_REFUSE, 0, -EHOSTUNREACH },
	{ "blobs/", FAKE_REFUSE, 0, -EHOSTUNREACH },
	{ "manifests/", FAKE_STATUS, 503, -EHOSTUNREACH },
	{ "manifests/", FAKE_TIMEOUT, 0, -ETIMEDOUT },
	{ "blobs/", FAKE_TIMEOUT, 0, -ETIMEDOUT },
	{ "manifests/", FAKE_STATUS, 500, -EIO },
	{ "blobs/", FAKE_CORRUPT, 0, -EBADMSG },
	{ "manifests/", FAKE_CORRUPT, 0, -EBADMSG },
};

static void test_errno_rows(void **state)
{
	struct fixture *f = *state;

	put_image(f, "1", "one", NULL);
	start(f, PULL_POLICY_UNSET);
	for (size_t i = 0; i < ARRAY_SIZE(errno_rows); i++) {
		const struct errno_row *row = &errno_rows[i];
		int r;

		fake_clear_faults(f->fake);
		fake_fault(f->fake, row->match, row->kind, row->status, -1);
		r = ensure(f, "1", NULL);
		if (r != row->expect)
			fail_msg("row %zu (%s %ld on %s): %s, not %s", i,
				 row->kind == FAKE_STATUS ? "status" : "fault", row->status,
				 row->match, strerror(-r), strerror(-row->expect));
		assert_int_equal(events(f, "Failed", NULL), i + 1);
		/* Past the window for the next row. */
		advance(f, 2 * BACKOFF_MAX_S + 1);
	}

	/* What the grammar refuses never reaches a flight. */
	assert_int_equal(manager_ensure_start(f->m, DOMAIN "/App:1", NULL, answer_done, NULL,
					      &(struct ensure_call *){ NULL },
					      &(struct image *){ NULL }),
			 -EINVAL);

	/* A platform the image does not have. */
	fake_clear_faults(f->fake);
	fake_put_manifest(
		f->fake, REPO, "index", MEDIA_OCI_INDEX,
		"{\"schemaVersion\":2,\"mediaType\":\"" MEDIA_OCI_INDEX "\",\"manifests\":"
		"[{\"mediaType\":\"" MEDIA_OCI_MANIFEST "\",\"size\":1,\"digest\":"
		"\"sha256:0000000000000000000000000000000000000000000000000000000000000000\","
		"\"platform\":{\"architecture\":\"nothing\",\"os\":\"plan9\"}}]}",
		NULL);
	assert_int_equal(ensure(f, "index", NULL), -ENOEXEC);

	/* With the registry well again, the image pulls. */
	assert_int_equal(ensure(f, "1", NULL), 0);
}

/* ---- a serving process taking over ------------------------------------ */

/* An image held, as the kernel holds one across a restart. */
static struct image *hold(struct fixture *f, const char *tag)
{
	struct answer a;

	ensure_begin(f, tag, &a);
	assert_int_equal(ensure_wait(&a), 0);
	return a.img;
}

static void restore_check(struct fixture *f, const char *reference, const char *digest,
			  uint32_t key)
{
	struct image *img = NULL;

	assert_int_equal(manager_restore_image(f->m, reference, digest, key, &img), 0);
	assert_int_equal(image_key(img), key);
	assert_string_equal(image_digest(img), digest);
	image_unref(img, 1);
}

static void ensure_key(struct fixture *f, const char *tag, uint32_t key)
{
	struct image *img = hold(f, tag);

	assert_int_equal(image_key(img), key);
	image_unref(img, 1);
}

/* Two live images of one name with different keys (a moved tag; a name
 * removed while held, then pulled again): after a restart each is made
 * again with exactly its key, in whatever order, and a lookup of the name
 * gets the image the name names, with its key. */
static void test_restore_by_key(void **state)
{
	struct fixture *f = *state;
	const char *const latest = DOMAIN "/" REPO ":latest", *const one = DOMAIN "/" REPO ":1";
	char a[DIGEST_STRING_MAX], b[DIGEST_STRING_MAX];
	struct image *held[4];
	struct error_detail err = { 0 };
	json_t *j = NULL;
	uint32_t k[4];

	put_image(f, "latest", "a", a);
	put_image(f, "1", "a", NULL);
	start(f, PULL_POLICY_UNSET);
	held[0] = hold(f, "latest");
	put_image(f, "latest", "b", b);
	advance(f, REVALIDATE_S);
	held[1] = hold(f, "latest");
	held[2] = hold(f, "1");
	assert_int_equal(manager_remove(f->m, &one, 1, &j, &err), 0);
	json_decref(j);
	error_detail_clear(&err);
	held[3] = hold(f, "1");
	for (size_t i = 0; i < 4; i++) {
		k[i] = image_key(held[i]);
		image_unref(held[i], 1);
	}
	assert_int_not_equal(k[0], k[1]);
	assert_int_not_equal(k[2], k[3]);
	stop(f);

	start(f, PULL_POLICY_UNSET);
	restore_check(f, latest, b, k[1]);
	restore_check(f, latest, a, k[0]);
	restore_check(f, one, a, k[2]);
	restore_check(f, one, a, k[3]);
	/* a key that is another image's is refused */
	assert_int_equal(manager_restore_image(f->m, one, b, k[3], &held[0]), -ESTALE);
	ensure_key(f, "latest", k[1]);
	ensure_key(f, "1", k[3]);
}

/* The key of an image the kernel still holds nodes of but that could not
 * be made again is given to no other image: a lookup of the same name and
 * digest, which would get it back, gets another. */
static void test_reserved_key(void **state)
{
	struct fixture *f = *state;
	struct image *img;
	uint32_t k;

	put_image(f, "1", "a", NULL);
	start(f, PULL_POLICY_UNSET);
	img = hold(f, "1");
	k = image_key(img);
	image_unref(img, 1);
	stop(f);

	start(f, PULL_POLICY_UNSET);
	ensure_key(f, "1", k); /* the same key after a restart */
	stop(f);

	start(f, PULL_POLICY_UNSET);
	manager_reserve_key(f->m, k);
	img = hold(f, "1");
	assert_int_not_equal(image_key(img), k);
	image_unref(img, 1);
}

/* Two names of one digest are two images, each with the name it was
 * loaded under, which it keeps when the name is removed while held (its
 * events name it, not whatever name the table has left). */
static void test_image_keeps_its_name(void **state)
{
	struct fixture *f = *state;
	const char *const one = DOMAIN "/" REPO ":1";
	struct error_detail err = { 0 };
	struct image *a, *b;
	json_t *j = NULL;

	put_image(f, "latest", "a", NULL);
	put_image(f, "1", "a", NULL);
	start(f, PULL_POLICY_UNSET);
	a = hold(f, "latest");
	b = hold(f, "1");
	assert_string_equal(image_digest(a), image_digest(b));
	assert_string_equal(image_name(a), DOMAIN "/" REPO ":latest");
	assert_string_equal(image_name(b), one);
	assert_int_equal(manager_remove(f->m, &one, 1, &j, &err), 0);
	json_decref(j);
	error_detail_clear(&err);
	assert_string_equal(image_name(b), one);
	image_unref(a, 1);
	image_unref(b, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_if_not_present, setup, teardown),
		cmocka_unit_test_setup_teardown(test_never, setup, teardown),
		cmocka_unit_test_setup_teardown(test_always_revalidates, setup, teardown),
		cmocka_unit_test_setup_teardown(test_moved_tag, setup, teardown),
		cmocka_unit_test_setup_teardown(test_backoff_timeline, setup, teardown),
		cmocka_unit_test_setup_teardown(test_single_flight, setup, teardown),
		cmocka_unit_test_setup_teardown(test_errno_rows, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restore_by_key, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reserved_key, setup, teardown),
		cmocka_unit_test_setup_teardown(test_image_keeps_its_name, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

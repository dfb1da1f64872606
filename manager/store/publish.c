/* Publishing unpacked layers in the background.
 *
 * A layer's flush (one syncfs of what the unpack wrote) took a third of a
 * cold pull.  So a layer that is unpacked and verified is served at once
 * from its stage in tmp/, and this thread flushes and publishes it after
 * (layer_publish: the same steps and order as a synchronous commit).  The
 * stage's directory descriptor is what every open of its files goes
 * through (shown to the cache's layer_openat), and a descriptor stays
 * valid across the rename of its directory into layers/, so readers never
 * see the move.
 *
 * The reference file of a pull still comes last: a save while layers are
 * queued waits here, and is written once every layer queued before it is
 * published (a layer it names was queued before the pull ended).  A layer
 * whose publish fails drops the references saved after it: the image is
 * served by this process, not recorded, and pulled again after a restart.
 *
 * A kill (not a power cut) loses nothing the kernel accepted: a stage
 * carries a "verified" mark with the boot id, a waiting reference its file
 * tmp/ref.NAME with the boot id, and the next process of the same boot
 * publishes both before it empties tmp/ (publisher_recover).  After a
 * reboot the boot id differs and they are discarded, as every stage is. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache-private.h"
#include "digest.h"
#include "fault.h"
#include "fileio.h"
#include "macro.h"

#define VERIFIED_MARK "verified"
#define REF_PREFIX "ref."
#define BOOT_ID_MAX 64

struct staged {
	struct staged *next;
	/* hex and the stage's directory, shown to layer_openat() from the
	 * queue until the layer is published (kept: until the end) */
	struct cache_stage_entry shown;
	char *name; /* in tmp/ */
	uint64_t seq;
};

struct waiting_ref {
	struct waiting_ref *next;
	char name[DIGEST_HEX_LEN + 1];
	char *json;
	uint64_t seq; /* written once done >= seq */
};

struct publisher {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thread;
	/* under lock: */
	bool started, stop;
	struct staged *queue; /* in order; the head is being published */
	struct staged *kept;  /* not published (failed, or another copy won):
				  * served from tmp/ until close */
	struct waiting_ref *refs;
	uint64_t queued, done; /* sequence of the last layer queued / handled */
	atomic_uint n_staged;  /* queue + kept: the lookup's fast path */
	char boot_id[BOOT_ID_MAX];
};

static int read_boot_id(char buf[BOOT_ID_MAX])
{
	_cleanup_close_ int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return negative_errno();
	n = read(fd, buf, BOOT_ID_MAX - 1);
	if (n <= 0)
		return -EIO;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		n--;
	buf[n] = '\0';
	return n > 0 ? 0 : -EIO;
}

/* The whole small file name of dirfd, NUL-terminated. */
static int read_small(int dirfd, const char *name, char **ret)
{
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	char *buf;
	size_t len;
	int r;

	if (fd < 0)
		return negative_errno();
	r = read_full(fd, 64 << 10, &buf, &len);
	if (r < 0)
		return r;
	*ret = buf; /* read_full terminates it */
	return 0;
}

static bool is_hex_name(const char *s)
{
	if (strlen(s) != DIGEST_HEX_LEN)
		return false;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return false;
	return true;
}

/* ---- after a kill ------------------------------------------------------ */

struct found {
	struct found *next;
	char name[128];
	char hex[DIGEST_HEX_LEN + 1];
	char *json; /* a waiting reference */
};

static void found_free(struct found *f)
{
	while (f) {
		struct found *n = f->next;

		free(f->json);
		free(f);
		f = n;
	}
}

/* A stage whose mark says this boot verified it, or a waiting reference
 * of this boot; NULL for anything else. */
static struct found *recover_entry(struct cache *c, const char *boot, const char *name)
{
	_cleanup_free_ char *text = NULL;
	_cleanup_close_ int dfd = -1;
	struct found *f;
	size_t blen = strlen(boot);

	if (strlen(name) >= sizeof(f->name))
		return NULL;
	if (strncmp(name, "layer-", 6) == 0) {
		dfd = openat(c->tmp_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd < 0 || read_small(dfd, VERIFIED_MARK, &text) < 0)
			return NULL;
		/* "BOOT HEX\n" */
		if (strncmp(text, boot, blen) != 0 || text[blen] != ' ' ||
		    strlen(text + blen + 1) != DIGEST_HEX_LEN + 1 ||
		    text[blen + 1 + DIGEST_HEX_LEN] != '\n')
			return NULL;
		text[blen + 1 + DIGEST_HEX_LEN] = '\0';
		if (!is_hex_name(text + blen + 1) || !(f = calloc(1, sizeof(*f))))
			return NULL;
		memcpy(f->hex, text + blen + 1, DIGEST_HEX_LEN + 1);
	} else if (strncmp(name, REF_PREFIX, strlen(REF_PREFIX)) == 0 &&
		   is_hex_name(name + strlen(REF_PREFIX))) {
		/* "BOOT\nJSON" */
		if (read_small(c->tmp_fd, name, &text) < 0 || strncmp(text, boot, blen) != 0 ||
		    text[blen] != '\n' || !(f = calloc(1, sizeof(*f))))
			return NULL;
		f->json = strdup(text + blen + 1);
		if (!f->json) {
			free(f);
			return NULL;
		}
	} else {
		return NULL;
	}
	snprintf(f->name, sizeof(f->name), "%s", name);
	return f;
}

static int recover_layer(struct cache *c, const struct found *f)
{
	_cleanup_close_ int dfd = -1, idx = -1;
	struct layer_index *li = NULL;
	bool renamed;
	int r;

	dfd = openat(c->tmp_fd, f->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return negative_errno();
	idx = openat(dfd, "index", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (idx < 0)
		return negative_errno();
	r = layer_index_read(idx, &li);
	if (r == 0)
		r = layer_publish(c, dfd, f->name, f->hex, li, false, &renamed);
	layer_index_free(li);
	return r;
}

void publisher_recover(struct cache *c)
{
	char boot[BOOT_ID_MAX];
	struct found *layers = NULL, *refs = NULL;
	unsigned n_layers = 0, n_refs = 0;
	struct dirent *de;
	DIR *d;
	int r = 0;

	if (read_boot_id(boot) < 0 || dir_stream(c->tmp_fd, &d) < 0)
		return;
	while ((de = readdir(d))) {
		struct found *f = recover_entry(c, boot, de->d_name);

		if (!f)
			continue;
		if (f->json) {
			f->next = refs;
			refs = f;
		} else {
			f->next = layers;
			layers = f;
		}
	}
	closedir(d);
	for (struct found *f = layers; f && r == 0; f = f->next, n_layers++)
		r = recover_layer(c, f);
	/* (a layer the killed process renamed, layers/ not flushed yet) */
	if (r == 0 && refs)
		r = flush_dir(c->layers_fd);
	/* a reference only once every layer it may name is published */
	for (struct found *f = refs; f && r == 0; f = f->next, n_refs++)
		r = write_atomic(c, c->refs_fd, f->name + strlen(REF_PREFIX), f->json,
				 strlen(f->json));
	if (layers || refs)
		fprintf(stderr,
			"pullfs: a process of this boot left %u verified layers and %u references "
			"unpublished: %s\n",
			n_layers, n_refs, r < 0 ? strerror(-r) : "published now");
	found_free(layers);
	found_free(refs);
}

/* ---- the thread ---------------------------------------------------------- */

static void staged_free(struct cache *c, struct staged *s)
{
	if (!s)
		return;
	cache_stage_hide(c, &s->shown);
	if (s->shown.dirfd >= 0)
		close(s->shown.dirfd);
	free(s->name);
	free(s);
}

static void ref_forget_locked(struct cache *c, struct waiting_ref **pp)
{
	struct waiting_ref *w = *pp;
	char tmpname[sizeof(REF_PREFIX) + DIGEST_HEX_LEN];

	snprintf(tmpname, sizeof(tmpname), REF_PREFIX "%s", w->name);
	unlinkat(c->tmp_fd, tmpname, 0);
	*pp = w->next;
	free(w->json);
	free(w);
}

/* Writes the references that waited for layers up to p->done; drops
 * those from failed onwards (failed: the sequence of a layer that could
 * not be published, or 0).  Under the lock, so that a removal of the
 * reference (publisher_forget_ref) comes before or after, not between. */
static void refs_settle_locked(struct cache *c, uint64_t failed)
{
	struct publisher *p = c->pub;

	for (struct waiting_ref **pp = &p->refs; *pp;) {
		struct waiting_ref *w = *pp;

		if (failed && w->seq >= failed) {
			fprintf(stderr,
				"pullfs: reference file %s not written: a layer it may name was "
				"not published\n",
				w->name);
			ref_forget_locked(c, pp);
			continue;
		}
		if (w->seq > p->done) {
			pp = &w->next;
			continue;
		}
		int r = write_atomic(c, c->refs_fd, w->name, w->json, strlen(w->json));
		if (r < 0)
			fprintf(stderr, "pullfs: cannot write reference file %s: %s\n", w->name,
				strerror(-r));
		ref_forget_locked(c, pp);
	}
}

static int publish_one(struct cache *c, struct staged *s, bool *ret_renamed)
{
	_cleanup_close_ int idx =
		openat(s->shown.dirfd, "index", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct layer_index *li = NULL;
	int r;

	if (idx < 0)
		return negative_errno();
	r = layer_index_read(idx, &li);
	if (r == 0)
		r = layer_publish(c, s->shown.dirfd, s->name, s->shown.hex, li, false, ret_renamed);
	layer_index_free(li);
	return r;
}

/* layers/hex is a full unpack (no table of contents): what another
 * pull's unpack of the same blob left, entry for entry. */
static bool same_layer_published(struct cache *c, const char *hex)
{
	char path[DIGEST_HEX_LEN + 8];
	struct stat st;

	snprintf(path, sizeof(path), "%s/toc", hex);
	return fstatat(c->layers_fd, path, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT;
}

static void *publisher_thread(void *arg)
{
	struct cache *c = arg;
	struct publisher *p = c->pub;
	/* a test's window between the lookup's answer and the publish: held
	 * until the process stops (or is killed) */
	bool hold = fault_armed("staged");

	pthread_mutex_lock(&p->lock);
	for (;;) {
		struct staged *s;
		bool renamed = false;
		int r;

		while (!p->stop && (!p->queue || hold))
			pthread_cond_wait(&p->cond, &p->lock);
		if (!p->queue)
			break;
		s = p->queue;
		pthread_mutex_unlock(&p->lock);
		r = publish_one(c, s, &renamed);
		pthread_mutex_lock(&p->lock);
		p->queue = s->next;
		p->done = s->seq;
		if (r == 0 && (renamed || same_layer_published(c, s->shown.hex))) {
			/* (not renamed: a copy that another pull unpacked from
			 * the same verified blob won; its files are the same
			 * files, and opens go there from now on: hidden
			 * before its files go) */
			_cleanup_free_ char *lost = renamed ? NULL : TAKE_PTR(s->name);

			staged_free(c, s);
			if (lost)
				cache_stage_discard(c, lost);
			atomic_fetch_sub(&p->n_staged, 1);
			cache_touch(c);
		} else {
			/* readers keep its files; a later start must not
			 * publish it */
			unlinkat(s->shown.dirfd, VERIFIED_MARK, 0);
			s->next = p->kept;
			p->kept = s;
		}
		if (r < 0)
			fprintf(stderr, "pullfs: cannot publish layer sha256:%s: %s\n",
				s->shown.hex, strerror(-r));
		refs_settle_locked(c, r < 0 ? s->seq : 0);
		pthread_cond_broadcast(&p->cond);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int publisher_new(struct cache *c)
{
	struct publisher *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	/* without a boot id nothing is served before it is published */
	if (read_boot_id(p->boot_id) < 0)
		p->boot_id[0] = '\0';
	c->pub = p;
	return 0;
}

void publisher_free(struct cache *c)
{
	struct publisher *p = c->pub;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	if (p->started)
		pthread_join(p->thread, NULL);
	while (p->kept) {
		struct staged *s = p->kept;

		p->kept = s->next;
		staged_free(c, s); /* tmp/ is emptied next */
	}
	while (p->refs)
		ref_forget_locked(c, &p->refs);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p);
	c->pub = NULL;
}

int publisher_queue(struct cache *c, struct cache_layer_stage *st, const char *hex)
{
	struct publisher *p = c->pub;
	_cleanup_close_ int fd = -1;
	char mark[BOOT_ID_MAX + DIGEST_HEX_LEN + 4];
	struct staged *s, **tail;
	int r;

	if (!p || !p->boot_id[0])
		return -EOPNOTSUPP;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	/* The mark comes after everything the stage holds (the index last):
	 * a stage without it is not whole. */
	snprintf(mark, sizeof(mark), "%s %s\n", p->boot_id, hex);
	fd = openat(st->dirfd, VERIFIED_MARK, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	r = fd < 0 ? negative_errno() : write_full(fd, mark, strlen(mark));
	if (r < 0) {
		unlinkat(st->dirfd, VERIFIED_MARK, 0);
		free(s);
		return r;
	}
	memcpy(s->shown.hex, hex, DIGEST_HEX_LEN + 1);
	pthread_mutex_lock(&p->lock);
	if (!p->started) {
		r = -pthread_create(&p->thread, NULL, publisher_thread, c);
		p->started = r == 0;
	}
	if (r < 0) {
		pthread_mutex_unlock(&p->lock);
		unlinkat(st->dirfd, VERIFIED_MARK, 0);
		free(s);
		return r;
	}
	s->name = TAKE_PTR(st->name);
	s->shown.dirfd = st->dirfd;
	s->seq = ++p->queued;
	for (tail = &p->queue; *tail; tail = &(*tail)->next)
		;
	*tail = s;
	atomic_fetch_add(&p->n_staged, 1);
	cache_stage_show(c, &s->shown);
	cache_touch(c);
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	close(st->pack_fd);
	*st = (struct cache_layer_stage){ .dirfd = -1, .pack_fd = -1 };
	return 0;
}

static struct staged *find_locked(struct staged *list, const char *hex)
{
	for (; list; list = list->next)
		if (!strcmp(list->shown.hex, hex))
			return list;
	return NULL;
}

bool publisher_staged(struct cache *c, const char *hex)
{
	struct publisher *p = c->pub;
	bool r;

	if (!p || atomic_load(&p->n_staged) == 0)
		return false;
	pthread_mutex_lock(&p->lock);
	r = find_locked(p->queue, hex) != NULL;
	pthread_mutex_unlock(&p->lock);
	return r;
}

int publisher_foreach_staged(struct cache *c, int (*fn)(void *userdata, const char *digest),
			     void *userdata)
{
	struct publisher *p = c->pub;
	char(*digests)[DIGEST_STRING_MAX] = NULL;
	size_t n = 0, cap;
	int r = 0;

	if (!p || atomic_load(&p->n_staged) == 0)
		return 0;
	pthread_mutex_lock(&p->lock);
	cap = atomic_load(&p->n_staged);
	digests = calloc(cap ? cap : 1, sizeof(*digests));
	for (struct staged *s = p->queue; digests && s && n < cap; s = s->next)
		snprintf(digests[n++], DIGEST_STRING_MAX, "%s%s", DIGEST_SHA256_PREFIX,
			 s->shown.hex);
	pthread_mutex_unlock(&p->lock);
	if (!digests)
		return -ENOMEM;
	for (size_t i = 0; i < n && r == 0; i++)
		r = fn(userdata, digests[i]);
	free(digests);
	return r;
}

int publisher_defer_ref(struct cache *c, const char *name, const char *json)
{
	struct publisher *p = c->pub;
	char tmpname[sizeof(REF_PREFIX) + DIGEST_HEX_LEN], work[64];
	struct waiting_ref *w, **pp;
	_cleanup_close_ int fd = -1;
	int r;

	if (!p)
		return 0;
	pthread_mutex_lock(&p->lock);
	if (p->done == p->queued) {
		pthread_mutex_unlock(&p->lock);
		return 0;
	}
	w = calloc(1, sizeof(*w));
	if (!w || !(w->json = strdup(json))) {
		r = -ENOMEM;
		goto fail;
	}
	memcpy(w->name, name, DIGEST_HEX_LEN + 1);
	w->seq = p->queued;
	/* For a process of this boot that takes over after a kill: whole
	 * (renamed into place) or absent; no flush, a power cut loses the
	 * stages it waits for anyway. */
	snprintf(tmpname, sizeof(tmpname), REF_PREFIX "%s", name);
	snprintf(work, sizeof(work), "w.%ld.%08x", (long)getpid(), (unsigned)random());
	fd = openat(c->tmp_fd, work, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	r = fd < 0 ? negative_errno() : write_full(fd, p->boot_id, strlen(p->boot_id));
	if (r == 0)
		r = write_full(fd, "\n", 1);
	if (r == 0)
		r = write_full(fd, json, strlen(json));
	if (r == 0 && renameat(c->tmp_fd, work, c->tmp_fd, tmpname) < 0)
		r = negative_errno();
	if (r < 0) {
		unlinkat(c->tmp_fd, work, 0);
		goto fail;
	}
	/* a later save of the same name replaces the earlier */
	for (pp = &p->refs; *pp; pp = &(*pp)->next)
		if (!strcmp((*pp)->name, name)) {
			struct waiting_ref *old = *pp;

			*pp = old->next;
			free(old->json);
			free(old);
			break;
		}
	w->next = p->refs;
	p->refs = w;
	pthread_mutex_unlock(&p->lock);
	return 1;
fail:
	pthread_mutex_unlock(&p->lock);
	if (w)
		free(w->json);
	free(w);
	return r;
}

void publisher_forget_ref(struct cache *c, const char *name)
{
	struct publisher *p = c->pub;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	for (struct waiting_ref **pp = &p->refs; *pp; pp = &(*pp)->next)
		if (!strcmp((*pp)->name, name)) {
			ref_forget_locked(c, pp);
			break;
		}
	pthread_mutex_unlock(&p->lock);
}

void cache_publish_wait(struct cache *c)
{
	struct publisher *p = c->pub;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	while (p->done != p->queued)
		pthread_cond_wait(&p->cond, &p->lock);
	pthread_mutex_unlock(&p->lock);
}

unsigned cache_layers_publishing(struct cache *c)
{
	struct publisher *p = c->pub;
	unsigned n = 0;

	if (!p || atomic_load(&p->n_staged) == 0)
		return 0;
	pthread_mutex_lock(&p->lock);
	for (struct staged *s = p->queue; s; s = s->next)
		n++;
	pthread_mutex_unlock(&p->lock);
	return n;
}

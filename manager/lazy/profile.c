/* Start profiles: the file's text, the recorder, the store in the cache
 * and its writer.  See profile.h and docs/profiles.md. */
#include "profile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dlist.h"
#include "errname.h"
#include "fileio.h"
#include "macro.h"
#include "strmap.h"

/* ---- the text ------------------------------------------------------- */

void profile_free(struct profile *p)
{
	if (!p)
		return;
	free(p->layers);
	free(p->files);
	free(p);
}

DEFINE_TRIVIAL_CLEANUP_FUNC(struct profile *, profile_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct strmap *, strmap_free)

static bool is_hex64(const char *s, size_t len)
{
	if (len != DIGEST_HEX_LEN)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

static bool is_digest(const char *s, size_t len)
{
	size_t plen = strlen(DIGEST_SHA256_PREFIX);

	return len > plen && !memcmp(s, DIGEST_SHA256_PREFIX, plen) &&
	       is_hex64(s + plen, len - plen);
}

/* A decimal number of at most 19 digits, no sign, no leading zero. */
static bool parse_uint(const char *s, size_t len, uint64_t *ret)
{
	uint64_t v = 0;

	if (len == 0 || len > 19 || (len > 1 && s[0] == '0'))
		return false;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*ret = v;
	return true;
}

/* The words of one line, split at single spaces: at most max of them;
 * false for an empty word (two spaces, a space at an end) or more. */
static bool split_words(const char *s, size_t len, const char **w, size_t *wl, size_t max,
			size_t *ret_n)
{
	size_t n = 0, start = 0;

	for (size_t i = 0; i <= len; i++) {
		if (i < len && s[i] != ' ')
			continue;
		if (i == start || n == max)
			return false;
		w[n] = s + start;
		wl[n++] = i - start;
		start = i + 1;
	}
	*ret_n = n;
	return true;
}

static bool word_is(const char *w, size_t wl, const char *lit)
{
	return wl == strlen(lit) && !memcmp(w, lit, wl);
}

int profile_parse(const char *text, size_t len, struct profile **ret, char *errbuf, size_t errlen)
{
	_cleanup_(profile_freep) struct profile *p = NULL;
	_cleanup_(strmap_freep) struct strmap *seen = NULL;
	size_t pos = 0, line = 0, cap_files = 0;
	/* what the next line may be: 0 magic, 1 image, 2 recorded,
	 * 3 window-ms, 4 layer, 5 layer or file, 6 file */
	int want = 0;

	if (len > PROFILE_TEXT_MAX)
		return errbuf_fail(-E2BIG, errbuf, errlen, "a profile is at most %u KiB",
				   PROFILE_TEXT_MAX >> 10);
	p = calloc(1, sizeof(*p));
	seen = strmap_new();
	if (!p || !seen)
		return -ENOMEM;
	while (pos < len) {
		const char *s = text + pos, *nl = memchr(s, '\n', len - pos);
		size_t l = nl ? (size_t)(nl - s) : len - pos;
		const char *w[4];
		size_t wl[4], n;
		uint64_t v;

		pos += l + (nl ? 1 : 0);
		line++;
		if (memchr(s, '\0', l) || memchr(s, '\r', l))
			return errbuf_fail(-EBADMSG, errbuf, errlen,
					   "line %zu: a control character", line);
		if (want == 0) {
			if (l != strlen(PROFILE_MAGIC) || memcmp(s, PROFILE_MAGIC, l))
				return errbuf_fail(-EBADMSG, errbuf, errlen,
						   "line 1: not a pullfs profile (it starts with "
						   "\"%s\")",
						   PROFILE_MAGIC);
			want = 1;
			continue;
		}
		if (!split_words(s, l, w, wl, 4, &n))
			return errbuf_fail(-EBADMSG, errbuf, errlen,
					   "line %zu: words are separated by one space", line);
		if (want == 1) {
			if (n != 2 || !word_is(w[0], wl[0], "image") || !is_digest(w[1], wl[1]))
				return errbuf_fail(-EBADMSG, errbuf, errlen,
						   "line %zu: expected \"image sha256:<64 hex>\"",
						   line);
			memcpy(p->image, w[1], wl[1]);
			p->image[wl[1]] = '\0';
			want = 2;
		} else if (want == 2) {
			if (n != 2 || !word_is(w[0], wl[0], "recorded") ||
			    !parse_uint(w[1], wl[1], &v) || v > INT64_MAX)
				return errbuf_fail(-EBADMSG, errbuf, errlen,
						   "line %zu: expected \"recorded <unix seconds>\"",
						   line);
			p->recorded = (int64_t)v;
			want = 3;
		} else if (want == 3) {
			if (n != 2 || !word_is(w[0], wl[0], "window-ms") ||
			    !parse_uint(w[1], wl[1], &p->window_ms))
				return errbuf_fail(
					-EBADMSG, errbuf, errlen,
					"line %zu: expected \"window-ms <milliseconds>\"", line);
			want = 4;
		} else if (n == 2 && word_is(w[0], wl[0], "layer") && want != 6) {
			char(*nl2)[DIGEST_STRING_MAX];

			if (!is_digest(w[1], wl[1]))
				return errbuf_fail(-EBADMSG, errbuf, errlen,
						   "line %zu: expected \"layer sha256:<64 hex>\"",
						   line);
			if (p->n_layers == PROFILE_LAYERS_MAX)
				return errbuf_fail(-EBADMSG, errbuf, errlen,
						   "line %zu: more than %u layers", line,
						   PROFILE_LAYERS_MAX);
			nl2 = realloc(p->layers, (p->n_layers + 1) * sizeof(*p->layers));
			if (!nl2)
				return -ENOMEM;
			p->layers = nl2;
			memcpy(p->layers[p->n_layers], w[1], wl[1]);
			p->layers[p->n_layers++][wl[1]] = '\0';
			want = 5;
		} else if (n == 4 && word_is(w[0], wl[0], "file") && want >= 5) {
			struct profile_file *f;
			uint64_t layer, size;
			char key[DIGEST_HEX_LEN + 32];

			if (!parse_uint(w[1], wl[1], &layer) || layer >= p->n_layers)
				return errbuf_fail(
					-EBADMSG, errbuf, errlen,
					"line %zu: no layer %.*s (the profile names %zu)", line,
					(int)MIN(wl[1], 20), w[1], p->n_layers);
			if (!is_hex64(w[2], wl[2]))
				return errbuf_fail(-EBADMSG, errbuf, errlen,
						   "line %zu: a file's content is 64 lowercase hex "
						   "digits",
						   line);
			if (!parse_uint(w[3], wl[3], &size) || size == 0)
				return errbuf_fail(-EBADMSG, errbuf, errlen,
						   "line %zu: a file's size is a positive number",
						   line);
			if (p->n_files == PROFILE_FILES_MAX)
				return errbuf_fail(-EBADMSG, errbuf, errlen,
						   "line %zu: more than %u files", line,
						   PROFILE_FILES_MAX);
			if (size > PROFILE_BYTES_MAX - p->bytes)
				return errbuf_fail(
					-EBADMSG, errbuf, errlen,
					"line %zu: the files add up to more than %llu MiB", line,
					PROFILE_BYTES_MAX >> 20);
			snprintf(key, sizeof(key), "%" PRIu64 ":%.*s", layer, (int)wl[2], w[2]);
			if (strmap_get(seen, key))
				return errbuf_fail(-EBADMSG, errbuf, errlen,
						   "line %zu: the same file twice", line);
			if (strmap_put(seen, key, p) < 0)
				return -ENOMEM;
			if (p->n_files == cap_files) {
				cap_files = cap_files ? cap_files * 2 : 64;
				f = realloc(p->files, cap_files * sizeof(*f));
				if (!f)
					return -ENOMEM;
				p->files = f;
			}
			f = &p->files[p->n_files++];
			f->layer = (unsigned)layer;
			memcpy(f->object, w[2], DIGEST_HEX_LEN);
			f->object[DIGEST_HEX_LEN] = '\0';
			f->size = size;
			p->bytes += size;
			want = 6;
		} else {
			return errbuf_fail(-EBADMSG, errbuf, errlen,
					   "line %zu: expected a \"%s\" line", line,
					   want == 4   ? "layer"
					   : want == 5 ? "layer\" or \"file"
						       : "file");
		}
	}
	if (want < 6)
		return errbuf_fail(-EBADMSG, errbuf, errlen,
				   "the profile ends early: it needs its header, a layer and a "
				   "file");
	*ret = TAKE_PTR(p);
	return 0;
}

int profile_format(const struct profile *p, char **ret, size_t *ret_len)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return -ENOMEM;
	fprintf(f, "%s\nimage %s\nrecorded %" PRId64 "\nwindow-ms %" PRIu64 "\n", PROFILE_MAGIC,
		p->image, p->recorded, p->window_ms);
	for (size_t i = 0; i < p->n_layers; i++)
		fprintf(f, "layer %s\n", p->layers[i]);
	for (size_t i = 0; i < p->n_files; i++)
		fprintf(f, "file %u %s %" PRIu64 "\n", p->files[i].layer, p->files[i].object,
			p->files[i].size);
	if (fclose(f) != 0) {
		free(buf);
		return -ENOMEM;
	}
	*ret = buf;
	*ret_len = len;
	return 0;
}

/* ---- recording ------------------------------------------------------ */

struct profile_recorder {
	atomic_uint refs;
	pthread_mutex_t lock;
	int64_t start_ns, deadline_ns;
	atomic_bool closed;
	struct profile *p;	/* lock */
	struct strmap *seen;	/* "layer:object"; lock */
	size_t cap;		/* of p->files; lock */
	struct dlist_node node; /* on the store's watch list; its lock */
};

int profile_recorder_new(const char *image, const char *const *layers, size_t n_layers,
			 int64_t start_ns, int64_t window_ns, struct profile_recorder **ret)
{
	struct profile_recorder *r;

	if (n_layers > PROFILE_LAYERS_MAX)
		return -E2BIG;
	if (!digest_is_valid(image))
		return -EINVAL;
	for (size_t i = 0; i < n_layers; i++)
		if (!digest_is_valid(layers[i]))
			return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->p = calloc(1, sizeof(*r->p));
	r->seen = strmap_new();
	if (r->p)
		r->p->layers = calloc(MAX(n_layers, 1), sizeof(*r->p->layers));
	if (!r->p || !r->seen || !r->p->layers) {
		profile_free(r->p);
		strmap_free(r->seen);
		free(r);
		return -ENOMEM;
	}
	snprintf(r->p->image, sizeof(r->p->image), "%s", image);
	for (size_t i = 0; i < n_layers; i++)
		snprintf(r->p->layers[i], sizeof(r->p->layers[i]), "%s", layers[i]);
	r->p->n_layers = n_layers;
	r->p->window_ms = (uint64_t)(window_ns / 1000000);
	r->start_ns = start_ns;
	r->deadline_ns = start_ns + window_ns;
	atomic_init(&r->refs, 1);
	pthread_mutex_init(&r->lock, NULL);
	*ret = r;
	return 0;
}

void profile_recorder_ref(struct profile_recorder *r)
{
	atomic_fetch_add(&r->refs, 1);
}

void profile_recorder_unref(struct profile_recorder *r)
{
	if (!r || atomic_fetch_sub(&r->refs, 1) != 1)
		return;
	profile_free(r->p);
	strmap_free(r->seen);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

int64_t profile_recorder_deadline(const struct profile_recorder *r)
{
	return r->deadline_ns;
}

int profile_recorder_note(struct profile_recorder *r, unsigned layer, const char *object,
			  uint64_t size, int64_t now_ns)
{
	char key[DIGEST_HEX_LEN + 32];
	struct profile *p;
	int res = 0;

	/* (after the window every open of the image comes here: no lock) */
	if (atomic_load(&r->closed))
		return -ESTALE;
	if (now_ns >= r->deadline_ns)
		return -ESTALE;
	if (!object || strlen(object) != DIGEST_HEX_LEN)
		return -EINVAL;
	snprintf(key, sizeof(key), "%u:%s", layer, object);
	pthread_mutex_lock(&r->lock);
	p = r->p;
	if (atomic_load(&r->closed)) {
		res = -ESTALE;
	} else if (layer >= p->n_layers) {
		res = -EINVAL;
	} else if (size == 0 || size > PROFILE_FILE_MAX || p->n_files == PROFILE_FILES_MAX ||
		   size > PROFILE_BYTES_MAX - p->bytes || strmap_get(r->seen, key)) {
		res = 0;
	} else {
		if (p->n_files == r->cap) {
			size_t cap = r->cap ? r->cap * 2 : 64;
			struct profile_file *f = realloc(p->files, cap * sizeof(*f));

			if (!f) {
				pthread_mutex_unlock(&r->lock);
				return 0; /* a hint lost, nothing more */
			}
			p->files = f;
			r->cap = cap;
		}
		if (strmap_put(r->seen, key, r) == 0) {
			struct profile_file *f = &p->files[p->n_files++];

			f->layer = layer;
			memcpy(f->object, object, DIGEST_HEX_LEN + 1);
			f->size = size;
			p->bytes += size;
			res = 1;
		}
	}
	pthread_mutex_unlock(&r->lock);
	return res;
}

int profile_recorder_finish(struct profile_recorder *r, int64_t recorded, struct profile **ret)
{
	struct profile *p = NULL;

	pthread_mutex_lock(&r->lock);
	atomic_store(&r->closed, true);
	if (r->p->n_files > 0) {
		p = calloc(1, sizeof(*p));
		if (p) {
			*p = *r->p;
			p->layers = malloc(MAX(p->n_layers, 1) * sizeof(*p->layers));
			p->files = malloc(p->n_files * sizeof(*p->files));
			if (p->layers && p->files) {
				memcpy(p->layers, r->p->layers, p->n_layers * sizeof(*p->layers));
				memcpy(p->files, r->p->files, p->n_files * sizeof(*p->files));
			} else {
				profile_free(p);
				p = NULL;
			}
		}
	}
	bool failed = r->p->n_files > 0 && !p;
	pthread_mutex_unlock(&r->lock);
	if (failed)
		return -ENOMEM;
	if (p)
		p->recorded = recorded;
	*ret = p;
	return 0;
}

/* ---- the store ------------------------------------------------------ */

struct profiles {
	struct profiles_options o;
	int dirfd; /* CACHE/profiles */
	struct profile_stats stats;
	pthread_mutex_t lock;
	pthread_cond_t cond;   /* a recorder watched, or stop */
	struct dlist watching; /* recorders until their window ends; lock */
	bool stop;	       /* lock */
	bool started;
	pthread_t writer;
	atomic_uint tmp_seq;
};

/* The name of image's profile in profiles/: its hex; NULL for a digest
 * that is not one. */
static const char *profile_name(const char *image)
{
	return digest_is_valid(image) ? digest_hex(image) : NULL;
}

int profiles_load(struct profiles *p, const char *image, struct profile **ret)
{
	const char *name = profile_name(image);
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *buf = NULL;
	struct profile *prof = NULL;
	size_t len;
	int r;

	if (!name)
		return -EINVAL;
	fd = openat(p->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return negative_errno();
	r = read_full(fd, PROFILE_TEXT_MAX, &buf, &len);
	if (r == 0)
		r = profile_parse(buf, len, &prof, NULL, 0);
	if (r == 0 && (!prof || strcmp(prof->image, image) != 0))
		r = -EBADMSG;
	if (r < 0)
		profile_free(TAKE_PTR(prof));
	if (r == -EBADMSG || r == -E2BIG || r == -EFBIG) {
		/* torn by a power cut, or put there by hand: no use */
		(void)unlinkat(p->dirfd, name, 0);
		return -ENOENT;
	}
	if (r < 0)
		return r;
	*ret = prof;
	return 0;
}

int profiles_save(struct profiles *p, const struct profile *prof)
{
	const char *name = profile_name(prof->image);
	_cleanup_free_ char *text = NULL;
	char tmp[64];
	size_t len;
	int fd, r;

	if (!name)
		return -EINVAL;
	r = profile_format(prof, &text, &len);
	if (r < 0)
		return r;
	snprintf(tmp, sizeof(tmp), ".tmp.%d.%u", (int)getpid(), atomic_fetch_add(&p->tmp_seq, 1));
	fd = openat(p->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return negative_errno();
	r = write_full(fd, text, len);
	if (r == 0)
		r = flush_data(fd);
	close(fd);
	if (r == 0 && renameat(p->dirfd, tmp, p->dirfd, name) < 0)
		r = negative_errno();
	if (r < 0)
		(void)unlinkat(p->dirfd, tmp, 0);
	return r;
}

int profiles_remove(struct profiles *p, const char *image)
{
	const char *name = profile_name(image);

	if (!name)
		return -EINVAL;
	return unlinkat(p->dirfd, name, 0) < 0 ? negative_errno() : 0;
}

int profiles_foreach(struct profiles *p,
		     int (*fn)(void *userdata, const char *image, int64_t stored), void *userdata)
{
	DIR *d;
	struct dirent *de;
	int r = 0;

	if (dir_stream(p->dirfd, &d) < 0)
		return 0;
	while (r == 0 && (de = readdir(d))) {
		char image[DIGEST_STRING_MAX];
		struct stat st;

		if (!is_hex64(de->d_name, strlen(de->d_name)) ||
		    fstatat(p->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		snprintf(image, sizeof(image), DIGEST_SHA256_PREFIX "%s", de->d_name);
		r = fn(userdata, image, (int64_t)st.st_mtime);
	}
	closedir(d);
	return r;
}

void profiles_count(struct profiles *p, uint64_t *ret_n, uint64_t *ret_bytes)
{
	DIR *d;
	struct dirent *de;

	*ret_n = *ret_bytes = 0;
	if (dir_stream(p->dirfd, &d) < 0)
		return;
	while ((de = readdir(d))) {
		struct stat st;

		if (!is_hex64(de->d_name, strlen(de->d_name)) ||
		    fstatat(p->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		(*ret_n)++;
		*ret_bytes += (uint64_t)st.st_size;
	}
	closedir(d);
}

struct profile_stats *profiles_stats(struct profiles *p)
{
	return &p->stats;
}

int64_t profiles_window_ns(const struct profiles *p)
{
	return p->o.window_ns;
}

/* Writes what r recorded, unless a profile of its image is stored by now
 * (an import, or a recording of the same image by another name). */
static void writer_finish(struct profiles *p, struct profile_recorder *r)
{
	struct profile *prof = NULL, *there = NULL;
	int res;

	res = profile_recorder_finish(r, (int64_t)time(NULL), &prof);
	if (res < 0 || !prof)
		return;
	if (profiles_load(p, prof->image, &there) == 0) {
		profile_free(there);
		profile_free(prof);
		return;
	}
	res = profiles_save(p, prof);
	if (res == 0) {
		atomic_fetch_add(&p->stats.recorded, 1);
		event_sendf(
			&p->o.events, EVENT_NORMAL, "ProfileRecorded", NULL, prof->image, 0, NULL,
			"Recorded the start profile of image %s: %zu files (%" PRIu64
			" bytes) opened in the first %.1fs after its first lookup",
			prof->image, prof->n_files, prof->bytes, (double)prof->window_ms / 1000.0);
	}
	profile_free(prof);
}

static void *writer_thread(void *arg)
{
	struct profiles *p = arg;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		struct profile_recorder *due = NULL;
		int64_t now = clock_mono_ns(), next = INT64_MAX;

		for (struct dlist_node *n = p->watching.head; n; n = n->next) {
			struct profile_recorder *r = dlist_entry(n, struct profile_recorder, node);

			if (profile_recorder_deadline(r) <= now) {
				due = r;
				break;
			}
			next = MIN(next, profile_recorder_deadline(r));
		}
		if (due) {
			dlist_remove(&p->watching, &due->node);
			pthread_mutex_unlock(&p->lock);
			writer_finish(p, due);
			profile_recorder_unref(due);
			pthread_mutex_lock(&p->lock);
			continue;
		}
		if (p->stop)
			break;
		if (next == INT64_MAX) {
			pthread_cond_wait(&p->cond, &p->lock);
		} else {
			struct timespec ts = clock_mono_deadline(next - now);

			pthread_cond_timedwait(&p->cond, &p->lock, &ts);
		}
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int profiles_watch(struct profiles *p, struct profile_recorder *r)
{
	pthread_mutex_lock(&p->lock);
	if (p->stop) {
		pthread_mutex_unlock(&p->lock);
		return -ECANCELED;
	}
	profile_recorder_ref(r);
	dlist_push(&p->watching, &r->node);
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

/* Temporary files of a process killed while it wrote a profile. */
static void remove_leftovers(int dirfd)
{
	DIR *d;
	struct dirent *de;

	if (dir_stream(dirfd, &d) < 0)
		return;
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, ".tmp.", 5))
			(void)unlinkat(dirfd, de->d_name, 0);
	closedir(d);
}

int profiles_new(const struct profiles_options *o, struct profiles **ret, char *errbuf,
		 size_t errlen)
{
	_cleanup_close_ int cfd = -1;
	struct profiles *p;
	pthread_condattr_t ca;
	int r;

	cfd = open(o->cache_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cfd < 0)
		return errbuf_fail(negative_errno(), errbuf, errlen, "cache directory \"%s\": %s",
				   o->cache_dir, strerror(errno));
	if (mkdirat(cfd, "profiles", 0700) < 0 && errno != EEXIST)
		return errbuf_fail(negative_errno(), errbuf, errlen, "\"%s/profiles\": %s",
				   o->cache_dir, strerror(errno));
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->o = *o;
	p->o.cache_dir = NULL; /* (borrowed: not kept) */
	p->dirfd = openat(cfd, "profiles", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (p->dirfd < 0) {
		r = negative_errno();
		free(p);
		return errbuf_fail(r, errbuf, errlen, "\"%s/profiles\": %s", o->cache_dir,
				   strerror(-r));
	}
	remove_leftovers(p->dirfd);
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (o->window_ns > 0) {
		if (pthread_create(&p->writer, NULL, writer_thread, p) != 0) {
			profiles_free(p);
			return errbuf_fail(-EAGAIN, errbuf, errlen,
					   "no thread for the profiles' writer");
		}
		p->started = true;
	}
	*ret = p;
	return 0;
}

void profiles_free(struct profiles *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	if (p->started)
		pthread_join(p->writer, NULL);
	while (p->watching.head) {
		struct profile_recorder *r =
			dlist_entry(p->watching.head, struct profile_recorder, node);

		dlist_remove(&p->watching, &r->node);
		profile_recorder_unref(r);
	}
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	if (p->dirfd >= 0)
		close(p->dirfd);
	free(p);
}

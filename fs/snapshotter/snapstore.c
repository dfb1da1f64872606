/* The snapshot store (snapstore.h): metadata in memory, written whole to
 * DIR/metadata.json on each change, and the directories of the
 * snapshots under DIR/snapshots/<id>.  The order of the steps makes a
 * kill at any point leave a state that loads: directories are made
 * before the metadata naming them is renamed into place, and removed
 * after the metadata that no longer names them; what is left in between
 * is a directory nobody names, removed at the next open. */
#include "snapstore.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "errname.h"
#include "fault.h"
#include "fileio.h"
#include "macro.h"

#define METADATA "metadata.json"
#define METADATA_TMP "metadata.json.tmp"
#define METADATA_VERSION 1
/* containerd's metadata of a node holds thousands of snapshots with a
 * few labels each: far below this. */
#define METADATA_MAX (256u << 20)

struct snap {
	struct snap_info info;
	uint64_t id;
	/* bytes and inodes on local disk: a committed snapshot's measured
	 * at its commit, an active one's at its last measure (0 at first),
	 * a remote one's and a view's 0 */
	int64_t size;
	int64_t inodes;
	/* a remote snapshot's files, a directory elsewhere (a layer of
	 * pullfs's layers/), which its fs is a symbolic link to; NULL: fs
	 * is a folder */
	char *remote;
};

static void snap_done(struct snap *sn)
{
	snap_info_done(&sn->info);
	free(sn->remote);
	sn->remote = NULL;
}

struct snapstore {
	pthread_mutex_t lock;
	char *dir;    /* absolute, for the mounts' paths */
	int dfd;      /* DIR */
	int snaps_fd; /* DIR/snapshots */
	bool index_off;
	/* the sum of the snapshots' size: changed with lock held, read
	 * without (snapstore_local_bytes) */
	atomic_int_least64_t local_bytes;
	/* guarded by lock: */
	struct snap *v; /* in creation order */
	size_t n, cap;
	uint64_t next_id;
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static const char *kind_name(enum snap_kind k)
{
	switch (k) {
	case SNAP_VIEW:
		return "view";
	case SNAP_ACTIVE:
		return "active";
	case SNAP_COMMITTED:
		return "committed";
	}
	return "unknown";
}

static int kind_of_name(const char *n, enum snap_kind *ret)
{
	for (enum snap_kind k = SNAP_VIEW; k <= SNAP_COMMITTED; k++)
		if (strcmp(n, kind_name(k)) == 0) {
			*ret = k;
			return 0;
		}
	return -EINVAL;
}

void snap_info_done(struct snap_info *i)
{
	free(i->name);
	free(i->parent);
	json_decref(i->labels);
	*i = (struct snap_info){ 0 };
}

void snap_mount_done(struct snap_mount *m)
{
	free(m->type);
	free(m->source);
	for (size_t i = 0; i < m->n_options; i++)
		free(m->options[i]);
	*m = (struct snap_mount){ 0 };
}

static int info_copy(const struct snap_info *from, struct snap_info *ret)
{
	struct snap_info i = { .kind = from->kind,
			       .created_ns = from->created_ns,
			       .updated_ns = from->updated_ns };

	i.name = strdup(from->name);
	i.parent = strdup(from->parent);
	i.labels = json_deep_copy(from->labels);
	if (!i.name || !i.parent || !i.labels) {
		snap_info_done(&i);
		return -ENOMEM;
	}
	*ret = i;
	return 0;
}

/* ------------------------------------------------------------- checks */

/* Strict UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF
 * (the metadata is JSON, which takes nothing else). */
static bool utf8_valid(const unsigned char *p, size_t len)
{
	size_t i = 0;

	while (i < len) {
		unsigned c = p[i], n, cp;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			n = 1, cp = c & 0x1f;
		else if (c >= 0xe0 && c <= 0xef)
			n = 2, cp = c & 0x0f;
		else if (c >= 0xf0 && c <= 0xf4)
			n = 3, cp = c & 0x07;
		else
			return false;
		if (len - i <= n)
			return false;
		for (unsigned k = 1; k <= n; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (p[i + k] & 0x3f);
		}
		if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += n + 1;
	}
	return true;
}

int snapstore_check_name(const char *what, const char *name, char *errbuf, size_t errlen)
{
	size_t len = strlen(name);

	if (len == 0)
		return errbuf_fail(-EINVAL, errbuf, errlen, "%s is empty", what);
	if (len > SNAP_NAME_MAX)
		return errbuf_fail(-EINVAL, errbuf, errlen, "%s is longer than %d bytes", what,
				   SNAP_NAME_MAX);
	if (!utf8_valid((const unsigned char *)name, len))
		return errbuf_fail(-EINVAL, errbuf, errlen, "%s is not valid UTF-8", what);
	return 0;
}

int snapstore_check_labels(const json_t *labels, char *errbuf, size_t errlen)
{
	const char *k;
	json_t *v;

	if (!json_is_object(labels))
		return errbuf_fail(-EINVAL, errbuf, errlen, "labels are not a map");
	json_object_foreach((json_t *)labels, k, v)
	{
		size_t kl = strlen(k), vl;

		if (!json_is_string(v))
			return errbuf_fail(-EINVAL, errbuf, errlen,
					   "label \"%.64s\" is not a string", k);
		vl = json_string_length(v);
		if (kl == 0)
			return errbuf_fail(-EINVAL, errbuf, errlen, "a label has an empty key");
		if (kl + vl > SNAP_LABEL_MAX)
			return errbuf_fail(
				-EINVAL, errbuf, errlen,
				"label key and value greater than maximum size (%d bytes)",
				SNAP_LABEL_MAX);
		if (memchr(json_string_value(v), '\0', vl))
			return errbuf_fail(-EINVAL, errbuf, errlen,
					   "label \"%.64s\" holds a NUL byte", k);
	}
	return 0;
}

/* ----------------------------------------------------------- metadata */

static json_t *snap_to_json(const struct snap *sn)
{
	return json_pack(
		"{s:I, s:s, s:s, s:s, s:I, s:I, s:O, s:I, s:I, s:s*}", "id", (json_int_t)sn->id,
		"name", sn->info.name, "parent", sn->info.parent, "kind", kind_name(sn->info.kind),
		"created", (json_int_t)sn->info.created_ns, "updated",
		(json_int_t)sn->info.updated_ns, "labels", sn->info.labels, "size",
		(json_int_t)sn->size, "inodes", (json_int_t)sn->inodes, "remote", sn->remote);
}

/* Writes the whole metadata: temporary file, flushed, renamed over the
 * old one, directory flushed.  With the lock held. */
static int save(struct snapstore *s)
{
	_cleanup_(json_decrefp) json_t *doc = NULL;
	_cleanup_free_ char *text = NULL;
	_cleanup_close_ int fd = -1;
	json_t *arr;
	int r;

	doc = json_pack("{s:i, s:I, s:[]}", "version", METADATA_VERSION, "next_id",
			(json_int_t)s->next_id, "snapshots");
	if (!doc)
		return -ENOMEM;
	arr = json_object_get(doc, "snapshots");
	for (size_t i = 0; i < s->n; i++)
		if (json_array_append_new(arr, snap_to_json(&s->v[i])) < 0)
			return -ENOMEM;
	text = json_dumps(doc, JSON_COMPACT);
	if (!text)
		return -ENOMEM;
	fd = openat(s->dfd, METADATA_TMP, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return negative_errno();
	r = write_full(fd, text, strlen(text));
	if (r == 0)
		r = flush_data(fd);
	if (r < 0)
		return r;
	fault_point("snap-metadata");
	if (renameat(s->dfd, METADATA_TMP, s->dfd, METADATA) < 0)
		return negative_errno();
	return flush_dir(s->dfd);
}

static int grow(struct snapstore *s)
{
	struct snap *v;
	size_t cap;

	if (s->n < s->cap)
		return 0;
	cap = s->cap ? s->cap * 2 : 16;
	v = reallocarray(s->v, cap, sizeof(*v));
	if (!v)
		return -ENOMEM;
	s->v = v;
	s->cap = cap;
	return 0;
}

static struct snap *find(struct snapstore *s, const char *name)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i].info.name, name) == 0)
			return &s->v[i];
	return NULL;
}

static int load_one(struct snapstore *s, json_t *o, char *errbuf, size_t errlen)
{
	json_int_t id, created, updated, size, inodes;
	const char *name, *parent, *kind, *remote = NULL;
	json_t *labels;
	struct snap sn = { 0 };
	int r;

	if (json_unpack(o, "{s:I, s:s, s:s, s:s, s:I, s:I, s:o, s:I, s:I, s?s !}", "id", &id,
			"name", &name, "parent", &parent, "kind", &kind, "created", &created,
			"updated", &updated, "labels", &labels, "size", &size, "inodes", &inodes,
			"remote", &remote) < 0 ||
	    id <= 0 || kind_of_name(kind, &sn.info.kind) < 0 ||
	    (remote && (remote[0] != '/' || sn.info.kind != SNAP_COMMITTED)) ||
	    snapstore_check_name("name", name, NULL, 0) < 0 ||
	    (parent[0] && snapstore_check_name("parent", parent, NULL, 0) < 0) ||
	    snapstore_check_labels(labels, NULL, 0) < 0)
		return errbuf_fail(-EBADMSG, errbuf, errlen, "a malformed snapshot entry");
	if (find(s, name))
		return errbuf_fail(-EBADMSG, errbuf, errlen, "snapshot \"%s\" is there twice",
				   name);
	if (parent[0]) {
		struct snap *p = find(s, parent);

		/* parents come first: they are older */
		if (!p || p->info.kind != SNAP_COMMITTED)
			return errbuf_fail(-EBADMSG, errbuf, errlen,
					   "snapshot \"%s\" has no committed parent \"%s\"", name,
					   parent);
	}
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i].id == (uint64_t)id)
			return errbuf_fail(-EBADMSG, errbuf, errlen,
					   "snapshot id %" PRIu64 " twice", s->v[i].id);
	r = grow(s);
	if (r < 0)
		return r;
	sn.id = (uint64_t)id;
	sn.info.created_ns = created;
	sn.info.updated_ns = updated;
	sn.size = size;
	sn.inodes = inodes;
	sn.info.name = strdup(name);
	sn.info.parent = strdup(parent);
	sn.info.labels = json_deep_copy(labels);
	sn.remote = remote ? strdup(remote) : NULL;
	if (!sn.info.name || !sn.info.parent || !sn.info.labels || (remote && !sn.remote)) {
		snap_done(&sn);
		return -ENOMEM;
	}
	if (sn.id >= s->next_id)
		s->next_id = sn.id + 1;
	s->v[s->n++] = sn;
	atomic_fetch_add(&s->local_bytes, sn.size);
	return 0;
}

static int load(struct snapstore *s, char *errbuf, size_t errlen)
{
	_cleanup_(json_decrefp) json_t *doc = NULL;
	_cleanup_free_ char *text = NULL;
	_cleanup_close_ int fd = -1;
	json_error_t jerr;
	json_int_t version, next_id;
	json_t *arr, *o;
	size_t i, len;
	int r;

	fd = openat(s->dfd, METADATA, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0)
		return errbuf_fail(negative_errno(), errbuf, errlen, "cannot open \"%s/%s\": %s",
				   s->dir, METADATA, strerror(errno));
	r = read_full(fd, METADATA_MAX, &text, &len);
	if (r < 0)
		return errbuf_fail(r, errbuf, errlen, "cannot read \"%s/%s\": %s", s->dir, METADATA,
				   strerror(-r));
	doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!doc ||
	    json_unpack(doc, "{s:I, s:I, s:o !}", "version", &version, "next_id", &next_id,
			"snapshots", &arr) < 0 ||
	    version != METADATA_VERSION || next_id < 1 || !json_is_array(arr))
		return errbuf_fail(-EBADMSG, errbuf, errlen, "\"%s/%s\" is not snapshot metadata",
				   s->dir, METADATA);
	s->next_id = (uint64_t)next_id;
	json_array_foreach(arr, i, o)
	{
		r = load_one(s, o, errbuf, errlen);
		if (r < 0) {
			if (r == -EBADMSG)
				return errbuf_fail(r, errbuf, errlen, "\"%s/%s\": %s", s->dir,
						   METADATA, errbuf);
			return r;
		}
	}
	return 0;
}

/* -------------------------------------------------------- directories */

static int remove_tree(int dfd, const char *name)
{
	int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (sub < 0)
		return errno == ENOENT ? 0 : negative_errno();
	empty_dir(sub);
	close(sub);
	if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return negative_errno();
	return 0;
}

static bool id_named(const struct snapstore *s, uint64_t id)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i].id == id)
			return true;
	return false;
}

/* The id a directory name stands for, or 0. */
static uint64_t id_of_dirname(const char *n)
{
	char *end;
	unsigned long long v;

	if (n[0] < '1' || n[0] > '9')
		return 0;
	errno = 0;
	v = strtoull(n, &end, 10);
	return errno || *end ? 0 : (uint64_t)v;
}

/* With the lock held. */
static int cleanup_locked(struct snapstore *s)
{
	DIR *d;
	struct dirent *de;
	int r, n = 0;

	r = dir_stream(s->snaps_fd, &d);
	if (r < 0)
		return r;
	while ((de = readdir(d))) {
		uint64_t id;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		id = id_of_dirname(de->d_name);
		if (id && id_named(s, id))
			continue;
		/* a leftover: its id may be above what the metadata kept */
		if (id >= s->next_id)
			s->next_id = id + 1;
		if (remove_tree(s->snaps_fd, de->d_name) == 0)
			n++;
	}
	closedir(d);
	return n;
}

uint64_t snapstore_local_bytes(struct snapstore *s)
{
	int64_t n = atomic_load(&s->local_bytes);

	return n > 0 ? (uint64_t)n : 0;
}

int snapstore_cleanup(struct snapstore *s)
{
	int r;

	pthread_mutex_lock(&s->lock);
	r = cleanup_locked(s);
	pthread_mutex_unlock(&s->lock);
	return r;
}

static int open_dir_at(int dfd, const char *name, int *ret)
{
	int fd;

	if (mkdirat(dfd, name, 0700) < 0 && errno != EEXIST)
		return negative_errno();
	fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return negative_errno();
	*ret = fd;
	return 0;
}

int snapstore_open(const char *dir, struct snapstore **ret, char *errbuf, size_t errlen)
{
	struct snapstore *s;
	int r;

	if (dir[0] != '/')
		return errbuf_fail(-EINVAL, errbuf, errlen, "\"%s\" is not an absolute path", dir);
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	s->dfd = s->snaps_fd = -1;
	s->next_id = 1;
	/* overlayfs's index (on by a module parameter) would tie the upper
	 * directories to their lower ones: containerd's overlay turns it
	 * off wherever the parameter exists */
	s->index_off = access("/sys/module/overlay/parameters/index", F_OK) == 0;
	s->dir = strdup(dir);
	if (!s->dir) {
		r = -ENOMEM;
		goto fail;
	}
	r = open_dir_at(AT_FDCWD, dir, &s->dfd);
	if (r == 0)
		r = open_dir_at(s->dfd, "snapshots", &s->snaps_fd);
	if (r < 0) {
		errbuf_fail(r, errbuf, errlen, "cannot open the snapshots' folder \"%s\": %s", dir,
			    strerror(-r));
		goto fail;
	}
	unlinkat(s->dfd, METADATA_TMP, 0);
	r = load(s, errbuf, errlen);
	if (r < 0)
		goto fail;
	r = cleanup_locked(s);
	if (r < 0) {
		errbuf_fail(r, errbuf, errlen, "cannot clean \"%s/snapshots\": %s", dir,
			    strerror(-r));
		goto fail;
	}
	*ret = s;
	return 0;
fail:
	snapstore_free(s);
	return r;
}

void snapstore_free(struct snapstore *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		snap_done(&s->v[i]);
	free(s->v);
	if (s->dfd >= 0)
		close(s->dfd);
	if (s->snaps_fd >= 0)
		close(s->snaps_fd);
	free(s->dir);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* ------------------------------------------------------------- mounts */

/* Adds the option prefix followed by value. */
static int mount_option(struct snap_mount *m, const char *prefix, const char *value)
{
	char *o;

	if (m->n_options >= SNAP_MOUNT_OPTIONS_MAX || asprintf(&o, "%s%s", prefix, value) < 0)
		return -ENOMEM;
	m->options[m->n_options++] = o;
	return 0;
}

static char *fs_path(const struct snapstore *s, uint64_t id)
{
	char *p;

	return asprintf(&p, "%s/snapshots/%" PRIu64 "/fs", s->dir, id) < 0 ? NULL : p;
}

/* The mount of sn, as containerd's overlay snapshotter makes it: a bind
 * mount of its own directory when it has no parent, a read-only bind of
 * its parent's for a view of one layer, else overlayfs with the parents
 * as lower directories, nearest first. */
static int make_mount(struct snapstore *s, const struct snap *sn, struct snap_mount *ret)
{
	struct snap_mount m = { 0 };
	_cleanup_free_ char *lower = NULL;
	size_t n_parents = 0, len = 0;
	const struct snap *p;
	int r = -ENOMEM;

	for (p = sn; p->info.parent[0]; p = find(s, p->info.parent))
		n_parents++;
	if (n_parents == 0 || (sn->info.kind == SNAP_VIEW && n_parents == 1)) {
		m.type = strdup("bind");
		m.source = fs_path(s, n_parents ? find(s, sn->info.parent)->id : sn->id);
		if (!m.type || !m.source ||
		    mount_option(&m, "", sn->info.kind == SNAP_ACTIVE ? "rw" : "ro") < 0 ||
		    mount_option(&m, "", "rbind") < 0)
			goto fail;
		*ret = m;
		return 0;
	}
	m.type = strdup("overlay");
	m.source = strdup("overlay");
	if (!m.type || !m.source || (s->index_off && mount_option(&m, "", "index=off") < 0))
		goto fail;
	if (sn->info.kind == SNAP_ACTIVE) {
		_cleanup_free_ char *upper = fs_path(s, sn->id), *work = NULL;

		if (!upper ||
		    asprintf(&work, "%s/snapshots/%" PRIu64 "/work", s->dir, sn->id) < 0) {
			work = NULL;
			goto fail;
		}
		if (mount_option(&m, "workdir=", work) < 0 ||
		    mount_option(&m, "upperdir=", upper) < 0)
			goto fail;
	}
	for (p = find(s, sn->info.parent); p;
	     p = p->info.parent[0] ? find(s, p->info.parent) : NULL) {
		_cleanup_free_ char *dir = fs_path(s, p->id);
		size_t dl;
		char *nl;

		if (!dir)
			goto fail;
		dl = strlen(dir);
		nl = realloc(lower, len + dl + 2);
		if (!nl)
			goto fail;
		lower = nl;
		if (len)
			lower[len++] = ':';
		memcpy(lower + len, dir, dl + 1);
		len += dl;
	}
	r = mount_option(&m, "lowerdir=", lower);
	if (r < 0)
		goto fail;
	*ret = m;
	return 0;
fail:
	snap_mount_done(&m);
	return r;
}

/* ---------------------------------------------------------- operations */

static int not_found(const char *key, char *errbuf, size_t errlen)
{
	return errbuf_fail(-ENOENT, errbuf, errlen, "snapshot \"%s\" does not exist", key);
}

/* The snapshot key, or NULL with -ENOENT in *r and the reason in errbuf. */
static struct snap *find_or_fail(struct snapstore *s, const char *key, int *r, char *errbuf,
				 size_t errlen)
{
	struct snap *sn = find(s, key);

	if (!sn)
		*r = not_found(key, errbuf, errlen);
	return sn;
}

/* A new, empty DIR/snapshots/<id>, open in *ret_fd; a folder of this id
 * left by a change cut short is stale and goes first. */
static int new_folder(struct snapstore *s, uint64_t id, int *ret_fd)
{
	char name[32];
	int fd, r;

	snprintf(name, sizeof(name), "%" PRIu64, id);
	r = remove_tree(s->snaps_fd, name);
	if (r < 0)
		return r;
	if (mkdirat(s->snaps_fd, name, 0700) < 0)
		return negative_errno();
	fd = openat(s->snaps_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return negative_errno();
	*ret_fd = fd;
	return 0;
}

/* The new folder fd and its entry in DIR/snapshots, flushed. */
static int flush_folder(struct snapstore *s, int fd)
{
	int r = flush_dir(fd);

	return r < 0 ? r : flush_dir(s->snaps_fd);
}

/* Makes DIR/snapshots/<id>/fs (owned as the parent's is) and, for an
 * active snapshot, .../work. */
static int make_dirs(struct snapstore *s, uint64_t id, enum snap_kind kind,
		     const struct snap *parent)
{
	_cleanup_close_ int fd = -1;
	int r;

	r = new_folder(s, id, &fd);
	if (r < 0)
		return r;
	if (mkdirat(fd, "fs", 0755) < 0)
		return negative_errno();
	if (parent) {
		char pfs[48];
		struct stat st;

		snprintf(pfs, sizeof(pfs), "%" PRIu64 "/fs", parent->id);
		if (fstatat(s->snaps_fd, pfs, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    fchownat(fd, "fs", st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) < 0)
			return negative_errno();
	}
	if (kind == SNAP_ACTIVE && mkdirat(fd, "work", 0711) < 0)
		return negative_errno();
	return flush_folder(s, fd);
}

/* Makes DIR/snapshots/<id>/fs a symbolic link to path: the lower
 * directory of a remote snapshot, named in mounts through the link, so
 * that what overlayfs's options cannot hold (the ':' of a digest) is
 * never in them. */
static int make_link(struct snapstore *s, uint64_t id, const char *path)
{
	_cleanup_close_ int fd = -1;
	int r;

	r = new_folder(s, id, &fd);
	if (r < 0)
		return r;
	if (symlinkat(path, fd, "fs") < 0)
		return negative_errno();
	return flush_folder(s, fd);
}

/* A new snapshot key over parent in *sn (id, names, labels, times; the
 * kind is the caller's), with room for it in the array (which may move).
 * With the lock held.  -EEXIST, -ENOENT (no parent), -EINVAL (the parent
 * is not committed). */
static int new_snap(struct snapstore *s, const char *key, const char *parent, const json_t *labels,
		    struct snap *sn, char *errbuf, size_t errlen)
{
	struct snap *p;
	int r;

	if (find(s, key))
		return errbuf_fail(-EEXIST, errbuf, errlen, "snapshot \"%s\" already exists", key);
	if (parent[0]) {
		p = find(s, parent);
		if (!p)
			return errbuf_fail(-ENOENT, errbuf, errlen,
					   "parent snapshot \"%s\" does not exist", parent);
		if (p->info.kind != SNAP_COMMITTED)
			return errbuf_fail(-EINVAL, errbuf, errlen,
					   "parent \"%s\" is not a committed snapshot", parent);
	}
	r = grow(s);
	if (r < 0)
		return r;
	sn->id = s->next_id++;
	sn->info.created_ns = sn->info.updated_ns = now_ns();
	sn->info.name = strdup(key);
	sn->info.parent = strdup(parent);
	sn->info.labels = json_deep_copy(labels);
	if (!sn->info.name || !sn->info.parent || !sn->info.labels) {
		snap_done(sn);
		return -ENOMEM;
	}
	return 0;
}

/* A new snapshot whose directories were made (r 0; else r, the reason in
 * errbuf already) goes into the store and its metadata on disk; when
 * either fails, its directories go and it is freed.  Lock held. */
static int record(struct snapstore *s, struct snap *sn, int r, char *errbuf, size_t errlen)
{
	char dir[32];

	if (r == 0) {
		s->v[s->n++] = *sn;
		r = save(s);
		if (r == 0)
			return 0;
		s->n--;
		errbuf_fail(r, errbuf, errlen, "cannot write the snapshots' metadata: %s",
			    strerror(-r));
	}
	snprintf(dir, sizeof(dir), "%" PRIu64, sn->id);
	remove_tree(s->snaps_fd, dir);
	snap_done(sn);
	return r;
}

int snapstore_add_remote(struct snapstore *s, const char *name, const char *parent,
			 const json_t *labels, const char *path, char *errbuf, size_t errlen)
{
	struct snap sn = { .info.kind = SNAP_COMMITTED };
	int r;

	if (path[0] != '/')
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	r = new_snap(s, name, parent, labels, &sn, errbuf, errlen);
	if (r < 0)
		goto out;
	sn.remote = strdup(path);
	if (!sn.remote) {
		snap_done(&sn);
		r = -ENOMEM;
		goto out;
	}
	r = make_link(s, sn.id, path);
	if (r < 0)
		errbuf_fail(r, errbuf, errlen, "cannot make the folder of snapshot \"%s\": %s",
			    name, strerror(-r));
	r = record(s, &sn, r, errbuf, errlen);
out:
	pthread_mutex_unlock(&s->lock);
	return r;
}

int snapstore_prepare(struct snapstore *s, enum snap_kind kind, const char *key, const char *parent,
		      const json_t *labels, struct snap_mount *ret_mount, char *errbuf,
		      size_t errlen)
{
	struct snap sn = { .info.kind = kind };
	struct snap *p = NULL;
	int r;

	if (kind != SNAP_ACTIVE && kind != SNAP_VIEW)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	r = new_snap(s, key, parent, labels, &sn, errbuf, errlen);
	if (r < 0)
		goto out;
	p = parent[0] ? find(s, parent) : NULL;
	r = make_dirs(s, sn.id, kind, p);
	if (r < 0)
		errbuf_fail(r, errbuf, errlen, "cannot make the directories of snapshot \"%s\": %s",
			    key, strerror(-r));
	else
		fault_point("snap-dirs");
	r = record(s, &sn, r, errbuf, errlen);
	if (r == 0)
		r = make_mount(s, &s->v[s->n - 1], ret_mount);
out:
	pthread_mutex_unlock(&s->lock);
	return r;
}

int snapstore_mounts(struct snapstore *s, const char *key, struct snap_mount *ret_mount,
		     char *errbuf, size_t errlen)
{
	struct snap *sn;
	int r;

	pthread_mutex_lock(&s->lock);
	sn = find(s, key);
	if (!sn)
		r = not_found(key, errbuf, errlen);
	else if (sn->info.kind == SNAP_COMMITTED)
		r = errbuf_fail(-EINVAL, errbuf, errlen,
				"snapshot \"%s\" is committed: it has no mounts", key);
	else
		r = make_mount(s, sn, ret_mount);
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* Bytes (allocated blocks) and inodes under dfd, each inode of several
 * links counted once. */
struct usage {
	int64_t size, inodes;
	/* inode numbers of files of several links met so far: an open
	 * addressing set (0 is no inode number on Linux filesystems) */
	uint64_t *seen;
	size_t n_seen, cap_seen; /* cap: a power of two */
};

static size_t ino_slot(uint64_t ino, size_t cap)
{
	return (size_t)((ino * 0x9e3779b97f4a7c15ull) >> 32) & (cap - 1);
}

/* Whether ino was met before; notes it if not.  Out of memory, it says
 * no: a file counted twice is better than a walk given up. */
static bool seen_before(struct usage *u, uint64_t ino)
{
	size_t i;

	if (!ino)
		return false;
	if (2 * (u->n_seen + 1) > u->cap_seen) {
		size_t cap = u->cap_seen ? u->cap_seen * 2 : 64;
		uint64_t *v = calloc(cap, sizeof(*v));

		if (!v)
			return false;
		for (size_t k = 0; k < u->cap_seen; k++)
			if (u->seen[k]) {
				for (i = ino_slot(u->seen[k], cap); v[i]; i = (i + 1) & (cap - 1))
					;
				v[i] = u->seen[k];
			}
		free(u->seen);
		u->seen = v;
		u->cap_seen = cap;
	}
	for (i = ino_slot(ino, u->cap_seen); u->seen[i]; i = (i + 1) & (u->cap_seen - 1))
		if (u->seen[i] == ino)
			return true;
	u->seen[i] = ino;
	u->n_seen++;
	return false;
}

static void measure(int dfd, struct usage *u, unsigned depth)
{
	DIR *d;
	struct dirent *de;

	if (depth > 256 || dir_stream(dfd, &d) < 0)
		return;
	while ((de = readdir(d))) {
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (st.st_nlink > 1 && !S_ISDIR(st.st_mode) && seen_before(u, (uint64_t)st.st_ino))
			continue;
		u->size += (int64_t)st.st_blocks * 512;
		u->inodes++;
		if (S_ISDIR(st.st_mode)) {
			int sub = openat(dfd, de->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (sub >= 0) {
				measure(sub, u, depth + 1);
				close(sub);
			}
		}
	}
	closedir(d);
}

/* Walks DIR/snapshots/<id>/fs; needs no lock (snaps_fd does not change),
 * and is called without the store's: a large upper directory takes a
 * while. */
static void measure_snapshot(struct snapstore *s, uint64_t id, int64_t *size, int64_t *inodes)
{
	struct usage u = { 0 };
	char name[48];
	int fd;

	snprintf(name, sizeof(name), "%" PRIu64 "/fs", id);
	fd = openat(s->snaps_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0) {
		measure(fd, &u, 0);
		close(fd);
	}
	free(u.seen);
	*size = u.size;
	*inodes = u.inodes;
}

/* The active snapshot key that name may be committed from, or NULL with
 * the error in *r.  With the lock held. */
static struct snap *committable(struct snapstore *s, const char *name, const char *key, int *r,
				char *errbuf, size_t errlen)
{
	struct snap *sn = find_or_fail(s, key, r, errbuf, errlen);

	if (sn && sn->info.kind != SNAP_ACTIVE) {
		*r = errbuf_fail(-EBUSY, errbuf, errlen, "snapshot \"%s\" is not active", key);
		return NULL;
	}
	if (sn && find(s, name)) {
		*r = errbuf_fail(-EEXIST, errbuf, errlen, "snapshot \"%s\" already exists", name);
		return NULL;
	}
	return sn;
}

int snapstore_commit(struct snapstore *s, const char *name, const char *key, const json_t *labels,
		     char *errbuf, size_t errlen)
{
	struct snap *sn;
	struct snap_info old;
	int64_t size, inodes, old_size, old_inodes;
	uint64_t id;
	char *nn;
	json_t *nl;
	int r;

	/* checked, measured without the lock, checked again: the same
	 * snapshot, still active, its name still free */
	pthread_mutex_lock(&s->lock);
	sn = committable(s, name, key, &r, errbuf, errlen);
	id = sn ? sn->id : 0;
	pthread_mutex_unlock(&s->lock);
	if (!sn)
		return r;
	measure_snapshot(s, id, &size, &inodes);
	pthread_mutex_lock(&s->lock);
	sn = committable(s, name, key, &r, errbuf, errlen);
	if (!sn)
		goto out;
	if (sn->id != id) {
		r = errbuf_fail(-EBUSY, errbuf, errlen, "snapshot \"%s\" changed during its commit",
				key);
		goto out;
	}
	nn = strdup(name);
	nl = json_deep_copy(labels);
	if (!nn || !nl) {
		free(nn);
		json_decref(nl);
		r = -ENOMEM;
		goto out;
	}
	old = sn->info;
	old_size = sn->size;
	old_inodes = sn->inodes;
	sn->info.name = nn;
	sn->info.labels = nl;
	sn->info.kind = SNAP_COMMITTED;
	sn->info.created_ns = sn->info.updated_ns = now_ns();
	sn->size = size;
	sn->inodes = inodes;
	r = save(s);
	if (r == 0)
		atomic_fetch_add(&s->local_bytes, size - old_size);
	if (r < 0) {
		free(nn);
		json_decref(nl);
		sn->info = old;
		sn->size = old_size;
		sn->inodes = old_inodes;
		errbuf_fail(r, errbuf, errlen, "cannot write the snapshots' metadata: %s",
			    strerror(-r));
		goto out;
	}
	free(old.name);
	json_decref(old.labels);
	/* overlayfs's work directory serves only while mounted */
	{
		char work[48];

		snprintf(work, sizeof(work), "%" PRIu64 "/work", sn->id);
		remove_tree(s->snaps_fd, work);
	}
out:
	pthread_mutex_unlock(&s->lock);
	return r;
}

int snapstore_remove(struct snapstore *s, const char *key, char *errbuf, size_t errlen)
{
	struct snap *sn, removed;
	size_t at;
	char name[32];
	int r;

	pthread_mutex_lock(&s->lock);
	sn = find_or_fail(s, key, &r, errbuf, errlen);
	if (!sn)
		goto out;
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i].info.parent, key) == 0) {
			r = errbuf_fail(-EBUSY, errbuf, errlen,
					"cannot remove snapshot \"%s\": \"%s\" has it as parent",
					key, s->v[i].info.name);
			goto out;
		}
	at = (size_t)(sn - s->v);
	removed = *sn;
	memmove(&s->v[at], &s->v[at + 1], (s->n - at - 1) * sizeof(*s->v));
	s->n--;
	r = save(s);
	if (r < 0) {
		memmove(&s->v[at + 1], &s->v[at], (s->n - at) * sizeof(*s->v));
		s->v[at] = removed;
		s->n++;
		errbuf_fail(r, errbuf, errlen, "cannot write the snapshots' metadata: %s",
			    strerror(-r));
		goto out;
	}
	atomic_fetch_sub(&s->local_bytes, removed.size);
	fault_point("snap-removed");
	snprintf(name, sizeof(name), "%" PRIu64, removed.id);
	/* left for the next cleanup if it fails: nothing names it now */
	remove_tree(s->snaps_fd, name);
	snap_done(&removed);
out:
	pthread_mutex_unlock(&s->lock);
	return r;
}

int snapstore_stat(struct snapstore *s, const char *key, struct snap_info *ret, char *errbuf,
		   size_t errlen)
{
	struct snap *sn;
	int r;

	pthread_mutex_lock(&s->lock);
	sn = find(s, key);
	r = sn ? info_copy(&sn->info, ret) : not_found(key, errbuf, errlen);
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* The new labels of an update: a copy of old changed by info and paths. */
static int updated_labels(const json_t *old, const json_t *given, char *const *paths,
			  size_t n_paths, json_t **ret, char *errbuf, size_t errlen)
{
	_cleanup_(json_decrefp) json_t *l = NULL;

	if (n_paths == 0) {
		l = json_deep_copy(given);
		goto done;
	}
	l = json_deep_copy(old);
	if (!l)
		return -ENOMEM;
	for (size_t i = 0; i < n_paths; i++) {
		const char *p = paths[i];
		json_t *v;

		if (strcmp(p, "labels") == 0) {
			if (json_object_clear(l) < 0 || json_object_update(l, (json_t *)given) < 0)
				return -ENOMEM;
			continue;
		}
		if (strncmp(p, "labels.", 7) != 0 || !p[7])
			return errbuf_fail(-EINVAL, errbuf, errlen,
					   "cannot update field \"%.64s\" of a snapshot", p);
		v = json_object_get(given, p + 7);
		if (v) {
			if (json_object_set(l, p + 7, v) < 0)
				return -ENOMEM;
		} else {
			json_object_del(l, p + 7);
		}
	}
done:
	if (!l)
		return -ENOMEM;
	*ret = TAKE_PTR(l);
	return 0;
}

int snapstore_update(struct snapstore *s, const struct snap_info *info, char *const *paths,
		     size_t n_paths, struct snap_info *ret, char *errbuf, size_t errlen)
{
	struct snap *sn;
	json_t *nl = NULL, *old;
	int64_t old_updated;
	int r;

	pthread_mutex_lock(&s->lock);
	sn = find_or_fail(s, info->name, &r, errbuf, errlen);
	if (!sn)
		goto out;
	r = updated_labels(sn->info.labels, info->labels, paths, n_paths, &nl, errbuf, errlen);
	if (r == 0)
		r = snapstore_check_labels(nl, errbuf, errlen);
	if (r < 0) {
		json_decref(nl);
		goto out;
	}
	old = sn->info.labels;
	old_updated = sn->info.updated_ns;
	sn->info.labels = nl;
	sn->info.updated_ns = now_ns();
	r = save(s);
	if (r < 0) {
		sn->info.labels = old;
		sn->info.updated_ns = old_updated;
		json_decref(nl);
		errbuf_fail(r, errbuf, errlen, "cannot write the snapshots' metadata: %s",
			    strerror(-r));
		goto out;
	}
	json_decref(old);
	r = info_copy(&sn->info, ret);
out:
	pthread_mutex_unlock(&s->lock);
	return r;
}

int snapstore_walk(struct snapstore *s, int (*fn)(void *userdata, const struct snap_info *info),
		   void *userdata)
{
	int r = 0;

	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n && r == 0; i++)
		r = fn(userdata, &s->v[i].info);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int snapstore_walk_remote(struct snapstore *s, int (*fn)(void *userdata, const char *path),
			  void *userdata)
{
	int r = 0;

	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n && r == 0; i++)
		if (s->v[i].remote)
			r = fn(userdata, s->v[i].remote);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int snapstore_usage(struct snapstore *s, const char *key, int64_t *ret_size, int64_t *ret_inodes,
		    char *errbuf, size_t errlen)
{
	struct snap *sn;
	int64_t size = 0, inodes = 0;
	uint64_t active = 0;
	int r = 0;

	pthread_mutex_lock(&s->lock);
	sn = find(s, key);
	if (!sn)
		r = not_found(key, errbuf, errlen);
	else if (sn->info.kind == SNAP_ACTIVE)
		active = sn->id;
	else if (sn->info.kind == SNAP_COMMITTED)
		size = sn->size, inodes = sn->inodes;
	pthread_mutex_unlock(&s->lock);
	/* measured without the lock, then kept (and counted) if the
	 * snapshot is still the one measured, still active */
	if (active) {
		measure_snapshot(s, active, &size, &inodes);
		pthread_mutex_lock(&s->lock);
		sn = find(s, key);
		if (sn && sn->id == active && sn->info.kind == SNAP_ACTIVE) {
			atomic_fetch_add(&s->local_bytes, size - sn->size);
			sn->size = size;
			sn->inodes = inodes;
		}
		pthread_mutex_unlock(&s->lock);
	}
	if (r == 0) {
		*ret_size = size;
		*ret_inodes = inodes;
	}
	return r;
}

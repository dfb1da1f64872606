/* The namespace: images/, the registry hosts and repository directories
 * below it (interned by path), docker.io short forms as symlinks, as the
 * path form (registry/pathform.h) makes them, and the lookup of the name
 * that closes a reference, which runs ensure without holding a worker
 * thread. */
#include "fs-private.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "macro.h"
#include "manager.h"
#include "pathform.h"
#include "reference.h"
#include "strmap.h"

void ns_stat(struct fs *fs, fuse_ino_t ino, const struct nsnode *n, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	if (n && n->kind == NS_LAYERS) {
		layers_stat(fs, n, st);
		return;
	}
	st->st_uid = 0;
	st->st_gid = 0;
	st->st_mtim = st->st_ctim = st->st_atim = fs->started;
	st->st_blksize = 4096;
	if (n && n->kind == NS_SYMLINK) {
		st->st_mode = S_IFLNK | 0777;
		st->st_nlink = 1;
		st->st_size = (off_t)strlen(n->target);
	} else {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		st->st_size = 4096;
	}
	if (n && n->kind == NS_DIR) {
		pthread_mutex_lock(&fs->ns_lock);
		st->st_mtim = st->st_ctim = n->mtime;
		pthread_mutex_unlock(&fs->ns_lock);
	}
}

static struct nsnode *nsnode_new(enum nskind kind, bool short_form, unsigned depth, char *prefix,
				 char *target)
{
	struct nsnode *n = calloc(1, sizeof(*n));

	if (!n) {
		free(prefix);
		free(target);
		return NULL;
	}
	n->nlookup = 1;
	n->owner = NS_NO_OWNER;
	n->kind = kind;
	n->short_form = short_form;
	n->depth = depth;
	n->prefix = prefix;
	n->target = target;
	return n;
}

void nsnode_free(struct nsnode *n)
{
	layers_node_free(n->lnode);
	free(n->key);
	free(n->prefix);
	free(n->target);
	free(n);
}

/* ---- node ids ---------------------------------------------------------- */

static uint64_t name_hash(const char *s)
{
	uint64_t h = UINT64_C(1469598103934665603);

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * UINT64_C(1099511628211);
	return h;
}

static void ino_name(fuse_ino_t ino, char name[20])
{
	snprintf(name, 20, "%" PRIx64, (uint64_t)ino);
}

/* A namespace node's id is a hash of its path, so that a path has the same
 * id in every run of the daemon; one that collides with a live node's
 * probes on.  fs.ns_lock held (or no other thread yet). */
static int nsnode_assign_ino(struct fs *fs, struct nsnode *n)
{
	fuse_ino_t ino = INO_NS_BIT | (name_hash(n->key) & (INO_NS_BIT - 1));
	char name[20];

	for (;;) {
		ino_name(ino, name);
		if (!strmap_get(fs->nsinos, name))
			break;
		ino = INO_NS_BIT | ((ino + 1) & (INO_NS_BIT - 1));
	}
	if (strmap_put(fs->nsinos, name, n) < 0)
		return -ENOMEM;
	n->ino = ino;
	return 0;
}

struct nsnode *ino_nsnode(struct fs *fs, fuse_ino_t ino)
{
	struct nsnode *n;
	char name[20];

	if ((ino & (INO_IMAGE_BIT | INO_NS_BIT)) != INO_NS_BIT)
		return NULL;
	ino_name(ino, name);
	pthread_mutex_lock(&fs->ns_lock);
	n = strmap_get(fs->nsinos, name);
	pthread_mutex_unlock(&fs->ns_lock);
	return n;
}

int ns_init(struct fs *fs)
{
	fs->nsnodes = strmap_new();
	fs->nsinos = strmap_new();
	fs->nsusers = strmap_new();
	if (!fs->nsnodes || !fs->nsinos || !fs->nsusers)
		return -ENOMEM;
	fs->images.owner = NS_NO_OWNER;
	fs->images.key = (char *)"";
	fs->images.permanent = true;
	fs->images.kind = NS_DIR;
	fs->images.prefix = (char *)"";
	fs->images.mtime = fs->started;
	if (nsnode_assign_ino(fs, &fs->images) < 0)
		return -ENOMEM;
	return layers_init(fs);
}

/* ---- nodes per user ----------------------------------------------------
 *
 * Every name below images/ (or layers/) that is not a reference makes a
 * node that the kernel keeps until memory runs short, and that is noted
 * in the hand-over log; any local user can make them by the million.  So
 * the nodes a user other than root made are counted while the kernel
 * holds them.  Beyond the limit, the user's oldest nodes that hold nothing
 * (no node below them, no image root handed out in them: dropping those
 * would detach what is mounted below) are evicted: the notifier asks the
 * kernel to drop their dentries, and the kernel forgets each one no
 * process works in at once.  The next lookup of the path makes the same
 * node again, with the same id.  A node still there seconds after it was
 * asked for is one a process holds: once a user holds the limit so, or
 * has eight times it (eviction cannot keep up), their new nodes are
 * refused. */

/* Nodes looked at, and evicted, for each node made beyond the limit:
 * more than one, so that eviction outpaces a user who keeps some held. */
#define EVICT_SCAN 16
#define EVICT_PER_NODE 4
#define LIMIT_EVENT_INTERVAL_NS (INT64_C(10) * 1000000000)
/* A node still there this long after it was asked for is held: the
 * kernel forgets one that nothing holds at once. */
#define STUCK_AFTER_NS (INT64_C(2) * 1000000000)

struct nsuser {
	struct dlist nodes; /* oldest first */
	unsigned stuck;	    /* of them, those a process holds */
	int64_t warned_ns;  /* the last UserLimit event */
};

struct victim {
	fuse_ino_t parent;
	char *name;
};

static unsigned ns_limit(const struct fs *fs)
{
	return fs->opts.max_ns_nodes_per_user ?: FS_DEFAULT_NS_NODES_PER_USER;
}

static void uid_name(uid_t uid, char name[12])
{
	snprintf(name, 12, "%u", (unsigned)uid);
}

/* The user's entry, made if need be; NULL short of memory.  fs.ns_lock
 * held. */
static struct nsuser *nsuser_get_locked(struct fs *fs, uid_t uid)
{
	struct nsuser *u;
	char name[12];

	uid_name(uid, name);
	u = strmap_get(fs->nsusers, name);
	if (u)
		return u;
	u = calloc(1, sizeof(*u));
	if (u && strmap_put(fs->nsusers, name, u) < 0) {
		free(u);
		u = NULL;
	}
	return u;
}

/* The node right above key's, if live.  fs.ns_lock held. */
static struct nsnode *parent_locked(struct fs *fs, const char *key)
{
	const char *slash = strrchr(key, '/');
	_cleanup_free_ char *up = NULL;

	if (!slash)
		return *key ? &fs->images : NULL;
	if (slash == key)
		return NULL; /* layers/, whose parent is the root */
	up = strndup(key, (size_t)(slash - key));
	return up ? strmap_get(fs->nsnodes, up) : NULL;
}

static void uncharge_locked(struct fs *fs, struct nsnode *n)
{
	struct nsnode *p = parent_locked(fs, n->key);
	struct nsuser *u;
	char name[12];

	if (p && p->children)
		p->children--;
	if (n->owner == NS_NO_OWNER)
		return;
	uid_name(n->owner, name);
	u = strmap_get(fs->nsusers, name);
	if (u) {
		dlist_remove(&u->nodes, &n->by_owner);
		if (n->stuck)
			u->stuck--;
		if (!u->nodes.len)
			free(strmap_remove(fs->nsusers, name));
	}
	n->owner = NS_NO_OWNER;
}

/* Picks up to max of u's oldest nodes that hold nothing, n aside, to
 * evict, when u has more than the limit; their count.  Each node looked
 * at goes to the end of the line, so held nodes do not stop the search.
 * fs.ns_lock held. */
static size_t pick_victims_locked(struct fs *fs, struct nsuser *u, const struct nsnode *n,
				  struct victim *v, size_t max)
{
	int64_t now = clock_mono_ns();
	size_t want, got = 0;

	want = u->nodes.len > ns_limit(fs) ? MIN(u->nodes.len - ns_limit(fs), max) : 0;
	for (unsigned i = 0; i < EVICT_SCAN && got < want; i++) {
		struct nsnode *x = dlist_entry(u->nodes.head, struct nsnode, by_owner), *p;
		const char *slash = strrchr(x->key, '/');

		dlist_remove(&u->nodes, &x->by_owner);
		dlist_push(&u->nodes, &x->by_owner);
		if (x == n || x->children || x->holds_roots || !(p = parent_locked(fs, x->key)))
			continue;
		if (x->evict_ns && now - x->evict_ns < STUCK_AFTER_NS)
			continue; /* asked for already, its FORGET on the way */
		v[got].name = strdup(slash ? slash + 1 : x->key);
		if (!v[got].name)
			break;
		v[got++].parent = p->ino;
		if (x->evict_ns && !x->stuck) {
			x->stuck = true;
			u->stuck++;
		}
		x->evict_ns = now;
	}
	return got;
}

/* Charges n, just made, to u (NULL: nobody).  fs.ns_lock held. */
static void charge_locked(struct fs *fs, struct nsnode *n, uid_t uid, struct nsuser *u)
{
	struct nsnode *p = parent_locked(fs, n->key);

	if (p)
		p->children++;
	if (u) {
		n->owner = uid;
		dlist_push(&u->nodes, &n->by_owner);
	}
}

void ns_holds_roots(struct fs *fs, struct nsnode *n)
{
	pthread_mutex_lock(&fs->ns_lock);
	n->holds_roots = true;
	pthread_mutex_unlock(&fs->ns_lock);
}

void nsnode_forget(struct fs *fs, struct nsnode *n, uint64_t count)
{
	char name[20];

	if (n->permanent)
		return;
	pthread_mutex_lock(&fs->ns_lock);
	if (n->nlookup <= count || n->restored) {
		if (strmap_get(fs->nsnodes, n->key) == n) {
			uncharge_locked(fs, n);
			strmap_remove(fs->nsnodes, n->key);
			/* under ns_lock: before the "ns" of a node made again */
			takeover_note_ns_forgotten(fs, n->key);
		}
		ino_name(n->ino, name);
		if (strmap_get(fs->nsinos, name) == n)
			strmap_remove(fs->nsinos, name);
		nsnode_free(n);
	} else {
		n->nlookup -= count;
	}
	pthread_mutex_unlock(&fs->ns_lock);
}

/* The node already known for key with one more lookup, or NULL. */
static struct nsnode *nsnode_find(struct fs *fs, const char *key)
{
	struct nsnode *n;

	pthread_mutex_lock(&fs->ns_lock);
	n = strmap_get(fs->nsnodes, key);
	if (n)
		n->nlookup++;
	pthread_mutex_unlock(&fs->ns_lock);
	return n;
}

/* Makes the fresh node n the one for key, or, when another lookup won
 * the race, frees n and returns that one (with a lookup taken).  A node
 * made for req (NULL: by the daemon) is charged to its caller unless that
 * is root.  NULL with *ret_err: -EAGAIN (the caller's limit), -ENOMEM. */
static struct nsnode *nsnode_intern(struct fs *fs, fuse_req_t req, const char *key,
				    struct nsnode *n, int *ret_err)
{
	uid_t uid = req ? fuse_req_ctx(req)->uid : 0;
	struct victim v[EVICT_PER_NODE];
	struct nsnode *other;
	struct nsuser *u = NULL;
	bool refused = false, warn = false;
	size_t n_victims = 0;
	unsigned held = 0;

	*ret_err = -ENOMEM;
	if (!n)
		return NULL;
	n->mtime = fs->started;
	n->key = strdup(key);
	if (!n->key) {
		nsnode_free(n);
		return NULL;
	}
	pthread_mutex_lock(&fs->ns_lock);
	other = strmap_get(fs->nsnodes, key);
	if (!other && uid != 0) {
		u = nsuser_get_locked(fs, uid);
		if (!u) {
			pthread_mutex_unlock(&fs->ns_lock);
			nsnode_free(n);
			return NULL;
		}
		refused = u->stuck >= ns_limit(fs) || u->nodes.len >= 8 * (size_t)ns_limit(fs);
		if (refused && clock_mono_ns() - u->warned_ns >= LIMIT_EVENT_INTERVAL_NS) {
			u->warned_ns = clock_mono_ns();
			warn = true;
			held = u->nodes.len;
		}
	}
	if (other) {
		other->nlookup++;
	} else if (refused) {
		/* what may have been let go of since: room for a next one */
		n_victims = pick_victims_locked(fs, u, NULL, v, EVICT_PER_NODE);
		*ret_err = -EAGAIN;
	} else if (nsnode_assign_ino(fs, n) < 0) {
		pthread_mutex_unlock(&fs->ns_lock);
		nsnode_free(n);
		return NULL;
	} else if (strmap_put(fs->nsnodes, key, n) < 0) {
		char name[20];
		ino_name(n->ino, name);
		strmap_remove(fs->nsinos, name);
		pthread_mutex_unlock(&fs->ns_lock);
		nsnode_free(n);
		return NULL;
	} else {
		charge_locked(fs, n, uid, u);
		if (u)
			n_victims = pick_victims_locked(fs, u, n, v, EVICT_PER_NODE);
	}
	pthread_mutex_unlock(&fs->ns_lock);
	for (size_t i = 0; i < n_victims; i++) {
		dentries_drop(fs, v[i].parent, v[i].name);
		free(v[i].name);
	}
	if (other || refused) {
		nsnode_free(n);
		if (warn) {
			struct caller who;
			char why[128];
			caller_of(req, &who);
			snprintf(why, sizeof(why),
				 "uid %u holds %u namespace directories the kernel keeps (the "
				 "limit is %u)",
				 (unsigned)uid, held, ns_limit(fs));
			manager_user_limit(fs->manager, key, &who, why);
		}
		return other;
	}
	/* before the kernel hears of it: the next process must know it (and
	 * whom to charge it to) */
	takeover_note_ns(fs, key, u ? uid : NS_NO_OWNER);
	return n;
}

void caller_of(fuse_req_t req, struct caller *c)
{
	caller_ids(req, c);
	caller_name(c);
}

void caller_ids(fuse_req_t req, struct caller *c)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	memset(c, 0, sizeof(*c));
	c->pid = ctx->pid;
	c->uid = ctx->uid;
	c->gid = ctx->gid;
}

void ns_reply_image_root(fuse_req_t req, struct fs *fs, struct image *img, double entry_timeout)
{
	struct fuse_entry_param e = { 0 };
	const struct tinode *root = image_root(img);

	e.ino = node_ino(img, root);
	e.generation = image_generation(img);
	image_stat(e.ino, root, &e.attr);
	root_mode_private(fs, img, root, &e.attr);
	e.attr_timeout = fs->opts.content_timeout;
	/* The kernel keeps a lookup for every user.  Who may see content
	 * pulled with credentials is enforced by the kernel from the root's
	 * ACL (fs.c); without ACLs, such a root is looked up again by each
	 * path walk, so that each caller is checked (access.h). */
	e.entry_timeout =
		!fs->posix_acl && manager_image_private(fs->manager, img) ? 0 : entry_timeout;
	/* The reference from ensure becomes the kernel's lookup reference. */
	image_kernel_adopt(img);
	if (fuse_reply_entry(req, &e) != 0)
		image_kernel_forget(img, 1);
}

struct nsnode *ns_find(struct fs *fs, const char *key)
{
	return nsnode_find(fs, key);
}

struct nsnode *ns_intern_for(fuse_req_t req, struct fs *fs, const char *key, enum nskind kind,
			     struct lnode *ln, int *ret_err)
{
	struct nsnode *n = nsnode_new(kind, false, 0, NULL, NULL);

	if (!n) {
		layers_node_free(ln);
		*ret_err = -ENOMEM;
		return NULL;
	}
	n->lnode = ln;
	return nsnode_intern(fs, req, key, n, ret_err);
}

struct nsnode *ns_intern(struct fs *fs, const char *key, enum nskind kind, struct lnode *ln)
{
	int r;

	return ns_intern_for(NULL, fs, key, kind, ln, &r);
}

void ns_reply_node(fuse_req_t req, struct fs *fs, struct nsnode *n)
{
	struct fuse_entry_param e = { 0 };

	e.ino = n->ino;
	e.generation = 1;
	ns_stat(fs, e.ino, n, &e.attr);
	e.attr_timeout = fs->opts.namespace_timeout;
	e.entry_timeout = fs->opts.namespace_timeout;
	if (fuse_reply_entry(req, &e) != 0)
		nsnode_forget(fs, n, 1);
}

/* A lookup of images/<ref> waiting for ensure.  No worker thread waits
 * with it: the flight's end answers it from the flight's thread, or an
 * interrupt answers EINTR when the caller is dying (killwatch.h), and a
 * lookup never waits for another reference's pull.  A caller that a
 * handled signal interrupted keeps waiting for its image, watched until
 * the answer, which is EINTR if it is found dying first.  Which answer
 * goes out is decided under lc.lock; the request's own lock, which
 * libfuse holds around every interrupt callback and
 * fuse_req_interrupt_func() takes, keeps the callback from running once
 * the flight's end has unregistered it, and the flight's end ends the
 * watch before it lets the call go. */
struct lookup_call {
	pthread_mutex_t lock;
	atomic_int refs; /* the handler's and the pending ensure's */
	fuse_req_t req;
	struct fs *fs;
	struct ensure_call *call; /* lock */
	bool interrupted;	  /* lock */
	bool finished;		  /* lock: the answer is decided */
	bool watched;		  /* lock: watch was added */
	struct killwatch_entry watch;
	uint64_t parent;
	int64_t start_ns;
	ns_then_fn *then; /* NULL: the image root is the answer */
	void *then_data;
	char *reference; /* canonical, for dentries_note(); NULL when unparsed */
	char name[];
};

static void lookup_call_free(struct lookup_call *lc)
{
	pthread_mutex_destroy(&lc->lock);
	free(lc->reference);
	free(lc);
}

static void lookup_call_put(struct lookup_call *lc)
{
	if (atomic_fetch_sub(&lc->refs, 1) == 1)
		lookup_call_free(lc);
}

static void lookup_reply(struct lookup_call *lc, int r, struct image *img)
{
	struct fs *fs = lc->fs;

	if (lc->then) {
		lc->then(lc->req, fs, r, img, lc->then_data);
	} else if (r < 0) {
		reply_err(lc->req, r);
	} else {
		struct nsnode *parent = ino_nsnode(fs, lc->parent);

		/* (the kernel holds the directory it looks up in) */
		if (parent)
			ns_holds_roots(fs, parent);
		if (lc->reference) {
			dentries_note(fs, lc->reference, lc->parent, lc->name);
			takeover_note_image(fs, img, lc->reference);
		}
		ns_reply_image_root(lc->req, fs, img, fs->opts.image_timeout);
	}
	fsop_done(fs, FSOP_LOOKUP, lc->start_ns);
}

static void lookup_done(void *userdata, int r, struct image *img)
{
	struct lookup_call *lc = userdata;
	bool watched;

	/* The handler may still be between starting ensure and recording
	 * the call: wait for it. */
	pthread_mutex_lock(&lc->lock);
	lc->finished = true;
	watched = lc->watched;
	pthread_mutex_unlock(&lc->lock);
	if (watched)
		killwatch_remove(lc->fs->killwatch, &lc->watch);
	fuse_req_interrupt_func(lc->req, NULL, NULL);
	lookup_reply(lc, r, img);
	lookup_call_put(lc);
}

/* Called with lc->lock held, the call interrupted and recorded and its
 * answer not decided: true when the answer is EINTR, now (the ensure
 * cancelled: the caller answers and puts the ensure's reference);
 * otherwise the caller is watched. */
static bool lookup_interrupted_locked(struct lookup_call *lc)
{
	if (killwatch_dying(lc->watch.tid) ||
	    /* (a watcher that cannot start: EINTR, as the caller cannot
	     * be seen dying later) */
	    (!lc->watched && killwatch_add(lc->fs->killwatch, &lc->watch) < 0)) {
		if (ensure_call_cancel(lc->call))
			return lc->finished = true;
		return false;
	}
	lc->watched = true;
	return false;
}

/* Called with the request's lock held. */
static void lookup_interrupt(fuse_req_t req, void *data)
{
	struct lookup_call *lc = data;
	bool claimed = false;

	pthread_mutex_lock(&lc->lock);
	lc->interrupted = true;
	if (lc->call && !lc->finished)
		claimed = lookup_interrupted_locked(lc);
	pthread_mutex_unlock(&lc->lock);
	if (claimed) {
		lookup_reply(lc, -EINTR, NULL);
		lookup_call_put(lc);
	}
}

/* The watcher found the caller dying. */
static void lookup_dying(struct killwatch_entry *e)
{
	struct lookup_call *lc = e->data;
	bool claimed = false;

	pthread_mutex_lock(&lc->lock);
	if (!lc->finished && ensure_call_cancel(lc->call))
		claimed = lc->finished = true;
	pthread_mutex_unlock(&lc->lock);
	if (claimed) {
		lookup_reply(lc, -EINTR, NULL);
		lookup_call_put(lc);
	}
}

/* A lookup that runs ensure: step's reference, parsed, is handed to
 * ensure (a text outside the grammar as it is, for ensure to report), and
 * the answer is the image root, or then's.  Returns true when the answer
 * is left to the flight or an interrupt. */
static bool ensure_lookup(fuse_req_t req, struct fs *fs, struct nsnode *parent, const char *name,
			  struct pathform_step *step, ns_then_fn *then, void *then_data)
{
	struct lookup_call *lc;
	struct ensure_call *call;
	struct image *img = NULL;
	struct caller who;
	bool claimed = false;
	int r;

	lc = calloc(1, sizeof(*lc) + strlen(name) + 1);
	if (!lc) {
		if (then)
			then(req, fs, -ENOMEM, NULL, then_data);
		else
			reply_err(req, -ENOMEM);
		return false;
	}
	pthread_mutex_init(&lc->lock, NULL);
	atomic_init(&lc->refs, 2);
	lc->req = req;
	lc->fs = fs;
	lc->parent = parent->ino;
	lc->start_ns = clock_mono_ns();
	lc->then = then;
	lc->then_data = then_data;
	strcpy(lc->name, name);
	if (step->ref && !(lc->reference = reference_to_string(step->ref))) {
		free(lc);
		if (then)
			then(req, fs, -ENOMEM, NULL, then_data);
		else
			reply_err(req, -ENOMEM);
		return false;
	}
	caller_of(req, &who);
	lc->watch.tid = who.pid;
	lc->watch.dying = lookup_dying;
	lc->watch.data = lc;
	/* Registered first: an interrupt that came already is noted now. */
	fuse_req_interrupt_func(req, lookup_interrupt, lc);
	pthread_mutex_lock(&lc->lock);
	if (step->ref)
		r = manager_ensure_start_ref(fs->manager, TAKE_PTR(step->ref), &who, lookup_done,
					     lc, &call, &img);
	else
		r = manager_ensure_start(fs->manager, step->text, &who, lookup_done, lc, &call,
					 &img);
	if (r != 0) {
		lc->finished = true;
	} else {
		lc->call = call;
		if (lc->interrupted)
			claimed = lookup_interrupted_locked(lc);
	}
	pthread_mutex_unlock(&lc->lock);
	if (r == 0 && !claimed) {
		lookup_call_put(lc);
		return true;
	}
	fuse_req_interrupt_func(req, NULL, NULL);
	lookup_reply(lc, claimed ? -EINTR : r, img);
	/* Both references are this thread's: the ensure did not start, or
	 * was cancelled before it could answer. */
	lookup_call_free(lc);
	return true;
}

bool ns_ensure_lookup(fuse_req_t req, struct fs *fs, struct nsnode *parent, const char *name,
		      const char *reference, ns_then_fn *then, void *userdata)
{
	struct pathform_step step = { .text = (char *)reference };

	return ensure_lookup(req, fs, parent, name, &step, then, userdata);
}

static bool known_host(void *userdata, const char *host)
{
	return manager_is_known_host(userdata, host);
}

/* The node for name below parent, step being its pathform step (taken),
 * with one lookup taken, made for req (NULL: by the daemon); NULL with
 * *ret_err. */
static struct nsnode *ns_child(fuse_req_t req, struct fs *fs, struct nsnode *parent,
			       const char *name, struct pathform_step *step, int *ret_err)
{
	_cleanup_free_ char *key = pathform_join(parent->key, name);
	struct nsnode *n;

	*ret_err = -ENOMEM;
	if (!key) {
		pathform_step_done(step);
		return NULL;
	}
	n = nsnode_find(fs, key);
	if (n) {
		pathform_step_done(step);
		return n;
	}
	switch (step->kind) {
	case PATHFORM_HOST:
	case PATHFORM_DIR:
		n = nsnode_new(NS_DIR, step->dir.short_form, step->dir.depth,
			       TAKE_PTR(step->dir.prefix), NULL);
		break;
	case PATHFORM_SHORT_LINK:
		n = nsnode_new(NS_SYMLINK, true, step->dir.depth, NULL, TAKE_PTR(step->target));
		break;
	default:
		*ret_err = step->err;
		pathform_step_done(step);
		return NULL;
	}
	pathform_step_done(step);
	return nsnode_intern(fs, req, key, n, ret_err);
}

bool ns_lookup(fuse_req_t req, struct fs *fs, struct nsnode *parent, const char *name)
{
	const struct pathform_dir dir = { .depth = parent->depth,
					  .short_form = parent->short_form,
					  .prefix = parent->prefix };
	struct pathform_step step;
	struct nsnode *n = NULL;
	bool answered_later;
	int r;

	if (parent->kind == NS_LAYERS)
		return layers_lookup(req, fs, parent, name);
	if (parent->kind != NS_DIR) {
		reply_err(req, -ENOTDIR);
		return false;
	}
	r = pathform_step(&dir, name, known_host, fs->manager, &step);
	if (r < 0) {
		reply_err(req, r);
		return false;
	}
	if (step.kind == PATHFORM_REFERENCE) {
		answered_later = ensure_lookup(req, fs, parent, name, &step, NULL, NULL);
		pathform_step_done(&step);
		return answered_later;
	}

	n = ns_child(req, fs, parent, name, &step, &r);
	if (!n && r == -EINVAL && strpbrk(name, ":@")) {
		/* Meant as a reference (a tag, a digest or a port), if not
		 * a valid one: ensure would have said so in the events log.
		 * Other names are no reference at all (a directory in
		 * capitals; probes of programs are ENOENT): no event. */
		_cleanup_free_ char *key = pathform_join(parent->key, name);
		struct caller who;
		caller_of(req, &who);
		if (key)
			manager_invalid_reference(fs->manager, key, &who);
	}
	if (!n) {
		reply_err(req, r);
		return false;
	}
	ns_reply_node(req, fs, n);
	return false;
}

void ns_restored(struct fs *fs, struct nsnode *n)
{
	pthread_mutex_lock(&fs->ns_lock);
	n->restored = true;
	pthread_mutex_unlock(&fs->ns_lock);
}

/* The node of key, just restored, charged again to the user the process
 * before charged it to (NS_NO_OWNER: nobody), who may have it
 * evicted like their other nodes. */
static void recharge(struct fs *fs, const char *key, uid_t owner)
{
	struct nsnode *n;
	struct nsuser *u;

	if (owner == NS_NO_OWNER || owner == 0)
		return;
	pthread_mutex_lock(&fs->ns_lock);
	n = strmap_get(fs->nsnodes, key);
	if (n && !n->permanent && n->owner == NS_NO_OWNER && (u = nsuser_get_locked(fs, owner))) {
		n->owner = owner;
		dlist_push(&u->nodes, &n->by_owner);
	}
	pthread_mutex_unlock(&fs->ns_lock);
}

static int restore_path(struct fs *fs, const char *key);

int ns_restore(struct fs *fs, const char *key, uid_t owner)
{
	/* the layer store's keys are absolute (layers.c) */
	int r = key[0] == '/' ? layers_restore(fs, key) : restore_path(fs, key);

	if (r == 0)
		recharge(fs, key, owner);
	return r;
}

static int restore_path(struct fs *fs, const char *key)
{
	_cleanup_free_ char *copy = strdup(key);
	struct nsnode *parent = &fs->images, *n;
	char *save = NULL;
	int r;

	if (!copy)
		return -ENOMEM;
	for (char *name = strtok_r(copy, "/", &save); name; name = strtok_r(NULL, "/", &save)) {
		const struct pathform_dir dir = { .depth = parent->depth,
						  .short_form = parent->short_form,
						  .prefix = parent->prefix };
		struct pathform_step step;

		if (parent->kind != NS_DIR)
			return -ENOTDIR;
		r = pathform_step(&dir, name, known_host, fs->manager, &step);
		if (r < 0)
			return r;
		if (step.kind == PATHFORM_REFERENCE) {
			/* an image root: restored by its key */
			pathform_step_done(&step);
			return 0;
		}
		n = ns_child(NULL, fs, parent, name, &step, &r);
		if (!n)
			return r;
		ns_restored(fs, n);
		parent = n;
	}
	return 0;
}

struct dirs_ctx {
	struct nsnode **dirs;
	size_t n;
};

static int collect_dir(void *userdata, const char *key, void *value)
{
	struct dirs_ctx *c = userdata;
	struct nsnode *n = value;

	if (n->kind == NS_DIR)
		c->dirs[c->n++] = n;
	return 0;
}

void ns_restore_roots(struct fs *fs, const char *reference)
{
	const char *slash = strrchr(reference, '/');
	const char *name = slash ? slash + 1 : reference;
	struct dirs_ctx c = { 0 };

	pthread_mutex_lock(&fs->ns_lock);
	c.dirs = calloc(strmap_size(fs->nsnodes) + 1, sizeof(*c.dirs));
	if (c.dirs) {
		c.dirs[c.n++] = &fs->images;
		strmap_foreach(fs->nsnodes, collect_dir, &c);
	}
	pthread_mutex_unlock(&fs->ns_lock);
	/* (no request is served yet: the nodes cannot go meanwhile) */
	for (size_t i = 0; i < c.n; i++) {
		const struct nsnode *n = c.dirs[i];
		const struct pathform_dir dir = { .depth = n->depth,
						  .short_form = n->short_form,
						  .prefix = n->prefix };
		struct pathform_step step;
		_cleanup_free_ char *canonical = NULL;

		if (pathform_step(&dir, name, known_host, fs->manager, &step) < 0)
			continue;
		if (step.kind == PATHFORM_REFERENCE && step.ref)
			canonical = reference_to_string(step.ref);
		pathform_step_done(&step);
		if (canonical && !strcmp(canonical, reference)) {
			ns_holds_roots(fs, c.dirs[i]);
			dentries_note(fs, reference, n->ino, name);
			takeover_restored_dentry(fs, reference, NULL, n->ino, name);
		}
	}
	free(c.dirs);
}

/* ---- listings --------------------------------------------------------- */

/* Namespace listings are made afresh at every READDIR, since no handle
 * carries them from OPENDIR (there is none).  Each name's offset is a
 * cookie hashed from the name, and a listing is walked in cookie order,
 * so a later READDIR resumes after the last name it returned even when
 * names came or went in between: a name added or removed meanwhile is
 * seen or missed, never another one twice.  (Two names with one 62-bit
 * cookie would hide the second when a reply ends between them.) */
struct nsentry {
	uint64_t cookie; /* > 2: 1 and 2 are "." and ".." */
	bool file;	 /* a regular file (the control view) */
	char name[];
};

struct nslisting {
	struct nsentry **e;
	size_t n, cap;
	bool files;
};

int ns_listing_add(struct nslisting *l, const char *name, bool file)
{
	size_t len = strlen(name);
	struct nsentry *e;

	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct nsentry **n = realloc(l->e, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		l->e = n;
		l->cap = cap;
	}
	e = malloc(sizeof(*e) + len + 1);
	if (!e)
		return -ENOMEM;
	e->cookie = (name_hash(name) >> 2) + 3;
	e->file = file;
	memcpy(e->name, name, len + 1);
	l->e[l->n++] = e;
	return 0;
}

static int listing_add(void *userdata, const char *name, bool is_image)
{
	struct nslisting *l = userdata;

	return ns_listing_add(l, name, l->files);
}

static void listing_done(struct nslisting *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->e[i]);
	free(l->e);
}

static int entry_cmp(const void *a, const void *b)
{
	const struct nsentry *x = *(struct nsentry *const *)a;
	const struct nsentry *y = *(struct nsentry *const *)b;

	if (x->cookie != y->cookie)
		return x->cookie < y->cookie ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* The names in namespace directory ino that who may see, sorted by
 * cookie; *ret_private is set when they depend on who asks. */
static int ns_list(struct fs *fs, fuse_ino_t ino, const struct caller *who, struct nslisting *l,
		   bool *ret_private)
{
	int r;

	if (ino == FUSE_ROOT_ID) {
		r = listing_add(l, "images", false);
		if (r == 0)
			r = listing_add(l, "layers", false);
	} else if (ino == INO_CTL_DIR) {
		l->files = true;
		r = listing_add(l, "status", false);
		if (r == 0)
			r = listing_add(l, "metrics", false);
	} else if (ino_is_ctl(ino)) {
		r = -ENOTDIR;
	} else {
		const struct nsnode *n = ino_nsnode(fs, ino);
		if (!n)
			r = -ESTALE;
		else if (n->kind == NS_LAYERS)
			r = layers_list(fs, n, l);
		else if (n->kind != NS_DIR)
			r = -ENOTDIR;
		else if (n->short_form)
			/* Short forms list nothing: their content lives under
			 * the canonical docker.io path. */
			r = 0;
		else
			r = manager_list(fs->manager, n->prefix, who, listing_add, l, ret_private);
	}
	if (r == 0 && l->n > 1)
		qsort(l->e, l->n, sizeof(*l->e), entry_cmp);
	return r;
}

/* The kernel does not instantiate namespace entries from a listing (no
 * lookup count is taken); d_ino only has to be plausible. */
static ino_t name_ino(const char *s)
{
	return (ino_t)(name_hash(s) & ~(uint64_t)7) | 4;
}

void ns_readdir(fuse_req_t req, struct fs *fs, fuse_ino_t ino, size_t size, off_t off, bool plus)
{
	struct nslisting l = { 0 };
	_cleanup_free_ char *buf = NULL;
	size_t used = 0, i = 0;
	struct caller who;
	bool private = false;
	int r;

	caller_ids(req, &who); /* (who may see what: ids, no name) */
	r = ns_list(fs, ino, &who, &l, &private);
	if (r < 0) {
		listing_done(&l);
		reply_err(req, r);
		return;
	}
	buf = calloc(1, size);
	if (!buf) {
		listing_done(&l);
		reply_err(req, -ENOMEM);
		return;
	}
	/* Skip what an earlier READDIR returned. */
	while (i < l.n && (off_t)l.e[i]->cookie <= off)
		i++;
	for (off_t dot = off; dot < 2; dot++) {
		struct fuse_entry_param e = { 0 };
		const char *name = dot == 0 ? "." : "..";
		size_t n;

		e.attr.st_mode = S_IFDIR | 0555;
		e.attr.st_ino = ino;
		n = plus ? fuse_add_direntry_plus(req, buf + used, size - used, name, &e, dot + 1)
			 : fuse_add_direntry(req, buf + used, size - used, name, &e.attr, dot + 1);
		if (n > size - used)
			goto out;
		used += n;
	}
	for (; i < l.n; i++) {
		struct fuse_entry_param e = { 0 };
		const struct nsentry *x = l.e[i];
		size_t n;

		e.attr.st_mode = x->file ? S_IFREG | 0444 : S_IFDIR | 0555;
		e.attr.st_ino = name_ino(x->name);
		n = plus ? fuse_add_direntry_plus(req, buf + used, size - used, x->name, &e,
						  (off_t)x->cookie)
			 : fuse_add_direntry(req, buf + used, size - used, x->name, &e.attr,
					     (off_t)x->cookie);
		if (n > size - used)
			break;
		used += n;
	}
out:
	listing_done(&l);
	/* The kernel keeps a listing for every user once it has read to its
	 * end, that is on an empty answer (no OPENDIR: fs.c).  A listing
	 * that depends on who reads it is dropped from that cache before
	 * its end is answered, so that the next reader's READDIR comes here
	 * (a cache whose pages went missing is started afresh).  Sent from
	 * the request's thread on purpose: it must precede the answer, and
	 * the kernel holds no page of this directory locked while it waits
	 * for one. */
	if (private && used == 0)
		fuse_lowlevel_notify_inval_inode(fs->session, ino, 0, 0);
	fuse_reply_buf(req, buf, used);
}

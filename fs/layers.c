/* MOUNT/layers/: containers/storage's Additional Layer Store with image
 * references (storage.conf `additionallayerstores = ["MOUNT/layers:ref"]`,
 * docs/layer-store.md).  The engine looks for
 *
 *     layers/<base64 of the reference>/<layer digest>/{diff,info,blob}
 *
 * The lookup of the layer directory runs ensure for the reference, like
 * images/<ref>, then makes the view of that one layer (layerview.h):
 * `diff` is its tree in overlayfs's format, `info` the layer's metadata as
 * the engine's store wants it, `blob` the compressed layer (read from the
 * registry when read at all), and `use` the engine's "in use" marker,
 * which is never there: looking it up is the notification.
 *
 * Go writes standard base64, so an encoded reference may contain "/" and
 * reach us as several components: they are joined until a component that
 * is a layer digest ends the reference. */
#include "fs-private.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "layerview.h"
#include "macro.h"
#include "manager.h"

/* References are short; this bounds what a path can make us decode. */
#define REF_B64_MAX 1024
#define LAYERS_KEY "/layers"

enum lkind {
	LN_ROOT,
	LN_REF,	  /* a reference, or a piece of one */
	LN_LAYER, /* a layer of an ensured image */
	LN_INFO,
	LN_BLOB,
};

struct lnode {
	enum lkind kind;
	char *b64;	    /* LN_REF: the encoded reference so far, "/" kept */
	struct image *view; /* LN_LAYER and its files: one reference held */
};

void layers_node_free(struct lnode *ln)
{
	if (!ln)
		return;
	image_unref(ln->view, 1);
	free(ln->b64);
	free(ln);
}

static struct lnode *lnode_new(enum lkind kind, char *b64, struct image *view)
{
	struct lnode *ln = calloc(1, sizeof(*ln));

	if (!ln) {
		free(b64);
		image_unref(view, 1);
		return NULL;
	}
	ln->kind = kind;
	ln->b64 = b64;
	ln->view = view;
	return ln;
}

int layers_init(struct fs *fs)
{
	struct lnode *ln = lnode_new(LN_ROOT, NULL, NULL);

	if (!ln)
		return -ENOMEM;
	fs->layers = ns_intern(fs, LAYERS_KEY, NS_LAYERS, ln);
	if (!fs->layers)
		return -ENOMEM;
	fs->layers->permanent = true;
	return 0;
}

void layers_stat(struct fs *fs, const struct nsnode *n, struct stat *st)
{
	const struct lnode *ln = n->lnode;
	size_t len;

	st->st_mtim = st->st_ctim = st->st_atim = fs->started;
	st->st_blksize = 4096;
	if (ln->kind == LN_INFO || ln->kind == LN_BLOB) {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = ln->kind == LN_INFO ? (off_t)(layer_view_info(ln->view, &len), len)
						  : (off_t)layer_view_blob_size(ln->view);
	} else {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		st->st_size = 4096;
	}
	st->st_blocks = (st->st_size + 511) / 512;
}

static bool is_layer_digest(const char *s)
{
	if (strncmp(s, "sha256:", 7) || strlen(s) != 71)
		return false;
	return strspn(s + 7, "0123456789abcdef") == 64;
}

static bool is_b64_piece(const char *s)
{
	static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
				       "0123456789+=";

	return *s && strspn(s, alphabet) == strlen(s);
}

/* The reference that b64 encodes, or NULL when it is not one (not strict
 * base64, or control characters inside). */
static char *decode_reference(const char *b64)
{
	size_t len = strlen(b64);
	_cleanup_free_ unsigned char *out = malloc(BASE64_DECODED_MAX(len) + 1);
	ssize_t n;

	if (!out)
		return NULL;
	n = base64_decode(b64, len, true, out);
	if (n <= 0)
		return NULL;
	for (ssize_t i = 0; i < n; i++)
		if (out[i] <= ' ' || out[i] == 0x7f)
			return NULL;
	out[n] = '\0';
	return (char *)TAKE_PTR(out);
}

/* A lookup of a layer directory waiting for ensure. */
struct pending {
	char *key;
	char *reference;
	char digest[72];
};

static void pending_free(struct pending *p)
{
	free(p->key);
	free(p->reference);
	free(p);
}

static void layer_ensured(fuse_req_t req, struct fs *fs, int r, struct image *img, void *userdata)
{
	struct pending *p = userdata;
	struct image *view = NULL;
	struct nsnode *n;
	struct caller who;

	if (r >= 0) {
		caller_of(req, &who);
		r = manager_layer_view(img, p->reference, p->digest, &who, &view);
		if (r >= 0)
			takeover_note_view(fs, view, img, p->reference, p->digest);
		image_unref(img, 1);
	}
	if (r < 0) {
		reply_err(req, r);
	} else {
		n = ns_intern(fs, p->key, NS_LAYERS, lnode_new(LN_LAYER, NULL, view));
		if (n)
			ns_reply_node(req, fs, n);
		else
			reply_err(req, -ENOMEM);
	}
	pending_free(p);
}

static bool layer_lookup(fuse_req_t req, struct fs *fs, struct nsnode *parent, const char *name,
			 char *key)
{
	struct pending *p = calloc(1, sizeof(*p));

	if (!p) {
		free(key);
		reply_err(req, -ENOMEM);
		return false;
	}
	p->key = key;
	strcpy(p->digest, name);
	p->reference = decode_reference(parent->lnode->b64);
	if (!p->reference) {
		pending_free(p);
		reply_err(req, -ENOENT);
		return false;
	}
	return ns_ensure_lookup(req, fs, parent, name, p->reference, layer_ensured, p);
}

/* The files of a layer directory. */
static void file_lookup(fuse_req_t req, struct fs *fs, struct nsnode *parent, const char *name)
{
	struct image *view = parent->lnode->view;
	_cleanup_free_ char *key = NULL;
	enum lkind kind;
	struct nsnode *n;

	if (!strcmp(name, "diff")) {
		/* a view's layer never changes under its name */
		image_ref(view, 1);
		ns_reply_image_root(req, fs, view, fs->opts.content_timeout);
		return;
	}
	if (!strcmp(name, "use")) {
		/* containers/storage creates it to say it uses the layer, and
		 * wants ENOENT from a store that counts; on a read-only mount
		 * the kernel looks the name up first, and that is the note */
		struct caller who;
		caller_of(req, &who);
		layer_view_used(view, &who);
		reply_err(req, -ENOENT);
		return;
	}
	if (!strcmp(name, "info"))
		kind = LN_INFO;
	else if (!strcmp(name, "blob"))
		kind = LN_BLOB;
	else {
		reply_err(req, -ENOENT);
		return;
	}
	if (asprintf(&key, "%s/%s", parent->key, name) < 0) {
		key = NULL;
		reply_err(req, -ENOMEM);
		return;
	}
	n = ns_find(fs, key);
	if (!n) {
		image_ref(view, 1);
		n = ns_intern(fs, key, NS_LAYERS, lnode_new(kind, NULL, view));
	}
	if (n)
		ns_reply_node(req, fs, n);
	else
		reply_err(req, -ENOMEM);
}

bool layers_lookup(fuse_req_t req, struct fs *fs, struct nsnode *parent, const char *name)
{
	const struct lnode *pl = parent->lnode;
	_cleanup_free_ char *key = NULL, *b64 = NULL;
	struct nsnode *n;
	int r = -ENOMEM;

	if (pl->kind == LN_LAYER) {
		file_lookup(req, fs, parent, name);
		return false;
	}
	if (pl->kind != LN_ROOT && pl->kind != LN_REF) {
		reply_err(req, -ENOTDIR);
		return false;
	}
	if (asprintf(&key, "%s/%s", parent->key, name) < 0) {
		key = NULL;
		reply_err(req, -ENOMEM);
		return false;
	}
	if (pl->kind == LN_REF && is_layer_digest(name)) {
		n = ns_find(fs, key);
		if (n) {
			ns_reply_node(req, fs, n);
			return false;
		}
		return layer_lookup(req, fs, parent, name, TAKE_PTR(key));
	}
	if (!is_b64_piece(name) || strlen(key) > REF_B64_MAX) {
		reply_err(req, -ENOENT);
		return false;
	}
	n = ns_find(fs, key);
	if (!n) {
		if (pl->kind == LN_ROOT)
			b64 = strdup(name);
		else if (asprintf(&b64, "%s/%s", pl->b64, name) < 0)
			b64 = NULL; /* undefined after a failure */
		/* any text makes one: charged to whoever looks it up */
		n = b64 ? ns_intern_for(req, fs, key, NS_LAYERS,
					lnode_new(LN_REF, TAKE_PTR(b64), NULL), &r)
			: NULL;
	}
	if (n)
		ns_reply_node(req, fs, n);
	else
		reply_err(req, r);
	return false;
}

int layers_list(struct fs *fs, const struct nsnode *n, struct nslisting *l)
{
	int r = 0;

	/* Only a layer directory has names of its own to show: the store is
	 * keyed by what the engine asks for, not by what is cached. */
	if (n->lnode->kind == LN_LAYER) {
		r = ns_listing_add(l, "diff", false);
		if (r == 0)
			r = ns_listing_add(l, "info", true);
		if (r == 0)
			r = ns_listing_add(l, "blob", true);
	} else if (n->lnode->kind != LN_ROOT && n->lnode->kind != LN_REF) {
		r = -ENOTDIR;
	}
	return r;
}

const struct tree_xattr *layers_getxattr(struct image *img, const struct tinode *t,
					 const char *name)
{
	if (strcmp(name, "user.overlay.opaque") || !image_is_layer_view(img))
		return NULL;
	return tinode_getxattr(t, LAYER_VIEW_OPAQUE_XATTR);
}

static struct nsnode *layer_file(struct fs *fs, fuse_ino_t ino)
{
	struct nsnode *n = ino_nsnode(fs, ino);

	return n && n->kind == NS_LAYERS && (n->lnode->kind == LN_INFO || n->lnode->kind == LN_BLOB)
		       ? n
		       : NULL;
}

bool layers_open(fuse_req_t req, struct fs *fs, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct nsnode *n = layer_file(fs, ino);
	struct caller who;
	int r;

	if (!n)
		return false;
	/* A layer of an image pulled with credentials: its blob and info
	 * are for its readers only, checked at each open (the kernel's ACL
	 * covers the diff tree). */
	caller_of(req, &who);
	r = manager_admit_image(fs->manager, n->lnode->view, layer_view_reference(n->lnode->view),
				&who);
	if (r < 0) {
		reply_err(req, r);
		return true;
	}
	/* immutable, like image files */
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
	return true;
}

bool layers_read(fuse_req_t req, struct fs *fs, fuse_ino_t ino, size_t size, off_t off)
{
	struct nsnode *n = layer_file(fs, ino);
	_cleanup_free_ char *buf = NULL;
	const char *info;
	size_t len;
	ssize_t r;

	if (!n)
		return false;
	if (n->lnode->kind == LN_INFO) {
		info = layer_view_info(n->lnode->view, &len);
		if ((uint64_t)off >= len)
			fuse_reply_buf(req, NULL, 0);
		else
			fuse_reply_buf(req, info + off, MIN(size, len - (size_t)off));
		return true;
	}
	buf = malloc(size ? size : 1);
	if (!buf) {
		reply_err(req, -ENOMEM);
		return true;
	}
	r = layer_view_blob_read(n->lnode->view, (uint64_t)off, size, buf);
	if (r < 0)
		reply_err(req, (int)r);
	else
		fuse_reply_buf(req, buf, (size_t)r);
	return true;
}

int layers_restore(struct fs *fs, const char *key)
{
	const size_t root_len = strlen(LAYERS_KEY);
	_cleanup_free_ char *copy = NULL;
	struct nsnode *parent = fs->layers;
	char *save = NULL;

	if (strncmp(key, LAYERS_KEY, root_len) || (key[root_len] && key[root_len] != '/'))
		return -EINVAL;
	copy = strdup(key + root_len);
	if (!copy)
		return -ENOMEM;
	for (char *name = strtok_r(copy, "/", &save); name; name = strtok_r(NULL, "/", &save)) {
		const struct lnode *pl = parent->lnode;
		_cleanup_free_ char *k = NULL;
		struct lnode *ln = NULL;
		struct nsnode *n;

		if (asprintf(&k, "%s/%s", parent->key, name) < 0) {
			k = NULL;
			return -ENOMEM;
		}
		if (pl->kind == LN_LAYER) {
			/* a file of the layer directory: of its view */
			if (strcmp(name, "info") && strcmp(name, "blob"))
				return -ENOENT;
			image_ref(pl->view, 1);
			ln = lnode_new(strcmp(name, "info") ? LN_BLOB : LN_INFO, NULL, pl->view);
		} else if (pl->kind == LN_REF && is_layer_digest(name)) {
			/* a layer directory: with the view made again from its
			 * image record (takeover.c) */
			_cleanup_free_ char *reference = decode_reference(pl->b64);
			struct image *view = reference ? takeover_view(fs, reference, name) : NULL;

			if (!view)
				return -ESTALE;
			image_ref(view, 1);
			ln = lnode_new(LN_LAYER, NULL, view);
		} else if ((pl->kind == LN_ROOT || pl->kind == LN_REF) && is_b64_piece(name)) {
			char *b64 = NULL;

			if (pl->kind == LN_ROOT)
				b64 = strdup(name);
			else if (asprintf(&b64, "%s/%s", pl->b64, name) < 0)
				b64 = NULL;
			if (!b64)
				return -ENOMEM;
			ln = lnode_new(LN_REF, b64, NULL);
		} else {
			return -ENOENT;
		}
		if (!ln)
			return -ENOMEM;
		n = ns_intern(fs, k, NS_LAYERS, ln);
		if (!n)
			return -ENOMEM;
		ns_restored(fs, n);
		if (n->lnode->kind == LN_LAYER)
			takeover_restored_dentry(fs, NULL, n->lnode->view, parent->ino, name);
		parent = n;
	}
	return 0;
}

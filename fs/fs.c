/* FUSE low-level operations.
 *
 * Three kinds of node, told apart by the inode number alone so the hot
 * path (image nodes) needs no lock: FUSE_ROOT_ID; namespace nodes
 * (images/ and the host / repository directories below it, plus
 * docker.io short-form symlinks), whose ino is a hash of the path
 * (namespace.c); and nodes inside an image, whose ino has the top bit
 * set, the image's key in the bits below and the node's index in its tree
 * in the low 32 bits (node_ino()), so two names of one digest share the
 * tree and still differ in every node id, and one name of one digest has
 * the same node ids in every run.  Every lookup the kernel holds on an
 * image node holds a reference on its image, so an image lives exactly
 * as long as the kernel can still ask about it. */
#include "fs-private.h"

#include <errno.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <endian.h>
#include <linux/posix_acl.h>
#include <linux/posix_acl_xattr.h>
#include <linux/xattr.h>

#include "macro.h"
#include "manager.h"

/* ---- operations ------------------------------------------------------ */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	unsigned want = FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE | FUSE_CAP_READDIRPLUS |
			FUSE_CAP_ASYNC_READ | FUSE_CAP_PARALLEL_DIROPS | FUSE_CAP_CACHE_SYMLINKS;

	conn->want |= conn->capable & want;
	/* Image content never changes under an inode, so the kernel may
	 * keep what it read across opens. */
	conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
	conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
	/* O_DIRECT reads as requests the reader waits for, which the kernel
	 * interrupts when a signal comes (a read of a lazy file can wait
	 * for the network): asynchronous ones it cannot. */
	conn->want &= ~FUSE_CAP_ASYNC_DIO;
	((struct fs *)userdata)->no_opendir = conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT;
	/* Who may see an image pulled with credentials is enforced by the
	 * kernel, for every caller with its own groups, from an ACL on the
	 * image's root (see root_acl()): the entry the kernel keeps for a
	 * name serves every user, so no answer to a lookup can do it. */
	if (conn->capable & FUSE_CAP_POSIX_ACL) {
		conn->want |= FUSE_CAP_POSIX_ACL;
		((struct fs *)userdata)->posix_acl = true;
		manager_set_kernel_enforces_access(((struct fs *)userdata)->manager, true);
	}
}

/* Returns true when the lookup was timed by its own answer. */
static bool do_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs *fs = fs_of(req);

	if (parent == FUSE_ROOT_ID && !strcmp(name, CTL_DIR_NAME)) {
		ctl_reply_entry(req, fs, INO_CTL_DIR);
		return false;
	}
	if (parent == INO_CTL_DIR) {
		if (!strcmp(name, "status"))
			ctl_reply_entry(req, fs, INO_CTL_STATUS);
		else if (!strcmp(name, "metrics"))
			ctl_reply_entry(req, fs, INO_CTL_METRICS);
		else
			reply_err(req, -ENOENT);
		return false;
	}
	if (ino_is_ctl(parent)) {
		reply_err(req, -ENOTDIR);
		return false;
	}
	if (parent == FUSE_ROOT_ID) {
		if (!strcmp(name, "images")) {
			struct fuse_entry_param e = { 0 };
			e.ino = fs->images.ino;
			ns_stat(fs, e.ino, &fs->images, &e.attr);
			e.attr_timeout = e.entry_timeout = fs->opts.content_timeout;
			fuse_reply_entry(req, &e);
			return false;
		}
		if (!strcmp(name, "layers")) {
			ns_reply_node(req, fs, ns_find(fs, fs->layers->key));
			return false;
		}
		reply_err(req, -ENOENT);
		return false;
	}
	if (!ino_is_image(parent)) {
		struct nsnode *n = ino_nsnode(fs, parent);
		if (!n) {
			reply_err(req, -ESTALE);
			return false;
		}
		return ns_lookup(req, fs, n, name);
	}

	struct image *img;
	const struct tinode *dir = ino_node(fs, parent, &img), *t;
	if (!dir) {
		reply_err(req, -ESTALE);
		return false;
	}
	if (!S_ISDIR(dir->mode)) {
		reply_err(req, -ENOTDIR);
		return false;
	}
	t = tinode_lookup(dir, name);
	if (!t) {
		/* Image content is immutable: absence can be cached too. */
		struct fuse_entry_param e = { 0 };
		e.entry_timeout = fs->opts.content_timeout;
		fuse_reply_entry(req, &e);
		return false;
	}
	struct fuse_entry_param e = { 0 };
	e.ino = node_ino(img, t);
	e.generation = image_generation(img);
	image_stat(e.ino, t, &e.attr);
	e.attr_timeout = e.entry_timeout = fs->opts.content_timeout;
	image_kernel_ref(img, 1);
	if (fuse_reply_entry(req, &e) != 0)
		image_kernel_forget(img, 1);
	return false;
}

static void forget_one(struct fs *fs, fuse_ino_t ino, uint64_t nlookup)
{
	struct image *img;

	if (ino == FUSE_ROOT_ID || ino_is_ctl(ino))
		return;
	if (ino_is_image(ino)) {
		/* (a retirement waits for it: takeover.c) */
		pthread_rwlock_rdlock(&fs->takeover.forget_lock);
		if (ino_node(fs, ino, &img)) {
			takeover_forgot(fs, img, ino);
			image_kernel_forget(img, nlookup);
		}
		pthread_rwlock_unlock(&fs->takeover.forget_lock);
	} else {
		struct nsnode *n = ino_nsnode(fs, ino);
		if (n)
			nsnode_forget(fs, n, nlookup);
	}
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	_timed_(FSOP_FORGET);
	forget_one(fs_of(req), ino, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	_timed_(FSOP_FORGET);
	for (size_t i = 0; i < count; i++)
		forget_one(fs_of(req), forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	_timed_(FSOP_GETATTR);
	struct fs *fs = fs_of(req);
	struct stat st;

	if (ino == FUSE_ROOT_ID) {
		ns_stat(fs, ino, NULL, &st);
		fuse_reply_attr(req, &st, fs->opts.namespace_timeout);
	} else if (ino_is_ctl(ino)) {
		ctl_stat(fs, ino, &st);
		fuse_reply_attr(req, &st, 1.0);
	} else if (ino_is_image(ino)) {
		struct image *img;
		const struct tinode *t = ino_node(fs, ino, &img);
		if (!t) {
			reply_err(req, -ESTALE);
			return;
		}
		image_stat(ino, t, &st);
		root_mode_private(fs, img, t, &st);
		fuse_reply_attr(req, &st, fs->opts.content_timeout);
	} else {
		struct nsnode *n = ino_nsnode(fs, ino);
		if (!n) {
			reply_err(req, -ESTALE);
			return;
		}
		ns_stat(fs, ino, n, &st);
		fuse_reply_attr(req, &st, fs->opts.namespace_timeout);
	}
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	_timed_(FSOP_READLINK);
	if (ino == FUSE_ROOT_ID || ino_is_ctl(ino)) {
		reply_err(req, -EINVAL);
	} else if (ino_is_image(ino)) {
		struct image *img;
		const struct tinode *t = ino_node(fs_of(req), ino, &img);
		if (t && S_ISLNK(t->mode) && t->link)
			fuse_reply_readlink(req, t->link);
		else
			reply_err(req, -EINVAL);
	} else {
		struct nsnode *n = ino_nsnode(fs_of(req), ino);
		if (n && n->kind == NS_SYMLINK)
			fuse_reply_readlink(req, n->target);
		else
			reply_err(req, -EINVAL);
	}
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	_timed_(FSOP_OPEN);
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & (O_TRUNC | O_APPEND | O_CREAT))) {
		reply_err(req, -EROFS);
		return;
	}
	if (ino == INO_CTL_STATUS || ino == INO_CTL_METRICS) {
		ctl_open(req, fs_of(req), ino, fi);
		return;
	}
	if (!ino_is_image(ino)) {
		if (!layers_open(req, fs_of(req), ino, fi))
			reply_err(req, -EISDIR);
		return;
	}
	struct image *img;
	const struct tinode *t = ino_node(fs_of(req), ino, &img);
	if (!t) {
		reply_err(req, -ESTALE);
		return;
	}
	if (S_ISDIR(t->mode)) {
		reply_err(req, -EISDIR);
		return;
	}
	if (!S_ISREG(t->mode)) {
		reply_err(req, -ENXIO);
		return;
	}
	file_open(req, fs_of(req), img, t, fi);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	_timed_(FSOP_RELEASE);
	if (ino == INO_CTL_STATUS || ino == INO_CTL_METRICS) {
		ctl_release(fs_of(req), fi);
	} else if (ino_is_image(ino)) {
		struct image *img;
		if (!ino_node(fs_of(req), ino, &img))
			img = NULL;
		file_release(fs_of(req), img, fi);
	}
	fuse_reply_err(req, 0);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	_timed_(FSOP_READ);
	const struct tinode *t;
	struct image *img;

	if (ino == INO_CTL_STATUS || ino == INO_CTL_METRICS) {
		ctl_read(req, ino, size, off, fi);
		return;
	}
	if (!ino_is_image(ino)) {
		if (!layers_read(req, fs_of(req), ino, size, off))
			reply_err(req, -EISDIR);
		return;
	}
	t = ino_node(fs_of(req), ino, &img);
	if (!t) {
		reply_err(req, -ESTALE);
		return;
	}
	file_read(req, img, t, size, off, fi);
}

/* No OPENDIR round trips: a kernel that can do without (no_opendir) is
 * told so by the first OPENDIR's ENOSYS, and from then on opens
 * directories itself, keeps their listings in its cache (FOPEN_CACHE_DIR |
 * FOPEN_KEEP_CACHE), and sends no RELEASEDIR.  Listings are therefore made
 * at each READDIR from the inode alone; namespace listings, which change,
 * are invalidated by the notifier (namespace.c). */
static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	_timed_(FSOP_OPENDIR);
	struct fs *fs = fs_of(req);

	if (fs->no_opendir) {
		reply_err(req, -ENOSYS);
		return;
	}
	fi->fh = 0;
	if (ino_is_image(ino)) {
		fi->cache_readdir = 1;
		fi->keep_cache = 1;
	}
	fuse_reply_open(req, fi);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	_timed_(FSOP_RELEASEDIR);
	fuse_reply_err(req, 0);
}

static void image_readdir(fuse_req_t req, struct fs *fs, fuse_ino_t ino, size_t size, off_t off,
			  bool plus)
{
	struct image *img;
	const struct tinode *dir = ino_node(fs, ino, &img);
	_cleanup_free_ char *buf = NULL;
	size_t used = 0;

	if (!dir || !S_ISDIR(dir->mode)) {
		reply_err(req, dir ? -ENOTDIR : -ESTALE);
		return;
	}
	buf = calloc(1, size);
	if (!buf) {
		reply_err(req, -ENOMEM);
		return;
	}
	for (off_t i = off; i < (off_t)dir->n_children + 2; i++) {
		struct fuse_entry_param e = { 0 };
		const struct tinode *t;
		const char *name;
		size_t n;

		if (i < 2) {
			t = i == 0 ? dir : dir->parent;
			name = i == 0 ? "." : "..";
		} else {
			t = dir->children[i - 2];
			name = dir->child_names[i - 2];
		}
		e.ino = node_ino(img, t);
		e.generation = image_generation(img);
		image_stat(e.ino, t, &e.attr);
		e.attr_timeout = e.entry_timeout = fs->opts.content_timeout;
		if (plus) {
			n = fuse_add_direntry_plus(req, buf + used, size - used, name, &e, i + 1);
		} else {
			n = fuse_add_direntry(req, buf + used, size - used, name, &e.attr, i + 1);
		}
		if (n > size - used)
			break;
		used += n;
		/* The kernel takes a lookup reference for every entry of a
		 * readdirplus reply except "." and "..". */
		if (plus && i >= 2)
			image_kernel_ref(img, 1);
	}
	fuse_reply_buf(req, buf, used);
}

static void readdir_common(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi, bool plus)
{
	struct fs *fs = fs_of(req);

	if (ino_is_image(ino))
		image_readdir(req, fs, ino, size, off, plus);
	else
		ns_readdir(req, fs, ino, size, off, plus);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	_timed_(FSOP_READDIR);
	readdir_common(req, ino, size, off, fi, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	_timed_(FSOP_READDIRPLUS);
	readdir_common(req, ino, size, off, fi, true);
}

/* The access ACL of the root of an image pulled with credentials
 * (linux/posix_acl_xattr.h's layout, little-endian): the owner as the
 * mode says, then each admitted user and group with r-x, the owning group
 * and others nothing, so that only root and the rules' readers get in.
 * Returns the length, 0 when the image is open to all, or -errno. */
struct acl_entry {
	uint16_t tag, perm;
	uint32_t id;
};

static ssize_t root_acl(struct fs *fs, struct image *img, const struct tinode *root, char **ret)
{
	struct image_readers rd;
	size_t n, o = 0;
	char *buf;
	int r = manager_image_readers(fs->manager, img, &rd);

	if (r <= 0)
		return r;
	n = 4 + (4 + rd.n_users + rd.n_groups) * 8;
	buf = malloc(n);
	if (!buf) {
		image_readers_done(&rd);
		return -ENOMEM;
	}
#define PUT(tag, perm, id)                                                         \
	do {                                                                       \
		struct acl_entry e = { htole16(tag), htole16(perm), htole32(id) }; \
		memcpy(buf + o, &e, sizeof(e));                                    \
		o += sizeof(e);                                                    \
	} while (0)
	uint32_t version = htole32(POSIX_ACL_XATTR_VERSION);
	memcpy(buf, &version, 4);
	o = 4;
	PUT(ACL_USER_OBJ, (root->mode >> 6) & 7, ACL_UNDEFINED_ID);
	for (size_t i = 0; i < rd.n_users; i++)
		PUT(ACL_USER, 5, rd.users[i]);
	PUT(ACL_GROUP_OBJ, 0, ACL_UNDEFINED_ID);
	for (size_t i = 0; i < rd.n_groups; i++)
		PUT(ACL_GROUP, 5, rd.groups[i]);
	PUT(ACL_MASK, 5, ACL_UNDEFINED_ID);
	PUT(ACL_OTHER, 0, ACL_UNDEFINED_ID);
#undef PUT
	image_readers_done(&rd);
	*ret = buf;
	return (ssize_t)o;
}

void root_mode_private(struct fs *fs, struct image *img, const struct tinode *t, struct stat *st)
{
	/* The kernel reads the ACL only when the group bits are not all
	 * clear, and the mode's group bits are the ACL's mask: r-x, and
	 * nothing for others, as the ACL says. */
	if (fs->posix_acl && t == image_root(img) && manager_image_private(fs->manager, img))
		st->st_mode = (st->st_mode & ~(mode_t)077) | 050;
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	_timed_(FSOP_GETXATTR);
	const struct tree_xattr *x;

	if (!ino_is_image(ino)) {
		reply_err(req, -ENODATA);
		return;
	}
	struct image *img;
	const struct tinode *t = ino_node(fs_of(req), ino, &img);
	if (!t) {
		reply_err(req, -ESTALE);
		return;
	}
	if (fs_of(req)->posix_acl && t == image_root(img) &&
	    !strcmp(name, XATTR_NAME_POSIX_ACL_ACCESS)) {
		_cleanup_free_ char *acl = NULL;
		ssize_t len = root_acl(fs_of(req), img, t, &acl);
		if (len < 0)
			reply_err(req, (int)len);
		else if (len > 0 && size == 0)
			fuse_reply_xattr(req, (size_t)len);
		else if (len > 0 && size < (size_t)len)
			reply_err(req, -ERANGE);
		else if (len > 0)
			fuse_reply_buf(req, acl, (size_t)len);
		if (len != 0)
			return;
	}
	x = tinode_getxattr(t, name);
	if (!x)
		x = layers_getxattr(img, t, name);
	if (!x)
		reply_err(req, -ENODATA);
	else if (size == 0)
		fuse_reply_xattr(req, x->size);
	else if (size < x->size)
		reply_err(req, -ERANGE);
	else
		fuse_reply_buf(req, x->value, x->size);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	_timed_(FSOP_LISTXATTR);
	const struct tinode *t;
	_cleanup_free_ char *buf = NULL;
	size_t len = 0, pos = 0;

	if (!ino_is_image(ino)) {
		if (size == 0)
			fuse_reply_xattr(req, 0);
		else
			fuse_reply_buf(req, NULL, 0);
		return;
	}
	struct image *img;
	t = ino_node(fs_of(req), ino, &img);
	if (!t) {
		reply_err(req, -ESTALE);
		return;
	}
	for (uint32_t i = 0; i < t->n_xattrs; i++)
		len += strlen(t->xattrs[i].name) + 1;
	if (size == 0) {
		fuse_reply_xattr(req, len);
		return;
	}
	if (size < len) {
		reply_err(req, -ERANGE);
		return;
	}
	buf = malloc(len ? len : 1);
	if (!buf) {
		reply_err(req, -ENOMEM);
		return;
	}
	for (uint32_t i = 0; i < t->n_xattrs; i++) {
		size_t n = strlen(t->xattrs[i].name) + 1;
		memcpy(buf + pos, t->xattrs[i].name, n);
		pos += n;
	}
	fuse_reply_buf(req, buf, len);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv = { 0 };

	sv.f_bsize = sv.f_frsize = 4096;
	sv.f_namemax = NAME_MAX;
	fuse_reply_statfs(req, &sv);
}

/* Every way of changing the tree.  The mount is read-only, so the kernel
 * answers most of these itself; these cover the rest. */
static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	reply_err(req, -EROFS);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	reply_err(req, -EROFS);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	reply_err(req, -EROFS);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	reply_err(req, -EROFS);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	reply_err(req, -EROFS);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	reply_err(req, -EROFS);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	reply_err(req, -EROFS);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	reply_err(req, -EROFS);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	reply_err(req, -EROFS);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	reply_err(req, -EROFS);
}

/* Every request is timed for the metrics (see _timed_); a lookup that
 * waits for a pull is timed by its answer instead. */
static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	_timed_(FSOP_LOOKUP);

	if (do_lookup(req, parent, name))
		timer_.fs = NULL;
}

const struct fuse_lowlevel_ops fs_ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.readlink = op_readlink,
	.open = op_open,
	.read = op_read,
	.release = op_release,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.releasedir = op_releasedir,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.statfs = op_statfs,
	.setattr = op_setattr,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_unlink,
	.symlink = op_symlink,
	.rename = op_rename,
	.link = op_link,
	.create = op_create,
	.setxattr = op_setxattr,
	.removexattr = op_removexattr,
};

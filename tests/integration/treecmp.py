#!/usr/bin/env python3
"""Strict comparison of two directory trees, for the pullfs integration tests.

    treecmp.py [options] A B
    treecmp.py --snapshot OUT.json DIR

A and B are directories, or snapshot files written earlier with --snapshot
(so a test can compare a tree with what it looked like under another mount).

Compared for every path: file type, permission bits including
setuid/setgid/sticky, uid, gid, size (not for directories), sha256 of regular
file content, symlink target, rdev of device nodes, link count of
non-directories, the partition of non-directories into hardlink groups,
extended attributes (security.selinux ignored), and whole-second mtime of
non-directories (of directories too with --dir-mtime: peers disagree there,
so it is off by default).  Every difference is printed; the exit status is
1 if there was any, 2 on a usage or I/O error, else 0.
"""

import argparse
import errno
import hashlib
import json
import os
import stat
import sys

IGNORED_XATTRS = {"security.selinux"}

TYPE_NAMES = {
    stat.S_IFREG: "file",
    stat.S_IFDIR: "dir",
    stat.S_IFLNK: "symlink",
    stat.S_IFCHR: "chardev",
    stat.S_IFBLK: "blockdev",
    stat.S_IFIFO: "fifo",
    stat.S_IFSOCK: "socket",
}


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            h.update(chunk)
    return h.hexdigest()


def xattrs_of(path, ignored):
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError as e:
        # Symlinks and special files often cannot carry user.* xattrs at
        # all; "none" is the same answer as an empty list.
        if e.errno in (errno.ENOTSUP, errno.EPERM, errno.ENODATA):
            return {}
        raise
    out = {}
    for name in sorted(names):
        if name in ignored:
            continue
        value = os.getxattr(path, name, follow_symlinks=False)
        out[name] = value.hex()
    return out


def scan(root, ignored_xattrs):
    """Return {relpath: entry} for every path under root, root itself as '.'."""
    entries = {}
    inodes = {}

    def visit(path, rel):
        st = os.lstat(path)
        fmt = stat.S_IFMT(st.st_mode)
        e = {
            "type": TYPE_NAMES.get(fmt, "unknown(%o)" % fmt),
            "mode": "%04o" % stat.S_IMODE(st.st_mode),
            "uid": st.st_uid,
            "gid": st.st_gid,
            "mtime": int(st.st_mtime),
            "xattrs": xattrs_of(path, ignored_xattrs),
        }
        if fmt != stat.S_IFDIR:
            e["size"] = st.st_size
            e["nlink"] = st.st_nlink
            inodes.setdefault((st.st_dev, st.st_ino), []).append(rel)
        if fmt == stat.S_IFREG:
            e["sha256"] = sha256_of(path)
        elif fmt == stat.S_IFLNK:
            e["target"] = os.readlink(path)
        elif fmt in (stat.S_IFCHR, stat.S_IFBLK):
            e["rdev"] = "%d,%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))
        entries[rel] = e
        if fmt == stat.S_IFDIR:
            for name in sorted(os.listdir(path)):
                visit(os.path.join(path, name),
                      name if rel == "." else rel + "/" + name)

    visit(root, ".")
    for paths in inodes.values():
        group = sorted(paths)
        for p in paths:
            entries[p]["links"] = group
    return entries


def load(arg, ignored_xattrs):
    if os.path.isdir(arg):
        return scan(arg, ignored_xattrs)
    with open(arg) as f:
        data = json.load(f)
    for e in data.values():
        e["xattrs"] = {k: v for k, v in e.get("xattrs", {}).items()
                       if k not in ignored_xattrs}
    return data


def show(v):
    if isinstance(v, dict):
        return "{" + ", ".join("%s=%s" % (k, bytes.fromhex(x))
                               for k, x in sorted(v.items())) + "}"
    return repr(v)


def compare(a, b, dir_mtime, name_a, name_b):
    diffs = []
    for p in sorted(set(a) - set(b)):
        diffs.append("%s: only in %s (%s)" % (p, name_a, a[p]["type"]))
    for p in sorted(set(b) - set(a)):
        diffs.append("%s: only in %s (%s)" % (p, name_b, b[p]["type"]))
    reported_groups = set()
    for p in sorted(set(a) & set(b)):
        ea, eb = a[p], b[p]
        if ea["type"] != eb["type"]:
            diffs.append("%s: type %s != %s" % (p, ea["type"], eb["type"]))
            continue
        keys = ["mode", "uid", "gid", "size", "nlink", "sha256", "target",
                "rdev", "xattrs"]
        if ea["type"] != "dir" or dir_mtime:
            keys.append("mtime")
        for k in keys:
            va, vb = ea.get(k), eb.get(k)
            if va != vb:
                diffs.append("%s: %s %s != %s" % (p, k, show(va), show(vb)))
        if ea["type"] != "dir":
            # Paths outside the common set are already reported; compare
            # the groups as seen within it.
            common = set(a) & set(b)
            ga = tuple(x for x in ea.get("links", [p]) if x in common)
            gb = tuple(x for x in eb.get("links", [p]) if x in common)
            if ga != gb and (ga, gb) not in reported_groups:
                reported_groups.add((ga, gb))
                diffs.append("%s: hardlink group %s != %s"
                             % (p, list(ga), list(gb)))
    return diffs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir-mtime", action="store_true",
                    help="compare the mtime of directories too")
    ap.add_argument("--ignore-xattr", action="append", default=[],
                    metavar="NAME", help="xattr to leave out (repeatable)")
    ap.add_argument("--snapshot", metavar="OUT",
                    help="write the scan of the one tree given to OUT")
    ap.add_argument("trees", nargs="+")
    args = ap.parse_args()
    ignored = IGNORED_XATTRS | set(args.ignore_xattr)

    try:
        if args.snapshot:
            if len(args.trees) != 1:
                ap.error("--snapshot takes exactly one tree")
            data = scan(args.trees[0], ignored)
            with open(args.snapshot, "w") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            print("treecmp: %d entries of %s saved in %s"
                  % (len(data), args.trees[0], args.snapshot))
            return 0
        if len(args.trees) != 2:
            ap.error("two trees to compare")
        a = load(args.trees[0], ignored)
        b = load(args.trees[1], ignored)
    except OSError as e:
        print("treecmp: %s: %s" % (e.filename or "", e.strerror or e),
              file=sys.stderr)
        return 2

    diffs = compare(a, b, args.dir_mtime, args.trees[0], args.trees[1])
    for d in diffs:
        print("treecmp: " + d)
    if diffs:
        print("treecmp: %d difference(s) between %s and %s"
              % (len(diffs), args.trees[0], args.trees[1]))
        return 1
    print("treecmp: %d entries equal in %s and %s"
          % (len(a), args.trees[0], args.trees[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

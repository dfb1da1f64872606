#!/bin/bash
# The edge-case image served by pullfs is the tree `umoci unpack` makes of
# the same OCI layout: whiteouts, opaque directories, hardlinks, symlinks,
# devices, special modes, owners, xattrs, mtimes.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
start_registry
push_edge test/edge:1

umoci unpack --image "$(layout_of edge):1" "$WORK/bundle" >/dev/null
reference=$WORK/bundle/rootfs

mount_pullfs
root=$MNT/images/$REGISTRY/test/edge:1
assert_errno OK "$root"
assert_tree_eq "$reference" "$root" --dir-mtime

# A few facts spelled out, so a failure reads plainly.
assert_errno ENOENT "$root/del/file"
assert_errno ENOENT "$root/deldir/a"
assert_errno ENOENT "$root/opq/lower1"
assert_errno ENOENT "$root/opq/.wh..wh..opq"
assert_errno ENOENT "$root/del/.wh.file"
assert_eq fresh "$(cat "$root/deldir/fresh")" "deldir/fresh"
assert_eq upper "$(cat "$root/opq/upper1")" "opq/upper1"
assert_eq "new content, longer than the old one" "$(cat "$root/replace.txt")" "replace.txt"
assert_eq "../etc/hostname" "$(readlink "$root/sym/rel")" "readlink sym/rel"
assert_eq "/etc/hostname" "$(readlink "$root/sym/abs")" "readlink sym/abs"
assert_eq "$(stat -c %i "$root/hl/a")" "$(stat -c %i "$root/hl/b")" "inode of hl/a and hl/b"
assert_eq 2 "$(stat -c %h "$root/hl/a")" "link count of hl/a"
assert_eq 2 "$(stat -c %h "$root/split/a")" "link count of split/a (split/c replaced above)"
assert_eq "character special file 1,3" "$(stat -c '%F %t,%T' "$root/devs/null")" "devs/null"
assert_eq "fifo" "$(stat -c %F "$root/devs/fifo")" "devs/fifo"
assert_eq "4755 0:0" "$(stat -c '%a %u:%g' "$root/bin/suid")" "bin/suid"
assert_eq "1777" "$(stat -c %a "$root/tmp")" "tmp"
assert_eq "2775 0:1000" "$(stat -c '%a %u:%g' "$root/sgiddir")" "sgiddir"
assert_eq "640 1000:1000" "$(stat -c '%a %u:%g' "$root/home/user/file")" "home/user/file"
assert_eq "hello" "$(py -c 'import os, sys; print(os.getxattr(sys.argv[1], "user.pullfs").decode())' "$root/xattr/file")" "user.pullfs of xattr/file"
assert_eq "981173106" "$(stat -c %Y "$root/old")" "mtime of old"
assert_eq 0 "$(stat -c %s "$root/empty")" "size of empty"
assert_eq 5242880 "$(stat -c %s "$root/large")" "size of large"

unmount_pullfs
log "PASS"

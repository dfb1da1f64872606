#!/bin/bash
# End to end: first lookup pulls the busybox image from a real registry;
# chroot runs a program from it; events; listing; digest references;
# EROFS, EINVAL and ENOENT.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
need_cmd chroot
start_registry
push_busybox test/busybox:1
digest=$(manifest_digest test/busybox:1)
[[ $digest == sha256:* ]] || fail "no digest for test/busybox:1 from the registry"
mount_pullfs

ref=$REGISTRY/test/busybox:1
root=$MNT/images/$ref

# The first lookup is chroot's own: the event must name that process.
chroot "$root" /bin/sh -c 'echo hi' >"$WORK/chroot.out" 2>"$WORK/chroot.err" &
chroot_pid=$!
rc=0
wait "$chroot_pid" || rc=$?
[ "$rc" = 0 ] || fail "chroot $root /bin/sh -c 'echo hi' exited $rc: $(cat "$WORK/chroot.err")"
assert_eq hi "$(cat "$WORK/chroot.out")" "output of chroot $root /bin/sh -c 'echo hi'"

# Symlinked applets, and a file read through the image.
assert_eq "root:x:0:0:root:/root:/bin/sh" "$(chroot "$root" /bin/head -n1 /etc/passwd)" "head -n1 /etc/passwd in the image"
assert_eq "$(sha256sum <"$(_static_busybox)" | cut -d' ' -f1)" \
    "$(sha256sum <"$root/bin/busybox" | cut -d' ' -f1)" "sha256 of /bin/busybox"

assert_errno ENOENT "$root/no/such/file"
assert_errno ENOTDIR "$root/etc/passwd/x"

# ---- events: Pulling then Pulled, well formed, caused by chroot
wait_event Pulled "$ref"
events check >&2 || fail "malformed events in $EVENTS"
events order "$ref" Pulling Pulled >&2 || fail "expected exactly Pulling, Pulled for $ref"
# Later lookups may log "already present" (reason Pulled too); the first
# Pulled of each kind is the pull's.
for reason in Pulling Pulled; do
    assert_eq "$chroot_pid" "$(events field "$reason" "$ref" pid)" "pid of the $reason event"
    assert_eq chroot "$(events field "$reason" "$ref" comm)" "comm of the $reason event"
    assert_eq 0 "$(events field "$reason" "$ref" uid)" "uid of the $reason event"
done
assert_eq "$digest" "$(events field Pulled "$ref" digest)" "digest of the Pulled event"
assert_contains "Pulling image \"$ref\"" "$(events field Pulling "$ref" message)" "Pulling message"
assert_contains "Successfully pulled image \"$ref\"" "$(events field Pulled "$ref" message)" "Pulled message"

# ---- listing shows the cache
assert_contains "$REGISTRY" "$(list_dir "$MNT/images")" "ls $MNT/images"
assert_eq test "$(list_dir "$MNT/images/$REGISTRY")" "ls $MNT/images/$REGISTRY"
assert_contains "busybox:1" "$(list_dir "$MNT/images/$REGISTRY/test")" "ls $MNT/images/$REGISTRY/test"

# ---- the same image by digest, and by tag+digest
by_digest=$MNT/images/$REGISTRY/test/busybox@$digest
assert_tree_eq "$root" "$by_digest"
assert_tree_eq "$root" "$MNT/images/$REGISTRY/test/busybox:1@$digest"
assert_eq hi "$(chroot "$by_digest" /bin/echo hi)" "chroot by digest"

# ---- read-only, everywhere
assert_op_errno EROFS create "$root/newfile"
assert_op_errno EROFS write "$root/etc/passwd"
assert_op_errno EROFS truncate "$root/etc/passwd"
assert_op_errno EROFS mkdir "$root/newdir"
assert_op_errno EROFS rmdir "$root/tmp"
assert_op_errno EROFS unlink "$root/bin/busybox"
assert_op_errno EROFS unlink "$root/bin/cat"
assert_op_errno EROFS rename "$root/etc/passwd" "$root/etc/passwd2"
assert_op_errno EROFS link "$root/etc/passwd" "$root/etc/passwd2"
assert_op_errno EROFS symlink "$root/newlink"
assert_op_errno EROFS mknod "$root/newfifo"
# In the namespace every valid name already is a directory (a docker.io
# repository prefix, a host), so mkdir gets EEXIST: the kernel decides that
# from the lookup, before it would say EROFS, as on any read-only
# filesystem.
assert_op_errno EEXIST mkdir "$MNT/images/x"
assert_op_errno EEXIST mkdir "$MNT/images/$REGISTRY/test"
assert_op_errno EROFS chmod "$root/etc/passwd"
assert_op_errno EROFS chown "$root/etc/passwd"
assert_op_errno EROFS utime "$root/etc/passwd"
assert_op_errno EROFS setxattr "$root/etc/passwd"
# (Any name under images/ may be the start of a reference, so it exists
# and mkdir there fails with EEXIST before it could with EROFS.)
assert_op_errno EROFS rmdir "$MNT/images"
assert_op_errno EROFS create "$MNT/newfile"
# The shell way too: touch, mkdir, rm, chmod, setfattr.
! touch "$root/etc/passwd" 2>/dev/null || fail "touch succeeded on a read-only image"
! chroot "$root" /bin/sh -c 'echo x >/tmp/x' 2>/dev/null || fail "writing /tmp/x in the image succeeded"
if command -v setfattr >/dev/null; then
    ! setfattr -n user.x -v 1 "$root/etc/passwd" 2>/dev/null || fail "setfattr succeeded on a read-only image"
fi
[ "$(chroot "$root" /bin/cat /etc/hostname)" = busybox ] || fail "image changed after write attempts"

# ---- invalid references: EINVAL
assert_errno EINVAL "$MNT/images/$REGISTRY/Test/x:1"
assert_errno EINVAL "$MNT/images/$REGISTRY/test/busybox@sha256:abc"
assert_errno EINVAL "$MNT/images/$REGISTRY/test/busybox@sha256:$(printf 'g%.0s' {1..64})"
assert_errno EINVAL "$MNT/images/$REGISTRY/test/busybox:$(printf 't%.0s' {1..129})"
assert_errno EINVAL "$MNT/images/$REGISTRY/test/busy..box:1"
assert_errno EINVAL "$MNT/images/$REGISTRY/test/busybox:-1"

# ---- unknown tag or repository: ENOENT, with a Failed event
bad=$REGISTRY/test/busybox:nope
assert_errno ENOENT "$MNT/images/$bad"
wait_event Failed "$bad"
assert_eq ENOENT "$(events field Failed "$bad" errno)" "errno of the Failed event for $bad"
assert_errno ENOENT "$MNT/images/$REGISTRY/test/nothere:1"
wait_event Failed "$REGISTRY/test/nothere:1"
assert_eq ENOENT "$(events field Failed "$REGISTRY/test/nothere:1" errno)" "errno of the Failed event for test/nothere:1"
assert_not_contains "busybox:nope" "$(list_dir "$MNT/images/$REGISTRY/test")" "ls $MNT/images/$REGISTRY/test"
events check >&2 || fail "malformed events in $EVENTS"

unmount_pullfs
log "PASS"

#!/bin/bash
# A collection that runs while a serving process drains for an upgrade
# deletes nothing (docs/restarts.md): that process has let go of the
# filesystem's hooks and cannot tell what the kernel still reaches, so an
# image a process stands in stays whole for the next process to make
# again.  PULLFS_FAULT=drain-gc has the draining process run a collection
# to 1 byte: it removes nothing, and the process in the image reads on
# across the upgrade.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/restartlib.sh"

need_fuse
start_registry
push_busybox
PULLFS_ENV=(PULLFS_FAULT=drain-gc)
mount_pullfs --supervise --gc-min-age 0
ctl() { "$PULLFSCTL" -m "$MNT" "$@"; }
bb=$MNT/images/127.0.0.1:$REGISTRY_PORT/test/busybox:1

[ -x "$bb/bin/busybox" ] || fail "the image cannot be looked up"
want=$(sha256sum <"$bb/bin/busybox")
# A process standing in the image (its working directory), as a
# container's process stands in its root; nothing of it is open.
(cd "$bb" && exec sleep 600) &
inside=$!
track_pid "$inside"
wait_for 10 test -d "/proc/$inside/cwd/bin" || fail "the process did not enter the image"

old=$(serving pid)
out=$(ctl upgrade 2>&1) || fail "pullfsctl upgrade: $out"
wait_for 30 _replaced "$old" || fail "serving process $old not replaced"
log "upgraded: serving process $old -> $(serving pid)"

# Through the working directory: the nodes of the previous process.
cp "/proc/$inside/cwd/bin/busybox" "$WORK/busybox" 2>"$WORK/read.err" ||
    fail "reading the image the process stands in after the upgrade: $(cat "$WORK/read.err")"
assert_eq "$want" "$(sha256sum <"$WORK/busybox")" \
    "bin/busybox read through the working directory after the upgrade"
ls "/proc/$inside/cwd/" >/dev/null 2>"$WORK/ls.err" ||
    fail "listing the image the process stands in after the upgrade: $(cat "$WORK/ls.err")"
! grep -q "cannot restore image" "$PULLFS_LOG" ||
    fail "the new process could not make an image again: $(grep "cannot restore" "$PULLFS_LOG" | head -3)"
assert_eq 0 "$(grep -c '"ImageGC"' "$EVENTS")" "ImageGC events of the collection while draining"
log "the process in the image reads on"

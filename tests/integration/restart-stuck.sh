#!/bin/bash
# A serving process killed while one of its threads is held in the kernel.
# GC first lets the kernel drop the entries of restored images no process
# is in (fs/takeover.c); the kernel's invalidation of such an entry takes
# its directory's lock, which a lookup of another name in that directory
# holds while it waits for its pull (held at the proxy).  A SIGKILL then
# ends every thread but that one: the process is a zombie that sends no
# SIGCHLD until the lookup is answered, and only a new serving process can
# answer it.  The supervisor must see that and start one (the 30-minute
# soak found an upgrade stuck that way for ever).
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
need_root
start_registry
push_busybox test/a:1
push_busybox test/b:1
start_slowproxy --gate "GET /v2/test/b/manifests/=$WORK/go"
mount_pullfs --insecure-registry "$PROXY" --gc-min-age 0
PULLFS_RECOVERY_EXPECTED=1
ctl() { "$PULLFSCTL" -m "$MNT" "$@"; }
dir=$MNT/images/$PROXY/test

_new_serving() {
    local pid
    pid=$(pullfs_serving_pid 2>/dev/null) || return 1
    [ -n "$pid" ] && [ "$pid" != "$1" ]
}
assert_eq busybox "$(cat "$dir/a:1/etc/hostname")" "hostname of a:1"
# a:1 restored by the next serving process, no process in it
first=$(pullfs_serving_pid)
kill -KILL "$first"
wait_for 30 _new_serving "$first" || fail "no serving process after the first kill"
assert_eq busybox "$(cat "$dir/a:1/etc/hostname")" "hostname of a:1 after the first kill"

# the lookup of b:1 waits for its manifest, holding the directory test/
(stat "$dir/b:1/etc/hostname" >"$WORK/b.out" 2>&1; echo $? >"$WORK/b.rc") &
held=$!
track_pid "$held"
wait_for 20 eval '[ "$(proxy_count held "/v2/test/b/manifests/")" -ge 1 ]' ||
    fail "the manifest of b:1 was not held"
old=$(pullfs_serving_pid)
# GC: the entry of restored a:1 is invalidated, which waits for test/
(ctl gc >"$WORK/gc.out" 2>&1) &
collector=$!
track_pid "$collector"
_in_inval() { grep -qs fuse_reverse_inval_entry /proc/"$old"/task/*/stack; }
wait_for 20 _in_inval || fail "no thread of $old waits in the kernel's invalidation"

kill -KILL "$old"
wait_for 30 _new_serving "$old" ||
    fail "no new serving process after the kill: $(grep '^pullfs:' "$PULLFS_LOG" | tail -n 2)"
grep -q "serving process $old is dying with a thread held in the kernel" "$PULLFS_LOG" ||
    fail "the supervisor did not say why it started another"
touch "$WORK/go"
wait_for 30 _pid_gone "$held" || fail "the lookup of b:1 never returned"
assert_eq 0 "$(cat "$WORK/b.rc")" "exit status of the held lookup ($(cat "$WORK/b.out"))"
wait_for 30 _pid_gone "$collector" || fail "pullfsctl gc never returned"
wait_for 30 eval '[ ! -d /proc/'"$old"' ]' || fail "the killed process $old never ended"
assert_eq busybox "$(cat "$dir/b:1/etc/hostname")" "hostname of b:1"
assert_eq busybox "$(cat "$dir/a:1/etc/hostname")" "hostname of a:1"
unmount_pullfs
log "PASS"

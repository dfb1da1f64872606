#!/bin/bash
# Paths given relative are taken from the working directory at start:
#  - in the foreground, from a working directory: a relative --cache,
#    --events-log, --control-socket, --auth-file and --config; the status
#    names them absolute, the image lands in the cache there, pullfsctl
#    inspect, gc and rm reach the socket, and the events log reopened on
#    SIGHUP after a rename is made there again;
#  - detached (no -f), with relative cache and mount point: status and gc.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/ctl.sh"

need_pullfsctl
need_fuse
start_registry
push_busybox test/busybox:1
bb=$REGISTRY/test/busybox:1
run=$WORK/run
mkdir -p "$run"
echo '{"auths":{}}' >"$run/auth.json"
echo 'max-parallel-pulls = 2' >"$run/pullfs.conf"

# status_field PATH KEY: KEY of the status document under mount PATH.
status_field() {
    timeout 30 cat "$1/.pullfs/status" >"$WORK/status.json" || fail "cannot read $1/.pullfs/status"
    json_get "$WORK/status.json" "j['$2']"
}

# ---- foreground, relative paths
cd "$run"
mount_pullfs --cache cache-fg --events-log events-fg.log --control-socket ctl-fg.sock \
    --auth-file ./auth.json --config pullfs.conf
# Elsewhere, so that nothing here is found relative to the start's directory.
cd "$WORK"
assert_eq hi "$(chroot "$MNT/images/$bb" /bin/echo hi)" "a program of $bb"
ctl_ok status
ctl_ok inspect "$bb"
ctl_ok gc
[ -n "$(ls "$run/cache-fg/refs")" ] || fail "no reference in $run/cache-fg/refs after a pull"
[ -S "$run/ctl-fg.sock" ] || fail "no control socket at $run/ctl-fg.sock"
assert_eq "$run/cache-fg" "$(status_field "$MNT" cache_dir)" "cache_dir in the status"
assert_eq "$run/events-fg.log" "$(status_field "$MNT" events_log)" "events_log in the status"
assert_eq "$run/ctl-fg.sock" "$(status_field "$MNT" control_socket)" "control_socket in the status"
ctl_ok rm "$bb"
[ -z "$(ls "$run/cache-fg/refs")" ] || fail "rm left a reference in $run/cache-fg/refs"

# logrotate: the reopened log is made where the first one was.
mv "$run/events-fg.log" "$run/events-fg.log.1"
kill -HUP "$PULLFS_PID"
_reopened() {
    errno_of "$MNT/images/127.0.0.1:0/x:1" >/dev/null
    [ -s "$run/events-fg.log" ]
}
wait_for 10 _reopened || fail "no new $run/events-fg.log after a rename and SIGHUP"
for f in /cache-fg /events-fg.log /ctl-fg.sock; do
    [ ! -e "$f" ] || fail "$f was made relative to / instead of $run"
done
unmount_pullfs
[ ! -e "$run/ctl-fg.sock" ] || fail "the control socket is left behind"

# ---- detached, relative cache and mount point
mkdir -p "$run/mnt-bg"
track_mount "$run/mnt-bg"
rc=0
(cd "$run" && timeout 30 "$PULLFS" --cache cache-bg --insecure-registry "$REGISTRY" mnt-bg \
    </dev/null >"$WORK/bg.out" 2>&1) || rc=$?
[ "$rc" = 0 ] || fail "pullfs without -f exited $rc: $(cat "$WORK/bg.out")"
is_mounted "$run/mnt-bg" || fail "pullfs without -f did not mount $run/mnt-bg"
bg_pid=$(status_field "$run/mnt-bg" pid)
track_pid "$bg_pid"
assert_eq "$run/mnt-bg" "$(status_field "$run/mnt-bg" mountpoint)" "mountpoint in the status"
assert_eq "$run/cache-bg/control.sock" "$(status_field "$run/mnt-bg" control_socket)" \
    "control_socket in the status"
assert_eq hi "$(chroot "$run/mnt-bg/images/$bb" /bin/echo hi)" "a program of $bb (detached)"
timeout 20 "$PULLFSCTL" -m "$run/mnt-bg" status >/dev/null || fail "pullfsctl status (detached)"
timeout 20 "$PULLFSCTL" -m "$run/mnt-bg" gc >/dev/null || fail "pullfsctl gc (detached)"
kill -TERM "$bg_pid"
wait_for 20 _pid_gone "$bg_pid" || fail "the detached pullfs did not exit within 20 s of SIGTERM"
! is_mounted "$run/mnt-bg" || fail "$run/mnt-bg is still mounted after the detached pullfs exited"

log "PASS"

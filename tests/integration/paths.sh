#!/bin/bash
# Paths given relative are taken from the working directory at start, and
# a control socket that cannot be served stops the start:
#  - in the foreground, from a working directory: a relative --cache,
#    --events-log, --control-socket, --auth-file and --config; the status
#    names them absolute, the image lands in the cache there, pullfsctl
#    inspect, gc and rm reach the socket, and the events log reopened on
#    SIGHUP after a rename is made there again;
#  - detached (no -f), with a relative -o cache= and mount point: status,
#    the cache where it belongs, gc;
#  - a control socket in a missing directory, on a file that is not a
#    socket, or served by another pullfs: exit 1 with one line, nothing
#    mounted, the file and the other daemon untouched; a socket path too
#    long for sun_path: exit 2 with one line.
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
(cd "$run" && timeout 30 "$PULLFS" -o cache=cache-bg --insecure-registry "$REGISTRY" mnt-bg \
    </dev/null >"$WORK/bg.out" 2>&1) || rc=$?
[ "$rc" = 0 ] || fail "pullfs without -f exited $rc: $(cat "$WORK/bg.out")"
is_mounted "$run/mnt-bg" || fail "pullfs without -f did not mount $run/mnt-bg"
bg_pid=$(status_field "$run/mnt-bg" pid)
track_pid "$bg_pid"
assert_eq "$run/mnt-bg" "$(status_field "$run/mnt-bg" mountpoint)" "mountpoint in the status"
assert_eq "$run/cache-bg/control.sock" "$(status_field "$run/mnt-bg" control_socket)" \
    "control_socket in the status"
assert_eq hi "$(chroot "$run/mnt-bg/images/$bb" /bin/echo hi)" "a program of $bb (detached)"
assert_eq "$run/cache-bg" "$(status_field "$run/mnt-bg" cache_dir)" "cache_dir in the status (detached)"
[ -n "$(ls "$run/cache-bg/refs")" ] || fail "no reference in $run/cache-bg/refs after a pull (detached)"
timeout 20 "$PULLFSCTL" -m "$run/mnt-bg" status >/dev/null || fail "pullfsctl status (detached)"
timeout 20 "$PULLFSCTL" -m "$run/mnt-bg" gc >/dev/null || fail "pullfsctl gc (detached)"
kill -TERM "$bg_pid"
wait_for 20 _pid_gone "$bg_pid" || fail "the detached pullfs did not exit within 20 s of SIGTERM"
! is_mounted "$run/mnt-bg" || fail "$run/mnt-bg is still mounted after the detached pullfs exited"

# ---- a control socket that cannot be served
# refused_start STATUS WHAT ARGS...: pullfs -f ARGS... $MNT exits STATUS
# with one line on stderr and mounts nothing.
refused_start() {
    local want=$1 what=$2 rc=0 err
    shift 2
    timeout 20 "$PULLFS" -f --cache "$WORK/cache-refused" "$@" "$MNT" </dev/null \
        >"$WORK/refused.out" 2>"$WORK/refused.err" || rc=$?
    err=$(cat "$WORK/refused.err")
    assert_eq "$want" "$rc" "exit status of pullfs with $what (stderr: $err)"
    [ "$(wc -l <"$WORK/refused.err")" = 1 ] || fail "pullfs with $what: not one line on stderr: $err"
    ! is_mounted "$MNT" || fail "pullfs with $what mounted $MNT"
    REFUSED=$err
}
refused_start 1 "a socket in a missing directory" --control-socket "$WORK/missing/ctl.sock"
assert_contains "$WORK/missing/ctl.sock" "$REFUSED" "message for a socket in a missing directory"
echo precious >"$WORK/not-a-socket"
refused_start 1 "a socket path that is a file" --control-socket "$WORK/not-a-socket"
assert_contains "is not a socket" "$REFUSED" "message for a socket path that is a file"
assert_eq precious "$(cat "$WORK/not-a-socket")" "the file named as control socket"
refused_start 2 "a socket path over 107 bytes" --control-socket "$WORK/$(printf 's%.0s' {1..120})"
assert_contains "longer than 107 bytes" "$REFUSED" "message for a socket path over 107 bytes"

mount_pullfs
refused_mnt=$WORK/mnt-second
mkdir -p "$refused_mnt"
rc=0
timeout 20 "$PULLFS" -f --cache "$WORK/cache-second" --control-socket "$CACHE/control.sock" \
    "$refused_mnt" </dev/null >"$WORK/second.out" 2>&1 || rc=$?
assert_eq 1 "$rc" "exit status of a second pullfs on the first one's control socket ($(cat "$WORK/second.out"))"
assert_contains "served by another process" "$(cat "$WORK/second.out")" "message of the second pullfs"
! is_mounted "$refused_mnt" || fail "the second pullfs mounted $refused_mnt"
ctl_ok gc
unmount_pullfs
log "PASS"

#!/bin/bash
# SIGSTOP of the serving process under the supervisor (docs/restarts.md).
# Stopped, it answers nothing: requests wait, and the supervisor neither
# starts another nor kills anything.  After SIGCONT the
# same process serves on, and what waited is answered.  A `pullfsctl
# upgrade` asked while it is stopped completes once it continues.  A
# kill -9 of the supervisor while it is stopped: at SIGCONT it unmounts and
# ends (the SIGTERM of its supervisor's death was pending), and a start
# meanwhile waits for it, then serves.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/restartlib.sh"

need_fuse
start_registry
push_busybox
push_busybox test/other:1
mount_pullfs --supervise
ctl() { "$PULLFSCTL" -m "$MNT" "$@"; }
bb=$MNT/images/$REGISTRY/test/busybox:1
[ -x "$bb/bin/busybox" ] || fail "first lookup of busybox failed"
_stopped() { [ "$(sed 's/^.*) //' "/proc/$1/stat" | cut -d' ' -f1)" = T ]; }

# stopped: a lookup waits; the supervisor leaves the process alone
pid=$(serving pid)
sup=$PULLFS_PID
kill -STOP "$pid"
wait_for 10 _stopped "$pid" || fail "serving process $pid did not stop"
ls "$MNT/images/$REGISTRY/test/other:1/" >"$WORK/other.ls" 2>"$WORK/other.err" &
ls_pid=$!
track_pid "$ls_pid"
# the supervisor looks at its serving process every 0.5 s: give it several
# looks (a wait on something that must not happen)
t0=$SECONDS
while ((SECONDS - t0 < 3)); do
    ! _pid_gone "$ls_pid" || fail "the lookup returned while the serving process was stopped: $(cat "$WORK/other.err")"
    ! _pid_gone "$sup" || fail "the supervisor ended while its serving process was stopped"
    _stopped "$pid" || fail "serving process $pid is no longer stopped"
    sleep 0.5
done
kill -CONT "$pid"
wait_for 30 _pid_gone "$ls_pid" || fail "the lookup did not return after SIGCONT"
rc=0
wait "$ls_pid" || rc=$?
assert_eq 0 "$rc" "lookup across SIGSTOP ($(cat "$WORK/other.err"))"
assert_eq "$pid" "$(serving pid)" "serving pid after SIGCONT"
assert_eq 0 "$(serving recoveries)" "serving.recoveries after SIGSTOP/SIGCONT"
log "a lookup waited through a SIGSTOP of the serving process and was answered after SIGCONT"

# an upgrade asked while it is stopped
kill -STOP "$pid"
wait_for 10 _stopped "$pid" || fail "serving process $pid did not stop"
ctl upgrade >"$WORK/upgrade.out" 2>&1 &
upgrade_pid=$!
track_pid "$upgrade_pid"
! _pid_gone "$upgrade_pid" || fail "pullfsctl upgrade returned while the serving process was stopped: $(cat "$WORK/upgrade.out")"
kill -CONT "$pid"
wait_for 60 _pid_gone "$upgrade_pid" || fail "pullfsctl upgrade did not return after SIGCONT"
rc=0
wait "$upgrade_pid" || rc=$?
assert_eq 0 "$rc" "pullfsctl upgrade across SIGSTOP ($(cat "$WORK/upgrade.out"))"
wait_for 30 _replaced "$pid" || fail "serving process $pid not replaced by the upgrade"
assert_eq busybox "$(cat "$bb/etc/hostname")" "hostname after the upgrade"
! grep -q "did not drain" "$PULLFS_LOG" || fail "the old process was killed at the end of its grace time"
log "an upgrade asked while the serving process was stopped completed after SIGCONT"

# the supervisor killed while the serving process is stopped
pid=$(serving pid)
sup=$PULLFS_PID
track_pid "$pid"
kill -STOP "$pid"
wait_for 10 _stopped "$pid" || fail "serving process $pid did not stop"
kill -KILL "$sup"
wait "$sup" 2>/dev/null || true
PULLFS_PID=
echo "+ $PULLFS --supervise (its serving process stopped)" >>"$PULLFS_LOG"
"$PULLFS" -f --cache "$CACHE" --events-log "$EVENTS" --insecure-registry "$REGISTRY" \
    --supervise "$MNT" >>"$PULLFS_LOG" 2>&1 &
PULLFS_PID=$!
! _pid_gone "$PULLFS_PID" || fail "the start did not wait for the stopped serving process: $(tail -n 2 "$PULLFS_LOG")"
kill -CONT "$pid"
wait_for 30 _pid_gone "$pid" || fail "serving process $pid did not end after SIGCONT"
_serves() {
    _pid_gone "$PULLFS_PID" && return 2
    local p
    p=$(serving pid 2>/dev/null) || return 1
    [ -n "$p" ] && [ "$p" != "$pid" ]
}
wait_for 30 _serves || fail "the start did not serve once the stopped process ended: $(tail -n 3 "$PULLFS_LOG")"
assert_eq busybox "$(cat "$bb/etc/hostname")" "hostname after the start"
log "a start while the orphaned serving process was stopped served once it continued"
unmount_pullfs

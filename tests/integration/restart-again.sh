#!/bin/bash
# A start right after `kill -9` of the supervisor: its serving process
# outlives it for the moment it takes to notice, unmount and exit, and
# holds the cache's lock meanwhile.  The next start on the same cache and
# mountpoint waits for it (docs/restarts.md) and serves; 20
# times in a row, each start made at once after the kill.  The same at once
# after a SIGTERM of the supervisor (it says in the lock file that it
# stops).  A start while a pullfs of the cache serves on is still refused
# at once.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/restartlib.sh"

need_fuse
start_registry
push_busybox
mount_pullfs --supervise
bb=$MNT/images/$REGISTRY/test/busybox:1
[ -x "$bb/bin/busybox" ] || fail "first lookup of busybox failed"

_unmounted() { ! is_mounted "$MNT"; }
ROUNDS=20
ok=0
busy=0
for ((i = 1; i <= ROUNDS; i++)); do
    sup=$PULLFS_PID
    old=$(serving pid)
    track_pid "$old"
    t0=$(date +%s.%N)
    kill -KILL "$sup"
    wait "$sup" 2>/dev/null || true
    PULLFS_PID=
    # at once: the serving process of the supervisor killed may still run
    echo "+ $PULLFS --supervise (round $i)" >>"$PULLFS_LOG"
    "$PULLFS" -f --cache "$CACHE" --events-log "$EVENTS" --insecure-registry "$REGISTRY" \
        --supervise "$MNT" >>"$PULLFS_LOG" 2>&1 &
    PULLFS_PID=$!
    _serves() {
        _pid_gone "$PULLFS_PID" && return 2
        local pid
        pid=$(serving pid 2>/dev/null) || return 1
        [ -n "$pid" ] && [ "$pid" != "$old" ]
    }
    rc=0
    wait_for 30 _serves || rc=$?
    if ((rc == 0)) && [ "$(cat "$bb/etc/hostname" 2>/dev/null)" = busybox ]; then
        ok=$((ok + 1))
        log "round $i: serving again after $(py -c "print(round($(date +%s.%N) - $t0, 3))") s"
    else
        log "round $i: the start failed: $(tail -n 2 "$PULLFS_LOG" | tr '\n' ' ')"
        busy=$((busy + 1))
        _pid_gone "$PULLFS_PID" || fail "round $i: the start neither served nor ended"
        wait "$PULLFS_PID" 2>/dev/null || true
        PULLFS_PID=
        # start once more, later, for the next round
        wait_for 30 _pid_gone "$old" || fail "round $i: serving process $old did not end"
        wait_for 10 _unmounted || fail "round $i: $MNT still mounted"
        mount_pullfs --supervise
    fi
done
log "$ok of $ROUNDS starts right after kill -9 of the supervisor served; $busy failed"
assert_eq 0 "$(grep -c 'is in use by another pullfs' "$PULLFS_LOG")" "starts refused: the cache in use"
assert_eq "$ROUNDS" "$ok" "starts that served"

# SIGTERM, and a start at once, 10 times
for ((i = 1; i <= 10; i++)); do
    sup=$PULLFS_PID
    old=$(serving pid)
    kill -TERM "$sup"
    echo "+ $PULLFS --supervise (after SIGTERM, round $i)" >>"$PULLFS_LOG"
    "$PULLFS" -f --cache "$CACHE" --events-log "$EVENTS" --insecure-registry "$REGISTRY" \
        --supervise "$MNT" >>"$PULLFS_LOG" 2>&1 &
    PULLFS_PID=$!
    wait_for 30 _pid_gone "$sup" || fail "the supervisor did not end after SIGTERM"
    rc=0
    wait "$sup" || rc=$?
    assert_eq 0 "$rc" "exit status of the supervisor stopped"
    wait_for 30 _serves || fail "round $i: the start right after a SIGTERM did not serve: $(tail -n 3 "$PULLFS_LOG")"
    assert_eq busybox "$(cat "$bb/etc/hostname")" "hostname after the start following a SIGTERM"
done
log "10 of 10 starts right after SIGTERM of the supervisor served"

# a pullfs that serves on: refused at once
mkdir -p "$WORK/mnt2"
t0=$(date +%s.%N)
rc=0
"$PULLFS" -f --cache "$CACHE" --supervise "$WORK/mnt2" >"$WORK/second.log" 2>&1 || rc=$?
took=$(py -c "print(round($(date +%s.%N) - $t0, 3))")
log "a second start on the cache in use: status $rc after $took s"
assert_eq 1 "$rc" "status of a second start on the cache in use"
grep -q 'is in use by another pullfs' "$WORK/second.log" || fail "second start: $(cat "$WORK/second.log")"
# the wait for a holder on its way out is 5 s
py -c "import sys; sys.exit(0 if $took < 4 else 1)" || fail "the second start waited $took s for a pullfs that serves on"
unmount_pullfs

#!/bin/bash
# A stop while a notification waits for a directory that a lookup nothing
# will answer holds.  The stop ends the session first; lookups in images/
# keep coming, and those after that are never read; a notification of the
# notifier that drops a dentry of images/ is under way at the stop
# (PULLFS_FAULT=notify-late sends one 300 ms after it) and waits for them.
# pullfs ends within seconds all the same (the connection is aborted, the
# lookups fail) instead of keeping the mount, unanswered, for ever.
source "$(dirname "$0")/lib.sh"

need_fuse
start_registry
PULLFS_ENV=(PULLFS_FAULT=notify-late)
mount_pullfs
PULLFS_ENV=()
assert_errno OK "$MNT/images"
pid=$PULLFS_PID
# lookups in images/ from the stop on, one every 20 ms
(for i in $(seq 1 100); do
    stat "$MNT/images/late$i" >/dev/null 2>&1 &
    sleep 0.02
done
wait) &
late=$!
track_pid "$late"
kill -TERM "$pid"
t0=$(now)
wait_for 30 _pid_gone "$pid" ||
    fail "pullfs did not end within 30 s of SIGTERM: $(tail -3 "$PULLFS_LOG")"
log "pullfs ended $(seconds_since "$t0") s after SIGTERM"
wait "$pid" || true
PULLFS_PID=
wait_for 20 _pid_gone "$late" || fail "the lookups after the stop did not end"
grep -q "the connection is aborted" "$PULLFS_LOG" ||
    fail "no word of the abort in the log: $(tail -5 "$PULLFS_LOG")"
! is_mounted "$MNT" || fail "$MNT is still mounted after pullfs ended"
log "PASS"

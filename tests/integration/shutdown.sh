#!/bin/bash
# SIGTERM while a pull waits on a registry that does not answer: the
# daemon cancels the pull, answers the waiting lookup with an error,
# unmounts and exits 0, and leaves no half image behind.  The transfer
# timeout is an hour and the proxy never lets the blob go, so without the
# cancellation the daemon could not stop within the test's bound at all:
# the bound is a hang detector, not a speed measurement.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
start_registry
push_edge test/edge:1
start_slowproxy --gate "GET /v2/test/edge/blobs/=$WORK/never"
mount_pullfs --insecure-registry "$PROXY" --low-speed-timeout 3600
root=$MNT/images/$PROXY/test/edge:1

stat "$root/etc/hostname" >"$WORK/stat.out" 2>&1 &
probe=$!
_blob_held() { [ "$(proxy_count held 'GET /v2/test/edge/blobs/')" -ge 1 ]; }
wait_for 30 _blob_held || fail "the pull did not reach the blobs"

start=$SECONDS
pid=$PULLFS_PID
kill -TERM "$pid"
wait_for 60 _pid_gone "$pid" || fail "pullfs did not stop after SIGTERM during a held pull"
rc=0
wait "$pid" || rc=$?
PULLFS_PID=
assert_eq 0 "$rc" "exit status after SIGTERM"
! is_mounted "$MNT" || fail "$MNT still mounted"
log "stopped $((SECONDS - start)) s after SIGTERM"
wait_for 60 _pid_gone "$probe" || fail "the waiting lookup did not return"
wait "$probe" && fail "the lookup of a cancelled pull succeeded"
grep -q '"reason":"Failed"' "$EVENTS" || fail "no Failed event for the cancelled pull"
[ -z "$(ls -A "$CACHE/tmp" 2>/dev/null)" ] || fail "CACHE/tmp not empty: $(ls "$CACHE/tmp")"
[ -z "$(ls -A "$CACHE/refs" 2>/dev/null)" ] || fail "a reference was published for a cancelled pull"
log "PASS"

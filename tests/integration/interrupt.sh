#!/bin/bash
# An interrupted caller (SPEC §3 step 10, docs/ensure.md step 10): the
# programs whose lookup started a pull are killed (SIGINT, as Ctrl-C, and
# SIGKILL) while the pull runs; the pull still completes, and the next
# lookup is served by it: one Pulling event, one GET per blob.
#
# A proxy in front of the registry holds every blob request until the test
# creates a file, so "while the pull runs" is a known state, not a race.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
start_registry
push_edge test/edge:1
mapfile -t blobs < <(image_blobs test/edge:1)
gate=$WORK/release-blobs
start_slowproxy --gate "GET /v2/test/edge/blobs/=$gate"

mark=$(registry_mark)
# An hour of transfer timeout: while the proxy holds the blobs, only the
# answer to the kernel's interrupt can let a killed caller go.
mount_pullfs --insecure-registry "$PROXY" --low-speed-timeout 3600
ref=$PROXY/test/edge:1
root=$MNT/images/$ref

stat_bin=$(command -v stat)
cp "$stat_bin" "$WORK/probe-int"
cp "$stat_bin" "$WORK/probe-kill"
# A background job of a script ignores SIGINT unless told otherwise.
env --default-signal=INT "$WORK/probe-int" "$root/etc/hostname" >/dev/null 2>&1 &
pid_int=$!
"$WORK/probe-kill" "$root/etc/hostname" >/dev/null 2>&1 &
pid_kill=$!

_blob_held() { [ "$(proxy_count held 'GET /v2/test/edge/blobs/')" -ge 1 ]; }
wait_for 30 _blob_held || fail "the pull of $ref did not reach the blobs"
wait_event Pulling "$ref"
! _pid_gone "$pid_int" || fail "probe-int returned while its pull was held"
! _pid_gone "$pid_kill" || fail "probe-kill returned while its pull was held"

kill -INT "$pid_int"
kill -KILL "$pid_kill"
# A killed caller must not have to wait for the pull: the kernel asks the
# daemon to interrupt the request (FUSE_INTERRUPT) and waits for its
# answer.  Checked here, reported at the end, so that the rest is tested
# either way.
not_interrupted=
for p in "$pid_int" "$pid_kill"; do
    wait_for 30 _pid_gone "$p" || not_interrupted="$not_interrupted $(cat "/proc/$p/comm" 2>/dev/null)"
done
[ -n "$not_interrupted" ] || assert_eq 0 "$(event_count Pulled "$ref")" "Pulled events while the blobs are held"

# Let the blobs through: the pull goes on with nobody waiting for it.
touch "$gate"
wait_for 60 _pid_gone "$pid_int" || fail "probe-int still there after the pull was let through"
wait_for 60 _pid_gone "$pid_kill" || fail "probe-kill still there after the pull was let through"
rc_int=0 rc_kill=0
wait "$pid_int" 2>/dev/null || rc_int=$?
wait "$pid_kill" 2>/dev/null || rc_kill=$?
assert_eq 130 "$rc_int" "exit status of probe-int (killed by SIGINT)"
assert_eq 137 "$rc_kill" "exit status of probe-kill (killed by SIGKILL)"
wait_event Pulled "$ref"
assert_eq 0 "$(event_count Failed "$ref")" "Failed events after the callers were killed"

# The next lookup is served by that pull.
assert_eq edge "$(cat "$root/etc/hostname")" "/etc/hostname of $ref"
assert_eq 1 "$(event_count Pulling "$ref")" "Pulling events for $ref"
assert_eq 1 "$(event_count_msg Pulled "$ref" "Successfully pulled")" "pulls of $ref"
assert_eq 1 "$(registry_count GET "/v2/test/edge/manifests/1 " "$mark")" "manifest GETs of test/edge:1"
for d in "${blobs[@]}"; do
    assert_eq 1 "$(registry_count GET "/v2/test/edge/blobs/$d " "$mark")" "GETs of blob $d"
done
events check >&2 || fail "malformed events in $EVENTS"
unmount_pullfs
[ -z "$not_interrupted" ] ||
    fail "killed while their lookup waited for the pull,$not_interrupted did not die until the pull could go on (is FUSE_INTERRUPT answered?)"
log "PASS"

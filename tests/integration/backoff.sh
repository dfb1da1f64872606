#!/bin/bash
# Back-off per reference (SPEC §3 step 4, docs/ensure.md step 4), as a
# mount shows it: a failed pull (EHOSTUNREACH, a Failed event) and then, at
# once, EAGAIN with a BackOff event that names the previous error, without
# asking the registry again.  The timeline itself (windows of 10 s, 20 s,
# ... up to the cap, a registry that is back still not asked inside the
# window, a success clearing the entry) is unit-tested on a fake registry
# and a hand-moved clock: tests/unit/test-ensure.c, test_backoff_timeline.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
start_registry
push_busybox test/busybox:latest
stop_registry

ref=$REGISTRY/test/busybox:latest
path=$MNT/images/$ref
mount_pullfs --backoff-initial 60

# ---- first failure, then refused at once
assert_errno EHOSTUNREACH "$path"
wait_event Failed "$ref"
assert_eq EHOSTUNREACH "$(events field Failed "$ref" errno)" "errno of the Failed event"
failed_msg=$(events field Failed "$ref" message)

assert_errno EAGAIN "$path"
wait_event BackOff "$ref"
backoff_msg=$(events field BackOff "$ref" message)
prefix="Back-off pulling image \"$ref\": "
[[ $backoff_msg == "$prefix"* ]] || fail "BackOff message '$backoff_msg' does not start with '$prefix'"
previous=${backoff_msg#"$prefix"}
[ -n "$previous" ] || fail "BackOff message '$backoff_msg' does not give the previous error"
assert_contains "$previous" "$failed_msg" "the Failed message (the previous error, as BackOff gives it)"
assert_eq Normal "$(events field BackOff "$ref" type)" "type of the BackOff event"
assert_eq EAGAIN "$(events field BackOff "$ref" errno)" "errno of the BackOff event"

# ---- the registry is back, same port: still refused inside the window
restart_registry
mark=$(registry_mark)
assert_errno EAGAIN "$path"
wait_event_count 2 BackOff "$ref"
assert_eq 0 "$(registry_count GET /v2/test/busybox/ "$mark")" "registry GETs inside the back-off window"
assert_eq 0 "$(registry_count HEAD /v2/test/busybox/ "$mark")" "registry HEADs inside the back-off window"
assert_eq 1 "$(event_count Pulling "$ref")" "Pulling events while backing off"
assert_eq 1 "$(event_count Failed "$ref")" "Failed events while backing off"

events check >&2 || fail "malformed events in $EVENTS"
unmount_pullfs
log "PASS"

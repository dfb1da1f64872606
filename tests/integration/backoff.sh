#!/bin/bash
# Back-off per reference (SPEC §3 step 4, README "Ensure" step 4), with
# --backoff-initial 2 so that the windows are short:
#   failure (EHOSTUNREACH, Failed) -> EAGAIN at once with a BackOff event
#   naming the previous error, and no registry traffic -> after 2 s a new
#   attempt, which fails again -> a 4 s window (doubled), in which a
#   registry that is back on the same port is still not asked -> after it
#   the pull succeeds -> a success clears the entry: the next failure (the
#   tag deleted from the registry) starts again at 2 s, not 8 s.
# The image is a ":latest" tag (policy Always) with --revalidate-interval 1,
# so that once pulled it asks the registry again and can fail again.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
start_registry
push_busybox test/busybox:latest
stop_registry

ref=$REGISTRY/test/busybox:latest
path=$MNT/images/$ref
repo_path=/v2/test/busybox/
mount_pullfs --backoff-initial 2 --backoff-max 16 --revalidate-interval 1

# ---- first failure, then refused at once
assert_errno EHOSTUNREACH "$path"
t_fail=$(now)
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
assert_eq 1 "$(event_count Pulling "$ref")" "Pulling events while backing off"
assert_eq 1 "$(event_count Failed "$ref")" "Failed events while backing off"

# ---- after the 2 s window: a new attempt, which fails again (window 4 s)
sleep_until "$(plus "$t_fail" 2.3)"
assert_errno EHOSTUNREACH "$path"
t_fail=$(now)
wait_event_count 2 Failed "$ref"
assert_eq 2 "$(event_count Pulling "$ref")" "Pulling events after the first window"
assert_errno EAGAIN "$path"
wait_event_count 2 BackOff "$ref"

# ---- the registry is back, same port: still refused inside the window
restart_registry
mark=$(registry_mark)
if less_than "$(seconds_since "$t_fail")" 3.5; then
    assert_errno EAGAIN "$path"
    wait_event_count 3 BackOff "$ref"
    assert_eq 0 "$(registry_count GET "$repo_path" "$mark")" "registry GETs inside the back-off window"
    assert_eq 0 "$(registry_count HEAD "$repo_path" "$mark")" "registry HEADs inside the back-off window"
else
    log "the registry took $(seconds_since "$t_fail") s to restart: EAGAIN inside the 4 s window not checked"
fi
# The window doubled: 2 s after the failure it still refuses.
if less_than "$(seconds_since "$t_fail")" 2.0; then
    sleep_until "$(plus "$t_fail" 2.3)"
    assert_errno EAGAIN "$path"
fi

# ---- after the window: pulled
sleep_until "$(plus "$t_fail" 4.3)"
assert_errno OK "$path"
assert_eq busybox "$(cat "$path/etc/hostname")" "/etc/hostname of $ref"
wait_event Pulled "$ref"
assert_eq 3 "$(event_count Pulling "$ref")" "Pulling events after the pull"
digest=$(manifest_digest test/busybox:latest)
assert_eq "$digest" "$(events field Pulled "$ref" digest)" "digest of the Pulled event"

# ---- a success cleared the entry: the next failure gets 2 s again.
# This failure is the tag deleted from the registry (ENOENT at the next
# revalidation), which fails at once where an unreachable registry costs
# the client's connection retries.
curl -sf -o /dev/null -X DELETE "http://$REGISTRY/v2/test/busybox/manifests/$digest" ||
    fail "cannot delete test/busybox:latest from the registry"
t_ok=$(now)
sleep_until "$(plus "$t_ok" 1.2)" # revalidation interval and entry timeout: 1 s
failed_before=$(event_count Failed "$ref")
assert_errno ENOENT "$path"
t_fail=$(now)
wait_event_count $((failed_before + 1)) Failed "$ref"
assert_errno EAGAIN "$path"
sleep_until "$(plus "$t_fail" 2.3)"
# Not cleared, the window would be 8 s now and this would be EAGAIN.
assert_errno ENOENT "$path"
wait_event_count $((failed_before + 2)) Failed "$ref"
assert_eq "ENOENT
ENOENT" "$(event_fields Failed "$ref" errno | tail -n2)" "errno of the last two Failed events"

events check >&2 || fail "malformed events in $EVENTS"
unmount_pullfs
log "PASS"

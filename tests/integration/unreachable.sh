#!/bin/bash
# A registry that does not answer: EHOSTUNREACH, and a Failed event saying so.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
start_registry
push_busybox test/busybox:1
stop_registry

ref=$REGISTRY/test/busybox:1
mount_pullfs
assert_errno EHOSTUNREACH "$MNT/images/$ref"
wait_event Failed "$ref"
assert_eq EHOSTUNREACH "$(events field Failed "$ref" errno)" "errno of the Failed event for $ref"
events check >&2 || fail "malformed events in $EVENTS"
unmount_pullfs
log "PASS"

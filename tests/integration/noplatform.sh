#!/bin/bash
# An index with no image for this node's platform: ENOEXEC, and a Failed
# event saying so.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
start_registry
push_noplatform test/noplatform:1

ref=$REGISTRY/test/noplatform:1
mount_pullfs
assert_errno ENOEXEC "$MNT/images/$ref"
wait_event Failed "$ref"
assert_eq ENOEXEC "$(events field Failed "$ref" errno)" "errno of the Failed event for $ref"
assert_not_contains "noplatform:1" "$(list_dir "$MNT/images/$REGISTRY/test" 2>/dev/null || true)" "ls $MNT/images/$REGISTRY/test"
events check >&2 || fail "malformed events in $EVENTS"
unmount_pullfs
log "PASS"

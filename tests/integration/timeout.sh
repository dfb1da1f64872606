#!/bin/bash
# ETIMEDOUT: a registry that accepts the request and then says nothing.
# With --low-speed-timeout 2 each attempt gives up after about 2 s; after
# the bounded retries the lookup fails with ETIMEDOUT and a Failed event
# carrying that errno.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
start_registry
push_busybox test/busybox:1
start_slowproxy --gate "GET /v2/test/busybox/manifests/=$WORK/never"
mount_pullfs --insecure-registry "$PROXY" --low-speed-timeout 2
ref=$PROXY/test/busybox:1
assert_errno ETIMEDOUT "$MNT/images/$ref"
wait_event Failed "$ref"
assert_eq ETIMEDOUT "$(events field Failed "$ref" errno)" "errno of the Failed event"
assert_contains "timed out" "$(events field Failed "$ref" message)" "Failed message"
unmount_pullfs
log "PASS"

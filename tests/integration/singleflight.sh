#!/bin/bash
# Single flight (SPEC §3 step 7): 32 concurrent cold lookups of one image
# all succeed, and the registry's own access log shows one manifest GET
# for the tag and one GET per blob (config and each layer).
#
# The kernel merges concurrent lookups of one name in one directory entry
# by itself, so the lookups go through 4 distinct entries of the parent
# directory (lookups.py --parents), which reach the daemon as separate
# requests; a proxy holds the manifest back for a moment so that the
# pull is still running when they arrive.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
start_registry
push_edge test/edge:1
mapfile -t blobs < <(image_blobs test/edge:1)
[ "${#blobs[@]}" -ge 3 ] || fail "expected a config and layers for test/edge:1, got ${blobs[*]}"
start_slowproxy --delay 'GET /v2/test/edge/manifests/=1.5'

mark=$(registry_mark)
mount_pullfs --insecure-registry "$PROXY"
ref=$PROXY/test/edge:1

out=$(concurrent_lookups --parents 4 --read etc/passwd 32 "$MNT/images/$PROXY/test" edge:1)
assert_eq "OK 32" "$out" "outcome of 32 concurrent lookups of $ref"

wait_event Pulled "$ref"
assert_eq 1 "$(event_count Pulling "$ref")" "Pulling events for 32 concurrent lookups"
assert_eq 1 "$(event_count_msg Pulled "$ref" "Successfully pulled")" "pulls of $ref"
assert_eq 0 "$(event_count Failed "$ref")" "Failed events for $ref"

assert_eq 1 "$(registry_count GET "/v2/test/edge/manifests/1 " "$mark")" "manifest GETs of test/edge:1"
for d in "${blobs[@]}"; do
    assert_eq 1 "$(registry_count GET "/v2/test/edge/blobs/$d " "$mark")" "GETs of blob $d"
done
assert_eq "${#blobs[@]}" "$(registry_count GET /v2/test/edge/blobs/ "$mark")" "blob GETs in all"
# Every request went through the proxy (nothing reached the registry
# another way), and the manifest was held back as configured.
assert_eq 1 "$(proxy_count held 'GET /v2/test/edge/manifests/')" "manifest requests held by the proxy"

# The image is whole and every later lookup is served from the cache.
assert_eq edge "$(cat "$MNT/images/$ref/etc/hostname")" "/etc/hostname of $ref"
out=$(concurrent_lookups 8 "$MNT/images/$PROXY/test" edge:1)
assert_eq "OK 8" "$out" "outcome of 8 lookups of the cached $ref"
assert_eq 1 "$(registry_count GET "/v2/test/edge/manifests/1 " "$mark")" "manifest GETs after the image was cached"
events check >&2 || fail "malformed events in $EVENTS"
unmount_pullfs
log "PASS"

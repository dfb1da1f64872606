#!/bin/bash
# A layer whose bytes do not match its digest fails the lookup with EBADMSG,
# leaves no temporary files and publishes no image.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
start_registry
push_edge test/edge:1

# Flip bytes in the middle of the big layer, keeping its size; the
# registry serves blobs as stored.
layer=$(registry_manifest test/edge:1 | python3 -c '
import json, sys
print(max(json.load(sys.stdin)["layers"], key=lambda l: l["size"])["digest"])')
blob=$(blob_path "$layer")
[ -f "$blob" ] || fail "layer blob not found at $blob"
size=$(stat -c %s "$blob")
printf 'corrupted by the pullfs tests' | dd of="$blob" bs=1 seek=$((size / 2)) conv=notrunc status=none
assert_eq "$size" "$(stat -c %s "$blob")" "size of the corrupted blob"
[ "$(sha256sum <"$blob" | cut -d' ' -f1)" != "${layer#sha256:}" ] || fail "the blob did not change"

ref=$REGISTRY/test/edge:1
mount_pullfs
assert_errno EBADMSG "$MNT/images/$ref"
wait_event Failed "$ref"
assert_eq EBADMSG "$(events field Failed "$ref" errno)" "errno of the Failed event for $ref"
assert_eq 0 "$(event_count Pulled "$ref")" "Pulled events for $ref"
events check >&2 || fail "malformed events in $EVENTS"
no_image_listed() {
    local names
    names=$(py -c '
import os, sys
try:
    print("\n".join(os.listdir(sys.argv[1])))
except FileNotFoundError:
    pass' "$MNT/images/$REGISTRY/test")
    assert_not_contains "edge:1" "$names" "ls $MNT/images/$REGISTRY/test"
}
no_image_listed
unmount_pullfs

if [ -d "$CACHE/tmp" ]; then
    left=$(find "$CACHE/tmp" -mindepth 1)
    [ -z "$left" ] || fail "left in $CACHE/tmp after a failed pull: $left"
fi

mount_pullfs
no_image_listed
unmount_pullfs
log "PASS"

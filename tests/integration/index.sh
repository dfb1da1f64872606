#!/bin/bash
# A multi-platform OCI index, and a Docker manifest list, resolve to this
# node's platform.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
arch=$(node_arch)
case $arch in
amd64 | arm64) ;;
*) skip "the test index has amd64 and arm64 images only, this node is $arch" ;;
esac
start_registry
push_multi test/multi:1
push_multi_docker test/multi-docker:1
index_digest=$(manifest_digest test/multi:1)
mount_pullfs

ref=$REGISTRY/test/multi:1
assert_eq "$arch" "$(cat "$MNT/images/$ref/platform")" "/platform of $ref"
# Through the index digest too.
assert_eq "$arch" "$(cat "$MNT/images/$REGISTRY/test/multi@$index_digest/platform")" "/platform of test/multi@$index_digest"

# The Pulled event names the manifest of this platform, not the index.
wait_event Pulled "$ref"
want=$(registry_manifest test/multi:1 | python3 -c '
import json, sys
for m in json.load(sys.stdin)["manifests"]:
    if m["platform"]["architecture"] == sys.argv[1]:
        print(m["digest"])' "$arch")
got=$(events field Pulled "$ref" digest)
[ "$got" = "$want" ] || [ "$got" = "$index_digest" ] ||
    fail "digest of the Pulled event for $ref: $got is neither the $arch manifest $want nor the index $index_digest"

# The same as a Docker manifest list.
ref=$REGISTRY/test/multi-docker:1
assert_eq "$arch" "$(cat "$MNT/images/$ref/platform")" "/platform of $ref"

unmount_pullfs
log "PASS"

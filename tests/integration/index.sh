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

# An index whose entry is another index (valid OCI) is followed; a chain
# deeper than four indexes is refused with EBADMSG.
python3 - "$REGISTRY" "$index_digest" <<'PY' || fail "pushing nested indexes"
import hashlib, json, sys, urllib.request
reg, digest = sys.argv[1], sys.argv[2]
IDX = "application/vnd.oci.image.index.v1+json"
def get(ref):
    req = urllib.request.Request(f"http://{reg}/v2/test/multi/manifests/{ref}", headers={"Accept": IDX})
    return urllib.request.urlopen(req).read()
size = len(get(digest))
for level in range(1, 7):
    body = json.dumps({"schemaVersion": 2, "mediaType": IDX, "manifests": [
        {"mediaType": IDX, "digest": digest, "size": size}]}).encode()
    req = urllib.request.Request(f"http://{reg}/v2/test/multi/manifests/nest{level}", data=body,
                                 method="PUT", headers={"Content-Type": IDX})
    urllib.request.urlopen(req).read()
    digest, size = "sha256:" + hashlib.sha256(body).hexdigest(), len(body)
PY
assert_eq "$arch" "$(cat "$MNT/images/$REGISTRY/test/multi:nest1/platform")" "/platform through an index in an index"
assert_eq "$arch" "$(cat "$MNT/images/$REGISTRY/test/multi:nest3/platform")" "/platform through four indexes"
assert_errno EBADMSG "$MNT/images/$REGISTRY/test/multi:nest6"
assert_contains "deeper than 4" "$(events field Failed "$REGISTRY/test/multi:nest6" message)" "Failed message of a deep chain"

unmount_pullfs
log "PASS"

#!/bin/bash
# The edge image with zstd layers is served exactly like the gzip one (the
# reference: umoci cannot unpack zstd).
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
start_registry
push_edge test/edge:1
push_edge_zstd test/edge-zstd:1

mount_pullfs
gz=$MNT/images/$REGISTRY/test/edge:1
zst=$MNT/images/$REGISTRY/test/edge-zstd:1
assert_errno OK "$zst"
assert_errno OK "$gz"
assert_tree_eq "$gz" "$zst"
assert_tree_eq "$zst" "$gz"
# And the tree umoci makes of the gzip original, which it can read.
umoci unpack --image "$(layout_of edge):1" "$WORK/bundle" >/dev/null
assert_tree_eq "$WORK/bundle/rootfs" "$zst" --dir-mtime

unmount_pullfs
log "PASS"

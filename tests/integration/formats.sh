#!/bin/bash
# The edge image as a Docker schema 2 manifest with Docker gzip layers, and
# as an OCI manifest with uncompressed layers: both are the tree `umoci
# unpack` makes of the OCI original.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
start_registry
push_edge_docker test/edge-docker:1
push_edge_plain test/edge-plain:1

umoci unpack --image "$(layout_of edge):1" "$WORK/bundle" >/dev/null
reference=$WORK/bundle/rootfs

mount_pullfs
for name in edge-docker edge-plain; do
    root=$MNT/images/$REGISTRY/test/$name:1
    assert_errno OK "$root"
    assert_tree_eq "$reference" "$root" --dir-mtime
done
events check >&2 || fail "malformed events in $EVENTS"
unmount_pullfs
log "PASS"

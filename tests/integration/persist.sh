#!/bin/bash
# The cache survives a restart: with the registry stopped, a new mount
# serves what the first one pulled, without pulling again.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
need_cmd chroot
start_registry
push_busybox test/busybox:1
push_edge test/edge:1

bb=$REGISTRY/test/busybox:1
edge=$REGISTRY/test/edge:1

mount_pullfs
assert_eq hi "$(chroot "$MNT/images/$bb" /bin/echo hi)" "chroot into $bb"
py "$TREECMP" --snapshot "$WORK/busybox.json" "$MNT/images/$bb" >&2
py "$TREECMP" --snapshot "$WORK/edge.json" "$MNT/images/$edge" >&2
unmount_pullfs

stop_registry
pulling_before=$(event_count Pulling "$bb")
assert_eq 1 "$pulling_before" "Pulling events for $bb"

mount_pullfs
assert_eq hi "$(chroot "$MNT/images/$bb" /bin/echo hi)" "chroot into $bb after a restart, registry down"
assert_tree_eq "$WORK/busybox.json" "$MNT/images/$bb"
assert_tree_eq "$WORK/edge.json" "$MNT/images/$edge"
assert_contains "busybox:1" "$(list_dir "$MNT/images/$REGISTRY/test")" "ls $MNT/images/$REGISTRY/test after a restart"
assert_contains "edge:1" "$(list_dir "$MNT/images/$REGISTRY/test")" "ls $MNT/images/$REGISTRY/test after a restart"
unmount_pullfs

assert_eq 1 "$(event_count Pulling "$bb")" "Pulling events for $bb after a restart"
assert_eq 1 "$(event_count Pulling "$edge")" "Pulling events for $edge after a restart"
assert_eq 0 "$(event_count Failed "$bb")" "Failed events for $bb"
assert_eq 0 "$(event_count Failed "$edge")" "Failed events for $edge"
log "PASS"

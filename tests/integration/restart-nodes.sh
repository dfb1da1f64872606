#!/bin/bash
# What the kernel holds across a death of the serving process, beyond
# restart.sh's images/: nodes of the layer store (MOUNT/layers/, its
# layer directories, the files info and blob, and diff, a view of one
# layer) held open and as a working directory by a reader while the
# serving process is killed; files read as before, no ESTALE.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/restartlib.sh"

need_fuse
need_cmd umoci
start_registry
push_busybox test/busybox:1
mount_pullfs

ref=$REGISTRY/test/busybox:1
b64=$(printf %s "$ref" | base64 -w0)
mapfile -t blobs < <(image_blobs test/busybox:1)
layer=${blobs[-1]}
L=$MNT/layers/$b64/$layer
umoci unpack --image "$(layout_of busybox):1" "$WORK/busybox" >/dev/null

# ---- the layer store across kills ----------------------------------------
[ -d "$L/diff/etc" ] || fail "$L/diff/etc: $(errno_of "$L/diff/etc")"
want=()
for f in bin/busybox etc/passwd etc/group; do
    want+=("../$f=$(sha256sum "$WORK/busybox/rootfs/$f" | cut -d' ' -f1)")
done
want+=("../../info=$(sha256sum <"$L/info" | cut -d' ' -f1)")
want+=("../../blob=${layer#sha256:}")
start_reader "$L/diff/etc" "$L" "${want[@]}"
reader_settle "start"
id=$(mount_id)
kill_serving 3 reader_settle
_stop_pid "$reader_pid"
errors=$(reader_errors)
[ -z "$errors" ] || fail "reading under layers/ across kills: $(head -n 5 <<<"$errors")"
! grep -q 'cannot restore' "$PULLFS_LOG" || fail "restore failed: $(grep 'cannot restore' "$PULLFS_LOG" | head -n 3)"
assert_eq "$id" "$(mount_id)" "mount id after the kills"
log "layers/: $(reader_rounds) rounds across 3 kills, no error"

unmount_pullfs
log "PASS"

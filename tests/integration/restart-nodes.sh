#!/bin/bash
# What the kernel holds across a death of the serving process, beyond
# restart.sh's images/: nodes of the layer store (MOUNT/layers/, its
# layer directories, the files info and blob, and diff, a view of one
# layer) held open and as a working directory by a reader while the
# serving process is killed; files read as before, no ESTALE.  Then
# images restored after a kill (the kernel's counts of lookups unknown)
# are let go once the kernel forgets them: after drop_caches, `pullfsctl
# rm` and `gc` remove them.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/restartlib.sh"

need_fuse
need_root
need_cmd umoci
start_registry
push_busybox test/busybox:1
push_busybox test/app:1
push_busybox test/other:1
mount_pullfs --gc-min-age 0
ctl() { "$PULLFSCTL" -m "$MNT" "$@"; }

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

# ---- restored images are let go when the kernel forgets them ------------
# (busybox:1 stays in use: the views of its layer, made again after the
# kills, hold it open for the rest of this process's life.)
app=$MNT/images/$REGISTRY/test/app:1
other=$MNT/images/$REGISTRY/test/other:1
passwd=$(cat "$WORK/busybox/rootfs/etc/passwd")
assert_eq "$passwd" "$(cat "$app/etc/passwd")" "app:1 etc/passwd"
assert_eq "$passwd" "$(cat "$other/etc/passwd")" "other:1 etc/passwd"
# other:1 is forgotten by the kernel before the kill (its record stays in
# the hand-over log), app:1 is held by the kernel across it.
sync
echo 2 >/proc/sys/vm/drop_caches
assert_eq "$passwd" "$(cat "$app/etc/passwd")" "app:1 etc/passwd again"
kill_serving 1 true
assert_eq "$passwd" "$(cat "$app/etc/passwd")" "app:1 etc/passwd after the kill"
# The new process asks the kernel whether it holds other:1's root (it
# does not): gc removes it, once that was asked.
_collected() {
    out=$(ctl gc --to 0 2>&1) || return 2
    [[ $(ctl ls) != *test/other:1* ]]
}
wait_for 20 _collected || fail "gc of a restored image the kernel had forgotten: $out"
# The kernel lets go of every node nothing uses, and says so (FORGET,
# which the daemon reads after drop_caches returns: rm is tried again
# until it was read).
sync
echo 2 >/proc/sys/vm/drop_caches
_removed() { out=$(ctl rm "$REGISTRY/test/app:1" 2>&1); }
wait_for 20 _removed || fail "rm of a restored image after drop_caches: $out"
assert_not_contains "test/app:1" "$(ctl ls)" "pullfsctl ls after rm"

unmount_pullfs
log "PASS"

#!/bin/bash
# What the kernel holds across a death of the serving process, beyond
# restart.sh's images/: nodes of the layer store (MOUNT/layers/, its
# layer directories, the files info and blob, and diff, a view of one
# layer) held open and as a working directory by a reader while the
# serving process is killed; files read as before, no ESTALE.  Then
# images restored after a kill (the kernel's counts of lookups unknown)
# are let go once nothing holds them, without drop_caches: `gc` removes
# those only the dentry cache holds (an image, a layer view's source) and
# keeps one a process is in, which `rm` removes once the process is gone.
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

# ---- restored images are let go when nothing holds them -----------------
# After a kill the new process cannot know the kernel's counts of lookups:
# it pins what it restored.  Before gc and rm judge what is in use, it asks
# the kernel to drop the dentries of restored images no process is in
# (no drop_caches here: the kernel would otherwise cache them for good).
app=$MNT/images/$REGISTRY/test/app:1
other=$MNT/images/$REGISTRY/test/other:1
passwd=$(cat "$WORK/busybox/rootfs/etc/passwd")
assert_eq "$passwd" "$(cat "$app/etc/passwd")" "app:1 etc/passwd"
assert_eq "$passwd" "$(cat "$other/etc/passwd")" "other:1 etc/passwd"
# other:1 is held across the kill by a process with its working directory
# in it; app:1 is only cached by the kernel, and so is the layer directory
# of busybox:1 (its view, made again at each kill, held the image open).
(cd "$other/etc" && exec sleep 1000) &
holder=$!
track_pid "$holder"
kill_serving 1 true
assert_eq "$passwd" "$(cat "$app/etc/passwd")" "app:1 etc/passwd after the kill"
out=$(ctl gc --to 0 2>&1) || fail "gc: $out"
listed=$(ctl ls)
assert_not_contains "test/app:1" "$listed" "pullfsctl ls after gc: app:1, which nothing holds"
assert_not_contains "test/busybox:1" "$listed" "pullfsctl ls after gc: busybox:1, whose layer view nothing holds"
assert_contains "test/other:1" "$listed" "pullfsctl ls after gc: other:1, a working directory in it"
assert_eq "$passwd" "$(cat /proc/$holder/cwd/passwd)" "other:1 through the working directory after gc"
[ "$(readlink /proc/$holder/cwd)" = "$other/etc" ] || fail "working directory of the holder after gc: $(readlink /proc/$holder/cwd)"
out=$(ctl rm "$REGISTRY/test/other:1" 2>&1) && fail "rm of other:1 while a process is in it: $out"
_stop_pid "$holder"
# (the kernel sends the RELEASE of a closed file in the background: that
# of the read through the holder's directory may come a moment after)
rm_other() { out=$(ctl rm "$REGISTRY/test/other:1" 2>&1); }
wait_for 10 rm_other || fail "rm of other:1 once its holder is gone: $out"
assert_not_contains "test/other:1" "$(ctl ls)" "pullfsctl ls after rm"

unmount_pullfs
log "PASS"

#!/bin/bash
# Crash safety, as a user sees it.  By default pullfs is a supervisor that
# holds the mount and a serving process it restarts (fs/restart/supervisor.c).
#
# 1. For each failure-injection point of a pull (common/fault.h) the
#    serving process SIGKILLs itself there.  The lookup that caused the
#    pull waits and then succeeds: the next serving process recovers the
#    cache and pulls again, with the right tree; the mount is the same one
#    throughout (never stale), nothing is left in CACHE/tmp.
# 2. The same points under --no-supervise (one process): the lookup fails,
#    the mount is left stale (ENOTCONN), no half image is visible; a new
#    daemon on the same mount point and cache clears the stale mount with a
#    message and the next lookup completes the pull.
# 3. A kill -9 of the serving process by the test at a random moment of a
#    larger pull: the lookup waits and succeeds, same mount, right content.
# 4. A kill -9 of the supervisor (docs/restarts.md): the
#    serving process unmounts and exits, no stale mount is left, and a new
#    start serves the cached image.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/restartlib.sh"

need_fuse
need_cmd umoci
start_registry
push_edge test/edge:1
push_edge_docker test/edge-docker:1
ref=$REGISTRY/test/edge:1
root=$MNT/images/$ref

umoci unpack --image "$(layout_of edge):1" "$WORK/bundle" >/dev/null
reference=$WORK/bundle/rootfs

# expect_killed: the daemon must have died of SIGKILL; forget its PID.
expect_killed() {
    local what=$1 rc=0
    wait_for 20 _pid_gone "$PULLFS_PID" || fail "$what: pullfs still running"
    wait "$PULLFS_PID" || rc=$?
    PULLFS_PID=
    assert_eq 137 "$rc" "$what: exit status of pullfs (128 + SIGKILL)"
}

# tmp_leftovers DIR: what is in CACHE/tmp.
tmp_leftovers() { find "$1/tmp" -mindepth 1 2>/dev/null | head -n 20; }

# not_listed: the image is not in the listing of its repository.
not_listed() {
    local names
    names=$(py -c '
import os, sys
try:
    print("\n".join(os.listdir(sys.argv[1])))
except FileNotFoundError:
    pass' "$MNT/images/$REGISTRY/test")
    assert_not_contains "edge:1" "$names" "$1: ls images/$REGISTRY/test before the lookup"
}

# remount_after_crash WHAT: a daemon without the fault on the stale mount
# point; checks the stale mount is reported and replaced.
remount_after_crash() {
    local what=$1 lines
    assert_errno ENOTCONN "$MNT"
    [ -n "$(mount_id)" ] || fail "$what: no stale mount left on $MNT"
    lines=$(grep -c 'stale mount' "$PULLFS_LOG" || true)
    # No pause here: pullfs asks the dead mount with statfs(), which the
    # kernel never answers from a cache, so a restart at once finds it.
    PULLFS_ENV=()
    # The stale mount satisfies mount_pullfs at once: the message comes
    # before the new mount, which then answers where the stale one cannot.
    mount_pullfs --no-supervise
    _stale_cleared() { [ "$(grep -c 'stale mount' "$PULLFS_LOG" || true)" -gt "$lines" ]; }
    wait_for 30 _stale_cleared || fail "$what: no stale-mount message from the new pullfs"
    assert_contains "was a stale mount of a pullfs that is gone; unmounted it" \
        "$(grep 'stale mount' "$PULLFS_LOG" | tail -n 1)" "$what: stale-mount message"
    _answers() { [ "$(errno_of "$MNT/images")" = OK ]; }
    wait_for 30 _answers || fail "$what: $MNT/images does not answer after the restart"
    # exactly one mount: the stale one is gone, not hidden below
    assert_eq 1 "$(awk -v d="$(realpath -m "$MNT")" '$5 == d' /proc/self/mountinfo | wc -l)" "$what: mounts on $MNT"
}

# check_recovery WHAT CACHE_DIR: after a remount, the image completes and
# is right, and nothing is left in tmp/.
check_recovery() {
    local what=$1 left
    left=$(tmp_leftovers "$CACHE")
    [ -z "$left" ] || fail "$what: left in $CACHE/tmp after a restart: $left"
    not_listed "$what"
    assert_errno OK "$root"
    assert_tree_eq "$reference" "$root" --dir-mtime
    unmount_pullfs
    left=$(tmp_leftovers "$CACHE")
    [ -z "$left" ] || fail "$what: left in $CACHE/tmp after unmount: $left"
    [ -n "$(find "$CACHE/refs" -type f)" ] || fail "$what: no reference file after a complete pull"
    assert_eq 1 "$(event_count_msg Pulled "$ref" "Successfully pulled")" "$what: Pulled events"
    assert_eq 0 "$(event_count Failed "$ref")" "$what: Failed events"
}

# check_supervised_recovery WHAT MOUNT_ID: after one death of the serving
# process, the image is whole and right, on the same mount.
check_supervised_recovery() {
    local what=$1 id=$2 left
    assert_eq "$id" "$(mount_id)" "$what: mount id (the mount stayed)"
    assert_eq 1 "$(serving recoveries)" "$what: serving.recoveries"
    assert_contains "was killed by signal 9" "$(grep '^pullfs: serving process' "$PULLFS_LOG" | tail -n 1)" "$what: the supervisor's message"
    left=$(tmp_leftovers "$CACHE")
    [ -z "$left" ] || fail "$what: left in $CACHE/tmp after the recovery: $left"
}

for point in manifest config mid-blob mid-unpack layer publish; do
    log "fault point, supervised: $point"
    CACHE=$WORK/cache-sup-$point
    EVENTS=$WORK/events-sup-$point.log
    PULLFS_ENV=(PULLFS_FAULT=$point)
    mount_pullfs
    id=$(mount_id)
    first=$(serving pid)
    # the lookup waits across the death of the serving process
    assert_errno OK "$root"
    [ "$(serving pid)" != "$first" ] || fail "$point: the serving process did not die at the fault point"
    assert_tree_eq "$reference" "$root" --dir-mtime
    check_supervised_recovery "$point" "$id"
    unmount_pullfs
    assert_eq 1 "$(event_count_msg Pulled "$ref" "Successfully pulled")" "$point: Pulled events"
    PULLFS_ENV=()
done

for point in manifest config mid-blob mid-unpack layer publish; do
    log "fault point, --no-supervise: $point"
    CACHE=$WORK/cache-$point
    EVENTS=$WORK/events-$point.log
    PULLFS_ENV=(PULLFS_FAULT=$point)
    mount_pullfs --no-supervise
    got=$(errno_of "$root")
    case $got in
    ENOTCONN | ECONNABORTED) ;;
    *) fail "$point: lookup of $root: expected ENOTCONN or ECONNABORTED (daemon killed), got $got" ;;
    esac
    expect_killed "$point"
    assert_eq 0 "$(event_count Pulled "$ref")" "$point: Pulled events before the crash"
    # Nothing published names the image yet.
    [ -z "$(find "$CACHE/refs" -type f)" ] || fail "$point: a reference file exists after the crash"
    case $point in
    manifest) [ -z "$(find "$CACHE/layers" -mindepth 1)" ] || fail "manifest: layers published before the config" ;;
    publish)
        # published, or verified and staged for the publisher (which the
        # next start publishes)
        n=$(($(find "$CACHE/layers" -mindepth 1 -maxdepth 1 | wc -l) + $(find "$CACHE/tmp" -mindepth 2 -maxdepth 2 -name verified | wc -l)))
        [ "$n" = 3 ] || fail "publish: expected all 3 layers published or verified before the reference, got $n" ;;
    esac
    remount_after_crash "$point"
    check_recovery "$point"
done

# ---- a kill between the lookup's answer and the publish ------------------
# A layer is served from its stage as soon as it is unpacked and verified
# and published in the background (docs/content-store.md, "Durability").
# PULLFS_FAULT=staged holds that publish, so the image is served, read and
# then its serving process killed in the window: the next process (same
# boot) publishes the staged layers and the reference that waited for them
# at its start, the reader never sees an error, and nothing is pulled again.
log "kill in the window between the lookup's answer and the publish"
CACHE=$WORK/cache-staged
EVENTS=$WORK/events-staged.log
PULLFS_ENV=(PULLFS_FAULT=staged)
mark=$(registry_mark)
mount_pullfs
id=$(mount_id)
assert_errno OK "$root"
n=$(find "$CACHE/tmp" -mindepth 2 -maxdepth 2 -name verified | wc -l)
assert_eq 3 "$n" "staged: layers served from their verified stages"
[ -z "$(find "$CACHE/refs" "$CACHE/layers" -mindepth 1)" ] || fail "staged: published before the flush"
# another image with the same layers, looked up in the window: served from
# the same stages, not fetched or unpacked again
docker_root=$MNT/images/$REGISTRY/test/edge-docker:1
assert_eq "$(image_blobs test/edge:1 | tail -n +2)" "$(image_blobs test/edge-docker:1 | tail -n +2)" "staged: layers of edge-docker (the same as edge's)"
assert_errno OK "$docker_root"
for l in $(image_blobs test/edge-docker:1 | tail -n +2); do
    assert_eq 0 "$(registry_count GET "/v2/test/edge-docker/blobs/$l" "$mark")" "staged: GETs of layer $l for the second image"
done
assert_eq 3 "$(find "$CACHE/tmp" -mindepth 2 -maxdepth 2 -name verified | wc -l)" "staged: stages after the second lookup"
assert_tree_eq "$reference" "$docker_root" --dir-mtime
want=()
while read -r f; do
    want+=("$f=$(sha256sum "$reference/$f" | cut -d' ' -f1)")
done < <(cd "$reference" && find . -type f -size +0 -printf '%s %P\n' | sort -rn | head -n 4 | cut -d' ' -f2-)
[ "${#want[@]}" -gt 0 ] || fail "staged: no regular file to read in the test image"
start_reader "$root" "$root" "${want[@]}"
reader_settle "staged, before the kill"
kill_serving 1 reader_settle
assert_eq "" "$(reader_errors)" "staged: the reader's errors across the kill"
kill -TERM "$reader_pid"
wait_for 30 _pid_gone "$reader_pid" || fail "staged: the reader did not stop"
assert_eq 3 "$(find "$CACHE/layers" -mindepth 1 -maxdepth 1 | wc -l)" "staged: layers published after the kill"
assert_eq 2 "$(find "$CACHE/refs" -type f | wc -l)" "staged: reference files after the kill"
[ -z "$(find "$CACHE/layers" -name verified)" ] || fail "staged: a stage's mark was published with its layer"
check_supervised_recovery "staged" "$id"
assert_contains "left 3 verified layers and 2 references unpublished: published now" "$(grep 'verified layers' "$PULLFS_LOG" | tail -n 1)" "staged: the new process's message"
assert_tree_eq "$reference" "$root" --dir-mtime
for l in $(image_blobs test/edge:1); do
    assert_eq 1 "$(registry_count GET "/v2/test/edge/blobs/$l" "$mark")" "staged: GETs of blob $l (none again after the kill)"
done
unmount_pullfs
PULLFS_ENV=()
# and the new process's start (the cache as the kill left it) published
# them: a fresh start serves the image from the cache
mount_pullfs
assert_tree_eq "$reference" "$root" --dir-mtime
assert_eq 1 "$(event_count_msg Pulled "$ref" "Successfully pulled")" "staged: Pulled events"
unmount_pullfs

# ---- secondary: kill -9 at a random moment of a 20 MiB pull --------------
# Which step the kill lands in is luck; the fault points above are the
# deterministic part.  Whatever it hit, recovery must be complete.
log "secondary: kill -9 during a 20 MiB pull"
big=$WORK/big
umoci init --layout "$big" >/dev/null
umoci new --image "$big:1" >/dev/null
mkdir -p "$WORK/big.stage/data"
head -c $((20 << 20)) /dev/urandom >"$WORK/big.stage/data/random"
tar --create --file "$WORK/big.tar" --directory "$WORK/big.stage" --numeric-owner data
umoci raw add-layer --image "$big:1" "$WORK/big.tar"
_skopeo copy --dest-tls-verify=false "oci:$big:1" "docker://$REGISTRY/test/big:1"
umoci unpack --image "$big:1" "$WORK/big.bundle" >/dev/null
rm -rf "$WORK/big.stage" "$WORK/big.tar"

bigref=$REGISTRY/test/big:1
CACHE=$WORK/cache-random
EVENTS=$WORK/events-random.log
mount_pullfs
id=$(mount_id)
victim=$(pullfs_serving_pid)
py - "$MNT/images/$bigref" >"$WORK/lookup.out" 2>&1 <<'PY' &
import os, sys
os.stat(sys.argv[1])
PY
lookup=$!
# The whole pull takes ~0.15 s here: poll without forking for the layer's
# staging directory, then kill within the next 0.12 s.
delay=$(py -c 'import random; print("%.3f" % random.uniform(0, 0.12))')
deadline=$((SECONDS + 30))
# (a loaded machine may run the whole pull, and its background publish,
# before this loop looks: then the kill lands after it)
until compgen -G "$CACHE/tmp/layer-*" >/dev/null || compgen -G "$CACHE/layers/*" >/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || fail "random kill: the pull never started staging a layer"
done
sleep "$delay"
kill -KILL "$victim"
wait_for 20 _pid_gone "$victim" || fail "random kill: the serving process $victim outlived SIGKILL"
wait_for 60 _pid_gone "$lookup" || fail "random kill: the lookup did not return after the recovery"
wait "$lookup" || fail "random kill: the lookup failed across the kill: $(cat "$WORK/lookup.out")"
log "killed the serving process ${delay}s after the layer download started"
! _pid_gone "$PULLFS_PID" || fail "random kill: the supervisor died"
check_supervised_recovery "random kill" "$id"
assert_tree_eq "$WORK/big.bundle/rootfs" "$MNT/images/$bigref"
cmp "$WORK/big.bundle/rootfs/data/random" "$MNT/images/$bigref/data/random" || fail "random kill: content of data/random differs"

# ---- the supervisor killed ----------------------------------------------
log "kill -9 of the supervisor"
serving_now=$(pullfs_serving_pid)
pulled=$(event_count_msg Pulled "$bigref" "Successfully pulled")
kill -KILL "$PULLFS_PID"
wait "$PULLFS_PID" 2>/dev/null || true
PULLFS_PID=
wait_for 30 _pid_gone "$serving_now" || fail "the serving process $serving_now outlived its supervisor"
! is_mounted "$MNT" || fail "$MNT still mounted after the supervisor and its serving process died"
left=$(tmp_leftovers "$CACHE")
[ -z "$left" ] || fail "supervisor killed: left in $CACHE/tmp: $left"
mount_pullfs
cmp "$WORK/big.bundle/rootfs/data/random" "$MNT/images/$bigref/data/random" || fail "after a new start: content of data/random differs"
assert_eq "$pulled" "$(event_count_msg Pulled "$bigref" "Successfully pulled")" "Pulled events of big (none again from the cache)"
unmount_pullfs
log "PASS"

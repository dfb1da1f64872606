#!/bin/bash
# Errno rows of SPEC §5 not covered elsewhere (EBADMSG: corrupt.sh,
# EHOSTUNREACH: unreachable.sh and backoff.sh, EAGAIN: backoff.sh, EPERM:
# policy.sh, ENOEXEC: noplatform.sh, EINVAL and EROFS: basic.sh), each with
# its Failed event:
#  - ENOENT: a tag, and a repository, unknown to the registry;
#  - ENOSPC: the cache on a small tmpfs, an image with a layer bigger than
#    the room left; nothing left behind in CACHE/tmp, the space given back,
#    an image cached before still served; with room again (and the
#    back-off window over) the same lookup succeeds;
#  - EACCES: a registry with htpasswd authentication and no credentials;
#  - EINVAL for a registry port outside 1..65535 (the reference grammar
#    refuses it; curl would have refused the URL with EIO).
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
need_cmd htpasswd
start_registry
push_busybox test/busybox:1
push_edge test/edge:1

# The cache on its own small filesystem; the events log stays outside.
small=$WORK/small
small_tmpfs "$small" 64m
CACHE=$small/cache
mount_pullfs --backoff-initial 1

# ---- ENOENT
for ref in "$REGISTRY/test/busybox:nope" "$REGISTRY/test/nothere:1"; do
    assert_errno ENOENT "$MNT/images/$ref"
    wait_event Failed "$ref"
    assert_eq ENOENT "$(events field Failed "$ref" errno)" "errno of the Failed event for $ref"
done

# ---- EINVAL: ports out of range
for ref in 127.0.0.1:99999/test/x:1 127.0.0.1:0/test/x:1 "localhost:65536/test/x:1"; do
    assert_errno EINVAL "$MNT/images/$ref"
    wait_event InspectFailed "$ref"
done
# Refused by the path form before ensure runs (a short name, lowercase
# only): the same event.  A name that closes no reference (a directory
# component in capitals) is no reference: EINVAL, no event.  Names
# programs probe beside a directory (".git", systemd-nspawn's settings
# file NAME.nspawn and its lock file .#NAME.lck beside an image) are not
# there: ENOENT, no event, and creating one fails with EROFS as on a
# read-only disk.
for ref in Alpine:3 library/Busybox:1 "$REGISTRY/test/busybox@sha256:abc"; do
    assert_errno EINVAL "$MNT/images/$ref"
    wait_event InspectFailed "$ref"
    assert_eq EINVAL "$(events field InspectFailed "$ref" errno)" "errno of InspectFailed for $ref"
done
assert_errno ENOENT "$MNT/images/.git"
assert_errno EINVAL "$MNT/images/$REGISTRY/Test"
assert_errno ENOENT "$MNT/images/$REGISTRY/test/busybox1.nspawn"
assert_errno ENOENT "$MNT/images/$REGISTRY/test/busybox:1.nspawn"
assert_errno ENOENT "$MNT/images/$REGISTRY/test/.#busybox:1.lck"
assert_op_errno EROFS create "$MNT/images/$REGISTRY/test/.#busybox:1.lck"
assert_op_errno EROFS create "$MNT/images/.git"
assert_eq 0 "$(event_count InspectFailed .git)" "InspectFailed events for .git"
assert_eq 0 "$(event_count InspectFailed "$REGISTRY/Test")" "InspectFailed events for $REGISTRY/Test"
assert_eq 0 "$(event_count InspectFailed "$REGISTRY/test/.#busybox:1.lck")" "InspectFailed events for the lock file"
assert_eq 0 "$(grep -c 'nspawn\|lck' "$EVENTS")" "events naming the probed names"

# ---- ENOSPC
bb=$REGISTRY/test/busybox:1
edge=$REGISTRY/test/edge:1
assert_eq busybox "$(cat "$MNT/images/$bb/etc/hostname")" "/etc/hostname of $bb"
used_kib() { df --output=used -k "$small" | tail -n1 | tr -d ' '; }
used=$(used_kib)
# Room for 2 MiB more: the edge image has a 5 MiB layer of random bytes.
mount -o remount,size=$((used + 2048))k "$small" || fail "cannot shrink the tmpfs on $small"
assert_errno ENOSPC "$MNT/images/$edge"
t_fail=$(now)
wait_event Failed "$edge"
assert_eq ENOSPC "$(events field Failed "$edge" errno)" "errno of the Failed event for $edge"
assert_eq 0 "$(event_count_msg Pulled "$edge" "Successfully pulled")" "pulls of $edge on a full disk"
if [ -d "$CACHE/tmp" ]; then
    left=$(find "$CACHE/tmp" -mindepth 1)
    [ -z "$left" ] || fail "left in $CACHE/tmp after ENOSPC: $left"
fi
after=$(used_kib)
[ "$after" -le $((used + 256)) ] ||
    fail "the failed pull keeps $((after - used)) KiB of the cache filesystem (before: $used KiB, after: $after KiB)"
assert_not_contains "edge:1" "$(list_dir "$MNT/images/$REGISTRY/test")" "ls $MNT/images/$REGISTRY/test after ENOSPC"
# What was cached before is still served, file content included (not read
# before, so it comes from the cache, not from the kernel's page cache).
assert_eq "$(sha256sum <"$(_static_busybox)" | cut -d' ' -f1)" \
    "$(sha256sum <"$MNT/images/$bb/bin/busybox" | cut -d' ' -f1)" "sha256 of /bin/busybox of $bb after ENOSPC"

# ---- room again: after the 1 s back-off window the pull succeeds
mount -o remount,size=64m "$small" || fail "cannot grow the tmpfs on $small"
sleep_until "$(plus "$t_fail" 1.3)"
assert_errno OK "$MNT/images/$edge"
assert_eq edge "$(cat "$MNT/images/$edge/etc/hostname")" "/etc/hostname of $edge"
_edge_pulled() { [ "$(event_count_msg Pulled "$edge" "Successfully pulled")" = 1 ]; }
wait_for 10 _edge_pulled || fail "no Pulled event for $edge once there was room"
events check >&2 || fail "malformed events in $EVENTS"
unmount_pullfs

# ---- EACCES: the same registry, now with authentication
htpasswd -Bbn pullfs-user 'not-a-secret-9731' >"$WORK/htpasswd" || fail "htpasswd failed"
stop_registry
REGISTRY_HTPASSWD=$WORK/htpasswd restart_registry
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$REGISTRY/v2/test/busybox/manifests/1")
assert_eq 401 "$code" "status of an anonymous manifest GET"
code=$(curl -s -o /dev/null -w '%{http_code}' -u 'pullfs-user:not-a-secret-9731' \
    -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$REGISTRY/v2/test/busybox/manifests/1")
assert_eq 200 "$code" "status of a manifest GET with credentials"

CACHE=$WORK/cache2
mount_pullfs
for ref in "$bb" "$REGISTRY/test/nothere:1"; do
    n=$(event_count Failed "$ref")
    assert_errno EACCES "$MNT/images/$ref"
    wait_event_count $((n + 1)) Failed "$ref"
    assert_eq EACCES "$(event_fields Failed "$ref" errno | tail -n1)" "errno of the last Failed event for $ref"
done
events check >&2 || fail "malformed events in $EVENTS"
unmount_pullfs
log "PASS"

#!/bin/bash
# mount(8) with an fstab line of type fuse.pullfs, and mount -t
# fuse.pullfs: mount.fuse3 runs "pullfs none MOUNTPOINT -o OPTIONS", and
# pullfs takes its own options (cache=, events_log=, insecure_registry=)
# from OPTIONS.
#
# mount(8) runs helpers with a fixed PATH, so "pullfs" must be found in
# /usr/local/sbin: the test runs in a private mount namespace where the
# build's pullfs is bind-mounted there; nothing on the host changes.
if [ -z "${PULLFS_TEST_IN_NS:-}" ]; then
    [ "$(id -u)" = 0 ] || { echo "$(basename "$0" .sh): SKIP: needs root" >&2; exit 77; }
    command -v unshare >/dev/null || { echo "$(basename "$0" .sh): SKIP: needs unshare" >&2; exit 77; }
    PULLFS_TEST_IN_NS=1 exec unshare --mount --propagation private "$0" "$@"
fi
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/ctl.sh"

need_fuse
need_pullfsctl
need_cmd mount umount
[ -x /sbin/mount.fuse3 ] || [ -x /usr/sbin/mount.fuse3 ] || skip "needs mount.fuse3 (package fuse3)"
[ -d /usr/local/sbin ] || skip "no /usr/local/sbin to put pullfs in"
mkdir -p "$WORK/sbin"
ln -s "$(realpath "$PULLFS")" "$WORK/sbin/pullfs"
mount --bind "$WORK/sbin" /usr/local/sbin || skip "cannot bind-mount over /usr/local/sbin"
track_mount /usr/local/sbin

start_registry
push_busybox test/busybox:1
ref=$REGISTRY/test/busybox:1

# daemon_of DIR: PID of the pullfs serving DIR (it detached from mount).
daemon_of() {
    local p
    for p in $(pgrep -x pullfs); do
        if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF " $1 "; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

# check_mount HOW: the image works through $MNT, the cache and the events
# log are where the options said, and umount stops the daemon.
check_mount() {
    local how=$1 pid
    is_mounted "$MNT" || fail "$how: nothing mounted on $MNT"
    pid=$(daemon_of "$MNT") || fail "$how: no pullfs process serving $MNT"
    track_pid "$pid"
    assert_eq "fuse.pullfs" "$(awk -v d="$(realpath "$MNT")" '$2 == d { print $3 }' /proc/self/mounts)" "$how: type of the mount"
    grep -F " $(realpath "$MNT") " /proc/self/mounts | grep -q '[ ,]ro[ ,]' || fail "$how: mount is not read-only"
    assert_eq hi "$(chroot "$MNT/images/$ref" /bin/echo hi)" "$how: chroot into $ref"
    [ -d "$CACHE/layers" ] || fail "$how: nothing in the cache= directory $CACHE"
    wait_event Pulled "$ref"
    ctl_ok ls
    assert_contains "$ref " "$OUT" "$how: pullfsctl ls"
    umount "$MNT" || fail "$how: umount $MNT failed"
    wait_for 20 _pid_gone "$pid" || fail "$how: pullfs did not exit after umount"
    ! is_mounted "$MNT" || fail "$how: still mounted after umount"
}

# ---- /etc/fstab style
fstab=$WORK/fstab
echo "none $MNT fuse.pullfs cache=$CACHE,events_log=$EVENTS,insecure_registry=$REGISTRY,allow_other 0 0" >"$fstab"
mount -T "$fstab" "$MNT" >"$WORK/mount.out" 2>&1 || fail "mount -T $fstab $MNT failed: $(cat "$WORK/mount.out")"
check_mount "mount -T fstab"

# ---- mount -t, with other spellings: "-" in names, pull_policy, a config file
rm -rf "$CACHE" "$EVENTS"
printf 'insecure-registry = %s\n' "$REGISTRY" >"$WORK/pullfs.conf"
mount -t fuse.pullfs none "$MNT" -o "cache=$CACHE,events-log=$EVENTS,config=$WORK/pullfs.conf,pull_policy=if-not-present" \
    >"$WORK/mount.out" 2>&1 || fail "mount -t fuse.pullfs failed: $(cat "$WORK/mount.out")"
check_mount "mount -t fuse.pullfs"

# A bad option fails the mount, with the daemon's message.
if mount -t fuse.pullfs none "$MNT" -o "cache=$CACHE,pull_policy=sometimes" >"$WORK/mount.out" 2>&1; then
    umount "$MNT" || true
    fail "mount with pull_policy=sometimes succeeded"
fi
assert_contains "sometimes" "$(cat "$WORK/mount.out")" "message of a mount with a bad option"
! is_mounted "$MNT" || fail "mounted despite a bad option"

log "ok"

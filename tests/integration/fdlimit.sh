#!/bin/bash
# The daemon raises its soft limit of open files to the hard limit at
# start, silently: every image in memory holds a descriptor per layer.
source "$(dirname "$0")/lib.sh"

need_fuse
hard=$(ulimit -Hn)
[[ $hard =~ ^[0-9]+$ ]] && [ "$hard" -gt 1024 ] || skip "hard limit of open files is $hard"
# The daemon inherits this shell's limits.
ulimit -Sn 1024
mount_pullfs
limits=$(awk '/^Max open files/ { print $4, $5 }' "/proc/$(pullfs_serving_pid)/limits")
assert_eq "$hard $hard" "$limits" "soft and hard limit of open files of pullfs"
! grep -q 'limit of open files' "$PULLFS_LOG" || fail "pullfs complained: $(cat "$PULLFS_LOG")"
unmount_pullfs
log "PASS"

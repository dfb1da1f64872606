#!/bin/bash
# Memory per entry of a lazy image with a large table of contents.
source "$(dirname "$0")/lib.sh"

need_fuse
start_registry
N=${BIGTOC_ENTRIES:-300000}
py "$INTEGRATION_DIR/mkchunked.py" push "$REGISTRY" test/big:1 "$N" || fail "cannot push test/big:1"

mount_pullfs --lazy-completion-delay 3600
serving=$(pullfs_serving_pid)
kb() { awk -v k="$1:" '$1 == k { print $2 }' /proc/"$serving"/status; }
rss0=$(kb VmRSS)
t0=$(now)
stat "$(image_path test/big:1)/d0/f0" >/dev/null || fail "lookup of test/big:1"
log "lookup took $(seconds_since "$t0") s"
rss1=$(kb VmRSS)
hwm=$(kb VmHWM)
log "$N entries: RSS $rss0 -> $rss1 KiB, peak $hwm KiB; $(( (rss1 - rss0) * 1024 / N )) B/entry steady, $(( (hwm - rss0) * 1024 / N )) B/entry peak"
unmount_pullfs
log PASS

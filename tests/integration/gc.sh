#!/bin/bash
# Garbage collection: least recently used first, open files protect an
# image, shared content is swept only when nothing needs it, events say
# what happened; the control view and the metrics describe it all, and
# the metrics pass a strict exposition-format check.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
start_registry
push_busybox test/busybox:1
push_edge test/edge:1

# Sizes on disk decide the budget: measured, not guessed.
mount_pullfs --gc-min-age 0
bb=$MNT/images/$REGISTRY/test/busybox:1
edge=$MNT/images/$REGISTRY/test/edge:1
ls "$bb/bin" >/dev/null
ls "$edge" >/dev/null
sizes=$(py -c '
import json, sys
st = json.load(open(sys.argv[1]))
print(" ".join(str(i["size"]) for i in sorted(st["images"], key=lambda i: i["reference"])))' "$MNT/.pullfs/status")
read -r bb_size edge_size <<<"$sizes"
log "on disk: busybox $bb_size, edge $edge_size bytes"
[ "$bb_size" -gt 0 ] && [ "$edge_size" -gt 0 ] || fail "image sizes missing in status"
py "$INTEGRATION_DIR/promcheck.py" "$MNT/.pullfs/metrics" \
    pullfs_image_pull_duration_seconds pullfs_ensure_requests_total \
    pullfs_pulled_bytes_total pullfs_pull_failures_total pullfs_backoff_entries \
    pullfs_cache_bytes pullfs_cache_images pullfs_gc_runs_total \
    pullfs_gc_freed_bytes_total pullfs_fuse_operations_total \
    pullfs_fuse_operation_duration_seconds || fail "metrics exposition"
grep -q '^pullfs_pulls_total{result="success"} 2$' "$MNT/.pullfs/metrics" || fail "two successful pulls in the metrics"
# Requests are counted, the lookups that waited for pulls included.
for op in lookup opendir; do
    grep -qE '^pullfs_fuse_operations_total\{op="'$op'"\} [1-9]' "$MNT/.pullfs/metrics" || fail "no $op request counted"
done
grep -qE '^pullfs_fuse_operation_duration_seconds_bucket\{op="lookup",le="10"\} [1-9]' "$MNT/.pullfs/metrics" || fail "no lookup in the duration histogram"
unmount_pullfs

# A budget where both fit under the low mark only without busybox:
# high = 85 %, low = 80 % of budget; pick budget so that edge alone is
# under low and both are over high.
budget=$(( (edge_size + bb_size / 4) * 100 / 80 ))
rm -rf "$CACHE"
: >"$EVENTS"
mount_pullfs --gc-min-age 0 --cache-max-bytes "$budget"
ls "$bb/bin" >/dev/null
# busybox was used first; edge next; the pull of edge crosses the mark.
ls "$edge" >/dev/null
wait_for 20 grep -q '"reason":"ImageGC","image":"'"$REGISTRY"'/test/busybox:1"' "$EVENTS" || fail "no ImageGC event for busybox"
grep -q '"reason":"ImageGC","image":"'"$REGISTRY"'/test/edge:1"' "$EVENTS" && fail "GC removed the most recently used image"
assert_eq "edge:1" "$(ls "$MNT/images/$REGISTRY/test")" "cached images after GC"
grep -q '^pullfs_gc_runs_total{trigger="threshold"} 1$' "$MNT/.pullfs/metrics" || fail "threshold GC run not counted"
# The edge image still reads right; busybox comes back with a new pull.
assert_eq "upper" "$(cat "$edge/opq/upper1")" "edge content after GC"
pulls_before=$(grep -c '"reason":"Pulling"' "$EVENTS")
chroot "$bb" /bin/sh -c 'echo back' | grep -q back || fail "busybox after GC"
[ "$(grep -c '"reason":"Pulling"' "$EVENTS")" -eq $((pulls_before + 1)) ] || fail "busybox was not pulled again"
unmount_pullfs

# Open files protect an image: with busybox held open, GC removes edge
# (pulled later, not open) and leaves busybox.
rm -rf "$CACHE"
: >"$EVENTS"
mount_pullfs --gc-min-age 0
ls "$bb/bin" >/dev/null
ls "$edge" >/dev/null
exec 7<"$bb/bin/busybox"
PYTHONPATH=$INTEGRATION_DIR py - "$CACHE/control.sock" "$REGISTRY" <<'PY' || fail "control socket gc/rm"
import sys
import ctlsock
def ask(req):
    return ctlsock.ask(sys.argv[1], req)
reg = sys.argv[2]
r = ask({"op": "rm", "references": [reg + "/test/busybox:1"]})
assert not r["ok"] and r["errno"] == "EBUSY", r
r = ask({"op": "gc", "to_bytes": 1})
assert r["ok"] and r["removed"] == [reg + "/test/edge:1"], r
assert r["freed_bytes"] > 0, r
r = ask({"op": "inspect", "reference": reg + "/test/busybox:1"})
assert r["ok"] and len(r["layers"]) >= 1 and r["platform"].startswith("linux/"), r
r = ask({"op": "bogus"})
assert not r["ok"] and r["errno"] == "EINVAL", r
PY
grep -q '"reason":"ImageGCFailed"' "$EVENTS" || fail "GC short of its target did not say so"
assert_eq "busybox:1" "$(ls "$MNT/images/$REGISTRY/test")" "cached images after manual GC"
head -c 4 <&7 | od -c | grep -q 'E   L   F' || fail "open file unreadable after GC"
exec 7<&-
# Nothing left that no reference needs: one image's layers only.
layers=$(ls "$CACHE/layers" | wc -l)
assert_eq 1 "$layers" "layers left in the cache"
unmount_pullfs

# A process standing in an image, with no file open, keeps reading it
# after the image is removed.  What the image is made from stays in the
# cache for as long as the kernel holds a node of it (a file may be opened
# there any time, and a serving process that takes the connection over
# must make the image again), and goes at the first sweep after.
rm -rf "$CACHE"
mount_pullfs --gc-min-age 0
ls "$edge" >/dev/null
(cd "$edge/opq" && while [ ! -e "$WORK/go" ]; do sleep 0.05; done && cat upper1 >"$WORK/read-after-rm") &
reader=$!
track_pid "$reader"
wait_for 20 test -d "/proc/$reader/cwd/." || fail "the reader did not start"
rm_edge() {
    PYTHONPATH=$INTEGRATION_DIR py - "$CACHE/control.sock" "$REGISTRY" <<'PY' || fail "rm of edge:1 ($1)"
import sys
import ctlsock
r = ctlsock.ask(sys.argv[1], {"op": "rm", "references": [sys.argv[2] + "/test/edge:1"]})
assert r["ok"], r
PY
}
rm_edge "a process stands in it"
held=$(ls "$CACHE/layers" | wc -l)
[ "$held" -gt 0 ] || fail "the layers of an image a process stands in went with its name"
# Pulled again while the reader still stands in the removed one, and
# removed again: the layers stay, the removed image still needs them.
assert_eq upper "$(cat "$edge/opq/upper1")" "the image pulled again"
rm_edge "pulled again"
assert_eq "$held" "$(ls "$CACHE/layers" | wc -l)" "layers while a process stands in the removed image"
touch "$WORK/go"
wait "$reader" || fail "reading in a removed image failed"
assert_eq upper "$(cat "$WORK/read-after-rm")" "content read in a removed image"
# The process left: nothing holds the image, the next sweep deletes it.
"$PULLFSCTL" -m "$MNT" gc >/dev/null || fail "gc after the reader left"
assert_eq 0 "$(ls "$CACHE/layers" | wc -l)" "layers left once the process left the removed image"
bytes=$(py -c 'import json, sys; print(json.load(open(sys.argv[1]))["cache"]["bytes"])' "$MNT/.pullfs/status")
assert_eq 0 "$bytes" "cache bytes once the process left the removed image"
unmount_pullfs
log "PASS"

#!/bin/bash
# A registry that trickles: it answers manifests at once, then sends blobs a
# few bytes at a time, so that every resume makes progress and (above
# 1 KiB/s) no transfer ever hits the low-speed timeout by itself.
#  1. The rate floor (--min-transfer-rate, --transfer-rate-window, which is
#     never shorter than --low-speed-timeout) fails a
#     hostile user's pull of a trickled layer with ETIMEDOUT and a Failed
#     event naming the rate, within a few windows; the image's back-off
#     applies.
#     A trickled manifest fails the lookup the same way.
#  2. A trickled table of contents fails a lazy lookup the same way (no
#     whole pull of a blob the registry would trickle as well).
#  3. A trickled chunk fails the read that waits for it with ETIMEDOUT.
#  4. With no floor, a trickled pull holds the only pull slot for good; root's
#     pull of an image of another registry still gets a slot once the
#     trickle has held it for --pull-slot-share-after, and finishes while
#     the trickled connection is still open.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_root
need_fuse
need_cmd setpriv skopeo umoci
chmod 755 "$WORK" # uid 65534 reaches the mount
start_registry
push_busybox test/busybox:1
push_busybox test/hold:1
push_busybox test/mtrickle:1
push_edge test/edge:1
push_edge_chunked test/toc:1
# mtrickle:1's manifest padded to 200 KB: it takes 100 s at 2000 B/s
registry_manifest test/mtrickle:1 | py -c '
import json, sys
m = json.load(sys.stdin)
m["annotations"] = {"pad": "x" * 200000}
sys.stdout.write(json.dumps(m))' >"$WORK/padded.json"
curl -fsS -X PUT -H "Content-Type: application/vnd.oci.image.manifest.v1+json" \
    --data-binary "@$WORK/padded.json" "http://$REGISTRY/v2/test/mtrickle/manifests/1" ||
    fail "cannot push the padded manifest"
# chunk:1 is busybox as zstd:chunked: layers of its own
_skopeo copy --dest-decompress "oci:$(layout_of busybox):1" "dir:$WORK/busybox-plain"
_skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
    "dir:$WORK/busybox-plain" "docker://$REGISTRY/test/chunk:1"
layer=$(registry_manifest test/busybox:1 | py -c 'import json,sys; print(json.load(sys.stdin)["layers"][0]["digest"])')

# The layers of busybox and hold and the manifest of mtrickle: 2000 B/s,
# above curl's low-speed limit; the tables of contents of toc, and the
# chunks of chunk once $WORK/trickle-chunks exists: 10 B/s.
start_slowproxy --trickle "GET /v2/test/(busybox|hold)/blobs/=2000" \
    --trickle "GET /v2/test/toc/blobs/[^ ]+ bytes=10" \
    --trickle "GET /v2/test/mtrickle/manifests/=2000" \
    --trickle "GET /v2/test/chunk/blobs/[^ ]+ bytes=10@$WORK/trickle-chunks"

as_nobody() { setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; }
# nobody_errno PATH: errno_of for uid 65534 (who has no python3 but
# /usr/bin's)
nobody_errno() (
    py() { as_nobody timeout -k 5 60 /usr/bin/python3 "$@"; }
    errno_of "$1"
)

mount_pullfs -o allow_other --insecure-registry "$PROXY" --min-transfer-rate 4K \
    --transfer-rate-window 2 --low-speed-timeout 2 --lazy-completion-delay 3600

# 1. The trickled layer.
ref=$PROXY/test/busybox:1
t0=$(now)
got=$(nobody_errno "$MNT/images/$ref")
log "trickled layer: $got after $(seconds_since "$t0") s, $(proxy_count request "GET /v2/test/busybox/blobs/$layer") requests of the layer"
assert_eq ETIMEDOUT "$got" "lookup of a trickled image"
wait_event Failed "$ref"
assert_eq ETIMEDOUT "$(events field Failed "$ref" errno)" "errno of the Failed event"
assert_contains "under the minimum of 4096 bytes/s" "$(events field Failed "$ref" message)" \
    "Failed message"
assert_eq EAGAIN "$(nobody_errno "$MNT/images/$ref")" "lookup in back-off"

# 1b. A trickled manifest (no slot held, but the lookup waits for it).
ref=$PROXY/test/mtrickle:1
t0=$(now)
got=$(nobody_errno "$MNT/images/$ref")
log "trickled manifest: $got after $(seconds_since "$t0") s"
assert_eq ETIMEDOUT "$got" "lookup of an image with a trickled manifest"

# 2. The trickled table of contents.
ref=$PROXY/test/toc:1
t0=$(now)
got=$(PULLFS_TEST_OP_TIMEOUT=60 errno_of "$MNT/images/$ref")
log "trickled table of contents: $got after $(seconds_since "$t0") s"
assert_eq ETIMEDOUT "$got" "lazy lookup with a trickled table of contents"
wait_event Failed "$ref"
assert_contains "table of contents" "$(events field Failed "$ref" message)" "Failed message"
toc_layers=$(registry_manifest test/toc:1 | py -c 'import json,sys; print("|".join(l["digest"] for l in json.load(sys.stdin)["layers"]))')
assert_eq "$(proxy_count range "GET /v2/test/toc/blobs/($toc_layers) ")" \
    "$(proxy_count request "GET /v2/test/toc/blobs/($toc_layers)\$")" "layer requests of toc that were ranged"

# 3. The trickled chunk.
ref=$PROXY/test/chunk:1
assert_errno OK "$MNT/images/$ref"
[ -d "$CACHE/layers" ] && ls "$CACHE"/layers/*/lazy >/dev/null 2>&1 || fail "no lazy layer"
touch "$WORK/trickle-chunks"
t0=$(now)
got=$(PULLFS_TEST_OP_TIMEOUT=60 read_errno "$MNT/images/$ref/bin/busybox")
log "trickled chunk: $got after $(seconds_since "$t0") s"
assert_eq ETIMEDOUT "$got" "read of a trickled chunk"
wait_event LazyReadFailed "$ref"
unmount_pullfs

# 4. No floor: the trickle holds the slot; root's pull of another registry
# passes it.
mount_pullfs -o allow_other --insecure-registry "$PROXY" --min-transfer-rate 0 \
    --pull-slot-share-after 1
ref=$PROXY/test/hold:1
nobody_errno "$MNT/images/$ref" >"$WORK/hold.errno" 2>&1 &
hold=$!
track_pid "$hold"
trickling() { [ "$(proxy_count request "GET /v2/test/hold/blobs/$layer")" -ge 1 ]; }
wait_for 60 trickling || fail "the trickled layer was never asked for"
t0=$(now)
got=$(PULLFS_TEST_OP_TIMEOUT=60 errno_of "$MNT/images/$REGISTRY/test/edge:1")
log "root's pull beside the trickle: $got after $(seconds_since "$t0") s"
assert_eq OK "$got" "root's pull of another registry's image"
assert_eq 0 "$(proxy_count done "GET /v2/test/hold/blobs/$layer")" "trickled transfers ended"
state=$(py - "$MNT/.pullfs/status" "$ref" <<'PY'
import json, sys
print(" ".join(p["state"] for p in json.load(open(sys.argv[1]))["pulls"] if p["reference"] == sys.argv[2]))
PY
)
assert_eq downloading "$state" "state of the trickled pull"
unmount_pullfs
wait "$hold" || true
log "PASS"

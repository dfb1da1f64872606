#!/bin/bash
# Lazy images: the edge image as eStargz (ctr-remote) and as zstd:chunked
# (skopeo).  The lookup publishes every layer from its table of contents
# (a few Range requests, no whole-blob GET), the tree is the one a full
# pull gives, a read fetches and verifies what it needs, the rest comes in
# the background, and once complete the image is served with the registry
# gone.  A table that does not verify makes the layer be pulled whole, with
# a warning.
. "$(dirname "$0")/lib.sh"
. "$INTEGRATION_DIR/images.sh"
. "$INTEGRATION_DIR/containerd.sh"

need_root
need_cmd containerd ctr ctr-remote
start_registry
push_edge test/edge:1

plain=$WORK/edge-plain
_skopeo copy --dest-decompress "oci:$(layout_of edge):1" "dir:$plain"
_skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
    "dir:$plain" "docker://$REGISTRY/test/edge-chunked:1"
start_containerd
ctr_remote images pull --plain-http "$REGISTRY/test/edge:1"
ctr_remote images convert --oci --estargz --estargz-chunk-size 1000000 \
    "$REGISTRY/test/edge:1" "$REGISTRY/test/edge-esgz:1"
ctr_remote images push --plain-http "$REGISTRY/test/edge-esgz:1"

# The proxy in front of the registry notes each Range request.  Its gates
# hold the Range requests of the lazy images while $WORK/open is missing,
# and those of the background completion (its User-Agent says so) while
# $WORK/whole is.
layers=$(for ref in edge-esgz:1 edge-chunked:1; do registry_manifest "test/$ref"; done | py -c '
import json, sys
d = json.JSONDecoder()
s = sys.stdin.read().strip()
out = []
while s:
    m, i = d.raw_decode(s)
    out += [l["digest"] for l in m["layers"]]
    s = s[i:].strip()
print("|".join(out))')
touch "$WORK/open" "$WORK/whole"
start_slowproxy --gate "GET /v2/test/edge-[a-z]+/blobs/[^ ]+ bytes=.*=$WORK/open" \
    --gate "GET /v2/test/edge-[a-z]+/blobs/($layers) bytes=[^ ]* background=$WORK/whole"
mount_pullfs --insecure-registry "$PROXY" --lazy-completion-delay 0
img() { echo "$MNT/images/$PROXY/test/$1"; }

# A table of contents that does not match the manifest's digest is never
# used: the layer is pulled whole, with a warning saying why.
py - "http://$REGISTRY" <<'PY' || fail "cannot push the image with a wrong TOC digest"
import json, sys, urllib.request
base = sys.argv[1] + "/v2/test/edge-esgz/manifests/"
accept = "application/vnd.oci.image.manifest.v1+json"
m = json.load(urllib.request.urlopen(urllib.request.Request(base + "1", headers={"Accept": accept})))
a = m["layers"][0]["annotations"]
a["containerd.io/snapshot/stargz/toc.digest"] = "sha256:" + "0" * 64
req = urllib.request.Request(base + "badtoc", data=json.dumps(m).encode(), method="PUT",
                             headers={"Content-Type": accept})
urllib.request.urlopen(req)
PY
py "$INTEGRATION_DIR/treecmp.py" "$(img edge:1)" "$(img edge-esgz:badtoc)" ||
    fail "the image with a wrong TOC digest differs"
grep LazyPullFailed "$EVENTS" | grep -q 'pulled whole' || fail "no LazyPullFailed warning"
# (the other layers of that image were lazy; the test goes on from a
# clean cache)
unmount_pullfs
rm -rf "$CACHE"
: >"$PROXY_LOG"
: >"$EVENTS"
rm "$WORK/whole"
mount_pullfs --insecure-registry "$PROXY" --lazy-completion-delay 0

# Lazy: the lookup fetches no file content; reading one small file
# fetches a small part of the image.
image_bytes=$(registry_manifest test/edge-esgz:1 | py -c 'import json,sys; print(sum(l["size"] for l in json.load(sys.stdin)["layers"]))')
ls "$(img edge-esgz:1)" >/dev/null || fail "lookup of edge-esgz:1"
assert_eq 0 "$(metric pullfs_lazy_fetched_bytes_total)" "bytes of files fetched by the lookup"
assert_eq "$(cat "$(img edge:1)/etc/passwd")" "$(cat "$(img edge-esgz:1)/etc/passwd")" "etc/passwd"
fetched=$(metric pullfs_lazy_fetched_bytes_total)
log "reading etc/passwd fetched $fetched of $image_bytes bytes"
[ "$fetched" -gt 0 ] && [ "$((fetched * 20))" -lt "$image_bytes" ] ||
    fail "reading one small file fetched $fetched of $image_bytes bytes"

for ref in edge-esgz:1 edge-chunked:1; do
    log "$ref"
    root=$(img "$ref")
    ls "$root" >/dev/null || fail "lookup of $ref"
    ! grep -q '"reason":"LazyPullFailed"' "$EVENTS" ||
        fail "a layer of $ref was pulled whole: $(grep LazyPullFailed "$EVENTS")"
    # published from the TOCs: every layer directory says it is lazy
    n=$(registry_manifest "test/$ref" | py -c 'import json,sys; print(len(json.load(sys.stdin)["layers"]))')
    for d in $(registry_manifest "test/$ref" | py -c '
import json, sys
for l in json.load(sys.stdin)["layers"]: print(l["digest"].split(":")[1])'); do
        [ -f "$CACHE/layers/$d/toc" ] || fail "$ref: layer $d was not published from its table of contents"
    done
    # the same tree as the plain image, content included: reading fetches
    py "$INTEGRATION_DIR/treecmp.py" "$(img edge:1)" "$root" ||
        fail "$ref: the lazy tree differs from the plain image's"
done
# All of that with the completion's requests held: it has started and
# waits (a layer whose every chunk a reader fetched first needs none), the
# reads came by ranges.
[ "$(proxy_count held "GET /v2/test/edge-[a-z]+/blobs/($layers) .*background")" -ge 1 ] ||
    fail "the background completion did not start: $(grep background "$PROXY_LOG")"
ls "$CACHE"/layers/*/lazy >/dev/null 2>&1 || fail "lazy layers complete with their blobs held"
# the status says so per image: bytes local below the total
image_status() {
    py - "$MNT/.pullfs/status" "$PROXY/test/$1" <<'PY'
import json, sys
for i in json.load(open(sys.argv[1]))["images"]:
    if i["reference"] == sys.argv[2]:
        print(str(i["complete"]).lower(), int(i["bytes_local"] < i["bytes_total"]))
PY
}
for ref in edge-esgz:1 edge-chunked:1; do
    assert_eq "false 1" "$(image_status "$ref")" "status of $ref with its blobs held (complete, local < total)"
done
touch "$WORK/whole"

# At least the tail and the table of each of the six layers came by range,
# and what the reads left, by the completion's ranges.
[ "$(grep -c '^range GET ' "$PROXY_LOG")" -ge 12 ] || fail "fewer range requests than tables: $(grep -c '^range GET ' "$PROXY_LOG")"

# The background completes every lazy layer: each verified against its
# digest (no "lazy" marker) or its table of contents (a "complete" one
# too), no partial file left.
complete() {
    local d
    for d in "$CACHE"/layers/*/; do
        [ ! -e "$d/lazy" ] || [ -e "$d/complete" ] || return 1
    done
    ! ls "$CACHE"/layers/*/p.* >/dev/null 2>&1
}
wait_for 60 complete || fail "lazy layers not completed: $(ls "$CACHE"/layers/*/lazy "$CACHE"/layers/*/p.* 2>&1 | head)"
# ... and the events and the metrics say so (six lazy layers, two images;
# each event follows the removal of its layer's marker).
layers_completed() { [ "$(grep -c '"reason":"LayerCompleted"' "$EVENTS")" -ge 6 ]; }
wait_for 10 layers_completed || true
assert_eq 6 "$(grep -c '"reason":"LayerCompleted"' "$EVENTS")" "LayerCompleted events"
assert_eq 6 "$(metric pullfs_lazy_layers_completed_total)" "lazy layers completed"
for ref in edge-esgz:1 edge-chunked:1; do
    assert_eq "true 0" "$(image_status "$ref")" "status of $ref once complete (complete, local < total)"
    # usable at the lookup, pulled once complete: one event each
    assert_eq 1 "$(event_count Usable "$PROXY/test/$ref")" "Usable events of $ref"
    # (a later lookup may add an "already present" Pulled, as the
    # kubelet's; none says the lookup pulled it)
    wait_event_count 1 Pulled "$PROXY/test/$ref"
    assert_eq 0 "$(event_count_msg Pulled "$PROXY/test/$ref" "Successfully pulled")" "Pulled events of $ref at its lookup"
    assert_eq 1 "$(event_count_msg Pulled "$PROXY/test/$ref" "is complete in")" "Pulled of $ref at its completion"
done
# (a file the plain image's pull already put in the content store may be
# linked from there instead of fetched, once that store has it: counted
# as saved)
[ "$(metric pullfs_lazy_fetches_total)" -gt 0 ] &&
    [ "$(($(metric pullfs_lazy_fetched_bytes_total) + $(metric pullfs_lazy_saved_bytes_total)))" -gt 1000000 ] ||
    fail "lazy fetches not counted: $(grep pullfs_lazy "$MNT/.pullfs/metrics")"
py "$INTEGRATION_DIR/promcheck.py" "$MNT/.pullfs/metrics" pullfs_lazy_fetches_total \
    pullfs_lazy_fetched_bytes_total pullfs_lazy_layers_completed_total || fail "metrics exposition"
unmount_pullfs

# A reader waiting for its chunks is not ended by a signal it handles,
# dies of a fatal one at once, and the fetch goes on for the next reader:
# from a fresh cache, the image is looked up, then blob requests are
# held; a read of the 5 MiB file (with O_DIRECT: one READ request, which
# the kernel interrupts) waits; a signal it handles leaves it waiting,
# and SIGTERM, which it does not handle, ends it while the request is
# still held.
rm -rf "$CACHE"
: >"$PROXY_LOG"
rm -f "$WORK/whole" # the completion must not bring the chunk first
mount_pullfs --insecure-registry "$PROXY" --lazy-completion-delay 0
ls "$(img edge-esgz:1)" >/dev/null || fail "lookup of edge-esgz:1 from a fresh cache"
rm -f "$WORK/open"
python3 - "$(img edge-esgz:1)/large" "$WORK/interrupted" 2>"$WORK/reader.err" <<'PY' &
import mmap, os, signal, sys
def stop(sig, frame):
    raise InterruptedError
signal.signal(signal.SIGUSR1, stop)
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 1 << 20)
open(sys.argv[2] + ".ready", "w").close()
try:
    n = os.preadv(fd, [buf], 2 << 20)
    open(sys.argv[2], "w").write("read %d bytes\n" % n)
except InterruptedError:
    open(sys.argv[2], "w").write("EINTR\n")
except OSError as e:
    open(sys.argv[2], "w").write("%s\n" % e)
PY
reader=$!
held() { [ "$(proxy_count held 'GET /v2/test/edge-esgz/blobs/.* bytes=')" -ge 1 ]; }
wait_for 20 held || fail "no chunk request held"
wait_for 20 test -e "$WORK/interrupted.ready" || fail "the reader did not start"
sleep 0.5 # (in the read; if not yet, the signals only come sooner)
kill -USR1 "$reader"
sleep 0.5
! _pid_gone "$reader" || fail "a lazy read ended at a signal its reader handles: $(cat "$WORK/interrupted" 2>/dev/null)"
kill -TERM "$reader"
wait_for 10 _pid_gone "$reader" ||
    fail "a lazy read did not end at SIGTERM (state $(sed 's/^.*) //' "/proc/$reader/stat" | cut -d' ' -f1))"
rc=0
wait "$reader" || rc=$?
assert_eq 143 "$rc" "exit status of the reader (killed by SIGTERM; it wrote: $(cat "$WORK/interrupted" 2>/dev/null))"
touch "$WORK/open" "$WORK/whole"
cmp "$(img edge-esgz:1)/large" "$(img edge:1)/large" || fail "large after the interrupted read"
ls "$(img edge-chunked:1)" >/dev/null || fail "lookup of edge-chunked:1 from a fresh cache"
wait_for 60 complete || fail "lazy layers not completed after the interrupted read"
unmount_pullfs

# A registry that goes away after the lookup: a read of what is not local
# fails with the cause's errno, a warning names the image and the file's
# content, and the read works once the registry is back.  (A cache of its
# own; the whole blobs held, so that the completion does not fetch first.)
lazy_cache=$CACHE
CACHE=$WORK/cache-dead
rm -f "$WORK/whole"
touch "$WORK/open"
mount_pullfs --insecure-registry "$PROXY" --lazy-completion-delay 0
ls "$(img edge-esgz:1)" >/dev/null || fail "lookup of edge-esgz:1"
stop_registry
assert_eq EHOSTUNREACH "$(read_errno "$(img edge-esgz:1)/large")" "a read with the registry gone"
grep '"reason":"LazyReadFailed"' "$EVENTS" | grep -q 'No route to host' ||
    fail "no LazyReadFailed warning: $(grep Lazy "$EVENTS")"
restart_registry
cmp "$(img edge-esgz:1)/large" "$(img edge:1)/large" || fail "large once the registry is back"
touch "$WORK/whole"
wait_for 60 complete || fail "lazy layers not completed once the registry is back"
unmount_pullfs
CACHE=$lazy_cache

# --lazy off: the same images pulled whole (eStargz's own files left out
# too), in a cache of their own.
lazy_cache=$CACHE
CACHE=$WORK/cache-off
mount_pullfs --insecure-registry "$PROXY" --lazy off
for ref in edge-esgz:1 edge-chunked:1; do
    py "$INTEGRATION_DIR/treecmp.py" "$(img edge:1)" "$(img "$ref")" ||
        fail "$ref pulled whole differs"
done
! ls "$CACHE"/layers/*/toc >/dev/null 2>&1 || fail "a layer published from its TOC with --lazy off"
unmount_pullfs
CACHE=$lazy_cache

# Complete: served with the registry gone, the same tree.
stop_registry
mount_pullfs --insecure-registry "$PROXY" --pull-policy if-not-present
for ref in edge-esgz:1 edge-chunked:1; do
    py "$INTEGRATION_DIR/treecmp.py" "$(img edge:1)" "$(img "$ref")" ||
        fail "$ref after completion, registry gone: differs"
done
unmount_pullfs
log "PASS"

#!/bin/bash
# Lazy images, what follows the lookup: the status shows the bytes local of
# the total per image; kill -9 of the daemon during the background
# completion, then a restart: the image is served from what is local, the
# completion resumes and ends with the exact tree and a Pulled event;
# GC keeps an image whose completion runs; `pullfsctl pull` of a lazily
# started image waits until it is complete;
# a second zstd:chunked image sharing a file with the first links it from
# the content store instead of fetching it (a partial pull); --lazy-rule
# decides per reference.
. "$(dirname "$0")/lib.sh"
. "$INTEGRATION_DIR/images.sh"

need_root
need_fuse
need_cmd umoci skopeo
start_registry

# Two images of one layer each: share-a holds big (shared) and six files of
# its own, share-b big and one file of its own.  Random bytes: the blobs
# are as large as the files.
head -c 3145728 /dev/urandom >"$WORK/big"
build_share() {
    local name=$1 out=$WORK/layout-$1 st=$WORK/stage-$1
    shift
    umoci init --layout "$out"
    umoci new --image "$out:1"
    mkdir -p "$st/data" "$st/etc"
    cp "$WORK/big" "$st/data/big"
    echo "$name" >"$st/etc/name"
    for f in "$@"; do head -c "${f#*=}" /dev/urandom >"$st/data/${f%=*}"; done
    LAYER_TIME='2021-01-01 00:00:00 UTC' _tar_layer "$st" "$WORK/$name.tar"
    _add_layer "$out:1" "$WORK/$name.tar" "$name"
    umoci unpack --image "$out:1" "$WORK/bundle-$name" >/dev/null
    _skopeo copy --dest-decompress "oci:$out:1" "dir:$WORK/plain-$name"
    _skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
        "dir:$WORK/plain-$name" "docker://$REGISTRY/test/$name:1"
}
build_share share-a a1=1048576 a2=1048576 a3=1048576 a4=1048576 a5=1048576 a6=1048576
build_share share-b b1=102400
layer_of() { registry_manifest "test/$1:1" | py -c 'import json,sys; print(json.load(sys.stdin)["layers"][0]["digest"])'; }
layer_a=$(layer_of share-a)
layer_b=$(layer_of share-b)

# Every blob request waits for $WORK/open, those of the background
# completion of share-a's layer for $WORK/whole too, and come at 1.5 MB/s.
touch "$WORK/open"
start_slowproxy --gate "GET /v2/test/share-[ab]/blobs/=$WORK/open" \
    --gate "GET /v2/test/share-a/blobs/$layer_a .*background=$WORK/whole" \
    --rate "GET /v2/test/share-a/blobs/$layer_a .*background=1500000"
img() { echo "$MNT/images/$PROXY/test/$1"; }
# status_of REF FIELD: FIELD of the image in .pullfs/status
status_of() { pullfs_image_field "$PROXY/test/$1" "$2"; }
# One process: the kill -9 below ends the daemon (no supervisor starting
# another), and the next start is made with the registry gone.
mount_pullfs --no-supervise --insecure-registry "$PROXY" --lazy-completion-delay 0

# Looked up: usable, not complete, its completion running.
ls "$(img share-a:1)" >/dev/null || fail "lookup of share-a:1"
assert_eq false "$(status_of share-a:1 complete)" "share-a complete after the lookup"
assert_eq true "$(status_of share-a:1 completing)" "share-a completing after the lookup"
total=$(status_of share-a:1 bytes_total)
local0=$(status_of share-a:1 bytes_local)
log "after the lookup: $local0 of $total bytes local"
[ "$local0" -lt "$((total / 10))" ] || fail "after the lookup $local0 of $total bytes are local"
"$PULLFSCTL" -m "$MNT" status >"$WORK/status.txt" || fail "pullfsctl status"
grep -E "test/share-a:1 +[0-9.]+ ?[KMG]?i?B / [0-9.]+ ?[KMG]?i?B \([0-9]+%\) +running" "$WORK/status.txt" >/dev/null ||
    fail "pullfsctl status does not show share-a being completed: $(cat "$WORK/status.txt")"

# A read fetches its file: the bytes local grow, the histogram counts it.
cmp "$WORK/bundle-share-a/rootfs/data/a1" "$(img share-a:1)/data/a1" || fail "data/a1"
local1=$(status_of share-a:1 bytes_local)
[ "$local1" -gt "$((local0 + 1000000))" ] || fail "reading 1 MiB took local bytes from $local0 to $local1"
[ "$(metric pullfs_lazy_fetch_duration_seconds_count)" -ge 1 ] ||
    fail "no fetch in the latency histogram: $(grep duration "$MNT/.pullfs/metrics")"
py "$INTEGRATION_DIR/promcheck.py" "$MNT/.pullfs/metrics" pullfs_lazy_fetch_duration_seconds_bucket \
    pullfs_lazy_background_bytes_total pullfs_lazy_saved_bytes_total || fail "metrics exposition"

# Several ranges in one request: in three chunks of a file adjacent in
# the blob (found in the table by toc-dump), the middle one is read first,
# then all three with one O_DIRECT read (one READ of at most 128 KiB): the
# two missing chunks come in one request of two ranges, which the registry
# answers with a multipart/byteranges.
curl -sf "http://$REGISTRY/v2/test/share-a/blobs/$layer_a" -o "$WORK/layer-a" || fail "blob of share-a"
registry_manifest test/share-a:1 | py -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["layers"][0]))' >"$WORK/layer-a.json"
"$TOC_DUMP" chunks "$WORK/layer-a.json" "$WORK/layer-a" >"$WORK/chunks-a" 2>"$WORK/toc-dump.err" ||
    fail "toc-dump chunks: $(cat "$WORK/toc-dump.err")"
multi_before=$(grep -cE "^range GET /v2/test/share-a/blobs/.* bytes=[0-9-]+,[0-9-]+$" "$PROXY_LOG" || true)
py - "$WORK/chunks-a" "$(img share-a:1)" "$WORK/bundle-share-a/rootfs" <<'PY' || fail "reads around a chunk"
import mmap, os, sys
B = 4096
chunks = {}
for line in open(sys.argv[1]):
    path, off, size = line.split("\t")
    chunks.setdefault(path, []).append((int(off), int(size)))
def window():
    for path in sorted(chunks):
        if path in ("data/a1", "data/big"):
            continue  # read already, or shared with share-b
        cs = sorted(chunks[path])
        for k in range(1, len(cs) - 1):
            (o0, s0), (o1, s1), (o2, s2) = cs[k - 1], cs[k], cs[k + 1]
            start, end = o0 // B * B, -(-(o2 + s2) // B) * B
            mid = -(-o1 // B) * B
            # the first and last blocks only in the outer chunks, a block
            # wholly in the middle one
            if end - start <= 131072 and start + B <= o1 and mid + B <= o1 + s1 \
                    and end - B >= o1 + s1:
                return path, start, end, mid
    return None
w = window()
if not w:
    sys.exit("no three chunks of a file within 128 KiB: %s" % {p: len(c) for p, c in chunks.items()})
path, start, end, mid = w
print("lazy-resume: %s: chunk at %d read first, then %d-%d" % (path, mid, start, end), file=sys.stderr)
want = open(os.path.join(sys.argv[3], path), "rb").read()
fd = os.open(os.path.join(sys.argv[2], path), os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, end - start)
small = mmap.mmap(-1, B)
assert os.preadv(fd, [small], mid) == B and small[:] == want[mid:mid + B], "middle block"
n = os.preadv(fd, [buf], start)
assert n == min(end, len(want)) - start and buf[:n] == want[start:start + n], "the three chunks"
PY
multi_after=$(grep -cE "^range GET /v2/test/share-a/blobs/.* bytes=[0-9-]+,[0-9-]+$" "$PROXY_LOG" || true)
local_read=$(status_of share-a:1 bytes_local)
assert_eq $((multi_before + 1)) "$multi_after" "requests of two ranges for share-a"

# The completion fetches what the reads left; kill -9 once it wrote 2 MB.
touch "$WORK/whole"
streamed() {
    local n
    n=$(status_of share-a:1 bytes_local)
    [ "$n" -ge "$((local_read + 2000000))" ] && killed_at=$n
}
wait_for 60 streamed || fail "the completion did not write 2 MB: $(status_of share-a:1 bytes_local) of $total"
kill -KILL "$PULLFS_PID"
wait_for 20 _pid_gone "$PULLFS_PID" || fail "pullfs survived SIGKILL"
wait "$PULLFS_PID" || true
PULLFS_PID=
[ "$killed_at" -lt "$total" ] || fail "the completion ended before the kill"
log "killed with $killed_at of $total bytes local"

# Restarted with the registry gone: what is local is served, none of the
# chunks the reads fetched was lost, nor what the completion wrote but its
# last 2 MB (flushed and marked every 2 MB: at 1.5 MB/s each half
# second of the flushes' pace brings less), the image is not complete,
# and its completion fails and says it will try again.
stop_registry
mount_pullfs --insecure-registry "$PROXY" --pull-policy if-not-present --gc-min-age 0 --lazy-completion-delay 0
answers() { [ "$(errno_of "$MNT/images")" = OK ]; }
wait_for 30 answers || fail "$MNT/images does not answer after the restart"
local2=$(status_of share-a:1 bytes_local)
[ "$local2" -ge "$local_read" ] && [ "$local2" -lt "$total" ] ||
    fail "after the restart $local2 bytes local, $local_read after the reads, of $total"
log "after the restart: $local2 bytes local, $killed_at at the kill"
[ "$local2" -ge "$((killed_at - 2 * 1048576 - 1048576))" ] ||
    fail "the completion's bytes before the kill were lost: $local2 local after the restart, $killed_at at the kill"
timeout 60 cmp "$WORK/bundle-share-a/rootfs/data/a1" "$(img share-a:1)/data/a1" ||
    fail "data/a1 from what is local after the restart"
retrying() { grep '"reason":"LazyFetchFailed"' "$EVENTS" | grep -q "${layer_a}.*tries again in 10 s"; }
wait_for 60 retrying || fail "no LazyFetchFailed saying the completion tries again: $(grep LazyFetch "$EVENTS")"

# Being completed, the image is still being pulled: GC keeps it (rm
# removes it and stops its completion: restart-gc).
"$PULLFSCTL" -m "$MNT" gc --to 1 >"$WORK/gc.out" 2>&1 || fail "pullfsctl gc: $(cat "$WORK/gc.out")"
assert_eq false "$(status_of share-a:1 complete)" "share-a (still there) after gc --to 1 ($(cat "$WORK/gc.out"))"

# pullfsctl pull waits for the completion, which tries again until the
# registry is back.
"$PULLFSCTL" -m "$MNT" pull --plain "$PROXY/test/share-a:1" >"$WORK/pull.out" 2>"$WORK/pull.err" &
puller=$!
track_pid "$puller"
# (the output file may not exist yet: grep would say 2, "never")
completing() { [ -e "$WORK/pull.out" ] && grep -q "share-a:1: completing" "$WORK/pull.out"; }
wait_for 30 completing || fail "pullfsctl pull shows no completion: $(cat "$WORK/pull.out" "$WORK/pull.err")"
! _pid_gone "$puller" || fail "pullfsctl pull ended before the image was complete: $(cat "$WORK/pull.out")"
assert_eq false "$(status_of share-a:1 complete)" "share-a complete with the registry gone"
restart_registry
wait_for 120 _pid_gone "$puller" || fail "pullfsctl pull did not end once the registry was back"
rc=0
wait "$puller" || rc=$?
assert_eq 0 "$rc" "pullfsctl pull's exit status ($(cat "$WORK/pull.err"))"
grep -q "share-a:1: done" "$WORK/pull.out" || fail "pullfsctl pull output: $(cat "$WORK/pull.out")"
assert_eq true "$(status_of share-a:1 complete)" "share-a complete after pullfsctl pull"
assert_eq "$total" "$(status_of share-a:1 bytes_local)" "bytes local of share-a once complete"
d=$CACHE/layers/${layer_a#sha256:}
[ -e "$d/complete" ] && ! ls "$d"/p.* >/dev/null 2>&1 || fail "layer of share-a left partial: $(ls "$d")"
assert_eq toc "$(status_of share-a:1 verified)" "share-a, read before its completion, verified"
assert_tree_eq "$WORK/bundle-share-a/rootfs" "$(img share-a:1)"
assert_eq 1 "$(event_count_msg Pulled "$PROXY/test/share-a:1" "is complete in ")" "Pulled events at completion"
event_fields Pulled "$PROXY/test/share-a:1" message | grep "is complete" | grep -q "Image size: [0-9]* bytes" ||
    fail "the Pulled event at completion has no image size"
[ "$(metric pullfs_lazy_background_bytes_total)" -gt 0 ] || fail "no background bytes counted"

# share-b: its big file is in the content store, linked and not fetched
# at the lookup, by a read, or by the completion, which fetches only the
# rest; the layer is then verified by its table of contents, not by its
# blob's digest.
mark=$(grep -c "^range GET /v2/test/share-b/" "$PROXY_LOG" || true)
ls "$(img share-b:1)" >/dev/null || fail "lookup of share-b:1"
wait_event PartialPull "$PROXY/test/share-b:1"
saved=$(event_fields PartialPull "$PROXY/test/share-b:1" bytes_saved)
[ "$saved" -gt 3000000 ] || fail "share-b saved $saved bytes"
after_lookup=$(grep -c "^range GET /v2/test/share-b/" "$PROXY_LOG" || true)
cmp "$WORK/big" "$(img share-b:1)/data/big" || fail "share-b data/big"
assert_eq "$after_lookup" "$(grep -c "^range GET /v2/test/share-b/" "$PROXY_LOG" || true)" \
    "range requests of share-b for a file in the content store"
log "share-b: lookup made $((after_lookup - mark)) range requests, $saved bytes saved"
[ "$(metric pullfs_lazy_saved_bytes_total)" -ge "$saved" ] || fail "saved bytes not in the metrics"
b_complete() { [ "$(status_of share-b:1 complete)" = true ]; }
wait_for 60 b_complete || fail "share-b not completed: $(status_of share-b:1 bytes_local)"
# (each request has a "request" line, a Range request a "range" line too)
assert_eq 0 $(($(proxy_count request "GET /v2/test/share-b/blobs/$layer_b\$") -
    $(proxy_count range "GET /v2/test/share-b/blobs/$layer_b "))) \
    "share-b's layer: requests that were not for a range"
asked_b=$(grep "^range GET /v2/test/share-b/blobs/$layer_b " "$PROXY_LOG" | sed 's/.*bytes=//' |
    tr ',' '\n' | awk -F- '{ n += $2 - $1 + 1 } END { print n + 0 }')
size_b=$(registry_manifest test/share-b:1 | py -c 'import json,sys; print(json.load(sys.stdin)["layers"][0]["size"])')
log "share-b: $asked_b bytes of its $size_b-byte layer asked for, $saved saved"
[ "$asked_b" -le "$((size_b - saved + 65536))" ] ||
    fail "share-b: $asked_b bytes asked for, $saved of $size_b in the content store"
assert_eq toc "$(status_of share-b:1 verified)" "share-b verified"
assert_tree_eq "$WORK/bundle-share-b/rootfs" "$(img share-b:1)"
unmount_pullfs

# Lazy rules per reference: with --lazy off, a rule makes share-b lazy
# again, share-a is pulled whole; a rule that is not auto or off is
# refused at start.
CACHE=$WORK/cache-rules
mount_pullfs --insecure-registry "$PROXY" --lazy off --lazy-rule "$PROXY/test/share-b:*=auto"
ls "$(img share-a:1)" "$(img share-b:1)" >/dev/null || fail "lookups with lazy rules"
[ -e "$CACHE/layers/${layer_b#sha256:}/toc" ] || fail "share-b was not published from its TOC"
[ ! -e "$CACHE/layers/${layer_a#sha256:}/toc" ] || fail "share-a was published from its TOC with --lazy off"
assert_tree_eq "$WORK/bundle-share-a/rootfs" "$(img share-a:1)"
unmount_pullfs
rc=0
"$PULLFS" -f --cache "$WORK/cache-bad" --lazy-rule "$PROXY/*=sometimes" "$MNT" 2>"$WORK/bad.err" || rc=$?
# (refused when the manager starts, as a bad pull policy rule: exit 1)
assert_eq 1 "$rc" "exit status with a bad lazy rule ($(cat "$WORK/bad.err"))"
! is_mounted "$MNT" || fail "mounted with a bad lazy rule"
grep -q 'invalid lazy rule' "$WORK/bad.err" || fail "bad lazy rule message: $(cat "$WORK/bad.err")"
log "PASS"

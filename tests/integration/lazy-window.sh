#!/bin/bash
# Lazy images, the start-up window and a registry that ignores Range.
# With a long --lazy-completion-delay, the lookup and a few reads leave the
# background completion waiting: no request of it in the registry's log,
# the status says "waiting"; `pullfsctl pull` then completes the image at
# once, asking only for what the reads did not bring (each byte once), and
# the status says the layer was verified against its digest (the blob kept
# as its bytes came, read back whole).  Then, from a clean cache, a
# registry that answers every Range
# request with the whole blob: the reads return the right bytes, and the
# completion ends with every file checked and the exact tree.  Last, a
# reader that reads more than 16 MiB of an image, or makes 64 fetches of
# it, ends its window: the completion runs without waiting for the hour.
. "$(dirname "$0")/lib.sh"
. "$INTEGRATION_DIR/images.sh"
. "$INTEGRATION_DIR/regservers.sh"

need_root
need_fuse
need_cmd umoci skopeo
start_registry

out=$WORK/layout
st=$WORK/stage
mkdir -p "$st/data" "$st/etc"
head -c 3145728 /dev/urandom >"$st/data/big"
for i in 1 2 3 4 5 6; do head -c 300000 /dev/urandom >"$st/data/s$i"; done
echo window >"$st/etc/name"
stage_image "$st" "$out" window "$WORK/bundle"
_skopeo copy --dest-decompress "oci:$out:1" "dir:$WORK/plain"
_skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
    "dir:$WORK/plain" "docker://$REGISTRY/test/window:1"
layer=$(registry_manifest test/window:1 | py -c 'import json,sys; print(json.load(sys.stdin)["layers"][0]["digest"])')

start_fault_proxy "$REGISTRY"
PROXY=127.0.0.1:$PROXY_PORT
ref=$PROXY/test/window:1
root=$MNT/images/$ref
status_of() { pullfs_image_field "$ref" "$1"; }
# blob_gets ranged|whole|background: GETs of the layer blob with a Range,
# without one, or of its completion (a User-Agent saying "background")
blob_gets() {
    py - "$PROXY_LOG" "$layer" "$1" <<'PY'
import json, sys
n = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["method"] != "GET" or not r["path"].endswith("/blobs/" + sys.argv[2]):
        continue
    if sys.argv[3] == "background":
        n += r.get("background", False)
    else:
        n += (r["range"] is None) == (sys.argv[3] == "whole")
print(n)
PY
}
# blob_asked: the bytes of the layer blob all its Range requests asked for
blob_asked() {
    py - "$PROXY_LOG" "$layer" <<'PY'
import json, sys
n = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["method"] == "GET" and r["path"].endswith("/blobs/" + sys.argv[2]) and r["range"]:
        for part in r["range"].split("=", 1)[1].split(","):
            a, b = part.split("-")
            n += int(b) - int(a) + 1
print(n)
PY
}
blob_size=$(registry_manifest test/window:1 | py -c 'import json,sys; print(json.load(sys.stdin)["layers"][0]["size"])')
complete() { [ "$(status_of complete)" = true ]; }
layer_dir=$CACHE/layers/${layer#sha256:}

# The window: the lookup and the start command's reads, and nothing more.
mount_pullfs --insecure-registry "$PROXY" --lazy-completion-delay 3600
ls "$root" >/dev/null || fail "lookup of $ref"
toc_asked=$(blob_asked)
assert_eq window "$(cat "$root/etc/name")" "etc/name"
cmp "$WORK/bundle/rootfs/data/s3" "$root/data/s3" || fail "data/s3 read lazily"
assert_eq waiting "$(status_of completion)" "the completion during the window"
assert_eq false "$(status_of complete)" "complete during the window"
assert_eq true "$(status_of completing)" "completing during the window (pullfsctl pull waits for it)"
assert_eq 0 "$(blob_gets whole)" "whole-blob GETs during the window"
assert_eq 0 "$(blob_gets background)" "requests of the completion during the window"
assert_eq 0 "$(metric pullfs_lazy_background_bytes_total)" "background bytes during the window"
[ "$(blob_gets ranged)" -ge 2 ] || fail "no range requests for the reads: $(cat "$PROXY_LOG")"
# Someone waits for the whole image: the window ends at once.
timeout 120 "$PULLFSCTL" -m "$MNT" pull --plain "$ref" >"$WORK/pull.out" 2>"$WORK/pull.err" ||
    fail "pullfsctl pull: $(cat "$WORK/pull.out" "$WORK/pull.err")"
grep -q "window:1: done" "$WORK/pull.out" || fail "pullfsctl pull output: $(cat "$WORK/pull.out")"
assert_eq true "$(status_of complete)" "complete after pullfsctl pull"
assert_eq done "$(status_of completion)" "the completion after pullfsctl pull"
# only what the reads had not brought, by range: each byte asked for once,
# but the table of contents, which the blob's hash takes from the blob
# (a blob that matches its digest and holds another table is no transfer
# gone wrong); what the reads brought, the hash reads back from disk
assert_eq 0 "$(blob_gets whole)" "whole-blob GETs of the completion"
[ "$(blob_gets background)" -ge 1 ] || fail "no request of the completion: $(cat "$PROXY_LOG")"
asked=$(blob_asked)
log "bytes of the layer blob asked for: $asked of $blob_size"
[ "$asked" -le "$((blob_size + toc_asked))" ] ||
    fail "the layer's bytes were asked for $asked times in a $blob_size-byte blob (its table: $toc_asked)"
assert_eq digest "$(status_of verified)" "verified, after reads took chunks out of the blob's order"
[ ! -e "$layer_dir/lazy" ] && ! ls "$layer_dir"/p.* "$layer_dir"/blob.part >/dev/null 2>&1 ||
    fail "layer left partial: $(ls "$layer_dir")"
assert_tree_eq "$WORK/bundle/rootfs" "$root"
unmount_pullfs

# A registry that ignores Range: every request for a few chunks brings the
# whole blob, of which the client keeps what it asked for.
rm -rf "$CACHE"
: >"$PROXY_LOG"
: >"$EVENTS"
proxy_mode '{"ignore_range": true}'
mount_pullfs --insecure-registry "$PROXY" --lazy-completion-delay 3600
ls "$root" >/dev/null || fail "lookup of $ref with Range ignored"
[ -f "$layer_dir/toc" ] || fail "the layer was not published from its table of contents: $(ls "$layer_dir")"
cmp "$WORK/bundle/rootfs/data/s5" "$root/data/s5" || fail "data/s5 with Range ignored"
cmp <(tail -c +1000001 "$WORK/bundle/rootfs/data/big" | head -c 100000) \
    <(tail -c +1000001 "$root/data/big" | head -c 100000) || fail "the middle of data/big with Range ignored"
[ "$(blob_gets ranged)" -ge 1 ] || fail "no range requests: $(cat "$PROXY_LOG")"
grep '"range": "bytes=' "$PROXY_LOG" | grep -q '"status": 200' || fail "the proxy did not ignore Range: $(cat "$PROXY_LOG")"
assert_eq false "$(status_of complete)" "complete before the completion"
"$PULLFSCTL" -m "$MNT" pull --plain "$ref" >"$WORK/pull.out" 2>"$WORK/pull.err" ||
    fail "pullfsctl pull with Range ignored: $(cat "$WORK/pull.out" "$WORK/pull.err")"
assert_eq true "$(status_of complete)" "complete with Range ignored"
lazy_complete && ! ls "$layer_dir"/p.* "$layer_dir"/blob.part >/dev/null 2>&1 ||
    fail "layer left partial: $(ls "$layer_dir")"
! grep -q LazyReadFailed "$EVENTS" || fail "reads failed: $(grep LazyReadFailed "$EVENTS")"
assert_tree_eq "$WORK/bundle/rootfs" "$root"
# ... and served from what is local with the registry gone
stop_registry
cmp "$WORK/bundle/rootfs/data/big" "$root/data/big" || fail "data/big with the registry gone"
unmount_pullfs
proxy_mode '{}'
restart_registry

# A reader that reads an image in bulk (more than 16 MiB, or 64 fetches)
# ends its window: the completion runs at once, as for `pullfsctl pull`.
CACHE=$WORK/cache-bulk
bulk=$WORK/bulk
mkdir -p "$WORK/bulkstage/data"
head -c $((20 << 20)) /dev/urandom >"$WORK/bulkstage/data/weights"
echo bulk >"$WORK/bulkstage/data/name"
mkdir "$WORK/bulkstage/data/small"
for i in $(seq 1 80); do head -c $((100 + i * 37)) /dev/urandom >"$WORK/bulkstage/data/small/f$i"; done
stage_image "$WORK/bulkstage" "$bulk" bulk
_skopeo copy --dest-decompress "oci:$bulk:1" "dir:$WORK/bulkplain"
_skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
    "dir:$WORK/bulkplain" "docker://$REGISTRY/test/bulk:1"
bulkref=$PROXY/test/bulk:1
mount_pullfs --insecure-registry "$PROXY" --lazy-completion-delay 3600
cmp "$WORK/bulkstage/data/weights" "$MNT/images/$bulkref/data/weights" || fail "data/weights read lazily"
bulk_complete() { [ "$(pullfs_image_field "$bulkref" complete)" = true ]; }
wait_for 60 bulk_complete ||
    fail "not completed after a bulk read: completion $(pullfs_image_field "$bulkref" completion)"
assert_eq bulk "$(cat "$MNT/images/$bulkref/data/name")" "data/name"
unmount_pullfs
# ... 80 small files, one fetch each
CACHE=$WORK/cache-small
mount_pullfs --insecure-registry "$PROXY" --lazy-completion-delay 3600
for i in $(seq 1 80); do
    cmp "$WORK/bulkstage/data/small/f$i" "$MNT/images/$bulkref/data/small/f$i" || fail "data/small/f$i"
done
wait_for 60 bulk_complete ||
    fail "not completed after 80 small reads: completion $(pullfs_image_field "$bulkref" completion)"
unmount_pullfs

# With the default window, reads of a few MB measure the link: from the
# registry itself (no proxy in between) the rest of the image arrives well
# within the window, which then ends before its time, and an event says
# so with the rate.  (Fewer than 64 fetches and 16 MiB: not a bulk read.)
mkdir -p "$WORK/linkstage/data"
head -c $((4 << 20)) /dev/urandom >"$WORK/linkstage/data/weights"
stage_image "$WORK/linkstage" "$WORK/link" link
_skopeo copy --dest-decompress "oci:$WORK/link:1" "dir:$WORK/linkplain"
_skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
    "dir:$WORK/linkplain" "docker://$REGISTRY/test/link:1"
CACHE=$WORK/cache-link
mount_pullfs
linkref=$REGISTRY/test/link:1
link_complete() { [ "$(pullfs_image_field "$linkref" complete)" = true ]; }
head -c 2000000 "$MNT/images/$linkref/data/weights" | cmp - <(head -c 2000000 "$WORK/linkstage/data/weights") ||
    fail "the head of data/weights"
wait_for 60 link_complete ||
    fail "not completed on a fast link: completion $(pullfs_image_field "$linkref" completion)"
grep '"reason":"LazyCompletionNow"' "$EVENTS" | grep -q 'fetched at [0-9.]* MB/s' ||
    fail "no LazyCompletionNow event: $(grep -o '"reason":"[A-Za-z]*"' "$EVENTS" | sort | uniq -c)"
unmount_pullfs

log "PASS"

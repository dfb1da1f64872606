#!/bin/bash
# Each byte of a lazy layer crosses the link once, whatever the mix of
# readers and background completion.  An image of one layer (files of
# 1 MiB and 3 MiB of random bytes, 300 small ones) as zstd:chunked
# (skopeo) and eStargz (ctr-remote), each read whole right after its
# lookup while the completion runs from the start
# (--lazy-completion-delay 0): once complete, the bytes every request
# asked of the layer blob (the proxy's log) are at most 1.05 times the
# blob, and the tree is the image's.  (Fetched by both, the readers'
# chunks and a stream of the whole blob, they came to about twice that.)
. "$(dirname "$0")/lib.sh"
. "$INTEGRATION_DIR/images.sh"
. "$INTEGRATION_DIR/containerd.sh"

need_root
need_fuse
need_cmd umoci skopeo
start_registry

out=$WORK/layout
st=$WORK/stage
mkdir -p "$st/data/small" "$st/etc"
for i in 1 2 3 4 5 6; do head -c 1048576 /dev/urandom >"$st/data/m$i"; done
head -c 3145728 /dev/urandom >"$st/data/big"
for i in $(seq 1 300); do head -c $((100 + i * 37)) /dev/urandom >"$st/data/small/f$i"; done
echo once >"$st/etc/name"
stage_image "$st" "$out" once "$WORK/bundle"
_skopeo copy --dest-decompress "oci:$out:1" "dir:$WORK/plain"
_skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
    "dir:$WORK/plain" "docker://$REGISTRY/test/once-chunked:1"
_skopeo copy --dest-tls-verify=false "oci:$out:1" "docker://$REGISTRY/test/once:1"
start_containerd
ctr_remote images pull --plain-http "$REGISTRY/test/once:1"
ctr_remote images convert --oci --estargz --estargz-chunk-size 262144 \
    "$REGISTRY/test/once:1" "$REGISTRY/test/once-esgz:1"
ctr_remote images push --plain-http "$REGISTRY/test/once-esgz:1"

start_slowproxy

# asked REPO LAYER: bytes of LAYER's blob the requests through the proxy
# asked for (a GET without a Range: the whole blob, SIZE)
asked() {
    py - "$PROXY_LOG" "/v2/test/$1/blobs/$2" "$3" <<'PY'
import re, sys
log, path, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
n = 0
requests = ranges = 0
for line in open(log):
    f = line.split()
    if len(f) >= 3 and f[0] == "request" and f[1] == "GET" and f[2] == path:
        requests += 1
    if len(f) >= 4 and f[0] == "range" and f[1] == "GET" and f[2] == path:
        ranges += 1
        for part in f[3].split("=", 1)[1].split(","):
            a, b = part.split("-")
            n += int(b) - int(a) + 1
print(n + (requests - ranges) * size)
PY
}

for repo in once-chunked once-esgz; do
    # a cache of its own: the same files would come from the content store
    CACHE=$WORK/cache-$repo
    mount_pullfs --insecure-registry "$PROXY" --lazy-completion-delay 0
    root=$MNT/images/$PROXY/test/$repo:1
    read -r layer size < <(registry_manifest "test/$repo:1" |
        py -c 'import json,sys; l = json.load(sys.stdin)["layers"][-1]; print(l["digest"], l["size"])')
    ls "$root" >/dev/null || fail "lookup of $repo"
    # every file, right after the lookup, while the completion runs
    tar -C "$root" -cf - . | tar -tvf - >/dev/null || fail "reading $repo whole"
    complete() { [ "$(pullfs_image_field "$PROXY/test/$repo:1" complete)" = true ]; }
    wait_for 120 complete || fail "$repo not completed"
    n=$(asked "$repo" "$layer" "$size")
    log "$repo: $n bytes asked of its $size-byte layer blob ($((n * 100 / size)) %), verified by $(pullfs_image_field "$PROXY/test/$repo:1" verified)"
    [ "$((n * 100))" -le "$((size * 105))" ] ||
        fail "$repo: $n bytes of its $size-byte layer blob crossed the link"
    assert_tree_eq "$WORK/bundle/rootfs" "$root"
    unmount_pullfs
done
log "PASS"

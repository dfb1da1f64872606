#!/bin/bash
# eStargz's prefetch landmark: the files an image's builder placed before
# it (ctr-remote --estargz-record-in, the files its workload reads first)
# are fetched right after the lookup, before anyone reads them and with
# the background completion still in its start-up window; the rest of the
# layer is not.  With the registry gone afterwards, those files read
# whole and the others fail as a lazy read without a registry does.
. "$(dirname "$0")/lib.sh"
. "$INTEGRATION_DIR/images.sh"
. "$INTEGRATION_DIR/containerd.sh"

need_root
need_fuse
need_cmd umoci skopeo ctr-remote
start_registry

out=$WORK/layout
st=$WORK/stage
mkdir -p "$st/data/small" "$st/etc"
for i in 1 2 3 4 5 6; do head -c 1048576 /dev/urandom >"$st/data/m$i"; done
for i in $(seq 1 100); do head -c $((100 + i * 37)) /dev/urandom >"$st/data/small/f$i"; done
echo landmark >"$st/etc/name"
stage_image "$st" "$out" landmark "$WORK/bundle"
_skopeo copy --dest-tls-verify=false "oci:$out:1" "docker://$REGISTRY/test/landmark:1"
start_containerd
ctr_remote images pull --plain-http "$REGISTRY/test/landmark:1"
# the record of what a workload read, as `ctr-remote optimize` writes it
prefetched="data/m4 data/small/f7 etc/name"
for p in $prefetched; do printf '{"path":"%s"}\n' "$p"; done >"$WORK/record.json"
ctr_remote images convert --oci --estargz --estargz-chunk-size 262144 \
    --estargz-record-in "$WORK/record.json" \
    "$REGISTRY/test/landmark:1" "$REGISTRY/test/landmark-esgz:1"
ctr_remote images push --plain-http "$REGISTRY/test/landmark-esgz:1"
read -r layer size < <(registry_manifest "test/landmark-esgz:1" |
    py -c 'import json,sys; l = json.load(sys.stdin)["layers"][-1]; print(l["digest"], l["size"])')

start_slowproxy
# (no completion for an hour: only the prefetch fetches in the background)
mount_pullfs --insecure-registry "$PROXY" --lazy-completion-delay 3600
root=$MNT/images/$PROXY/test/landmark-esgz:1
ls "$root" >/dev/null || fail "lookup of landmark-esgz:1"
prefetched_event() { grep -q '"reason":"LayerPrefetched"' "$EVENTS"; }
wait_for 60 prefetched_event || fail "no LayerPrefetched event: $(grep -i lazy "$EVENTS")"
log "$(grep '"reason":"LayerPrefetched"' "$EVENTS" | py -c 'import json,sys; print(json.loads(sys.stdin.readline())["message"])')"
assert_eq 1 "$(grep -c '"reason":"LayerPrefetched"' "$EVENTS")" "LayerPrefetched events"
grep '"reason":"LayerPrefetched"' "$EVENTS" | grep -q "$layer" || fail "the event does not name the layer"
# The prefetch asked for about the prefetched files (1 MiB of random
# bytes and two small ones), not for the layer (7 MiB).
asked=$(py - "$PROXY_LOG" "/v2/test/landmark-esgz/blobs/$layer" <<'PY'
import sys
n = 0
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) >= 4 and f[0] == "background" and f[1] == "GET" and f[2] == sys.argv[2]:
        for part in f[3].split("=", 1)[1].split(","):
            a, b = part.split("-")
            n += int(b) - int(a) + 1
print(n)
PY
)
log "the prefetch asked for $asked bytes of the $size-byte layer blob"
[ "$asked" -ge 1048576 ] && [ "$((asked * 3))" -le "$size" ] ||
    fail "the prefetch asked for $asked bytes of the $size-byte layer blob"

# The registry gone: the prefetched files are local, the others are not.
stop_registry
for p in $prefetched; do
    cmp "$root/$p" "$WORK/bundle/rootfs/$p" || fail "$p, prefetched, with the registry gone"
done
for p in data/m1 data/m6 data/small/f50; do
    assert_eq EHOSTUNREACH "$(read_errno "$root/$p")" "a read of $p, not prefetched, with the registry gone"
done
unmount_pullfs
log "PASS"

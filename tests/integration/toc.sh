#!/bin/bash
# Tables of contents of lazy images as the real tools write them: the edge
# image as zstd:chunked by skopeo, and as eStargz (chunked, with prefetch
# files) and as stargz's own zstd:chunked by ctr-remote against a private
# containerd.  For every layer, toc-dump reads the table the way lazy
# pulling does and must list exactly the entries a full unpack of the same
# blob gives (eStargz's own files aside), and every chunk of every file
# must decompress to the bytes of the full unpack.  A flipped byte in a
# chunk and a wrong digest in the descriptor must be refused.
. "$(dirname "$0")/lib.sh"
. "$INTEGRATION_DIR/images.sh"
. "$INTEGRATION_DIR/containerd.sh"

need_root
need_cmd containerd ctr ctr-remote curl python3 cmp
[ -n "${TOC_DUMP:-}" ] && [ -x "$TOC_DUMP" ] || fail "TOC_DUMP is not set (path of tests/toc-dump)"

start_registry
push_edge test/edge:1

log "zstd:chunked by skopeo"
plain=$WORK/edge-plain
_skopeo copy --dest-decompress "oci:$(layout_of edge):1" "dir:$plain"
_skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
    "dir:$plain" "docker://$REGISTRY/test/edge-chunked:1"

log "eStargz and stargz's zstd:chunked by ctr-remote"
start_containerd
ctr_remote images pull --plain-http "$REGISTRY/test/edge:1"
# Files to prefetch: they go first in the blob, before a prefetch landmark.
printf '{"path":"/etc/passwd"}\n{"path":"/large"}\n' >"$WORK/record.json"
ctr_remote images convert --oci --estargz --estargz-chunk-size 1000000 \
    --estargz-record-in "$WORK/record.json" "$REGISTRY/test/edge:1" "$REGISTRY/test/edge-esgz:1"
ctr_remote images push --plain-http "$REGISTRY/test/edge-esgz:1"
ctr_remote images convert --oci --zstdchunked "$REGISTRY/test/edge:1" "$REGISTRY/test/edge-zc:1"
ctr_remote images push --plain-http "$REGISTRY/test/edge-zc:1"

# layer_descriptor REF N: the Nth layer descriptor of REF, as JSON.
layer_descriptor() {
    registry_manifest "$1" | python3 -c '
import json, sys
print(json.dumps(json.load(sys.stdin)["layers"][int(sys.argv[1])]))' "$2"
}

# check_layer REF N FORMAT: the table of layer N of REF against its unpack.
check_layer() {
    local ref=$1 n=$2 format=$3 d=$WORK/check digest f summary
    rm -rf "$d"
    mkdir -p "$d/toc" "$d/unpack"
    layer_descriptor "$ref" "$n" >"$d/desc.json"
    digest=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["digest"])' "$d/desc.json")
    curl -sf "http://$REGISTRY/v2/${ref%:*}/blobs/$digest" -o "$d/blob" || fail "cannot fetch $digest"

    "$TOC_DUMP" toc "$d/desc.json" "$d/blob" "$d/toc" >"$d/toc.txt" 2>"$d/toc.err" ||
        { cat "$d/toc.err" >&2; fail "$ref layer $n: the table was refused"; }
    summary=$(cat "$d/toc.err")
    log "$ref layer $n: $summary"
    [[ $summary == "toc-dump: $format table"* ]] || fail "$ref layer $n is not read as $format"
    "$TOC_DUMP" unpack "$d/desc.json" "$d/blob" "$d/unpack" >"$d/unpack-all.txt" ||
        fail "$ref layer $n: the full unpack failed"
    grep -Pv '^(stargz\.index\.json|\.no\.prefetch\.landmark|\.prefetch\.landmark)\t' \
        "$d/unpack-all.txt" >"$d/unpack.txt" || true
    diff -u "$d/unpack.txt" "$d/toc.txt" >&2 ||
        fail "$ref layer $n: the table's entries differ from the full unpack's"
    # Every file the table lists came out of its chunks as the unpack's bytes.
    for f in "$d/toc"/o.*; do
        [ -e "$f" ] || continue
        cmp -s "$f" "$d/unpack/${f##*/}" || fail "$ref layer $n: ${f##*/} differs from the full unpack"
    done
    [ "$(cut -f9 "$d/toc.txt" | grep -v '^-$' | sort -u | wc -l)" = "$(find "$d/toc" -name 'o.*' | wc -l)" ] ||
        fail "$ref layer $n: not every file's content was written"
}

for ref in test/edge-chunked:1 test/edge-esgz:1 test/edge-zc:1; do
    case $ref in *esgz*) format=eStargz ;; *) format=zstd:chunked ;; esac
    for n in 0 1 2; do
        check_layer "$ref" "$n" "$format"
    done
done

# What the tools wrote: the footer, the chunking, the prefetch landmark,
# the annotations.
d=$WORK/check
check_layer test/edge-esgz:1 0 eStargz
grep -q 'prefetch up to [1-9]' "$d/toc.err" || fail "eStargz layer 0 has no prefetch landmark"
# one chunk a file, but six for the 5 MiB one
files=$(awk -F'\t' '$2 == "reg" && $6 > 0' "$d/toc.txt" | wc -l)
grep -q " $((files + 5)) chunks" "$d/toc.err" ||
    fail "eStargz chunks of 1000000 bytes expected: $(cat "$d/toc.err")"
[ "$(tail -c 51 "$d/blob" | head -c 4 | od -An -tx1 | tr -d ' \n')" = 1f8b0804 ] ||
    fail "no 51-byte eStargz footer"
check_layer test/edge-chunked:1 0 zstd:chunked
python3 - "$d/desc.json" <<'EOF' || fail "skopeo's zstd:chunked annotations are not the ones expected"
import json, sys
a = json.load(open(sys.argv[1]))["annotations"]
assert "io.containers.zstd-chunked.manifest-checksum" in a or \
    "io.github.containers.zstd-chunked.manifest-checksum" in a, a
EOF

log "a flipped byte in a chunk is refused"
python3 - "$d/blob" <<'EOF'
import os, sys
with open(sys.argv[1], "r+b") as f:
    # the middle of the 5 MiB random file, far from any header
    f.seek(os.path.getsize(sys.argv[1]) // 2)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0x40]))
EOF
if "$TOC_DUMP" toc "$d/desc.json" "$d/blob" >/dev/null 2>"$d/err"; then
    fail "a corrupt chunk was accepted"
fi
grep -Eq 'digest|corrupt' "$d/err" || fail "unexpected reason: $(cat "$d/err")"

log "a table whose digest is not the annotation's is refused"
python3 - "$d/desc.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
a = d["annotations"]
for k in list(a):
    if k.endswith("manifest-checksum"):
        h = a[k]
        a[k] = h[:-1] + ("0" if h[-1] != "0" else "1")
json.dump(d, open(sys.argv[1], "w"))
EOF
if "$TOC_DUMP" toc "$d/desc.json" "$d/blob" >/dev/null 2>"$d/err"; then
    fail "a table with the wrong digest was accepted"
fi
grep -q 'the manifest says' "$d/err" || fail "unexpected reason: $(cat "$d/err")"
log "ok"

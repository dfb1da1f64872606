#!/bin/bash
# A lazy layer cannot be poisoned by digest.  The victim
# V is a gzip image on the real registry, its layer digest D.  An attacker
# serves, from a registry of their own (fakeregistry.py, which lies about
# digests as such a registry may), an image whose manifest names layer D
# with the zstd:chunked table of contents of another layer (edge's first,
# made by skopeo), and whose blob "D" is that other layer.  The attacker's
# image is looked up first and published lazily under D; then V: its tree
# must be umoci's unpack of V (not the attacker's files), the attacker's
# layer is never verified as D (its completion checks its files against
# the attacker's table of contents only, and says so), and after a restart
# V is still right.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
need_cmd skopeo umoci
start_registry
push_busybox test/busybox:1
push_edge_chunked test/edge-chunked:1

FAKE_DIR=$WORK/fake
mkdir -p "$FAKE_DIR/blobs"
D=$(registry_manifest test/busybox:1 | py -c '
import json, sys
m = json.load(sys.stdin)
assert len(m["layers"]) == 1, m
print(m["layers"][0]["digest"])')
registry_manifest test/edge-chunked:1 >"$WORK/edge-chunked.json"
py - "$REGISTRY" "$FAKE_DIR" "$D" "$WORK/edge-chunked.json" <<'PY' || fail "cannot make the attacker's image"
import hashlib, json, os, sys, urllib.request
reg, fake, victim, path = sys.argv[1:]
m = json.load(open(path))
def blob(d):
    return urllib.request.urlopen("http://%s/v2/test/edge-chunked/blobs/%s" % (reg, d)).read()
for d in [m["config"]["digest"]] + [l["digest"] for l in m["layers"]]:
    open(os.path.join(fake, "blobs", d.split(":")[1]), "wb").write(blob(d))
first = m["layers"][0]
assert any("zstd-chunked" in k for k in first.get("annotations", {})), first
# the attacker's table, the blob served as D, the manifest claiming D
os.rename(os.path.join(fake, "blobs", first["digest"].split(":")[1]),
          os.path.join(fake, "blobs", victim.split(":")[1]))
first["digest"] = victim
body = json.dumps(m).encode()
open(os.path.join(fake, "manifest"), "wb").write(body)
route = {"file": "manifest",
         "type": m.get("mediaType", "application/vnd.oci.image.manifest.v1+json"),
         "digest": "sha256:" + hashlib.sha256(body).hexdigest()}
json.dump({"evil/1": route}, open(os.path.join(fake, "routes.json"), "w"))
PY
python3 "$INTEGRATION_DIR/fakeregistry.py" --dir "$FAKE_DIR" --port-file "$WORK/fake.port" \
    --log "$WORK/fake.log" 2>"$WORK/fake.err" &
FAKE_PID=$!
track_pid "$FAKE_PID"
wait_for 20 test -s "$WORK/fake.port" || fail "fakeregistry did not start: $(cat "$WORK/fake.err")"
FAKE=127.0.0.1:$(cat "$WORK/fake.port")

umoci unpack --image "$(layout_of busybox):1" "$WORK/bundle" >/dev/null
layer_dir=$CACHE/layers/${D#sha256:}
# layer_events REASON...: how many events of those reasons name layer D.
layer_events() {
    py - "$EVENTS" "$D" "$@" <<'PY'
import json, sys
path, digest, reasons = sys.argv[1], sys.argv[2], sys.argv[3:]
n = 0
for line in open(path):
    try:
        ev = json.loads(line)
    except ValueError:
        continue
    n += ev.get("reason") in reasons and ev.get("digest") == digest
print(n)
PY
}
evil_verified() { pullfs_image_field "$FAKE/evil:1" verified; }
_evil_complete() { [ "$(pullfs_image_field "$FAKE/evil:1" complete)" = true ]; }

mount_pullfs --insecure-registry "$FAKE" --lazy-completion-delay 0
evil=$MNT/images/$FAKE/evil:1
v=$MNT/images/$REGISTRY/test/busybox:1

# The attacker's image, lazily: its own files, its layer published as D.
assert_eq edge "$(cat "$evil/etc/hostname")" "the attacker's image reads its own file"
[ -e "$layer_dir/lazy" ] || fail "the attacker's layer was not published lazily as $D"
# Its completion checks every file against the attacker's table: the
# layer is complete, verified by that table only, never as D.
wait_for 60 _evil_complete || fail "the attacker's image was not completed"
assert_eq toc "$(evil_verified)" "how the attacker's layer was verified"
[ -e "$layer_dir/lazy" ] && [ -e "$layer_dir/complete" ] ||
    fail "the attacker's layer $D is not marked verified by its table only: $(ls "$layer_dir")"
[ "$(layer_events LayerCompleted)" -le 1 ] && ! grep '"reason":"LayerCompleted"' "$EVENTS" |
    grep "$D" | grep -qv "table of contents" || fail "LayerCompleted of $D: $(grep LayerCompleted "$EVENTS")"

# V: its own layer, verified against D, replaces the lazy one.
assert_errno OK "$v"
assert_eq busybox "$(cat "$v/etc/hostname")" "V's /etc/hostname"
assert_tree_eq "$WORK/bundle/rootfs" "$v" --dir-mtime
wait_for 30 test ! -e "$layer_dir/lazy" || fail "layers/ still holds the lazy layer of $D"
# The image that holds the old layer keeps it.
assert_eq edge "$(cat "$evil/etc/hostname")" "the attacker's image after the replacement"

unmount_pullfs
mount_pullfs --insecure-registry "$FAKE" --lazy-completion-delay 0
assert_tree_eq "$WORK/bundle/rootfs" "$v" --dir-mtime
assert_eq digest "$(pullfs_image_field "$REGISTRY/test/busybox:1" verified)" "how V's layer was verified after a restart"
[ -z "$(find "$CACHE/tmp" -name lazy -print -quit)" ] ||
    fail "tmp/ still holds the replaced lazy layer after a restart"
unmount_pullfs
log "PASS"

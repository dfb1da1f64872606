#!/bin/bash
# MOUNT/layers/, the Additional Layer Store (docs/layer-store.md), as
# containers/storage 1.43 reads it: layers/<base64 ref>/<digest>/ with
# diff (the layer's own tree in overlay format), info, blob and the "use"
# marker; the lookup runs ensure and shares the cache with images/.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
need_cmd getfattr
start_registry
push_edge test/edge:1
mount_pullfs

ref=$REGISTRY/test/edge:1
b64=$(printf %s "$ref" | base64 -w0)
mapfile -t blobs < <(image_blobs test/edge:1)
config=${blobs[0]}
layers=("${blobs[@]:1}")
[ "${#layers[@]}" = 3 ] || fail "edge image: expected 3 layers, got ${#layers[@]}"

# Go's standard base64 may put "/" in the name: the store joins the pieces.
# Pick the layer path as containers/storage builds it (path.Join).
layer_dir() { echo "$MNT/layers/$b64/$1"; }

mark=$(registry_mark)
L2=$(layer_dir "${layers[1]}")
# ---- the lookup of a layer directory runs ensure: a Pulling event by us
[ -d "$L2" ] || fail "$L2 is not a directory: $(errno_of "$L2")"
wait_event Pulled "$ref"
assert_eq "$$" "$(events field Pulling "$ref" pid)" "pid of the Pulling event caused through layers/"
for f in diff info blob; do
    [ -e "$L2/$f" ] || fail "$L2/$f missing"
done
assert_eq "blob diff info" "$(list_dir "$L2" | tr '\n' ' ' | sed 's/ $//')" "ls of a layer directory"
# "use" is the engine's marker: never there, looking it up is the note.
assert_errno ENOENT "$L2/use"

# ---- diff is layer 2 alone, in overlay format
d=$L2/diff
assert_eq "c 0 0" "$(stat -c '%F' "$d/del/file" | sed 's/character special file/c/') $(stat -c '%t %T' "$d/del/file")" "whiteout del/file as a 0/0 character device"
assert_eq "character special file" "$(stat -c %F "$d/deldir")" "whiteout of the directory deldir"
assert_eq "y" "$(getfattr --only-values -n trusted.overlay.opaque "$d/opq" 2>/dev/null)" "trusted.overlay.opaque of opq"
assert_eq "y" "$(getfattr --only-values -n user.overlay.opaque "$d/opq" 2>/dev/null)" "user.overlay.opaque of opq"
assert_errno ENOENT "$d/opq/.wh..wh..opq"
assert_errno ENOENT "$d/del/.wh.file"
assert_eq upper "$(cat "$d/opq/upper1")" "opq/upper1 in layer 2"
assert_errno ENOENT "$d/opq/lower1"
assert_errno ENOENT "$d/etc"
[ -z "$(getfattr --absolute-names -d -m 'overlay' "$d/added" 2>/dev/null)" ] || fail "added/ must not be opaque"
assert_eq "" "$(getfattr --absolute-names -d -m 'user\.' "$d/opq" 2>/dev/null)" "user.* xattrs listed on opq (a container would show them)"

# ---- info: what containers/storage decodes into its Layer
info=$(cat "$L2/info")
diffid=$(curl -sf "http://$REGISTRY/v2/test/edge/blobs/$config" | python3 -c 'import json,sys; print(json.load(sys.stdin)["rootfs"]["diff_ids"][1])')
size=$(registry_manifest test/edge:1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["layers"][1]["size"])')
python3 - "$info" "${layers[1]}" "$diffid" "$size" <<'EOF' || fail "info of layer 2: $info"
import json, sys
i = json.loads(sys.argv[1])
assert i["compressed-diff-digest"] == sys.argv[2], i
assert i["diff-digest"] == sys.argv[3], i
assert i["compressed-size"] == int(sys.argv[4]), i
assert i["compression"] == 2, i
EOF

# ---- pullfs fetched each layer once, and the same image through images/
# fetches nothing more
for l in "${layers[@]}"; do
    assert_eq 1 "$(registry_count GET "/v2/test/edge/blobs/$l" "$mark")" "GETs of layer $l"
done
assert_eq edge "$(cat "$MNT/images/$ref/etc/hostname")" "images/ of the same reference"
for l in "${layers[@]}"; do
    assert_eq 1 "$(registry_count GET "/v2/test/edge/blobs/$l" "$mark")" "GETs of layer $l after images/"
done

# ---- blob: the compressed layer, read from the registry on demand
assert_eq "${layers[1]#sha256:}" "$(sha256sum <"$L2/blob" | cut -d' ' -f1)" "sha256 of blob"
assert_eq "$size" "$(stat -c %s "$L2/blob")" "size of blob"

# ---- what is not a layer of the image: ENOENT, and the event says why
other=sha256:$(printf '%064d' 0)
assert_errno ENOENT "$(layer_dir "$other")"
wait_event LayerNotInImage "$ref"
# not base64 of a reference, or not a digest
assert_errno ENOENT "$MNT/layers/not-base64!/${layers[0]}"
assert_errno ENOENT "$MNT/layers/$b64/sha256:abc"
# a reference unknown to the registry: ensure's errno
assert_errno ENOENT "$MNT/layers/$(printf %s "$REGISTRY/test/nosuch:1" | base64 -w0)/${layers[0]}"
assert_contains layers "$(list_dir "$MNT")" "ls of the mount root"

# ---- GC: an image whose layer view the kernel holds is in use
source "$INTEGRATION_DIR/ctl.sh"
exec 8<"$L2/info"
ctl rm "$ref"
assert_eq 1 "$RC" "exit status of rm of an image whose layer is open through layers/"
assert_contains "in use" "$ERR" "rm of an image used through layers/"
ctl_ok ls
assert_contains "$ref " "$OUT" "ls after a refused rm"
exec 8<&-

unmount_pullfs

#!/bin/bash
# An image made by `umoci insert`, whose layer of a directory inserted at
# "/" has a "/" root entry (and no end-of-archive blocks): served, with the
# names resolved inside the root, exactly as umoci unpack gives the tree.
# (Absolute member names are covered by the layer unit test: umoci 0.4.7
# writes the others relative.)
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_root
need_cmd umoci skopeo
start_registry

layout=$WORK/layout
umoci init --layout "$layout"
umoci new --image "$layout:1"
echo hello >"$WORK/hello"
mkdir -p "$WORK/dir/sub"
echo inner >"$WORK/dir/sub/file"
ln -s sub/file "$WORK/dir/link"
umoci insert --image "$layout:1" "$WORK/hello" /etc/hello >>"$WORK/umoci.log" 2>&1 ||
    fail "umoci insert failed: $(cat "$WORK/umoci.log")"
umoci insert --image "$layout:1" "$WORK/dir" /opt/dir >>"$WORK/umoci.log" 2>&1 ||
    fail "umoci insert failed: $(cat "$WORK/umoci.log")"
umoci insert --image "$layout:1" "$WORK/dir" / >>"$WORK/umoci.log" 2>&1 ||
    fail "umoci insert failed: $(cat "$WORK/umoci.log")"
# what umoci wrote: a root entry
py - "$layout"/blobs/sha256/* <<'PY' || fail "umoci wrote no root entry (the case is not tested)"
import gzip, sys
names = []
for b in sys.argv[1:]:
    try:
        d = gzip.open(b).read()
    except (OSError, EOFError):
        continue
    i = 0  # the raw ustar names (tools that list tars drop a leading "/")
    while i + 512 <= len(d) and d[i:i + 512] != bytes(512):
        h = d[i:i + 512]
        names.append(h[:100].rstrip(b"\0").decode())
        i += 512 + (int(h[124:136].rstrip(b"\0 ") or b"0", 8) + 511) // 512 * 512
assert "/" in names, names
PY
_skopeo copy --dest-tls-verify=false "oci:$layout:1" "docker://$REGISTRY/test/umoci:1"

umoci unpack --image "$layout:1" "$WORK/bundle" >>"$WORK/umoci.log" 2>&1 ||
    fail "umoci unpack failed: $(cat "$WORK/umoci.log")"
mount_pullfs
img=$MNT/images/$REGISTRY/test/umoci:1
assert_eq hello "$(cat "$img/etc/hello")" "etc/hello"
assert_eq inner "$(cat "$img/opt/dir/link")" "opt/dir/link"
assert_eq inner "$(cat "$img/sub/file")" "sub/file (inserted at /)"
py "$INTEGRATION_DIR/treecmp.py" "$WORK/bundle/rootfs" "$img" || fail "the tree differs from umoci unpack's"
! grep -q '"reason":"Failed"' "$EVENTS" || fail "a Failed event: $(grep Failed "$EVENTS")"
unmount_pullfs
log "PASS"

#!/bin/bash
# Files of a lazy image once local: opened in passthrough, like the files
# of a full pull, unless an open of the same node that is not (made before
# the file was local) is still open, which the kernel would answer with
# EIO: a file mapped while it was fetched, kept mapped and open while the
# completion finishes it, then opened again, read through the daemon; once
# the old open is closed, an open is in passthrough.  A small file (in the
# layer's pack) is read through the daemon.
. "$(dirname "$0")/lib.sh"
. "$INTEGRATION_DIR/images.sh"

need_root
need_fuse
need_cmd umoci skopeo
start_registry

st=$WORK/stage
mkdir -p "$st/data"
head -c 3145728 /dev/urandom >"$st/data/big"
head -c 2000 /dev/urandom >"$st/data/small"
umoci init --layout "$WORK/layout"
umoci new --image "$WORK/layout:1"
LAYER_TIME='2021-01-01 00:00:00 UTC' _tar_layer "$st" "$WORK/layer.tar"
_add_layer "$WORK/layout:1" "$WORK/layer.tar" "data"
_skopeo copy --dest-decompress "oci:$WORK/layout:1" "dir:$WORK/plain"
_skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
    "dir:$WORK/plain" "docker://$REGISTRY/test/pt:1"

# The background completion's requests wait for $WORK/whole.
start_slowproxy --gate "GET /v2/test/pt/blobs/.*background=$WORK/whole"
mount_pullfs --insecure-registry "$PROXY" --lazy-completion-delay 0
img=$MNT/images/$PROXY/test/pt:1
complete() { [ "$(pullfs_image_field "$PROXY/test/pt:1" complete)" = true ]; }

ls "$img" >/dev/null || fail "lookup of test/pt:1"
complete && fail "test/pt:1 complete with its completion held"

# Mapped while it is fetched; the mapping and its open stay while the
# completion finishes the file; then, by the command file, an open of the
# local file beside them and a read of it whole, and, with both closed,
# another.
mkfifo "$WORK/cmd"
py - "$img/data/big" "$st/data/big" "$WORK/cmd" "$WORK/out" <<'PY' &
import mmap, os, sys
path, want_path, cmd, out = sys.argv[1:5]
want = open(want_path, "rb").read()
f = open(path, "rb")
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
ok = m[:4096] == want[:4096]
with open(out, "w") as o:
    o.write("mapped %s\n" % ok)
c = open(cmd).readline().strip()
res = []
try:
    with open(path, "rb") as g:
        res.append("second %s" % (g.read() == want))
except OSError as e:
    res.append("second %s" % e)
res.append("mapping %s" % (m[:] == want))
m.close()
f.close()
with open(out, "a") as o:
    o.write("\n".join(res) + "\n")
PY
reader=$!
track_pid "$reader"
mapped() { [ -f "$WORK/out" ] && grep -q "^mapped" "$WORK/out"; }
wait_for 30 mapped || fail "the mapping of data/big did not come"
assert_eq "mapped True" "$(cat "$WORK/out")" "the first page through the mapping"

touch "$WORK/whole"
wait_for 60 complete || fail "test/pt:1 did not complete"
before=$(metric pullfs_passthrough_opens_total)
echo go >"$WORK/cmd"
wait "$reader" || fail "the reader failed: $(cat "$WORK/out")"
assert_eq "mapped True
second True
mapping True" "$(cat "$WORK/out")" "reads of data/big beside its mapping"
assert_eq "$before" "$(metric pullfs_passthrough_opens_total)" \
    "passthrough opens while a mapped open of the node was there"

# Nothing of it open now: both files in passthrough.
cmp "$st/data/big" "$img/data/big" || fail "data/big once closed"
cmp "$st/data/small" "$img/data/small" || fail "data/small"
# (data/small, under 64 KiB, is in the layer's pack: read through the
# daemon, as a full pull's small files are)
assert_eq "$((before + 1))" "$(metric pullfs_passthrough_opens_total)" \
    "passthrough opens of the local files"
log "PASS"

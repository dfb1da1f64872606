#!/bin/bash
# Files stored as objects: read by the kernel in passthrough (no READ
# request reaches the daemon), stored once on disk for two images that
# share their content, readable after their image is collected, and read
# through the daemon when passthrough is off; small files stay in the pack.
source "$(dirname "$0")/lib.sh"

need_fuse
start_registry

# Two images whose layers differ but hold one identical 1 MiB file (and a
# mostly zero one); small files stay in the packs.
py - "$WORK" <<'PY'
import io, os, random, sys, tarfile
work = sys.argv[1]
rnd = random.Random(7)
big = bytes(rnd.getrandbits(8) for _ in range(1 << 20))
other = bytes(rnd.getrandbits(8) for _ in range(100 << 10))
sparse = b"\0" * (300 << 10) + b"middle" + b"\0" * (200 << 10)
open(os.path.join(work, "big.bin"), "wb").write(big)
open(os.path.join(work, "other.bin"), "wb").write(other)
open(os.path.join(work, "sparse.bin"), "wb").write(sparse)
def layer(name, files):
    with tarfile.open(os.path.join(work, name), "w", format=tarfile.PAX_FORMAT) as t:
        d = tarfile.TarInfo("data"); d.type = tarfile.DIRTYPE; d.mode = 0o755
        t.addfile(d)
        for path, data in files:
            if data is None:
                i = tarfile.TarInfo(path[0]); i.type = tarfile.LNKTYPE; i.linkname = path[1]
                t.addfile(i)
                continue
            i = tarfile.TarInfo(path); i.size = len(data); i.mode = 0o644; i.mtime = 1700000000
            t.addfile(i, io.BytesIO(data))
layer("a.tar", [("data/big.bin", big), ("data/small.txt", b"small\n"),
                ("data/dup1.bin", big), ("data/dup2.bin", big),
                (("data/big.link", "data/big.bin"), None), ("data/sparse.bin", sparse)])
layer("b.tar", [("data/copy.bin", big), ("data/other.bin", other)])
PY
py "$INTEGRATION_DIR/rawpush.py" "$REGISTRY" test/a:1 "$WORK/a.tar" >/dev/null
py "$INTEGRATION_DIR/rawpush.py" "$REGISTRY" test/b:1 "$WORK/b.tar" >/dev/null

# READ requests so far; reading the metrics makes some too (a fixed number
# per read of the whole file in one large block).
reads() {
    dd if="$MNT/.pullfs/metrics" of="$WORK/metrics" bs=4M status=none
    awk '$1 == "pullfs_fuse_operations_total{op=\"read\"}" { print $2 }' "$WORK/metrics"
}

mount_pullfs --gc-min-age 0
a=$MNT/images/$REGISTRY/test/a:1/data
b=$MNT/images/$REGISTRY/test/b:1/data
assert_eq "small" "$(cat "$a/small.txt")" "a small file from the pack"
assert_eq 1 "$(metric pullfs_passthrough)" "passthrough on (root, kernel 6.9+)"
# (a layer's objects are shared with the stored ones when it is published,
# just after the lookup; a file read before that has a backing file of its own)
[ -d "$b" ] || fail "image b"
wait_published
r0=$(reads)
r1=$(reads)
cmp "$a/big.bin" "$WORK/big.bin" || fail "big.bin differs"
cmp "$a/big.link" "$WORK/big.bin" || fail "the hardlink to big.bin differs"
cmp "$a/dup2.bin" "$WORK/big.bin" || fail "a second copy of big.bin in its layer differs"
cmp "$b/copy.bin" "$WORK/big.bin" || fail "copy.bin differs"
cmp "$b/other.bin" "$WORK/other.bin" || fail "other.bin differs"
cmp "$a/sparse.bin" "$WORK/sparse.bin" || fail "sparse.bin differs"
assert_eq $((r1 + r1 - r0)) "$(reads)" "READ requests while reading objects in passthrough"
[ "$(metric pullfs_passthrough_opens_total)" -ge 5 ] || fail "passthrough opens not counted"
# One backing file per distinct content, kept registered for the next open.
assert_eq 3 "$(metric pullfs_backing_files)" "backing files (big, other, sparse)"
# mmap reads the same bytes (passthrough maps the backing file).
py - "$a/big.bin" "$WORK/big.bin" <<'PY' || fail "mmap of an object"
import mmap, sys
with open(sys.argv[1], "rb") as f, open(sys.argv[2], "rb") as g:
    assert mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)[:] == g.read()
PY

# One object for the five names of big.bin's content, in two layers;
# the small file is in no object.
sum=$(sha256sum "$WORK/big.bin" | cut -d' ' -f1)
[ -f "$CACHE/objects/$sum" ] || fail "no object named by the content digest"
assert_eq 3 "$(stat -c %h "$CACHE/objects/$sum")" "links to the shared object (index + two layers)"
assert_eq 3 "$(ls "$CACHE/objects" | wc -l)" "distinct objects (big, other, sparse)"
shared=$(py -c 'import json,sys; print(json.load(open(sys.argv[1]))["objects"]["shared_bytes"])' "$MNT/.pullfs/status")
assert_eq $((1 << 20)) "$shared" "bytes stored once for two layers"
"$PULLFSCTL" --mount "$MNT" status | grep -q '^Objects: *3 files .* 1.0 MiB stored once' ||
    fail "pullfsctl status does not report the objects: $("$PULLFSCTL" --mount "$MNT" status)"

# A process standing in an image keeps reading its objects after the
# image is removed and collected.
(cd "$b" && while [ ! -e "$WORK/go" ]; do sleep 0.05; done &&
    sha256sum copy.bin >"$WORK/read-after-rm") &
reader=$!
wait_for 20 test -d "/proc/$reader/cwd/." || fail "the reader did not start"
"$PULLFSCTL" --socket "$CACHE/control.sock" rm "$REGISTRY/test/b:1" >/dev/null ||
    fail "rm of an image a process stands in"
touch "$WORK/go"
wait "$reader" || fail "reading in a removed image failed"
assert_eq "$sum" "$(cut -d' ' -f1 "$WORK/read-after-rm")" "object read in a removed image"
# Once the kernel lets go of b (its layer was only moved aside while the
# kernel held the image), b's own object goes with the next collection;
# the shared one stays.
collected() {
    echo 2 >/proc/sys/vm/drop_caches
    "$PULLFSCTL" --socket "$CACHE/control.sock" gc >/dev/null || return 1
    [ "$(ls "$CACHE/objects" | wc -l)" = 2 ]
}
wait_for 20 collected || fail "b's object not collected: $(ls "$CACHE/objects" "$CACHE/tmp")"
assert_eq 2 "$(stat -c %h "$CACHE/objects/$sum")" "links to the shared object after b is gone"
assert_eq 0 "$(ls "$CACHE/tmp" | wc -l)" "layers moved aside and not deleted"
cmp "$a/big.bin" "$WORK/big.bin" || fail "big.bin differs after b is gone"

# Backing ids outlive a serving process (they are the connection's): the
# next one takes them over, pinned while an image it restored may have an
# inode open on them, and lets them go once no such image is held, instead
# of carrying them to every process after it.
exec 8<"$a/big.bin"
[ "$(metric pullfs_backing_files)" -ge 1 ] || fail "no backing file before the kill"
pid=$(pullfs_serving_pid)
PULLFS_RECOVERY_EXPECTED=1 # (the daemon log says so from now on)
kill -KILL "$pid"
_other_serving() { [ "$(pullfs_serving_pid)" != "$pid" ]; }
wait_for 30 _other_serving || fail "no serving process after the kill"
[ "$(metric pullfs_backing_files)" -ge 1 ] || fail "the backing file of a file held open was let go"
cmp "$a/big.bin" "$WORK/big.bin" || fail "big.bin differs after the kill"
head -c 4 <&8 >/dev/null || fail "the file held open across the kill"
exec 8<&-
_backings_gone() {
    echo 2 >/proc/sys/vm/drop_caches
    [ "$(metric pullfs_backing_files)" = 0 ]
}
wait_for 20 _backings_gone || fail "backing files taken over and no longer used: $(metric pullfs_backing_files)"
cmp "$a/big.bin" "$WORK/big.bin" || fail "big.bin differs once the backing files went"
unmount_pullfs

# Passthrough off: the same files, read through the daemon.
mount_pullfs --no-passthrough
assert_eq 0 "$(metric pullfs_passthrough)" "passthrough off"
r0=$(reads)
cmp "$a/big.bin" "$WORK/big.bin" || fail "big.bin differs without passthrough"
cmp "$a/sparse.bin" "$WORK/sparse.bin" || fail "sparse.bin differs without passthrough"
[ "$(reads)" -gt "$r0" ] || fail "no READ request without passthrough"
assert_eq 0 "$(metric pullfs_passthrough_opens_total)" "passthrough opens with passthrough off"
unmount_pullfs
log "PASS"

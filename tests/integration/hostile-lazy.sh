#!/bin/bash
# Hostile tables of contents, chunks, multipart answers, xattr bombs and
# symlink chains.  Each case gets a clear errno (and an event where the
# errno table names one), never a byte that does not match its digest, within
# bounded memory and time; the daemon keeps serving the good image.
#
#  - chunks whose bytes are not what the (verified) table says: EBADMSG,
#    with chunk digests and without (a file whose chunks have no digest
#    of their own is read only once it hashed to its digest as a whole);
#    the completion of such a layer gives up at its first pass
#    (LazyLayerUnverified) instead of fetching the blob again and again;
#  - a chunk placed past the blob's end: the table is refused
#    (LazyPullFailed) and the layer pulled whole;
#  - a chunk of 128 MiB (128 KB compressed): read without holding it in
#    memory; a chunk that takes 260 MiB of the blob: the table is refused;
#  - answers to several ranges in one request that lie about their
#    boundary, repeat one part 100,000 times or never end: EBADMSG, at
#    once;
#  - more xattr bytes than a layer may hold, in a table and in a tar's
#    PAX headers: refused with the reason; 1,024 xattrs of long names on
#    one file: each readable, their list E2BIG (the kernel's 64 KiB);
#  - 100,000 hardlinks to one file are served, with that link count;
#  - a chain of 39 symlinks resolves, of 41 and a loop give ELOOP.
#
# The figures (VmHWM of the serving process, seconds) go to stderr.
source "$(dirname "$0")/lib.sh"

need_fuse
need_cmd python3 curl
start_registry

# ---- lazy images (mklazy.py: eStargz by hand) ------------------------------
python3 - >"$WORK/spec.json" <<'PY'
import base64, json, os
def rnd(n=65536):
    return base64.b64encode(os.urandom(n)).decode()[:n]
def f(name, **kw):
    return dict({"file": name, "data": rnd(), "chunk": 4096}, **kw)
big_xattrs = {"user.k%02d" % k: "v" * 65536 for k in range(15)}
images = [
    {"ref": "lazy/good:1", "layers": [{"entries": [{"dir": "d/"}, f("d/file")]}]},
    {"ref": "lazy/tampered:1", "layers": [{"entries": [{"dir": "d/"}, f("d/file")], "tamper": "chunks"}]},
    {"ref": "lazy/nodigest:1", "layers": [{"entries": [{"dir": "d/"}, f("d/file", no_chunk_digest=True)],
                                            "tamper": "chunks"}]},
    # entry 1 is d/file, its first chunk placed a terabyte into the blob
    {"ref": "lazy/outside:1", "layers": [{"entries": [{"dir": "d/"}, f("d/file")],
                                           "toc_patch": [[1, "offset", 1 << 40]]}]},
    # 20 files of 15 xattrs of 64 KiB: 19.7 MB in the table alone
    {"ref": "lazy/xattrs:1", "layers": [{"entries": [{"dir": "x/"}] + [
        {"file": "x/f%d" % i, "data": "f%d\n" % i, "xattrs": big_xattrs} for i in range(20)],
        "xattr_pax": False}]},
    # 128 MiB in one chunk, of 128 KB in the blob
    {"ref": "lazy/bigchunk:1", "layers": [{"entries": [{"dir": "z/"},
        {"file": "z/zeros", "repeat": ["\u0000", 128 << 20], "chunk": 128 << 20, "compress": True}]}]},
    # 260 MiB of the blob after j/a's member: its chunk would take them in
    {"ref": "lazy/junk:1", "layers": [{"entries": [{"dir": "j/"}, {"file": "j/a", "data": "a\n"},
        {"junk": 260 << 20}, {"file": "j/b", "data": "b\n"}]}]},
    # one file per multipart answer
    {"ref": "lazy/multipart:1", "layers": [{"entries": [{"dir": "m/"}] + [
        f("m/" + mode) for mode in ("ok", "lying", "repeat", "endless")]}]},
]
print(json.dumps({"images": images}))
PY
python3 "$INTEGRATION_DIR/mklazy.py" "$REGISTRY" "$WORK/spec.json" >/dev/null || fail "pushing the lazy images failed"

# ---- plain layers: the PAX xattr bomb, symlinks ---------------------------
python3 - "$INTEGRATION_DIR" "$WORK" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import mktar as m
w = sys.argv[2]
with open(w + "/xattrs.tar", "wb") as f:
    f.write(m.directory("x/"))
    for i in range(20):
        f.write(m.pax([m.pax_record("SCHILY.xattr.user.k%02d" % k, "v" * 65536) for k in range(15)],
                      name=b"PaxHeaders/f%d" % i))
        f.write(m.member("x/f%d" % i, "f%d\n" % i))
    f.write(m.end())
with open(w + "/xnames.tar", "wb") as f:
    # 1,024 xattrs of 245-byte names: 251 KB of names, over what
    # listxattr(2) may return (64 KiB)
    f.write(m.directory("x/"))
    f.write(m.pax([m.pax_record("SCHILY.xattr.user." + ("%04d" % k) * 60, "v") for k in range(1024)],
                  name=b"PaxHeaders/f"))
    f.write(m.member("x/f", "f\n") + m.end())
with open(w + "/hardlinks.tar", "wb") as f:
    f.write(m.directory("h/") + m.member("h/target", "the one file\n"))
    for i in range(100000):
        f.write(m.hardlink("h/l%06d" % i, "h/target"))
    f.write(m.end())
with open(w + "/links.tar", "wb") as f:
    f.write(m.directory("s/") + m.member("s/end", "the end\n"))
    # s/c0 -> c1 -> ... -> c38 -> end: 39 links to follow; s/d0 .. d40: 41
    for p, n in (("c", 39), ("d", 41)):
        for i in range(n):
            f.write(m.symlink("s/%s%d" % (p, i), "%s%d" % (p, i + 1) if i + 1 < n else "end"))
    f.write(m.symlink("s/loop", "loop2") + m.symlink("s/loop2", "loop"))
    f.write(m.symlink("s/self", "self/x"))
    f.write(m.end())
PY
{
    echo "plain/xattrs:1 $WORK/xattrs.tar"
    echo "plain/links:1 $WORK/links.tar"
    echo "plain/hardlinks:1 $WORK/hardlinks.tar"
    echo "plain/xnames:1 $WORK/xnames.tar"
} | python3 "$INTEGRATION_DIR/rawpush.py" "$REGISTRY" - >/dev/null || fail "pushing the tars failed"

# ---- the multipart image through a registry of our own --------------------
FAKE_DIR=$WORK/fake
mkdir -p "$FAKE_DIR/blobs"
registry_manifest lazy/multipart:1 >"$WORK/multipart.json"
py - "$REGISTRY" "$FAKE_DIR" "$WORK/multipart.json" <<'PY' || fail "cannot copy the multipart image"
import json, os, sys, urllib.request
reg, fake, path = sys.argv[1:]
body = open(path, "rb").read()
m = json.loads(body)
for d in [m["config"]["digest"]] + [l["digest"] for l in m["layers"]]:
    data = urllib.request.urlopen("http://%s/v2/lazy/multipart/blobs/%s" % (reg, d)).read()
    open(os.path.join(fake, "blobs", d.split(":")[1]), "wb").write(data)
open(os.path.join(fake, "manifest"), "wb").write(body)
json.dump({"multipart/1": {"file": "manifest", "type": m["mediaType"]}},
          open(os.path.join(fake, "routes.json"), "w"))
PY
python3 "$INTEGRATION_DIR/fakeregistry.py" --dir "$FAKE_DIR" --port-file "$WORK/fake.port" \
    --log "$WORK/fake.log" 2>>"$WORK/fake.err" &
track_pid $!
wait_for 20 test -s "$WORK/fake.port" || fail "fakeregistry did not start: $(cat "$WORK/fake.err")"
FAKE=127.0.0.1:$(cat "$WORK/fake.port")

mount_pullfs --insecure-registry "$FAKE" --lazy-completion-delay 600
SPID=$(pullfs_serving pid)
hwm() { awk '/^VmHWM/ { print $2 }' "/proc/$SPID/status"; }
log "VmHWM at the start: $(hwm) kB"
lazy=$MNT/images/$REGISTRY/lazy

# read_file PATH [DIRECT_CHUNKS]: "OK <sha256>" or the errno name of a read
# of the whole file, with O_DIRECT (no readahead: each read asks for what
# it names).  DIRECT_CHUNKS: 4 KiB chunks to read first, one by one, so
# that the whole read then asks for several ranges at once; the first
# of them that fails gives its errno.  "chunk K": chunk K alone, "OK
# <sha256 of its bytes>".  Gives up after 60 s (prints TIMEOUT).
read_file() {
    timeout 60 python3 - "$@" <<'PY' || _timed_out $?
import errno, hashlib, mmap, os, sys
path = sys.argv[1]
first = [int(k) for k in sys.argv[2].split(",")] if len(sys.argv) > 2 else []
try:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    size = os.fstat(fd).st_size
    buf = mmap.mmap(-1, 4096)
    for k in first:
        n = os.preadv(fd, [buf], k * 4096)
    if len(sys.argv) > 3:
        print("OK", hashlib.sha256(buf[:n]).hexdigest())
        sys.exit(0)
    buf = mmap.mmap(-1, (size + 4095) // 4096 * 4096)
    n = os.preadv(fd, [buf], 0)
    print("OK", hashlib.sha256(buf[:n]).hexdigest())
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
PY
}
read_chunk() { read_file "$1" "$2" alone; }
# want_of IMAGE PATH: "OK <sha256>" of PATH as the image's table says
want_of() {
    py - "$WORK/spec.json" "$@" <<'PY'
import hashlib, json, sys
spec, ref, path = sys.argv[1:]
for img in json.load(open(spec))["images"]:
    if img["ref"] == ref:
        for e in img["layers"][0]["entries"]:
            if e.get("file") == path:
                print("OK", hashlib.sha256(e["data"].encode()).hexdigest())
PY
}

# ---- chunks that are not what the table says ------------------------------
assert_eq "$(want_of lazy/good:1 d/file)" "$(read_file "$lazy/good:1/d/file")" "a read of the good image"
got=$(read_file "$lazy/tampered:1/d/file")
assert_eq EBADMSG "$got" "a read of chunks that do not match their digests"
got=$(read_chunk "$lazy/nodigest:1/d/file" 2)
assert_eq EBADMSG "$got" "a read of one chunk without a digest"
got=$(read_file "$lazy/nodigest:1/d/file")
assert_eq EBADMSG "$got" "a read of chunks without digests that do not make the file's"
wait_event LazyReadFailed "$REGISTRY/lazy/tampered:1"
assert_eq EBADMSG "$(events field LazyReadFailed "$REGISTRY/lazy/tampered:1" errno)" \
    "errno of the LazyReadFailed event"

# ---- a chunk past the blob's end: the table is refused ---------------------
want=$(want_of lazy/outside:1 d/file)
assert_eq "$want" "$(read_file "$lazy/outside:1/d/file")" "the layer whose table is refused, pulled whole"
wait_event LazyPullFailed "$REGISTRY/lazy/outside:1"
assert_contains "is not before the table" \
    "$(events field LazyPullFailed "$REGISTRY/lazy/outside:1" message)" "LazyPullFailed of lazy/outside:1"

# ---- a chunk that decompresses to 128 MiB ------------------------------------
# is written through a buffer of 1 MiB, not held whole
before=$(hwm)
t0=$(now)
assert_eq 00 "$(head -c 1 "$lazy/bigchunk:1/z/zeros" | od -An -tx1 | tr -d ' ')" "the first byte of the 128 MiB chunk"
after=$(hwm)
log "a read of a chunk of 128 MiB: $(seconds_since "$t0") s, VmHWM $before -> $after kB"
[ $((after - before)) -lt 32768 ] || fail "a read of a chunk of 128 MiB raised VmHWM by $((after - before)) kB"

# ---- a chunk of 2 bytes that takes 260 MiB of the blob ---------------------
before=$(hwm)
assert_eq a "$(cat "$lazy/junk:1/j/a")" "j/a of the layer whose table is refused, pulled whole"
after=$(hwm)
log "a chunk of 260 MiB of the blob: VmHWM $before -> $after kB"
[ $((after - before)) -lt 32768 ] || fail "a read of a chunk of 260 MiB raised VmHWM by $((after - before)) kB"
wait_event LazyPullFailed "$REGISTRY/lazy/junk:1"
assert_contains "bytes of it, more than" "$(events field LazyPullFailed "$REGISTRY/lazy/junk:1" message)" \
    "LazyPullFailed of lazy/junk:1"

# ---- xattr bombs ------------------------------------------------------------
before=$(hwm)
t0=$(now)
assert_errno OK "$lazy/xattrs:1"
log "the table with 19.7 MB of xattrs: $(seconds_since "$t0") s, VmHWM $before -> $(hwm) kB"
wait_event LazyPullFailed "$REGISTRY/lazy/xattrs:1"
assert_contains "bytes of xattrs" "$(events field LazyPullFailed "$REGISTRY/lazy/xattrs:1" message)" \
    "LazyPullFailed of lazy/xattrs:1"
# pulled whole: its tar has no xattrs
assert_eq 0 "$(py -c 'import os, sys; print(len(os.listxattr(sys.argv[1])))' "$lazy/xattrs:1/x/f0")" \
    "xattrs of the layer pulled whole"
t0=$(now)
plain=$MNT/images/$REGISTRY/plain
assert_errno EBADMSG "$plain/xattrs:1"
log "the PAX headers with 19.7 MB of xattrs: $(seconds_since "$t0") s, VmHWM $(hwm) kB"
wait_event Failed "$REGISTRY/plain/xattrs:1"
assert_contains "bytes of xattrs" "$(events field Failed "$REGISTRY/plain/xattrs:1" message)" \
    "Failed of plain/xattrs:1"

# as many xattrs as an entry may have, with long names: each can be read,
# the list of their names is more than the kernel passes on
x=$plain/xnames:1/x/f
assert_eq E2BIG "$(py -c '
import errno, os, sys
try:
    print(len(os.listxattr(sys.argv[1])))
except OSError as e:
    print(errno.errorcode[e.errno])' "$x")" "listxattr of 1,024 long names"
assert_eq v "$(py -c 'import os, sys; print(os.getxattr(sys.argv[1], "user." + "1023" * 60).decode())' "$x")" \
    "the last of 1,024 xattrs"

# ---- multipart answers ---------------------------------------------------------
mp=$MNT/images/$FAKE/multipart:1/m
assert_errno OK "$MNT/images/$FAKE/multipart:1"
for mode in ok lying endless repeat; do
    case $mode in
    repeat) parts=100000 ;;
    *) parts=0 ;;
    esac
    printf '{"mode": "%s", "parts": %d}\n' "$mode" "$parts" >"$FAKE_DIR/multipart.json"
    : >"$FAKE_DIR/multipart.count"
    t0=$(now)
    got=$(read_file "$mp/$mode" 1,3,5)
    log "multipart answer '$mode': $got in $(seconds_since "$t0") s, VmHWM $(hwm) kB"
    [ -s "$FAKE_DIR/multipart.count" ] || fail "the read of $mode made no request for several ranges"
    case $mode in
    ok) assert_eq "$(want_of lazy/multipart:1 "m/$mode")" "$got" "a read through a good multipart answer" ;;
    *) assert_eq EBADMSG "$got" "a read through a multipart answer '$mode'" ;;
    esac
done
rm "$FAKE_DIR/multipart.json"
want=$(want_of lazy/multipart:1 m/endless)
assert_eq "$want" "$(read_file "$mp/endless")" "the same file once the registry answers well"

# ---- symlink chains -----------------------------------------------------------
s=$plain/links:1/s
assert_eq "the end" "$(cat "$s/c0")" "a chain of 39 symlinks"
assert_errno ELOOP "$s/d0"
assert_errno ELOOP "$s/loop"
assert_errno ELOOP "$s/self"
assert_eq loop2 "$(readlink "$s/loop")" "readlink of a loop"

# ---- 100,000 hardlinks to one file ---------------------------------------------
before=$(hwm)
t0=$(now)
assert_eq 100001 "$(stat -c %h "$plain/hardlinks:1/h/target")" "link count of the file with 100,000 hardlinks"
log "100,000 hardlinks: pulled in $(seconds_since "$t0") s, VmHWM $before -> $(hwm) kB"
assert_eq "$(stat -c %i "$plain/hardlinks:1/h/target")" "$(stat -c %i "$plain/hardlinks:1/h/l099999")" \
    "inode of the last hardlink"

# ---- still serving, and nothing left behind ---------------------------------
assert_eq "$(want_of lazy/good:1 d/file)" "$(read_file "$lazy/good:1/d/file")" "the good image at the end"
! _pid_gone "$PULLFS_PID" || fail "pullfs died"
assert_eq 0 "$(pullfs_serving recoveries)" "serving processes that died"
log "VmHWM at the end: $(hwm) kB"
events check >&2 || fail "malformed events in $EVENTS"
unmount_pullfs

# ---- the completion of the tampered layer ----------------------------------------
# Its blob is the digest's, its table the manifest's, its chunks not the
# table's: it can never complete, and is not fetched again and again.
D=$(registry_manifest lazy/tampered:1 | py -c 'import json, sys; print(json.load(sys.stdin)["layers"][0]["digest"])')
layer_events() {
    py - "$EVENTS" "$D" "$1" <<'PY'
import json, sys
path, digest, reason = sys.argv[1:]
print(sum(1 for line in open(path)
          if (lambda e: e.get("reason") == reason and e.get("digest") == digest)(json.loads(line))))
PY
}
_unverified() { [ "$(layer_events LazyLayerUnverified)" -gt 0 ]; }
mount_pullfs --insecure-registry "$FAKE" --lazy-completion-delay 0
mark=$(registry_mark)
# a lookup loads the image and starts its completion; a read now would
# race the stream for the chunk (the stream leaves a chunk a reader is
# fetching to the reader, and a range fetch of it failing then is one
# LazyFetchFailed before the next round gives the layer up)
assert_errno OK "$lazy/tampered:1/d/file"
wait_for 30 _unverified || fail "no LazyLayerUnverified for the tampered layer $D ($(layer_events LazyFetchFailed) LazyFetchFailed)"
assert_eq EBADMSG "$(read_file "$lazy/tampered:1/d/file")" "a read of the tampered layer after a restart, its completion given up"
log "the tampered layer's completion: $(layer_events LazyFetchFailed) LazyFetchFailed, $(registry_count GET "/v2/lazy/tampered/blobs/$D" "$mark") requests for its blob"
assert_eq 0 "$(layer_events LazyFetchFailed)" "LazyFetchFailed events of the tampered layer"
assert_eq 0 "$(layer_events LayerCompleted)" "LayerCompleted events of the tampered layer"
unmount_pullfs
log "PASS"

#!/bin/bash
# A lazily pulled layer's tree is a full pull's once its blob is verified.
# A tree whose entries carry sub-second mtimes (pax headers written by GNU
# tar), owners, modes, a hardlink, a symlink, a fifo, a device and an
# xattr, as a plain gzip image, as eStargz (ctr-remote, whose table of
# contents keeps whole seconds), as stargz's zstd:chunked (ctr-remote) and
# as skopeo's zstd:chunked (whose table keeps nanoseconds):
# - pulled whole (--lazy off), all are the same tree, with nanoseconds;
# - lazily, before completion, every entry is the full pull's but for the
#   mtime, which is a whole second less than one from the full pull's
#   (eStargz's writer rounds to the nearest);
# - completed by `pullfsctl pull` (the blob verified against its digest),
#   the loaded image shows the full pull's mtimes (its tree takes them, the
#   kernel's cached attributes are dropped), and after a remount every
#   entry (stat, link target, xattrs, content) is the full pull's,
#   nanoseconds included;
# - completed after reads took chunks out of the blob's order, the blob
#   kept as it came is verified whole, and the tree is the full pull's too;
# - completed after a read and a restart (nothing kept), it is verified by
#   its table of contents only and keeps the table's mtimes.
# docs/content-store.md, "Files fetched on demand".
. "$(dirname "$0")/lib.sh"
. "$INTEGRATION_DIR/images.sh"
. "$INTEGRATION_DIR/containerd.sh"

need_root
need_fuse
need_cmd umoci skopeo ctr-remote setfattr mknod
start_registry

out=$WORK/layout
st=$WORK/stage
mkdir -p "$st/dir/sub" "$st/data" "$st/etc"
echo exact >"$st/etc/name"
echo hello >"$st/dir/file"
: >"$st/dir/empty"
ln -s file "$st/dir/link"
ln "$st/dir/file" "$st/dir/hard"
mkfifo "$st/dir/fifo"
mknod "$st/dir/null" c 1 3
head -c 300000 /dev/urandom >"$st/data/big"
for i in $(seq 1 40); do head -c $((50 + i * 97)) /dev/urandom >"$st/dir/sub/f$i"; done
chown 1000:1001 "$st/dir/file"
chmod 4755 "$st/data/big"
setfattr -n user.note -v exact "$st/dir/file"
# Every entry a time of its own before 2002 (stage_image keeps those),
# most with nanoseconds, one on the second; children before their
# directories.
py - "$st" <<'PY'
import os, sys
root = sys.argv[1]
paths = []
for d, dirs, files in os.walk(root, topdown=False):
    paths += [os.path.join(d, n) for n in sorted(files + dirs)]
paths.append(root)
for i, p in enumerate(paths):
    ns = 0 if i == 3 else (123456789 + i * 387420489) % 1000000000
    t = (981173106 + i) * 1000000000 + ns
    os.utime(p, ns=(t, t), follow_symlinks=False)
PY
stage_image "$st" "$out" exact
_skopeo copy --dest-tls-verify=false "oci:$out:1" "docker://$REGISTRY/test/exact:1"
start_containerd
ctr_remote images pull --plain-http "$REGISTRY/test/exact:1"
ctr_remote images convert --oci --estargz --estargz-chunk-size 65536 \
    "$REGISTRY/test/exact:1" "$REGISTRY/test/exact-esgz:1"
ctr_remote images push --plain-http "$REGISTRY/test/exact-esgz:1"
ctr_remote images convert --oci --zstdchunked "$REGISTRY/test/exact:1" "$REGISTRY/test/exact-zc:1"
ctr_remote images push --plain-http "$REGISTRY/test/exact-zc:1"
_skopeo copy --dest-decompress "oci:$out:1" "dir:$WORK/plain"
_skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
    "dir:$WORK/plain" "docker://$REGISTRY/test/exact-chunked:1"

# snap ROOT OUT [content]: every entry's type, mode, owners, size, link
# count, mtime in ns, link target, device, xattrs (and, with content,
# the sha256 of each file: reading a lazy file fetches it)
snap() {
    py - "$@" <<'PY'
import hashlib, json, os, stat, sys
root, out = sys.argv[1], sys.argv[2]
content = len(sys.argv) > 3
snap = {}
for d, dirs, files in os.walk(root):
    for n in [None] + files + dirs:
        if n is None and d != root:
            continue
        p = d if n is None else os.path.join(d, n)
        s = os.lstat(p)
        e = {"mode": "%o" % s.st_mode, "uid": s.st_uid, "gid": s.st_gid,
             "mtime_ns": s.st_mtime_ns,
             "xattrs": {x: os.getxattr(p, x, follow_symlinks=False).hex()
                        for x in sorted(os.listxattr(p, follow_symlinks=False))}}
        if not stat.S_ISDIR(s.st_mode):
            e["size"] = s.st_size
            e["nlink"] = s.st_nlink
        if stat.S_ISLNK(s.st_mode):
            e["target"] = os.readlink(p)
        if stat.S_ISCHR(s.st_mode) or stat.S_ISBLK(s.st_mode):
            e["rdev"] = s.st_rdev
        if content and stat.S_ISREG(s.st_mode):
            e["sha256"] = hashlib.sha256(open(p, "rb").read()).hexdigest()
        snap[os.path.relpath(p, root)] = e
json.dump(snap, open(out, "w"), indent=1, sort_keys=True)
PY
}

# same A B [seconds]: A and B hold the same entries alike (with seconds:
# B's mtimes whole seconds less than one from A's, as a table of contents
# gives them; content only where both have it); prints how many mtimes
# had nanoseconds in A
same() {
    py - "$@" <<'PY'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
seconds = len(sys.argv) > 3
bad = []
if sorted(a) != sorted(b):
    bad.append("paths differ: %s" % sorted(set(a) ^ set(b)))
for p in sorted(set(a) & set(b)):
    x, y = dict(a[p]), dict(b[p])
    if seconds and y["mtime_ns"] % 1000000000 == 0 and abs(x["mtime_ns"] - y["mtime_ns"]) < 1000000000:
        x["mtime_ns"] = y["mtime_ns"]
    if "sha256" not in x or "sha256" not in y:
        x.pop("sha256", None)
        y.pop("sha256", None)
    if x != y:
        bad.append("%s: %s != %s" % (p, x, y))
if bad:
    print("\n".join(bad[:20]), file=sys.stderr)
    sys.exit(1)
print(sum(1 for e in a.values() if e["mtime_ns"] % 1000000000))
PY
}

# mtimes_of ROOT SNAP: every path of SNAP has its mtime under ROOT, asked
# by lstat alone (no listing)
mtimes_of() {
    py - "$1" "$2" <<'PY'
import json, os, sys
root, want = sys.argv[1], json.load(open(sys.argv[2]))
bad = ["%s: %d != %d" % (p, os.lstat(os.path.join(root, p)).st_mtime_ns, e["mtime_ns"])
       for p, e in sorted(want.items())
       if os.lstat(os.path.join(root, p)).st_mtime_ns != e["mtime_ns"]]
if bad:
    print("\n".join(bad[:10]), file=sys.stderr)
    sys.exit(1)
PY
}

# complete REF VERIFIED: pullfsctl pull completes REF, verified as said
complete() {
    timeout 120 "$PULLFSCTL" -m "$MNT" pull --plain "$1" >"$WORK/pull.out" 2>&1 ||
        fail "pullfsctl pull: $(cat "$WORK/pull.out")"
    assert_eq true "$(pullfs_image_field "$1" complete)" "$1 complete after pullfsctl pull"
    assert_eq "$2" "$(pullfs_image_field "$1" verified)" "how $1 was verified"
}

# remounted REF OUT: a new mount's snapshot of REF (content too) in OUT
remounted() {
    unmount_pullfs
    mount_pullfs --lazy-completion-delay 3600
    snap "$MNT/images/$1" "$2" content
    unmount_pullfs
}

ref_gz=$REGISTRY/test/exact:1
ref_esgz=$REGISTRY/test/exact-esgz:1
layer_hex=$(registry_manifest "test/exact-esgz:1" |
    py -c 'import json,sys; print(json.load(sys.stdin)["layers"][-1]["digest"].split(":")[1])')

# The reference: every image pulled whole.
CACHE=$WORK/cache-full
mount_pullfs --lazy off
snap "$MNT/images/$ref_gz" "$WORK/full.json" content
for v in esgz zc chunked; do
    snap "$MNT/images/$REGISTRY/test/exact-$v:1" "$WORK/full-$v.json" content
done
unmount_pullfs
for v in esgz zc chunked; do
    n=$(same "$WORK/full.json" "$WORK/full-$v.json") ||
        fail "the $v image pulled whole is not the gzip image"
done
log "full pull: $(py -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$WORK/full.json") entries, $n with sub-second mtimes"
[ "$n" -gt 40 ] || fail "only $n entries of the full pull have sub-second mtimes"

# Lazily, completed in one stream of the blob: verified by its digest.
for v in esgz zc chunked; do
    CACHE=$WORK/cache-lazy-$v
    ref=$REGISTRY/test/exact-$v:1
    mount_pullfs --lazy-completion-delay 3600
    snap "$MNT/images/$ref" "$WORK/before-$v.json"
    n=$(same "$WORK/full.json" "$WORK/before-$v.json" seconds) ||
        fail "$v: before completion, the tree differs from the full pull in more than mtimes' nanoseconds"
    if same "$WORK/full.json" "$WORK/before-$v.json" >/dev/null 2>&1; then
        log "$v: before completion, the table's mtimes have the full pull's nanoseconds"
    else
        log "$v: before completion, the table's mtimes are whole seconds"
        [ "$v" != chunked ] || fail "skopeo's zstd:chunked table lost nanoseconds"
    fi
    [ "$v" != esgz ] || ! same "$WORK/full.json" "$WORK/before-$v.json" >/dev/null 2>&1 ||
        fail "before completion, the eStargz tree already has the full pull's nanoseconds"
    complete "$ref" digest
    # hashed as it came: no more of the blob kept than the table (read at
    # the lookup), a small share of what the completion fetched
    kept=$(metric pullfs_lazy_kept_bytes_total)
    bg=$(metric pullfs_lazy_background_bytes_total)
    [ "$((kept * 4))" -lt "$bg" ] ||
        fail "$v: the completion kept $kept bytes of the blob on disk for its digest ($bg fetched)"
    # the loaded image takes the exact mtimes, and the kernel forgets the
    # attributes it cached (the notifier does it after the completion)
    # (each path by lstat alone: a listing would bring fresh attributes
    # along and hide what the kernel kept)
    live_exact() { mtimes_of "$MNT/images/$ref" "$WORK/full.json" 2>/dev/null; }
    wait_for 60 live_exact || {
        mtimes_of "$MNT/images/$ref" "$WORK/full.json" || true
        fail "$v: the loaded image did not take the full pull's mtimes"
    }
    snap "$MNT/images/$ref" "$WORK/loaded-$v.json"
    same "$WORK/full.json" "$WORK/loaded-$v.json" >/dev/null ||
        fail "$v: after completion, the loaded image is not the full pull's"
    remounted "$ref" "$WORK/after-$v.json"
    same "$WORK/full.json" "$WORK/after-$v.json" >/dev/null ||
        fail "$v: after completion and a remount, the tree is not the full pull's"
    log "$v: completed and remounted: every entry is the full pull's, nanoseconds included"
done
root=$MNT/images/$ref_esgz
cp "$WORK/before-esgz.json" "$WORK/before.json"

# A read first: the completion's requests skip what the read brought, and
# the blob's hash takes those bytes from where the read kept them; only
# they are kept (with the table), and the blob is verified by its digest.
CACHE=$WORK/cache-read
mount_pullfs --lazy-completion-delay 3600
cmp "$st/data/big" "$root/data/big" || fail "data/big read lazily"
cmp "$st/dir/sub/f7" "$root/dir/sub/f7" || fail "dir/sub/f7 read lazily"
snap "$root" "$WORK/read-before.json"
complete "$ref_esgz" digest
[ ! -e "$CACHE/layers/$layer_hex/blob.part" ] || fail "the kept blob outlived the completion"
kept=$(metric pullfs_lazy_kept_bytes_total)
fetched=$(metric pullfs_lazy_fetched_bytes_total)
[ "$kept" -lt "$fetched" ] || fail "completed after a read, $kept bytes kept of $fetched fetched"
live_read() { mtimes_of "$root" "$WORK/full.json" 2>/dev/null; }
wait_for 60 live_read || fail "completed after a read, the loaded image did not take the full pull's mtimes"
remounted "$ref_esgz" "$WORK/read.json"
same "$WORK/full.json" "$WORK/read.json" >/dev/null ||
    fail "completed after a read, the tree is not the full pull's"
log "completed after a read: every entry is the full pull's"

# A read, then a restart (what was kept is gone with the process that
# kept it): verified by the table of contents, whose mtimes stay.
CACHE=$WORK/cache-toc
mount_pullfs --lazy-completion-delay 3600
cmp "$st/data/big" "$root/data/big" || fail "data/big read lazily"
unmount_pullfs
mount_pullfs --lazy-completion-delay 3600
ls "$root" >/dev/null || fail "lookup after the restart"
complete "$ref_esgz" toc
remounted "$ref_esgz" "$WORK/toc.json"
same "$WORK/full.json" "$WORK/toc.json" seconds >/dev/null ||
    fail "verified by its table, the tree differs from the full pull in more than mtimes' nanoseconds"
same "$WORK/before.json" "$WORK/toc.json" >/dev/null ||
    fail "verified by its table, the tree is not the table's"
# A blob whose headers disagree with its table in a name and a type
# (mklazy.py, by hand; the unit test has sizes too): the table's names
# and types stay; only an entry whose header agrees in path, type and size
# takes the header's mtime (mktar's 1262340000; the table gives none, so
# 0).
cat >"$WORK/hostile.json" <<'JSON'
{"images": [{"ref": "test/exact-hostile:1", "layers": [{
  "entries": [{"dir": "d/"}, {"file": "d/f", "data": "hello"},
              {"symlink": "d/l", "target": "f"}, {"file": "d/g", "data": "x"},
              {"symlink": "d/s", "target": "g"}],
  "toc_patch": [[3, "name", "d/h"], [4, "type", "dir"]]}]}]}
JSON
python3 "$INTEGRATION_DIR/mklazy.py" "$REGISTRY" "$WORK/hostile.json" >/dev/null ||
    fail "pushing the hostile image failed"
CACHE=$WORK/cache-hostile
ref=$REGISTRY/test/exact-hostile:1
mount_pullfs --lazy-completion-delay 3600
ls "$MNT/images/$ref/d" >/dev/null || fail "lookup of the hostile image"
complete "$ref" digest
remounted "$ref" "$WORK/hostile-after.json"
py - "$WORK/hostile-after.json" <<'PY' || fail "the hostile blob's headers changed more than agreeing mtimes"
import json, stat, sys
t = json.load(open(sys.argv[1]))
want = {  # path: (type, size, mtime in seconds)
    "d": (stat.S_IFDIR, None, 1262340000), "d/f": (stat.S_IFREG, 5, 1262340000),
    "d/l": (stat.S_IFLNK, 1, 1262340000), "d/h": (stat.S_IFREG, 1, 0),
    "d/s": (stat.S_IFDIR, None, 0)}
bad = []
for p, (kind, size, mtime) in want.items():
    e = t.get(p)
    if (not e or stat.S_IFMT(int(e["mode"], 8)) != kind or e.get("size") != size
            or e["mtime_ns"] != mtime * 10**9):
        bad.append("%s: %s" % (p, e))
if "d/g" in t:
    bad.append("d/g is there: %s" % t["d/g"])
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
PY
log "a blob whose headers disagree with its table: only agreeing entries took the headers' mtimes"
log "PASS"

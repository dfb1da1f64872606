#!/bin/bash
# A serving process killed in the middle of a collection (docs/cache.md, "Garbage
# collection"): `pullfsctl gc` and `pullfsctl rm` of many images, killed
# right after the first layer was moved away (PULLFS_FAULT=gc-layer) or the
# first blob deleted (gc-blob).  After the restart every image still named
# reads whole and right, an image whose name went is pulled again (never
# served half-deleted), and the next collection removes what the killed one
# left: nothing stays in the cache that no name needs.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/restartlib.sh"

need_fuse
start_registry
N=12
# one base layer all share, one layer of its own each (a 128 KiB file, an
# object of the content store, and its id)
py - "$WORK" "$N" <<'PY' || fail "cannot make the layers"
import io, os, random, sys, tarfile
work, n = sys.argv[1], int(sys.argv[2])
def tar(path, files):
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
        for name, data in files:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
            t.addfile(ti, io.BytesIO(data))
tar(os.path.join(work, "base.tar"), [("etc/base", random.Random(0).randbytes(65536))])
with open(os.path.join(work, "push"), "w") as p:
    for i in range(n):
        r = random.Random(i + 1)
        tar(os.path.join(work, "own%d.tar" % i),
            [("data/big", r.randbytes(131072)), ("data/id", b"%d\n" % i)])
        print("test/img%d:1 %s %s" % (i, os.path.join(work, "base.tar"),
                                      os.path.join(work, "own%d.tar" % i)), file=p)
PY
python3 "$INTEGRATION_DIR/rawpush.py" "$REGISTRY" - <"$WORK/push" >/dev/null || fail "rawpush"
ctl() { "$PULLFSCTL" -m "$MNT" "$@"; }
dir=$MNT/images/$REGISTRY/test
base_sum=$(py -c 'import random, hashlib; print(hashlib.sha256(random.Random(0).randbytes(65536)).hexdigest())')
big_sum() { py -c 'import random, hashlib, sys; print(hashlib.sha256(random.Random(int(sys.argv[1]) + 1).randbytes(131072)).hexdigest())' "$1"; }

# check_image I: image I reads whole and right.
check_image() {
    local d=$dir/img$1:1
    assert_eq "$1" "$(cat "$d/data/id")" "id of img$1"
    assert_eq "$(big_sum "$1")" "$(sha256sum <"$d/data/big" | cut -d' ' -f1)" "data/big of img$1"
    assert_eq "$base_sum" "$(sha256sum <"$d/etc/base" | cut -d' ' -f1)" "etc/base of img$1"
}

# named: the references the cache holds, one a line.
named() { py -c 'import json, sys; print("\n".join(sorted(i["reference"] for i in json.load(open(sys.argv[1]))["images"])))' "$MNT/.pullfs/status"; }

# cache_entries: "layers blobs objects tmp" entries in the cache.
cache_entries() {
    echo "$(ls "$CACHE/layers" | wc -l) $(ls "$CACHE/blobs/sha256" | wc -l) $(ls "$CACHE/objects" | wc -l) $(ls "$CACHE/tmp" | wc -l)"
}

# killed_during POINT COMMAND...: with PULLFS_FAULT=POINT, pull every
# image, run the collection COMMAND (its serving process dies in it), and
# check the cache the next process serves.
killed_during() {
    local point=$1 i pid pulls n_named
    shift
    rm -rf "$CACHE"
    : >"$EVENTS"
    PULLFS_ENV=(PULLFS_FAULT=$point)
    mount_pullfs --supervise --gc-min-age 0
    for ((i = 0; i < N; i++)); do
        check_image "$i"
    done
    log "$point: $N images pulled; cache entries (layers blobs objects tmp): $(cache_entries)"
    pid=$(serving pid)
    rc=0
    "$@" >"$WORK/gc.out" 2>&1 || rc=$?
    ((rc != 0)) || fail "$point: $* succeeded: the fault point was not reached ($(cat "$WORK/gc.out"))"
    wait_for 30 _replaced "$pid" || fail "$point: serving process $pid not replaced"
    grep -q "serving process $pid was killed by signal 9" "$PULLFS_LOG" || fail "$point: serving process $pid was not killed at the fault point"
    n_named=$(named | grep -c . || true)
    log "$point: killed in '$1 $2 ...'; $n_named of $N images still named; cache entries: $(cache_entries)"
    ((n_named < N)) || fail "$point: no name was removed before the kill"
    # what is still named reads whole and right, from the cache
    pulls=$(grep -c '"reason":"Pulling"' "$EVENTS")
    for i in $(named | sed -n 's|.*/test/img\([0-9]*\):1$|\1|p'); do
        check_image "$i"
    done
    assert_eq "$pulls" "$(grep -c '"reason":"Pulling"' "$EVENTS")" "$point: pulls while reading the images still named"
    # the next collection finishes what the killed one began
    out=$(ctl gc --to 0 2>&1) || fail "$point: the next gc failed: $out"
    assert_eq "" "$(named)" "$point: images named after gc --to 0"
    read -r layers blobs objects tmp <<<"$(cache_entries)"
    log "$point: after the next gc: $layers layers, $blobs blobs, $objects objects, $tmp in tmp/ (images the process before had handed out, still loaded here)"
    assert_eq "0 0" "$layers $blobs" "$point: layers and blobs after the next gc"
    # what restored images held goes at the next start
    unmount_pullfs
    PULLFS_ENV=()
    mount_pullfs --supervise --gc-min-age 0
    out=$(ctl gc --to 0 2>&1) || fail "$point: gc after a restart failed: $out"
    assert_eq "0 0 0 0" "$(cache_entries)" "$point: cache entries (layers blobs objects tmp) after a restart and gc"
    # and every image comes back whole, pulled again
    for ((i = 0; i < N; i++)); do
        check_image "$i"
    done
    assert_eq $((pulls + N)) "$(grep -c '"reason":"Pulling"' "$EVENTS")" "$point: pulls after the next gc"
    unmount_pullfs
}

refs=()
for ((i = 0; i < N; i++)); do
    refs+=("$REGISTRY/test/img$i:1")
done
killed_during gc-layer ctl gc --to 0
killed_during gc-blob ctl gc --to 0
killed_during gc-layer ctl rm "${refs[@]}"
killed_during gc-blob ctl rm "${refs[@]}"

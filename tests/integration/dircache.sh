#!/bin/bash
# The kernel keeps directory listings: no OPENDIR, RELEASEDIR or READDIR
# for a listing it has already read, and no LOOKUP for a name it knows to
# be missing in an image.  Namespace listings it keeps are invalidated as
# soon as a name comes (a pull, a lookup) or goes (rm, GC).
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/ctl.sh"

need_pullfsctl
need_fuse
start_registry
push_busybox test/busybox:1
push_edge test/edge:1
push_edge test/edge:2
mount_pullfs --gc-min-age 0

bb=$REGISTRY/test/busybox:1
edge=$REGISTRY/test/edge:1
test_dir=$MNT/images/$REGISTRY/test

# ops: the request counters, "op count" a line.
ops() {
    sed -n 's/^pullfs_fuse_operations_total{op="\(.*\)"} \([0-9]*\)$/\1 \2/p' "$MNT/.pullfs/metrics"
}
# list_small DIR: names in DIR, sorted, read with getdents64 into a buffer
# of 1 KiB, so that the kernel asks for the listing in page-sized parts.
list_small() {
    py - "$1" <<'PY' || fail "cannot list $1"
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
buf = ctypes.create_string_buffer(1024)
names = []
while True:
    n = libc.syscall(217, fd, buf, len(buf))  # getdents64
    if n < 0:
        raise OSError(ctypes.get_errno(), "getdents64")
    if n == 0:
        break
    pos = 0
    while pos < n:
        reclen = struct.unpack_from("H", buf.raw, pos + 16)[0]
        name = buf.raw[pos + 19:pos + reclen].split(b"\0", 1)[0].decode()
        if name not in (".", ".."):
            names.append(name)
        pos += reclen
for name in sorted(names):
    print(name)
PY
}
# ops_between BEFORE AFTER: the operations counted in between, "op n" a line
# (reading the metrics between the two snapshots costs an open, reads and
# a release).
ops_between() {
    join "$1" "$2" | awk '$1 != "open" && $1 != "read" && $1 != "release" && $3 != $2 { print $1, $3 - $2 }'
}

# ---- namespace listings follow the names
assert_eq "" "$(list_dir "$test_dir")" "listing of an empty repository directory"
assert_eq "" "$(list_dir "$MNT/images")" "listing of images/ with an empty cache"
ctl_ok pull "$bb"
assert_eq "busybox:1" "$(list_dir "$test_dir")" "listing right after pullfsctl pull"
assert_eq "$REGISTRY" "$(list_dir "$MNT/images")" "images/ right after the first pull"
stat "$MNT/images/$edge" >/dev/null
assert_eq "busybox:1 edge:1" "$(list_dir "$test_dir" | xargs)" "listing right after a lookup pulled an image"
ctl_ok rm "$bb"
assert_eq "edge:1" "$(list_dir "$test_dir")" "listing right after pullfsctl rm"
stat "$MNT/images/$REGISTRY/test/edge:2" >/dev/null
assert_eq "edge:1 edge:2" "$(list_dir "$test_dir" | xargs)" "listing after a second lookup"
ctl_ok gc --to 1
assert_eq "" "$(list_dir "$test_dir")" "listing right after GC"
assert_eq "" "$(list_dir "$MNT/images")" "images/ right after GC"

# A listing longer than one READDIR reply, while names come: every name
# once, and then all of them.
registry_manifest test/edge:1 >"$WORK/edge.manifest"
ctype=$(py -c 'import json, sys; print(json.load(open(sys.argv[1])).get("mediaType", "application/vnd.oci.image.manifest.v1+json"))' "$WORK/edge.manifest")
refs=()
for i in $(seq -w 1 60); do
    refs+=("$REGISTRY/test/edge:a-rather-long-tag-name-$i")
done
for r in "${refs[@]}"; do
    echo "http://$REGISTRY/v2/test/edge/manifests/${r##*:}"
done | xargs -P 8 -n 10 curl -sf -X PUT -H "Content-Type: $ctype" --data-binary @"$WORK/edge.manifest" \
        >/dev/null || fail "cannot tag test/edge:1 with 60 more tags"
ctl_ok pull "${refs[@]:0:45}"
ops >"$WORK/ops1"
assert_eq 45 "$(list_small "$test_dir" | wc -l)" "names in a long listing"
ops >"$WORK/ops2"
n=$(ops_between "$WORK/ops1" "$WORK/ops2" | awk '$1 ~ /^readdir/ { n += $2 } END { print n + 0 }')
[ "$n" -ge 3 ] || fail "a listing of 45 names took $n READDIR requests, expected parts"
ctl_ok pull "${refs[@]:45}" &
pull_pid=$!
while kill -0 "$pull_pid" 2>/dev/null; do
    list_small "$test_dir" >"$WORK/listing"
    assert_eq "" "$(uniq -d "$WORK/listing")" "names listed twice while names come"
done
wait "$pull_pid" || fail "pullfsctl pull of 15 more tags"
assert_eq 60 "$(list_small "$test_dir" | wc -l)" "names in a long listing after more came"
ctl_ok rm "${refs[@]}"
assert_eq "" "$(list_dir "$test_dir")" "listing after removing the long one"
ctl_ok pull "$bb"

# ---- image listings: kept by the kernel, with no request at all
# Walks start inside the image, so that no namespace entry (short
# timeouts) is looked at; a reading of the metrics more than a second
# after the last one revalidates the control view (LOOKUP, GETATTR), so
# a measurement is taken again when it may have been disturbed so.
img=$MNT/images/$bb
cd "$img"
find . -ls >"$WORK/find1"
[ "$(wc -l <"$WORK/find1")" -gt 10 ] || fail "find -ls of $img found too little"
# quiet_between COMMAND...: the requests COMMAND makes, "op n" a line,
# the least of three tries.
quiet_between() {
    local try
    for try in 1 2 3; do
        ops >/dev/null
        ops >"$WORK/ops1"
        "$@" >/dev/null
        ops >"$WORK/ops2"
        ops_between "$WORK/ops1" "$WORK/ops2" >"$WORK/between"
        [ -s "$WORK/between" ] || break
    done
    cat "$WORK/between"
}
assert_eq "" "$(quiet_between find . -ls | xargs)" "requests of a second find -ls of an image"
assert_eq "" "$(quiet_between ls -R . | xargs)" "requests of ls -R after find -ls"
cd /
# One OPENDIR for the whole connection: the one answered ENOSYS.
assert_eq "opendir 1" "$(ops | grep '^opendir ')" "OPENDIR requests of the connection"
assert_eq "releasedir 0" "$(ops | grep '^releasedir ')" "RELEASEDIR requests of the connection"

# ---- negative lookups inside an image are kept too
assert_errno ENOENT "$img/bin/no-such-file"
assert_eq "" "$(quiet_between stat "$img/bin/no-such-file" | grep '^lookup ')" \
    "LOOKUP requests of a second stat of a missing name"
unmount_pullfs
log "PASS"

#!/bin/bash
# Node ids are a function of what they name: the same paths in the same
# images have the same inode numbers after the daemon restarts on the same
# cache, the reference files keep the key that makes them, and a reference
# file without one (an older cache) gets the same numbers again.  Two names
# of one digest differ in every node id.  The namespace directories above
# the images keep theirs too (a hash of the path).
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
start_registry
push_busybox test/busybox:1
push_edge test/edge:1
push_edge test/edge:2

names=(test/busybox:1 test/edge:1 test/edge:2)

# inodes FILE: "ino path" of the namespace directories above the images
# and of every node of the images, by stat and by the directory listings
# (d_ino).
inodes() {
    local n
    {
        stat -c '%i %n' "$MNT/images" "$MNT/images/$REGISTRY" "$MNT/images/$REGISTRY/test"
        for n in "${names[@]}"; do
            (cd "$MNT/images/$REGISTRY/$n" && find . -printf '%i %p\n' | sort -k2)
            (cd "$MNT/images/$REGISTRY/$n" && ls -iaR . | awk 'NF == 2 { print $1, $2 }' | sort -k2)
        done
    } >"$1"
    [ "$(wc -l <"$1")" -gt 30 ] || fail "too few nodes in $1"
}

mount_pullfs
inodes "$WORK/first"
# edge:1 and edge:2 are one digest: one tree, two sets of node ids.
e1=$(stat -c %i "$MNT/images/$REGISTRY/test/edge:1/opq")
e2=$(stat -c %i "$MNT/images/$REGISTRY/test/edge:2/opq")
[ "$e1" != "$e2" ] || fail "two names of one digest share node id $e1"
unmount_pullfs

grep -q '"image_key":[1-9]' "$CACHE"/refs/* || fail "no image_key in the reference files"
stop_registry
mount_pullfs
inodes "$WORK/second"
cmp -s "$WORK/first" "$WORK/second" || {
    diff "$WORK/first" "$WORK/second" | head -n 10 >&2
    fail "node ids changed across a restart"
}
unmount_pullfs

# A cache written before keys were stored: derived again, the same.
for f in "$CACHE"/refs/*; do
    py - "$f" <<'PY'
import json, sys
p = sys.argv[1]
j = json.load(open(p))
del j["image_key"]
open(p, "w").write(json.dumps(j))
PY
done
mount_pullfs
inodes "$WORK/third"
cmp -s "$WORK/first" "$WORK/third" || fail "node ids changed with reference files without keys"
unmount_pullfs
log "PASS"

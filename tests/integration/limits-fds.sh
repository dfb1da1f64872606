#!/bin/bash
# Descriptors do not grow with what is cached.  Under `ulimit -n 256`
# (soft and hard), 300 images with a layer each of their own are pulled
# and a file of each is read, then 2,000 more references (names of those
# digests) are looked up and read: every pull and read succeeds, and the
# daemon never holds more than its limit allows (packs are opened on
# demand and idle ones closed).  An image listing one layer 2,000 times
# costs one descriptor, not 2,000.
source "$(dirname "$0")/lib.sh"

need_fuse
start_registry

python3 - "$INTEGRATION_DIR" "$WORK" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import mktar as m
work = sys.argv[2]
for i in range(300):
    with open(f"{work}/l{i}.tar", "wb") as f:
        f.write(m.directory("etc/") + m.member("etc/id", f"image {i}\n") + m.end())
PY
{
    for i in $(seq 0 299); do echo "fd/i$i:1 $WORK/l$i.tar"; done
    # One layer, listed 2,000 times.
    printf 'fd/many:1'
    for i in $(seq 1 2000); do printf ' %s' "$WORK/l0.tar"; done
    echo
} | python3 "$INTEGRATION_DIR/rawpush.py" "$REGISTRY" - >"$WORK/digests" || fail "pushing 301 images"

# The daemon inherits 256 as soft and hard limit.
PULLFS_ENV=()
ulimit -n 256
mount_pullfs --registry-qps 0
base=$MNT/images/$REGISTRY/fd
serving=$(pullfs_serving_pid)
fds() { ls /proc/"$serving"/fd | wc -l; }
limit=$(awk '/^Max open files/ { print $4 }' /proc/"$serving"/limits)
assert_eq 256 "$limit" "the daemon's descriptor limit"

max=0
for i in $(seq 0 299); do
    got=$(cat "$base/i$i:1/etc/id") || fail "reading image $i"
    assert_eq "image $i" "$got" "content of image $i"
    n=$(fds)
    [ "$n" -le "$max" ] || max=$n
done
log "300 images read: at most $max descriptors open"
[ "$max" -lt 200 ] || fail "$max descriptors open after 300 images (limit 256)"

# 2,000 references more: names of the pulled digests, read once each.
awk 'NR <= 300 { sub(/:[^:]*$/, "", $1); print $1, $2 }' "$WORK/digests" >"$WORK/pairs"
python3 - "$MNT/images/$REGISTRY" "$WORK/pairs" <<'PY' || fail "reading 2,000 references"
import sys
root, pairs = sys.argv[1], [l.split() for l in open(sys.argv[2])]
for k in range(2000):
    repo, digest = pairs[k % len(pairs)]
    i = int(repo.split("/i")[1])
    with open(f"{root}/{repo}:n{k}@{digest}/etc/id") as f:
        got = f.read()
    if got != f"image {i}\n":
        sys.exit(f"{repo}:n{k}: read {got!r}")
PY
n=$(fds)
log "2,300 references read: $n descriptors open"
[ "$n" -lt 200 ] || fail "$n descriptors open after 2,300 references (limit 256)"

# A pull after all that still works (it needs descriptors of its own).
assert_eq "image 0" "$(cat "$base/many:1/etc/id")" "content of the image with one layer 2,000 times"
n=$(fds)
[ "$n" -lt 200 ] || fail "$n descriptors open with an image of 2,000 layers"
unmount_pullfs
log "PASS"

#!/bin/bash
# Cache bytes per user.  With pulls allowed for everybody and a budget of
# 40 MiB (a user's quota: a quarter, 10 MiB), uid 65534 pulls one 4 MiB
# image after another from a registry of its own: its pulls make room
# among its own images, root's image and a private image stay, usage
# stays within the budget.  With two of its images held open, a further
# pull fails with EDQUOT and a Warning event.  The charge survives a kill
# -9 of the serving process: the user's next pull after it still makes
# room among the images it pulled before.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/regservers.sh"
source "$INTEGRATION_DIR/restartlib.sh"

need_fuse
need_cmd setpriv htpasswd
start_registry

# random_tar FILE MIB: a layer of one file of MIB MiB of random bytes
random_tar() {
    python3 - "$1" "$2" <<'PY'
import io, os, sys, tarfile
with tarfile.open(sys.argv[1], "w", format=tarfile.USTAR_FORMAT) as t:
    data = os.urandom(int(sys.argv[2]) << 20)
    i = tarfile.TarInfo("data")
    i.size = len(data)
    i.mode = 0o644
    t.addfile(i, io.BytesIO(data))
    i = tarfile.TarInfo("name")
    name = os.path.basename(sys.argv[1]).encode()
    i.size = len(name)
    i.mode = 0o644
    t.addfile(i, io.BytesIO(name))
PY
}
export RAWPUSH_GZIP_LEVEL=1
random_tar "$WORK/root.tar" 8
random_tar "$WORK/private.tar" 8
python3 "$INTEGRATION_DIR/rawpush.py" "$REGISTRY" test/root:1 "$WORK/root.tar" >/dev/null || fail "pushing root's image"
python3 "$INTEGRATION_DIR/rawpush.py" "$REGISTRY" test/private:1 "$WORK/private.tar" >/dev/null || fail "pushing the private image"
# the user's own registry, with images of 4 MiB
start_registry_as OWN "$WORK/own-storage"
own=127.0.0.1:$OWN_PORT
for i in 1 2 3 4 5 6 7 8; do
    random_tar "$WORK/u$i.tar" 4
    echo "u/img$i:1 $WORK/u$i.tar"
done | python3 "$INTEGRATION_DIR/rawpush.py" "$own" - >/dev/null || fail "pushing the user's images"

start_private_registry alice 'Qu0ta-Pa55'
chmod 0755 "$WORK"
priv=$PRIVATE_HOST/test/private:1
mount_pullfs -o allow_other --insecure-registry "$PRIVATE_HOST" --insecure-registry "$own" \
    --auth-file "$WORK/auth.json" --cache-max-bytes 40M --gc-min-age 0

budget=$((40 << 20))
quota=$((budget / 4))
as_user() { setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; }
# errno_as PATH: what uid 65534 gets reading PATH
errno_as() {
    as_user timeout -k 5 120 /usr/bin/python3 - "$1" <<'PY'
import errno, sys
try:
    open(sys.argv[1], "rb").read(1)
    print("OK")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
PY
}
status() { py - "$MNT/.pullfs/status" "$@" <<'PY'
import json, sys
st = json.load(open(sys.argv[1]))
what = sys.argv[2]
if what == "cache":
    print(st["cache"]["bytes"])
elif what == "user":
    print(next((u["bytes"] for u in st.get("users", []) if u["uid"] == 65534), 0))
elif what == "images":
    print(" ".join(sorted(i["reference"] for i in st["images"])))
elif what == "disk":
    # what the images of a registry take on disk
    print(sum(i["size"] for i in st["images"] if i["reference"].startswith(sys.argv[3] + "/")))
PY
}
# check_budget WHEN: usage within the budget, and the user's images (of
# random bytes: as large on disk as compressed) within its quota
check_budget() {
    local used mine
    used=$(status cache)
    mine=$(status disk "$own")
    log "$1: cache $used bytes of $budget, uid 65534's images $mine on disk, charged $(status user) of $quota"
    [ "$used" -le "$budget" ] || fail "$1: cache usage $used over the budget $budget"
    [ "$mine" -le "$quota" ] || fail "$1: uid 65534's images take $mine bytes, over its quota of $quota"
}

assert_eq OK "$(cat "$MNT/images/$REGISTRY/test/root:1/name" >/dev/null && echo OK)" "root's image"
assert_eq OK "$(cat "$MNT/images/$priv/name" >/dev/null && echo OK)" "the private image"
check_budget "root's and the private image"

# ---- the user pulls seven images, one after the other
for i in 1 2 3 4 5 6 7; do
    assert_eq OK "$(errno_as "$MNT/images/$own/u/img$i:1/name")" "uid 65534 reads its image $i"
    check_budget "after the user's image $i"
done
images=$(status images)
log "cached: $images"
[[ " $images " == *" $REGISTRY/test/root:1 "* ]] || fail "root's image was collected: $images"
[[ " $images " == *" $priv "* ]] || fail "the private image was collected: $images"
assert_eq 0 "$(event_count ImageGC "$REGISTRY/test/root:1")" "ImageGC events of root's image"
assert_eq 0 "$(event_count ImageGC "$priv")" "ImageGC events of the private image"
# its own oldest images made room for its newer ones
[ "$(event_count ImageGC "$own/u/img1:1")" -ge 1 ] || fail "the user's oldest image was not removed to make room"
charged=$(status user)
[ "$charged" -le "$quota" ] || fail "uid 65534 charged $charged bytes, over its quota of $quota"
[ "$charged" -gt $((4 << 20)) ] || fail "uid 65534 charged only $charged bytes with two images cached"

# ---- two images held open: a further pull has no room
mkdir -m 1777 "$WORK/hold"
as_user /usr/bin/python3 -c '
import os, sys, time
fs = [open(p, "rb") for p in sys.argv[2:]]
open(sys.argv[1], "w").close()
while os.path.exists(sys.argv[1]):
    time.sleep(0.1)
' "$WORK/hold/holding" "$MNT/images/$own/u/img6:1/data" "$MNT/images/$own/u/img7:1/data" &
holder=$!
track_pid "$holder"
wait_for 30 test -e "$WORK/hold/holding" || fail "the holder did not open its files"
assert_eq EDQUOT "$(errno_as "$MNT/images/$own/u/img8:1/name")" "uid 65534 pulls beyond its quota with its images held open"
wait_event Failed "$own/u/img8:1"
assert_eq EDQUOT "$(events field Failed "$own/u/img8:1" errno)" "errno of the Failed event"
assert_eq Warning "$(events field Failed "$own/u/img8:1" type)" "type of the Failed event"
assert_eq 65534 "$(events field Failed "$own/u/img8:1" uid)" "uid of the Failed event"
log "EDQUOT: $(events field Failed "$own/u/img8:1" message)"
check_budget "after the refused pull"

# ---- the charge survives a kill -9 of the serving process
before=$(status user)
pid=$(serving pid)
kill -KILL "$pid"
wait_for 30 _replaced "$pid" || fail "serving process $pid not replaced"
after=$(status user)
log "charge of uid 65534: $before bytes before the kill -9, $after after"
[ "$after" -gt $((4 << 20)) ] || fail "uid 65534 charged $after bytes after the kill -9, its two images held open"
assert_eq "$before" "$after" "charge of uid 65534 across the kill -9"
# still held: a pull is still refused (img8 is in back-off now)
assert_eq EDQUOT "$(errno_as "$MNT/images/$own/u/img2:1/name")" "uid 65534 pulls beyond its quota after the restart"
# let go: the next pull makes room among the images pulled before the kill
rm -f "$WORK/hold/holding"
wait "$holder" || true
# Images the new process restored count as in use until the kernel lets
# go of them: the collector asked it to after the refused pull, and the
# kernel's FORGET at the holder's last close comes while the next lookup
# may already be served; a run on demand settles it first.
"$PULLFSCTL" -m "$MNT" gc >/dev/null || fail "gc on demand after the restart"
assert_eq OK "$(errno_as "$MNT/images/$own/u/img1:1/name")" "uid 65534 pulls again after letting go"
[ "$(event_count ImageGC "$own/u/img6:1")" -ge 1 ] || fail "the pull after the restart did not make room among the images pulled before it"
charged=$(status user)
[ "$charged" -le "$quota" ] || fail "uid 65534 charged $charged bytes after the restart, over its quota of $quota"
check_budget "after the restart"
images=$(status images)
[[ " $images " == *" $REGISTRY/test/root:1 "* ]] || fail "root's image was collected: $images"
[[ " $images " == *" $priv "* ]] || fail "the private image was collected: $images"
unmount_pullfs
log "PASS"

#!/bin/bash
# The containerd snapshotter: a private containerd 1.6 with pullfs's
# snapshots socket as a proxy plugin pulls images from the test registry
# into pullfs's snapshots (overlayfs, under CACHE/snapshotter), runs a
# container that reads a file of its image, and goes on after a kill -9
# of pullfs's serving process; the snapshots API is also driven directly
# with ctr: prepare, mounts, commit, view, usage, rm, ls, and requests it
# must refuse (unknown keys, a parent that is not committed, a hostile
# key that must not become a path, labels over containerd's bound).  The
# pull of a remote snapshot names containerd's request in its events, a
# caller the access rules refuse gets an ordinary snapshot, and the
# bytes of containerd's own snapshots count in the cache's budget: GC
# runs for them, and keeps the images remote snapshots stand on.
. "$(dirname "$0")/lib.sh"
. "$INTEGRATION_DIR/images.sh"
. "$INTEGRATION_DIR/containerd.sh"
. "$INTEGRATION_DIR/regservers.sh"

need_root
need_cmd containerd ctr ctr-remote runc containerd-shim-runc-v2 protoc setpriv fallocate htpasswd
[ -x "${PULLFSCTL:-}" ] || fail "PULLFSCTL is not set (path of pullfsctl)"
# Debian's python3 (the one in PATH may be another) with grpcio and protobuf
/usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null ||
    skip "needs python3-grpcio and python3-protobuf"
start_registry
push_busybox test/busybox:1
push_edge test/edge:1
# push_plus NAME FILE TEXT: busybox and one layer of its own, FILE
# holding TEXT, as test/NAME:1
push_plus() {
    local dir=$WORK/$1
    cp -a "$(layout_of busybox)" "$dir"
    mkdir -p "$dir-stage"
    echo "$3" >"$dir-stage/$2"
    tar --create --file "$dir.tar" --directory "$dir-stage" "$2"
    umoci raw add-layer --image "$dir:1" "$dir.tar"
    _skopeo copy --dest-tls-verify=false "oci:$dir:1" "docker://$REGISTRY/test/$1:1"
}
# in a repository pullfs may not pull
push_plus never never.txt "fetched by containerd"
# pulled only through a remote snapshot
push_plus remote remote.txt "given by pullfs"
# pulled with credentials, from the same storage served with htpasswd
push_plus private private.txt "root only"
start_private_registry user secret
# busybox again, in a repository only root may pull from, and under a
# name only a lookup under images/ uses
push_busybox test/denied:1
push_busybox test/gcme:1

SNAP_SOCK=$WORK/snap.sock
SNAPDIR=$CACHE/snapshotter
PULLFS_RECOVERY_EXPECTED=1
# The first serving process kills itself (common/fault.h) in its first
# change of the snapshots' metadata, with the new file written and not
# yet renamed; the next one starts from the old state.  (Lazy layers are
# completed in the background only an hour after their start.)
PULLFS_ENV=(PULLFS_FAULT=snap-metadata)
# A budget far above what the images take, which containerd's snapshots
# fill at the end.
BUDGET=$((128 << 20))
mount_pullfs --snapshotter-socket "$SNAP_SOCK" --pull-policy-rule "$REGISTRY/test/never:*=never" \
    --pull-access-rule "$REGISTRY/test/denied:*=root" --lazy-completion-delay 3600 \
    --cache-max-bytes "$BUDGET" --gc-min-age 0 --auth-file "$WORK/auth.json" \
    --insecure-registry "$PRIVATE_HOST"
wait_for 20 test -S "$SNAP_SOCK" || fail "no snapshotter socket at $SNAP_SOCK"
CTD_EXTRA_CONFIG="[proxy_plugins.pullfs]
  type = \"snapshot\"
  address = \"$SNAP_SOCK\""
start_containerd
# busybox as eStargz, by ctr-remote (in a namespace of its own)
ctr_remote images pull --plain-http "$REGISTRY/test/busybox:1"
ctr_remote images convert --oci --estargz "$REGISTRY/test/busybox:1" "$REGISTRY/test/busybox-esgz:1"
ctr_remote images push --plain-http "$REGISTRY/test/busybox-esgz:1"

NS=pullfs-test
c() { timeout 60 ctr -a "$CTD_SOCK" -n "$NS" "$@"; }
snap() { c snapshots --snapshotter pullfs "$@"; }
# snapshot_bytes: what the status says containerd's snapshots take
snapshot_bytes() {
    py -c 'import json, sys; print(json.load(open(sys.argv[1]))["cache"]["snapshot_bytes"])' \
        "$MNT/.pullfs/status"
}
# must_fail WORD CMD...: CMD fails and says WORD (the gRPC error's text).
must_fail() {
    local want=$1 out
    shift
    if out=$("$@" 2>&1); then fail "'$*' succeeded: $out"; fi
    assert_contains "$want" "$out" "error of '$*'"
}

# ---- pull and run
# the first pull dies with the serving process; the next one goes through
pid=$(pullfs_serving_pid)
if out=$(c images pull --plain-http --snapshotter pullfs "$REGISTRY/test/busybox:1" 2>&1); then
    fail "the pull went through a serving process killed in its first Prepare: $out"
fi
wait_for 20 _pid_gone "$pid" || fail "the serving process did not die at the fault point"
_serving_again() { [ "$(pullfs_serving_pid 2>/dev/null)" != "$pid" ]; }
wait_for 20 _serving_again || fail "no serving process after the fault"
[ ! -e "$SNAPDIR/metadata.json.tmp" ] && [ -z "$(ls "$SNAPDIR/snapshots")" ] ||
    fail "the cut-short Prepare left: $(ls "$SNAPDIR" "$SNAPDIR/snapshots")"
t0=$(now)
c images pull --plain-http --snapshotter pullfs "$REGISTRY/test/busybox:1" >/dev/null
c images pull --plain-http --snapshotter pullfs "$REGISTRY/test/edge:1" >/dev/null
log "two pulls into the snapshotter: $(seconds_since "$t0") s"
n_edge=$(registry_manifest test/edge:1 | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["layers"]))')
n_committed=$(snap ls | grep -c ' Committed *$')
assert_eq "$((n_edge + 1))" "$n_committed" "committed snapshots (the layers of both images)"
# containerd's names are not paths: every snapshot is a numbered folder
for d in "$SNAPDIR"/snapshots/*; do
    [[ $(basename "$d") =~ ^[1-9][0-9]*$ ]] || fail "snapshot folder $d is not a number"
done

out=$(c run --rm --snapshotter pullfs "$REGISTRY/test/busybox:1" reader1 cat /etc/passwd 2>&1) ||
    fail "ctr run failed: $out"
want=$(cat "$(image_path test/busybox:1)/etc/passwd")
assert_eq "$want" "$out" "a file read by the container"

# The edge image (whiteouts, opaque directories, hardlinks, devices,
# xattrs) as containerd mounts it from these snapshots is exactly what
# containerd's own overlayfs snapshotter gives, and pullfs's own tree but
# for the link count overlayfs reports for a hardlink group an upper
# layer split (the lower inode's: tests/README.md).
root=$WORK/edge-root ref_root=$WORK/edge-overlayfs
mkdir -p "$root" "$ref_root"
track_mount "$root"
track_mount "$ref_root"
c images mount --snapshotter pullfs "$REGISTRY/test/edge:1" "$root" >/dev/null
c images pull --plain-http --snapshotter overlayfs "$REGISTRY/test/edge:1" >/dev/null
c images mount --snapshotter overlayfs "$REGISTRY/test/edge:1" "$ref_root" >/dev/null
assert_tree_eq "$ref_root" "$root"
diffs=$(py "$TREECMP" "$(image_path test/edge:1)" "$root" 2>&1 | grep -v ' difference(s) ' || true)
assert_eq "treecmp: split/a: nlink 2 != 3
treecmp: split/b: nlink 2 != 3" "$diffs" "differences from the tree of images/"
c images unmount --rm "$root" >/dev/null
c images unmount --rm "$ref_root" >/dev/null

# ---- the snapshots API directly
top=$(snap ls | awk '/ Committed *$/ { print $1; exit }')
snap prepare k1 "$top" >/dev/null
m=$(snap mounts /mnt k1)
assert_contains "mount -t overlay" "$m" "mounts of an active snapshot"
assert_contains "upperdir=$SNAPDIR/snapshots/" "$m" "upper directory under the cache"
must_fail "already exists" snap prepare k1 "$top"
must_fail "not found" snap prepare k2 no-such-parent
must_fail "not a committed" snap prepare k3 k1
must_fail "not found" snap mounts /mnt no-such-key
must_fail "not found" snap rm no-such-key
must_fail "not found" snap commit c1 no-such-key
# a hostile key names no path: it is a snapshot like any other
snap prepare "../../escape" "$top" >/dev/null
[ ! -e "$CACHE/escape" ] && [ ! -e "$SNAPDIR/escape" ] || fail "a key became a path"
snap rm "../../escape"
# what containerd never sends, sent straight to the socket: malformed
# messages, bad names and labels, a filter that does not parse...
timeout 60 /usr/bin/python3 "$INTEGRATION_DIR/snapclient.py" "$SNAP_SOCK" hostile ||
    fail "the snapshots API answered a request wrongly (above)"
[ -z "$(find "$WORK" -name escape)" ] || fail "a key became a path: $(find "$WORK" -name escape)"
# the CRI plugin's labels, which no kubelet sends here, and labels naming
# no layer pullfs can give (a dead registry, hostile names)
timeout 60 /usr/bin/python3 "$INTEGRATION_DIR/snapclient.py" "$SNAP_SOCK" cri \
    "$REGISTRY/test/busybox:1" "$(image_blobs test/busybox:1 | sed -n 2p)" ||
    fail "remote snapshots through the CRI plugin's labels (above)"
timeout 90 /usr/bin/python3 "$INTEGRATION_DIR/snapclient.py" "$SNAP_SOCK" slow ||
    fail "a slow call held up the others (above)"
# A caller the access rules refuse (a containerd run by another user:
# here the client, as nobody, on the socket opened to it) gets an ordinary
# snapshot, and the event saying why names it, its snapshot and the layer:
# PullDenied for an image it may not pull, AccessDenied for a private one
# (pulled with credentials, which only root may see by default) that root
# pulled, whose refusal the kernel's ACL makes for readers of the mount.
priv=$PRIVATE_HOST/test/private:1
ls "$MNT/images/$priv/" >/dev/null
denied_layer=$(image_blobs test/denied:1 | sed -n 2p)
priv_layer=$(image_blobs test/private:1 | tail -n 1)
chmod 0711 "$WORK"
chmod 0666 "$SNAP_SOCK"
for case in "$REGISTRY/test/denied:1 $denied_layer PullDenied" "$priv $priv_layer AccessDenied"; do
    read -r ref layer reason <<<"$case"
    setpriv --reuid 65534 --regid 65534 --clear-groups timeout 60 /usr/bin/python3 \
        "$INTEGRATION_DIR/snapclient.py" "$SNAP_SOCK" denied "$ref" "$layer" ||
        fail "a Prepare of $ref by a user refused (above)"
    wait_event "$reason" "$ref"
    assert_eq 65534 "$(event_fields "$reason" "$ref" uid)" "uid of $reason"
    assert_eq denied-extract "$(event_fields "$reason" "$ref" snapshot)" "snapshot of $reason"
    assert_eq "$layer" "$(event_fields "$reason" "$ref" layer)" "layer of $reason"
done
chmod 0600 "$SNAP_SOCK"
chmod 0700 "$WORK"
# write into k1's upper directory as a container would, then commit it
upper=$(sed -n 's/.*upperdir=\([^,]*\).*/\1/p' <<<"$m")
[ -d "$upper" ] || fail "no upper directory $upper"
echo hello >"$upper/hello.txt"
head -c 1048576 /dev/urandom >"$upper/big"
b0=$(snapshot_bytes)
snap commit c1 k1
# measured at the commit: the status and the metrics count it
b1=$(snapshot_bytes)
[ "$b1" -ge $((b0 + 1048576)) ] || fail "snapshot bytes $b0 before the commit of 1 MiB, $b1 after"
assert_eq "$b1" "$(metric pullfs_snapshot_bytes)" "the snapshots' bytes in the metrics"
must_fail "not found" snap mounts /mnt k1
size=$(snap usage c1 | awk 'NR == 2 { print $2 }')
[ -n "$size" ] && [ "$size" != 0.0 ] || fail "usage of c1: $(snap usage c1)"
must_fail "failed precondition" snap rm "$top"
snap view v1 c1 >/dev/null
vm=$(snap mounts /mnt v1)
assert_contains "lowerdir=$SNAPDIR/snapshots/" "$vm" "mounts of a view"
assert_not_contains "upperdir" "$vm" "a view has no upper directory"

# ---- kill -9 of the serving process between calls
# The supervisor holds the socket: containerd's calls after the kill wait
# in its backlog for the next serving process, and succeed.  (A call that
# containerd sends on its connection to the dead process before it has
# read that connection's end fails with "transport is closing": that is
# containerd's gRPC client, and its next call connects again.)
pid=$(pullfs_serving_pid)
kill -KILL "$pid"
t1=$(now)
wait_for 20 _pid_gone "$pid" || fail "the serving process outlived kill -9"
if ! vm2=$(snap mounts /mnt v1 2>&1); then
    assert_contains "transport is closing" "$vm2" "containerd's first call after the kill"
    vm2=$(snap mounts /mnt v1 2>&1) || fail "containerd's second call after the kill failed: $vm2"
fi
log "a call after kill -9 answered $(seconds_since "$t1") s after the kill"
assert_eq "$vm" "$vm2" "v1's mounts after the restart"
# the same across an upgrade (the binary replaced by itself)
pid=$(pullfs_serving_pid)
out=$("$PULLFSCTL" -m "$MNT" upgrade 2>&1) || fail "pullfsctl upgrade: $out"
[ "$(pullfs_serving_pid)" != "$pid" ] || fail "the upgrade left the old serving process"
if ! vm3=$(snap mounts /mnt v1 2>&1); then
    assert_contains "transport is closing" "$vm3" "containerd's first call after the upgrade"
    vm3=$(snap mounts /mnt v1 2>&1) || fail "containerd's second call after the upgrade failed: $vm3"
fi
assert_eq "$vm" "$vm3" "v1's mounts after the upgrade"
snap ls >"$WORK/ls.out" 2>&1 || fail "containerd could not list after the restart: $(cat "$WORK/ls.out")"
assert_contains "c1" "$(cat "$WORK/ls.out")" "c1 after the restart"
[ "$(pullfs_serving_pid)" != "$pid" ] || fail "the killed serving process still serves"
snap rm v1
snap rm c1
# containerd removes from its snapshotters in its garbage collection,
# which may take c1 before v1, its child, and leave c1 for the next one
# (a mutation starts it; a lease removed with --sync runs one)
_gone() { [ ! -e "$1" ]; }
_gone_after_gc() {
    local lease
    _gone "$1" && return 0
    lease=$(c leases create 2>/dev/null | awk 'NR == 1 { print $1 }')
    [ -z "$lease" ] || c leases delete --sync "$lease" >/dev/null 2>&1 || true
    _gone "$1"
}
wait_for 60 _gone_after_gc "$upper" || fail "c1's folder is still there after rm"
b2=$(snapshot_bytes)
[ "$b2" -le $((b1 - 1048576)) ] || fail "snapshot bytes $b1 before c1 was removed, $b2 after"
out=$(c run --rm --snapshotter pullfs "$REGISTRY/test/busybox:1" reader2 cat /etc/passwd 2>&1) ||
    fail "ctr run after the restart failed: $out"
assert_eq "$want" "$out" "a file read by a container after the restart"

# ---- containerd removes what it no longer needs
c images rm --sync "$REGISTRY/test/edge:1" "$REGISTRY/test/busybox:1" >/dev/null
c content ls -q | xargs -r ctr -a "$CTD_SOCK" -n "$NS" content rm >/dev/null 2>&1 || true
# (containerd's list empties before its collection has called Remove)
_all_gone() {
    [ -z "$(snap ls | tail -n +2)" ] &&
        [ -z "$(find "$SNAPDIR/snapshots" -mindepth 1 -maxdepth 1)" ] &&
        [ -z "$(/usr/bin/python3 "$INTEGRATION_DIR/snapclient.py" "$SNAP_SOCK" list)" ]
}
wait_for 30 _all_gone ||
    fail "snapshots left after the images were removed: $(snap ls; ls "$SNAPDIR/snapshots")"

# ---- remote snapshots: the layers pullfs has, given as they are
# ctr-remote rpull labels each layer's Prepare with the image and the
# layer's digest (stargz's labels): pullfs answers AlreadyExists with a
# committed snapshot over its own layers/ directory, and containerd
# fetches no layer.
mark=$(registry_mark)
t1=$(now)
timeout 120 ctr-remote -a "$CTD_SOCK" -n "$NS" images rpull --plain-http --snapshotter pullfs \
    "$REGISTRY/test/edge:1" >"$WORK/rpull.log" 2>&1 || fail "rpull failed: $(tail -n 5 "$WORK/rpull.log")"
log "rpull of the edge image: $(seconds_since "$t1") s"
for d in $(image_blobs test/edge:1 | tail -n +2); do
    n=$(tail -n +"$((mark + 1))" "$REGISTRY_LOG" | grep -F "GET /v2/test/edge/blobs/$d" | grep -c containerd || true)
    assert_eq 0 "$n" "containerd's GETs of layer $d"
done
# each layer's fs is a link to its directory in layers/ (a ':' in a
# lowerdir option would split it)
n_links=0
for d in "$SNAPDIR"/snapshots/*; do
    [ -L "$d/fs" ] || fail "$d/fs of a remote snapshot is not a link"
    case $(readlink "$d/fs") in "$MNT/layers/"*/sha256:*/diff) n_links=$((n_links + 1)) ;; esac
done
assert_eq "$n_edge" "$n_links" "remote snapshots over layers/"
# a view of the image's top snapshot, mounted as containerd mounts it,
# is the image (but for overlayfs's link counts, as above)
edge_top=$(snap ls | awk '/ Committed *$/ { print $1 }' | while read -r k; do
    [ -n "$(snap ls | awk -v p="$k" '$2 == p')" ] || echo "$k"; done)
snap view rv "$edge_top" >/dev/null
mnt_cmd=$(snap mounts "$root" rv)
case $mnt_cmd in "mount -t overlay overlay $root -o "*) ;; *) fail "mounts of rv: $mnt_cmd" ;; esac
mount -t overlay overlay "$root" -o "${mnt_cmd##* -o }"
diffs=$(py "$TREECMP" "$(image_path test/edge:1)" "$root" 2>&1 | grep -v ' difference(s) ' || true)
umount "$root"
assert_eq "treecmp: split/a: nlink 2 != 3
treecmp: split/b: nlink 2 != 3" "$diffs" "differences of the remote snapshots from images/"
snap rm rv
timeout 120 ctr-remote -a "$CTD_SOCK" -n "$NS" images rpull --plain-http --snapshotter pullfs \
    "$REGISTRY/test/busybox:1" >"$WORK/rpull.log" 2>&1 || fail "rpull failed: $(tail -n 5 "$WORK/rpull.log")"
out=$(c run --rm --snapshotter pullfs "$REGISTRY/test/busybox:1" reader3 cat /etc/passwd 2>&1) ||
    fail "ctr run on a remote snapshot failed: $out"
assert_eq "$want" "$out" "a file read by a container over a remote snapshot"
# the image remote snapshots stand on is in use: rm refuses it (and GC
# keeps it, by the same mark, below), once the container's files are
# released (the kernel sends the RELEASE of a file closed in the
# background) and the kernel has let go of the layers' directories the
# container's mount looked up (each holds a view of the image: dropped
# from its dentry cache here, as the kernel would under memory pressure)
_rm_refused() {
    if "$PULLFSCTL" -m "$MNT" rm "$REGISTRY/test/busybox:1" >"$WORK/rm.out" 2>&1; then
        fail "rm of an image remote snapshots stand on: $(cat "$WORK/rm.out")"
    fi
    ! grep -q "open files" "$WORK/rm.out" || { echo 2 >/proc/sys/vm/drop_caches; false; }
}
wait_for 20 _rm_refused || fail "rm said: $(cat "$WORK/rm.out")"
grep -q "in use by containerd's snapshots" "$WORK/rm.out" || fail "rm said: $(cat "$WORK/rm.out")"
ls "$MNT/images/$REGISTRY/test/busybox:1/etc" >/dev/null || fail "busybox after the refused rm"

# ---- the pull of a remote snapshot's image names containerd's request:
# containerd's pid, uid and command (the socket's peer), the snapshot it
# prepares and the layer its labels name
remote_layers=$(image_blobs test/remote:1 | tail -n +2)
timeout 120 ctr-remote -a "$CTD_SOCK" -n "$NS" images rpull --plain-http --snapshotter pullfs \
    "$REGISTRY/test/remote:1" >"$WORK/rpull.log" 2>&1 || fail "rpull failed: $(tail -n 5 "$WORK/rpull.log")"
wait_event Pulled "$REGISTRY/test/remote:1"
for reason in Pulling Pulled; do
    assert_eq "$CTD_PID" "$(event_fields "$reason" "$REGISTRY/test/remote:1" pid)" "pid of $reason"
    assert_eq 0 "$(event_fields "$reason" "$REGISTRY/test/remote:1" uid)" "uid of $reason"
    assert_eq containerd "$(event_fields "$reason" "$REGISTRY/test/remote:1" comm)" "comm of $reason"
    assert_contains "extract-" "$(event_fields "$reason" "$REGISTRY/test/remote:1" snapshot)" \
        "snapshot of $reason"
    layer=$(event_fields "$reason" "$REGISTRY/test/remote:1" layer)
    grep -qxF "$layer" <<<"$remote_layers" || fail "layer of $reason: '$layer' is none of the image's"
done
out=$(c run --rm --snapshotter pullfs "$REGISTRY/test/remote:1" reader6 cat /remote.txt 2>&1) ||
    fail "ctr run over test/remote failed: $out"
assert_eq "given by pullfs" "$out" "a file of the remote image's own layer"

# ---- a container running over pullfs's layers through a kill -9: it
# reads its image's files in a loop and writes how many times to a file
# of its own upper directory, which the test reads from the host
c run -d --snapshotter pullfs "$REGISTRY/test/busybox:1" looper /bin/sh -c \
    'i=0; while cat /etc/passwd /bin/busybox >/dev/null; do i=$((i + 1)); echo $i >/n.tmp;
     mv /n.tmp /n; /bin/busybox usleep 20000; done; echo failed >/n' >/dev/null
looper_n=$(snap mounts /mnt looper | sed -n 's/.*upperdir=\([^,]*\).*/\1/p')/n
_count_over() { [ "$(cat "$looper_n" 2>/dev/null || echo 0)" -gt "$1" ] 2>/dev/null; }
wait_for 20 _count_over 5 || fail "the container does not loop: $(cat "$looper_n" 2>&1)"
pid=$(pullfs_serving_pid)
kill -KILL "$pid"
wait_for 20 _pid_gone "$pid" || fail "the serving process outlived kill -9"
before=$(cat "$looper_n")
wait_for 20 _count_over "$((before + 20))" ||
    fail "the container stopped reading after the kill: $(cat "$looper_n")"
assert_eq RUNNING "$(c task ls | awk '$1 == "looper" { print $3 }')" "the container after the kill"
c task kill -s KILL looper >/dev/null
_task_stopped() { [ "$(c task ls | awk '$1 == "looper" { print $3 }')" = STOPPED ]; }
wait_for 20 _task_stopped || fail "the container did not stop"
c task delete looper >/dev/null
c containers delete looper >/dev/null
log "container over remote snapshots read through a kill -9: $(cat "$looper_n") rounds"

# ---- a lazy layer stays lazy: the eStargz image's layer is fetched by
# pullfs in ranges (its table of contents, the chunks read), never whole,
# and not at all by containerd
esgz_layer=$(image_blobs test/busybox-esgz:1 | tail -n 1)
mark=$(registry_mark)
timeout 120 ctr-remote -a "$CTD_SOCK" -n "$NS" images rpull --plain-http --snapshotter pullfs \
    "$REGISTRY/test/busybox-esgz:1" >"$WORK/rpull.log" 2>&1 ||
    fail "rpull failed: $(tail -n 5 "$WORK/rpull.log")"
out=$(c run --rm --snapshotter pullfs "$REGISTRY/test/busybox-esgz:1" reader5 cat /etc/passwd 2>&1) ||
    fail "ctr run over a lazy remote snapshot failed: $out"
assert_eq "$want" "$out" "a file read by a container over a lazy layer"
blob_gets=$(tail -n +"$((mark + 1))" "$REGISTRY_LOG" | grep -F "GET /v2/test/busybox-esgz/blobs/$esgz_layer")
[ -n "$blob_gets" ] || fail "pullfs did not read the lazy layer's blob at all"
assert_eq 0 "$(grep -c containerd <<<"$blob_gets" || true)" "containerd's GETs of the lazy layer"
assert_eq 0 "$(grep -vc '" 206 ' <<<"$blob_gets" || true)" "GETs of the lazy layer that were not ranges"
assert_eq false "$(pullfs_image_field "$REGISTRY/test/busybox-esgz:1" complete)" \
    "the lazy image is complete"
log "lazy layer: $(wc -l <<<"$blob_gets") range requests"

# ---- a layer pullfs does not give: containerd fetches and unpacks it
# test/never's policy is Never: its own layer is an ordinary snapshot that
# containerd fills, its busybox layer the remote snapshot already there.
never_layer=$(image_blobs test/never:1 | tail -n 1)
mark=$(registry_mark)
timeout 120 ctr-remote -a "$CTD_SOCK" -n "$NS" images rpull --plain-http --snapshotter pullfs \
    "$REGISTRY/test/never:1" >"$WORK/rpull.log" 2>&1 || fail "rpull failed: $(tail -n 5 "$WORK/rpull.log")"
n=$(tail -n +"$((mark + 1))" "$REGISTRY_LOG" | grep -F "GET /v2/test/never/blobs/$never_layer" |
    grep -c containerd || true)
assert_eq 1 "$n" "containerd's GETs of the layer pullfs does not give"
wait_event ErrImageNeverPull "$REGISTRY/test/never:1"
out=$(c run --rm --snapshotter pullfs "$REGISTRY/test/never:1" reader4 cat /never.txt /etc/passwd 2>&1) ||
    fail "ctr run over a fallen-back layer failed: $out"
assert_eq "fetched by containerd
$want" "$out" "files read over a local and a remote snapshot"

# ---- containerd's own snapshots count in the cache's budget
# A commit that takes usage over the high threshold runs GC, as a pull
# does: it removes what nothing holds (test/gcme, a name of busybox only
# a lookup under images/ used) and keeps every image remote snapshots
# stand on, and says it could not reach its target.
ls "$(image_path test/gcme:1)" >/dev/null
assert_eq "$REGISTRY/test/gcme:1" "$(pullfs_image_field "$REGISTRY/test/gcme:1" reference)" "test/gcme cached"
# nothing but the snapshots holds the images (as for rm above); the
# eStargz image, its completion held off, is kept as a pull in flight
pinned_refs="test/busybox:1 test/edge:1 test/remote:1"
_none_open() {
    local ref
    echo 2 >/proc/sys/vm/drop_caches
    for ref in $pinned_refs test/gcme:1; do
        [ "$(pullfs_image_field "$REGISTRY/$ref" open_files)" = 0 ] || return 1
    done
}
wait_for 20 _none_open || fail "images still open before GC: $(grep -o '"open_files": *[0-9]*' "$MNT/.pullfs/status")"
# (a snapshot with no parent is a bind mount of its folder, the newest)
snap prepare big >/dev/null
big_fs=$SNAPDIR/snapshots/$(ls "$SNAPDIR/snapshots" | sort -n | tail -n 1)/fs
[ -d "$big_fs" ] && [ ! -L "$big_fs" ] && [ -z "$(ls -A "$big_fs")" ] || fail "no empty folder at $big_fs"
fallocate -l $((BUDGET * 9 / 10)) "$big_fs/big"
b0=$(snapshot_bytes)
snap commit bigc big
[ "$(snapshot_bytes)" -ge $((b0 + BUDGET * 9 / 10)) ] || fail "snapshot bytes after a commit: $(snapshot_bytes)"
wait_event ImageGC "$REGISTRY/test/gcme:1"
_gc_failed() { events show | grep -q '"reason": "ImageGCFailed"'; }
wait_for 10 _gc_failed || fail "no ImageGCFailed event: GC could reach its target"
for ref in $pinned_refs test/busybox-esgz:1; do
    assert_eq "$REGISTRY/$ref" "$(pullfs_image_field "$REGISTRY/$ref" reference)" \
        "$ref, which remote snapshots stand on, after GC"
done
out=$(c run --rm --snapshotter pullfs "$REGISTRY/test/remote:1" reader7 cat /remote.txt 2>&1) ||
    fail "ctr run over test/remote after GC failed: $out"
assert_eq "given by pullfs" "$out" "a file of the remote image after GC"
# what containerd removes leaves the count
snap rm bigc
[ "$(snapshot_bytes)" -le "$b0" ] || fail "snapshot bytes after bigc was removed: $(snapshot_bytes)"
log "whole test: $(seconds_since "$t0") s"
events check >&2 || fail "malformed events in $EVENTS"
# a clean stop with containerd still connected (and, under the
# sanitizers, no leak)
unmount_pullfs

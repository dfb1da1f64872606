#!/bin/bash
# Restarts of the serving process under the supervisor (--supervise,
# fs/restart/supervisor.c): a shell in a chroot of an image (working directory
# inside it) checksums its files in a loop, and a reader with its working
# directory in the image keeps files open for the whole test and reads
# them again and again past the page cache, while the serving process is
# killed with SIGKILL 20 times and upgraded 20 times.  No read fails, no
# checksum is wrong, and the mount stays the same mount throughout.  A
# pull held at the registry when its serving process is killed completes
# after the recovery, with the right tree, and so does the background
# completion of a lazy image under way at a kill; a reference in back-off
# stays in back-off.  An upgrade to a binary whose
# check run refuses is refused with its reason, the old process serving
# on.  Status and events count it all.  Last, a SIGKILL of the supervisor
# itself: the serving process unmounts and exits, and a new start serves.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/restartlib.sh"

need_fuse
need_root
need_cmd umoci chroot

start_registry
push_busybox test/busybox:1
push_edge test/edge:1
# edge again as zstd:chunked: a lazy image, completed in the background
_skopeo copy --dest-decompress "oci:$(layout_of edge):1" "dir:$WORK/edge-plain"
_skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
    "dir:$WORK/edge-plain" "docker://$REGISTRY/test/edge-chunked:1"
chunked_layers=$(registry_manifest test/edge-chunked:1 |
    py -c 'import json, sys; print("|".join(l["digest"] for l in json.load(sys.stdin)["layers"]))')
# The proxy holds the blobs of edge until $gate exists, and the requests of
# edge-chunked's background completion until $whole does.
gate=$WORK/release-edge
whole=$WORK/release-whole
start_slowproxy --gate "GET /v2/test/edge/blobs/=$gate" \
    --gate "GET /v2/test/edge-chunked/blobs/($chunked_layers) .*background=$whole"

# The daemon runs from a path of the test's own, where upgrades install
# new binaries (rename over it, as a package manager does).
mkdir -p "$WORK/bin"
install_pullfs() {
    cp "$1" "$WORK/bin/.pullfs.new"
    chmod 0755 "$WORK/bin/.pullfs.new"
    mv -f "$WORK/bin/.pullfs.new" "$WORK/bin/pullfs"
}
install_pullfs "$PULLFS"
REAL_PULLFS=$PULLFS
PULLFS=$WORK/bin/pullfs

mount_pullfs --supervise --insecure-registry "$PROXY"
bb=$MNT/images/$PROXY/test/busybox:1
ctl() { "$PULLFSCTL" -m "$MNT" "$@"; }

umoci unpack --image "$(layout_of busybox):1" "$WORK/busybox" >/dev/null
umoci unpack --image "$(layout_of edge):1" "$WORK/edge" >/dev/null
files=(bin/busybox etc/passwd etc/group etc/hostname)
want=()
for f in "${files[@]}"; do
    want+=("$f=$(sha256sum "$WORK/busybox/rootfs/$f" | cut -d' ' -f1)")
done
[ "$(serving supervised)" = True ] || fail "status: serving.supervised is not true"
first_mount=$(mount_id)
[ -n "$first_mount" ] || fail "nothing mounted on $MNT"

# The readers.  The shell's output is one line per checksum and one per
# round; anything on its stderr is a failure.
chroot "$bb" /bin/sh -c '
    cd /etc || exit 1
    n=0
    while :; do
        sha256sum /bin/busybox passwd group hostname || echo "FAILED $n"
        n=$((n + 1))
        echo "round $n"
        /bin/busybox usleep 20000
    done' >"$WORK/sh.out" 2>"$WORK/sh.err" &
sh_pid=$!
track_pid "$sh_pid"
python3 "$INTEGRATION_DIR/restartreader.py" "$bb/etc" "$bb" "$WORK/reader.json" "${want[@]/#/../}" \
    2>"$WORK/reader.err" &
reader_pid=$!
track_pid "$reader_pid"

# The mount must never go: a watcher notes any moment it is not there.
(
    while [ ! -e "$WORK/stop-watch" ]; do
        [ "$(mount_id)" = "$first_mount" ] || echo "$(date +%T.%N) mount id '$(mount_id)'" >>"$WORK/mount-gone"
        sleep 0.02
    done
) &
watch_pid=$!
track_pid "$watch_pid"

sh_rounds() { grep -c '^round ' "$WORK/sh.out" || true; }
_progressed() { [ "$(reader_rounds)" -gt "$1" ] && [ "$(sh_rounds)" -gt "$2" ]; }
# settle: both readers complete rounds that started after this call
settle() {
    local r s
    r=$(($(reader_rounds) + 1)) s=$(($(sh_rounds) + 1))
    wait_for 60 _progressed "$r" "$s" || fail "$1: the readers made no progress (reader $(reader_rounds), shell $(sh_rounds))"
}
settle "start"

kill_serving 20 settle
log "20 kills survived"

for i in $(seq 1 20); do
    pid=$(serving pid)
    install_pullfs "$REAL_PULLFS"
    out=$(ctl upgrade) || fail "upgrade $i failed: $out"
    assert_contains "replaced by" "$out" "upgrade $i"
    [ "$(serving pid)" != "$pid" ] || fail "upgrade $i: serving process $pid still serves"
    settle "upgrade $i"
done
log "20 upgrades survived"
# each old process drained and ended by itself, none killed at the end of
# its grace time
drains=$(grep -c 'drains for an upgrade' "$PULLFS_LOG" || true)
assert_eq 20 "$drains" "old processes that drained"
! grep 'did not drain' "$PULLFS_LOG" || fail "an old process did not drain: $(grep 'did not drain' "$PULLFS_LOG" | head -n 3)"

# A binary whose check run refuses: the upgrade fails with its reason and
# the same process serves on.
pid=$(serving pid)
printf '#!/bin/sh\necho "cache format 99 is not one this pullfs reads"\nexit 3\n' >"$WORK/stub"
install_pullfs "$WORK/stub"
rc=0
out=$(ctl upgrade 2>&1) || rc=$?
[ "$rc" != 0 ] || fail "an upgrade to a refusing binary succeeded: $out"
assert_contains "cache format 99 is not one this pullfs reads" "$out" "refused upgrade"
assert_eq "$pid" "$(serving pid)" "serving process after a refused upgrade"
settle "refused upgrade"
install_pullfs "$REAL_PULLFS"

# A pull held at the registry while its serving process is killed: the
# lookup is sent again to the next process, which pulls again.
edge=$MNT/images/$PROXY/test/edge:1
ls "$edge/" >"$WORK/edge.ls" 2>"$WORK/edge.err" &
ls_pid=$!
track_pid "$ls_pid"
_blob_held() { [ "$(proxy_count held 'GET /v2/test/edge/blobs/')" -ge "$1" ]; }
wait_for 30 _blob_held 1 || fail "the pull of edge did not reach its blobs"
held_before=$(proxy_count held 'GET /v2/test/edge/blobs/')
pid=$(serving pid)
kill -KILL "$pid"
wait_for 30 _replaced "$pid" || fail "pull kill: serving process $pid not replaced"
wait_for 30 _blob_held $((held_before + 1)) || fail "the pull of edge did not start again after the recovery"
! _pid_gone "$ls_pid" || fail "ls returned while the pull was held: $(cat "$WORK/edge.err")"
touch "$gate"
rc=0
wait_for 60 _pid_gone "$ls_pid" || fail "ls of edge did not return after its pull was let go"
wait "$ls_pid" || rc=$?
assert_eq 0 "$rc" "ls of edge after the recovery ($(cat "$WORK/edge.err"))"
assert_tree_eq "$edge" "$WORK/edge/rootfs"
settle "pull kill"

# A lazy image whose background completion is under way when its serving
# process is killed: the next one, restoring the image the kernel holds,
# completes it.
chunked=$MNT/images/$PROXY/test/edge-chunked:1
ls "$chunked/" >/dev/null || fail "lookup of the lazy image failed"
_whole_held() { [ "$(proxy_count held "GET /v2/test/edge-chunked/blobs/($chunked_layers) .*background")" -ge "$1" ]; }
wait_for 30 _whole_held 1 || fail "the background completion of edge-chunked did not start"
ls "$CACHE"/layers/*/lazy >/dev/null 2>&1 || fail "no lazy layer in the cache while its completion is held"
held_before=$(proxy_count held "GET /v2/test/edge-chunked/blobs/($chunked_layers) .*background")
pid=$(serving pid)
kill -KILL "$pid"
wait_for 30 _replaced "$pid" || fail "lazy kill: serving process $pid not replaced"
wait_for 30 _whole_held $((held_before + 1)) || fail "the background completion did not start again after the recovery"
touch "$whole"
_complete() { lazy_complete && ! ls "$CACHE"/layers/*/p.* >/dev/null 2>&1; }
wait_for 60 _complete || fail "lazy layers not completed after the recovery: $(ls "$CACHE"/layers/*/lazy "$CACHE"/layers/*/p.* 2>&1 | head)"
assert_tree_eq "$chunked" "$WORK/edge/rootfs"
settle "lazy kill"

# A file this process served lazily (through the daemon: the kernel keeps
# the inode in cached mode while it is open), complete now, stays open
# across a kill: the next process must not offer passthrough for it
# (the kernel would fail that open with EIO).
exec 7<"$chunked/large"
head -c 4096 <&7 >/dev/null || fail "read of the held lazy file"
pid=$(serving pid)
kill -KILL "$pid"
wait_for 30 _replaced "$pid" || fail "held lazy file: serving process $pid not replaced"
cmp "$chunked/large" "$WORK/edge/rootfs/large" || fail "open of a file held open across a kill, once lazy"
exec 7<&-
settle "held lazy file"

# Back-off carries over: a reference that failed is refused by the next
# process without asking the registry, until its delay has passed.
missing=$MNT/images/$PROXY/test/missing:1
assert_eq ENOENT "$(errno_of "$missing")" "lookup of a missing image"
asked=$(registry_count GET "/v2/test/missing/manifests/1 ")
[ "$asked" -ge 1 ] || fail "the registry was not asked for test/missing:1"
pid=$(serving pid)
kill -KILL "$pid"
wait_for 30 _replaced "$pid" || fail "back-off kill: serving process $pid not replaced"
assert_eq EAGAIN "$(errno_of "$missing")" "lookup of a missing image after a recovery"
assert_eq "$asked" "$(registry_count GET "/v2/test/missing/manifests/1 ")" "registry asked for test/missing:1 again"
wait_event BackOff "$PROXY/test/missing:1"

# The readers' verdict.
kill -TERM "$reader_pid"
wait_for 30 _pid_gone "$reader_pid" || fail "the reader did not stop"
kill -KILL "$sh_pid"
wait "$sh_pid" 2>/dev/null || true
touch "$WORK/stop-watch"
wait "$watch_pid" || true
[ ! -s "$WORK/reader.err" ] || fail "reader: $(head -c 2000 "$WORK/reader.err")"
errors=$(reader_errors)
[ -z "$errors" ] || fail "reader errors: $errors"
log "reader: $(reader_rounds) rounds, $(py -c 'import json, sys; print(json.load(open(sys.argv[1]))["reads"])' "$WORK/reader.json") reads, no error"
[ ! -s "$WORK/sh.err" ] || fail "shell in the image: $(head -c 2000 "$WORK/sh.err")"
! grep -q FAILED "$WORK/sh.out" || fail "shell in the image: a sha256sum failed"
bad=$(awk -v w="${want[*]}" '
    BEGIN { n = split(w, a, " "); for (i = 1; i <= n; i++) { split(a[i], kv, "="); f = kv[1]; sub(/^etc\//, "", f); if (f == "bin/busybox") f = "/bin/busybox"; sum[f] = kv[2] } }
    /^round / { next }
    { if (!($2 in sum) || sum[$2] != $1) print }' "$WORK/sh.out" | head -n 5)
[ -z "$bad" ] || fail "wrong checksums in the image's shell: $bad"
log "shell: $(sh_rounds) rounds, every checksum right"
[ ! -s "$WORK/mount-gone" ] || fail "the mount went away: $(head -n 5 "$WORK/mount-gone")"
assert_eq "$first_mount" "$(mount_id)" "mount id at the end"

# What status and events say.
assert_eq 44 "$(serving restarts)" "serving.restarts"
assert_eq 20 "$(serving upgrades)" "serving.upgrades"
assert_eq 24 "$(serving recoveries)" "serving.recoveries"
assert_eq 20 "$(grep -c '"reason":"Upgraded"' "$EVENTS" || true)" "Upgraded events"
assert_eq 24 "$(grep -c '"reason":"Recovered"' "$EVENTS" || true)" "Recovered events"
assert_contains "requests were held for" "$(grep '"reason":"Recovered"' "$EVENTS" | tail -n 1)" "Recovered event"

# The supervisor killed: its serving process unmounts and exits; the next
# start mounts afresh.
pid=$(serving pid)
kill -KILL "$PULLFS_PID"
wait "$PULLFS_PID" 2>/dev/null || true
PULLFS_PID=
wait_for 30 _pid_gone "$pid" || fail "the serving process $pid outlived its supervisor"
! is_mounted "$MNT" || fail "$MNT still mounted after the supervisor and its serving process died"
mount_pullfs --supervise --insecure-registry "$PROXY"
assert_eq "busybox" "$(cat "$bb/etc/hostname")" "hostname after a new start"
unmount_pullfs

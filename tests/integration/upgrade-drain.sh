#!/bin/bash
# An upgrade drains the old serving process (docs/restarts.md).
# A read of a lazy file whose chunk is held at the registry
# when `pullfsctl upgrade` runs is left by the old process, which ends at
# once, and resent to the new one: the upgrade completes while the chunk
# is still held (the new process answers a lookup of another image, the
# old one was not killed at the end of its grace time), and the read gets
# the right bytes once the chunk comes.  On a kernel that cannot resend
# (PULLFS_FAULT=no-resend plays one), the old process answers that read
# itself once the chunk comes; nothing is resent.  Then a lookup waiting
# for a pull held at the registry across an upgrade: the old process
# leaves it, the new one gets it resent (serving.resent) and pulls; the
# lookup succeeds.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/restartlib.sh"

need_fuse
need_cmd umoci
start_registry
push_edge test/edge:1
_skopeo copy --dest-decompress "oci:$(layout_of edge):1" "dir:$WORK/edge-plain"
_skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
    "dir:$WORK/edge-plain" "docker://$REGISTRY/test/edge-chunked:1"
umoci unpack --image "$(layout_of edge):1" "$WORK/edge" >/dev/null
chunked_layers=$(registry_manifest test/edge-chunked:1 |
    py -c 'import json, sys; print("|".join(l["digest"] for l in json.load(sys.stdin)["layers"]))')
# Range reads of edge-chunked's blobs wait for $ranges; its background
# completion for $whole; edge's blobs for $gate.
ranges=$WORK/release-ranges
whole=$WORK/release-whole
gate=$WORK/release-edge
start_slowproxy --gate "GET /v2/test/edge-chunked/blobs/[^ ]* bytes=.*=$ranges" \
    --gate "GET /v2/test/edge-chunked/blobs/($chunked_layers) .*background=$whole" \
    --gate "GET /v2/test/edge/blobs/=$gate"
push_busybox
mount_pullfs --supervise --insecure-registry "$PROXY"
ctl() { "$PULLFSCTL" -m "$MNT" "$@"; }
chunked=$MNT/images/$PROXY/test/edge-chunked:1

# The lookup reads the TOCs (ranges): let those through, then hold.
touch "$ranges"
ls "$chunked/" >/dev/null || fail "lookup of the lazy image failed"
rm -f "$ranges"
held_ranges() { proxy_count held "GET /v2/test/edge-chunked/blobs/[^ ]* bytes="; }

# hold_read SKIP: a read of 64 KiB of large at SKIP * 64 KiB in the
# background ($read_pid, into $WORK/large.SKIP), held at the registry.
hold_read() {
    local before
    before=$(held_ranges)
    dd if="$chunked/large" of="$WORK/large.$1" bs=65536 skip="$1" count=1 status=none \
        2>"$WORK/large.err" &
    read_pid=$!
    track_pid "$read_pid"
    _range_held() { [ "$(held_ranges)" -gt "$before" ]; }
    wait_for 30 _range_held || fail "the read of large at $1 did not reach the registry"
    ! _pid_gone "$read_pid" || fail "the read returned while its chunk was held"
}

# read_ok SKIP: the held read returned the bytes of large at SKIP.
read_ok() {
    local rc=0
    wait_for 60 _pid_gone "$read_pid" || fail "the read did not return after its chunk was let go"
    wait "$read_pid" || rc=$?
    assert_eq 0 "$rc" "read of large at $1 across the upgrade ($(cat "$WORK/large.err"))"
    cmp "$WORK/large.$1" <(dd if="$WORK/edge/rootfs/large" bs=65536 skip="$1" count=1 status=none) ||
        fail "wrong bytes read across the upgrade"
}

# A read held at the registry does not hold the upgrade: left to the new
# process, which gets it resent.
hold_read 0
old=$(serving pid)
assert_eq 0 "$(serving upgrades)" "serving.upgrades before"
t0=$(date +%s.%N)
out=$(ctl upgrade 2>&1) || fail "pullfsctl upgrade: $out"
wait_for 30 _replaced "$old" || fail "serving process $old not replaced while a read was held"
bb=$MNT/images/127.0.0.1:$REGISTRY_PORT/test/busybox:1
[ -x "$bb/bin/busybox" ] || fail "the new process does not answer a lookup of another image"
t1=$(date +%s.%N)
! _pid_gone "$read_pid" || fail "the held read returned before its chunk was let go: $(cat "$WORK/large.err")"
held=$(serving last_held_ms)
log "upgrade with a read held at the registry: new process serving after $(py -c "print(round($t1 - $t0, 2))" ) s, requests held ${held} ms"
! grep -q "did not drain" "$PULLFS_LOG" || fail "the old process was killed at the end of its grace time"
grep -q "serving process $old drained: .* [1-9][0-9]* waiting for a registry left" "$PULLFS_LOG" ||
    fail "the old process did not leave the held read: $(grep "serving process $old drained" "$PULLFS_LOG")"
# generous: the grace time the old process had was 10 s
py -c "import sys; sys.exit(0 if $held < 5000 else 1)" || fail "requests were held $held ms across the upgrade"
assert_eq 1 "$(serving upgrades)" "serving.upgrades"
touch "$ranges"
read_ok 0
resent=$(serving resent)
((resent >= 1)) || fail "serving.resent is $resent: the held read was not sent again"
log "the held read was answered by the new process (serving.resent $resent)"
rm -f "$ranges"
unmount_pullfs

# A kernel that cannot resend: the old process answers the held read.
PULLFS_ENV=(PULLFS_FAULT=no-resend)
mount_pullfs --supervise --insecure-registry "$PROXY"
ls "$chunked/" >/dev/null || fail "lookup of the lazy image failed (no resend)"
hold_read 40
old=$(serving pid)
ctl upgrade >"$WORK/upgrade.out" 2>&1 &
upgrade_pid=$!
track_pid "$upgrade_pid"
_draining() { grep -q "serving process $old drains for an upgrade" "$PULLFS_LOG"; }
wait_for 30 _draining || fail "the old process did not start to drain: $(cat "$WORK/upgrade.out")"
# it waits for the held read
! _pid_gone "$read_pid" || fail "the read returned before its chunk was let go: $(cat "$WORK/large.err")"
touch "$ranges"
wait_for 60 _pid_gone "$upgrade_pid" || fail "pullfsctl upgrade did not return"
rc=0
wait "$upgrade_pid" || rc=$?
assert_eq 0 "$rc" "pullfsctl upgrade ($(cat "$WORK/upgrade.out"))"
read_ok 40
wait_for 30 _replaced "$old" || fail "serving process $old not replaced"
assert_eq 0 "$(serving resent)" "serving.resent: requests the kernel sent again to the new process"
drained=$(serving drained)
((drained >= 1)) || fail "serving.drained is $drained: the old process answered nothing as it drained"
wait_for 10 _has_event Upgraded "" || true
assert_contains "answered $drained requests as it drained" "$(grep '"reason":"Upgraded"' "$EVENTS" | tail -n 1)" "Upgraded event"
! grep -q "did not drain" "$PULLFS_LOG" || fail "the old process was killed at the end of its grace time"
touch "$whole"

# A lookup waiting for a pull: left by the draining process, resent to the
# new one, which pulls.
edge=$MNT/images/$PROXY/test/edge:1
ls "$edge/" >"$WORK/edge.ls" 2>"$WORK/edge.err" &
ls_pid=$!
track_pid "$ls_pid"
_blob_held() { [ "$(proxy_count held 'GET /v2/test/edge/blobs/')" -ge 1 ]; }
wait_for 30 _blob_held || fail "the pull of edge did not reach its blobs"
old=$(serving pid)
out=$(ctl upgrade) || fail "second upgrade failed: $out"
wait_for 30 _replaced "$old" || fail "serving process $old not replaced while a pull was held"
touch "$gate"
wait_for 60 _pid_gone "$ls_pid" || fail "ls of edge did not return"
rc=0
wait "$ls_pid" || rc=$?
assert_eq 0 "$rc" "ls of edge across the upgrade ($(cat "$WORK/edge.err"))"
assert_tree_eq "$edge" "$WORK/edge/rootfs"
resent=$(serving resent)
((resent >= 1)) || fail "serving.resent is $resent: the lookup of edge was not sent again"
unmount_pullfs

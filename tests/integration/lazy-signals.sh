#!/bin/bash
# A program that handles signals and goes on after them (a Go program
# gets the runtime's SIGURG all the time) is not failed by a wait for a
# registry: through a proxy that answers every Range request of a lazy
# layer after 0.3 s, by a process sent a handled SIGURG every 50 us
# (sigread, which counts any error as a failure):
#   - a file of the lazy layer reads whole and right (no EINTR);
#   - a binary of it runs (execve reads it; no ENOEXEC, no SIGBUS);
#   - a lookup of an image whose pull is slow answers (no EINTR);
# and a fatal signal still ends a read waiting for a registry that does
# not answer, though the first signal that reached it was a handled one:
# SIGTERM, which the process does not handle, and SIGKILL, each while the
# proxy holds the read's chunks.
. "$(dirname "$0")/lib.sh"
. "$INTEGRATION_DIR/images.sh"

need_root
need_fuse
need_cmd umoci skopeo
[ -n "${SIGREAD:-}" ] && [ -x "$SIGREAD" ] || fail "SIGREAD is not set (path of tests/sigread)"
start_registry

out=$WORK/layout
st=$WORK/stage
mkdir -p "$st/data" "$st/bin"
for f in a c d; do head -c 2097152 /dev/urandom >"$st/data/$f"; done
cp "$(_static_busybox)" "$st/bin/busybox"
stage_image "$st" "$out" signals
_skopeo copy --dest-decompress "oci:$out:1" "dir:$WORK/plain"
_skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
    "dir:$WORK/plain" "docker://$REGISTRY/test/signals:1"
push_edge test/edge:1

# Every Range request waits 0.3 s; those of 1 KiB or more wait while
# $WORK/go is missing; the background completion never runs; the blobs
# of test/edge take a second each.
touch "$WORK/go"
start_slowproxy --delay 'bytes=[0-9]=0.3' --gate-range "1024=$WORK/go" \
    --gate "background=$WORK/never" --delay 'GET /v2/test/edge/blobs/=1'
mount_pullfs --insecure-registry "$PROXY" --lazy-completion-delay 3600
root=$MNT/images/$PROXY/test/signals:1
ls "$root" >/dev/null || fail "lookup of test/signals:1"

stalled() {
    awk '$1 == "held" && / bytes=/ { sub(/^held /, ""); held[$0] = 1 }
         $1 == "done" { sub(/^done /, ""); sub(/ [0-9]+$/, ""); delete held[$0] }
         END { n = 0; for (k in held) n++; print n }' "$PROXY_LOG"
}

# Handled signals all along: everything answers as on a local disk.
got=$("$SIGREAD" -o "$WORK/a" read "$root/data/a" 2>"$WORK/read.err") ||
    fail "read of data/a under handled signals: $got ($(cat "$WORK/read.err"))"
assert_eq "ok 2097152" "$got" "read of data/a under handled signals"
cmp "$WORK/a" "$st/data/a" || fail "data/a read under handled signals differs"
got=$("$SIGREAD" exec "$root/bin/busybox" busybox echo exec-ok 2>"$WORK/exec.err") ||
    fail "exec of bin/busybox under handled signals: $got ($(cat "$WORK/exec.err"))"
assert_eq exec-ok "$got" "exec of bin/busybox under handled signals"
got=$("$SIGREAD" stat "$MNT/images/$PROXY/test/edge:1/etc/hostname" 2>"$WORK/stat.err") ||
    fail "lookup of test/edge:1 under handled signals: $got ($(cat "$WORK/stat.err"))"
assert_eq ok "$got" "lookup of test/edge:1 under handled signals"
assert_eq edge "$(cat "$MNT/images/$PROXY/test/edge:1/etc/hostname")" "/etc/hostname of test/edge:1"

# The stall: a reader interrupted by its handled signals keeps waiting,
# and then dies of a fatal one while the proxy still holds its chunks.
rm "$WORK/go"
for sig in TERM KILL; do
    f=data/c
    [ "$sig" = KILL ] && f=data/d
    rm -f "$WORK/ready"
    "$SIGREAD" -r "$WORK/ready" read "$root/$f" >"$WORK/stalled.out" 2>&1 &
    pid=$!
    track_pid "$pid"
    held() { [ "$(stalled)" -ge 1 ]; }
    wait_for 30 held || fail "no chunk request of $f held: $(cat "$PROXY_LOG")"
    wait_for 20 test -e "$WORK/ready" || fail "sigread did not start"
    # (past the 0.3 s of every Range request: what is held now is the stall)
    sleep 1
    ! _pid_gone "$pid" || fail "the reader of $f ended while its chunks were held: $(cat "$WORK/stalled.out")"
    t0=$(now)
    kill "-$sig" "$pid"
    wait_for 10 _pid_gone "$pid" ||
        fail "the reader of $f did not die of SIG$sig while its chunks were held (state $(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null))"
    log "SIG$sig ended the read of $f after $(seconds_since "$t0") s; held Range requests: $(stalled)"
    [ "$(stalled)" -ge 1 ] || fail "the stall ended before the reader of $f died"
    rc=0
    wait "$pid" || rc=$?
    [ "$sig" = TERM ] && want=143 || want=137
    assert_eq "$want" "$rc" "exit status of the reader of $f (SIG$sig)"
done
touch "$WORK/go"
cmp "$root/data/c" "$st/data/c" || fail "data/c after the stall"
unmount_pullfs
log "PASS"

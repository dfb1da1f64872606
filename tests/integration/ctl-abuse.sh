#!/bin/bash
# The control socket under slow, idle and too many clients (fs/control/control.h):
#  - 50 idle connections and one that sends a byte every 3 s do not delay
#    pullfsctl inspect, status and gc, which succeed while those are still
#    connected; the daemon then closes each of them with ETIMEDOUT, its
#    deadline for a whole request;
#  - over the bound on connections, the oldest idle one is dropped with
#    EAGAIN and inspect still succeeds;
#  - SIGTERM with connections open: the daemon closes them, exits 0 at once
#    (and, in the sanitizer build, leaks nothing).
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/ctl.sh"

need_pullfsctl
need_fuse
start_registry
push_busybox test/busybox:1
# Pinned: gc runs beside the abuse and must find nothing to take.
mount_pullfs --pin-image '*'

ref=$REGISTRY/test/busybox:1
ctl_ok pull "$ref"
sock=$CACHE/control.sock
clients=$INTEGRATION_DIR/ctlclients.py

py "$clients" abuse "$sock" "$PULLFSCTL" "$MNT" "$ref" >&2 || fail "slow and idle clients (see above)"
py "$clients" bound "$sock" "$PULLFSCTL" "$MNT" "$ref" 70 >&2 || fail "over the bound on connections (see above)"

python3 "$clients" hold "$sock" 20 "$WORK/ready" >"$WORK/hold.out" 2>&1 &
hold=$!
track_pid "$hold"
wait_for 20 test -s "$WORK/ready" || fail "the holding client did not connect: $(cat "$WORK/hold.out")"
unmount_pullfs
rc=0
wait "$hold" || rc=$?
[ "$rc" = 0 ] || fail "connections held across SIGTERM: $(cat "$WORK/hold.out")"
[ ! -e "$sock" ] || fail "the control socket $sock is left behind"
log "PASS"

#!/bin/bash
# What a read of the control files costs with lazy images cached.  Four
# whole images; then eight zstd:chunked images of 400 files each beside
# them, looked up and left lazy (a long completion window); then the same
# eight completed (every file of a lazy layer is a file of its own in the
# cache).  The system calls the serving process makes for one read of
# .pullfs/status and one of .pullfs/metrics are counted with strace: the
# lazy images may add a few per image, never one per file.
. "$(dirname "$0")/lib.sh"
. "$INTEGRATION_DIR/images.sh"

need_root
need_fuse
need_cmd umoci skopeo strace
start_registry

NLAZY=${NLAZY:-8}
for i in $(seq 1 "$NLAZY"); do
    out=$WORK/layout$i st=$WORK/stage$i
    umoci init --layout "$out"
    umoci new --image "$out:1"
    mkdir -p "$st/data"
    for f in $(seq 1 400); do head -c 2000 /dev/urandom >"$st/data/f$f"; done
    LAYER_TIME='2021-01-01 00:00:00 UTC' _tar_layer "$st" "$WORK/layer$i.tar"
    _add_layer "$out:1" "$WORK/layer$i.tar" "lazy $i"
    _skopeo copy --dest-decompress "oci:$out:1" "dir:$WORK/plain$i"
    _skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
        "dir:$WORK/plain$i" "docker://$REGISTRY/test/lazy$i:1"
    rm -rf "$st" "$out" "$WORK/plain$i"
done
for i in 1 2 3 4; do push_busybox "test/whole$i:1"; done

mount_pullfs --lazy-completion-delay 3600
for i in 1 2 3 4; do stat "$MNT/images/$REGISTRY/test/whole$i:1/bin" >/dev/null; done
pid=$(pullfs_serving_pid)

# syscalls FILE: the system calls the serving process makes for one read
# of .pullfs/FILE (the best of three, so that a background thread's
# stray call does not count)
syscalls() {
    local best= n k
    for k in 1 2 3; do
        strace -f -c -o "$WORK/strace.$1" -p "$pid" 2>/dev/null &
        local sp=$!
        wait_for 10 _traced "$pid" || fail "strace did not attach"
        cat "$MNT/.pullfs/$1" >/dev/null
        kill -INT "$sp"
        wait "$sp" || true
        n=$(awk '$NF == "total" { print $4 }' "$WORK/strace.$1")
        [ -z "$best" ] || [ "$n" -lt "$best" ] && best=$n
    done
    echo "$best"
}
_traced() { grep -q '^TracerPid:[[:space:]]*[1-9]' "/proc/$1/status"; }
# read_ms: milliseconds per read of status and of metrics, 20 reads each
# (printed, not asserted: the machine is shared)
read_ms() {
    python3 - "$MNT/.pullfs" <<'PY'
import sys, time
out = []
for name in ("status", "metrics"):
    t = time.monotonic()
    for _ in range(20):
        open(f"{sys.argv[1]}/{name}", "rb").read()
    out.append("%.1f" % ((time.monotonic() - t) / 20 * 1000))
print(" ".join(out))
PY
}

base_status=$(syscalls status)
base_metrics=$(syscalls metrics)
log "with 4 whole images: $base_status syscalls per status read, $base_metrics per metrics read; ms per read (status metrics): $(read_ms)"

for i in $(seq 1 "$NLAZY"); do
    cat "$MNT/images/$REGISTRY/test/lazy$i:1/data/f1" >/dev/null
done
lazy_status=$(syscalls status)
lazy_metrics=$(syscalls metrics)
log "with $NLAZY lazy images: $lazy_status syscalls per status read, $lazy_metrics per metrics read; ms per read (status metrics): $(read_ms)"

"$PULLFSCTL" -m "$MNT" pull $(for i in $(seq 1 "$NLAZY"); do echo "$REGISTRY/test/lazy$i:1"; done) \
    >"$WORK/pull.out" 2>&1 || { cat "$WORK/pull.out" >&2; fail "pullfsctl pull did not complete the lazy images"; }
whole_status=$(syscalls status)
whole_metrics=$(syscalls metrics)
log "with the same images completed: $whole_status syscalls per status read, $whole_metrics per metrics read; ms per read (status metrics): $(read_ms)"

# An image costs a few calls (its manifest is read), none per file.
bound_status=$((base_status + 16 * NLAZY)) bound_metrics=$((base_metrics + 16 * NLAZY))
[ "$lazy_status" -le "$bound_status" ] ||
    fail "a status read makes $lazy_status syscalls with $NLAZY lazy images, more than $bound_status"
[ "$lazy_metrics" -le "$bound_metrics" ] ||
    fail "a metrics read makes $lazy_metrics syscalls with $NLAZY lazy images, more than $bound_metrics"
[ "$whole_status" -le "$bound_status" ] ||
    fail "a status read makes $whole_status syscalls with $NLAZY completed lazy images, more than $bound_status"
[ "$whole_metrics" -le "$bound_metrics" ] ||
    fail "a metrics read makes $whole_metrics syscalls with $NLAZY completed lazy images, more than $bound_metrics"

#!/bin/bash
# A lookup that hangs holds up nothing else in its directory.  While
# images/HOST/test/hang:1 waits for a registry that accepts the request and
# never answers, in the same directory:
#   (a) a cached image, under a name the kernel has not seen yet (its digest
#       form), and a listing of the directory return;
#   (b) lookups of other held names reach the daemon, and a SIGINT or a
#       SIGKILL ends their programs;
# and no process is left in uninterruptible sleep.  Without parallel
# directory operations (FUSE_PARALLEL_DIROPS in the INIT reply) the kernel
# lets one lookup at a time into a directory, and every sibling waits for
# hang:1 in uninterruptible sleep.  The daemon runs with -d, whose output
# shows the INIT reply flags pullfs sent and that file data still goes out
# by splice.
#
# Every bound here is a hang detector, not a timing: the registry never
# answers (an hour of transfer timeout), so only the property under test
# can let a program go.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
start_registry
push_busybox test/busybox:1
digest=$(manifest_digest test/busybox:1)
[ -n "$digest" ] || fail "no digest for test/busybox:1"
start_slowproxy --gate "/v2/test/hang/=$WORK/never"
# (--no-passthrough: the kernel would read bin/busybox itself, with no
# READ for splice to answer)
mount_pullfs -d --no-passthrough --insecure-registry "$PROXY" --low-speed-timeout 3600 --max-parallel-pulls 4
dir=$MNT/images/$PROXY/test

assert_errno OK "$dir/busybox:1"
# File data still leaves by splice (FUSE_CAP_SPLICE_WRITE survives the
# custom I/O): the busybox binary is read in requests of many pages.
cat "$dir/busybox:1/bin/busybox" >/dev/null || fail "cannot read bin/busybox"
grep -q 'success, outsize: [0-9]* (splice)' "$PULLFS_LOG" ||
    fail "no reply went out by splice while reading bin/busybox"

# proc_state PID: the state letter of a process (R, S, D, Z...).
proc_state() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1; }
_held() { [ "$(proxy_count held "/v2/test/hang/manifests/$1$")" -ge 1 ]; }

stat_bin=$(command -v stat)
for p in hang1 hang2 hang3 cached; do
    cp "$stat_bin" "$WORK/probe-$p"
done
cp "$(command -v ls)" "$WORK/probe-listing"
"$WORK/probe-hang1" "$dir/hang:1" >/dev/null 2>&1 &
pid1=$!
track_pid "$pid1"
wait_for 30 _held 1 || fail "the lookup of hang:1 did not reach the registry"

# ---- (a) a cached image and a listing of the directory.  Run in the
# background and watched: a program stuck in uninterruptible sleep cannot
# be killed by a timeout(1).
"$WORK/probe-cached" "$dir/busybox@$digest" >"$WORK/cached.out" 2>&1 &
pid_cached=$!
track_pid "$pid_cached"
"$WORK/probe-listing" -1 "$dir" >"$WORK/listing.out" 2>&1 &
pid_listing=$!
track_pid "$pid_listing"
for p in "$pid_cached" "$pid_listing"; do
    wait_for 20 _pid_gone "$p" ||
        fail "$(cat "/proc/$p/comm") in $dir waits for hang:1 (state $(proc_state "$p"), in $(cat "/proc/$p/wchan"))"
done
wait "$pid_cached" || fail "stat of busybox@$digest: $(cat "$WORK/cached.out")"
wait "$pid_listing" || fail "listing $dir: $(cat "$WORK/listing.out")"
grep -qx 'busybox:1' "$WORK/listing.out" || fail "busybox:1 not listed in $dir: $(cat "$WORK/listing.out")"

# ---- (b) more held lookups in the same directory reach the daemon, and
# their programs can be interrupted or killed.
# A background job of a script ignores SIGINT unless told otherwise.
env --default-signal=INT "$WORK/probe-hang2" "$dir/hang:2" >/dev/null 2>&1 &
pid2=$!
track_pid "$pid2"
"$WORK/probe-hang3" "$dir/hang:3" >/dev/null 2>&1 &
pid3=$!
track_pid "$pid3"
wait_for 20 _held 2 || fail "the lookup of hang:2 did not reach the registry (state $(proc_state "$pid2"))"
wait_for 20 _held 3 || fail "the lookup of hang:3 did not reach the registry (state $(proc_state "$pid3"))"
kill -INT "$pid2"
kill -KILL "$pid3"
for p in "$pid2" "$pid3"; do
    wait_for 20 _pid_gone "$p" || fail "$(cat "/proc/$p/comm") outlived its signal (state $(proc_state "$p"))"
done
rc2=0 rc3=0
wait "$pid2" || rc2=$?
wait "$pid3" || rc3=$?
assert_eq 130 "$rc2" "exit status of probe-hang2 (SIGINT)"
assert_eq 137 "$rc3" "exit status of probe-hang3 (SIGKILL)"

# ---- hang:1 is still held, waiting interruptibly, and dies of a SIGKILL.
! _pid_gone "$pid1" || fail "probe-hang1 returned although the registry never answered"
assert_eq S "$(proc_state "$pid1")" "state of probe-hang1 while its lookup waits"
kill -KILL "$pid1"
wait_for 20 _pid_gone "$pid1" || fail "probe-hang1 outlived SIGKILL (state $(proc_state "$pid1"))"
wait "$pid1" 2>/dev/null || true

# ---- the INIT reply, as pullfs sent it (libfuse's own "flags=" line shows
# what libfuse built, before pullfs amended it).
line=$(grep -m1 '^fuseio: INIT reply flags=0x' "$PULLFS_LOG") ||
    fail "no 'fuseio: INIT reply' line in the -d output"
flags=${line#fuseio: INIT reply flags=}
flags=${flags%% *}
(((flags & 0x40000) != 0)) || fail "the INIT reply lacks FUSE_PARALLEL_DIROPS (1 << 18): $line"

unmount_pullfs
log "PASS"

#!/bin/bash
# The supervisor under systemd's descriptor store (the unit's
# FileDescriptorStoreMax=3, Type=notify): this machine's PID 1 is not
# systemd, so fakesystemd.py plays the part the unit relies on -- a
# $NOTIFY_SOCKET that keeps descriptors sent with FDSTORE=1, and a restart
# of the main process with them ($LISTEN_FDS, $LISTEN_FDNAMES) when it dies.
# A SIGKILL of the supervisor then does not unmount: the next start takes
# the mount over from the kept descriptors, and a reader holding files open
# in the image sees no error.  The hand-over log, compacted (many names
# looked up and forgotten), is stored under its other name before the old
# one is removed; the start after the kill takes that one, and a namespace
# node held open across the kill answers.  A stop (SIGTERM) removes the descriptors from
# the store and unmounts.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/restartlib.sh"

need_fuse
need_root
need_cmd umoci

start_registry
push_busybox test/busybox:1
mkdir -p "$WORK/sd"
sdlog=$WORK/sd/fakesystemd.log
touch "$sdlog"
echo "+ fakesystemd.py $PULLFS --supervise -f ... $MNT" >>"$PULLFS_LOG"
python3 "$INTEGRATION_DIR/fakesystemd.py" "$WORK/sd" -- "$PULLFS" --supervise -f --cache "$CACHE" \
    --events-log "$EVENTS" --insecure-registry "$REGISTRY" "$MNT" >>"$PULLFS_LOG" 2>&1 &
sd_pid=$!
track_pid "$sd_pid"
_logged() { grep -qx "$1" "$sdlog"; }
_logged_n() { [ "$(grep -c "$1" "$sdlog" || true)" -ge "$2" ]; }
wait_for 30 _logged "stored fuse" || fail "the supervisor stored no FUSE descriptor: $(cat "$sdlog")"
wait_for 30 _logged "stored handover" || fail "the supervisor stored no hand-over state: $(cat "$sdlog")"
wait_for 30 _logged_n "^ready " 1 || fail "the supervisor never said READY=1: $(cat "$sdlog")"

first_mount=$(mount_id)
[ -n "$first_mount" ] || fail "nothing mounted on $MNT"

bb=$MNT/images/$REGISTRY/test/busybox:1
umoci unpack --image "$(layout_of busybox):1" "$WORK/busybox" >/dev/null
mapfile -t want < <(reader_wants "$WORK/busybox/rootfs" bin/busybox etc/passwd etc/hostname)
start_reader "$bb/etc" "$bb" "${want[@]}"
settle() { reader_settle "$@"; }
settle "start"

# churn_until LINE: names looked up and forgotten until the store's log
# has LINE (a compaction swapped the hand-over log).
churn_until() {
    local i n=0
    until _logged "$1"; do
        ((n < 40)) || fail "no \"$1\" after 4,000 names: $(cat "$sdlog")"
        for ((i = 0; i < 100; i++)); do
            stat "$MNT/images/$REGISTRY/churn-$n-$i/x/" >/dev/null 2>&1 || true
        done
        echo 2 >/proc/sys/vm/drop_caches
        n=$((n + 1))
    done
}
held=$MNT/images/$REGISTRY/held/x/
exec 7<"$held"
churn_until "stored handover-b"
_logged "removed handover" || fail "the old hand-over log was left in the store: $(cat "$sdlog")"

sup=$(cat "$WORK/sd/main.pid")
srv=$(serving pid)
kill -KILL "$sup"
wait_for 30 _logged_n "^started " 2 || fail "no new start after the supervisor died: $(cat "$sdlog")"
wait_for 30 _replaced "$srv" || fail "serving process $srv not replaced"
wait_for 30 _pid_gone "$srv" || fail "the serving process $srv outlived its supervisor"
settle "after the supervisor's death"
assert_eq "$first_mount" "$(mount_id)" "mount id after the supervisor's death"
assert_eq 1 "$(serving restarts)" "serving.restarts"
assert_eq 1 "$(serving recoveries)" "serving.recoveries"
assert_contains "took the mount over" "$(grep '"reason":"Recovered"' "$EVENTS" | tail -n 1)" "Recovered event"
out=$(ls "/proc/$$/fd/7/" 2>&1) || fail "the node held across the supervisor's death: $out"
# the new supervisor swaps back to the first name
churn_until "removed handover-b"
assert_eq 2 "$(grep -cx "stored handover" "$sdlog")" "hand-over logs stored as \"handover\""
out=$(ls "/proc/$$/fd/7/" 2>&1) || fail "the node held after a compaction: $out"
exec 7<&-

kill -TERM "$reader_pid"
wait_for 30 _pid_gone "$reader_pid" || fail "the reader did not stop"
[ ! -s "$WORK/reader.err" ] || fail "reader: $(head -c 2000 "$WORK/reader.err")"
errors=$(reader_errors)
[ -z "$errors" ] || fail "reader errors: $errors"

# A stop: the store is emptied and the mount goes.
kill -TERM "$sd_pid"
wait_for 30 _pid_gone "$sd_pid" || fail "pullfs did not stop on SIGTERM"
rc=0
wait "$sd_pid" || rc=$?
assert_eq 0 "$rc" "exit status after SIGTERM"
_logged "removed fuse" || fail "the FUSE descriptor was left in the store: $(cat "$sdlog")"
! is_mounted "$MNT" || fail "$MNT still mounted after the stop"

# The supervisor killed in the middle of a swap, with both logs in the
# store (PULLFS_FAULT=supervisor-swap): the next start takes one, drops
# the other from the store, and restores every node.
rm -rf "$WORK/sd"
mkdir -p "$WORK/sd"
touch "$sdlog"
echo "+ PULLFS_FAULT=supervisor-swap fakesystemd.py $PULLFS --supervise -f ... $MNT" >>"$PULLFS_LOG"
PULLFS_FAULT=supervisor-swap python3 "$INTEGRATION_DIR/fakesystemd.py" "$WORK/sd" -- "$PULLFS" \
    --supervise -f --cache "$CACHE" --events-log "$EVENTS" --insecure-registry "$REGISTRY" \
    "$MNT" >>"$PULLFS_LOG" 2>&1 &
sd_pid=$!
track_pid "$sd_pid"
wait_for 30 _logged_n "^ready " 1 || fail "the supervisor never said READY=1: $(cat "$sdlog")"
exec 7<"$held"
churn_until "stored handover-b"
wait_for 30 _logged_n "^started " 2 || fail "no new start after the supervisor died in a swap: $(cat "$sdlog")"
assert_eq 1 "$(serving recoveries)" "serving.recoveries after a death in a swap"
out=$(ls "/proc/$$/fd/7/" 2>&1) || fail "the node held across a death in a swap: $out"
# one hand-over log left in the store (names stored and not removed; two
# only for the moment of a swap)
stored_logs() {
    awk '$1 == "stored" { s[$2] = 1 } $1 == "removed" { delete s[$2] }
        END { for (n in s) if (n ~ /^handover/) c++; print c + 0 }' "$sdlog"
}
_one_log() { [ "$(stored_logs)" = 1 ]; }
wait_for 10 _one_log || fail "$(stored_logs) hand-over logs in the store: $(tr '\n' ' ' <"$sdlog")"
exec 7<&-
kill -TERM "$sd_pid"
wait_for 30 _pid_gone "$sd_pid" || fail "pullfs did not stop on SIGTERM"
wait "$sd_pid" || true
! is_mounted "$MNT" || fail "$MNT still mounted after the second stop"
log "ok"

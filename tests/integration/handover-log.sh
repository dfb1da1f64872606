#!/bin/bash
# The hand-over log stays bounded (fs/restart/handover.h): names looked up and
# forgotten by the kernel again and again make the serving process compact
# the log, the supervisor swapping in the compacted memfd.  Its size, read
# by the test from the supervisor's own descriptor (/proc/PID/fd), stays
# within a bound while the records written add up to many times it.  Then
# a kill -9 inside a compaction, at each of its two fault points (before
# the supervisor swaps and after): the next serving process restores every
# node (none is reported stale), a reader holding files open and working
# inside the image reads on without an error.  Images leave the log once
# the kernel forgot them or they cannot be made again.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/restartlib.sh"

need_fuse
need_root
start_registry
push_busybox test/busybox:1
bb=$MNT/images/$REGISTRY/test/busybox:1
umoci unpack --image "$(layout_of busybox):1" "$WORK/busybox" >/dev/null
mapfile -t want < <(reader_wants "$WORK/busybox/rootfs" bin/busybox etc/passwd etc/group)

# log_size: the size of the hand-over log the supervisor holds (looked
# for again when a swap changed its descriptors under the listing).
log_size() {
    local fd try size
    for try in 1 2 3 4 5; do
        for fd in /proc/"$PULLFS_PID"/fd/*; do
            case $(readlink "$fd" 2>/dev/null) in
            */memfd:pullfs-handover*)
                size=$(stat -L -c %s "$fd" 2>/dev/null) && { echo "$size"; return; } ;;
            esac
        done
    done
    echo missing
}

# log_images: the references of the images the supervisor's hand-over log
# still lists (img records not followed by an imgx of their key).
log_images() {
    local fd
    for fd in /proc/"$PULLFS_PID"/fd/*; do
        case $(readlink "$fd" 2>/dev/null) in
        */memfd:pullfs-handover*)
            py - "$fd" <<'PY' && return
import sys
live = {}
with open(sys.argv[1], "rb") as f:
    lines = f.read().decode().split("\n")[:-1]
for line in lines:
    f = line.split(" ")
    if f[0] == "img":
        live[f[1]] = f[3]
    elif f[0] == "imgx":
        live.pop(f[1], None)
print(" ".join(sorted(live.values())))
PY
            ;;
        esac
    done
    echo missing
}
_log_images_are() { [ "$(log_images)" = "$1" ]; }

# churn N FROM: N names looked up under images/, then forgotten by the
# kernel (dentries dropped).
churn() {
    local i
    for ((i = $2; i < $2 + $1; i++)); do
        stat "$MNT/images/$REGISTRY/churn-$i/x/" >/dev/null 2>&1 || true
    done
    sync
    echo 2 >/proc/sys/vm/drop_caches
}

# held_ok WHAT: the namespace node held open on fd 7 answers.
held_ok() {
    local out
    out=$(ls "/proc/$$/fd/7/" 2>&1) || fail "$1: the held node images/$REGISTRY/held/x: $out"
}

# reader_clean WHAT: the reader found nothing wrong.
reader_clean() {
    local errs
    errs=$(reader_errors)
    [ -z "$errs" ] || fail "$1: the reader: $errs"
}

mount_pullfs --supervise
ls "$bb/etc" >/dev/null
start_reader "$bb/etc" "$bb" "${want[@]}"
reader_settle "first round"
exec 7<"$MNT/images/$REGISTRY/held/x/"
held_ok "start"
max=0
for ((round = 0; round < 15; round++)); do
    churn 100 $((round * 100))
    size=$(log_size)
    [ "$size" != missing ] || fail "round $round: the supervisor holds no hand-over log"
    ((size > max)) && max=$size
done
compactions=$(serving handover_compactions)
log "log: $max bytes at most, $compactions compactions, $(serving handover_log_bytes) bytes now"
# 1,500 names of about 60 bytes each, twice, plus their nsx: some 200 KB
# written; the log is compacted whenever it passes 16 KiB (twice its live
# size being less), so it never holds more than that and one round.
((max < 40000)) || fail "the hand-over log grew to $max bytes"
((compactions >= 3)) || fail "the hand-over log was compacted $compactions times"
reader_settle "after the churn"
reader_clean "churn"
held_ok "churn"
# ... and so it stays across a kill -9 and an upgrade: the next serving
# process goes on compacting the log it took over
for cycle in kill upgrade; do
    if [ $cycle = kill ]; then
        kill_serving 1 true
    else
        old=$(serving pid)
        out=$("$PULLFSCTL" -m "$MNT" upgrade 2>&1) || fail "pullfsctl upgrade: $out"
        wait_for 30 _replaced "$old" || fail "serving process $old not replaced"
    fi
    max=0
    for ((round = 0; round < 10; round++)); do
        churn 100 $((10000 + round * 100))
        size=$(log_size)
        ((size > max)) && max=$size
    done
    log "after a $cycle: $max bytes at most, $(serving handover_compactions) compactions"
    ((max < 40000)) || fail "after a $cycle the hand-over log grew to $max bytes"
done
reader_settle "after the restarts"
reader_clean "restarts"
held_ok "restarts"
exec 7<&-
kill "$reader_pid"
wait "$reader_pid" || true
unmount_pullfs

# Images leave the log once removed and forgotten by the kernel (imgx),
# and when a later process finds that the kernel has no inode for their
# root any more: what the log lists is what the kernel may still name,
# not every image ever handed out.
# (a file closed just before is released by the kernel in the
# background: while its RELEASE has not come, the rm says EBUSY)
rm_busybox() {
    PYTHONPATH=$INTEGRATION_DIR py - "$CACHE/control.sock" "$REGISTRY" <<'PY' || fail "rm of busybox ($1)"
import sys, time
import ctlsock
for _ in range(200):
    r = ctlsock.ask(sys.argv[1], {"op": "rm", "references": [sys.argv[2] + "/test/busybox:1"]})
    if r["ok"] or r.get("errno") != "EBUSY":
        break
    time.sleep(0.05)
assert r["ok"], r
PY
}
mount_pullfs --supervise
ls "$bb/etc" >/dev/null
assert_eq "$REGISTRY/test/busybox:1" "$(log_images)" "the log's images, busybox handed out"
rm_busybox "handed out"
wait_for 10 _log_images_are "" || fail "the log still lists $(log_images) after its rm"
# pulled again and held across a kill: the next process makes it again
# and notes it
exec 8<"$bb/etc/passwd"
assert_eq "$REGISTRY/test/busybox:1" "$(log_images)" "the log's images, busybox pulled again"
kill_serving 1 true
assert_eq "$REGISTRY/test/busybox:1" "$(log_images)" "the log's images after a kill"
exec 8<&-
rm_busybox "restored"
# (the kernel let go of it at the rm: the next process sees that the
# kernel has no inode for its root and does not make it again)
lines=$(wc -l <"$PULLFS_LOG")
kill_serving 1 true
assert_eq "" "$(log_images)" "the log's images once busybox was removed and forgotten"
if tail -n +"$((lines + 1))" "$PULLFS_LOG" | grep 'cannot restore'; then
    fail "a process tried to restore an image the kernel had let go of"
fi
unmount_pullfs

# A kill inside a compaction, at each of its fault points.
for point in handover-compacted handover-swapped; do
    log "kill during a compaction: $point"
    PULLFS_ENV=(PULLFS_FAULT=$point)
    mount_pullfs --supervise
    PULLFS_ENV=()
    ls "$bb/etc" >/dev/null
    start_reader "$bb/etc" "$bb" "${want[@]}"
    reader_settle "$point: first round"
    exec 7<"$MNT/images/$REGISTRY/held/x/"
    first=$(serving pid)
    lines=$(wc -l <"$PULLFS_LOG")
    for ((round = 0; round < 15 && $(serving pid) == first; round++)); do
        churn 100 $((round * 100))
    done
    [ "$(serving pid)" != "$first" ] || fail "$point: the serving process did not die in a compaction"
    assert_eq 1 "$(serving recoveries)" "$point: serving.recoveries"
    reader_settle "$point: after the kill"
    reader_clean "$point"
    held_ok "$point"
    stale=$(tail -n +"$((lines + 1))" "$PULLFS_LOG" | grep -E 'could not be restored|cannot restore|hand-over state' || true)
    [ -z "$stale" ] || fail "$point: $stale"
    # the next process compacts again, from the log the supervisor kept
    churn 300 5000
    size=$(log_size)
    ((size < 40000)) || fail "$point: the hand-over log is $size bytes after the recovery"
    exec 7<&-
    kill "$reader_pid"
    wait "$reader_pid" || true
    unmount_pullfs
done

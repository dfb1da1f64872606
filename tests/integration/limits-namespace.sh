#!/bin/bash
# Namespace directories are bounded per user.  On an allow_other mount with
# --max-namespace-nodes-per-user 256, uid 65534 stats 30,000 made-up
# directories below images/<registry>/ and 6,000 below layers/ (each a node
# the kernel would keep, and a record of the hand-over log).  The user's
# oldest nodes are evicted as new ones come: the nodes the log still lists
# stay within twice the limit, the log and the serving process's RSS stay
# within bounds that one node per name would pass many times over.  After
# kill -9 of the serving process the next one replays the bounded log and
# answers; root's image and new lookups by the user work, and the nodes
# taken over stay charged to the user (a new storm keeps them within
# bounds).  A user who holds the limit's worth of nodes open is refused
# with EAGAIN and a UserLimit event.  Root is not limited.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/restartlib.sh"

need_fuse
need_cmd setpriv
start_registry
chmod 755 "$WORK"

LIMIT=256
python3 -c '
import sys
sys.path.insert(0, sys.argv[1])
import mktar as m
open(sys.argv[2], "wb").write(m.directory("etc/") + m.member("etc/hostname", "tiny\n") + m.end())
' "$INTEGRATION_DIR" "$WORK/tiny.tar"
python3 "$INTEGRATION_DIR/rawpush.py" "$REGISTRY" test/tiny:1 "$WORK/tiny.tar" >/dev/null

mount_pullfs -o allow_other --max-namespace-nodes-per-user "$LIMIT"
base=$MNT/images/$REGISTRY
assert_eq tiny "$(cat "$base/test/tiny:1/etc/hostname")" "content of root's image"

# log_fd: the hand-over log the supervisor holds (looked for again when a
# compaction swapped it under the listing).
log_fd() {
    local fd try
    for try in 1 2 3 4 5; do
        for fd in /proc/"$PULLFS_PID"/fd/*; do
            case $(readlink "$fd" 2>/dev/null) in
            */memfd:pullfs-handover*) echo "$fd" && return ;;
            esac
        done
    done
    fail "no hand-over log held by the supervisor"
}
# log_stats: "BYTES RECORDS LIVE_NS LIVE_NS_OF_65534" of the hand-over log.
log_stats() {
    py - "$(log_fd)" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
lines = data.decode().split("\n")[:-1]
live, owner = set(), {}
for line in lines:
    f = line.split(" ")
    if f[0] == "ns":
        live.add(f[1])
    elif f[0] == "nsu" and f[1] in live:
        owner[f[1]] = f[2]
    elif f[0] == "nsx":
        live.discard(f[1])
        owner.pop(f[1], None)
print(len(data), len(lines), len(live), sum(1 for v in owner.values() if v == "65534"))
PY
}
rss_kb() { awk '/^VmRSS/ { print $2 }' /proc/"$(pullfs_serving_pid)"/status; }

# As uid 65534, N stats of made-up directories (long names: each record
# of the log is a few hundred bytes), then M below layers/ (base64
# pieces); prints "OK EAGAIN OTHER".
storm() {
    setpriv --reuid 65534 --regid 65534 --clear-groups /usr/bin/python3 - "$MNT" "$REGISTRY" "$@" <<'PY'
import collections, errno, os, sys
mnt, reg, tag, n, m = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
pad = "x" * 200
paths = [f"{mnt}/images/{reg}/{tag}{i}{pad}" for i in range(n)]
paths += [f"{mnt}/layers/{tag}{i}{pad[:100]}" for i in range(m)]
got = collections.Counter()
for p in paths:
    try:
        os.stat(p)
        got["ok"] += 1
    except OSError as e:
        got["again" if e.errno == errno.EAGAIN else "other"] += 1
        if e.errno != errno.EAGAIN and got["other"] < 5:
            print(f"{p}: {e}", file=sys.stderr)
print(got["ok"], got["again"], got["other"])
PY
}

read -r bytes0 records0 live0 _ <<<"$(log_stats)"
rss0=$(rss_kb)
read -r ok again other <<<"$(storm d 30000 6000)"
read -r bytes1 records1 live1 user1 <<<"$(log_stats)"
rss1=$(rss_kb)
log "uid 65534, 36000 made-up directories: $ok answered, $again EAGAIN, $other other errors"
log "hand-over log $bytes0 -> $bytes1 bytes ($records0 -> $records1 records, $live0 -> $live1 live namespace nodes, $user1 of uid 65534); serving RSS $rss0 -> $rss1 KiB"
assert_eq 0 "$other" "stats failing with another errno than EAGAIN"
[ "$ok" -gt 30000 ] || fail "only $ok of 36000 made-up directories answered"
# What the log lists is what the kernel may still hold: within twice the
# limit (evictions under way), plus root's nodes.
[ "$user1" -le $((2 * LIMIT)) ] && [ "$live1" -le $((2 * LIMIT + 16)) ] ||
    fail "the hand-over log lists $live1 namespace nodes, over twice the limit of $LIMIT"
# One record per name would be 36000 records and over 8 MB.
[ "$bytes1" -lt $((1024 * 1024)) ] || fail "the hand-over log grew to $bytes1 bytes"
[ "$records1" -lt 8000 ] || fail "the hand-over log holds $records1 records"
# (a sanitizer build keeps what is freed in quarantine: not judged)
[ -n "${ASAN_OPTIONS:-}" ] || [ "$((rss1 - rss0))" -lt $((24 * 1024)) ] ||
    fail "serving RSS grew by $((rss1 - rss0)) KiB"

# kill -9: the next process replays the log, bounded, and answers.
read -r bytes2 records2 live2 user2 <<<"$(log_stats)"
log "before kill -9: hand-over log $bytes2 bytes, $records2 records, $live2 live namespace nodes, $user2 of uid 65534"
[ "$records2" -lt 8000 ] || fail "the hand-over log holds $records2 records before the kill"
pid=$(pullfs_serving_pid)
kill -KILL "$pid"
wait_for 30 _replaced "$pid" || fail "serving process $pid not replaced"
assert_eq tiny "$(cat "$base/test/tiny:1/etc/hostname")" "root's image after kill -9"
out=$(setpriv --reuid 65534 --regid 65534 --clear-groups stat -c %F "$base/after-restart" 2>&1) ||
    fail "a new directory of uid 65534 after kill -9: $out"
assert_eq directory "$out" "a new directory of uid 65534 after kill -9"
# The nodes taken over stay charged to their user: a new storm evicts
# them like the others.
read -r ok again other <<<"$(storm e 6000 0)"
read -r bytes3 records3 live3 user3 <<<"$(log_stats)"
log "after kill -9 and 6000 more: $ok answered, $again EAGAIN, $other other errors; hand-over log $bytes3 bytes, $records3 records, $live3 live namespace nodes, $user3 of uid 65534; serving RSS $(rss_kb) KiB"
assert_eq 0 "$other" "stats after the kill failing with another errno than EAGAIN"
[ "$ok" -gt 5000 ] || fail "only $ok of 6000 made-up directories answered after the kill"
# (taken over without their user, the limit's worth from before would
# stay beside the limit's worth made since)
[ "$user3" -le $((LIMIT + LIMIT / 2)) ] ||
    fail "the hand-over log lists $user3 namespace nodes of uid 65534 after the kill, with a limit of $LIMIT"

# Nodes held open cannot be evicted: once the user holds the limit's
# worth of nodes that stayed seconds after the kernel was asked to drop
# them, their new ones are refused with EAGAIN and a UserLimit event.
# (Twice the limit at once, then one more every 20 ms until refused, for
# at most 60 s.)
setpriv --reuid 65534 --regid 65534 --clear-groups /usr/bin/python3 - "$base" "$LIMIT" >"$WORK/held" <<'PY' || fail "held nodes as uid 65534"
import errno, os, sys, time
base, limit = sys.argv[1], int(sys.argv[2])
fds, other, first = [], 0, -1
deadline = time.monotonic() + 60
for i in range(10 * limit):
    if i >= 2 * limit:
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    try:
        fds.append(os.open(f"{base}/held{i}", os.O_PATH | os.O_DIRECTORY))
    except OSError as e:
        if e.errno != errno.EAGAIN:
            other += 1
            continue
        first = i
        break
again = 0
for i in range(first + 1, first + 1 + limit if first >= 0 else 0):
    try:
        os.close(os.open(f"{base}/held{i}", os.O_PATH | os.O_DIRECTORY))
    except OSError as e:
        again += e.errno == errno.EAGAIN
print(len(fds), again, other, first)
PY
read -r held refused other first <"$WORK/held"
log "uid 65534 holding nodes open: $held held when the first was refused (held$first), then $refused of $LIMIT more refused with EAGAIN; $other other errors"
assert_eq 0 "$other" "held lookups failing with another errno than EAGAIN"
[ "$first" -ge 0 ] || fail "no node refused to uid 65534 holding $held nodes"
[ "$held" -le $((3 * LIMIT)) ] || fail "$held nodes held before a refusal, with a limit of $LIMIT"
assert_eq "$LIMIT" "$refused" "further nodes refused while the user holds theirs"
wait_event UserLimit "$REGISTRY/held$first"
assert_eq 65534 "$(events field UserLimit "$REGISTRY/held$first" uid)" "uid of the UserLimit event"
n_events=$(grep -c '"reason":"UserLimit"' "$EVENTS" || true)
[ "$n_events" -lt 5 ] || fail "$n_events UserLimit events for one burst of refusals"

# Root is not limited.
for i in $(seq 1 $((3 * LIMIT))); do
    stat "$base/root$i" >/dev/null || fail "root's made-up directory $i"
done

unmount_pullfs
log PASS

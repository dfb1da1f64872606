#!/bin/bash
# The events log cannot fill a disk.  On an allow_other mount uid 65534
# looks up 3,000 invalid names (each an InspectFailed event unlimited):
# the log keeps a few of its events and counts the rest, the user's next
# event let through and, at exit, an EventsSuppressed event saying how
# many ("suppressed"), the counts adding up to the lookups; root's events
# after the flood are written.  Then, unlimited and with a
# 64 KiB cap, root's 1,500 invalid lookups rotate the log: every file
# under the cap and whole JSON lines, two old files kept, the tail in
# the current one; `tail -F` and `pullfsctl events -f` see the last line
# across the rotations, and `pullfsctl events` lists the rotated history
# before the current file.
source "$(dirname "$0")/lib.sh"

need_fuse
need_cmd setpriv tail
chmod 755 "$WORK"

# lookups N PREFIX: N stat(2)s of invalid names (two colons) as the
# calling user; prints how many failed with EINVAL
lookups() {
    /usr/bin/python3 - "$MNT/images/registry.test" "$@" <<'PY'
import errno, os, sys
base, n, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
einval = 0
for i in range(n):
    try:
        os.stat(f"{base}/{prefix}:{i}:x")
    except OSError as e:
        einval += e.errno == errno.EINVAL
print(einval)
PY
}
nobody() { setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; }
# uid_events UID: the InspectFailed events of UID written, and the sum of
# the suppressed counts said for them (in those events and in
# EventsSuppressed); and every line passes events.py's check
uid_events() {
    python3 - "$EVENTS" "$1" <<'PY'
import json, sys
written = suppressed = 0
uid = int(sys.argv[2])
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["reason"] == "InspectFailed" and e.get("uid") == uid:
        written += 1
        suppressed += e.get("suppressed", 0)
    elif e["reason"] == "EventsSuppressed" and e.get("suppressed_uid") == uid:
        assert e["suppressed_reason"] == "InspectFailed", e
        suppressed += e["suppressed"]
print(written, suppressed)
PY
    py "$EVENTS_PY" "$EVENTS" check >/dev/null || fail "events log: $(py "$EVENTS_PY" "$EVENTS" check 2>&1 | head -3)"
}

# ---- the limit per user, defaults
mount_pullfs -o allow_other
n=$(nobody bash -c "$(declare -f lookups); MNT=$MNT lookups 3000 flood")
assert_eq 3000 "$n" "invalid lookups of uid 65534 answered EINVAL"
bytes=$(stat -c %s "$EVENTS")
read -r written suppressed < <(uid_events 65534)
log "uid 65534: 3000 invalid lookups, $written events written, $suppressed counted as suppressed, log $bytes bytes"
[ "$bytes" -lt 65536 ] || fail "3000 events of one user took the log to $bytes bytes"
[ "$written" -le 40 ] || fail "$written events of uid 65534 written"
# The count comes with the user's next event once the limit lets one
# through (or in EventsSuppressed); the user goes on looking up now and
# then until it does.
_counted() {
    nobody bash -c "$(declare -f lookups); MNT=$MNT lookups 1 again" >/dev/null
    extra=$((extra + 1))
    read -r written suppressed < <(uid_events 65534)
    [ "$suppressed" -gt 0 ]
}
extra=0
wait_for 30 _counted || fail "no suppressed count in the events log"
log "after $extra more lookups: $written written, $suppressed suppressed"
grep -q '"suppressed":' "$EVENTS" || fail "no suppressed field"
# root, right after: never limited
n=$(lookups 5 rootafter)
assert_eq 5 "$n" "root's invalid lookups"
[ "$(grep -c '"image":"registry.test/rootafter:[0-4]:x".*"uid":0,' "$EVENTS")" -eq 5 ] ||
    fail "root's events after the flood are not all in the log"
# dropped again, then the daemon stops: an EventsSuppressed event counts them
n=$(nobody bash -c "$(declare -f lookups); MNT=$MNT lookups 100 more")
assert_eq 100 "$n" "invalid lookups of uid 65534 answered EINVAL"
unmount_pullfs
grep -q '"reason":"EventsSuppressed".*"suppressed_uid":65534' "$EVENTS" ||
    fail "no EventsSuppressed event for uid 65534 at exit"
# every event of the user is written or counted, once
read -r written suppressed < <(uid_events 65534)
log "at exit: $written written + $suppressed suppressed for $((3100 + extra)) lookups"
assert_eq $((3100 + extra)) $((written + suppressed)) "events of uid 65534 written or counted"

# ---- rotation at the cap, no limit
rm -f "$EVENTS"
mount_pullfs --events-burst 0 --events-max-bytes 64K --events-keep 2
: >"$EVENTS.tail"
tail -F -n +1 "$EVENTS" >"$EVENTS.tail" 2>/dev/null &
track_pid $!
"$PULLFSCTL" -m "$MNT" events -f --json >"$WORK/follow.out" 2>"$WORK/follow.err" &
track_pid $!
n=$(lookups 1500 rot)
assert_eq 1500 "$n" "root's invalid lookups"
n=$(lookups 1 lastone)
last='"image":"registry.test/lastone:0:x"'
for f in "$EVENTS" "$EVENTS.1" "$EVENTS.2"; do
    [ -f "$f" ] || fail "$f missing after the rotations"
    size=$(stat -c %s "$f")
    [ "$size" -le 65536 ] || fail "$f has $size bytes, over the cap"
    python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$f" ||
        fail "$f holds something other than whole JSON lines"
done
[ ! -e "$EVENTS.3" ] || fail "a third rotated file is kept"
log "after 1501 events: $(stat -c %s "$EVENTS" "$EVENTS.1" "$EVENTS.2" | tr '\n' ' ')bytes"
grep -q "$last" "$EVENTS" || fail "the last event is not in the current file"
wait_for 10 grep -q "$last" "$EVENTS.tail" || fail "tail -F did not see the last event across the rotations"
wait_for 10 grep -q "$last" "$WORK/follow.out" || fail "pullfsctl events -f did not see the last event across the rotations"
# the history, oldest first, then the current file
lines=$(cat "$EVENTS.2" "$EVENTS.1" "$EVENTS" | wc -l)
"$PULLFSCTL" -m "$MNT" events --json >"$WORK/all.out"
assert_eq "$lines" "$(wc -l <"$WORK/all.out")" "events listed from the rotated files and the current one"
cat "$EVENTS.2" "$EVENTS.1" "$EVENTS" | cmp -s - "$WORK/all.out" || fail "pullfsctl events does not list the history in order"
log "pullfsctl events lists $lines events from 3 files; -f followed $(wc -l <"$WORK/follow.out") lines"

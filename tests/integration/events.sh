#!/bin/bash
# The events log (SPEC §4): every line one JSON object with the fields of
# §4 (events.py check), and pid, uid and comm naming the process whose
# lookup caused the event; SIGHUP reopens the log the way logrotate needs:
# after a rename and a SIGHUP the next event goes to a new file at the
# original path, and nothing more to the renamed one.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
need_cmd setpriv
start_registry
push_busybox test/busybox:1
push_busybox test/other:1

# Programs with names of their own, so that comm is known.
stat_bin=$(command -v stat)
cp "$stat_bin" "$WORK/probe-stat"
cp "$stat_bin" "$WORK/probe-nobody"
chmod 0755 "$WORK" # probe-nobody runs as nobody

# send_hup: SIGHUP to the serving process (the supervisor forwards its
# own), and wait until it is no longer pending (delivered) before the test
# goes on.
send_hup() {
    serving=$(pullfs_serving_pid)
    kill -HUP "$serving"
    wait_for 10 _hup_delivered || fail "SIGHUP still pending for pullfs after 10 s"
}
_hup_delivered() {
    local key mask
    ! _pid_gone "$serving" || return 2
    while read -r key mask; do
        case $key in
        ShdPnd: | SigPnd:)
            # SIGHUP is signal 1: the lowest bit of the mask.
            (((16#$mask & 1) == 0)) || return 1
            ;;
        esac
    done <"/proc/$serving/status"
    return 0
}

# allow_other: the lookup by another user must reach the daemon.
mount_pullfs -o allow_other

# ---- a pull caused by probe-stat, as root
ref=$REGISTRY/test/busybox:1
"$WORK/probe-stat" -c %n "$MNT/images/$ref/etc/hostname" >/dev/null &
pid=$!
wait "$pid" || fail "probe-stat of $MNT/images/$ref/etc/hostname failed"
wait_event Pulled "$ref"
for reason in Pulling Pulled; do
    assert_eq "$pid" "$(events field "$reason" "$ref" pid)" "pid of the $reason event"
    assert_eq 0 "$(events field "$reason" "$ref" uid)" "uid of the $reason event"
    assert_eq probe-stat "$(events field "$reason" "$ref" comm)" "comm of the $reason event"
done

# ---- a failure caused by probe-nobody, as uid 65534
bad=$REGISTRY/test/busybox:nope
setpriv --reuid 65534 --regid 65534 --clear-groups "$WORK/probe-nobody" "$MNT/images/$bad" >/dev/null 2>&1 &
pid=$!
rc=0
wait "$pid" || rc=$?
[ "$rc" != 0 ] || fail "stat of $MNT/images/$bad succeeded"
wait_event Failed "$bad"
assert_eq "$pid" "$(events field Failed "$bad" pid)" "pid of the Failed event (setpriv execs the probe in place)"
assert_eq 65534 "$(events field Failed "$bad" uid)" "uid of the Failed event"
assert_eq probe-nobody "$(events field Failed "$bad" comm)" "comm of the Failed event"
assert_eq ENOENT "$(events field Failed "$bad" errno)" "errno of the Failed event"
assert_eq Warning "$(events field Failed "$bad" type)" "type of the Failed event"
assert_eq "$bad" "$(events field Failed "$bad" image)" "image of the Failed event"

# ---- every line well-formed, field by field
events check >&2 || fail "malformed events in $EVENTS"
digest=$(manifest_digest test/busybox:1)
assert_eq "$digest" "$(events field Pulled "$ref" digest)" "digest of the Pulled event"
assert_eq Normal "$(events field Pulling "$ref" type)" "type of the Pulling event"
assert_eq "Pulling image \"$ref\"" "$(events field Pulling "$ref" message)" "message of the Pulling event"
assert_eq null "$(events field Pulling "$ref" errno)" "errno of the Pulling event"
assert_eq null "$(events field Pulled "$ref" errno)" "errno of the Pulled event"
# No field beyond those of §4.
py - "$EVENTS" <<'EOF' || fail "unexpected fields in $EVENTS"
import json, sys
known = {"time", "type", "reason", "image", "digest", "message", "errno", "pid", "uid", "comm"}
bad = 0
for n, line in enumerate(open(sys.argv[1]), 1):
    extra = set(json.loads(line)) - known
    if extra:
        print("%s:%d: unexpected fields %s" % (sys.argv[1], n, sorted(extra)), file=sys.stderr)
        bad += 1
sys.exit(1 if bad else 0)
EOF

# ---- SIGHUP without a rename: the same file goes on
lines_before=$(wc -l <"$EVENTS")
send_hup
ref2=$REGISTRY/test/other:1
assert_errno OK "$MNT/images/$ref2"
wait_event Pulled "$ref2"
[ "$(wc -l <"$EVENTS")" -gt "$lines_before" ] || fail "no new line in $EVENTS after a SIGHUP"

# ---- logrotate: rename, SIGHUP, the next event goes to a new file
mv "$EVENTS" "$EVENTS.1"
rotated_lines=$(wc -l <"$EVENTS.1")
send_hup
bad2=$REGISTRY/test/other:nope
assert_errno ENOENT "$MNT/images/$bad2"
wait_event Failed "$bad2"
assert_eq 0 "$(py "$EVENTS_PY" "$EVENTS.1" count Failed "$bad2")" "events for $bad2 in the rotated file"
assert_eq "$rotated_lines" "$(wc -l <"$EVENTS.1")" "lines of the rotated file after the reopen"
assert_eq ENOENT "$(events field Failed "$bad2" errno)" "errno of the Failed event in the new file"
events check >&2 || fail "malformed events in the new $EVENTS"
py "$EVENTS_PY" "$EVENTS.1" check >&2 || fail "malformed events in $EVENTS.1"

unmount_pullfs
log "PASS"

#!/bin/bash
# pullfsctl events: the events log as `kubectl get events` prints events,
# its filters, --json, and -f across a log rotation.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/ctl.sh"

need_pullfsctl
need_fuse
start_registry
push_busybox test/busybox:1
push_busybox test/busybox:2
push_busybox test/other:1
mount_pullfs --backoff-initial 1 --backoff-max 1

bb1=$REGISTRY/test/busybox:1
bad=$REGISTRY/test/busybox:nope

# No log yet: nothing, and not an error.
ctl events
assert_eq 0 "$RC" "exit status of events before any event"
assert_eq "" "$OUT" "events before any event"

ctl_ok pull "$bb1"
ctl pull "$bad"
assert_eq 1 "$RC" "pull of $bad"
wait_event Failed "$bad"

# ---- the table
ctl_ok events
assert_eq "LAST SEEN TYPE REASON OBJECT MESSAGE" "$(nth_row 1 | tr -s ' ')" "header of events"
lines=$(($(grep -c . "$EVENTS") + 1))
assert_eq "$lines" "$(wc -l <<<"$OUT")" "one line per event plus the header"
row=$(grep -F "image/$bb1" <<<"$OUT" | grep ' Pulling ')
[[ $row =~ ^[0-9]+s\ +Normal\ +Pulling\ +image/$bb1\ +Pulling\ image\ \"$bb1\"$ ]] ||
    fail "Pulling row of events: $row"
row=$(grep -F "image/$bb1" <<<"$OUT" | grep ' Pulled ' | head -n1)
assert_contains "Successfully pulled image \"$bb1\"" "$row" "Pulled row of events"
row=$(grep -F "image/$bad" <<<"$OUT" | grep ' Failed ')
[[ $row =~ ^[0-9]+s\ +Warning\ +Failed\ +image/$bad\ + ]] || fail "Failed row of events: $row"
assert_contains "ENOENT" "$row" "Failed row of events"
# Columns line up.
col=$(nth_row 1 | awk '{ print index($0, "REASON") }')
while read -r l; do
    [ "${l:col-2:1}" = " " ] && [ "${l:col-1:1}" != " " ] || fail "REASON column not aligned in: $l"
done < <(tail -n +2 <<<"$OUT")

# ---- filters
ctl_ok events --image "$bb1"
assert_eq 0 "$(tail -n +2 <<<"$OUT" | grep -vcF "image/$bb1 ")" "events --image $bb1: other images"
[ "$(wc -l <<<"$OUT")" -ge 3 ] || fail "events --image $bb1 shows too little: $OUT"
ctl_ok events --image "$REGISTRY/test/busybox"
assert_contains "image/$bb1 " "$OUT" "events --image REPOSITORY"
assert_contains "image/$bad " "$OUT" "events --image REPOSITORY"
ctl_ok pull "$REGISTRY/test/other:1"
ctl_ok events --image "$REGISTRY/test/busybox"
assert_not_contains "test/other" "$OUT" "events --image $REGISTRY/test/busybox"
ctl_ok events --reason Failed
assert_eq 2 "$(wc -l <<<"$OUT")" "events --reason Failed"
assert_contains "image/$bad " "$OUT" "events --reason Failed"
ctl_ok events --reason pulling --image "$bb1"
assert_eq 2 "$(wc -l <<<"$OUT")" "events --reason pulling --image $bb1 (case-insensitive reason)"
ctl_ok events --since 1h
assert_eq "$(grep -c . "$EVENTS")" "$(($(wc -l <<<"$OUT") - 1))" "events --since 1h"
ctl_ok events --since 2099-01-01T00:00:00Z
assert_eq "" "$OUT" "events --since a future time"
assert_contains "No events found" "$ERR" "events --since a future time"
# A time between two events splits them.
sleep 1.1
mark=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)
sleep 0.1
ctl_ok pull "$REGISTRY/test/busybox:2"
ctl_ok events --since "$mark"
assert_not_contains "image/$bb1 " "$OUT" "events --since $mark"
assert_contains "image/$REGISTRY/test/busybox:2 " "$OUT" "events --since $mark"
ctl_ok events --since 3s
assert_contains "image/$REGISTRY/test/busybox:2 " "$OUT" "events --since 3s"
ctl events --since yesterday
assert_eq 2 "$RC" "exit status of events --since yesterday"

# ---- --json: the log's lines, unchanged
ctl_ok events --json
assert_eq "$(cat "$EVENTS")" "$OUT" "events --json"
ctl_ok events --json --reason Failed
assert_eq "$(grep '"reason":"Failed"' "$EVENTS")" "$OUT" "events --json --reason Failed"
# --log: no daemon needed.
cp "$EVENTS" "$WORK/copy.log"
RC=0
"$PULLFSCTL" -m /nonexistent events --log "$WORK/copy.log" --reason Failed >"$WORK/o" 2>"$WORK/e" || RC=$?
assert_eq 0 "$RC" "exit status of events --log"
assert_contains "image/$bad " "$(cat "$WORK/o")" "events --log"

# ---- -f: new events as they come, across a rotation
"$PULLFSCTL" -m "$MNT" events -f --reason Pulling >"$WORK/follow.out" 2>"$WORK/follow.err" &
follow=$!
track_pid "$follow"
_follow_has() { grep -qF "$1" "$WORK/follow.out"; }
wait_for 10 _follow_has "image/$bb1 " || fail "events -f did not print the old events: $(cat "$WORK/follow.out" "$WORK/follow.err")"
push_busybox test/busybox:3
stat "$MNT/images/$REGISTRY/test/busybox:3" >/dev/null
wait_for 10 _follow_has "image/$REGISTRY/test/busybox:3 " || fail "events -f did not show a new event: $(cat "$WORK/follow.out")"
mv "$EVENTS" "$EVENTS.1"
kill -HUP "$PULLFS_PID"
push_busybox test/busybox:4
wait_for 10 test -f "$EVENTS" || true
stat "$MNT/images/$REGISTRY/test/busybox:4" >/dev/null
wait_for 10 test -s "$EVENTS" || fail "pullfs did not reopen its events log after SIGHUP"
wait_for 10 _follow_has "image/$REGISTRY/test/busybox:4 " || fail "events -f lost the log after its rotation: $(cat "$WORK/follow.out")"
assert_eq 0 "$(grep -c ' Pulled ' "$WORK/follow.out")" "events -f --reason Pulling shows only Pulling"
_stop_pid "$follow"

ctl_ok events --help
for w in --follow --image --reason --since --json --log "LAST SEEN" kubectl; do
    assert_contains "$w" "$OUT" "pullfsctl events --help"
done

log "ok"

#!/bin/bash
# pullfsctl status while a pull is held half-way (a proxy holds one layer
# back), with an image in back-off; and the progress of pullfsctl pull for
# that pull, on a pipe and on a terminal.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/ctl.sh"

need_pullfsctl
need_fuse
start_registry
push_edge test/edge:1
push_busybox test/busybox:1
# The smallest layer is held back until $WORK/gate exists: the 5 MiB
# one gets through, so bytes and layers are part done.
held=$(registry_manifest test/edge:1 | python3 -c '
import json, sys
print(min(json.load(sys.stdin)["layers"], key=lambda l: l["size"])["digest"])')
start_slowproxy --gate "GET /v2/test/edge/blobs/$held=$WORK/gate"
mount_pullfs --insecure-registry "$PROXY" --backoff-initial 60 --backoff-max 60

ref=$PROXY/test/edge:1
bad=$PROXY/test/busybox:nope

ctl_ok status
assert_contains "Pulls in flight: none" "$OUT" "status when idle"
assert_contains "Back-off: none" "$OUT" "status when idle"

ctl pull "$bad"
assert_eq 1 "$RC" "pull of $bad"

"$PULLFSCTL" -m "$MNT" pull "$ref" >"$WORK/plain.out" 2>"$WORK/plain.err" &
plain=$!
track_pid "$plain"
printf -v cmd '%q ' "$PULLFSCTL" -m "$MNT" pull "$ref"
script -qefc "stty cols 120 2>/dev/null; $cmd" /dev/null >"$WORK/tty.out" 2>&1 </dev/null &
tty=$!
track_pid "$tty"

_pull_held() {
    status_json "$WORK/st.json"
    [ "$(json_get "$WORK/st.json" "any(p['reference'] == '$ref' and p['state'] == 'downloading' and p['layers_done'] >= 1 for p in j['pulls'])")" = True ]
}
wait_for 30 _pull_held || fail "the pull of $ref never showed as held half-way in the status: $(cat "$WORK/st.json")"
# Let both clients poll a few times.
sleep 1.5

# ---- the table
ctl_ok status
row=$(grep -F "$ref " <<<"$OUT" | head -n1)
[[ $row =~ ^$ref\ +downloading\ +[0-9.]+\ (KiB|MiB)\ /\ [0-9.]+\ MiB\ \([0-9]+%\)\ +[1-3]/3\ +[0-9.]+s\ +[0-9]+$ ]] ||
    fail "pull row of status: '$row' in: $OUT"
assert_contains "REFERENCE" "$(grep -B1 -F "$ref " <<<"$OUT" | head -n1)" "header above the pull row"
row=$(grep -F "$bad " <<<"$OUT")
[[ $row =~ ^$bad\ +[0-9]+\.[0-9]s\ +60s\ +1\ +ENOENT\ +.*manifest ]] || fail "back-off row of status: '$row' in: $OUT"
assert_contains "Pulls:       1 running (at most 1 at once), 0 queued" "$OUT" "queues in status"
[[ $OUT =~ Cache:\ +$CACHE:\ [0-9.]+\ (B|KiB|MiB)\ in\ [0-9]+\ images? ]] || fail "cache line of status: $OUT"
assert_contains "Events log:  $EVENTS" "$OUT" "status"
assert_contains "GC:          above 85%" "$OUT" "status"

ctl_ok status --json
echo "$OUT" >"$WORK/status.json"
assert_eq "$ref" "$(json_get "$WORK/status.json" "j['pulls'][0]['reference']")" "status --json"
assert_eq "$bad" "$(json_get "$WORK/status.json" "j['backoff'][0]['reference']")" "status --json"

# ---- let the pull finish
touch "$WORK/gate"
rc=0
wait "$plain" || rc=$?
[ "$rc" = 0 ] || fail "pullfsctl pull (pipe) exited $rc: $(cat "$WORK/plain.err")"
rc=0
wait "$tty" || rc=$?
[ "$rc" = 0 ] || fail "pullfsctl pull (terminal) exited $rc: $(cat -v "$WORK/tty.out")"

plain_out=$(cat "$WORK/plain.out")
[[ $plain_out =~ $ref:\ downloading\ +[0-9.]+\ (KiB|MiB)\ /\ [0-9.]+\ MiB\ +[0-9.]+\ (B|KiB|MiB)/s\ +layers\ [1-3]/3 ]] ||
    fail "no progress line in the plain output: $plain_out"
assert_contains "$ref: done sha256:" "$plain_out" "plain output"
[[ $plain_out != *$'\e'* ]] || fail "escapes in the plain output: $plain_out"

tty_out=$(cat -v "$WORK/tty.out")
[[ $tty_out =~ \[=*\>?\ *\]\ +[0-9]+%\ +[0-9.]+\ (KiB|MiB)\ /\ [0-9.]+\ MiB\ +[0-9.]+\ (B|KiB|MiB)/s\ +layers\ [1-3]/3 ]] ||
    fail "no progress bar on the terminal: $tty_out"
assert_contains "^[[K" "$tty_out" "terminal output (line redraws)"
assert_contains "done sha256:" "$tty_out" "terminal output"

ctl_ok status
assert_contains "Pulls in flight: none" "$OUT" "status after the pull"

ctl_ok status --help
for w in --json back-off queue; do
    assert_contains "$w" "$OUT" "pullfsctl status --help"
done

log "ok"

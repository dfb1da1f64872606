#!/bin/bash
# pullfsctl pull: plain lines when stdout is not a terminal, a progress
# line on a terminal, the image really in the cache afterwards; failures
# exit 1 with the errno name and the reason from the events log.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/ctl.sh"

need_pullfsctl
need_fuse
start_registry
push_busybox test/busybox:1
push_busybox test/busybox:2
push_edge test/edge:1
# edge's blobs at 1 MB/s through a proxy: a pull that lasts seconds, so that
# its progress lines come while bytes are moving
start_slowproxy --rate "GET /v2/test/edge/blobs/=1000000"
mount_pullfs --insecure-registry "$PROXY"

ref=$REGISTRY/test/busybox:1
digest=$(manifest_digest test/busybox:1)

# ---- not a terminal: plain lines, no escapes
ctl pull "$ref"
[ "$RC" = 0 ] || fail "pullfsctl pull $ref exited $RC: $ERR"
assert_contains "$ref: pulling" "$OUT" "plain output of pull"
last=$(tail -n1 <<<"$OUT")
[[ $last == "$ref: done $digest  "*" in "*s ]] ||
    fail "last line of pull should be '$ref: done $digest  SIZE in TIME', got: $last"
[[ $last =~ [0-9.]+\ (B|KiB|MiB)\ on\ disk ]] || fail "no human size on disk in: $last"
# Progress lines show a rate from the start (the average since the pull
# began until a window of its own has passed), never a rate of nothing
# beside bytes already done.
! grep -E ' [1-9][0-9.]* (B|KiB|MiB) / [0-9.]+ (B|KiB|MiB)  0 B/s' <<<"$OUT" ||
    fail "a progress line with bytes done and a rate of 0 B/s: $OUT"
# The slow pull: its progress lines all have a rate, from the first one.
ctl pull "$PROXY/test/edge:1"
[ "$RC" = 0 ] || fail "pullfsctl pull of the slow edge image exited $RC: $ERR"
grep -qE ' [1-9][0-9.]* (B|KiB|MiB) / ' <<<"$OUT" || fail "no progress line with bytes done in the slow pull: $OUT"
! grep -E ' [1-9][0-9.]* (B|KiB|MiB) / [0-9.]+ (B|KiB|MiB)  0 B/s' <<<"$OUT" ||
    fail "a progress line of the slow pull with bytes done and a rate of 0 B/s: $OUT"
[[ $OUT != *$'\e'* ]] || fail "escape sequences in the output of pull on a pipe: $OUT"
[ -z "$ERR" ] || fail "pull printed on stderr: $ERR"
# It went through the mount: the daemon's own events name the pull.
wait_event Pulled "$ref"
assert_eq pullfsctl "$(events field Pulling "$ref" comm)" "comm of the Pulling event"
# And the image is usable.
assert_eq "root:x:0:0:root:/root:/bin/sh" "$(head -n1 "$MNT/images/$ref/etc/passwd")" "/etc/passwd of $ref"

# A second pull of a cached image is quick and says done too.
ctl_ok pull "$ref"
assert_contains "$ref: done $digest" "$OUT" "pull of a cached image"

# Several at once, in any reference form: a short host-less name would be
# docker.io, so use canonical ones; a missing tag means latest.
ctl_ok pull "$REGISTRY/test/busybox:2" "$REGISTRY/test/edge:1"
assert_contains "$REGISTRY/test/busybox:2: done sha256:" "$OUT" "pull of two images"
assert_contains "$REGISTRY/test/edge:1: done sha256:" "$OUT" "pull of two images"

# ---- a terminal: lines redrawn in place, and the result
ctl_tty "$WORK/tty.out" pull "$REGISTRY/test/busybox:2"
[ "$RC" = 0 ] || fail "pullfsctl pull on a terminal exited $RC: $(cat "$WORK/tty.out")"
grep -q $'\e\\[K' "$WORK/tty.out" || fail "no line redraw (ESC [K) on a terminal: $(cat -v "$WORK/tty.out")"
grep -q "test/busybox:2 .*done sha256:" "$WORK/tty.out" || fail "no result line on a terminal: $(cat -v "$WORK/tty.out")"

# ---- failures: errno name and reason, exit status 1
ctl pull "$REGISTRY/test/busybox:nope"
assert_eq 1 "$RC" "exit status of a pull of an unknown tag"
assert_contains "pull $REGISTRY/test/busybox:nope: ENOENT: Failed: " "$ERR" "stderr of a pull of an unknown tag"
# The message is the event's, so it names the image.
assert_contains "\"$REGISTRY/test/busybox:nope\"" "$ERR" "reason of a failed pull"
assert_not_contains "done" "$OUT" "stdout of a failed pull"

# Right after: back-off, with the reason of the first failure.
ctl pull "$REGISTRY/test/busybox:nope"
assert_eq 1 "$RC" "exit status of a pull in back-off"
assert_contains "EAGAIN: BackOff: " "$ERR" "stderr of a pull in back-off"

# One bad among good ones: the good one still succeeds, status 1.
ctl pull "$ref" "$REGISTRY/test/nothing:1"
assert_eq 1 "$RC" "exit status of a pull with one failure"
assert_contains "$ref: done" "$OUT" "the good image of a mixed pull"
assert_contains "pull $REGISTRY/test/nothing:1: ENOENT" "$ERR" "the bad image of a mixed pull"

# An invalid reference never reaches the daemon.
ctl pull 'Upper/Case:1'
assert_eq 1 "$RC" "exit status of a pull of an invalid reference"
assert_contains "EINVAL" "$ERR" "stderr of an invalid reference"

# Usage errors exit 2; --help is complete.
ctl pull
assert_eq 2 "$RC" "exit status of pull without references"
ctl_ok pull --help
for w in REFERENCE --plain --quiet "Exit status" ENOENT EAGAIN terminal; do
    assert_contains "$w" "$OUT" "pullfsctl pull --help"
done

# --quiet: nothing on success.
ctl_ok pull --quiet "$ref"
assert_eq "" "$OUT" "output of pull --quiet"

# No pullfs at the given mount point.
RC=0
"$PULLFSCTL" -m "$WORK" pull "$ref" >"$WORK/o" 2>"$WORK/e" || RC=$?
assert_eq 1 "$RC" "exit status of pull with no mount"
assert_contains "no pullfs is mounted" "$(cat "$WORK/e")" "pull with no mount"

log "ok"

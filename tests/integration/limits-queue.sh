#!/bin/bash
# No lookup waits for another reference's pull, and no user can starve
# the others (with the default single pull slot):
#  1. a registry that accepts and never answers holds no pull slot: a pull
#     from another registry, and a lookup of a sibling in the same
#     directory, succeed while its lookup hangs, and that lookup dies at
#     once when killed;
#  2. pulls queued for the slot that nobody waits for any more leave the
#     queue (PullAbandoned, no back-off), the operator's background pull
#     (pullfsctl pull --background) stays, and the pull holding the slot
#     finishes;
#  3. one user other than root cannot start more than 8 pulls (EAGAIN and a
#     UserLimit event naming the uid), and another user's pull succeeds.
# Everything here is a hang detector, not a timing.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/ctl.sh"

need_pullfsctl
need_fuse
need_cmd setpriv
start_registry
chmod 755 "$WORK"

python3 - "$INTEGRATION_DIR" "$WORK" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import mktar as m
for name in ["dead", "a", "b", "c", "d", "e", "ok", "ok2"]:
    with open(f"{sys.argv[2]}/{name}.tar", "wb") as f:
        f.write(m.directory("etc/") + m.member("etc/id", f"{name}\n") + m.end())
PY
for name in dead a b c d e ok ok2; do echo "q/$name:1 $WORK/$name.tar"; done |
    python3 "$INTEGRATION_DIR/rawpush.py" "$REGISTRY" - >/dev/null || fail "pushing the images"
for i in $(seq 2 13); do echo "q/dead:$i $WORK/dead.tar"; done |
    python3 "$INTEGRATION_DIR/rawpush.py" "$REGISTRY" - >/dev/null || fail "pushing q/dead tags"

# The proxy never answers for q/dead's manifests and holds q/b's blobs
# until told.
start_slowproxy --gate "GET /v2/q/dead/manifests/=$WORK/never" --gate "GET /v2/q/b/blobs/=$WORK/open-b"
mount_pullfs -o allow_other --insecure-registry "$PROXY" --low-speed-timeout 3600 --registry-qps 0
P=$MNT/images/$PROXY/q
R=$MNT/images/$REGISTRY/q
status() { python3 -c 'import json,sys; print(eval(sys.argv[2], {"s": json.load(open(sys.argv[1]))}))' "$MNT/.pullfs/status" "$1"; }
alive() { ! _pid_gone "$1"; }
held_at_least() { [ "$(proxy_count held "$2")" -ge "$1" ]; }
as_nobody() { setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; }

# ---- 1. a registry that does not answer
stat "$P/dead:1" >/dev/null 2>&1 &
dead=$!
wait_for 20 held_at_least 1 'q/dead/manifests/1$' || fail "the lookup of q/dead:1 never reached the registry"
assert_eq ok "$(timeout 60 cat "$R/ok:1/etc/id")" "a pull from another registry while q/dead:1 hangs"
assert_eq a "$(timeout 60 cat "$P/a:1/etc/id")" "a pull of a sibling in the same directory while q/dead:1 hangs"
alive "$dead" || fail "the lookup of q/dead:1 ended: the registry was meant to hang"
kill -KILL "$dead"
wait_for 20 _pid_gone "$dead" || fail "a killed lookup of q/dead:1 did not end"

# ---- 2. queued pulls nobody waits for leave the queue
stat "$P/b:1" >/dev/null 2>&1 &
b=$!
wait_for 20 held_at_least 1 'q/b/blobs' || fail "the pull of q/b:1 never reached its blobs"
setpriv --reuid 65534 --regid 65534 --clear-groups stat "$P/c:1" >/dev/null 2>&1 &
c=$!
setpriv --reuid 65534 --regid 65534 --clear-groups stat "$P/d:1" >/dev/null 2>&1 &
d=$!
queued() { [ "$(status 's["queues"]["pulls_queued"]')" = "$1" ]; }
wait_for 20 queued 2 || fail "q/c:1 and q/d:1 did not queue behind q/b:1: $(status 's["queues"]')"
kill -TERM "$c" "$d"
wait_for 20 _pid_gone "$c" || fail "an interrupted lookup of q/c:1 did not end"
wait_for 20 _pid_gone "$d" || fail "an interrupted lookup of q/d:1 did not end"
wait_event PullAbandoned "$PROXY/q/c:1"
wait_event PullAbandoned "$PROXY/q/d:1"
wait_for 20 queued 0 || fail "abandoned pulls still queued: $(status 's["queues"]')"
assert_eq 2 "$(status 's["queues"]["pulls_abandoned"]')" "pulls that left the queue"
# The operator's background pull stays queued with nobody waiting.
assert_eq "$PROXY/q/e:1: pulling" "$("$PULLFSCTL" -m "$MNT" pull --background "$PROXY/q/e:1")" "pullfsctl pull --background"
wait_for 20 queued 1 || fail "the background pull of q/e:1 did not queue: $(status 's["queues"]')"
alive "$b" || fail "the pull holding the slot ended early"
touch "$WORK/open-b"
wait "$b" || fail "the lookup of q/b:1 failed"
assert_eq b "$(cat "$P/b:1/etc/id")" "content of q/b:1"
wait_event Pulled "$PROXY/q/e:1"
assert_eq 2 "$(status 's["queues"]["pulls_abandoned"]')" "pulls that left the queue, the background one not among them"
assert_eq "$PROXY/q/e:1: present" "$("$PULLFSCTL" -m "$MNT" pull --background "$PROXY/q/e:1")" "pullfsctl pull --background of a cached image"
# Leaving the queue is no failure: no back-off, the next lookup pulls.
assert_eq c "$(as_nobody timeout 60 cat "$P/c:1/etc/id")" "q/c:1 pulled after its first pull left the queue"
assert_eq 0 "$(event_count Failed "$PROXY/q/c:1")" "Failed events for the abandoned q/c:1"

# ---- 3. one user's pulls are capped; another user's pull goes on
for i in $(seq 2 13); do
    setpriv --reuid 65534 --regid 65534 --clear-groups stat "$P/dead:$i" >"$WORK/dead$i.out" 2>&1 &
    echo $! >>"$WORK/dead.pids"
done
# Eight hang in the registry; four are refused at once.
refused() { [ "$(grep -l 'Resource temporarily unavailable' "$WORK"/dead*.out 2>/dev/null | wc -l)" -ge 4 ]; }
wait_for 30 refused || fail "lookups beyond the per-user limit were not refused: $(cat "$WORK"/dead*.out)"
wait_for 20 held_at_least 9 'q/dead/manifests' || fail "8 pulls of uid 65534 did not reach the registry"
n=0
while read -r pid; do alive "$pid" && n=$((n + 1)); done <"$WORK/dead.pids"
assert_eq 8 "$n" "lookups of uid 65534 still waiting for their pulls"
has_limit_event() { grep -q '"reason":"UserLimit"' "$EVENTS"; }
wait_for 20 has_limit_event || fail "no UserLimit event"
assert_contains "uid 65534" "$(grep '"reason":"UserLimit"' "$EVENTS" | head -1)" "UserLimit event"
assert_eq ok2 "$(timeout 60 cat "$R/ok2:1/etc/id")" "root's pull while uid 65534 is at its limit"
assert_eq d "$(timeout 60 setpriv --reuid 1000 --regid 1000 --clear-groups cat "$P/d:1/etc/id")" "uid 1000's pull while uid 65534 is at its limit"
while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done <"$WORK/dead.pids"
while read -r pid; do wait_for 20 _pid_gone "$pid" || fail "a killed lookup did not end"; done <"$WORK/dead.pids"
touch "$WORK/never"
unmount_pullfs
log "PASS"

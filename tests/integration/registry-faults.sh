#!/bin/bash
# A fault-injecting proxy between pullfs and the registry: a blob transfer
# cut half way resumes with Range (also when the server ignores Range and
# answers 200); 503s and a 429 with Retry-After are retried; a blob GET
# redirected to another host:port is followed without the Authorization
# header; corrupt bytes give EBADMSG.  Each case pulls into a fresh cache.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/regservers.sh"

need_fuse
start_registry
push_busybox test/busybox:1
start_fault_proxy "$REGISTRY" --require-basic "carol:Pr0xy-pass"
host=127.0.0.1:$PROXY_PORT
ref=$host/test/busybox:1
export DOCKER_CONFIG=$WORK/docker
mkdir -p "$DOCKER_CONFIG"
auth_file "$DOCKER_CONFIG/config.json" "$host" carol "Pr0xy-pass"
layer=$(registry_manifest test/busybox:1 | python3 -c 'import json, sys; print(json.load(sys.stdin)["layers"][0]["digest"])')

# pull_case NAME MODE_JSON: a fresh mount and cache, the proxy in MODE,
# one pull that must succeed; leaves the proxy log lines of the case in
# $WORK/case-NAME.log.
pull_case() {
    local name=$1 start
    proxy_mode "$2"
    : >"$PROXY_LOG"
    CACHE=$WORK/cache-$name EVENTS=$WORK/events-$name.log
    mount_pullfs --insecure-registry "$host"
    start=$SECONDS
    assert_eq hi "$(chroot "$MNT/images/$ref" /bin/echo hi)" "$name: chroot into the image"
    CASE_SECONDS=$((SECONDS - start))
    wait_event Pulled "$ref"
    unmount_pullfs
    cp "$PROXY_LOG" "$WORK/case-$name.log"
}

count() { grep -c "$1" "$WORK/case-$2.log" || true; }

pull_case cut '{"cut": 1}'
assert_eq 1 "$(count '"action": "cut"' cut)" "cut transfers"
grep "$layer" "$WORK/case-cut.log" | grep -q '"range": "bytes=[1-9][0-9]*-"' ||
    fail "the cut layer was not resumed with a Range request: $(cat "$WORK/case-cut.log")"
log "cut: $(grep -c "$layer" "$WORK/case-cut.log") requests for the layer"

pull_case norange '{"cut": 1, "ignore_range": true}'
grep "$layer" "$WORK/case-norange.log" | grep '"range": "bytes=' | grep -q '"status": 200' ||
    fail "no Range request answered with 200"

pull_case 503 '{"fail503": 2}'
assert_eq 2 "$(count '"action": "503"' 503)" "503 answers"

pull_case 429 '{"fail429": 1, "retry_after": 2}'
assert_eq 1 "$(count '"action": "429"' 429)" "429 answers"
[ "$CASE_SECONDS" -ge 2 ] || fail "the pull after a 429 with Retry-After: 2 took ${CASE_SECONDS}s"

pull_case redirect '{"redirect": true}'
[ "$(count '"action": "307"' redirect)" -ge 2 ] || fail "blob GETs were not redirected"
grep '"port": "main"' "$WORK/case-redirect.log" | grep -q '"auth": true' || fail "no Authorization reached the proxy"
grep '"port": "redirect"' "$WORK/case-redirect.log" | grep -q . || fail "the redirect target saw no request"
! grep '"port": "redirect"' "$WORK/case-redirect.log" | grep -q '"auth": true' ||
    fail "Authorization followed the redirect to another host:port"

# ---- corrupt bytes: EBADMSG, not retried into success, nothing kept
proxy_mode '{"corrupt": true}'
CACHE=$WORK/cache-corrupt EVENTS=$WORK/events-corrupt.log
mount_pullfs --insecure-registry "$host"
assert_errno EBADMSG "$MNT/images/$ref"
wait_event Failed "$ref"
assert_eq EBADMSG "$(events field Failed "$ref" errno)" "errno of the Failed event"
unmount_pullfs
! find "$CACHE" -name "*${layer#sha256:}*" | grep -q . || fail "the corrupt layer was kept in the cache"

assert_no_secret "Pr0xy-pass" "$WORK"/events*.log "$PULLFS_LOG"
log "PASS"

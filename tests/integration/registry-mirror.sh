#!/bin/bash
# A pull-through cache (docker-registry in proxy mode) as a mirror, set in
# a [registry "..."] section of the config file: images come through the
# mirror; two mounts with separate caches make the upstream serve each
# blob once; with the mirror stopped, pulls fall through to the upstream.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/regservers.sh"

need_fuse
start_registry
push_busybox test/busybox:1
start_registry_as MIRROR "$WORK/mirror-storage" "proxy:
  remoteurl: http://$REGISTRY"
ref=$REGISTRY/test/busybox:1

cat >"$WORK/pullfs.conf" <<EOF2
# the upstream speaks plain HTTP
insecure-registry = $REGISTRY

[registry "$REGISTRY"]
# a mirror that lacks the content or is down passes the request on
mirror = http://127.0.0.1:$MIRROR_PORT  capabilities=pull,resolve  insecure
EOF2

blob_gets() { grep -cE "\"GET /v2/test/busybox/blobs/$1" "$REGISTRY_LOG" || true; }
mirror_gets() { grep -cE '"GET /v2/test/busybox/(blobs|manifests)/' "$MIRROR_LOG" || true; }

digests=$(registry_manifest test/busybox:1 | python3 -c '
import json, sys
m = json.load(sys.stdin)
print(m["config"]["digest"])
for l in m["layers"]: print(l["digest"])')

# ---- node A and node B, each with its own cache.  distribution's proxy
# fetches a blob it does not have twice from its remote (one copy streams
# to the client, one goes to its storage), so the measure is: node B costs
# the upstream no blob transfer at all.
upstream_blob_gets() { for d in $digests; do blob_gets "$d"; done | paste -sd' '; }
declare -A after
for node in a b; do
    CACHE=$WORK/cache-$node EVENTS=$WORK/events-$node.log
    mount_pullfs --config "$WORK/pullfs.conf"
    assert_eq hi "$(chroot "$MNT/images/$ref" /bin/echo hi)" "node $node: chroot into the image"
    wait_event Pulled "$ref"
    unmount_pullfs
    after[$node]=$(upstream_blob_gets)
    log "after node $node: mirror requests $(mirror_gets), upstream blob GETs per blob: ${after[$node]}"
done
[ "$(mirror_gets)" -ge 4 ] || fail "the mirror served $(mirror_gets) requests, expected the pulls of both nodes"
assert_eq "${after[a]}" "${after[b]}" "upstream blob GETs after node B (vs after node A)"
for n in ${after[b]}; do
    [ "$n" -ge 1 ] && [ "$n" -le 2 ] || fail "upstream blob GETs per blob: ${after[b]}"
done
grep -q 'ns=' "$MIRROR_LOG" || fail "no ?ns= in the requests to the mirror"

# ---- the mirror down: straight to the upstream
stop_registry_as MIRROR
before=$(registry_requests)
CACHE=$WORK/cache-c EVENTS=$WORK/events-c.log
mount_pullfs --config "$WORK/pullfs.conf"
start=$SECONDS
assert_eq hi "$(chroot "$MNT/images/$ref" /bin/echo hi)" "chroot with the mirror down"
log "pull with the mirror down took $((SECONDS - start)) s"
unmount_pullfs
[ "$(registry_requests)" -gt "$before" ] || fail "the upstream saw no requests with the mirror down"

# ---- a bad config line names file and line
printf '[registry "%s"]\nmirror = http://127.0.0.1:1\n' "$REGISTRY" >"$WORK/bad.conf"
rc=0
"$PULLFS" --config "$WORK/bad.conf" "$MNT" 2>"$WORK/bad.err" || rc=$?
assert_eq 2 "$rc" "exit status with a bad config"
assert_contains "bad.conf:2:" "$(cat "$WORK/bad.err")" "error message"
log "PASS"

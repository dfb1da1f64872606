#!/bin/bash
# A pull that waits for a registry holds up neither `pullfsctl rm` nor a
# collection of names in other directories: they return while it still
# waits, and it completes right afterwards with what it counted on.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
start_registry
push_busybox test/busybox:1
# an image of its own (its own config), whose config waits at the
# registry while $WORK/go is missing
for name in slow/held; do
    mkdir -p "$WORK/stage-${name%%/*}/held"
    echo "$name" >"$WORK/stage-${name%%/*}/held/id"
    tar -C "$WORK/stage-${name%%/*}" -cf "$WORK/${name%%/*}.tar" held
    py "$INTEGRATION_DIR/rawpush.py" "$REGISTRY" "$name:1" "$WORK/${name%%/*}.tar" >/dev/null ||
        fail "cannot push $name:1"
done
config_of() { registry_manifest "$1" | py -c 'import json, sys; print(json.load(sys.stdin)["config"]["digest"])'; }
gates=()
for name in slow/held; do
    gates+=(--gate "GET /v2/$name/blobs/$(config_of "$name:1")=$WORK/go")
done
start_slowproxy "${gates[@]}"
mount_pullfs --insecure-registry "$PROXY" --gc-min-age 0 --low-speed-timeout 600
images=$MNT/images/$PROXY
n_layers() { ls "$CACHE/layers" | wc -l; }
ctl() { timeout 60 "$PULLFSCTL" -m "$MNT" "$@"; }

# held REF: the lookup of REF in the background, held at the registry
held() {
    stat "$images/$1" >/dev/null 2>&1 &
    HELD=$!
    track_pid "$HELD"
    local repo=${1%:*}
    _held() { grep -q "^held GET /v2/$repo/blobs/" "$PROXY_LOG"; }
    wait_for 30 _held || fail "the lookup of $1 did not reach the registry"
}

ls "$images/test/busybox:1/bin" >/dev/null || fail "lookup of busybox:1"
wait_published
before=$(n_layers)
held slow/held:1
out=$(ctl rm "$PROXY/test/busybox:1" 2>&1) || fail "pullfsctl rm while a pull waits for the registry: $out"
_pid_gone "$HELD" && fail "the held pull ended before rm returned (the test proves nothing)"
out=$(ctl gc 2>&1) || fail "pullfsctl gc while a pull waits for the registry: $out"
_pid_gone "$HELD" && fail "the held pull ended before gc returned"
log "rm and gc returned while a pull waited; layers $before -> $(n_layers)"
[ "$(n_layers)" -lt "$before" ] || fail "the removed image's layers stayed ($before)"
touch "$WORK/go"
wait_for 60 _pid_gone "$HELD" || fail "the held pull did not end"
wait "$HELD" || fail "the held pull failed"
assert_eq "slow/held" "$(cat "$images/slow/held:1/held/id")" "content of the pull held across rm and gc"

unmount_pullfs
log "PASS"

#!/bin/bash
# A pull that waits for a registry holds up neither `pullfsctl rm` nor a
# collection: they return while it still waits, and it completes right
# afterwards with what it counted on.  Its lookup holds its directory in
# the kernel, where dropping the dentry of a removed name waits for it:
# a name removed there goes at once too, and what its image is made from,
# which that dentry may still reach, stays until the kernel has dropped
# it; the next collection after that deletes it.  After a restart, the
# dentries of images the previous process served are dropped before a
# collection too, and a lookup held beside one holds up neither
# `pullfsctl gc` nor an upgrade, whose notifications wait for it: the
# next process answers that lookup.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/restartlib.sh"

need_fuse
start_registry
push_busybox test/busybox:1
push_busybox test/other:1
# two images of their own (each its own config), whose configs wait at
# the registry while $WORK/go is missing
for name in slow/held test/held test/late; do
    stage=$WORK/stage-${name//\//-}
    mkdir -p "$stage/held"
    echo "$name" >"$stage/held/id"
    tar -C "$stage" -cf "$stage.tar" held
    py "$INTEGRATION_DIR/rawpush.py" "$REGISTRY" "$name:1" "$stage.tar" >/dev/null ||
        fail "cannot push $name:1"
done
config_of() { registry_manifest "$1" | py -c 'import json, sys; print(json.load(sys.stdin)["config"]["digest"])'; }
gates=()
for name in slow/held test/held test/late; do
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

# ---- a pull held in another directory --------------------------------
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
rm -f "$WORK/go"

# ---- a pull held in the same directory ---------------------------------
ls "$images/test/other:1/bin" >/dev/null || fail "lookup of other:1"
wait_published
other_layers=$(registry_manifest test/other:1 | py -c 'import json, sys; print(" ".join(l["digest"].split(":")[1] for l in json.load(sys.stdin)["layers"]))')
other_left() { local n=0 h; for h in $other_layers; do [ -e "$CACHE/layers/$h" ] && n=$((n + 1)); done; echo "$n"; }
[ "$(other_left)" -gt 0 ] || fail "other:1's layers are not in the cache ($(ls "$CACHE/layers"))"
before=$(other_left)
held test/held:1
out=$(ctl rm "$PROXY/test/other:1" 2>&1) || fail "pullfsctl rm of a name beside a held lookup: $out"
_pid_gone "$HELD" && fail "the held lookup ended before rm returned"
ctl gc >/dev/null 2>&1 || fail "pullfsctl gc beside a held lookup"
assert_eq "$before" "$(other_left)" "layers of a removed image whose dentry the kernel may still hold"
touch "$WORK/go"
wait_for 60 _pid_gone "$HELD" || fail "the held lookup did not end"
wait "$HELD" || fail "the held lookup failed"
_collected() {
    ctl gc >/dev/null 2>&1
    [ "$(other_left)" = 0 ]
}
wait_for 30 _collected || fail "layers of the removed image left once the lookup ended: $(other_left)"
unmount_pullfs
rm -f "$WORK/go"

# ---- after a restart: an image of the previous process beside a held
# lookup, then an upgrade while a notification waits for that lookup ---
mount_pullfs --supervise --insecure-registry "$PROXY" --gc-min-age 0 --low-speed-timeout 600
ls "$images/test/busybox:1/bin" >/dev/null || fail "lookup of busybox:1 under the supervisor"
nothing() { :; }
kill_serving 1 nothing
ls "$images/test/other:1/bin" >/dev/null || fail "lookup of other:1 after the restart"
# forty more names of one image, for one collection to remove while the
# notifier waits for the held lookup's directory
accept=(-H "Accept: application/vnd.oci.image.manifest.v1+json"
    -H "Accept: application/vnd.docker.distribution.manifest.v2+json")
curl -sf "${accept[@]}" -D "$WORK/mhead" -o "$WORK/manifest" "http://$REGISTRY/v2/test/busybox/manifests/1" ||
    fail "cannot read busybox:1's manifest"
mtype=$(awk -F': ' 'tolower($1) == "content-type" { print $2 }' "$WORK/mhead" | tr -d '\r')
for i in $(seq 1 40); do
    curl -sf -X PUT -H "Content-Type: $mtype" --data-binary @"$WORK/manifest" \
        "http://$REGISTRY/v2/test/busybox/manifests/n$i" >/dev/null || fail "cannot tag busybox:n$i"
    [ -d "$images/test/busybox:n$i/bin" ] || fail "lookup of busybox:n$i"
done
held test/late:1
out=$(ctl rm "$PROXY/test/other:1" 2>&1) || fail "pullfsctl rm beside a held lookup: $out"
t0=$(now)
out=$(ctl gc --to 1 2>&1) || fail "pullfsctl gc after a restart, beside a held lookup: $out"
_pid_gone "$HELD" && fail "the held lookup ended before gc returned"
log "gc: $(printf '%s' "$out" | grep -o 'busybox:n[0-9]*' | sort -u | wc -l) names removed in $(seconds_since "$t0") s beside the held lookup"
old=$(serving pid)
out=$(ctl upgrade 2>&1) || fail "pullfsctl upgrade while a notification waits for a held lookup: $out"
wait_for 30 _replaced "$old" || fail "serving process $old not replaced while a lookup was held"
_pid_gone "$HELD" && fail "the held lookup ended before the upgrade completed"
log "gc, rm and an upgrade went through while a lookup beside them was held"
touch "$WORK/go"
wait_for 60 _pid_gone "$HELD" || fail "the held lookup did not end after the upgrade"
wait "$HELD" || fail "the lookup held across the upgrade failed"
assert_eq "test/late" "$(cat "$images/test/late:1/held/id")" "content of the lookup held across the upgrade"
unmount_pullfs
log "PASS"

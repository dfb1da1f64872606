#!/bin/bash
# Content pulled with credentials is not handed out by digest.
# Layers and configs are shared by digest, so a manifest that
# anybody pushes to a registry of their own, naming the digests of a
# private image's blobs, would be served from the cache.  A pull reuses a
# blob that only pulls with credentials brought in once its own repository
# has it.  A HEAD of the blob there is that proof only on the registry host
# of a pull with credentials that had it (its own authorisation decides);
# anywhere else a HEAD proves nothing (the attacker's registry below says
# yes to every digest), and the blob is fetched and checked against its
# digest: the registry's 404 fails the pull with ENOENT.  A public image
# from another registry that shares a layer with a private one costs a
# GET; one that shares a layer a pull without credentials brought costs
# nothing.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/regservers.sh"

need_fuse
need_cmd setpriv htpasswd
start_registry
push_edge secretteam/secretproj:1
push_busybox secretteam/bb:1
push_busybox test/base:1
push_edge secretteam/twin:1
mapfile -t blobs < <(image_blobs secretteam/secretproj:1)
config=${blobs[0]}
layers=("${blobs[@]:1}")
mapfile -t base_blobs < <(image_blobs test/base:1)

pass='Lay3r-Pa55'
start_private_registry alice "$pass"
host=$PRIVATE_HOST

# ---- the attacker's registry, anonymous, with storage of its own: the
# same images, then the private blobs unlinked from the repositories, so
# that its manifests name blobs it does not have.
start_registry_as ATT "$WORK/att-storage"
att=127.0.0.1:$ATT_PORT
public_registry=$REGISTRY
REGISTRY=$att
push_edge attacker/copy:1
push_edge attacker/cfg:1
push_busybox other/bb:1
REGISTRY=$public_registry
unlink_blob() {
    local code
    code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "http://$att/v2/$1/blobs/$2")
    assert_eq 202 "$code" "DELETE of $2 in $1"
    code=$(curl -s -o /dev/null -w '%{http_code}' -I "http://$att/v2/$1/blobs/$2")
    assert_eq 404 "$code" "HEAD of $2 in $1 once unlinked"
}
for l in "${layers[@]}"; do unlink_blob attacker/copy "$l"; done
unlink_blob attacker/cfg "$config"

# pullfs sees the attacker's registry through a proxy that answers 200 to
# every blob HEAD, as a registry its user runs may.
ATTP_LOG=$WORK/attproxy.log
echo '{"head_yes": true}' >"$WORK/attproxy-control.json"
_start_py_server faultproxy.py "$WORK/attproxy.port" "$WORK/attproxy.err" \
    --upstream "$att" --log "$ATTP_LOG" --control "$WORK/attproxy-control.json"
read -r ATTP_PORT _ <"$WORK/attproxy.port"
att=127.0.0.1:$ATTP_PORT
code=$(curl -s -o /dev/null -w '%{http_code}' -I "http://$att/v2/nobody/blobs/sha256:$(printf '%064d' 0)")
assert_eq 200 "$code" "HEAD of a blob nobody has through the attacker's proxy"

# att_count METHOD PATH: requests pullfs made to the attacker's registry.
att_count() {
    py -c 'import json, sys
print(sum(1 for l in open(sys.argv[1]) if (lambda j: j["method"] == sys.argv[2] and j["path"] == sys.argv[3])(json.loads(l))))' \
        "$ATTP_LOG" "$1" "$2"
}

# A mirror-like proxy of the public registry that may refuse blob HEADs.
start_fault_proxy "$REGISTRY"
proxy=127.0.0.1:$PROXY_PORT

mount_pullfs -o allow_other --insecure-registry "$host" --insecure-registry "$att" \
    --insecure-registry "$proxy" --auth-file "$WORK/auth.json" \
    --private-access-rule "$host/secretteam/*=1000" --gc-min-age 0

priv=$host/secretteam/secretproj:1
assert_eq edge "$(cat "$MNT/images/$priv/etc/hostname")" "root reads the private image"
wait_event Pulled "$priv"
for b in "$config" "${layers[@]}"; do
    assert_eq "$host/secretteam/secretproj" "$(cat "$CACHE/proofs/${b#sha256:}")" "proof of $b"
done

# ---- another repository of the same registry host that has the blobs: a
# HEAD there with the credentials is proof enough, no GET.
pmark=$(wc -l <"$PRIVATE_LOG")
twin=$host/secretteam/twin:1
assert_eq edge "$(cat "$MNT/images/$twin/etc/hostname")" "a private image of the same host sharing the blobs"
priv_count() { tail -n +"$((pmark + 1))" "$PRIVATE_LOG" | grep -F "\"$1 $2" | grep -F '" 200 ' | grep -cF "\"pullfs/" || true; }
for b in "$config" "${layers[@]}"; do
    assert_eq 0 "$(priv_count GET "/v2/secretteam/twin/blobs/$b")" "GETs of $b in the twin repository"
    assert_eq 1 "$(priv_count HEAD "/v2/secretteam/twin/blobs/$b")" "HEADs of $b in the twin repository"
    grep -qx "$host/secretteam/twin" "$CACHE/proofs/${b#sha256:}" || fail "no proof of $b for the twin"
done

# ---- a manifest naming the private config from a repository without it
cfg=$att/attacker/cfg:1
assert_eq ENOENT "$(errno_of "$MNT/images/$cfg/etc/hostname")" "the attacker's image naming the private config"
assert_eq 0 "$(att_count HEAD "/v2/attacker/cfg/blobs/$config")" "HEADs of the private config"
assert_eq 1 "$(att_count GET "/v2/attacker/cfg/blobs/$config")" "GETs of the private config"
assert_eq 0 "$(att_count HEAD "/v2/attacker/cfg/blobs/${layers[0]}")" "HEADs of layers after the config failed"

# ---- a user names the private layers from their own registry, which
# says yes to every HEAD: not served; the blobs were asked for, and it has
# not got them.
as_nobody() { setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; }
copy=$att/attacker/copy:1
got=$(as_nobody timeout -k 5 120 python3 -c '
import errno, os, sys
try:
    os.stat(sys.argv[1])
    print("OK")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))' "$MNT/images/$copy/etc/hostname")
assert_eq ENOENT "$got" "uid 65534 on the attacker's image naming private layers"
wait_event Failed "$copy"
assert_eq ENOENT "$(events field Failed "$copy" errno)" "errno of the Failed event"
gets=0
for l in "${layers[@]}"; do
    assert_eq 0 "$(att_count HEAD "/v2/attacker/copy/blobs/$l")" "HEADs of private layer $l in the attacker's registry"
    gets=$((gets + $(att_count GET "/v2/attacker/copy/blobs/$l")))
done
[ "$gets" -ge 1 ] || fail "no GET of a private layer in the attacker's registry"
grep -F "\"GET /v2/attacker/copy/blobs/" "$ATT_LOG" | grep -q '" 404 ' ||
    fail "the attacker's registry did not answer 404 to the GET"
# The config is in that repository: fetched and checked, it is public from
# then on (an anonymous pull had it).
assert_eq 0 "$(att_count HEAD "/v2/attacker/copy/blobs/$config")" "HEADs of the config of $copy"
assert_eq 1 "$(att_count GET "/v2/attacker/copy/blobs/$config")" "GETs of the config of $copy"
grep -qx '\*' "$CACHE/proofs/${config#sha256:}" || fail "the config the attacker had is not public"
for l in "${layers[@]}"; do
    grep -qx '\*' "$CACHE/proofs/${l#sha256:}" && fail "layer $l was made public"
done

# ---- the same image, pulled without credentials from another registry
# that has it: a GET per private layer, no HEAD, and the blobs are public
# from then on.
mark=$(registry_mark)
open=$REGISTRY/secretteam/secretproj:1
assert_eq edge "$(cat "$MNT/images/$open/etc/hostname")" "the image pulled anonymously"
# (The config is public already: the attacker's registry had it.)
assert_eq "${#layers[@]}" "$(registry_count GET /v2/secretteam/secretproj/blobs/ "$mark")" "blob GETs of a public image sharing the private layers"
assert_eq 0 "$(registry_count HEAD /v2/secretteam/secretproj/blobs/ "$mark")" "blob HEADs of a public image sharing the private layers"
for b in "${blobs[@]}"; do
    grep -qx '\*' "$CACHE/proofs/${b#sha256:}" || fail "blob $b is not public after an anonymous pull"
done

# ---- a registry that does not answer HEAD for blobs: the private blob is
# fetched whole (and checked against its digest), and the pull works.
assert_eq OK "$(errno_of "$MNT/images/$host/secretteam/bb:1/bin/busybox")" "root pulls a private busybox"
proxy_mode '{"no_blob_head": true}'
mapfile -t bb_blobs < <(image_blobs secretteam/bb:1)
assert_eq OK "$(errno_of "$MNT/images/$proxy/secretteam/bb:1/bin/busybox")" "the same image through a registry without blob HEADs"
for b in "${bb_blobs[@]}"; do
    assert_eq 1 "$(py -c 'import json, sys
print(sum(1 for l in open(sys.argv[1]) if (lambda j: j["method"] == "GET" and j["path"].endswith(sys.argv[2]))(json.loads(l))))' "$PROXY_LOG" "/blobs/$b")" \
        "GETs of $b after a refused HEAD"
    grep -qx '\*' "$CACHE/proofs/${b#sha256:}" || fail "blob $b is not public after an anonymous pull"
done

# ---- a public base layer: shared with no request at all
assert_eq OK "$(errno_of "$MNT/images/$REGISTRY/test/base:1/bin/busybox")" "the public base image"
assert_eq OK "$(errno_of "$MNT/images/$att/other/bb:1/bin/busybox")" "another image of the same layers"
for b in "${base_blobs[@]}"; do
    assert_eq 0 "$(att_count GET "/v2/other/bb/blobs/$b")" "GETs of shared public blob $b"
    assert_eq 0 "$(att_count HEAD "/v2/other/bb/blobs/$b")" "HEADs of shared public blob $b"
done


# ---- GC: the proofs go with what they prove, and only those (the base
# image, held open, stays with its proofs)
exec 7<"$MNT/images/$REGISTRY/test/base:1/bin/busybox"
before=$(ls "$CACHE/proofs" | wc -l)
PYTHONPATH=$INTEGRATION_DIR py - "$CACHE/control.sock" "$att/other/bb:1" <<'PY' || fail "gc over the control socket"
import sys
import ctlsock
r = ctlsock.ask(sys.argv[1], {"op": "gc", "to_bytes": 1})
assert r["ok"] and sys.argv[2] in r["removed"], r
PY
after=$(ls "$CACHE/proofs" | wc -l)
[ "$after" -lt "$before" ] || fail "GC left all $before proofs"
for b in "${base_blobs[@]}"; do
    grep -qx '\*' "$CACHE/proofs/${b#sha256:}" || fail "the proof of $b, still cached, went"
done
for f in "$CACHE"/proofs/*; do
    h=${f##*/}
    [ -e "$CACHE/layers/$h" ] || [ -e "$CACHE/blobs/sha256/$h" ] || fail "a proof of $h, which GC removed"
done
for b in "${layers[@]}"; do
    [ -e "$CACHE/layers/${b#sha256:}" ] || [ ! -e "$CACHE/proofs/${b#sha256:}" ] ||
        fail "the proof of removed layer $b is left"
done
exec 7<&-

unmount_pullfs
events check >&2 || fail "malformed events in $EVENTS"
log "PASS"

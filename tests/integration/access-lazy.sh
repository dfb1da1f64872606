#!/bin/bash
# A lazy image's table of contents does not hand out a private image's
# files.  A partial pull links a file whose content
# digest the content store holds instead of fetching it; a zstd:chunked
# table of contents anybody can push names such digests, so only content
# that a pull without credentials brought is linked.  Here the attacker's
# registry holds the private image's files as zstd:chunked, then the
# files' bytes are blanked in its storage: it has the table of contents
# and nothing else.  A user who reads a file of it through pullfs must get
# an error, never the private bytes.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/regservers.sh"

need_fuse
need_cmd setpriv htpasswd
start_registry
push_edge secretteam/secretproj:1
pass='Lazy-Pa55'
start_private_registry alice "$pass"
host=$PRIVATE_HOST

# ---- the attacker's registry: the private image's files as zstd:chunked
start_registry_as ATT "$WORK/att-storage"
att=127.0.0.1:$ATT_PORT
plain=$WORK/edge-plain
_skopeo copy --dest-decompress "oci:$(layout_of edge):1" "dir:$plain"
_skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
    "dir:$plain" "docker://$att/attacker/chunked:1"
public_registry=$REGISTRY
REGISTRY=$att
registry_manifest attacker/chunked:1 >"$WORK/chunked.json"
REGISTRY=$public_registry
# Everything before each layer's table of contents (the files' frames)
# becomes zeros in the registry's storage: same size, same table.
py - "$WORK/chunked.json" "$WORK/att-storage" <<'EOF' || fail "blanking the attacker's blobs"
import json, os, sys
m = json.load(open(sys.argv[1]))
n = 0
for l in m["layers"]:
    a = l.get("annotations", {})
    pos = a.get("io.github.containers.zstd-chunked.manifest-position") or \
        a.get("io.containers.zstd-chunked.manifest-position")
    assert pos, "no zstd:chunked table of contents in %s" % l["digest"]
    off = int(pos.split(":")[0])
    h = l["digest"].split(":")[1]
    path = os.path.join(sys.argv[2], "docker/registry/v2/blobs/sha256", h[:2], h, "data")
    with open(path, "r+b") as f:
        f.write(bytes(off))
    n += 1
assert n >= 1
EOF

mount_pullfs -o allow_other --insecure-registry "$host" --insecure-registry "$att" \
    --auth-file "$WORK/auth.json" --private-access-rule "$host/secretteam/*=1000"

priv=$host/secretteam/secretproj:1
cat "$MNT/images/$priv/large" >"$WORK/private-large" || fail "root reads the private image"
[ "$(wc -c <"$WORK/private-large")" = 5242880 ] || fail "the private /large has $(wc -c <"$WORK/private-large") bytes"
wait_event Pulled "$priv"

# ---- a user reads the attacker's image: its table of contents names the
# private files; they are fetched (blank: refused, EBADMSG), not linked.
as_nobody() { setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; }
copy=$att/attacker/chunked:1
as_nobody timeout -k 5 120 cat "$MNT/images/$copy/large" >"$WORK/got" 2>"$WORK/got.err" &&
    fail "uid 65534 read the attacker's /large: $(wc -c <"$WORK/got") bytes"
grep -qE "Bad message|Input/output error" "$WORK/got.err" || fail "reading the attacker's /large: $(cat "$WORK/got.err")"
cmp -s "$WORK/got" "$WORK/private-large" && fail "the private /large was served"
[ ! -s "$WORK/got" ] || fail "$(wc -c <"$WORK/got") bytes of the attacker's /large were served"
grep -F '"PartialPull"' "$EVENTS" | grep -qF "$copy" && fail "a PartialPull of $copy: $(grep -F "$copy" "$EVENTS" | grep PartialPull)"
grep -F '"GET /v2/attacker/chunked/blobs/' "$ATT_LOG" | grep -q '" 206 ' ||
    fail "no range of the attacker's layers was fetched"
[ "$(metric pullfs_lazy_files_linked_total)" = 0 ] || fail "files linked: $(metric pullfs_lazy_files_linked_total)"

unmount_pullfs
events check >&2 || fail "malformed events in $EVENTS"
log "PASS"

#!/bin/bash
# Private names stay private: on an allow_other mount, a
# user who may not see an image pulled with credentials finds neither its
# name nor its digest in MOUNT/images/ (at any level: host, repository,
# tag) nor in .pullfs/status, while root and the users its
# --private-access-rule admits see them as before.  The kernel keeps a
# directory's listing for every user: listings are read in turns by users
# who see different names, each right after the other, so that a listing
# the kernel kept for one would show in the other's.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/regservers.sh"
source "$INTEGRATION_DIR/ctl.sh"

need_fuse
need_pullfsctl
need_cmd setpriv htpasswd
start_registry
push_busybox test/public:1
push_edge secretteam/secretproj:1

pass='L1st-Pa55'
start_private_registry alice "$pass"
host=$PRIVATE_HOST

priv=$host/secretteam/secretproj:1
pub=$REGISTRY/test/public:1
digest=$(manifest_digest secretteam/secretproj:1)

as() {
    local uid=$1
    shift
    setpriv --reuid "$uid" --regid "$uid" --clear-groups "$@"
}
# list WHO DIR: the names in DIR as that user (root: 0), one line.
list() {
    as "$1" ls -1 "$2" 2>&1 | sort | tr '\n' ' '
}

mount_pullfs -o allow_other --insecure-registry "$host" --auth-file "$WORK/auth.json" \
    --private-access-rule "$host/secretteam/*=1000"

assert_eq edge "$(cat "$MNT/images/$priv/etc/hostname")" "root reads the private image"
assert_eq OK "$(errno_of "$MNT/images/$pub/etc/hostname")" "root reads the public image"
wait_event Pulled "$priv"

# ---- each level above the private image, read in turns: root, nobody,
# the admitted user, nobody, root.
check_levels() {
    local who=$1 sees=$2 lvl
    for lvl in "" "$host" "$host/secretteam"; do
        out=$(list "$who" "$MNT/images/$lvl")
        case $lvl in
        "") want=$host ;;
        "$host") want=secretteam ;;
        *) want=secretproj:1 ;;
        esac
        if [ "$sees" = yes ]; then
            assert_contains "$want" "$out" "uid $who lists images/$lvl"
        else
            assert_not_contains "$want" "$out" "uid $who lists images/$lvl"
        fi
    done
    # The public image is listed for everybody.
    assert_contains "${REGISTRY}" "$(list "$who" "$MNT/images")" "uid $who lists the public host"
    assert_contains public:1 "$(list "$who" "$MNT/images/$REGISTRY/test")" "uid $who lists the public image"
}
for round in 1 2; do
    check_levels 0 yes
    check_levels 65534 no
    check_levels 1000 yes
    check_levels 65534 no
done
# find(1) as nobody over the whole namespace: no trace of it.
out=$(as 65534 find "$MNT/images" -maxdepth 3 2>&1 || true)
assert_not_contains secretproj "$out" "find as uid 65534"
assert_not_contains secretteam "$out" "find as uid 65534"
assert_contains public:1 "$out" "find as uid 65534"

# ---- .pullfs/status: no reference, no digest for nobody
as 65534 cat "$MNT/.pullfs/status" >"$WORK/status-nobody.json"
as 1000 cat "$MNT/.pullfs/status" >"$WORK/status-1000.json"
cat "$MNT/.pullfs/status" >"$WORK/status-root.json"
assert_not_contains secretproj "$(cat "$WORK/status-nobody.json")" "status as uid 65534"
assert_not_contains "${digest#sha256:}" "$(cat "$WORK/status-nobody.json")" "status as uid 65534"
assert_contains "$pub" "$(cat "$WORK/status-nobody.json")" "status as uid 65534"
assert_eq 1 "$(json_get "$WORK/status-nobody.json" 'len(j["images"])')" "images in the status of uid 65534"
for f in "$WORK/status-root.json" "$WORK/status-1000.json"; do
    assert_contains "$digest" "$(cat "$f")" "status in $f"
    assert_eq 2 "$(json_get "$f" 'len(j["images"])')" "images in $f"
done

# ---- pullfsctl reads the status as the user who runs it: ls and status
# show nobody no trace of it; inspect goes through the control socket,
# which answers root (and the daemon's own user) only.
ctl_ok ls
assert_contains "$priv" "$OUT" "pullfsctl ls as root"
for cmd in ls status "inspect $priv"; do
    out=$(as 65534 "$PULLFSCTL" -m "$MNT" $cmd 2>&1 || true)
    assert_not_contains secretproj:1 "${out//$priv/}" "pullfsctl $cmd as uid 65534"
    assert_not_contains "${digest#sha256:}" "$out" "pullfsctl $cmd as uid 65534"
done
out=$(as 65534 "$PULLFSCTL" -m "$MNT" ls 2>&1)
assert_contains "$pub" "$out" "pullfsctl ls as uid 65534"
out=$(as 1000 "$PULLFSCTL" -m "$MNT" ls 2>&1)
assert_contains "$priv" "$out" "pullfsctl ls as uid 1000"

# ---- once a name of the content is pulled without credentials, it is
# everybody's, and the listings say so at once.
assert_eq edge "$(cat "$MNT/images/$REGISTRY/secretteam/secretproj:1/etc/hostname")" "root pulls it anonymously"
assert_contains secretteam "$(list 65534 "$MNT/images/$host")" "uid 65534 once the content is public"

unmount_pullfs
events check >&2 || fail "malformed events in $EVENTS"
log "PASS"

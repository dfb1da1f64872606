#!/bin/bash
# Private images stay private on an allow_other mount.
# An image pulled with registry credentials is seen only by root and the
# users and groups of its --private-access-rule; everybody else gets
# EACCES on the image path, under any of its names, whoever looked it up
# before (the kernel keeps no lookup of it for another user to reuse), and
# after a restart.  --pull-access-rule says who may cause pulls: others get
# EACCES for what is not cached, and nothing reaches the registry.  Both
# refusals are Warning events naming the uid.  Lookups run as other users
# through setpriv.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/regservers.sh"

need_fuse
need_cmd setpriv htpasswd
start_registry
push_busybox test/busybox:1
push_busybox test/public:1
push_busybox test/open:1
push_edge test/private:1

pass='Acc3ss-Pa55'
start_private_registry alice "$pass"
host=$PRIVATE_HOST

priv=$host/test/private:1
pub=$REGISTRY/test/public:1

# as UID[:GID[:GROUPS]] CMD...: CMD as that user (primary group GID, the
# uid by default; supplementary GROUPS, comma-separated, none by default).
as() {
    local uid gid groups
    IFS=: read -r uid gid groups <<<"$1"
    shift
    local g=(--clear-groups)
    [ -z "$groups" ] || g=(--groups "$groups")
    setpriv --reuid "$uid" --regid "${gid:-$uid}" "${g[@]}" "$@"
}
# errno_as WHO PATH: errno_of as that user.
errno_as() {
    as "$1" timeout -k 5 120 /usr/bin/python3 - "$2" <<'PY'
import errno, os, stat, sys
p = sys.argv[1]
try:
    st = os.stat(p)
    if stat.S_ISDIR(st.st_mode):
        os.listdir(p)
    else:
        open(p, "rb").read(1)
    print("OK")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
PY
}
assert_errno_as() {
    assert_eq "$2" "$(errno_as "$1" "$3")" "uid ${1%%:*} on $3"
}
manifest_gets() { grep -c "GET /v2/$1/manifests/" "$2" || true; }

daemon_args=(-o allow_other --insecure-registry "$host" --auth-file "$WORK/auth.json"
    --private-access-rule "$host/test/*=1000,@4242"
    --pull-access-rule "$REGISTRY/test/open:*=*"
    --pull-access-rule "$REGISTRY/*=1000,@4343")
mount_pullfs "${daemon_args[@]}"

# ---- who may cause a pull: uid 65534 may not pull from $REGISTRY, and the
# registry hears nothing of it; uid 2002 may, by its group 4343.
assert_errno_as 65534 EACCES "$MNT/images/$pub"
wait_event PullDenied "$pub"
assert_eq 65534 "$(events field PullDenied "$pub" uid)" "uid of the PullDenied event"
assert_eq EACCES "$(events field PullDenied "$pub" errno)" "errno of the PullDenied event"
assert_contains "uid 65534" "$(events field PullDenied "$pub" message)" "PullDenied message"
assert_eq 0 "$(manifest_gets test/public "$REGISTRY_LOG")" "manifest GETs of a refused pull"
assert_eq 0 "$(event_count Pulling "$pub")" "Pulling events of a refused pull"
# A rule earlier in the list lets everybody pull test/open.
assert_errno_as 65534 OK "$MNT/images/$REGISTRY/test/open:1/etc/hostname"
assert_errno_as 2002:2002:4343 OK "$MNT/images/$pub/etc/hostname"
wait_event Pulled "$pub"
# Cached now, and pulled without credentials: everybody sees it.
assert_errno_as 65534 OK "$MNT/images/$pub/etc/hostname"

# ---- a pull with credentials is not caused by one who could not see it
assert_errno_as 65534 EACCES "$MNT/images/$priv"
wait_event PullDenied "$priv"
assert_contains "credentials" "$(events field PullDenied "$priv" message)" "PullDenied message"
assert_eq 0 "$(manifest_gets test/private "$PRIVATE_LOG")" "manifest GETs of a refused pull"

# ---- root pulls it with credentials; then users one after the other
assert_eq edge "$(cat "$MNT/images/$priv/etc/hostname")" "root reads the private image"
wait_event Pulled "$priv"
assert_errno_as 65534 EACCES "$MNT/images/$priv"
assert_errno_as 65534 EACCES "$MNT/images/$priv/bin"
assert_errno_as 65534 EACCES "$MNT/images/$priv/added"
# Refused by the kernel, from the ACL pullfs gives the image's root: the
# entry the kernel keeps for the name (root looked it up) serves every
# user, and a failed lookup would make it drop that entry, and the mounts
# below it, for everybody.
acl=$(py - "$MNT/images/$priv" <<'PY'
import os, struct, sys
v = os.getxattr(sys.argv[1], "system.posix_acl_access")
tags = {1: "user:", 2: "user:", 4: "group:", 8: "group:", 16: "mask:", 32: "other:"}
out = []
for o in range(4, len(v), 8):
    tag, perm, ident = struct.unpack_from("<HHI", v, o)
    who = str(ident) if tag in (2, 8) else ""
    out.append("%s%s:%s" % (tags[tag], who, "".join(c if perm & b else "-" for c, b in zip("rwx", (4, 2, 1)))))
print(" ".join(out))
PY
)
for e in user:1000:r-x group:4242:r-x group::--- other::---; do
    [[ " $acl " == *" $e "* ]] || fail "no '$e' in the ACL of $priv: $acl"
done
# Its mode agrees: the group bits are the ACL's mask, nothing for others
# (an image root with no group bits would have the kernel skip the ACL).
assert_eq 750 "$(stat -c %a "$MNT/images/$priv")" "mode of the root of $priv"
assert_eq 755 "$(stat -c %a "$MNT/images/$pub")" "mode of the root of $pub"
# A mount below the image (as a runtime makes for /proc) outlives a
# refused user's walks.
mount -t tmpfs none "$MNT/images/$priv/added" || fail "cannot mount a tmpfs in $priv"
track_mount "$MNT/images/$priv/added"
assert_errno_as 65534 EACCES "$MNT/images/$priv/added"
assert_errno_as 65534 EACCES "$MNT/images/$priv"
mountpoint -q "$MNT/images/$priv/added" || fail "a refused user's lookup detached a mount below $priv"
umount "$MNT/images/$priv/added"
# A process of uid 1000 inside the image stays there; uid 65534 is still
# refused meanwhile.
setpriv --reuid 1000 --regid 1000 --clear-groups \
    sh -c 'cd "$1" && exec sleep 30' sh "$MNT/images/$priv/bin" &
sleeper=$!
track_pid "$sleeper"
assert_errno_as 65534 EACCES "$MNT/images/$priv/bin"
kill "$sleeper"
wait "$sleeper" 2>/dev/null || true

# ---- the same content by another name: a digest, here or on another host
digest=$(manifest_digest test/private:1)
assert_errno_as 65534 EACCES "$MNT/images/$host/test/private@$digest/bin"
# A lookup that reaches pullfs (a name the kernel does not hold yet) is
# logged, naming the uid.
wait_event AccessDenied "$host/test/private@$digest"
assert_eq 65534 "$(events field AccessDenied "$host/test/private@$digest" uid)" "uid of the AccessDenied event"
assert_contains "uid 65534" "$(events field AccessDenied "$host/test/private@$digest" message)" "AccessDenied message"
assert_errno_as 65534 EACCES "$MNT/images/$REGISTRY/test/other@$digest/bin"
assert_errno_as 1000 OK "$MNT/images/$REGISTRY/test/other@$digest/bin"
# ---- and through MOUNT/layers/ (the Additional Layer Store): the layer's
# tree is the image's own (its ACL), its blob and info for readers only.
b64=$(printf %s "$priv" | base64 -w0)
layer=$(registry_manifest test/private:1 | py -c 'import json, sys; print(json.load(sys.stdin)["layers"][0]["digest"])')
assert_eq OK "$(errno_of "$MNT/layers/$b64/$layer/diff")" "root on the layer's tree"
assert_eq OK "$(errno_of "$MNT/layers/$b64/$layer/blob")" "root on the layer's blob"
assert_errno_as 65534 EACCES "$MNT/layers/$b64/$layer/diff"
assert_errno_as 65534 EACCES "$MNT/layers/$b64/$layer/blob"
assert_errno_as 65534 EACCES "$MNT/layers/$b64/$layer/info"
assert_errno_as 1000 OK "$MNT/layers/$b64/$layer/diff"
assert_errno_as 1000 OK "$MNT/layers/$b64/$layer/info"
# Anonymous content stays open to all.
assert_errno_as 65534 OK "$MNT/images/$pub/bin/busybox"

unmount_pullfs

# ---- after a restart, with the private registry gone: the cache
# remembers it was pulled with credentials.
grep -l '"credentials":true' "$CACHE"/refs/* >/dev/null || fail "no reference file records credentials"
stop_registry_as PRIVATE
mount_pullfs "${daemon_args[@]}"
assert_errno_as 65534 EACCES "$MNT/images/$priv/bin"
assert_errno_as 1000 OK "$MNT/images/$priv/bin"
assert_eq OK "$(errno_of "$MNT/images/$priv/bin")" "root after a restart"
# A name a user other than root pulled is kept, with its uid (its bytes
# stay charged to that user): served from the cache, with no pull, to
# whoever may see it.
pub_gets=$(manifest_gets test/public "$REGISTRY_LOG")
grep -l '"uid":2002' "$CACHE"/refs/* >/dev/null || fail "no reference file records the uid of a user's pull"
assert_errno_as 65534 OK "$MNT/images/$pub/etc/hostname"
assert_eq OK "$(errno_of "$MNT/images/$pub/etc/hostname")" "root reads the public image"
assert_eq "$pub_gets" "$(manifest_gets test/public "$REGISTRY_LOG")" "manifest GETs of a user's name after a restart"
# Content pulled with credentials is open to all once a name of it was
# pulled without: anybody could have pulled it so.
assert_errno_as 1000 OK "$MNT/images/$REGISTRY/test/private:1/bin"
assert_errno_as 65534 OK "$MNT/images/$priv/bin"
unmount_pullfs

# ---- options refused with one line and exit 2
for rule in "nopattern" "$host/*=" "=1000" "$host/*=no-such-user-xyz" "$host/*=@no-such-group-xyz"; do
    rc=0
    out=$("$PULLFS" -f --cache "$WORK/c2" --private-access-rule "$rule" "$MNT" 2>&1) || rc=$?
    assert_eq 2 "$rc" "exit status for --private-access-rule '$rule'"
    assert_eq 1 "$(printf '%s\n' "$out" | wc -l)" "lines printed for '$rule'"
done

printf 'private-access-rule = %s/*=@no-such-group-xyz\n' "$host" >"$WORK/bad.conf"
rc=0
out=$("$PULLFS" -f --cache "$WORK/c2" --config "$WORK/bad.conf" "$MNT" 2>&1) || rc=$?
assert_eq 2 "$rc" "exit status for a bad rule in the config file"
assert_contains "$WORK/bad.conf:1:" "$out" "a bad rule in the config file"

events check >&2 || fail "malformed events in $EVENTS"
log "PASS"

#!/bin/bash
# Basic auth against docker-registry with htpasswd: no credentials gives
# EACCES and a Failed event; a config.json given with --auth-file, or
# found in $DOCKER_CONFIG, with the credentials inline or from a
# docker-credential-<name> helper (credHelpers, credsStore), lets the pull
# through; the password never reaches the events log or the daemon's
# output.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/regservers.sh"

need_fuse
need_cmd htpasswd
start_registry
push_busybox test/busybox:1
stop_registry
REGISTRY_PORT=

pass='S3cret-Pa55-w0rd'
start_htpasswd_registry BASIC "$REGISTRY_STORAGE" alice "$pass"
host=127.0.0.1:$BASIC_PORT
ref=$host/test/busybox:1
export DOCKER_CONFIG=$WORK/docker-empty
mkdir -p "$DOCKER_CONFIG"

# ---- no credentials: EACCES
mount_pullfs --insecure-registry "$host"
assert_errno EACCES "$MNT/images/$ref"
wait_event Failed "$ref"
assert_eq EACCES "$(events field Failed "$ref" errno)" "errno of the Failed event"
assert_contains "no credentials" "$(events field Failed "$ref" message)" "Failed message"
unmount_pullfs

# ---- wrong password: EACCES, says the credentials were refused
auth_file "$WORK/wrong.json" "$host" alice wrong-password
CACHE=$WORK/cache-wrong EVENTS=$WORK/events-wrong.log
mount_pullfs --insecure-registry "$host" --auth-file "$WORK/wrong.json"
assert_errno EACCES "$MNT/images/$ref"
wait_event Failed "$ref"
assert_contains "refused" "$(events field Failed "$ref" message)" "Failed message"
unmount_pullfs

# ---- --auth-file with an "auth" entry
auth_file "$WORK/auth.json" "http://$host/v2/" alice "$pass"
CACHE=$WORK/cache-auth EVENTS=$WORK/events-auth.log
mount_pullfs --insecure-registry "$host" --auth-file "$WORK/auth.json"
assert_eq hi "$(chroot "$MNT/images/$ref" /bin/echo hi)" "chroot into the image"
wait_event Pulled "$ref"
unmount_pullfs
# Credentials go with the first request once the host asked for them:
# one 401 for the whole pull, not one per request.
n401=$(grep -c '" 401 ' "$BASIC_LOG" || true)
log "401 answers so far: $n401"

# ---- $DOCKER_CONFIG/config.json, username/password form
printf '{"auths":{"%s":{"username":"alice","password":"%s"}}}\n' "$host" "$pass" >"$DOCKER_CONFIG/config.json"
CACHE=$WORK/cache-default EVENTS=$WORK/events-default.log
mount_pullfs --insecure-registry "$host"
assert_eq hi "$(chroot "$MNT/images/$ref" /bin/echo hi)" "chroot into the image"
unmount_pullfs

# ---- credHelpers / credsStore: docker-credential-<name> get, found in
# the daemon's PATH, asked with the server on stdin.
mkdir -p "$WORK/bin"
cat >"$WORK/bin/docker-credential-pullfstest" <<HELPER
#!/bin/sh
[ "\$1" = get ] || exit 1
read -r server
echo "\$server" >>"$WORK/helper-asked"
printf '{"ServerURL":"%s","Username":"alice","Secret":"%s"}\n' "\$server" "$pass"
HELPER
cat >"$WORK/bin/docker-credential-nothing" <<'HELPER'
#!/bin/sh
echo "credentials not found in native keychain"
exit 1
HELPER
chmod +x "$WORK/bin/docker-credential-pullfstest" "$WORK/bin/docker-credential-nothing"
PULLFS_ENV=("PATH=$WORK/bin:$PATH")
printf '{"credHelpers":{"%s":"pullfstest"}}\n' "$host" >"$DOCKER_CONFIG/config.json"
CACHE=$WORK/cache-helper EVENTS=$WORK/events-helper.log
mount_pullfs --insecure-registry "$host"
assert_eq hi "$(chroot "$MNT/images/$ref" /bin/echo hi)" "chroot with credentials from a credHelper"
unmount_pullfs
grep -q "$host" "$WORK/helper-asked" || fail "the credential helper was not asked for $host"
printf '{"credsStore":"pullfstest"}\n' >"$DOCKER_CONFIG/config.json"
CACHE=$WORK/cache-store EVENTS=$WORK/events-store.log
mount_pullfs --insecure-registry "$host"
assert_eq hi "$(chroot "$MNT/images/$ref" /bin/echo hi)" "chroot with credentials from credsStore"
unmount_pullfs
printf '{"credsStore":"nothing"}\n' >"$DOCKER_CONFIG/config.json"
CACHE=$WORK/cache-nothing EVENTS=$WORK/events-nothing.log
mount_pullfs --insecure-registry "$host"
assert_errno EACCES "$MNT/images/$ref"
unmount_pullfs
PULLFS_ENV=()

for EVENTS in "$WORK"/events*.log; do
    events check >&2 || fail "malformed events in $EVENTS"
done
b64=$(printf 'alice:%s' "$pass" | base64 -w0)
assert_no_secret "$pass" "$WORK"/events*.log "$PULLFS_LOG"
assert_no_secret "$b64" "$WORK"/events*.log "$PULLFS_LOG"
log "PASS"

#!/bin/bash
# Bearer tokens: docker-registry with `token` auth and a token server the
# test runs (RS256, the signing certificate in x5c).  Anonymous tokens for
# public repositories; Basic credentials and an identity token (OAuth2
# refresh-token grant) for the rest; one token per scope for a whole pull;
# a token the registry stops accepting is fetched again on the next 401;
# a token answer over 64 KiB fails the pull with EBADMSG, named as the
# token response it is; no password or token in the events log or the
# daemon's output.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/regservers.sh"

need_fuse
need_cmd openssl
start_registry
push_busybox test/busybox:1
push_busybox test/busybox:2
push_busybox public/busybox:1
stop_registry
REGISTRY_PORT=

openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=pullfs-token \
    -keyout "$WORK/token-key.pem" -out "$WORK/token-cert.pem" >/dev/null 2>&1 || fail "openssl"
pass='T0ken-Pa55word'
refresh='refresh-9f8e7d6c'
start_token_server --key "$WORK/token-key.pem" --cert "$WORK/token-cert.pem" \
    --user "bob:$pass" --refresh-token "$refresh" --jwt-lifetime -54 --huge-prefix huge/
start_registry_as TOKREG "$REGISTRY_STORAGE" "auth:
  token:
    realm: http://127.0.0.1:$TOKEN_PORT/token
    service: pullfs-test
    issuer: pullfs-test-issuer
    rootcertbundle: $WORK/token-cert.pem"
host=127.0.0.1:$TOKREG_PORT
export DOCKER_CONFIG=$WORK/docker-empty
mkdir -p "$DOCKER_CONFIG"

token_requests() { grep -c "\"scope\": \"repository:$1:pull\"" "$TOKEN_LOG" || true; }

# ---- anonymous: public repositories only
EVENTS=$WORK/events-anon.log
mount_pullfs --insecure-registry "$host"
assert_eq hi "$(chroot "$MNT/images/$host/public/busybox:1" /bin/echo hi)" "anonymous pull of public/busybox:1"
assert_eq 1 "$(token_requests public/busybox)" "token requests for public/busybox"
assert_errno EACCES "$MNT/images/$host/test/busybox:1"
wait_event Failed "$host/test/busybox:1"
assert_eq EACCES "$(events field Failed "$host/test/busybox:1" errno)" "errno of the Failed event"
# The token server pads its answer for huge/ past the 64 KiB cap.
assert_errno EBADMSG "$MNT/images/$host/huge/busybox:1"
wait_event Failed "$host/huge/busybox:1"
msg=$(events field Failed "$host/huge/busybox:1" message)
assert_contains "token response from 127.0.0.1:$TOKEN_PORT" "$msg" "Failed event of an oversized token answer"
assert_contains "larger than 65536 bytes" "$msg" "Failed event of an oversized token answer"
# ("manifest: " before it is the step of the pull, which is right.)
assert_not_contains "manifest from" "$msg" "Failed event of an oversized token answer"
unmount_pullfs

# ---- Basic credentials for the token server; one token for the pull
printf '{"auths":{"%s":{"username":"bob","password":"%s"}}}\n' "$host" "$pass" >"$WORK/auth.json"
before=$(token_requests test/busybox)
CACHE=$WORK/cache-basic EVENTS=$WORK/events-basic.log
mount_pullfs --insecure-registry "$host" --auth-file "$WORK/auth.json"
assert_eq hi "$(chroot "$MNT/images/$host/test/busybox:1" /bin/echo hi)" "pull of test/busybox:1 with credentials"
wait_event Pulled "$host/test/busybox:1"
n=$(($(token_requests test/busybox) - before))
assert_eq 1 "$n" "token requests for the whole pull of test/busybox:1 (manifest, config, layer)"
grep -q '"how": "basic"' "$TOKEN_LOG" || fail "the token server saw no Basic credentials"

# The registry stops accepting that token after 6 s (its exp is 54 s in
# the past and the registry allows 60 s of clock skew); the client still
# believes it (expires_in 300): the next pull meets a 401 and must fetch a
# new token instead of failing.
sleep 7
assert_eq hi "$(chroot "$MNT/images/$host/test/busybox:2" /bin/echo hi)" "pull of test/busybox:2 after the token expired"
n=$(($(token_requests test/busybox) - before))
assert_eq 2 "$n" "token requests after the registry refused the cached token"
unmount_pullfs

# ---- identity token: the refresh-token grant, POSTed to the realm
printf '{"auths":{"%s":{"auth":"","identitytoken":"%s"}}}\n' "$host" "$refresh" >"$WORK/auth-idt.json"
CACHE=$WORK/cache-idt EVENTS=$WORK/events-idt.log
mount_pullfs --insecure-registry "$host" --auth-file "$WORK/auth-idt.json"
assert_eq hi "$(chroot "$MNT/images/$host/test/busybox:1" /bin/echo hi)" "pull with an identity token"
grep -q '"how": "refresh_token"' "$TOKEN_LOG" || fail "no refresh-token grant reached the token server"
unmount_pullfs

for EVENTS in "$WORK"/events*.log; do
    events check >&2 || fail "malformed events in $EVENTS"
done
assert_no_secret "$pass" "$WORK"/events*.log "$PULLFS_LOG"
assert_no_secret "$refresh" "$WORK"/events*.log "$PULLFS_LOG"
python3 -c 'import json, sys
for line in open(sys.argv[1]):
    t = json.loads(line).get("token")
    if t: print(t)' "$TOKEN_LOG" >"$WORK/tokens"
[ -s "$WORK/tokens" ] || fail "no tokens issued"
while read -r t; do
    assert_no_secret "$t" "$WORK"/events*.log "$PULLFS_LOG"
    assert_no_secret "${t##*.}" "$WORK"/events*.log "$PULLFS_LOG"
done <"$WORK/tokens"
log "token requests: $(wc -l <"$TOKEN_LOG"), registry requests: $(grep -c '"GET\|"HEAD' "$TOKREG_LOG")"
log "PASS"

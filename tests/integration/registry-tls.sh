#!/bin/bash
# TLS: a registry with a certificate from a CA the test makes.  Without the
# CA, the pull fails with EIO and a Failed event that says the certificate
# does not verify (no fallback to HTTP); with ca-file in the registry's
# section it works; a registry that asks for a client certificate gets
# the one configured.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/regservers.sh"

need_fuse
start_registry
push_busybox test/busybox:1
stop_registry
REGISTRY_PORT=
make_ca "$WORK/pki"
start_registry_as TLS "$REGISTRY_STORAGE" "" "tls:
  certificate: $WORK/pki/server.pem
  key: $WORK/pki/server-key.pem
  clientcas:
    - $WORK/pki/ca.pem" https
host=127.0.0.1:$TLS_PORT
ref=$host/test/busybox:1

# ---- system CAs only: EIO, and the event says why
EVENTS=$WORK/events-noca.log
mount_pullfs
assert_errno EIO "$MNT/images/$ref"
wait_event Failed "$ref"
assert_eq EIO "$(events field Failed "$ref" errno)" "errno of the Failed event"
assert_contains "certificate" "$(events field Failed "$ref" message)" "Failed message"
unmount_pullfs

# ---- the CA, but no client certificate: refused in the handshake
printf '[registry "%s"]\nca-file = %s\n' "$host" "$WORK/pki/ca.pem" >"$WORK/ca.conf"
CACHE=$WORK/cache-ca EVENTS=$WORK/events-ca.log
mount_pullfs --config "$WORK/ca.conf"
assert_errno EIO "$MNT/images/$ref"
unmount_pullfs

# ---- the CA and the client certificate
cat >"$WORK/full.conf" <<EOF2
[registry "$host"]
ca-file = $WORK/pki/ca.pem
client-cert = $WORK/pki/client.pem
client-key = $WORK/pki/client-key.pem
EOF2
CACHE=$WORK/cache-full EVENTS=$WORK/events-full.log
mount_pullfs --config "$WORK/full.conf"
assert_eq hi "$(chroot "$MNT/images/$ref" /bin/echo hi)" "chroot into the image over TLS"
unmount_pullfs
! grep -q '"GET /v2/test' "$TLS_LOG" || true
log "PASS"

#!/bin/bash
# Pull policies (SPEC §3, docs/ensure.md steps 2-3), as a mount shows
# them and as the command line and the config file set them:
#  - Never and not cached: EPERM and a Warning ErrImageNeverPull event;
#  - a pull-policy-rule from a --config file makes one repository prefix
#    Never while the others pull as usual;
#  - the command line wins over the config file, a rule over the mount-wide
#    policy.
# IfNotPresent served from the cache with the registry gone (one "already
# present" event however many lookups), and ":latest" defaulting to Always
# (asked again once the revalidation interval is over, failing when the
# registry is gone), are unit-tested on a fake registry and a hand-moved
# clock: tests/unit/test-ensure.c, test_if_not_present and
# test_always_revalidates.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
start_registry
push_busybox test/busybox:1
push_busybox test/busybox:latest
push_busybox prod/app:1
push_busybox prod/app:latest

bb=$REGISTRY/test/busybox:1
latest=$REGISTRY/test/busybox:latest
prod=$REGISTRY/prod/app:1
prod_latest=$REGISTRY/prod/app:latest

# ---- mount-wide Never: nothing is pulled
mark=$(registry_mark)
mount_pullfs --pull-policy never
assert_errno EPERM "$MNT/images/$bb"
wait_event ErrImageNeverPull "$bb"
assert_eq Warning "$(events field ErrImageNeverPull "$bb" type)" "type of ErrImageNeverPull"
assert_eq EPERM "$(events field ErrImageNeverPull "$bb" errno)" "errno of ErrImageNeverPull"
assert_eq "Container image \"$bb\" is not present with pull policy of Never" \
    "$(events field ErrImageNeverPull "$bb" message)" "message of ErrImageNeverPull"
assert_errno EPERM "$MNT/images/$latest"
wait_event ErrImageNeverPull "$latest"
assert_eq 0 "$(event_count Pulling "$bb")" "Pulling events for $bb under Never"
assert_eq 0 "$(registry_count GET /v2/ "$mark")" "registry GETs under policy Never"
unmount_pullfs

# ---- a rule in the config file: prod/* is Never, the rest pulls
config=$WORK/pullfs.conf
cat >"$config" <<EOF
# written by $TEST_NAME
pull-policy-rule = 127.0.0.1:$REGISTRY_PORT/prod/*=never
EOF
mark=$(registry_mark)
mount_pullfs --config "$config"
assert_errno EPERM "$MNT/images/$prod"
assert_errno EPERM "$MNT/images/$prod_latest"
wait_event ErrImageNeverPull "$prod"
wait_event ErrImageNeverPull "$prod_latest"
assert_eq 0 "$(registry_count GET /v2/prod/ "$mark")" "registry GETs for prod/ (rule: never)"
assert_errno OK "$MNT/images/$bb"
assert_eq busybox "$(cat "$MNT/images/$bb/etc/hostname")" "/etc/hostname of $bb"
assert_errno OK "$MNT/images/$latest"
wait_event Pulled "$bb"
wait_event Pulled "$latest"
assert_eq 0 "$(event_count Failed "$bb")" "Failed events for $bb"
events check >&2 || fail "malformed events in $EVENTS"
unmount_pullfs

# ---- the command line wins over the config file; a rule wins over the
# mount-wide policy: with --pull-policy never and a rule making prod/*
# if-not-present, prod/app:1 pulls and test/busybox:latest does not.
cat >"$config" <<EOF
pull-policy = always
pull-policy-rule = 127.0.0.1:$REGISTRY_PORT/prod/*=if-not-present
EOF
rm -rf "$CACHE"
mount_pullfs --config "$config" --pull-policy never
never_before=$(event_count ErrImageNeverPull "$latest")
assert_errno EPERM "$MNT/images/$latest"
wait_event_count $((never_before + 1)) ErrImageNeverPull "$latest"
assert_errno OK "$MNT/images/$prod"
wait_event Pulled "$prod"
events check >&2 || fail "malformed events in $EVENTS"
unmount_pullfs
log "PASS"

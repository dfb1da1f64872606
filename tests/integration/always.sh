#!/bin/bash
# Policy Always (SPEC §3 step 9, docs/ensure.md steps 3 and 9), with
# --revalidate-interval 1, as a mount shows it: a ":latest" tag re-pushed
# with other content is, once the interval has passed, a new image for a
# new lookup (a second Pulling/Pulled with the new digest), while a file of
# the old image that was open before keeps reading the old content through
# its descriptor.  Revalidation that finds the same digest (a HEAD and
# nothing else), and the interval itself, are unit-tested on a fake
# registry and a hand-moved clock: tests/unit/test-ensure.c,
# test_always_revalidates and test_moved_tag.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
start_registry
push_busybox test/app:latest
digest_a=$(manifest_digest test/app:latest)
bb_sha=$(sha256sum <"$(_static_busybox)" | cut -d' ' -f1)

ref=$REGISTRY/test/app:latest
root=$MNT/images/$ref
mount_pullfs --revalidate-interval 1

assert_eq busybox "$(cat "$root/etc/hostname")" "/etc/hostname of $ref (content A)"
wait_event Pulled "$ref"
assert_eq "$digest_a" "$(events field Pulled "$ref" digest)" "digest of the first pull"

# Held open, not read yet: whatever is read through it later comes from
# the daemon after the tag has moved, not from an earlier page cache.
exec 3<"$root/bin/busybox"

# ---- the tag moves to other content (B: the edge image)
push_edge test/app:latest
digest_b=$(manifest_digest test/app:latest)
[ "$digest_a" != "$digest_b" ] || fail "re-push did not change the digest of test/app:latest"
t_seen=$(now)
sleep_until "$(plus "$t_seen" 1.3)" # the interval (and the entry timeout) is 1 s

assert_eq edge "$(cat "$root/etc/hostname")" "/etc/hostname of $ref after the tag moved (content B)"
assert_errno ENOENT "$root/bin/busybox"
wait_event_count 2 Pulling "$ref"
_two_pulls() { [ "$(event_count_msg Pulled "$ref" "Successfully pulled")" -ge 2 ]; }
wait_for 10 _two_pulls || fail "no second Pulled event for $ref"
assert_eq "$digest_a
$digest_b" "$(event_fields Pulled "$ref" digest | uniq)" "digests of the Pulled events, in order"

# ---- the old file, through the descriptor opened before the move
assert_eq "$bb_sha" "$(sha256sum <&3 | cut -d' ' -f1)" "sha256 of the old /bin/busybox read through a descriptor held across the move"
exec 3<&-

assert_eq 2 "$(event_count Pulling "$ref")" "Pulling events for two digests"
assert_eq 0 "$(event_count Failed "$ref")" "Failed events for $ref"
events check >&2 || fail "malformed events in $EVENTS"
unmount_pullfs
log "PASS"

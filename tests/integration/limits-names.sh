#!/bin/bash
# Names are cheap and bounded.  On an allow_other mount, uid 65534 looks up
# 2,000 names of one cached digest (debian:x$i@sha256:D, no network).  A
# further name costs no descriptor and little memory (the tree is shared),
# the user's names are capped (the default, 256, while the kernel holds
# them) with EAGAIN and a UserLimit event naming the uid, none of them
# reaches CACHE/refs, and once the kernel lets go of them they are
# collected and the user may look up new ones.  Root is not capped.
source "$(dirname "$0")/lib.sh"

need_fuse
need_cmd setpriv
start_registry
chmod 755 "$WORK"

python3 -c '
import sys
sys.path.insert(0, sys.argv[1])
import mktar as m
open(sys.argv[2], "wb").write(m.directory("etc/") + m.member("etc/hostname", "tiny\n") + m.end())
' "$INTEGRATION_DIR" "$WORK/tiny.tar"
digest=$(python3 "$INTEGRATION_DIR/rawpush.py" "$REGISTRY" test/tiny:1 "$WORK/tiny.tar" | awk '{print $2}')
case $digest in sha256:*) ;; *) fail "rawpush printed no digest: $digest" ;; esac

mount_pullfs -o allow_other
base=$MNT/images/$REGISTRY/test
assert_eq tiny "$(cat "$base/tiny:1/etc/hostname")" "content of the cached image"

serving=$(pullfs_serving_pid)
fds() { ls /proc/"$serving"/fd | wc -l; }
rss_kb() { awk '/^VmRSS/ { print $2 }' /proc/"$serving"/status; }
fds0=$(fds)
rss0=$(rss_kb)

# As uid 65534: 2,000 new names, each stat'ed (the kernel keeps them).
setpriv --reuid 65534 --regid 65534 --clear-groups /usr/bin/python3 - "$base" "$digest" 0 2000 >"$WORK/nobody1" <<'PY' || fail "lookups as uid 65534"
import errno, os, sys
base, digest, first, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ok = again = other = 0
for i in range(first, first + n):
    try:
        with open(f"{base}/tiny:x{i}@{digest}/etc/hostname") as f:
            assert f.read() == "tiny\n"
        ok += 1
    except OSError as e:
        if e.errno == errno.EAGAIN:
            again += 1
        else:
            other += 1
            print(f"x{i}: {e}", file=sys.stderr)
print(ok, again, other)
PY
read -r ok again other <"$WORK/nobody1"
fds1=$(fds)
rss1=$(rss_kb)
log "uid 65534, 2000 names: $ok served, $again refused with EAGAIN, $other other errors; descriptors $fds0 -> $fds1, RSS ${rss0} -> ${rss1} KiB"
assert_eq 0 "$other" "lookups failing with another errno than EAGAIN"
assert_eq 256 "$ok" "names served to uid 65534 while the kernel holds them (the per-user limit)"
assert_eq 1744 "$again" "names refused with EAGAIN"
[ "$((fds1 - fds0))" -le 4 ] || fail "descriptors grew from $fds0 to $fds1 for names of one digest"
[ "$((rss1 - rss0))" -lt $((64 * 1024)) ] || fail "RSS grew by $((rss1 - rss0)) KiB for 256 names of one digest"
wait_event UserLimit "$REGISTRY/test/tiny:x256@$digest"
assert_contains "uid 65534" "$(events field UserLimit "$REGISTRY/test/tiny:x256@$digest" message)" "UserLimit message"
assert_eq 65534 "$(events field UserLimit "$REGISTRY/test/tiny:x256@$digest" uid)" "uid of the UserLimit event"
# Rate-limited: one event for a burst, not one per refused lookup.
n_events=$(grep -c '"reason":"UserLimit"' "$EVENTS" || true)
[ "$n_events" -lt 20 ] || fail "$n_events UserLimit events for one burst of refusals"
n_refs=$(ls "$CACHE/refs" | wc -l)
assert_eq 1 "$n_refs" "reference files (names of uid 65534 stay in memory)"

# The kernel lets go of the names; they are collected when the user needs
# room, so new names are served again.
sync
echo 2 >/proc/sys/vm/drop_caches
# The kernel's FORGETs reach the daemon a moment later.
nobody_stat() { setpriv --reuid 65534 --regid 65534 --clear-groups stat "$base/tiny:x4999@$digest" >/dev/null 2>&1; }
wait_for 20 nobody_stat || fail "no new name for uid 65534 after the kernel forgot the old ones"
setpriv --reuid 65534 --regid 65534 --clear-groups /usr/bin/python3 - "$base" "$digest" 5000 100 >"$WORK/nobody2" <<'PY' || fail "lookups as uid 65534 after the kernel forgot"
import errno, os, sys
base, digest, first, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ok = bad = 0
for i in range(first, first + n):
    try:
        os.stat(f"{base}/tiny:x{i}@{digest}/etc/hostname")
        ok += 1
    except OSError as e:
        bad += 1
        print(f"x{i}: {e}", file=sys.stderr)
print(ok, bad)
PY
read -r ok bad <"$WORK/nobody2"
assert_eq "100 0" "$ok $bad" "new names served after the old ones were forgotten"

# Root is not capped, and its further names cost no descriptor either.
for i in $(seq 1 300); do stat "$base/tiny:r$i@$digest/etc/hostname" >/dev/null || fail "root's name r$i"; done
fds2=$(fds)
log "root, 300 more names: descriptors $fds2"
[ "$((fds2 - fds0))" -le 4 ] || fail "descriptors grew from $fds0 to $fds2 for root's names"
unmount_pullfs
log "PASS"

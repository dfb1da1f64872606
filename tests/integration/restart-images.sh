#!/bin/bash
# One name, two live images with different keys, across a kill of the
# serving process: the kernel still holds one (a working directory, open
# files) while the name was looked up again and got another.  The process
# that takes over must make again exactly the image each key stood for,
# whatever the name points to now; a reader of either sees no ESTALE and
# the same content.  Two ways to get there:
#  - a tag moved to other content (two digests, two keys);
#  - a name removed while a process has its working directory in it, then
#    pulled again (one digest, two keys: the first is still taken).
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/restartlib.sh"

need_fuse
need_root
start_registry
push_busybox test/app:latest
push_busybox test/other:1
mount_pullfs --revalidate-interval 1 --gc-min-age 0
ctl() { "$PULLFSCTL" -m "$MNT" "$@"; }

app=$MNT/images/$REGISTRY/test/app:latest
other=$MNT/images/$REGISTRY/test/other:1
bb_sha=$(sha256sum <"$(_static_busybox)" | cut -d' ' -f1)
host_a=$(sha256sum <"$app/etc/hostname" | cut -d' ' -f1)
passwd_sha=$(sha256sum <"$app/etc/passwd" | cut -d' ' -f1)

# ---- a moved tag: A held by a reader, B looked up afterwards -------------
start_reader "$app/etc" "$app" "../bin/busybox=$bb_sha" "hostname=$host_a" "passwd=$passwd_sha"
# in A before the tag moves (a reader slow to start would enter B)
reader_settle "the reader's start"
push_edge test/app:latest
sleep_until "$(plus "$(now)" 1.3)" # the revalidation interval and entry timeout
assert_eq edge "$(cat "$app/etc/hostname")" "hostname of app:latest after the tag moved"
# B kept by a working directory of its own, and read through it
(cd "$app/etc" && exec sleep 1000) &
holder_b=$!
track_pid "$holder_b"

# ---- one digest, two keys: rm while a process stays in it, pulled again --
assert_eq busybox "$(cat "$other/etc/hostname")" "hostname of other:1"
(cd "$other/etc" && exec sleep 1000) &
holder_c=$!
track_pid "$holder_c"
_gone() { out=$(ctl rm "$REGISTRY/test/other:1" 2>&1); }
wait_for 20 _gone || fail "rm of other:1: $out"
assert_eq busybox "$(cat "$other/etc/hostname")" "hostname of other:1 pulled again"
(cd "$other/etc" && exec sleep 1000) &
holder_d=$!
track_pid "$holder_d"

# ---- kills ---------------------------------------------------------------
_held_reads() {
    local what=$1
    assert_eq edge "$(cat /proc/$holder_b/cwd/hostname 2>&1)" "$what: B through its working directory"
    assert_eq busybox "$(cat /proc/$holder_c/cwd/hostname 2>&1)" "$what: other:1 removed, through a working directory"
    assert_eq busybox "$(cat /proc/$holder_d/cwd/hostname 2>&1)" "$what: other:1 pulled again, through a working directory"
    assert_eq edge "$(cat "$app/etc/hostname")" "$what: app:latest by its name"
    assert_eq busybox "$(cat "$other/etc/hostname")" "$what: other:1 by its name"
}
_held_reads "before the kills"
settle() {
    reader_settle "$1"
    _held_reads "$1"
}
kill_serving 3 settle
_stop_pid "$reader_pid"
errors=$(reader_errors)
[ -z "$errors" ] || fail "reader of the image the tag left: $(head -n 5 <<<"$errors")"
! grep -q 'stale\|cannot restore' "$PULLFS_LOG" || fail "restore: $(grep 'stale\|cannot restore' "$PULLFS_LOG" | head -n 3)"
log "moved tag and a name pulled again: $(reader_rounds) rounds across 3 kills, no error"

# ---- an open file of an image its name no longer gives, the name removed --
# GC and rm keep what a loaded image with a file open needs, whatever its
# name resolves to now, so that the next process can make it again.
# (content no other name has: zstd layers)
push_edge_zstd test/moved:latest
moved=$MNT/images/$REGISTRY/test/moved:latest
exec 9<"$moved/etc/hostname"
push_busybox test/moved:latest
_moved_on() { [ "$(cat "$moved/etc/hostname")" = busybox ]; }
wait_for 20 _moved_on || fail "moved:latest still gives edge after its tag moved"
_gone_moved() { out=$(ctl rm "$REGISTRY/test/moved:latest" 2>&1); }
wait_for 20 _gone_moved || fail "rm of moved:latest: $out"
ctl gc >/dev/null || fail "gc after the rm of moved:latest"
_held_moved() {
    assert_eq edge "$(py -c 'import os; print(os.pread(9, 100, 0).decode().strip())')" \
        "$1: the file held open in the image moved:latest gave before"
}
_held_moved "after the rm"
kill_serving 2 _held_moved
exec 9<&-
! grep -q 'stale\|cannot restore' "$PULLFS_LOG" || fail "restore: $(grep 'stale\|cannot restore' "$PULLFS_LOG" | head -n 3)"

# ---- a working directory in an image whose name was removed ------------
# No file open, but a process stands in it: a file may be opened there
# any time.  GC and rm keep what it is made from while it does, so the
# next process makes it again.
push_edge_plain test/cwd:1
cwdimg=$MNT/images/$REGISTRY/test/cwd:1
(cd "$cwdimg/etc" && while [ ! -e "$WORK/cwd-go" ]; do sleep 0.05; done && cat hostname >"$WORK/cwd-read") &
cwd_reader=$!
track_pid "$cwd_reader"
wait_for 20 test -d "/proc/$cwd_reader/cwd/." || fail "the reader did not enter cwd:1"
cwd_manifest=$CACHE/blobs/sha256/$(py - "$EVENTS" "$REGISTRY/test/cwd:1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("reason") == "Pulled" and e.get("image") == sys.argv[2]:
        print(e["digest"].split(":")[1])
PY
)
[ -f "$cwd_manifest" ] || fail "the manifest of cwd:1 is not in the cache"
ctl rm "$REGISTRY/test/cwd:1" >/dev/null || fail "rm of cwd:1"
ctl gc >/dev/null || fail "gc after the rm of cwd:1"
[ -f "$cwd_manifest" ] || fail "the manifest of a removed image a process stands in was deleted"
kill_serving 1 true
touch "$WORK/cwd-go"
wait "$cwd_reader" || fail "a file opened after a kill in a removed image a process stands in"
assert_eq edge "$(cat "$WORK/cwd-read")" "the file opened after the kill"
! grep -q 'stale\|cannot restore' "$PULLFS_LOG" || fail "restore: $(grep 'stale\|cannot restore' "$PULLFS_LOG" | head -n 3)"

# ---- a handle of a process before counts as open once read -------------
# The pin of a restored image is one open file whatever the kernel holds;
# a handle of the process before that is read is open for sure, and
# counted until the kernel releases it.
push_busybox test/held:1
heldimg=$MNT/images/$REGISTRY/test/held:1
exec 8<"$heldimg/etc/hostname"
open_of_held() {
    py - "$MNT/.pullfs/status" "$REGISTRY/test/held:1" <<'PY'
import json, sys
for i in json.load(open(sys.argv[1]))["images"]:
    if i["reference"] == sys.argv[2]:
        print(i["open_files"])
PY
}
assert_eq 1 "$(open_of_held)" "open files of held:1"
kill_serving 1 true
assert_eq 1 "$(open_of_held)" "open files of held:1 after a kill (the pin)"
py -c 'import os; os.posix_fadvise(8, 0, 0, os.POSIX_FADV_DONTNEED); assert os.pread(8, 100, 0)'
assert_eq 2 "$(open_of_held)" "open files of held:1 once the old handle was read"
exec 8<&-
_one_open() { [ "$(open_of_held)" = 1 ]; }
wait_for 10 _one_open || fail "open files of held:1 after its release: $(open_of_held)"

unmount_pullfs
log "PASS"

#!/bin/bash
# Start profiles.  A lazy (zstd:chunked) image started on cache A, a few
# of its files read, records a profile of those files (ProfileRecorded);
# `pullfsctl profile export` writes it.  A fresh cache B (a second mount)
# refuses a malformed profile, imports that one, and at its cold lookup
# fetches the profiled files before anyone reads them (ProfileUsed),
# with the background completion held off for an hour: once they are
# local, reading them asks the registry for nothing, while the files
# outside the profile are still not local.  Last, a profile naming a
# file the image does not have is dropped at the next cold lookup, with
# a ProfileStale event.
. "$(dirname "$0")/lib.sh"
. "$INTEGRATION_DIR/images.sh"

need_root
need_fuse
need_cmd umoci skopeo
start_registry

out=$WORK/layout
st=$WORK/stage
mkdir -p "$st/data" "$st/etc"
for i in $(seq 1 24); do head -c $((70000 + i * 3000)) /dev/urandom >"$st/data/f$i"; done
echo profile >"$st/etc/name"
stage_image "$st" "$out" profile "$WORK/bundle"
_skopeo copy --dest-decompress "oci:$out:1" "dir:$WORK/plain"
_skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
    "dir:$WORK/plain" "docker://$REGISTRY/test/profile:1"
layer=$(registry_manifest test/profile:1 | py -c 'import json,sys; print(json.load(sys.stdin)["layers"][0]["digest"])')
ref=$REGISTRY/test/profile:1
profiled="data/f3 data/f11 data/f17 etc/name"
others="data/f1 data/f2 data/f20"

ctl() { "$PULLFSCTL" -m "$MNT" "$@"; }
# has_event REASON: the test's events log has one (no log yet: not yet)
has_event() { grep -q "\"reason\":\"$1\"" "$EVENTS" 2>/dev/null || return 1; }
# settled_mark: the registry's log line count once every request made so
# far is in it (a request of its own, logged after them, is waited for)
settled_mark() {
    local tag=sentinel-$RANDOM$RANDOM
    curl -s -o /dev/null "http://$REGISTRY/v2/test/$tag/manifests/1" || true
    wait_for 10 grep -q "$tag" "$REGISTRY_LOG" 2>/dev/null || fail "the registry did not log $tag"
    registry_mark
}
# object_of PATH: the content object (hex SHA-256) of a file of the image
object_of() { sha256sum "$WORK/bundle/rootfs/$1" | cut -d' ' -f1; }
# local_file PATH: a file of the layer is local: its object is there, or,
# for a file under 64 KiB (etc/name, the image's only one: checked
# below), the layer's pack.map marks it
local_file() {
    local d=$CACHE/layers/${layer#sha256:}
    if [ "$(stat -c %s "$WORK/bundle/rootfs/$1")" -ge 65536 ]; then
        [ -e "$d/o.$(object_of "$1")" ]
    else
        [ "$(tr -d '\0' <"$d/pack.map" 2>/dev/null)" = 1 ]
    fi
}
small=$(find "$WORK/bundle/rootfs" -type f -size -64k -size +0 | sed "s|^$WORK/bundle/rootfs/||")
assert_eq etc/name "$small" "the image's files under 64 KiB"

# ---- cache A: a start records the profile
mount_pullfs --lazy-completion-delay 3600 --profile-window 8
root=$MNT/images/$ref
ls "$root" >/dev/null || fail "lookup of $ref"
for p in $profiled; do
    cmp "$root/$p" "$WORK/bundle/rootfs/$p" || fail "$p read on cache A"
done
wait_for 60 has_event ProfileRecorded || fail "no ProfileRecorded event: $(grep -i profile "$EVENTS" || true)"
log "$(grep '"reason":"ProfileRecorded"' "$EVENTS" | py -c 'import json,sys; print(json.loads(sys.stdin.readline())["message"])')"
grep '"reason":"ProfileRecorded"' "$EVENTS" | grep -q '"message":"[^"]*: 4 files' ||
    fail "ProfileRecorded does not count 4 files: $(grep '"reason":"ProfileRecorded"' "$EVENTS")"
assert_eq 1 "$(metric pullfs_profiles_recorded_total)" "pullfs_profiles_recorded_total"
ctl profile export "$ref" >"$WORK/profile" || fail "profile export"
head -n 1 "$WORK/profile" | grep -qx 'pullfs-profile 1' || fail "exported: $(head -n 3 "$WORK/profile")"
assert_eq 4 "$(grep -c '^file ' "$WORK/profile")" "files in the exported profile"
# in first-read order
order=$(awk '$1 == "file" { print $3 }' "$WORK/profile" | tr '\n' ' ')
want=$(for p in $profiled; do object_of "$p"; done | tr '\n' ' ')
assert_eq "$want" "$order" "the profile's files, in the order they were read"
image=$(awk '$1 == "image" { print $2 }' "$WORK/profile")
[ -e "$CACHE/profiles/${image#sha256:}" ] || fail "no profile in the cache"
unmount_pullfs

# ---- cache B: import, then a cold lookup prefetches the profile
MNT=$WORK/mnt-b
CACHE=$WORK/cache-b
EVENTS=$WORK/events-b.log
mkdir -p "$MNT"
mount_pullfs --lazy-completion-delay 3600 --profile-window 0
root=$MNT/images/$ref
# malformed: refused with the reason, nothing stored
if printf 'pullfs-profile 1\nimage sha256:nothex\n' | ctl profile import "$ref" 2>"$WORK/err"; then
    fail "a malformed profile was imported"
fi
log "refused: $(cat "$WORK/err")"
grep -q 'EBADMSG.*not a valid start profile: line 2' "$WORK/err" || fail "refusal: $(cat "$WORK/err")"
if head -c 2000 /dev/urandom | ctl profile import "$ref" 2>"$WORK/err"; then
    fail "random bytes were imported"
fi
[ -z "$(ls "$CACHE/profiles")" ] || fail "a refused profile was stored: $(ls "$CACHE/profiles")"
ctl profile import "$ref" <"$WORK/profile" >"$WORK/out" || fail "import: $(cat "$WORK/out")"
grep -q "4 files" "$WORK/out" || fail "import said: $(cat "$WORK/out")"
has_event ProfileImported || fail "no ProfileImported event"
mark=$(settled_mark)
ls "$root" >/dev/null || fail "lookup of $ref on cache B"
wait_for 60 has_event ProfileUsed || fail "no ProfileUsed event: $(grep -i profile "$EVENTS" || true)"
log "$(grep '"reason":"ProfileUsed"' "$EVENTS" | py -c 'import json,sys; print(json.loads(sys.stdin.readline())["message"])')"
grep '"reason":"ProfileUsed"' "$EVENTS" | grep -q '"message":"[^"]*: 4 files' ||
    fail "ProfileUsed does not count 4 files: $(grep '"reason":"ProfileUsed"' "$EVENTS")"
for p in $profiled; do local_file "$p" || fail "$p, profiled, is not local after the prefetch"; done
# REF cached as this image: a profile of another image is refused
sed "s/^image .*/image sha256:$(printf '0%.0s' $(seq 64))/" "$WORK/profile" >"$WORK/other"
if ctl profile import "$ref" <"$WORK/other" 2>"$WORK/err"; then fail "another image's profile was imported"; fi
grep -q 'EINVAL.*is image' "$WORK/err" || fail "refusal of another image's profile: $(cat "$WORK/err")"
for p in $others; do ! local_file "$p" || fail "$p, not profiled, is local (the completion ran?)"; done
prefetch_gets=$(registry_count GET "/v2/test/profile/blobs/$layer" "$mark")
[ "$prefetch_gets" -ge 1 ] || fail "the prefetch made no request of the layer blob"
mark=$(settled_mark)
for p in $profiled; do
    cmp "$root/$p" "$WORK/bundle/rootfs/$p" || fail "$p read on cache B"
done
settled_mark >/dev/null
assert_eq 0 "$(registry_count GET "/v2/test/profile/blobs/" "$mark")" \
    "blob requests made by reading the profiled files"
assert_eq 1 "$(metric pullfs_profiles_used_total)" "pullfs_profiles_used_total"
assert_eq 4 "$(metric pullfs_profile_prefetched_files_total)" "pullfs_profile_prefetched_files_total"
# a file outside the profile is fetched when read, as before
mark=$(settled_mark)
cmp "$root/data/f1" "$WORK/bundle/rootfs/data/f1" || fail "data/f1 on cache B"
settled_mark >/dev/null
[ "$(registry_count GET "/v2/test/profile/blobs/$layer" "$mark")" -ge 1 ] ||
    fail "data/f1 was read without a request"
unmount_pullfs

# ---- a profile whose files are not the image's: dropped, with an event
sed "s/^file 0 $(object_of data/f3) /file 0 $(printf 'e%.0s' $(seq 64)) /" "$WORK/profile" >"$WORK/stale"
mount_pullfs --lazy-completion-delay 3600 --profile-window 0
ctl profile import "$ref" <"$WORK/stale" >/dev/null || fail "import of the stale profile"
ls "$root" >/dev/null || fail "lookup of $ref after the restart"
wait_for 30 has_event ProfileStale || fail "no ProfileStale event: $(grep -i profile "$EVENTS" || true)"
log "$(grep '"reason":"ProfileStale"' "$EVENTS" | py -c 'import json,sys; print(json.loads(sys.stdin.readline())["message"])')"
[ ! -e "$CACHE/profiles/${image#sha256:}" ] || fail "the stale profile is still stored"
assert_eq 1 "$(grep -c '"reason":"ProfileUsed"' "$EVENTS")" "ProfileUsed events (the stale one is not used)"
assert_eq 1 "$(metric pullfs_profiles_stale_total)" "pullfs_profiles_stale_total"
if ctl profile export "$ref" >/dev/null 2>"$WORK/err"; then fail "a dropped profile was exported"; fi
grep -q ENOENT "$WORK/err" || fail "export of a dropped profile: $(cat "$WORK/err")"
# a profile goes with its image
ctl profile import "$ref" <"$WORK/profile" >/dev/null || fail "import after the stale one"
[ -e "$CACHE/profiles/${image#sha256:}" ] || fail "no profile after the import"
ctl rm "$ref" >/dev/null || fail "rm $ref"
[ ! -e "$CACHE/profiles/${image#sha256:}" ] || fail "the profile outlived its image"
unmount_pullfs
log "PASS"

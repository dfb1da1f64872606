#!/bin/bash
# pullfsctl inspect, rm and gc, through the control socket: what an image
# is made of, removing images (refused while one is in use) and garbage
# collection on demand.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/ctl.sh"

need_pullfsctl
need_fuse
start_registry
push_busybox test/busybox:1
push_edge test/edge:1
# No minimum age: images pulled a moment ago may be collected.
mount_pullfs --gc-min-age 0

bb=$REGISTRY/test/busybox:1
edge=$REGISTRY/test/edge:1
ctl_ok pull "$bb" "$edge"

# ---- inspect
ctl_ok inspect "$bb"
manifest=$(registry_manifest test/busybox:1)
layer=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["layers"][0]["digest"])' "$manifest")
assert_contains "Reference:  $bb" "$OUT" "inspect $bb"
assert_contains "Digest:     $(manifest_digest test/busybox:1)" "$OUT" "inspect $bb"
assert_contains "Platform:   linux/$(node_arch)" "$OUT" "inspect $bb"
assert_contains "Media type: application/vnd.oci.image.manifest.v1+json" "$OUT" "inspect $bb"
assert_contains 'Cmd:        ["/bin/sh"]' "$OUT" "inspect $bb"
[[ $OUT =~ Size:\ +[0-9.]+\ (KiB|MiB) ]] || fail "no size in inspect $bb: $OUT"
[[ $OUT =~ $layer\ +[0-9.]+\ (KiB|MiB)\ +application/vnd\.oci\.image\.layer\.v1\.tar\+gzip ]] ||
    fail "no layer row in inspect $bb: $OUT"
ctl_ok inspect "$edge"
assert_eq 3 "$(grep -c '^  sha256:' <<<"$OUT")" "layer rows of inspect $edge"

ctl_ok inspect --json "$bb"
echo "$OUT" >"$WORK/inspect.json"
assert_eq "$layer" "$(json_get "$WORK/inspect.json" "j['layers'][0]['digest']")" "inspect --json layer digest"
assert_eq '["/bin/sh"]' "$(json_get "$WORK/inspect.json" "j['config']['config']['Cmd']")" "inspect --json Cmd"
assert_eq False "$(json_get "$WORK/inspect.json" "'ok' in j")" "inspect --json has no 'ok'"

ctl inspect "$REGISTRY/test/busybox:notcached"
assert_eq 1 "$RC" "exit status of inspect of an image not in the cache"
[[ $ERR =~ inspect:\ E[A-Z]+ ]] || fail "inspect of an image not in the cache: $ERR"
ctl inspect
assert_eq 2 "$RC" "exit status of inspect without a reference"

# ---- rm: refused while a file is open, then done
exec 7<"$MNT/images/$bb/etc/passwd"
ctl rm "$bb" "$edge"
assert_eq 1 "$RC" "exit status of rm of an image with an open file"
assert_contains "rm: refused: " "$ERR" "rm of an image in use"
assert_contains "in use" "$ERR" "rm of an image in use"
ctl_ok ls
assert_contains "$bb " "$OUT" "ls after a refused rm"
assert_contains "$edge " "$OUT" "ls after a refused rm (nothing removed)"
exec 7<&-

ctl_ok rm "$bb"
assert_contains "removed $bb" "$OUT" "rm $bb"
[[ $OUT =~ 1\ image\ removed,\ [0-9.]+\ (KiB|MiB)\ freed ]] || fail "summary of rm: $OUT"
ctl_ok ls
assert_not_contains "$bb " "$OUT" "ls after rm"
assert_contains "$edge " "$OUT" "ls after rm of another image"
# Gone from the cache, not from the world: the next lookup pulls again.
assert_eq "root:x:0:0:root:/root:/bin/sh" "$(head -n1 "$MNT/images/$bb/etc/passwd")" "$bb after rm"

# ---- gc
ctl_ok gc --to 1T
[[ $OUT =~ 0\ images\ removed ]] || fail "gc --to 1T removed something: $OUT"
# One byte: everything that is not in use goes, least recently used first.
ctl_ok gc --to 1
assert_contains "removed $edge" "$OUT" "gc --to 1"
assert_contains "removed $bb" "$OUT" "gc --to 1"
assert_contains "2 images removed" "$OUT" "gc --to 1"
[ "$(grep -n "removed $edge" <<<"$OUT" | cut -d: -f1)" -lt "$(grep -n "removed $bb" <<<"$OUT" | cut -d: -f1)" ] ||
    fail "gc removed $bb (used last) before $edge: $OUT"
ctl_ok ls --json
assert_eq "[]" "$(tr -d ' \n' <<<"$OUT")" "ls --json after gc --to 1"
ctl gc --to lots
assert_eq 2 "$RC" "exit status of gc --to lots"

for c in inspect rm gc; do
    ctl_ok "$c" --help
    assert_contains "Usage: pullfsctl" "$OUT" "pullfsctl $c --help"
done
assert_contains "--to BYTES" "$OUT" "pullfsctl gc --help"

log "ok"

#!/bin/bash
# pullfsctl ls: the cached images as a table and as JSON.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/ctl.sh"

need_pullfsctl
need_fuse
start_registry
push_busybox test/busybox:1
push_edge test/edge:1
mount_pullfs

# Empty cache: just the header.
ctl_ok ls
assert_eq "REFERENCE DIGEST SIZE ON DISK LAST USED IN USE PINNED" "$(tr -s ' ' <<<"$OUT")" "ls of an empty cache"
ctl_ok ls --json
assert_eq "[]" "$(tr -d ' \n' <<<"$OUT")" "ls --json of an empty cache"

bb=$REGISTRY/test/busybox:1
edge=$REGISTRY/test/edge:1
ctl_ok pull "$bb"
sleep 1.1 # so that the two last-use times differ
ctl_ok pull "$edge"

# ---- JSON: every image with its fields, digests as the registry has them
ctl_ok ls --json
echo "$OUT" >"$WORK/ls.json"
assert_eq 2 "$(json_get "$WORK/ls.json" 'len(j)')" "images in ls --json"
for r in "$bb" "$edge"; do
    repo_tag=${r#"$REGISTRY"/}
    sel="[i for i in j if i['reference'] == '$r'][0]"
    assert_eq "$(manifest_digest "$repo_tag")" "$(json_get "$WORK/ls.json" "$sel['digest']")" "digest of $r in ls --json"
    assert_eq True "$(json_get "$WORK/ls.json" "$sel['size'] > 0")" "size of $r in ls --json"
    assert_eq False "$(json_get "$WORK/ls.json" "$sel['pinned']")" "pinned of $r in ls --json"
    for k in last_used pulled in_use; do
        assert_eq True "$(json_get "$WORK/ls.json" "'$k' in $sel")" "field $k of $r in ls --json"
    done
done
edge_size=$(json_get "$WORK/ls.json" "[i for i in j if i['reference'] == '$edge'][0]['size']")
# The edge image has a 5 MiB layer of random bytes.
[ "$edge_size" -gt 5000000 ] || fail "size of $edge is $edge_size, less than its 5 MiB layer"

# ---- the table: most recently used first, short digests, human sizes
ctl_ok ls
assert_eq 3 "$(wc -l <<<"$OUT")" "lines of ls"
assert_eq "REFERENCE DIGEST SIZE ON DISK LAST USED IN USE PINNED" "$(nth_row 1 | tr -s ' ')" "header of ls"
row_edge=$(nth_row 2)
row_bb=$(nth_row 3)
assert_contains "$edge" "$row_edge" "first row of ls (most recent)"
assert_contains "$bb" "$row_bb" "second row of ls"
d=$(manifest_digest test/edge:1)
assert_contains " ${d:0:19} " "$row_edge" "short digest of $edge"
assert_not_contains "${d:0:20}" "$row_edge" "digest of $edge is truncated"
[[ $row_edge =~ \ [0-9.]+\ MiB\  ]] || fail "no size in MiB for $edge: $row_edge"
[[ $row_bb =~ \ [0-9.]+\ (KiB|MiB)\  ]] || fail "no human size for $bb: $row_bb"
[[ $row_bb =~ \ [0-9]+s\ ago\  ]] || fail "no last use for $bb: $row_bb"
[[ $row_bb =~ \ no$ ]] || fail "pinned should be 'no' for $bb: $row_bb"
# Columns line up: DIGEST starts at the same offset in every line.
col=$(nth_row 1 | awk '{ print index($0, "DIGEST") }')
for n in 2 3; do
    assert_eq sha256: "$(nth_row "$n" | cut -c"$col"-$((col + 6)))" "DIGEST column of line $n"
done

ctl_ok ls --no-trunc
assert_contains "$d" "$OUT" "ls --no-trunc"

# In use: a process with an open file in the image.
exec 7<"$MNT/images/$bb/etc/passwd"
ctl_ok ls
assert_eq yes "$(grep -F "$bb" <<<"$OUT" | awk '{ print $(NF - 1) }')" "IN USE of $bb with an open file"
exec 7<&-

ctl_ok ls --help
for w in --json --no-trunc REFERENCE DIGEST SIZE "LAST USED" PINNED; do
    assert_contains "$w" "$OUT" "pullfsctl ls --help"
done
ctl ls extra
assert_eq 2 "$RC" "exit status of ls with an argument"

log "ok"

#!/bin/bash
# Durable across a power cut.  The daemon's system calls are traced
# (strace) while it pulls the edge image whole and as zstd:chunked (a lazy
# image, read and then completed in the background); flushorder.py checks
# that every publishing rename of a layer, blob or reference, every index
# link into objects/, every finished lazy file and every chunk-map bit
# comes after its content was flushed, and that the directory a rename
# went into is flushed before the reference that needs it is published.
# Then what a power cut leaves between staging and commit (a layer's
# staged directory without its rename, a blob never renamed) is thrown
# away at the next start, and the image is pulled again and is right.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
need_cmd strace umoci skopeo
start_registry
push_edge test/edge:1
push_busybox test/busybox:1
plain=$WORK/edge-plain
_skopeo copy --dest-decompress "oci:$(layout_of edge):1" "dir:$plain"
_skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
    "dir:$plain" "docker://$REGISTRY/test/edge-chunked:1"
umoci unpack --image "$(layout_of edge):1" "$WORK/bundle" >/dev/null
reference=$WORK/bundle/rootfs
# The background completion's requests are held while $WORK/whole is
# missing, so that a reader fetches chunks first.
layers=$(image_blobs test/edge-chunked:1 | tail -n +2 | paste -sd '|')
start_slowproxy --gate "GET /v2/test/edge-chunked/blobs/($layers) .*background=$WORK/whole"
full=$MNT/images/$PROXY/test/edge:1
lazy=$MNT/images/$PROXY/test/edge-chunked:1
TRACE=$WORK/trace

mount_pullfs --insecure-registry "$PROXY"
# Every thread of the daemon, and those it starts, from before the first
# lookup.  -y names each descriptor's file, so the checker sees paths.
strace -f -y -s 0 -o "$TRACE" \
    -e trace=write,pwrite64,fsync,fdatasync,syncfs,rename,renameat,renameat2,linkat,unlinkat \
    -p "$(pullfs_serving_pid)" 2>"$WORK/strace.err" &
STRACE_PID=$!
track_pid "$STRACE_PID"
# (not an error before the shell has created the file: wait_for gives up
# at once on status 2)
_attached() { [ -f "$WORK/strace.err" ] && grep -q "Process $(pullfs_serving_pid) attached" "$WORK/strace.err"; }
wait_for 30 _attached ||
    fail "strace did not attach: $(cat "$WORK/strace.err" 2>&1)"

# The lazy image first, completed: its files are fetched and become
# objects.  Then the full pull of edge shares its large file (links into
# its stage), and busybox's brings new objects (index links).
assert_errno OK "$lazy"
cmp "$reference/large" "$lazy/large" || fail "content of large differs (lazy image)"
cmp "$reference/etc/passwd" "$lazy/etc/passwd" || fail "content of etc/passwd differs (lazy image)"
touch "$WORK/whole"
complete() { lazy_complete && ! ls "$CACHE"/layers/*/p.* >/dev/null 2>&1; }
wait_for 60 complete || fail "lazy layers not completed: $(ls "$CACHE"/layers/*/lazy "$CACHE"/layers/*/p.* 2>&1 | head)"
assert_errno OK "$full"
cmp "$reference/large" "$full/large" || fail "content of large differs (full pull)"
assert_errno OK "$MNT/images/$PROXY/test/busybox:1/bin/busybox"
# Layers are published in the background after the lookup's answer, and
# the references after them: all of it in the trace.
_published() { [ "$(find "$CACHE/refs" -type f | wc -l)" = 3 ] && [ -z "$(find "$CACHE/tmp" -name verified)" ]; }
wait_for 30 _published || fail "not published: $(ls "$CACHE/refs" "$CACHE/tmp" 2>&1)"
# strace detaches on SIGTERM (LeakSanitizer cannot check the daemon's exit
# under ptrace)
kill -TERM "$STRACE_PID"
wait_for 20 _pid_gone "$STRACE_PID" || fail "strace did not detach"
wait "$STRACE_PID" || true
unmount_pullfs

# 3 layers of each edge image, 1 of busybox; configs and manifests;
# 3 references; the lazy files fetched chunk by chunk and completed.
out=$(py "$INTEGRATION_DIR/flushorder.py" "$TRACE" "$CACHE" --expect layer=7 --expect shared=1 --expect blob=5 \
    --expect ref=3 --expect link=2 --expect lazyfile=1 --expect chunk=1 --expect lazydone=1 2>&1) ||
    fail "flush order: $out"
log "$(tail -n 1 <<<"$out")"

# ---- what a power cut leaves: a layer staged, never renamed into layers/
# (so no reference names the image yet), and a blob written, never renamed.
digest=$(image_blobs test/edge:1 | tail -n 1)
hex=${digest#sha256:}
[ -d "$CACHE/layers/$hex" ] || fail "layer $digest is not in $CACHE/layers"
mv "$CACHE/layers/$hex" "$CACHE/tmp/layer-${hex:0:12}.999.0badf00d"
printf half >"$CACHE/tmp/f.999.0badf00d"
find "$CACHE/refs" -type f -delete
mark=$(registry_mark)
mount_pullfs --insecure-registry "$PROXY"
# (the mount comes from the supervisor, the cache is opened by the serving
# process it starts: a moment later)
_tmp_empty() { [ -z "$(find "$CACHE/tmp" -mindepth 1 2>/dev/null | head -n 1)" ]; }
wait_for 20 _tmp_empty || fail "left in $CACHE/tmp after a start: $(find "$CACHE/tmp" -mindepth 1 | head -n 5)"
[ ! -e "$CACHE/layers/$hex" ] || fail "the staged layer was published at start"
assert_errno OK "$full"
assert_tree_eq "$reference" "$full"
assert_eq 1 "$(registry_count GET "/v2/test/edge/blobs/$digest" "$mark")" \
    "GETs of the discarded layer's blob on the next pull"
unmount_pullfs
log "PASS"

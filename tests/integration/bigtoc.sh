#!/bin/bash
# What a registry can make pullfs hold in memory is bounded per image.  On
# an allow_other mount, uid 65534 looks up a zstd:chunked image of its
# registry whose table of contents lists 300,000 entries (22 MB of JSON in
# a 2 MB frame) and reads three of its files: the serving process's
# resident size grows by a bounded few hundred bytes per entry, at its
# peak and after, and again after a restart that loads the image from the
# cache.  Past --max-image-entries, images fail with EFBIG and a Failed
# event naming the limit: a lazy one at its table of contents, a tar with
# too many entries, an image whose layers together have too many, and the
# cached big image after a restart; one under the limit is served.
source "$(dirname "$0")/lib.sh"

need_fuse
need_cmd setpriv
start_registry
chmod 755 "$WORK"
nobody() { setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; }
# nobody_errno PATH: the errno name of uid 65534's stat and listing of PATH.
nobody_errno() {
    nobody /usr/bin/python3 -c '
import errno, os, sys
try:
    os.listdir(sys.argv[1])
    print("OK")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))' "$1"
}
N=${BIGTOC_ENTRIES:-300000}
# Per entry, over the resident size before the lookup: what the tree and
# the lazy layer keep (about 190 bytes measured), and the peak of loading
# them (about 420).  A whole-document JSON parse of the table alone
# would take about 950 bytes per entry.
MAX_STEADY=${BIGTOC_MAX_STEADY:-260}
MAX_PEAK=${BIGTOC_MAX_PEAK:-540}

t0=$(now)
py "$INTEGRATION_DIR/mkchunked.py" push "$REGISTRY" test/big:1 "$N" || fail "cannot push test/big:1"
py "$INTEGRATION_DIR/mkchunked.py" push "$REGISTRY" test/lazy12k:1 12000 ||
    fail "cannot push test/lazy12k:1"
py "$INTEGRATION_DIR/mkchunked.py" push "$REGISTRY" test/small:1 1000 || fail "cannot push test/small:1"
for t in a b; do
    py "$INTEGRATION_DIR/mkchunked.py" tar 6000 "$WORK/$t.tar" "$t"
done
py "$INTEGRATION_DIR/mkchunked.py" tar 12000 "$WORK/wide.tar"
py "$INTEGRATION_DIR/rawpush.py" "$REGISTRY" - >/dev/null <<EOF || fail "cannot push the tar images"
test/wide:1 $WORK/wide.tar
test/two:1 $WORK/a.tar $WORK/b.tar
test/half:1 $WORK/a.tar
EOF
log "images built and pushed in $(seconds_since "$t0") s"

big=$(image_path test/big:1)
kb() { awk -v k="$1:" '$1 == k { print $2 }' /proc/"$serving"/status; }
# measure WHAT: the lookup of big:1 and reads of its files, with the
# serving process's resident size before and after, and its peak.  A
# small lazy image is pulled and read first, so that what any pull costs
# once (threads, their arenas, connections) is not counted per entry.
measure() {
    local rss0 rss1 hwm t
    serving=$(pullfs_serving_pid)
    assert_eq "file 990" "$(nobody cat "$(image_path test/small:1)/d0/f990")" "content of small:1 ($1)"
    rss0=$(kb VmRSS)
    t=$(now)
    assert_eq "file 0" "$(nobody cat "$big/d0/f0")" "content of d0/f0 ($1)"
    assert_eq "file 299990" "$(nobody cat "$big/d299/f299990")" "content of d299/f299990 ($1)"
    assert_eq "" "$(nobody cat "$big/d299/f299999")" "content of the empty d299/f299999 ($1)"
    rss1=$(kb VmRSS)
    hwm=$(kb VmHWM)
    steady=$(((rss1 - rss0) * 1024 / N))
    peak=$(((hwm - rss0) * 1024 / N))
    log "$1: $N entries in $(seconds_since "$t") s; RSS $rss0 -> $rss1 KiB, peak $hwm KiB:" \
        "$steady B/entry kept, $peak B/entry at the peak"
    # Under AddressSanitizer freed memory sits in quarantine and every
    # allocation carries its redzones: the figures are printed, not judged.
    if [ -n "${ASAN_OPTIONS:-}" ]; then
        log "$1: sanitizer build, memory per entry not judged"
        return 0
    fi
    [ "$steady" -le "$MAX_STEADY" ] ||
        fail "$1: $steady bytes per entry kept (at most $MAX_STEADY expected)"
    [ "$peak" -le "$MAX_PEAK" ] ||
        fail "$1: $peak bytes per entry at the peak (at most $MAX_PEAK expected)"
}

mount_pullfs -o allow_other --lazy-completion-delay 3600
measure "lazy pull"
assert_eq "$(seq 0 999 | sed 's/^/f/' | sort)" "$(ls "$big/d0" | sort)" "names in d0"
unmount_pullfs

mount_pullfs -o allow_other --lazy-completion-delay 3600
measure "after a restart"
unmount_pullfs

# The budget of entries per image.
mount_pullfs -o allow_other --lazy-completion-delay 3600 --max-image-entries 10000
assert_eq OK "$(nobody_errno "$(image_path test/half:1)/a/d5")" "listing of half:1/a/d5"
for ref in test/lazy12k:1 test/wide:1 test/two:1 test/big:1; do
    t=$(now)
    assert_eq EFBIG "$(nobody_errno "$(image_path "$ref")")" "errno of $ref for uid 65534"
    log "$ref: EFBIG in $(seconds_since "$t") s"
    wait_event Failed "$REGISTRY/$ref"
    assert_eq EFBIG "$(events field Failed "$REGISTRY/$ref" errno)" "errno of the Failed event for $ref"
    [ "$(event_count_msg Failed "$REGISTRY/$ref" "--max-image-entries")" -ge 1 ] ||
        fail "the Failed event for $ref does not name the limit: $(events field Failed "$REGISTRY/$ref" message)"
done
unmount_pullfs
log PASS

#!/bin/bash
# An image a serving process made again after a kill or an upgrade goes
# whole once it is removed and the kernel holds nothing of it: its loaded
# content, its packs' descriptors and the layers the collector moved
# aside (tmp/gone.*) go with it, as they do for an image of the process
# itself, not at the next restart.  Two images (a gzip one read through
# its packs and objects, a lazy one whose completion waits), each read
# before and after the restart, then removed with the page cache dropped;
# first without a restart, then across a kill and an upgrade.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/restartlib.sh"

need_fuse
start_registry
push_edge test/edge:1
push_edge_chunked test/lazy:1
mount_pullfs --supervise --gc-min-age 0 --lazy-completion-delay 3600
ctl() { timeout 60 "$PULLFSCTL" -m "$MNT" "$@"; }
edge=$(image_path test/edge:1)
lazy=$(image_path test/lazy:1)

# read_all DIR: every regular file of DIR read once
read_all() { find "$1" -type f -exec cat {} + >/dev/null 2>&1; }

# held_gone: descriptors of the serving process into tmp/gone.*
held_gone() {
    local pid n=0 f
    pid=$(serving pid)
    for f in /proc/"$pid"/fd/*; do
        case $(readlink "$f") in "$CACHE"/tmp/gone.*) n=$((n + 1)) ;; esac
    done
    echo "$n"
}
gone_dirs() { find "$CACHE/tmp" -maxdepth 1 -name 'gone.*' | wc -l; }

# run ROUND RESTART: both images read, RESTART (a command), both read
# again, the page cache dropped, both removed; what is left of them.
run() {
    read_all "$edge" && read_all "$lazy" || fail "$1: reading the images"
    wait_published
    "$2" "$1"
    read_all "$edge" && read_all "$lazy" || fail "$1: reading the images after the restart"
    sync
    echo 2 >/proc/sys/vm/drop_caches
    out=$(ctl rm "$REGISTRY/test/edge:1" "$REGISTRY/test/lazy:1" 2>&1) ||
        fail "$1: pullfsctl rm: $out"
    _all_gone() { [ "$(gone_dirs)" = 0 ] && [ "$(held_gone)" = 0 ]; }
    wait_for 10 _all_gone || true
    log "$1: after rm, $(gone_dirs) layers moved aside, $(held_gone) descriptors into them," \
        "$(du -sk "$CACHE/tmp" | cut -f1) KiB in tmp/"
    assert_eq 0 "$(gone_dirs)" "$1: layers of the removed images left in tmp/"
    assert_eq 0 "$(held_gone)" "$1: descriptors of the serving process into removed layers"
}

kill_once() {
    local pid
    pid=$(serving pid)
    kill -KILL "$pid"
    wait_for 30 _replaced "$pid" || fail "$1: serving process $pid not replaced"
}
upgrade_once() {
    local pid out
    pid=$(serving pid)
    out=$(ctl upgrade 2>&1) || fail "$1: pullfsctl upgrade: $out"
    wait_for 30 _replaced "$pid" || fail "$1: serving process $pid not replaced"
}

nothing() { :; }
run none nothing
run kill kill_once
run upgrade upgrade_once

#!/bin/bash
# Readers of a lazy file waiting for a registry that does not answer.
# Through a proxy that holds every Range request of 1 KiB or more (each
# chunk of data/big; the 6-byte file's chunk is smaller), while the proxy
# still holds them:
#   - a plain read(2) of data/big (not O_DIRECT) by a reader that handles
#     SIGINT is not ended by it (it reads data/big whole once the stall
#     ends, as on a local disk), while cat, which SIGINT kills, dies of
#     it, and dd, which handles SIGINT, dies of SIGTERM;
#   - with readers of data/big waiting (enough to fill the kernel's queue
#     of background requests, were their reads readahead), the 6-byte
#     file of the same layer reads;
# and: a binary of the lazy layer runs and a file of it reads through a
# shared mapping before it is local; once the stall ends data/big reads
# right, through a descriptor opened before too, and once local it is
# kept in the page cache.  After an upgrade from a version that did not
# say which INIT reply it sent, a shared mapping of a file not yet local
# still works.
. "$(dirname "$0")/lib.sh"
. "$INTEGRATION_DIR/images.sh"

need_root
need_fuse
need_cmd umoci skopeo dd fincore
[ -n "${SIGREAD:-}" ] && [ -x "$SIGREAD" ] || fail "SIGREAD is not set (path of tests/sigread)"
start_registry

out=$WORK/layout
st=$WORK/stage
umoci init --layout "$out"
umoci new --image "$out:1"
mkdir -p "$st/data" "$st/etc" "$st/bin"
head -c 8388608 /dev/urandom >"$st/data/big"
head -c 1048576 /dev/urandom >"$st/data/mapped"
printf 'small\n' >"$st/etc/six"
cp "$(_static_busybox)" "$st/bin/busybox"
LAYER_TIME='2021-01-01 00:00:00 UTC' _tar_layer "$st" "$WORK/layer.tar"
_add_layer "$out:1" "$WORK/layer.tar" stall
_skopeo copy --dest-decompress "oci:$out:1" "dir:$WORK/plain"
_skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
    "dir:$WORK/plain" "docker://$REGISTRY/test/stall:1"
layer=$(registry_manifest test/stall:1 | py -c 'import json,sys; print(json.load(sys.stdin)["layers"][0]["digest"])')

# Range requests of 1 KiB or more wait while $WORK/go is missing, those of
# the background completion while $WORK/whole is.
touch "$WORK/go"
start_slowproxy --gate-range "1024=$WORK/go" --gate "GET /v2/test/stall/blobs/$layer .*background=$WORK/whole"
# (no transfer floor: the reader that outlives its SIGINT waits for the
# end of the stall, however long the test takes to get there)
mount_pullfs --insecure-registry "$PROXY" --lazy-completion-delay 0 --min-transfer-rate 0
ref=$PROXY/test/stall:1
root=$MNT/images/$ref
ls "$root" >/dev/null || fail "lookup of $ref"

# stalled: Range requests the proxy holds and has not answered yet
stalled() {
    awk '$1 == "held" && / bytes=/ { sub(/^held /, ""); held[$0] = 1 }
         $1 == "done" { sub(/^done /, ""); sub(/ [0-9]+$/, ""); delete held[$0] }
         END { n = 0; for (k in held) n++; print n }' "$PROXY_LOG"
}
state_of() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1; }
now() { date +%s.%N; }
since() { py -c "import sys; print('%.3f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$(now)"; }

# Before anything of it is local: exec of a binary of the lazy layer, and
# a shared mapping of a file of it.
assert_eq ran "$("$root/bin/busybox" echo ran)" "busybox of the lazy layer"
py - "$root/data/mapped" "$st/data/mapped" <<'PY' || fail "a shared mapping of data/mapped"
import mmap, sys
with open(sys.argv[1], "rb") as f, open(sys.argv[2], "rb") as want:
    m = mmap.mmap(f.fileno(), 0, mmap.MAP_SHARED, mmap.PROT_READ)
    assert m[:] == want.read(), "mapped bytes differ"
PY
# What a read of 4 KiB in the middle of data/big fetches (no readahead
# beyond the chunks that hold it).
before=$(metric pullfs_lazy_fetched_bytes_total)
dd if="$root/data/big" of=/dev/null bs=4k count=1 skip=1024 2>/dev/null || fail "a 4 KiB read of data/big"
log "a 4 KiB read of data/big fetched $(($(metric pullfs_lazy_fetched_bytes_total) - before)) bytes"

# The stall.  A descriptor of data/big opened now is read again once the
# file is local.
rm "$WORK/go"
exec {early}<"$root/data/big"
"$SIGREAD" -u 0 -h 2 -r "$WORK/reader.ready" read "$root/data/big" >"$WORK/reader" 2>"$WORK/reader.err" &
reader=$!
track_pid "$reader"
env --default-signal=INT cat "$root/data/big" >/dev/null 2>"$WORK/cat.err" &
catpid=$!
dd if="$root/data/big" of=/dev/null bs=1M 2>"$WORK/dd.err" &
ddpid=$!
held_big() { [ "$(stalled)" -ge 1 ]; }
wait_for 30 held_big || fail "no chunk request of data/big held: $(cat "$PROXY_LOG")"
wait_for 20 test -e "$WORK/reader.ready" || fail "the reader did not start"
log "held Range requests: $(stalled)"

# Ctrl-C, and kill: cat dies of SIGINT and dd of SIGTERM while the proxy
# still holds their chunks; the reader that handles SIGINT goes on
# waiting.
t0=$(now)
kill -INT "$reader" "$catpid"
kill -TERM "$ddpid"
gone() { _pid_gone "$catpid" && _pid_gone "$ddpid"; }
wait_for 20 gone || true
log "after SIGINT and SIGTERM: $(since "$t0") s; cat's state $(state_of "$catpid")," \
    "dd's $(state_of "$ddpid"), the reader's $(state_of "$reader"); stalled requests: $(stalled)"
_pid_gone "$catpid" || fail "cat of data/big did not end after SIGINT (state $(state_of "$catpid"))"
_pid_gone "$ddpid" || fail "dd of data/big did not end after SIGTERM (state $(state_of "$ddpid"))"
[ "$(stalled)" -ge 1 ] || fail "the stall ended before the readers did"
! _pid_gone "$reader" ||
    fail "the reader that handles SIGINT ended while its chunks were held: $(cat "$WORK/reader") ($(cat "$WORK/reader.err"))"
rc=0
wait "$catpid" || rc=$?
assert_eq 130 "$rc" "exit status of cat (killed by SIGINT)"
rc=0
wait "$ddpid" || rc=$?
assert_eq 143 "$rc" "exit status of dd (killed by SIGTERM)"

# Readers of data/big waiting for their chunks, each at its own offset:
# more than the kernel runs background requests at once (12).  The 6-byte
# file of the same layer still reads while they wait.
pids=()
for i in $(seq 0 19); do
    dd if="$root/data/big" of=/dev/null bs=4k count=1 skip=$((i * 100)) 2>/dev/null &
    pids+=($!)
done
many_held() { [ "$(stalled)" -ge 12 ]; }
wait_for 30 many_held || log "only $(stalled) requests held"
t0=$(now)
cat "$root/etc/six" >"$WORK/six" 2>&1 &
six=$!
wait_for 20 _pid_gone "$six" || true
log "etc/six: $(wc -c <"$WORK/six") bytes after $(since "$t0") s, state $(state_of "$six"); stalled requests: $(stalled)"
_pid_gone "$six" || fail "the 6-byte file did not read while data/big's chunks were held"
[ "$(stalled)" -ge 1 ] || fail "the stall ended before the 6-byte file read"
assert_eq small "$(cat "$WORK/six")" "etc/six while data/big's chunks were held"

# The stall ends: data/big reads right, through a new descriptor and the
# one opened before it was local; then, local, it stays in the page cache.
touch "$WORK/go"
for p in "${pids[@]}"; do wait_for 60 _pid_gone "$p" || fail "a reader of data/big still waits after the stall"; done
wait_for 60 _pid_gone "$reader" || fail "the reader that handled SIGINT still waits after the stall"
wait "$reader" || true
assert_eq "ok 8388608" "$(cat "$WORK/reader")" "the read that SIGINT did not end ($(cat "$WORK/reader.err"))"
cmp "$root/data/big" "$st/data/big" || fail "data/big after the stall"
cmp - "$st/data/big" <&"$early" || fail "data/big through the descriptor opened before it was local"
exec {early}<&-
cat "$root/data/big" >/dev/null
cached=$(fincore -n -b -o RES "$root/data/big" | tr -d ' ')
log "data/big once local: $cached bytes in the page cache"
[ "$cached" -gt 0 ] || fail "a local file of the lazy layer is not kept in the page cache"
unmount_pullfs

# Taken over from a version that did not note its INIT reply nor ask for
# shared mappings of direct I/O files (the fault point old-init plays
# one): the kernel does not map files opened in direct I/O on that
# connection, so the new process opens files not yet local through the
# page cache, and a shared mapping of one still works.
rm -rf "$CACHE"
PULLFS_ENV=(PULLFS_FAULT=old-init)
mount_pullfs --insecure-registry "$PROXY" --lazy-completion-delay 0
PULLFS_ENV=()
old=$(pullfs_serving_pid)
out=$("$PULLFSCTL" -m "$MNT" upgrade 2>&1) || fail "pullfsctl upgrade: $out"
[ "$(pullfs_serving_pid)" != "$old" ] || fail "the serving process was not replaced by the upgrade"
py - "$root/data/mapped" "$st/data/mapped" <<'PY' || fail "a shared mapping of a file not yet local, after a takeover of a connection whose INIT reply is unknown"
import mmap, sys
with open(sys.argv[1], "rb") as f, open(sys.argv[2], "rb") as want:
    m = mmap.mmap(f.fileno(), 0, mmap.MAP_SHARED, mmap.PROT_READ)
    assert m[:] == want.read(), "mapped bytes differ"
PY
unmount_pullfs
log "PASS"

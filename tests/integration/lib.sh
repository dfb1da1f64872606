# Common code of the pullfs integration tests; each test sources it first.
#
# A test gets a private work directory ($WORK), an EXIT trap that always
# unmounts what the test mounted, stops what it started (by PID, never by
# name) and removes $WORK, and helpers to run a registry and the daemon.
# Exit status 77 means "skipped" to meson.
#
# Environment: PULLFS (the daemon binary), TESTS_SRCDIR (tests/ in the
# source tree).  PULLFS_TEST_KEEP=1 keeps $WORK for a post-mortem.

set -euo pipefail

TEST_NAME=$(basename "$0" .sh)
TESTS_SRCDIR=${TESTS_SRCDIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
INTEGRATION_DIR=$TESTS_SRCDIR/integration
TREECMP=$INTEGRATION_DIR/treecmp.py

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pullfs-$TEST_NAME.XXXXXX")
MNT=$WORK/mnt
CACHE=$WORK/cache
EVENTS=$WORK/events.log
PULLFS_LOG=$WORK/pullfs.log
mkdir -p "$MNT"

PULLFS_PID=
PULLFS_ENV=()
REGISTRY_PID=
REGISTRY_PORT=
REGISTRY=
REGISTRY_STORAGE=
REGISTRY_LOG=
_STARTED_PIDS=()
_EXTRA_MOUNTS=()

log() { printf '%s: %s\n' "$TEST_NAME" "$*" >&2; }

fail() {
    log "FAIL: $*"
    exit 1
}

skip() {
    log "SKIP: $*"
    exit 77
}

need_root() {
    [ "$(id -u)" = 0 ] || skip "needs root"
}

need_cmd() {
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || skip "needs '$c' in PATH"
    done
}

need_fuse() {
    need_root
    need_cmd fusermount3
    [ -c /dev/fuse ] || skip "no /dev/fuse"
    [ -n "${PULLFS:-}" ] || fail "PULLFS is not set (path of the pullfs binary)"
    [ -x "$PULLFS" ] || fail "PULLFS=$PULLFS is not executable"
}

# is_mounted DIR: true while something is mounted exactly on DIR.
is_mounted() {
    local dir
    dir=$(realpath -m "$1")
    # Field 5 of mountinfo is the mount point, with octal escapes for
    # blanks; $WORK never contains any.
    awk -v d="$dir" '$5 == d { found = 1 } END { exit !found }' /proc/self/mountinfo
}

# _unmount DIR: best effort, for the trap.  A daemon that hangs would hang
# the unmount too: abort its FUSE connection first if a plain unmount fails.
_unmount() {
    local dev
    is_mounted "$1" || return 0
    timeout 10 fusermount3 -u "$1" 2>/dev/null && return 0
    dev=$(awk -v d="$(realpath -m "$1")" '$5 == d {
            for (i = 7; i < NF; i++) if ($i == "-") break
            if ($(i + 1) ~ /^fuse/) { split($3, a, ":"); print a[2] }
        }' /proc/self/mountinfo | tail -n1)
    if [ -n "$dev" ] && [ -w "/sys/fs/fuse/connections/$dev/abort" ]; then
        echo 1 >"/sys/fs/fuse/connections/$dev/abort" 2>/dev/null || true
    fi
    timeout 10 fusermount3 -u "$1" 2>/dev/null || umount "$1" 2>/dev/null || umount -l "$1" 2>/dev/null || true
}

# _stop_pid PID: SIGTERM, then SIGKILL if it lingers; reaps our children.
_stop_pid() {
    local pid=$1 i
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    kill -CONT "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        _pid_gone "$pid" && break
        sleep 0.05
    done
    _pid_gone "$pid" || kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# _pid_gone PID: true once the process has exited (a zombie counts as gone).
_pid_gone() {
    local state
    [ -r "/proc/$1/stat" ] || return 0
    state=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 0
    [ -z "$state" ] || [ "$state" = Z ] || [ "$state" = X ]
}

_cleanup() {
    local rc=$? m pid
    set +e
    trap - EXIT INT TERM
    if [ "$rc" = 0 ] && ! (check_no_recovery); then
        rc=1
    fi
    if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
        _dump_logs
    fi
    for ((m = ${#_EXTRA_MOUNTS[@]} - 1; m >= 0; m--)); do
        _unmount "${_EXTRA_MOUNTS[m]}"
    done
    _unmount "$MNT"
    [ -n "$PULLFS_PID" ] && _stop_pid "$PULLFS_PID"
    [ -n "$REGISTRY_PID" ] && _stop_pid "$REGISTRY_PID"
    for pid in "${_STARTED_PIDS[@]}"; do
        _stop_pid "$pid"
    done
    if awk -v w="$WORK/" 'index($5 "/", w) == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo; then
        log "something is still mounted under $WORK; leaving it in place"
    elif [ "${PULLFS_TEST_KEEP:-0}" = 1 ]; then
        log "work directory kept: $WORK"
    else
        rm -rf "$WORK"
    fi
    exit "$rc"
}
trap _cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

_dump_logs() {
    local f
    for f in "$PULLFS_LOG" "$EVENTS"; do
        if [ -s "$f" ]; then
            log "---- last lines of $f ----"
            tail -n 40 "$f" >&2
        fi
    done
    if [ -n "$REGISTRY_LOG" ] && [ -s "$REGISTRY_LOG" ]; then
        log "---- last lines of the registry log ----"
        tail -n 8 "$REGISTRY_LOG" >&2
    fi
}

# track_pid PID: have the trap stop PID.
track_pid() { _STARTED_PIDS+=("$1"); }

# track_mount DIR: have the trap unmount DIR (before $MNT).
track_mount() { _EXTRA_MOUNTS+=("$1"); }

# wait_for SECONDS COMMAND...: poll until COMMAND succeeds (0); status 1
# on timeout, or at once with COMMAND's status 2 ("will never happen").
wait_for() {
    local deadline=$((SECONDS + $1)) rc
    shift
    while :; do
        if "$@"; then return 0; else rc=$?; fi
        [ "$rc" != 2 ] || return 2
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.05
    done
}

# py ARGS...: python3, bounded in time, so that a hung daemon fails the
# test with a message instead of hanging it.
py() {
    timeout -k 5 "${PULLFS_TEST_OP_TIMEOUT:-120}" python3 "$@"
}

free_port() {
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# ---------------------------------------------------------------- registry

# start_registry: Debian's docker-registry on a free loopback port with a
# private storage directory.  Sets REGISTRY_PORT, REGISTRY (host:port),
# REGISTRY_STORAGE, REGISTRY_LOG (its stderr: one access-log line per
# request) and REGISTRY_PID.
start_registry() {
    need_cmd docker-registry curl
    local config _
    REGISTRY_STORAGE=${REGISTRY_STORAGE:-$WORK/registry}
    mkdir -p "$REGISTRY_STORAGE"
    for _ in 1 2 3; do
        REGISTRY_PORT=${REGISTRY_PORT:-$(free_port)}
        REGISTRY=127.0.0.1:$REGISTRY_PORT
        REGISTRY_LOG=$WORK/registry.log
        config=$WORK/registry.yml
        cat >"$config" <<EOF
version: 0.1
log:
  level: warn
  formatter: text
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $REGISTRY_STORAGE
  delete:
    enabled: true
http:
  addr: $REGISTRY
EOF
        if [ -n "${REGISTRY_HTPASSWD:-}" ]; then
            cat >>"$config" <<EOF
auth:
  htpasswd:
    realm: pullfs-tests
    path: $REGISTRY_HTPASSWD
EOF
        fi
        docker-registry serve "$config" >>"$REGISTRY_LOG" 2>&1 &
        REGISTRY_PID=$!
        if wait_for 20 _registry_up; then
            return 0
        fi
        _stop_pid "$REGISTRY_PID"
        REGISTRY_PID=
        # A restart keeps its port: there is no other one to try.
        [ "${_REGISTRY_KEEP_PORT:-0}" = 0 ] || break
        # Lost a race for the port?  Try another one.
        REGISTRY_PORT=
    done
    tail -n 20 "$REGISTRY_LOG" >&2 || true
    fail "docker-registry did not come up"
}

_registry_up() {
    ! _pid_gone "$REGISTRY_PID" || return 2
    _registry_answers
}

# _registry_answers: true if a registry speaks HTTP on $REGISTRY (200, or
# 401 from one with authentication).
_registry_answers() {
    local code
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$REGISTRY/v2/") || true
    [ "$code" = 200 ] || [ "$code" = 401 ]
}

# restart_registry: start the registry again after stop_registry, on the
# same port, with the same storage and access log (and REGISTRY_HTPASSWD
# as it is now).
restart_registry() {
    [ -z "$REGISTRY_PID" ] || fail "restart_registry: the registry is running"
    [ -n "$REGISTRY_PORT" ] || fail "restart_registry: no registry was started before"
    local port=$REGISTRY_PORT
    _REGISTRY_KEEP_PORT=1 start_registry
    assert_eq "$port" "$REGISTRY_PORT" "port of the restarted registry"
}

# stop_registry: stop it (by PID); its storage stays for a later start.
stop_registry() {
    [ -n "$REGISTRY_PID" ] || fail "stop_registry: no registry running"
    _stop_pid "$REGISTRY_PID"
    REGISTRY_PID=
    ! _registry_answers || fail "registry still answers after stop"
}

# registry_mark: the number of lines in the registry's log now; give it to
# registry_count to count only the requests logged after it.
registry_mark() {
    if [ -f "$REGISTRY_LOG" ]; then wc -l <"$REGISTRY_LOG"; else echo 0; fi
}

# registry_count METHOD PATH [MARK]: requests logged after MARK (default:
# all of them) with that method and a path that starts with PATH.  End PATH
# with a blank to count one exact path: "/v2/test/busybox/manifests/1 ".
registry_count() {
    [ -f "$REGISTRY_LOG" ] || {
        echo 0
        return 0
    }
    tail -n +"$((${3:-0} + 1))" "$REGISTRY_LOG" | grep -cF "\"$1 $2" || true
}

# image_blobs REPO:TAG: digests of the config and of each layer of an image
# manifest in the registry, one a line, the config first.
image_blobs() {
    registry_manifest "$1" | python3 -c '
import json, sys
m = json.load(sys.stdin)
if "layers" not in m:
    sys.exit("image_blobs: not an image manifest")
print(m["config"]["digest"])
for l in m["layers"]:
    print(l["digest"])'
}

# registry_requests [ERE]: number of requests the registry logged so far
# whose request line matches ERE (default: any /v2/ request).
registry_requests() {
    local re=${1:-'/v2/'}
    grep -cE "\"(GET|HEAD|POST|PUT|PATCH|DELETE) [^\"]*$re" "$REGISTRY_LOG" || true
}

# manifest_digest REPO:TAG: digest of the manifest (or index) the registry
# serves for it.
manifest_digest() {
    local repo=${1%:*} tag=${1##*:}
    curl -sfI \
        -H 'Accept: application/vnd.oci.image.index.v1+json' \
        -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
        -H 'Accept: application/vnd.docker.distribution.manifest.list.v2+json' \
        -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
        "http://$REGISTRY/v2/$repo/manifests/$tag" |
        tr -d '\r' | awk -F': ' 'tolower($1) == "docker-content-digest" { print $2 }'
}

# registry_manifest REPO:TAG|REPO@DIGEST: the raw manifest JSON.
registry_manifest() {
    local ref=$1 repo ver
    if [[ $ref == *@* ]]; then repo=${ref%@*} ver=${ref#*@}; else repo=${ref%:*} ver=${ref##*:}; fi
    curl -sf \
        -H 'Accept: application/vnd.oci.image.index.v1+json' \
        -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
        -H 'Accept: application/vnd.docker.distribution.manifest.list.v2+json' \
        -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
        "http://$REGISTRY/v2/$repo/manifests/$ver"
}

# blob_path DIGEST: where the registry stores that blob.
blob_path() {
    local hex=${1#sha256:}
    echo "$REGISTRY_STORAGE/docker/registry/v2/blobs/sha256/${hex:0:2}/$hex/data"
}

# ------------------------------------------------------------------ pullfs

# mount_pullfs [ARGS...]: start the daemon in the foreground (in the
# background of this shell) on $MNT with the test's cache and events log,
# the registry marked insecure, and wait until the mount is there.
# PULLFS_ENV=(NAME=VALUE...) set before it: extra environment for the
# daemon only (PULLFS_FAULT=<point> for the crash tests, ASAN_OPTIONS...).
# shellcheck disable=SC2120
mount_pullfs() {
    need_fuse
    [ -z "$PULLFS_PID" ] || fail "mount_pullfs: pullfs already running (pid $PULLFS_PID)"
    local args=(-f --cache "$CACHE" --events-log "$EVENTS")
    [ -z "$REGISTRY_PORT" ] || args+=(--insecure-registry "127.0.0.1:$REGISTRY_PORT")
    echo "+ $PULLFS ${args[*]} $* $MNT" >>"$PULLFS_LOG"
    env ${PULLFS_ENV[@]+"${PULLFS_ENV[@]}"} "$PULLFS" "${args[@]}" "$@" "$MNT" >>"$PULLFS_LOG" 2>&1 &
    PULLFS_PID=$!
    if ! wait_for 30 _pullfs_mounted; then
        if _pid_gone "$PULLFS_PID"; then
            local rc=0
            wait "$PULLFS_PID" || rc=$?
            PULLFS_PID=
            fail "pullfs exited with status $rc before mounting"
        fi
        fail "pullfs did not mount $MNT within 30 s"
    fi
    # The supervisor mounts before its serving process has opened the
    # cache (and emptied its tmp/): a first lookup waits for that process.
    stat "$MNT/.pullfs" >/dev/null 2>&1 || true
}

_pullfs_mounted() {
    ! _pid_gone "$PULLFS_PID" || return 2
    is_mounted "$MNT"
}

# check_no_recovery: no serving process died under the supervisor (which
# would hide a crash from the test: the next one answers).  Tests that
# kill it on purpose set PULLFS_RECOVERY_EXPECTED=1.
check_no_recovery() {
    [ "${PULLFS_RECOVERY_EXPECTED:-0}" = 1 ] && return 0
    if grep -q '^pullfs: serving process .* starting another$' "$PULLFS_LOG" 2>/dev/null; then
        fail "a serving process died: $(grep '^pullfs: serving process ' "$PULLFS_LOG" | head -n 3)"
    fi
}

# unmount_pullfs: SIGTERM the daemon, which must unmount and exit 0.
unmount_pullfs() {
    [ -n "$PULLFS_PID" ] || fail "unmount_pullfs: pullfs is not running"
    check_no_recovery
    local rc=0 pid=$PULLFS_PID
    kill -TERM "$pid"
    wait_for 20 _pid_gone "$pid" || fail "pullfs did not exit within 20 s of SIGTERM"
    wait "$pid" || rc=$?
    PULLFS_PID=
    [ "$rc" = 0 ] || fail "pullfs exited with status $rc after SIGTERM (expected 0)"
    ! is_mounted "$MNT" || fail "$MNT is still mounted after pullfs exited"
}

# pullfs_serving KEY: a field of the "serving" object of the mount's
# status (pid, restarts, recoveries...).  Reading the status waits until a
# serving process answers; a document read across a switch of serving
# process may be cut (part of it from each): read again.
pullfs_serving() {
    py -c '
import json, sys, time
for i in range(100):
    try:
        print(json.load(open(sys.argv[1]))["serving"][sys.argv[2]])
        break
    except ValueError:
        time.sleep(0.05)
else:
    sys.exit("no whole status document in 100 reads")' "$MNT/.pullfs/status" "$1"
}

# pullfs_image_field REFERENCE FIELD: FIELD of the image in the mount's
# status (booleans as true/false).
# wait_published: every layer the pulls so far served from their stage
# is published (flushed, its objects shared, renamed into the cache).
wait_published() {
    wait_for 60 _published_all || fail "layers still publishing: $(grep -o '"publishing": *[0-9]*' "$MNT/.pullfs/status")"
}
_published_all() {
    [ "$(py -c 'import json,sys; print(json.load(open(sys.argv[1]))["cache"]["publishing"])' "$MNT/.pullfs/status")" = 0 ]
}

# metric NAME: the value of NAME in the mount's Prometheus metrics
metric() { awk -v k="$1" '$1 == k { print $2 }' "$MNT/.pullfs/metrics"; }

pullfs_image_field() {
    py - "$MNT/.pullfs/status" "$1" "$2" <<'PY'
import json, sys
for i in json.load(open(sys.argv[1]))["images"]:
    if i["reference"] == sys.argv[2]:
        v = i[sys.argv[3]]
        print(str(v).lower() if isinstance(v, bool) else v)
PY
}

# pullfs_serving_pid: the process that serves the mount.  By default
# pullfs is two processes: $PULLFS_PID is the supervisor, which holds the
# mount and forwards SIGHUP and SIGTERM, and the serving process (threads,
# caches, descriptors of images, the raised limits) is its child, started
# again when it dies.  Under --no-supervise both are $PULLFS_PID.
pullfs_serving_pid() { pullfs_serving pid; }

# image_path REF: the path of an image in the mount (REF without host gets
# the test registry's host:port).
image_path() {
    case $1 in
    */*/* | *.*/* | *:*/* | localhost/*) echo "$MNT/images/$1" ;;
    *) echo "$MNT/images/$REGISTRY/$1" ;;
    esac
}

# ------------------------------------------------------------------ errno

# errno_of PATH: the errno name with which stat (and listdir, for a
# directory) of PATH fails, or OK.
errno_of() {
    py - "$1" <<'EOF' || _timed_out $?
import errno, os, stat, sys
p = sys.argv[1]
try:
    st = os.stat(p)
    if stat.S_ISDIR(st.st_mode):
        os.listdir(p)
    print("OK")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
EOF
}

# read_errno PATH: the errno name with which reading the file PATH to its
# end fails, or OK.
read_errno() {
    py - "$1" <<'EOF' || _timed_out $?
import errno, sys
try:
    with open(sys.argv[1], "rb") as f:
        f.read()
    print("OK")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
EOF
}

# errno_of_op OP PATH [ARG]: the errno name with which one modifying system
# call fails, or OK.  OP: create, write, truncate, mkdir, rmdir, unlink,
# rename (to ARG), chmod, chown, utime, setxattr, removexattr, symlink,
# link (new name ARG), mknod.
errno_of_op() {
    py - "$@" <<'EOF' || _timed_out $?
import errno, os, sys
op, p = sys.argv[1], sys.argv[2]
arg = sys.argv[3] if len(sys.argv) > 3 else None
ops = {
    "create": lambda: os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)),
    "write": lambda: os.close(os.open(p, os.O_WRONLY)),
    "truncate": lambda: os.truncate(p, 0),
    "mkdir": lambda: os.mkdir(p),
    "rmdir": lambda: os.rmdir(p),
    "unlink": lambda: os.unlink(p),
    "rename": lambda: os.rename(p, arg),
    "chmod": lambda: os.chmod(p, 0o600),
    "chown": lambda: os.chown(p, 1, 1),
    "utime": lambda: os.utime(p, (0, 0)),
    "setxattr": lambda: os.setxattr(p, "user.pullfs-test", b"x"),
    "removexattr": lambda: os.removexattr(p, "user.pullfs"),
    "symlink": lambda: os.symlink("target", p),
    "link": lambda: os.link(p, arg),
    "mknod": lambda: os.mkfifo(p),
}
try:
    ops[op]()
    print("OK")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
EOF
}

_timed_out() {
    if [ "$1" = 124 ] || [ "$1" = 137 ]; then echo TIMEOUT; else echo "python-failed-$1"; fi
}

# --------------------------------------------------------------- asserts

assert_eq() {
    # assert_eq EXPECTED ACTUAL WHAT
    [ "$1" = "$2" ] || fail "${3:-value}: expected '$1', got '$2'"
}

assert_errno() {
    # assert_errno ERRNO PATH
    local got
    got=$(errno_of "$2")
    [ "$got" = "$1" ] || fail "stat/listdir of $2: expected $1, got $got"
}

assert_op_errno() {
    # assert_op_errno ERRNO OP PATH [ARG]
    local want=$1 got
    shift
    got=$(errno_of_op "$@")
    [ "$got" = "$want" ] || fail "$1 of $2: expected $want, got $got"
}

assert_contains() {
    # assert_contains NEEDLE TEXT WHAT
    [[ $2 == *"$1"* ]] || fail "${3:-text}: '$1' not found in: $2"
}

assert_not_contains() {
    [[ $2 != *"$1"* ]] || fail "${3:-text}: '$1' unexpectedly found in: $2"
}

assert_tree_eq() {
    # assert_tree_eq A B [treecmp options]: A and B are trees or snapshots.
    local a=$1 b=$2
    shift 2
    py "$TREECMP" "$@" "$a" "$b" >&2 || fail "trees differ: $a vs $b"
}

# list_dir DIR: names in DIR, one per line, sorted (fails the test if DIR
# cannot be listed).
list_dir() {
    py - "$1" <<'EOF' || fail "cannot list $1"
import os, sys
for n in sorted(os.listdir(sys.argv[1])):
    print(n)
EOF
}

# ---------------------------------------------------------------- events

EVENTS_PY=$INTEGRATION_DIR/events.py

# events ARGS...: run events.py on the test's events log.
events() { py "$EVENTS_PY" "$EVENTS" "$@"; }

# event_count REASON IMAGE
event_count() { events count "$1" "$2"; }

# wait_event REASON IMAGE: the event may be written just after the syscall
# that caused it returns.
wait_event() {
    wait_for 10 _has_event "$1" "$2" || fail "no $1 event for $2 in $EVENTS"
}
_has_event() { [ -f "$EVENTS" ] && [ "$(event_count "$1" "$2")" -gt 0 ]; }

# event_fields REASON IMAGE KEY: KEY of each such event, one a line.
event_fields() { events fields "$1" "$2" "$3"; }

# event_count_msg REASON IMAGE TEXT: such events whose message has TEXT.
event_count_msg() { events countmsg "$1" "$2" "$3"; }

# wait_event_count N REASON IMAGE: wait until there are N such events.
wait_event_count() {
    wait_for 10 _has_events "$@" ||
        fail "expected $1 $2 events for $3, found $(event_count "$2" "$3") in $EVENTS"
}
_has_events() { [ -f "$EVENTS" ] && [ "$(event_count "$2" "$3")" -ge "$1" ]; }

# ------------------------------------------------------------ slow proxy

# start_slowproxy [slowproxy.py options]: a proxy in front of the registry
# that can delay or hold requests (see slowproxy.py).  Sets PROXY_PORT,
# PROXY (host:port, to be named with --insecure-registry) and PROXY_LOG.
PROXY=
PROXY_PORT=
PROXY_LOG=
PROXY_PID=
start_slowproxy() {
    [ -n "$REGISTRY" ] || fail "start_slowproxy: no registry"
    local portfile=$WORK/slowproxy.port
    rm -f "$portfile"
    PROXY_LOG=$WORK/slowproxy.log
    python3 "$INTEGRATION_DIR/slowproxy.py" --upstream "$REGISTRY" \
        --port-file "$portfile" --log "$PROXY_LOG" "$@" >>"$WORK/slowproxy.err" 2>&1 &
    PROXY_PID=$!
    track_pid "$PROXY_PID"
    wait_for 20 _proxy_port_known "$portfile" || fail "slowproxy did not start: $(cat "$WORK/slowproxy.err")"
    PROXY_PORT=$(cat "$portfile")
    PROXY=127.0.0.1:$PROXY_PORT
}
_proxy_port_known() {
    ! _pid_gone "$PROXY_PID" || return 2
    [ -s "$1" ]
}

# proxy_count WORD ERE: lines of the proxy's log with that first word
# (request, held, done) whose rest matches ERE.
proxy_count() {
    [ -f "$PROXY_LOG" ] || {
        echo 0
        return 0
    }
    grep -E "^$1 " "$PROXY_LOG" | grep -cE "$2" || true
}

# lazy_complete: every lazy layer in $CACHE is complete, verified against
# its digest (no "lazy" file) or its table of contents ("complete" beside
# "lazy")
lazy_complete() {
    local d
    for d in "$CACHE"/layers/*/; do
        [ ! -e "$d/lazy" ] || [ -e "$d/complete" ] || return 1
    done
}

# --------------------------------------------------------------- lookups

# concurrent_lookups [lookups.py options] N DIR NAME: see lookups.py.
concurrent_lookups() { py "$INTEGRATION_DIR/lookups.py" "$@"; }

# small_tmpfs DIR SIZE: a size-limited tmpfs on DIR, unmounted by the trap.
small_tmpfs() {
    mkdir -p "$1"
    mount -t tmpfs -o "size=$2,mode=0755" pullfs-test "$1" || fail "cannot mount a tmpfs on $1"
    track_mount "$1"
}

# ------------------------------------------------------------------ time

# now: seconds since the epoch, with fractions.
now() { date +%s.%N; }

# sleep_until T: sleep until now >= T (a time from now()), for waiting out
# a window the test configured (back-off, revalidation interval).
sleep_until() {
    local left
    left=$(awk -v t="$1" -v n="$(now)" 'BEGIN { d = t - n; printf "%.3f", (d > 0 ? d : 0) }')
    sleep "$left"
}

# seconds_since T: how long ago T was, with fractions.
seconds_since() { awk -v t="$1" -v n="$(now)" 'BEGIN { printf "%.3f", n - t }'; }

# less_than A B: true if the number A < B.
less_than() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

# plus T S: T + S.
plus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a + b }'; }

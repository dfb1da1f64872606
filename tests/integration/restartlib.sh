# Helpers of the tests of --supervise (restart.sh, fdstore.sh), sourced
# after lib.sh.

# These tests kill serving processes.
PULLFS_RECOVERY_EXPECTED=1

# mount_id: the mountinfo id of what is mounted on $MNT, or nothing.
mount_id() {
    awk -v d="$(realpath -m "$MNT")" '$5 == d { id = $1 } END { print id }' /proc/self/mountinfo
}

# serving KEY: a field of the status's "serving" object (lib.sh).
serving() { pullfs_serving "$1"; }

# reader_rounds: rounds restartreader.py has completed ($WORK/reader.json).
reader_rounds() { py -c 'import json, sys; print(json.load(open(sys.argv[1]))["rounds"])' "$WORK/reader.json" 2>/dev/null || echo 0; }

# reader_errors: what restartreader.py found wrong, one a line.
reader_errors() { py -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1]))["errors"]))' "$WORK/reader.json"; }

_replaced() { [ "$(serving pid)" != "$1" ]; }

# reader_wants ROOTFS FILE...: "../FILE=SHA256" of each file of ROOTFS, one
# a line: what start_reader checks, from a working directory one level
# below the image root.
reader_wants() {
    local f
    for f in "${@:2}"; do
        echo "../$f=$(sha256sum "$1/$f" | cut -d' ' -f1)"
    done
}

# start_reader CWD ROOTPATH REL=SHA256...: restartreader.py in the
# background ($reader_pid), its status in $WORK/reader.json.
start_reader() {
    python3 "$INTEGRATION_DIR/restartreader.py" "$1" "$2" "$WORK/reader.json" "${@:3}" \
        2>"$WORK/reader.err" &
    reader_pid=$!
    track_pid "$reader_pid"
}

_reader_past() { [ "$(reader_rounds)" -gt "$1" ]; }

# reader_settle WHAT: the reader completes a round that started after this
# call.
reader_settle() {
    local r=$(($(reader_rounds) + 1))
    wait_for 60 _reader_past "$r" || fail "$1: the reader made no progress ($(reader_rounds) rounds): $(tail -n 5 "$WORK/reader.err")"
}

# kill_serving N SETTLE: N times, SIGKILL the serving process, wait until
# another serves, and run SETTLE "kill I".
kill_serving() {
    local i pid
    for ((i = 1; i <= $1; i++)); do
        pid=$(serving pid)
        kill -KILL "$pid"
        wait_for 30 _replaced "$pid" || fail "kill $i: serving process $pid not replaced"
        "$2" "kill $i"
    done
}

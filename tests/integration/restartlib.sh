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

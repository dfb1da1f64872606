# Helpers of the pullfsctl tests; sourced after lib.sh.
#
# Environment: PULLFSCTL, the pullfsctl binary.

need_pullfsctl() {
    [ -n "${PULLFSCTL:-}" ] || fail "PULLFSCTL is not set (path of the pullfsctl binary)"
    [ -x "$PULLFSCTL" ] || fail "PULLFSCTL=$PULLFSCTL is not executable"
}

# ctl ARGS...: pullfsctl on the test's mount; sets RC, OUT and ERR.
ctl() {
    RC=0
    echo "+ pullfsctl $*" >>"$WORK/ctl.log"
    timeout -k 5 "${PULLFS_TEST_OP_TIMEOUT:-120}" "$PULLFSCTL" -m "$MNT" "$@" \
        >"$WORK/ctl.out" 2>"$WORK/ctl.err" </dev/null || RC=$?
    OUT=$(cat "$WORK/ctl.out")
    ERR=$(cat "$WORK/ctl.err")
    { echo "$OUT"; echo "$ERR"; } >>"$WORK/ctl.log"
}

# ctl_ok ARGS...: ctl, and fail the test unless it exits 0.
ctl_ok() {
    ctl "$@"
    [ "$RC" = 0 ] || fail "pullfsctl $* exited $RC: $ERR"
}

# ctl_tty FILE ARGS...: pullfsctl on a pseudo-terminal (script(1)); its
# output, escapes and all, goes to FILE.  Sets RC.
ctl_tty() {
    local out=$1 cmd
    shift
    need_cmd script
    printf -v cmd '%q ' "$PULLFSCTL" -m "$MNT" "$@"
    RC=0
    COLUMNS=120 timeout -k 5 "${PULLFS_TEST_OP_TIMEOUT:-120}" \
        script -qefc "stty cols 120 2>/dev/null; $cmd" /dev/null >"$out" 2>&1 </dev/null || RC=$?
}

# json_get FILE PYTHON-EXPRESSION: evaluates the expression with j bound
# to the JSON document in FILE, and prints the result.
json_get() {
    py - "$1" "$2" <<'PY'
import json, sys
with open(sys.argv[1]) as f:
    j = json.load(f)
r = eval(sys.argv[2])
print(r if not isinstance(r, (dict, list)) else json.dumps(r))
PY
}

# status_json FILE: the daemon's status document into FILE.
status_json() {
    timeout 30 cat "$MNT/.pullfs/status" >"$1" || fail "cannot read $MNT/.pullfs/status"
}

# nth_row N: line N (1-based, the header is 1) of $OUT.
nth_row() { sed -n "${1}p" <<<"$OUT"; }

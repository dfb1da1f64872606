#!/bin/bash
# The fixed command line: --help and --version succeed, bad usage exits 2
# with a one-line error.
source "$(dirname "$0")/lib.sh"

if [ -z "${PULLFS:-}" ] || [ ! -x "$PULLFS" ]; then fail "PULLFS is not set to the pullfs binary"; fi

# run_pullfs ARGS...: sets RC, OUT, ERR.
run_pullfs() {
    RC=0
    timeout 10 "$PULLFS" "$@" >"$WORK/out" 2>"$WORK/err" </dev/null || RC=$?
    OUT=$(tr -d '\000' <"$WORK/out")
    ERR=$(tr -d '\000' <"$WORK/err")
}

for opt in --help --version; do
    run_pullfs "$opt"
    assert_eq 0 "$RC" "exit status of pullfs $opt"
    [ -n "$OUT" ] || fail "pullfs $opt printed nothing on stdout"
done

run_pullfs --help
assert_contains MOUNTPOINT "$OUT$ERR" "pullfs --help"
for opt in --cache --events-log --pull-policy --insecure-registry --config; do
    assert_contains "$opt" "$OUT" "pullfs --help"
done

run_pullfs --version
[[ $OUT =~ [0-9]+\.[0-9]+ ]] || fail "pullfs --version shows no version number: $OUT"

# one_line_error WHAT: the last run failed with 2 and one line on stderr.
one_line_error() {
    assert_eq 2 "$RC" "exit status of pullfs $1"
    [ -s "$WORK/err" ] || fail "pullfs $1: nothing on stderr"
    if LC_ALL=C grep -q '[^[:print:][:space:]]' "$WORK/err" || [ "$(tr -d '\000' <"$WORK/err" | wc -c)" != "$(wc -c <"$WORK/err")" ]; then
        fail "pullfs $1: control characters in the error message: $(od -c "$WORK/err" | head -5)"
    fi
    [ "$(printf '%s\n' "$ERR" | wc -l)" = 1 ] || fail "pullfs $1: more than one line on stderr: $ERR"
}

run_pullfs --no-such-option "$MNT"
one_line_error "--no-such-option MNT"

run_pullfs -f
one_line_error "-f (no mountpoint)"

run_pullfs
one_line_error "(no arguments)"

run_pullfs -f --pull-policy sometimes "$MNT"
one_line_error "--pull-policy sometimes MNT"

run_pullfs -f --cache
one_line_error "--cache (no value)"

! is_mounted "$MNT" || fail "a failed command line mounted $MNT"
log "PASS"

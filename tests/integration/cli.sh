#!/bin/bash
# The fixed command line: --help and --version succeed, bad usage exits 2
# with a one-line error: unknown options, missing values, every numeric
# option given anything but its number (nan, inf, signs, blanks, hex,
# exponents, overflow, out of range), options that contradict each other,
# the same through -o, and config-file lines with empty values, relative
# paths or bad values (named by file and line).
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

run_pullfs -f --cache "$WORK/cache" ""
one_line_error "an empty MOUNTPOINT"

# ---- every numeric option: nothing but its number, in its range
numeric="max-concurrent-downloads revalidate-interval backoff-initial backoff-max registry-qps
         registry-burst max-parallel-pulls connect-timeout low-speed-timeout cache-max-bytes
         gc-high-percent gc-low-percent gc-min-age min-transfer-rate transfer-rate-window
         pull-slot-share-after"
for opt in $numeric; do
    for v in nan inf -1 -0 12abc 0x10 1e3 " 5" "5 " +5 99999999999999999999999 ""; do
        run_pullfs -f --cache "$WORK/cache" "--$opt" "$v" "$MNT"
        one_line_error "--$opt '$v'"
        assert_contains "$opt" "$ERR" "message for --$opt '$v'"
    done
done
for arg in "--max-concurrent-downloads 0" "--max-concurrent-downloads 17" "--registry-qps 0.0001" \
    "--registry-qps 1000001" "--registry-burst 0" "--gc-high-percent 101" "--gc-low-percent 0" \
    "--connect-timeout 0" "--cache-max-bytes 16E" "--cache-max-bytes 1.5" \
    "--backoff-initial 600" "--backoff-max 5" "--gc-low-percent 90" "--insecure-registry a/b"; do
    # shellcheck disable=SC2086
    run_pullfs -f --cache "$WORK/cache" $arg "$MNT"
    one_line_error "$arg"
done

# ---- -o: the same checks, and flags take a boolean
for o in cache= registry_qps=nan gc_min_age=-1 pull_qps_fail_fast=maybe foreground=; do
    run_pullfs -o "$o" "$MNT"
    one_line_error "-o $o"
done

# ---- the config file: empty values, relative paths and bad values are
# refused with the file and the line
conf=$WORK/bad.conf
for bad in "insecure-registry =" "insecure-registry = \"\"" "cache =" "cache = relative/dir" \
    "events-log = events.log" "registry-qps = nan" "pull-qps-fail-fast = maybe" \
    "pull-qps-fail-fast =" "max-parallel-pulls = 0"; do
    printf '# a comment\nmax-concurrent-downloads = 2\n%s\n' "$bad" >"$conf"
    run_pullfs -f --config "$conf" "$MNT"
    one_line_error "config line '$bad'"
    assert_contains "$conf:3: " "$ERR" "message for config line '$bad'"
done
for bad in "mirror =" "insecure =" "ca-file =" "client-key = key.pem"; do
    printf '# a comment\n\n[registry "r.example.com"]\n%s\n' "$bad" >"$conf"
    run_pullfs -f --config "$conf" "$MNT"
    one_line_error "config line '$bad' in a registry section"
    assert_contains "$conf:4: " "$ERR" "message for config line '$bad' in a registry section"
done

! is_mounted "$MNT" || fail "a failed command line mounted $MNT"
log "PASS"

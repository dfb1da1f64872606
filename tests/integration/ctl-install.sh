#!/bin/bash
# meson install into a DESTDIR puts every file in place; the unit passes
# systemd-analyze verify; the man pages render; the example config is
# accepted by pullfs and kept over a reinstall; completion loads.
source "$(dirname "$0")/lib.sh"

[ -n "${PULLFS:-}" ] || fail "PULLFS is not set"
need_cmd meson
BUILD=$(dirname "$PULLFS")
[ -f "$BUILD/meson-private/coredata.dat" ] || skip "$BUILD is not a meson build directory"
DEST=$WORK/dest
PREFIX=$(meson introspect --buildoptions "$BUILD" | python3 -c '
import json, sys
print({o["name"]: o["value"] for o in json.load(sys.stdin)}["prefix"])')
SYSCONF=$(meson introspect --buildoptions "$BUILD" | python3 -c '
import json, sys, os
o = {o["name"]: o["value"] for o in json.load(sys.stdin)}
print(os.path.join(o["prefix"], o["sysconfdir"]))')

meson install -C "$BUILD" --no-rebuild --destdir "$DEST" >"$WORK/install.log" 2>&1 ||
    fail "meson install failed: $(tail -n 20 "$WORK/install.log")"

P=$DEST$PREFIX
expect=(
    "$P/bin/pullfs"
    "$P/bin/pullfsctl"
    "$P/lib/systemd/system/pullfs.service"
    "$P/share/doc/pullfs/pullfs.conf.example"
    "$P/share/bash-completion/completions/pullfsctl"
    "$DEST$SYSCONF/pullfs.conf"
)
have_man=0
if command -v scdoc >/dev/null 2>&1; then
    have_man=1
    expect+=("$P/share/man/man8/pullfs.8" "$P/share/man/man8/pullfsctl.8")
fi
for f in "${expect[@]}"; do
    [ -f "$f" ] || fail "meson install did not install $f; installed: $(cd "$DEST" && find . -type f)"
done
[ -x "$P/bin/pullfs" ] && [ -x "$P/bin/pullfsctl" ] || fail "binaries are not executable"
"$P/bin/pullfsctl" --version | grep -q '^pullfsctl [0-9]' || fail "installed pullfsctl --version"
"$P/bin/pullfs" --version | grep -q '^pullfs [0-9]' || fail "installed pullfs --version"

# ---- the config: pullfs reads the installed one without complaint, and a
# reinstall keeps an operator's edits.
"$P/bin/pullfs" --config "$DEST$SYSCONF/pullfs.conf" --help >/dev/null ||
    fail "pullfs rejects the installed example config"
echo '# edited by the operator' >>"$DEST$SYSCONF/pullfs.conf"
meson install -C "$BUILD" --no-rebuild --destdir "$DEST" >>"$WORK/install.log" 2>&1 || fail "second meson install failed"
grep -q 'edited by the operator' "$DEST$SYSCONF/pullfs.conf" || fail "a reinstall overwrote $SYSCONF/pullfs.conf"

# ---- the unit
unit=$P/lib/systemd/system/pullfs.service
grep -qx "ExecStart=$PREFIX/bin/pullfs -f --config $SYSCONF/pullfs.conf -o allow_other /run/pullfs" "$unit" ||
    fail "ExecStart of the unit: $(grep ExecStart "$unit")"
# The supervisor says READY=1 and keeps the FUSE descriptor and the
# hand-over state in systemd's store (restart.sh and fdstore.sh test what
# it does with them); reload upgrades in place.
grep -qx "ExecReload=$PREFIX/bin/pullfsctl -m /run/pullfs upgrade" "$unit" ||
    fail "ExecReload of the unit: $(grep ExecReload "$unit")"
for l in Type=notify NotifyAccess=main FileDescriptorStoreMax=3 Restart=on-failure LimitNOFILE=524288 After=network-online.target Wants=network-online.target WantedBy=multi-user.target; do
    grep -qx "$l" "$unit" || fail "no '$l' in the unit"
done
if command -v systemd-analyze >/dev/null 2>&1; then
    # Verify it as installed, with its paths pointed into DESTDIR.
    mkdir -p "$WORK/unit"
    sed "s|$PREFIX/|$P/|g; s|$SYSCONF/|$DEST$SYSCONF/|g" "$unit" >"$WORK/unit/pullfs.service"
    if [ "$have_man" = 1 ]; then man_opt=(); else man_opt=(--man=no); fi
    MANPATH=$P/share/man SYSTEMD_LOG_LEVEL=notice systemd-analyze verify "${man_opt[@]}" "$WORK/unit/pullfs.service" \
        >"$WORK/verify.log" 2>&1 || fail "systemd-analyze verify: $(cat "$WORK/verify.log")"
    # Warnings count too.
    ! grep -v 'is not executable\|Failed to .*lookup' "$WORK/verify.log" | grep -q . ||
        fail "systemd-analyze verify complains: $(cat "$WORK/verify.log")"
else
    log "no systemd-analyze: unit not verified"
fi

# ---- man pages render, with their sections
if [ "$have_man" = 1 ]; then
    need_cmd man
    for page in pullfs pullfsctl; do
        MANWIDTH=80 man -l "$P/share/man/man8/$page.8" >"$WORK/$page.txt" 2>"$WORK/$page.err" ||
            fail "man -l $page.8 failed: $(cat "$WORK/$page.err")"
        [ ! -s "$WORK/$page.err" ] || fail "man -l $page.8 warns: $(cat "$WORK/$page.err")"
        for s in NAME SYNOPSIS DESCRIPTION "SEE ALSO"; do
            grep -q "^$s" "$WORK/$page.txt" || fail "no $s section in $page(8)"
        done
    done
    for c in pull ls inspect rm gc upgrade status events; do
        grep -q "^       $c" "$WORK/pullfsctl.txt" || fail "pullfsctl(8) does not describe $c"
    done
    grep -q "fuse.pullfs" "$WORK/pullfs.txt" || fail "pullfs(8) does not show the fstab line"
else
    log "no scdoc: man pages not built, not checked"
fi

# ---- bash completion loads and completes commands
comp=$P/share/bash-completion/completions/pullfsctl
bash -n "$comp" || fail "syntax error in $comp"
got=$(bash -c '
_init_completion() { cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}; words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD; }
__ltrim_colon_completions() { :; }
source "$1"
COMP_WORDS=(pullfsctl st); COMP_CWORD=1
_pullfsctl
echo "${COMPREPLY[*]}"
COMP_WORDS=(pullfsctl events --); COMP_CWORD=2
_pullfsctl
echo "${COMPREPLY[*]}"' _ "$comp")
assert_eq status "$(head -n1 <<<"$got")" "completion of 'pullfsctl st'"
assert_contains "--follow" "$(tail -n1 <<<"$got")" "completion of 'pullfsctl events --'"

log "ok"

#!/bin/bash
# A real distribution through pullfs: Debian 12 minbase, as one layer and
# as three layers where the upper ones delete, replace and bring back
# files.  The package manager vouches for every file (dpkg --verify, and
# md5sum -c of every list in /var/lib/dpkg/info), and the whole tree equals
# what `umoci unpack` makes of the same image.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/debian-image.sh"

need_fuse
need_cmd chroot md5sum
debian_layout >/dev/null
start_registry
push_debian 1
push_debian layers
mount_pullfs

# in_chroot ROOT SCRIPT: bash -c SCRIPT inside ROOT; its output on stdout,
# fails the test on a nonzero status.
in_chroot() {
    local out rc=0
    out=$(timeout 120 chroot "$1" /bin/bash -c "$2" 2>&1) || rc=$?
    [ "$rc" = 0 ] || fail "chroot $1 /bin/bash -c '$2' exited $rc: $out"
    printf '%s' "$out"
}

# check_md5sums ROOT [ERE]: md5sum -c of every dpkg md5sums list inside ROOT,
# leaving out the paths (absolute) that match ERE.
check_md5sums() {
    local root=$1 skip=${2:-'^$'} n out
    in_chroot "$root" "cat /var/lib/dpkg/info/*.md5sums" >"$WORK/md5sums.all"
    awk -v re="$skip" '{ p = substr($0, 35); if (("/" p) !~ re) print }' \
        "$WORK/md5sums.all" >"$WORK/md5sums"
    n=$(wc -l <"$WORK/md5sums")
    [ "$n" -gt 1000 ] || fail "only $n files in the dpkg md5sums lists of $root"
    out=$(cd "$root" && timeout 120 md5sum --quiet -c "$WORK/md5sums" 2>&1) ||
        fail "md5sum -c of the dpkg lists in $root: $(head -n 20 <<<"$out")"
    log "md5sum -c: $n files match their dpkg md5sums in $root"
}

reference_tree() {
    rm -rf "$WORK/bundle"
    umoci unpack --image "$(debian_layout):$1" "$WORK/bundle" >/dev/null
    echo "$WORK/bundle/rootfs"
}

# ---- one layer: the tree debootstrap made, as it was.
root=$MNT/images/$REGISTRY/test/debian:1
assert_errno OK "$root"
out=$(in_chroot "$root" 'apt-get --version')
assert_eq "apt 2.6" "$(head -c7 <<<"$out")" "first line of apt-get --version"
out=$(in_chroot "$root" 'dpkg --verify')
[ -z "$out" ] || fail "dpkg --verify in debian:1 reports: $(head -n 20 <<<"$out")"
check_md5sums "$root"
assert_eq "$(readlink "$root/etc/os-release")" ../usr/lib/os-release "/etc/os-release in debian:1"
assert_eq "$(stat -c %i "$root/usr/bin/perl")" "$(stat -c %i "$root/usr/bin/perl5.36.0")" \
    "inode of /usr/bin/perl and /usr/bin/perl5.36.0 (hardlinks)"
assert_tree_eq "$(reference_tree 1)" "$root" --dir-mtime
log "debian:1 passes dpkg --verify, md5sum -c and the tree comparison"

# ---- three layers: whiteouts, a replaced symlink, an opaque directory,
# a directory brought back.
root=$MNT/images/$REGISTRY/test/debian:layers
assert_errno OK "$root"
# (Output to the shell, not to the image's /dev/null: a FUSE mount is nodev.)
out=$(in_chroot "$root" 'apt-get --version')
assert_eq "apt 2.6" "$(head -c7 <<<"$out")" "first line of apt-get --version in debian:layers"
out=$(in_chroot "$root" 'dpkg --verify || true')
# Only the removed files may be reported, and only as missing.
bad=$(awk -v re="$DEBIAN_REMOVED_RE" '!($1 == "missing" && $NF ~ re)' <<<"$out")
[ -z "$bad" ] || fail "dpkg --verify in debian:layers reports more than the removed files: $(head -n 20 <<<"$bad")"
n=$(grep -c '^missing' <<<"$out" || true)
[ "$n" -gt 100 ] || fail "dpkg --verify in debian:layers reports only $n missing files"
log "dpkg --verify in debian:layers: $n files missing, all removed by layer 2, nothing else"
check_md5sums "$root" "$DEBIAN_REMOVED_RE"
assert_eq "dpkg" "$(list_dir "$root/usr/share/doc")" "ls /usr/share/doc in debian:layers"
assert_eq "README.pullfs" "$(list_dir "$root/usr/share/doc/dpkg")" "ls /usr/share/doc/dpkg in debian:layers"
assert_eq "NOTE" "$(list_dir "$root/usr/share/common-licenses")" "ls /usr/share/common-licenses in debian:layers"
[ -f "$root/etc/os-release" ] && [ ! -L "$root/etc/os-release" ] ||
    fail "/etc/os-release in debian:layers is not a regular file"
assert_eq 'PRETTY_NAME="pullfs test layer"' "$(in_chroot "$root" '. /etc/os-release && echo "PRETTY_NAME=\"$PRETTY_NAME\""')" \
    "/etc/os-release sourced in debian:layers"
assert_tree_eq "$(reference_tree layers)" "$root" --dir-mtime
log "debian:layers passes dpkg --verify, md5sum -c and the tree comparison"

unmount_pullfs
log "PASS"

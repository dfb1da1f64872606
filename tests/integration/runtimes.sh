#!/bin/bash
# Real runtimes on top of a pullfs image (the Debian minbase image):
#   - crun, and runc, run an OCI bundle whose root.path is the image path,
#     with a read-only root;
#   - overlayfs with the image as lowerdir: read-only (two lowerdirs), and
#     writable with a tmpfs upper (new files, copy-up, whiteouts), while the
#     image itself stays as it was;
#   - bubblewrap with the image bound read-only as /;
#   - podman run --rootfs IMAGE:O (a writable overlay of podman's own over
#     the image), with a private store;
#   - systemd-nspawn -D on the image path itself, read-only: it reads its
#     settings file NAME.nspawn beside the image and takes the lock file
#     .#NAME.lck there, which must answer as on a read-only disk.
# A runtime that is missing or cannot run here at all is reported as
# skipped, and the test skips (77) only when none of them could run.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"
source "$INTEGRATION_DIR/debian-image.sh"

need_fuse
need_cmd chroot python3 sha256sum
debian_layout >/dev/null
start_registry
push_debian 1
mount_pullfs
root=$MNT/images/$REGISTRY/test/debian:1
assert_errno OK "$root"
version=$(cat "$root/etc/debian_version")
passwd_sum=$(sha256sum <"$root/etc/passwd")

RAN=()
SKIPPED=()
note_skip() {
    log "skipping $1: $2"
    SKIPPED+=("$1")
}

# ---------------------------------------------------------------- OCI

# make_bundle DIR: an OCI bundle running a few checks from the image.
# The spec's cgroup device rules are left out: on cgroup v2 they need an
# eBPF program, and loading one needs CAP_SYS_RESOURCE (RLIMIT_MEMLOCK),
# which a container such as the one CI runs in does not have.
make_bundle() {
    local dir=$1
    mkdir -p "$dir"
    py - "$dir/config.json" "$root" <<'EOF'
import json, os, shutil, subprocess, sys, tempfile
out, rootfs = sys.argv[1], sys.argv[2]
with tempfile.TemporaryDirectory() as d:
    tool = "runc" if shutil.which("runc") else "crun"
    subprocess.run([tool, "spec"], cwd=d, check=True)
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
c["root"] = {"path": rootfs, "readonly": True}
c["process"]["terminal"] = False
c["process"]["args"] = ["/bin/bash", "-c",
    "echo debian $(cat /etc/debian_version); "
    "touch /etc/x 2>/dev/null && echo root-writable || echo root-readonly; "
    "echo pid $$; "
    "dpkg-query -W -f='${Package}\\n' | wc -l"]
c["hostname"] = "pullfs-test"
c.get("linux", {}).get("resources", {}).pop("devices", None)
with open(out, "w") as f:
    json.dump(c, f, indent=1)
EOF
}

# check_oci_output NAME OUTPUT
check_oci_output() {
    local name=$1 out=$2
    assert_eq "debian $version" "$(sed -n 1p <<<"$out")" "$name: /etc/debian_version in the container"
    assert_eq root-readonly "$(sed -n 2p <<<"$out")" "$name: the root is read-only"
    assert_eq "pid 1" "$(sed -n 3p <<<"$out")" "$name: the shell is pid 1 of its own namespace"
    [ "$(sed -n 4p <<<"$out")" -gt 50 ] || fail "$name: dpkg-query lists only $(sed -n 4p <<<"$out") packages"
}

run_crun() {
    command -v crun >/dev/null || {
        note_skip crun "not installed"
        return 0
    }
    local b=$WORK/bundle-crun out rc=0
    make_bundle "$b"
    # crun 1.8 refuses a hybrid cgroup hierarchy; in a private mount
    # namespace with cgroup2 alone on /sys/fs/cgroup it runs.
    out=$(timeout 60 unshare -m sh -c '
        if ! grep -q "^cgroup2 /sys/fs/cgroup " /proc/mounts; then
            mount -t cgroup2 none /sys/fs/cgroup || exit 99
        fi
        exec crun run --bundle "$1" "pullfs-test-$$"' sh "$b" 2>&1) || rc=$?
    if [ "$rc" = 99 ]; then
        note_skip crun "cannot mount cgroup2 on /sys/fs/cgroup here: $out"
        return 0
    fi
    [ "$rc" = 0 ] || fail "crun run of a bundle rooted in $root exited $rc: $out"
    check_oci_output crun "$out"
    RAN+=(crun)
    log "crun: $(tr '\n' ' ' <<<"$out")"
}

run_runc() {
    command -v runc >/dev/null || {
        note_skip runc "not installed"
        return 0
    }
    local b=$WORK/bundle-runc out rc=0
    make_bundle "$b"
    out=$(timeout 60 runc --root "$WORK/runc-state" run --bundle "$b" "pullfs-test-$$" 2>&1) || rc=$?
    [ "$rc" = 0 ] || fail "runc run of a bundle rooted in $root exited $rc: $out"
    check_oci_output runc "$out"
    RAN+=(runc)
    log "runc: $(tr '\n' ' ' <<<"$out")"
}

# ----------------------------------------------------------- overlayfs

run_overlay() {
    if ! grep -qw overlay /proc/filesystems && ! modprobe overlay 2>/dev/null; then
        note_skip overlayfs "no overlay filesystem in this kernel"
        return 0
    fi
    local o=$WORK/ovl out lower
    # An image path holds the registry's host:port, and ':' separates
    # lowerdir entries: escape it.
    lower=${root//:/\\:}
    mkdir -p "$o/empty" "$o/ro" "$o/t" "$o/rw"

    # Read-only: the image under an empty directory.
    mount -t overlay overlay -o "lowerdir=$o/empty:$lower" "$o/ro" ||
        fail "overlayfs with lowerdir=$o/empty:$root (read-only) failed"
    track_mount "$o/ro"
    assert_eq "$version" "$(cat "$o/ro/etc/debian_version")" "etc/debian_version through a read-only overlay"
    assert_op_errno EROFS create "$o/ro/new"
    out=$(timeout 60 chroot "$o/ro" /bin/bash -c 'dpkg --verify' 2>&1) || fail "dpkg --verify in the read-only overlay: $out"
    [ -z "$out" ] || fail "dpkg --verify in the read-only overlay reports: $(head -n 20 <<<"$out")"
    umount "$o/ro"

    # Writable: tmpfs upper and work directories.
    mount -t tmpfs tmpfs "$o/t"
    track_mount "$o/t"
    mkdir -p "$o/t/upper" "$o/t/work"
    mount -t overlay overlay -o "lowerdir=$lower,upperdir=$o/t/upper,workdir=$o/t/work" "$o/rw" ||
        fail "overlayfs with lowerdir=$root and a tmpfs upper failed"
    track_mount "$o/rw"
    local m=$o/rw
    # A new file, written and read back.
    head -c 3000000 /dev/urandom >"$WORK/blob"
    cp "$WORK/blob" "$m/root/blob"
    assert_eq "$(sha256sum <"$WORK/blob")" "$(sha256sum <"$m/root/blob")" "a new file read back from the overlay"
    [ -f "$o/t/upper/root/blob" ] || fail "the new file is not in the upper directory"
    # Copy-up by a real program: useradd rewrites /etc/passwd and friends.
    out=$(timeout 60 chroot "$m" /bin/bash -c 'useradd -m -u 4242 pullfs-user && id -u pullfs-user && ls -d /home/pullfs-user' 2>&1) ||
        fail "useradd in the writable overlay: $out"
    assert_eq "4242
/home/pullfs-user" "$out" "useradd in the writable overlay"
    grep -q '^pullfs-user:' "$o/t/upper/etc/passwd" || fail "/etc/passwd was not copied up"
    assert_eq "$passwd_sum" "$(sha256sum <"$root/etc/passwd")" "/etc/passwd in the image after useradd in the overlay"
    # Deletions: a file and a directory tree of the image become whiteouts.
    rm "$m/etc/debian_version"
    rm -r "$m/usr/share/doc/bash"
    assert_errno ENOENT "$m/etc/debian_version"
    assert_errno ENOENT "$m/usr/share/doc/bash"
    assert_eq "character special file 0,0" "$(stat -c '%F %t,%T' "$o/t/upper/etc/debian_version")" "whiteout of etc/debian_version in the upper directory"
    assert_eq "character special file 0,0" "$(stat -c '%F %t,%T' "$o/t/upper/usr/share/doc/bash")" "whiteout of usr/share/doc/bash in the upper directory"
    assert_eq "$version" "$(cat "$root/etc/debian_version")" "etc/debian_version in the image after rm in the overlay"
    [ -f "$root/usr/share/doc/bash/copyright" ] || fail "usr/share/doc/bash/copyright gone from the image after rm -r in the overlay"
    # The rest of the tree is still what dpkg installed.
    out=$(timeout 60 chroot "$m" /bin/bash -c 'dpkg --verify' 2>&1 || true)
    bad=$(awk '!($1 == "missing" && ($NF == "/etc/debian_version" || $NF ~ "^/usr/share/doc/bash(/|$)"))' <<<"$out")
    [ -z "$bad" ] || fail "dpkg --verify in the writable overlay: $(head -n 20 <<<"$bad")"
    umount "$m"
    umount "$o/t"
    RAN+=(overlayfs)
    log "overlayfs: read-only and writable stacks on the image work; the image is untouched"
}

# ------------------------------------------------------------ bubblewrap

run_bwrap() {
    command -v bwrap >/dev/null || {
        note_skip bwrap "not installed"
        return 0
    }
    local out rc=0
    out=$(timeout 60 bwrap --ro-bind "$root" / --proc /proc --dev /dev --tmpfs /tmp \
        --unshare-pid --unshare-uts --hostname pullfs-test \
        /bin/bash -c 'cat /etc/debian_version; echo x >/tmp/x && cat /tmp/x; touch /etc/x 2>/dev/null && echo writable || echo readonly; dpkg --verify' 2>&1) || rc=$?
    [ "$rc" = 0 ] || fail "bwrap --ro-bind $root / exited $rc: $out"
    assert_eq "$version
x
readonly" "$out" "output of bwrap with the image as /"
    RAN+=(bwrap)
    log "bwrap: ran bash, dpkg --verify clean"
}

# ------------------------------------------------------- systemd-nspawn

run_nspawn() {
    command -v systemd-nspawn >/dev/null || {
        note_skip systemd-nspawn "not installed"
        return 0
    }
    local out rc=0 before
    before=$(wc -l <"$EVENTS")
    # PID 1 here need not be systemd: no machine registration, no scope
    # unit of its own, standard input and output as they are.
    out=$(timeout 120 systemd-nspawn -q --register=no --keep-unit --pipe --read-only \
        -D "$root" /bin/bash -c 'cat /etc/debian_version; touch /etc/x 2>/dev/null && echo writable || echo readonly; echo pid $$; dpkg-query -W -f="\${Package}\n" | wc -l' 2>&1) || rc=$?
    [ "$rc" = 0 ] || fail "systemd-nspawn --read-only -D $root exited $rc: $out"
    # (nspawn warns on stderr about what it cannot bind on a read-only root)
    assert_contains "$version" "$out" "systemd-nspawn: /etc/debian_version in the container"
    assert_contains readonly "$out" "systemd-nspawn: the root is read-only"
    assert_contains "pid 1" "$out" "systemd-nspawn: the shell is pid 1 of its own namespace"
    assert_eq 0 "$(tail -n +"$((before + 1))" "$EVENTS" | grep -c '"Warning"' || true)" \
        "Warning events written while systemd-nspawn started"
    RAN+=(systemd-nspawn)
    log "systemd-nspawn: $(grep -v '^Failed to mount\|^Attempted' <<<"$out" | tr '\n' ' ')"
}

# --------------------------------------------------------------- podman

run_podman() {
    command -v podman >/dev/null || {
        note_skip podman "not installed"
        return 0
    }
    local out rc=0 p=$WORK/podman
    mkdir -p "$p"
    # podman 4.3 cannot raise the limits here: runc with limits it may set
    # (TOOL-FACTS).  Its overlay of the image lives in the private store.
    out=$(timeout 120 podman --root "$p/root" --runroot "$p/run" --storage-driver overlay \
        run --rm --runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
        --rootfs "$root:O" /bin/bash -c 'cat /etc/debian_version; echo x >/etc/x && cat /etc/x; echo pid $$' 2>&1) || rc=$?
    grep -q " $p/root/overlay " /proc/self/mountinfo && track_mount "$p/root/overlay"
    [ "$rc" = 0 ] || fail "podman run --rootfs $root:O exited $rc: $out"
    assert_eq "$version
x
pid 1" "$out" "output of podman run --rootfs with the image and an overlay"
    [ ! -e "$root/etc/x" ] || fail "podman's overlay wrote into the image"
    RAN+=(podman)
    log "podman: ran bash on the image with a writable overlay"
}

run_crun
run_runc
run_overlay
run_bwrap
run_podman
run_nspawn

unmount_pullfs
[ "${#RAN[@]}" -gt 0 ] || skip "no runtime could run here (skipped: ${SKIPPED[*]})"
# crun or runc: at least one OCI runtime must have run.
[[ " ${RAN[*]} " == *" crun "* || " ${RAN[*]} " == *" runc "* ]] ||
    skip "neither crun nor runc could run here (ran: ${RAN[*]}; skipped: ${SKIPPED[*]})"
log "PASS (ran: ${RAN[*]}${SKIPPED[*]:+; skipped: ${SKIPPED[*]}})"

# A real distribution as a test image; sourced after lib.sh and images.sh.
#
# debian_rootfs_tar: a Debian 12 minbase root filesystem, as an
#   uncompressed tar (numeric owners, xattrs).  Made once with debootstrap
#   from the configured Debian mirror and kept in the build directory
#   ($DEBIAN_DIR/debian-minbase.tar), so only the first run on a machine
#   pays the minute or two of debootstrap.
# debian_layout: an OCI layout (in $DEBIAN_DIR, keyed by a hash of this
#   file and of the tarball) with two images:
#     tag "1"       one gzip layer, the whole tree;
#     tag "layers"  three layers: the tree; then every /usr/share/doc/*
#                   whited out, /etc/os-release (a symlink) replaced by a
#                   file, /usr/share/common-licenses made opaque with one new
#                   file; then /usr/share/doc/dpkg/ brought back with
#                   other content.
# DEBIAN_REMOVED_RE: an ERE of the absolute paths the "layers" image no
#   longer has (its dpkg database still lists them).
# push_debian [TAG [REPO:TAG]]: push tag (default "1") to the test registry.
#
# Environment: PULLFS_DEBIAN_MIRROR overrides the mirror taken from the apt
# sources; PULLFS_DEBIAN_TAR names a ready-made tarball to use instead.

DEBIAN_DIR=${DEBIAN_DIR:-$(dirname "$(dirname "$IMAGES_DIR")")/integration-debian}
DEBIAN_SUITE=bookworm
DEBIAN_REMOVED_RE='^/usr/share/(doc|common-licenses)/'

# The first Debian mirror the apt sources name for the main archive (not
# the security one), in either the one-line or the deb822 format.
debian_mirror() {
    if [ -n "${PULLFS_DEBIAN_MIRROR:-}" ]; then
        echo "$PULLFS_DEBIAN_MIRROR"
        return 0
    fi
    local m
    m=$(
        {
            cat /etc/apt/sources.list 2>/dev/null
            cat /etc/apt/sources.list.d/*.list 2>/dev/null
        } | awk '$1 == "deb" {
                for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) break
                if ($i ~ /^https?:/ && $i !~ /security/ && $(i + 1) ~ /^(bookworm|stable)$/) { print $i; exit }
            }'
    )
    if [ -z "$m" ]; then
        m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '
            /^[ \t]*$/ { if (uri != "" && suites ~ /(^| )(bookworm|stable)( |$)/) { print uri; exit } uri = ""; suites = ""; next }
            tolower($1) == "uris:" { for (i = 2; i <= NF; i++) if ($i !~ /security/) { uri = $i; break } }
            tolower($1) == "suites:" { suites = ""; for (i = 2; i <= NF; i++) suites = suites " " $i; suites = suites " " }
            END { if (uri != "" && suites ~ /(^| )(bookworm|stable)( |$)/) print uri }' | head -n1)
    fi
    echo "${m:-http://deb.debian.org/debian}"
}

debian_rootfs_tar() {
    if [ -n "${PULLFS_DEBIAN_TAR:-}" ]; then
        echo "$PULLFS_DEBIAN_TAR"
        return 0
    fi
    local tar=$DEBIAN_DIR/debian-minbase.tar
    if [ ! -s "$tar" ]; then
        need_root
        need_cmd debootstrap
        mkdir -p "$DEBIAN_DIR"
        (
            flock 9
            [ -s "$tar" ] || _make_debian_tar "$tar"
        ) 9>"$DEBIAN_DIR/.lock"
    fi
    echo "$tar"
}

_make_debian_tar() {
    local out=$1 root mirror
    mirror=$(debian_mirror)
    root=$(mktemp -d "$DEBIAN_DIR/rootfs.XXXXXX")
    log "debootstrap --variant=minbase $DEBIAN_SUITE from $mirror (once; cached in $out)"
    if ! timeout 900 debootstrap --variant=minbase "$DEBIAN_SUITE" "$root" "$mirror" \
        >"$DEBIAN_DIR/debootstrap.log" 2>&1; then
        tail -n 20 "$DEBIAN_DIR/debootstrap.log" >&2
        rm -rf "$root"
        fail "debootstrap failed (log: $DEBIAN_DIR/debootstrap.log)"
    fi
    # What an image build would drop: downloaded packages and lists.
    rm -f "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin
    rm -f "$root"/var/lib/apt/lists/*_*
    rm -rf "$root"/debootstrap
    tar --create --file "$out.tmp" --directory "$root" --format=posix \
        --numeric-owner --xattrs --xattrs-include='*' --sort=name \
        --pax-option=delete=atime,delete=ctime .
    mv "$out.tmp" "$out"
    rm -rf "$root"
}

debian_layout() {
    local tar key dir
    tar=$(debian_rootfs_tar)
    key=$( (
        cat "${BASH_SOURCE[0]}"
        stat -c '%s %Y' "$tar"
    ) | sha256sum | cut -c1-16)
    dir=$DEBIAN_DIR/layout-$key
    if [ ! -f "$dir/.done" ]; then
        (
            flock 9
            if [ ! -f "$dir/.done" ]; then
                rm -rf "$dir.tmp"
                _build_debian "$tar" "$dir.tmp"
                touch "$dir.tmp/.done"
                rm -rf "$dir"
                mv "$dir.tmp" "$dir"
                find "$DEBIAN_DIR" -mindepth 1 -maxdepth 1 -type d -name 'layout-*' \
                    ! -name "layout-$key" -exec rm -rf {} +
            fi
        ) 9>"$DEBIAN_DIR/.lock"
    fi
    echo "$dir"
}

_build_debian() {
    local tar=$1 out=$2 s=$2.stage d
    log "building the Debian test images in $out"
    umoci init --layout "$out"
    umoci new --image "$out:1"
    umoci config --image "$out:1" --config.cmd /bin/bash
    _add_layer "$out:1" "$tar" 'debootstrap --variant=minbase bookworm'

    umoci new --image "$out:layers"
    umoci config --image "$out:layers" --config.cmd /bin/bash
    _add_layer "$out:layers" "$tar" 'debootstrap --variant=minbase bookworm'

    # Layer 2: whiteouts of every package's doc directory, a symlink
    # replaced by a regular file, an opaque directory.
    mkdir -p "$s/2/usr/share/doc" "$s/2/etc" "$s/2/usr/share/common-licenses"
    for d in $(tar -tf "$tar" | sed -n 's|^\./usr/share/doc/\([^/]*\)/\?$|\1|p' | sort -u); do
        : >"$s/2/usr/share/doc/.wh.$d"
    done
    [ -e "$s/2/usr/share/doc/.wh.dpkg" ] || fail "the Debian tarball has no /usr/share/doc/dpkg"
    printf 'PRETTY_NAME="pullfs test layer"\nID=debian\n' >"$s/2/etc/os-release"
    : >"$s/2/usr/share/common-licenses/.wh..wh..opq"
    echo 'all licences were removed by a later layer' >"$s/2/usr/share/common-licenses/NOTE"
    LAYER_TIME='2024-01-01 12:00:00 UTC' _tar_layer "$s/2" "$s/2.tar" etc/os-release usr/share/common-licenses usr/share/doc
    _add_layer "$out:layers" "$s/2.tar" 'remove docs, replace os-release'

    # Layer 3: a directory deleted below comes back, with other content.
    mkdir -p "$s/3/usr/share/doc/dpkg"
    echo 'back in layer 3' >"$s/3/usr/share/doc/dpkg/README.pullfs"
    LAYER_TIME='2024-06-01 06:00:00 UTC' _tar_layer "$s/3" "$s/3.tar" usr/share/doc/dpkg
    _add_layer "$out:layers" "$s/3.tar" 'recreate /usr/share/doc/dpkg'
    rm -rf "$s"
}

push_debian() {
    local tag=${1:-1}
    _skopeo copy --dest-tls-verify=false "oci:$(debian_layout):$tag" \
        "docker://$REGISTRY/${2:-test/debian:$tag}"
}

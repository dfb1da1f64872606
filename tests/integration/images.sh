# Test images for the pullfs integration tests; sourced after lib.sh.
#
# Each image is built once as an OCI layout (umoci) and kept between the
# tests of a run in $IMAGES_DIR, keyed by a hash of this file and of the
# busybox binary, so an edit here rebuilds them.  The push_* functions copy
# an image into the test's registry with skopeo:
#
#   push_busybox [REPO:TAG]    test/busybox:1     one layer, static busybox
#   push_edge [REPO:TAG]       test/edge:1        three gzip layers of edge cases
#   push_edge_zstd [REPO:TAG]  test/edge-zstd:1   the same layers, zstd
#   push_edge_plain [REPO:TAG] test/edge-plain:1  the same layers, uncompressed
#   push_edge_docker [REPO:TAG] test/edge-docker:1 Docker schema 2, gzip
#   push_multi [REPO:TAG]      test/multi:1       index: linux/amd64 + linux/arm64
#   push_multi_docker [REPO:TAG] test/multi-docker:1 the same as a Docker manifest list
#   push_noplatform [REPO:TAG] test/noplatform:1  index with no entry for this node
#
# layout_of NAME gives the OCI layout directory (tag "1") of busybox, edge,
# multi or noplatform, e.g. for `umoci unpack --image "$(layout_of edge):1"`.

need_cmd umoci skopeo tar timeout flock sha256sum

_images_key() {
    local bb
    bb=$(_static_busybox)
    cat "${BASH_SOURCE[0]}" "$bb" | sha256sum | cut -c1-16
}

# The busybox-static binary (whatever the usrmerge state).
_static_busybox() {
    local b
    for b in /bin/busybox /usr/bin/busybox; do
        if [ -x "$b" ] && _is_static_elf "$b"; then
            echo "$b"
            return 0
        fi
    done
    skip "needs a statically linked busybox (package busybox-static)"
}

_is_static_elf() {
    python3 - "$1" <<'EOF'
import struct, sys
with open(sys.argv[1], "rb") as f:
    h = f.read(64)
    if h[:4] != b"\x7fELF" or h[4] != 2:
        sys.exit(1)
    end = "<" if h[5] == 1 else ">"
    phoff, = struct.unpack(end + "Q", h[32:40])
    phentsize, phnum = struct.unpack(end + "HH", h[54:58])
    for i in range(phnum):
        f.seek(phoff + i * phentsize)
        if struct.unpack(end + "I", f.read(4))[0] == 3:  # PT_INTERP
            sys.exit(1)
EOF
}

if [ -z "${IMAGES_DIR:-}" ]; then
    if [ -n "${PULLFS:-}" ]; then
        IMAGES_DIR=$(dirname "$PULLFS")/integration-images
    else
        IMAGES_DIR=${TMPDIR:-/tmp}/pullfs-integration-images
    fi
fi
IMAGES_DIR=$IMAGES_DIR/$(_images_key)

# GOARCH of this machine, as an index's platform.architecture names it.
node_arch() {
    case $(uname -m) in
    x86_64) echo amd64 ;;
    aarch64 | arm64) echo arm64 ;;
    armv7* | armv6*) echo arm ;;
    i?86) echo 386 ;;
    ppc64le) echo ppc64le ;;
    s390x) echo s390x ;;
    riscv64) echo riscv64 ;;
    *) uname -m ;;
    esac
}

# skopeo with a private blob-info cache: the shared one maps uncompressed
# layers to blobs it pushed before and would make it reuse a gzip blob
# where zstd was asked for (and the other way round).  Under timeout, as
# its zstd writer can hang.
_skopeo() {
    local cache
    cache=$(mktemp -d "$WORK/skopeo-cache.XXXXXX")
    echo "+ skopeo $*" >>"$WORK/skopeo.log"
    # A nonzero "rootless" uid makes it keep the cache under XDG_DATA_HOME
    # instead of /var/lib/containers/cache; a fresh one for every copy.
    _CONTAINERS_ROOTLESS_UID=65534 XDG_DATA_HOME=$cache \
        timeout 300 skopeo --insecure-policy "$@" >>"$WORK/skopeo.log" 2>&1 ||
        {
            tail -n 20 "$WORK/skopeo.log" >&2
            fail "skopeo $* failed"
        }
    rm -rf "$cache"
}

layout_of() {
    _ensure_images
    echo "$IMAGES_DIR/$1"
}

_ensure_images() {
    [ -f "$IMAGES_DIR/.done" ] && return 0
    need_root # devices, owners, setuid bits
    need_cmd setfattr mknod
    mkdir -p "$(dirname "$IMAGES_DIR")"
    (
        flock 9
        if [ ! -f "$IMAGES_DIR/.done" ]; then
            rm -rf "$IMAGES_DIR.tmp"
            mkdir -p "$IMAGES_DIR.tmp"
            log "building test images in $IMAGES_DIR"
            _build_busybox "$IMAGES_DIR.tmp"
            _build_edge "$IMAGES_DIR.tmp"
            _build_multi "$IMAGES_DIR.tmp" multi amd64 arm64
            _build_multi "$IMAGES_DIR.tmp" noplatform "$(_foreign_arch)"
            touch "$IMAGES_DIR.tmp/.done"
            rm -rf "$IMAGES_DIR"
            mv "$IMAGES_DIR.tmp" "$IMAGES_DIR"
            # Builds from older versions of this file are of no more use.
            find "$(dirname "$IMAGES_DIR")" -mindepth 1 -maxdepth 1 -type d \
                ! -name "$(basename "$IMAGES_DIR")" -exec rm -rf {} +
        fi
    ) 9>"$(dirname "$IMAGES_DIR")/.lock"
}

_foreign_arch() {
    if [ "$(node_arch)" = s390x ]; then echo ppc64le; else echo s390x; fi
}

# _tar_layer STAGE OUT.tar [NAMES...]: an uncompressed layer tar of STAGE as
# GNU tar writes it (PAX, numeric owners, xattrs).  Without NAMES the
# members are "./", "./a", ...; with NAMES they are those names, no prefix.
_tar_layer() {
    local stage=$1 out=$2
    shift 2
    # Every entry gets the layer's fixed time unless it has an older one of
    # its own, so mtimes (directories too) say which layer an entry is from.
    find "$stage" ! -newermt '2002-01-01 UTC' -prune -o -exec touch -h -d "$LAYER_TIME" {} +
    [ $# -gt 0 ] || set -- .
    tar --create --file "$out" --directory "$stage" --format=posix \
        --numeric-owner --xattrs --xattrs-include='*' --sort=name \
        --pax-option=delete=atime,delete=ctime -- "$@"
}

_add_layer() {
    # _add_layer LAYOUT:TAG TAR COMMENT
    umoci raw add-layer --image "$1" --history.created_by "$3" "$2"
}

# stage_image STAGE LAYOUT NAME [BUNDLE]: an OCI layout (tag "1") of one
# layer, the tree STAGE with a fixed time, and, given BUNDLE, that image
# unpacked there by umoci (what a full pull must give).
stage_image() {
    umoci init --layout "$2"
    umoci new --image "$2:1"
    LAYER_TIME='2021-01-01 00:00:00 UTC' _tar_layer "$1" "$2.tar"
    _add_layer "$2:1" "$2.tar" "$3"
    [ -z "${4:-}" ] || umoci unpack --image "$2:1" "$4" >/dev/null
}

_build_busybox() {
    local out=$1/busybox bundle=$1/busybox.bundle bb r a
    bb=$(_static_busybox)
    umoci init --layout "$out"
    umoci new --image "$out:1"
    umoci unpack --image "$out:1" "$bundle" >/dev/null
    r=$bundle/rootfs
    mkdir -p "$r/bin" "$r/etc" "$r/tmp" "$r/root"
    chmod 1777 "$r/tmp"
    chmod 0700 "$r/root"
    cp "$bb" "$r/bin/busybox"
    chmod 0755 "$r/bin/busybox"
    # sh is a hardlink, the other applets symlinks: both kinds must work.
    ln "$r/bin/busybox" "$r/bin/sh"
    for a in cat echo env false head id ls readlink sha256sum stat test true uname wc; do
        ln -s busybox "$r/bin/$a"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n' >"$r/etc/passwd"
    printf 'root:x:0:\nuser:x:1000:\n' >"$r/etc/group"
    echo busybox >"$r/etc/hostname"
    umoci repack --image "$out:1" "$bundle" >/dev/null
    umoci config --image "$out:1" --config.cmd /bin/sh
    rm -rf "$bundle"
}

_build_edge() {
    local out=$1/edge s=$1/edge.stage L
    umoci init --layout "$out"
    umoci new --image "$out:1"

    # Layer 1: everything the upper layers act on, and every kind of entry.
    L=$s/1
    mkdir -p "$L"/{etc,del,deldir/sub,opq/lowerdir,hl,split,sym,devs,bin,tmp,sgiddir,home/user,xattr,long}
    chmod 0755 "$L"
    printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n' >"$L/etc/passwd"
    echo edge >"$L/etc/hostname"
    echo 'to be deleted' >"$L/del/file"
    echo kept >"$L/del/keep"
    echo a >"$L/deldir/a"
    echo b >"$L/deldir/sub/b"
    echo lower >"$L/opq/lower1"
    echo x >"$L/opq/lowerdir/x"
    echo 'old content' >"$L/replace.txt"
    echo hardlinked >"$L/hl/a"
    ln "$L/hl/a" "$L/hl/b"
    echo 'three links' >"$L/split/a"
    ln "$L/split/a" "$L/split/b"
    ln "$L/split/a" "$L/split/c"
    ln -s ../etc/hostname "$L/sym/rel"
    ln -s /etc/hostname "$L/sym/abs"
    ln -s ../nonexistent "$L/sym/dangling"
    ln -s ../etc "$L/sym/dir"
    mknod -m 0666 "$L/devs/null" c 1 3
    mknod -m 0660 "$L/devs/loop200" b 7 200
    mkfifo -m 0640 "$L/devs/fifo"
    printf '#!/bin/sh\necho suid\n' >"$L/bin/suid"
    chmod 4755 "$L/bin/suid"
    printf '#!/bin/sh\necho sgid\n' >"$L/bin/sgid"
    chmod 2711 "$L/bin/sgid"
    chmod 1777 "$L/tmp"
    chown 0:1000 "$L/sgiddir"
    chmod 2775 "$L/sgiddir"
    echo 'owned by user' >"$L/home/user/file"
    chown -R 1000:1000 "$L/home/user"
    chmod 0700 "$L/home/user"
    chmod 0640 "$L/home/user/file"
    echo 'has xattrs' >"$L/xattr/file"
    setfattr -n user.pullfs -v hello "$L/xattr/file"
    setfattr -n user.binary -v 0x00ff10 "$L/xattr/file"
    setfattr -n user.pullfs.dir -v 1 "$L/xattr"
    echo 'old mtime' >"$L/old"
    touch -d '2001-02-03 04:05:06 UTC' "$L/old"
    : >"$L/empty"
    head -c 5242880 /dev/urandom >"$L/large"
    # Longer than the 100 bytes of a ustar name: a PAX path header.
    echo long >"$L/long/$(printf 'n%.0s' {1..150})"
    echo 'odd name' >"$L/with space ünïcode"
    LAYER_TIME='2010-01-01 10:00:00 UTC' _tar_layer "$L" "$s/1.tar"
    _add_layer "$out:1" "$s/1.tar" 'base: every kind of entry'

    # Layer 2: whiteouts of a file and of a directory, an opaque directory,
    # a replaced file, a hardlink group split by replacing one member.
    L=$s/2
    mkdir -p "$L"/{del,opq/upperdir,split,added}
    : >"$L/del/.wh.file"
    : >"$L/.wh.deldir"
    : >"$L/opq/.wh..wh..opq"
    echo upper >"$L/opq/upper1"
    echo y >"$L/opq/upperdir/y"
    echo 'new content, longer than the old one' >"$L/replace.txt"
    echo 'replaced member' >"$L/split/c"
    echo new >"$L/added/newfile"
    LAYER_TIME='2015-01-01 15:00:00 UTC' _tar_layer "$L" "$s/2.tar" .wh.deldir added del opq replace.txt split
    _add_layer "$out:1" "$s/2.tar" 'whiteouts and opaque directory'

    # Layer 3: a deleted directory comes back with other content; a file
    # changes only its mode.
    L=$s/3
    mkdir -p "$L"/{deldir,etc}
    echo fresh >"$L/deldir/fresh"
    cp -p "$s/1/etc/hostname" "$L/etc/hostname"
    chmod 0600 "$L/etc/hostname"
    LAYER_TIME='2020-01-01 20:00:00 UTC' _tar_layer "$L" "$s/3.tar" deldir etc/hostname
    _add_layer "$out:1" "$s/3.tar" 'recreate a deleted directory'

    rm -rf "$s"
}

# _build_multi PARENT NAME ARCH...: an index tagged "1" with one linux image
# per ARCH, each holding /platform with its ARCH.
_build_multi() {
    local out=$1/$2 stage=$1/$2.stage arch
    shift 2
    umoci init --layout "$out"
    for arch in "$@"; do
        umoci new --image "$out:$arch"
        umoci config --image "$out:$arch" --architecture "$arch" --os linux
        mkdir -p "$stage/$arch"
        echo "$arch" >"$stage/$arch/platform"
        LAYER_TIME='2010-01-01 10:00:00 UTC' _tar_layer "$stage/$arch" "$stage/$arch.tar" platform
        _add_layer "$out:$arch" "$stage/$arch.tar" "$arch"
    done
    python3 - "$out" "$@" <<'EOF'
import hashlib, json, os, sys
layout, arches = sys.argv[1], sys.argv[2:]
with open(os.path.join(layout, "index.json")) as f:
    top = json.load(f)
by_tag = {d["annotations"]["org.opencontainers.image.ref.name"]: d
          for d in top["manifests"]}
index = {"schemaVersion": 2,
         "mediaType": "application/vnd.oci.image.index.v1+json",
         "manifests": []}
for arch in arches:
    d = dict(by_tag[arch])
    d.pop("annotations", None)
    d["platform"] = {"architecture": arch, "os": "linux"}
    if arch == "arm64":
        d["platform"]["variant"] = "v8"
    index["manifests"].append(d)
blob = json.dumps(index, separators=(",", ":")).encode()
digest = hashlib.sha256(blob).hexdigest()
with open(os.path.join(layout, "blobs", "sha256", digest), "wb") as f:
    f.write(blob)
top["manifests"].append({
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "digest": "sha256:" + digest, "size": len(blob),
    "annotations": {"org.opencontainers.image.ref.name": "1"}})
with open(os.path.join(layout, "index.json"), "w") as f:
    json.dump(top, f)
EOF
    rm -rf "$stage"
}

# ---------------------------------------------------------------- pushing

push_busybox() {
    _skopeo copy --dest-tls-verify=false "oci:$(layout_of busybox):1" "docker://$REGISTRY/${1:-test/busybox:1}"
}

push_edge() {
    _skopeo copy --dest-tls-verify=false "oci:$(layout_of edge):1" "docker://$REGISTRY/${1:-test/edge:1}"
}

# The edge image with its layers recompressed with zstd.  skopeo keeps a
# gzip source as gzip, so go through an uncompressed dir: copy first.
push_edge_zstd() {
    local ref=${1:-test/edge-zstd:1} plain=$WORK/edge-uncompressed
    rm -rf "$plain"
    _skopeo copy --dest-decompress "oci:$(layout_of edge):1" "dir:$plain"
    _skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd \
        "dir:$plain" "docker://$REGISTRY/$ref"
    rm -rf "$plain"
    local types
    types=$(registry_manifest "$ref" | python3 -c '
import json, sys
m = json.load(sys.stdin)
print(" ".join(sorted(set(l["mediaType"] for l in m.get("layers", [])))) or "none")')
    [ "$types" = "application/vnd.oci.image.layer.v1.tar+zstd" ] ||
        fail "push_edge_zstd: pushed layers are '$types', not zstd only"
    _check_zstd_blobs "$ref"
}

# The edge image as zstd:chunked (skopeo writes the table of contents),
# through an uncompressed dir as above.
push_edge_chunked() {
    local plain=$WORK/edge-plain
    [ -d "$plain" ] || _skopeo copy --dest-decompress "oci:$(layout_of edge):1" "dir:$plain"
    _skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
        "dir:$plain" "docker://$REGISTRY/${1:-test/edge-chunked:1}"
}

# The media type is a label; check the blobs' own magic too.
_check_zstd_blobs() {
    local d magic
    for d in $(registry_manifest "$1" | python3 -c '
import json, sys
for l in json.load(sys.stdin)["layers"]:
    print(l["digest"])'); do
        magic=$(curl -sf -r 0-3 "http://$REGISTRY/v2/${1%:*}/blobs/$d" | od -An -tx1 | tr -d ' \n')
        [ "$magic" = 28b52ffd ] || fail "layer $d of $1 is not zstd data (magic $magic)"
    done
}

# The edge image with uncompressed layers.  skopeo compresses whatever it
# pushes to a registry, so this one goes up by hand: monolithic blob
# uploads, then the manifest.
push_edge_plain() {
    local ref=${1:-test/edge-plain:1} plain=$WORK/edge-uncompressed
    rm -rf "$plain"
    _skopeo copy --dest-decompress "oci:$(layout_of edge):1" "dir:$plain"
    _push_dir_raw "$plain" "$ref"
    rm -rf "$plain"
    local types
    types=$(registry_manifest "$ref" | python3 -c '
import json, sys
m = json.load(sys.stdin)
print(" ".join(sorted(set(l["mediaType"] for l in m.get("layers", [])))) or "none")')
    [ "$types" = "application/vnd.oci.image.layer.v1.tar" ] ||
        fail "push_edge_plain: pushed layers are '$types', not uncompressed"
}

# _push_dir_raw DIR REPO:TAG: upload a skopeo dir: copy as it is.
_push_dir_raw() {
    local dir=$1 repo=${2%:*} tag=${2##*:} f loc sep mt
    for f in "$dir"/*; do
        case ${f##*/} in manifest.json | version) continue ;; esac
        loc=$(curl -sf -X POST -D - -o /dev/null "http://$REGISTRY/v2/$repo/blobs/uploads/" |
            tr -d '\r' | awk 'tolower($1) == "location:" { print $2 }')
        [ -n "$loc" ] || fail "no upload location from the registry for $repo"
        case $loc in http*) ;; *) loc=http://$REGISTRY$loc ;; esac
        if [[ $loc == *\?* ]]; then sep='&'; else sep='?'; fi
        curl -sf -o /dev/null -X PUT -H 'Content-Type: application/octet-stream' \
            --data-binary "@$f" "${loc}${sep}digest=sha256:${f##*/}" ||
            fail "upload of blob ${f##*/} to $repo failed"
    done
    mt=$(python3 -c '
import json, sys
print(json.load(open(sys.argv[1])).get("mediaType") or "application/vnd.oci.image.manifest.v1+json")' "$dir/manifest.json")
    curl -sf -o /dev/null -X PUT -H "Content-Type: $mt" --data-binary "@$dir/manifest.json" \
        "http://$REGISTRY/v2/$repo/manifests/$tag" || fail "upload of the manifest of $repo:$tag failed"
}

push_edge_docker() {
    local ref=${1:-test/edge-docker:1} mt
    _skopeo copy --format v2s2 --dest-tls-verify=false "oci:$(layout_of edge):1" "docker://$REGISTRY/$ref"
    mt=$(registry_manifest "$ref" | python3 -c 'import json, sys; print(json.load(sys.stdin).get("mediaType"))')
    [ "$mt" = application/vnd.docker.distribution.manifest.v2+json ] ||
        fail "push_edge_docker: pushed manifest is '$mt', not Docker schema 2"
}

push_multi_docker() {
    local ref=${1:-test/multi-docker:1} mt
    _skopeo copy --all --format v2s2 --dest-tls-verify=false "oci:$(layout_of multi):1" "docker://$REGISTRY/$ref"
    mt=$(registry_manifest "$ref" | python3 -c 'import json, sys; print(json.load(sys.stdin).get("mediaType"))')
    [ "$mt" = application/vnd.docker.distribution.manifest.list.v2+json ] ||
        fail "push_multi_docker: pushed index is '$mt', not a Docker manifest list"
}

push_multi() {
    _skopeo copy --all --dest-tls-verify=false "oci:$(layout_of multi):1" "docker://$REGISTRY/${1:-test/multi:1}"
}

push_noplatform() {
    _skopeo copy --all --dest-tls-verify=false "oci:$(layout_of noplatform):1" "docker://$REGISTRY/${1:-test/noplatform:1}"
}

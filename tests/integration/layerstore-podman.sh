#!/bin/bash
# podman (Debian 12's 4.3, containers/storage 1.43) with MOUNT/layers as its
# Additional Layer Store: podman pull fetches manifest and config only,
# every layer comes from pullfs (fetched by pullfs once), and a container
# sees exactly the merged tree images/<ref> shows, whiteouts and opaque
# directories included.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
need_cmd podman
need_cmd runc
start_registry
push_busybox test/busybox:1
# busybox with a layer of its own, different in every run: podman's
# blob-info cache (/var/lib/containers/cache) outlives the test and would
# let podman reuse a layer it met before
never=$WORK/never
cp -a "$(layout_of busybox)" "$never"
mkdir -p "$WORK/never.stage/etc"
echo "never $$ $(date +%s%N)" >"$WORK/never.stage/etc/never"
LAYER_TIME='2021-01-01 00:00:00 UTC' _tar_layer "$WORK/never.stage" "$WORK/never.tar"
_add_layer "$never:1" "$WORK/never.tar" 'a layer of its own'
_skopeo copy --dest-tls-verify=false "oci:$never:1" "docker://$REGISTRY/test/never:1"
push_edge test/edge:1
# A two-layer image of its own as zstd:chunked, served lazily (its first
# layer differs in every run: podman would use a layer it already has for
# the same uncompressed content, whatever the store says), through a proxy
# that holds the requests of the background completion until $WORK/whole
# exists, so what a container reads meanwhile came by its own Range
# requests.
lz=$WORK/lazy.stage
mkdir -p "$lz/1/opq/lowerdir" "$lz/1/etc" "$lz/1/del" "$lz/2/opq" "$lz/2/del"
echo "lazy $$ $(date +%s%N)" >"$lz/1/etc/unique"
head -c 300000 /dev/urandom >"$lz/1/etc/big"
echo lower >"$lz/1/opq/lower1"
echo x >"$lz/1/opq/lowerdir/x"
echo gone >"$lz/1/del/file"
echo kept >"$lz/1/del/keep"
: >"$lz/2/opq/.wh..wh..opq"
echo upper >"$lz/2/opq/upper1"
: >"$lz/2/del/.wh.file"
LAYER_TIME='2010-01-01 10:00:00 UTC' _tar_layer "$lz/1" "$lz/1.tar"
LAYER_TIME='2015-01-01 15:00:00 UTC' _tar_layer "$lz/2" "$lz/2.tar"
umoci init --layout "$lz/oci"
umoci new --image "$lz/oci:1"
_add_layer "$lz/oci:1" "$lz/1.tar" 'lazy base'
_add_layer "$lz/oci:1" "$lz/2.tar" 'whiteout and opaque directory'
_skopeo copy --dest-decompress "oci:$lz/oci:1" "dir:$lz/plain"
_skopeo copy --dest-tls-verify=false --dest-compress --dest-compress-format zstd:chunked \
    "dir:$lz/plain" "docker://$REGISTRY/test/lazy-chunked:1"
rm -rf "$lz"
chunked_layers=$(image_blobs test/lazy-chunked:1 | tail -n +2 | paste -sd'|')
start_slowproxy --gate "GET /v2/test/lazy-chunked/blobs/($chunked_layers) .*background=$WORK/whole"
# test/never is an image pullfs must not pull: the engine pulls it itself
mount_pullfs --insecure-registry "$PROXY" --pull-policy-rule "$REGISTRY/test/never:*=never"

conf=$WORK/storage.conf
cat >"$conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$WORK/storage"
runroot = "$WORK/run"

[storage.options]
additionallayerstores = ["$MNT/layers:ref"]
EOF
export CONTAINERS_STORAGE_CONF=$conf

# The storage root is private through storage.conf alone: podman 4.3 drops
# the conf's driver options (the layer store among them) when --root,
# --runroot or --storage-driver is given on its command line.
pod() {
    podman --events-backend none --cgroup-manager cgroupfs "$@"
}
# The machine forbids raising RLIMIT_NPROC/NOFILE, and crun needs a cgroup
# setup it does not have here (TOOL-FACTS.md).
pod_run() {
    pod run --rm --pull never --network none --runtime runc \
        --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$@"
}
# Teardown: podman's own overlay mounts go before the pullfs mount does.
stop_podman() { pod image unmount --all --force >/dev/null 2>&1 || true; }
trap 'rc=$?; set +e; stop_podman; (exit $rc); _cleanup' EXIT
track_mount "$WORK/storage/overlay"

# gets_by AGENT PATH MARK: GETs of PATH after MARK by the client whose
# User-Agent starts with AGENT.
gets_by() {
    tail -n +"$(($3 + 1))" "$REGISTRY_LOG" | grep -F "\"GET $2" | grep -cF "\"$1" || true
}

# podman_pull REPO:TAG [HOST]: podman pull; counting the registry's log from
# $MARK (default: now), asserts that podman fetched the
# manifest and config and no layer, pullfs each layer exactly once, and
# that every layer podman has points into the store.
podman_pull() {
    local name=$1 repo=${1%:*} host=${2:-$REGISTRY} mark blobs config l b64
    mapfile -t blobs < <(image_blobs "$name")
    config=${blobs[0]}
    mark=${MARK:-$(registry_mark)}
    pod ${PODMAN_LOG_LEVEL:+--log-level "$PODMAN_LOG_LEVEL"} pull -q --tls-verify=false \
        "$host/$name" >"$WORK/pull.out" 2>"$WORK/pull.err" ||
        fail "podman pull $host/$name: $(cat "$WORK/pull.err")"
    [ "$(gets_by containers/ "/v2/$repo/manifests/" "$mark")" -ge 1 ] ||
        fail "podman fetched no manifest of $name"
    assert_eq 1 "$(gets_by containers/ "/v2/$repo/blobs/$config" "$mark")" "podman's GETs of the config of $name"
    for l in "${blobs[@]:1}"; do
        assert_eq 0 "$(gets_by containers/ "/v2/$repo/blobs/$l" "$mark")" "podman's GETs of layer $l of $name"
        [ -n "${LAZY:-}" ] ||
            assert_eq 1 "$(gets_by pullfs/ "/v2/$repo/blobs/$l" "$mark")" "pullfs's GETs of layer $l of $name"
    done
    b64=$(printf %s "$host/$name" | base64 -w0)
    for l in "${blobs[@]:1}"; do
        cat "$WORK"/storage/overlay/*/additionallayer 2>/dev/null | tr '\n' ' ' |
            grep -qF "$MNT/layers/$b64/$l" ||
            fail "podman did not take layer $l of $host/$name from the store: $(cat "$WORK/pull.err")"
    done
}

# ---- a gzip image: podman run reads a file of it
podman_pull test/busybox:1
wait_event Pulled "$REGISTRY/test/busybox:1"
# ensure ran for podman, which also said it uses each layer
for reason in Pulling LayerUsed; do
    assert_eq podman "$(events field "$reason" "$REGISTRY/test/busybox:1" comm)" "comm of the $reason event"
done
# (/etc/hostname is podman's own bind mount: read another file)
assert_eq "$(cat "$MNT/images/$REGISTRY/test/busybox:1/etc/passwd")" \
    "$(pod_run "$REGISTRY/test/busybox:1" /bin/cat /etc/passwd)" "podman run cat /etc/passwd"

# ---- whiteouts and an opaque directory: the container sees the merged tree.
# images/ of the same image is read at the same time: still one fetch of
# each layer (podman_pull counts them).
root=$MNT/images/$REGISTRY/test/edge:1
mark=$(registry_mark)
cat "$root/etc/hostname" >"$WORK/images.out" 2>&1 &
reader=$!
MARK=$mark podman_pull test/edge:1
wait "$reader" || fail "reading $root/etc/hostname while podman pulled: $(cat "$WORK/images.out")"
assert_eq edge "$(cat "$WORK/images.out")" "etc/hostname through images/ while podman pulled"
# podman's own overlay of the layers (what a container's rootfs is made
# of), beside pullfs's merged tree
merged=$(pod image mount "$REGISTRY/test/edge:1") || fail "podman image mount failed"
[ -d "$merged" ] || fail "podman image mount gave no directory: $merged"
# Kernel overlayfs reports the lower inode's link count for a hardlink
# group an upper layer split (TOOL-FACTS.md); everything else must agree.
py "$TREECMP" "$root" "$merged" >"$WORK/treecmp.out" 2>&1 || true
if grep -v -e '^treecmp: split/[ab]: nlink 2 != 3$' -e '^treecmp: [0-9]* difference(s) between' "$WORK/treecmp.out" | grep -q .; then
    cat "$WORK/treecmp.out" >&2
    fail "podman's merged edge image differs from $root"
fi
pod image unmount "$REGISTRY/test/edge:1" >/dev/null
# and in a running container (a static busybox from outside to look with)
bb=$(_static_busybox)
dirs=(/opq /del /deldir /opq/upperdir)
out=$(pod_run -v "$bb:/busybox:ro" "$REGISTRY/test/edge:1" /busybox sh -c \
    'for d in "$@"; do echo "$d:"; /busybox ls -a "$d" | /busybox sort; done' sh "${dirs[@]}") ||
    fail "podman run of the edge image failed: $out"
want=$(for d in "${dirs[@]}"; do echo "$d:"; ls -a "$root$d" | LC_ALL=C sort; done)
assert_eq "$want" "$out" "directories touched by whiteouts and an opaque directory, seen in the container"

# ---- lazy: zstd:chunked layers are served from their tables of contents;
# podman pulls and runs while the completion has fetched nothing
LAZY=1 podman_pull test/lazy-chunked:1 "$PROXY"
lroot=$MNT/images/$PROXY/test/lazy-chunked:1
# podman's overlay of the lazy layers is the merged tree pullfs shows
# (content compared: every file is read)
merged=$(pod image mount "$PROXY/test/lazy-chunked:1") || fail "podman image mount of the lazy image failed"
assert_tree_eq "$lroot" "$merged"
pod image unmount "$PROXY/test/lazy-chunked:1" >/dev/null
out=$(pod_run -v "$bb:/busybox:ro" "$PROXY/test/lazy-chunked:1" /busybox cat /etc/unique /opq/upper1) ||
    fail "podman run of the lazy image failed: $out"
assert_eq "$(cat "$lroot/etc/unique" "$lroot/opq/upper1")" "$out" "files read in a container of the lazy image"
assert_eq keep "$(pod_run -v "$bb:/busybox:ro" "$PROXY/test/lazy-chunked:1" /busybox ls /del)" "ls /del in a container of the lazy image"
assert_eq 0 "$(proxy_count done "GET /v2/test/lazy-chunked/blobs/($chunked_layers) .*background [0-9]+$")" \
    "completion requests answered before the container read its files"
[ "$(proxy_count range "/v2/test/lazy-chunked/blobs/")" -gt 0 ] || fail "no Range request for the lazy image"
for l in ${chunked_layers//|/ }; do
    assert_eq 0 "$(gets_by containers/ "/v2/test/lazy-chunked/blobs/$l" 0)" "podman's GETs of lazy layer $l"
done
touch "$WORK/whole"

# ---- an image pullfs cannot provide: podman falls back to its own pull,
# and the events log says why (the errno podman got, naming podman)
mapfile -t never_blobs < <(image_blobs test/never:1)
mark=$(registry_mark)
pod pull -q --tls-verify=false "$REGISTRY/test/never:1" >"$WORK/pull.out" 2>"$WORK/pull.err" ||
    fail "podman pull of an image pullfs refuses: $(cat "$WORK/pull.err")"
assert_eq 1 "$(gets_by containers/ "/v2/test/never/blobs/${never_blobs[-1]}" "$mark")" \
    "podman's own GETs of the new layer, which pullfs refused"
assert_eq 0 "$(gets_by pullfs/ "/v2/test/never/" "$mark")" "pullfs's requests for an image whose policy is Never"
wait_event ErrImageNeverPull "$REGISTRY/test/never:1"
assert_eq podman "$(events field ErrImageNeverPull "$REGISTRY/test/never:1" comm)" "comm of the ErrImageNeverPull event"
assert_eq EPERM "$(events field ErrImageNeverPull "$REGISTRY/test/never:1" errno)" "errno of the ErrImageNeverPull event"
assert_eq "$(cat "$WORK/never.stage/etc/never")" \
    "$(pod_run "$REGISTRY/test/never:1" /bin/cat /etc/never)" "podman run of the image it pulled itself"

stop_podman
unmount_pullfs

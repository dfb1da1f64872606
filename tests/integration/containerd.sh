# A private containerd and ctr-remote (stargz-snapshotter's converter),
# for the tests of lazy images; sourced after lib.sh.

# start_containerd: a private containerd (no CRI) with its own root, state
# and socket under $WORK; sets CTD_SOCK and CTD_PID.  CTD_EXTRA_CONFIG:
# more TOML for its config file (a proxy plugin).
start_containerd() {
    local dir=$WORK/ctd _
    mkdir -p "$dir"
    CTD_SOCK=$dir/c.sock
    cat >"$dir/config.toml" <<EOF
version = 2
root = "$dir/root"
state = "$dir/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$CTD_SOCK"
[ttrpc]
  address = "$CTD_SOCK.ttrpc"
[debug]
  address = "$CTD_SOCK.debug"
[metrics]
  address = ""
${CTD_EXTRA_CONFIG:-}
EOF
    containerd --config "$dir/config.toml" >"$dir/containerd.log" 2>&1 &
    CTD_PID=$!
    track_pid "$CTD_PID"
    wait_for 30 ctr -a "$CTD_SOCK" version >/dev/null 2>&1 ||
        { tail -n 20 "$dir/containerd.log" >&2; fail "the private containerd did not come up"; }
}

ctr_remote() {
    timeout 300 ctr-remote -a "$CTD_SOCK" -n "pullfs-$TEST_NAME" "$@" >>"$WORK/ctr-remote.log" 2>&1 ||
        { tail -n 20 "$WORK/ctr-remote.log" >&2; fail "ctr-remote $* failed"; }
}


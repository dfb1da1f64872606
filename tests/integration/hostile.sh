#!/bin/bash
# Hostile layers and manifests.  Each case fails its lookup with EBADMSG and
# a Failed event naming the reason; nothing is written outside the cache (a
# canary directory the layers aim at stays as it was, and no file of
# theirs appears under any /tmp/canary-*); the daemon keeps serving.
#
# Layers are written byte by byte by mktar.py (tar(1) refuses most of
# them) and pushed through the registry API by rawpush.py.  Manifests a
# real registry would refuse to store come from fakeregistry.py.
#
# Not here: the decompression bomb and the entry-count limit.  The daemon
# has no option to lower its limits (64 GiB, 1,000,000 entries) and
# reaching them takes minutes; tests/unit/test-layer.c checks both limits.
source "$(dirname "$0")/lib.sh"

need_fuse
need_cmd python3 curl
start_registry

MKTAR=$INTEGRATION_DIR/mktar.py
CANARY=$(mktemp -d /tmp/canary-pullfs.XXXXXX)
# set +e first: under errexit the (exit $rc) that hands the status to
# _cleanup would end the trap before it runs.
trap 'rc=$?; set +e; rm -rf "$CANARY"; (exit $rc); _cleanup' EXIT
mkdir "$CANARY/sub"
echo 'must not change' >"$CANARY/keep"
touch -d '2001-01-01 UTC' "$CANARY/keep" "$CANARY/sub" "$CANARY"
canary_state() {
    find /tmp -maxdepth 1 -name 'canary-*' -newer "$WORK/start" -print 2>/dev/null
    find "$CANARY" -printf '%p %y %s %m %T@\n' | sort
}
touch "$WORK/start"
sleep 0.01
before=$(canary_state)

# ---- layers ------------------------------------------------------------
mkdir -p "$WORK/tars"
python3 -c '
import sys
sys.path.insert(0, sys.argv[1])
import mktar as m
open(sys.argv[2], "wb").write(m.directory("base/") + m.member("base/file", "base\n") + m.end())
' "$INTEGRATION_DIR" "$WORK/tars/base.tar"
python3 "$MKTAR" --canary "$CANARY" --all "$WORK/tars"
{
    echo "hostile/good:1 $WORK/tars/base.tar"
    while IFS=$'\t' read -r c _; do
        echo "hostile/$c:1 $WORK/tars/base.tar $WORK/tars/$c.tar"
    done <"$WORK/tars/reasons"
} | python3 "$INTEGRATION_DIR/rawpush.py" "$REGISTRY" - >/dev/null || fail "pushing the hostile layers failed"

# ---- manifests -----------------------------------------------------------
FAKE_DIR=$WORK/fake
mkdir -p "$FAKE_DIR"
python3 - "$FAKE_DIR" <<'PY'
import hashlib, json, os, sys
d = sys.argv[1]
OCI_M = "application/vnd.oci.image.manifest.v1+json"
OCI_I = "application/vnd.oci.image.index.v1+json"
DOCKER_M = "application/vnd.docker.distribution.manifest.v2+json"
def desc(mt, n):
    return {"mediaType": mt, "digest": "sha256:" + hashlib.sha256(str(n).encode()).hexdigest(), "size": 10}
good = {"schemaVersion": 2, "mediaType": OCI_M,
        "config": desc("application/vnd.oci.image.config.v1+json", 1),
        "layers": [desc("application/vnd.oci.image.layer.v1.tar+gzip", 2)]}
routes = {}
# name: (body, content type, reason in the Failed event)
cases = {
    "notjson": (b"<html><body>502 Bad Gateway</body></html>", OCI_M, "invalid JSON"),
    "wrongtypes": (json.dumps(dict(good, layers="all of them")).encode(), OCI_M, "layers is not an array"),
    "sizestring": (json.dumps(dict(good, config=dict(good["config"], size="10"))).encode(), OCI_M,
                   "size is not an integer"),
    "deep": (b"[" * 10000 + b"]" * 10000, OCI_M, "invalid JSON"),
    "huge": (json.dumps(dict(good, annotations={"pad": "x" * (5 << 20)})).encode(), OCI_M, "larger than"),
    "liesindex": (json.dumps(dict(good, mediaType=OCI_I)).encode(), OCI_I, "manifests is missing"),
    "liesheader": (json.dumps(good).encode(), DOCKER_M, "does not match content type"),
    "unknowntype": (json.dumps(dict(good, mediaType="application/vnd.example.thing+json")).encode(), OCI_M,
                    "unsupported mediaType"),
}
reasons = {}
for name, (body, ct, reason) in cases.items():
    open(os.path.join(d, name), "wb").write(body)
    routes["bad/%s/1" % name] = {"file": name, "type": ct}
    reasons[name + ":1"] = reason
# by digest: the body hashes to something else
body = json.dumps(good).encode()
open(os.path.join(d, "digest"), "wb").write(body)
wrong = "sha256:" + hashlib.sha256(b"something else").hexdigest()
routes["bad/digest/" + wrong] = {"file": "digest", "type": OCI_M}
reasons["digest@" + wrong] = "hashes to"
json.dump(routes, open(os.path.join(d, "routes.json"), "w"))
with open(os.path.join(d, "cases"), "w") as f:
    for ref, reason in reasons.items():
        f.write("%s\t%s\n" % (ref, reason))
PY
python3 "$INTEGRATION_DIR/fakeregistry.py" --dir "$FAKE_DIR" --port-file "$WORK/fake.port" \
    --log "$WORK/fake.log" 2>>"$WORK/fake.err" &
FAKE_PID=$!
track_pid "$FAKE_PID"
wait_for 20 test -s "$WORK/fake.port" || fail "fakeregistry did not start: $(cat "$WORK/fake.err")"
FAKE=127.0.0.1:$(cat "$WORK/fake.port")

# ---- the lookups -----------------------------------------------------------
mount_pullfs --insecure-registry "$FAKE" --registry-qps 0

# Every case at once, in one python: the lookup fails with EBADMSG, a
# Failed event with errno EBADMSG names the reason, no Pulled event.
{
    while IFS=$'\t' read -r c reason; do
        printf '%s\t%s\n' "$REGISTRY/hostile/$c:1" "$reason"
    done <"$WORK/tars/reasons"
    while IFS=$'\t' read -r ref reason; do
        printf '%s\t%s\n' "$FAKE/bad/$ref" "$reason"
    done <"$FAKE_DIR/cases"
} >"$WORK/cases"
py - "$MNT/images" "$EVENTS" "$WORK/cases" <<'PY' || fail "hostile input was not rejected as it should be"
import errno, json, os, sys, time
images, log, cases = sys.argv[1:4]
cases = [l.rstrip("\n").split("\t") for l in open(cases) if l.strip()]
bad = 0
for ref, _ in cases:
    try:
        os.stat(os.path.join(images, ref))
        got = "OK"
    except OSError as e:
        got = errno.errorcode.get(e.errno, str(e.errno))
    if got != "EBADMSG":
        print("%s: lookup gave %s, not EBADMSG" % (ref, got))
        bad += 1
def events():
    out = []
    with open(log) as f:
        for line in f:
            out.append(json.loads(line))
    return out
deadline = time.time() + 10
while True:
    evs = events()
    failed = {e["image"]: e for e in evs if e.get("reason") == "Failed"}
    if all(ref in failed for ref, _ in cases) or time.time() > deadline:
        break
    time.sleep(0.1)
pulled = {e["image"] for e in evs if e.get("reason") == "Pulled"}
for ref, reason in cases:
    e = failed.get(ref)
    if not e:
        print("%s: no Failed event" % ref)
        bad += 1
        continue
    msg = e.get("message", "")
    if e.get("errno") != "EBADMSG" or reason not in msg:
        print("%s: Failed event with errno %s, message %r; expected EBADMSG and %r"
              % (ref, e.get("errno"), msg, reason))
        bad += 1
    elif ref in pulled:
        print("%s: a Pulled event too" % ref)
        bad += 1
    else:
        print("rejected %s: %s" % (ref, msg[-150:]), file=sys.stderr)
sys.exit(1 if bad else 0)
PY
! _pid_gone "$PULLFS_PID" || fail "pullfs died"
assert_eq 0 "$(pullfs_serving recoveries)" "serving processes that died"

# ---- nothing escaped, nothing half-published, still serving -------------------
after=$(canary_state)
[ "$before" = "$after" ] || fail "the canary changed:
before:
$before
after:
$after"
# (only below /tmp/canary-*: a walk of /tmp would enter other tests'
# mounts, and wait for any of them that does not answer; find fails when
# a file goes away while it walks, and what it printed is what counts)
escaped=$(for d in /tmp/canary-*; do
    [ -d "$d" ] || continue
    find "$d" -maxdepth 2 -newer "$WORK/start" \( -name absolute -o -name x -o -name escape -o -name passwd \) 2>/dev/null || true
done)
[ -z "$escaped" ] || fail "written outside the cache: $escaped"
for f in /etc/passwd; do
    [ "$(stat -c %Y "$f")" -lt "$(stat -c %Y "$WORK/start")" ] || fail "$f changed during the test"
done

good=$REGISTRY/hostile/good:1
assert_errno OK "$MNT/images/$good"
assert_eq base "$(cat "$MNT/images/$good/base/file")" "base/file of $good"
names=$(list_dir "$MNT/images/$REGISTRY/hostile")
assert_eq "good:1" "$names" "ls images/$REGISTRY/hostile (only the good image)"
events check >&2 || fail "malformed events in $EVENTS"
unmount_pullfs

left=$(find "$CACHE/tmp" -mindepth 1 | head -n 5)
[ -z "$left" ] || fail "left in $CACHE/tmp: $left"
assert_eq 1 "$(find "$CACHE/refs" -type f | wc -l)" "reference files in the cache (the good image only)"
log "PASS"

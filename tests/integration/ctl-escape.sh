#!/bin/bash
# What any user or registry chooses never reaches root's terminal as
# control bytes.  Three hostile strings, each with an OSC 52 clipboard
# write, a clear-screen, a BEL and a newline that would forge a line: an
# invalid image name looked up by uid 65534 (an InspectFailed event), the
# error message of a registry that refuses a pull (a Failed event, the
# back-off entry, the failure pullfsctl pull prints) and a label of an
# image's config (inspect).  Every human-readable output of pullfsctl
# (events, events -f, status, ls, inspect, pull) shows them escaped; the
# JSON outputs stay JSON that decodes to the very bytes.
source "$(dirname "$0")/lib.sh"
source "$INTEGRATION_DIR/images.sh"

need_fuse
need_cmd setpriv umoci skopeo
chmod 755 "$WORK"
start_registry

evil=$'\e]52;c;SGVsbG8=\a\e[2J\nFORGED row'
# the escaped form every output must show instead
shown='\x1b]52;c;SGVsbG8=\x07\x1b[2J\nFORGED row'

# An image whose config has the string as a label.
out=$WORK/layout
cp -a "$(layout_of busybox)" "$out"
umoci config --image "$out:1" --config.label "evil=$evil"
_skopeo copy --dest-tls-verify=false "oci:$out:1" "docker://$REGISTRY/test/labelled:1"

# A registry that refuses every pull with the string as its reason.
port_file=$WORK/hostile.port
python3 - "$port_file" "$evil" >"$WORK/hostile.log" 2>&1 <<'PY' &
import http.server, json, sys
body = json.dumps({"errors": [{"code": "DENIED", "message": sys.argv[2]}]}).encode()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200 if self.path in ("/v2", "/v2/") else 403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_HEAD = do_GET
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1] + ".tmp", "w").write(str(s.server_address[1]))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
s.serve_forever()
PY
track_pid $!
wait_for 10 test -s "$port_file" || fail "the hostile registry did not start"
hostile=127.0.0.1:$(cat "$port_file")

mount_pullfs -o allow_other --insecure-registry "$hostile"
ctl() { "$PULLFSCTL" -m "$MNT" "$@"; }
# (the command itself in the background, not a function: its pid is what
# the trap ends)
"$PULLFSCTL" -m "$MNT" events -f >"$WORK/follow.out" 2>&1 &
track_pid $!

# uid 65534's invalid name (a colon too many)
setpriv --reuid 65534 --regid 65534 --clear-groups /usr/bin/python3 -c '
import os, sys
try:
    os.stat(sys.argv[1])
except OSError:
    pass' "$MNT/images/registry.test/x:y:$evil"
grep -q 'InspectFailed' "$EVENTS" || fail "no InspectFailed event for the hostile name"
# the refusing registry, and the labelled image
ctl pull --plain "$hostile/test/refused:1" >"$WORK/pull.out" 2>"$WORK/pull.err" &&
    fail "a pull from the refusing registry succeeded"
stat "$MNT/images/$REGISTRY/test/labelled:1/bin" >/dev/null

ctl events >"$WORK/events.out" 2>&1
ctl status >"$WORK/status.out" 2>&1
ctl ls >"$WORK/ls.out" 2>&1
ctl inspect "$REGISTRY/test/labelled:1" >"$WORK/inspect.out" 2>&1
wait_for 10 grep -q "InspectFailed" "$WORK/follow.out" || fail "events -f did not show the InspectFailed event"

# raw_controls FILE: bytes a terminal acts on (C0 but the newline, DEL,
# C1 as UTF-8) in FILE
raw_controls() {
    python3 -c '
import re, sys
t = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
print(len(re.findall("[\x00-\x09\x0b-\x1f\x7f-\x9f]", t)))' "$1"
}
for out in events follow status ls inspect pull; do
    f=$WORK/$out.out
    [ "$out" != pull ] || f=$WORK/pull.err
    n=$(raw_controls "$f")
    forged=$(grep -c '^FORGED row' "$f" || true)
    log "pullfsctl $out: $n raw control bytes, $forged forged lines, $(wc -l <"$f") lines"
    assert_eq 0 "$n" "raw control bytes in the output of pullfsctl $out"
    assert_eq 0 "$forged" "lines forged by a newline in the output of pullfsctl $out"
done
grep -qF "x:y:$shown" "$WORK/events.out" || fail "events does not show the hostile name escaped"
grep -qF "x:y:$shown" "$WORK/follow.out" || fail "events -f does not show the hostile name escaped"
# (the daemon blanks the controls of a registry's message itself)
grep -qF "DENIED:" "$WORK/events.out" || fail "events does not show the registry's message"
grep -qF "DENIED:" "$WORK/status.out" || fail "status does not show the back-off message"
grep -qF "DENIED:" "$WORK/pull.err" || fail "pull does not show the registry's message"
grep -qF "evil=$shown" "$WORK/inspect.out" || fail "inspect does not show the label escaped"

# JSON stays JSON, with the very string in it
ctl events --json | python3 -c '
import json, sys
evil = sys.argv[1]
images = [json.loads(l).get("image", "") for l in sys.stdin]
assert any(i.endswith("x:y:" + evil) for i in images), images' "$evil" ||
    fail "events --json does not carry the name as it was"
ctl inspect --json "$REGISTRY/test/labelled:1" | python3 -c '
import json, sys
a = json.load(sys.stdin)
assert a["config"]["config"]["Labels"]["evil"] == sys.argv[1]' "$evil" ||
    fail "inspect --json does not carry the label as it was"

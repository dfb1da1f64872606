#!/usr/bin/env python3
"""A fault-injecting HTTP proxy between pullfs and a registry, for tests.

It forwards GET and HEAD to --upstream and, as the JSON in --control says
(re-read whenever the file changes, which also restarts the counters):
  "fail503": N       answer the first N manifest/blob requests with 503
  "fail429": N       ... with 429 and "Retry-After: <retry_after>"
  "cut": N           send only half of the first N blob bodies, then close
  "ignore_range": b  drop the Range header: the registry answers 200
  "corrupt": b       flip one byte in the middle of every blob body
  "redirect": b      answer blob GETs with 307 to a second port of this proxy
                     (another host:port), which serves them from upstream
  "no_blob_head": b  answer blob HEADs with 405, as some mirrors do
  "head_yes": b      answer every blob HEAD with 200, whether upstream has
                     the blob or not (a registry that lies)
With --require-basic USER:PASS it demands Basic auth itself.  One JSON line
per request goes to --log: which port, method, path, Range, whether an
Authorization header came, and what was done.
"""
import argparse, base64, http.client, json, os, socket, threading, urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--upstream", required=True)  # host:port
    ap.add_argument("--log", required=True)
    ap.add_argument("--control", required=True)
    ap.add_argument("--require-basic", default="")
    a = ap.parse_args()
    lock = threading.Lock()
    state = {"mtime": None, "mode": {}, "used": {}}
    ports = {}

    def mode():
        with lock:
            try:
                m = os.stat(a.control).st_mtime_ns
            except FileNotFoundError:
                m = None
            if m != state["mtime"]:
                state["mtime"] = m
                try:
                    state["mode"] = json.load(open(a.control))
                except (OSError, ValueError):
                    state["mode"] = {}
                state["used"] = {}
            return dict(state["mode"])

    def take(name):
        """True while the counter `name` of the mode is not used up."""
        with lock:
            n = state["mode"].get(name, 0)
            used = state["used"].get(name, 0)
            if used < n:
                state["used"][name] = used + 1
                return True
            return False

    def record(**kw):
        with lock, open(a.log, "a") as f:
            f.write(json.dumps(kw) + "\n")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        which = "main"

        def log_message(self, *args):
            pass

        def simple(self, code, headers=(), body=b""):
            self.send_response(code)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def handle_any(self):
            m = mode()
            path = self.path
            is_blob = "/blobs/" in path
            is_content = is_blob or "/manifests/" in path
            info = dict(port=self.which, method=self.command, path=path,
                        range=self.headers.get("Range"),
                        background="(background)" in (self.headers.get("User-Agent") or ""),
                        auth=self.headers.get("Authorization") is not None)
            if self.which == "main" and a.require_basic:
                want = "Basic " + base64.b64encode(a.require_basic.encode()).decode()
                if self.headers.get("Authorization") != want:
                    record(action="401", **info)
                    return self.simple(401, [("WWW-Authenticate", 'Basic realm="faultproxy"')])
            if self.which == "main" and is_content:
                if take("fail503"):
                    record(action="503", **info)
                    return self.simple(503, [("Content-Type", "application/json")],
                                       b'{"errors":[{"code":"UNAVAILABLE","message":"injected"}]}')
                if take("fail429"):
                    record(action="429", **info)
                    return self.simple(429, [("Retry-After", str(m.get("retry_after", 1)))])
                if is_blob and self.command == "HEAD" and m.get("no_blob_head"):
                    record(action="405", **info)
                    return self.simple(405)
                if is_blob and self.command == "HEAD" and m.get("head_yes"):
                    record(action="200", **info)
                    return self.simple(200, [("Docker-Content-Digest", path.rsplit("/", 1)[-1])])
                if is_blob and self.command == "GET" and m.get("redirect"):
                    loc = "http://127.0.0.1:%d%s" % (ports["redirect"], path)
                    record(action="307", **info)
                    return self.simple(307, [("Location", loc)])
            headers = {"Accept": self.headers.get("Accept", "*/*")}
            rng = self.headers.get("Range")
            if rng and not m.get("ignore_range"):
                headers["Range"] = rng
            conn = http.client.HTTPConnection(a.upstream, timeout=30)
            conn.request(self.command, path, headers=headers)
            resp = conn.getresponse()
            body = resp.read() if self.command != "HEAD" else b""
            action = "pass"
            cut = False
            if self.which == "main" and is_blob and self.command == "GET" and resp.status in (200, 206) \
                    and len(body) > 65536:
                if m.get("corrupt"):
                    mid = len(body) // 2
                    body = body[:mid] + bytes([body[mid] ^ 0xff]) + body[mid + 1:]
                    action = "corrupt"
                if take("cut"):
                    cut = True
                    action = "cut"
            record(action=action, status=resp.status, **info)
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() in ("connection", "transfer-encoding", "content-length", "keep-alive"):
                    continue
                self.send_header(k, v)
            length = resp.getheader("Content-Length")
            if self.command == "HEAD" and length is not None:
                self.send_header("Content-Length", length)
            else:
                self.send_header("Content-Length", str(len(body)))
            if cut:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command == "HEAD":
                return
            if cut:
                self.wfile.write(body[:len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            self.wfile.write(body)

        do_GET = handle_any
        do_HEAD = handle_any

    class Redirected(Handler):
        which = "redirect"

    main_srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    red_srv = ThreadingHTTPServer(("127.0.0.1", 0), Redirected)
    ports["redirect"] = red_srv.server_address[1]
    threading.Thread(target=red_srv.serve_forever, daemon=True).start()
    with open(a.port_file + ".tmp", "w") as f:
        f.write("%d %d\n" % (main_srv.server_address[1], ports["redirect"]))
    os.rename(a.port_file + ".tmp", a.port_file)
    main_srv.serve_forever()


if __name__ == "__main__":
    main()

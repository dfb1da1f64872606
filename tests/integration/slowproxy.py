#!/usr/bin/env python3
"""A plain-HTTP proxy in front of a test registry that can hold requests back.

    slowproxy.py --upstream HOST:PORT --port-file FILE [--log FILE]
                 [--delay ERE=SECONDS]... [--gate ERE=PATH]...
                 [--rate ERE=BYTES_PER_SECOND]...
                 [--trickle ERE=BYTES_PER_SECOND[@PATH]]...
                 [--gate-range BYTES=PATH]...

Listens on a free loopback port (written to FILE once it listens) and
forwards every request to the upstream registry, streaming the answer back.
Each rule's ERE is searched in "METHOD PATH" of a request, followed by
" bytes=A-B" for a Range request and " background" for a request whose
User-Agent says it is background work (a lazy layer's completion):

  --delay ERE=SECONDS  answer a matching request only after SECONDS
  --gate ERE=PATH      answer a matching request only once PATH exists
  --rate ERE=BPS       send the body of a matching request's answer at
                       about BPS bytes per second
  --trickle ERE=BPS[@PATH]
                       the same a few bytes at a time (20 writes a
                       second), as a registry that trickles does; with
                       @PATH only while PATH exists
  --gate-range N=PATH  answer a Range request for N bytes or more (all its
                       ranges together) only once PATH exists

so a test can make a pull slow, or stop it at a known point and let it go
on when it chooses.  --log gets one line per request when it arrives
("held METHOD PATH" for those a rule holds back; "range METHOD PATH
bytes=A-B" for a Range request) and one when it was answered ("done
METHOD PATH STATUS"), flushed at once.
"""

import argparse
import http.client
import http.server
import os
import re
import socketserver
import sys
import threading
import time

HOP_HEADERS = {"connection", "keep-alive", "proxy-authenticate",
               "proxy-authorization", "te", "trailers", "transfer-encoding",
               "upgrade"}


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "slowproxy"

    def log_message(self, fmt, *args):
        pass

    def note(self, text):
        cfg = self.server.cfg
        if cfg.log:
            with cfg.log_lock:
                cfg.log.write(text + "\n")
                cfg.log.flush()

    def hold(self, what):
        cfg = self.server.cfg
        held = False
        for rx, secs in cfg.delays:
            if rx.search(what):
                if not held:
                    self.note("held " + what)
                    held = True
                time.sleep(secs)
        for rx, path in cfg.gates:
            if rx.search(what):
                if not held:
                    self.note("held " + what)
                    held = True
                while not os.path.exists(path):
                    time.sleep(0.02)
        for least, path in cfg.range_gates:
            if range_bytes(what) >= least:
                if not held:
                    self.note("held " + what)
                    held = True
                while not os.path.exists(path):
                    time.sleep(0.02)
        return held

    def forward(self):
        cfg = self.server.cfg
        what = "%s %s" % (self.command, self.path)
        self.note("request " + what)
        if self.headers.get("Range"):
            self.note("range %s %s" % (what, self.headers.get("Range")))
            # rules see the range too: "GET /path bytes=A-B"
            what += " " + self.headers.get("Range")
        if "(background)" in (self.headers.get("User-Agent") or ""):
            # and a lazy layer's completion: "GET /path bytes=A-B background"
            what += " background"
            self.note("background " + what)
        self.hold(what)
        rate = next((bps for rx, bps in cfg.rates if rx.search(what)), 0)
        trickle = next((bps for rx, (bps, path) in cfg.trickles
                        if rx.search(what) and (not path or os.path.exists(path))), 0)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        # a header given several times (podman's Accept) is joined, as
        # HTTP allows, not cut down to its last value
        headers = {}
        for k, v in self.headers.items():
            if k.lower() not in HOP_HEADERS and k.lower() != "host":
                headers[k] = headers[k] + ", " + v if k in headers else v
        headers["Host"] = cfg.upstream
        conn = http.client.HTTPConnection(cfg.upstream, timeout=60)
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
        except OSError:
            self.send_error(502)
            self.note("done %s 502" % what)
            return
        self.send_response(resp.status, resp.reason)
        chunked = False
        for k, v in resp.getheaders():
            if k.lower() in HOP_HEADERS:
                continue
            self.send_header(k, v)
        if self.command != "HEAD" and resp.getheader("Content-Length") is None:
            chunked = True
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            if self.command != "HEAD":
                while True:
                    data = resp.read(16384 if rate else 65536)
                    if not data:
                        break
                    if rate:
                        time.sleep(len(data) / rate)
                    if trickle:
                        self.trickle(data, trickle, chunked)
                        continue
                    if chunked:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    else:
                        self.wfile.write(data)
                if chunked:
                    self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            # The client went away: nothing more to do for it.
            self.close_connection = True
        finally:
            conn.close()
        self.note("done %s %d" % (what, resp.status))

    def trickle(self, data, bps, chunked):
        step = max(1, int(bps / 20))
        for i in range(0, len(data), step):
            piece = data[i:i + step]
            time.sleep(len(piece) / bps)
            if chunked:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            else:
                self.wfile.write(piece)
            self.wfile.flush()

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = forward


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def range_bytes(what):
    """The bytes a "... bytes=A-B,C-D" request asks for; 0 without a range."""
    m = re.search(r" bytes=([0-9,-]+)$", what)
    if not m:
        return 0
    total = 0
    for part in m.group(1).split(","):
        a, _, b = part.partition("-")
        if a and b:
            total += int(b) - int(a) + 1
    return total


def rule(text, conv):
    rx, sep, val = text.rpartition("=")
    if not sep or not rx:
        raise argparse.ArgumentTypeError("expected ERE=VALUE, got %r" % text)
    return re.compile(rx), conv(val)


def size_rule(text):
    size, sep, path = text.partition("=")
    if not sep or not size.isdigit() or not path:
        raise argparse.ArgumentTypeError("expected BYTES=PATH, got %r" % text)
    return int(size), path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log")
    ap.add_argument("--delay", action="append", default=[],
                    type=lambda t: rule(t, float))
    ap.add_argument("--gate", action="append", default=[],
                    type=lambda t: rule(t, str))
    ap.add_argument("--rate", action="append", default=[],
                    type=lambda t: rule(t, float))
    ap.add_argument("--trickle", action="append", default=[],
                    type=lambda t: rule(t, lambda v: (float(v.partition("@")[0]),
                                                      v.partition("@")[2])))
    ap.add_argument("--gate-range", action="append", default=[], type=size_rule)
    cfg = ap.parse_args()
    cfg.delays, cfg.gates, cfg.rates = cfg.delay, cfg.gate, cfg.rate
    cfg.trickles = cfg.trickle
    cfg.range_gates = cfg.gate_range
    cfg.log_lock = threading.Lock()
    cfg.log = open(cfg.log, "a") if cfg.log else None
    srv = Server(("127.0.0.1", 0), Proxy)
    srv.cfg = cfg
    tmp = cfg.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, cfg.port_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A registry that serves whatever manifests it is given, for the documents
a real registry refuses to store (not JSON, too large, lying about their
type or digest).

    fakeregistry.py --dir DIR --port-file FILE [--log FILE]

DIR/routes.json maps "REPO/REFERENCE" (a tag or a digest) to
{"file": NAME, "type": CONTENT_TYPE, "digest": DOCKER_CONTENT_DIGEST}; the
body is DIR/NAME.  A blob of any repository is DIR/blobs/HEX when that
file exists, whatever its digest (a registry that lies), with one Range
served as 206 (several: the whole blob, 200, unless DIR/multipart.json
says otherwise).  Only GET and HEAD of /v2/, manifests and blobs are
served; anything else is 404.  The port is written to FILE once it
listens.

DIR/multipart.json, read for each request of several ranges:
{"mode": M, "parts": N} answers multipart/byteranges; M is
  "ok"        one part a range asked for, as a registry should
  "lying"     the Content-Type names one boundary, the body uses another
  "repeat"    N parts, each the first byte of the first range only
  "endless"   parts of the first range's first byte for as long as the
              client reads (N = 0), or N of them
Each multipart answer is counted in DIR/multipart.count (a line each).
"""
import argparse
import http.server
import json
import os
import socketserver
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        if self.server.logf:
            self.server.logf.write("%s\n" % (fmt % args))
            self.server.logf.flush()

    def answer(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path in ("/v2", "/v2/"):
            self.answer(200, b"{}", [("Content-Type", "application/json"),
                                     ("Docker-Distribution-API-Version", "registry/2.0")])
            return
        blob = path[len("/v2/"):].rsplit("/blobs/", 1) if path.startswith("/v2/") else []
        if len(blob) == 2 and blob[1].startswith("sha256:"):
            name = os.path.join(self.server.dir, "blobs", blob[1][len("sha256:"):])
            if "/" not in blob[1] and os.path.isfile(name):
                self.blob(name, blob[1])
                return
        parts = path[len("/v2/"):].rsplit("/manifests/", 1) if path.startswith("/v2/") else []
        if len(parts) == 2:
            with open(os.path.join(self.server.dir, "routes.json")) as f:
                route = json.load(f).get("%s/%s" % (parts[0], parts[1]))
            if route:
                with open(os.path.join(self.server.dir, route["file"]), "rb") as f:
                    body = f.read()
                headers = [("Content-Type", route["type"])]
                if route.get("digest"):
                    headers.append(("Docker-Content-Digest", route["digest"]))
                self.answer(200, body, headers)
                return
        self.answer(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"unknown"}]}',
                    [("Content-Type", "application/json")])

    def blob(self, name, digest):
        with open(name, "rb") as f:
            body = f.read()
        headers = [("Content-Type", "application/octet-stream"),
                   ("Docker-Content-Digest", digest)]
        rng = self.headers.get("Range", "")
        mp = os.path.join(self.server.dir, "multipart.json")
        if rng.startswith("bytes=") and "," in rng and os.path.exists(mp):
            with open(mp) as f:
                self.multipart(body, headers, rng, json.load(f))
            return
        if rng.startswith("bytes=") and "," not in rng:
            first, _, last = rng[len("bytes="):].partition("-")
            start = int(first)
            end = min(int(last) if last else len(body) - 1, len(body) - 1)
            headers.append(("Content-Range", "bytes %d-%d/%d" % (start, end, len(body))))
            self.answer(206, body[start:end + 1], headers)
            return
        self.answer(200, body, headers)

    def multipart(self, body, headers, rng, conf):
        with open(os.path.join(self.server.dir, "multipart.count"), "a") as f:
            f.write(rng + "\n")
        ranges = []
        for r in rng[len("bytes="):].split(","):
            a, _, b = r.partition("-")
            ranges.append((int(a), int(b)))
        mode, n = conf.get("mode", "ok"), conf.get("parts", 0)
        bnd = b"THEBOUNDARY"
        ctype = "multipart/byteranges; boundary=%s" % ("SOMETHINGELSE" if mode == "lying" else
                                                        bnd.decode())

        def part(a, b):
            return (b"\r\n--" + bnd + b"\r\nContent-Type: application/octet-stream\r\n" +
                    b"Content-Range: bytes %d-%d/%d\r\n\r\n" % (a, b, len(body)) + body[a:b + 1])

        self.send_response(206)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(data):
            self.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")

        try:
            if mode in ("ok", "lying"):
                send(b"".join(part(a, b) for a, b in ranges))
            else:
                a = ranges[0][0]
                one = part(a, a)
                sent = 0
                while n == 0 or sent < n:
                    k = 1000 if n == 0 else min(1000, n - sent)
                    send(one * k)
                    sent += k
            send(b"\r\n--" + bnd + b"--\r\n")
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_HEAD = do_GET


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log")
    a = ap.parse_args()
    srv = Server(("127.0.0.1", 0), Handler)
    srv.dir = a.dir
    srv.logf = open(a.log, "a") if a.log else None
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(a.port_file + ".tmp", a.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())

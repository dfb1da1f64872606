#!/usr/bin/env python3
"""A registry that serves whatever manifests it is given, for the documents
a real registry refuses to store (not JSON, too large, lying about their
type or digest).

    fakeregistry.py --dir DIR --port-file FILE [--log FILE]

DIR/routes.json maps "REPO/REFERENCE" (a tag or a digest) to
{"file": NAME, "type": CONTENT_TYPE, "digest": DOCKER_CONTENT_DIGEST}; the
body is DIR/NAME.  A blob of any repository is DIR/blobs/HEX when that
file exists, whatever its digest (a registry that lies), with one Range
served as 206 (several: the whole blob, 200).  Only GET and HEAD of /v2/,
manifests and blobs are served; anything else is 404.  The port is
written to FILE once it listens.
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
        if rng.startswith("bytes=") and "," not in rng:
            first, _, last = rng[len("bytes="):].partition("-")
            start = int(first)
            end = min(int(last) if last else len(body) - 1, len(body) - 1)
            headers.append(("Content-Range", "bytes %d-%d/%d" % (start, end, len(body))))
            self.answer(206, body[start:end + 1], headers)
            return
        self.answer(200, body, headers)

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

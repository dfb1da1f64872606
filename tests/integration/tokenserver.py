#!/usr/bin/env python3
"""A bearer token server for the registry's `token` auth, for tests.

GET /token?service=&scope= with optional Basic credentials, or POST /token
with the OAuth2 refresh-token grant.  Anonymous callers get pull on
repositories under --public-prefix, authenticated ones pull on anything.
A scope naming a repository under --huge-prefix gets a well-formed answer
padded past the 64 KiB a client should accept.
Tokens are RS256 JWTs with the signing certificate in the x5c header, which
the registry checks against its rootcertbundle.  One JSON line per request
goes to --log (including the token issued, so that a test can look for it
where it must not be).
"""
import argparse, base64, json, threading, time, urllib.parse, uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--issuer", default="pullfs-test-issuer")
    ap.add_argument("--service", default="pullfs-test")
    ap.add_argument("--user", default="")  # user:password
    ap.add_argument("--refresh-token", default="")
    ap.add_argument("--public-prefix", default="public/")
    ap.add_argument("--jwt-lifetime", type=int, default=300)
    ap.add_argument("--expires-in", type=int, default=300)
    ap.add_argument("--huge-prefix", default="")
    a = ap.parse_args()

    key = serialization.load_pem_private_key(open(a.key, "rb").read(), None)
    cert = x509.load_pem_x509_certificate(open(a.cert, "rb").read())
    x5c = base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()
    lock = threading.Lock()

    def sign(claims):
        header = {"typ": "JWT", "alg": "RS256", "x5c": [x5c]}
        si = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())
        sig = key.sign(si.encode(), padding.PKCS1v15(), hashes.SHA256())
        return si + "." + b64url(sig)

    class H(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def answer(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def grant(self, method, user, scopes, how):
            access = []
            for scope in scopes:
                parts = scope.split(":")
                if len(parts) < 3 or parts[0] != "repository":
                    continue
                name = ":".join(parts[1:-1])
                if user or name.startswith(a.public_prefix):
                    access.append({"type": "repository", "name": name, "actions": ["pull", "push"]})
            now = int(time.time())
            tok = sign({"iss": a.issuer, "sub": user or "", "aud": a.service,
                        "exp": now + a.jwt_lifetime, "nbf": now - 10, "iat": now,
                        "jti": str(uuid.uuid4()), "access": access})
            with lock, open(a.log, "a") as f:
                f.write(json.dumps({"method": method, "user": user, "scope": " ".join(scopes),
                                    "how": how, "granted": [x["name"] for x in access],
                                    "token": tok}) + "\n")
            body = {"token": tok, "access_token": tok, "expires_in": a.expires_in,
                    "issued_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            if a.huge_prefix and any(":" + a.huge_prefix in scope for scope in scopes):
                body["padding"] = "x" * (80 << 10)
            self.answer(200, body)

        def refuse(self, method, why):
            with lock, open(a.log, "a") as f:
                f.write(json.dumps({"method": method, "refused": why}) + "\n")
            self.answer(401, {"details": why})

        def do_GET(self):
            u = urllib.parse.urlparse(self.path)
            q = urllib.parse.parse_qs(u.query)
            user = ""
            h = self.headers.get("Authorization", "")
            if h:
                if not h.startswith("Basic ") or base64.b64decode(h[6:]).decode() != a.user:
                    return self.refuse("GET", "bad credentials")
                user = a.user.split(":")[0]
            if q.get("service", [""])[0] != a.service:
                return self.refuse("GET", "wrong service")
            self.grant("GET", user, q.get("scope", []), "basic" if user else "anonymous")

        def do_POST(self):
            n = int(self.headers.get("Content-Length", "0"))
            q = urllib.parse.parse_qs(self.rfile.read(n).decode())
            if q.get("grant_type", [""])[0] != "refresh_token" or \
                    not a.refresh_token or q.get("refresh_token", [""])[0] != a.refresh_token:
                return self.refuse("POST", "bad grant")
            self.grant("POST", "refresh-user", q.get("scope", []), "refresh_token")

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    import os
    os.rename(a.port_file + ".tmp", a.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()

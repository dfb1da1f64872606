"""One request to pullfs's control socket (docs/control.md): a line of
JSON out, a line of JSON back.  Imported by the tests that talk to it."""

import json
import socket


def ask(path, req, timeout=60):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.sendall((json.dumps(req) + "\n").encode())
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    finally:
        s.close()
    return json.loads(data)

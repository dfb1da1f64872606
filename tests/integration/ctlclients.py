#!/usr/bin/env python3
"""Clients that abuse pullfs's control socket, for ctl-abuse.sh.

    ctlclients.py abuse SOCKET PULLFSCTL MOUNT REF
        50 idle connections and one that sends a byte every 3 s; beside
        them pullfsctl inspect, status and gc and a status request on the
        socket must succeed while those are still connected, and the daemon
        must then close them all with an ETIMEDOUT answer.
    ctlclients.py bound SOCKET PULLFSCTL MOUNT REF N
        N idle connections, N above the daemon's bound; pullfsctl inspect
        must still succeed, and the oldest idle connection must be dropped
        with an EAGAIN answer.
    ctlclients.py hold SOCKET N READY
        N idle connections, then READY is written; exits 0 once the daemon
        has closed every one of them (it is being stopped), 1 after 60 s.

The daemon's request deadline is 10 s (fs/control/control.h).  Whether a connection
is "still connected" is only asserted when the check ran well within it, so
a slow machine skips that check instead of failing it.
"""
import json
import os
import select
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ctlsock  # noqa: E402

DEADLINE_S = 10


def fail(msg):
    sys.exit("ctlclients: FAIL: " + msg)


def connect_all(path, n):
    """n connections, which the daemon must take within 20 s in all: a
    server that does not accept them leaves connect(2) refused on a full
    backlog."""
    conns = []
    end = time.monotonic() + 20
    while len(conns) < n:
        s = socket.socket(socket.AF_UNIX)
        s.setblocking(False)
        try:
            s.connect(path)
        except BlockingIOError:
            s.close()
            if time.monotonic() > end:
                fail("the daemon took %d of %d connections on %s in 20 s" % (len(conns), n, path))
            time.sleep(0.05)
            continue
        s.setblocking(True)
        conns.append(s)
    return conns


def closed_by_daemon(s, wait):
    """The daemon's answer (b"" if none) once it closed s, or None if it
    did not within wait seconds."""
    data = b""
    end = time.monotonic() + wait
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return None
        r, _, _ = select.select([s], [], [], left)
        if not r:
            return None
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def still_open(socks):
    r, _, _ = select.select(socks, [], [], 0)
    return not r


def expect_errno(data, name, what):
    try:
        ans = json.loads(data)
    except ValueError:
        fail("%s: the daemon's last words are not JSON: %r" % (what, data))
    if ans.get("ok") is not False or ans.get("errno") != name:
        fail("%s: expected an %s answer, got %r" % (what, name, ans))


def ctl(pullfsctl, mount, *args):
    try:
        p = subprocess.run([pullfsctl, "-m", mount] + list(args), capture_output=True,
                           text=True, timeout=20)
    except subprocess.TimeoutExpired:
        fail("pullfsctl %s did not answer within 20 s" % " ".join(args))
    if p.returncode != 0:
        fail("pullfsctl %s exited %d: %s" % (" ".join(args), p.returncode, p.stderr.strip()))
    return p.stdout


def abuse(path, pullfsctl, mount, ref):
    t0 = time.monotonic()
    idle = connect_all(path, 50)
    slow = connect_all(path, 1)[0]
    request = b'{"op":"status"}\n'
    slow.send(request[:1])
    sent = 1

    out = ctl(pullfsctl, mount, "inspect", ref)
    if ref.split("/")[-1].split(":")[0] not in out:
        fail("pullfsctl inspect %s does not name the image: %s" % (ref, out))
    ctl(pullfsctl, mount, "status")
    ctl(pullfsctl, mount, "gc")
    ans = ctlsock.ask(path, {"op": "status"}, timeout=20)
    if ans.get("ok") is not True:
        fail("status on the socket: %r" % ans)
    elapsed = time.monotonic() - t0
    if elapsed < DEADLINE_S - 3:
        if not still_open(idle + [slow]):
            fail("the daemon closed an idle or slow client after only %.1f s" % elapsed)
    else:
        print("ctlclients: the requests took %.1f s: not checking that the others "
              "were still connected" % elapsed)

    # The slow client goes on trickling; the daemon must close it.
    data = None
    end = time.monotonic() + 60
    while data is None and time.monotonic() < end:
        try:
            slow.send(request[sent:sent + 1])
            sent += 1
        except (BrokenPipeError, ConnectionResetError):
            data = closed_by_daemon(slow, 5) or b""
            break
        data = closed_by_daemon(slow, 3)
    if data is None:
        fail("the daemon did not close a client sending a byte every 3 s within 60 s")
    if sent >= len(request):
        fail("the slow client sent its whole request before it was closed")
    expect_errno(data, "ETIMEDOUT", "the slow client")
    for i, s in enumerate(idle):
        data = closed_by_daemon(s, 30)
        if data is None:
            fail("idle connection %d is still open" % i)
        expect_errno(data, "ETIMEDOUT", "idle connection %d" % i)
    print("ctlclients: abuse: the slow client was closed after %d bytes" % sent)


def bound(path, pullfsctl, mount, ref, n):
    t0 = time.monotonic()
    conns = connect_all(path, n)
    ctl(pullfsctl, mount, "inspect", ref)
    elapsed = time.monotonic() - t0
    data = closed_by_daemon(conns[0], 5)
    if data is None:
        fail("the oldest of %d idle connections was not dropped" % n)
    expect_errno(data, "EAGAIN", "the oldest idle connection")
    if elapsed < DEADLINE_S - 3:
        if not still_open(conns[-1:]):
            fail("the newest idle connection was closed after only %.1f s" % elapsed)
    for s in conns:
        s.close()


def hold(path, n, ready):
    conns = connect_all(path, n)
    with open(ready + ".tmp", "w") as f:
        f.write("ready\n")
    os.rename(ready + ".tmp", ready)
    end = time.monotonic() + 60
    for i, s in enumerate(conns):
        if closed_by_daemon(s, max(end - time.monotonic(), 0)) is None:
            fail("connection %d was still open 60 s after the daemon was told to stop" % i)


def main(argv):
    if argv[1] == "abuse":
        abuse(argv[2], argv[3], argv[4], argv[5])
    elif argv[1] == "bound":
        bound(argv[2], argv[3], argv[4], argv[5], int(argv[6]))
    elif argv[1] == "hold":
        hold(argv[2], int(argv[3]), argv[4])
    else:
        sys.exit("usage: see the top of " + argv[0])


if __name__ == "__main__":
    main(sys.argv)

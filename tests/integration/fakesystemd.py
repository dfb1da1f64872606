#!/usr/bin/env python3
"""The part of systemd a unit with FileDescriptorStoreMax= and
Restart=on-failure relies on, for a test on a machine whose PID 1 is not
systemd: a notification socket ($NOTIFY_SOCKET) that keeps the
descriptors sent with FDSTORE=1 (by FDNAME, FDSTOREREMOVE=1 drops them),
and, when the service's main process dies other than by exiting 0, one
new start of it with the kept descriptors passed from fd 3 on
($LISTEN_FDS, $LISTEN_FDNAMES, $LISTEN_PID).

usage: fakesystemd.py WORKDIR -- COMMAND...

Writes WORKDIR/main.pid (the main process, rewritten at the restart) and
appends to WORKDIR/fakesystemd.log: "stored NAME", "removed NAME",
"ready PID", "exited PID STATUS", "started PID". Ends when the main
process exits 0 or after its one restart ends; SIGTERM is passed on."""
import os
import select
import signal
import socket
import subprocess
import sys

work = sys.argv[1]
cmd = sys.argv[sys.argv.index("--") + 1:]
path = os.path.join(work, "notify.sock")
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(path)
store = {}
logf = open(os.path.join(work, "fakesystemd.log"), "a", buffering=1)
main = None


def log(s):
    logf.write(s + "\n")


def start(fds):
    env = dict(os.environ, NOTIFY_SOCKET=path)
    names = list(fds)
    # the kept descriptors at 3, 4, ... in the child; LISTEN_PID is the
    # child's own pid, which only the child knows: a shell sets it
    wrapper = ["/bin/sh", "-c", 'LISTEN_PID=$$ exec "$@"', "sh"] if fds else []
    if fds:
        env["LISTEN_FDS"] = str(len(fds))
        env["LISTEN_FDNAMES"] = ":".join(names)

    def place():
        # dup everything high first, then down to 3.. (no clobbering)
        high = [os.dup(fds[n]) for n in names]
        for i, fd in enumerate(high):
            os.dup2(fd, 3 + i, inheritable=True)

    # close_fds=False: subprocess would close 3, 4, ... after place()
    p = subprocess.Popen(wrapper + cmd, env=env, preexec_fn=place if fds else None,
                         close_fds=False)
    with open(os.path.join(work, "main.pid.tmp"), "w") as f:
        f.write("%d\n" % p.pid)
    os.rename(os.path.join(work, "main.pid.tmp"), os.path.join(work, "main.pid"))
    log("started %d" % p.pid)
    return p


def on_term(sig, frame):
    if main and main.poll() is None:
        main.send_signal(signal.SIGTERM)


signal.signal(signal.SIGTERM, on_term)
main = start({})
restarted = False
while True:
    r, _, _ = select.select([sock], [], [], 0.05)
    if r:
        msg, fds, _, _ = socket.recv_fds(sock, 4096, 8)
        fields = dict(l.split("=", 1) for l in msg.decode().splitlines() if "=" in l)
        name = fields.get("FDNAME", "stored")
        if fields.get("FDSTORE") == "1" and fds:
            if name in store:
                os.close(store[name])
            store[name] = fds[0]
            for fd in fds[1:]:
                os.close(fd)
            log("stored " + name)
        elif fields.get("FDSTOREREMOVE") == "1":
            if name in store:
                os.close(store.pop(name))
            log("removed " + name)
        elif fields.get("READY") == "1":
            log("ready %d" % main.pid)
        continue
    st = main.poll()
    if st is None:
        continue
    log("exited %d %d" % (main.pid, st))
    if st == 0 or restarted or not store:
        break
    restarted = True
    main = start(store)
sys.exit(0 if st == 0 else 1)

#!/usr/bin/env python3
"""Many processes looking up one image path at the same moment.

    lookups.py [--parents K] [--read FILE] [--release-file PATH] N DIR NAME

Forks N processes that each stat DIR/NAME (and read DIR/NAME/FILE with
--read), all released at once, and prints one line per outcome: "OK 32",
or errno names with their counts, sorted.

The kernel merges concurrent lookups of one name in one directory entry
into a single FUSE request, which would hide whether the daemon merges
them.  With --parents K the processes look NAME up relative to K different
directory entries of DIR: pullfs answers every lookup of a namespace
directory with a new node once its 1 s entry timeout has passed, so
re-opening DIR after that gives a distinct entry.  Getting them takes
about K seconds; the number obtained goes to stderr.

With --release-file the processes are released by the creation of PATH
instead of at once (so the caller can do something first); they print
"ready" to stderr once all N wait.
"""

import argparse
import errno
import os
import sys
import time


def distinct_parents(path, k):
    fds, inos = [], set()
    deadline = time.monotonic() + 2 * k + 5
    while len(fds) < k and time.monotonic() < deadline:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        ino = os.fstat(fd).st_ino
        if ino in inos:
            os.close(fd)
            time.sleep(0.1)
            continue
        inos.add(ino)
        fds.append(fd)
    return fds


def child(go_r, out_w, dirfd, name, read):
    os.read(go_r, 1)  # EOF once the parent closes the write end
    res = "OK"
    try:
        os.stat(name, dir_fd=dirfd)
        if read:
            fd = os.open(os.path.join(name, read), os.O_RDONLY, dir_fd=dirfd)
            while os.read(fd, 1 << 16):
                pass
            os.close(fd)
    except OSError as e:
        res = errno.errorcode.get(e.errno, str(e.errno))
    os.write(out_w, (res + "\n").encode())
    os._exit(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parents", type=int, default=1)
    ap.add_argument("--read")
    ap.add_argument("--release-file")
    ap.add_argument("n", type=int)
    ap.add_argument("dir")
    ap.add_argument("name")
    a = ap.parse_args()

    fds = distinct_parents(a.dir, a.parents)
    print("lookups: %d distinct entries of %s" % (len(fds), a.dir), file=sys.stderr)
    go_r, go_w = os.pipe()
    out_r, out_w = os.pipe()
    pids = []
    for i in range(a.n):
        pid = os.fork()
        if pid == 0:
            os.close(go_w)
            os.close(out_r)
            child(go_r, out_w, fds[i % len(fds)], a.name, a.read)
        pids.append(pid)
    os.close(go_r)
    os.close(out_w)
    if a.release_file:
        print("ready", file=sys.stderr, flush=True)
        while not os.path.exists(a.release_file):
            time.sleep(0.02)
    os.close(go_w)  # all children wake up together
    for pid in pids:
        os.waitpid(pid, 0)
    data = b""
    while True:
        chunk = os.read(out_r, 65536)
        if not chunk:
            break
        data += chunk
    counts = {}
    for line in data.decode().split():
        counts[line] = counts.get(line, 0) + 1
    lost = a.n - sum(counts.values())
    if lost:
        counts["NO-ANSWER"] = lost
    for k in sorted(counts):
        print("%s %d" % (k, counts[k]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

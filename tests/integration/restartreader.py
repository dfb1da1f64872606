#!/usr/bin/env python3
"""A reader across restarts of the serving process: from a working
directory inside an image, keeps files open for its whole life and reads
them again and again with pread, opens the others afresh each round, and
stats the image root through the namespace; each read is checked against
the expected SHA-256.  The page cache of each file is dropped before it is
read (posix_fadvise DONTNEED) so that reads reach the daemon.

usage: restartreader.py CWD ROOTPATH STATUSFILE REL=SHA256...

Runs until SIGTERM; STATUSFILE is rewritten after every round (atomic
rename): {"rounds": N, "reads": N, "errors": [...]}."""
import hashlib
import json
import os
import signal
import sys

cwd, rootpath, status = sys.argv[1], sys.argv[2], sys.argv[3]
want = dict(a.split("=", 1) for a in sys.argv[4:])
stop = False


def on_term(sig, frame):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
os.chdir(cwd)
held = {rel: os.open(rel, os.O_RDONLY) for rel in want}
rounds = reads = 0
errors = []


def digest(fd):
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass
    h = hashlib.sha256()
    off = 0
    while True:
        b = os.pread(fd, 1 << 17, off)
        if not b:
            return h.hexdigest()
        h.update(b)
        off += len(b)


def write_status():
    tmp = status + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"rounds": rounds, "reads": reads, "errors": errors[:50]}, f)
    os.rename(tmp, status)


while not stop:
    for rel, sha in want.items():
        for kind in ("held", "fresh"):
            try:
                if kind == "held":
                    got = digest(held[rel])
                else:
                    fd = os.open(rel, os.O_RDONLY)
                    try:
                        got = digest(fd)
                    finally:
                        os.close(fd)
                reads += 1
                if got != sha:
                    errors.append("%s %s: sha256 %s, want %s" % (kind, rel, got, sha))
            except OSError as e:
                errors.append("%s %s: %s" % (kind, rel, e))
    try:
        os.stat(rootpath)
        os.listdir(os.path.dirname(rootpath))
    except OSError as e:
        errors.append("namespace %s: %s" % (rootpath, e))
    if os.getcwd() != cwd:
        errors.append("working directory is now %s" % os.getcwd())
    rounds += 1
    write_status()
write_status()

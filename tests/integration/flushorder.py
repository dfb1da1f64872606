#!/usr/bin/env python3
"""Checks, on an strace of the daemon, that the cache's writes are ordered
to survive a power cut (docs/content-store.md, "Durability").

Usage: flushorder.py TRACE CACHE [--expect KIND=N ...]

TRACE is the output of
  strace -f -y -s 0 -e trace=write,pwrite64,fsync,fdatasync,syncfs,
         rename,renameat,renameat2,linkat,unlinkat -o TRACE -p PID
CACHE the daemon's cache directory.  Rules, for every call that succeeded:

  publish   a rename from tmp/X into layers/, blobs/sha256/ or refs/ comes
            after a flush of X that began after the last write to X had
            returned (a file: its fdatasync or fsync; a layer's staged
            directory: a syncfs of a descriptor in it, or every file in it
            flushed); the same thread's next flush or publishing call is an
            fsync of the directory it went into, and it returns before any
            later rename into refs/ begins.  A staged layer changed after
            its flush (links to stored objects) has its directory flushed
            after the last change, and objects/ is flushed after the
            layer's index links, both before the layer is renamed.
  link      a link of a staged or published object into objects/ comes
            after a flush of its content as above.
  lazyfile  a rename of layers/L/p.OBJ to o.OBJ comes after a flush of
            p.OBJ (its fdatasync, or a syncfs of a descriptor in layers/L)
            that began after its last write had returned.
  chunk     a write of a chunk map layers/L/p.OBJ.map comes after an
            fdatasync of p.OBJ (or a syncfs of a descriptor in layers/L) by
            the same thread that began after the thread's last write to
            p.OBJ had returned, and after an fsync of layers/L (once per
            map, before its first write).
  lazydone  the unlink of layers/L/lazy comes after an fsync of layers/L
            that began after the last rename in it had returned.

--expect KIND=N fails unless at least N calls of KIND (layer, shared: a
layer whose stage changed after its flush, blob, ref, link, lazyfile, chunk,
lazydone) were checked, so that a trace that missed
the pull cannot pass.  Prints one line per violation and exits 1 if any.
"""
import os
import re
import sys

FD = re.compile(r"(-?\d+)<([^>]*)>")
START = re.compile(r"^(\d+)\s+(\w+)\((.*)$")
RESUMED = re.compile(r"^(\d+)\s+<\.\.\. (\w+) resumed>(.*)$")
RESULT = re.compile(r"\)\s+=\s+(-?\d+)")
QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


class Call:
    def __init__(self, pid, name, start):
        self.pid, self.name, self.start = pid, name, start
        self.end = None
        self.text = ""
        self.result = None


def parse(path):
    """Calls in the order they began; each with the line index where it
    began (start) and where it returned (end)."""
    calls, pending = [], {}
    with open(path, errors="replace") as f:
        for i, line in enumerate(f):
            line = line.rstrip("\n")
            m = RESUMED.match(line)
            if m:
                c = pending.pop(m.group(1), None)
                if c is None:
                    continue
                c.text += m.group(3)
            else:
                m = START.match(line)
                if not m:
                    continue
                c = Call(m.group(1), m.group(2), i)
                c.text = m.group(3)
                calls.append(c)
                if line.endswith("<unfinished ...>"):
                    c.text = c.text[: -len("<unfinished ...>")]
                    pending[c.pid] = c
                    continue
            c.end = i
            r = RESULT.search(c.text)
            c.result = int(r.group(1)) if r else None
    return [c for c in calls if c.end is not None and c.result is not None and c.result >= 0]


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    trace, cache = args[0], os.path.realpath(args[1])
    expect = {}
    rest = args[2:]
    while rest:
        if rest[0] != "--expect" or len(rest) < 2 or "=" not in rest[1]:
            sys.exit("flushorder.py: bad arguments: %s" % " ".join(rest))
        k, n = rest[1].split("=", 1)
        expect[k] = int(n)
        rest = rest[2:]

    def rel(p):
        p = p.replace(" (deleted)", "")
        if p == cache:
            return "."
        if p.startswith(cache + "/"):
            return p[len(cache) + 1 :]
        return None

    def fds(c):
        return [rel(p) for _, p in FD.findall(c.text)]

    def names(c):
        return QUOTED.findall(c.text)

    calls = parse(trace)
    writes, flushes, dirsyncs, renames, links, unlinks = [], [], [], [], [], []
    for c in calls:
        f = fds(c)
        if c.name in ("write", "pwrite64", "pwrite", "writev", "pwritev"):
            if f and f[0]:
                writes.append((c, f[0]))
        elif c.name in ("fsync", "fdatasync", "syncfs"):
            if f and f[0]:
                flushes.append((c, f[0]))
                if c.name == "fsync":
                    dirsyncs.append((c, f[0]))
        elif c.name in ("renameat", "renameat2", "linkat"):
            n = names(c)
            if len(f) >= 2 and len(n) >= 2 and f[0] and f[1]:
                what = (c, os.path.normpath(f[0] + "/" + n[0]), os.path.normpath(f[1] + "/" + n[1]))
                (links if c.name == "linkat" else renames).append(what)
        elif c.name == "unlinkat":
            n = names(c)
            if f and f[0] and n:
                unlinks.append((c, os.path.normpath(f[0] + "/" + n[0])))

    def under(p, top):
        return p == top or p.startswith(top + "/")

    def last_write(top, before, pid=None):
        """Line where the last write to top (or below it) returned before
        line `before` (by thread pid only, when given), or -1."""
        e = -1
        for w, p in writes:
            if w.start < before and under(p, top) and pid in (None, w.pid):
                e = max(e, w.end)
        return e

    def flushed(path, before, pid=None):
        """path's data was flushed (fdatasync or fsync of it) after its
        last write returned, and before line `before`; with pid, the
        writes and the flush of that thread only."""
        lw = last_write(path, before, pid)
        return any(fl.start > lw and fl.end < before and p == path and fl.name != "syncfs" and pid in (None, fl.pid) for fl, p in flushes)

    def synced_in(path, top, before):
        """A syncfs of a descriptor in top began after the last write to
        path returned and returned before line `before`."""
        lw = last_write(path, before)
        return any(fl.name == "syncfs" and fl.start > lw and fl.end < before and under(p, top) for fl, p in flushes)

    def tree_flushed(top, before):
        """Everything written to top and below it was flushed before line
        `before`: by a syncfs (of a descriptor there) after the last
        write, or file by file."""
        lw = last_write(top, before)
        if any(fl.name == "syncfs" and fl.start > lw and fl.end < before and under(p, top) for fl, p in flushes):
            return True
        files = {p for w, p in writes if w.start < before and under(p, top)}
        return bool(files) and all(flushed(p, before) for p in files)

    # flushes and publishing calls, in the order they began
    ordered = [c for c in calls if c.name in ("fsync", "fdatasync", "syncfs", "rename", "renameat", "renameat2", "linkat")]
    stage_links = [x for x in links if x[2].startswith("objects/") and x[1].startswith("tmp/")]
    errors = []
    seen = {k: 0 for k in ("layer", "shared", "blob", "ref", "link", "lazyfile", "chunk", "lazydone")}
    ref_renames = [r for r in renames if r[2].startswith("refs/")]

    for c, src, dst in renames:
        d = os.path.dirname(dst)
        if src.startswith("tmp/") and d in ("layers", "blobs/sha256", "refs"):
            kind = {"layers": "layer", "blobs/sha256": "blob", "refs": "ref"}[d]
            seen[kind] += 1
            ok = tree_flushed(src, c.start) if kind == "layer" else flushed(src, c.start)
            if not ok:
                errors.append("%s %s published as %s before its content was flushed" % (kind, src, dst))
            if kind == "layer":
                # links and renames into the stage after its content was
                # flushed (shared objects) are flushed too
                synced = max([fl.end for fl, p in flushes if fl.name == "syncfs" and under(p, src) and fl.end < c.start] or [-1])
                last = max([x[0].end for x in renames + links if under(x[2], src) and synced < x[0].start < c.start] or [-1])
                if last >= 0:
                    seen["shared"] += 1
                if last >= 0 and not any(fl.start > last and fl.end < c.start and p == src for fl, p in dirsyncs):
                    errors.append("layer %s published before the changes to its directory were flushed" % src)
                own = [x for x in stage_links if x[1].startswith(src + "/")]
                if own and not any(fl.start > own[-1][0].end and fl.end < c.start and p == "objects" for fl, p in dirsyncs):
                    errors.append("layer %s published before objects/ was flushed after its links" % src)
            # the directory is flushed at once, by the same thread
            nxt = next((x for x in ordered if x.pid == c.pid and x.start > c.end), None)
            if nxt is None or nxt.name != "fsync" or fds(nxt)[:1] != [d]:
                errors.append("%s %s: %s/ not flushed right after the rename" % (kind, dst, d))
                continue
            for rc, _, rdst in ref_renames:
                if rc.start > c.end and rc is not c and nxt.end > rc.start:
                    errors.append("reference %s published before %s/ was flushed after %s" % (rdst, d, dst))
                    break
        elif re.match(r"layers/[0-9a-f]{64}/p\.[0-9a-f]{64}$", src) and re.search(r"/o\.[0-9a-f]{64}$", dst):
            seen["lazyfile"] += 1
            if not flushed(src, c.start) and not synced_in(src, os.path.dirname(src), c.start):
                errors.append("lazy file %s renamed to %s before its data was flushed" % (src, dst))

    for c, src, dst in links:
        if not dst.startswith("objects/"):
            continue
        seen["link"] += 1
        if src.startswith("tmp/"):
            stage = "/".join(src.split("/")[:2])
            ok = tree_flushed(stage, c.start)
        else:
            # a lazy layer's finished file, flushed under its partial name
            part = re.sub(r"/o\.([0-9a-f]{64})$", r"/p.\1", src)
            ok = flushed(part, c.start) or synced_in(part, os.path.dirname(src), c.start)
        if not ok:
            errors.append("object %s linked as %s before its content was flushed" % (src, dst))

    first_map_write = {}
    for c, p in writes:
        m = re.match(r"(layers/[0-9a-f]{64})/(p\.[0-9a-f]{64})\.map$", p)
        if not m:
            continue
        seen["chunk"] += 1
        data = m.group(1) + "/" + m.group(2)
        # (threads write other chunks of the file meanwhile: what this
        # thread wrote is what its map byte marks)
        # (or a syncfs in layers/L by that thread: the completion flushes
        # what one request wrote at once, then marks it)
        lw = last_write(data, c.start, c.pid)
        by_syncfs = any(fl.name == "syncfs" and fl.start > lw and fl.end < c.start and
                        under(q, m.group(1)) and fl.pid == c.pid for fl, q in flushes)
        if not flushed(data, c.start, c.pid) and not by_syncfs:
            errors.append("chunk map %s written before the data it marks was flushed" % p)
        if p not in first_map_write:
            first_map_write[p] = c
            if not any(fl.end < c.start and q == m.group(1) for fl, q in dirsyncs):
                errors.append("chunk map %s written before %s/ was ever flushed" % (p, m.group(1)))

    for c, p in unlinks:
        m = re.match(r"(layers/[0-9a-f]{64})/lazy$", p)
        if not m:
            continue
        seen["lazydone"] += 1
        last = max([r.end for r, s, _ in renames if s.startswith(m.group(1) + "/") and r.start < c.start] or [-1])
        if not any(fl.start > last and fl.end < c.start and q == m.group(1) for fl, q in dirsyncs):
            errors.append("%s removed before the renames in %s/ were flushed" % (p, m.group(1)))

    for k, n in expect.items():
        if seen.get(k, 0) < n:
            errors.append("expected at least %d checked %s calls in the trace, found %d" % (n, k, seen.get(k, 0)))
    for e in errors:
        print(e)
    print("checked: " + ", ".join("%s %d" % (k, v) for k, v in seen.items()), file=sys.stderr)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The soak of pullfs; run by tools/bench/soak.

    soakbench.py manifest --registry H:P --storage DIR --arch A --images LIST --out FILE
    soakbench.py run --manifest FILE [--minutes N] [--readers N] [--interval S]
                     [--budget-fraction F] [--json FILE]

`manifest` reads each image's manifest from the registry and its layer
blobs from the registry's storage, applies the layers with the overlay
rules (whiteouts, opaque directories, later layers win, hardlinks) and
writes what every path of every image must be: its type, size and SHA-256,
a symlink's target, a directory's names.  Nothing comes from pullfs.

`run` (environment from tools/bench/soak: WORK, MNT, CACHE, EVENTS,
PULLFS_LOG, INTEGRATION_DIR, SOAK_PULLFS, SOAK_PULLFS_SRC, SOAK_PULLFSCTL,
SOAK_REGISTRY_CONFIG, SOAK_REGISTRY) starts the registry, faultproxy.py in
front of it and pullfs --supervise with a small cache budget; reader
processes look images up and check what they read against the manifest
while the fault schedule runs; then a quiet tail and a final pass over
every image, the figures and the verdict.
"""

import argparse
import errno
import gzip
import hashlib
import io
import json
import linecache
import multiprocessing
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import time
import urllib.request

from benchlib import PROCS, log, stop, wait_until

# --------------------------------------------------------------- manifest

ACCEPT = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])


def get_manifest(registry, repo, ref):
    req = urllib.request.Request(f"http://{registry}/v2/{repo}/manifests/{ref}",
                                 headers={"Accept": ACCEPT})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def layer_stream(storage, desc):
    hexd = desc["digest"].split(":", 1)[1]
    path = os.path.join(storage, "docker/registry/v2/blobs/sha256", hexd[:2], hexd, "data")
    mt = desc["mediaType"]
    if mt.endswith("gzip"):
        return gzip.open(path, "rb"), None
    if mt.endswith("zstd"):
        p = subprocess.Popen(["zstd", "-dc", path], stdout=subprocess.PIPE)
        return p.stdout, p
    return open(path, "rb"), None


def norm(name):
    while name.startswith("./"):
        name = name[2:]
    name = name.strip("/")
    return "" if name == "." else name


def apply_layer(tree, layer_no, f):
    """Apply one layer tar (a stream) to tree: path -> entry; returns the
    bytes of file content in the layer."""
    total = 0
    def drop(path, lower_only=False, children_only=False):
        pre = path + "/" if path else ""
        for k in [k for k in tree if k.startswith(pre) or (k == path and not children_only)]:
            if k == "" or (lower_only and tree[k]["layer"] >= layer_no):
                continue
            del tree[k]

    with tarfile.open(fileobj=f, mode="r|") as tf:
        for m in tf:
            name = norm(m.name)
            if name == "":
                continue
            parent, _, base = name.rpartition("/")
            if base == ".wh..wh..opq":
                drop(parent, lower_only=True, children_only=True)
                continue
            if base.startswith(".wh."):
                drop(parent + "/" + base[4:] if parent else base[4:])
                continue
            old = tree.get(name)
            if not (m.isdir() and old and old["t"] == "d"):
                drop(name)
            e = {"layer": layer_no}
            if m.isdir():
                e["t"] = "d"
            elif m.isreg():
                h = hashlib.sha256()
                src = tf.extractfile(m)
                while True:
                    b = src.read(1 << 20)
                    if not b:
                        break
                    h.update(b)
                e.update(t="f", size=m.size, sha=h.hexdigest())
                total += m.size
            elif m.islnk():
                target = tree[norm(m.linkname)]
                e.update(t="f", size=target["size"], sha=target["sha"])
            elif m.issym():
                e.update(t="l", target=m.linkname)
            elif m.ischr():
                e["t"] = "c"
            elif m.isblk():
                e["t"] = "b"
            elif m.isfifo():
                e["t"] = "p"
            else:
                continue
            tree[name] = e
    return total


def make_fresh(a):
    """Single-layer images, each to be looked up once during the run, so
    that pulls (manifest and blob) happen under the faults whatever GC
    does: a file of 80 to 200 KiB (a content-store object, and a blob
    over the size the fault proxy corrupts or cuts) and a small one.
    Pushed with rawpush.py; their manifest is computed from the tars."""
    rnd = random.Random(7)
    d = os.path.join(os.path.dirname(a.out), "fresh")
    os.makedirs(d, exist_ok=True)
    lines, fresh = [], []
    for k in range(a.fresh):
        path = os.path.join(d, f"{k}.tar")
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
            for name, data in (("fresh/id", f"fresh image {k}\n".encode()),
                               ("fresh/data", rnd.randbytes(rnd.randint(80, 200) << 10))):
                ti = tarfile.TarInfo(name)
                ti.size, ti.mode, ti.mtime = len(data), 0o644, 1700000000
                tf.addfile(ti, io.BytesIO(data))
        tree = {"": {"t": "d", "layer": 0}}
        with open(path, "rb") as f:
            apply_layer(tree, 1, f)
        entries = {k2: {kk: vv for kk, vv in v.items() if kk != "layer"} for k2, v in tree.items()}
        entries[""]["names"] = ["fresh"]
        entries["fresh"] = {"t": "d", "names": ["data", "id"]}
        name = f"soak/fresh:{k}"
        fresh.append({"name": name, "format": "gzip", "base": "fresh", "lazy": False,
                      "entries": entries})
        lines.append(f"{name} {path}\n")
    r = subprocess.run([sys.executable, os.path.join(a.integration, "rawpush.py"), a.registry, "-"],
                       input="".join(lines), text=True, stdout=subprocess.DEVNULL)
    if r.returncode != 0:
        sys.exit("rawpush.py failed")
    shutil.rmtree(d)
    return fresh


def make_hostile(a, content_bytes):
    """The images of the hostile user, pushed with rawpush.py under
    hostile/: six "fill" images of a tenth of the images' content each
    (together 1.5 times the cache budget of 40 %), random and so
    incompressible, and four small "trickle" images whose blobs the
    hostile proxy sends a few bytes a second.  The big-TOC image is
    pushed by tools/bench/soak (skopeo writes its zstd:chunked TOC)."""
    rnd = random.Random(11)
    d = os.path.join(os.path.dirname(a.out), "hostile")
    os.makedirs(d, exist_ok=True)
    fill_bytes = max(1 << 20, content_bytes // 10)
    lines, out = [], {"fill": [], "trickle": [], "bigtoc": a.hostile_bigtoc or None,
                      "fill_bytes": fill_bytes}
    for kind, n, size in (("fill", 6, fill_bytes), ("trickle", 4, 64 << 10)):
        for k in range(n):
            path = os.path.join(d, f"{kind}{k}.tar")
            with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
                data = rnd.randbytes(size)
                ti = tarfile.TarInfo(f"{kind}/data")
                ti.size, ti.mode, ti.mtime = len(data), 0o644, 1700000000
                tf.addfile(ti, io.BytesIO(data))
            name = f"hostile/{kind}{k}:1"
            out[kind].append(name)
            lines.append(f"{name} {path}\n")
    r = subprocess.run([sys.executable, os.path.join(a.integration, "rawpush.py"), a.registry, "-"],
                       input="".join(lines), text=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, RAWPUSH_GZIP_LEVEL="1"))
    if r.returncode != 0:
        sys.exit("rawpush.py failed")
    shutil.rmtree(d)
    return out


def cmd_manifest(a):
    images = []
    layers_bytes = {}
    with open(a.images) as f:
        lines = [line.split() for line in f if line.strip()]
    for name, fmt, base in lines:
        repo, tag = name.rsplit(":", 1)
        m = get_manifest(a.registry, repo, tag)
        if "manifests" in m:
            d = next(d for d in m["manifests"]
                     if d["platform"]["architecture"] == a.arch and d["platform"]["os"] == "linux")
            m = get_manifest(a.registry, repo, d["digest"])
        tree = {"": {"t": "d", "layer": 0}}
        for no, desc in enumerate(m["layers"], 1):
            f, proc = layer_stream(a.storage, desc)
            layers_bytes[desc["digest"]] = apply_layer(tree, no, f)
            f.close()
            if proc and proc.wait() != 0:
                sys.exit(f"zstd -dc of {desc['digest']} failed")
        dirs = {}
        for k in tree:
            if k:
                dirs.setdefault(k.rpartition("/")[0], []).append(k.rpartition("/")[2])
        entries = {}
        for k, v in tree.items():
            v = dict(v)
            del v["layer"]
            if v["t"] == "d":
                v["names"] = sorted(dirs.get(k, []))
            entries[k] = v
        images.append({"name": name, "format": fmt, "base": base,
                       "lazy": fmt == "zstd:chunked", "entries": entries})
    fresh = make_fresh(a) if a.fresh else []
    out = {"images": images, "fresh": fresh, "content_bytes": sum(layers_bytes.values())}
    if a.hostile:
        out["hostile"] = make_hostile(a, out["content_bytes"])
    with open(a.out, "w") as f:
        json.dump(out, f)
    log(f"manifest: {len(images)} images, {len(layers_bytes)} distinct layers, "
        f"{out['content_bytes'] / 1048576:.1f} MiB of file content")


# -------------------------------------------------------------- the run

ENV = os.environ
WORK = ENV.get("WORK", "")
MNT = ENV.get("MNT", "")


def now():
    return time.time()


def ename(e):
    return errno.errorcode.get(e, str(e))


def reader(images, proxy, stop_at, outfile, seed):
    """One reader process: until stop_at, pick an image, look it up, check
    a few of its entries (and the files it keeps open).  Writes its
    findings to outfile (JSON) at the end and every 50 rounds."""
    rnd = random.Random(seed)
    res = {"ops": {}, "errors": [], "mismatches": [], "max_op_s": 0.0, "rounds": 0}
    held = []  # (fd, image name, path, sha, rounds left)

    def count(kind):
        res["ops"][kind] = res["ops"].get(kind, 0) + 1

    def check(kind, img, path, fn):
        t0 = now()
        count(kind)
        try:
            fn()
        except OSError as e:
            # the system call that failed, from the frame that raised
            tb = e.__traceback__
            while tb.tb_next:
                tb = tb.tb_next
            call = linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno).strip()
            res["errors"].append({"t0": t0, "t1": now(), "image": img, "path": path,
                                  "op": kind, "call": call, "errno": ename(e.errno)})
        finally:
            res["max_op_s"] = max(res["max_op_s"], now() - t0)

    def mismatch(img, path, what):
        res["mismatches"].append({"t": now(), "image": img, "path": path, "what": what})

    def read_sha(fd):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        h, off = hashlib.sha256(), 0
        while True:
            b = os.pread(fd, 1 << 17, off)
            if not b:
                return h.hexdigest(), off
            h.update(b)
            off += len(b)

    def save():
        with open(outfile + ".tmp", "w") as f:
            json.dump(res, f)
        os.rename(outfile + ".tmp", outfile)

    while now() < stop_at:
        img = rnd.choice(images)
        root = os.path.join(MNT, "images", proxy, img["name"])
        ents = img["entries"]

        def lookup():
            if not stat.S_ISDIR(os.stat(root).st_mode):
                mismatch(img["name"], "", "image root is not a directory")
        check("lookup", img["name"], "", lookup)
        for path in rnd.sample(sorted(ents), min(6, len(ents))):
            e = ents[path]
            full = os.path.join(root, path) if path else root

            def one(e=e, full=full, path=path):
                st = os.lstat(full)
                kinds = {"f": stat.S_ISREG, "d": stat.S_ISDIR, "l": stat.S_ISLNK,
                         "c": stat.S_ISCHR, "b": stat.S_ISBLK, "p": stat.S_ISFIFO}
                if not kinds[e["t"]](st.st_mode):
                    return mismatch(img["name"], path, f"type {stat.filemode(st.st_mode)}, "
                                    f"expected {e['t']}")
                if e["t"] == "f":
                    if st.st_size != e["size"]:
                        return mismatch(img["name"], path, f"size {st.st_size} != {e['size']}")
                    fd = os.open(full, os.O_RDONLY)
                    keep = False
                    try:
                        sha, n = read_sha(fd)
                        if sha != e["sha"] or n != e["size"]:
                            mismatch(img["name"], path, f"read {n} bytes, sha256 {sha}")
                        elif len(held) < 4 and rnd.random() < 0.1:
                            held.append([fd, img["name"], path, e["sha"], rnd.randint(3, 30)])
                            keep = True
                    finally:
                        if not keep:
                            os.close(fd)
                elif e["t"] == "l":
                    t = os.readlink(full)
                    if t != e["target"]:
                        mismatch(img["name"], path, f"symlink to {t!r}, expected {e['target']!r}")
                elif e["t"] == "d":
                    names = sorted(os.listdir(full))
                    if names != e["names"]:
                        mismatch(img["name"], path, f"lists {names}, expected {e['names']}")
            check({"f": "read", "l": "readlink", "d": "listdir"}.get(e["t"], "lstat"),
                  img["name"], path, one)
        for h in list(held):
            fd, name, path, sha, left = h

            def again(fd=fd, name=name, path=path, sha=sha):
                got, _ = read_sha(fd)
                if got != sha:
                    mismatch(name, path, f"held file reads sha256 {got}")
            check("read-held", name, path, again)
            h[4] -= 1
            if h[4] <= 0:
                os.close(fd)
                held.remove(h)
        res["rounds"] += 1
        if res["rounds"] % 50 == 0:
            save()
    for h in held:
        os.close(h[0])
    save()


def fresher(fresh, proxy, stop_at, every, outfile):
    """One image never seen before every `every` seconds: a lookup (a
    pull: manifest and blobs), then each of its entries checked."""
    res = {"ops": {}, "errors": [], "mismatches": [], "max_op_s": 0.0, "rounds": 0}
    for img in fresh:
        if now() >= stop_at:
            break
        t_next = now() + every
        root = os.path.join(MNT, "images", proxy, img["name"])
        t0 = now()
        try:
            res["ops"]["fresh-lookup"] = res["ops"].get("fresh-lookup", 0) + 1
            os.stat(root)
            for path, e in img["entries"].items():
                if e["t"] == "f":
                    res["ops"]["fresh-read"] = res["ops"].get("fresh-read", 0) + 1
                    with open(os.path.join(root, path), "rb") as f:
                        if hashlib.sha256(f.read()).hexdigest() != e["sha"]:
                            res["mismatches"].append({"t": now(), "image": img["name"],
                                                      "path": path, "what": "content differs"})
        except OSError as x:
            res["errors"].append({"t0": t0, "t1": now(), "image": img["name"], "path": "",
                                  "op": "fresh", "call": "lookup or read",
                                  "errno": ename(x.errno)})
        res["max_op_s"] = max(res["max_op_s"], now() - t0)
        res.setdefault("lookups", []).append([t0, now() - t0])
        res["rounds"] += 1
        time.sleep(max(0.0, t_next - now()))
    with open(outfile, "w") as f:
        json.dump(res, f)


HOSTILE_UID = 65534


def hostile(kind, hostile, hproxy, stop_at, outfile, seed):
    """One process of the hostile user (uid 65534, no groups), until
    stop_at:
      flood    made-up namespace directories and invalid names (events),
               500 of each a round
      fill     pulls of its own images, a file of each kept open (cache
               bytes), and lookups and listings in the big-TOC image
      trickle  lookups of images whose blobs trickle (pull slots)
    Its counts by operation and errno go to outfile, opened before the
    process drops root."""
    out = open(outfile, "w")
    os.setgroups([])
    os.setgid(HOSTILE_UID)
    os.setuid(HOSTILE_UID)
    rnd = random.Random(seed)
    res = {"kind": kind, "ops": {}, "errnos": {}, "max_op_s": 0.0}
    base = os.path.join(MNT, "images", hproxy)
    held = {}

    def op(what, fn):
        t0 = now()
        res["ops"][what] = res["ops"].get(what, 0) + 1
        try:
            fn()
            key = f"{what} ok"
        except OSError as x:
            key = f"{what} {ename(x.errno)}"
        res["errnos"][key] = res["errnos"].get(key, 0) + 1
        res["max_op_s"] = max(res["max_op_s"], now() - t0)

    def read_fill(name):
        p = os.path.join(base, name, "fill", "data")
        fd = held.get(name)
        if fd is None:
            fd = os.open(p, os.O_RDONLY)
            held[name] = fd
        while os.pread(fd, 1 << 20, 0 if rnd.random() < 0.5 else 1 << 20):
            break

    while now() < stop_at:
        if kind == "flood":
            for _ in range(500):
                op("namespace", lambda: os.stat(os.path.join(
                    base, "hostile", f"ns{rnd.getrandbits(48):x}", f"d{rnd.getrandbits(32):x}")))
            for _ in range(500):
                op("invalid", lambda: os.stat(os.path.join(
                    base, "hostile", f"bad:name:{rnd.getrandbits(48):x}")))
        elif kind == "fill":
            for name in hostile["fill"]:
                op("fill", lambda name=name: read_fill(name))
            if hostile.get("bigtoc"):
                root = os.path.join(base, hostile["bigtoc"])

                def walk():
                    for d in sorted(os.listdir(os.path.join(root, "many")))[:8]:
                        for f in os.listdir(os.path.join(root, "many", d))[:50]:
                            os.lstat(os.path.join(root, "many", d, f))
                op("bigtoc", walk)
            time.sleep(0.5)
        else:
            for name in hostile["trickle"]:
                op("trickle", lambda name=name: os.stat(os.path.join(base, name, "trickle")))
            time.sleep(0.2)
    for fd in held.values():
        os.close(fd)
    json.dump(res, out)
    out.close()


def cache_breakdown(cache):
    """Bytes under each top-level directory of the cache, and the layers
    and blobs by name, for a cache that GC did not bring under its mark."""
    parts = []
    for top in sorted(os.listdir(cache)):
        path = os.path.join(cache, top)
        if not os.path.isdir(path):
            continue
        total, names = 0, []
        for name in sorted(os.listdir(path)):
            n = 0
            for root, _, files in os.walk(os.path.join(path, name)):
                for f in files:
                    try:
                        n += os.lstat(os.path.join(root, f)).st_size
                    except OSError:
                        pass
            if not os.path.isdir(os.path.join(path, name)):
                try:
                    n = os.lstat(os.path.join(path, name)).st_size
                except OSError:
                    pass
            total += n
            names.append(f"{name[:16]} {n}")
        parts.append(f"{top}/ {total} bytes"
                     + (f" ({', '.join(names[:12])})" if top in ("layers", "blobs", "tmp")
                        and names else ""))
    return "; ".join(parts)


def handover_live(pid):
    """What the supervisor's hand-over log (fs/restart/handover.h) still lists, by
    kind of record, and its text (None when there is no log)."""
    text = None
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:pullfs-handover"):
                with open(f"/proc/{pid}/fd/{fd}", "rb") as f:
                    text = f.read().decode(errors="replace")
                break
        except OSError:
            pass
    if text is None:
        return None, None
    live = {"ns": {}, "img": {}, "bk": {}, "bo": {}}
    drop = {"nsx": "ns", "imgx": "img", "bkx": "bk", "bok": "bo"}
    owner = {}  # namespace node -> (uid, its nsu record's bytes)
    for line in text.split("\n")[:-1]:
        f = line.split(" ")
        if f[0] in live and len(f) > 1:
            live[f[0]][f[1]] = len(line) + 1
        elif f[0] == "nsu" and len(f) > 2:
            owner[f[1]] = (f[2], len(line) + 1)
        elif f[0] in drop and len(f) > 1:
            live[drop[f[0]]].pop(f[1], None)
            if f[0] == "nsx":
                owner.pop(f[1], None)
    counts = {k: len(v) for k, v in live.items()}
    # the bytes a compaction keeps of each user's namespace nodes
    for node, size in live["ns"].items():
        uid, usize = owner.get(node, ("0", 0))
        counts[f"ns_bytes_uid{uid}"] = counts.get(f"ns_bytes_uid{uid}", 0) + size + usize
        counts[f"ns_uid{uid}"] = counts.get(f"ns_uid{uid}", 0) + 1
    return counts, text


def events_bytes():
    """The events log's bytes on disk, rotated files included."""
    d, b = os.path.split(ENV["EVENTS"])
    n = 0
    for f in os.listdir(d):
        if f == b or f.startswith(b + "."):
            try:
                n += os.lstat(os.path.join(d, f)).st_size
            except OSError:
                pass
    return n


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def final_pass(images, proxy):
    """Every entry of every image once, in one process: (ops, errors,
    mismatches)."""
    ops, errors, bad = 0, [], []
    for img in images:
        root = os.path.join(MNT, "images", proxy, img["name"])
        for path, e in sorted(img["entries"].items()):
            full = os.path.join(root, path) if path else root
            ops += 1
            try:
                st = os.lstat(full)
                if e["t"] == "f":
                    with open(full, "rb") as f:
                        data = f.read()
                    if hashlib.sha256(data).hexdigest() != e["sha"] or st.st_size != e["size"]:
                        bad.append(f"{img['name']}/{path}: content differs")
                elif e["t"] == "l" and os.readlink(full) != e["target"]:
                    bad.append(f"{img['name']}/{path}: symlink target differs")
                elif e["t"] == "d" and sorted(os.listdir(full)) != e["names"]:
                    bad.append(f"{img['name']}/{path}: listing differs")
            except OSError as x:
                errors.append(f"{img['name']}/{path}: {ename(x.errno)}")
    return ops, errors, bad


def fd_kinds(pid, fds):
    """What a process's descriptors are, most common first: their link
    targets with digests and numbers left out, so that a leak shows as
    one kind that grew."""
    kinds = {}
    for fd in fds:
        try:
            t = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        t = re.sub(r"[0-9a-f]{64}", "HEX", t)
        t = re.sub(r"[0-9]+", "N", t)
        kinds[t] = kinds.get(t, 0) + 1
    return sorted(kinds.items(), key=lambda kv: -kv[1])[:8]


class Soak:
    def __init__(self, a):
        self.a = a
        with open(a.manifest) as f:
            self.man = json.load(f)
        self.images = self.man["images"]
        self.hostile = self.man.get("hostile") if a.hostile else None
        if a.hostile and not self.hostile:
            raise SystemExit("--hostile: the manifest has no hostile images (soak --hostile)")
        self.hproxy = None
        self.windows = []  # {"kind", "start", "end", "allowed"}
        self.actions = {}
        self.samples = []  # time series of RSS and fds
        self.replaced = []  # the serving process's figures at each replacement
        self.problems = []  # what the driver itself saw go wrong
        self.registry = None
        self.proxy = None
        self.pullfs = None

    # ---- processes

    def start_registry(self):
        log_f = open(os.path.join(WORK, "registry.log"), "a")
        self.registry = subprocess.Popen(["docker-registry", "serve", ENV["SOAK_REGISTRY_CONFIG"]],
                                         stdout=log_f, stderr=log_f)
        PROCS.append(self.registry)

        def up():
            if self.registry.poll() is not None:
                raise RuntimeError("the registry exited")
            try:
                urllib.request.urlopen(f"http://{ENV['SOAK_REGISTRY']}/v2/", timeout=2).close()
                return True
            except OSError:
                return False
        wait_until(up, 30, "the registry", step=0.1)

    def stop_registry(self):
        stop(self.registry)
        self.registry = None

    def proxy_mode(self, mode):
        ctl = os.path.join(WORK, "proxy-control.json")
        with open(ctl + ".tmp", "w") as f:
            json.dump(mode, f)
        os.rename(ctl + ".tmp", ctl)

    def start_proxy(self):
        self.proxy_mode({})
        portfile = os.path.join(WORK, "proxy.port")
        self.proxy_proc = subprocess.Popen(
            [sys.executable, os.path.join(ENV["INTEGRATION_DIR"], "faultproxy.py"),
             "--port-file", portfile, "--upstream", ENV["SOAK_REGISTRY"],
             "--log", os.path.join(WORK, "proxy.log"),
             "--control", os.path.join(WORK, "proxy-control.json")],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(WORK, "proxy.err"), "w"))
        PROCS.append(self.proxy_proc)
        wait_until(lambda: os.path.exists(portfile), 30, "the fault proxy")
        with open(portfile) as f:
            self.proxy = "127.0.0.1:" + f.read().split()[0]

    def start_hostile_proxy(self):
        """slowproxy.py in front of the registry for the hostile user's
        images: another registry as pullfs sees it, whose trickle images'
        blobs come at a few bytes a second."""
        portfile = os.path.join(WORK, "hostile-proxy.port")
        p = subprocess.Popen(
            [sys.executable, os.path.join(ENV["INTEGRATION_DIR"], "slowproxy.py"),
             "--upstream", ENV["SOAK_REGISTRY"], "--port-file", portfile,
             "--rate", f"GET /v2/hostile/trickle[0-9]+/blobs/={self.a.trickle_rate}"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(WORK, "hostile-proxy.err"), "w"))
        PROCS.append(p)
        wait_until(lambda: os.path.exists(portfile) and os.path.getsize(portfile), 30,
                   "the hostile proxy")
        with open(portfile) as f:
            self.hproxy = "127.0.0.1:" + f.read().split()[0]

    def start_pullfs(self, budget):
        extra = []
        if self.hostile:
            extra = ["-o", "allow_other", "--insecure-registry", self.hproxy]
        cmd = [ENV["SOAK_PULLFS"], "-f", "--supervise", "--cache", ENV["CACHE"],
               "--events-log", ENV["EVENTS"], "--insecure-registry", self.proxy, *extra,
               "--cache-max-bytes", str(budget), "--gc-min-age", "5",
               "--backoff-initial", "2", "--backoff-max", str(self.a.backoff_max),
               "--connect-timeout", "5", "--low-speed-timeout", "10",
               "--max-parallel-pulls", "3", MNT]
        logf = open(ENV["PULLFS_LOG"], "a")
        logf.write("+ " + " ".join(cmd) + "\n")
        logf.flush()
        self.pullfs = subprocess.Popen(cmd, stdout=logf, stderr=logf)
        PROCS.append(self.pullfs)
        wait_until(lambda: self.pullfs.poll() is not None or self.mount_id(), 30, "the mount")
        if self.pullfs.poll() is not None:
            raise RuntimeError(f"pullfs exited with {self.pullfs.returncode}")

    def mount_id(self):
        with open("/proc/self/mountinfo") as f:
            for line in f:
                p = line.split()
                if p[4] == os.path.realpath(MNT):
                    return p[0]
        return None

    def status(self):
        for _ in range(100):
            try:
                with open(os.path.join(MNT, ".pullfs", "status")) as f:
                    return json.load(f)
            except ValueError:
                time.sleep(0.05)
        raise RuntimeError("no whole status document in 100 reads")

    def serving_pid(self):
        return self.status()["serving"]["pid"]

    def ctl(self, *args, check=True):
        try:
            r = subprocess.run([ENV["SOAK_PULLFSCTL"], "-m", MNT, *args], capture_output=True,
                               text=True, timeout=120)
        except subprocess.TimeoutExpired:
            # a command that hangs is a finding, not the end of the run
            msg = f"pullfsctl {' '.join(args)} did not return within 120 s"
            if check:
                raise RuntimeError(msg)
            self.problems.append(msg)
            return subprocess.CompletedProcess(args, 124, "", msg)
        if check and r.returncode != 0:
            raise RuntimeError(f"pullfsctl {' '.join(args)}: {r.stdout}{r.stderr}")
        return r

    # ---- figures

    @staticmethod
    def proc_figures(pid):
        try:
            with open(f"/proc/{pid}/status") as f:
                status = {k: (v.split() or [""])[0] for k, v in
                          (line.split(":", 1) for line in f if ":" in line)}
            rss = int(status["VmRSS"])
            anon = int(status.get("RssAnon", 0))
            fds = os.listdir(f"/proc/{pid}/fd")
            memfd = 0
            for fd in fds:
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:"):
                        memfd += os.stat(f"/proc/{pid}/fd/{fd}").st_size
                except OSError:
                    pass
            return {"rss_kib": rss, "anon_kib": anon, "fds": len(fds), "memfd_bytes": memfd,
                    "fd_kinds": fd_kinds(pid, fds)}
        except (OSError, KeyError, ValueError):
            return None

    def sample(self, label=None):
        try:
            sp = self.serving_pid()
        except (OSError, RuntimeError):
            sp = None
        s = {"t": now(), "label": label, "serving_pid": sp, "events_bytes": events_bytes(),
             "serving": self.proc_figures(sp) if sp else None,
             "supervisor": self.proc_figures(self.pullfs.pid)}
        if s["supervisor"]:
            # the hostile user's namespace nodes the log lists now (the
            # kernel holds them: at most 8 times the per-user limit)
            try:
                live, _ = handover_live(self.pullfs.pid)
            except OSError:
                live = None
            s["supervisor"]["hostile_ns_bytes"] = (live or {}).get(f"ns_bytes_uid{HOSTILE_UID}", 0)
        self.samples.append(s)
        return s

    # ---- the actions

    def window(self, kind, allowed, start, end):
        self.windows.append({"kind": kind, "start": start, "end": end, "allowed": allowed})

    def act(self, kind):
        self.actions[kind] = self.actions.get(kind, 0) + 1
        t0 = now()
        if kind in ("kill", "upgrade"):
            pid = self.serving_pid()
            self.replaced.append({"how": kind, "pid": pid, "t": t0, **(self.proc_figures(pid) or {})})
            if kind == "kill":
                os.kill(pid, signal.SIGKILL)
            else:
                tmp = ENV["SOAK_PULLFS"] + ".new"
                shutil.copy(ENV["SOAK_PULLFS_SRC"], tmp)
                os.chmod(tmp, 0o755)
                os.rename(tmp, ENV["SOAK_PULLFS"])
                r = self.ctl("upgrade", check=False)
                if r.returncode != 0 or "replaced by" not in r.stdout + r.stderr:
                    self.problems.append(f"upgrade refused: {r.stdout}{r.stderr}".strip())
                    return
            try:
                wait_until(lambda: self.serving_pid() != pid, 60, "a new serving process", step=0.05)
            except RuntimeError:
                self.problems.append(f"{kind}: serving process {pid} not replaced within 60 s")
            self.window(kind, [], t0, now())
        elif kind == "registry-down":
            self.stop_registry()
            time.sleep(self.a.fault_seconds)
            self.start_registry()
            self.window(kind, ["EHOSTUNREACH", "ETIMEDOUT"], t0, now())
        elif kind in ("503", "cut", "corrupt"):
            mode = {"503": {"fail503": 12}, "cut": {"cut": 4}, "corrupt": {"corrupt": True}}[kind]
            allowed = {"503": ["EHOSTUNREACH"], "cut": ["EHOSTUNREACH", "ETIMEDOUT"],
                       "corrupt": ["EBADMSG"]}[kind]
            self.proxy_mode(mode)
            time.sleep(self.a.fault_seconds)
            self.proxy_mode({})
            self.window(kind, allowed, t0, now())
        elif kind == "gc":
            r = self.ctl("gc", check=False)
            if r.returncode != 0:
                self.problems.append(f"pullfsctl gc: {r.stdout}{r.stderr}".strip())
            self.window(kind, [], t0, now())

    # ---- classification

    def allowed(self, err):
        """The expected errnos for an error seen between t0 and t1: those of
        any fault window it overlaps (a window lasts GRACE after its end,
        for pulls that started in it and fail later), and EAGAIN (back-off)
        until BACKOFF_MAX after that."""
        grace, bmax = self.a.grace, self.a.backoff_max
        ok = set()
        for w in self.windows:
            if w["allowed"] and err["t0"] <= w["end"] + grace and err["t1"] >= w["start"]:
                ok.update(w["allowed"])
            if w["allowed"] and err["t0"] <= w["end"] + grace + bmax + 2 and err["t1"] >= w["start"]:
                ok.add("EAGAIN")
        return ok

    def events(self):
        out = []
        try:
            with open(ENV["EVENTS"]) as f:
                for line in f:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        out.append({"reason": "UNPARSABLE", "message": line[:200]})
        except FileNotFoundError:
            pass
        return out

    # ---- the whole run

    def run(self):
        a = self.a
        budget = int(self.man["content_bytes"] * a.budget_fraction)
        self.start_registry()
        self.start_proxy()
        if self.hostile:
            self.start_hostile_proxy()
        self.start_pullfs(budget)
        first_mount = self.mount_id()
        log(f"pullfs --supervise (supervisor {self.pullfs.pid}), cache budget "
            f"{budget / 1048576:.1f} MiB ({a.budget_fraction:.0%} of the images' "
            f"{self.man['content_bytes'] / 1048576:.1f} MiB), {a.readers} readers, "
            f"{a.minutes} min")
        t_start = now()
        t_end = t_start + a.minutes * 60
        quiet = max(a.backoff_max + a.grace + 5, 0.1 * a.minutes * 60)
        warm = min(60, 0.1 * a.minutes * 60)
        faults_end = t_end - quiet
        outs = [os.path.join(WORK, f"reader-{i}.json") for i in range(a.readers)]
        ctx = multiprocessing.get_context("fork")
        readers = [ctx.Process(target=reader, args=(self.images, self.proxy, t_end, outs[i],
                                                     a.seed * 1000 + i))
                   for i in range(a.readers)]
        fresh_out = os.path.join(WORK, "fresher.json")
        if self.man.get("fresh"):
            outs.append(fresh_out)
            readers.append(ctx.Process(target=fresher, args=(self.man["fresh"], self.proxy,
                                                              faults_end, a.fresh_every,
                                                              fresh_out)))
        self.hostile_outs = []
        if self.hostile:
            for i, kind in enumerate(("flood", "fill", "trickle")):
                o = os.path.join(WORK, f"hostile-{kind}.json")
                self.hostile_outs.append(o)
                readers.append(ctx.Process(target=hostile, args=(kind, self.hostile, self.hproxy,
                                                                  faults_end, o, a.seed + i)))
        for p in readers:
            p.start()
        schedule = ["kill", "registry-down", "upgrade", "503", "gc", "cut", "kill", "corrupt",
                    "upgrade", "registry-down", "gc", "503"]
        k = 0
        next_sample = t_start
        time.sleep(warm)
        self.sample("start")
        mid_done = False
        next_act = now()
        while now() < t_end:
            if now() >= next_sample:
                self.sample()
                next_sample = now() + 5
            if not mid_done and now() >= t_start + (t_end - t_start) / 2:
                self.sample("middle")
                mid_done = True
            if now() < faults_end and now() >= next_act:
                kind = schedule[k % len(schedule)]
                k += 1
                log(f"{now() - t_start:6.0f} s: {kind}")
                self.act(kind)
                next_act = now() + a.interval
            if self.pullfs.poll() is not None:
                self.problems.append(f"the supervisor exited with {self.pullfs.returncode}")
                break
            time.sleep(0.2)
        hung = []
        for i, p in enumerate(readers):
            p.join(120)
            if p.is_alive():
                hung.append(i)
                p.kill()
                p.join()
        self.sample("end")
        log("final pass over every image")
        t_fp = now()
        fp_ops, fp_errors, fp_bad = final_pass(self.images, self.proxy)
        fp_s = now() - t_fp
        last_mount = self.mount_id()
        # A collection drops what the kernel still holds of restored
        # images through the notifier, which a lookup held at a trickling
        # registry may hold up for a while: what it could not drop goes
        # at a later collection.  Up to a minute of them.
        t_gc = now()
        while True:
            r = self.ctl("gc", check=False)
            if r.returncode != 0:
                self.problems.append(f"pullfsctl gc at the end: {r.stdout}{r.stderr}".strip())
                break
            st = self.status()
            c = st.get("cache", {})
            if c.get("bytes", 0) <= budget * c.get("gc_high_percent", 85) / 100 or \
                    now() - t_gc > 60:
                break
            time.sleep(5)
        # Settled: the kernel lets go of what it does not use (its
        # dentries and inodes of the mount, so FORGETs), a collection
        # removes what that left unused, and the serving process holds
        # what it needs for what remains.  Its size then is what a leak
        # or memory kept after use would show in.
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("2\n")
        except OSError:
            pass
        time.sleep(2)
        self.ctl("gc", check=False)
        time.sleep(2)
        self.sample("settled")
        st = self.status()
        try:
            self.handover, text = handover_live(self.pullfs.pid)
            if text is not None:
                with open(os.path.join(WORK, "handover.log"), "w") as f:
                    f.write(text)
        except OSError:
            self.handover = None
        return self.report(outs, hung, first_mount, last_mount, st, budget,
                           (fp_ops, fp_errors, fp_bad, fp_s), t_start)

    def hostile_report(self, st, lines):
        """What the hostile user did and what it cost everybody else, as
        lines for the report; returns the verdict's complaints."""
        bad = []

        def p(line):
            lines.append(line)
        p(f"hostile user (uid {HOSTILE_UID}) through {self.hproxy}:")
        for o in self.hostile_outs:
            try:
                with open(o) as f:
                    r = json.load(f)
            except (OSError, ValueError):
                bad.append(f"no findings from {os.path.basename(o)} (the process died?)")
                continue
            p(f"  {r['kind']:8} " + ", ".join(f"{k} {v}" for k, v in sorted(r["errnos"].items()))
              + f"; longest operation {r['max_op_s']:.1f} s")
        try:
            with open(os.path.join(WORK, "fresher.json")) as f:
                lookups = json.load(f).get("lookups", [])
        except (OSError, ValueError):
            lookups = []
        if len(lookups) >= 9:
            n = len(lookups) // 3
            thirds = [median([x[1] for x in lookups[i * n:(i + 1) * n]]) for i in range(3)]
            p(f"root's pulls of new images: {len(lookups)}, median "
              + " / ".join(f"{t:.2f}" for t in thirds)
              + f" s in the first / middle / last third, longest {max(x[1] for x in lookups):.2f} s")
            if thirds[2] > 2 * thirds[0] + 0.5:
                bad.append(f"root's pull latency grew: median {thirds[0]:.2f} s in the first "
                           f"third of the run, {thirds[2]:.2f} s in the last")
        else:
            bad.append(f"only {len(lookups)} pulls of new images by root were timed")
        ev = [s["events_bytes"] for s in self.samples if s.get("events_bytes") is not None]
        if ev:
            p(f"events log on disk (rotated files included): {ev[0]} bytes after the warm-up, "
              f"{ev[-1]} at the end, at most {max(ev)}")
            if max(ev) > self.a.events_bound:
                bad.append(f"the events log reached {max(ev)} bytes on disk (bound "
                           f"{self.a.events_bound})")
        users = st.get("users") or st.get("cache", {}).get("users")
        if users:
            p("cache by user: " + json.dumps(users))
        return bad

    def report(self, outs, hung, first_mount, last_mount, st, budget, fp, t_start):
        a = self.a
        ops, errors, mism, max_op = {}, [], [], 0.0
        for o in outs:
            try:
                with open(o) as f:
                    r = json.load(f)
            except (OSError, ValueError):
                continue
            for kk, v in r["ops"].items():
                ops[kk] = ops.get(kk, 0) + v
            errors += r["errors"]
            mism += r["mismatches"]
            max_op = max(max_op, r["max_op_s"])
        by_errno = {}
        unexpected = []
        for e in errors:
            ok = e["errno"] in self.allowed(e)
            key = (e["errno"], ok)
            by_errno[key] = by_errno.get(key, 0) + 1
            if not ok:
                unexpected.append(e)
        ev = self.events()
        reasons = {}
        failed_by_errno = {}
        for e in ev:
            reasons[e.get("reason")] = reasons.get(e.get("reason"), 0) + 1
            if e.get("reason") == "Failed":
                failed_by_errno[e.get("errno")] = failed_by_errno.get(e.get("errno"), 0) + 1

        def fig(label, who):
            s = next((s for s in self.samples if s["label"] == label), None)
            return s and s[who]

        verdict = []
        if unexpected:
            verdict.append(f"{len(unexpected)} unexpected errors")
        if mism:
            verdict.append(f"{len(mism)} content mismatches")
        if hung:
            verdict.append(f"readers {hung} hung (an operation did not return within 120 s "
                           f"of the end)")
        if max_op > a.stall:
            verdict.append(f"an operation took {max_op:.1f} s (over {a.stall} s)")
        if first_mount != last_mount:
            verdict.append(f"the mount changed ({first_mount} -> {last_mount})")
        fp_ops, fp_errors, fp_bad, fp_s = fp
        if fp_errors or fp_bad:
            verdict.append(f"final pass: {len(fp_errors)} errors, {len(fp_bad)} wrong")
        if reasons.get("UNPARSABLE"):
            verdict.append(f"{reasons['UNPARSABLE']} events log lines do not parse")
        verdict += self.problems
        cache = st.get("cache", {})
        high = budget * cache.get("gc_high_percent", 85) / 100
        if cache.get("bytes", 0) > high:
            verdict.append(f"the cache stays over its budget: {cache['bytes']} bytes after "
                           f"`pullfsctl gc` with no reader left, the high mark is {high:.0f} "
                           f"({sum(1 for i in st.get('images', []) if i.get('in_use'))} of "
                           f"{len(st.get('images', []))} images in use; docs/restarts.md: "
                           f"what a new serving process restored stays until "
                           f"the next start)")
        if cache.get("bytes", 0) > high:
            verdict.append("what the cache holds: " + cache_breakdown(ENV["CACHE"]))
        flat = []
        # (the end sample is taken under load, with everything the
        # readers touched in use: sizes are judged once settled)
        for who, rss_slack, fd_slack in (("serving", 1.5, 16), ("supervisor", 1.1, 2)):
            s0, s1 = fig("start", who), fig("settled", who) or fig("end", who)
            if not s0 or not s1:
                flat.append(f"{who}: no figures")
                continue
            if s1["rss_kib"] > s0["rss_kib"] * rss_slack + 8192:
                flat.append(f"{who} RSS grew {s0['rss_kib']} -> {s1['rss_kib']} KiB "
                            f"(anonymous {s0.get('anon_kib')} -> {s1.get('anon_kib')} KiB)")
            if s1["fds"] > s0["fds"] + fd_slack:
                flat.append(f"{who} descriptors grew {s0['fds']} -> {s1['fds']} (now "
                            + ", ".join(f"{k} {v}" for k, v in s1.get("fd_kinds", [])) + ")")
        verdict += flat
        hostile_lines = []
        if self.hostile:
            verdict += self.hostile_report(st, hostile_lines)
        srv = st.get("serving", {})
        asked = self.actions.get("kill", 0) + self.actions.get("upgrade", 0)
        if (srv.get("restarts") or 0) > asked:
            verdict.append(f"the serving process was replaced {srv['restarts']} times, {asked} "
                           f"of them by a kill or an upgrade: it died by itself (the daemon "
                           f"log says how)")
        m0, m1 = fig("start", "supervisor"), fig("end", "supervisor")
        # The log lists what the kernel may still name, and is compacted
        # once it is twice what it listed at its last compaction: a hostile
        # user's namespace nodes the kernel held (bounded by 8 times
        # --max-namespace-nodes-per-user, tests/limits-namespace), at most
        # their most in any sample, may take twice their bytes on top of
        # the 64 KiB the rest may.
        hostile_ns = max([(s["supervisor"] or {}).get("hostile_ns_bytes", 0)
                          for s in self.samples if s["supervisor"]] or [0])
        if m0 and m1 and m1["memfd_bytes"] > m0["memfd_bytes"] + 65536 + 2 * hostile_ns:
            verdict.append(f"the hand-over log grew {m0['memfd_bytes']} -> {m1['memfd_bytes']} "
                           f"bytes (it lists only what the kernel may still name; the "
                           f"hostile user's namespace nodes took up to {hostile_ns} bytes "
                           f"of it)")

        p = print
        p()
        p(f"pullfs soak: {a.minutes} min, {len(self.images)} images "
          f"({', '.join(sorted(set(i['format'] for i in self.images)))}), {a.readers} readers, "
          f"cache budget {budget / 1048576:.1f} MiB, an action every {a.interval} s")
        p()
        p(f"operations: {sum(ops.values())} ({', '.join(f'{k} {v}' for k, v in sorted(ops.items()))})")
        p(f"errors seen by readers: {len(errors)}")
        for (en, ok), n in sorted(by_errno.items()):
            p(f"  {en:14} {n:7}  {'expected' if ok else 'UNEXPECTED'}")
        for e in unexpected[:10]:
            p(f"    {time.strftime('%H:%M:%S', time.gmtime(e['t0']))} +{e['t1'] - e['t0']:.2f}s "
              f"{e['op']} {e['image']}/{e['path']}: {e['errno']} from `{e.get('call')}`")
        p(f"checksum or content mismatches: {len(mism)}")
        for m in mism[:10]:
            p(f"    {m['image']}/{m['path']}: {m['what']}")
        p(f"longest operation: {max_op:.2f} s")
        p(f"actions: {', '.join(f'{k} {v}' for k, v in sorted(self.actions.items()))}")
        srv = st.get("serving", {})
        p(f"serving process now: pid {srv.get('pid')}, restarts {srv.get('restarts')}, "
          f"upgrades {srv.get('upgrades')}, recoveries {srv.get('recoveries')}, "
          f"last held {srv.get('last_held_ms')} ms")
        p(f"events: {', '.join(f'{k} {v}' for k, v in sorted(reasons.items(), key=str))}")
        p(f"Failed pulls by errno: {', '.join(f'{k} {v}' for k, v in sorted(failed_by_errno.items(), key=str)) or 'none'}")
        p(f"cache after `pullfsctl gc` at the end: {cache.get('bytes')} bytes, "
          f"{cache.get('images')} images (budget {budget}, high mark {high:.0f})")
        p(f"final pass (registry healthy, no faults): {fp_ops} entries in {fp_s:.1f} s, "
          f"{len(fp_errors)} errors, {len(fp_bad)} wrong")
        for x in (fp_errors + fp_bad)[:10]:
            p(f"    {x}")
        p()
        p("| process | figure | start | middle | end | settled |")
        p("|---|---|---|---|---|---|")
        for who in ("serving", "supervisor"):
            for key, unit in (("rss_kib", "RSS KiB"), ("anon_kib", "anonymous KiB"),
                              ("fds", "open fds"), ("memfd_bytes", "memfd bytes")):
                vals = [fig(lbl, who) for lbl in ("start", "middle", "end", "settled")]
                p(f"| {who} | {unit} | " + " | ".join(str(v[key]) if v else "-" for v in vals) + " |")
        m0, m1 = fig("start", "supervisor"), fig("end", "supervisor")
        if m0 and m1:
            p(f"hand-over log (the supervisor's memfd): {m0['memfd_bytes']} -> "
              f"{m1['memfd_bytes']} bytes, "
              f"{(m1['memfd_bytes'] - m0['memfd_bytes']) / max(a.minutes, 0.01):.0f} bytes a minute")
        if getattr(self, "handover", None):
            p("hand-over log at the end, what it still lists: "
              + ", ".join(f"{k} {v}" for k, v in self.handover.items())
              + " (namespace nodes, images, backing files, back-off entries)")
        if self.replaced:
            rs = [r for r in self.replaced if "rss_kib" in r]
            if rs:
                p(f"serving processes at their replacement: RSS {min(r['rss_kib'] for r in rs)}"
                  f"-{max(r['rss_kib'] for r in rs)} KiB, fds {min(r['fds'] for r in rs)}"
                  f"-{max(r['fds'] for r in rs)} (first {rs[0]['rss_kib']} KiB / {rs[0]['fds']}, "
                  f"last {rs[-1]['rss_kib']} KiB / {rs[-1]['fds']})")
        for line in hostile_lines:
            p(line)
        p()
        if verdict:
            p("verdict: FAIL")
            for v in verdict:
                p(f"  - {v}")
        else:
            p("verdict: PASS (no unexpected errno, every content check right, the same mount "
              "throughout, RSS and descriptors flat)")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"ops": ops, "errors": errors, "mismatches": mism,
                           "windows": self.windows, "samples": self.samples,
                           "replaced": self.replaced, "actions": self.actions,
                           "events": reasons, "failed_by_errno": failed_by_errno,
                           "final_pass": {"ops": fp_ops, "errors": fp_errors, "wrong": fp_bad},
                           "handover_live": getattr(self, "handover", None),
                           "verdict": verdict}, f, indent=1)
        return 1 if verdict else 0


def cmd_run(a):
    s = Soak(a)
    try:
        return s.run()
    finally:
        if s.pullfs and s.pullfs.poll() is None:
            s.pullfs.terminate()
            try:
                s.pullfs.wait(30)
            except subprocess.TimeoutExpired:
                s.problems.append("pullfs did not exit within 30 s of SIGTERM")
        for p in list(PROCS):
            stop(p)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("manifest")
    m.add_argument("--registry", required=True)
    m.add_argument("--storage", required=True)
    m.add_argument("--arch", required=True)
    m.add_argument("--images", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--fresh", type=int, default=0, help="single-use images to make")
    m.add_argument("--integration", default=ENV.get("INTEGRATION_DIR", ""))
    m.add_argument("--hostile", action="store_true", help="push the hostile user's images")
    m.add_argument("--hostile-bigtoc", help="the hostile big-TOC image, pushed already")
    r = sub.add_parser("run")
    r.add_argument("--manifest", required=True)
    r.add_argument("--minutes", type=float, default=30)
    r.add_argument("--readers", type=int, default=8)
    r.add_argument("--interval", type=float, default=10, help="seconds between actions")
    r.add_argument("--fault-seconds", type=float, default=5)
    r.add_argument("--budget-fraction", type=float, default=0.4)
    r.add_argument("--backoff-max", type=int, default=10)
    r.add_argument("--grace", type=float, default=20,
                   help="seconds a fault's errnos stay expected after it ends")
    r.add_argument("--stall", type=float, default=60,
                   help="an operation longer than this fails the soak")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--fresh-every", type=float, default=2,
                   help="seconds between lookups of images never pulled before")
    r.add_argument("--json")
    r.add_argument("--hostile", action="store_true",
                   help="a hostile local user beside the readers (needs the manifest's "
                        "hostile images)")
    r.add_argument("--trickle-rate", type=int, default=4,
                   help="bytes a second of the hostile user's trickle blobs")
    r.add_argument("--events-bound", type=int, default=256 << 20,
                   help="bytes the events log may take on disk, rotated files included")
    a = ap.parse_args()
    if a.cmd == "manifest":
        cmd_manifest(a)
        return 0
    if a.minutes <= 0 or a.readers < 1 or a.interval <= 0:
        ap.error("--minutes, --readers and --interval must be positive")
    if a.hostile and os.geteuid() != 0:
        ap.error("--hostile needs root (its user is uid 65534)")
    return cmd_run(a)


if __name__ == "__main__":
    sys.exit(main())

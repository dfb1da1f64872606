#!/usr/bin/env python3
"""pullfs benchmarks against the peers, on one image and one registry.

Run by tools/bench/debian, which starts the registry, pushes the image and
sets the environment: PULLFS (daemon binary), REGISTRY (host:port), IMAGE
(repo:tag in that registry), WORK (scratch directory), STATSTORM (helper
binary), RUNS (runs per measurement).  Prints a table of min / median times
and the ratio of pullfs to each peer; --json FILE also writes the numbers.

Every cold measurement runs on a freshly made ext4 (a loop device), for
pullfs's cache as for each peer's storage: ext4 creates files much more
slowly for a while after a large rm -rf, which would skew repeated runs.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from benchlib import PROCS, drop_caches, log, stop, wait_until

PULLFS = os.environ["PULLFS"]
REGISTRY = os.environ["REGISTRY"]
IMAGE = os.environ["IMAGE"]
WORK = os.environ["WORK"]
STATSTORM = os.environ["STATSTORM"]
REF = f"{REGISTRY}/{IMAGE}"

_mounts = []  # unmounted in reverse order at the end




def run(cmd, check=True, quiet=True, **kw):
    if quiet:
        kw.setdefault("stdout", subprocess.DEVNULL)
        kw.setdefault("stderr", subprocess.PIPE)
    r = subprocess.run(cmd, **kw)
    if check and r.returncode != 0:
        err = r.stderr.decode(errors="replace") if isinstance(r.stderr, bytes) else r.stderr
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {err}")
    return r


def timed(cmd, **kw):
    t0 = time.perf_counter()
    run(cmd, **kw)
    return time.perf_counter() - t0


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)




def umount(path, lazy=False):
    if is_mounted(path):
        r = run(["umount", path], check=False)
        if r.returncode != 0:
            run(["umount", "-l", path], check=False)
    if path in _mounts:
        _mounts.remove(path)




def cleanup():
    for p in reversed(list(PROCS)):
        stop(p, 10)
    for m in reversed(list(_mounts)):
        umount(m)




_fs_count = 0


def fresh_ext4(name, size="4G"):
    """A new ext4 on a loop device, mounted; returns the mount point."""
    global _fs_count
    _fs_count += 1
    img = os.path.join(WORK, f"{name}-{_fs_count}.ext4")
    mnt = os.path.join(WORK, f"{name}-{_fs_count}")
    os.makedirs(mnt)
    with open(img, "wb") as f:
        f.truncate(_parse_size(size))
    # No lazy init: a background thread zeroing inode tables would skew
    # the timings.
    run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", img])
    run(["mount", "-o", "loop", img, mnt])
    _mounts.append(mnt)
    return mnt


def drop_ext4(mnt):
    umount(mnt)
    img = mnt + ".ext4"
    if os.path.exists(img):
        os.unlink(img)
    os.rmdir(mnt)


def _parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fuse_requests(mnt):
    """FUSE requests served so far, by operation, from the metrics."""
    out = {}
    with open(os.path.join(mnt, ".pullfs", "metrics")) as f:
        for line in f:
            if line.startswith("pullfs_fuse_operations_total{"):
                k, v = line.split()
                out[k.split('"')[1]] = int(v)
    return out


def requests_delta(a, b):
    """Requests between two snapshots, less what a snapshot costs itself
    (measured by two in a row)."""
    mnt = requests_delta.mnt
    s1 = fuse_requests(mnt)
    s2 = fuse_requests(mnt)
    own = {k: s2[k] - s1.get(k, 0) for k in s2}
    d = {k: max(0, b[k] - a.get(k, 0) - own.get(k, 0)) for k in b}
    return {k: v for k, v in d.items() if v}


def cached_kib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Cached:"):
                return int(line.split()[1])
    return 0


# ------------------------------------------------------------------ peers

class Pullfs:
    name = "pullfs"

    def __init__(self, base):
        self.base = base
        self.mnt = os.path.join(base, "mnt")
        os.makedirs(self.mnt, exist_ok=True)
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [PULLFS, "-f", "--cache", os.path.join(self.base, "cache"),
             "--events-log", os.path.join(self.base, "events.log"),
             "--insecure-registry", REGISTRY, self.mnt],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.base, "pullfs.log"), "w"))
        PROCS.append(self.proc)
        _mounts.append(self.mnt)
        wait_until(lambda: is_mounted(self.mnt), 30, "the pullfs mount")

    def pull(self):
        """Cold ensure: the first lookup of the image root."""
        t0 = time.perf_counter()
        os.stat(self.root())
        return time.perf_counter() - t0

    def root(self):
        return os.path.join(self.mnt, "images", REF)

    def rss_kib(self):
        """The serving process's RSS plus its supervisor's (the process
        started here), from the status."""
        with open(os.path.join(self.mnt, ".pullfs", "status")) as f:
            serving = json.load(f).get("serving", {}).get("pid")
        total = rss_kib(self.proc.pid)
        if serving and serving != self.proc.pid:
            total += rss_kib(serving)
        return total

    def stop(self):
        umount(self.mnt)
        stop(self.proc)


class Containerd:
    name = "containerd"

    def __init__(self, base):
        self.base = base
        self.sock = os.path.join(base, "c.sock")
        self.target = os.path.join(base, "rootfs")
        self.proc = None

    def ctr(self, *args):
        return ["ctr", "-a", self.sock, "-n", "bench", *args]

    def start(self):
        cfg = os.path.join(self.base, "config.toml")
        with open(cfg, "w") as f:
            f.write(f'''version = 2
root = "{self.base}/root"
state = "{self.base}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{self.sock}.ttrpc"
[debug]
  address = "{self.sock}.debug"
[metrics]
  address = ""
''')
        self.proc = subprocess.Popen(["containerd", "--config", cfg],
                                     stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(self.base, "containerd.log"), "w"))
        PROCS.append(self.proc)
        wait_until(lambda: run(self.ctr("version"), check=False).returncode == 0, 30,
                   "the private containerd")

    def pull(self):
        return timed(self.ctr("images", "pull", "--plain-http", REF))

    def root(self):
        if not is_mounted(self.target):
            os.makedirs(self.target, exist_ok=True)
            run(self.ctr("images", "mount", REF, self.target))
            _mounts.append(self.target)
        return self.target

    def stop(self):
        if is_mounted(self.target):
            run(self.ctr("images", "unmount", "--rm", self.target), check=False)
            umount(self.target)
        stop(self.proc)


class SkopeoUmoci:
    name = "skopeo+umoci"

    def __init__(self, base):
        self.base = base

    def start(self):
        pass

    def pull(self):
        layout = os.path.join(self.base, "layout")
        env = dict(os.environ, _CONTAINERS_ROOTLESS_UID="65534",
                   XDG_DATA_HOME=os.path.join(self.base, "skopeo-cache"))
        t = timed(["skopeo", "--insecure-policy", "copy", "--src-tls-verify=false",
                   f"docker://{REF}", f"oci:{layout}:1"], env=env)
        t += timed(["umoci", "unpack", "--image", f"{layout}:1",
                    os.path.join(self.base, "bundle")])
        return t

    def root(self):
        return os.path.join(self.base, "bundle", "rootfs")

    def stop(self):
        pass


class Podman:
    name = "podman"

    def __init__(self, base):
        self.base = base
        self.mounted = None

    def podman(self, *args):
        return ["podman", "--root", os.path.join(self.base, "storage"),
                "--runroot", os.path.join(self.base, "run"),
                "--storage-driver", "overlay", "--events-backend", "none",
                "--cgroup-manager", "cgroupfs", *args]

    def start(self):
        pass

    def pull(self):
        return timed(self.podman("pull", "-q", "--tls-verify=false", REF))

    def root(self):
        if not self.mounted:
            r = run(self.podman("image", "mount", REF), stdout=subprocess.PIPE)
            self.mounted = r.stdout.decode().strip()
        return self.mounted

    def stop(self):
        if self.mounted:
            run(self.podman("image", "unmount", "--all", "--force"), check=False)
            if is_mounted(self.mounted):
                umount(self.mounted)
            self.mounted = None


PEERS = [Pullfs, Containerd, SkopeoUmoci, Podman]


def cold_run(cls):
    """One cold pull on a fresh ext4, then a cold start from its tree."""
    base = fresh_ext4(cls.name.replace("+", "-"))
    peer = cls(base)
    res = {}
    try:
        peer.start()
        drop_caches()  # the registry's blobs come from disk for everyone
        res["pull"] = peer.pull()
        root = peer.root()
        if cls is Pullfs:
            res["rss_after_pull_kib"] = peer.rss_kib()
        drop_caches()
        res["chroot_true"] = timed(["chroot", root, "/bin/true"])
        req0 = fuse_requests(peer.mnt) if cls is Pullfs else None
        t0 = time.perf_counter()
        r = run(["chroot", root, "dpkg", "--verify"], check=False, stdout=subprocess.PIPE)
        res["dpkg_verify"] = time.perf_counter() - t0
        if req0 is not None:
            req1 = fuse_requests(peer.mnt)
            requests_delta.mnt = peer.mnt
            res["dpkg_requests"] = requests_delta(req0, req1)
        if r.returncode != 0 or r.stdout.strip():
            raise RuntimeError(f"{cls.name}: dpkg --verify is not clean: {r.stdout[:400]!r}")
    finally:
        peer.stop()
        drop_ext4(base)
    return res


# ------------------------------------------------------------------- warm

def list_tree(root):
    """Relative paths of every entry, of every regular file, and of regular
    files >= 1 MiB."""
    paths, large, regular = [], [], []
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        for n in dirs + files:
            p = n if rel == "." else os.path.join(rel, n)
            paths.append(p)
        for n in files:
            full = os.path.join(d, n)
            st = os.lstat(full)
            if (st.st_mode & 0o170000) == 0o100000:
                regular.append(os.path.relpath(full, root))
                if st.st_size >= (1 << 20):
                    large.append(os.path.relpath(full, root))
    return paths, sorted(large), sorted(regular)


def read_files(root, files, repeat=1):
    buf = bytearray(1 << 20)
    total = 0
    t0 = time.perf_counter()
    for f in files * repeat:
        fd = os.open(os.path.join(root, f), os.O_RDONLY)
        try:
            with os.fdopen(fd, "rb", buffering=0, closefd=False) as fo:
                while True:
                    n = fo.readinto(buf)
                    if not n:
                        break
                    total += n
        finally:
            os.close(fd)
    return total, time.perf_counter() - t0


def find_ls(root):
    return timed(["find", root, "-ls"])


def stat_storm(root, listfile, threads=8, rounds=5):
    r = run([STATSTORM, root, listfile, str(threads), str(rounds)], stdout=subprocess.PIPE)
    calls, failures, secs = r.stdout.split()
    if int(failures):
        raise RuntimeError(f"stat storm on {root}: {failures} failures")
    return float(secs)


def warm(runs):
    res = {}
    # Native: the same image unpacked by umoci on its own ext4.
    nbase = fresh_ext4("native")
    native = SkopeoUmoci(nbase)
    native.pull()
    native_root = native.root()
    # pullfs with the image ensured.
    pbase = fresh_ext4("pullfs-warm")
    pfs = Pullfs(pbase)
    pfs.start()
    pfs.pull()
    pullfs_root = pfs.root()
    res["rss_cached_kib"] = pfs.rss_kib()
    # fuse-overlayfs over the same layer (read-only: lower only).
    fov = os.path.join(WORK, "fuse-overlayfs")
    os.makedirs(fov, exist_ok=True)
    run(["fuse-overlayfs", "-o", f"lowerdir={native_root}", fov])
    _mounts.append(fov)
    trees = {"pullfs": pullfs_root, "native": native_root, "fuse-overlayfs": fov}

    paths, large, regular = list_tree(native_root)
    listfile = os.path.join(WORK, "paths.txt")
    with open(listfile, "w") as f:
        f.write("\n".join(paths) + "\n")
    res["entries"] = len(paths)
    res["large_files"] = len(large)
    res["regular_files"] = len(regular)
    try:
        for name, root in trees.items():
            # Every file read once, from a cold page cache and dentry
            # cache, and the page cache it leaves behind.
            colds, cached = [], []
            for _ in range(runs):
                drop_caches()
                c0 = cached_kib()
                total, secs = read_files(root, regular)
                colds.append(secs)
                cached.append(cached_kib() - c0)
            res[f"readall_cold_{name}"] = colds
            res[f"cache_kib_{name}"] = cached
            res["readall_bytes"] = total
            # The same warm; for pullfs, the requests it took.
            read_files(root, regular)
            req0 = fuse_requests(pfs.mnt) if name == "pullfs" else None
            warms = []
            for _ in range(runs):
                warms.append(read_files(root, regular)[1])
            if req0 is not None:
                req1 = fuse_requests(pfs.mnt)
                requests_delta.mnt = pfs.mnt
                res["readall_requests"] = requests_delta(req0, req1)
            res[f"readall_warm_{name}"] = warms
            # Warm up: one read of everything and one walk.
            read_files(root, large)
            find_ls(root)
            stat_storm(root, listfile, 8, 1)
            rates, finds, storms = [], [], []
            for _ in range(runs):
                total, secs = read_files(root, large, 10)
                rates.append(secs)
                finds.append(find_ls(root))
                storms.append(stat_storm(root, listfile))
            res[f"read_{name}"] = rates
            res["read_bytes"] = total
            res[f"find_{name}"] = finds
            res[f"storm_{name}"] = storms
        res["rss_after_walk_kib"] = pfs.rss_kib()
        big_file(res, runs, pfs, nbase)
        second_version(res, pfs)
    finally:
        umount(fov)
        pfs.stop()
        drop_ext4(pbase)
        drop_ext4(nbase)
    return res


def big_file(res, runs, pfs, nbase):
    """The first read of a large file already in the cache: its image is
    pulled once, then the file is read with the page cache dropped."""
    big_ref = os.environ.get("BIG_IMAGE")
    if not big_ref:
        return
    src = os.environ["BIG_FILE"]
    proot = os.path.join(pfs.mnt, "images", f"{REGISTRY}/{big_ref}")
    os.stat(proot)
    native = os.path.join(nbase, "big.bin")
    run(["cp", src, native])
    fov = os.path.join(WORK, "fuse-overlayfs-big")
    os.makedirs(fov, exist_ok=True)
    run(["fuse-overlayfs", "-o", f"lowerdir={nbase}", fov])
    _mounts.append(fov)
    files = {"pullfs": os.path.join(proot, "big.bin"), "native": native,
             "fuse-overlayfs": os.path.join(fov, "big.bin")}
    try:
        for name, path in files.items():
            ts = []
            for _ in range(runs):
                drop_caches()
                d, f = os.path.split(path)
                os.stat(d)
                ts.append(read_files(d, [f])[1])
            res[f"big_{name}"] = ts
        res["big_bytes"] = os.stat(native).st_size
    finally:
        umount(fov)


def cache_status(pfs):
    with open(os.path.join(pfs.mnt, ".pullfs", "status")) as f:
        st = json.load(f)
    return st


def second_version(res, pfs):
    """Files stored once: the cache before and after pulling a second
    version of the image (another layer digest, nearly the same files)."""
    ref = os.environ.get("V2_IMAGE")
    if not ref:
        return
    before = cache_status(pfs)
    os.stat(os.path.join(pfs.mnt, "images", f"{REGISTRY}/{ref}"))
    # layers are deduplicated when they are published, after the lookup
    deadline = time.monotonic() + 60
    after = cache_status(pfs)
    while after["cache"].get("publishing", 0) and time.monotonic() < deadline:
        time.sleep(0.05)
        after = cache_status(pfs)
    res["v2"] = {"before": before["cache"]["bytes"],
                 "after": after["cache"]["bytes"],
                 "objects_before": before.get("objects"), "objects_after": after.get("objects")}


# ------------------------------------------------------------------ report

def mm(xs):
    return min(xs), statistics.median(xs)


def fmt_s(x):
    return f"{x:.3f} s" if x >= 0.1 else f"{x * 1000:.1f} ms"


def report(cold, w, runs):
    rows = []
    out = []
    out.append(f"pullfs benchmark: {REF}, {runs} runs each, min / median; "
               "ratio = pullfs / peer (median), < 1 means pullfs is faster")
    out.append("")
    out.append("| measurement | pullfs | peer | peer min / median | ratio |")
    out.append("|---|---|---|---|---|")
    for key, what in (("pull", "cold pull until the rootfs is ready"),
                      ("chroot_true", "cold start: chroot /bin/true (after drop_caches)"),
                      ("dpkg_verify", "cold dpkg --verify")):
        pm = mm([r[key] for r in cold["pullfs"]])
        for peer in ("containerd", "skopeo+umoci", "podman"):
            if not cold.get(peer):
                continue
            qm = mm([r[key] for r in cold[peer]])
            out.append(f"| {what} | {fmt_s(pm[0])} / {fmt_s(pm[1])} | {peer} | "
                       f"{fmt_s(qm[0])} / {fmt_s(qm[1])} | {pm[1] / qm[1]:.2f} |")
    warm_peers = ("native", "fuse-overlayfs")

    def time_rows(key, what):
        pm = mm(w[f"{key}_pullfs"])
        for peer in warm_peers:
            qm = mm(w[f"{key}_{peer}"])
            out.append(f"| {what} | {fmt_s(pm[0])} / {fmt_s(pm[1])} | {peer} | "
                       f"{fmt_s(qm[0])} / {fmt_s(qm[1])} | {pm[1] / qm[1]:.2f} |")

    def rate_rows(key, nbytes, what):
        pr = [nbytes / s / 1e6 for s in w[f"{key}_pullfs"]]
        for peer in warm_peers:
            qr = [nbytes / s / 1e6 for s in w[f"{key}_{peer}"]]
            out.append(f"| {what}, MB/s max / median | "
                       f"{max(pr):.0f} / {statistics.median(pr):.0f} | {peer} | "
                       f"{max(qr):.0f} / {statistics.median(qr):.0f} | "
                       f"{statistics.median(pr) / statistics.median(qr):.2f} (throughput) |")

    nbytes = w["read_bytes"]
    rate_rows("read", nbytes, f"warm read, {w['large_files']} files >= 1 MiB read 10 times ({nbytes / 1e6:.0f} MB)")
    time_rows("find", f"warm find -ls ({w['entries']} entries)")
    time_rows("storm", "warm lstat storm, 8 threads x 5 rounds")
    nall = w["readall_bytes"]
    time_rows("readall_warm", f"warm read of every file once ({w['regular_files']} files, {nall / 1e6:.0f} MB)")
    time_rows("readall_cold", "cold read of every file once (after drop_caches)")
    pc = statistics.median(w["cache_kib_pullfs"]) / 1024
    for peer in warm_peers:
        qc = statistics.median(w[f"cache_kib_{peer}"]) / 1024
        out.append(f"| page cache after reading every file once (Cached delta, median) | {pc:.0f} MiB | {peer} | "
                   f"{qc:.0f} MiB | {pc / qc:.2f} |")
    if "big_pullfs" in w:
        nb = w["big_bytes"]
        rate_rows("big", nb, f"first read of a {nb >> 20} MiB file in the cache (after drop_caches)")
    rq = w.get("readall_requests", {})
    nreads = runs * w["regular_files"]
    out.append("| FUSE requests per file, warm read of every file | "
               f"{sum(rq.values()) / nreads:.2f} ({', '.join(f'{k} {v / nreads:.2f}' for k, v in sorted(rq.items()))}) | | | |")
    dq = [r.get("dpkg_requests", {}) for r in cold["pullfs"]]
    if dq and dq[0]:
        tot = statistics.median([sum(d.values()) for d in dq])
        out.append("| FUSE requests, cold dpkg --verify (median of runs) | "
                   f"{tot:.0f} ({tot / w['regular_files']:.2f} per file of the image; "
                   f"{', '.join(f'{k} {v}' for k, v in sorted(dq[0].items()))} in run 1) | | | |")
    v2 = w.get("v2")
    if v2 and v2["objects_after"]:
        oa = v2["objects_after"]
        out.append(f"| second version of the image (one file added, new layer digest): cache growth | "
                   f"{(v2['after'] - v2['before']) / 2**20:.1f} MiB | without sharing | "
                   f"{(v2['after'] - v2['before'] + oa['shared_bytes']) / 2**20:.1f} MiB | "
                   f"{oa['shared_bytes'] / 2**20:.0f} MiB stored once |")
    rss = [r["rss_after_pull_kib"] for r in cold["pullfs"]]
    out.append(f"| pullfs RSS (serving process + supervisor): after the cold pull | {max(rss) / 1024:.1f} MiB (max) | | | |")
    out.append(f"| pullfs RSS (serving process + supervisor): image cached, after the warm walk and reads | "
               f"{w['rss_after_walk_kib'] / 1024:.1f} MiB | | | |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=int(os.environ.get("RUNS", "5")))
    ap.add_argument("--json")
    ap.add_argument("--only", help="comma-separated peers for the cold runs")
    args = ap.parse_args()
    peers = PEERS
    if args.only:
        want = args.only.split(",")
        peers = [p for p in PEERS if p.name in want]
    cold = {}
    try:
        # Interleave the peers run by run, so drift hits all alike.
        for i in range(args.runs):
            for cls in peers:
                r = cold_run(cls)
                cold.setdefault(cls.name, []).append(r)
                log(f"run {i + 1}: {cls.name}: " +
                    ", ".join(f"{k} {v:.3f}" for k, v in r.items() if isinstance(v, float)))
        w = warm(args.runs)
        log("warm: done")
    finally:
        cleanup()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cold": cold, "warm": w}, f, indent=1)
    print(report(cold, w, args.runs))


if __name__ == "__main__":
    main()

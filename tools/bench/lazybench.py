#!/usr/bin/env python3
"""Lazy images against full pulls, over a shaped link.

Run by tools/bench/lazy, which builds the application image, pushes it as
gzip, zstd:chunked and eStargz, starts the registry inside a network
namespace whose loopback is shaped, and sets the environment: PULLFS (the
daemon), NS_PATH (/run/netns/NAME), REGISTRY (host:port inside it),
REGISTRY_PID (whose /proc/PID/net/dev counts the link's bytes) and WORK.

Every client that talks to the registry runs in the namespace (nsenter
--net only, so mounts stay visible here).  Each measurement starts from an
empty cache or storage with the page cache dropped and records, from the
first lookup (pullfs) or the start of the pull (the others): the time until
the start command's output, the time until the image is complete, and the
bytes that crossed the loopback by each of the two.
"""

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from benchlib import PROCS, drop_caches, log, stop, wait_until

PULLFS = os.environ["PULLFS"]
NS_PATH = os.environ["NS_PATH"]
REGISTRY = os.environ["REGISTRY"]
REGISTRY_PID = os.environ["REGISTRY_PID"]
WORK = os.environ["WORK"]
REPO = "test/app"
TIMEOUT = 1800  # seconds, for any one pull





def ns(cmd):
    """cmd run in the shaped network namespace (and in no other one)."""
    return ["nsenter", f"--net={NS_PATH}", *cmd]


def run(cmd, check=True, **kw):
    kw.setdefault("stdout", subprocess.DEVNULL)
    kw.setdefault("stderr", subprocess.PIPE)
    r = subprocess.run(cmd, timeout=TIMEOUT, **kw)
    if check and r.returncode != 0:
        err = r.stderr.decode(errors="replace") if isinstance(r.stderr, bytes) else ""
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {err[-2000:]}")
    return r


def link_bytes():
    """Bytes sent on the namespace's loopback so far (each byte once)."""
    with open(f"/proc/{REGISTRY_PID}/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[8])
    raise RuntimeError("no lo in the namespace's /proc/net/dev")




def mounts_under(path):
    path = os.path.realpath(path) + "/"
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    return [p for p in points if (p + "/").startswith(path)]


def unmount_under(path):
    for p in sorted(set(mounts_under(path)), key=len, reverse=True):
        if subprocess.run(["umount", p], stderr=subprocess.DEVNULL).returncode != 0:
            subprocess.run(["umount", "-l", p], stderr=subprocess.DEVNULL)






def fresh_dir(name):
    base = os.path.join(WORK, "runs", name)
    unmount_under(base)
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    return base


def manifest(tag):
    r = run(ns(["curl", "-sf",
                "-H", "Accept: application/vnd.oci.image.manifest.v1+json",
                "-H", "Accept: application/vnd.docker.distribution.manifest.v2+json",
                f"http://{REGISTRY}/v2/{REPO}/manifests/{tag}"]), stdout=subprocess.PIPE)
    return json.loads(r.stdout)


def image_size(tag):
    m = manifest(tag)
    return m["config"]["size"] + sum(layer["size"] for layer in m["layers"])


def start_command(root):
    """The start script in the image's tree; its output, checked."""
    r = run(["chroot", root, "/bin/sh", "/start.sh"], stdout=subprocess.PIPE)
    out = r.stdout.decode(errors="replace")
    if "started" not in out:
        raise RuntimeError(f"the start script said: {out!r}")
    return out


class Pullfs:
    def __init__(self, key, label, tag, lazy):
        self.key, self.label, self.tag, self.lazy = key, label, tag, lazy

    def measure(self):
        base = fresh_dir(self.key)
        cache, mnt = os.path.join(base, "cache"), os.path.join(base, "mnt")
        os.makedirs(mnt)
        cmd = [PULLFS, "-f", "--cache", cache, "--events-log", os.path.join(base, "events.log"),
               "--insecure-registry", REGISTRY, mnt]
        if not self.lazy:
            cmd[1:1] = ["--lazy", "off"]
        p = subprocess.Popen(ns(cmd), stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(base, "pullfs.log"), "w"))
        PROCS.append(p)
        res = {}
        try:
            wait_until(lambda: p.poll() is not None or mounts_under(mnt), 30, "the mount")
            if p.poll() is not None:
                raise RuntimeError(f"pullfs exited with {p.returncode}")
            root = os.path.join(mnt, "images", REGISTRY, f"{REPO}:{self.tag}")
            drop_caches()
            b0 = link_bytes()
            t0 = time.perf_counter()
            start_command(root)
            res["start"] = time.perf_counter() - t0
            res["bytes_start"] = link_bytes() - b0

            def complete():
                return not (glob.glob(os.path.join(cache, "layers", "*", "lazy"))
                            or glob.glob(os.path.join(cache, "layers", "*", "p.*")))
            wait_until(complete, TIMEOUT, "the image to complete", step=0.05)
            res["complete"] = time.perf_counter() - t0
            res["bytes_complete"] = link_bytes() - b0
            with open(os.path.join(mnt, ".pullfs", "metrics")) as f:
                metrics = dict(line.split()[:2] for line in f if line.startswith("pullfs_lazy_"))
            res["lazy_layers"] = int(metrics.get("pullfs_lazy_layers_completed_total", 0))
            res["lazy_fetches"] = int(metrics.get("pullfs_lazy_fetches_total", 0))
        finally:
            stop(p)
            unmount_under(base)
        shutil.rmtree(base)
        return res


class Containerd:
    key, label, tag = "containerd", "containerd: ctr images pull, gzip", "gzip"

    def measure(self):
        base = fresh_dir(self.key)
        sock = os.path.join(base, "c.sock")
        cfg = os.path.join(base, "config.toml")
        with open(cfg, "w") as f:
            f.write(f'''version = 2
root = "{base}/root"
state = "{base}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  address = "{sock}.debug"
[metrics]
  address = ""
''')
        ctr = ["ctr", "-a", sock, "-n", "bench"]
        p = subprocess.Popen(ns(["containerd", "--config", cfg]), stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(base, "containerd.log"), "w"))
        PROCS.append(p)
        target = os.path.join(base, "rootfs")
        os.makedirs(target)
        ref = f"{REGISTRY}/{REPO}:{self.tag}"
        res = {}
        try:
            wait_until(lambda: run(ctr + ["version"], check=False).returncode == 0, 30,
                       "the private containerd")
            drop_caches()
            b0 = link_bytes()
            t0 = time.perf_counter()
            # ctr 1.6 fetches in the client: it must be in the namespace too
            run(ns(ctr + ["images", "pull", "--plain-http", ref]))
            res["complete"] = time.perf_counter() - t0
            res["bytes_complete"] = link_bytes() - b0
            run(ctr + ["images", "mount", ref, target])
            start_command(target)
            res["start"] = time.perf_counter() - t0
            res["bytes_start"] = link_bytes() - b0
        finally:
            if mounts_under(target):
                run(ctr + ["images", "unmount", "--rm", target], check=False)
            stop(p)
            unmount_under(base)
        shutil.rmtree(base)
        return res


class Podman:
    key, label, tag = "podman", "podman pull, zstd:chunked (partial)", "zstd-chunked"

    def measure(self):
        base = fresh_dir(self.key)
        conf = os.path.join(base, "storage.conf")
        with open(conf, "w") as f:
            f.write(f'''[storage]
driver = "overlay"
runroot = "{base}/run"
graphroot = "{base}/storage"
[storage.options]
pull_options = {{enable_partial_images = "true"}}
''')
        env = dict(os.environ, CONTAINERS_STORAGE_CONF=conf)
        podman = ["podman", "--events-backend", "none", "--cgroup-manager", "cgroupfs"]
        ref = f"{REGISTRY}/{REPO}:{self.tag}"
        plog = os.path.join(base, "podman.log")
        res = {}
        try:
            drop_caches()
            b0 = link_bytes()
            t0 = time.perf_counter()
            with open(plog, "w") as f:
                run(ns(podman + ["--log-level", "debug", "pull", "-q", "--tls-verify=false", ref]),
                    env=env, stderr=f)
            res["complete"] = time.perf_counter() - t0
            res["bytes_complete"] = link_bytes() - b0
            r = run(podman + ["image", "mount", ref], env=env, stdout=subprocess.PIPE)
            start_command(r.stdout.decode().strip())
            res["start"] = time.perf_counter() - t0
            res["bytes_start"] = link_bytes() - b0
            with open(plog, errors="replace") as f:
                res["partial_layers"] = sum("Retrieved partial blob" in line for line in f)
        finally:
            run(podman + ["image", "unmount", "--all", "--force"], env=env, check=False)
            unmount_under(base)
        shutil.rmtree(base)
        return res


TOOLS = [
    Pullfs("estargz", "pullfs lazy, eStargz", "estargz", True),
    Pullfs("zstd-chunked", "pullfs lazy, zstd:chunked", "zstd-chunked", True),
    Pullfs("full", "pullfs --lazy off, gzip (full pull)", "gzip", False),
    Containerd(),
    Podman(),
]
BASELINE = "full"


def fmt_t(v):
    return f"{v:.2f} s" if v >= 1 else f"{v * 1000:.0f} ms"


def fmt_mib(v):
    return f"{v / 1048576:.1f} MiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default="", help="comma list of: " +
                    ",".join(t.key for t in TOOLS))
    ap.add_argument("--json")
    args = ap.parse_args()
    tools = TOOLS
    if args.only:
        keep = args.only.split(",")
        tools = [t for t in TOOLS if t.key in keep]

    sizes = {t: image_size(t) for t in ("gzip", "zstd-chunked", "estargz")}
    for t, s in sizes.items():
        log(f"image {REPO}:{t}: {fmt_mib(s)}")
    results = {t.key: [] for t in tools}
    try:
        for i in range(args.runs):
            for t in tools:
                log(f"run {i + 1}/{args.runs}: {t.label}")
                r = t.measure()
                log("  " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                     for k, v in r.items()))
                results[t.key].append(r)
    finally:
        for p in list(PROCS):
            stop(p)

    def med(key, field):
        return statistics.median(r[field] for r in results[key])

    print()
    print(f"Application image {REPO}: gzip {fmt_mib(sizes['gzip'])}, zstd:chunked "
          f"{fmt_mib(sizes['zstd-chunked'])}, eStargz {fmt_mib(sizes['estargz'])}; "
          f"{args.runs} runs, min / median; ratio = median / the full pull's median")
    print()
    print("| client | start output | ratio | image complete | ratio "
          "| bytes by the start output | bytes by completion |")
    print("|---|---|---|---|---|---|---|")
    base = BASELINE if BASELINE in results else None
    for t in tools:
        rs = results[t.key]
        row = [t.label]
        for field in ("start", "complete"):
            vals = [r[field] for r in rs]
            row.append(f"{fmt_t(min(vals))} / {fmt_t(statistics.median(vals))}")
            row.append(f"{statistics.median(vals) / med(base, field):.3f}x"
                       if base else "")
        for field in ("bytes_start", "bytes_complete"):
            v = statistics.median(r[field] for r in rs)
            row.append(f"{fmt_mib(v)} ({100 * v / sizes[t.tag]:.1f} %)")
        print("| " + " | ".join(row) + " |")

    if base:
        print()
        print("Targets, on the medians, against the full pull:")
        for t in tools:
            if not isinstance(t, Pullfs) or not t.lazy:
                continue
            s = med(t.key, "start") / med(base, "start")
            c = med(t.key, "complete") / med(base, "complete")
            b = 100 * med(t.key, "bytes_start") / sizes[t.tag]
            print(f"  {t.label}: start output {s:.3f}x (target <= 0.05x: "
                  f"{'met' if s <= 0.05 else 'MISSED'}), complete {c:.2f}x (target <= 1.15x: "
                  f"{'met' if c <= 1.15 else 'MISSED'}), bytes before the start output "
                  f"{b:.1f} % (target <= 5 %: {'met' if b <= 5 else 'MISSED'})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sizes": sizes, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()

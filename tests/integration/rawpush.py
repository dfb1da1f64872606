#!/usr/bin/env python3
"""Pushes an image made of hand-made layer tars straight through the
registry HTTP API, so nothing on the way looks inside the layers.

    rawpush.py REGISTRY REPO:TAG LAYER.tar...
    rawpush.py REGISTRY -       one image a line on stdin: REPO:TAG LAYER.tar...

Each tar is gzipped (mtime 0, so the same tar gives the same blob; level
$RAWPUSH_GZIP_LEVEL, default 9), the
config names their diff_ids, and an OCI manifest is PUT last.  Prints the
manifest digest, after the reference.
"""
import gzip
import hashlib
import json
import os
import platform
import sys
import urllib.request

ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386",
        "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}


def request(method, url, data=None, headers=None):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status, r.headers, r.read()


_pushed = set()


def push_blob(registry, repo, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    if (registry, repo, digest) in _pushed:
        return digest
    _pushed.add((registry, repo, digest))
    _, h, _ = request("POST", "http://%s/v2/%s/blobs/uploads/" % (registry, repo))
    loc = h["Location"]
    if not loc.startswith("http"):
        loc = "http://%s%s" % (registry, loc)
    loc += ("&" if "?" in loc else "?") + "digest=" + digest
    request("PUT", loc, data, {"Content-Type": "application/octet-stream"})
    return digest


def main():
    registry = sys.argv[1]
    if sys.argv[2] == "-":
        for line in sys.stdin:
            if line.strip():
                ref, *tars = line.split()
                push_image(registry, ref, tars)
    else:
        push_image(registry, sys.argv[2], sys.argv[3:])


# RAWPUSH_GZIP_LEVEL: 1 for large layers of incompressible data (the
# benchmark's), where level 9 only costs time.
LEVEL = int(os.environ.get("RAWPUSH_GZIP_LEVEL", "9"))


def push_image(registry, ref, tars):
    repo, tag = ref.rsplit(":", 1)
    layers, diff_ids = [], []
    for t in tars:
        raw = open(t, "rb").read()
        gz = gzip.compress(raw, mtime=0, compresslevel=LEVEL)
        diff_ids.append("sha256:" + hashlib.sha256(raw).hexdigest())
        layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                       "digest": push_blob(registry, repo, gz), "size": len(gz)})
    config = json.dumps({
        "architecture": ARCH.get(platform.machine(), platform.machine()),
        "os": "linux",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }).encode()
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": push_blob(registry, repo, config), "size": len(config)},
        "layers": layers,
    }).encode()
    request("PUT", "http://%s/v2/%s/manifests/%s" % (registry, repo, tag), manifest,
            {"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
    print(ref, "sha256:" + hashlib.sha256(manifest).hexdigest())


if __name__ == "__main__":
    main()

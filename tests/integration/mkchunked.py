#!/usr/bin/env python3
"""Builds a zstd:chunked image of one layer with many small files and
pushes it through the registry HTTP API, or writes the layer alone.

    mkchunked.py push REGISTRY REPO:TAG N       an image of N files
    mkchunked.py tar N OUT.tar [DIR]           the same files as a plain tar
                                               (below DIR/ when given)

The layer holds N regular files in directories of 1000, one in ten with
a few bytes of content of its own, the others empty (the smallest entries
of a table).  Each file's content is a zstd frame of its own, the tar
headers between them others, and the table of contents (the JSON
zstd:chunked writers make) a skippable frame placed by the layer's
annotations, with the 48-byte footer after it.  libzstd is reached
through ctypes (no zstd module needed).
"""
import hashlib
import json
import platform
import struct
import sys
import tarfile
from ctypes import CDLL, c_char_p, c_int, c_size_t, create_string_buffer
from ctypes.util import find_library

from rawpush import ARCH, push_blob, request  # the registry API, as rawpush.py speaks it

MTIME = "2024-01-02T03:04:05Z"
PER_DIR = 1000


_zstd = CDLL(find_library("zstd") or "libzstd.so.1")
_zstd.ZSTD_compressBound.restype = c_size_t
_zstd.ZSTD_compressBound.argtypes = [c_size_t]
_zstd.ZSTD_compress.restype = c_size_t
_zstd.ZSTD_compress.argtypes = [c_char_p, c_size_t, c_char_p, c_size_t, c_int]
_zstd.ZSTD_isError.argtypes = [c_size_t]


def frame(data, level=3):
    """One zstd frame of data."""
    out = create_string_buffer(_zstd.ZSTD_compressBound(len(data)))
    n = _zstd.ZSTD_compress(out, len(out), data, len(data), level)
    if _zstd.ZSTD_isError(n):
        raise RuntimeError("ZSTD_compress failed")
    return out.raw[:n]


def header(name, typ, size, mtime=1704164645):
    t = tarfile.TarInfo(name)
    t.type = typ
    t.size = size
    t.mode = 0o755 if typ == tarfile.DIRTYPE else 0o644
    t.mtime = mtime
    t.uname = t.gname = ""
    return t.tobuf(format=tarfile.USTAR_FORMAT)


def files(n, top=""):
    for d in range((n + PER_DIR - 1) // PER_DIR):
        yield top + "d%d" % d, None
        for i in range(d * PER_DIR, min(n, (d + 1) * PER_DIR)):
            yield top + "d%d/f%d" % (d, i), b"file %d\n" % i if i % 10 == 0 else b""


def build(n):
    """Returns (blob, diff_id, annotations)."""
    blob, entries = bytearray(), []
    diff = hashlib.sha256()
    pad = b""
    for name, data in files(n):
        h = pad + header(name, tarfile.REGTYPE if data is not None else tarfile.DIRTYPE,
                         len(data or b""), 0 if data == b"" else 1704164645)
        diff.update(h)
        blob += frame(h)
        if data is None:
            entries.append({"type": "dir", "name": name + "/", "mode": 0o755,
                            "modtime": MTIME})
            pad = b""
            continue
        if not data:
            entries.append({"type": "reg", "name": name, "mode": 0o644})
            pad = b""
            continue
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        at = len(blob)
        blob += frame(data)
        diff.update(data)
        entries.append({"type": "reg", "name": name, "mode": 0o644, "size": len(data),
                        "modtime": MTIME, "digest": digest, "offset": at,
                        "endOffset": len(blob), "chunkSize": len(data),
                        "chunkDigest": digest})
        pad = b"\0" * (-len(data) % 512)
    end = pad + b"\0" * 1024
    diff.update(end)
    blob += frame(end)
    toc = json.dumps({"version": 1, "entries": entries}, separators=(",", ":")).encode()
    z = frame(toc)
    blob += struct.pack("<II", 0x184D2A50, len(z))
    at = len(blob)
    blob += z
    blob += struct.pack("<II", 0x184D2A50, 40) + struct.pack("<QQQQ", at, len(z), len(toc), 1)
    blob += b"GnUlInUx"
    ann = {"io.github.containers.zstd-chunked.manifest-checksum":
           "sha256:" + hashlib.sha256(z).hexdigest(),
           "io.github.containers.zstd-chunked.manifest-position":
           "%d:%d:%d:1" % (at, len(z), len(toc))}
    sys.stderr.write("mkchunked: %d files, table %d bytes (%d compressed), blob %d bytes\n"
                     % (n, len(toc), len(z), len(blob)))
    return bytes(blob), "sha256:" + diff.hexdigest(), ann


def push(registry, ref, n):
    repo, tag = ref.rsplit(":", 1)
    blob, diff_id, ann = build(n)
    config = json.dumps({
        "architecture": ARCH.get(platform.machine(), platform.machine()),
        "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }).encode()
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": push_blob(registry, repo, config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd",
                    "digest": push_blob(registry, repo, blob), "size": len(blob),
                    "annotations": ann}],
    }).encode()
    request("PUT", "http://%s/v2/%s/manifests/%s" % (registry, repo, tag), manifest,
            {"Content-Type": "application/vnd.oci.image.manifest.v1+json"})


def main():
    if sys.argv[1] == "push":
        push(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif sys.argv[1] == "tar":
        with open(sys.argv[3], "wb") as f:
            top = sys.argv[4] + "/" if len(sys.argv) > 4 else ""
            for name, data in files(int(sys.argv[2]), top):
                typ = tarfile.REGTYPE if data is not None else tarfile.DIRTYPE
                f.write(header(name, typ, len(data or b""), 0 if data == b"" else 1704164645))
                if data is not None:
                    f.write(data + b"\0" * (-len(data) % 512))
            f.write(b"\0" * 1024)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Hand-made eStargz layers for the hostile lazy tests, pushed through the
registry API (rawpush.py's way) with the table's digest in the manifest.

    mklazy.py REGISTRY SPEC.json

SPEC.json: {"images": [{"ref": "REPO:TAG", "layers": [LAYER, ...]}, ...]}
where a LAYER is {"entries": [ENTRY, ...]} and an ENTRY, in order, one of

    {"dir": "NAME/"}
    {"file": "NAME", "data": TEXT | "repeat": [TEXT, COUNT],
     "chunk": BYTES, "no_chunk_digest": true, "compress": true,
     "xattrs": {NAME: TEXT}}
    {"symlink": "NAME", "target": TARGET}
    {"hardlink": "NAME", "target": TARGET}
    {"junk": BYTES}          zeros in the blob that no entry names

A file's content is cut in chunks of "chunk" bytes (default: one chunk),
each in a gzip member of its own (stored, unless "compress").
"no_chunk_digest" leaves chunkDigest out of the table.  A LAYER may also
have:

    "xattr_pax": false        xattrs only in the table, not in the tar
    "tamper": "chunks"        after the table is made, the chunks' bytes are
                              replaced by others of the same length (the
                              table still verifies: its digest is the
                              manifest's)
    "toc_patch": [[I, KEY, VALUE], ...]
                              set KEY of the table's entry I to VALUE
                              before its digest is taken

Prints "REF DIGEST" for each image.
"""
import base64
import gzip
import hashlib
import json
import os
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mktar  # noqa: E402
import rawpush  # noqa: E402

TOC_DIGEST = "containerd.io/snapshot/stargz/toc.digest"


def sha(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


def gz(data):
    return gzip.compress(data, mtime=0, compresslevel=6)


def pax_xattrs(name, xattrs):
    if not xattrs:
        return b""
    return mktar.pax([mktar.pax_record("SCHILY.xattr." + k, v) for k, v in xattrs.items()],
                     name=b"PaxHeaders/" + name.encode()[-80:])


class Layer:
    def __init__(self):
        self.blob = bytearray()
        self.cur = bytearray()  # the open member's uncompressed bytes
        self.tar = bytearray()  # the whole uncompressed tar
        self.entries = []
        self.chunk_places = []  # (offset, compressed length) of every chunk member

    def put(self, b):
        self.cur += b
        self.tar += b

    def flush(self):
        if self.cur:
            self.blob += gz(bytes(self.cur))
            self.cur = bytearray()

    def file(self, e, xattr_pax):
        name = e["file"]
        data = e.get("data", "")
        if "repeat" in e:
            data = e["repeat"][0] * e["repeat"][1]
        data = data.encode() if isinstance(data, str) else data
        xattrs = e.get("xattrs", {})
        if xattr_pax:
            self.put(pax_xattrs(name, xattrs))
        self.put(mktar.header(name, size=len(data)))
        ent = {"name": name, "type": "reg", "size": len(data), "mode": 0o644,
               "digest": sha(data)}
        if xattrs:
            ent["xattrs"] = {k: base64.b64encode(v.encode()).decode()
                             for k, v in xattrs.items()}
        step = e.get("chunk") or max(len(data), 1)
        first = True
        for off in range(0, len(data), step):
            piece = data[off:off + step]
            self.flush()
            at = len(self.blob)
            # stored, with room in the header: tamper_chunks() can put
            # other bytes of the same length in its place
            if e.get("compress"):
                self.blob += gz(piece)
            else:
                self.blob += stored_member(piece, len(piece) + 32)
            self.tar += piece
            self.chunk_places.append((at, len(self.blob) - at, piece))
            c = ent if first else {"name": name, "type": "chunk"}
            c.update({"offset": at, "chunkOffset": off, "chunkSize": len(piece)})
            if not e.get("no_chunk_digest"):
                c["chunkDigest"] = sha(piece)
            if not first:
                self.entries.append(c)
            else:
                self.entries.append(ent)
            first = False
        if not data:
            self.entries.append(ent)
        self.put(b"\0" * (-len(data) % 512))

    def end(self, patches):
        self.flush()
        for i, k, v in patches:
            self.entries[i][k] = v
        toc = json.dumps({"version": 1, "entries": self.entries}).encode()
        toc_tar = mktar.member("stargz.index.json", toc) + mktar.end()
        self.tar += toc_tar
        toc_at = len(self.blob)
        self.blob += gz(toc_tar)
        foot = bytearray(b"\x1f\x8b\x08\x04\0\0\0\0\0\xff")
        foot += b"\x1a\x00SG\x16\x00" + (b"%016xSTARGZ" % toc_at)
        foot += b"\x01\x00\x00\xff\xff" + b"\0" * 8
        assert len(foot) == 51
        self.blob += foot
        return sha(toc)

    def tamper_chunks(self):
        """Each chunk member replaced by one of the same length holding
        other bytes (stored, not compressed, so the length is free)."""
        for at, n, piece in self.chunk_places:
            other = bytes(b ^ 0x20 for b in piece)
            m = stored_member(other, n)
            assert len(m) == n, (len(m), n)
            self.blob[at:at + n] = m


def stored_member(data, length):
    """A gzip member of exactly length bytes that inflates to data, padded
    in its header's FEXTRA field."""
    raw = zlib.compressobj(0, zlib.DEFLATED, -15)
    body = raw.compress(data) + raw.flush()
    tail = zlib.crc32(data).to_bytes(4, "little") + (len(data) & 0xffffffff).to_bytes(4, "little")
    extra = length - (10 + 2 + len(body) + len(tail))
    assert extra >= 0, (len(data), length)
    head = b"\x1f\x8b\x08\x04\0\0\0\0\0\xff" + extra.to_bytes(2, "little") + b"\0" * extra
    return head + body + tail


def build(spec):
    l = Layer()
    for e in spec["entries"]:
        if "dir" in e:
            l.put(mktar.directory(e["dir"]))
            l.entries.append({"name": e["dir"], "type": "dir", "mode": 0o755})
        elif "symlink" in e:
            l.put(mktar.symlink(e["symlink"], e["target"]))
            l.entries.append({"name": e["symlink"], "type": "symlink", "linkName": e["target"],
                              "mode": 0o777})
        elif "junk" in e:
            # bytes of no entry, in the blob only: the chunk before them
            # takes them in (eStargz gives no chunk's end)
            l.flush()
            l.blob += b"\0" * e["junk"]
        elif "hardlink" in e:
            l.put(mktar.hardlink(e["hardlink"], e["target"]))
            l.entries.append({"name": e["hardlink"], "type": "hardlink", "linkName": e["target"]})
        else:
            l.file(e, spec.get("xattr_pax", True))
    toc_digest = l.end(spec.get("toc_patch", []))
    if spec.get("tamper") == "chunks":
        l.tamper_chunks()
    return bytes(l.blob), bytes(l.tar), toc_digest


def push(registry, ref, layers):
    repo, tag = ref.rsplit(":", 1)
    descs, diff_ids = [], []
    for spec in layers:
        blob, tar, toc_digest = build(spec)
        diff_ids.append(sha(tar))
        descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                      "digest": rawpush.push_blob(registry, repo, blob), "size": len(blob),
                      "annotations": {TOC_DIGEST: toc_digest}})
    config = json.dumps({"architecture": rawpush.ARCH.get(os.uname().machine, os.uname().machine),
                         "os": "linux", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": rawpush.push_blob(registry, repo, config), "size": len(config)},
        "layers": descs,
    }).encode()
    rawpush.request("PUT", "http://%s/v2/%s/manifests/%s" % (registry, repo, tag), manifest,
                    {"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
    print(ref, sha(manifest))


def main():
    spec = json.load(open(sys.argv[2]))
    for img in spec["images"]:
        push(sys.argv[1], img["ref"], img["layers"])


if __name__ == "__main__":
    main()

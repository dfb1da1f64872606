#!/usr/bin/env python3
"""Hand-made tar layers for the hostile-input tests.

tar(1) and Python's tarfile refuse to write most of what an attacker
would send (".." names, a write through a symlink, broken numbers), so
this writes the 512-byte headers itself.  Usage:

    mktar.py CASE OUT.tar [--canary DIR]    write one case
    mktar.py --all DIR [--canary DIR]       write every case to DIR/CASE.tar,
                                            and DIR/reasons: "CASE<TAB>REASON"
    mktar.py --list                         the case names, one a line

--canary names a directory outside the cache that a case tries to reach
(through an absolute name or a symlink); it must end up unchanged.
"""
import argparse
import os
import sys

BLOCK = 512


def octal(value, width):
    """A NUL-terminated octal field of `width` bytes."""
    s = b"%0*o" % (width - 1, value)
    if len(s) > width - 1:
        raise ValueError("%d does not fit in %d octal digits" % (value, width - 1))
    return s + b"\0"


def field(raw, width):
    """raw bytes padded with NULs (or cut) to width."""
    return raw[:width].ljust(width, b"\0")


def header(name, typeflag=b"0", size=0, mode=0o644, linkname=b"",
           mtime=1262340000, uid=0, gid=0, raw_size=None, raw_mode=None,
           devmajor=0, devminor=0):
    """One ustar header block.  raw_size / raw_mode replace the encoded
    field with exactly those bytes, for malformed numbers."""
    if isinstance(name, str):
        name = name.encode()
    if isinstance(linkname, str):
        linkname = linkname.encode()
    h = bytearray()
    h += field(name, 100)
    h += raw_mode if raw_mode is not None else octal(mode, 8)
    h += octal(uid, 8)
    h += octal(gid, 8)
    h += field(raw_size, 12) if raw_size is not None else octal(size, 12)
    h += octal(mtime, 12)
    h += b" " * 8  # checksum, computed below
    h += typeflag
    h += field(linkname, 100)
    h += b"ustar\0" + b"00"
    h += field(b"root", 32) + field(b"root", 32)
    h += octal(devmajor, 8) + octal(devminor, 8)
    h += field(b"", 155)
    h = field(bytes(h), BLOCK)
    chk = sum(h) & 0o777777
    h = h[:148] + b"%06o\0 " % chk + h[156:]
    assert len(h) == BLOCK
    return h


def pad(data):
    return data + b"\0" * (-len(data) % BLOCK)


def member(name, data=b"", **kw):
    """A header and its (padded) data."""
    if isinstance(data, str):
        data = data.encode()
    kw.setdefault("size", len(data))
    return header(name, **kw) + pad(data)


def directory(name, mode=0o755):
    return header(name, typeflag=b"5", mode=mode)


def symlink(name, target):
    return header(name, typeflag=b"2", linkname=target, mode=0o777)


def hardlink(name, target):
    return header(name, typeflag=b"1", linkname=target)


def pax_record(key, value):
    """One "LEN key=value\\n" record; LEN counts itself."""
    if isinstance(value, str):
        value = value.encode()
    body = b" " + key.encode() + b"=" + value + b"\n"
    n = len(body) + 1
    while len(str(n).encode()) + len(body) != n:
        n += 1
    return str(n).encode() + body


def pax(records, name=b"PaxHeaders/x", raw_size=None):
    data = b"".join(records)
    return header(name, typeflag=b"x", size=len(data), raw_size=raw_size) + pad(data)


def end():
    return b"\0" * (2 * BLOCK)


def cases(canary):
    """name -> (tar bytes, what the daemon must say).  The second item is a
    substring of the Failed event's message."""
    c = {}
    good = directory("ok/") + member("ok/file", "fine\n")
    c["dotdot"] = (good + member("../escape", "x") + end(), "bad entry name")
    c["dotdot-inner"] = (good + member("ok/../../escape", "x") + end(), "bad entry name")
    # an absolute name is resolved inside the root; one that climbs out
    # of it is refused
    c["absolute"] = (good + member("/.." + canary + "/absolute", "x") + end(), "bad entry name")
    # a/ is a symlink to the canary directory, then a/x would be written
    # "through" it by an extractor that follows symlinks.
    c["symlink-through"] = (good + symlink("a", canary) + member("a/x", "through\n") + end(),
                            "below")
    c["symlink-through-dir"] = (good + symlink("d", canary) + directory("d/sub/") +
                                member("d/sub/x", "x") + end(), "below")
    c["hardlink-outside"] = (good + hardlink("passwd", "../../etc/passwd") + end(), "bad entry name")
    c["hardlink-absolute"] = (good + hardlink("passwd", "/etc/passwd") + end(), "not an earlier file")
    c["hardlink-unseen"] = (good + hardlink("early", "ok/later") + member("ok/later", "x") + end(),
                            "not an earlier file")
    c["whiteout-dotdot"] = (good + member(".wh...") + end(), "bad whiteout")
    c["whiteout-dot"] = (good + member("ok/.wh..") + end(), "bad whiteout")
    c["whiteout-empty"] = (good + member("ok/.wh.") + end(), "bad whiteout")
    c["whiteout-root"] = (good + member("/.wh.") + end(), "bad whiteout")
    c["duplicate"] = (good + member("ok/file", "second copy\n") + end(), "more than once")
    c["duplicate-type"] = (good + directory("ok/file/") + end(), "more than once")
    # A PAX header that announces 100 MB of records and then ends.
    c["pax-huge"] = (good + header("PaxHeaders/big", typeflag=b"x", size=100 << 20) +
                     pad(pax_record("path", "big")) + end(), "layer:")
    c["pax-negative-size"] = (good + pax([pax_record("size", "-5")]) + member("neg", "") + end(),
                              "layer:")
    c["pax-bad-length"] = (good + pax([b"99999999999999999999 path=x\n"]) + member("x", "x") + end(),
                           "layer:")
    c["pax-garbage-length"] = (good + pax([b"1x path=x\n"]) + member("x", "x") + end(), "layer:")
    # base-256 with the sign bit set: a negative size
    c["size-negative-b256"] = (good + header("neg", raw_size=b"\xff" * 12) + end(), "layer:")
    c["truncated"] = (good + header("cut", size=4096) + b"only a little", "layer:")
    c["bad-checksum"] = (good + _bad_checksum(member("x", "x")) + end(), "layer:")
    return c


def _bad_checksum(block):
    b = bytearray(block)
    b[148:156] = b"000000\0 "
    return bytes(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", nargs="?")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--canary", default="/tmp/canary-pullfs")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--all", metavar="DIR")
    ap.add_argument("--reason", action="store_true",
                    help="print the expected reason of CASE instead of writing it")
    a = ap.parse_args()
    all_cases = cases(a.canary)
    if a.list:
        print("\n".join(all_cases))
        return 0
    if a.all:
        with open(os.path.join(a.all, "reasons"), "w") as r:
            for name, (data, reason) in all_cases.items():
                with open(os.path.join(a.all, name + ".tar"), "wb") as f:
                    f.write(data)
                r.write("%s\t%s\n" % (name, reason))
        return 0
    if a.case not in all_cases:
        print("unknown case %r" % a.case, file=sys.stderr)
        return 2
    data, reason = all_cases[a.case]
    if a.reason:
        print(reason)
        return 0
    with open(a.out, "wb") as f:
        f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())

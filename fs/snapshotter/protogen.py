#!/usr/bin/env python3
"""Generates the protobuf-c code of containerd's snapshots service.

containerd's .proto files carry gogoproto options that protoc-c does not
know, and import each other by Go import paths.  This copies the snapshots
service, its Mount type and the three well-known types it uses into one
flat directory, without the gogoproto options and with imports by file
name, then runs protoc-c there, so that every generated file lands in
OUTDIR under a plain name (snapshots.pb-c.c, mount.pb-c.h, ...).

Usage: protogen.py PROTOC_C OUTDIR CONTAINERD_API_DIR WELL_KNOWN_DIR"""
import os
import re
import subprocess
import sys
import tempfile

WELL_KNOWN = ['empty', 'field_mask', 'timestamp']


def strip(text):
    text = re.sub(r'^import weak "gogoproto/gogo.proto";\n', '', text, flags=re.M)
    text = re.sub(r'^\s*option \(gogoproto\.[^;]*;\n', '', text, flags=re.M)
    # Field and enum value options: [(gogoproto.x) = y, (gogoproto.z) = w]
    text = re.sub(r'\s*\[\(gogoproto\.[^\]]*\]', '', text)
    text = re.sub(r'import "(?:[^"]*/)?([^"/]+\.proto)";', r'import "\1";', text)
    if 'gogoproto' in text:
        sys.exit('protogen.py: a gogoproto option was left in place')
    return text


def main():
    protoc_c, outdir, api, wkt = sys.argv[1:5]
    sources = {
        'snapshots.proto': os.path.join(api, 'services/snapshots/v1/snapshots.proto'),
        'mount.proto': os.path.join(api, 'types/mount.proto'),
    }
    for w in WELL_KNOWN:
        sources[w + '.proto'] = os.path.join(wkt, w + '.proto')
    with tempfile.TemporaryDirectory() as stage:
        for name, path in sources.items():
            with open(path, encoding='utf-8') as f:
                text = strip(f.read())
            with open(os.path.join(stage, name), 'w', encoding='utf-8') as f:
                f.write(text)
        subprocess.run([protoc_c, '--proto_path=' + stage, '--c_out=' + outdir] +
                       sorted(sources), check=True)


if __name__ == '__main__':
    main()

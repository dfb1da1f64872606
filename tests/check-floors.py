#!/usr/bin/env python3
"""Checks that no source file includes a header of a floor above its own.

The floors, from the bottom: common/, registry/, the folders of manager/
(rules/, format/, store/, lazy/, image/, then manager/ itself, the top),
the rooms of fs/ (restart/, control/, snapshotter/, then fs/ itself, then
daemon/),
tools/.  A file may include headers of its own floor and of the
floors below; manager/manager-private.h and fs/meson.build say what each floor holds.
Header names are unique across the tree, so a quoted include names one
file.  Usage: check-floors.py SOURCE_ROOT; exits 1 and lists the
offending includes when there are any."""
import os
import re
import sys

FLOORS = [
    'common',
    'registry',
    'manager/rules',
    'manager/format',
    'manager/store',
    'manager/lazy',
    'manager/image',
    'manager',
    'fs/restart',
    'fs/control',
    'fs/snapshotter',
    'fs',
    'fs/daemon',
    'tools',
]

# Known includes that still run up a floor: (file, header) -> why.  Each
# is a debt, not a licence; the list may only shrink.
KNOWN_UPWARD = {}


def floor_of(rel):
    best = None
    for i, f in enumerate(FLOORS):
        if rel.startswith(f + '/') and (best is None or len(f) > len(FLOORS[best])):
            best = i
    return best


def main(root):
    headers = {}
    sources = []
    for f in FLOORS:
        for dirpath, _, names in os.walk(os.path.join(root, f)):
            for n in names:
                if n.endswith(('.c', '.h')):
                    rel = os.path.relpath(os.path.join(dirpath, n), root)
                    sources.append(rel)
                    if n.endswith('.h'):
                        headers.setdefault(n, rel)
    bad = []
    for rel in sorted(set(sources)):
        mine = floor_of(rel)
        with open(os.path.join(root, rel), encoding='utf-8') as fh:
            for lineno, line in enumerate(fh, 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if not m or m.group(1) not in headers:
                    continue
                theirs = floor_of(headers[m.group(1)])
                if theirs > mine and (rel, m.group(1)) not in KNOWN_UPWARD:
                    bad.append(f'{rel}:{lineno}: includes {headers[m.group(1)]}, '
                               f'a floor above {FLOORS[mine]}/')
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else '.'))

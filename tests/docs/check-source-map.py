#!/usr/bin/env python3
"""HACKING.md's source map against the tree.

The map is the section "## The source map": a heading "### `DIR/`" per
folder, then list items naming files of that folder in backquotes
(`name.c`, `name.h`).  Every .c and .h file under the folders below must
be named under its folder's heading, and every file the map names must
exist.  A file added, moved or removed thus updates the map in the same
change; a new folder is a new heading.

Usage: check-source-map.py SOURCE_DIR"""
import os
import re
import sys

FOLDERS = ['common', 'registry', 'manager', 'fs', 'tools', 'tests/unit']
NAME = re.compile(r'`([A-Za-z0-9_.+-]+\.[ch])`')


def tree(src):
    found = set()
    for top in FOLDERS:
        for d, subdirs, files in os.walk(os.path.join(src, top)):
            subdirs[:] = [s for s in subdirs if not s.startswith('.')]
            for f in files:
                if f.endswith(('.c', '.h')):
                    found.add(os.path.relpath(os.path.join(d, f), src))
    return found


def source_map(src):
    """{path: number of entries} of the files the map lists, and the set of
    paths its descriptions mention."""
    text = open(os.path.join(src, 'HACKING.md')).read()
    start = text.index('\n## The source map\n')
    end = text.find('\n## ', start + 1)
    items, folder = [], None
    for line in text[start:end if end > 0 else None].splitlines():
        m = re.match(r'^### `([^`]+)/`', line)
        if m:
            folder = m.group(1)
        elif line.startswith('### '):
            folder = None  # a heading that is not a folder ("Elsewhere")
        elif folder and re.match(r'^\s*- ', line):
            items.append([folder, line])
        elif folder and items and line.strip():
            items[-1][1] += ' ' + line.strip()  # an item's next line
    listed, mentioned = {}, set()
    for folder, item in items:
        # An item lists the files before its first "`:"; the rest describes them.
        head, _, rest = item.partition('`:')
        for name in NAME.findall(head + '`'):
            listed[f'{folder}/{name}'] = listed.get(f'{folder}/{name}', 0) + 1
        mentioned |= {f'{folder}/{name}' for name in NAME.findall(rest)}
    return listed, mentioned


def main():
    src = sys.argv[1]
    files = tree(src)
    listed, mentioned = source_map(src)
    problems = [f'HACKING.md: {f} is not in the source map' for f in sorted(files - set(listed))]
    problems += [f'HACKING.md: the source map names {f}, which does not exist'
                 for f in sorted((set(listed) | mentioned) - files)]
    problems += [f'HACKING.md: the source map lists {f} {n} times'
                 for f, n in sorted(listed.items()) if n > 1]
    for p in problems:
        print(p)
    print(f'{len(files)} source files, {len(listed)} in the map: {len(problems)} problems',
          file=sys.stderr)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env python3
"""Links between the Markdown pages of the tree resolve.

Every relative link [text](path) or [text](path#anchor) in a tracked-looking
.md file (build directories and dot-directories left out) must name a file
or directory that exists, and an anchor must be a heading of the page it
points into (GitHub's rule: lowercase, punctuation dropped, blanks to "-").
A source path the pages name in their text (`manager/errtable.c`,
tests/integration/restart.sh: from the top of the tree, under one of the
folders below) must exist too, so that a file moved or renamed cannot
leave the docs pointing at nothing.  Placeholders in capitals
(tests/integration/NAME.sh) are not paths.

Usage: check-links.py SOURCE_DIR"""
import os
import re
import sys

LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')
SOURCE = re.compile(r'(?<![\w./-])((?:common|registry|manager|fs|tools|tests|docs|contrib)/'
                    r'[\w./+-]*\.(?:c|h|sh|py|md|scd|example|build|in))\b')


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r'[^\w\- ]', '', s)
    return s.replace(' ', '-')


def anchors(path):
    out = set()
    fence = False
    for line in open(path):
        if line.startswith('```'):
            fence = not fence
        m = re.match(r'^(#+)\s+(.*)', line)
        if m and not fence:
            out.add(slug(m.group(2)))
    return out


def pages(src):
    for d, subdirs, files in os.walk(src):
        subdirs[:] = [s for s in subdirs if not s.startswith(('.', 'build'))
                      and s not in ('subprojects', 'corpus')]
        for f in files:
            if f.endswith(('.md', '.scd')):
                yield os.path.join(d, f)


def main():
    src = sys.argv[1]
    problems, n = [], 0
    for page in sorted(pages(src)):
        text = open(page).read()
        rel = os.path.relpath(page, src)
        for path in sorted(set(SOURCE.findall(text))):
            if not re.search(r'[A-Z]', path) and not os.path.exists(os.path.join(src, path)):
                problems.append(f'{rel}: names {path}, which does not exist')
        # Code (indented blocks, `spans`) holds no links.
        text = '\n'.join(l for l in text.splitlines() if not l.startswith('    '))
        text = re.sub(r'`[^`]*`', '', text)
        for target in LINK.findall(text):
            if re.match(r'^[a-z]+:', target):
                continue  # http:, https:, mailto:
            n += 1
            path, _, anchor = target.partition('#')
            where = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(where):
                problems.append(f'{rel}: link to {target}: no such file')
            elif anchor and where.endswith('.md') and anchor not in anchors(where):
                problems.append(f'{rel}: link to {target}: no such heading')
    for p in problems:
        print(p)
    print(f'{n} relative links: {len(problems)} problems', file=sys.stderr)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())

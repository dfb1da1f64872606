#!/usr/bin/env python3
"""tests/README.md describes every integration test.

Each name of `integration_tests` in tests/meson.build must appear in
tests/README.md in backquotes (`name`), and every `name` the README's
"Integration tests" section gives as the start of an item must be a test.

Usage: check-test-list.py SOURCE_DIR"""
import os
import re
import sys


def main():
    src = sys.argv[1]
    build = open(os.path.join(src, 'tests', 'meson.build')).read()
    m = re.search(r'integration_tests = \[(.*?)\]', build, re.S)
    tests = set(re.findall(r"'([\w-]+)'", m.group(1)))
    readme = open(os.path.join(src, 'tests', 'README.md')).read()
    section = readme[readme.index('\n## Integration tests'):]
    section = section[:section.find('\n## ', 1)]
    # An item names the tests it describes before its first "`:"; a test
    # described inside another's item is "`name`:" too.
    items = []
    for line in section.splitlines():
        if line.startswith('- '):
            items.append(line)
        elif items and line.startswith('  '):
            items[-1] += ' ' + line.strip()
    described = set()
    for item in items:
        head = item.split('`:', 1)[0] + '`'
        described |= set(re.findall(r'`([\w-]+)`', head))
        described |= set(re.findall(r'`([\w-]+)`:', item))
    problems = [f'tests/README.md: integration test {t} is not described'
                for t in sorted(tests - described)]
    problems += [f'tests/README.md: describes {t}, which tests/meson.build does not list'
                 for t in sorted(described - tests)]
    for p in problems:
        print(p)
    print(f'{len(tests)} integration tests: {len(problems)} problems', file=sys.stderr)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env python3
"""The options of fs/daemon/options.c's table against their documentation.

Every long option of the table must be documented in the man page
(docs/pullfs.8.scd, as *--NAME*) and in the README's option table (as
`--NAME`), and every long option those two name must be in the table, so
that neither can document an option that is gone nor miss a new one.  A
row's config-file key is its name (the table's IN_FILE rows): the man
page's CONFIGURATION says so once, and the example config's keys are
checked against the table by check-example-config.py.

Usage: check-options.py SOURCE_DIR"""
import os
import re
import sys

ROW = re.compile(r'^\s*\{\s*"([a-z0-9-]+)",\s*(\'.\'|0),\s*KIND_\w+,\s*([A-Z_ |0]+),', re.M)


def table(src):
    """(name, where) of each row of the options table."""
    text = open(os.path.join(src, 'fs', 'daemon', 'options.c')).read()
    start = text.index('static const struct opt options[]')
    end = text.index('};', start)
    rows = ROW.findall(text[start:end])
    if len(rows) < 10:
        sys.exit('check-options: cannot read the options table of fs/daemon/options.c')
    return [(name, where) for name, _, where in rows]


def named(path, pattern):
    text = open(path).read()
    return text, set(re.findall(pattern, text))


def main():
    src = sys.argv[1]
    rows = table(src)
    long_names = {n for n, where in rows if 'NO_LONG' not in where}
    not_keys = {n for n, where in rows
                if 'NO_LONG' not in where and 'IN_FILE' not in where and 'EVERYWHERE' not in where}
    problems = []

    man_path = 'docs/pullfs.8.scd'
    man = open(os.path.join(src, man_path)).read()
    # An option is documented by an entry of its own: a line of OPTIONS
    # that starts with the option ("*-f*, *--foreground*", "*--a* _N_, *--b* _M_").
    entries = set()
    for line in man.splitlines():
        if line.startswith('*-'):
            entries |= set(re.findall(r'\*--([a-z0-9][a-z0-9-]*)\*', line))
    mentioned = set(re.findall(r'\*--([a-z0-9][a-z0-9-]*)\*', man))
    problems += [f'{man_path}: option --{n} of fs/daemon/options.c has no entry'
                 for n in sorted(long_names - entries)]
    problems += [f'{man_path}: names --{n}, which fs/daemon/options.c does not have'
                 for n in sorted((mentioned | entries) - long_names)]
    # The config keys: every long option but those the CONFIGURATION
    # section lists after "except".
    conf = man[man.index('# CONFIGURATION'):]
    conf = conf[:conf.index('\n# ', 1)]
    m = re.search(r'except ([^.]*)\.', conf)
    said = set(re.findall(r'\*([a-z0-9-]+)\*', m.group(1))) if m else set()
    if said != not_keys:
        problems.append(f'{man_path}: CONFIGURATION says the options that are not config keys '
                        f'are {sorted(said)}; fs/daemon/options.c says {sorted(not_keys)}')

    readme = open(os.path.join(src, 'README.md')).read()
    rows_doc = set()
    for line in readme.splitlines():
        if line.startswith('| `-'):
            rows_doc |= set(re.findall(r'`--([a-z0-9][a-z0-9-]*)', line.split('|')[1]))
    mentioned = set(re.findall(r'`--([a-z0-9][a-z0-9-]*)', readme))
    problems += [f'README.md: option --{n} of fs/daemon/options.c has no row in the option table'
                 for n in sorted(long_names - rows_doc)]
    problems += [f'README.md: names --{n}, which fs/daemon/options.c does not have'
                 for n in sorted((mentioned | rows_doc) - long_names)]

    for p in problems:
        print(p)
    print(f'{len(long_names)} long options in fs/daemon/options.c, {len(long_names - not_keys)} '
          f'of them config keys: {len(problems)} problems', file=sys.stderr)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())

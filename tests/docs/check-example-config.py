#!/usr/bin/env python3
"""The example config (contrib/pullfs.conf.example, the one installed as
/etc/pullfs.conf) names only real settings, and they parse.

Every setting of the example is commented out ("#key = value",
'#[registry "HOST"]'), so the file as installed changes nothing.  Here
each such line is switched on, and the result is given to
"pullfs --config FILE --help", which reads the config file (exiting 2 with
FILE:LINE on any line it refuses: an unknown key, a bad value, a key of a
registry section that does not exist) and then prints the help without
mounting.  The two pairs of settings that bound each other, which only a
start checks, are compared here.  The global keys are also looked up in fs/daemon/options.c's table, so
that an option removed from the table cannot linger in the example.

Usage: check-example-config.py SOURCE_DIR PULLFS"""
import os
import re
import subprocess
import sys
import tempfile

SETTING = re.compile(r'^#(\[registry "[^"]*"\]|[a-z0-9-]+ = .*)$')


def main():
    src, pullfs = sys.argv[1], sys.argv[2]
    example = os.path.join(src, 'contrib', 'pullfs.conf.example')
    options = open(os.path.join(src, 'fs', 'daemon', 'options.c')).read()
    lines, keys, section = [], [], False
    for line in open(example).read().splitlines():
        m = SETTING.match(line)
        if m:
            line = m.group(1)
            if line.startswith('['):
                section = True
            elif not section:
                keys.append(line.split(' = ')[0])
        lines.append(line)
    problems = [f'{example}: key "{k}" is not an option of fs/daemon/options.c'
                for k in keys if not re.search(r'\{\s*"%s",' % re.escape(k), options)]
    if len(keys) < 10:
        problems.append(f'{example}: only {len(keys)} settings found')
    with tempfile.NamedTemporaryFile('w', suffix='.conf') as f:
        f.write('\n'.join(lines) + '\n')
        f.flush()
        r = subprocess.run([pullfs, '--config', f.name, '--help'], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            # The lines are the example's, one for one: name it, not the copy.
            why = r.stderr.strip().replace(f.name, example)
            problems.append(f'pullfs refuses the example with every setting on (exit '
                            f'{r.returncode}): {why}')
    # What only a start checks (--help exits before it): the pairs of
    # settings that bound each other.
    values = dict(l.split(' = ', 1) for l in lines if re.match(r'^[a-z0-9-]+ = ', l))
    for low, high in (('gc-low-percent', 'gc-high-percent'), ('backoff-initial', 'backoff-max')):
        if low in values and high in values and int(values[low]) > int(values[high]):
            problems.append(f'{example}: {low} {values[low]} is above {high} {values[high]}')
    for p in problems:
        print(p)
    print(f'{len(keys)} global settings checked: {len(problems)} problems', file=sys.stderr)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())

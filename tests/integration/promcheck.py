#!/usr/bin/env python3
"""Strict check of a Prometheus text exposition (format 0.0.4).

Every sample must belong to a family declared by a # TYPE line before it,
names and labels must be well formed, values must parse, counters must not
be negative, and each histogram must have cumulative, non-decreasing
buckets ending in le="+Inf" equal to its _count, with a _sum.
Usage: promcheck.py FILE [REQUIRED_METRIC ...]; exit 1 on any problem.
"""
import math
import re
import sys

NAME = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*$')
LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)"\s*(,|$)')
TYPES = {'counter', 'gauge', 'histogram', 'summary', 'untyped'}


def parse_labels(text, where):
    labels = {}
    pos = 0
    while pos < len(text):
        m = LABEL.match(text, pos)
        if not m:
            raise ValueError(f'{where}: bad label set {{{text}}}')
        if m.group(1) in labels:
            raise ValueError(f'{where}: label {m.group(1)} repeated')
        labels[m.group(1)] = m.group(2)
        pos = m.end()
    return labels


def main():
    path = sys.argv[1]
    required = sys.argv[2:]
    types = {}
    helps = set()
    samples = []
    errors = []
    with open(path, encoding='utf-8') as f:
        text = f.read()
    if not text.endswith('\n'):
        errors.append('exposition does not end with a newline')
    for n, line in enumerate(text.splitlines(), 1):
        where = f'line {n}'
        if not line:
            continue
        if line.startswith('#'):
            parts = line.split(None, 3)
            if len(parts) >= 2 and parts[1] == 'TYPE':
                if len(parts) != 4 or parts[3] not in TYPES or not NAME.match(parts[2]):
                    errors.append(f'{where}: bad TYPE line: {line}')
                elif parts[2] in types:
                    errors.append(f'{where}: second TYPE for {parts[2]}')
                else:
                    types[parts[2]] = parts[3]
            elif len(parts) >= 2 and parts[1] == 'HELP':
                if len(parts) < 3 or parts[2] in helps:
                    errors.append(f'{where}: bad or repeated HELP: {line}')
                helps.add(parts[2])
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?\d+)?$', line)
        if not m:
            errors.append(f'{where}: not a sample: {line}')
            continue
        name, labels_text, value = m.group(1), m.group(3) or '', m.group(4)
        try:
            labels = parse_labels(labels_text, where)
            v = float(value) if value not in ('+Inf', '-Inf', 'NaN') else float(value.replace('Inf', 'inf'))
        except ValueError as e:
            errors.append(str(e))
            continue
        family = name
        for suffix in ('_bucket', '_sum', '_count'):
            if name.endswith(suffix) and name[:-len(suffix)] in types:
                family = name[:-len(suffix)]
        if family not in types:
            errors.append(f'{where}: sample {name} has no TYPE before it')
            continue
        t = types[family]
        if t == 'counter' and (v < 0 or math.isnan(v)):
            errors.append(f'{where}: counter {name} is {value}')
        if t == 'histogram' and family == name:
            errors.append(f'{where}: histogram sample without _bucket/_sum/_count: {name}')
        samples.append((family, name, labels, v, where))

    # Histograms: group by family and by labels other than le.
    groups = {}
    for family, name, labels, v, where in samples:
        if types[family] != 'histogram':
            continue
        key = (family, tuple(sorted((k, x) for k, x in labels.items() if k != 'le')))
        g = groups.setdefault(key, {'buckets': [], 'sum': None, 'count': None})
        if name.endswith('_bucket'):
            if 'le' not in labels:
                errors.append(f'{where}: bucket without le')
                continue
            le = float('inf') if labels['le'] == '+Inf' else float(labels['le'])
            g['buckets'].append((le, v, where))
        elif name.endswith('_sum'):
            g['sum'] = v
        elif name.endswith('_count'):
            g['count'] = v
    for (family, lab), g in groups.items():
        b = g['buckets']
        if not b or b[-1][0] != float('inf'):
            errors.append(f'{family}{dict(lab)}: buckets do not end with le="+Inf"')
            continue
        for (le1, v1, _), (le2, v2, w2) in zip(b, b[1:]):
            if le2 <= le1:
                errors.append(f'{w2}: {family} bucket bounds not increasing')
            if v2 < v1:
                errors.append(f'{w2}: {family} buckets not cumulative')
        if g['count'] is None or g['sum'] is None:
            errors.append(f'{family}{dict(lab)}: missing _sum or _count')
        elif g['count'] != b[-1][1]:
            errors.append(f'{family}{dict(lab)}: _count {g["count"]} != +Inf bucket {b[-1][1]}')
    present = {s[1] for s in samples} | {s[0] for s in samples}
    for r in required:
        if r not in present:
            errors.append(f'required metric {r} missing')
    for e in errors:
        print('promcheck:', e, file=sys.stderr)
    print(f'promcheck: {len(samples)} samples, {len(types)} families, {len(errors)} problems')
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env python3
"""Medians over the rounds of tools/device_write.sh (ROUNDS > 1): one table line per case.

    tools/write_rounds.py DIR      (DIR: device_write.sh's $OUT/write, its runs' .out files)

A run's label is [PREFIX]rK-VARIANT-PLACE[-RANKS-BIND] (device_write.sh). For every label without
its round and every scene, the medians over the rounds of the run's ms a frame, its ratio to
stepping and the writer's GB/s, with each round's writer figure; then, for each run of several
ranks, their writers together against one rank's (same variant, place and scene): the ratio of
the medians and each round's ratio, the rounds taken in order (round K's runs against each
other: device_write.sh runs one rank, then several, in every round).
"""
import os
import re
import statistics
import sys
from collections import defaultdict

LABEL = re.compile(r"^(?P<prefix>.*?)r(?P<k>\d+)-(?P<case>.+)$")
RANKS = re.compile(r"^(?P<one>.+)-(?P<ranks>\d+)-(?P<bind>[a-z0-9:]+)$")


def rows(path):
    """The scenes' rows of a run's output: scene -> (write ms, write / step, writer GB/s)."""
    out, on = {}, False
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("frames written"):
                on = True
                continue
            fields = line.split()
            if not on or not fields or fields[0] == "case":
                continue
            try:
                out[fields[0]] = (float(fields[4]), float(fields[5]), float(fields[6]))
            except (IndexError, ValueError):
                continue
    return out


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    runs = defaultdict(dict)  # (prefix + case, scene) -> round -> figures
    for name in sorted(os.listdir(argv[1])):
        m = LABEL.match(name[:-4]) if name.endswith(".out") else None
        if not m:
            continue
        for scene, fig in rows(os.path.join(argv[1], name)).items():
            runs[(m.group("prefix") + m.group("case"), scene)][int(m.group("k"))] = fig
    if not runs:
        print(f"{argv[1]}: no runs of several rounds (labels rK-...)", file=sys.stderr)
        return 1
    print(f"\n{'case':<24} {'scene':<22} {'rounds':>6} {'write ms':>9} {'write/step':>10} {'writer GB/s':>11}  each round's writer GB/s")
    for (case, scene), by in sorted(runs.items()):
        figs = [by[k] for k in sorted(by)]
        med = [statistics.median(f[i] for f in figs) for i in range(3)]
        each = ", ".join(f"{f[2]:.2f}" for f in figs)
        print(f"{case:<24} {scene:<22} {len(figs):>6} {med[0]:>9.2f} {med[1]:>10.2f} {med[2]:>11.2f}  {each}")
    print(f"\n{'ranks against one':<34} {'scene':<22} {'of medians':>10}  each round's")
    for (case, scene), by in sorted(runs.items()):
        m = RANKS.match(case)
        if not m or (m.group("one"), scene) not in runs:
            continue
        one = runs[(m.group("one"), scene)]
        common = sorted(set(by) & set(one))
        if not common:
            continue
        ratio = statistics.median(by[k][2] for k in common) / statistics.median(one[k][2] for k in common)
        each = ", ".join(f"{100 * by[k][2] / one[k][2]:.0f}%" for k in common if one[k][2] > 0)
        print(f"{case + ' / ' + m.group('one'):<34} {scene:<22} {100 * ratio:>9.0f}%  {each}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

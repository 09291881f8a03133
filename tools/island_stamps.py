#!/usr/bin/env python3
"""The island's stamps (DRIFT_GPU_STAMPS=1, gpu/timeline.cu timeline_stamps_take) as one line a member.

    tools/island_stamps.py LOG...

A run with DRIFT_GPU_STAMPS=1 logs, for each member, the median (and more) microseconds between
two of its step's stamps, e.g. "gpu stamps, device 3 (member 3 of 4): 720 steps; median (mean,
count; 10th percentile) us from a stamp to the next:  begin>p2g 10.46 (11.65, 720; p10 9.80)
p2g>barrier 422.02 (...)" (older logs may lack the count's label and the percentile: still read).
Prints per LOG its ms a frame (the bench table's or CSV's, where the log has it) and a row per
member of the medians that pace a step: where ranks drive the phases, the device's wait at the
gate for the step vote (gate>begin); k_begin (begin>p2g), P2G (p2g>barrier; p2g>grid with the
events barrier or without an island, which then includes the wait for the slowest member), the
barrier's wait (published>passed), the grid update (grid>g2p), G2P and the record (g2p>begin; with
ranks g2p>gate, to the gate's arrival), and the steps across a rebuild-mapping (g2p,
rebuild-mapping,>begin). Only the columns some member has. Exit status 1 when a LOG has no stamps.
"""
import re
import sys

COLUMNS = [("gate>begin", "gate"), ("begin>p2g", "k_begin"), ("p2g>barrier", "P2G"),
           ("p2g>grid", "P2G+wait"), ("published>passed", "wait"), ("grid>g2p", "grid"),
           ("g2p>begin", "G2P"), ("g2p>gate", "G2P>gate"), ("g2p, rebuild-mapping,>begin", "rebuild")]
MEMBER = re.compile(r"gpu stamps, device (\d+) \(member (\d+) of (\d+)\)")
PAIR = re.compile(r"\s([a-z0-9, -]+>[a-z0-9-]+) ([0-9.]+) \(")


def members(text):
    rows = []
    for line in text.splitlines():
        m = MEMBER.search(line)
        if not m:
            continue
        pairs = {k.strip(): float(v) for k, v in PAIR.findall(line[m.end():])}
        rows.append((int(m.group(2)), int(m.group(1)), pairs))
    return sorted(rows)


def main(argv):
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    rc = 0
    for path in argv:
        text = open(path, errors="replace").read()
        rows = members(text)
        if not rows:
            print("%s: no stamps" % path)
            rc = 1
            continue
        cols = [(k, name) for k, name in COLUMNS if any(k in p for _, _, p in rows)]
        print(path)
        print("   %-6s %-6s %s" % ("member", "device", " ".join("%9s" % name for _, name in cols)))
        for me, dev, p in rows:
            print("   %-6d %-6d %s" % (me, dev, " ".join("%9s" % ("%.1f" % p[k] if k in p else "-") for k, _ in cols)))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

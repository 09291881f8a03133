#!/usr/bin/env python3
"""check_trace_frames - tools/trace_summary.py --frames on a real trace: two CPU ranks run a small
scene for 3 frames with DRIFT_TRACE=1 (argv: mpiexec, drift, scene, output folder), and the
per-frame table must account for every rank's traced time exactly once:
  - one row per frame (3);
  - per rank, the rows' totals sum to the span from its first trace line to its last (0.05 ms,
    the table's rounding);
  - the rank rebuild-mappings of the first frame (the start's) land in the rebuild column, and
    the steps in the step column.
"""
import os
import re
import subprocess
import sys

mpiexec, drift, scene, out = sys.argv[1:5]
tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "trace_summary.py")
log = os.path.join(out, "trace.log")
os.makedirs(out, exist_ok=True)
env = dict(os.environ, DRIFT_TRACE="1")
with open(log, "w") as err:
    run = subprocess.run([mpiexec, "-n", "2", "--oversubscribe", drift, "run", scene, "--backend", "cpu", "--frames", "3",
                          "--out", out, "--force"], env=env, stdout=subprocess.DEVNULL, stderr=err)
if run.returncode != 0:
    sys.exit(f"FAIL: drift run exited {run.returncode} (log: {log})")
table = subprocess.run([sys.executable, tool, "--frames", log], capture_output=True, text=True)
print(table.stdout, end="")
if table.returncode != 0:
    sys.exit(f"FAIL: trace_summary.py --frames exited {table.returncode}: {table.stderr.strip()}")

span = {}
for line in open(log, errors="replace"):
    m = re.match(r"^trace\s+([0-9.]+) ms r(\d+): ", line)
    if m:
        t, r = float(m.group(1)), int(m.group(2))
        lo, hi = span.get(r, (t, t))
        span[r] = (min(lo, t), max(hi, t))
rows = [l for l in table.stdout.splitlines()[1:] if l.strip()]
fails = []
if len(rows) != 3:
    fails.append(f"{len(rows)} frame rows, expected 3")
cells = [re.findall(r"r(\d+):\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)", row) for row in rows]
for r, (lo, hi) in sorted(span.items()):
    total = sum(float(c[5]) for row in cells for c in row if int(c[0]) == r)
    if abs(total - (hi - lo)) > 0.05 * len(rows) + 1e-9:
        fails.append(f"rank {r}: the frames sum to {total:.2f} ms, its trace spans {hi - lo:.2f} ms")
    first = [c for c in cells[0] if int(c[0]) == r] if cells else []
    if not first or float(first[0][3]) <= 0 or float(first[0][1]) <= 0:
        fails.append(f"rank {r}: frame 1 shows no step or no rebuild-mapping time: {first}")
if len(span) != 2:
    fails.append(f"trace lines of {len(span)} ranks, expected 2")
for f in fails:
    print("FAIL:", f)
sys.exit(1 if fails else 0)

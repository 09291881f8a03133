#!/usr/bin/env python3
"""plot_scaling.py - gather the CSVs of a scaling study into one table and draw it.

    plot_scaling.py --mode weak|strong --out DIR [--title T] [--xlabel X] NODES:RANKS:CSV [...]

Each CSV is one `drift bench --csv` file (one scene, one row) run on NODES nodes with RANKS ranks.
Writes DIR/scaling.csv, one row per run sorted by node count, with the columns nodes, ranks,
particles, ms_per_frame, particle_steps_per_s, efficiency, then the other fields of the bench
CSV; then draws DIR/scaling.png (parallel efficiency and ms per frame against nodes) with
matplotlib. Efficiency is against the smallest node count n0 with time t0 per frame:
strong scaling (the same scene everywhere) n0 t0 / (n tn), weak scaling (the scene grows with
the node count) t0 / tn; 1 is perfect. jobs/scaling.sh calls it. Exit status: 0, 1 when a CSV
is missing or malformed, 3 when matplotlib is missing (scaling.csv is written all the same).
"""
import argparse
import csv
import os
import sys

FIRST = ["nodes", "ranks", "particles", "ms_per_frame", "particle_steps_per_s", "efficiency"]


def fail(msg, status=1):
    print(f"plot_scaling.py: {msg}", file=sys.stderr)
    sys.exit(status)


def read_run(spec):
    try:
        nodes, ranks, path = spec.split(":", 2)
        nodes, ranks = int(nodes), int(ranks)
    except ValueError:
        fail(f"'{spec}' is not NODES:RANKS:CSV")
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    if len(rows) != 1:
        fail(f"{path}: {len(rows)} data rows, expected 1 (one scene per bench run)")
    row = rows[0]
    for key in ("particles", "ms_per_frame", "particle_steps_per_s"):
        try:
            float(row.get(key) or "")
        except ValueError:
            fail(f"{path}: field {key} is '{row.get(key)}', not a number")
    if float(row["ms_per_frame"]) <= 0:
        fail(f"{path}: ms_per_frame is {row['ms_per_frame']}")
    return nodes, ranks, row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("weak", "strong"), required=True)
    ap.add_argument("--out", required=True, help="folder for scaling.csv and scaling.png")
    ap.add_argument("--title", default="", help="the plot's title (default: drift MODE scaling: CASE, BACKEND)")
    ap.add_argument("--xlabel", default="nodes", help="the x axis (scaling.sh --local: ranks)")
    ap.add_argument("runs", nargs="+", metavar="NODES:RANKS:CSV")
    a = ap.parse_args()

    runs = sorted((read_run(s) for s in a.runs), key=lambda r: r[0])
    n0, t0 = runs[0][0], float(runs[0][2]["ms_per_frame"])
    rest = [k for k in runs[0][2].keys() if k not in FIRST]
    table = []
    for nodes, ranks, row in runs:
        t = float(row["ms_per_frame"])
        eff = n0 * t0 / (nodes * t) if a.mode == "strong" else t0 / t
        out = {"nodes": nodes, "ranks": ranks, "efficiency": f"{eff:.4f}"}
        out.update({k: row.get(k, "") for k in FIRST[2:5] + rest})
        table.append(out)

    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "scaling.csv")
    with open(path + ".tmp", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIRST + rest, lineterminator="\n")
        w.writeheader()
        w.writerows(table)
    os.replace(path + ".tmp", path)
    print(f"plot_scaling.py: wrote {path}", file=sys.stderr)

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail(f"matplotlib is missing ({sys.executable}): no scaling.png (Debian: apt-get install python3-matplotlib)", 3)

    nodes = [r["nodes"] for r in table]
    eff = [float(r["efficiency"]) for r in table]
    ms = [float(r["ms_per_frame"]) for r in table]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(nodes, eff, "o-", label="measured")
    ax1.axhline(1.0, color="gray", linestyle="--", linewidth=1, label="ideal")
    ax1.set_xlabel(a.xlabel)
    ax1.set_ylabel(f"{a.mode} scaling efficiency")
    ax1.set_ylim(0, max(1.1, max(eff) * 1.1))
    ax1.legend()
    ax2.plot(nodes, ms, "o-", label="measured")
    if a.mode == "strong":
        ax2.plot(nodes, [t0 * n0 / n for n in nodes], "--", color="gray", linewidth=1, label="ideal")
    else:
        ax2.axhline(t0, color="gray", linestyle="--", linewidth=1, label="ideal")
    ax2.set_xlabel(a.xlabel)
    ax2.set_ylabel("ms per frame")
    ax2.legend()
    for ax in (ax1, ax2):
        if len(nodes) > 1 and nodes[-1] / nodes[0] >= 4:
            ax.set_xscale("log", base=2)
        ax.set_xticks(nodes)
        ax.set_xticklabels([str(n) for n in nodes])
        ax.grid(True, alpha=0.3)
    scene = table[0].get("case", "")
    fig.suptitle(a.title or f"drift {a.mode} scaling: {scene}, {table[0].get('backend', '')} backend")
    fig.tight_layout()
    png = os.path.join(a.out, "scaling.png")
    fig.savefig(png + ".tmp.png", dpi=100)
    os.replace(png + ".tmp.png", png)
    print(f"plot_scaling.py: wrote {png}", file=sys.stderr)


if __name__ == "__main__":
    main()

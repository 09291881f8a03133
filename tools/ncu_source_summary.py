#!/usr/bin/env python3
"""ncu_source_summary.py - where a kernel's instructions and stalls are, by source file and line.

Input: the CSV of ncu's source page for one profiled kernel, made on a GPU machine from a build
with -lineinfo (CMAKE_CUDA_FLAGS=-lineinfo), e.g.

    ncu --kernel-name "regex:^k_p2g$" --launch-skip 60 --launch-count 1 --import-source yes \\
        --section SourceCounters --section WarpStateStats --section InstructionStats -o rep \\
        build/drift bench jobs/bench/sand_blocks_l46.json --backend cuda --frames 3 --profile-frames 0
    ncu --import rep.ncu-rep --page source --csv --print-source cuda,sass > src.csv

Output: the totals, the share of stall samples and of executed warp instructions per source file,
then the TOP source lines by stall samples (docs/performance.md's tables came from this).

    tools/ncu_source_summary.py src.csv [TOP]
"""
import collections
import csv
import sys


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: ncu_source_summary.py SOURCE_PAGE.csv [TOP]")
    top = int(sys.argv[2]) if len(sys.argv) == 3 else 45
    try:
        rows = list(csv.reader(open(sys.argv[1], newline="")))
    except OSError as e:
        sys.exit(f"ncu_source_summary.py: {sys.argv[1]}: {e.strerror}")
    header = next((r for r in rows if "Instructions Executed" in r), None)
    if header is None or "Warp Stall Sampling (All Samples)" not in header:
        sys.exit(f"ncu_source_summary.py: {sys.argv[1]}: no 'Instructions Executed' and 'Warp Stall Sampling "
                 "(All Samples)' columns: not ncu's source page (--page source --csv) of a SourceCounters profile")
    i_s = header.index("Warp Stall Sampling (All Samples)")
    i_i = header.index("Instructions Executed")
    src_file = "?"
    lines = []
    by_file = collections.Counter()
    by_file_i = collections.Counter()
    for r in rows:
        if not r:
            continue
        if r[0] == "File Path" and len(r) > 1:  # the source file the following rows belong to
            src_file = r[1].split("/")[-1]
            continue
        if not r[0].isdigit():  # headers, the SASS half of the page
            continue
        try:
            s, i = int(r[i_s] or 0), int(r[i_i] or 0)
        except (ValueError, IndexError):
            continue
        lines.append((s, i, src_file, int(r[0]), r[1].strip()[:90] if len(r) > 1 else ""))
        by_file[src_file] += s
        by_file_i[src_file] += i
    tot_s = sum(by_file.values())
    tot_i = sum(by_file_i.values())
    if not tot_s or not tot_i:
        sys.exit(f"ncu_source_summary.py: {sys.argv[1]}: no samples or no instructions by source line "
                 "(was the build made with -lineinfo?)")
    print(f"stall samples {tot_s}, warp instructions {tot_i}")
    for f, s in by_file.most_common():
        print(f"  {f:28s} samples {100 * s / tot_s:5.1f}%  instructions {100 * by_file_i[f] / tot_i:5.1f}%")
    lines.sort(reverse=True)
    for s, i, f, n, text in lines[:top]:
        print(f"{100 * s / tot_s:5.1f}% {100 * i / tot_i:5.1f}%i {f}:{n} {text}")


if __name__ == "__main__":
    main()

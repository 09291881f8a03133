#!/usr/bin/env python3
"""Sums a DRIFT_TRACE=1 log (log.h's log_trace lines) by event, per rank.

    DRIFT_TRACE=1 mpirun -n 2 build/drift bench SCENE --backend cuda --gpus 1 2> trace.log
    tools/trace_summary.py trace.log
    tools/trace_summary.py --tail 0.33 trace.log    (only each rank's last third of its traced time)
    tools/trace_summary.py --frames trace.log       (per frame and rank: steps, vote, rebuild-mappings)

A trace line is "trace   T ms rR: MESSAGE". The time from one line of a rank to its next line is
charged to the first line's event: its message with the numbers taken out ("step 12: p2g"
becomes "step #: p2g"), so that the table says, per rank, how long the host spent from each kind
of event to the next one, how often, and the share of the rank's traced time. Lines of host
threads other than the rank's own (the island's) interleave with it; their events count like any
other, so read their rows as "time until the next event of any thread".

--frames splits each rank's time by frame (a frame starts at its "step 0: p2g") into three parts:
  step     from a step's "p2g" to its "vote": the step's phases and the exchange's wait;
  vote     from "vote" to the next step or rebuild-mapping: the wait for the other ranks' vote;
  rebuild  from a rebuild-mapping's first line ("redistribute: ...", "exchange setup: ...") to the
           next step: the load balance, migration, the rebuild itself, and the exchange set-up
           where it runs before a step (at the start; after a rank rebuild-mapping it runs while
           the device does the next step's P2G, and counts as that step's);
  end      the gap before the next frame's first step: the frame's output and progress line (it
           is charged to the frame that ends).
A rank's rebuild time above one rank's (weak_1's) is the ranks' cost of rebuilding together; its
vote time is the wait for a slower rank (the load imbalance).
"""
import argparse
import re
import sys
from collections import defaultdict

LINE = re.compile(r"^trace\s+([0-9.]+) ms r(\d+): (.*)$")


def event_of(message):
    return re.sub(r"\b\d+(\.\d+)?(e[+-]?\d+)?\b", "#", message).strip()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--tail", type=float, default=1.0,
                    help="sum only the intervals that start in the last TAIL of each rank's traced time (0 < TAIL <= 1): "
                         "the late frames, where a scene's load has changed")
    ap.add_argument("--frames", action="store_true",
                    help="per frame and rank: time in steps, in the vote and in rebuild-mappings")
    args = ap.parse_args(argv[1:])
    if not 0 < args.tail <= 1:
        print(f"--tail {args.tail}: expected 0 < TAIL <= 1", file=sys.stderr)
        return 2
    lines = []
    with open(args.log, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if m:
                lines.append((float(m.group(1)), int(m.group(2)), event_of(m.group(3))))
    if args.frames:
        return frames(args.log, lines)
    span_of = {}
    for t, rank, _ in lines:
        lo, hi = span_of.get(rank, (t, t))
        span_of[rank] = (min(lo, t), max(hi, t))
    start = {r: hi - args.tail * (hi - lo) for r, (lo, hi) in span_of.items()}
    last = {}  # rank -> (time, event)
    total = defaultdict(lambda: defaultdict(float))
    count = defaultdict(lambda: defaultdict(int))
    for t, rank, event in lines:
        if rank in last:
            t0, e0 = last[rank]
            if t0 >= start[rank]:
                total[rank][e0] += t - t0
                count[rank][e0] += 1
        last[rank] = (t, event)
    if not total:
        print(f"{args.log}: no trace lines (run with DRIFT_TRACE=1)", file=sys.stderr)
        return 1
    for rank in sorted(total):
        span = sum(total[rank].values())
        print(f"rank {rank}: {span:.1f} ms traced" + (f" (the last {100 * args.tail:.0f}%)" if args.tail < 1 else ""))
        print(f"  {'ms':>10} {'share':>7} {'count':>7} {'ms each':>9}  event (until the next)")
        for event, ms in sorted(total[rank].items(), key=lambda kv: -kv[1])[:25]:
            n = count[rank][event]
            print(f"  {ms:10.2f} {100 * ms / span:6.1f}% {n:7d} {ms / n:9.3f}  {event}")
    return 0


STEP = re.compile(r"^step (#|\d+): (.*)$")


def frames(log, lines):
    """--frames: each interval charged to the part its first line opens (see the module's text)."""
    per = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))  # rank -> frame -> part -> ms
    state = {}  # rank -> (time, part, frame, step number of the last step line)
    raw = []
    with open(log, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if m:
                raw.append((float(m.group(1)), int(m.group(2)), m.group(3)))
    if not raw:
        print(f"{log}: no trace lines (run with DRIFT_TRACE=1)", file=sys.stderr)
        return 1
    # a rank's threads (the main one, the frame writer's, the fetch's) print their lines as they
    # come, so one stamped earlier may follow: in time order, each rank's intervals partition its
    # span (none negative); a stable sort keeps a thread's own order
    raw.sort(key=lambda e: (e[1], e[0]))
    for t, rank, message in raw:
        t0, part, frame, last_step = state.get(rank, (None, "step", 0, None))
        m = STEP.match(message)
        starts = m is not None and m.group(2).startswith("p2g") and int(m.group(1)) == 0 and last_step not in (None, 0)
        if t0 is not None:  # the gap before a frame's first step: the frame's end (output, the progress line)
            per[rank][frame]["between" if starts else part] += t - t0
        if m and m.group(2).startswith("p2g"):
            k = int(m.group(1))
            if starts:
                frame += 1
            part, last_step = "step", k
        elif m and m.group(2) == "vote":
            part = "vote"
        elif message.startswith(("redistribute", "exchange setup")) and not (part == "step" and last_step is not None):
            part = "rebuild"  # an exchange set up during a step's P2G (after a rank rebuild-mapping) is the step's
        state[rank] = (t, part, frame, last_step)
    ranks = sorted(per)
    head = "".join(f" | r{r}: {'step':>6} {'vote':>6} {'rebuild':>7} {'end':>6} {'total':>7}" for r in ranks)
    print(f"frame{head}   (ms of host time; the first frame starts at the first trace line)")
    for fr in range(max(max(per[r]) for r in ranks) + 1):
        row = ""
        for r in ranks:
            d = per[r].get(fr, {})
            row += (f" | r{r}: {d.get('step', 0):6.1f} {d.get('vote', 0):6.1f} {d.get('rebuild', 0):7.1f}"
                    f" {d.get('between', 0):6.1f} {sum(d.values()):7.1f}")
        print(f"{fr + 1:5d}{row}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

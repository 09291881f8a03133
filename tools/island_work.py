#!/usr/bin/env python3
"""Usage: island_work.py FRAMES_DIR [GPUS]  (frames of one run, e.g. drift run on the CPU backend)

The island's members' P2G work, frame by frame, under the split of frame 0 (island_split: the
longest axis of the bounding box, GPUS equal counts; default 4) and under a split made again at each frame:
packets (particles of one 4x4x4-cell particle block, 32 a packet, sorted by cell) and cell groups
(distinct cells a packet: each is one segmented reduction, 27 nodes x 4 channels of atomics).
Needs python3-h5py and python3-numpy."""
import glob, os, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from packet_drift import bases, key3, load, packets, split  # noqa: E402 (the same split and sort)

d = sys.argv[1]
G = int(sys.argv[2]) if len(sys.argv) > 2 else 4
files = sorted(glob.glob(d + "/frame_*.h5"))

def work(x, dx):
    """Packets, cell groups (distinct cells a packet) and particle blocks of a fresh sort at x."""
    p = packets(x, dx)
    b = bases(x, dx)
    return int(p.max()) + 1, len(np.unique(np.c_[p, key3(b)], axis=0)), len(np.unique(key3(b >> 2)))

ids0, x0, dx = load(files[0])  # by id (load sorts)
mem0 = split(x0, G)  # member by id
print(f"{len(ids0)} particles, dx {dx}, {G} members; per member: cell groups (P2G's reductions), their max/mean and the packets' max/mean")
for f in files:
    ids, x, _ = load(f)
    assert np.array_equal(ids, ids0)
    row = []
    for name, mem in (("frame-0 split", mem0), ("split again", split(x, G))):
        w = [work(x[mem == k], dx) for k in range(G)]
        g = np.array([v[1] for v in w], float)
        p = np.array([v[0] for v in w], float)
        row.append(f"{name}: groups " + " ".join(f"{int(v):>8d}" for v in g) +
                   f" (max/mean {g.max() / g.mean():.3f}); packets max/mean {p.max() / p.mean():.3f}")
    print(f.rsplit("/", 1)[-1], "|", " | ".join(row))

#!/usr/bin/env python3
"""Usage: island_work.py FRAMES_DIR [GPUS]  (frames of one run, e.g. drift run on the CPU backend)

The island's members' P2G work, frame by frame, under the split of frame 0 (island_split: the
longest axis of the bounding box, GPUS equal counts; default 4) and under a split made again at each frame:
packets (particles of one 4x4x4-cell particle block, 32 a packet, sorted by cell) and cell groups
(distinct cells a packet: each is one segmented reduction, 27 nodes x 4 channels of atomics).
Needs python3-h5py and python3-numpy."""
import glob, sys
import h5py, numpy as np

d = sys.argv[1]
G = int(sys.argv[2]) if len(sys.argv) > 2 else 4
files = sorted(glob.glob(d + "/frame_*.h5"))

def load(f):
    with h5py.File(f, "r") as h:
        return h["particles/id"][:], h["particles/position"][:].astype(np.float64), float(h.attrs["dx"])

def split(x, ids):
    lo, hi = x.min(0), x.max(0)
    ax = 0
    for a in (1, 2):
        if hi[a] - lo[a] > hi[ax] - lo[ax]: ax = a
    order = np.argsort(x[:, ax], kind="stable")
    m = np.empty(len(ids), np.int64)
    n = len(ids)
    for k in range(G):
        m[order[n * k // G:n * (k + 1) // G]] = k
    return m

def work(x, dx):
    base = np.floor(x / dx - 0.5).astype(np.int64)
    blk = base >> 2
    cell = base & 3
    bkey = (blk[:, 0] << 42) | (blk[:, 1] << 21) | blk[:, 2]
    ckey = (cell[:, 0] << 4) | (cell[:, 1] << 2) | cell[:, 2]
    o = np.lexsort((ckey, bkey))
    b, c = bkey[o], ckey[o]
    start = np.r_[0, np.flatnonzero(b[1:] != b[:-1]) + 1]
    counts = np.diff(np.r_[start, len(b)])
    rank = np.arange(len(b)) - np.repeat(start, counts)
    chunk = rank // 32
    packets = int(np.sum((counts + 31) // 32))
    new = np.r_[True, (b[1:] != b[:-1]) | (chunk[1:] != chunk[:-1]) | (c[1:] != c[:-1])]
    return packets, int(new.sum()), len(start)

ids0, x0, dx = load(files[0])
order0 = np.argsort(ids0)
mem0 = split(x0, ids0)[order0]  # member by sorted id
ids_sorted = ids0[order0]
print(f"{len(ids0)} particles, dx {dx}, {G} members; per member: cell groups (P2G's reductions), their max/mean and the packets' max/mean")
for f in files:
    ids, x, _ = load(f)
    o = np.argsort(ids)
    ids, x = ids[o], x[o]
    assert np.array_equal(ids, ids_sorted)
    row = []
    for name, mem in (("frame-0 split", mem0), ("split again", split(x, ids))):
        w = [work(x[mem == k], dx) for k in range(G)]
        g = np.array([v[1] for v in w], float)
        p = np.array([v[0] for v in w], float)
        row.append(f"{name}: groups " + " ".join(f"{int(v):>8d}" for v in g) +
                   f" (max/mean {g.max() / g.mean():.3f}); packets max/mean {p.max() / p.mean():.3f}")
    print(f.rsplit("/", 1)[-1], "|", " | ".join(row))

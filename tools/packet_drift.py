#!/usr/bin/env python3
"""Usage: packet_drift.py FRAMES_DIR SORT_FRAME [STEPS] [GPUS]
       packet_drift.py --scene SCENE SIDE FRAMES_DIR STEPS > OUT.json

The second form writes SCENE's box bodies resized to SIDE cells about their centres (places and
velocities kept), a frame each step (time.fps = 1 / dt) for STEPS steps into FRAMES_DIR: e.g.
`packet_drift.py --scene jobs/bench/sand_blocks_l46x16.json 23 /tmp/f 120 > s.json; drift run s.json
--backend cpu; packet_drift.py /tmp/f 108 9`.

How a P2G packet's global atomics grow as its particles move across the lattice after the sort
that made it (an island's end members hold the boxes thrown across the split axis, and
their P2G does more L2 reductions). Needs frames one step apart (a scene whose fps is 1 / dt, run
on the CPU backend) and python3-h5py, python3-numpy.

Each member of the island (split as island_split splits at frame 0: the longest axis of the
bounding box, GPUS equal counts by id; default 4) makes its packets at SORT_FRAME as a
rebuild-mapping does: its particles by particle block (4 x 4 x 4 cells of their stencils' base
nodes), sorted by cell within the block, 32 a packet. For each frame SORT_FRAME + k (k = 0 ..
STEPS, default 12) it prints per member, over its packets:
  groups     distinct base cells a packet (k_p2g: one segmented reduction each, whose leader adds
             27 nodes x 4 channels to the grid by global atomics: 108 a group)
  footprint  distinct grid nodes the packet's stencils cover (what a packet would add by global
             atomics if it summed its particles' contributions node by node first, in shared
             memory: 4 channels a node; k_p2g does not, docs/performance.md's decisions)
and the atomics of each scheme (groups x 108, footprint x 4), with the members' max / mean; then
over all members the box a packet's stencils span (its cells' box, 2 nodes wider on every axis:
what k_g2p2g's box sums zero and flush, 32 nodes a pass): its mean nodes, and the share of
packets whose box holds more than 64, 96 and 128 nodes (3, 4 and 5 passes or more).
"""
import glob
import sys

try:
    import h5py
    import numpy as np
except ImportError:  # --scene needs neither
    h5py = np = None


def load(f):
    with h5py.File(f, "r") as h:
        ids = h["particles/id"][:]
        x = h["particles/position"][:].astype(np.float64)
        dx = float(h.attrs["dx"])
    o = np.argsort(ids)
    return ids[o], x[o], dx


def split(x, g):
    lo, hi = x.min(0), x.max(0)
    ax = 0
    for a in (1, 2):
        if hi[a] - lo[a] > hi[ax] - lo[ax]:
            ax = a
    order = np.argsort(x[:, ax], kind="stable")
    m = np.empty(len(x), np.int64)
    for k in range(g):
        m[order[len(x) * k // g:len(x) * (k + 1) // g]] = k
    return m


def bases(x, dx):
    return np.floor(x / dx - 0.5).astype(np.int64)


def key3(b, shift=21):
    off = 1 << (shift - 1)  # bases may be -1 at the domain's edge
    return ((b[:, 0] + off) << (2 * shift)) | ((b[:, 1] + off) << shift) | (b[:, 2] + off)


def packets(x, dx):
    """The packet of each particle (a rebuild-mapping's sort at these positions)."""
    b = bases(x, dx)
    bkey = key3(b >> 2)
    c = b & 3
    ckey = (c[:, 0] << 4) | (c[:, 1] << 2) | c[:, 2]
    o = np.lexsort((ckey, bkey))
    bk = bkey[o]
    start = np.r_[0, np.flatnonzero(bk[1:] != bk[:-1]) + 1]
    counts = np.diff(np.r_[start, len(bk)])
    rank = np.arange(len(bk)) - np.repeat(start, counts)
    first = np.repeat(np.cumsum(np.r_[0, (counts + 31) // 32])[:-1], counts)  # the block's first packet
    p = np.empty(len(x), np.int64)
    p[o] = first + rank // 32
    return p


def boxes(pk, x, dx):
    """Nodes of each packet's stencil box (its cells' box, 2 nodes wider on every axis)."""
    b = bases(x, dx)
    n = int(pk.max()) + 1
    lo = np.full((n, 3), np.iinfo(np.int64).max)
    hi = np.full((n, 3), np.iinfo(np.int64).min)
    for a in range(3):
        np.minimum.at(lo[:, a], pk, b[:, a])
        np.maximum.at(hi[:, a], pk, b[:, a])
    return np.prod(hi - lo + 3, axis=1)


def atomics(pk, x, dx):
    """Groups and footprint nodes summed over the packets, for packet ids pk at positions x."""
    pc = np.unique(np.c_[pk, bases(x, dx)], axis=0)  # (packet, base cell) once each
    # the 27 nodes of each distinct base cell: base + (0..2)^3, as keys
    d = np.array([(i, j, k) for i in range(3) for j in range(3) for k in range(3)], np.int64)
    nodes = (pc[:, None, 1:] + d[None, :, :]).reshape(-1, 3)
    pn = np.unique(np.c_[np.repeat(pc[:, 0], 27), key3(nodes)], axis=0)
    return len(pc), len(pn)


def scene(argv):
    """--scene SCENE SIDE FRAMES_DIR STEPS: the resized scene as JSON on stdout."""
    import json
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[1].strip(), file=sys.stderr)
        return 2
    s = json.load(open(argv[0]))
    side, steps = int(argv[1]), int(argv[3])
    dx, dt = s["domain"]["dx"], s["time"].get("dt")
    for b in s["bodies"]:
        if b.get("shape") != "box":
            print("packet_drift.py: %s: a body of shape %s (boxes only)" % (argv[0], b.get("shape")), file=sys.stderr)
            return 1
    if not dt:
        print("packet_drift.py: %s: time.dt missing (a frame each step needs a fixed step)" % argv[0], file=sys.stderr)
        return 1
    for b in s["bodies"]:
        lo = [round(((a + z) / 2 - side * dx / 2) / dx) * dx for a, z in zip(b["min"], b["max"])]
        b["min"], b["max"] = lo, [v + side * dx for v in lo]
    s["time"] = {"frames": steps, "fps": 1.0 / dt, "dt": dt}
    s["output"] = {"dir": argv[2], "every": 1}
    s["description"] = "%s's boxes at %d cells a side, a frame each step (tools/packet_drift.py)" % (argv[0], side)
    json.dump(s, sys.stdout, indent=1)
    print()
    return 0


def main(argv):
    if argv and argv[0] == "--scene":
        return scene(argv[1:])
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    if np is None:
        print("packet_drift.py: needs python3-h5py and python3-numpy", file=sys.stderr)
        return 1
    files = sorted(glob.glob(argv[0] + "/frame_*.h5"))
    s = int(argv[1])
    steps = int(argv[2]) if len(argv) > 2 else 12
    g = int(argv[3]) if len(argv) > 3 else 4
    if not files or s + steps >= len(files):
        print("packet_drift.py: %s holds %d frames; SORT_FRAME + STEPS = %d" % (argv[0], len(files), s + steps),
              file=sys.stderr)
        return 1
    ids0, x0, dx = load(files[0])
    mem = split(x0, g)
    _, xs, _ = load(files[s])
    pks = [packets(xs[mem == m], dx) for m in range(g)]
    print("%d particles, dx %g, %d members (frame-0 split); packets made at frame %d: %s" %
          (len(ids0), dx, g, s, ", ".join(str(int(p.max()) + 1) for p in pks)))
    print("%5s  %-44s %-44s %-40s %s" % ("frame", "groups a member (x 108 atomics)",
                                          "footprint nodes a member (x 4 atomics)",
                                          "atomics: groups / footprint, max/mean", "box: mean nodes, > 64, > 96, > 128"))
    for k in range(steps + 1):
        ids, x, _ = load(files[s + k])
        if not np.array_equal(ids, ids0):
            print("packet_drift.py: frame %d holds other particles than frame 0 (emitted or removed)" % (s + k),
                  file=sys.stderr)
            return 1
        rows = [atomics(pks[m], x[mem == m], dx) for m in range(g)]
        gr = np.array([r[0] for r in rows], float)
        fp = np.array([r[1] for r in rows], float)
        bx = np.concatenate([boxes(pks[m], x[mem == m], dx) for m in range(g)])
        print("%5d  %-44s %-44s %-40s %.1f, %.1f%%, %.1f%%, %.1f%%" %
              (s + k, " ".join("%d" % v for v in gr), " ".join("%d" % v for v in fp),
               "%.2fM / %.2fM, %.3f / %.3f" % (gr.sum() * 108 / 1e6, fp.sum() * 4 / 1e6, gr.max() / gr.mean(),
                                                 fp.max() / fp.mean()),
               bx.mean(), 100 * np.mean(bx > 64), 100 * np.mean(bx > 96), 100 * np.mean(bx > 128)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

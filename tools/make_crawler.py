#!/usr/bin/env python3
"""make_crawler.py - the animated figure of jobs/scenes/crawling_snow.json (the paper's Crawling in
Snow): a person-sized figure crawling forward on its forearms and knees, written as a sequence of
closed, consistently oriented OBJ triangle meshes with the same vertices in every frame.

    python3 tools/make_crawler.py [--out DIR] [--fps 30] [--seconds 4] [--check]

The figure is 10 closed components in one OBJ file per frame: a torso (a capsule of elliptic
section), a head, and for each arm and leg an upper and a lower segment (capsules); segments that
meet overlap at the joints. drift signs its level sets by the generalised winding number, so
overlapping closed components make one solid (inside wherever any component is). Every component
keeps its vertex layout from frame to frame (vertex i of one file is vertex i of the next), as
mesh sequences require: the vertices' motion between files is the collider's surface velocity.

Units: metres, y up, the figure crawls along +x. The origin is the snow surface under the middle
of the torso at t = 0 (the scene places it with `translation`); the figure's frame 0 is lifted
clear of the surface (its lowest point DX above it) and settles to its crawling height over the
first LOWER_TIME seconds, so no snow starts inside it.

The gait (a leopard crawl): period PERIOD, the body moves at SPEED along +x; each forearm and
knee is planted in the snow for STANCE of the period (fixed in the world while the body moves
over it), then lifted and swung forward by one stride (SPEED x PERIOD) along a half sine. The
left arm and the right leg move together, half a period from the right arm and the left leg.
Elbows follow from two-link inverse kinematics (shoulder, hand, elbow out to the side); each
knee sits at its target's height, a thigh's length from the hip, horizontally toward the target;
the shins trail behind the knees.

--check re-reads every written file and verifies: the same vertex count everywhere; every edge
shared by exactly two triangles, once in each direction (closed and consistently oriented),
per component; every component's enclosed volume positive (outward normals). Standard library
only.
"""
import argparse
import math
import os
import sys

# --- the figure (metres) ---------------------------------------------------------------------
DX = 0.0135              # the scene's cell: frame 0 stands this far above the snow
PERIOD = 1.5             # s, one gait cycle
SPEED = 0.2              # m/s, forward
STANCE = 0.55            # fraction of the period a limb is planted
LOWER_TIME = 0.6         # s, settling from frame 0's height to the crawling height
TORSO_Y = 0.10           # torso axis above the snow surface once settled (its underside 1 cm in)
TORSO = dict(back=-0.30, front=0.22, rz=0.16, ry=0.11, rx=0.12)  # along x; half-width, -depth, cap
HEAD = dict(x0=0.36, x1=0.42, dy=0.07, r=0.09)
SHOULDER = dict(x=0.20, dy=0.03, dz=0.19)
HIP = dict(x=-0.28, dy=-0.01, dz=0.09)
UPPER_ARM, FOREARM = (0.30, 0.045), (0.30, 0.04)   # length, radius
THIGH, SHIN = (0.42, 0.065), (0.40, 0.05)
HAND = dict(reach=0.65, dz=0.27, depth=-0.035, lift=0.12)   # plant ahead of the torso centre
KNEE = dict(reach=-0.56, dz=0.20, depth=-0.03, lift=0.07)   # plant behind the torso centre
# resolution of the capsules: segments around, rings per end cap
RES_TORSO, RES_HEAD, RES_LIMB = (12, 3), (10, 2), (8, 2)


def add(a, b): return (a[0] + b[0], a[1] + b[1], a[2] + b[2])
def sub(a, b): return (a[0] - b[0], a[1] - b[1], a[2] - b[2])
def mul(a, s): return (a[0] * s, a[1] * s, a[2] * s)
def dot(a, b): return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
def cross(a, b): return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])
def norm(a): return math.sqrt(dot(a, a))
def unit(a):
    n = norm(a)
    return mul(a, 1.0 / n)


def smoothstep(u):
    u = min(1.0, max(0.0, u))
    return u * u * (3 - 2 * u)


def capsule(p0, p1, radii, res, ref):
    """A closed capsule from p0 to p1: end caps are half ellipsoids. radii = (r1, r2, ra): the
    section's half-axes along e1 (ref made orthogonal to the axis) and e2 = u x e1, and the caps'
    extent along the axis. res = (segments around, rings per cap). Returns (vertices, triangles),
    triangles counter-clockwise seen from outside. The same layout for any p0, p1."""
    nseg, nh = res
    u = unit(sub(p1, p0))
    e1 = unit(sub(ref, mul(u, dot(ref, u))))
    e2 = cross(u, e1)
    r1, r2, ra = radii
    verts = [add(p0, mul(u, -ra))]
    # latitudes: cap at p0 from the pole to its equator, then the cap at p1 from its equator
    lats = [(-math.pi / 2 + k * (math.pi / 2) / nh, p0) for k in range(1, nh + 1)]
    lats += [(k * (math.pi / 2) / nh, p1) for k in range(0, nh)]
    for th, c in lats:
        ring_c = add(c, mul(u, ra * math.sin(th)))
        for s in range(nseg):
            ph = 2 * math.pi * s / nseg
            off = add(mul(e1, r1 * math.cos(th) * math.cos(ph)), mul(e2, r2 * math.cos(th) * math.sin(ph)))
            verts.append(add(ring_c, off))
    verts.append(add(p1, mul(u, ra)))
    nr = len(lats)
    top = len(verts) - 1
    ring = lambda i, s: 1 + i * nseg + (s % nseg)
    tris = []
    # (e1, e2, u) is right-handed: going around by +phi is counter-clockwise seen from +u
    for s in range(nseg):
        tris.append((0, ring(0, s + 1), ring(0, s)))
        for i in range(nr - 1):
            a, b, c, d = ring(i, s), ring(i, s + 1), ring(i + 1, s + 1), ring(i + 1, s)
            tris.append((a, b, c))
            tris.append((a, c, d))
        tris.append((top, ring(nr - 1, s), ring(nr - 1, s + 1)))
    return verts, tris


def two_link(root, target, l1, l2, pole):
    """The middle joint of a chain root-joint-target with links l1, l2, bent toward pole."""
    d = sub(target, root)
    dist = min(max(norm(d), abs(l1 - l2) + 1e-3), l1 + l2 - 1e-3)
    u = unit(d)
    a = (l1 * l1 - l2 * l2 + dist * dist) / (2 * dist)
    h = math.sqrt(max(l1 * l1 - a * a, 0.0))
    w = unit(sub(pole, mul(u, dot(pole, u))))
    return add(add(root, mul(u, a)), mul(w, h))


def limb_target(t, phase, base_x, dz, depth, lift):
    """World target of a planted limb end (hand or knee) at time t: fixed while planted, a half
    sine forward by one stride while swinging. base_x: where it plants relative to the torso
    centre at the time of planting."""
    c = t / PERIOD + phase
    n = math.floor(c)
    p = c - n
    t_plant = (n - phase) * PERIOD            # when this cycle's stance began
    x_plant = SPEED * t_plant + base_x
    if p < STANCE:
        return (x_plant, depth, dz)
    q = (p - STANCE) / (1 - STANCE)
    x = x_plant + SPEED * PERIOD * smoothstep(q)
    return (x, depth + lift * math.sin(math.pi * q), dz)


def figure(t, lower):
    """The components [(verts, tris)] at time t; lower: the height above the crawling pose."""
    xc = SPEED * t
    bob = 0.008 * math.sin(4 * math.pi * t / PERIOD)
    y = TORSO_Y + bob + lower
    parts = []
    parts.append(capsule((xc + TORSO['back'], y, 0.0), (xc + TORSO['front'], y + 0.02, 0.0),
                         (TORSO['rz'], TORSO['ry'], TORSO['rx']), RES_TORSO, (0, 0, 1)))
    nod = 0.01 * math.sin(2 * math.pi * t / PERIOD)
    parts.append(capsule((xc + HEAD['x0'], y + HEAD['dy'] + nod, 0.0), (xc + HEAD['x1'], y + HEAD['dy'] + nod + 0.01, 0.0),
                         (HEAD['r'] * 0.85, HEAD['r'], HEAD['r']), RES_HEAD, (0, 0, 1)))
    for side, arm_phase, leg_phase in ((+1, 0.0, 0.5), (-1, 0.5, 0.0)):
        sh = (xc + SHOULDER['x'], y + SHOULDER['dy'], side * SHOULDER['dz'])
        hand = limb_target(t, arm_phase, HAND['reach'], side * HAND['dz'], HAND['depth'], HAND['lift'])
        hand = (hand[0], hand[1] + lower, hand[2])
        elbow = two_link(sh, hand, UPPER_ARM[0], FOREARM[0], (0.0, 1.0, side * 0.3))
        fore = unit(sub(hand, elbow))
        wrist = add(elbow, mul(fore, FOREARM[0]))
        parts.append(capsule(sh, elbow, (UPPER_ARM[1],) * 3, RES_LIMB, (0, 1, 0)))
        parts.append(capsule(elbow, wrist, (FOREARM[1],) * 3, RES_LIMB, (0, 1, 0)))
        hip = (xc + HIP['x'], y + HIP['dy'], side * HIP['dz'])
        ktarget = limb_target(t, leg_phase, KNEE['reach'], side * KNEE['dz'], KNEE['depth'], KNEE['lift'])
        ktarget = (ktarget[0], ktarget[1] + lower, ktarget[2])
        # the knee at its target's height, along the horizontal direction to the target
        dy = max(min(ktarget[1] - hip[1], THIGH[0] - 1e-3), -(THIGH[0] - 1e-3))
        hdir = unit((ktarget[0] - hip[0], 0.0, ktarget[2] - hip[2]))
        knee = add(hip, add(mul(hdir, math.sqrt(THIGH[0] ** 2 - dy * dy)), (0.0, dy, 0.0)))
        lift = max(0.0, ktarget[1] - KNEE['depth'] - lower)
        foot = add(knee, mul(unit((-1.0, 0.15 + 1.5 * lift, side * 0.25)), SHIN[0]))
        parts.append(capsule(hip, knee, (THIGH[1],) * 3, RES_LIMB, (0, 1, 0)))
        parts.append(capsule(knee, foot, (SHIN[1],) * 3, RES_LIMB, (0, 1, 0)))
    return parts


def lowest(parts):
    return min(v[1] for vs, _ in parts for v in vs)


def write_obj(path, parts, header):
    lines = ["# " + header]
    base = 1
    faces = []
    for k, (vs, ts) in enumerate(parts):
        lines.extend("v %.5f %.5f %.5f" % v for v in vs)
        faces.append("o part%d" % k)
        faces.extend("f %d %d %d" % (a + base, b + base, c + base) for a, b, c in ts)
        base += len(vs)
    with open(path, "w") as f:
        f.write("\n".join(lines + faces) + "\n")


def read_obj(path):
    """(vertices, components): components are lists of triangles, split at 'o' lines."""
    vs, comps = [], []
    with open(path) as f:
        for line in f:
            w = line.split()
            if not w:
                continue
            if w[0] == "v":
                vs.append(tuple(float(x) for x in w[1:4]))
            elif w[0] == "o":
                comps.append([])
            elif w[0] == "f":
                comps[-1].append(tuple(int(x.split("/")[0]) - 1 for x in w[1:4]))
    return vs, comps


def check_files(paths):
    """Returns a list of problems (empty: every file closed, oriented, outward, same layout)."""
    problems, n0 = [], None
    for path in paths:
        vs, comps = read_obj(path)
        if n0 is None:
            n0 = (len(vs), [len(c) for c in comps])
        elif (len(vs), [len(c) for c in comps]) != n0:
            problems.append("%s: %d vertices / components %s, the first file %s" % (path, len(vs), [len(c) for c in comps], n0))
        for k, tris in enumerate(comps):
            edges = {}
            for a, b, c in tris:
                for e in ((a, b), (b, c), (c, a)):
                    edges[e] = edges.get(e, 0) + 1
            bad = [e for e, n in edges.items() if n != 1 or edges.get((e[1], e[0]), 0) != 1]
            if bad:
                problems.append("%s: component %d: %d edges not shared once in each direction" % (path, k, len(bad)))
            vol = sum(dot(vs[a], cross(vs[b], vs[c])) for a, b, c in tris) / 6.0
            if not vol > 0:
                problems.append("%s: component %d encloses volume %g (expected > 0: outward normals)" % (path, k, vol))
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "jobs", "scenes", "crawler"))
    ap.add_argument("--fps", type=float, default=30.0, help="mesh frames per second (default 30)")
    ap.add_argument("--seconds", type=float, default=4.0, help="length of the sequence (default 4 s)")
    ap.add_argument("--check", action="store_true", help="only check the files already in --out")
    a = ap.parse_args()
    n = int(round(a.seconds * a.fps)) + 1
    paths = [os.path.join(a.out, "crawler_%04d.obj" % k) for k in range(n)]
    if not a.check:
        os.makedirs(a.out, exist_ok=True)
        lift0 = DX - lowest(figure(0.0, 0.0))
        vmax, prev = 0.0, None
        lo, hi = [1e9] * 3, [-1e9] * 3
        for k in range(n):
            t = k / a.fps
            parts = figure(t, lift0 * (1 - smoothstep(t / LOWER_TIME)))
            flat = [v for vs, _ in parts for v in vs]
            for v in flat:
                lo = [min(lo[i], v[i]) for i in range(3)]
                hi = [max(hi[i], v[i]) for i in range(3)]
            if prev:
                vmax = max(vmax, max(norm(sub(p, q)) for p, q in zip(flat, prev)) * a.fps)
            prev = flat
            write_obj(paths[k], parts, "crawler frame %d of %d, t = %.4f s (tools/make_crawler.py, %g fps)" % (k, n, t, a.fps))
        print("%d files in %s; %d vertices, %d triangles each; frame 0 lifted %.3f m; bounds [%.3f %.3f %.3f] - "
              "[%.3f %.3f %.3f] m; fastest vertex %.2f m/s (%.4f m a frame)"
              % (n, a.out, len(flat), sum(len(ts) for _, ts in parts), lift0, *lo, *hi, vmax, vmax / a.fps))
    problems = check_files(paths)
    for p in problems[:20]:
        print("FAIL:", p)
    if problems:
        return 1
    print("checked %d files: same vertices, every component closed, consistently oriented, outward" % len(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())

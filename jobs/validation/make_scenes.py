#!/usr/bin/env python3
"""Writes the validation scenes of docs/validation.md (python3, standard library only):

  jobs/validation/SCALE/column_aA.json   quasi-2D granular column collapses, aspect ratio a = H0/L0,
                                         sand with the cone's default fit ("compression")
  jobs/validation/SCALE/column_aA_ps.json  the same columns with "fit": "plane_strain" (the cone
                                         matching Mohr-Coulomb in plane strain)
  jobs/validation/SCALE/column_aA_ps_gate.json, column_aA_ps_walls.json  the short ones (a <= 2)
                                         released by a lifted gate, or in a channel with
                                         frictional side walls
  jobs/validation/SCALE/column_aA_lube.json  the plane-strain columns with the friction angle
                                         quoted for Lube et al.'s fine quartz sand (LUBE_PHI)
                                         and a real sand's stiffness (LUBE_E)
  jobs/validation/SCALE/dam_break.json   Martin & Moyce (1952)'s water column, n^2 = H/a = 2
  jobs/validation/SCALE/dam_break_water.json, dam_break_glycerine.json  the same column with
                                         water's viscosity and a glycerine-like one (DAM_VISCOSITY)
  jobs/validation/SCALE/beam_csm3.json   Turek & Hron (2006)'s CSM3: an elastic beam fixed to a
                                         cylinder, swinging under gravity
  jobs/validation/cases.csv              one row per scene: what jobs/validation/run.sh runs

for SCALE = coarse (the CPU runs and the CTest test) and paper (the finer runs for a GPU). The two
scales differ only in the cell size dx (and the frames written): same geometry, same materials,
same walls, same times.

Quasi-2D: the scenes are slabs two cells thick in z between slip walls. A face acts on the node
layers within 2.5 dx of it (docs/scene-format.md, boundary), so the slab's own nodes stand three
cells from each z face; the slip walls keep every z velocity on the slab's wall nodes at zero,
which makes the flow plane (no z motion) with a free-slip (frictionless) side wall.

Run again after editing; the output is deterministic (the committed files are its output).
"""
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))
G = 9.81

# The column: L0 fixed, H0 = a L0, against the x- wall, on a rough floor.
L0 = 0.1  # m
ASPECTS = [0.5, 1, 2, 4, 8]
PHI = 30.0  # degrees: internal friction angle of a common lab sand / glass beads
RHO_SAND = 1600.0
# Stiffness: E / (rho g H0) = 100 for every a, so that the column's elastic settling under its own
# weight is the same small strain (about 1%) for every a, and the wave speed (which sets the step)
# is no larger than it must be.
E_OVER_RHO_G_H0 = 100.0
# The floor is rough: its Coulomb friction is tan phi of the column's sand (basal friction =
# internal friction, as for a floor with grains glued on).
# The drucker_prager cone's Mohr-Coulomb match (docs/scene-format.md): every column is written with
# each fit, the case name taking the suffix ("compression" is drift's default).
FITS = {"compression": "", "plane_strain": "_ps"}
# Two parts of the laboratory's setup the quasi-2D slab leaves out (docs/validation-columns.md, "Why the
# short columns overshoot"), each written for the short columns with the plane-strain fit, where
# the runouts overshoot (case suffix _ps_gate, _ps_walls). Neither figure was read in Lube et
# al. (2005): they are a hand's quick pull and a common sand on acrylic, stated as assumptions.
SETUP_ASPECTS = [0.5, 1, 2]
# "gate": the column is held by a smooth gate (a box collider against its free face) lifted at
# GATE_SPEED, the way a laboratory column is released, instead of the whole face at once.
GATE_SPEED = 1.0  # m/s
# "walls": a channel CHANNEL_W wide between walls with Coulomb friction WALL_FRICTION (tan 20 deg),
# in place of the slab's frictionless z walls.
CHANNEL_W = L0
WALL_FRICTION = math.tan(math.radians(20.0))
# "lube" (case suffix _lube, every a, plane-strain fit): the sand and the floor at the angle of
# repose quoted for Lube et al. (2005)'s fine quartz sand (their Tables I and II as a public
# project's test quotes them; the paper itself was not read: docs/validation-columns.md, "The
# experiment's figures"). The floor keeps basal friction = internal friction: the same quote has a
# layer of grains settle on the floor, the flow running over it. (A sticky floor, the other reading
# of that quote, gives runouts within 8% of these; docs/validation-columns.md, "The floor, the stiffness
# and the sand's strength".)
LUBE_PHI = 29.5  # degrees
# The "lube" sand's Young's modulus: a real sand's, the same for every a (10 MPa, the figure of
# Fern & Soga's MPM column collapses, Acta Geotech. 11, 659, 2016, Table 1, as quoted in the
# public test cited in docs/validation.md; not read there). E_OVER_RHO_G_H0's sand settles 1% at
# rest but is too soft for the collapse: the falling sand meets the floor at up to sqrt(2 g H0),
# which against its constrained wave speed (11.6 sqrt(g H0) at 100 rho g H0, nu 0.3) is an elastic
# compression of about 12%, and the cone has no cap, so what the impact stores elastically can come
# back as spreading (the likely mechanism, not measured apart). At 10 MPa that strain is 1% (a = 0.5) to 4% (a = 8); the runouts it changes
# are measured in docs/validation-columns.md, "The floor, the stiffness and the sand's strength" (14-19%
# shorter at 10 cells across L0 for a <= 4, an effect that fades as the cell shrinks). The step is
# the elastic wave's: 3 (a = 8) to 11 (a = 0.5) times the steps of E_OVER_RHO_G_H0.
LUBE_E = 10.0e6  # Pa

# The dam break: Martin & Moyce 1952, the a = 2.25 in column with n^2 = 2 (height 2a).
A_DAM = 0.05715  # m (2.25 in)
BULK = 1.0e5  # Pa: sound speed sqrt(K gamma / rho) = 26 m/s, about 12 x the front speed
T_DAM = 6.0  # run to T = t sqrt(2 g / a) = 6 (Z about 8)
# The same column with a viscosity (weakly_compressible's `viscosity`, Pa s): water's, and a
# glycerine-like liquid 1400 times as viscous (a sensitivity: Martin & Moyce have no such data).
DAM_VISCOSITY = (("_water", 1.0e-3), ("_glycerine", 1.4))

# The elastic beam: Turek & Hron (2006), CSM3. A beam 0.35 m long from where it meets a rigid
# cylinder (centre (0.2, 0.2) m, radius 0.05 m) to its tip, point A = (0.6, 0.2) m, and H_BEAM
# thick, released from rest, straight, under gravity G_BEAM along -y. Their material is
# St. Venant-Kirchhoff with rho 1000 kg/m^3, nu 0.4, mu 0.5e6 Pa, i.e. E = 2 mu (1 + nu) = 1.4e6 Pa;
# drift's fixed_corotated with the same E and nu has the same Lame parameters (mu 0.5e6, lambda
# 2e6 Pa) and so the same small-strain response (docs/validation.md: the beam's strains are a few
# per cent at most).
CYL_C, CYL_R = (0.2, 0.2), 0.05
BEAM_TIP_X, H_BEAM = 0.6, 0.02
RHO_BEAM, E_BEAM, NU_BEAM, G_BEAM = 1000.0, 1.4e6, 0.4, 2.0
T_BEAM = 3.0  # s: about 3.3 periods of the reference's 1.0995 Hz
FPS_BEAM = 100  # frames a second: about 90 samples a period for the tip's extrema

SCALES = {
    # cells across L0 (column), across a (dam break), across the beam's thickness (beam)
    "coarse": {"column": 10, "dam": 16, "beam": 4, "frames": 40, "dam_frames": 60},
    "paper": {"column": 64, "dam": 96, "beam": 16, "frames": 40, "dam_frames": 60},
}


def runout_law(a):
    """Lube et al. 2005 (2D): (L_inf - L0)/L0; the larger of the two branches (domain sizing)."""
    return max(1.2 * a, 1.9 * a ** (2.0 / 3.0))


def fmt(v):
    return float(f"{v:.9g}")


def column(a, n_cells, frames, fit, setup=None, phi=PHI, youngs=None):
    dx = L0 / n_cells
    h0 = a * L0
    x0 = y0 = 3 * dx  # wall-side face and floor of the column: clear of the wall node layers
    z0 = 3 * dx
    lx = x0 + 1.5 * L0 * (1 + runout_law(a)) + 3 * dx
    ly = y0 + 1.1 * h0 + 3 * dx
    lz = 8 * dx
    t_end = 6.0 * math.sqrt(max(h0, L0) / G)  # Lube et al.: the flow stops by about 3 sqrt(H0/g)
    e = youngs if youngs is not None else E_OVER_RHO_G_H0 * RHO_SAND * G * h0
    scene = {
        "description": f"Quasi-2D granular column collapse, a = H0/L0 = {a:g} (L0 = {L0:g} m, H0 = {h0:g} m), "
                       f"{n_cells} cells across L0; sand phi = {phi:g} deg (cone fit {fit}) on a rough floor (friction tan phi) "
                       f"between slip walls. Compared with Lube et al. 2005 in docs/validation.md; written by "
                       f"jobs/validation/make_scenes.py.",
        "domain": {"min": [0, 0, 0], "max": [fmt(lx), fmt(ly), fmt(lz)], "dx": fmt(dx)},
        "time": {"frames": frames, "fps": fmt(frames / t_end), "cfl": 0.5},
        "materials": {
            "sand": {"model": "drucker_prager", "density": RHO_SAND, "youngs_modulus": fmt(e),
                     "poisson_ratio": 0.3, "friction_angle": phi, "fit": fit}
        },
        "bodies": [{"shape": "box", "min": [fmt(x0), fmt(y0), fmt(z0)],
                    "max": [fmt(x0 + L0), fmt(y0 + h0), fmt(z0 + 2 * dx)], "material": "sand", "ppc": 8}],
        "boundary": {"type": "slip", "y-": {"type": "separate", "friction": fmt(math.tan(math.radians(phi)))},
                     "y+": {"type": "separate"}},
    }
    if setup == "gate":
        # Standing on the floor against the free face x0 + L0, two cells thick, higher than the
        # domain, across z; lifted until its foot clears the column's top. A collider acts on the
        # nodes closer than half a cell, so before the lift it holds the face exactly.
        lift = y0 + h0 + 2 * dx
        scene["colliders"] = [{"shape": "box", "min": [fmt(x0 + L0), 0, fmt(-lz)],
                               "max": [fmt(x0 + L0 + 2 * dx), fmt(2 * ly), fmt(2 * lz)], "type": "separate",
                               "motion": [{"time": 0}, {"time": fmt(lift / GATE_SPEED), "translation": [0, fmt(lift), 0]}]}]
        scene["description"] = scene["description"].replace(
            "between slip walls.", f"between slip walls, released by a smooth gate lifted at {GATE_SPEED:g} m/s.")
    elif setup == "walls":
        # The channel's walls stand where the slab's do, three cells outside the material (the
        # face holds the node layers within 2.5 dx): material CHANNEL_W wide in z.
        scene["domain"]["max"][2] = fmt(z0 + CHANNEL_W + 3 * dx)
        scene["bodies"][0]["max"][2] = fmt(z0 + CHANNEL_W)
        for face in ("z-", "z+"):
            scene["boundary"][face] = {"type": "separate", "friction": fmt(WALL_FRICTION)}
        scene["description"] = scene["description"].replace(
            "Quasi-2D granular column collapse", "Granular column collapse in a channel").replace(
            "between slip walls.", f"in a channel {CHANNEL_W:g} m wide between walls of friction tan 20 deg.")
    return scene, t_end, h0


def dam_break(n_cells, frames, viscosity=0.0):
    """The dam break; viscosity (Pa s) > 0: the weakly compressible water with that dynamic viscosity."""
    dx = A_DAM / n_cells
    h = 2 * A_DAM
    x0 = y0 = z0 = 3 * dx
    lx = x0 + 11 * A_DAM + 3 * dx
    ly = y0 + 1.25 * h + 3 * dx
    lz = 8 * dx
    t_end = T_DAM / math.sqrt(2 * G / A_DAM)
    water = {"model": "weakly_compressible", "density": 1000, "bulk_modulus": BULK, "gamma": 7}
    if viscosity > 0:
        water["viscosity"] = viscosity
    liquid = f"a liquid of viscosity {viscosity:g} Pa s" if viscosity > 0 else "a water"
    return {
        "description": f"Martin & Moyce (1952) dam break: {liquid} column a = {A_DAM:g} m wide and 2a high "
                       f"(n^2 = 2) in a quasi-2D slab, {n_cells} cells across a, run to T = t sqrt(2g/a) = "
                       f"{T_DAM:g}. Compared in docs/validation.md; written by jobs/validation/make_scenes.py.",
        "domain": {"min": [0, 0, 0], "max": [fmt(lx), fmt(ly), fmt(lz)], "dx": fmt(dx)},
        "time": {"frames": frames, "fps": fmt(frames / t_end), "cfl": 0.4},
        "materials": {"water": water},
        "bodies": [{"shape": "box", "min": [fmt(x0), fmt(y0), fmt(z0)],
                    "max": [fmt(x0 + A_DAM), fmt(y0 + h), fmt(z0 + 2 * dx)], "material": "water", "ppc": 8}],
        "boundary": {"type": "slip", "y-": {"type": "separate"}, "y+": {"type": "separate"}},
    }, t_end, h


def beam(n_cells):
    """CSM3 with n_cells across the beam's thickness.

    The clamp: a static sticky cylinder collider, Turek & Hron's rigid cylinder, and the beam's
    particles start inside it (from x = 0.225, half way to its centre), so that the beam's end is
    held across its whole thickness as a clamp holds it. A sticky collider holds the grid nodes
    within half a cell outside its surface; with the grid's nodes on x = 0.25 (the domain starts at
    x = 0.15, a whole number of cells for every dx here), the last held node across the beam's
    thickness stands at x = 0.25, where the reference's beam leaves the cylinder (x = 0.249 at its
    faces, 0.25 on its axis): the free length is the reference's 0.35 m.
    Plane strain, as the reference's 2D computation: a slab one cell thick in z, in a domain five
    cells deep between slip walls. A face acts on the node layers within 2.5 dx of it, so the z-
    face holds the layers z = 0, dx, 2 dx and the z+ face 3 dx, 4 dx, 5 dx: every node's z velocity
    is zero and the slab cannot thicken or thin (the other validation scenes' slab, two cells
    thick in eight, keeps three free node layers in z, which let a bent beam's slab change its
    thickness, partly plane stress: at 4 cells across, the first swing went 5 % deeper).
    """
    dx = H_BEAM / n_cells
    z0 = 2 * dx
    y0 = CYL_C[1] - H_BEAM / 2
    # The domain: the cylinder and the beam's whole swing (the tip goes down to y = 0.07 and the
    # beam's lower face to about 0.06), every face more than 3 dx from the material.
    frames = int(round(T_BEAM * FPS_BEAM))
    return {
        "description": f"Turek & Hron (2006) CSM3: an elastic beam ({BEAM_TIP_X - 0.25:g} m x {H_BEAM:g} m) fixed to a "
                       f"rigid cylinder, swinging under gravity {G_BEAM:g} m/s^2; {n_cells} cells across the beam, a "
                       f"plane-strain slab. Point A = ({BEAM_TIP_X:g}, {CYL_C[1]:g}) m. Compared in docs/validation.md; "
                       f"written by jobs/validation/make_scenes.py.",
        "domain": {"min": [0.15, 0, 0], "max": [0.66, 0.26, fmt(5 * dx)], "dx": fmt(dx)},
        "time": {"frames": frames, "fps": FPS_BEAM, "cfl": 0.5},
        "gravity": [0, -G_BEAM, 0],
        "materials": {"beam": {"model": "fixed_corotated", "density": RHO_BEAM, "youngs_modulus": E_BEAM,
                               "poisson_ratio": NU_BEAM}},
        "bodies": [{"shape": "box", "min": [fmt(CYL_C[0] + CYL_R / 2), fmt(y0), fmt(z0)],
                    "max": [BEAM_TIP_X, fmt(y0 + H_BEAM), fmt(z0 + dx)], "material": "beam", "ppc": 8}],
        "boundary": {"type": "slip"},
        "colliders": [{"shape": "cylinder", "center": [CYL_C[0], CYL_C[1], fmt(2.5 * dx)], "axis": [0, 0, 1],
                       "radius": CYL_R, "height": 1, "type": "sticky"}],
        "output": {"fields": ["position", "id"]},
    }, T_BEAM, dx


def dump(obj, path):
    """JSON with the short arrays on one line (the style of jobs/scenes/)."""
    def enc(v, ind):
        pad = "  " * ind
        if isinstance(v, dict):
            items = [f'{pad}  "{k}": {enc(x, ind + 1)}' for k, x in v.items()]
            return "{\n" + ",\n".join(items) + "\n" + pad + "}"
        if isinstance(v, list):
            if all(not isinstance(x, (dict, list)) for x in v):
                return "[" + ", ".join(enc(x, ind) for x in v) + "]"
            return "[\n" + ",\n".join(pad + "  " + enc(x, ind + 1) for x in v) + "\n" + pad + "]"
        if isinstance(v, str):
            return '"' + v.replace('\\', '\\\\').replace('"', '\\"') + '"'
        if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
            return str(int(v))
        return repr(v)
    with open(path, "w") as f:
        f.write(enc(obj, 0) + "\n")


def main():
    rows = ["scale,case,kind,scene,a,L0,H0,t_end,dx"]
    for scale, s in SCALES.items():
        os.makedirs(os.path.join(HERE, scale), exist_ok=True)
        for fit, suffix in FITS.items():
            for a in ASPECTS:
                scene, t_end, h0 = column(a, s["column"], s["frames"], fit)
                name = f"column_a{a:g}{suffix}"
                rel = f"{scale}/{name}.json"
                dump(scene, os.path.join(HERE, rel))
                rows.append(f"{scale},{name},column,{rel},{a:g},{L0:g},{h0:g},{t_end:.6g},{L0 / s['column']:.9g}")
        for setup in ("gate", "walls"):
            for a in SETUP_ASPECTS:
                scene, t_end, h0 = column(a, s["column"], s["frames"], "plane_strain", setup)
                name = f"column_a{a:g}_ps_{setup}"
                rel = f"{scale}/{name}.json"
                dump(scene, os.path.join(HERE, rel))
                rows.append(f"{scale},{name},column,{rel},{a:g},{L0:g},{h0:g},{t_end:.6g},{L0 / s['column']:.9g}")
        for a in ASPECTS:
            scene, t_end, h0 = column(a, s["column"], s["frames"], "plane_strain", phi=LUBE_PHI, youngs=LUBE_E)
            scene["description"] = scene["description"].replace(
                f"sand phi = {LUBE_PHI:g} deg", f"sand phi = {LUBE_PHI:g} deg (the angle of repose quoted for Lube et "
                                                f"al.'s fine quartz sand), E = {LUBE_E / 1e6:g} MPa (a real sand's)")
            name = f"column_a{a:g}_lube"
            rel = f"{scale}/{name}.json"
            dump(scene, os.path.join(HERE, rel))
            rows.append(f"{scale},{name},column,{rel},{a:g},{L0:g},{h0:g},{t_end:.6g},{L0 / s['column']:.9g}")
        for suffix, mu in (("", 0.0),) + DAM_VISCOSITY:
            scene, t_end, h = dam_break(s["dam"], s["dam_frames"], mu)
            name = f"dam_break{suffix}"
            rel = f"{scale}/{name}.json"
            dump(scene, os.path.join(HERE, rel))
            rows.append(f"{scale},{name},dam,{rel},2,{A_DAM:g},{h:g},{t_end:.6g},{A_DAM / s['dam']:.9g}")
        scene, t_end, dx = beam(s["beam"])
        rel = f"{scale}/beam_csm3.json"
        dump(scene, os.path.join(HERE, rel))
        # a: the beam's length over its thickness; L0: its length; H0: its thickness
        rows.append(f"{scale},beam_csm3,beam,{rel},{(BEAM_TIP_X - 0.25) / H_BEAM:g},{BEAM_TIP_X - 0.25:g},{H_BEAM:g},"
                    f"{t_end:.6g},{dx:.9g}")
    with open(os.path.join(HERE, "cases.csv"), "w") as f:
        f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()

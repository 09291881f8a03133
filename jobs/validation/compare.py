#!/usr/bin/env python3
"""Compares the measured validation runs with the published laboratory figures (docs/validation.md).

  compare.py --scale coarse|paper --dir DIR [--check]

Reads jobs/validation/cases.csv and DIR/CASE.csv (drift_front's output, one row per frame; the
beam's: drift_probe's), writes DIR/columns.csv, DIR/CASE_front.csv for each dam break (dam_break,
dam_break_water, dam_break_glycerine), DIR/beam_csm3_cycles.csv, DIR/summary.md and, where
matplotlib is installed, DIR/columns.png and DIR/dam_break.png. Cases without a measurement in DIR
are left out.
--check also tests the figures against the tolerances of the CTest test `validation_coarse`
(CELLS and SCATTER below, justified in docs/validation.md) and exits 1 when one is out of them:
the column's runout and final height within the tolerance of Lube et al.'s laws; the dam break's
front no further behind Martin & Moyce's than the tolerance and not ahead of Ritter's, for the
inviscid water and water's viscosity (the glycerine-like liquid is a sensitivity: Martin & Moyce
have no data for it); where the inviscid run is in DIR too, water's front within a cell of it at
every laboratory point and the glycerine-like one's behind it by a cell or more from T = 1 on,
the lag growing. (The beam has its own test, csm3.py --check.)

Published references (full citations in docs/validation.md, the columns' in docs/validation-columns.md):
- Column, 2D (Lube, Huppert, Sparks & Freundt 2005, Phys. Rev. E 72, 041301):
  runout (L_inf - L0)/L0 = 1.2 a for a < 1.8 and 1.9 a^(2/3) for a > 2.8 (between: a transition);
  final height H_inf/L0 = a for a < 1.15 and a^(2/5) above.
- Dam break (Martin & Moyce 1952, Phil. Trans. R. Soc. A 244, 312-324, the a = 2.25 in column with
  n^2 = 2, their figure 3): front Z = x/a against T = t sqrt(2g/a), the points as digitised in
  PySPH (pysph/examples/db_exp_data.py, mm_data_2; the a = 1.125 in column's, mm_data_1, are
  plotted too). Ritter's (1892) shallow-water front,
  Z = 1 + 2 T for n^2 = 2, is shown as the inviscid upper bound.
- Elastic beam (Turek & Hron 2006, CSM3): point A's displacement, mean +- amplitude [frequency]
  (csm3.py).
Standard library only, matplotlib optional.
"""
import argparse
import csv
import json
import math
import os
import sys

import csm3

HERE = os.path.dirname(os.path.abspath(__file__))

# Martin & Moyce 1952, figure 3, n^2 = 2, a = 2.25 in: (T, Z), as digitised in PySPH.
MARTIN_MOYCE = [(0.832, 1.217), (1.219, 1.474), (1.997, 2.292), (2.547, 2.995), (3.345, 4.134),
                (4.034, 4.944), (4.418, 5.881), (5.091, 6.980), (5.685, 7.945), (6.306, 8.966),
                (6.822, 9.986), (7.439, 10.963), (8.031, 11.977), (8.633, 13.005), (9.237, 13.970)]

# The same figure, the a = 1.125 in column (plotted only: it shows the laboratory scatter).
MARTIN_MOYCE_SMALL = [(0.849, 1.245), (1.212, 1.443), (1.602, 1.884), (2.283, 2.689), (2.950, 3.728),
                      (3.598, 4.528), (3.905, 4.999), (4.592, 5.841), (4.961, 6.271), (5.316, 6.717)]

# The tolerances of --check (the CTest test validation_coarse; docs/validation.md, "The test"),
# set from the resolution and the laboratory scatter, not from the results: a figure may be off its
# published value by CELLS cells (one for the bin the front and the top are measured to, one for
# the wall, which acts on the nodes within 2.5 dx of a face and so stands somewhere within a cell)
# in units of the length it is divided by (L0 or a), plus SCATTER of the published value (the
# scatter of the laboratory points about the fitted laws, and between repeated releases).
CELLS = 2
SCATTER = 0.10
# The dam breaks' liquids: what the summary calls each case, and whether --check holds it to
# Martin & Moyce's water (the glycerine-like liquid is a sensitivity, not a validation).
DAM_LIQUIDS = {"dam_break": ("inviscid water", True), "dam_break_water": ("water, 1e-3 Pa s", True),
               "dam_break_glycerine": ("glycerine-like, 1.4 Pa s", False)}


def lube_runout(a):
    """(L_inf - L0)/L0 of Lube et al. 2005 (2D): (low, high) of the band at a; equal outside the
    transition 1.8 < a < 2.8, where the two fitted branches bound the data."""
    lin, pw = 1.2 * a, 1.9 * a ** (2.0 / 3.0)
    if a < 1.8:
        return lin, lin
    if a > 2.8:
        return pw, pw
    return min(lin, pw), max(lin, pw)


def lube_height(a):
    """H_inf/L0 of Lube et al. 2005 (2D)."""
    return a if a < 1.15 else a ** 0.4


# The column cases by the suffix of their name (make_scenes.py), in the order the tables and the
# plots list them.
VARIANTS = {
    "": 'sand with "fit": "compression" (the default)',
    "_ps": 'sand with "fit": "plane_strain"',
    "_ps_gate": '"plane_strain", released by a gate lifted at 1 m/s',
    "_ps_walls": '"plane_strain", in a channel L0 wide between side walls of friction tan 20 deg',
    "_lube": ('"plane_strain", sand and floor at 29.5 deg (the repose angle quoted for Lube et al.\'s fine sand), '
              'E = 10 MPa (a real sand\'s)'),
}


def scene_fit(path):
    """The fit of the scene's drucker_prager material ("compression" when the key is absent, as
    drift reads it)."""
    with open(path) as f:
        scene = json.load(f)
    for m in scene["materials"].values():
        if m.get("model") == "drucker_prager":
            return m.get("fit", "compression")
    raise SystemExit(f"compare.py: {path}: no drucker_prager material")


def column_row(c):
    ref = (f"{c['runout_lube_lo']:.2f}" if c["runout_lube_lo"] == c["runout_lube_hi"]
           else f"{c['runout_lube_lo']:.2f} to {c['runout_lube_hi']:.2f} (transition)")
    return (f"| {c['a']:g} | {c['runout']:.2f} | {ref} | {100 * c['runout_err']:+.0f}% | {c['height']:.2f} | "
            f"{c['height_lube']:.2f} | {100 * c['height_err']:+.0f}% | {c['creep_last_quarter']:.3f} |")


def band_error(value, lo, hi):
    """Relative distance from value to the band [lo, hi] (0 inside it), relative to the band's
    nearer end."""
    if value < lo:
        return (value - lo) / lo
    if value > hi:
        return (value - hi) / hi
    return 0.0


def read_front(path):
    rows = []
    with open(path) as f:
        lines = [ln for ln in f if not ln.startswith("#")]
    for r in csv.DictReader(lines):
        rows.append({k: float(v) for k, v in r.items()})
    return rows


def interp(x, xs, ys):
    if x <= xs[0]:
        return ys[0]
    for i in range(1, len(xs)):
        if x <= xs[i]:
            w = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
            return ys[i - 1] + w * (ys[i] - ys[i - 1])
    return None  # beyond the run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", required=True, choices=["coarse", "paper"])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--t-max", type=float, default=None, help="dam break: compare up to this T only")
    args = ap.parse_args()

    cases = []
    with open(os.path.join(HERE, "cases.csv")) as f:
        for r in csv.DictReader(f):
            if r["scale"] == args.scale and os.path.exists(os.path.join(args.dir, r["case"] + ".csv")):
                cases.append(r)
    if not cases:
        print(f"compare.py: no measured case of scale {args.scale} in {args.dir}", file=sys.stderr)
        return 2

    failures = []
    md = [f"# Validation, scale {args.scale} ({args.dir})", ""]

    # Columns: the final deposit (last frame), and how far the front still moved over the last
    # quarter of the run (to show that it stopped).
    col = []
    for r in cases:
        if r["kind"] != "column":
            continue
        a, l0 = float(r["a"]), float(r["L0"])
        fit = scene_fit(os.path.join(HERE, r["scene"]))
        fr = read_front(os.path.join(args.dir, r["case"] + ".csv"))
        last, q = fr[-1], fr[max(0, len(fr) - 1 - len(fr) // 4)]
        runout = (last["front"] - l0) / l0
        height = last["height"] / l0
        lo, hi = lube_runout(a)
        href = lube_height(a)
        variant = r["case"][len(f"column_a{a:g}"):]
        if variant not in VARIANTS:
            raise SystemExit(f"compare.py: case {r['case']}: unknown column variant '{variant}'")
        col.append({"case": r["case"], "variant": variant, "fit": fit, "a": a, "runout": runout,
                    "runout_lube_lo": lo, "runout_lube_hi": hi,
                    "runout_err": band_error(runout, lo, hi), "height": height, "height_lube": href,
                    "height_err": (height - href) / href, "L0_frame0": fr[0]["front"] / l0,
                    "H0_frame0": fr[0]["height"] / (a * l0), "creep_last_quarter": (last["front"] - q["front"]) / l0,
                    "t_end": last["time"], "beyond": int(last["beyond"]), "dx": float(r["dx"]), "L0": l0})
    if col:
        keys = ["case", "fit", "a", "runout", "runout_lube_lo", "runout_lube_hi", "runout_err", "height", "height_lube",
                "height_err", "L0_frame0", "H0_frame0", "creep_last_quarter", "t_end", "beyond"]
        with open(os.path.join(args.dir, "columns.csv"), "w") as f:
            f.write(",".join(keys) + "\n")
            for c in col:
                f.write(",".join(f"{c[k]:.4g}" if isinstance(c[k], float) else str(c[k]) for k in keys) + "\n")
        for variant, what in VARIANTS.items():
            fc = [c for c in col if c["variant"] == variant]
            if not fc:
                continue
            md += [f"## Granular column collapse (Lube et al. 2005, 2D): {what}", "",
                   "| a | runout (L_inf-L0)/L0 | Lube 2005 | error | H_inf/L0 | Lube 2005 | error | front moved in last quarter (L0) |",
                   "| --- | --- | --- | --- | --- | --- | --- | --- |"]
            md += [column_row(c) for c in fc]
            md.append("")

    # Dam break: Z(T) against Martin & Moyce, RMS over the laboratory points inside the run, each
    # liquid (DAM_LIQUIDS) in turn.
    dams = []
    for r in cases:
        if r["kind"] != "dam":
            continue
        liquid, checked = DAM_LIQUIDS.get(r["case"], (r["case"], False))
        a = float(r["L0"])
        fr = read_front(os.path.join(args.dir, r["case"] + ".csv"))
        g = 9.81
        T = [row["time"] * math.sqrt(2 * g / a) for row in fr]
        Z = [row["front"] / a for row in fr]
        tmax = min(T[-1], args.t_max) if args.t_max else T[-1]
        pts = []
        for te, ze in MARTIN_MOYCE:
            if te <= tmax:
                zs = interp(te, T, Z)
                pts.append((te, ze, zs, 1 + 2 * te))
        rms = math.sqrt(sum((zs - ze) ** 2 for _, ze, zs, _ in pts) / len(pts)) if pts else float("nan")
        rel = math.sqrt(sum(((zs - ze) / ze) ** 2 for _, ze, zs, _ in pts) / len(pts)) if pts else float("nan")
        with open(os.path.join(args.dir, r["case"] + "_front.csv"), "w") as f:
            f.write("T,Z_martin_moyce,Z_drift,Z_ritter\n")
            for te, ze, zs, zr in pts:
                f.write(f"{te:.3f},{ze:.3f},{zs:.3f},{zr:.3f}\n")
        md += [f"## Dam break (Martin & Moyce 1952, n^2 = 2): {liquid} (`{r['case']}`)", "",
               "| T = t sqrt(2g/a) | Z = x/a, Martin & Moyce | Z, drift | difference | Z, Ritter |",
               "| --- | --- | --- | --- | --- |"]
        md += [f"| {te:.2f} | {ze:.2f} | {zs:.2f} | {zs - ze:+.2f} | {zr:.2f} |" for te, ze, zs, zr in pts]
        md += ["", f"RMS of Z - Z_Martin&Moyce over the {len(pts)} points with T <= {tmax:.2f}: **{rms:.3f}** "
               f"(relative RMS {100 * rel:.1f}%); frame 0 front Z = {Z[0]:.3f} (1 expected).", ""]
        dams.append({"case": r["case"], "liquid": liquid, "T": T, "Z": Z, "dx": float(r["dx"]), "a": a})
        if not checked:
            continue
        # --check: the front may not lag the laboratory front by more than CELLS cells + SCATTER
        # (a frictionless, inviscid, surface-tension-free model has nothing to make it slower than
        # water on a plate), nor run ahead of Ritter's inviscid shallow-water front (the fastest a
        # frictionless flow released from rest can spread). How far it runs ahead of the laboratory
        # is reported (the RMS above), not bounded: docs/validation.md says why.
        dx = float(r["dx"])
        md += [f"--check: at every laboratory point, Z_drift >= Z_M&M - ({CELLS} cells ({CELLS * dx / a:.3f}) + "
               f"{100 * SCATTER:.0f}% of Z_M&M) and Z_drift <= Z_Ritter.", ""]
        for te, ze, zs, zr in pts:
            tol = CELLS * dx / a + SCATTER * ze
            if args.check and not (zs >= ze - tol and zs <= zr):
                failures.append(f"{r['case']}: at T = {te:.2f} the front Z = {zs:.3f} is outside [{ze - tol:.3f} "
                                f"(Martin & Moyce {ze:.3f} - {tol:.3f}), {zr:.3f} (Ritter)]")
            elif args.check:
                print(f"check {r['case']} T {te:.2f}: Z {zs:.3f} in [{ze - tol:.3f}, {zr:.3f}]")

    # --check, the liquids against the inviscid run where both ran: water's viscosity (a Reynolds
    # number sqrt(g a) a / nu of about 4e4) moves the front by less than a cell at every laboratory
    # point; the glycerine-like liquid's (about 30) holds it back by a cell or more from T = 1 on,
    # the lag growing with T (its stress acts all along the run).
    by_case = {d["case"]: d for d in dams}
    if args.check and "dam_break" in by_case:
        ref = by_case["dam_break"]
        for case, lag_min in (("dam_break_water", None), ("dam_break_glycerine", 1.0)):
            if case not in by_case:
                continue
            d = by_case[case]
            cell = d["dx"] / d["a"]
            last = None
            for te, _ in MARTIN_MOYCE:
                if te > min(ref["T"][-1], d["T"][-1]) or (lag_min is not None and te < 1.0):
                    continue
                lag = interp(te, ref["T"], ref["Z"]) - interp(te, d["T"], d["Z"])
                print(f"check {case} T {te:.2f}: behind the inviscid front by {lag / cell:.2f} cells")
                if lag_min is None and not abs(lag) < cell:
                    failures.append(f"{case}: at T = {te:.2f} the front is {lag / cell:.2f} cells from the inviscid run's "
                                    "(less than one expected: water's viscosity is negligible at this Reynolds number)")
                if lag_min is not None and not (lag >= lag_min * cell and (last is None or lag >= last)):
                    failures.append(f"{case}: at T = {te:.2f} the front is {lag / cell:.2f} cells behind the inviscid "
                                    f"run's (at least {lag_min:g}, and more than at the point before, expected)")
                last = lag

    if args.check:
        for c in col:
            cells = CELLS * c["dx"] / c["L0"]
            lo, hi = c["runout_lube_lo"], c["runout_lube_hi"]
            off = max(lo - c["runout"], c["runout"] - hi, 0.0)
            tol = cells + SCATTER * (lo if c["runout"] < lo else hi)
            print(f"check {c['case']}: runout {c['runout']:.3f}, Lube {lo:.3f}..{hi:.3f}, off by {off:.3f}, tolerance {tol:.3f}")
            if not off <= tol:
                failures.append(f"{c['case']}: runout {c['runout']:.3f} off Lube's {lo:.3f}..{hi:.3f} by {off:.3f} "
                                f"(tolerance {tol:.3f} = {CELLS} cells + {100 * SCATTER:.0f}%)")
            off = abs(c["height"] - c["height_lube"])
            tol = cells + SCATTER * c["height_lube"]
            print(f"check {c['case']}: height {c['height']:.3f}, Lube {c['height_lube']:.3f}, off by {off:.3f}, tolerance {tol:.3f}")
            if not off <= tol:
                failures.append(f"{c['case']}: height {c['height']:.3f} off Lube's {c['height_lube']:.3f} by {off:.3f} "
                                f"(tolerance {tol:.3f} = {CELLS} cells + {100 * SCATTER:.0f}%)")

    # The beam: each full cycle of point A's swing against Turek & Hron's CSM3.
    for r in cases:
        if r["kind"] != "beam":
            continue
        meas = csm3.measure(os.path.join(args.dir, r["case"] + ".csv"))
        md += [f"## Elastic beam against Turek & Hron (2006), CSM3 ({float(r['H0']) / float(r['dx']):g} cells across)", "",
               "| cycle | ux mean (mm) | ux amplitude | ux frequency (Hz) | uy mean | uy amplitude | uy frequency |",
               "| --- | --- | --- | --- | --- | --- | --- |"]
        ref = [v * s for c in ("ux", "uy") for v, s in zip(csm3.REFERENCE[c], (1e3, 1e3, 1))]
        md.append("| Turek & Hron | " + " | ".join(f"{v:.3f}" if i % 3 != 2 else f"{v:.4f}" for i, v in enumerate(ref)) + " |")
        rows = []
        for k in range(min(len(meas["ux"]), len(meas["uy"]))):
            vals = [v * s for c in ("ux", "uy") for v, s in zip(meas[c][k], (1e3, 1e3, 1))]
            errs = [(v - rv) / (rv if i % 3 == 2 else ref[3 * (i // 3) + 1]) for i, (v, rv) in enumerate(zip(vals, ref))]
            md.append(f"| {k + 1} | " + " | ".join(
                (f"{v:.3f}" if i % 3 != 2 else f"{v:.4f}") + f" ({100 * e:+.1f}%)" for i, (v, e) in enumerate(zip(vals, errs)))
                + " |")
            rows.append([k + 1] + vals + errs)
        md += ["", "Errors: the mean's and the amplitude's relative to the reference amplitude, the frequency's to the "
               "reference frequency.", ""]
        t, u = csm3.read_probe(os.path.join(args.dir, r["case"] + ".csv"))
        for c in ("ux", "uy"):
            rm, ra, rf = csm3.REFERENCE[c]
            sw = csm3.first_swing(t, u[c], 1 / rf)
            if sw:
                e = csm3.swing_errors(c, sw)
                md.append(f"First swing, {c}: lowest {sw[1] * 1e3:.3f} mm ({100 * e[0]:+.1f}% against "
                          f"{(rm - ra) * 1e3:.3f}) at {sw[0]:.4f} s ({100 * e[1]:+.1f}% against {0.5 / rf:.4f}).")
        md.append("")
        keys = ["cycle", "ux_mean_mm", "ux_amplitude_mm", "ux_frequency_hz", "uy_mean_mm", "uy_amplitude_mm",
                "uy_frequency_hz", "ux_mean_err", "ux_amplitude_err", "ux_frequency_err", "uy_mean_err",
                "uy_amplitude_err", "uy_frequency_err"]
        with open(os.path.join(args.dir, r["case"] + "_cycles.csv"), "w") as f:
            f.write(",".join(keys) + "\n")
            for row in rows:
                f.write(",".join(f"{v:.6g}" for v in row) + "\n")

    text = "\n".join(md)
    with open(os.path.join(args.dir, "summary.md"), "w") as f:
        f.write(text + "\n")
    print(text)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("compare.py: matplotlib not installed: no plots (the CSV files and summary.md are written)",
              file=sys.stderr)
        plt = None
    if plt and col:
        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        aa = [0.3 + i * 0.01 for i in range(0, 1000)]
        lin = [(x, 1.2 * x) for x in aa if x < 1.8]
        pw = [(x, 1.9 * x ** (2 / 3)) for x in aa if x > 2.8]
        ax[0].plot(*zip(*lin), "k-", label="Lube et al. 2005: 1.2 a (a < 1.8)")
        ax[0].plot(*zip(*pw), "k--", label="Lube et al. 2005: 1.9 a^(2/3) (a > 2.8)")
        for i, variant in enumerate(v for v in VARIANTS if any(c["variant"] == v for c in col)):
            fc = [c for c in col if c["variant"] == variant]
            ax[0].plot([c["a"] for c in fc], [c["runout"] for c in fc], "os^vDP"[i % 6], color=f"C{i + 1}",
                       label=f"drift ({args.scale}): column_aA{variant}")
        ax[0].set(xscale="log", yscale="log", xlabel="a = H0/L0", ylabel="(L_inf - L0)/L0", title="runout")
        ax[0].legend(fontsize=8)
        ax[1].plot([x for x in aa if x < 1.15], [x for x in aa if x < 1.15], "k-", label="Lube et al. 2005: a (a < 1.15)")
        ax[1].plot([x for x in aa if x > 1.15], [x ** 0.4 for x in aa if x > 1.15], "k--",
                   label="Lube et al. 2005: a^(2/5) (a > 1.15)")
        for i, variant in enumerate(v for v in VARIANTS if any(c["variant"] == v for c in col)):
            fc = [c for c in col if c["variant"] == variant]
            ax[1].plot([c["a"] for c in fc], [c["height"] for c in fc], "os^vDP"[i % 6], color=f"C{i + 1}",
                       label=f"drift ({args.scale}): column_aA{variant}")
        ax[1].set(xscale="log", yscale="log", xlabel="a = H0/L0", ylabel="H_inf/L0", title="final height at the wall")
        ax[1].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(args.dir, "columns.png"), dpi=120)
    if plt and dams:
        fig, ax = plt.subplots(figsize=(6, 4.5))
        for i, dam in enumerate(dams):
            ax.plot(dam["T"], dam["Z"], "-", color=f"C{i + 1}", label=f"drift ({args.scale}): {dam['liquid']}")
        ax.plot(*zip(*MARTIN_MOYCE), "ks", mfc="none", label="Martin & Moyce 1952 (n^2 = 2, a = 2.25 in)")
        ax.plot(*zip(*MARTIN_MOYCE_SMALL), "k^", mfc="none", ms=4, label="Martin & Moyce 1952 (n^2 = 2, a = 1.125 in)")
        t_max = max(max(dam["T"]) for dam in dams)
        tt = [0, t_max]
        ax.plot(tt, [1 + 2 * t for t in tt], "k:", label="Ritter (shallow water): Z = 1 + 2T")
        ax.set(xlabel="T = t sqrt(2g/a)", ylabel="Z = x/a", title="dam break: surge front",
               xlim=(0, t_max * 1.05), ylim=(0, max(max(dam["Z"]) for dam in dams) * 1.3))
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(args.dir, "dam_break.png"), dpi=120)

    if failures:
        for m in failures:
            print("FAIL: " + m, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

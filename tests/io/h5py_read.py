#!/usr/bin/python3
"""h5py_read.py - h5py (Debian's python3-h5py) reads what drift writes: the frames that
tests/io/make_frames.c made in DIR, every dataset of the frame's fields with its shape, the
numpy type docs/output.md promises and the bytes a value in the file, and every value against
make_frames's own formulas (float frames to float32's rounding; half frames within each
encoding's documented error).

  h5py_read.py DIR N_FRAMES N[,N1,...] [--all-fields] [--half]

Exits 77 (skipped) where h5py cannot be imported, 1 on any failed check."""
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:
    print(f"h5py_read.py: skipped: {e}")
    sys.exit(77)

DEFAULT = ["position", "velocity", "id", "material", "owner"]
MORE = ["logjp", "J", "F", "stress", "C"]
COLUMNS = {"position": 3, "velocity": 3, "id": 1, "material": 1, "owner": 1, "logjp": 1, "J": 1, "F": 9,
           "stress": 6, "C": 9}
BINARY16 = {"velocity", "logjp", "J", "F"}  # IEEE binary16 at half: h5py gives float16
BF16 = {"stress", "C"}  # float32's exponent, 7 mantissa bits: h5py gives float32


def expected(name, k, n):
    """make_frames.c's values of frame k, in float64 (the writer's float32 rounding aside)."""
    i = np.arange(n, dtype=np.float64)
    if name == "position":
        return np.stack([0.01 * i + 0.1 * c + 0.05 * k for c in range(3)], axis=1)
    if name == "velocity":
        return np.stack([c - 1.0 + 0.0137 * i for c in range(3)], axis=1)
    if name == "id":
        return (1 << 32) + 1000 * k + np.arange(n, dtype=np.uint64)
    if name == "material":
        return np.arange(n) % 2
    if name == "owner":
        return np.arange(n) % 4
    if name == "logjp":
        return -0.001 * i
    if name == "J":
        return 1.0 + 0.001 * i
    if name == "F":
        return np.stack([(1.0 if q % 4 == 0 else 0.0) + 0.0001 * (q + i) for q in range(9)], axis=1)
    if name == "stress":
        return np.stack([100.0 * (q + 1) + 1234.5 * i for q in range(6)], axis=1)
    if name == "C":
        return np.stack([np.full(n, 0.01 * q) for q in range(9)], axis=1)
    raise KeyError(name)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = {a for a in sys.argv[1:] if a.startswith("--")}
    if len(args) != 3 or flags - {"--all-fields", "--half"}:
        print(__doc__, file=sys.stderr)
        return 2
    folder, n_frames = args[0], int(args[1])
    counts = [int(c) for c in args[2].split(",")]
    counts = counts * n_frames if len(counts) == 1 else counts
    half = "--half" in flags
    fields = DEFAULT + (MORE if "--all-fields" in flags else [])
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    for k in range(n_frames):
        n = counts[k]
        path = f"{folder}/frame_{k:05d}.h5"
        with h5py.File(path, "r") as f:
            check(int(f.attrs["n_particles"]) == n, f"{path}: n_particles {f.attrs['n_particles']}, want {n}")
            check(int(f.attrs["frame"]) == k, f"{path}: frame {f.attrs['frame']}, want {k}")
            check(abs(float(f.attrs["time"]) - 0.25 * k) < 1e-12, f"{path}: time {f.attrs['time']}")
            check(f.attrs["fields"].decode() == ",".join(fields), f"{path}: fields {f.attrs['fields']}")
            g = f["particles"]
            check(sorted(g.keys()) == sorted(fields), f"{path}: datasets {sorted(g.keys())}, want {sorted(fields)}")
            check((f.attrs.get("precision", b"float") == b"half") == half, f"{path}: precision "
                  f"{f.attrs.get('precision')}, want {'half' if half else 'none (float)'}")
            spacing = float(f.attrs.get("position_spacing", 0.0))
            check(spacing > 0 if half else spacing == 0, f"{path}: position_spacing {spacing}")
            for name in fields:
                if name not in g:
                    continue
                ds = g[name]
                cols = COLUMNS[name]
                shape = (n, cols) if cols > 1 else (n,)
                check(ds.shape == shape, f"{path}/{name}: shape {ds.shape}, want {shape}")
                if ds.shape != shape:
                    continue
                stored = ds.id.get_type().get_size()  # bytes a value in the file
                a = ds[...]
                want = expected(name, k, n)
                if name == "id":
                    check(a.dtype == np.uint64 and stored == 8, f"{path}/id: {a.dtype}, {stored} B")
                    check(np.array_equal(a, want), f"{path}/id: values differ")
                    continue
                if name in ("material", "owner"):  # 2 materials, 1 rank: one byte
                    check(a.dtype == np.uint8 and stored == 1, f"{path}/{name}: {a.dtype}, {stored} B, want uint8")
                    check(np.array_equal(a.astype(np.int64), want), f"{path}/{name}: values differ")
                    continue
                want_type = np.float16 if half and name in BINARY16 else np.float32
                check(a.dtype == want_type, f"{path}/{name}: {a.dtype}, want {np.dtype(want_type)}")
                check(stored == (2 if half else 4), f"{path}/{name}: {stored} B a value in the file")
                got = a.astype(np.float64)
                if not half:  # float32 of the formula: within float32's rounding of the value
                    err, bound = np.abs(got - want), 2.0 ** -23 * np.abs(want) + 1e-7
                elif name == "position":  # a fixed point of spacing s: within s / 2
                    err, bound = np.abs(got - want), np.full(want.shape, spacing / 2 + 1e-7)
                elif name in BINARY16:  # binary16: 2^-11 of the value (2^-25 below 2^-14)
                    err, bound = np.abs(got - want), np.maximum(2.0 ** -11 * np.abs(want), 2.0 ** -25) * 1.001 + 1e-7
                else:  # bf16: 2^-8 of the value
                    err, bound = np.abs(got - want), 2.0 ** -8 * np.abs(want) * 1.001 + 1e-7
                if n > 0:
                    worst = int(np.argmax(err - bound))
                    check(np.all(err <= bound), f"{path}/{name}: error {err.flat[worst]:.3g} past its bound "
                          f"{bound.flat[worst]:.3g} at value {want.flat[worst]:.6g}")
    for what in failures:
        print(f"FAIL {what}")
    print(f"h5py_read.py {folder}: {n_frames} frames, {len(fields)} fields{' (half)' if half else ''}: "
          f"{'FAILED' if failures else 'all checks passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

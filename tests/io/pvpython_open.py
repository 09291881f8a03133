"""pvpython_open.py - opens DIR/frames.xdmf with ParaView's default reader and checks it.

usage: pvpython pvpython_open.py DIR N_FRAMES N[,N1,...] [--id-min V] [--render PNG] [--array NAME[:K]]...
                                 [--int-mod NAME:K]... [--compare REF_DIR --tol NAME:ABS:REL...]
                                 [--every-reader]

N is the particle count of every frame, or one count per frame separated by commas. Checks that
the reader finds N_FRAMES time steps and, after updating the pipeline at each of them, that the
grid has the expected number of points and as many vertex cells, and point arrays velocity
(3 components), id (1 component, 64-bit integer), material and owner (1 component each), and each
--array NAME[:K] (K components, default 1: F:9 and C:9 for the Tensor fields, stress:6, a Matrix of
6 columns whose components ParaView names XX YY ZZ XY YZ XZ), with one value per point; with --id-min, that every id is at least V (a reader that cuts ids to 32 bits
fails this when V >= 2^32). With --int-mod NAME:K, that the integer array NAME holds i % K at point i
(the frames of tests/io/make_frames.c: material and owner, stored in 8 bits and declared Int 4,
read through HDF5's conversion). With --render, also draws the last non-empty step in the default
representation, coloured by material, saves PNG and checks that the particles cover some pixels
(this needs a display: run under xvfb-run -a -s "-screen 0 1280x1024x24 -noreset",
as tests/io/xvfb_retry.sh does). With --compare, also opens REF_DIR/frames.xdmf the same way and
checks, at every step, that the points and each array named by a --tol (position: the points)
differ from REF_DIR's by at most ABS + REL * |reference value| in every component, and that their
NaNs match: the values ParaView reads from DIR (output.precision "half") against those of the same
frames at float. With --every-reader, the same checks through each reader ParaView offers for
.xdmf (the default, Xdmf3ReaderT and the legacy XDMFReader), and at every step that the points and
every point array hold the values of the frame's HDF5 file as h5py reads them (float32 at either
precision): no reader reorders, expands or drops a component. Exit status 0 = all checks passed.
"""
import os
import sys

from paraview import servermanager
from paraview.simple import (ColorBy, GetActiveViewOrCreate, Hide, OpenDataFile, Render,
                             ResetCamera, SaveScreenshot, Show)


def fail(msg):
    print("pvpython_open: FAILED: " + msg)
    sys.exit(1)


def parse_args(argv):
    args = {"id_min": None, "render": None, "arrays": [], "compare": None, "tol": {}, "int_mod": [],
            "every_reader": False}
    pos = []
    i = 1
    while i < len(argv):
        if argv[i] == "--id-min" and i + 1 < len(argv):
            args["id_min"] = int(argv[i + 1])
            i += 2
        elif argv[i] == "--array" and i + 1 < len(argv):
            name, _, comps = argv[i + 1].partition(":")
            args["arrays"].append((name, int(comps) if comps else 1))
            i += 2
        elif argv[i] == "--int-mod" and i + 1 < len(argv):
            name, _, k = argv[i + 1].partition(":")
            args["int_mod"].append((name, int(k)))
            i += 2
        elif argv[i] == "--compare" and i + 1 < len(argv):
            args["compare"] = argv[i + 1]
            i += 2
        elif argv[i] == "--tol" and i + 1 < len(argv):
            name, a, r = argv[i + 1].split(":")
            args["tol"][name] = (float(a), float(r))
            i += 2
        elif argv[i] == "--every-reader":
            args["every_reader"] = True
            i += 1
        elif argv[i] == "--render" and i + 1 < len(argv):
            args["render"] = argv[i + 1]
            i += 2
        else:
            pos.append(argv[i])
            i += 1
    if len(pos) != 3:
        fail("usage: pvpython pvpython_open.py DIR N_FRAMES N[,N1,...] [--id-min V] [--render PNG] [--array NAME[:K]]...")
    args["dir"] = pos[0]
    n_frames = int(pos[1])
    counts = [int(c) for c in pos[2].split(",")]
    if len(counts) == 1:
        counts = counts * n_frames
    if len(counts) != n_frames:
        fail("%d counts given for %d frames" % (len(counts), n_frames))
    args["counts"] = counts
    return args


def timesteps(reader):
    ts = reader.TimestepValues
    if ts is None:
        return []
    if isinstance(ts, (int, float)):  # one step comes back as a bare number
        return [float(ts)]
    return list(ts)


def check_step(k, t, data, n, id_min, extra=(), int_mod=()):
    name = "step %d (t=%g)" % (k, t)
    if not data.IsA("vtkDataSet"):
        fail("%s: reader gave a %s, want a dataset" % (name, data.GetClassName()))
    if data.GetNumberOfPoints() != n:
        fail("%s: %d points, want %d" % (name, data.GetNumberOfPoints(), n))
    if data.GetNumberOfCells() != n:
        fail("%s: %d cells, want %d (one vertex per particle)" % (name, data.GetNumberOfCells(), n))
    found = []
    pd = data.GetPointData()
    for i in range(pd.GetNumberOfArrays()):
        found.append(pd.GetArrayName(i))
    if n == 0:
        return "%s: 0 points, arrays %s" % (name, found)
    for array_name, comps in (("velocity", 3), ("id", 1), ("material", 1), ("owner", 1)) + tuple(extra):
        a = pd.GetArray(array_name)
        if a is None:
            fail("%s: no point array %s (arrays: %s)" % (name, array_name, found))
        if a.GetNumberOfComponents() != comps:
            fail("%s: %s has %d components, want %d" % (name, array_name,
                                                        a.GetNumberOfComponents(), comps))
        if a.GetNumberOfTuples() != n:
            fail("%s: %s has %d values, want %d" % (name, array_name, a.GetNumberOfTuples(), n))
        if comps == 6:  # a symmetric tensor in the file's order, xx yy zz xy yz zx
            names = [a.GetComponentName(c) for c in range(6)]
            if any(names) and names != ["XX", "YY", "ZZ", "XY", "YZ", "XZ"]:
                fail("%s: %s's components are named %s, want XX YY ZZ XY YZ XZ" % (name, array_name, names))
    ids = pd.GetArray("id")
    # VTK_LONG, VTK_UNSIGNED_LONG, VTK_ID_TYPE, VTK_LONG_LONG, VTK_UNSIGNED_LONG_LONG
    if ids.GetDataType() not in (8, 9, 12, 16, 17) or ids.GetDataTypeSize() != 8:
        fail("%s: id is %s, want a 64-bit integer array" % (name, ids.GetClassName()))
    if id_min is not None:
        low = min(ids.GetTuple1(i) for i in range(n))  # exact below 2^53
        if low < id_min:
            fail("%s: smallest id %d < %d (ids cut to 32 bits?)" % (name, low, id_min))
    for array_name, mod in int_mod:
        a = pd.GetArray(array_name)
        if a is None or not a.IsA("vtkDataArray") or a.GetDataType() in (10, 11):  # VTK_FLOAT, VTK_DOUBLE
            fail("%s: %s is not an integer array" % (name, array_name))
        bad = [i for i in range(n) if a.GetTuple1(i) != i % mod]
        if bad:
            fail("%s: %s[%d] is %g, want %d" % (name, array_name, bad[0], a.GetTuple1(bad[0]), bad[0] % mod))
    cell_type = data.GetCellType(0)
    return "%s: %d points, %d cells (VTK cell type %d), arrays %s" % (
        name, data.GetNumberOfPoints(), data.GetNumberOfCells(), cell_type,
        ", ".join("%s[%d] %s" % (pd.GetArrayName(i), pd.GetArray(i).GetNumberOfComponents(),
                                 pd.GetArray(i).GetClassName())
                  for i in range(pd.GetNumberOfArrays())))


def compare_step(name, data, ref, tol):
    """The largest error of each compared array against the reference dataset, over its bound."""
    import math
    worst = {}
    for array_name, (a_tol, r_tol) in sorted(tol.items()):
        if array_name == "position":
            a, b = data.GetPoints().GetData(), ref.GetPoints().GetData()
        else:
            a, b = data.GetPointData().GetArray(array_name), ref.GetPointData().GetArray(array_name)
        if a is None or b is None:
            fail("%s: %s missing in this or the reference frame" % (name, array_name))
        if a.GetNumberOfTuples() != b.GetNumberOfTuples() or a.GetNumberOfComponents() != b.GetNumberOfComponents():
            fail("%s: %s has %d x %d values, the reference %d x %d" % (
                name, array_name, a.GetNumberOfTuples(), a.GetNumberOfComponents(), b.GetNumberOfTuples(),
                b.GetNumberOfComponents()))
        err = 0.0
        for i in range(a.GetNumberOfTuples()):
            for c in range(a.GetNumberOfComponents()):
                x, r = a.GetComponent(i, c), b.GetComponent(i, c)
                if math.isnan(x) or math.isnan(r):
                    if math.isnan(x) != math.isnan(r):
                        fail("%s: %s[%d][%d] %g, the reference %g" % (name, array_name, i, c, x, r))
                    continue
                bound = a_tol + r_tol * abs(r)
                if not abs(x - r) <= bound:
                    fail("%s: %s[%d][%d] %.9g, the reference %.9g: error %.3g beyond %.3g" % (
                        name, array_name, i, c, x, r, abs(x - r), bound))
                err = max(err, abs(x - r))
        worst[array_name] = err
    return ", ".join("%s %.3g" % (k, v) for k, v in sorted(worst.items()))


def frame_files(path):
    """The frame file of each step of frames.xdmf, in its order."""
    import re
    with open(path) as f:
        return re.findall(r"(frame_[0-9]+\.h5):/particles/position", f.read())


def check_values(name, data, h5path):
    """The points and every point array equal the frame file's datasets, component by component."""
    import h5py
    import numpy as np
    from vtkmodules.util.numpy_support import vtk_to_numpy
    with h5py.File(h5path, "r") as f:
        got = {"position": vtk_to_numpy(data.GetPoints().GetData()) if data.GetNumberOfPoints() else None}
        pd = data.GetPointData()
        for i in range(pd.GetNumberOfArrays()):
            got[pd.GetArrayName(i)] = vtk_to_numpy(pd.GetArray(i))
        for key in f["particles"]:
            want = f["particles"][key][()]
            if want.shape[0] == 0:
                continue
            if key not in got or got[key] is None:
                fail("%s: %s of %s is not read" % (name, key, h5path))
            a = got[key].reshape(want.shape[0], -1)
            w = want.reshape(want.shape[0], -1)
            if a.shape != w.shape:
                fail("%s: %s read as %s, the file holds %s" % (name, key, a.shape, w.shape))
            if w.dtype.kind == "f":
                w = w.astype(np.float32)  # what the readers ask HDF5 for (Float 4)
            same = np.array_equal(a.astype(np.float64), w.astype(np.float64), equal_nan=w.dtype.kind == "f")
            if not same:
                bad = np.argwhere(a.astype(np.float64) != w.astype(np.float64))[0]
                fail("%s: %s[%d][%d] read as %r, the file holds %r" % (name, key, bad[0], bad[1], a[tuple(bad)],
                                                                       w[tuple(bad)]))
    return len(got)


def covered_pixels(png_a, png_b):
    from vtkmodules.vtkIOImage import vtkPNGReader
    imgs = []
    for png in (png_a, png_b):
        r = vtkPNGReader()
        r.SetFileName(png)
        r.Update()
        imgs.append(r.GetOutput().GetPointData().GetScalars())
    a, b = imgs
    if a.GetNumberOfTuples() != b.GetNumberOfTuples():
        fail("screenshots of different sizes")
    return sum(1 for i in range(a.GetNumberOfTuples()) if a.GetTuple(i) != b.GetTuple(i))


def render(reader, t, png):
    view = GetActiveViewOrCreate("RenderView")
    view.ViewSize = [320, 240]
    view.ViewTime = t
    display = Show(reader, view)
    ResetCamera(view)
    ColorBy(display, ("POINTS", "material"))
    Render(view)
    SaveScreenshot(png, view, ImageResolution=[320, 240])
    Hide(reader, view)
    Render(view)
    empty = png + ".background.png"
    SaveScreenshot(empty, view, ImageResolution=[320, 240])
    covered = covered_pixels(png, empty)
    os.remove(empty)
    print("pvpython_open: rendered t=%g in the '%s' representation: %d pixels covered (%s)" %
          (t, str(display.GetPropertyValue("Representation")).strip("'"), covered, png))
    if covered == 0:
        fail("the particles cover no pixel in the default representation")


def every_reader(path, steps, counts, args):
    """Each reader ParaView offers for .xdmf: the checks of check_step, and the values of the files."""
    from paraview.simple import XDMFReader, Xdmf3ReaderS, Xdmf3ReaderT
    files = frame_files(path)
    if len(files) != len(steps):
        fail("%s lists %d frame files for %d steps" % (path, len(files), len(steps)))
    for label, make in (("Xdmf3ReaderS", lambda: Xdmf3ReaderS(FileName=[path])),
                        ("Xdmf3ReaderT", lambda: Xdmf3ReaderT(FileName=[path])),
                        ("XDMFReader", lambda: XDMFReader(FileNames=[path]))):
        r = make()
        r.UpdatePipelineInformation()
        for k, t in enumerate(steps):
            if counts[k] == 0 and label == "XDMFReader":
                continue  # the legacy reader reports an error for an empty grid (io/xdmf.c)
            r.UpdatePipeline(t)
            data = servermanager.Fetch(r)
            if data.IsA("vtkMultiBlockDataSet"):  # the legacy reader's temporal collection
                data = data.GetBlock(0)
            check_step(k, t, data, counts[k], args["id_min"], args["arrays"], args["int_mod"])
            n = check_values("%s step %d" % (label, k), data, os.path.join(os.path.dirname(path), files[k])) \
                if counts[k] > 0 else 0
        print("pvpython_open: %s: every step's arrays and values as in the files (%d arrays)" % (label, n))


def main():
    args = parse_args(sys.argv)
    path = os.path.join(args["dir"], "frames.xdmf")
    if not os.path.exists(path):
        fail("%s does not exist" % path)
    reader = OpenDataFile(path)
    if reader is None:
        fail("ParaView found no reader for %s" % path)
    print("pvpython_open: %s opened with %s" % (path, reader.GetXMLName()))
    reader.UpdatePipelineInformation()
    steps = timesteps(reader)
    counts = args["counts"]
    print("pvpython_open: %d time steps %s" % (len(steps), steps))
    if len(steps) != len(counts):
        fail("%d time steps, want %d" % (len(steps), len(counts)))
    if steps != sorted(steps):
        fail("time steps out of order")
    ref_reader = None
    if args["compare"]:
        ref_reader = OpenDataFile(os.path.join(args["compare"], "frames.xdmf"))
        if ref_reader is None:
            fail("ParaView found no reader for the reference %s" % args["compare"])
        ref_reader.UpdatePipelineInformation()
        if timesteps(ref_reader) != steps:
            fail("the reference has time steps %s, want %s" % (timesteps(ref_reader), steps))
    for k, t in enumerate(steps):
        reader.UpdatePipeline(t)
        data = servermanager.Fetch(reader)
        print("pvpython_open: " + check_step(k, t, data, counts[k], args["id_min"], args["arrays"], args["int_mod"]))
        if ref_reader is not None and counts[k] > 0:
            ref_reader.UpdatePipeline(t)
            ref = servermanager.Fetch(ref_reader)
            print("pvpython_open: step %d against %s: largest errors %s" % (
                k, args["compare"], compare_step("step %d" % k, data, ref, args["tol"])))
    if args["every_reader"]:
        every_reader(path, steps, counts, args)
    if args["render"]:
        nonempty = [t for t, n in zip(steps, counts) if n > 0]
        if nonempty:
            render(reader, nonempty[-1], args["render"])
    print("pvpython_open: passed")


main()

"""ncu_csv.py - the rows of ncu's --csv log files, for the ncu scripts' summaries
(device_ncu_ranks.sh, device_ncu_island.sh): import it and call tables(PATTERN)."""
import csv, glob, io


def tables(pattern):
    """Per file matching pattern, in name order: its name and its rows (csv.DictReader's dicts, one
    per kernel and metric), or None where ncu profiled no kernel. Says so where no file matches."""
    files = sorted(glob.glob(pattern))
    if not files:
        print("no ncu output (NCU empty, or nothing profiled)")
    for f in files:
        txt = open(f).read()
        i = txt.find('"ID"')  # the table's header, after ncu's own lines
        yield f.rsplit("/", 1)[-1], (list(csv.DictReader(io.StringIO(txt[i:]))) if i >= 0 else None)

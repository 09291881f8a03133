#!/usr/bin/env bash
# check_io_errors.sh - output that cannot be written fails early, in one line that names the file
# the user looks for and gives the system's reason (issue 56, item 3).
#
#   check_io_errors.sh DRIFT_EXE H5_ERRORS_EXE [MPIEXEC]
#
# Needs root to mount tmpfs (root ignores permission bits, so a read-only mount stands for an
# unwritable folder); exits 77 (skipped) where tmpfs cannot be mounted.
# 1. A rows file as frames and checkpoints are written (H5_ERRORS_EXE, tests/io/h5_errors.c, 1
#    rank and with MPIEXEC 2): one created in a read-only folder says "Read-only file system", one
#    whose rows fill a 1 MiB tmpfs "No space left on device"; both name DIR/probe_00000.h5 (not
#    the temporary name, no source file) and leave nothing.
# 2. drift run into a read-only folder, and into a folder to be made in one: exit 3 within 5 s,
#    one line naming the folder with "Read-only file system", no particles sampled (the scene has
#    8 million: sampling alone takes seconds), nothing written.
# 3. The free-space check before a frame counts every field written: a scene of jelly with
#    output.fields J, F, stress and C into a tmpfs too small for frame 0: exit 3, one line
#    "no room for DIR/frame_00000.h5: No space left on device" with the bytes it needs, which
#    must be N x (12 position + 12 velocity + 8 id + 1 material + 1 owner (8 bits: one material,
#    one rank) + 4 J + 36 F + 24 stress + 36 C = 134) + 16384 (metadata) + the materials
#    attribute's length (docs/output.md).
#    With a checkpoint due after frame 1 (output.checkpoint_every 1) and room for frame 1 alone,
#    frame 1 is refused, "the checkpoint due with it included", with at least the checkpoint's
#    particles' positions, velocities, F and C (96 bytes each) and 64 KiB on top; frame 0 whole.
# 4. A disk that fills while a checkpoint's rows are written (CKPT_FULL_EXE, tests/io/ckpt_full.c,
#    1 rank and with MPIEXEC 2, on a 512 KiB tmpfs): the write fails naming the checkpoint with
#    "No space left on device", leaves no file, and the previous checkpoint reads back whole.
# 5. A disk that fills while a frame's rows are written (FRAME_FULL_EXE, tests/io/frame_full.c,
#    1 rank and with MPIEXEC 2, on a 4 MiB tmpfs): the allocation ahead of the rows fails naming
#    the frame, a field and "No space left on device", leaves no file, and the frame before stays;
#    the same with a team of two threads, whose copies go through a mapping of the allocated rows
#    in memory.
set -u
. "$(dirname "$0")/../lib.sh"

lib_usage 4 "$0 DRIFT_EXE H5_ERRORS_EXE CKPT_FULL_EXE FRAME_FULL_EXE [MPIEXEC]" "$@"
drift=$(lib_abs "$1")
h5_errors=$(lib_abs "$2")
ckpt_full=$(lib_abs "$3")
frame_full=$(lib_abs "$4")
mpiexec=${5:-}
lib_setup io-errors

mkdir RO FULL
if ! mount -t tmpfs -o size=1m,ro drift-test RO 2>/dev/null; then
  echo "skipped: cannot mount a tmpfs here (not root, or not allowed)"
  exit 77
fi
mounted="$tmp/RO"
# a second mount: the cleanup unmounts the one in $mounted, this one here
extra="$tmp/FULL"
trap 'umount "$extra" 2>/dev/null; lib_cleanup' EXIT
mount -t tmpfs -o size=1m drift-test FULL || fail "cannot mount the second tmpfs"

# 1. the write's own failures
run h5_ro 0 "$h5_errors" RO "Read-only file system"
run h5_full 0 "$h5_errors" FULL "No space left on device"
if [ -n "$mpiexec" ]; then
  run h5_ro_2 0 "$mpiexec" --oversubscribe -n 2 "$h5_errors" RO "Read-only file system"
  run h5_full_2 0 "$mpiexec" --oversubscribe -n 2 "$h5_errors" FULL "No space left on device"
fi
[ -z "$(ls -A FULL)" ] || fail "HDF5: files left in FULL: $(ls -A FULL)"

# 2. an unwritable output folder, before any work (a scene of 8M particles, whose sampling would
# take seconds, and whose memory plan, about 3 GiB, fits: the plan is checked before any work too)
cat >big.json <<'JSON'
{
  "domain": {"min": [0, 0, 0], "max": [1, 1, 1], "dx": 0.01},
  "time": {"frames": 2, "fps": 24, "cfl": 0.5},
  "materials": {"jelly": {"model": "fixed_corotated", "density": 1000, "youngs_modulus": 1e5, "poisson_ratio": 0.3}},
  "bodies": [{"shape": "box", "min": [0, 0, 0], "max": [1, 1, 1], "material": "jelly"}]
}
JSON
for out in RO RO/sub; do
  label=ro_${out//\//_}
  start=$(date +%s%N)
  run "$label" 3 "$drift" run big.json --out "$out"
  ms=$((($(date +%s%N) - start) / 1000000))
  one_line "$label" "$label.log" "Read-only file system"
  grep '^drift: ' "$label.log" | grep -qF "$out" || fail "$label: the message does not name $out: $(grep '^drift: ' "$label.log")"
  [ "$ms" -lt 5000 ] || fail "$label: it took $ms ms to fail"
  grep -q "particles" "$label.log" && fail "$label: particles were sampled: $(grep particles "$label.log")"
  echo "$label: failed in $ms ms: $(grep '^drift: ' "$label.log")"
done
[ -z "$(ls -A RO)" ] || fail "files written into the read-only folder: $(ls -A RO)"

# 3. the free-space check: every field, and the checkpoint due
cat >fields.json <<'JSON'
{
  "domain": {"min": [0, 0, 0], "max": [1, 1, 1], "dx": 0.05},
  "time": {"frames": 2, "fps": 24, "dt": 0.004},
  "materials": {"jelly": {"model": "fixed_corotated", "density": 1000, "youngs_modulus": 1e5, "poisson_ratio": 0.3}},
  "bodies": [{"shape": "box", "min": [0.2, 0.2, 0.2], "max": [0.6, 0.6, 0.6], "material": "jelly"}],
  "output": {"fields": ["position", "velocity", "id", "material", "owner", "J", "F", "stress", "C"]}
}
JSON
run fields_room 0 "$drift" run fields.json --out A
n=$(sed -n 's/^drift [^:]*: \([0-9]*\) particles.*/\1/p' fields_room.log)
size=$(stat -c %s A/frame_00000.h5 2>/dev/null || echo 0)
want=$((n * 134 + 16384 + 5)) # materials attribute "jelly"
umount FULL
# room for about half of frame 0
mount -t tmpfs -o "size=$((size / 2 / 1024))k" drift-test FULL || fail "cannot mount the small tmpfs"
run fields_full 3 "$drift" run fields.json --out FULL
one_line fields_full fields_full.log "no room for FULL/frame_00000.h5: No space left on device: it needs about"
got=$(sed -n 's/^drift: .* (\([0-9]*\) bytes), .*/\1/p' fields_full.log)
[ "$got" = "$want" ] || fail "fields: the message counts $got bytes, expected $want ($n particles x 134 + 16384 + 5): $(grep '^drift: ' fields_full.log)"
echo "fields: $n particles, $got bytes needed (frame 0 as written: $size bytes)"
[ ! -e FULL/frame_00000.h5 ] || fail "fields: FULL/frame_00000.h5 was written"

umount FULL
sed 's/"output": {/"output": {"checkpoint_every": 1, /' fields.json >ckpt.json
# room for frames 0 and 1, not for frame 1's checkpoint as well
mount -t tmpfs -o "size=$(((2 * size + size / 2) / 1024))k" drift-test FULL || fail "cannot mount the tmpfs"
run ckpt_full 3 "$drift" run ckpt.json --out FULL
one_line ckpt_full ckpt_full.log "no room for FULL/frame_00001.h5: No space left on device"
one_line ckpt_full ckpt_full.log "the checkpoint due with it included"
got=$(sed -n 's/^drift: .* (\([0-9]*\) bytes, the checkpoint.*/\1/p' ckpt_full.log)
# a checkpoint holds at least each particle's position, velocity, F and C (96 bytes) and 64 KiB
[ -n "$got" ] && [ "$got" -ge "$((want + n * 96 + 65536))" ] ||
  fail "checkpoint: it needs $got bytes, expected at least the frame's $want + $n x 96 + 65536: $(grep '^drift: ' ckpt_full.log)"
[ -f FULL/frame_00000.h5 ] && cmp -s <(stat -c %s FULL/frame_00000.h5) <(echo "$size") ||
  fail "checkpoint: frame 0 is not whole: $(ls -l FULL)"
[ ! -e FULL/frame_00001.h5 ] || fail "checkpoint: FULL/frame_00001.h5 was written"

# 4. a disk that fills while a checkpoint's rows are written
umount FULL
mount -t tmpfs -o size=512k drift-test FULL || fail "cannot mount the tmpfs for the checkpoint"
run ckpt_rows_full 0 "$ckpt_full" FULL
if [ -n "$mpiexec" ]; then
  rm -rf FULL/*
  run ckpt_rows_full_2 0 "$mpiexec" --oversubscribe -n 2 "$ckpt_full" FULL
fi

# 5. a disk that fills while a frame's rows are written
umount FULL
mount -t tmpfs -o size=4m drift-test FULL || fail "cannot mount the tmpfs for the frame"
run frame_rows_full 0 "$frame_full" FULL
if [ -n "$mpiexec" ]; then
  rm -rf FULL/*
  run frame_rows_full_2 0 "$mpiexec" --oversubscribe -n 2 "$frame_full" FULL
fi
rm -rf FULL/*
OMP_NUM_THREADS=2 run frame_rows_full_team 0 "$frame_full" FULL
if [ -n "$mpiexec" ]; then
  rm -rf FULL/*
  run frame_rows_full_team_2 0 "$mpiexec" --oversubscribe -n 2 -x OMP_NUM_THREADS=2 "$frame_full" FULL
fi

lib_finish check_io_errors.sh

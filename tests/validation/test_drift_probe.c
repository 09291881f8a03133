/* test_drift_probe DRIFT_PROBE DIR - drift_probe follows the particles nearest to a point by id.
 *
 * Writes frames (io/h5frame.c, as drift writes them) of 10 x 10 particles on a lattice of spacing
 * 0.01 m and checks drift_probe's CSV against the construction:
 *   frame 0: the lattice; P = (0.0502, 0.0501, 0.03) lies nearest to the point (0.05, 0.05) and
 *            then to its neighbours, so --k 1 follows that point and --k 5 the point and its
 *            four neighbours (mean at the point itself).
 *   frame 1: the particles in reverse order (the file's order is not the ids'), the five moved by
 *            (+0.003, -0.007, 0), every other particle by (-0.05, +0.05, 0): the displacement
 *            must be the five's, whichever particles are nearest to P then.
 * Then the error paths: a followed particle missing from a frame (exit 1), --k above the particle
 * count (exit 1), a folder without frames (exit 1), a missing folder (exit 2), bad arguments
 * (exit 2). */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "h5frame.h"
#include "physics/check.h"
#include "run_tool.h"

enum { N = 100 };
static float pos[3 * N], vel[3 * N];
static uint64_t ids[N];
static int32_t mat[N], own[N];

static int write_frame(const char *dir, int frame, size_t n) {
  static const char *const names[] = {"beam"};
  h5frame_meta meta = {.frame = frame, .time = 0.01 * frame, .dx = 0.01, .n_materials = 1, .material_names = names};
  h5frame_data d = {.n = n, .position = pos, .velocity = vel, .id = ids, .material = mat, .owner = own};
  return h5frame_write(MPI_COMM_WORLD, dir, &meta, &d);
}

/* The row of frame FRAME in drift_probe's CSV: ux, uy, uz. 0 when found. */
static int row(const char *csv, int frame, double u[3]) {
  char key[32];
  snprintf(key, sizeof key, "\n%d,", frame);
  const char *r = strstr(csv, key);
  double t;
  return r && sscanf(r + strlen(key), "%lf,%lf,%lf,%lf", &t, &u[0], &u[1], &u[2]) == 4 ? 0 : -1;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  if (argc != 3) {
    fprintf(stderr, "usage: test_drift_probe DRIFT_PROBE DIR\n");
    return 2;
  }
  const char *tool = argv[1], *dir = argv[2];
  char cmd[8192], out[16384], frames[4096], gone[4096];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/frames' '%s/gone' '%s/empty'", dir, dir, dir, dir);
  if (system(cmd) != 0) return 2;
  snprintf(frames, sizeof frames, "%s/frames", dir);
  snprintf(gone, sizeof gone, "%s/gone", dir);

  /* Frame 0: particle k = 10 i + j at (0.01 i, 0.01 j, 0.03), id 1000 + k. */
  for (int k = 0; k < N; ++k) {
    pos[3 * k] = 0.01f * (float)(k / 10), pos[3 * k + 1] = 0.01f * (float)(k % 10), pos[3 * k + 2] = 0.03f;
    ids[k] = 1000u + (uint64_t)k, mat[k] = own[k] = 0;
  }
  CHECK(write_frame(frames, 0, N) == 0 && write_frame(gone, 0, N) == 0, "cannot write frame 0");
  /* Frame 1: reversed order; the point (0.05, 0.05) = k 55 and its neighbours 45, 65, 54, 56 move
   * by (+0.003, -0.007), the others by (-0.05, +0.05). */
  static float p0[3 * N];
  memcpy(p0, pos, sizeof p0);
  for (int k = 0; k < N; ++k) {
    const int src = N - 1 - k;
    const int near = src == 55 || src == 45 || src == 65 || src == 54 || src == 56;
    pos[3 * k] = p0[3 * src] + (near ? 0.003f : -0.05f);
    pos[3 * k + 1] = p0[3 * src + 1] + (near ? -0.007f : 0.05f);
    pos[3 * k + 2] = p0[3 * src + 2];
    ids[k] = 1000u + (uint64_t)src;
  }
  CHECK(write_frame(frames, 1, N) == 0, "cannot write frame 1");
  /* The other folder's frame 1 leaves particle 55 out. */
  int m = 0;
  for (int k = 0; k < N; ++k)
    if (ids[k] != 1055u) {
      memmove(pos + 3 * m, pos + 3 * k, 3 * sizeof *pos);
      ids[m++] = ids[k];
    }
  CHECK(write_frame(gone, 1, (size_t)m) == 0, "cannot write the folder's frame 1");

  for (int k = 1; k <= 5; k += 4) {
    snprintf(cmd, sizeof cmd, "'%s' '%s' 0.0502 0.0501 0.03 --k %d", tool, frames, k);
    CHECK(run_tool(cmd, out, sizeof out) == 0, "--k %d: drift_probe failed: %s", k, out);
    CHECK(strstr(out, "\nframe,time,ux,uy,uz,x,y,z\n") != NULL, "--k %d: no CSV header in: %s", k, out);
    double u0[3], u1[3];
    CHECK(row(out, 0, u0) == 0 && row(out, 1, u1) == 0, "--k %d: frames 0 and 1 missing in: %s", k, out);
    CHECK(fabs(u0[0]) + fabs(u0[1]) + fabs(u0[2]) < 1e-9, "--k %d: frame 0 displacement (%g, %g, %g)", k, u0[0],
          u0[1], u0[2]);
    CHECK(fabs(u1[0] - 0.003) < 1e-6 && fabs(u1[1] + 0.007) < 1e-6 && fabs(u1[2]) < 1e-9,
          "--k %d: frame 1 displacement (%g, %g, %g), expected (0.003, -0.007, 0)", k, u1[0], u1[1], u1[2]);
    char want[64];
    snprintf(want, sizeof want, "their mean at (0.050000, 0.050000, 0.030000)");
    CHECK(strstr(out, want) != NULL, "--k %d: the followed particles' mean is not the lattice point: %s", k, out);
  }

  snprintf(cmd, sizeof cmd, "'%s' '%s' 0.05 0.05 0.03 2>&1", tool, gone);
  CHECK(run_tool(cmd, out, sizeof out) == 1 && strstr(out, "7 of the 8 followed particles"), "a particle gone: %s", out);
  snprintf(cmd, sizeof cmd, "'%s' '%s' 0.05 0.05 0.03 --k 0 2>&1", tool, frames);
  CHECK(run_tool(cmd, out, sizeof out) == 2 && strstr(out, "usage"), "--k 0: %s", out);
  snprintf(cmd, sizeof cmd, "'%s' '%s' 0.05 0.05 0.03 --k 200 2>&1", tool, frames);
  CHECK(run_tool(cmd, out, sizeof out) == 1 && strstr(out, "fewer than --k 200"), "--k 200: %s", out);
  snprintf(cmd, sizeof cmd, "'%s' '%s/empty' 0.05 0.05 0.03 2>&1", tool, dir);
  CHECK(run_tool(cmd, out, sizeof out) == 1 && strstr(out, "no frame_NNNNN.h5"), "empty folder: %s", out);
  snprintf(cmd, sizeof cmd, "'%s' '%s/missing' 0.05 0.05 0.03 2>&1", tool, dir);
  CHECK(run_tool(cmd, out, sizeof out) == 2 && strstr(out, "cannot open"), "missing folder: %s", out);
  snprintf(cmd, sizeof cmd, "'%s' '%s' 0.05 0.05 2>&1", tool, frames);
  CHECK(run_tool(cmd, out, sizeof out) == 2 && strstr(out, "usage"), "no Z: %s", out);

  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  MPI_Finalize();
  return check_summary("test_drift_probe");
}

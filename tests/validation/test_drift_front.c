/* test_drift_front DRIFT_FRONT DIR - drift_front measures constructed frames exactly.
 *
 * Writes two frames (io/h5frame.c, as drift writes them) of particles on a lattice of spacing
 * dx/4 (dx = 0.01 m) and checks drift_front's CSV against the values the construction gives:
 *   frame 0: a block of 40 x 40 lattice points (x 2 in z) and an anchor half a spacing behind and
 *            below it: front = height = 39.5 spacings; back and bottom 0; nothing beyond.
 *   frame 1: the block, a one-point-high film of 12 more columns along the floor (8 particles in
 *            each dx bin: counted), one tip particle in the bin after the film (fewer than 3:
 *            counted as the edge touching the mass), two strays across empty bins (not counted,
 *            `beyond` = 2); one particle 0.4 dx above the block at the wall (counted) and one 5
 *            dx above it (not). front = tip - back, height = that particle - bottom.
 * Then the error paths: a folder without frames (exit 1), a missing folder (exit 2), a bad
 * argument (exit 2). */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "h5frame.h"
#include "physics/check.h"
#include "run_tool.h"

enum { MAXP = 4096 };
static float pos[3 * MAXP], vel[3 * MAXP];
static uint64_t ids[MAXP];
static int32_t mat[MAXP], own[MAXP];
static size_t np;

static const double DX = 0.01, S = 0.0025, X0 = 0.03125, Y0 = 0.03125;

static void add(double x, double y) {
  for (int z = 0; z < 2; ++z) {
    if (np == MAXP) abort();
    pos[3 * np] = (float)x, pos[3 * np + 1] = (float)y, pos[3 * np + 2] = (float)(0.03 + 0.005 * z);
    vel[3 * np] = vel[3 * np + 1] = vel[3 * np + 2] = 0;
    ids[np] = np, mat[np] = 0, own[np] = 0;
    ++np;
  }
}

static int write_frame(const char *dir, int frame) {
  static const char *const names[] = {"sand"};
  h5frame_meta meta = {.frame = frame, .time = 0.5 * frame, .dx = DX, .n_materials = 1, .material_names = names};
  h5frame_data d = {.n = np, .position = pos, .velocity = vel, .id = ids, .material = mat, .owner = own};
  return h5frame_write(MPI_COMM_WORLD, dir, &meta, &d);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  if (argc != 3) {
    fprintf(stderr, "usage: test_drift_front DRIFT_FRONT DIR\n");
    return 2;
  }
  const char *tool = argv[1], *dir = argv[2];
  char cmd[8192], out[16384];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/frames' '%s/empty'", dir, dir, dir);
  if (system(cmd) != 0) return 2;
  char frames[4096];
  snprintf(frames, sizeof frames, "%s/frames", dir);

  /* An anchor half a spacing behind and below the block: the bins start there, so that no lattice
   * point lies on a bin's edge (float rounding would pick its side). */
  add(X0 - 0.5 * S, Y0 - 0.5 * S);
  const double back0 = X0 - 0.5 * S, bottom0 = Y0 - 0.5 * S;
  for (int i = 0; i < 40; ++i)
    for (int j = 0; j < 40; ++j) add(X0 + i * S, Y0 + j * S);
  CHECK(write_frame(frames, 0) == 0, "cannot write frame 0");
  for (int i = 40; i < 52; ++i) add(X0 + i * S, Y0);  /* the film, bins 10 to 12 */
  const double tip = X0 + 13.125 * DX;                 /* bin 13, alone */
  add(tip, Y0);
  add(X0 + 15.5 * DX, Y0);                             /* strays: bins 15 and 20 */
  add(X0 + 20.5 * DX, Y0);
  const double over = Y0 + 39 * S + 0.4 * DX;          /* bin 10 of the wall strip */
  add(X0 + 0.1 * DX, over);
  add(X0 + 0.1 * DX, Y0 + 39 * S + 5 * DX);            /* bin 14: across empty bins */
  CHECK(write_frame(frames, 1) == 0, "cannot write frame 1");

  snprintf(cmd, sizeof cmd, "'%s' '%s'", tool, frames);
  CHECK(run_tool(cmd, out, sizeof out) == 0, "drift_front failed on %s", frames);
  printf("%s", out);
  const char *row = strstr(out, "frame,time,front,height,back,bottom,beyond\n");
  CHECK(row != NULL, "no CSV header");
  if (row) {
    row = strchr(row, '\n') + 1;
    int f[2];
    double t[2], front[2], height[2], back[2], bottom[2];
    unsigned long beyond[2];
    for (int k = 0; k < 2; ++k) {
      int got = sscanf(row, "%d,%lf,%lf,%lf,%lf,%lf,%lu", &f[k], &t[k], &front[k], &height[k], &back[k], &bottom[k],
                       &beyond[k]);
      CHECK(got == 7, "row %d: %d fields", k, got);
      if (got != 7) break;
      row = strchr(row, '\n') + 1;
    }
    const double tol = 2e-6; /* float32 positions printed to 1e-6 */
    CHECK(f[0] == 0 && f[1] == 1 && fabs(t[1] - 0.5) < 1e-9, "frames %d, %d at t %g", f[0], f[1], t[1]);
    CHECK(fabs(front[0] - 39.5 * S) < tol, "frame 0: front %.6f, expected %.6f", front[0], 39.5 * S);
    CHECK(fabs(height[0] - 39.5 * S) < tol, "frame 0: height %.6f, expected %.6f", height[0], 39.5 * S);
    CHECK(beyond[0] == 0 && fabs(back[0]) < tol && fabs(bottom[0]) < tol, "frame 0: beyond %lu, back %g, bottom %g",
          beyond[0], back[0], bottom[0]);
    CHECK(fabs(front[1] - (tip - back0)) < tol, "frame 1: front %.6f, expected %.6f (the tip)", front[1], tip - back0);
    CHECK(fabs(height[1] - (over - bottom0)) < tol, "frame 1: height %.6f, expected %.6f", height[1], over - bottom0);
    CHECK(beyond[1] == 4, "frame 1: %lu particles beyond the front, expected the 2 strays x 2 layers", beyond[1]);
    CHECK(fabs(back[1]) < tol && fabs(bottom[1]) < tol, "frame 1: back %g, bottom %g", back[1], bottom[1]);
  }
  /* --min 9: the film's bins (8 particles each) no longer count; bin 10, holding the film's first
   * 8 particles, touches the block: its last one is the end. */
  snprintf(cmd, sizeof cmd, "'%s' '%s' --min 9 | tail -n 1", tool, frames);
  CHECK(run_tool(cmd, out, sizeof out) == 0, "drift_front --min 9 failed");
  double fr9 = NAN;
  CHECK(sscanf(out, "%*d,%*f,%lf", &fr9) == 1 && fabs(fr9 - 43.5 * S) < 2e-6,
        "--min 9: front %.6f, expected %.6f (the film's first bin, touching)", fr9, 43.5 * S);

  snprintf(cmd, sizeof cmd, "'%s' '%s/empty' 2>&1", tool, dir);
  CHECK(run_tool(cmd, out, sizeof out) == 1 && strstr(out, "no frame_NNNNN.h5"), "empty folder: %s", out);
  snprintf(cmd, sizeof cmd, "'%s' '%s/missing' 2>&1", tool, dir);
  CHECK(run_tool(cmd, out, sizeof out) == 2 && strstr(out, "cannot open"), "missing folder: %s", out);
  snprintf(cmd, sizeof cmd, "'%s' '%s' --min 0 2>&1", tool, frames);
  CHECK(run_tool(cmd, out, sizeof out) == 2 && strstr(out, "usage"), "--min 0: %s", out);
  MPI_Finalize();
  return check_summary("test_drift_front");
}

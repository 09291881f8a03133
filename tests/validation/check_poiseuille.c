/* check_poiseuille FRAME.h5 X0 W RHO MU G Y_LO Y_HI TOL - the velocity profile of the Poiseuille
 * scene (tests/validation/poiseuille.json) against the steady solution
 *   u(s) = rho g s (W - s) / (2 mu),  s = x - X0,  peak rho g W^2 / (8 mu) at s = W / 2,
 * the liquid falling along -y between no-slip walls at x = X0 and X0 + W.
 *
 * Reads /particles/position and /particles/velocity of one frame (tools/frame_read.h), keeps the
 * particles with Y_LO <= y <= Y_HI (the column's middle, away from its ends), bins them by x in 16 bins over [X0, X0 + W] and compares each bin's mean -v_y with the
 * mean of u over the same particles' x. Prints the table and:
 *   peak error  = max bin mean / max analytic bin mean - 1
 *   shape error = max over bins |mean -v_y - mean u| / (rho g W^2 / (8 mu))
 * Exit 0 when both are within TOL (a fraction), 1 when not, 2 on bad arguments or an unreadable
 * frame. Every HDF5 call is checked. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "frame_read.h"

enum { BINS = 16 };

static int fail(const char *path, const char *what) {
  fprintf(stderr, "check_poiseuille: %s: %s\n", path, what);
  return 2;
}

int main(int argc, char **argv) {
  if (argc != 10) {
    fprintf(stderr, "usage: check_poiseuille FRAME.h5 X0 W RHO MU G Y_LO Y_HI TOL\n");
    return 2;
  }
  const char *path = argv[1];
  double a[8];
  for (int i = 0; i < 8; ++i) {
    char *end;
    a[i] = strtod(argv[i + 2], &end);
    if (*end || !(a[i] == a[i])) return fail(argv[i + 2], "not a number");
  }
  const double x0 = a[0], W = a[1], rho = a[2], mu = a[3], g = a[4], ylo = a[5], yhi = a[6], tol = a[7];
  if (frame_quiet() < 0) return fail(path, "cannot silence the HDF5 error stack (H5Eset_auto2)");
  frame_file ff;
  void *xp = NULL, *vp = NULL;
  size_t n = 0, nv = 0;
  int rc = frame_open(&ff, path);
  if (!rc) rc = frame_dataset(&ff, "position", H5T_NATIVE_FLOAT, 3, &xp, &n);
  if (!rc) rc = frame_dataset(&ff, "velocity", H5T_NATIVE_FLOAT, 3, &vp, &nv);
  if (frame_close(&ff) < 0 && !rc) rc = -1;
  if (rc) fprintf(stderr, "check_poiseuille: %s\n", ff.err);
  else if (nv != n) rc = fail(path, "position and velocity differ in length");
  if (rc) {
    free(xp), free(vp);
    return 2;
  }
  float *x = xp, *v = vp;
  const double peak = rho * g * W * W / (8 * mu);
  double sum_v[BINS] = {0}, sum_u[BINS] = {0}, sum_x[BINS] = {0};
  long cnt[BINS] = {0};
  for (size_t i = 0; i < n; ++i) {
    const double s = x[3 * i] - x0, y = x[3 * i + 1];
    if (y < ylo || y > yhi || s < 0 || s >= W) continue;
    const int b = (int)(s / W * BINS);
    sum_v[b] -= v[3 * i + 1];
    sum_u[b] += rho * g * s * (W - s) / (2 * mu);
    sum_x[b] += s;
    ++cnt[b];
  }
  free(x), free(v);
  double vmax = 0, umax = 0, shape = 0, rms = 0;
  printf("# bin, s (m), particles, u drift (m/s), u analytic (m/s), (drift - analytic) / peak\n");
  for (int b = 0; b < BINS; ++b) {
    if (cnt[b] == 0) {
      printf("check_poiseuille: bin %d holds no particle in y [%g, %g]\n", b, ylo, yhi);
      return 1;
    }
    const double us = sum_v[b] / cnt[b], ua = sum_u[b] / cnt[b], e = (us - ua) / peak;
    printf("%2d, %.5f, %ld, %.5f, %.5f, %+.4f\n", b, sum_x[b] / cnt[b], cnt[b], us, ua, e);
    vmax = fmax(vmax, us), umax = fmax(umax, ua), shape = fmax(shape, fabs(e)), rms += e * e;
  }
  rms = sqrt(rms / BINS);
  const double perr = vmax / umax - 1;
  printf("peak: drift %.5f m/s, analytic %.5f m/s over the same bin (%.5f at the centre): error %+.2f %%\n", vmax,
         umax, peak, 100 * perr);
  printf("shape: max |error| %.2f %%, RMS %.2f %% of the peak (tolerance %.1f %%)\n", 100 * shape, 100 * rms,
         100 * tol);
  return fabs(perr) <= tol && shape <= tol ? 0 : 1;
}

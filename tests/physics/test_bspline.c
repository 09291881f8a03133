/* test_bspline - quadratic B-spline weights (src/physics/bspline.h) against the properties of the
 * kernel: partition of unity, linear reproduction, second moment 1/4, derivatives (sum zero,
 * finite differences), non-negativity, agreement with the closed-form kernel N(d), and the
 * stencil base on both sides of half-integers and for negative coordinates. */
#include <math.h>

#include "physics/bspline.h"
#include "physics/check.h"

/* The quadratic B-spline N(d) written directly from its definition, in double. */
static double kernel(double d) {
  d = fabs(d);
  if (d < 0.5) return 0.75 - d * d;
  if (d < 1.5) return 0.5 * (1.5 - d) * (1.5 - d);
  return 0.0;
}

static double kernel_deriv(double d) {
  const double a = fabs(d), sg = d < 0 ? -1.0 : 1.0;
  if (a < 0.5) return -2.0 * d;
  if (a < 1.5) return -sg * (1.5 - a);
  return 0.0;
}

int main(void) {
  printf("test_bspline: quadratic B-spline weights\n");
  const int n = 100000;
  double max_pu = 0, max_m1 = 0, max_m2 = 0, max_dsum = 0, max_fd = 0, max_kern = 0, min_w = 1;
  for (int k = 0; k <= n; ++k) {
    const float fx = 0.5f + (float)k / (float)n; /* the closed interval [0.5, 1.5] */
    float w[3], dw[3];
    bspline_weights(fx, w, dw);
    double sum = 0, m1 = 0, m2 = 0, dsum = 0;
    for (int i = 0; i < 3; ++i) {
      const double d = (double)i - (double)fx;
      sum += w[i];
      m1 += w[i] * d;
      m2 += w[i] * d * d;
      dsum += dw[i];
      if (w[i] < min_w) min_w = w[i];
      /* node i sits at distance i - fx from the particle (in cells) */
      const double ek = fabs(w[i] - kernel(d));
      const double ed = fabs(dw[i] - (-kernel_deriv(d))); /* d/dfx of N(i - fx) */
      if (ek > max_kern) max_kern = ek;
      if (ed > max_kern) max_kern = ed;
    }
    if (fabs(sum - 1) > max_pu) max_pu = fabs(sum - 1);
    if (fabs(m1) > max_m1) max_m1 = fabs(m1);
    if (fabs(m2 - 0.25) > max_m2) max_m2 = fabs(m2 - 0.25);
    if (fabs(dsum) > max_dsum) max_dsum = fabs(dsum);
    /* central differences of the float weights (exact for quadratics but for round-off) */
    const float h = 1e-3f;
    float wp[3], wm[3], tmp[3];
    bspline_weights(fx + h, wp, tmp);
    bspline_weights(fx - h, wm, tmp);
    for (int i = 0; i < 3; ++i) {
      const double fd = ((double)wp[i] - (double)wm[i]) / ((double)(fx + h) - (double)(fx - h));
      if (fabs(fd - dw[i]) > max_fd) max_fd = fabs(fd - dw[i]);
    }
  }
  printf("  %d values of fx in [0.5, 1.5]:\n", n + 1);
  printf("  max |sum w - 1|              = %.3g\n", max_pu);
  printf("  max |sum w_i (i - fx)|       = %.3g\n", max_m1);
  printf("  max |sum w_i (i - fx)^2 - 1/4| = %.3g\n", max_m2);
  printf("  max |sum dw|                 = %.3g\n", max_dsum);
  printf("  max |dw - central FD|        = %.3g\n", max_fd);
  printf("  max |w - N(i - fx)|, |dw - dN| = %.3g\n", max_kern);
  printf("  min w                        = %.3g\n", min_w);
  CHECK(max_pu < 1e-6, "partition of unity error %g", max_pu);
  CHECK(max_m1 < 1e-6, "first moment %g", max_m1);
  CHECK(max_m2 < 1e-6, "second moment error %g", max_m2);
  CHECK(max_dsum < 1e-6, "sum of derivatives %g", max_dsum);
  CHECK(max_fd < 2e-4, "finite difference mismatch %g", max_fd);
  CHECK(max_kern < 1e-6, "kernel mismatch %g", max_kern);
  CHECK(min_w >= 0.0, "negative weight %g", min_w);

  /* bspline_base: floor(x - 0.5) on both sides of half-integers, for negatives too. */
  struct {
    float x;
    int base;
  } cases[] = {{0.5f, 0},     {0.49999997f, -1}, {1.5f, 1},      {1.4999999f, 0},
               {0.0f, -1},    {1.0f, 0},         {2.0f, 1},      {-0.5f, -1},
               {-0.49999997f, -1}, {-0.50000006f, -2}, {-1.0f, -2}, {-1.5f, -2},
               {-1.5000001f, -3}, {-7.25f, -8},  {10000.7f, 10000}, {-10000.7f, -10002},
               {3.999f, 3},   {4.501f, 4}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    const int b = bspline_base(cases[i].x);
    CHECK(b == cases[i].base, "bspline_base(%.9g) = %d, expected %d", cases[i].x, b,
          cases[i].base);
  }
  printf("  bspline_base: %zu hand-picked values near half-integers and negatives\n",
         sizeof cases / sizeof cases[0]);

  /* Any coordinate: fx = x - base lands in [0.5, 1.5), and the weight that the stencil gives a
   * node equals N(x - node) for every node (so weights are continuous across cell changes). */
  check_rng rng = {12345};
  double max_node = 0;
  int bad_fx = 0;
  for (int k = 0; k < 200000; ++k) {
    const float x = (float)check_rng_range(&rng, -50.0, 50.0);
    const int b = bspline_base(x);
    const float fx = x - (float)b;
    if (!(fx >= 0.5f && fx < 1.5f)) ++bad_fx;
    float w[3], dw[3];
    bspline_weights(fx, w, dw);
    for (int node = b - 2; node <= b + 4; ++node) {
      const int i = node - b;
      const double got = (i >= 0 && i < 3) ? w[i] : 0.0;
      const double e = fabs(got - kernel((double)x - node));
      if (e > max_node) max_node = e;
    }
  }
  /* and a few ulps around every half-integer in [-300, 300] */
  for (int k = -300; k <= 300; ++k) {
    float x = (float)k + 0.5f;
    for (int u = 0; u < 4; ++u) x = nextafterf(x, -1e9f);
    for (int u = 0; u < 9; ++u, x = nextafterf(x, 1e9f)) {
      const int b = bspline_base(x);
      const float fx = x - (float)b;
      const int expect = (x >= (float)k + 0.5f) ? k : k - 1;
      /* fx = x - base may round up to 1.5 for |x| < 1 (documented); never below 0.5 */
      if (!(fx >= 0.5f && fx <= 1.5f) || b != expect) ++bad_fx;
    }
  }
  printf("  200000 random x in [-50, 50) and +-4 ulps around 601 half-integers: fx out of "
         "[0.5, 1.5] or wrong base %d times, max |w - N(x - node)| = %.3g\n",
         bad_fx, max_node);
  CHECK(bad_fx == 0, "%d coordinates gave fx outside [0.5, 1.5)", bad_fx);
  CHECK(max_node < 1e-5, "node weight mismatch %g", max_node);
  return check_summary("test_bspline");
}

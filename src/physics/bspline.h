/* bspline.h - quadratic B-spline interpolation weights for MLS-MPM transfers (P2G, G2P).
 *
 * A particle at x (relative to the grid origin) touches the 3 nodes base, base+1, base+2 along
 * each axis, with base = floor(x/dx - 0.5). With fx = x/dx - base in [0.5, 1.5) the weight of
 * node base+i is w[i](fx), and dw[i] = dw[i]/dfx in units of 1/cell (divide by dx for 1/m).
 * The weights form a partition of unity, reproduce linear functions (sum w_i (i - fx) = 0) and
 * are C1 across cells. Shared by the CPU and CUDA backends (see common.h). */
#ifndef DRIFT_PHYSICS_BSPLINE_H
#define DRIFT_PHYSICS_BSPLINE_H

#include "physics/common.h"

/* Lowest of the 3 stencil nodes along one axis for a coordinate in cell units: the exact
 * floor(x - 1/2). (Written as floor(x) and the exact fraction x - floor(x) because the float
 * subtraction x - 0.5f rounds for some negative x just below a half-integer, e.g.
 * -0.50000006f - 0.5f == -1.0f, which would give fx = x - base < 0.5. With this form the
 * caller's fx = x - base is in [0.5, 1.5], the value 1.5 only from rounding when |x| < 1, and
 * exact for 1 <= |x| < 2^22. bspline_weights is valid on the closed interval.) */
DR_HD int bspline_base(float x_over_dx) {
  const float fl = floorf(x_over_dx);
  return (int)fl - ((x_over_dx - fl) < 0.5f ? 1 : 0);
}

/* Weights and their derivatives (w.r.t. fx, per cell) for fx = x/dx - base in [0.5, 1.5]. */
DR_HD void bspline_weights(float fx, float w[3], float dw[3]) {
  const float a = 1.5f - fx; /* in (0, 1] */
  const float b = fx - 1.0f; /* in [-0.5, 0.5) */
  const float c = fx - 0.5f; /* in [0, 1) */
  w[0] = 0.5f * a * a;
  w[1] = 0.75f - b * b;
  w[2] = 0.5f * c * c;
  dw[0] = -a;
  dw[1] = -2.0f * b;
  dw[2] = c;
}

#endif

/* svd.h - robust 3x3 singular value decomposition in float32, for the constitutive models
 * (fixed corotated, Drucker-Prager return mapping) and the polar decomposition.
 *
 *   svd3(F, U, sigma, V):  F = U diag(sigma) V^T
 *     - U and V are proper rotations (det +1);
 *     - sigma[0] >= sigma[1] >= |sigma[2]| >= 0 in magnitude, sigma[0], sigma[1] >= 0, and
 *       sigma[2] < 0 exactly when det F < 0 (an inverted element; Irving et al. 2004 convention);
 *     - the zero matrix gives sigma = 0 and U = V = I; rank-deficient input gives zeros in the
 *       trailing entries of sigma and still proper rotations.
 *   polar_r(F, R):  R = U V^T, the rotation of the polar decomposition (a proper rotation also
 *     for inverted F).
 *
 * Method, after McAdams et al. 2011 ("Computing the singular value decomposition of 3x3
 * matrices with minimal branching and elementary floating point operations"):
 *   0. scale F by a power of two so that max |F_ij| is in [0.5, 1) (exact; avoids overflow of
 *      F^T F for huge stretches and underflow for tiny ones);
 *   1. cyclic Jacobi eigen-decomposition of the symmetric A = F^T F, a fixed number of sweeps,
 *      accumulating V (each Jacobi rotation is proper, so det V = +1);
 *   2. B = F V, then a fixed number of one-sided Jacobi (Hestenes) sweeps on the columns of B:
 *      the same rotations, but computed from the current columns of B rather than from the
 *      squared A. This polish makes the columns of B orthogonal to float precision *relative
 *      to their own lengths*, which the squared A cannot do for tiny singular values (A loses
 *      everything below eps * sigma_max^2); without it F = U diag(R) V^T would drop an
 *      off-diagonal of R of order eps / sigma_2 for strongly graded spectra;
 *   3. sort the columns of B (and V) by decreasing length; every swap also negates one column so
 *      that det V stays +1;
 *   4. Givens QR of B: B = U R with U a product of proper rotations and R upper triangular with
 *      R00, R11 >= 0 (so the sign of det F lands on R22); sigma = diag(R);
 *   5. a final ordering fix-up (swaps of ulp-close values), again keeping det U = det V = +1.
 * Every rotation is computed robustly (no division by zero, no overflow of zeta^2). No
 * branches depend on data except cheap guards; fixed sweep counts (see the macros below). */
#ifndef DRIFT_PHYSICS_SVD_H
#define DRIFT_PHYSICS_SVD_H

#include "physics/common.h"

/* Sweeps of the two phases. Jacobi converges quadratically; 3 + 1 (12 plane rotations) reach
 * float round-off for every input the tests throw at it (random, graded to 1e-6, rank deficient,
 * repeated): tests/physics/test_svd.c's largest reconstruction errors are those of 4 + 2
 * (8.3e-7 / 8.7e-7 / 8.3e-7), while 2 + 1 and 3 + 0 fail it. 3 + 1 rather than 4 + 2: P2G is
 * bound by the instructions it issues, of which the SVD is about a third, so the rotations are
 * P2G's time (docs/performance.md, the decisions table). */
#ifndef DR_SVD_JACOBI_SWEEPS
#define DR_SVD_JACOBI_SWEEPS 3
#endif
#ifndef DR_SVD_POLISH_SWEEPS
#define DR_SVD_POLISH_SWEEPS 1
#endif
/* The polish is left out where it has nothing to mend: A's eigenvalues (sigma^2) within
 * DR_SVD_POLISH_GATE of each other and A's off-diagonals after the sweeps within
 * DR_SVD_POLISH_OFF of its largest eigenvalue (converged). What the polish mends is B's columns'
 * non-orthogonality, about eps sigma_max^2 / (sigma_i sigma_j) from the rounding of A = Fs^T Fs
 * plus what the sweeps left; QR turns it into R's off-diagonals, which the decomposition drops.
 * With singular values within a factor of 4 of each other and the sweeps converged, that is a few
 * eps: tests/physics/test_svd.c's largest reconstruction error over its classes is 8.67e-7 with
 * the gate and without it (a bound of 1e-5 on the off-diagonals instead gave 5e-6). MPM's
 * deformation gradients (rotations times stretches near 1) pass both after 3 sweeps: the
 * polish's 3 one-sided rotations, a quarter of the decomposition, are then skipped. The gate
 * that fails polishes, as does a NaN; DR_SVD_POLISH_OFF -1 always polishes. */
#ifndef DR_SVD_POLISH_GATE
#define DR_SVD_POLISH_GATE (1.0f / 16.0f)
#endif
#ifndef DR_SVD_POLISH_OFF
#define DR_SVD_POLISH_OFF 1e-6f
#endif

/* The Jacobi rotation (c, s, t = s/c) that zeroes the off-diagonal of the symmetric 2x2
 * [[app, apq], [apq, aqq]] (Golub & Van Loan, sec. 8.5.2: the smaller of the two angles). */
DR_HD void svd3_jacobi_cs_(float app, float aqq, float apq, float *c, float *s, float *t) {
  float tt = 0.0f;
  if (apq != 0.0f) {
    const float zeta = (aqq - app) / (2.0f * apq);
    if (fabsf(zeta) < 1e15f) /* zeta^2 cannot overflow */
      tt = copysignf(1.0f, zeta) / (fabsf(zeta) + sqrtf(1.0f + zeta * zeta));
    else /* t ~ 1/(2 zeta); 0 when zeta is infinite (apq underflowed) */
      tt = 0.5f / zeta;
  }
  const float cc = 1.0f / sqrtf(1.0f + tt * tt);
  *c = cc;
  *s = tt * cc;
  *t = tt;
}

/* One two-sided Jacobi rotation on the symmetric a (full 3x3 storage) in the plane (p, q); r is
 * the third index. V <- V J. */
DR_HD void svd3_jacobi_pair_(float a[9], float v[9], int p, int q, int r) {
  float c, s, t;
  const float apq = a[3 * p + q];
  svd3_jacobi_cs_(a[3 * p + p], a[3 * q + q], apq, &c, &s, &t);
  a[3 * p + p] -= t * apq;
  a[3 * q + q] += t * apq;
  a[3 * p + q] = 0.0f;
  a[3 * q + p] = 0.0f;
  const float arp = a[3 * r + p], arq = a[3 * r + q];
  const float nrp = c * arp - s * arq, nrq = s * arp + c * arq;
  a[3 * r + p] = nrp;
  a[3 * p + r] = nrp;
  a[3 * r + q] = nrq;
  a[3 * q + r] = nrq;
  for (int k = 0; k < 3; ++k) {
    const float vp = v[3 * k + p], vq = v[3 * k + q];
    v[3 * k + p] = c * vp - s * vq;
    v[3 * k + q] = s * vp + c * vq;
  }
}

/* One one-sided (Hestenes) Jacobi rotation of columns p, q of b and v (b = F v is kept). */
DR_HD void svd3_onesided_pair_(float b[9], float v[9], int p, int q) {
  float app = 0.0f, aqq = 0.0f, apq = 0.0f;
  for (int k = 0; k < 3; ++k) {
    app += b[3 * k + p] * b[3 * k + p];
    aqq += b[3 * k + q] * b[3 * k + q];
    apq += b[3 * k + p] * b[3 * k + q];
  }
  float c, s, t;
  svd3_jacobi_cs_(app, aqq, apq, &c, &s, &t);
  for (int k = 0; k < 3; ++k) {
    const float bp = b[3 * k + p], bq = b[3 * k + q];
    b[3 * k + p] = c * bp - s * bq;
    b[3 * k + q] = s * bp + c * bq;
    const float vp = v[3 * k + p], vq = v[3 * k + q];
    v[3 * k + p] = c * vp - s * vq;
    v[3 * k + q] = s * vp + c * vq;
  }
}

/* Column i <- column j, column j <- -column i: a quarter turn, so the determinant is kept. */
DR_HD void svd3_swap_cols_(float m[9], int i, int j) {
  for (int k = 0; k < 3; ++k) {
    const float t = m[3 * k + i];
    m[3 * k + i] = m[3 * k + j];
    m[3 * k + j] = -t;
  }
}

/* Givens rotation of rows i, j of r that zeroes r[j][k] against r[i][k] (leaving r[i][k] >= 0);
 * u <- u G^T so that u r is unchanged. */
DR_HD void svd3_givens_(float r[9], float u[9], int i, int j, int k) {
  const float a = r[3 * i + k], b = r[3 * j + k];
  const float rr = sqrtf(a * a + b * b);
  float c = 1.0f, s = 0.0f;
  if (rr > 0.0f) {
    const float inv = 1.0f / rr;
    c = a * inv;
    s = b * inv;
  }
  for (int m = 0; m < 3; ++m) {
    const float ri = r[3 * i + m], rj = r[3 * j + m];
    r[3 * i + m] = c * ri + s * rj;
    r[3 * j + m] = -s * ri + c * rj;
    const float ui = u[3 * m + i], uj = u[3 * m + j];
    u[3 * m + i] = c * ui + s * uj;
    u[3 * m + j] = -s * ui + c * uj;
  }
  r[3 * j + k] = 0.0f;
}

/* Exchanges singular triplets i and j (negating the new column j of both U and V: the product
 * U diag(sigma) V^T and det U, det V are unchanged). */
DR_HD void svd3_swap_triplets_(float u[9], float sigma[3], float v[9], int i, int j) {
  const float t = sigma[i];
  sigma[i] = sigma[j];
  sigma[j] = t;
  svd3_swap_cols_(u, i, j);
  svd3_swap_cols_(v, i, j);
}

DR_HD void svd3(const float F[9], float U[9], float sigma[3], float V[9]) {
  m3_identity(U);
  m3_identity(V);

  /* 0. exact power-of-two scaling; the zero matrix is answered at once (a NaN anywhere
   * propagates through the general path instead). */
  float fmax_ = 0.0f, probe = 0.0f;
  for (int i = 0; i < 9; ++i) {
    fmax_ = fmaxf(fmax_, fabsf(F[i]));
    probe += F[i];
  }
  if (fmax_ == 0.0f && probe == 0.0f) {
    sigma[0] = sigma[1] = sigma[2] = 0.0f;
    return;
  }
  int e = 0;
  (void)frexpf(fmax_, &e); /* fmax_ in [2^(e-1), 2^e) */
  const float down = ldexpf(1.0f, -e), up = ldexpf(1.0f, e);
  float fs[9];
  for (int i = 0; i < 9; ++i) fs[i] = F[i] * down;

  /* 1. Jacobi eigen-decomposition of A = Fs^T Fs. */
  float a[9];
  m3_mul_at(fs, fs, a);
  for (int sweep = 0; sweep < DR_SVD_JACOBI_SWEEPS; ++sweep) {
    svd3_jacobi_pair_(a, V, 0, 1, 2);
    svd3_jacobi_pair_(a, V, 0, 2, 1);
    svd3_jacobi_pair_(a, V, 1, 2, 0);
  }

  /* 2. B = Fs V and one-sided polish where the spectrum is graded (DR_SVD_POLISH_GATE). */
  float b[9];
  m3_mul(fs, V, b);
  const float amin = fminf(a[0], fminf(a[4], a[8])), amax = fmaxf(a[0], fmaxf(a[4], a[8]));
  const float off = fabsf(a[1]) + fabsf(a[2]) + fabsf(a[5]);
  if (!(amin >= amax * DR_SVD_POLISH_GATE && off <= amax * DR_SVD_POLISH_OFF))
    for (int sweep = 0; sweep < DR_SVD_POLISH_SWEEPS; ++sweep) {
      svd3_onesided_pair_(b, V, 0, 1);
      svd3_onesided_pair_(b, V, 0, 2);
      svd3_onesided_pair_(b, V, 1, 2);
    }

  /* 3. sort columns by decreasing length (a 3-element sorting network). */
  float n[3];
  for (int j = 0; j < 3; ++j) n[j] = b[j] * b[j] + b[3 + j] * b[3 + j] + b[6 + j] * b[6 + j];
#define DR_SVD_SORT_(i, j)                                                                      \
  if (n[i] < n[j]) {                                                                            \
    const float tn_ = n[i];                                                                     \
    n[i] = n[j];                                                                                \
    n[j] = tn_;                                                                                 \
    svd3_swap_cols_(b, i, j);                                                                   \
    svd3_swap_cols_(V, i, j);                                                                   \
  }
  DR_SVD_SORT_(0, 1)
  DR_SVD_SORT_(0, 2)
  DR_SVD_SORT_(1, 2)
#undef DR_SVD_SORT_

  /* 4. Givens QR: B = U R. */
  svd3_givens_(b, U, 0, 1, 0);
  svd3_givens_(b, U, 0, 2, 0);
  svd3_givens_(b, U, 1, 2, 1);
  sigma[0] = b[0] * up;
  sigma[1] = b[4] * up;
  sigma[2] = b[8] * up;

  /* 5. ordering fix-up: sigma[0] >= sigma[1] >= |sigma[2]|, sign on sigma[2] only. */
  if (sigma[0] < sigma[1]) svd3_swap_triplets_(U, sigma, V, 0, 1);
  if (sigma[1] < fabsf(sigma[2])) {
    svd3_swap_triplets_(U, sigma, V, 1, 2);
    if (sigma[1] < 0.0f) { /* move the sign back to sigma[2]: negate two columns of U */
      sigma[1] = -sigma[1];
      sigma[2] = -sigma[2];
      for (int k = 0; k < 3; ++k) {
        U[3 * k + 1] = -U[3 * k + 1];
        U[3 * k + 2] = -U[3 * k + 2];
      }
    }
    if (sigma[0] < sigma[1]) svd3_swap_triplets_(U, sigma, V, 0, 1);
  }
}

/* Rotation of the polar decomposition F = R S: R = U V^T (proper even when det F < 0). */
DR_HD void polar_r(const float F[9], float R[9]) {
  float U[9], V[9], sigma[3];
  svd3(F, U, sigma, V);
  m3_mul_bt(U, V, R);
}

#endif

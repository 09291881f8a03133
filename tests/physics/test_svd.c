/* test_svd - the 3x3 SVD and polar decomposition of src/physics/svd.h on random matrices (seeded)
 * and hand-picked hard cases. Every result is checked against properties computed here in
 * double: reconstruction F = U diag(sigma) V^T, orthonormality and det +1 of U and V, the
 * ordering and sign rules, and the singular values against the square roots of the eigenvalues
 * of F^T F (a converged double-precision Jacobi eigen-solver, independent of the code under test). */
#include <math.h>
#include <string.h>

#include "physics/check.h"
#include "physics/svd.h"

/* ---- double helpers ---- */

static void dmul(const double a[9], const double b[9], double out[9]) {
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      out[3 * i + j] = a[3 * i] * b[j] + a[3 * i + 1] * b[3 + j] + a[3 * i + 2] * b[6 + j];
}

static double ddet(const double a[9]) {
  return a[0] * (a[4] * a[8] - a[5] * a[7]) - a[1] * (a[3] * a[8] - a[5] * a[6]) +
         a[2] * (a[3] * a[7] - a[4] * a[6]);
}

static double dfrob(const double a[9]) {
  double s = 0;
  for (int i = 0; i < 9; ++i) s += a[i] * a[i];
  return sqrt(s);
}

/* Eigenvalues of a symmetric 3x3 matrix, descending: classical cyclic Jacobi in double, iterated
 * until the off-diagonal vanishes (absolute accuracy ~1e-16 |A|, which the closed-form
 * trigonometric solution does not reach for small eigenvalues). */
static void sym_eig3(const double Ain[9], double ev[3]) {
  double a[3][3];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) a[i][j] = Ain[3 * i + j];
  for (int sweep = 0; sweep < 100; ++sweep) {
    const double off = a[0][1] * a[0][1] + a[0][2] * a[0][2] + a[1][2] * a[1][2];
    const double dia = a[0][0] * a[0][0] + a[1][1] * a[1][1] + a[2][2] * a[2][2];
    if (off <= 1e-40 * dia || off == 0.0) break;
    for (int p = 0; p < 2; ++p)
      for (int q = p + 1; q < 3; ++q) {
        if (a[p][q] == 0.0) continue;
        const double theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
        const double c = 1.0 / sqrt(t * t + 1.0), sn = t * c;
        /* a <- J^T a J with J the rotation in the (p, q) plane */
        for (int k = 0; k < 3; ++k) {
          const double akp = a[k][p], akq = a[k][q];
          a[k][p] = c * akp - sn * akq;
          a[k][q] = sn * akp + c * akq;
        }
        for (int k = 0; k < 3; ++k) {
          const double apk = a[p][k], aqk = a[q][k];
          a[p][k] = c * apk - sn * aqk;
          a[q][k] = sn * apk + c * aqk;
        }
      }
  }
  ev[0] = a[0][0];
  ev[1] = a[1][1];
  ev[2] = a[2][2];
  for (int i = 0; i < 2; ++i) /* sort descending */
    for (int j = 0; j < 2 - i; ++j)
      if (ev[j] < ev[j + 1]) {
        const double t = ev[j];
        ev[j] = ev[j + 1];
        ev[j + 1] = t;
      }
}

/* F = Ru diag(s) Rv^T with random rotations, rounded to float. */
static void compose(check_rng *rng, const double s[3], float F[9]) {
  double Ru[9], Rv[9];
  check_random_rotation(rng, Ru);
  check_random_rotation(rng, Rv);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double x = 0;
      for (int k = 0; k < 3; ++k) x += Ru[3 * i + k] * s[k] * Rv[3 * j + k];
      F[3 * i + j] = (float)x;
    }
}

/* ---- the checks of one decomposition ---- */

typedef struct stats {
  const char *name;
  int count;
  double recon, ortho, det, sval;
  double recon_tol, sval_tol;
} stats;

static void check_one(stats *st, const float F[9]) {
  float U[9], V[9], s[3];
  svd3(F, U, s, V);
  st->count++;

  double Fd[9], Ud[9], Vd[9];
  for (int i = 0; i < 9; ++i) {
    Fd[i] = F[i];
    Ud[i] = U[i];
    Vd[i] = V[i];
  }
  const double fn = dfrob(Fd);

  /* reconstruction */
  double diff[9];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double x = 0;
      for (int k = 0; k < 3; ++k) x += Ud[3 * i + k] * (double)s[k] * Vd[3 * j + k];
      diff[3 * i + j] = x - Fd[3 * i + j];
    }
  const double recon = (fn > 0) ? dfrob(diff) / fn : dfrob(diff);
  if (recon > st->recon) st->recon = recon;
  CHECK(recon <= st->recon_tol, "[%s #%d] reconstruction error %g", st->name, st->count, recon);

  /* orthonormality and proper rotations */
  double UtU[9], VtV[9], Ut[9], Vt[9];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      Ut[3 * i + j] = Ud[3 * j + i];
      Vt[3 * i + j] = Vd[3 * j + i];
    }
  dmul(Ut, Ud, UtU);
  dmul(Vt, Vd, VtV);
  double orth = 0;
  for (int i = 0; i < 9; ++i) {
    const double id = (i % 4 == 0) ? 1.0 : 0.0;
    orth = fmax(orth, fabs(UtU[i] - id));
    orth = fmax(orth, fabs(VtV[i] - id));
  }
  if (orth > st->ortho) st->ortho = orth;
  CHECK(orth <= 1e-5, "[%s #%d] orthonormality error %g", st->name, st->count, orth);
  const double du = ddet(Ud), dv = ddet(Vd);
  const double de = fmax(fabs(du - 1), fabs(dv - 1));
  if (de > st->det) st->det = de;
  CHECK(de <= 1e-5, "[%s #%d] det U = %.9g, det V = %.9g", st->name, st->count, du, dv);

  /* ordering and signs */
  CHECK(s[0] >= s[1] && s[1] >= fabsf(s[2]) && s[1] >= 0.0f,
        "[%s #%d] ordering violated: sigma = %.9g %.9g %.9g", st->name, st->count, s[0], s[1],
        s[2]);
  double A[9], Ft[9], ev[3];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) Ft[3 * i + j] = Fd[3 * j + i];
  dmul(Ft, Fd, A);
  sym_eig3(A, ev);
  double ref[3];
  for (int i = 0; i < 3; ++i) ref[i] = sqrt(fmax(ev[i], 0.0));
  const double detF = ddet(Fd);
  /* sign of sigma[2] = sign of det F wherever the sign of det F is meaningful in float */
  const double detscale = ref[0] * ref[0] * ref[0];
  if (detF > 1e-5 * detscale)
    CHECK(s[2] > 0.0f, "[%s #%d] det F = %g > 0 but sigma[2] = %g", st->name, st->count, detF,
          s[2]);
  if (detF < -1e-5 * detscale)
    CHECK(s[2] < 0.0f, "[%s #%d] det F = %g < 0 but sigma[2] = %g", st->name, st->count, detF,
          s[2]);

  /* singular values against the eigenvalues of F^T F */
  double sv = 0;
  for (int i = 0; i < 3; ++i) sv = fmax(sv, fabs(fabs((double)s[i]) - ref[i]));
  sv = (ref[0] > 0) ? sv / ref[0] : sv;
  if (sv > st->sval) st->sval = sv;
  CHECK(sv <= st->sval_tol, "[%s #%d] singular values %.9g %.9g %.9g vs %.9g %.9g %.9g",
        st->name, st->count, s[0], s[1], s[2], ref[0], ref[1], ref[2]);

  /* polar_r: proper rotation R with R^T F symmetric */
  float R[9];
  polar_r(F, R);
  double Rd[9], Rt[9], S[9];
  for (int i = 0; i < 9; ++i) Rd[i] = R[i];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) Rt[3 * i + j] = Rd[3 * j + i];
  dmul(Rt, Fd, S);
  double asym = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) asym = fmax(asym, fabs(S[3 * i + j] - S[3 * j + i]));
  CHECK(asym <= 1e-5 * fmax(fn, 1e-30) && fabs(ddet(Rd) - 1) <= 1e-5,
        "[%s #%d] polar_r: asymmetry of R^T F %g, det R %.9g", st->name, st->count, asym,
        ddet(Rd));
}

static void report(const stats *st) {
  printf("  %-34s n=%-6d max recon %.2e  orth %.2e  |det-1| %.2e  sigma err/sigma0 %.2e\n",
         st->name, st->count, st->recon, st->ortho, st->det, st->sval);
}

static stats make_stats(const char *name) {
  stats st;
  memset(&st, 0, sizeof st);
  st.name = name;
  st.recon_tol = 1e-5;
  st.sval_tol = 1e-5;
  return st;
}

int main(void) {
  printf("test_svd: svd3 and polar_r\n");
  check_rng rng = {20240611};
  float F[9];

  /* 1. uniform random entries */
  stats st = make_stats("uniform entries in [-1,1]");
  for (int n = 0; n < 20000; ++n) {
    for (int i = 0; i < 9; ++i) F[i] = (float)check_rng_range(&rng, -1, 1);
    check_one(&st, F);
  }
  report(&st);

  /* 2. near identity, the usual MPM deformation */
  st = make_stats("I + 1e-3 * uniform");
  for (int n = 0; n < 5000; ++n) {
    for (int i = 0; i < 9; ++i) F[i] = (float)((i % 4 == 0) + 1e-3 * check_rng_range(&rng, -1, 1));
    check_one(&st, F);
  }
  report(&st);

  /* 3. random rotations times log-uniform stretches in [1e-6, 1e3], random det sign */
  st = make_stats("stretches log-uniform [1e-6, 1e3]");
  st.recon_tol = 2e-5; /* condition numbers up to 1e9 */
  for (int n = 0; n < 20000; ++n) {
    double s[3];
    for (int i = 0; i < 3; ++i) s[i] = pow(10.0, check_rng_range(&rng, -6, 3));
    if (check_rng_unit(&rng) < 0.5) s[check_rng_u32(&rng) % 3] *= -1;
    compose(&rng, s, F);
    check_one(&st, F);
  }
  report(&st);

  /* 4. repeated singular values */
  st = make_stats("repeated singular values");
  for (int n = 0; n < 6000; ++n) {
    const double a = pow(10.0, check_rng_range(&rng, -2, 2)), b = pow(10.0, check_rng_range(&rng, -2, 2));
    double s[3];
    switch (n % 3) {
    case 0: s[0] = a; s[1] = a; s[2] = b; break;
    case 1: s[0] = a; s[1] = b; s[2] = b; break;
    default: s[0] = a; s[1] = a; s[2] = a; break;
    }
    if (n % 2) s[2] = -s[2];
    compose(&rng, s, F);
    check_one(&st, F);
  }
  report(&st);

  /* 5. rank deficient */
  st = make_stats("rank deficient (1 or 2 zeros)");
  for (int n = 0; n < 6000; ++n) {
    double s[3] = {pow(10.0, check_rng_range(&rng, -2, 2)), 0, 0};
    if (n % 2) s[1] = pow(10.0, check_rng_range(&rng, -2, 2));
    compose(&rng, s, F);
    check_one(&st, F);
  }
  report(&st);

  /* 6. strongly graded spectra */
  static const double graded[][3] = {{1, 1e-3, 1e-6}, {1e3, 1, 1e-3},  {1, 1e-6, 1e-6},
                                     {1, 1, 1e-6},    {1e3, 1e3, 1},  {1, -1e-3, 1e-6},
                                     {1e3, 1e-3, -1e-3}};
  st = make_stats("graded (1,1e-3,1e-6), (1e3,1,1e-3)...");
  st.recon_tol = 2e-5;
  for (int c = 0; c < 7; ++c)
    for (int n = 0; n < 1000; ++n) {
      compose(&rng, graded[c], F);
      check_one(&st, F);
    }
  report(&st);

  /* 7. hand-picked matrices */
  st = make_stats("special cases");
  static const float special[][9] = {
      {1, 0, 0, 0, 1, 0, 0, 0, 1},          /* identity */
      {0, 0, 0, 0, 0, 0, 0, 0, 0},          /* zero */
      {2, 0, 0, 0, 3, 0, 0, 0, 1},          /* diagonal, unsorted */
      {3, 0, 0, 0, 3, 0, 0, 0, 1},          /* repeated */
      {1, 0, 0, 0, 2, 0, 0, 0, 2},          /* repeated trailing */
      {2, 0, 0, 0, 2, 0, 0, 0, 2},          /* scaled identity */
      {-1, 0, 0, 0, -1, 0, 0, 0, 1},        /* rotation by pi */
      {1, 0, 0, 0, 1, 0, 0, 0, -1},         /* reflection */
      {-1, 0, 0, 0, -1, 0, 0, 0, -1},       /* point inversion */
      {-2, 0, 0, 0, -3, 0, 0, 0, -4},       /* inverted, all negative */
      {0, 1, 0, 1, 0, 0, 0, 0, 1},          /* odd permutation */
      {0, 1, 0, 0, 0, 1, 1, 0, 0},          /* even permutation */
      {0, -1, 0, 1, 0, 0, 0, 0, 1},         /* quarter turn */
      {1, 0, 0, 0, 0, 0, 0, 0, 0},          /* rank 1 */
      {0, 0, 0, 0, 0, 0, 0, 0, 5},          /* rank 1, last */
      {1, 0, 0, 0, 1, 0, 0, 0, 0},          /* rank 2 */
      {1, 2, 3, 1, 2, 3, 1, 2, 3},          /* rank 1, repeated rows */
      {1, 2, 3, 4, 5, 6, 7, 8, 9},          /* rank 2 */
      {1, 1e3f, 0, 0, 1, 0, 0, 0, 1},       /* huge shear */
      {1e3f, 0, 0, 0, 1e3f, 0, 0, 0, 1e-3f}, /* huge stretch */
      {1, 0, 0, 0, 1, 0, 0, 0, 1e-6f},      /* tiny */
      {1e-6f, 0, 0, 0, 1e-6f, 0, 0, 0, 1},  /* tiny, repeated */
      {1e-30f, 0, 0, 0, 2e-30f, 0, 0, 1e-30f, 1e-30f}, /* underflow territory */
      {1e30f, 0, 0, 0, 2e30f, 0, 0, 1e30f, 1e30f},     /* overflow territory */
      {1, 1e-7f, 0, 1e-7f, 1, 0, 0, 0, 1},  /* almost identity */
      {0, 0, 0, 0, 0, 0, 0, 0, -1e-3f},     /* rank 1, negative */
  };
  const int nspecial = (int)(sizeof special / sizeof special[0]);
  for (int c = 0; c < nspecial; ++c) check_one(&st, special[c]);
  /* random rotations (sigma = 1, 1, 1) */
  for (int n = 0; n < 2000; ++n) {
    double R[9];
    check_random_rotation(&rng, R);
    for (int i = 0; i < 9; ++i) F[i] = (float)R[i];
    check_one(&st, F);
  }
  report(&st);

  /* exact expectations of a few special cases */
  {
    float U[9], V[9], s[3];
    const float I[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    svd3(I, U, s, V);
    CHECK(s[0] == 1.0f && s[1] == 1.0f && s[2] == 1.0f, "identity: sigma %g %g %g", s[0], s[1],
          s[2]);
    const float Z[9] = {0};
    svd3(Z, U, s, V);
    int uv_identity = 1;
    for (int i = 0; i < 9; ++i) uv_identity &= (U[i] == I[i] && V[i] == I[i]);
    CHECK(s[0] == 0.0f && s[1] == 0.0f && s[2] == 0.0f && uv_identity,
          "zero matrix: sigma %g %g %g", s[0], s[1], s[2]);
    const float D[9] = {-2, 0, 0, 0, -3, 0, 0, 0, -4};
    svd3(D, U, s, V);
    CHECK(fabsf(s[0] - 4) < 1e-6f && fabsf(s[1] - 3) < 1e-6f && fabsf(s[2] + 2) < 1e-6f,
          "diag(-2,-3,-4): sigma %g %g %g, expected 4 3 -2", s[0], s[1], s[2]);
    const float M[9] = {1, 0, 0, 0, 1, 0, 0, 0, -1};
    svd3(M, U, s, V);
    CHECK(fabsf(s[0] - 1) < 1e-6f && fabsf(s[1] - 1) < 1e-6f && fabsf(s[2] + 1) < 1e-6f,
          "reflection: sigma %g %g %g, expected 1 1 -1", s[0], s[1], s[2]);
    const float R1[9] = {1, 2, 3, 1, 2, 3, 1, 2, 3};
    svd3(R1, U, s, V);
    CHECK(fabsf(s[0] - sqrtf(42.0f)) < 1e-5f && fabsf(s[1]) < 1e-5f && fabsf(s[2]) < 1e-5f,
          "rank one: sigma %g %g %g, expected sqrt(42) 0 0", s[0], s[1], s[2]);
    printf("  exact cases: identity, zero, diag(-2,-3,-4), reflection, rank one\n");
  }
  return check_summary("test_svd");
}

/* test_constitutive - the material models of src/physics/constitutive.h against expectations
 * derived here: zero stress at rest and under rotation, symmetry, tau = (dpsi/dF) F^T by finite
 * differences of the energy, linear elasticity at small strain, the Drucker-Prager return
 * mapping (admissible states untouched, tension to the cone tip, compression projected onto the
 * yield surface radially at constant volume, zero friction removes the deviator), the weakly
 * compressible fluid (pressure signs and values, F reset to cbrt(J) I, clamps), energies, wave
 * speeds and the derived parameters. */
#include <math.h>
#include <string.h>

#include "physics/check.h"
#include "physics/constitutive.h"

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

static double fdet(const float a[9]) {
  double d[9];
  for (int i = 0; i < 9; ++i) d[i] = a[i];
  return ddet(d);
}

static double maxabs(const double *a, int n) {
  double m = 0;
  for (int i = 0; i < n; ++i) m = fmax(m, fabs(a[i]));
  return m;
}

static double maxabsf(const float *a, int n) {
  double m = 0;
  for (int i = 0; i < n; ++i) m = fmax(m, fabs((double)a[i]));
  return m;
}

/* |dev t|_F and tr t of a symmetric matrix */
static void dev_tr(const double t[9], double *devnorm, double *tr) {
  const double tr_ = t[0] + t[4] + t[8];
  double n = 0;
  for (int i = 0; i < 9; ++i) {
    const double d = t[i] - ((i % 4 == 0) ? tr_ / 3.0 : 0.0);
    n += d * d;
  }
  *devnorm = sqrt(n);
  *tr = tr_;
}

static void to_double(const float *a, double *out, int n) {
  for (int i = 0; i < n; ++i) out[i] = a[i];
}

/* Ru diag(d) Rv^T in double */
static void udvt(const double Ru[9], const double d[3], const double Rv[9], double out[9]) {
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double x = 0;
      for (int k = 0; k < 3; ++k) x += Ru[3 * i + k] * d[k] * Rv[3 * j + k];
      out[3 * i + j] = x;
    }
}

/* Rounds to a multiple of 2^-22 so that F +- h, F +- 2h with h >= 2^-8 are exact in float for
 * |F| < 4 (the finite differences then take exactly the steps they divide by). */
static float grid22(double x) { return (float)(nearbyint(x * 4194304.0) / 4194304.0); }

/* tau_fd = P F^T with P = dpsi/dF by fourth-order central differences of the float energy
 * (step h, a power of two). */
static void fd_tau(const material_params *m, const float F[9], float h, double tau_fd[9]) {
  double P[9];
  for (int idx = 0; idx < 9; ++idx) {
    float G[9];
    double e[4];
    const float steps[4] = {h, -h, 2 * h, -2 * h};
    for (int k = 0; k < 4; ++k) {
      memcpy(G, F, sizeof G);
      G[idx] = F[idx] + steps[k];
      e[k] = constitutive_energy_density(m, G);
    }
    P[idx] = (8.0 * (e[0] - e[1]) - (e[2] - e[3])) / (12.0 * h);
  }
  double Fd[9], Ft[9];
  to_double(F, Fd, 9);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) Ft[3 * i + j] = Fd[3 * j + i];
  dmul(P, Ft, tau_fd);
}

/* F = Ru diag(s) Rv^T rounded to the 2^-22 grid; returns Ru and Rv too. */
static void random_f(check_rng *rng, const double s[3], float F[9], double Ru[9], double Rv[9]) {
  double D[9];
  check_random_rotation(rng, Ru);
  check_random_rotation(rng, Rv);
  udvt(Ru, s, Rv, D);
  for (int i = 0; i < 9; ++i) F[i] = grid22(D[i]);
}

static material_params solid(int model, float phi_deg) {
  material_params m;
  material_from_user(&m, model, 1000.0f, 1.0e6f, 0.3f, phi_deg, 0.0f, 0.0f);
  return m;
}

/* ---- parameters and wave speeds ---- */

static void test_parameters(void) {
  const double E = 1e6, nu = 0.3, rho = 1000;
  material_params m = solid(MODEL_FIXED_COROTATED, 30.0f);
  const double mu = E / (2 * (1 + nu)), la = E * nu / ((1 + nu) * (1 - 2 * nu));
  CHECK(fabs(m.mu - mu) <= 1e-6 * mu && fabs(m.lambda - la) <= 1e-6 * la,
        "mu %g lambda %g, expected %g %g", m.mu, m.lambda, mu, la);
  const double s30 = 0.5; /* sin 30 deg */
  const double alpha30 = sqrt(2.0 / 3.0) * 2 * s30 / (3 - s30);
  CHECK(fabs(m.alpha - alpha30) <= 1e-6, "alpha(30 deg) = %.9g, expected %.9g", m.alpha, alpha30);
  material_params m0 = solid(MODEL_DRUCKER_PRAGER, 0.0f);
  CHECK(m0.alpha == 0.0f, "alpha(0 deg) = %g", m0.alpha);
  material_params m90 = solid(MODEL_DRUCKER_PRAGER, 90.0f);
  CHECK(fabs(m90.alpha - sqrt(2.0 / 3.0)) <= 1e-6, "alpha(90 deg) = %.9g, expected sqrt(2/3)",
        m90.alpha);
  /* P-wave modulus M = lambda + 2 mu = E (1 - nu) / ((1 + nu)(1 - 2 nu)) */
  const double cp = sqrt(E * (1 - nu) / ((1 + nu) * (1 - 2 * nu)) / rho);
  CHECK(fabs(constitutive_wave_speed(&m) - cp) <= 1e-5 * cp, "fixed corotated wave speed %.9g vs %.9g",
        constitutive_wave_speed(&m), cp);
  CHECK(fabs(constitutive_wave_speed(&m0) - cp) <= 1e-5 * cp, "Drucker-Prager wave speed %.9g vs %.9g",
        constitutive_wave_speed(&m0), cp);
  material_params f;
  material_from_user(&f, MODEL_WEAKLY_COMPRESSIBLE, 998.0f, 0.0f, 0.0f, 0.0f, 2.2e9f, 7.0f);
  const double cf = sqrt(2.2e9 * 7 / 998.0);
  CHECK(f.model == MODEL_WEAKLY_COMPRESSIBLE && f.bulk == 2.2e9f && f.gamma == 7.0f &&
            f.density == 998.0f,
        "fluid parameters not copied");
  CHECK(fabs(constitutive_wave_speed(&f) - cf) <= 1e-5 * cf, "fluid wave speed %.9g vs %.9g",
        constitutive_wave_speed(&f), cf);
  material_params bad = m;
  bad.model = 42;
  float F[9] = {1.1f, 0.2f, 0, 0, 0.9f, 0, 0, 0, 1}, tau[9];
  constitutive_update(&bad, F, tau);
  CHECK(maxabsf(tau, 9) == 0.0 && F[0] == 1.1f, "unknown model: tau not zero or F changed");
  printf("  parameters: mu %.6g lambda %.6g alpha(30) %.6f; wave speeds solid %.4f m/s "
         "(P-wave modulus formula), fluid %.2f m/s\n",
         m.mu, m.lambda, m.alpha, constitutive_wave_speed(&m), constitutive_wave_speed(&f));
}

/* ---- fixed corotated ---- */

static void test_fixed_corotated(check_rng *rng) {
  const material_params m = solid(MODEL_FIXED_COROTATED, 0.0f);
  const double scale = m.mu + m.lambda;
  float F[9], tau[9];

  m3_identity(F);
  constitutive_update(&m, F, tau);
  CHECK(maxabsf(tau, 9) <= 1e-6 * scale, "tau(I) = %g", maxabsf(tau, 9));
  CHECK(constitutive_energy_density(&m, F) == 0.0f, "psi(I) = %g",
        constitutive_energy_density(&m, F));

  double max_rot = 0, max_rot_e = 0;
  for (int n = 0; n < 2000; ++n) {
    double R[9];
    check_random_rotation(rng, R);
    for (int i = 0; i < 9; ++i) F[i] = (float)R[i];
    max_rot_e = fmax(max_rot_e, fabs(constitutive_energy_density(&m, F)));
    constitutive_update(&m, F, tau);
    max_rot = fmax(max_rot, maxabsf(tau, 9));
  }
  printf("  fixed corotated: max |tau| over 2000 rotations = %.3g (mu + lambda = %.3g), "
         "max psi = %.3g\n",
         max_rot, scale, max_rot_e);
  CHECK(max_rot <= 1e-5 * scale, "rotation gives stress %g", max_rot);
  CHECK(max_rot_e <= 1e-6 * scale, "rotation gives energy %g", max_rot_e);

  /* small uniaxial stretch: linear elasticity, tau_xx = (lambda + 2 mu) e, tau_yy = lambda e */
  const double e = 1e-3;
  float Fu[9] = {(float)(1 + e), 0, 0, 0, 1, 0, 0, 0, 1};
  constitutive_update(&m, Fu, tau);
  const double txx = (m.lambda + 2 * m.mu) * e, tyy = m.lambda * e;
  CHECK(fabs(tau[0] - txx) <= 5e-3 * txx && fabs(tau[4] - tyy) <= 5e-3 * txx &&
            fabs(tau[8] - tyy) <= 5e-3 * txx && fabs(tau[1]) <= 1e-6 * txx,
        "uniaxial: tau diag %g %g %g vs %g %g %g", tau[0], tau[4], tau[8], txx, tyy, tyy);

  /* symmetry, F untouched, and tau against the derivative of the energy */
  double max_fd = 0, max_asym = 0;
  int unchanged = 1;
  for (int n = 0; n < 400; ++n) {
    double s[3], Ru[9], Rv[9];
    if (n < 300) {
      for (int i = 0; i < 3; ++i) s[i] = check_rng_range(rng, 0.6, 1.5);
    } else { /* inverted, away from sigma_1 + sigma_2 = 0 where psi has a kink */
      s[0] = check_rng_range(rng, 0.8, 1.5);
      s[1] = check_rng_range(rng, 0.8, 1.5);
      s[2] = -check_rng_range(rng, 0.1, 0.4);
    }
    random_f(rng, s, F, Ru, Rv);
    double tfd[9], td[9];
    fd_tau(&m, F, 1.0f / 128.0f, tfd);
    float G[9];
    memcpy(G, F, sizeof G);
    constitutive_update(&m, G, tau);
    unchanged &= (memcmp(G, F, sizeof G) == 0);
    to_double(tau, td, 9);
    double diff[9];
    for (int i = 0; i < 9; ++i) diff[i] = td[i] - tfd[i];
    const double rel = maxabs(diff, 9) / fmax(maxabs(tfd, 9), 1e-3 * scale);
    max_fd = fmax(max_fd, rel);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) max_asym = fmax(max_asym, fabs(td[3 * i + j] - td[3 * j + i]));
  }
  printf("  fixed corotated: 400 random F (100 inverted): max |tau - (dpsi/dF) F^T|/|tau| = %.3g, "
         "max asymmetry %.3g\n",
         max_fd, max_asym);
  CHECK(max_fd <= 1e-3, "tau differs from the energy derivative: %g", max_fd);
  CHECK(max_asym == 0.0, "tau not symmetric: %g", max_asym);
  CHECK(unchanged, "fixed corotated changed F");
}

/* ---- Drucker-Prager ---- */

/* Principal log strain with trace tr and deviatoric part of norm r along a random direction. */
static void random_strain(check_rng *rng, double tr, double r, double eps[3]) {
  double d[3], mean = 0, n = 0;
  for (int i = 0; i < 3; ++i) {
    d[i] = check_rng_range(rng, -1, 1);
    mean += d[i] / 3.0;
  }
  for (int i = 0; i < 3; ++i) {
    d[i] -= mean;
    n += d[i] * d[i];
  }
  n = sqrt(n);
  for (int i = 0; i < 3; ++i) eps[i] = tr / 3.0 + (n > 1e-12 ? r * d[i] / n : 0.0);
}

static void hencky_tau(const material_params *m, const double Ru[9], const double eps[3],
                       double tau[9]) {
  const double tr = eps[0] + eps[1] + eps[2];
  double d[3];
  for (int i = 0; i < 3; ++i) d[i] = 2.0 * m->mu * eps[i] + m->lambda * tr;
  udvt(Ru, d, Ru, tau);
}

static void test_drucker_prager(check_rng *rng) {
  const material_params m = solid(MODEL_DRUCKER_PRAGER, 30.0f);
  /* admissible deviator radius for a given trace: |epshat| <= -alpha (3 lambda + 2 mu)/(2 mu) tr */
  const double cone = m.alpha * (3.0 * m.lambda + 2.0 * m.mu) / (2.0 * m.mu);
  float F[9], G[9], tau[9];

  m3_identity(F);
  constitutive_update(&m, F, tau);
  CHECK(maxabsf(tau, 9) == 0.0, "DP tau(I) = %g", maxabsf(tau, 9));

  /* 1. inside the cone: F unchanged, tau = Hencky stress (by hand and by the energy) */
  double max_in = 0, max_in_fd = 0;
  int unchanged = 1;
  for (int n = 0; n < 500; ++n) {
    double eps[3], s[3], Ru[9], Rv[9];
    const double tr = -check_rng_range(rng, 1e-3, 0.1);
    random_strain(rng, tr, check_rng_range(rng, 0, 0.9) * cone * -tr, eps);
    for (int i = 0; i < 3; ++i) s[i] = exp(eps[i]);
    random_f(rng, s, F, Ru, Rv);
    memcpy(G, F, sizeof G);
    constitutive_update(&m, G, tau);
    unchanged &= (memcmp(G, F, sizeof G) == 0);
    double expect[9], td[9], diff[9], tfd[9];
    hencky_tau(&m, Ru, eps, expect);
    to_double(tau, td, 9);
    for (int i = 0; i < 9; ++i) diff[i] = td[i] - expect[i];
    max_in = fmax(max_in, maxabs(diff, 9) / maxabs(expect, 9));
    fd_tau(&m, F, 1.0f / 128.0f, tfd);
    for (int i = 0; i < 9; ++i) diff[i] = td[i] - tfd[i];
    max_in_fd = fmax(max_in_fd, maxabs(diff, 9) / maxabs(tfd, 9));
  }
  printf("  Drucker-Prager, 500 states inside the cone: F unchanged %s, max rel |tau - Hencky| = "
         "%.3g, max rel |tau - (dpsi/dF) F^T| = %.3g\n",
         unchanged ? "yes" : "NO", max_in, max_in_fd);
  CHECK(unchanged, "an admissible state was changed");
  CHECK(max_in <= 1e-3, "Hencky stress mismatch %g", max_in);
  CHECK(max_in_fd <= 1e-3, "Hencky stress vs energy derivative %g", max_in_fd);

  /* 2. expansion: to the cone tip, F = rotation of the polar decomposition, tau = 0 */
  double max_tip_f = 0, max_tip_tau = 0;
  for (int n = 0; n < 500; ++n) {
    double eps[3], s[3], Ru[9], Rv[9], R[9];
    random_strain(rng, check_rng_range(rng, 1e-4, 0.2), check_rng_range(rng, 0, 0.3), eps);
    for (int i = 0; i < 3; ++i) s[i] = exp(eps[i]);
    random_f(rng, s, F, Ru, Rv);
    constitutive_update(&m, F, tau);
    const double one[3] = {1, 1, 1};
    udvt(Ru, one, Rv, R);
    for (int i = 0; i < 9; ++i) max_tip_f = fmax(max_tip_f, fabs(F[i] - R[i]));
    max_tip_tau = fmax(max_tip_tau, maxabsf(tau, 9));
  }
  printf("  Drucker-Prager, 500 expansions: max |F_new - R| = %.3g, max |tau| = %.3g\n", max_tip_f,
         max_tip_tau);
  CHECK(max_tip_f <= 1e-5, "expansion: F not projected to the rotation (%g)", max_tip_f);
  CHECK(max_tip_tau == 0.0, "expansion: stress %g", max_tip_tau);

  /* 3. compression outside the cone: radial return onto the yield surface at constant volume */
  double max_yield = 0, max_vol = 0, max_dir = 0, max_tr = 0, max_fix = 0;
  int shrunk = 1;
  for (int n = 0; n < 1000; ++n) {
    double eps[3], s[3], Ru[9], Rv[9];
    const double tr = -check_rng_range(rng, 1e-3, 0.1);
    random_strain(rng, tr, check_rng_range(rng, 1.2, 6.0) * cone * -tr, eps);
    for (int i = 0; i < 3; ++i) s[i] = exp(eps[i]);
    random_f(rng, s, F, Ru, Rv);
    const double J0 = fdet(F);
    constitutive_update(&m, F, tau);
    double td[9], trial[9], dn, t, dn0, t0;
    to_double(tau, td, 9);
    hencky_tau(&m, Ru, eps, trial);
    dev_tr(td, &dn, &t);
    dev_tr(trial, &dn0, &t0);
    /* the pressure of the input F itself: tr tau = (3 lambda + 2 mu) log J */
    const double t_in = (3.0 * m.lambda + 2.0 * m.mu) * log(J0);
    /* yield function y = |dev tau| + alpha tr tau: zero on the surface */
    max_yield = fmax(max_yield, fabs(dn + m.alpha * t) / (fabs(t) + dn));
    max_vol = fmax(max_vol, fabs(fdet(F) - J0) / J0);
    /* pressure kept: the error in volumetric log strain, tr tau / (3 lambda + 2 mu) - log J_in
     * (absolute: it is a small difference of principal strains of size |dev eps|, known to
     * the float SVD's ~1e-7 of sigma_max) */
    max_tr = fmax(max_tr, fabs(t - t_in) / (3.0 * m.lambda + 2.0 * m.mu));
    shrunk &= (dn < dn0);
    /* direction of the deviator kept: dev tau = k dev tau_trial */
    double dot = 0;
    for (int i = 0; i < 9; ++i) {
      const double a = td[i] - ((i % 4 == 0) ? t / 3 : 0), b = trial[i] - ((i % 4 == 0) ? t0 / 3 : 0);
      dot += a * b;
    }
    max_dir = fmax(max_dir, fabs(1.0 - dot / (dn * dn0)));
    /* the projected state is admissible: a second update leaves it (nearly) alone */
    memcpy(G, F, sizeof G);
    float tau2[9];
    constitutive_update(&m, G, tau2);
    for (int i = 0; i < 9; ++i) max_fix = fmax(max_fix, fabs(G[i] - F[i]));
  }
  printf("  Drucker-Prager, 1000 compressions outside the cone: max |y|/|tau| = %.3g, "
         "max rel volume change %.3g, max |tr tau/(3 lambda + 2 mu) - log J_in| %.3g, max 1 - cos(dev, dev_trial) "
         "%.3g, max |F change| on re-projection %.3g\n",
         max_yield, max_vol, max_tr, max_dir, max_fix);
  CHECK(max_yield <= 1e-4, "projected state off the yield surface: %g", max_yield);
  CHECK(max_vol <= 1e-5, "projection changed the volume: %g", max_vol);
  CHECK(max_tr <= 5e-6, "projection changed the pressure: log-volume error %g", max_tr);
  CHECK(max_dir <= 1e-5, "projection is not radial: %g", max_dir);
  CHECK(shrunk, "projection did not shrink the deviator");
  CHECK(max_fix <= 1e-5, "projected state is not a fixed point: %g", max_fix);

  /* 4. friction angle 0: deviator removed, volume kept, F = J^(1/3) R */
  const material_params m0 = solid(MODEL_DRUCKER_PRAGER, 0.0f);
  double max_dev0 = 0, max_vol0 = 0, max_iso = 0;
  for (int n = 0; n < 500; ++n) {
    double eps[3], s[3], Ru[9], Rv[9];
    const double tr = -check_rng_range(rng, 1e-3, 0.2);
    random_strain(rng, tr, check_rng_range(rng, 0, 0.3), eps);
    for (int i = 0; i < 3; ++i) s[i] = exp(eps[i]);
    random_f(rng, s, F, Ru, Rv);
    const double J0 = fdet(F);
    constitutive_update(&m0, F, tau);
    double td[9], dn, t, Fd[9], Ft[9], b[9];
    to_double(tau, td, 9);
    dev_tr(td, &dn, &t);
    max_dev0 = fmax(max_dev0, dn / fabs(t));
    max_vol0 = fmax(max_vol0, fabs(fdet(F) - J0) / J0);
    to_double(F, Fd, 9);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) Ft[3 * i + j] = Fd[3 * j + i];
    dmul(Fd, Ft, b); /* F F^T = J^(2/3) I */
    const double j23 = pow(J0, 2.0 / 3.0);
    for (int i = 0; i < 9; ++i)
      max_iso = fmax(max_iso, fabs(b[i] - ((i % 4 == 0) ? j23 : 0.0)) / j23);
  }
  printf("  Drucker-Prager, friction 0, 500 compressions: max |dev tau|/|tr tau| = %.3g, max rel "
         "volume change %.3g, max |F F^T - J^(2/3) I|/J^(2/3) = %.3g\n",
         max_dev0, max_vol0, max_iso);
  CHECK(max_dev0 <= 1e-5, "zero friction left a deviator: %g", max_dev0);
  CHECK(max_vol0 <= 1e-5, "zero friction changed the volume: %g", max_vol0);
  CHECK(max_iso <= 1e-5, "zero friction: F F^T not isotropic: %g", max_iso);

  /* 5. inverted input: admissible ones keep F (and a finite stress); projected ones stay
   * inverted with the same J; an inverted expansion goes to a reflection (|s| = 1) */
  {
    float Fi[9] = {1, 0, 0, 0, 0.99f, 0, 0, 0, -0.98f}, F0[9];
    memcpy(F0, Fi, sizeof F0);
    constitutive_update(&m, Fi, tau);
    CHECK(memcmp(Fi, F0, sizeof Fi) == 0 && isfinite(tau[0]) && tau[8] < 0.0f,
          "inverted admissible state changed or bad stress %g", tau[8]);
    float Fj[9] = {1.3f, 0, 0, 0, 0.9f, 0, 0, 0, -0.5f};
    const double J0 = fdet(Fj);
    constitutive_update(&m, Fj, tau);
    const double J1 = fdet(Fj);
    CHECK(J1 < 0 && fabs(J1 - J0) <= 1e-5 * fabs(J0) && fabs(Fj[0] - 1.3f) > 1e-3f,
          "inverted projected: det %g -> %g (or not projected)", J0, J1);
    float Fk[9] = {1.3f, 0, 0, 0, 1.1f, 0, 0, 0, -0.9f};
    constitutive_update(&m, Fk, tau);
    CHECK(fabs(Fk[0] - 1) < 1e-6 && fabs(Fk[4] - 1) < 1e-6 && fabs(Fk[8] + 1) < 1e-6 &&
              maxabsf(tau, 9) == 0.0,
          "inverted expansion: F diag %g %g %g", Fk[0], Fk[4], Fk[8]);
  }
  CHECK(constitutive_energy_density(&m, F) >= 0.0f, "negative Hencky energy");
}

/* ---- weakly compressible fluid ---- */

static void test_fluid(check_rng *rng) {
  material_params m;
  const double K = 1e5, g = 7;
  material_from_user(&m, MODEL_WEAKLY_COMPRESSIBLE, 1000.0f, 0, 0, 0, (float)K, (float)g);
  float F[9], tau[9];

  /* pressure signs and values at a few volume ratios; no tension: J > 1 goes back to 1, p = 0 */
  const double Js[] = {0.8, 0.9, 0.99, 1.0, 1.01, 1.1, 1.5};
  for (int k = 0; k < 7; ++k) {
    const float Fv[9] = {(float)Js[k], 0, 0, 0, 1, 0, 0, 0, 1};
    memcpy(F, Fv, sizeof F);
    constitutive_update(&m, F, tau);
    const double J = fmin((float)Js[k], 1.0);
    const double p = -tau[0] / J, p_hand = K * (pow(J, -g) - 1);
    CHECK(fabs(p - p_hand) <= 1e-5 * fabs(p_hand) + 1e-6 * K, "J = %g: p = %.9g, expected %.9g",
          J, p, p_hand);
    CHECK((J < 1 && p > 0) || (J == 1 && p == 0), "J = %g: p = %g, wrong sign", J, p);
    CHECK(fabs(fdet(F) - J) <= 1e-6, "J = %g: det F %g after the update", Js[k], fdet(F));
    CHECK(tau[0] == tau[4] && tau[4] == tau[8] && tau[1] == 0 && tau[2] == 0 && tau[3] == 0 &&
              tau[5] == 0 && tau[6] == 0 && tau[7] == 0,
          "J = %g: tau not isotropic", J);
  }

  /* shear only (det exactly 1) and rotations: no stress, F back to I */
  {
    float S[9] = {1, 0.5f, 0, 0, 1, 0.25f, 0, 0, 1};
    constitutive_update(&m, S, tau);
    CHECK(maxabsf(tau, 9) == 0.0, "shear gives stress %g", maxabsf(tau, 9));
    CHECK(S[0] == 1 && S[4] == 1 && S[8] == 1 && S[1] == 0 && S[5] == 0, "shear not removed");
    double max_rot = 0;
    for (int n = 0; n < 200; ++n) {
      double R[9];
      check_random_rotation(rng, R);
      for (int i = 0; i < 9; ++i) F[i] = (float)R[i];
      constitutive_update(&m, F, tau);
      max_rot = fmax(max_rot, maxabsf(tau, 9));
    }
    CHECK(max_rot <= 1e-5 * K, "rotation gives stress %g", max_rot);
  }

  /* random F: reset to cbrt(J) I with det preserved (up to the clamp at 1), tau = -p J I */
  double max_det = 0, max_p = 0;
  for (int n = 0; n < 2000; ++n) {
    for (int i = 0; i < 9; ++i) F[i] = (float)((i % 4 == 0) + check_rng_range(rng, -0.2, 0.2));
    const double J0 = fmin(fdet(F), 1.0);
    constitutive_update(&m, F, tau);
    max_det = fmax(max_det, fabs(fdet(F) - J0) / J0);
    int reset = (F[0] == F[4] && F[4] == F[8]);
    for (int i = 0; i < 9; ++i) reset &= (i % 4 == 0) || F[i] == 0.0f;
    CHECK(reset, "F not reset to a multiple of I");
    const double expect = -K * (pow(J0, -g) - 1) * J0;
    /* float det F carries ~1e-7 relative error, i.e. gamma K 1e-7 in p: floor of 1e-2 K */
    max_p = fmax(max_p, fabs(tau[0] - expect) / (fabs(expect) + 1e-2 * K));
  }
  printf("  fluid: 2000 random F: max rel det change after reset %.3g, max rel |tau - (-p J)| "
         "%.3g\n",
         max_det, max_p);
  CHECK(max_det <= 1e-6, "reset changed the volume: %g", max_det);
  CHECK(max_p <= 1e-4, "pressure mismatch %g", max_p);

  /* clamps */
  {
    float Fc[9] = {0.01f, 0, 0, 0, 1, 0, 0, 0, 1};
    constitutive_update(&m, Fc, tau);
    CHECK(fabs(fdet(Fc) - DR_WC_J_MIN) <= 1e-6 && isfinite(tau[0]) && tau[0] < 0,
          "J = 0.01 not clamped: det %g", fdet(Fc));
    float Fn[9] = {-0.5f, 0, 0, 0, 1, 0, 0, 0, 1};
    constitutive_update(&m, Fn, tau);
    CHECK(fabs(fdet(Fn) - DR_WC_J_MIN) <= 1e-6 && isfinite(tau[0]) && tau[0] < 0,
          "inverted J not clamped: det %g", fdet(Fn));
    float Fb[9] = {100, 0, 0, 0, 1, 0, 0, 0, 1};
    constitutive_update(&m, Fb, tau);
    CHECK(DR_WC_J_MAX == 1.0f && fdet(Fb) == 1.0f && maxabsf(tau, 9) == 0.0,
          "J = 100 not clamped to 1 without tension: det %g, tau %g", fdet(Fb), tau[0]);
  }

  /* energy: psi(1) = 0, psi >= 0, -dpsi/dJ = p (gamma = 7 and gamma = 1), tau = (dpsi/dF) F^T;
   * psi = p = 0 for J >= 1 (no tension), so psi is C1 but not C2 at J = 1: the finite
   * differences (steps up to 2h in J) skip the states within 3h of it */
  const double gammas[2] = {7.0, 1.0};
  for (int k = 0; k < 2; ++k) {
    material_params mg = m;
    mg.gamma = (float)gammas[k];
    const float I[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    CHECK(constitutive_energy_density(&mg, I) == 0.0f, "psi(1) = %g",
          constitutive_energy_density(&mg, I));
    double max_dj = 0;
    int nonneg = 1;
    for (int n = 0; n <= 40; ++n) {
      const float J = grid22(0.6 + n * 0.02); /* 0.6 .. 1.4 */
      const float h = 1.0f / 128.0f;
      const float Fj[9] = {J, 0, 0, 0, 1, 0, 0, 0, 1};
      nonneg &= constitutive_energy_density(&mg, Fj) >= 0.0f;
      if (fabsf(J - 1.0f) < 3.0f * h) continue;
      float e[4];
      const float steps[4] = {h, -h, 2 * h, -2 * h};
      for (int q = 0; q < 4; ++q) {
        const float Fj[9] = {J + steps[q], 0, 0, 0, 1, 0, 0, 0, 1};
        e[q] = constitutive_energy_density(&mg, Fj);
      }
      const double dpsi = (8.0 * ((double)e[0] - e[1]) - ((double)e[2] - e[3])) / (12.0 * h);
      const double p = K * (pow(fmin(J, 1.0), -gammas[k]) - 1);
      /* near J = 1 the FD itself is only good to ~1e-5 K (truncation of a stiff
       * gamma = 7 potential plus float round-off), hence the 0.1 K floor of the scale */
      max_dj = fmax(max_dj, fabs(-dpsi - p) / (fabs(p) + 0.1 * K));
    }
    double max_fd = 0;
    for (int n = 0; n < 100; ++n) {
      for (int i = 0; i < 9; ++i) F[i] = grid22((i % 4 == 0) + check_rng_range(rng, -0.1, 0.1));
      if (fabs(fdet(F) - 1.0) < 3.0 / 128.0) continue; /* the kink at J = 1 (see above) */
      double tfd[9], td[9], diff[9];
      fd_tau(&mg, F, 1.0f / 128.0f, tfd);
      constitutive_update(&mg, F, tau);
      to_double(tau, td, 9);
      for (int i = 0; i < 9; ++i) diff[i] = td[i] - tfd[i];
      max_fd = fmax(max_fd, maxabs(diff, 9) / (maxabs(tfd, 9) + 0.1 * K));
    }
    printf("  fluid gamma = %g: max |-dpsi/dJ - p| rel = %.3g, max |tau - (dpsi/dF) F^T| rel = "
           "%.3g\n",
           gammas[k], max_dj, max_fd);
    CHECK(max_dj <= 1e-3, "gamma %g: -dpsi/dJ differs from p: %g", gammas[k], max_dj);
    CHECK(max_fd <= 1e-3, "gamma %g: tau differs from the energy derivative: %g", gammas[k], max_fd);
    CHECK(nonneg, "gamma %g: negative energy", gammas[k]);
  }
}

/* The fluid's viscous stress: tau += mu J (C + C^T - 2/3 tr C I) against the formula written out
 * here for random C and J, traceless and symmetric; nothing added (bitwise) with mu = 0 or for
 * another model; a simple shear C = [[0, g], [0, 0]] gives the Newtonian tau_xy = mu g J. */
static void test_viscous(check_rng *rng) {
  material_params m;
  material_from_user(&m, MODEL_WEAKLY_COMPRESSIBLE, 1000.0f, 0, 0, 0, 1e5f, 7.0f);
  CHECK(m.viscosity == 0.0f, "viscosity defaults to %g", m.viscosity);
  double max_err = 0;
  for (int t = 0; t < 200; ++t) {
    float C[9], F[9], tau[9], tau0[9];
    for (int q = 0; q < 9; ++q) C[q] = (float)check_rng_range(rng, -50, 50);
    const float Fv[9] = {(float)check_rng_range(rng, 0.8, 1.0), 0, 0, 0, 1, 0, 0, 0, 1};
    memcpy(F, Fv, sizeof F);
    m.viscosity = 0.0f;
    constitutive_update(&m, F, tau0);
    memcpy(tau, tau0, sizeof tau);
    constitutive_add_viscous(&m, F, C, tau);
    CHECK(memcmp(tau, tau0, sizeof tau) == 0, "mu = 0 changed tau");
    const double mu = check_rng_range(rng, 1e-3, 10);
    m.viscosity = (float)mu;
    constitutive_add_viscous(&m, F, C, tau);
    const double J = fdet(F), tr = (double)C[0] + C[4] + C[8];
    double dev_tr = 0;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        const double want = tau0[3 * i + j] + mu * J * ((double)C[3 * i + j] + C[3 * j + i] - (i == j ? 2.0 * tr / 3 : 0));
        max_err = fmax(max_err, fabs(tau[3 * i + j] - want) / (mu * 100 + fabs(tau0[0])));
        if (i == j) dev_tr += tau[3 * i + j] - tau0[3 * i + j];
      }
    CHECK(fabs(dev_tr) <= 1e-5 * mu * 100 + 1e-6 * fabs(tau0[0]), "viscous stress has trace %g", dev_tr);
    CHECK(tau[1] == tau[3] && tau[2] == tau[6] && tau[5] == tau[7], "viscous stress not symmetric");
  }
  CHECK(max_err <= 1e-6, "viscous stress off by %g (relative)", max_err);
  {
    const float C[9] = {0, 2.0f, 0, 0, 0, 0, 0, 0, 0};
    float F[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, tau[9];
    m.viscosity = 1.5f;
    constitutive_update(&m, F, tau);
    constitutive_add_viscous(&m, F, C, tau);
    CHECK(tau[1] == 3.0f && tau[3] == 3.0f && tau[0] == 0 && tau[4] == 0 && tau[8] == 0,
          "simple shear: tau_xy %g, expected mu g = 3", tau[1]);
    material_params s = solid(MODEL_FIXED_COROTATED, 0.0f);
    s.viscosity = 1.5f; /* not a fluid: ignored */
    float t1[9] = {1, 2, 3, 2, 5, 6, 3, 6, 9}, t0[9];
    memcpy(t0, t1, sizeof t0);
    constitutive_add_viscous(&s, F, C, t1);
    CHECK(memcmp(t0, t1, sizeof t0) == 0, "a solid got a viscous stress");
  }
}

int main(void) {
  printf("test_constitutive: fixed corotated, Drucker-Prager, weakly compressible\n");
  check_rng rng = {777};
  test_parameters();
  test_fixed_corotated(&rng);
  test_drucker_prager(&rng);
  test_fluid(&rng);
  test_viscous(&rng);
  return check_summary("test_constitutive");
}

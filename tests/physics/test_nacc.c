/* test_nacc - the NACC snow model of src/physics/constitutive.h (non-associative Cam-Clay,
 * Wolper et al. 2019) against expectations derived here, in double precision where it matters:
 *   - parameters from the user's values (E = 3K(1 - 2nu), mu, lambda = K - 2mu/3, M^2) and the
 *     wave speed sqrt((K + 4mu/3)/rho);
 *   - the elastic stress: zero at rest, rotation invariant, tau = (dpsi/dF) F^T by finite
 *     differences of the energy, and linear elasticity (2 mu dev eps + K tr eps) at small strain;
 *   - an admissible state (inside the ellipse) keeps F bit for bit and its plastic state;
 *   - the return mapping lands on the yield surface: for random trial states outside the
 *     ellipse between the tips, the returned F gives y(p, q; p0) = 0 (to float rounding) with the
 *     trial's p0, keeps det F (so p) and the direction of the deviatoric stress, and changes
 *     logJp by log(J / J_x), J_x where the ray from the ellipse's centre through the trial state
 *     meets it (computed here in double): hardening on the compression side (logJp down, p0 up),
 *     softening on the tension side;
 *   - beyond the compressive tip the state goes to the tip (p = p0, no shear) and hardens:
 *     logJp falls by log(J_tip / J) and the yield surface grows; beyond the tensile tip it goes to
 *     p = -beta p0 and softens;
 *   - repeated compression hardens: each time the pressure reaches the grown tip the state
 *     projects to it again (in between the material is elastic), and p0 keeps growing; the model
 *     without a kept state (constitutive_update) starts from the initial compression. */
#include <math.h>
#include <string.h>

#include "physics/check.h"
#include "physics/constitutive.h"

static material_params snow(float K, float nu, float M, float beta, float xi, float a0) {
  material_params m;
  material_nacc_from_user(&m, 400.0f, K, nu, M, beta, xi, a0);
  return m;
}

/* p, q^2 (Kirchhoff) and the principal deviator of F, in double, from its singular values. */
static void state(const material_params *m, const float F[9], double *p, double *q2, double dev[3], double *J) {
  float U[9], V[9], s[3];
  svd3(F, U, s, V);
  double a[3] = {fabs(s[0]), fabs(s[1]), fabs(s[2])}, b[3], mean = 0;
  *J = a[0] * a[1] * a[2];
  for (int i = 0; i < 3; ++i) b[i] = a[i] * a[i], mean += b[i] / 3;
  const double c = m->mu / pow(*J, 2.0 / 3.0);
  *q2 = 0;
  for (int i = 0; i < 3; ++i) dev[i] = c * (b[i] - mean), *q2 += 1.5 * dev[i] * dev[i];
  *p = -0.5 * m->bulk * (*J * *J - 1);
}

static double p0_of(const material_params *m, double a) { return m->bulk * (1e-5 + sinh(m->nacc_xi * fmax(-a, 0))); }

static double yield(const material_params *m, double p, double q2, double p0) {
  return (1 + 2.0 * m->nacc_beta) * q2 + m->nacc_m2 * (p + m->nacc_beta * p0) * (p - p0);
}

/* F = R diag(s) with R a random rotation */
static void make_f(check_rng *rng, const double s[3], float F[9]) {
  double R[9];
  check_random_rotation(rng, R);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) F[3 * i + j] = (float)(R[3 * i + j] * s[j]);
}

static void test_parameters(void) {
  material_params m = snow(5e4f, 0.3f, 0.8f, 0.9f, 5.0f, -0.01f);
  const double E = 3 * 5e4 * 0.4, mu = E / 2.6;
  CHECK(m.model == MODEL_NACC, "model");
  CHECK(fabs(m.mu - mu) < 1e-6 * mu, "mu %g, expected %g", m.mu, mu);
  CHECK(fabs(m.lambda - (5e4 - 2 * mu / 3)) < 1e-6 * 5e4, "lambda %g", m.lambda);
  CHECK(fabs(m.nacc_m2 - 0.64) < 1e-7 && m.nacc_beta == 0.9f && m.nacc_xi == 5.0f && m.nacc_logjp0 == -0.01f,
        "friction, cohesion, hardening, initial compression");
  const double c = sqrt((5e4 + 4 * mu / 3) / 400.0);
  CHECK(fabs(constitutive_wave_speed(&m) - c) < 1e-5 * c, "wave speed %g, expected %g", constitutive_wave_speed(&m), c);
  CHECK(fabs(constitutive_nacc_p0(&m, -0.01f) - 5e4 * (1e-5 + sinh(0.05))) < 1e-3, "p0 %g", constitutive_nacc_p0(&m, -0.01f));
}

/* tau = P F^T with P = dpsi/dF from central differences of the energy (double steps in float F). */
static void fd_tau(const material_params *m, const float F[9], double tau[9]) {
  double P[9];
  const float h = 1.0f / 128; /* truncation ~h^2 against the float noise of the energy: best near here */
  for (int k = 0; k < 9; ++k) {
    float A[9], B[9];
    memcpy(A, F, sizeof A);
    memcpy(B, F, sizeof B);
    A[k] += h;
    B[k] -= h;
    P[k] = ((double)constitutive_energy_density(m, A) - constitutive_energy_density(m, B)) / (double)((A[k] - B[k]));
  }
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) tau[3 * i + j] = P[3 * i] * F[3 * j] + P[3 * i + 1] * F[3 * j + 1] + P[3 * i + 2] * F[3 * j + 2];
}

static void test_elastic(void) {
  check_rng rng = {7};
  /* a strong material (large initial compression): nothing yields here */
  material_params m = snow(5e4f, 0.3f, 2.0f, 0.9f, 5.0f, -0.5f);
  float F[9], tau[9];
  m3_identity(F);
  float a = m.nacc_logjp0;
  constitutive_update_state(&m, F, &a, tau);
  double worst0 = 0;
  for (int i = 0; i < 9; ++i) worst0 = fmax(worst0, fabs(tau[i]));
  CHECK(worst0 < 1e-3, "stress at rest %g Pa", worst0);
  double worst_fd = 0, worst_lin = 0, worst_rot = 0;
  for (int k = 0; k < 200; ++k) {
    const double s[3] = {check_rng_range(&rng, 0.9, 1.1), check_rng_range(&rng, 0.9, 1.1), check_rng_range(&rng, 0.9, 1.1)};
    make_f(&rng, s, F);
    float G[9], t2[9], al = a;
    memcpy(G, F, sizeof G);
    constitutive_update_state(&m, G, &al, tau);
    CHECK(!memcmp(G, F, sizeof G) && al == a, "an elastic state changed F or logJp");
    double fd[9], scale = 0;
    fd_tau(&m, F, fd);
    for (int i = 0; i < 9; ++i) scale = fmax(scale, fabs(fd[i]));
    for (int i = 0; i < 9; ++i) worst_fd = fmax(worst_fd, fabs(tau[i] - fd[i]) / (scale + 0.01 * m.bulk));
    /* rotating the material: tau -> R tau R^T */
    double R[9];
    check_random_rotation(&rng, R);
    float RF[9];
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) RF[3 * i + j] = (float)(R[3 * i] * F[j] + R[3 * i + 1] * F[3 + j] + R[3 * i + 2] * F[6 + j]);
    al = a;
    constitutive_update_state(&m, RF, &al, t2);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        double r = 0;
        for (int x = 0; x < 3; ++x)
          for (int y = 0; y < 3; ++y) r += R[3 * i + x] * tau[3 * x + y] * R[3 * j + y];
        worst_rot = fmax(worst_rot, fabs(t2[3 * i + j] - r) / (scale + 0.01 * m.bulk));
      }
  }
  /* small strain: F = I + e (symmetric e ~ 1e-4): tau ~ 2 mu dev e + K tr e I */
  for (int k = 0; k < 100; ++k) {
    double e[9];
    for (int i = 0; i < 3; ++i)
      for (int j = i; j < 3; ++j) e[3 * i + j] = e[3 * j + i] = check_rng_range(&rng, -1e-4, 1e-4);
    for (int i = 0; i < 9; ++i) F[i] = (float)((i % 4 == 0) + e[i]);
    float al = a;
    constitutive_update_state(&m, F, &al, tau);
    const double tr = e[0] + e[4] + e[8];
    for (int i = 0; i < 9; ++i) {
      const double want = 2 * m.mu * (e[i] - (i % 4 == 0) * tr / 3) + (i % 4 == 0) * m.bulk * tr;
      worst_lin = fmax(worst_lin, fabs(tau[i] - want) / (m.bulk * 1e-4));
    }
  }
  printf("elastic: tau vs finite differences %.2e, rotation %.2e, small strain vs linear %.2e (relative)\n", worst_fd,
         worst_rot, worst_lin);
  CHECK(worst_fd < 2e-3, "tau differs from dpsi/dF F^T by %g of its scale", worst_fd);
  CHECK(worst_rot < 1e-4, "not rotation invariant: %g", worst_rot);
  CHECK(worst_lin < 0.02, "small strain: off linear elasticity by %g", worst_lin);
}

/* Random trial states outside the ellipse between the tips project onto it. */
static void test_projection(void) {
  check_rng rng = {11};
  const material_params m = snow(5e4f, 0.3f, 0.8f, 0.9f, 5.0f, -0.02f);
  int n = 0, hard = 0, soft = 0;
  double worst_y = 0, worst_j = 0, worst_dir = 0, worst_a = 0;
  for (int k = 0; k < 20000 && n < 2000; ++k) {
    const double s[3] = {check_rng_range(&rng, 0.95, 1.05), check_rng_range(&rng, 0.95, 1.05), check_rng_range(&rng, 0.95, 1.05)};
    float F[9], tau[9];
    make_f(&rng, s, F);
    const float a0 = (float)check_rng_range(&rng, -0.05, 0);
    double p, q2, dev[3], J;
    state(&m, F, &p, &q2, dev, &J);
    const double p0 = p0_of(&m, a0), pmin = -m.nacc_beta * p0;
    const double y = yield(&m, p, q2, p0);
    if (!(p < p0 * (1 - 1e-3) && p > pmin * (1 - 1e-3) + 1e-3 * p0 && y > 1e-3 * m.nacc_m2 * p0 * p0)) continue;
    ++n;
    float a = a0;
    constitutive_update_state(&m, F, &a, tau);
    double pn, qn, devn[3], Jn;
    state(&m, F, &pn, &qn, devn, &Jn);
    worst_y = fmax(worst_y, fabs(yield(&m, pn, qn, p0)) / (m.nacc_m2 * p0 * p0));
    worst_j = fmax(worst_j, fabs(Jn - J) / J);
    /* the deviator keeps its direction: devn parallel to dev (both sorted like the singular values) */
    double dot = 0, n1 = 0, n2 = 0;
    for (int i = 0; i < 3; ++i) dot += dev[i] * devn[i], n1 += dev[i] * dev[i], n2 += devn[i] * devn[i];
    worst_dir = fmax(worst_dir, 1 - dot / sqrt(n1 * n2));
    /* hardening: the ray from (pc, 0) through (p, q) meets the ellipse at p_x */
    const double pc = 0.5 * (1 - m.nacc_beta) * p0, h = 0.5 * (1 + m.nacc_beta) * p0;
    double dp = p - pc, dq = sqrt(q2), l = sqrt(dp * dp + dq * dq);
    dp /= l, dq /= l;
    const double t = sqrt(m.nacc_m2) * h / sqrt((1 + 2.0 * m.nacc_beta) * dq * dq + m.nacc_m2 * dp * dp);
    const double px = pc + t * dp, Jx = sqrt(fabs(1 - 2 * px / m.bulk));
    const double want = a0 + log(J / Jx);
    worst_a = fmax(worst_a, fabs(a - want));
    if (p > pc) {
      hard += a < a0;
      CHECK(a < a0, "compression side: logJp did not fall (%g -> %g)", a0, a);
    } else {
      soft += a > a0;
      CHECK(a > a0, "tension side: logJp did not rise (%g -> %g)", a0, a);
    }
  }
  /* the same on principal stretches directly (no SVD, no reassembled F): y from them in double */
  double worst_s = 0;
  for (int k = 0; k < 20000; ++k) {
    float st[3] = {(float)check_rng_range(&rng, 0.95, 1.05), (float)check_rng_range(&rng, 0.95, 1.05),
                   (float)check_rng_range(&rng, 0.95, 1.05)};
    const float a0 = (float)check_rng_range(&rng, -0.05, 0);
    double sd[3] = {st[0], st[1], st[2]}, J = sd[0] * sd[1] * sd[2], b[3], mean = 0, q2 = 0;
    for (int i = 0; i < 3; ++i) b[i] = sd[i] * sd[i], mean += b[i] / 3;
    for (int i = 0; i < 3; ++i) q2 += 1.5 * pow(m.mu / pow(J, 2.0 / 3.0) * (b[i] - mean), 2);
    const double p = -0.5 * m.bulk * (J * J - 1), p0 = p0_of(&m, a0);
    if (!(p < p0 && p > -m.nacc_beta * p0 && yield(&m, p, q2, p0) > 1e-3 * m.nacc_m2 * p0 * p0)) continue;
    float a = a0;
    constitutive_nacc_project_(&m, st, &a);
    sd[0] = st[0], sd[1] = st[1], sd[2] = st[2], J = sd[0] * sd[1] * sd[2], mean = 0, q2 = 0;
    for (int i = 0; i < 3; ++i) b[i] = sd[i] * sd[i], mean += b[i] / 3;
    for (int i = 0; i < 3; ++i) q2 += 1.5 * pow(m.mu / pow(J, 2.0 / 3.0) * (b[i] - mean), 2);
    worst_s = fmax(worst_s, fabs(yield(&m, -0.5 * m.bulk * (J * J - 1), q2, p0)) / (m.nacc_m2 * p0 * p0));
  }
  printf("projection of principal stretches: |y| after %.2e of M^2 p0^2\n", worst_s);
  CHECK(worst_s < 1e-3, "principal stretches projected off the yield surface: |y| = %g M^2 p0^2", worst_s);
  printf("projection: %d states: |y| after %.2e of M^2 p0^2, det F kept to %.2e, deviator direction to %.2e, logJp "
         "off the ray rule by %.2e; %d hardened, %d softened\n",
         n, worst_y, worst_j, worst_dir, worst_a, hard, soft);
  CHECK(n >= 1000, "only %d trial states outside the ellipse", n);
  CHECK(hard > 100 && soft > 100, "too few states on either side (%d, %d)", hard, soft);
  CHECK(worst_y < 2e-3, "the returned state is off the yield surface: |y| = %g M^2 p0^2", worst_y);
  CHECK(worst_j < 1e-5, "the projection changed det F by %g", worst_j);
  CHECK(worst_dir < 1e-5, "the projection turned the deviatoric stress (1 - cos = %g)", worst_dir);
  CHECK(worst_a < 1e-5, "logJp off the ray rule by %g", worst_a);
}

/* Beyond the tips: isotropic states at the tip pressure; hardening under compression grows the
 * surface, step after step. */
static void test_tips(void) {
  const material_params m = snow(5e4f, 0.3f, 0.8f, 0.9f, 5.0f, -0.01f);
  float a = m.nacc_logjp0, F[9], tau[9];
  double prev_p0 = p0_of(&m, a);
  int tips = 0;
  m3_identity(F); /* J = 0.94: p = K/2 (1 - 0.94^2) = 0.058 K, beyond the initial tip p0 = 0.050 K */
  for (int i = 0; i < 9; i += 4) F[i] = cbrtf(0.94f);
  for (int step = 0; step < 10; ++step) { /* then 1% more volume each step, the elastic F kept */
    if (step > 0)
      for (int i = 0; i < 9; ++i) F[i] *= cbrtf(0.99f);
    double p, q2, dev[3], J;
    state(&m, F, &p, &q2, dev, &J);
    const float a_before = a;
    const double p0 = p0_of(&m, a);
    constitutive_update_state(&m, F, &a, tau);
    double pn, qn, devn[3], Jn;
    state(&m, F, &pn, &qn, devn, &Jn);
    if (p > p0) {
      CHECK(fabs(pn - p0) < 1e-4 * m.bulk, "step %d: projected pressure %g, expected the tip %g", step, pn, p0);
      CHECK(qn < 1e-8 * m.bulk * m.bulk, "step %d: shear left at the tip (q^2 %g)", step, qn);
      CHECK(fabs((a - a_before) - log(J / Jn)) < 1e-5, "step %d: logJp changed by %g, expected log(J/J_tip) %g", step,
            a - a_before, log(J / Jn));
      CHECK(a < a_before, "step %d: compression beyond the tip did not harden (logJp %g -> %g)", step, a_before, a);
      const double p0n = p0_of(&m, a);
      CHECK(p0n > prev_p0, "step %d: the yield surface did not grow (p0 %g -> %g)", step, prev_p0, p0n);
      prev_p0 = p0n;
      ++tips;
    } else { /* hardened enough: elastic until the pressure reaches the new tip */
      CHECK(a == a_before && fabs(pn - p) < 1e-4 * m.bulk, "step %d: a state inside the grown surface yielded", step);
    }
  }
  CHECK(tips >= 2, "only %d of 10 compressions went beyond the tip", tips);
  CHECK(p0_of(&m, a) > 2 * p0_of(&m, m.nacc_logjp0), "compaction did not grow the yield surface (p0 %g from %g)",
        p0_of(&m, a), p0_of(&m, m.nacc_logjp0));
  printf("tips: after 10 compressions by 1%% beyond the tip, logJp %.4f (from %.4f), p0 %.1f Pa (from %.1f)\n", a,
         m.nacc_logjp0, p0_of(&m, a), p0_of(&m, m.nacc_logjp0));
  /* tension beyond the tensile tip -beta p0: to it, softening */
  a = -0.01f;
  m3_identity(F);
  for (int i = 0; i < 9; i += 4) F[i] = cbrtf(1.05f);
  double p, q2, dev[3], J;
  state(&m, F, &p, &q2, dev, &J);
  const double p0 = p0_of(&m, a);
  CHECK(p < -m.nacc_beta * p0, "the stretched state is not beyond the tensile tip");
  constitutive_update_state(&m, F, &a, tau);
  double pn, qn, devn[3], Jn;
  state(&m, F, &pn, &qn, devn, &Jn);
  CHECK(fabs(pn + m.nacc_beta * p0) < 1e-3 * p0, "tension: pressure %g, expected %g", pn, -m.nacc_beta * p0);
  CHECK(a > -0.01f, "tension beyond the tip did not soften (logJp %g)", a);
  /* the stateless entry point starts from the initial compression */
  float G[9], t1[9], t2[9], a2 = m.nacc_logjp0;
  m3_identity(G);
  for (int i = 0; i < 9; i += 4) G[i] = cbrtf(0.97f);
  memcpy(F, G, sizeof F);
  constitutive_update(&m, F, t1);
  constitutive_update_state(&m, G, &a2, t2);
  CHECK(!memcmp(F, G, sizeof F) && !memcmp(t1, t2, sizeof t1), "constitutive_update differs from the state version");
}

int main(void) {
  test_parameters();
  test_elastic();
  test_projection();
  test_tips();
  return check_summary("test_nacc");
}

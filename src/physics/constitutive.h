/* constitutive.h - the material models of material.h: plasticity (return mapping) and the
 * Kirchhoff stress that the P2G kernels scatter, plus energy densities and wave speeds.
 *
 * Entry point used by P2G:
 *   constitutive_update_state(m, F, logjp, tau): applies the model's plasticity to the
 *   deformation gradient F in place (and to the particle's plastic state logjp, NACC's
 *   hardening variable; the other models leave it alone), then writes the Kirchhoff stress
 *   tau = P F^T = J sigma (symmetric) of the updated F. (MLS-MPM: the particle's grid force
 *   contribution is -V0 * tau * (x_i - x_p) * 4/dx^2 * w.) constitutive_update(m, F, tau) is the
 *   same for a particle whose plastic state is not kept (NACC then starts from nacc_logjp0).
 *   constitutive_apply(m, F, logjp, tau, plastic) is constitutive_update_state with the return
 *   mapping left out where plastic is 0 (a state that already holds it).
 *
 * Models:
 *   MODEL_FIXED_COROTATED      Stomakhin et al. 2012 ("Energetically consistent invertible
 *       elasticity"), psi = mu |F - R|^2 + lambda/2 (J - 1)^2; no plasticity.
 *   MODEL_DRUCKER_PRAGER       Klar et al. 2016 ("Drucker-Prager elastoplasticity for sand
 *       animation"): St.Venant-Kirchhoff elasticity in Hencky (log) strain,
 *       psi = mu |log s|^2 + lambda/2 (tr log s)^2, with their return mapping onto the yield cone
 *       (no cohesion, no hardening: alpha is fixed).
 *   MODEL_WEAKLY_COMPRESSIBLE  Tait-type fluid, p = K (J^-gamma - 1), only J = det F is kept;
 *       with viscosity mu > 0 a Newtonian deviatoric stress on top (constitutive_add_viscous).
 *   MODEL_NACC                 Snow: non-associative Cam-Clay of Wolper et al. 2019 ("CD-MPM:
 *       Continuum Damage Material Point Methods for Dynamic Fracture Animation", the NACC of the
 *       paper's Crawling in Snow): compressible neo-Hookean elasticity
 *       psi = mu/2 (tr(J^-2/3 b) - 3) + K/2 ((J^2 - 1)/2 - log J), b = F F^T, so
 *       tau = mu J^-2/3 dev(b) + K/2 (J^2 - 1) I; Kirchhoff pressure p = -K/2 (J^2 - 1) and
 *       q^2 = 3/2 |dev tau|^2. Yield surface, an ellipse in (p, q):
 *         y = (1 + 2 beta) q^2 + M^2 (p + beta p0)(p - p0) <= 0,  p0 = K (1e-5 + sinh(xi max(-a, 0)))
 *       with a = logJp the log of the plastic volume ratio (a < 0: compacted, stronger). The
 *       return mapping (constitutive_nacc_project_): beyond the compressive tip (p > p0) or the
 *       tensile one (p < -beta p0) to that tip, isotropic, with a += log(J_trial / J_tip);
 *       otherwise, when y > 0, radially in the deviatoric plane at constant J (and p) onto the
 *       ellipse, with a += log(J_trial / J_x), J_x the volume whose pressure p_x is where the
 *       ray from the ellipse's centre ((1 - beta) p0 / 2, 0) through the trial state meets it
 *       (compression side: a decreases, the surface grows; tension side: it shrinks).
 *       Unlike Wolper's, claymore's and ziran's projection, which keeps tr(b) and so changes J a
 *       little, this one keeps J exactly (it solves for the trace that keeps det b), so the
 *       returned state lies on the yield surface to rounding. Tip and radial projections follow
 *       their formulas otherwise. A state with y <= 1e-6 M^2 p0^2 counts as inside.
 *
 * Conventions and clamps a caller must know:
 *   - Matrices are float[9] row-major (common.h). tau is symmetric to round-off.
 *   - Drucker-Prager: principal stretches s come from svd3 (sigma[2] < 0 for inverted F); the
 *     log strain uses |s| clamped below at DR_DP_MIN_STRETCH (1e-6), so an inverted element is
 *     treated as its mirror image: yield and stress depend on |s| only. A state inside the
 *     cone keeps its F bit for bit; a projected state gets |s| = exp(H) with the signs of s
 *     kept, so an inverted F stays inverted (det F < 0, |det F| as projected). This keeps the
 *     update continuous in F (un-inverting only the projected states would make F jump at
 *     the yield surface, and the CPU and GPU backends would part ways there). Tension
 *     (tr log |s| >= 0) projects to the cone tip: s = (1, 1, +-1), F becomes U V^T (a rotation,
 *     or a reflection for inverted F) and tau = 0. friction_angle 0 (alpha = 0) gives a
 *     zero-yield von Mises material: the deviatoric strain is removed at every update.
 *   - Weakly compressible: J is clamped to [DR_WC_J_MIN, DR_WC_J_MAX] = [0.1, 1] before use
 *     (a negative or zero J from an inverted/degenerate particle counts as J_MIN), and F is
 *     reset to cbrt(J) I, so det F keeps the (clamped) volume history and shear is forgotten.
 *     The upper bound 1 means the liquid carries no tension: material that expands (a free
 *     surface opening up, spray breaking off) goes back to its rest volume at zero pressure
 *     instead of pulling back with p = K (J^-gamma - 1) < 0, as the claymore-based reference
 *     kernels of the paper's benchmarks do (JFluid: J clamped to [0.1, 1]). Tension made every
 *     particle that flies alone (or in a small clump, with no neighbours on its nodes) a stiff
 *     oscillator of its own volume, the affine mode that APIC keeps for a lone particle: frequency
 *     sqrt(12) c / dx with quadratic B-splines, stable only for c dt / dx < 1/sqrt(3) in theory
 *     and, with gamma 7's stiffening under compression, growing from a few per cent of J at the
 *     adaptive steps' c dt / dx ~ 0.5 until one step threw it to J < 0 (the Fountain benchmark's
 *     runaway particles, tests/sim/test_spray.c). Without tension the lone particle just expands
 *     to J = 1 and stays there. The lower bound: beyond 10x compression a weakly compressible
 *     fluid has long since blown up the time step; it only keeps J^-gamma finite. The energy
 *     uses the same clamp (so psi = 0 and p = 0 for J >= 1: psi is C1, not C2, at J = 1).
 *   - Weakly compressible, G2P (constitutive_advance_F): only J is advanced, J <- J (1 + dt tr C)
 *     with F <- cbrt(J) I, not F <- (I + dt C) F, whose determinant adds dt^2 times the sum of
 *     C's principal 2x2 minors: for a spinning particle (skew C, |C| ~ 200 /s at a step of
 *     4e-4 s in the Fountain's spray) a spurious ~0.4 % volume gain per step.
 *   - NACC: like Drucker-Prager it works on |s| (an inverted F is treated as its mirror image,
 *     signs kept), |s| clamped below at DR_DP_MIN_STRETCH.
 *   - Unknown model numbers leave F alone and give tau = 0, energy 0, wave speed 0. */
#ifndef DRIFT_PHYSICS_CONSTITUTIVE_H
#define DRIFT_PHYSICS_CONSTITUTIVE_H

#include <stddef.h>

#include "physics/common.h"
#include "physics/material.h"
#include "physics/svd.h"

#ifndef DR_DP_MIN_STRETCH
#define DR_DP_MIN_STRETCH 1e-6f
#endif
#ifndef DR_WC_J_MIN
#define DR_WC_J_MIN 0.1f
#endif
#ifndef DR_WC_J_MAX
#define DR_WC_J_MAX 1.0f
#endif

/* out = U diag(d) U^T (symmetric by construction) */
DR_HD void constitutive_udut_(const float U[9], const float d[3], float out[9]) {
  for (int i = 0; i < 3; ++i)
    for (int j = i; j < 3; ++j) {
      const float x = U[3 * i] * d[0] * U[3 * j] + U[3 * i + 1] * d[1] * U[3 * j + 1] +
                      U[3 * i + 2] * d[2] * U[3 * j + 2];
      out[3 * i + j] = x;
      out[3 * j + i] = x;
    }
}

/* Hencky strain of the principal stretches: log(max(|s|, DR_DP_MIN_STRETCH)). */
DR_HD void constitutive_log_strain_(const float s[3], float eps[3]) {
  for (int i = 0; i < 3; ++i) eps[i] = logf(fmaxf(fabsf(s[i]), DR_DP_MIN_STRETCH));
}

/* ---- fixed corotated (Stomakhin et al. 2012) ---- */

/* tau = 2 mu (F - R) F^T + lambda (J - 1) J I = U diag(2 mu (s - 1) s) U^T + lambda (J-1) J I.
 * R not NULL: F's polar rotation U V^T (polar_r's) too, here and in the models below. */
DR_HD void constitutive_fixed_corotated_(const material_params *m, const float F[9], float tau[9], float *R) {
  float U[9], V[9], s[3];
  svd3(F, U, s, V);
  if (R) m3_mul_bt(U, V, R);
  const float J = s[0] * s[1] * s[2];
  float d[3];
  for (int i = 0; i < 3; ++i) d[i] = 2.0f * m->mu * (s[i] - 1.0f) * s[i];
  constitutive_udut_(U, d, tau);
  const float vol = m->lambda * (J - 1.0f) * J;
  tau[0] += vol;
  tau[4] += vol;
  tau[8] += vol;
}

/* ---- Drucker-Prager sand (Klar et al. 2016) ---- */

/* Return mapping in principal log strain (Klar et al. 2016, without cohesion or hardening),
 * acting on |s|; the signs of s are kept.
 * Yield condition on the Kirchhoff stress: |dev tau| + alpha tr(tau) <= 0, i.e. in strain
 * |epshat| + alpha (3 lambda + 2 mu) / (2 mu) tr(eps) <= 0 (dev tau = 2 mu epshat and
 * tr tau = (3 lambda + 2 mu) tr eps). Returns the projected principal stretches in s
 * (unchanged when the state is admissible). */
DR_HD void constitutive_dp_project_(const material_params *m, float s[3]) {
  float eps[3];
  constitutive_log_strain_(s, eps);
  const float tr = eps[0] + eps[1] + eps[2];
  if (tr >= 0.0f) { /* expansion: no cohesion, so the only admissible stress is 0: cone tip */
    for (int i = 0; i < 3; ++i) s[i] = (s[i] < 0.0f) ? -1.0f : 1.0f;
    return;
  }
  float hat[3];
  for (int i = 0; i < 3; ++i) hat[i] = eps[i] - tr * (1.0f / 3.0f);
  const float nrm = sqrtf(hat[0] * hat[0] + hat[1] * hat[1] + hat[2] * hat[2]);
  const float dgamma = nrm + (3.0f * m->lambda + 2.0f * m->mu) / (2.0f * m->mu) * tr * m->alpha;
  if (dgamma <= 0.0f) return; /* inside the cone: elastic */
  /* H = eps - dgamma hat/|hat|; dgamma <= |hat| since tr < 0 and alpha >= 0, so the factor is
   * in [0, 1]. |hat| ~ 0 would only happen with alpha = 0: project onto the hydrostatic axis. */
  const float k = (nrm > 1e-20f) ? fminf(dgamma / nrm, 1.0f) : 1.0f;
  for (int i = 0; i < 3; ++i) {
    const float e = expf(eps[i] - k * hat[i]);
    s[i] = (s[i] < 0.0f) ? -e : e; /* keep the reflection of an inverted F (see the top) */
  }
}

/* tau = U diag(2 mu eps + lambda tr(eps)) U^T for Hencky strain eps = log |s|. */
DR_HD void constitutive_hencky_tau_(const material_params *m, const float U[9], const float s[3],
                                    float tau[9]) {
  float eps[3];
  constitutive_log_strain_(s, eps);
  const float tr = eps[0] + eps[1] + eps[2];
  float d[3];
  for (int i = 0; i < 3; ++i) d[i] = 2.0f * m->mu * eps[i] + m->lambda * tr;
  constitutive_udut_(U, d, tau);
}

DR_HD void constitutive_drucker_prager_(const material_params *m, float F[9], float tau[9], int plastic, float *R) {
  float U[9], V[9], s[3];
  svd3(F, U, s, V);
  if (R) m3_mul_bt(U, V, R); /* the projected F's too: the mapping changes s alone */
  const float s0 = s[0], s1 = s[1], s2 = s[2];
  if (plastic) constitutive_dp_project_(m, s);
  if (s[0] != s0 || s[1] != s1 || s[2] != s2) m3_udvt(U, s, V, F);
  constitutive_hencky_tau_(m, U, s, tau);
}

/* ---- weakly compressible fluid ---- */

DR_HD float constitutive_wc_clamp_j_(float J) {
  /* written so that a NaN J stays NaN (fminf/fmaxf would drop it) */
  return (J < DR_WC_J_MIN) ? DR_WC_J_MIN : ((J > DR_WC_J_MAX) ? DR_WC_J_MAX : J);
}

/* p = K (J^-gamma - 1): > 0 under compression (J < 1). */
DR_HD float constitutive_wc_pressure_(const material_params *m, float J) {
  return m->bulk * (powf(J, -m->gamma) - 1.0f);
}

DR_HD void constitutive_weakly_compressible_(const material_params *m, float F[9], float tau[9]) {
  const float J = constitutive_wc_clamp_j_(m3_det(F));
  const float c = cbrtf(J);
  const float kt = -constitutive_wc_pressure_(m, J) * J;
  for (int i = 0; i < 9; ++i) {
    const int diag = (i % 4 == 0);
    F[i] = diag ? c : 0.0f;
    tau[i] = diag ? kt : 0.0f;
  }
}

/* The Newtonian viscous stress of the weakly compressible fluid, added to its Kirchhoff stress
 * tau (after constitutive_apply, F = cbrt(J) I): tau += mu J (C + C^T - 2/3 tr(C) I), the Cauchy
 * stress 2 mu dev(D) times J, D the rate of deformation. C is the particle's APIC affine matrix,
 * MLS-MPM's estimate of the velocity gradient (C_ab = dv_a/dx_b, from the last G2P). Nothing is
 * added (tau bitwise as it was) for another model or mu = 0. Explicit, so the step is bounded by
 * viscous diffusion as well: scene_viscous_dt. Shared by both backends' P2G. */
DR_HD void constitutive_add_viscous(const material_params *m, const float F[9], const float C[9], float tau[9]) {
  if (!(m->model == MODEL_WEAKLY_COMPRESSIBLE && m->viscosity > 0.0f)) return;
  const float k = m->viscosity * m3_det(F), tr3 = (2.0f / 3.0f) * (C[0] + C[4] + C[8]);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) tau[3 * i + j] += k * (C[3 * i + j] + C[3 * j + i] - (i == j ? tr3 : 0.0f));
}

/* ---- the deformation update of G2P ---- */

/* F after a step dt with the particle's new affine velocity C (1/s), in place:
 * F <- (I + dt C) F, except for the weakly compressible fluid, which keeps J alone:
 * J <- det(F) (1 + dt tr C), F <- cbrt(J) I (see the top). Shared by both backends' G2P. */
DR_HD void constitutive_advance_F(const material_params *m, float dt, const float C[9], float F[9]) {
  if (m->model == MODEL_WEAKLY_COMPRESSIBLE) {
    const float c = cbrtf(m3_det(F) * (1.0f + dt * m3_trace(C)));
    for (int i = 0; i < 9; ++i) F[i] = (i % 4 == 0) ? c : 0.0f;
    return;
  }
  float G[9], Fn[9];
  for (int q = 0; q < 9; ++q) G[q] = (q % 4 == 0 ? 1.0f : 0.0f) + dt * C[q];
  m3_mul(G, F, Fn);
  m3_copy(Fn, F);
}

/* ---- NACC snow (Wolper et al. 2019) ---- */

/* The size of the yield surface: the compressive tip's pressure p0 (Pa) of plastic state a. */
DR_HD float constitutive_nacc_p0(const material_params *m, float logjp) {
  return m->bulk * (1e-5f + sinhf(m->nacc_xi * fmaxf(-logjp, 0.0f)));
}

/* y(p, q^2) of the ellipse (> 0 outside). */
DR_HD float constitutive_nacc_yield(const material_params *m, float p, float q2, float p0) {
  return (1.0f + 2.0f * m->nacc_beta) * q2 + m->nacc_m2 * (p + m->nacc_beta * p0) * (p - p0);
}

/* Kirchhoff pressure p and deviatoric stress dev[3] (principal) of principal stretches a > 0. */
DR_HD void constitutive_nacc_stress_(const material_params *m, const float a[3], float *p, float dev[3]) {
  const float J = a[0] * a[1] * a[2];
  const float b[3] = {a[0] * a[0], a[1] * a[1], a[2] * a[2]};
  const float mean = (b[0] + b[1] + b[2]) * (1.0f / 3.0f), cr = cbrtf(J);
  const float c = m->mu / (cr * cr); /* mu J^-2/3 */
  for (int i = 0; i < 3; ++i) dev[i] = c * (b[i] - mean);
  *p = -0.5f * m->bulk * (J * J - 1.0f);
}

/* The return mapping on the principal stretches s (signs kept) and the plastic state a. */
DR_HD void constitutive_nacc_project_(const material_params *m, float s[3], float *logjp) {
  float a[3];
  for (int i = 0; i < 3; ++i) a[i] = fmaxf(fabsf(s[i]), DR_DP_MIN_STRETCH);
  const float K = m->bulk, beta = m->nacc_beta, m2 = m->nacc_m2;
  const float J = a[0] * a[1] * a[2];
  const float p0 = constitutive_nacc_p0(m, *logjp), pmin = -beta * p0;
  float p, dev[3];
  constitutive_nacc_stress_(m, a, &p, dev);
  if (p > p0 || p < pmin) { /* beyond a tip: to that tip, isotropic */
    const float pt = p > p0 ? p0 : pmin;
    const float Jt = sqrtf(1.0f - 2.0f * pt / K); /* p(J) = -K/2 (J^2 - 1) = pt; real: p <= K/2 always */
    const float e = cbrtf(Jt);
    for (int i = 0; i < 3; ++i) a[i] = e;
    *logjp += logf(J / Jt);
  } else {
    const float s2 = dev[0] * dev[0] + dev[1] * dev[1] + dev[2] * dev[2];
    const float y = constitutive_nacc_yield(m, p, 1.5f * s2, p0);
    if (!(y > 1e-6f * m2 * p0 * p0)) return; /* inside (or on) the surface: elastic, F untouched */
    /* hardening: where the ray from the centre (pc, 0) through (p, q) meets the ellipse */
    const float pc = 0.5f * (1.0f - beta) * p0, h = 0.5f * (1.0f + beta) * p0;
    float dp = p - pc, dq = sqrtf(1.5f * s2);
    const float l = sqrtf(dp * dp + dq * dq);
    if (l > 0.0f) {
      dp /= l, dq /= l;
      const float t = sqrtf(m2) * h / sqrtf((1.0f + 2.0f * beta) * dq * dq + m2 * dp * dp);
      const float px = pc + t * dp;
      const float Jx = sqrtf(fabsf(1.0f - 2.0f * px / K));
      if (Jx > 1e-4f) *logjp += logf(J / Jx);
    }
    /* projection at constant J: the deviator of bbar = J^-2/3 b scaled by k, its trace chosen so
     * that det bbar stays 1 (Newton from the trial trace, from above: f is increasing and convex
     * there) */
    const float k = sqrtf(fmaxf(-m2 * (p - pmin) * (p - p0), 0.0f) / ((1.0f + 2.0f * beta) * 1.5f * s2));
    const float cr = cbrtf(J), c2 = cr * cr;
    float d[3], x = 0.0f;
    for (int i = 0; i < 3; ++i) d[i] = a[i] * a[i] / c2, x += d[i];
    x *= 1.0f / 3.0f;
    for (int i = 0; i < 3; ++i) d[i] = k * (d[i] - x);
    for (int it = 0; it < 6; ++it) {
      const float e0 = x + d[0], e1 = x + d[1], e2 = x + d[2];
      const float f = e0 * e1 * e2 - 1.0f, df = e1 * e2 + e0 * e2 + e0 * e1;
      if (!(df > 0.0f)) break;
      x -= f / df;
    }
    for (int i = 0; i < 3; ++i) a[i] = cr * sqrtf(fmaxf(x + d[i], 0.0f));
  }
  for (int i = 0; i < 3; ++i) s[i] = (s[i] < 0.0f) ? -a[i] : a[i];
}

/* tau = U diag(mu J^-2/3 dev(|s|^2) + K/2 (J^2 - 1)) U^T of the (projected) stretches. */
DR_HD void constitutive_nacc_(const material_params *m, float F[9], float *logjp, float tau[9], int plastic,
                              float *R) {
  float U[9], V[9], s[3];
  svd3(F, U, s, V);
  if (R) m3_mul_bt(U, V, R); /* the projected F's too: the mapping changes s alone */
  const float s0 = s[0], s1 = s[1], s2 = s[2];
  if (plastic) constitutive_nacc_project_(m, s, logjp);
  if (s[0] != s0 || s[1] != s1 || s[2] != s2) m3_udvt(U, s, V, F);
  float a[3], p, dev[3], d[3];
  for (int i = 0; i < 3; ++i) a[i] = fmaxf(fabsf(s[i]), DR_DP_MIN_STRETCH);
  constitutive_nacc_stress_(m, a, &p, dev);
  for (int i = 0; i < 3; ++i) d[i] = dev[i] - p;
  constitutive_udut_(U, d, tau);
}

/* ---- public entry points ---- */

/* constitutive_apply (below), and where R is not NULL the polar rotation of the F it leaves
 * (polar_r's U V^T, from the SVD the model takes anyway; the fluid's F = cbrt(J) I: the identity;
 * a model without one: polar_r's), which compact storage's encoding of F takes
 * (physics/compact.h). */
DR_HD void constitutive_apply_r(const material_params *m, float F[9], float *logjp, float tau[9], int plastic,
                                float *R) {
  switch (m->model) {
  case MODEL_FIXED_COROTATED:
    constitutive_fixed_corotated_(m, F, tau, R);
    break;
  case MODEL_DRUCKER_PRAGER:
    constitutive_drucker_prager_(m, F, tau, plastic, R);
    break;
  case MODEL_WEAKLY_COMPRESSIBLE:
    constitutive_weakly_compressible_(m, F, tau);
    if (R)
      for (int i = 0; i < 9; ++i) R[i] = i % 4 == 0 ? 1.0f : 0.0f;
    break;
  case MODEL_NACC:
    constitutive_nacc_(m, F, logjp, tau, plastic, R);
    break;
  default:
    for (int i = 0; i < 9; ++i) tau[i] = 0.0f;
    if (R) polar_r(F, R);
    break;
  }
}

/* Plasticity on F and the plastic state logjp (in place), then the Kirchhoff stress
 * tau = P F^T of the updated F. plastic 0: the state already holds this step's return mapping
 * (a run resumed from a checkpoint written after fused G2P2G steps, whose P2G of the next step
 * had applied it: ckpt_state.projected), so only the stress is computed; F and logjp stay as
 * they are (Drucker-Prager and NACC; the other models have no return mapping: the fluid's clamp
 * of J and reset of F give the same F again). Applying NACC's mapping twice is not a no-op:
 * on the tension side the first one softens (p0 shrinks) and leaves the state outside the
 * smaller surface. */
DR_HD void constitutive_apply(const material_params *m, float F[9], float *logjp, float tau[9], int plastic) {
  constitutive_apply_r(m, F, logjp, tau, plastic, NULL);
}

/* The return mapping and the stress (constitutive_apply with plastic 1): what P2G does. */
DR_HD void constitutive_update_state(const material_params *m, float F[9], float *logjp, float tau[9]) {
  constitutive_apply(m, F, logjp, tau, 1);
}

/* The same without a kept plastic state (NACC starts from nacc_logjp0 and forgets its change). */
DR_HD void constitutive_update(const material_params *m, float F[9], float tau[9]) {
  float logjp = m->nacc_logjp0;
  constitutive_update_state(m, F, &logjp, tau);
}

/* Elastic energy per unit reference volume (J/m^3) of F, as is (no plasticity applied):
 *   fixed corotated: mu sum (s_i - 1)^2 + lambda/2 (J - 1)^2   (= mu |F - R|^2 + ...)
 *   Drucker-Prager:  mu |log s|^2 + lambda/2 (tr log s)^2      (Hencky, |s| clamped as above)
 *   NACC:            mu/2 (tr(J^-2/3 b) - 3) + K/2 ((J^2 - 1)/2 - log J)   (|s|, clamped as above)
 *   fluid:           psi(J) = K [ (J^(1-gamma) - 1)/(gamma - 1) + J - 1 ]  (gamma != 1)
 *                    psi(J) = K [ J - 1 - log J ]                        (gamma == 1)
 *                    so that -dpsi/dJ = K (J^-gamma - 1) = p, psi(1) = 0, psi >= 0 (J clamped). */
DR_HD float constitutive_energy_density(const material_params *m, const float F[9]) {
  switch (m->model) {
  case MODEL_FIXED_COROTATED: {
    float U[9], V[9], s[3];
    svd3(F, U, s, V);
    const float J = s[0] * s[1] * s[2];
    float e = 0.0f;
    for (int i = 0; i < 3; ++i) e += (s[i] - 1.0f) * (s[i] - 1.0f);
    return m->mu * e + 0.5f * m->lambda * (J - 1.0f) * (J - 1.0f);
  }
  case MODEL_DRUCKER_PRAGER: {
    float U[9], V[9], s[3], eps[3];
    svd3(F, U, s, V);
    constitutive_log_strain_(s, eps);
    const float tr = eps[0] + eps[1] + eps[2];
    return m->mu * (eps[0] * eps[0] + eps[1] * eps[1] + eps[2] * eps[2]) +
           0.5f * m->lambda * tr * tr;
  }
  case MODEL_NACC: {
    float U[9], V[9], s[3], a[3];
    svd3(F, U, s, V);
    for (int i = 0; i < 3; ++i) a[i] = fmaxf(fabsf(s[i]), DR_DP_MIN_STRETCH);
    const float J = a[0] * a[1] * a[2], cr = cbrtf(J);
    const float trb = (a[0] * a[0] + a[1] * a[1] + a[2] * a[2]) / (cr * cr);
    return 0.5f * m->mu * (trb - 3.0f) + 0.5f * m->bulk * (0.5f * (J * J - 1.0f) - logf(J));
  }
  case MODEL_WEAKLY_COMPRESSIBLE: {
    const float J = constitutive_wc_clamp_j_(m3_det(F));
    const float g1 = m->gamma - 1.0f;
    if (fabsf(g1) < 1e-4f) return m->bulk * (J - 1.0f - logf(J));
    return m->bulk * ((powf(J, -g1) - 1.0f) / g1 + J - 1.0f);
  }
  default:
    return 0.0f;
  }
}

/* Speed of the fastest elastic wave (m/s), for the CFL time step:
 * sqrt((lambda + 2 mu)/rho) for the solids, sqrt(K gamma / rho) for the fluid (at J = 1). */
DR_HD float constitutive_wave_speed(const material_params *m) {
  switch (m->model) {
  case MODEL_FIXED_COROTATED:
  case MODEL_DRUCKER_PRAGER:
  case MODEL_NACC: /* lambda = K - 2 mu / 3 */
    return sqrtf((m->lambda + 2.0f * m->mu) / m->density);
  case MODEL_WEAKLY_COMPRESSIBLE:
    return sqrtf(m->bulk * m->gamma / m->density);
  default:
    return 0.0f;
  }
}

/* Kernel parameters from the scene's user-facing values (SI units, angle in degrees):
 *   mu = E / (2 (1 + nu)), lambda = E nu / ((1 + nu)(1 - 2 nu)),
 *   alpha = sqrt(2/3) * 2 sin(phi) / (3 - sin(phi))   (Klar et al. 2016),
 * bulk and gamma copied. All fields are filled whatever the model (the unused ones from the
 * values given, typically 0). The caller validates the inputs: density > 0, and for the solids
 * E > 0 and -1 < nu < 0.5 (nu = 0.5 divides by zero; Drucker-Prager divides by mu). */
DR_HD void material_from_user(material_params *m, int model, float density, float youngs,
                              float poisson, float friction_angle_deg, float bulk, float gamma) {
  m->model = model;
  m->density = density;
  m->mu = youngs / (2.0f * (1.0f + poisson));
  m->lambda = youngs * poisson / ((1.0f + poisson) * (1.0f - 2.0f * poisson));
  const float sp = sinf(friction_angle_deg * (3.14159265358979f / 180.0f));
  m->alpha = 0.81649658092772603f * 2.0f * sp / (3.0f - sp); /* sqrt(2/3) */
  m->bulk = bulk;
  m->gamma = gamma;
  m->viscosity = 0.0f;
  m->transfer = TRANSFER_APIC;
  m->flip_blend = m->beta_min = m->beta_max = 0.0f;
  m->nacc_m2 = m->nacc_beta = m->nacc_xi = m->nacc_logjp0 = 0.0f;
}

/* NACC's kernel parameters from the scene's values: bulk modulus K (Pa), Poisson's ratio nu,
 * friction M, cohesion beta, hardening xi, initial_compression a0:
 *   E = 3 K (1 - 2 nu), mu = E / (2 (1 + nu)), lambda = K - 2 mu / 3, M^2. */
DR_HD void material_nacc_from_user(material_params *m, float density, float bulk, float poisson, float friction_m,
                                   float cohesion, float hardening, float initial_compression) {
  material_from_user(m, MODEL_NACC, density, 3.0f * bulk * (1.0f - 2.0f * poisson), poisson, 0.0f, bulk, 0.0f);
  m->lambda = bulk - 2.0f * m->mu / 3.0f;
  m->nacc_m2 = friction_m * friction_m;
  m->nacc_beta = cohesion;
  m->nacc_xi = hardening;
  m->nacc_logjp0 = initial_compression;
}

#endif

/* constitutive.h - the material models of material.h: plasticity (return mapping) and the
 * Kirchhoff stress that the P2G kernels scatter, plus energy densities and wave speeds.
 *
 * Entry point used by P2G:
 *   constitutive_update(m, F, tau): applies the model's plasticity to the deformation gradient F
 *   in place, then writes the Kirchhoff stress tau = P F^T = J sigma (symmetric) of the updated
 *   F. (MLS-MPM: the particle's grid force contribution is -V0 * tau * (x_i - x_p) * 4/dx^2 * w.)
 *
 * Models:
 *   MODEL_FIXED_COROTATED      Stomakhin et al. 2012 ("Energetically consistent invertible
 *       elasticity"), psi = mu |F - R|^2 + lambda/2 (J - 1)^2; no plasticity.
 *   MODEL_DRUCKER_PRAGER       Klar et al. 2016 ("Drucker-Prager elastoplasticity for sand
 *       animation"): St.Venant-Kirchhoff elasticity in Hencky (log) strain,
 *       psi = mu |log s|^2 + lambda/2 (tr log s)^2, with their return mapping onto the yield cone
 *       (no cohesion, no hardening: alpha is fixed).
 *   MODEL_WEAKLY_COMPRESSIBLE  Tait-type fluid, p = K (J^-gamma - 1), only J = det F is kept.
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
 *   - Weakly compressible: J is clamped to [DR_WC_J_MIN, DR_WC_J_MAX] = [0.1, 10] before use
 *     (a negative or zero J from an inverted/degenerate particle counts as J_MIN), and F is
 *     reset to cbrt(J) I, so det F keeps the (clamped) volume history and shear is forgotten.
 *     Beyond 10x compression a weakly compressible fluid has long since blown up the time step;
 *     the clamp only keeps J^-gamma finite. The energy uses the same clamp.
 *   - Unknown model numbers leave F alone and give tau = 0, energy 0, wave speed 0. */
#ifndef DRIFT_PHYSICS_CONSTITUTIVE_H
#define DRIFT_PHYSICS_CONSTITUTIVE_H

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
#define DR_WC_J_MAX 10.0f
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

/* tau = 2 mu (F - R) F^T + lambda (J - 1) J I = U diag(2 mu (s - 1) s) U^T + lambda (J-1) J I */
DR_HD void constitutive_fixed_corotated_(const material_params *m, const float F[9], float tau[9]) {
  float U[9], V[9], s[3];
  svd3(F, U, s, V);
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

DR_HD void constitutive_drucker_prager_(const material_params *m, float F[9], float tau[9]) {
  float U[9], V[9], s[3];
  svd3(F, U, s, V);
  const float s0 = s[0], s1 = s[1], s2 = s[2];
  constitutive_dp_project_(m, s);
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

/* ---- public entry points ---- */

/* Plasticity on F (in place), then the Kirchhoff stress tau = P F^T of the updated F. */
DR_HD void constitutive_update(const material_params *m, float F[9], float tau[9]) {
  switch (m->model) {
  case MODEL_FIXED_COROTATED:
    constitutive_fixed_corotated_(m, F, tau);
    break;
  case MODEL_DRUCKER_PRAGER:
    constitutive_drucker_prager_(m, F, tau);
    break;
  case MODEL_WEAKLY_COMPRESSIBLE:
    constitutive_weakly_compressible_(m, F, tau);
    break;
  default:
    for (int i = 0; i < 9; ++i) tau[i] = 0.0f;
    break;
  }
}

/* Elastic energy per unit reference volume (J/m^3) of F, as is (no plasticity applied):
 *   fixed corotated: mu sum (s_i - 1)^2 + lambda/2 (J - 1)^2   (= mu |F - R|^2 + ...)
 *   Drucker-Prager:  mu |log s|^2 + lambda/2 (tr log s)^2      (Hencky, |s| clamped as above)
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
  m->transfer = TRANSFER_APIC;
  m->flip_blend = m->beta_min = m->beta_max = 0.0f;
}

#endif

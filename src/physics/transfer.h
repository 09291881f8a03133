/* transfer.h - the velocity a particle takes back from the grid in G2P, per material: APIC, or
 * ASFLIP (Fei, Guo, Wu, Huang and Gao 2021, "Revisiting Integration in the Material Point
 * Method: A Scheme for Easier Separation and Less Dissipation"). Shared by the CPU and CUDA
 * backends.
 *
 * Inputs, gathered by G2P with the particle's B-spline weights w:
 *   vpic = sum w v_i^{n+1}  the grid velocity after the grid update (forces, walls, colliders);
 *   vold = sum w v_i^n      the grid velocity before it: P2G's momentum without the stress
 *                           impulse, sum w m_p (v_p + C_p (x_i - x_p)), over the nodal mass
 *                           (ASFLIP only; the backends keep it in extra grid channels);
 *   vp                      the particle's velocity before G2P;
 *   trC                     the trace of the particle's new affine matrix C (1/s);
 *   detF                    det F of the particle before its update in this G2P.
 * APIC: v_p <- vpic, and the particle moves with vpic.
 * ASFLIP with alpha = flip_blend and the positional adjustment beta:
 *   v_p <- vpic + alpha (vp - vold)                        (the FLIP blend)
 *   x_p <- x_p + dt (vpic + beta alpha (vp - vold))        (the particle moves with this)
 * with beta = beta_max while the particle separates, beta_min otherwise; a particle counts as
 * not separating when its volume ratio after this step, log(det F) + dt tr C (to first order),
 * is below -1e-3, as in the authors' reference implementation (pyasflip). alpha = 0 is APIC
 * exactly, bit for bit; alpha = 1 with beta = 0 is the standard FLIP velocity update,
 * v_p + sum w (v_i^{n+1} - v_i^n), with particles moving with the grid velocity.
 * Defaults (scene.c), the authors' ASFLIP settings in pyasflip: alpha 0.99, beta_min 0,
 * beta_max 1. Not done here: the reference also sets beta = 0 for particles inside a collider. */
#ifndef DRIFT_PHYSICS_TRANSFER_H
#define DRIFT_PHYSICS_TRANSFER_H

#include "physics/common.h"
#include "physics/material.h"

#define DR_ASFLIP_COMPRESSED (-1e-3f) /* log J below this: not separating (beta_min) */

/* The particle's new velocity vnew and the velocity vmove it is advected with (see above). The
 * outputs must not alias the inputs. */
DR_HD void transfer_velocity(const material_params *m, float dt, const float vp[3], const float vpic[3],
                             const float vold[3], float trC, float detF, float vnew[3], float vmove[3]) {
  if (m->transfer != TRANSFER_ASFLIP) {
    for (int i = 0; i < 3; ++i) vnew[i] = vmove[i] = vpic[i];
    return;
  }
  float beta = m->beta_max;
  if (m->beta_min < beta && logf(fmaxf(detF, 1e-15f)) + trC * dt < DR_ASFLIP_COMPRESSED) beta = m->beta_min;
  const float alpha = m->flip_blend, ba = beta * alpha; /* alpha = 0: both terms vanish exactly */
  for (int i = 0; i < 3; ++i) {
    const float d = vp[i] - vold[i];
    vnew[i] = vpic[i] + alpha * d;
    vmove[i] = vpic[i] + ba * d;
  }
}

#endif

/* fixed.h - the fixed-point P2G sums of deterministic mode (parallel.deterministic in
 * docs/scene-format.md). Shared by the CPU and CUDA backends and the time loop that chooses the
 * scales.
 *
 * Float sums depend on the order of their additions, and that order depends on the threads, the
 * GPU's scheduling, the particle order and how the particles are split between ranks. Integer
 * sums do not. In deterministic mode every P2G contribution (a particle's share of a node's mass
 * or momentum) is turned into a 64-bit integer once, c -> llrint(c * scale), the integers are
 * added in any order (plain adds, atomics, the rank exchange), and the grid update turns the sum
 * back into a float once, sum / scale. The result is the same bit for bit whatever the order.
 *
 * Scales (powers of two, chosen once per scene by sim.c, the same on every rank and on resume):
 *   mass      2^(FIX_UNIT_BITS - e_m)        with 2^e_m >= the largest particle mass m_max;
 *   momentum  2^(FIX_UNIT_BITS - e_m - e_v)  with 2^e_v >= v_ref = the largest of 1 m/s, the
 *             fastest elastic wave, the bodies' initial speeds, the colliders' speeds and the
 *             free-fall speed over the domain, sqrt(2 |g| L);
 * so a particle of mass m_max moving at 2^e_v brings at most 2^FIX_UNIT_BITS units to a node.
 * Resolution: 2^-38 m_max per node in mass and 2^-38 m_max 2^e_v in momentum (about 4e-12 of
 * the units), well below float rounding of all but the tiniest contributions (which weigh as
 * little in G2P; a node's velocity error over the particles that read it stays at that level).
 * Range: one contribution must stay below FIX_LIMIT = 2^46 units, i.e. a momentum below
 * 256 m_max 2^e_v (velocities and stress impulses up to 256 v_ref); a larger or non-finite one
 * fails the run, naming the frame and step. A node receives from the particles of at most 8
 * particle blocks (base cells n-2..n on each axis), so with at most FIX_PB_MAX = 2^14 particles
 * in every particle block (checked at rebuild-mapping; 256 per cell on average, 32x the default
 * sampling) a node's sum stays below 2^17 x 2^46 = 2^63: no sum can overflow. */
#ifndef DRIFT_PHYSICS_FIXED_H
#define DRIFT_PHYSICS_FIXED_H

#include "physics/common.h"

#define FIX_UNIT_BITS 38
#define FIX_LIMIT 70368744177664.0f /* 2^46: the largest |contribution| in units (exclusive) */
#define FIX_LIMIT_BITS 46
#define FIX_PB_MAX 16384            /* 2^14 particles per particle block at most */

/* The fixed-point value of a contribution v at scale (a power of two): v * scale rounded to
 * the nearest integer (ties to even). Out of range or not finite: 0, and *bad is set. */
DR_HD long long fix_to(float v, float scale, int *bad) {
  const float t = v * scale; /* exact: scale is a power of two */
  const int ok = fabsf(t) < FIX_LIMIT; /* false for NaN */
  *bad |= !ok;
  return ok ? llrintf(t) : 0LL;
}

/* A fixed-point sum back as a float: one rounding of sum * inv_scale (inv_scale = 1 / scale). */
DR_HD float fix_from(long long sum, double inv_scale) { return (float)((double)sum * inv_scale); }

/* The scales (see above) for the largest particle mass m_max (kg) and speed bound v_ref (m/s):
 * scale[0] for mass, scale[1] for momentum. */
static inline void fix_scales(double m_max, double v_ref, float scale[2]) {
  int em = 0, ev = 0;
  if (!(m_max > 0)) m_max = 1.0;
  if (!(v_ref > 1.0)) v_ref = 1.0;
  double f = frexp(m_max, &em); /* m_max = f 2^em, f in [0.5, 1): 2^em > m_max, or 2^(em-1) = m_max */
  if (f == 0.5) --em;
  f = frexp(v_ref, &ev);
  if (f == 0.5) --ev;
  scale[0] = (float)ldexp(1.0, FIX_UNIT_BITS - em);
  scale[1] = (float)ldexp(1.0, FIX_UNIT_BITS - em - ev);
}

#endif

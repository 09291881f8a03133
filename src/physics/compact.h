/* compact.h - the compact particle record of parallel.storage "compact" (docs/scene-format.md,
 * docs/performance.md's Memory): a particle's state in 15 32-bit words (60 B) instead of 124 B of
 * floats, and back. Shared by the CPU backend (which rounds its float state through it, so that
 * its numerics are those of a compact store) and the CUDA backend's packets.
 *
 * The record, bit by bit (words little-end first, fields in this order, 472 of 480 bits):
 *   x      66  3 x 22-bit signed lattice offsets from the particle block's origin: [-8, 8)
 *              cells around the block (a particle block is 4 cells; a particle stays within a
 *              block of it between rebuild-mappings). The lattice is k q metres, q the power of
 *              two in (dx 2^-18, dx 2^-17], so that it nests with the floats' own grids: where
 *              floats are coarser than q (|x| >= 2^23 q, 32 to 64 cells from 0) every float is a
 *              lattice point and the position is stored exactly, elsewhere it rounds once to q.
 *              A lattice not commensurate with the floats (k dx 2^-17 from the grid's origin)
 *              rounds twice through two grids at every step and holds back slow particles: the
 *              elastic beam of docs/validation.md stood 0.013 cells from float storage at 0.1 s
 *              with it, 0.0033 with this one (the rest: S - I's floor, below). The CPU, whose
 *              block is the particle's own, and a packet, whose block is its particle block,
 *              store the same positions.
 *   v      57  a shared exponent (6 bits) and 3 x (sign + 16 bits): |error| <= 2^-16 max|v_i|.
 *   C     114  a shared exponent (6 bits) and 9 x (sign + 11 bits): |error| <= 2^-11 max|C_ij|
 *              (the beam with 22 bits moved as with 12: C is rebuilt from the grid every step).
 *   F     155  the polar decomposition F = R S: R as a unit quaternion (the largest component
 *              dropped, 2 bits its index, the other three 19-bit signed in 2^-18 steps: each
 *              within 2^-19 of R's), S - I (symmetric, 6 values) in a shared exponent (6 bits)
 *              and 6 x (sign + 14 bits): |error| <= 2^-14 max|S - I| or 2^-22, whichever is
 *              more: the floor that keeps the round trip idempotent (below); a step's strain
 *              increment below the floor's half step is lost (float storage loses those below
 *              about 6e-8), which slow elastic motion shows (docs/validation.md, the beam). Sand's elastic strains of
 *              1e-4 keep their relative precision where F's entries, O(1) under rotation, would
 *              lose it in any 16-bit or shared-exponent format of F or F - I; a rotation error
 *              rotates the stress and leaves its magnitude (the models are objective).
 *   logjp  16  IEEE half (NACC's plastic state: 2^-11 relative).
 *   kind   16  the index of the particle's (mass, vol0, material, body) in a table of the run's
 *              distinct ones (lossless: a body's particles share their mass and volume).
 *   id     48  the id's low 48 bits (its body, PARTICLE_ID_BODY_SHIFT up, is the kind's).
 *
 * F's update: a record's F is the one the last P2G's return mapping left; its x, v and C are the
 * last G2P's. The next P2G makes that G2P's update F <- (I + dt C) F (constitutive_advance_F)
 * from the record's C and the G2P's dt (the backends keep it: step_ctl.dt_g2p, cpu_state.dt_g2p;
 * a checkpoint's last_dt on a resume, backend.set_last_dt) before the return mapping, so that F
 * is encoded once a step (P2G's write-back), not twice; G2P writes x, v and C back
 * (compact_set_xvc). The update sees C as the record holds it (within 2^-11 max|C_ij| of G2P's):
 * each step's update of F errs by up to dt 2^-11 max|C_ij| an entry (against float storage:
 * docs/validation.md, Compact storage). A frame shows F as float storage's would, after the last
 * G2P's update (the snapshot makes it); a checkpoint holds the record's.
 *
 * Idempotency: a resume uploads the floats a checkpoint holds and encodes them again, so
 * decode(encode(decode(r))) == decode(r) bitwise. The formats hold it by construction: each
 * decode lies at its code's centre within a known rounding noise, below a quarter of the code's
 * step (positions: none, the lattice and the floats nest; v, C: exact decode and the least
 * exponent that holds the values; F: R's float noise about 1e-7 against a step of 3.8e-6, S's at
 * most 2.1e-7 against a step of at least 4.8e-7). The positions', v's, C's and logjp's codes are
 * fixed points of decode-then-encode exactly (their decodes are the codes' own values, and v's
 * and C's exponents the least that hold them); F's is not where a value sits on a rounding
 * boundary, so compact_encode re-encodes F's decode until its code is a fixed point (at most
 * twice more), which makes the round trip a projection. F's rotation comes from the SVD: P2G's
 * return mapping takes one anyway and hands its U V^T over (constitutive_apply_r,
 * compact_set_f, compact_round_f), elsewhere polar_r's; the fixed-point pass's re-encodings start
 * from the code's own rotation and find it by compact_polar_q_ (Newton's method): the same
 * rotation within float noise, far below the quaternion's step, without a 3x3 SVD.
 * tests/physics/test_compact.c holds the bounds and the idempotency. */
#ifndef DRIFT_PHYSICS_COMPACT_H
#define DRIFT_PHYSICS_COMPACT_H

#include <stdint.h>

#include "physics/common.h"
#include "physics/svd.h"

#define COMPACT_WORDS 15        /* 32-bit words a particle */
#define COMPACT_X_FRAC 17       /* position: the lattice step q <= dx 2^-17 (and > dx 2^-18) */
#define COMPACT_X_BITS 22       /* a position offset's bits (signed: [-8, 8) cells, 2^21 q >= 8 dx) */
#define COMPACT_V_MAG 16        /* v: magnitude bits a component */
#define COMPACT_C_MAG 11        /* C */
#define COMPACT_S_MAG 14        /* S - I */
#define COMPACT_Q_BITS 19       /* a quaternion component's bits (signed, 2^-18 steps) */
#define COMPACT_EXP_BITS 6      /* a shared exponent's bits */
#define COMPACT_EXP_MIN (-40)   /* the least shared exponent: v, C below 2^-40 are zero */
#define COMPACT_S_EXP_MIN (-7)  /* S - I's least: its step is at least 2^(-7-14) = 2^-21 */
#define COMPACT_ID_BITS 48

/* Each attribute's bits in the record (memplan.c counts a compact frame snapshot from them). */
#define COMPACT_BITS_X (3 * COMPACT_X_BITS)
#define COMPACT_BITS_V (COMPACT_EXP_BITS + 3 * (COMPACT_V_MAG + 1))
#define COMPACT_BITS_C (COMPACT_EXP_BITS + 9 * (COMPACT_C_MAG + 1))
#define COMPACT_BITS_F (2 + 3 * COMPACT_Q_BITS + COMPACT_EXP_BITS + 6 * (COMPACT_S_MAG + 1))
#define COMPACT_BITS_LOGJP 16
#define COMPACT_BITS_KIND 16 /* mass, vol0, material (and the id's body) */
#define COMPACT_BITS_ID COMPACT_ID_BITS

typedef struct compact_record {
  uint32_t w[COMPACT_WORDS];
} compact_record;

/* The lattice of positions: the grid origin (domain_min - GRID_PAD dx) and dx, both as the
 * scene gives them (double), so that every backend decodes the same floats, and the lattice
 * step q (compact_frame_make). */
typedef struct compact_frame {
  double origin[3];
  double dx;
  double q;     /* a power of two, metres: dx 2^-18 < q <= dx 2^-17 */
  double inv_q; /* 1 / q, exact: a division by q is this product bit for bit (no double division) */
} compact_frame;

DR_HD compact_frame compact_frame_make(const double origin[3], double dx) {
  compact_frame f;
  for (int a = 0; a < 3; ++a) f.origin[a] = origin[a];
  f.dx = dx;
  int e;
  frexp(dx, &e); /* dx in [2^(e-1), 2^e) */
  f.q = ldexp(1.0, e - 1 - COMPACT_X_FRAC);
  f.inv_q = ldexp(1.0, COMPACT_X_FRAC + 1 - e);
  return f;
}

/* ---- bits ------------------------------------------------------------------------------- */

/* Writes the low `bits` (1..32) of v at bit *pos of w (zeroed beforehand), advancing *pos. */
DR_HD void compact_put_(uint32_t *w, int *pos, int bits, uint32_t v) {
  const uint64_t m = bits == 32 ? 0xffffffffull : ((1ull << bits) - 1);
  const uint64_t t = ((uint64_t)v & m) << (*pos & 31);
  w[*pos >> 5] |= (uint32_t)t;
  if ((*pos & 31) + bits > 32) w[(*pos >> 5) + 1] |= (uint32_t)(t >> 32);
  *pos += bits;
}

DR_HD uint32_t compact_get_(const uint32_t *w, int *pos, int bits) {
  const uint64_t m = bits == 32 ? 0xffffffffull : ((1ull << bits) - 1);
  uint64_t t = w[*pos >> 5] >> (*pos & 31);
  if ((*pos & 31) + bits > 32) t |= (uint64_t)w[(*pos >> 5) + 1] << (32 - (*pos & 31));
  *pos += bits;
  return (uint32_t)(t & m);
}

/* A signed value in `bits` bits (two's complement) and back. */
DR_HD void compact_put_signed_(uint32_t *w, int *pos, int bits, int32_t v) { compact_put_(w, pos, bits, (uint32_t)v); }
DR_HD int32_t compact_get_signed_(const uint32_t *w, int *pos, int bits) {
  const uint32_t u = compact_get_(w, pos, bits);
  return (int32_t)(u << (32 - bits)) >> (32 - bits); /* sign-extended: >> of a negative int is arithmetic in every
                                                      compiler drift builds with (GCC, Clang, nvcc) */
}

/* ---- shared exponent -------------------------------------------------------------------- */

/* n values as one exponent e (emin <= e < emin + 2^COMPACT_EXP_BITS) and n signed integers m_i
 * with |m_i| <= 2^mag - 1: value_i = m_i 2^(e - mag) (exact in float). e is the least one whose
 * rounded magnitudes all fit, so that decoding and encoding again gives the same code; values
 * beyond the largest exponent saturate; NaN gives 0. Returns e - emin. */
DR_HD int compact_se_encode_(const float *v, int n, int mag, int emin, int32_t *m) {
  const int emax = emin + (1 << COMPACT_EXP_BITS) - 1;
  const float lim = (float)((1 << mag) - 1);
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = fmaxf(amax, fabsf(v[i])); /* fmaxf drops NaN */
  int e = emin;
  if (amax > 0.0f) {
    int ex;
    frexpf(amax, &ex); /* amax < 2^ex */
    /* the least e whose rounded magnitudes fit (amax >= 2^(ex-1): ex - 1 only where clamped) */
    e = ex - 1 < emin ? emin : ex - 1 > emax ? emax : ex - 1;
    while (e < emax && !(rintf(ldexpf(amax, mag - e)) <= lim)) ++e;
  }
  const float scale = ldexpf(1.0f, mag - e); /* a normal float: |mag - e| < 64 */
  for (int i = 0; i < n; ++i) {
    float r = rintf(fabsf(v[i]) * scale); /* ldexpf's value: a product by a power of two rounds once */
    if (!(r <= lim)) r = (r > lim) ? lim : 0.0f; /* saturate; NaN -> 0 */
    m[i] = (int32_t)r * (v[i] < 0.0f ? -1 : 1);
  }
  return e - emin;
}

DR_HD void compact_se_decode_(const int32_t *m, int n, int mag, int emin, int k, float *v) {
  const float scale = ldexpf(1.0f, emin + k - mag); /* a normal float, and so is each nonzero value: exact */
  for (int i = 0; i < n; ++i) v[i] = (float)m[i] * scale;
}

/* ---- IEEE half ---------------------------------------------------------------------------- */

/* float -> half bits, round to nearest even; beyond 65504 saturates to +-65504, NaN to 0. */
DR_HD uint32_t compact_half_encode_(float f) {
  if (!(fabsf(f) <= 65504.0f)) f = f != f ? 0.0f : copysignf(65504.0f, f);
  const uint32_t sign = signbit(f) ? 0x8000u : 0u;
  const float a = fabsf(f);
  if (a < 6.103515625e-05f) /* subnormal half: steps of 2^-24 */
    return sign | (uint32_t)rintf(a * 16777216.0f);
  int ex;
  const float fr = frexpf(a, &ex); /* a = fr 2^ex, fr in [0.5, 1) */
  uint32_t mant = (uint32_t)rintf(ldexpf(fr, 11)); /* 1024..2048 */
  int he = ex - 1 + 15;
  if (mant == 2048u) mant = 1024u, ++he;
  if (he >= 31) return sign | 0x7bffu;
  return sign | ((uint32_t)he << 10) | (mant - 1024u);
}

DR_HD float compact_half_decode_(uint32_t h) {
  const float s = (h & 0x8000u) ? -1.0f : 1.0f;
  const uint32_t he = (h >> 10) & 31u, mant = h & 1023u;
  if (he == 0) return s * ldexpf((float)mant, -24);
  return s * ldexpf((float)(mant + 1024u), (int)he - 25);
}

/* ---- positions ---------------------------------------------------------------------------- */

/* The lattice coordinate of x: x / q rounded (exact where q divides x: a power of two). */
DR_HD int64_t compact_x_units_(const compact_frame *f, float x) { return (int64_t)llrint((double)x * f->inv_q); }

/* The lattice coordinate of particle block b's origin along axis a (rounded down). */
DR_HD int64_t compact_x_base_(const compact_frame *f, int a, int32_t b) {
  return (int64_t)floor((f->origin[a] + 4.0 * f->dx * (double)b) * f->inv_q);
}

DR_HD float compact_x_float_(const compact_frame *f, int64_t u) { return (float)((double)u * f->q); }

/* The particle block (4 cells an axis, sparse.h's) whose origin the CPU measures x from: the
 * block of x's cell. */
DR_HD void compact_x_block(const compact_frame *f, const float x[3], int32_t blk[3]) {
  for (int a = 0; a < 3; ++a) blk[a] = (int32_t)floor(((double)x[a] - f->origin[a]) / (4.0 * f->dx));
}

/* ---- F = R S ------------------------------------------------------------------------------ */

typedef struct compact_f_code {
  int32_t q[3]; /* the quaternion's three smaller components, 2^-18 steps */
  int iq;       /* the dropped (largest, made positive) component's index */
  int32_t s[6]; /* S - I: xx, yy, zz, xy, xz, yz */
  int ks;       /* S - I's exponent code */
} compact_f_code;

/* The unit quaternion (w, x, y, z) of a code (double, the decode's, so that encoding and decoding
 * agree). */
DR_HD void compact_q_of_code_(const compact_f_code *c, double q[4]) {
  /* by selects, not by indices: a quaternion indexed by iq would live in a kernel's local memory */
  const double a = (double)c->q[0] * (1.0 / 262144.0), b = (double)c->q[1] * (1.0 / 262144.0),
               d = (double)c->q[2] * (1.0 / 262144.0), ss = a * a + b * b + d * d;
  const double big = sqrt(ss < 1.0 ? 1.0 - ss : 0.0);
  const int iq = c->iq;
  q[0] = iq == 0 ? big : a;
  q[1] = iq == 0 ? a : iq == 1 ? big : b;
  q[2] = iq <= 1 ? b : iq == 2 ? big : d;
  q[3] = iq == 3 ? big : d;
}

/* The rotation matrix of a unit quaternion (w, x, y, z). */
DR_HD void compact_q_rotation_(const double q[4], double R[9]) {
  const double w = q[0], x = q[1], y = q[2], z = q[3];
  R[0] = 1 - 2 * (y * y + z * z), R[1] = 2 * (x * y - w * z), R[2] = 2 * (x * z + w * y);
  R[3] = 2 * (x * y + w * z), R[4] = 1 - 2 * (x * x + z * z), R[5] = 2 * (y * z - w * x);
  R[6] = 2 * (x * z - w * y), R[7] = 2 * (y * z + w * x), R[8] = 1 - 2 * (x * x + y * y);
}

/* The rotation of a quaternion code. */
DR_HD void compact_q_matrix_(const compact_f_code *c, double R[9]) {
  double q[4];
  compact_q_of_code_(c, q);
  compact_q_rotation_(q, R);
}

/* F's polar rotation as a unit quaternion, from a nearby one: q holds the start on entry (the
 * particle's stored rotation, a step ago), the rotation on return. Newton's method on the
 * rotations: with M = R^T F and S its symmetric part, M's antisymmetric part is (tr S I - S) theta
 * to first order for R a turn theta (in R's frame) short of F's polar rotation, which M symmetric
 * marks; R <- R exp(theta) then converges quadratically (3 passes from a step's turn at the
 * strains of sand, where the SVD's polar rotation takes a 3x3 SVD). Returns 1 where the turn fell
 * below 1e-10 (the quaternion's step is 3.8e-6) at S positive definite (the polar
 * decomposition's uniqueness), 0 where it did not within COMPACT_POLAR_PASSES (a far start),
 * stopped at another stationary point (S with two negative eigenvalues) or F is inverted: the
 * caller takes the SVD's. */
/* One Newton turn of compact_polar_q_ from rotation R toward F's polar rotation: M = R^T F, the
 * symmetric part's off-diagonal (s01, s02, s12), A = tr S I - S's determinant det and the turn
 * times det (adj(A) g, g twice M's antisymmetric part as a vector: theta = th / det). */
typedef struct compact_turn_ {
  double M[9], s01, s02, s12, det, th[3];
} compact_turn_;

DR_HD void compact_turn_of_(const double R[9], const float F[9], compact_turn_ *u) {
  double *M = u->M;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) M[3 * i + j] = R[i] * F[j] + R[3 + i] * F[3 + j] + R[6 + i] * F[6 + j];
  const double s01 = 0.5 * (M[1] + M[3]), s02 = 0.5 * (M[2] + M[6]), s12 = 0.5 * (M[5] + M[7]);
  const double g[3] = {M[7] - M[5], M[2] - M[6], M[3] - M[1]};
  const double t = M[0] + M[4] + M[8], a00 = t - M[0], a11 = t - M[4], a22 = t - M[8];
  const double c00 = a11 * a22 - s12 * s12, c01 = s01 * a22 + s12 * s02, c02 = s01 * s12 + a11 * s02;
  const double c11 = a00 * a22 - s02 * s02, c12 = a00 * s12 + s01 * s02, c22 = a00 * a11 - s01 * s01;
  u->s01 = s01, u->s02 = s02, u->s12 = s12;
  u->det = a00 * c00 - s01 * c01 - s02 * c02;
  u->th[0] = c00 * g[0] + c01 * g[1] + c02 * g[2];
  u->th[1] = c01 * g[0] + c11 * g[1] + c12 * g[2];
  u->th[2] = c02 * g[0] + c12 * g[1] + c22 * g[2];
}

/* Whether the turn's S (M's symmetric part) has leading minors above floor (positive definite at 0). */
DR_HD int compact_turn_pd_(const compact_turn_ *u, double floor) {
  const double *M = u->M;
  const double s01 = u->s01, s02 = u->s02, s12 = u->s12;
  const double m2 = M[0] * M[4] - s01 * s01;
  const double dS = M[0] * (M[4] * M[8] - s12 * s12) - s01 * (s01 * M[8] - s12 * s02) + s02 * (s01 * s12 - M[4] * s02);
  return M[0] > floor && m2 > floor && dS > floor;
}

#define COMPACT_POLAR_PASSES 6
DR_HD int compact_polar_q_(const float F[9], double q[4]) {
  double n = sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  if (!(n > 0.5)) return 0;
  const double in = 1.0 / n;
  for (int k = 0; k < 4; ++k) q[k] *= in;
  for (int it = 0; it < COMPACT_POLAR_PASSES; ++it) {
    double R[9];
    compact_q_rotation_(q, R);
    compact_turn_ u;
    compact_turn_of_(R, F, &u);
    if (!(u.det > 0.0)) return 0;
    const double idet = 1.0 / u.det;
    const double th[3] = {u.th[0] * idet, u.th[1] * idet, u.th[2] * idet};
    if (th[0] * th[0] + th[1] * th[1] + th[2] * th[2] < 1e-20) return compact_turn_pd_(&u, 0.0);
    /* q <- q (1, theta / 2), normalized: the turn in R's frame, first order, exact at the limit */
    const double h[3] = {0.5 * th[0], 0.5 * th[1], 0.5 * th[2]};
    const double q0 = q[0] - (q[1] * h[0] + q[2] * h[1] + q[3] * h[2]);
    const double q1 = q[1] + q[0] * h[0] + (q[2] * h[2] - q[3] * h[1]);
    const double q2 = q[2] + q[0] * h[1] + (q[3] * h[0] - q[1] * h[2]);
    const double q3 = q[3] + q[0] * h[2] + (q[1] * h[1] - q[2] * h[0]);
    const double in2 = 1.0 / sqrt(q0 * q0 + q1 * q1 + q2 * q2 + q3 * q3);
    q[0] = q0 * in2, q[1] = q1 * in2, q[2] = q2 * in2, q[3] = q3 * in2;
  }
  return 0;
}

/* A quaternion (w, x, y, z) of rotation matrix Rf, not normalized (Shepperd: from the largest of
 * w, x, y, z, say x): 4 x times the unit quaternion, which needs no square root and no division
 * (its one consumer, compact_f_code_of_q_, normalizes; the code is the unit quaternion's but for a
 * rounding of the last double bit, which changes a code only at an exact tie). */
DR_HD void compact_q_of_matrix_(const float Rf[9], double q[4]) {
  const double t = (double)Rf[0] + Rf[4] + Rf[8];
  if (t >= Rf[0] && t >= Rf[4] && t >= Rf[8]) {
    q[0] = fmax(1.0 + t, 0.0), q[1] = (double)Rf[7] - Rf[5], q[2] = (double)Rf[2] - Rf[6], q[3] = (double)Rf[3] - Rf[1];
  } else if (Rf[0] >= Rf[4] && Rf[0] >= Rf[8]) {
    q[0] = (double)Rf[7] - Rf[5], q[1] = fmax(1.0 + Rf[0] - Rf[4] - Rf[8], 0.0), q[2] = (double)Rf[1] + Rf[3],
    q[3] = (double)Rf[2] + Rf[6];
  } else if (Rf[4] >= Rf[8]) {
    q[0] = (double)Rf[2] - Rf[6], q[1] = (double)Rf[1] + Rf[3], q[2] = fmax(1.0 + Rf[4] - Rf[0] - Rf[8], 0.0),
    q[3] = (double)Rf[5] + Rf[7];
  } else {
    q[0] = (double)Rf[3] - Rf[1], q[1] = (double)Rf[2] + Rf[6], q[2] = (double)Rf[5] + Rf[7],
    q[3] = fmax(1.0 + Rf[8] - Rf[0] - Rf[4], 0.0);
  }
}

/* F's code from q, a quaternion of F's rotation (any norm; 0: the identity); qc and R receive the
 * code's unit quaternion and rotation (compact_q_of_code_, compact_q_rotation_), which the encoding
 * computes for S. */
DR_HD void compact_f_code_of_q_(const float F[9], double q[4], compact_f_code *c, double qc[4], double R[9]) {
  double nq = sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  if (!(nq > 0.0)) q[0] = 1.0, q[1] = q[2] = q[3] = 0.0, nq = 1.0;
  /* the largest component (the first of equals) dropped, the others kept in order: by selects, as
   * compact_q_of_code_ */
  int iq = 0;
  double big = fabs(q[0]), qi = q[0];
  if (fabs(q[1]) > big) iq = 1, big = fabs(q[1]), qi = q[1];
  if (fabs(q[2]) > big) iq = 2, big = fabs(q[2]), qi = q[2];
  if (fabs(q[3]) > big) iq = 3, qi = q[3];
  const double sg = qi < 0.0 ? -1.0 : 1.0;
  const double o[3] = {iq == 0 ? q[1] : q[0], iq <= 1 ? q[2] : q[1], iq <= 2 ? q[3] : q[2]};
  c->iq = iq;
  const double to_code = sg * 262144.0 / nq;
  for (int j = 0; j < 3; ++j) c->q[j] = (int32_t)llrint(o[j] * to_code); /* |.| <= 2^-1/2: fits 19 bits */
  /* S = R_q^T F with the quantized rotation, so that a decoded F gives back S within F's rounding */
  compact_q_of_code_(c, qc);
  compact_q_rotation_(qc, R);
  double S[9];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) S[3 * i + j] = R[i] * F[j] + R[3 + i] * F[3 + j] + R[6 + i] * F[6 + j];
  const float d[6] = {(float)(S[0] - 1.0), (float)(S[4] - 1.0), (float)(S[8] - 1.0), (float)(0.5 * (S[1] + S[3])),
                      (float)(0.5 * (S[2] + S[6])), (float)(0.5 * (S[5] + S[7]))};
  c->ks = compact_se_encode_(d, 6, COMPACT_S_MAG, COMPACT_S_EXP_MIN, c->s);
}

/* F's code; warm: a unit quaternion near F's rotation (compact_polar_q_), or NULL (the SVD's).
 * qc and R as compact_f_code_of_q_'s. */
DR_HD void compact_f_encode_(const float F[9], compact_f_code *c, const double *warm, double qc[4], double R[9]) {
  double q[4];
  if (warm) q[0] = warm[0], q[1] = warm[1], q[2] = warm[2], q[3] = warm[3];
  if (!warm || !compact_polar_q_(F, q)) {
    float Rf[9];
    polar_r(F, Rf);
    compact_q_of_matrix_(Rf, q);
  }
  compact_f_code_of_q_(F, q, c, qc, R);
}

/* F of code c whose rotation is R (compact_q_matrix_'s). */
DR_HD void compact_f_decode_with_(const compact_f_code *c, const double R[9], float F[9]) {
  float d[6];
  compact_se_decode_(c->s, 6, COMPACT_S_MAG, COMPACT_S_EXP_MIN, c->ks, d);
  const double S[9] = {1.0 + d[0], d[3], d[4], d[3], 1.0 + d[1], d[5], d[4], d[5], 1.0 + d[2]};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      F[3 * i + j] = (float)(R[3 * i] * S[j] + R[3 * i + 1] * S[3 + j] + R[3 * i + 2] * S[6 + j]);
}

DR_HD void compact_f_decode_(const compact_f_code *c, float F[9]) {
  double R[9];
  compact_q_matrix_(c, R);
  compact_f_decode_with_(c, R, F);
}

/* ---- the record --------------------------------------------------------------------------- */

/* A particle's state as floats (the lossy part of particles.h's attributes). */
typedef struct compact_state {
  float x[3], v[3], C[9], F[9], logjp;
} compact_state;

/* Each field's first bit (compact_encode_with_f_'s order). */
#define COMPACT_AT_V COMPACT_BITS_X
#define COMPACT_AT_C (COMPACT_AT_V + COMPACT_BITS_V)
#define COMPACT_AT_F (COMPACT_AT_C + COMPACT_BITS_C)
#define COMPACT_AT_LOGJP (COMPACT_AT_F + COMPACT_BITS_F)
#define COMPACT_AT_KIND (COMPACT_AT_LOGJP + COMPACT_BITS_LOGJP)
#define COMPACT_AT_ID (COMPACT_AT_KIND + COMPACT_BITS_KIND)

DR_HD void compact_f_put_(uint32_t *w, int *pos, const compact_f_code *c) {
  compact_put_(w, pos, 2, (uint32_t)c->iq);
  for (int i = 0; i < 3; ++i) compact_put_signed_(w, pos, COMPACT_Q_BITS, c->q[i]);
  compact_put_(w, pos, COMPACT_EXP_BITS, (uint32_t)c->ks);
  for (int i = 0; i < 6; ++i) compact_put_signed_(w, pos, COMPACT_S_MAG + 1, c->s[i]);
}

DR_HD void compact_f_get_(const uint32_t *w, int *pos, compact_f_code *c) {
  c->iq = (int)compact_get_(w, pos, 2);
  for (int i = 0; i < 3; ++i) c->q[i] = compact_get_signed_(w, pos, COMPACT_Q_BITS);
  c->ks = (int)compact_get_(w, pos, COMPACT_EXP_BITS);
  for (int i = 0; i < 6; ++i) c->s[i] = compact_get_signed_(w, pos, COMPACT_S_MAG + 1);
}

DR_HD int compact_f_same_(const compact_f_code *a, const compact_f_code *b) {
  int same = a->iq == b->iq && a->ks == b->ks;
  for (int i = 0; i < 3; ++i) same &= a->q[i] == b->q[i];
  for (int i = 0; i < 6; ++i) same &= a->s[i] == b->s[i];
  return same;
}

/* 1 where code c, of unit quaternion q and rotation R (compact_q_of_code_, compact_q_rotation_),
 * is a fixed point of decode-then-encode, decided from Newton's first turn alone; 0 where that
 * does not decide it (the caller encodes Fd, c's decode, again). The encoding of Fd from q runs
 * compact_polar_q_: its first pass computes M = R^T Fd and the turn theta, and where |theta| <=
 * 2^-21 at det >= 1e-3 and S positive definite by a margin, its later passes converge (quadratically)
 * to a rotation within |theta| / 2 + O(theta^2) of q in every component. The code's small
 * components are integers over 2^18 exactly, so the rotation's round to them again (a move of at
 * most 2^18 2^-22 = 1/16 of a step), and its dropped component stays the largest where it leads the
 * others by more than 2^-18. The encoding's S is then R^T Fd with this same R: M, as computed here
 * by the same expression. So the code is the same iff S's code from M is. */
DR_HD int compact_f_fixed_quick_(const compact_f_code *c, const double q[4], const double R[9], const float Fd[9]) {
  compact_turn_ u;
  compact_turn_of_(R, Fd, &u);
  const double det = u.det, *M = u.M;
  if (!(det > 1e-3)) return 0;
  if (!(u.th[0] * u.th[0] + u.th[1] * u.th[1] + u.th[2] * u.th[2] <= det * det * 0x1p-42)) return 0; /* |theta| <= 2^-21 */
  if (!compact_turn_pd_(&u, 1e-3)) return 0;
  const int iq = c->iq;
  const double big = iq == 0 ? q[0] : iq == 1 ? q[1] : iq == 2 ? q[2] : q[3];
  double other = 0.0;
  for (int k = 0; k < 4; ++k)
    if (k != iq) other = fmax(other, fabs(q[k]));
  if (!(big - other > 0x1p-18)) return 0;
  const float d[6] = {(float)(M[0] - 1.0), (float)(M[4] - 1.0), (float)(M[8] - 1.0), (float)(0.5 * (M[1] + M[3])),
                      (float)(0.5 * (M[2] + M[6])), (float)(0.5 * (M[5] + M[7]))};
  int32_t m[6];
  if (compact_se_encode_(d, 6, COMPACT_S_MAG, COMPACT_S_EXP_MIN, m) != c->ks) return 0;
  for (int i = 0; i < 6; ++i)
    if (m[i] != c->s[i]) return 0;
  return 1;
}

/* 1 where code c, of unit quaternion q (compact_q_of_code_), is a fixed point of
 * decode-then-encode, proved from the code alone, without decoding F; 0 where the bound below
 * does not prove it (compact_f_fixed_quick_ then decides from the decode). With S the code's
 * (exact floats) and Fd = fl(R S) its decode, each entry of Fd is R S's within 2^-24 of itself,
 * so each entry of E = M - S, M = R^T Fd (compact_f_fixed_quick_'s), is within
 * N = 2^-24 max_j |S e_j| (R orthogonal: |(R^T D)_ij| <= |D e_j| <= 2^-24 |R S e_j| = 2^-24 |S e_j|).
 * (1) S's code from M is c's where N plus the float rounding of the encoder's values (half an ulp
 * of a value below 2^14 steps: 2^-10 step) stays under a quarter of c's step: each value rounds to
 * its own integer (half a step), and the least exponent that holds them is still c's (the largest
 * magnitude is at least 2^13 steps where the exponent exceeds its least: a quarter step).
 * (2) Newton's first turn: |theta| <= |g| / lambda_min(tr S_M I - S_M) <= 2 sqrt(3) N / (2 (G - 3N)),
 * G the Gershgorin bound on S's least eigenvalue (S_M = S + sym(E), |sym(E)| <= 3N), which
 * compact_f_fixed_quick_'s argument needs below 2^-21 with S_M positive definite by a margin
 * (G - 3N >= 1/4: its minors and det above 1e-3); and the dropped component leading by 2^-18. */
DR_HD int compact_f_fixed_sure_(const compact_f_code *c, const double q[4]) {
  const int iq = c->iq;
  const double big = iq == 0 ? q[0] : iq == 1 ? q[1] : iq == 2 ? q[2] : q[3];
  const double other = fmax(fmax(fabs((double)c->q[0]), fabs((double)c->q[1])), fabs((double)c->q[2])) * (1.0 / 262144.0);
  if (!(big - other > 0x1p-18)) return 0;
  int32_t sm = 0;
  for (int i = 0; i < 6; ++i) sm = sm > c->s[i] ? (sm > -c->s[i] ? sm : -c->s[i]) : c->s[i];
  if (c->ks > 0 && sm < (1 << (COMPACT_S_MAG - 1))) return 0; /* not the least exponent: no encoding's */
  float d[6];
  compact_se_decode_(c->s, 6, COMPACT_S_MAG, COMPACT_S_EXP_MIN, c->ks, d);
  const double s00 = 1.0 + d[0], s11 = 1.0 + d[1], s22 = 1.0 + d[2];
  const double a01 = fabs((double)d[3]), a02 = fabs((double)d[4]), a12 = fabs((double)d[5]);
  const double n0 = s00 * s00 + a01 * a01 + a02 * a02, n1 = a01 * a01 + s11 * s11 + a12 * a12,
               n2 = a02 * a02 + a12 * a12 + s22 * s22;
  const double N = sqrt(fmax(fmax(n0, n1), n2)) * 0x1.0001p-24 + 0x1p-120; /* the margin: R's and the sums' double rounding */
  const double step = ldexp(1.0, c->ks + COMPACT_S_EXP_MIN - COMPACT_S_MAG);
  if (!(N + step * 0x1p-9 <= 0.25 * step)) return 0;
  const double G = fmin(fmin(s00 - a01 - a02, s11 - a01 - a12), s22 - a02 - a12) - 3.0 * N;
  return G >= 0.25 && 1.7320508075688774 * N <= G * 0x1p-21;
}

/* Code c (of unit quaternion q and rotation R, which it updates) made a fixed point of
 * decode-then-encode (at most twice more: the header's idempotency). Each re-encoding starts from
 * the code's own rotation, which is its decode's polar rotation to float noise;
 * compact_f_fixed_sure_ proves almost every code a fixed point without decoding it,
 * compact_f_fixed_quick_ most of the rest without encoding again. Returns the passes that
 * changed the code. */
DR_HD int compact_f_settle_(compact_f_code *c, double q[4], double R[9]) {
  int changed = 0;
  for (int it = 0; it < 2; ++it) {
    if (compact_f_fixed_sure_(c, q)) break;
    float Fd[9];
    compact_f_decode_with_(c, R, Fd);
    if (compact_f_fixed_quick_(c, q, R, Fd)) break;
    compact_f_code c2;
    double q2[4], R2[9];
    compact_f_encode_(Fd, &c2, q, q2, R2);
    if (compact_f_same_(c, &c2)) break;
    *c = c2;
    for (int k = 0; k < 4; ++k) q[k] = q2[k];
    for (int k = 0; k < 9; ++k) R[k] = R2[k];
    ++changed;
  }
  return changed;
}

/* F's code, a fixed point of decode-then-encode; warm as compact_f_encode_'s. */
DR_HD int compact_f_fixed_(const float F[9], compact_f_code *c, const double *warm) {
  double q[4], R[9];
  compact_f_encode_(F, c, warm, q, R);
  return compact_f_settle_(c, q, R);
}

/* F's code from Rf, F's polar rotation as the return mapping's SVD gave it (constitutive_apply_r:
 * polar_r's rotation, to float noise), a fixed point of decode-then-encode. */
DR_HD int compact_f_fixed_rot_(const float F[9], const float Rf[9], compact_f_code *c) {
  double q[4], qc[4], R[9];
  compact_q_of_matrix_(Rf, q);
  compact_f_code_of_q_(F, q, c, qc, R);
  return compact_f_settle_(c, qc, R);
}

/* x (measured from particle block blk), v and C of s: the record's first COMPACT_AT_F bits, into w
 * (zeroed there) from bit 0. */
DR_HD void compact_put_xvc_(const compact_frame *f, const int32_t blk[3], const compact_state *s, uint32_t *w,
                            int *pos) {
  const int64_t lim = (int64_t)1 << (COMPACT_X_BITS - 1);
  for (int a = 0; a < 3; ++a) {
    int64_t o = compact_x_units_(f, s->x[a]) - compact_x_base_(f, a, blk[a]);
    o = o < -lim ? -lim : o > lim - 1 ? lim - 1 : o; /* beyond [-8, 8) cells: clamped (the caller's block is wrong) */
    compact_put_signed_(w, pos, COMPACT_X_BITS, (int32_t)o);
  }
  int32_t m[9];
  int k = compact_se_encode_(s->v, 3, COMPACT_V_MAG, COMPACT_EXP_MIN, m);
  compact_put_(w, pos, COMPACT_EXP_BITS, (uint32_t)k);
  for (int i = 0; i < 3; ++i) compact_put_signed_(w, pos, COMPACT_V_MAG + 1, m[i]);
  k = compact_se_encode_(s->C, 9, COMPACT_C_MAG, COMPACT_EXP_MIN, m);
  compact_put_(w, pos, COMPACT_EXP_BITS, (uint32_t)k);
  for (int i = 0; i < 9; ++i) compact_put_signed_(w, pos, COMPACT_C_MAG + 1, m[i]);
}

/* The record of s with F's code fc (s->F is not read): blk is the particle block x is measured
 * from. */
DR_HD void compact_encode_with_f_(const compact_frame *f, const int32_t blk[3], const compact_state *s,
                                  const compact_f_code *fc, uint32_t kind, uint64_t id, compact_record *r) {
  for (int k = 0; k < COMPACT_WORDS; ++k) r->w[k] = 0;
  int pos = 0;
  compact_put_xvc_(f, blk, s, r->w, &pos);
  compact_f_put_(r->w, &pos, fc);
  compact_put_(r->w, &pos, 16, compact_half_encode_(s->logjp));
  compact_put_(r->w, &pos, 16, kind);
  compact_put_(r->w, &pos, 32, (uint32_t)id);
  compact_put_(r->w, &pos, COMPACT_ID_BITS - 32, (uint32_t)(id >> 32));
}

/* The positions of a record (its first words w) measured from blk. */
DR_HD void compact_decode_x(const compact_frame *f, const int32_t blk[3], const uint32_t *w, float x[3]) {
  int pos = 0;
  for (int a = 0; a < 3; ++a)
    x[a] = compact_x_float_(f, compact_x_base_(f, a, blk[a]) + compact_get_signed_(w, &pos, COMPACT_X_BITS));
}

/* The velocity of a record. */
DR_HD void compact_decode_v(const compact_record *r, float v[3]) {
  int pos = COMPACT_AT_V;
  int32_t m[3];
  const int k = (int)compact_get_(r->w, &pos, COMPACT_EXP_BITS);
  for (int i = 0; i < 3; ++i) m[i] = compact_get_signed_(r->w, &pos, COMPACT_V_MAG + 1);
  compact_se_decode_(m, 3, COMPACT_V_MAG, COMPACT_EXP_MIN, k, v);
}

/* The state, kind and id's low 48 bits of a record whose positions are measured from blk. */
DR_HD void compact_decode(const compact_frame *f, const int32_t blk[3], const compact_record *r, compact_state *s,
                          uint32_t *kind, uint64_t *id) {
  compact_decode_x(f, blk, r->w, s->x);
  compact_decode_v(r, s->v);
  int pos = COMPACT_AT_C;
  int32_t m[9];
  int k = (int)compact_get_(r->w, &pos, COMPACT_EXP_BITS);
  for (int i = 0; i < 9; ++i) m[i] = compact_get_signed_(r->w, &pos, COMPACT_C_MAG + 1);
  compact_se_decode_(m, 9, COMPACT_C_MAG, COMPACT_EXP_MIN, k, s->C);
  compact_f_code fc;
  compact_f_get_(r->w, &pos, &fc);
  compact_f_decode_(&fc, s->F);
  s->logjp = compact_half_decode_(compact_get_(r->w, &pos, 16));
  *kind = compact_get_(r->w, &pos, 16);
  const uint64_t lo = compact_get_(r->w, &pos, 32);
  *id = lo | (uint64_t)compact_get_(r->w, &pos, COMPACT_ID_BITS - 32) << 32;
}

DR_HD int compact_same_(const compact_record *a, const compact_record *b) {
  for (int k = 0; k < COMPACT_WORDS; ++k)
    if (a->w[k] != b->w[k]) return 0;
  return 1;
}

/* Encodes a particle's state (kind < 2^16; the id's low 48 bits are kept), F's code re-encoded
 * from its own decode until it is a fixed point of decode-then-encode (at most twice more: see
 * the header's idempotency; the other fields' codes are fixed points by construction). Returns
 * the passes beyond the first that changed the code (0 almost always; tests/physics/test_compact.c
 * counts them). */
DR_HD int compact_encode(const compact_frame *f, const int32_t blk[3], const compact_state *s, uint32_t kind,
                         uint64_t id, compact_record *r) {
  compact_f_code fc;
  const int changed = compact_f_fixed_(s->F, &fc, NULL);
  compact_encode_with_f_(f, blk, s, &fc, kind, id, r);
  return changed;
}

/* ---- parts of a record (the CUDA packets' write-backs and moves) ------------------------------ */

/* Bits [lo, hi) of dst replaced by src's (0 <= lo < hi <= 32 COMPACT_WORDS). */
DR_HD void compact_splice_(compact_record *dst, const compact_record *src, int lo, int hi) {
  for (int k = lo >> 5; k <= (hi - 1) >> 5; ++k) {
    const int a = lo > 32 * k ? lo - 32 * k : 0, b = hi < 32 * (k + 1) ? hi - 32 * k : 32;
    const uint32_t m = (b == 32 ? 0xffffffffu : (1u << b) - 1u) & ~((1u << a) - 1u);
    dst->w[k] = (dst->w[k] & ~m) | (src->w[k] & m);
  }
}

/* F and logjp written into r as compact_round_f rounds them (P2G's return mapping: the rest of
 * the record, its bits included, stays as it was); Rf: F's polar rotation, the return mapping's
 * (constitutive_apply_r). */
DR_HD void compact_set_f(compact_record *r, const float F[9], float logjp, const float Rf[9]) {
  compact_f_code fc;
  compact_f_fixed_rot_(F, Rf, &fc);
  compact_record t;
  for (int k = 0; k < COMPACT_WORDS; ++k) t.w[k] = 0;
  int pos = COMPACT_AT_F;
  compact_f_put_(t.w, &pos, &fc);
  compact_put_(t.w, &pos, 16, compact_half_encode_(logjp));
  compact_splice_(r, &t, COMPACT_AT_F, COMPACT_AT_KIND);
}

/* x, v and C of s written into r (G2P's write-back: F, logjp, kind and id stay as they are, F
 * being P2G's to advance), x measured from particle block blk. */
DR_HD void compact_set_xvc(const compact_frame *f, const int32_t blk[3], const compact_state *s, compact_record *r) {
  compact_record t;
  for (int k = 0; k < COMPACT_WORDS; ++k) t.w[k] = 0;
  int pos = 0;
  compact_put_xvc_(f, blk, s, t.w, &pos);
  compact_splice_(r, &t, 0, COMPACT_AT_F);
}

/* r's positions, measured from particle block `from`, measured from block `to` instead: the same
 * lattice points (integer arithmetic, exact). Returns 0, or 1 (r unchanged) where an offset would
 * leave [-8, 8) cells of `to` (a rebuild-mapping's move is at most a block). */
DR_HD int compact_rebase_x(const compact_frame *f, compact_record *r, const int32_t from[3], const int32_t to[3]) {
  const int64_t lim = (int64_t)1 << (COMPACT_X_BITS - 1);
  int32_t o[3];
  int pos = 0;
  for (int a = 0; a < 3; ++a) {
    const int64_t u = compact_get_signed_(r->w, &pos, COMPACT_X_BITS) + compact_x_base_(f, a, from[a]) -
                      compact_x_base_(f, a, to[a]);
    if (u < -lim || u >= lim) return 1;
    o[a] = (int32_t)u;
  }
  compact_record t;
  for (int k = 0; k < COMPACT_WORDS; ++k) t.w[k] = 0;
  pos = 0;
  for (int a = 0; a < 3; ++a) compact_put_signed_(t.w, &pos, COMPACT_X_BITS, o[a]);
  compact_splice_(r, &t, 0, COMPACT_BITS_X);
  return 0;
}

/* F and logjp as a compact store holds them, in place (the CPU backend's P2G write-back: the rest
 * of the state stays as it was), with compact_encode's fixed-point pass; Rf: F's polar rotation,
 * the return mapping's (constitutive_apply_r). */
DR_HD void compact_round_f(float F[9], float *logjp, const float Rf[9]) {
  compact_f_code c;
  compact_f_fixed_rot_(F, Rf, &c);
  compact_f_decode_(&c, F);
  *logjp = compact_half_decode_(compact_half_encode_(*logjp));
}

/* The state as a compact store holds it: decode(encode(s)) in place, the block x's own (the CPU
 * backend's rounding at each step's end). */
DR_HD void compact_round(const compact_frame *f, compact_state *s) {
  int32_t blk[3];
  compact_x_block(f, s->x, blk);
  compact_record r;
  compact_encode(f, blk, s, 0u, 0u, &r);
  uint32_t kind;
  uint64_t id;
  compact_decode(f, blk, &r, s, &kind, &id);
}

#endif

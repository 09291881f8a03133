/* test_compact - the compact particle record (src/physics/compact.h) on seeded random states:
 * every field's round-trip error against its format's analytic bound (computed here from the
 * bits, not from the code under test), the round trip's idempotency (decode(encode(decode(r)))
 * == decode(r) bitwise), the lossless fields (kind, the id's low 48 bits), the bit packing, and
 * the record's size (15 words). */
#include <math.h>
#include <string.h>

#include "physics/check.h"
#include "physics/compact.h"

static double dmax3(const float *v, int n) {
  double m = 0;
  for (int i = 0; i < n; ++i) m = fmax(m, fabs((double)v[i]));
  return m;
}

/* A value of random sign and magnitude 10^[lo, hi]. */
static float rnd_mag(check_rng *r, double lo, double hi) {
  const double m = pow(10.0, check_rng_range(r, lo, hi));
  return (float)(check_rng_unit(r) < 0.5 ? -m : m);
}

static void test_bits(check_rng *r) {
  for (int t = 0; t < 2000; ++t) {
    uint32_t w[COMPACT_WORDS] = {0};
    int widths[40], n = 0, pos = 0;
    uint32_t vals[40];
    while (n < 40) {
      const int b = 1 + (int)(check_rng_u32(r) % 32);
      if (pos + b > 32 * COMPACT_WORDS) break;
      widths[n] = b;
      vals[n] = check_rng_u32(r) & (b == 32 ? 0xffffffffu : ((1u << b) - 1));
      compact_put_(w, &pos, b, vals[n++]);
    }
    pos = 0;
    for (int i = 0; i < n; ++i) {
      const uint32_t g = compact_get_(w, &pos, widths[i]);
      CHECK(g == vals[i], "field %d of %d bits: %u read back as %u", i, widths[i], vals[i], g);
    }
    uint32_t w2[COMPACT_WORDS] = {0};
    pos = 0;
    const int32_t sv = (int32_t)(check_rng_u32(r) % (1u << 20)) - (1 << 19);
    compact_put_signed_(w2, &pos, 21, sv);
    pos = 0;
    CHECK(compact_get_signed_(w2, &pos, 21) == sv, "signed %d", sv);
  }
}

/* v (16 bits), C (12 bits): |error| <= 2^-mag max|values|; below 2^(emin - mag - 1) zero. */
static void test_shared_exponent(check_rng *r) {
  const int mags[2] = {COMPACT_V_MAG, COMPACT_C_MAG}, ns[2] = {3, 9};
  for (int f = 0; f < 2; ++f)
    for (int t = 0; t < 20000; ++t) {
      float v[9], d[9];
      int32_t m[9];
      const double lo = check_rng_range(r, -14, 3); /* the formats' range: below 2^23 */
      for (int i = 0; i < ns[f]; ++i) v[i] = rnd_mag(r, lo, lo + check_rng_range(r, 0, 3.6));
      if (t % 7 == 0) v[t % ns[f]] = 0.0f;
      const int k = compact_se_encode_(v, ns[f], mags[f], COMPACT_EXP_MIN, m);
      compact_se_decode_(m, ns[f], mags[f], COMPACT_EXP_MIN, k, d);
      const double bound = fmax(ldexp(dmax3(v, ns[f]), -mags[f]), ldexp(1.0, COMPACT_EXP_MIN - mags[f] - 1));
      for (int i = 0; i < ns[f]; ++i)
        CHECK(fabs((double)d[i] - v[i]) <= bound, "mag %d: %.9g -> %.9g, error %.3g > %.3g", mags[f], v[i], d[i],
              fabs((double)d[i] - v[i]), bound);
      int32_t m2[9];
      float d2[9];
      const int k2 = compact_se_encode_(d, ns[f], mags[f], COMPACT_EXP_MIN, m2);
      compact_se_decode_(m2, ns[f], mags[f], COMPACT_EXP_MIN, k2, d2);
      CHECK(k2 == k && !memcmp(d, d2, sizeof(float) * (size_t)ns[f]), "mag %d: not idempotent (exponent %d -> %d)",
            mags[f], k, k2);
    }
}

/* beyond the largest exponent: saturated at (2^mag - 1) 2^(emax - mag), the sign kept */
static void test_saturation(void) {
  const float v[3] = {1e9f, -3e8f, 1.0f};
  int32_t m[3];
  float d[3];
  const int k = compact_se_encode_(v, 3, COMPACT_V_MAG, COMPACT_EXP_MIN, m);
  compact_se_decode_(m, 3, COMPACT_V_MAG, COMPACT_EXP_MIN, k, d);
  const double top = ldexp((1 << COMPACT_V_MAG) - 1, COMPACT_EXP_MIN + (1 << COMPACT_EXP_BITS) - 1 - COMPACT_V_MAG);
  CHECK(d[0] == (float)top && d[1] == -(float)top, "saturation: %.9g %.9g against %.9g", d[0], d[1], top);
}

static void test_half(check_rng *r) {
  for (int t = 0; t < 20000; ++t) {
    const float f = rnd_mag(r, -9, 4.8);
    const float h = compact_half_decode_(compact_half_encode_(f));
    const double bound = fabs(f) >= 6.103515625e-05 ? ldexp(fabs(f), -11) : ldexp(1.0, -25);
    CHECK(fabs((double)h - f) <= bound, "half: %.9g -> %.9g", f, h);
    CHECK(compact_half_decode_(compact_half_encode_(h)) == h, "half: %.9g not idempotent", h);
  }
  CHECK(compact_half_decode_(compact_half_encode_(1e9f)) == 65504.0f, "half: saturates");
  CHECK(compact_half_decode_(compact_half_encode_(-2.5f)) == -2.5f, "half: -2.5 exact");
}

/* A random state: positions in a domain, velocities, C, and F = R (I + E) with strains of
 * 10^[lo_e, hi_e]. */
static void rnd_state(check_rng *r, const compact_frame *fr, double lo_e, double hi_e, compact_state *s, double R[9],
                      double S[9]) {
  for (int a = 0; a < 3; ++a) s->x[a] = (float)(fr->origin[a] + check_rng_range(r, 3, 200) * fr->dx);
  const double lv = check_rng_range(r, -6, 1);
  for (int a = 0; a < 3; ++a) s->v[a] = rnd_mag(r, lv - 2, lv);
  const double lc = check_rng_range(r, -4, 3);
  for (int q = 0; q < 9; ++q) s->C[q] = rnd_mag(r, lc - 3, lc);
  check_random_rotation(r, R);
  const double le = check_rng_range(r, lo_e, hi_e);
  double E[6];
  double fro = 0;
  for (int i = 0; i < 6; ++i) E[i] = rnd_mag(r, le - 1, le), fro += (i < 3 ? 1 : 2) * E[i] * E[i];
  /* |E|_2 <= 0.8: S positive definite, so that R is F's polar rotation (a reference) */
  for (int i = 0; i < 6 && fro > 0.64; ++i) E[i] *= 0.8 / sqrt(fro);
  const double Sv[9] = {1 + E[0], E[3], E[4], E[3], 1 + E[1], E[5], E[4], E[5], 1 + E[2]};
  memcpy(S, Sv, sizeof Sv);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      s->F[3 * i + j] = (float)(R[3 * i] * S[j] + R[3 * i + 1] * S[3 + j] + R[3 * i + 2] * S[6 + j]);
  s->logjp = (float)check_rng_range(r, -0.5, 0.1);
}

/* A decoded F against F = R S's format bound. */
static void check_f(const double R[9], const double S[9], const float Fd[9], const char *what) {
  /* F: R^T F' against S. The stored rotation is within 2^-19 a quaternion component
   * (angle <= 4 sqrt(3) 2^-19 < 1.4e-5): R^T R' = I + W with |W|_2 <= angle leaves an
   * antisymmetric part (W S + S W) / 2 of at most angle |S|_2 <= 3 angle max|S_ij| and tilts
   * the symmetric part by (W (S - I) - (S - I) W) / 2, at most 3 angle max|S - I|; S - I's
   * format adds max(2^-14 max|S - I|, 2^-22) an entry; F's float rounding 4e-7 more. */
  double emax = 0, smax = 0;
  for (int i = 0; i < 9; ++i) emax = fmax(emax, fabs(S[i] - (i % 4 == 0 ? 1.0 : 0.0))), smax = fmax(smax, fabs(S[i]));
  const double angle = 4.0 * sqrt(3.0) * ldexp(1.0, -19);
  double P[9];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) P[3 * i + j] = R[i] * Fd[j] + R[3 + i] * Fd[3 + j] + R[6 + i] * Fd[6 + j];
  const double bs = fmax(ldexp(emax, -COMPACT_S_MAG), ldexp(1.0, COMPACT_S_EXP_MIN - COMPACT_S_MAG - 1)) + 3.0 * angle * emax + 4e-7 * smax;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      const double sym = 0.5 * (P[3 * i + j] + P[3 * j + i]), anti = 0.5 * (P[3 * i + j] - P[3 * j + i]);
      CHECK(fabs(sym - S[3 * i + j]) <= bs, "%s: S[%d%d] %.9g -> %.9g (strain %.3g, bound %.3g)", what, i, j, S[3 * i + j], sym,
            emax, bs);
      CHECK(fabs(anti) <= (3.0 * angle + 4e-7) * smax, "%s: rotation: antisymmetric %.3g (bound %.3g)", what, anti,
            3.0 * angle * smax);
    }
}

static void test_record(check_rng *r) {
  const double o[3][3] = {{-0.03, -0.03, -0.03}, {-2.0, -1.5, -0.5}, {-52.0, 10.0, -3.0}};
  const compact_frame frames[3] = {compact_frame_make(o[0], 0.01), compact_frame_make(o[1], 1.0 / 256),
                                   compact_frame_make(o[2], 0.05)};
  const double strains[4][2] = {{-6, -4}, {-4, -2}, {-2, -0.5}, {-0.5, 0}};
  long passes = 0, records = 0;
  for (int fi = 0; fi < 3; ++fi)
    for (int si = 0; si < 4; ++si)
      for (int t = 0; t < 3000; ++t) {
        const compact_frame *fr = &frames[fi];
        compact_state s, d, d2;
        double R[9], S[9];
        rnd_state(r, fr, strains[si][0], strains[si][1], &s, R, S);
        const uint32_t kind = check_rng_u32(r) & 0xffffu;
        const uint64_t id = ((uint64_t)check_rng_u32(r) << 32 | check_rng_u32(r)) & (((uint64_t)1 << 48) - 1);
        int32_t blk[3];
        compact_x_block(fr, s.x, blk);
        compact_record rec;
        passes += compact_encode(fr, blk, &s, kind, id, &rec);
        ++records;
        uint32_t k2;
        uint64_t id2;
        compact_decode(fr, blk, &rec, &d, &k2, &id2);
        CHECK(k2 == kind && id2 == id, "kind %u id %llu -> %u %llu", kind, (unsigned long long)id, k2,
              (unsigned long long)id2);
        /* positions: half the lattice step q <= dx 2^-17, q a power of two (and 0 where floats are coarser) */
        for (int a = 0; a < 3; ++a) {
          const double bound = 0.5 * fr->q; /* the lattice nests with the floats: one rounding */
          CHECK(fabs((double)d.x[a] - s.x[a]) <= bound, "x %.9g -> %.9g (dx %g)", s.x[a], d.x[a], fr->dx);
        }
        const double bv = ldexp(dmax3(s.v, 3), -COMPACT_V_MAG), bc = ldexp(dmax3(s.C, 9), -COMPACT_C_MAG);
        for (int a = 0; a < 3; ++a) CHECK(fabs((double)d.v[a] - s.v[a]) <= bv, "v %.9g -> %.9g", s.v[a], d.v[a]);
        for (int q = 0; q < 9; ++q) CHECK(fabs((double)d.C[q] - s.C[q]) <= bc, "C %.9g -> %.9g", s.C[q], d.C[q]);
        CHECK(fabs((double)d.logjp - s.logjp) <= ldexp(fabs((double)s.logjp), -11) + ldexp(1.0, -25), "logjp %.9g -> %.9g",
              s.logjp, d.logjp);
        check_f(R, S, d.F, "encode");
        /* F's code from the rotation of another F of the same polar rotation (P2G's way: the SVD
         * of the trial F before the return mapping, compact_f_fixed_rot_; here 1.3 F, rounded):
         * the same bounds, and a fixed point */
        float F13[9], Rf[9];
        for (int k = 0; k < 9; ++k) F13[k] = s.F[k] * 1.3f;
        polar_r(F13, Rf);
        compact_f_code fcr;
        compact_f_fixed_rot_(s.F, Rf, &fcr);
        compact_record recw;
        compact_state dw;
        compact_encode_with_f_(fr, blk, &s, &fcr, kind, id, &recw);
        compact_decode(fr, blk, &recw, &dw, &k2, &id2);
        check_f(R, S, dw.F, "encode from the rotation");
        compact_record recw2;
        compact_state dw2;
        compact_encode(fr, blk, &dw, kind, id, &recw2);
        compact_decode(fr, blk, &recw2, &dw2, &k2, &id2);
        CHECK(!memcmp(&dw, &dw2, sizeof dw), "the rotation's code is not a fixed point (frame %d)", fi);
        /* idempotency: the decoded state encodes to a code that decodes to it bitwise */
        compact_record rec2;
        compact_encode(fr, blk, &d, kind, id, &rec2);
        compact_decode(fr, blk, &rec2, &d2, &k2, &id2);
        CHECK(!memcmp(&d, &d2, sizeof d), "not idempotent (frame %d, strains 1e%g)", fi, strains[si][1]);
        CHECK(compact_same_(&rec, &rec2), "the code of a decoded state differs (frame %d)", fi);
        /* the CPU's rounding, through the particle's own block */
        compact_state c1 = s, c2;
        compact_round(fr, &c1);
        c2 = c1;
        compact_round(fr, &c2);
        CHECK(!memcmp(&c1, &c2, sizeof c1), "compact_round not idempotent");
      }
  printf("test_compact: %ld records, %ld extra encoding passes that changed a code\n", records, passes);
}

/* A position measured from a neighbouring block (a packet's, the particle having moved) decodes
 * to the same float as from its own block, within [-8, 8) cells. */
static void test_blocks(check_rng *r) {
  const double o[3] = {-0.5, -0.5, -0.5};
  const compact_frame fr = compact_frame_make(o, 1.0 / 128);
  for (int t = 0; t < 5000; ++t) {
    compact_state s;
    double R[9], S[9];
    rnd_state(r, &fr, -4, -2, &s, R, S);
    int32_t own[3], other[3];
    compact_x_block(&fr, s.x, own);
    for (int a = 0; a < 3; ++a) other[a] = own[a] + (int32_t)(check_rng_u32(r) % 3) - 1;
    compact_record ra, rb;
    compact_encode(&fr, own, &s, 0, 0, &ra);
    compact_encode(&fr, other, &s, 0, 0, &rb);
    compact_state da, db;
    uint32_t k;
    uint64_t id;
    compact_decode(&fr, own, &ra, &da, &k, &id);
    compact_decode(&fr, other, &rb, &db, &k, &id);
    CHECK(!memcmp(da.x, db.x, sizeof da.x), "x from a neighbouring block: %.9g vs %.9g", da.x[0], db.x[0]);
  }
}

/* compact_set_f: the record's F and logjp within their bounds and as compact_round_f keeps them,
 * every other bit as it was; compact_rebase_x: the same positions from another block, the other bits untouched, and a
 * block too far refused. */
static void test_parts(check_rng *r) {
  const double o[3] = {-0.5, -0.5, -0.5};
  const compact_frame fr = compact_frame_make(o, 1.0 / 128);
  int far = 0;
  for (int t = 0; t < 5000; ++t) {
    compact_state s, s2;
    double R[9], S[9];
    rnd_state(r, &fr, -4, -2, &s, R, S);
    rnd_state(r, &fr, -4, -2, &s2, R, S); /* another F and logjp */
    int32_t own[3], other[3];
    compact_x_block(&fr, s.x, own);
    compact_record a, b;
    compact_encode(&fr, own, &s, 1234u, 0x123456789abcull, &a);
    b = a;
    float F13[9], Rf[9]; /* s2.F's rotation as P2G has it: the SVD of another F of that rotation */
    for (int k = 0; k < 9; ++k) F13[k] = s2.F[k] * 1.3f;
    polar_r(F13, Rf);
    compact_set_f(&b, s2.F, s2.logjp, Rf);
    compact_state da, db;
    uint32_t ka, kb;
    uint64_t ia, ib;
    compact_decode(&fr, own, &a, &da, &ka, &ia);
    compact_decode(&fr, own, &b, &db, &kb, &ib);
    /* F within its bound; a fixed point of compact_round_f (from its own SVD's rotation); logjp
     * rounded as compact_round_f rounds it */
    check_f(R, S, db.F, "set_f");
    float F[9], jp = s2.logjp, RF[9];
    memcpy(F, db.F, sizeof F);
    polar_r(F, RF);
    compact_round_f(F, &jp, RF);
    CHECK(!memcmp(db.F, F, sizeof F) && db.logjp == jp, "set_f: F or logjp not a fixed point of compact_round_f");
    CHECK(!memcmp(da.x, db.x, sizeof da.x) && !memcmp(da.v, db.v, sizeof da.v) && !memcmp(da.C, db.C, sizeof da.C) &&
              ka == kb && ia == ib,
          "set_f changed another field");
    for (int k = 0; k < COMPACT_WORDS; ++k) {
      const int lo = 32 * k, hi = lo + 32; /* the bits outside [AT_F, AT_KIND) of word k */
      uint32_t keep = 0xffffffffu;
      for (int bit = lo; bit < hi; ++bit)
        if (bit >= COMPACT_AT_F && bit < COMPACT_AT_KIND) keep &= ~(1u << (bit - lo));
      CHECK((a.w[k] & keep) == (b.w[k] & keep), "set_f: word %d changed outside F and logjp", k);
    }
    /* -4..4 blocks: the range [-2^21 q, 2^21 q) is more than 8 cells and at most 16 (q in (dx 2^-18,
     * dx 2^-17]): a block's move always fits, four blocks down never */
    const int step = (int)(check_rng_u32(r) % 9) - 4;
    for (int q = 0; q < 3; ++q) other[q] = own[q] + (q == (t % 3) ? step : 0);
    compact_record c = b;
    if (compact_rebase_x(&fr, &c, own, other)) {
      ++far;
      CHECK(!memcmp(&c, &b, sizeof c), "a refused rebase changed the record");
      CHECK(step < -1 || step > 1, "a rebase by %d blocks refused", step);
      continue;
    }
    CHECK(step != -4, "a rebase by four blocks down was not refused");
    compact_state dc;
    uint32_t kc;
    uint64_t ic;
    compact_decode(&fr, other, &c, &dc, &kc, &ic);
    CHECK(!memcmp(dc.x, db.x, sizeof dc.x), "rebase: x %.9g from block %d against %.9g", dc.x[0], other[0], db.x[0]);
    CHECK(!memcmp(dc.v, db.v, sizeof dc.v) && !memcmp(dc.F, db.F, sizeof dc.F) && kc == kb && ic == ib,
          "rebase changed another field");
  }
  CHECK(far > 0, "no rebase was refused");
}

/* F = R S for a drawn unit quaternion q (returned, with R) and a drawn S positive definite with
 * |S - I| <= bound (Frobenius), its strains of every scale from 1e-6 up; tie: q's two largest
 * components within 1e-5 of each other (the dropped component's choice at its edge). */
static void rnd_rs(check_rng *r, double bound, int tie, double q[4], double R[9], float F[9]) {
  double n;
  do {
    n = 0;
    for (int k = 0; k < 4; ++k) q[k] = check_rng_range(r, -1, 1), n += q[k] * q[k];
  } while (n < 1e-4 || n > 1);
  if (tie) q[1] = copysign(fabs(q[0]) + check_rng_range(r, -1e-5, 1e-5) * sqrt(n), q[1]), q[2] *= 0.1, q[3] *= 0.1;
  n = 0;
  for (int k = 0; k < 4; ++k) n += q[k] * q[k];
  for (int k = 0; k < 4; ++k) q[k] /= sqrt(n);
  compact_q_rotation_(q, R);
  const double le = check_rng_range(r, -6, log10(bound));
  double E[6], fro = 0;
  for (int i = 0; i < 6; ++i) E[i] = rnd_mag(r, le - 1, le), fro += (i < 3 ? 1 : 2) * E[i] * E[i];
  for (int i = 0; i < 6 && fro > bound * bound; ++i) E[i] *= bound / sqrt(fro);
  const double S[9] = {1 + E[0], E[3], E[4], E[3], 1 + E[1], E[5], E[4], E[5], 1 + E[2]};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      F[3 * i + j] = (float)(R[3 * i] * S[j] + R[3 * i + 1] * S[3 + j] + R[3 * i + 2] * S[6 + j]);
}

/* compact_polar_q_ on F = R S: from a start near R (a step's turn, up to about 0.06 rad) it
 * accepts R within float noise wherever |S - I| <= 0.3; from any start, what it accepts is R (the
 * rest it leaves to the SVD). */
static void test_polar(check_rng *r) {
  int accepted_far = 0;
  for (int t = 0; t < 40000; ++t) {
    const int near = t % 2 == 0;
    double q[4], R[9];
    float F[9];
    rnd_rs(r, near ? 0.3 : 0.8, 0, q, R, F);
    double q0[4];
    for (int k = 0; k < 4; ++k) q0[k] = near ? q[k] + check_rng_range(r, -0.015, 0.015) : check_rng_range(r, -1, 1);
    const int ok = compact_polar_q_(F, q0);
    if (near) CHECK(ok, "a start near the rotation declined");
    if (!ok) continue;
    accepted_far += !near;
    double Rq[9], e = 0;
    compact_q_rotation_(q0, Rq);
    for (int i = 0; i < 9; ++i) e = fmax(e, fabs(Rq[i] - R[i]));
    CHECK(e <= 1e-6, "%s start: a rotation %.3g from F's accepted", near ? "a near" : "a far", e);
  }
  printf("test_compact: polar rotations from far starts: %d of 20000 accepted\n", accepted_far);
}

/* Whether code c is a fixed point of decode-then-encode, encoding its decode from its own rotation
 * (compact_f_fixed_'s full check), and what compact_f_fixed_sure_ and compact_f_fixed_quick_ say. */
static int fixed_point(const compact_f_code *c, int *sure, int *quick) {
  double qc[4], Rc[9], q2[4], R2[9];
  float Fd[9];
  compact_q_of_code_(c, qc);
  compact_q_rotation_(qc, Rc);
  compact_f_decode_with_(c, Rc, Fd);
  *sure = compact_f_fixed_sure_(c, qc);
  *quick = compact_f_fixed_quick_(c, qc, Rc, Fd);
  compact_f_code c2;
  compact_f_encode_(Fd, &c2, qc, q2, R2);
  return compact_f_same_(c, &c2);
}

/* compact_f_fixed_sure_ and compact_f_fixed_quick_ against the encoding they spare: wherever
 * either says a code is a fixed point of decode-then-encode, the full check agrees; and between
 * them they decide most of the codes that are fixed points (the rest cost a second encoding).
 * Codes of drawn F (a tenth of them at the dropped component's edge), and drawn codes: S - I's
 * integers anywhere in their range at the least exponents, where its step is the floor and the
 * proof's margin the thinnest. */
static void test_fixed_checks(check_rng *r) {
  int fixed = 0, sure = 0, quick = 0, drawn_fixed = 0, drawn_sure = 0;
  for (int t = 0; t < 100000; ++t) {
    double q[4], R[9], qc[4], Rc[9];
    float F[9];
    rnd_rs(r, t % 3 ? 0.3 : 0.8, t % 10 == 0, q, R, F);
    compact_f_code c;
    compact_f_encode_(F, &c, t % 2 ? q : NULL, qc, Rc);
    int s, k;
    const int same = fixed_point(&c, &s, &k);
    CHECK(!s || same, "draw %d: a code proved a fixed point that its re-encoding changes", t);
    CHECK(!k || same, "draw %d: a code confirmed that its re-encoding changes", t);
    fixed += same;
    sure += s;
    quick += s || k;
    /* the same rotation with S - I's code drawn: an exponent of 0 to 6 (steps 2^-21 to 2^-15) */
    c.ks = (int)check_rng_range(r, 0, 7);
    const int lim = (1 << COMPACT_S_MAG) - 1, half = 1 << (COMPACT_S_MAG - 1);
    for (int i = 0; i < 6; ++i) c.s[i] = (int32_t)check_rng_range(r, -lim, lim + 1);
    if (c.ks > 0 && t % 4) c.s[t % 6] = (t % 8 < 4 ? 1 : -1) * (int32_t)check_rng_range(r, half, lim + 1);
    const int dsame = fixed_point(&c, &s, &k);
    CHECK(!s || dsame, "drawn code %d: a code proved a fixed point that its re-encoding changes", t);
    CHECK(!k || dsame, "drawn code %d: a code confirmed that its re-encoding changes", t);
    drawn_fixed += dsame;
    drawn_sure += s;
  }
  CHECK(quick >= fixed * 9 / 10, "the checks decided %d of %d fixed points", quick, fixed);
  CHECK(sure >= fixed * 8 / 10, "the proof decided %d of %d fixed points", sure, fixed);
  printf("test_compact: fixed points %d of 100000 codes of drawn F, %d proved from the code, %d with the quick "
         "check; drawn codes: %d fixed points, %d proved\n",
         fixed, sure, quick, drawn_fixed, drawn_sure);
}

int main(void) {
  check_rng r = {20261203};
  CHECK(sizeof(compact_record) == 60, "a record is %zu B", sizeof(compact_record));
  test_bits(&r);
  test_shared_exponent(&r);
  test_saturation();
  test_half(&r);
  test_record(&r);
  test_blocks(&r);
  test_parts(&r);
  test_polar(&r);
  test_fixed_checks(&r);
  return check_summary("test_compact");
}

/* test_pack16 - the 16-bit encoders of output.precision "half" (io/pack16.h) against references
 * of their own:
 *   binary16: the nearest of the 63,488 finite halves (decoded exactly here with ldexp), ties to the
 *     even one, finite values beyond 65504 saturated, inf kept, NaN NaN of the same sign; and,
 *     where the compiler has _Float16, its cast (libgcc's, round to nearest even) outside the
 *     saturation. Inputs: every half's value, the midpoints between neighbours and one float ulp
 *     either side, subnormals, overflow, inf, NaN payloads, and every 1021st float bit pattern.
 *     The F16C path (where the CPU has it) gives the same bits as the portable one for all of them.
 *   bf16: the nearer of the two float32 upper halves around the value, ties to even, saturated.
 *   fixed: the spacing chosen for extents from 1 mm to 1e6 m is a power of two, the finest whose
 *     range reaches the extent with an exponent bias of at least 1 (h5py cannot open bias 0); values read back through HDF5's own conversion (a type built here
 *     from the parameters) are the nearest multiple of the spacing, ties to even, saturated at the
 *     range; NaN reads back NaN.
 * Prints each encoder's speed (values a second on this machine; not checked). */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "pack16.h"

static float f_of(uint32_t b) {
  float x;
  memcpy(&x, &b, 4);
  return x;
}
static uint32_t b_of(float x) {
  uint32_t b;
  memcpy(&b, &x, 4);
  return b;
}

/* ---- binary16 ---- */

static double half_value[0x7c01]; /* 0x0000 .. 0x7bff finite, 0x7c00 inf */

static void decode_halves(void) {
  for (uint32_t h = 0; h <= 0x7c00; ++h) {
    const int e = (int)(h >> 10), m = (int)(h & 0x3ff);
    half_value[h] = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(1024 + m, e - 25);
  }
}

/* The expected binary16 bits of x (NaN: 0, checked apart). */
static uint16_t half_reference(float x) {
  const uint16_t sign = (b_of(x) >> 16) & 0x8000u;
  const double a = fabs((double)x);
  if (isinf(x)) return sign | 0x7c00u;
  if (a >= half_value[0x7bff]) return sign | 0x7bffu; /* saturated */
  uint32_t lo = 0, hi = 0x7bff; /* the largest h with value <= a */
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    if (half_value[mid] <= a) lo = mid;
    else hi = mid - 1;
  }
  const double below = a - half_value[lo], above = half_value[lo + 1] - a;
  const uint32_t h = below < above ? lo : above < below ? lo + 1 : (lo & 1u) ? lo + 1 : lo;
  return (uint16_t)(sign | h);
}

static size_t half_fails;

static void check_half_block(const float *in, size_t n) {
  uint16_t *soft = malloc(n * 2), *fast = malloc(n * 2);
  pack16_half_soft(in, soft, n);
  pack16_half(in, fast, n);
  for (size_t i = 0; i < n; ++i) {
    const float x = in[i];
    if (soft[i] != fast[i] && half_fails++ < 5)
      fprintf(stderr, "binary16 of %a (0x%08x): portable 0x%04x, F16C 0x%04x\n", x, b_of(x), soft[i], fast[i]);
    if (isnan(x)) {
      const int ok = (soft[i] & 0x7c00u) == 0x7c00u && (soft[i] & 0x3ffu) && ((soft[i] >> 15) == (b_of(x) >> 31));
      if (!ok && half_fails++ < 5) fprintf(stderr, "binary16 of NaN 0x%08x: 0x%04x\n", b_of(x), soft[i]);
      continue;
    }
    const uint16_t want = half_reference(x);
    if (soft[i] != want && half_fails++ < 5)
      fprintf(stderr, "binary16 of %a (0x%08x): 0x%04x, nearest 0x%04x\n", x, b_of(x), soft[i], want);
#ifdef __FLT16_MAX__
    if (!(isfinite(x) && fabsf(x) > 65504.0f)) {
      const _Float16 c = (_Float16)x;
      uint16_t cb;
      memcpy(&cb, &c, 2);
      if (soft[i] != cb && half_fails++ < 5)
        fprintf(stderr, "binary16 of %a: 0x%04x, the compiler's _Float16 0x%04x\n", x, soft[i], cb);
    }
#endif
  }
  free(soft);
  free(fast);
}

static void test_half(void) {
  decode_halves();
  enum { BLOCK = 1 << 20 };
  float *in = malloc(BLOCK * sizeof *in);
  size_t k = 0;
#define PUT(v)                                                                                                        \
  do {                                                                                                               \
    in[k++] = (v);                                                                                                   \
    if (k == BLOCK) check_half_block(in, k), k = 0;                                                                  \
  } while (0)
  /* every half, the midpoints to its neighbour and one float ulp either side, both signs */
  for (uint32_t h = 0; h < 0x7c00; ++h)
    for (int s = 0; s < 2; ++s) {
      const float sg = s ? -1.0f : 1.0f, v = (float)half_value[h];
      const float mid = (float)(0.5 * (half_value[h] + (h < 0x7bff ? half_value[h + 1] : 65520.0)));
      PUT(sg * v);
      PUT(sg * mid);
      PUT(sg * nextafterf(mid, 0.0f));
      PUT(sg * nextafterf(mid, INFINITY));
    }
  /* overflow, the limits, inf, NaN payloads (quiet and signalling) */
  const float specials[] = {65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e10f, 3.4e38f, INFINITY, 0x1p-24f, 0x1p-25f,
                            0x1.000002p-25f, 0x1p-26f, 0x1p-149f, 0.0f};
  for (size_t i = 0; i < sizeof specials / sizeof *specials; ++i) {
    PUT(specials[i]);
    PUT(-specials[i]);
  }
  for (uint32_t m = 1; m < (1u << 23); m += 4099) {
    PUT(f_of(0x7f800000u | m));
    PUT(f_of(0xff800000u | m));
  }
  /* every 1021st float bit pattern */
  for (uint64_t b = 0; b < (1ull << 32); b += 1021) PUT(f_of((uint32_t)b));
  if (k) check_half_block(in, k);
#undef PUT
  free(in);
  CHECK(half_fails == 0, "binary16: %zu values wrong", half_fails);
  printf("binary16: the portable path and %s agree with the nearest half%s\n",
         pack16_half_fast() ? "F16C" : "(no F16C on this CPU: the portable path twice)",
#ifdef __FLT16_MAX__
         " and the compiler's _Float16"
#else
         ""
#endif
  );
}

/* ---- bf16 ---- */

static void test_bf16(void) {
  enum { N = 1 << 20 };
  float *in = malloc(N * sizeof *in);
  uint16_t *out = malloc(N * 2);
  size_t fails = 0, total = 0;
  for (uint64_t base = 0; base < (1ull << 32); base += (uint64_t)N * 1021) {
    for (uint32_t i = 0; i < N; ++i) in[i] = f_of((uint32_t)(base + (uint64_t)i * 1021));
    /* the cases that matter: ties, just either side, and the top */
    in[0] = f_of(0x3f808000u), in[1] = f_of(0x3f818000u), in[2] = f_of(0x3f808001u), in[3] = f_of(0x7f7f8000u);
    in[4] = f_of(0x7f7f7fffu), in[5] = f_of(0xff7fffffu), in[6] = INFINITY, in[7] = f_of(0x7f800001u);
    in[8] = f_of(0x00008000u), in[9] = f_of(0x00018000u);
    pack16_bf16(in, out, N);
    for (uint32_t i = 0; i < N; ++i, ++total) {
      const float x = in[i];
      const uint32_t b = b_of(x);
      if (isnan(x)) {
        if (!((out[i] & 0x7f80u) == 0x7f80u && (out[i] & 0x7fu) && (out[i] >> 15) == (b >> 31)) && fails++ < 5)
          fprintf(stderr, "bf16 of NaN 0x%08x: 0x%04x\n", b, out[i]);
        continue;
      }
      const uint32_t lo = b & 0xffff0000u, hi = lo + 0x10000u;
      uint16_t want;
      if (isinf(x)) want = (uint16_t)(b >> 16);
      else {
        const double dl = fabs((double)x - (double)f_of(lo));
        const double dh = (hi & 0x7f800000u) == 0x7f800000u ? INFINITY : fabs((double)f_of(hi) - (double)x);
        want = (uint16_t)((dl < dh || (dl == dh && !((lo >> 16) & 1u)) ? lo : hi) >> 16);
        /* a finite value at or past the midpoint above the largest: the largest */
        if ((b & 0x7fffffffu) >= 0x7f7f8000u) want = (uint16_t)((b >> 16 & 0x8000u) | 0x7f7fu);
      }
      if (out[i] != want && fails++ < 5) fprintf(stderr, "bf16 of %a (0x%08x): 0x%04x, want 0x%04x\n", x, b, out[i], want);
    }
  }
  free(in);
  free(out);
  CHECK(fails == 0, "bf16: %zu of %zu values wrong", fails, total);
  printf("bf16: %zu values\n", total);
}

/* ---- fixed point ---- */

/* The HDF5 type of fx, built here from the parameters as docs/output.md describes it. */
static hid_t fixed_type(const pack16_fixed *fx) {
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  CHECK(t >= 0 && H5Tset_fields(t, 15, (size_t)fx->mant_bits, (size_t)fx->exp_bits, 0, (size_t)fx->mant_bits) >= 0 &&
            H5Tset_precision(t, 16) >= 0 && H5Tset_size(t, 2) >= 0 && H5Tset_ebias(t, (size_t)fx->bias) >= 0 &&
            H5Tset_norm(t, H5T_NORM_NONE) >= 0,
        "the fixed point's HDF5 type (k %d, E %d, bias %d)", fx->exp_bits, fx->exponent, fx->bias);
  return t;
}

static void test_fixed(void) {
  const double extents[] = {0.001, 0.125, 0.5, 0.71875, 1.0, 1.0001, 1.99, 2.0, 3.267, 7.99, 8.0, 100, 127.9, 5000, 1e6};
  enum { N = 200003 };
  float *in = malloc(N * sizeof *in);
  uint16_t *raw = malloc(N * sizeof(float)); /* H5Tconvert converts in place: room for floats */
  srand(12345);
  for (size_t e = 0; e < sizeof extents / sizeof *extents; ++e) {
    const double R = extents[e];
    pack16_fixed fx;
    CHECK(pack16_fixed_for(R, &fx) == 0, "no fixed point for extent %g", R);
    const double s = pack16_fixed_spacing(&fx), top = (double)((1 << fx.mant_bits) - 1);
    CHECK(fx.exp_bits + fx.mant_bits == 15 && fx.bias >= 1 && fx.exponent >= 0 &&
              fx.exponent < (1 << fx.exp_bits) - 1 && fx.shift == fx.exponent - fx.bias - fx.mant_bits + 1,
          "extent %g: fields k %d m %d E %d bias %d shift %d inconsistent", R, fx.exp_bits, fx.mant_bits, fx.exponent,
          fx.bias, fx.shift);
    CHECK(top * s >= R && top * s / 2 < R, "extent %g: range %g with spacing 2^%d is not the finest reaching it", R,
          top * s, fx.shift);
    /* a wider fixed point (one exponent bit fewer) could not have placed it */
    if (fx.exp_bits > 1) {
      const int m = fx.mant_bits + 1;
      int p = fx.shift;
      while ((double)((1 << m) - 1) * ldexp(1, p - 1) >= R) --p;
      const int q = p + m - 1;
      CHECK(q + (q >= -1 ? 1 : -q) > (1 << (fx.exp_bits - 1)) - 2, "extent %g: %d exponent bits, %d would do", R, fx.exp_bits,
            fx.exp_bits - 1);
    }
    size_t k = 0;
    in[k++] = 0.0f, in[k++] = -0.0f, in[k++] = (float)R, in[k++] = (float)-R, in[k++] = (float)(top * s);
    in[k++] = (float)(2 * top * s), in[k++] = INFINITY, in[k++] = -INFINITY, in[k++] = (float)(0.5 * s);
    in[k++] = (float)(1.5 * s), in[k++] = (float)(2.5 * s), in[k++] = (float)(-2.5 * s), in[k++] = NAN;
    in[k++] = (float)((top - 0.5) * s);
    while (k < N) in[k++] = (float)(R * (2.2 * rand() / (double)RAND_MAX - 1.1));
    pack16_fixed_encode(&fx, in, raw, N);
    hid_t t = fixed_type(&fx);
    CHECK(H5Tconvert(t, H5T_NATIVE_FLOAT, N, raw, NULL, H5P_DEFAULT) >= 0, "H5Tconvert (extent %g)", R);
    H5Tclose(t);
    const float *got = (const float *)(void *)raw;
    size_t fails = 0;
    double worst = 0;
    for (size_t i = 0; i < N; ++i) {
      const double x = in[i];
      if (isnan(x)) {
        if (!isnan(got[i]) && fails++ < 5) fprintf(stderr, "extent %g: NaN read back as %g\n", R, got[i]);
        continue;
      }
      double m = fmin(fabs(x) / s, top);
      const double fl = floor(m);
      m = m - fl > 0.5 ? fl + 1 : m - fl < 0.5 ? fl : fmod(fl, 2.0) == 0 ? fl : fl + 1;
      const double want = copysign(m * s, x);
      if (!(got[i] == want && !signbit(got[i]) == !signbit(want)) && fails++ < 5)
        fprintf(stderr, "extent %g (spacing 2^%d): %.9g read back as %.9g, want %.9g\n", R, fx.shift, x, got[i], want);
      if (fabs(x) <= top * s) worst = fmax(worst, fabs(got[i] - x));
    }
    CHECK(fails == 0, "extent %g: %zu values wrong", R, fails);
    CHECK(worst <= 0.5 * s, "extent %g: error %g beyond half the spacing %g", R, worst, s);
    printf("fixed: extent %-8g k %d, spacing 2^%d m, largest error %.3g m (half the spacing %.3g)\n", R, fx.exp_bits,
           fx.shift, worst, 0.5 * s);
  }
  pack16_fixed fx;
  CHECK(pack16_fixed_for(0.0, &fx) != 0 && pack16_fixed_for(NAN, &fx) != 0 && pack16_fixed_for(1e12, &fx) != 0,
        "fixed point for an extent of 0, NaN or 1e12 m");
  free(in);
  free(raw);
}

/* ---- speed ---- */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void speed(void) {
  enum { N = 1 << 20, REPS = 16 };
  float *in = malloc(N * sizeof *in);
  uint16_t *out = malloc(N * 2);
  for (size_t i = 0; i < N; ++i) in[i] = (float)(i % 1000) * 0.001f - 0.3f;
  pack16_fixed fx;
  pack16_fixed_for(1.0, &fx);
  double t[4];
  for (int e = 0; e < 4; ++e) {
    const double t0 = now();
    for (int r = 0; r < REPS; ++r) {
      if (e == 0) pack16_half(in, out, N);
      else if (e == 1) pack16_half_soft(in, out, N);
      else if (e == 2) pack16_bf16(in, out, N);
      else pack16_fixed_encode(&fx, in, out, N);
    }
    t[e] = (double)N * REPS / (now() - t0) / 1e6;
  }
  printf("speed (M values/s, 1M at a time): binary16 %.0f (%s), portable %.0f, bf16 %.0f, fixed %.0f\n", t[0],
         pack16_half_fast() ? "F16C" : "portable", t[1], t[2], t[3]);
  free(in);
  free(out);
}

int main(void) {
  test_half();
  test_bf16();
  test_fixed();
  speed();
  printf("test_pack16: %s (%d failed checks)\n", failures_ ? "FAILED" : "passed", failures_);
  return failures_ ? 1 : 0;
}

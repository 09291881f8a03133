/* pack16.c - the 16-bit encodings of a frame's floats (see pack16.h).
 *
 * The writer converts a frame of 3.1M particles (about 25M floats) between its pwrites, so each
 * encoder is a loop the compiler vectorises (no branches but selects) or, for binary16, the CPU's
 * F16C instruction (vcvtps2ph, 8 values at once) chosen at run time. The rounding of the loops is
 * done by float additions in the default rounding mode (to nearest, ties to even), never changed
 * by drift; F16C is told the same mode in its immediate. */
#include "pack16.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define PACK16_X86 1
#endif

static inline uint32_t bits_of(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  return b;
}

static inline float float_of(uint32_t b) {
  float x;
  memcpy(&x, &b, sizeof x);
  return x;
}

/* ---- binary16 ---- */

enum {
  HALF_MAX_BITS = 0x7bffu,      /* 65504 */
  F32_HALF_MAX = 0x477fe000u,   /* 65504.0f */
  F32_INF = 0x7f800000u,
  F32_HALF_NORMAL = 0x38800000u /* 2^-14, binary16's smallest normal */
};

/* One value (Giesen's float_to_half_fast3_rtne, with saturation and F16C's NaN): NaN keeps its
 * sign and top 10 mantissa bits with the quiet bit set, as vcvtps2ph does. */
static inline uint16_t half_of(float x) {
  const uint32_t b = bits_of(x), sign = (b >> 16) & 0x8000u, a = b & 0x7fffffffu;
  uint32_t o;
  if (a > F32_INF) o = 0x7e00u | ((a >> 13) & 0x3ffu);
  else if (a == F32_INF) o = 0x7c00u;
  else if (a > F32_HALF_MAX) o = HALF_MAX_BITS;
  else if (a < F32_HALF_NORMAL) {
    /* subnormal or zero: adding 0.5 puts the 2^-24 steps in the low mantissa bits, rounded by
     * the addition */
    const uint32_t magic = (127u - 15u + 23u - 10u + 1u) << 23; /* 0.5f */
    o = bits_of(float_of(a) + float_of(magic)) - magic;
  } else {
    const uint32_t odd = (a >> 13) & 1u;
    o = (a + ((uint32_t)(15 - 127) << 23) + 0xfffu + odd) >> 13; /* rebias, round to even */
  }
  return (uint16_t)(sign | o);
}

void pack16_half_soft(const float *in, uint16_t *out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = half_of(in[i]);
}

#ifdef PACK16_X86
__attribute__((target("f16c,avx"))) static void half_f16c(const float *in, uint16_t *out, size_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 top = _mm256_set1_ps(65504.0f), inf = _mm256_set1_ps(INFINITY);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(in + i);
    const __m256 a = _mm256_and_ps(x, abs_mask);
    /* finite and beyond 65504 (ordered compares: false for NaN) -> 65504 of x's sign */
    const __m256 big = _mm256_and_ps(_mm256_cmp_ps(a, top, _CMP_GT_OQ), _mm256_cmp_ps(a, inf, _CMP_LT_OQ));
    x = _mm256_blendv_ps(x, _mm256_or_ps(_mm256_andnot_ps(abs_mask, x), top), big);
    _mm_storeu_si128((__m128i *)(void *)(out + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  pack16_half_soft(in + i, out + i, n - i);
}
#endif

int pack16_half_fast(void) {
#ifdef PACK16_X86
  /* F16C from CPUID leaf 1 (clang's __builtin_cpu_supports knows no "f16c"); AVX through the
   * builtin, which also asks whether the OS saves the AVX state */
  unsigned a, b, c, d;
  __builtin_cpu_init();
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) && __builtin_cpu_supports("avx");
#else
  return 0;
#endif
}

void pack16_half(const float *in, uint16_t *out, size_t n) {
#ifdef PACK16_X86
  if (pack16_half_fast()) { /* a few loads: the writer calls this once a buffer (1M values) */
    half_f16c(in, out, n);
    return;
  }
#endif
  pack16_half_soft(in, out, n);
}

/* ---- bf16 ---- */

void pack16_bf16(const float *in, uint16_t *out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t b = bits_of(in[i]), a = b & 0x7fffffffu, sign = (b >> 16) & 0x8000u;
    /* the upper half rounded to even; a finite value that would round up to inf (from
     * 0x7f7f8000, halfway above the largest, 0x7f7f) saturates; NaN keeps its top bits, quiet */
    const uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
    const uint32_t o = a > F32_INF ? (b >> 16) | 0x40u : (a >= 0x7f7f8000u && a < F32_INF) ? sign | 0x7f7fu : rounded;
    out[i] = (uint16_t)o;
  }
}

/* ---- fixed point ---- */

int pack16_fixed_for(double extent, pack16_fixed *fx) {
  if (!(extent > 0x1p-60 && extent < 0x1p31)) return -1;
  for (int k = 1; k <= 5; ++k) {
    const int m = 15 - k;
    const double top = (double)((1 << m) - 1);
    int p = (int)ceil(log2(extent / top));
    while (top * ldexp(1.0, p) < extent) ++p; /* log2's rounding either way */
    while (top * ldexp(1.0, p - 1) >= extent) --p;
    /* HDF5's value m 2^(E - bias - m_bits + 1): E - bias = p + m_bits - 1 = q, with bias >= 1
     * (h5py takes H5Tget_ebias's 0 for a failure and cannot open a dataset of bias 0) */
    const int q = p + m - 1, bias = q >= -1 ? 1 : -q;
    if (q + bias > (1 << k) - 2) continue; /* E would reach all ones (inf, NaN): one more exponent bit */
    *fx = (pack16_fixed){.exp_bits = k, .mant_bits = m, .exponent = q + bias, .bias = bias, .shift = p};
    return 0;
  }
  return -1;
}

double pack16_fixed_spacing(const pack16_fixed *fx) { return ldexp(1.0, fx->shift); }

void pack16_fixed_encode(const pack16_fixed *fx, const float *in, uint16_t *out, size_t n) {
  const float scale = ldexpf(1.0f, -fx->shift), top = (float)((1 << fx->mant_bits) - 1);
  const uint32_t field = (uint32_t)fx->exponent << fx->mant_bits;
  /* NaN: the exponent field and the mantissa all ones (HDF5 reads all ones with the mantissa's top
   * bit alone as inf) */
  const uint32_t nan = (1u << 15) - 1u;
  /* the largest |x| kept, as bits: positive floats order as their bits do, so the clamp is an
   * integer select, which the compiler vectorises (a float compare may trap: it would not) */
  const uint32_t limit = bits_of(top / scale);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t b = bits_of(in[i]), a = b & 0x7fffffffu;
    /* beyond the range (inf too): the largest; NaN is replaced below */
    const float y = float_of(a < limit ? a : limit) * scale; /* exact: a power of two */
    /* y < 2^22: adding 1.5 2^23 leaves no fraction bits, so the sum rounds y to an integer,
     * ties to even, which its low mantissa bits hold */
    const uint32_t m = bits_of(y + 0x1.8p23f) - 0x4b400000u;
    /* 0 with the exponent field 0: HDF5 reads a zero mantissa under a non-zero exponent as half a
     * spacing, and E = 0 with any mantissa as m 2^(1 - bias - m_bits), 0 for m = 0 */
    const uint32_t is_nan = 0u - (uint32_t)(a > F32_INF); /* a mask: a select of the sum would be a branch */
    const uint32_t v = ((m ? field | m : 0u) & ~is_nan) | (nan & is_nan);
    out[i] = (uint16_t)(((b >> 16) & 0x8000u) | v);
  }
}

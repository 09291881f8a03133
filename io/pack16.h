/* pack16.h - the 16-bit encodings of a frame's floats (output.precision "half"), on arrays:
 *   binary16  IEEE half: sign, 5-bit exponent (bias 15), 10-bit mantissa; largest 65504;
 *   bf16      sign, float32's 8-bit exponent (bias 127), 7-bit mantissa (the upper half of a
 *             float32); largest 3.3895e38;
 *   fixed     sign, a k-bit exponent field holding one constant E, 15 - k mantissa bits, not
 *             normalised: HDF5 reads a value m x 2^(E - bias - (15 - k) + 1), a fixed point of
 *             spacing 2^p (pack16_fixed_for), so any HDF5 reader converts it to metres; 0 is
 *             stored with the exponent field 0 (HDF5 reads a zero mantissa under another exponent
 *             as half a spacing), NaN as all ones but the sign.
 * Every encoder rounds to nearest, ties to even, and saturates: a finite value beyond the largest
 * becomes the largest of its sign, never inf; inf stays inf (fixed: the largest), NaN stays NaN
 * (quiet). No HDF5 here: io/h5frame.c builds the matching HDF5 types from these parameters. */
#ifndef DRIFT_PACK16_H
#define DRIFT_PACK16_H

#include <stddef.h>
#include <stdint.h>

/* binary16 of n floats: with the CPU's F16C conversion where it has one (pack16_half_fast), else
 * pack16_half_soft; the two give the same bits for every input. */
void pack16_half(const float *in, uint16_t *out, size_t n);
void pack16_half_soft(const float *in, uint16_t *out, size_t n);
int pack16_half_fast(void); /* 1: pack16_half uses F16C */

/* bf16 of n floats. */
void pack16_bf16(const float *in, uint16_t *out, size_t n);

/* A 16-bit fixed point: value = m 2^shift, |m| <= 2^mant_bits - 1, and its HDF5 float fields. */
typedef struct pack16_fixed {
  int exp_bits;  /* k: bits of the exponent field (1 to 5) */
  int mant_bits; /* 15 - k */
  int exponent;  /* E, the exponent field of every value (never all ones: that is inf and NaN) */
  int bias;      /* HDF5's exponent bias, >= 1 (h5py refuses 0) */
  int shift;     /* spacing 2^shift */
} pack16_fixed;

/* The finest fixed point whose range (2^mant_bits - 1) 2^shift reaches extent (m, the largest
 * |coordinate| to be stored): the fewest exponent bits that can place the spacing, so the most
 * mantissa bits. 0, or -1 where extent is not a positive finite number below 1.07e9 (1023 2^20). */
int pack16_fixed_for(double extent, pack16_fixed *fx);
double pack16_fixed_spacing(const pack16_fixed *fx); /* 2^shift */
void pack16_fixed_encode(const pack16_fixed *fx, const float *in, uint16_t *out, size_t n);

#endif

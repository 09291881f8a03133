/* check.h - the tiny test harness of the physics tests (C11, also included by the CUDA test):
 * CHECK(cond, fmt, ...) counts and reports a failure without stopping the test (the first
 * CHECK_MAX_REPORTS are printed), check_summary() prints the total and gives main()'s exit code,
 * a seeded LCG gives reproducible random inputs,
 * and check_random_rotation draws uniform random rotations. */
#ifndef DRIFT_TESTS_PHYSICS_CHECK_H
#define DRIFT_TESTS_PHYSICS_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#define CHECK_MAX_REPORTS 25

static int check_failures = 0;
static long check_count = 0;

#define CHECK(cond, ...)                                                                       \
  do {                                                                                         \
    ++check_count;                                                                             \
    if (!(cond)) {                                                                             \
      if (check_failures < CHECK_MAX_REPORTS) {                                                \
        fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);               \
        fprintf(stderr, __VA_ARGS__);                                                          \
        fputc('\n', stderr);                                                                   \
      }                                                                                        \
      ++check_failures;                                                                        \
    }                                                                                          \
  } while (0)

/* Prints the totals; returns 0 when every check passed, 1 otherwise. */
static inline int check_summary(const char *name) {
  if (check_failures)
    printf("%s: FAILED %d of %ld checks\n", name, check_failures, check_count);
  else
    printf("%s: all %ld checks passed\n", name, check_count);
  return check_failures ? 1 : 0;
}

/* 64-bit LCG (Knuth's MMIX constants); the high 32 bits are used. */
typedef struct check_rng {
  uint64_t s;
} check_rng;

static inline uint32_t check_rng_u32(check_rng *r) {
  r->s = r->s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(r->s >> 32);
}

/* uniform double in [0, 1) */
static inline double check_rng_unit(check_rng *r) { return check_rng_u32(r) * (1.0 / 4294967296.0); }

/* uniform double in [a, b) */
static inline double check_rng_range(check_rng *r, double a, double b) {
  return a + (b - a) * check_rng_unit(r);
}

/* Random rotation (row-major 3x3) from a random unit quaternion (rejection-sampled in the
 * 4-ball, so uniformly distributed over rotations). */
static inline void check_random_rotation(check_rng *rng, double R[9]) {
  double q[4], n = 0;
  do {
    n = 0;
    for (int i = 0; i < 4; ++i) {
      q[i] = check_rng_range(rng, -1, 1);
      n += q[i] * q[i];
    }
  } while (n < 1e-4 || n > 1);
  n = sqrt(n);
  const double w = q[0] / n, x = q[1] / n, y = q[2] / n, z = q[3] / n;
  R[0] = 1 - 2 * (y * y + z * z);
  R[1] = 2 * (x * y - w * z);
  R[2] = 2 * (x * z + w * y);
  R[3] = 2 * (x * y + w * z);
  R[4] = 1 - 2 * (x * x + z * z);
  R[5] = 2 * (y * z - w * x);
  R[6] = 2 * (x * z - w * y);
  R[7] = 2 * (y * z + w * x);
  R[8] = 1 - 2 * (x * x + y * y);
}

#endif

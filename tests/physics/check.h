/* check.h - the tiny test harness of the physics tests (C11, also included by the CUDA test):
 * CHECK(cond, fmt, ...) counts and reports a failure without stopping the test (the first
 * CHECK_MAX_REPORTS are printed), check_summary() prints the total and gives main()'s exit code,
 * and a seeded LCG gives reproducible random inputs. */
#ifndef DRIFT_TESTS_PHYSICS_CHECK_H
#define DRIFT_TESTS_PHYSICS_CHECK_H

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

#endif

/* check.h - the tests' CHECK: counts a failed condition in failures_ and prints where and why,
 * without stopping, so that one run reports every failure. */
#ifndef DRIFT_TESTS_CHECK_H
#define DRIFT_TESTS_CHECK_H

#include <stdio.h>

static int failures_;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      ++failures_;                                                                                 \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
    }                                                                                              \
  } while (0)

#endif

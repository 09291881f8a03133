/* common.h - what every shared physics header needs: the host+device function qualifier and
 * small 3-vector / 3x3-matrix helpers. Matrices are float[9], row-major: a[3*i + j].
 * Everything here is header-only so that the CPU reference backend (C11) and the CUDA backend
 * (nvcc) compile one definition of the physics. */
#ifndef DRIFT_PHYSICS_COMMON_H
#define DRIFT_PHYSICS_COMMON_H

#include <math.h>

#ifdef __CUDACC__
#define DR_HD static inline __host__ __device__
#else
#define DR_HD static inline
#endif

DR_HD void m3_identity(float a[9]) {
  for (int i = 0; i < 9; ++i) a[i] = (i % 4 == 0) ? 1.0f : 0.0f;
}

DR_HD void m3_copy(const float a[9], float out[9]) {
  for (int i = 0; i < 9; ++i) out[i] = a[i];
}

/* out = a * b (out may not alias a or b) */
DR_HD void m3_mul(const float a[9], const float b[9], float out[9]) {
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      out[3 * i + j] = a[3 * i] * b[j] + a[3 * i + 1] * b[3 + j] + a[3 * i + 2] * b[6 + j];
}

/* out = a * b^T */
DR_HD void m3_mul_bt(const float a[9], const float b[9], float out[9]) {
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      out[3 * i + j] = a[3 * i] * b[3 * j] + a[3 * i + 1] * b[3 * j + 1] + a[3 * i + 2] * b[3 * j + 2];
}

/* out = a^T * b */
DR_HD void m3_mul_at(const float a[9], const float b[9], float out[9]) {
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      out[3 * i + j] = a[i] * b[j] + a[3 + i] * b[3 + j] + a[6 + i] * b[6 + j];
}

DR_HD void m3_transpose(const float a[9], float out[9]) {
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) out[3 * i + j] = a[3 * j + i];
}

DR_HD float m3_det(const float a[9]) {
  return a[0] * (a[4] * a[8] - a[5] * a[7]) - a[1] * (a[3] * a[8] - a[5] * a[6]) +
         a[2] * (a[3] * a[7] - a[4] * a[6]);
}

DR_HD float m3_trace(const float a[9]) { return a[0] + a[4] + a[8]; }

/* out = U diag(s) V^T */
DR_HD void m3_udvt(const float u[9], const float s[3], const float v[9], float out[9]) {
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      out[3 * i + j] = u[3 * i] * s[0] * v[3 * j] + u[3 * i + 1] * s[1] * v[3 * j + 1] +
                       u[3 * i + 2] * s[2] * v[3 * j + 2];
}

#endif

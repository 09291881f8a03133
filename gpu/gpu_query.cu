// gpu_query.cu - device discovery for the host code (see gpu_query.h).
#include <cuda_runtime.h>
#include <stdio.h>

#include "gpu_query.h"
extern "C" {
#include "error.h"
}

extern "C" int gpu_count(int *count, char *name, int name_len) {
  *count = 0;
  if (name && name_len > 0) name[0] = 0;
  int n = 0;
  cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc == cudaErrorNoDevice || rc == cudaErrorInsufficientDriver) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  if (rc != cudaSuccess) {
    cudaGetLastError();
    return 0;  // no usable CUDA here: the CPU backend runs
  }
  *count = n;
  if (n > 0 && name && name_len > 0) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) snprintf(name, (size_t)name_len, "%s", prop.name);
  }
  return 0;
}

extern "C" int gpu_free_memory(int device, double *free_bytes, double *total_bytes) {
  *free_bytes = 0.0;
  if (total_bytes) *total_bytes = 0.0;
  int prev = 0;
  cudaError_t rc = cudaGetDevice(&prev);
  if (rc == cudaSuccess) rc = cudaSetDevice(device);
  size_t f = 0, t = 0;
  if (rc == cudaSuccess) rc = cudaMemGetInfo(&f, &t);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    return dr_fail(DR_ECUDA, "cudaMemGetInfo on device %d failed: %s", device, cudaGetErrorString(rc));
  }
  cudaSetDevice(prev);
  *free_bytes = (double)f;
  if (total_bytes) *total_bytes = (double)t;
  return 0;
}

extern "C" int gpu_backend_built(void) { return 1; }

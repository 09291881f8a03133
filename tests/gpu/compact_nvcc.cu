/* compact_nvcc.cu - compile-only: physics/compact.h under nvcc with the CUDA backend's flags
 * (-use_fast_math), in a kernel that encodes and decodes a particle as a packet will. The
 * codec's behaviour is tested on the host (tests/physics/test_compact.c). */
#include "physics/compact.h"

__global__ void compact_roundtrip_kernel(const compact_frame f, const int32_t *blk, compact_state *s, compact_record *r,
                                         int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  compact_encode(&f, blk + 3 * i, s + i, 0u, (uint64_t)i, r + i);
  uint32_t kind;
  uint64_t id;
  compact_decode(&f, blk + 3 * i, r + i, s + i, &kind, &id);
  compact_round(&f, s + i);
}

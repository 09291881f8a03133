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

#include "../../gpu/compact_packets.cuh"

/* The packets' reads and writes as the kernels will make them. */
__global__ void compact_packets_kernel(const compact_frame f, uint32_t *pk, const int2 *hdr, const int32_t *pb_coord,
                                       const uint64_t *own, const compact_kind *kinds, float *out, size_t n_packets) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n_packets * 32) return;
  const size_t p = i / 32;
  const int lane = (int)(i % 32);
  compact_record r;
  int32_t blk[3];
  float x[3];
  cpk_load_x(pk, hdr, pb_coord, own, &f, p, lane, &r, blk, x);
  out[i] = x[0];
  cpk_particle c;
  cpk_load(pk, hdr, pb_coord, own, kinds, &f, p, lane, &c);
  out[i] += c.mass;
  float Rf[9];
  polar_r(c.s.F, Rf);
  compact_set_f(&r, c.s.F, c.s.logjp, Rf);
  cpk_write(pk, p, lane, &r, CPK_W0(COMPACT_AT_F), CPK_W1(COMPACT_AT_KIND));
}

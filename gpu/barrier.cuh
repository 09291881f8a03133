// barrier.cuh - the island's spin barrier on the device, by one warp (island_barrier_warp), and
// the step's time stamps it takes. Included by gpu/island_barrier.cu (k_barrier) and gpu/step.cu
// (k_begin, k_begin_barrier). Why one barrier a step is enough: the top of gpu/island_barrier.cu.
// Each member publishes its count in its own memory after a system-scope fence, so a peer that
// sees the count also sees everything the member wrote before it.
#ifndef DRIFT_GPU_BARRIER_CUH
#define DRIFT_GPU_BARRIER_CUH

#include "cuda_state.h"

/* This member's arrival: its count, after everything it wrote before (visible to the peers first). */
__device__ __forceinline__ unsigned island_publish(step_ctl *c, const island_view &iv) {
  const unsigned seq = ++c->bar_seq;
  __threadfence_system();
  atomicExch_system(iv.bar, seq);
  return seq;
}

/* Waits until peer q has published count seq, or gives up after iv.timeout_ns from t0 and
 * records the first barrier given up on (bar_stuck, with the peer and the count it saw). */
__device__ __forceinline__ void spin_on_peer(step_ctl *c, const island_view &iv, int q, unsigned seq,
                                             unsigned long long t0) {
  for (unsigned spins = 0;; ++spins) {
    const unsigned seen = *(volatile const unsigned *)iv.peer_bar[q];
    if ((int)(seen - seq) >= 0) return;
    __nanosleep(64);
    if ((spins & 1023u) == 1023u && global_ns() - t0 > iv.timeout_ns) {
      if (atomicCAS(&c->bar_stuck, 0u, seq) == 0u) c->bar_peer = q, c->bar_peer_seen = seen;
      return;
    }
  }
}

/* The barrier, by one warp: lane 0 publishes the count, lane q < np spins on peer q, so the
 * peers' counts are read side by side, not one NVLink round trip after another. */
__device__ static void island_barrier_warp(step_ctl *c, const island_view &iv) {
  const int lane = threadIdx.x;
  unsigned seq = lane == 0 ? island_publish(c, iv) : 0u;
  seq = __shfl_sync(0xffffffffu, seq, 0);
  stamp(c, ST_BAR_SET);
  const unsigned long long t0 = global_ns();
  if (lane < iv.np) spin_on_peer(c, iv, lane, seq, t0);
  __syncwarp();
  __threadfence_system();
}

#endif

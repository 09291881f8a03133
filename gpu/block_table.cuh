// block_table.cuh - the device hash table from a grid block's Morton code to its dense index
// (open addressing, linear probing; TABLE_EMPTY marks a free slot). gpu/rebuild.cu fills it at
// every rebuild-mapping (k_table_insert); gpu/rebuild.cu (k_pb_nbr) and gpu/island_barrier.cu
// (k_tag, reading a peer's table by P2P) look codes up. A table is read only after the rebuild
// that filled it (stream order, or the peer's rebuilt event) and never while it is refilled.
#ifndef DRIFT_GPU_BLOCK_TABLE_CUH
#define DRIFT_GPU_BLOCK_TABLE_CUH

#include "cuda_state.h"

/* ---- hash table --------------------------------------------------------------------------- */

#define TABLE_EMPTY 0xffffffffffffffffULL /* cudaMemset 0xff makes every key empty */

/* splitmix64's finalizer. */
__device__ static inline uint64_t table_hash(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

__device__ static inline int32_t table_find(const unsigned long long *keys, const int32_t *vals, size_t mask,
                                            uint64_t code) {
  for (size_t h = table_hash(code) & mask;; h = (h + 1) & mask) {
    const unsigned long long k = keys[h];
    if (k == code) return vals[h];
    if (k == TABLE_EMPTY) return -1;
  }
}

#endif

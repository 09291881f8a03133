/* hostmem.h - host buffers that a GPU copies to or from and MPI sends or receives (particle
 * records between ranks, in sim.c and gpu/backend_cuda.cu): page-locked up to a size, pageable
 * past it.
 *
 * Page-locking costs time in proportion to the size: the 70 MB of records of weak_2's rebalance
 * took about 60 ms to pin on each side (2 x H100), more than copying them. Past
 * DRIFT_PINNED_MAX_MB (unset or 0: no limit, every such buffer pinned) a buffer is pageable
 * instead: the GPU copies through the driver's own staging, and the pages come in on first
 * touch, in 2 MiB huge pages where the kernel gives them (madvise). */
#ifndef DRIFT_HOSTMEM_H
#define DRIFT_HOSTMEM_H

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

/* Bytes above which a transfer buffer is pageable (SIZE_MAX: none is). */
static inline size_t hostmem_pinned_max(void) {
  const char *v = getenv("DRIFT_PINNED_MAX_MB");
  const long mb = v && *v ? atol(v) : 0;
  return mb > 0 ? (size_t)mb << 20 : SIZE_MAX;
}

/* Pageable memory of at least bytes, 2 MiB aligned and advised to use huge pages; free() it. */
static inline void *hostmem_pageable(size_t bytes) {
  const size_t huge = (size_t)2 << 20, c = (bytes + huge - 1) / huge * huge;
  void *p = aligned_alloc(huge, c ? c : huge);
#ifdef MADV_HUGEPAGE
  if (p) (void)madvise(p, c ? c : huge, MADV_HUGEPAGE);
#endif
  return p;
}

#endif

/* hostmem.h - host buffers that a GPU copies to or from and MPI sends or receives (particle
 * records between ranks, in src/sim_migrate.c and gpu/particles_io.cu): page-locked up to a size, pageable
 * past it.
 *
 * Page-locking costs time in proportion to the size: the tens of MB of records of a large
 * rebalance take longer to pin than to copy. Past
 * --pinned-max-mb (DRIFT_PINNED_MAX_MB; 0, the default: no limit, every such buffer pinned) a buffer is pageable
 * instead: the GPU copies through the driver's own staging, and the pages come in when it is
 * made, in 2 MiB huge pages where the kernel gives them (madvise).
 *
 * Several ranks reserve these buffers at the start for the largest rebalance the threshold
 * allows (sim_migrate.c, sim_reserve_migration), so that no rebalance pays for pinning or faulting. */
#ifndef DRIFT_HOSTMEM_H
#define DRIFT_HOSTMEM_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "settings.h"

/* The capacity a grow-only transfer buffer of capacity cap takes to hold need bytes: doubled
 * (from 64 KiB), but past 16 MiB (a rebalance's records) a quarter more than the need in whole
 * MiB, not the next power of two, since pinning costs time in proportion to the size. */
static inline size_t hostmem_capacity(size_t cap, size_t need) {
  const size_t mib = (size_t)1 << 20;
  if (need > 16 * mib) return (need + need / 4 + mib - 1) / mib * mib;
  size_t c = cap ? 2 * cap : 65536;
  while (c < need) c *= 2;
  return c;
}

/* Bytes above which a transfer buffer is pageable (SIZE_MAX: none is). */
static inline size_t hostmem_pinned_max(void) {
  const int mb = settings()->pinned_max_mb;
  return mb > 0 ? (size_t)mb << 20 : SIZE_MAX;
}

/* Pageable memory of at least bytes, 2 MiB aligned and advised to use huge pages, its pages
 * touched here (a copy or an MPI receive into fresh pages runs at a fraction of its speed while
 * the pages fault in: 1.8 GB/s against 6-7.5 GB/s for 17 MB between two ranks); free() it. */
static inline void *hostmem_pageable(size_t bytes) {
  const size_t huge = (size_t)2 << 20, c = (bytes + huge - 1) / huge * huge;
  void *p = aligned_alloc(huge, c ? c : huge);
#ifdef MADV_HUGEPAGE
  if (p) (void)madvise(p, c ? c : huge, MADV_HUGEPAGE);
#endif
  if (p) memset(p, 0, c ? c : huge);
  return p;
}

#endif

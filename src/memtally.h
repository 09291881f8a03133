/* memtally.h - the counted allocator: every host and device allocation of particle, grid and
 * transfer memory is added to a tally by place (the host, or device d) and kind, with the
 * largest total each place reached (its peak), so that a run reports what it allocated beside
 * the memory plan (memplan.h) and the tests hold one against the other.
 *
 * Host memory goes through memtally_malloc / memtally_realloc / memtally_free, which keep each
 * block's size and kind in a header before it (free such a block with memtally_free only).
 * Memory another allocator hands out (cudaMalloc, cudaHostAlloc, huge pages) is counted with
 * memtally_count(place, kind, +bytes) and (-bytes) by its owner, which knows the size.
 * Counters are atomic: the writer thread, OpenMP threads and an island's crew allocate too. */
#ifndef DRIFT_MEMTALLY_H
#define DRIFT_MEMTALLY_H

#include <stddef.h>
#include <stdint.h>

enum memtally_kind {
  MT_PARTICLES = 0, /* particle state: host slices (particles.h), a backend's particle arrays */
  MT_SORT,          /* the rebuild's sort: keys, permutation targets, scratch */
  MT_MAPPING,       /* particle blocks, packets, the block hash table */
  MT_GRID,          /* grid blocks: sums, codes, flags */
  MT_TRANSFER,      /* buffers between host, devices and ranks: records, frames, sums */
  MT_KINDS
};

#define MEMTALLY_HOST 0
#define MEMTALLY_PLACES 9 /* the host, then devices 0 .. 7 (place 1 + device) */

/* "particles", "sort", "mapping", "grid", "transfer". */
const char *memtally_kind_name(int kind);
/* Counts bytes (negative: released) of kind at place. */
void memtally_count(int place, int kind, int64_t bytes);
/* Bytes of kind held now at place (kind MT_KINDS: all kinds). */
int64_t memtally_now(int place, int kind);
/* The largest total held at place since the start (or the last reset). */
int64_t memtally_peak(int place);
/* The peak of each place starts again from what is held now (the tests). */
void memtally_reset_peaks(void);

/* Host memory of kind, counted; NULL (with dr_fail's message naming what) when it is not there. */
void *memtally_malloc(int kind, size_t bytes, const char *what);
void *memtally_calloc(int kind, size_t n, size_t size, const char *what);
/* Resizes a block from memtally_malloc (or NULL: a new one); the old block stays on failure. */
void *memtally_realloc(int kind, void *p, size_t bytes, const char *what);
void memtally_free(void *p);

#endif

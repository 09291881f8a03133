// dvec.cu - device vectors: growth (to the need and a bounded headroom, memsizes.h), the stream-ordered
// pools of an island's members (dvec_pools), and the log of growths (--help-debug: DRIFT_GPU_STAMPS).
// A growth never keeps the contents except through dvec_grow_keep_at; a pooled buffer goes back to
// its pool in its stream's order, so that nothing still queued on that stream reads freed memory.

#include "cuda_state.h"

unsigned long g_dvec_allocs;
int g_dvec_log;

static int dvec_fail(size_t need, const char *what, const char *file, int line) {
  cudaGetLastError();
  size_t freeb = 0, total = 0;
  cudaMemGetInfo(&freeb, &total);
  cudaGetLastError();
  return dr_fail_at(DR_ENOMEM, file, line, "cudaMalloc",
                    "out of device memory: %s needs %.1f MiB more; the device has %.1f MiB free of %.1f MiB "
                    "(fewer particles per GPU, a coarser dx, or more GPUs)",
                    what, need / 1048576.0, freeb / 1048576.0, total / 1048576.0);
}

/* The growth's release of the old buffer: back to its pool in stream order, or cudaFree (which
 * waits for the device). */
static cudaError_t dvec_release(dvec *v) {
  if (!v->ptr) return cudaSuccess;
  if (v->pooled) return cudaFreeAsync(v->ptr, v->st); /* back to the pool once the stream gets there */
  return cudaFree(v->ptr);
}

static void dvec_logged(const char *what, size_t from, size_t to, double free_ms, double malloc_ms, const char *file,
                        int line) {
  fprintf(stderr, "gpu alloc: %s: %.2f -> %.2f MiB: free %.3f ms, malloc %.3f ms (%s:%d)\n", what, from / 1048576.0,
          to / 1048576.0, free_ms, malloc_ms, file, line);
}

/* A new buffer of cap bytes for v: from v's pool in its stream's order (where the pool has not
 * the room, the pool's unused memory is returned first and the allocation tried once more), else
 * cudaMalloc. */
static cudaError_t dvec_alloc(dvec *v, void **p, size_t cap) {
  if (!v->pool) return cudaMalloc(p, cap);
  cudaError_t e = cudaMallocFromPoolAsync(p, cap, v->pool, v->st);
  if (e != cudaErrorMemoryAllocation) return e;
  (void)cudaGetLastError();
  if ((e = cudaStreamSynchronize(v->st)) != cudaSuccess) return e;
  if ((e = cudaMemPoolTrimTo(v->pool, 0)) != cudaSuccess) return e;
  return cudaMallocFromPoolAsync(p, cap, v->pool, v->st);
}

/* What memtally.h counts a vector as, from the name its allocation gives (the DVEC macros' what). */
static int dvec_kind(const char *what) {
  if (!strncmp(what, "particle packets", 16) || !strncmp(what, "particle ids", 12) ||
      !strncmp(what, "packet headers", 14))
    return MT_PARTICLES;
  if (!strncmp(what, "particle sort keys", 18) || !strncmp(what, "particle block indices", 22) ||
      !strncmp(what, "CUB", 3))
    return MT_SORT;
  if (!strncmp(what, "particle blocks", 15) || !strncmp(what, "physical block codes", 20) ||
      !strncmp(what, "block hash table", 16))
    return MT_MAPPING;
  if (!strncmp(what, "grid blocks", 11)) return MT_GRID;
  return MT_TRANSFER;
}

/* v's new buffer of cap bytes counted (memtally.h) on the current device, as what is. */
static void dvec_counted(dvec *v, size_t cap, const char *what) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) (void)cudaGetLastError(), dev = 0;
  v->place = 1 + dev;
  v->kind = dvec_kind(what);
  memtally_count(v->place, v->kind, (int64_t)cap);
}

static void dvec_uncounted(dvec *v) {
  if (v->ptr) memtally_count(v->place, v->kind, -(int64_t)v->bytes);
}

/* Room for need bytes: exactly that if exact, else need and its headroom whenever need is more
 * than the capacity (memsizes.h's rule, which the memory plan follows). */
int dvec_reserve_at(dvec *v, size_t need, int exact, const char *what, const char *file, int line) {
  if (need <= v->bytes) return DR_OK;
  const size_t cap = mem_dvec_capacity(v->bytes, need, exact);
  __atomic_add_fetch(&g_dvec_allocs, 1, __ATOMIC_RELAXED);
  const size_t from = v->bytes;
  const double t0 = g_dvec_log ? now_ms() : 0.0;
  dvec_uncounted(v);
  CU(dvec_release(v)); /* contents are never kept across a growth */
  v->ptr = NULL;
  v->bytes = 0;
  const double t1 = g_dvec_log ? now_ms() : 0.0;
  if (dvec_alloc(v, &v->ptr, cap) != cudaSuccess) {
    v->ptr = NULL;
    return dvec_fail(cap, what, file, line);
  }
  v->bytes = cap;
  v->pooled = v->pool != NULL;
  dvec_counted(v, cap, what);
  if (g_dvec_log) dvec_logged(what, from, cap, t1 - t0, now_ms() - t1, file, line);
  return DR_OK;
}

/* The same growth rule, keeping the first `keep` bytes (copied on the stream into the new
 * buffer; the old one is freed after the copy). For appending particles (cuda_add_particles). */
int dvec_grow_keep_at(dvec *v, size_t need, size_t keep, cudaStream_t st, const char *what, const char *file,
                      int line) {
  if (need <= v->bytes) return DR_OK;
  const size_t cap = mem_dvec_capacity(v->bytes, need, 0);
  __atomic_add_fetch(&g_dvec_allocs, 1, __ATOMIC_RELAXED);
  void *q = NULL;
  const double t0 = g_dvec_log ? now_ms() : 0.0;
  if (dvec_alloc(v, &q, cap) != cudaSuccess) return dvec_fail(cap, what, file, line);
  const double t1 = g_dvec_log ? now_ms() : 0.0;
  if (keep > 0) {
    cudaError_t e = cudaMemcpyAsync(q, v->ptr, keep, cudaMemcpyDeviceToDevice, st); /* a pooled v's stream is st */
    if (e == cudaSuccess && !v->pool) e = cudaStreamSynchronize(st); /* a pool's free waits in stream order */
    if (e != cudaSuccess) {
      cudaFree(q);
      return cuda_fail(e, "cudaMemcpyAsync(keep on growth)", file, line);
    }
  }
  const size_t from = v->bytes;
  dvec_uncounted(v);
  CU(dvec_release(v));
  v->ptr = q;
  v->bytes = cap;
  v->pooled = v->pool != NULL;
  dvec_counted(v, cap, what);
  if (g_dvec_log) dvec_logged(what, from, cap, now_ms() - t1, t1 - t0, file, line); /* free: with the copy */
  return DR_OK;
}

void dvec_free(dvec *v) {
  dvec_uncounted(v);
  if (v->ptr) cudaFree(v->ptr); /* also a pool's buffer (cudaFree waits for the device) */
  v->ptr = NULL;
  v->bytes = 0;
  v->pooled = 0;
}

/* v's buffer released as a growth releases it (in its stream's order where pooled), and from's
 * buffer v's from now on (from left empty). For a buffer grown by hand beside the one it replaces
 * (the rebuild's packets, when the new ones outgrow the old). */
int dvec_take(dvec *v, dvec *from) {
  dvec_uncounted(v);
  CU(dvec_release(v));
  v->ptr = from->ptr;
  v->bytes = from->bytes;
  v->pooled = from->pooled;
  v->place = from->place;
  v->kind = from->kind;
  from->ptr = NULL;
  from->bytes = 0;
  from->pooled = 0;
  return DR_OK;
}

void dvec_swap(dvec *a, dvec *b) {
  const dvec t = *a;
  *a = *b;
  *b = t;
}

/* An island member's device vectors from stream-ordered pools.
 * With peer access enabled, every cudaMalloc maps the buffer into each peer and every cudaFree
 * waits for the device and unmaps it: a rebuild-mapping whose grid grew paid 10-20x what one GPU
 * pays (see docs/performance.md (decisions)). The vectors that no peer reads (particles,
 * particle blocks, block codes, the island's velocities and tags, ...) come from pool[0], which
 * grants no peer access; a growth frees the old buffer in the stream's order and never waits.
 * The vectors the peers read (P2G buffers, touched flags, the hash table) come from pool[1],
 * mapped into every peer (cudaMemPoolSetAccess) and kept
 * mapped as buffers are freed and reused. The pools keep what is freed (release threshold: all;
 * a growth the device cannot hold returns the pool's unused memory and tries again, dvec_alloc),
 * so the steady state allocates nothing from the driver; the old buffers of a growth are last read before the
 * rebuild-mapping, which every member's finished step precedes (see the island), so their reuse
 * in the member's stream order is safe. The old_* vectors of keep_primed trade places with the
 * peers' buffers (dvec_swap), so they are in the same pool as those. One GPU, and ranks of one
 * GPU each, keep cudaMalloc. */
int dvec_pools(cuda_state *s) {
  if (s->nm < 2) return DR_OK;
  for (int k = 0; k < 2; ++k) {
    cudaMemPoolProps pp;
    memset(&pp, 0, sizeof pp);
    pp.allocType = cudaMemAllocationTypePinned;
    pp.handleTypes = cudaMemHandleTypeNone;
    pp.location.type = cudaMemLocationTypeDevice;
    pp.location.id = s->device;
    CU(cudaMemPoolCreate(&s->pool[k], &pp));
    uint64_t keep_all = UINT64_MAX;
    CU(cudaMemPoolSetAttribute(s->pool[k], cudaMemPoolAttrReleaseThreshold, &keep_all));
  }
  { /* every other device of the island once (--devices may name one several times) */
    cudaMemAccessDesc acc[MAX_GPUS - 1];
    memset(acc, 0, sizeof acc);
    size_t n = 0;
    for (int q = 0; q < s->nm - 1; ++q) {
      const int dev = s->peer[q]->device;
      int seen = dev == s->device;
      for (size_t j = 0; j < n; ++j) seen |= acc[j].location.id == dev;
      if (seen) continue;
      acc[n].location.type = cudaMemLocationTypeDevice;
      acc[n].location.id = dev;
      acc[n].flags = cudaMemAccessFlagsProtReadWrite;
      ++n;
    }
    if (n > 0) CU(cudaMemPoolSetAccess(s->pool[1], acc, n));
  }
  dvec *priv[] = {&s->pk, &s->pid, &s->hdr, &s->keys[0], &s->keys[1], &s->vals[0],
                  &s->vals[1], &s->pblock, &s->head, &s->pb_coord, &s->pb_start, &s->pb_packets, &s->pb_nbr,
                  &s->nbr_codes[0], &s->nbr_codes[1], &s->block_code, &s->old_code, &s->shared, &s->tags,
                  &s->vel, &s->vel0, &s->own, &s->old_to_new, &s->pk_order, &s->push_mask, &s->push_room,
                  &s->shared_idx, &s->shared_n, &s->cc_slot, &s->cc_blocks, &s->cc_vals, &s->cc_scratch};
  dvec *peers[] = {&s->grid[0], &s->grid[1], &s->grid0[0], &s->grid0[1], &s->touched[0], &s->touched[1],
                   &s->igrid[0], &s->igrid[1], &s->old_grid, &s->old_grid0, &s->old_touched, &s->old_igrid,
                   &s->table_keys, &s->table_vals};
  for (size_t k = 0; k < sizeof priv / sizeof *priv; ++k) priv[k]->pool = s->pool[0], priv[k]->st = s->stream;
  for (size_t k = 0; k < sizeof peers / sizeof *peers; ++k) peers[k]->pool = s->pool[1], peers[k]->st = s->stream;
  return DR_OK;
}

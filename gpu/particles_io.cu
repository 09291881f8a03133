// particles_io.cu - one GPU's particles in and out of the device: upload, download, adding
// particles and records (ranks' migrants), emigrating them as particles or records, the particle
// blocks' counts and the pinned host buffers. The island's versions: gpu/island_particles.cu; the
// frame's snapshot and the checkpoint's rows: gpu/capture.cu.
// Particles appended go into new packets after the mapping's, read by the next rebuild-mapping;
// emigrated slots are marked gone and dropped by it.

#include "compact_packets.cuh"
#include "cuda_state.h"
#include "records.cuh"

/* emigrate: flag[i] = 1 where slot i holds a particle whose particle block (as sim.c's
 * particle_block computes it) lies outside [lo, hi) on some axis. */
__global__ static void k_leave(size_t n_slots, const float *pk, const int2 *hdr, float3 origin, float inv_dx, int3 lo,
                               int3 hi, const uint8_t *gone, size_t n_gone, uint32_t *flag) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n_slots) return;
  const size_t p = i / LANES;
  const int lane = (int)(i % LANES);
  uint32_t out = 0;
  if (lane < hdr[p].y && !(i < n_gone && gone[i])) { /* (a particle an earlier emigrate took is gone) */
    const float *q = pk + p * PK_FLOATS + lane;
    const int b0 = bspline_base((q[(A_X + 0) * LANES] - origin.x) * inv_dx) >> 2;
    const int b1 = bspline_base((q[(A_X + 1) * LANES] - origin.y) * inv_dx) >> 2;
    const int b2 = bspline_base((q[(A_X + 2) * LANES] - origin.z) * inv_dx) >> 2;
    out = b0 < lo.x || b0 >= hi.x || b1 < lo.y || b1 >= hi.y || b2 < lo.z || b2 >= hi.z;
  }
  flag[i] = out;
}


/* k_leave for compact packets: the position decoded from its slot's block. */
__global__ static void k_leave_compact(size_t n_slots, const uint32_t *pk, const int2 *hdr, const int32_t *pb_coord,
                                       const uint64_t *own, compact_frame f, float3 origin, float inv_dx, int3 lo,
                                       int3 hi, const uint8_t *gone, size_t n_gone, uint32_t *flag) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n_slots) return;
  const size_t p = i / LANES;
  const int lane = (int)(i % LANES);
  uint32_t out = 0;
  if (lane < hdr[p].y && !(i < n_gone && gone[i])) {
    compact_record r;
    int32_t blk[3];
    float x[3];
    cpk_load_x(pk, hdr, pb_coord, own, &f, p, lane, &r, blk, x);
    const int b0 = bspline_base((x[0] - origin.x) * inv_dx) >> 2;
    const int b1 = bspline_base((x[1] - origin.y) * inv_dx) >> 2;
    const int b2 = bspline_base((x[2] - origin.z) * inv_dx) >> 2;
    out = b0 < lo.x || b0 >= hi.x || b1 < lo.y || b1 >= hi.y || b2 < lo.z || b2 >= hi.z;
  }
  flag[i] = out;
}

/* cuda_emigrate_records: the flagged particles as records, in slot order (upto: the inclusive scan of
 * the flags), and their slots marked gone. owner: this GPU's rank * 256 + its index. */
__global__ static void k_leave_records(size_t n_slots, const uint32_t *flag, const uint32_t *upto, const float *pk,
                                       const uint64_t *pid, int32_t owner, uint32_t *rec, uint8_t *gone) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n_slots || !flag[i]) return;
  gone[i] = 1;
  const float *q = pk + (i / LANES) * PK_FLOATS + i % LANES;
  uint32_t *r = rec + (size_t)(upto[i] - 1) * REC_WORDS;
  for (int a = 0; a < 3; ++a)
    r[REC_x + a] = __float_as_uint(q[(A_X + a) * LANES]), r[REC_v + a] = __float_as_uint(q[(A_V + a) * LANES]);
  for (int a = 0; a < 9; ++a)
    r[REC_C + a] = __float_as_uint(q[(A_C + a) * LANES]), r[REC_F + a] = __float_as_uint(q[(A_F + a) * LANES]);
  r[REC_mass] = __float_as_uint(q[A_M * LANES]);
  r[REC_vol0] = __float_as_uint(q[A_VOL * LANES]);
  r[REC_logjp] = __float_as_uint(q[A_JP * LANES]);
  const uint64_t id = pid[i]; /* little-endian, as particles_pack's memcpy leaves it */
  r[REC_id] = (uint32_t)id;
  r[REC_id + 1] = (uint32_t)(id >> 32);
  r[REC_material] = __float_as_uint(q[A_MAT * LANES]); /* the int's bits, as the packets hold them */
  r[REC_owner] = (uint32_t)owner;
}

/* cuda_add_records: m records into add_packets new packets (pk, pid and hdr point at the first new
 * one), one thread per slot; the last packet's empty lanes zeroed, as append_particles leaves
 * them. A record's owner is not kept (download sets it). */
__global__ static void k_records_in(size_t m, size_t add_packets, const uint32_t *rec, float *pk, uint64_t *pid,
                                    int2 *hdr) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= add_packets * LANES) return;
  const size_t p = i / LANES;
  const int lane = (int)(i % LANES);
  float *q = pk + p * PK_FLOATS + lane;
  if (lane == 0) hdr[p] = make_int2(-1, (int)(m - p * LANES < (size_t)LANES ? m - p * LANES : LANES));
  if (i >= m) {
    for (int a = 0; a < PK_ATTRS; ++a) q[a * LANES] = 0.0f;
    pid[i] = 0;
    return;
  }
  const uint32_t *r = rec + i * REC_WORDS;
  for (int a = 0; a < 3; ++a)
    q[(A_X + a) * LANES] = __uint_as_float(r[REC_x + a]), q[(A_V + a) * LANES] = __uint_as_float(r[REC_v + a]);
  for (int a = 0; a < 9; ++a)
    q[(A_C + a) * LANES] = __uint_as_float(r[REC_C + a]), q[(A_F + a) * LANES] = __uint_as_float(r[REC_F + a]);
  q[A_M * LANES] = __uint_as_float(r[REC_mass]);
  q[A_VOL * LANES] = __uint_as_float(r[REC_vol0]);
  q[A_JP * LANES] = __uint_as_float(r[REC_logjp]);
  q[A_MAT * LANES] = __uint_as_float(r[REC_material]);
  pid[i] = (uint64_t)r[REC_id] | (uint64_t)r[REC_id + 1] << 32;
}

int cuda_set_particles(void *state, particles *p) {
  cuda_state *s = (cuda_state *)state;
  if (p->n > (size_t)INT32_MAX / 2)
    return dr_fail(DR_EINPUT, "%zu particles on one GPU: the cuda backend holds at most %d per GPU", p->n,
                   INT32_MAX / 2);
  CU(cudaStreamSynchronize(s->stream)); /* nothing queued still reads the packets */
  DR_TRY(cuda_upload(s, p));
  particles_free(p);
  DR_TRY(rebuild_now(s));
  CU(cudaStreamSynchronize(s->stream));
  return DR_OK;
}

/* Appends p's particles in new packets after the current ones (the packets of the last mapping
 * keep their partly filled lanes; k_keys sorts empty lanes last); the caller's rebuild-mapping
 * then sorts everything. Device buffers grow by their headroom when full (contents kept; memsizes.h),
 * so a source emitting frame after frame allocates only now and then; the host staging packets grow only. A
 * G2P2G frame after this starts from an unprimed P2G: the primed sums (keep_primed) lack the new
 * particles, and the P2G that adds them runs again over the old ones too, applying their return
 * mapping a second time (not exact for NACC; a P2G of the new particles alone would be). */
/* The host's staging packets (h_add, h_add_id, h_add_hdr) for at least n packets: grown 2x,
 * kept between calls (particles added, and those that emigrate). */
static int host_packets(cuda_state *s, size_t n) {
  if (n <= s->h_add_cap) return DR_OK;
  memtally_free(s->h_add), memtally_free(s->h_add_id), memtally_free(s->h_add_hdr);
  size_t cap = s->h_add_cap ? s->h_add_cap : 64;
  while (cap < n) cap *= 2;
  s->h_add = (float *)memtally_malloc(MT_TRANSFER, cap * PK_FLOATS * sizeof(float), "particle staging");
  s->h_add_id = (uint64_t *)memtally_malloc(MT_TRANSFER, cap * LANES * sizeof(uint64_t), "particle staging");
  s->h_add_hdr = (int2 *)memtally_malloc(MT_TRANSFER, cap * sizeof(int2), "particle staging");
  s->h_add_cap = s->h_add && s->h_add_id && s->h_add_hdr ? cap : 0;
  return s->h_add_cap ? DR_OK : DR_ENOMEM;
}

/* Frees what cuda_host_pinned gave: pinned, or pageable past DRIFT_PINNED_MAX_MB (hostmem.h). */
void cuda_host_release(void *p) {
  if (!p) return;
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeHost) {
    (void)cudaFreeHost(p);
  } else {
    (void)cudaGetLastError();
    free(p);
  }
}

/* Pinned host memory of at least need bytes in *p (capacity *cap, grown 2x; contents not kept),
 * portable: any GPU of the island copies from it without a bounce. Past DRIFT_PINNED_MAX_MB,
 * pageable memory instead (hostmem.h); cuda_host_release frees either. */
int cuda_host_pinned(void **p, size_t *cap, size_t need, const char *what) {
  if (need <= *cap && *p) return DR_OK;
  const size_t c = hostmem_capacity(*cap, need); /* weak_2's rebalance: pinning 128 MiB took about 60 ms */
  if (*p) memtally_count(MEMTALLY_HOST, MT_TRANSFER, -(int64_t)*cap);
  cuda_host_release(*p);
  *p = NULL;
  *cap = 0;
  if (c > hostmem_pinned_max()) {
    *p = hostmem_pageable(c);
    if (!*p) return dr_fail(DR_ENOMEM, "out of host memory: %zu bytes for %s", c, what);
    *cap = c;
    memtally_count(MEMTALLY_HOST, MT_TRANSFER, (int64_t)c);
    return DR_OK;
  }
  const cudaError_t e = cudaHostAlloc(p, c, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    *p = NULL;
    (void)cudaGetLastError();
    return dr_fail(DR_ENOMEM, "cudaHostAlloc failed (%s:%d): %s: %zu bytes for %s", __FILE__, __LINE__,
                   cudaGetErrorString(e), c, what);
  }
  *cap = c;
  memtally_count(MEMTALLY_HOST, MT_TRANSFER, (int64_t)c);
  return DR_OK;
}

/* Room for m more particles in new packets after the current ones (device buffers grown, their
 * contents kept): *old_packets is where the new ones start, *add_packets how many. */
static int append_room(cuda_state *s, size_t m, size_t *old_packets_out, size_t *add_packets_out) {
  if (s->n + m > (size_t)INT32_MAX / 2)
    return dr_fail(DR_EINPUT, "%zu particles on one GPU: the cuda backend holds at most %d per GPU", s->n + m,
                   INT32_MAX / 2);
  CU(cudaStreamSynchronize(s->stream)); /* nothing queued still reads the packets */
  s->primed = 0;
  const size_t old_packets = s->n_packets, add_packets = (m + LANES - 1) / LANES;
  const size_t packets = old_packets + add_packets, slots = packets * LANES;
  cudaStream_t st = s->stream;
  DVEC_KEEP(s->pk, packets * pk_words(s) * sizeof(float), old_packets * pk_words(s) * sizeof(float), st,
            "particle packets");
  DVEC_KEEP(s->pid, slots * sizeof(uint64_t), old_packets * LANES * sizeof(uint64_t), st, "particle ids");
  DVEC_KEEP(s->hdr, packets * sizeof(int2), old_packets * sizeof(int2), st, "packet headers");
  DR_TRY(rebuild_push_buffers(s, packets));
  for (int k = 0; k < 2; ++k) {
    if (s->compact && k == 1) /* the appended slots' own blocks until the next rebuild-mapping (compact_packets.cuh) */
      DVEC_KEEP(s->keys[k], slots * sizeof(uint64_t), old_packets * LANES * sizeof(uint64_t), st, "particle sort keys");
    else
      DVEC(s->keys[k], slots * sizeof(uint64_t), "particle sort keys");
    DVEC(s->vals[k], slots * sizeof(uint32_t), "particle sort keys");
  }
  DVEC(s->pblock, (s->n + m) * sizeof(int32_t), "particle block indices");
  DVEC(s->head, (s->n + m) * sizeof(int32_t), "particle block indices");
  *old_packets_out = old_packets;
  *add_packets_out = add_packets;
  return DR_OK;
}

/* Particles [0, n) of p into the host's packets (pk, id) and headers (hdr), packets of them,
 * in order: packet k holds particles [32k, 32k + 32), its free lanes zero. */
/* Particles first .. first + n - 1 of p into packets [packets] (pk, id, hdr) from the first lane. */
static void packets_from_particles(const particles *p, size_t first, size_t n, size_t packets, float *pk, uint64_t *id,
                                   int2 *hdr) {
  memset(pk, 0, packets * PK_FLOATS * sizeof(float));
  memset(id, 0, packets * LANES * sizeof(uint64_t));
  for (size_t i = 0; i < n; ++i) {
    const size_t j = first + i;
    float *q = pk + (i / LANES) * PK_FLOATS + i % LANES;
    for (int a = 0; a < 3; ++a) q[(A_X + a) * LANES] = p->x[3 * j + a], q[(A_V + a) * LANES] = p->v[3 * j + a];
    for (int a = 0; a < 9; ++a) q[(A_C + a) * LANES] = p->C[9 * j + a], q[(A_F + a) * LANES] = p->F[9 * j + a];
    q[A_M * LANES] = p->mass[j];
    q[A_VOL * LANES] = p->vol0[j];
    q[A_JP * LANES] = p->logjp[j];
    memcpy(&q[A_MAT * LANES], &p->material[j], sizeof(int32_t));
    id[i] = p->id[j];
  }
  for (size_t k = 0; k < packets; ++k) hdr[k] = make_int2(-1, (int)(n - k * LANES < LANES ? n - k * LANES : LANES));
}

int append_particles(cuda_state *s, const particles *p) {
  const size_t m = p->n;
  if (m == 0) return DR_OK;
  size_t old_packets = 0, add_packets = 0;
  DR_TRY(append_room(s, m, &old_packets, &add_packets));
  const size_t packets = old_packets + add_packets;
  cudaStream_t st = s->stream;
  if (s->compact) { /* through records, a chunk at a time (the kinds' lookups and the encoding's) */
    enum { CHUNK = 65536 };
    uint32_t *rec = (uint32_t *)memtally_malloc(MT_TRANSFER, (size_t)CHUNK * REC_WORDS * sizeof(uint32_t),
                                                "particle staging (compact storage)");
    if (!rec) return dr_fail(DR_ENOMEM, "out of host memory for the particles' staging (compact storage)");
    int rc = particles_record_bytes() == REC_WORDS * sizeof(uint32_t)
                 ? DR_OK
                 : dr_fail(DR_EINTERNAL, "cuda backend: a particle record is %zu bytes, records.cuh counts %zu",
                           particles_record_bytes(), REC_WORDS * sizeof(uint32_t));
    for (size_t at = 0; at < m && rc == DR_OK; at += CHUNK) {
      const size_t c = m - at < CHUNK ? m - at : CHUNK;
      for (size_t i = 0; i < c; ++i) particles_pack(p, at + i, rec + i * REC_WORDS);
      rc = compact_append_records(s, rec, c, old_packets + at / LANES, (c + LANES - 1) / LANES);
    }
    memtally_free(rec);
    DR_TRY(rc);
    s->n += m;
    s->n_packets = packets;
    return DR_OK;
  }
  DR_TRY(host_packets(s, add_packets));
  float *pk = s->h_add;
  uint64_t *id = s->h_add_id;
  packets_from_particles(p, 0, m, add_packets, pk, id, s->h_add_hdr);
  CU(cudaMemcpyAsync(dp<float>(s->pk) + old_packets * PK_FLOATS, pk, add_packets * PK_FLOATS * sizeof(float),
                     cudaMemcpyHostToDevice, st));
  CU(cudaMemcpyAsync(dp<uint64_t>(s->pid) + old_packets * LANES, id, add_packets * LANES * sizeof(uint64_t),
                     cudaMemcpyHostToDevice, st));
  CU(cudaMemcpyAsync(dp<int2>(s->hdr) + old_packets, s->h_add_hdr, add_packets * sizeof(int2), cudaMemcpyHostToDevice,
                     st));
  s->n += m;
  s->n_packets = packets;
  CU(cudaStreamSynchronize(st)); /* the staging packets are reused by the next call */
  return DR_OK;
}

int cuda_add_particles(void *state, const particles *p) {
  cuda_state *s = (cuda_state *)state;
  if (p->n == 0) return DR_OK;
  DR_TRY(append_particles(s, p));
  DR_TRY(rebuild_now(s));
  CU(cudaStreamSynchronize(s->stream));
  return DR_OK;
}

/* m records (host memory; pinned copies fastest) appended as new packets: one copy to the device
 * and k_records_in there, instead of the host filling staging packets attribute by attribute.
 * rec may change once this returns. A record's owner is not kept (download sets it). */
int append_records(cuda_state *s, const void *rec, size_t m) {
  if (m == 0) return DR_OK;
  size_t old_packets = 0, add_packets = 0;
  DR_TRY(append_room(s, m, &old_packets, &add_packets));
  cudaStream_t st = s->stream;
  if (s->compact) {
    DR_TRY(compact_append_records(s, (const uint32_t *)rec, m, old_packets, add_packets));
    s->n += m;
    s->n_packets = old_packets + add_packets;
    return DR_OK;
  }
  DVEC(s->xin, m * REC_WORDS * sizeof(uint32_t), "arriving particles");
  CU(cudaMemcpyAsync(s->xin.ptr, rec, m * REC_WORDS * sizeof(uint32_t), cudaMemcpyHostToDevice, st));
  k_records_in<<<blocks_for(add_packets * LANES, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      m, add_packets, dp<uint32_t>(s->xin), dp<float>(s->pk) + old_packets * PK_FLOATS,
      dp<uint64_t>(s->pid) + old_packets * LANES, dp<int2>(s->hdr) + old_packets);
  LAUNCHED("k_records_in");
  s->n += m;
  s->n_packets = old_packets + add_packets;
  CU(cudaStreamSynchronize(st)); /* rec may change once this returns */
  return DR_OK;
}

/* backend.h's add_records (sim.c's buffers are pinned by alloc_sums): append_records; the caller's
 * rebuild (forced) maps them, and drops the slots an emigrate marked gone. */
int cuda_add_records(void *state, const void *rec, size_t m) {
  return append_records((cuda_state *)state, rec, m); /* done with rec (it waits for its copy) */
}

/* Packets copied to the host into out's particles [at, at + count): the valid lanes of each packet
 * (hdr[p].y; all lanes where hdr is NULL), in order. Returns how many it wrote. */
static size_t unpack_host(const cuda_state *s, const float *pk, const uint64_t *id, const int2 *hdr, size_t np,
                          size_t count, particles *out, size_t at) {
  const int32_t owner = s->prm.rank * 256 + s->me; /* the GPU's index in the rank's island */
  size_t i = 0;
  for (size_t p = 0; p < np; ++p)
    for (int l = 0; l < (hdr ? hdr[p].y : LANES) && i < count; ++l, ++i) {
      const float *q = pk + p * PK_FLOATS + l;
      const size_t o = at + i;
      for (int a = 0; a < 3; ++a) out->x[3 * o + a] = q[(A_X + a) * LANES], out->v[3 * o + a] = q[(A_V + a) * LANES];
      for (int a = 0; a < 9; ++a) out->C[9 * o + a] = q[(A_C + a) * LANES], out->F[9 * o + a] = q[(A_F + a) * LANES];
      out->mass[o] = q[A_M * LANES];
      out->vol0[o] = q[A_VOL * LANES];
      out->logjp[o] = q[A_JP * LANES];
      memcpy(&out->material[o], &q[A_MAT * LANES], sizeof(int32_t));
      out->id[o] = id[p * LANES + l];
      out->owner[o] = owner;
    }
  return i;
}

/* backend.h's emigrate and emigrate_records: the particles whose block lies outside [lo, hi) leave
 * the device. Only they cross to the host (k_leave flags them, a scan numbers them in slot order,
 * k_leave_records packs them); their slots are marked gone, and the caller's next rebuild-mapping
 * (cuda_add_particles, cuda_add_records or rebuild) sorts them out of the mapping. Until then the device
 * holds no step's sums for them: primed G2P2G sums are dropped (the next frame primes again). */
/* Their first half: flags the particles whose block lies outside [lo, hi) (k_leave), numbers
 * them (*upto, an inclusive scan in slot order) and counts them (*m); where there are some, the
 * gone marks are ready for the gather that marks their slots. */
static int leave_flags(cuda_state *s, const int32_t lo[3], const int32_t hi[3], int *m, uint32_t **flag_out,
                       uint32_t **upto_out) {
  *m = 0;
  if (s->n == 0) return DR_OK;
  cudaStream_t st = s->stream;
  const size_t n_slots = s->n_packets * LANES;
  uint32_t *flag = dp<uint32_t>(s->vals[0]), *upto = dp<uint32_t>(s->vals[1]); /* the sort's scratch, >= n_slots */
  if (s->compact) {
    k_leave_compact<<<blocks_for(n_slots, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        n_slots, dp<uint32_t>(s->pk), dp<int2>(s->hdr), dp<int32_t>(s->pb_coord), dp<uint64_t>(s->keys[1]), s->cframe,
        make_float3(s->origin[0], s->origin[1], s->origin[2]), s->inv_dx, make_int3(lo[0], lo[1], lo[2]),
        make_int3(hi[0], hi[1], hi[2]), dp<uint8_t>(s->gone), s->n_gone, flag);
    LAUNCHED("k_leave_compact");
  } else {
    k_leave<<<blocks_for(n_slots, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        n_slots, dp<float>(s->pk), dp<int2>(s->hdr), make_float3(s->origin[0], s->origin[1], s->origin[2]),
        s->inv_dx, make_int3(lo[0], lo[1], lo[2]), make_int3(hi[0], hi[1], hi[2]), dp<uint8_t>(s->gone), s->n_gone,
        flag);
    LAUNCHED("k_leave");
  }
  CUB_RUN(cub::DeviceScan::InclusiveSum(temp_ptr, temp_bytes, flag, upto, (int)n_slots, st));
  DR_TRY(cuda_read_count(s, upto + n_slots - 1, m));
  if (*m == 0) return DR_OK;
  if (s->n_gone != 0 && s->n_gone != n_slots)
    return dr_fail(DR_EINTERNAL, "cuda backend: emigrate: particles were added after an emigrate without a "
                   "rebuild-mapping between them (%zu marked slots, %zu slots)", s->n_gone, n_slots);
  if (s->n_gone == 0) { /* the first emigrate since the last rebuild-mapping; a second one adds to its marks */
    DVEC(s->gone, n_slots, "emigrating particles");
    CU(cudaMemsetAsync(s->gone.ptr, 0, n_slots, st));
  }
  *flag_out = flag;
  *upto_out = upto;
  return DR_OK;
}

/* Their second half, after the gather: m particles are gone from the device. */
static int left(cuda_state *s, int m) {
  s->n -= (size_t)m;
  s->n_gone = s->n_packets * LANES;
  TRACE("emigrate: %d particles leave device %d", m, s->device);
  if (s->primed) {
    DR_TRY(step_clear_grid(s, s->par));
    s->primed = 0;
  }
  return DR_OK;
}

/* backend.h's emigrate_records: the leaving particles packed as records on the device
 * (k_leave_records), where they stay (xrec) until the next emigrate: read_records copies them to
 * the host a migration's round at a time, which sim.c sends as they are; no attribute-by-attribute
 * unpacking on the host. */
int cuda_emigrate_records(void *state, const int32_t lo[3], const int32_t hi[3], size_t *n) {
  cuda_state *s = (cuda_state *)state;
  *n = 0;
  s->n_rec = 0;
  int m = 0;
  uint32_t *flag = NULL, *upto = NULL;
  DR_TRY(leave_flags(s, lo, hi, &m, &flag, &upto));
  if (m == 0) return DR_OK;
  cudaStream_t st = s->stream;
  const size_t n_slots = s->n_packets * LANES, bytes = (size_t)m * REC_WORDS * sizeof(uint32_t);
  DVEC(s->xrec, bytes, "emigrating particles");
  if (s->compact) {
    k_compact_records_out<<<blocks_for(n_slots, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        n_slots, flag, upto, dp<uint32_t>(s->pk), dp<int2>(s->hdr), dp<int32_t>(s->pb_coord),
        dp<uint64_t>(s->keys[1]), dp<uint64_t>(s->pid), dp<compact_kind>(s->d_kinds), s->cframe,
        s->prm.rank * 256 + s->me, dp<uint32_t>(s->xrec), dp<uint8_t>(s->gone));
    LAUNCHED("k_compact_records_out");
  } else {
    k_leave_records<<<blocks_for(n_slots, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        n_slots, flag, upto, dp<float>(s->pk), dp<uint64_t>(s->pid), s->prm.rank * 256 + s->me,
        dp<uint32_t>(s->xrec), dp<uint8_t>(s->gone));
    LAUNCHED("k_leave_records");
  }
  s->n_rec = (size_t)m;
  *n = (size_t)m;
  return left(s, m);
}

/* backend.h's read_records: records [first, first + count) of the last emigrate_records into rec. */
int cuda_read_records(void *state, size_t first, size_t count, void *rec) {
  cuda_state *s = (cuda_state *)state;
  if (first > s->n_rec || count > s->n_rec - first)
    return dr_fail(DR_EINTERNAL, "cuda backend: read_records %zu..%zu of %zu emigrants", first, first + count, s->n_rec);
  if (count == 0) return DR_OK;
  const size_t rb = REC_WORDS * sizeof(uint32_t);
  CU(cudaMemcpyAsync(rec, dp<char>(s->xrec) + first * rb, count * rb, cudaMemcpyDeviceToHost, s->stream));
  CU(cudaStreamSynchronize(s->stream));
  return DR_OK;
}

/* backend.h's reserve_records: the device buffers of cuda_emigrate_records for n records and of
 * append_records for a round. */
int cuda_reserve_records(void *state, size_t n, size_t round) {
  cuda_state *s = (cuda_state *)state;
  const size_t rb = REC_WORDS * sizeof(uint32_t);
  if (n > 0) DVEC(s->xrec, n * rb, "emigrating particles");
  if (round > 0) DVEC(s->xin, round * rb, "arriving particles");
  return DR_OK;
}

/* backend.h's emigrate: cuda_emigrate_records, the records read on the host a bounded piece at a time. */
int cuda_emigrate(void *state, const int32_t lo[3], const int32_t hi[3], particles *out) {
  enum { PIECE = 1 << 16 };
  size_t m = 0;
  DR_TRY(cuda_emigrate_records(state, lo, hi, &m));
  DR_TRY(particles_reserve(out, out->n + m));
  const size_t rb = REC_WORDS * sizeof(uint32_t);
  unsigned char *buf = m ? (unsigned char *)dr_malloc(rb * (m < PIECE ? m : PIECE), "emigrating particles") : NULL;
  if (m && !buf) return DR_ENOMEM;
  int rc = DR_OK;
  for (size_t at = 0; rc == DR_OK && at < m; at += PIECE) {
    const size_t k = m - at < PIECE ? m - at : PIECE;
    rc = cuda_read_records(state, at, k, buf);
    for (size_t j = 0; rc == DR_OK && j < k; ++j) rc = particles_push_record(out, buf + rb * j);
  }
  free(buf);
  return rc;
}

/* cuda_download of compact packets: the packets decoded into records PIECE packets at a time
 * (k_compact_records_out, one record a slot), the valid lanes appended in order. */
static int download_compact(cuda_state *s, particles *out) {
  enum { PIECE = 2048 };
  const size_t np = s->n_packets, rb = REC_WORDS * sizeof(uint32_t);
  out->n = 0;
  int2 *hdr = (int2 *)dr_malloc(np * sizeof(int2), "particle download");
  uint32_t *rec = (uint32_t *)dr_malloc((size_t)PIECE * LANES * rb, "particle download");
  int rc = hdr && rec ? DR_OK : DR_ENOMEM;
  if (!rc) DVEC(s->xrec, (size_t)PIECE * LANES * rb, "particle download");
  cudaError_t e = cudaSuccess;
  if (!rc && (e = cudaMemcpy(hdr, s->hdr.ptr, np * sizeof(int2), cudaMemcpyDeviceToHost)) != cudaSuccess)
    rc = cuda_fail(e, "cudaMemcpy(hdr)", __FILE__, __LINE__);
  for (size_t p0 = 0; !rc && p0 < np; p0 += PIECE) {
    const size_t k = np - p0 < PIECE ? np - p0 : PIECE;
    k_compact_records_out<<<blocks_for(k * LANES, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->stream>>>(
        k * LANES, NULL, NULL, dp<uint32_t>(s->pk) + p0 * CPK_WORDS, dp<int2>(s->hdr) + p0, dp<int32_t>(s->pb_coord),
        dp<uint64_t>(s->keys[1]) + p0 * LANES, dp<uint64_t>(s->pid) + p0 * LANES, dp<compact_kind>(s->d_kinds),
        s->cframe, s->prm.rank * 256 + s->me, dp<uint32_t>(s->xrec), NULL);
    if ((e = cudaGetLastError()) != cudaSuccess) rc = cuda_fail(e, "k_compact_records_out", __FILE__, __LINE__);
    if (!rc && (e = cudaMemcpyAsync(rec, s->xrec.ptr, k * LANES * rb, cudaMemcpyDeviceToHost, s->stream)) != cudaSuccess)
      rc = cuda_fail(e, "cudaMemcpyAsync(rec)", __FILE__, __LINE__);
    if (!rc && (e = cudaStreamSynchronize(s->stream)) != cudaSuccess)
      rc = cuda_fail(e, "cudaStreamSynchronize(s->stream)", __FILE__, __LINE__);
    for (size_t p = 0; !rc && p < k; ++p)
      for (int l = 0; !rc && l < hdr[p0 + p].y; ++l) rc = particles_push_record(out, rec + (p * LANES + l) * REC_WORDS);
  }
  free(hdr);
  free(rec);
  if (!rc && out->n != s->n)
    rc = dr_fail(DR_EINTERNAL, "cuda backend: %zu particles in the packets, %zu expected", out->n, s->n);
  return rc;
}

int cuda_download(void *state, particles *out) {
  cuda_state *s = (cuda_state *)state;
  DR_TRY(particles_reserve(out, s->n));
  if (s->compact) return download_compact(s, out);
  out->n = s->n;
  if (s->n == 0) return DR_OK;
  const size_t np = s->n_packets;
  float *pk = (float *)dr_malloc(np * PK_FLOATS * sizeof(float), "particle download");
  uint64_t *id = (uint64_t *)dr_malloc(np * LANES * sizeof(uint64_t), "particle download");
  int2 *hdr = (int2 *)dr_malloc(np * sizeof(int2), "particle download");
  int rc = DR_OK;
  if (!pk || !id || !hdr) rc = DR_ENOMEM;
#define DL(dst, src, bytes)                                                                        \
  if (!rc) {                                                                                       \
    cudaError_t e_ = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s->stream);          \
    if (e_ != cudaSuccess) rc = cuda_fail(e_, "cudaMemcpyAsync(" #dst ")", __FILE__, __LINE__);    \
  }
  DL(pk, s->pk.ptr, np * PK_FLOATS * sizeof(float));
  DL(id, s->pid.ptr, np * LANES * sizeof(uint64_t));
  DL(hdr, s->hdr.ptr, np * sizeof(int2));
#undef DL
  if (!rc) {
    cudaError_t e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess) rc = cuda_fail(e, "cudaStreamSynchronize(s->stream)", __FILE__, __LINE__);
  }
  if (!rc) {
    const size_t i = unpack_host(s, pk, id, hdr, np, s->n, out, 0);
    if (i != s->n) rc = dr_fail(DR_EINTERNAL, "cuda backend: %zu particles in the packets, %zu expected", i, s->n);
  }
  free(pk);
  free(id);
  free(hdr);
  return rc;
}

/* backend.h's particle_blocks: the mapping's particle blocks (pb_coord) and their counts
 * (pb_start's differences), copied to the host; the particles stay on the device. */
int cuda_particle_blocks(void *state, int (*add)(void *ctx, const int32_t blk[3], uint64_t count), void *ctx) {
  cuda_state *s = (cuda_state *)state;
  if (s->n == 0 || s->n_pb == 0) return DR_OK;
  const size_t npb = s->n_pb;
  int32_t *coord = (int32_t *)dr_malloc(3 * npb * sizeof(int32_t), "particle block counts");
  int32_t *start = (int32_t *)dr_malloc((npb + 1) * sizeof(int32_t), "particle block counts");
  int rc = coord && start ? DR_OK : DR_ENOMEM;
  cudaError_t e = cudaSuccess;
  if (!rc && (e = cudaMemcpyAsync(coord, s->pb_coord.ptr, 3 * npb * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                  s->stream)) != cudaSuccess)
    rc = cuda_fail(e, "cudaMemcpyAsync(particle block coordinates)", __FILE__, __LINE__);
  if (!rc && (e = cudaMemcpyAsync(start, s->pb_start.ptr, (npb + 1) * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                  s->stream)) != cudaSuccess)
    rc = cuda_fail(e, "cudaMemcpyAsync(particle block starts)", __FILE__, __LINE__);
  if (!rc && (e = cudaStreamSynchronize(s->stream)) != cudaSuccess)
    rc = cuda_fail(e, "cudaStreamSynchronize(s->stream)", __FILE__, __LINE__);
  for (size_t q = 0; rc == DR_OK && q < npb; ++q) {
    const int32_t count = start[q + 1] - start[q];
    if (count < 0) rc = dr_fail(DR_EINTERNAL, "cuda backend: particle block %zu holds %d particles", q, (int)count);
    else if (count > 0) rc = add(ctx, coord + 3 * q, (uint64_t)count);
  }
  free(coord);
  free(start);
  return rc;
}

/* The device buffers of n particles in packets of 32 (as cuda_upload fills them; the next
 * rebuild-mapping sorts them), grown as needed by their rule (memsizes.h), and the count. */
static int upload_room(cuda_state *s, size_t n) {
  s->n = n;
  s->primed = 0; /* other particles: the sums are not theirs */
  s->n_gone = 0; /* and no slot of theirs was emigrate's */
  s->n_packets = (n + LANES - 1) / LANES;
  const size_t slots = s->n_packets * LANES;
  DVEC(s->pk, s->n_packets * pk_words(s) * sizeof(float), "particle packets");
  DVEC(s->pid, slots * sizeof(uint64_t), "particle ids");
  DVEC(s->hdr, s->n_packets * sizeof(int2), "packet headers");
  DR_TRY(rebuild_push_buffers(s, s->n_packets));
  for (int k = 0; k < 2; ++k) {
    DVEC(s->keys[k], slots * sizeof(uint64_t), "particle sort keys");
    DVEC(s->vals[k], slots * sizeof(uint32_t), "particle sort keys");
  }
  DVEC(s->pblock, n * sizeof(int32_t), "particle block indices");
  DVEC(s->head, n * sizeof(int32_t), "particle block indices");
  return DR_OK;
}

/* The upload's bounded staging (memsizes.h: MEM_UPLOAD_PACKETS packets), reused piece after piece,
 * so that the host holds no second full copy of the particles. */
typedef struct upload_staging {
  size_t cp; /* packets it holds */
  float *pk;
  uint64_t *id;
  int2 *hdr;
  uint32_t *rec; /* compact storage: records instead (compact_append_records) */
} upload_staging;

static void staging_close(upload_staging *u) {
  memtally_free(u->pk), memtally_free(u->id), memtally_free(u->hdr), memtally_free(u->rec);
  memset(u, 0, sizeof *u);
}

static int staging_open(const cuda_state *s, upload_staging *u, size_t packets) {
  memset(u, 0, sizeof *u);
  u->cp = packets < MEM_UPLOAD_PACKETS ? packets : MEM_UPLOAD_PACKETS;
  if (s->compact) {
    if (particles_record_bytes() != REC_WORDS * sizeof(uint32_t))
      return dr_fail(DR_EINTERNAL, "cuda backend: a particle record is %zu bytes, records.cuh counts %zu",
                     particles_record_bytes(), REC_WORDS * sizeof(uint32_t));
    u->rec = (uint32_t *)memtally_malloc(MT_TRANSFER, u->cp * LANES * REC_WORDS * sizeof(uint32_t), "particle upload");
    return u->rec ? DR_OK : DR_ENOMEM;
  }
  u->pk = (float *)memtally_malloc(MT_TRANSFER, u->cp * PK_FLOATS * sizeof(float), "particle upload");
  u->id = (uint64_t *)memtally_malloc(MT_TRANSFER, u->cp * LANES * sizeof(uint64_t), "particle upload");
  u->hdr = (int2 *)memtally_malloc(MT_TRANSFER, u->cp * sizeof(int2), "particle upload");
  if (!u->pk || !u->id || !u->hdr) {
    staging_close(u);
    return DR_ENOMEM;
  }
  return DR_OK;
}

/* Particles first .. first + n - 1 of p into the device's packets from packet k0 on, piece by
 * piece through the staging: packet k0 + k holds particles first + 32k .. of them. */
static int upload_slice(cuda_state *s, const upload_staging *u, const particles *p, size_t first, size_t n,
                        size_t k0) {
  const size_t packets = (n + LANES - 1) / LANES;
  for (size_t j = 0; j < packets; j += u->cp) {
    const size_t kp = packets - j < u->cp ? packets - j : u->cp, at = j * LANES;
    if (s->compact) { /* through records, encoded on the device */
      const size_t c = n - at < kp * LANES ? n - at : kp * LANES;
      for (size_t i = 0; i < c; ++i) particles_pack(p, first + at + i, u->rec + i * REC_WORDS);
      DR_TRY(compact_append_records(s, u->rec, c, k0 + j, kp));
      continue;
    }
    packets_from_particles(p, first + at, n - at < kp * LANES ? n - at : kp * LANES, kp, u->pk, u->id, u->hdr);
    /* On s->stream, which the rebuild-mapping's kernels use next: s->stream is non-blocking, so
     * a plain cudaMemcpy (the legacy default stream) would not be ordered before them, and a
     * pageable cudaMemcpy may return before its DMA lands: k_keys could then read headers or
     * packets that an earlier run left in reused device memory (test_preview's second run in
     * one process failed at its first step). The synchronisation lets the staging be reused. */
    CU(cudaMemcpyAsync(dp<float>(s->pk) + (k0 + j) * PK_FLOATS, u->pk, kp * PK_FLOATS * sizeof(float),
                       cudaMemcpyHostToDevice, s->stream));
    CU(cudaMemcpyAsync(dp<uint64_t>(s->pid) + (k0 + j) * LANES, u->id, kp * LANES * sizeof(uint64_t),
                       cudaMemcpyHostToDevice, s->stream));
    CU(cudaMemcpyAsync(dp<int2>(s->hdr) + k0 + j, u->hdr, kp * sizeof(int2), cudaMemcpyHostToDevice, s->stream));
    CU(cudaStreamSynchronize(s->stream));
  }
  return DR_OK;
}

/* Puts particles on the device in packets of 32, in their given order (the next
 * rebuild-mapping sorts them); buffers grow as needed. */
int cuda_upload(cuda_state *s, const particles *p) {
  DR_TRY(upload_room(s, p->n));
  if (p->n == 0) return DR_OK;
  upload_staging u;
  DR_TRY(staging_open(s, &u, s->n_packets));
  const int rc = upload_slice(s, &u, p, 0, p->n, 0);
  staging_close(&u);
  return rc;
}

typedef struct upload_chunk {
  cuda_state *s;
  const upload_staging *u;
} upload_chunk;

/* particle_source_chunks's use in cuda_upload_from: a chunk into its packets. */
static int upload_chunk_of(void *ctx, const particles *chunk, size_t done) {
  const upload_chunk *c = (const upload_chunk *)ctx;
  return upload_slice(c->s, c->u, chunk, 0, chunk->n, done / LANES);
}

/* The same from a source (backend.h's backend_create_from): the device buffers sized for src->n
 * first, then chunk after chunk of MEM_CREATE_CHUNK particles (a multiple of 32: each chunk
 * starts a packet, so the packets are cuda_upload's of them all), the host holding one chunk. */
int cuda_upload_from(cuda_state *s, const particle_source *src) {
  const size_t n = src->n;
  DR_TRY(upload_room(s, n));
  if (n == 0) return DR_OK;
  upload_staging u;
  DR_TRY(staging_open(s, &u, s->n_packets));
  upload_chunk c = {s, &u};
  const int rc = particle_source_chunks(src, MEM_CREATE_CHUNK, upload_chunk_of, &c);
  staging_close(&u);
  return rc;
}

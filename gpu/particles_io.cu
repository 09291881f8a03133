// particles_io.cu - particles in and out of the device: upload, download, adding particles and
// records (ranks' migrants), emigrating them as particles or records, the particle blocks' counts,
// the pinned host buffers, and the island's versions (the particles split among the members).
// Particles appended go into new packets after the mapping's, read by the next rebuild-mapping;
// emigrated slots are marked gone and dropped by it.

#include "cuda_state.h"

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

/* Particle records (particles.h: particles_pack's layout, what travels between ranks) as 32-bit
 * words: where each attribute starts, from the same list, so that the offsets follow it. */
#define REC_WORDS_(field, type, k, what) REC_##field, REC_##field##_last_ = REC_##field + (int)(sizeof(type) * (k) / 4) - 1,
enum { PARTICLE_ATTRIBUTES(REC_WORDS_) REC_WORDS };
#undef REC_WORDS_
static_assert(REC_WORDS == 31 && REC_x == 0 && REC_id == 27 && REC_owner == 30,
              "particles.h's attributes changed: k_leave_records and k_records_in carry each one by name");

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
  DVEC_KEEP(s->pk, packets * PK_FLOATS * sizeof(float), old_packets * PK_FLOATS * sizeof(float), st,
            "particle packets");
  DVEC_KEEP(s->pid, slots * sizeof(uint64_t), old_packets * LANES * sizeof(uint64_t), st, "particle ids");
  DVEC_KEEP(s->hdr, packets * sizeof(int2), old_packets * sizeof(int2), st, "packet headers");
  DR_TRY(rebuild_push_buffers(s, packets));
  for (int k = 0; k < 2; ++k) {
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

static int append_particles(cuda_state *s, const particles *p) {
  const size_t m = p->n;
  if (m == 0) return DR_OK;
  size_t old_packets = 0, add_packets = 0;
  DR_TRY(append_room(s, m, &old_packets, &add_packets));
  const size_t packets = old_packets + add_packets;
  cudaStream_t st = s->stream;
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
static int append_records(cuda_state *s, const void *rec, size_t m) {
  if (m == 0) return DR_OK;
  size_t old_packets = 0, add_packets = 0;
  DR_TRY(append_room(s, m, &old_packets, &add_packets));
  cudaStream_t st = s->stream;
  DVEC(s->xrec, m * REC_WORDS * sizeof(uint32_t), "arriving particles");
  CU(cudaMemcpyAsync(s->xrec.ptr, rec, m * REC_WORDS * sizeof(uint32_t), cudaMemcpyHostToDevice, st));
  k_records_in<<<blocks_for(add_packets * LANES, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      m, add_packets, dp<uint32_t>(s->xrec), dp<float>(s->pk) + old_packets * PK_FLOATS,
      dp<uint64_t>(s->pid) + old_packets * LANES, dp<int2>(s->hdr) + old_packets);
  LAUNCHED("k_records_in");
  s->n += m;
  s->n_packets = old_packets + add_packets;
  CU(cudaStreamSynchronize(st)); /* rec may change once this returns */
  return DR_OK;
}

/* backend.h's add_records (sim.c's buffers are pinned by alloc_sums): append_records, then the
 * rebuild-mapping, as cuda_add_particles. */
int cuda_add_records(void *state, const void *rec, size_t m) {
  cuda_state *s = (cuda_state *)state;
  if (m == 0) return DR_OK;
  DR_TRY(append_records(s, rec, m)); /* done with rec (it waits for its copy) */
  /* no wait for the rebuild-mapping's end, as rebuild(): the next step's cuda_blocks() waits only for
   * the codes (codes_early), and its P2G queues behind the move */
  return rebuild_now(s);
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
  k_leave<<<blocks_for(n_slots, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      n_slots, dp<float>(s->pk), dp<int2>(s->hdr), make_float3(s->origin[0], s->origin[1], s->origin[2]),
      s->inv_dx, make_int3(lo[0], lo[1], lo[2]), make_int3(hi[0], hi[1], hi[2]), dp<uint8_t>(s->gone), s->n_gone, flag);
  LAUNCHED("k_leave");
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
 * (k_leave_records) and copied once into pinned host memory, which sim.c sends as it is; no
 * attribute-by-attribute unpacking on the host. */
int cuda_emigrate_records(void *state, const int32_t lo[3], const int32_t hi[3], const void **rec, size_t *n) {
  cuda_state *s = (cuda_state *)state;
  *rec = NULL;
  *n = 0;
  int m = 0;
  uint32_t *flag = NULL, *upto = NULL;
  DR_TRY(leave_flags(s, lo, hi, &m, &flag, &upto));
  if (m == 0) return DR_OK;
  cudaStream_t st = s->stream;
  const size_t n_slots = s->n_packets * LANES, bytes = (size_t)m * REC_WORDS * sizeof(uint32_t);
  DVEC(s->xrec, bytes, "emigrating particles");
  k_leave_records<<<blocks_for(n_slots, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      n_slots, flag, upto, dp<float>(s->pk), dp<uint64_t>(s->pid), s->prm.rank * 256 + s->me,
      dp<uint32_t>(s->xrec), dp<uint8_t>(s->gone));
  LAUNCHED("k_leave_records");
  if (s->h_rec_cap < bytes) CU(cudaStreamSynchronize(st)); /* nothing queued copies into the old buffer */
  DR_TRY(cuda_host_pinned((void **)&s->h_rec, &s->h_rec_cap, bytes, "the particles leaving the rank"));
  CU(cudaMemcpyAsync(s->h_rec, s->xrec.ptr, bytes, cudaMemcpyDeviceToHost, st));
  CU(cudaStreamSynchronize(st));
  *rec = s->h_rec;
  *n = (size_t)m;
  return left(s, m);
}

/* backend.h's reserve_records: the device and host buffers of cuda_emigrate_records for n records.
 * cuda_add_records reads sim.c's buffer, which sim.c reserves. */
int cuda_reserve_records(void *state, size_t n) {
  cuda_state *s = (cuda_state *)state;
  const size_t bytes = n * REC_WORDS * sizeof(uint32_t);
  if (bytes == 0) return DR_OK;
  DVEC(s->xrec, bytes, "emigrating particles");
  CU(cudaStreamSynchronize(s->stream)); /* nothing queued copies into the old buffer */
  return cuda_host_pinned((void **)&s->h_rec, &s->h_rec_cap, bytes, "the particles leaving the rank");
}

/* backend.h's emigrate: cuda_emigrate_records, the records read on the host. */
int cuda_emigrate(void *state, const int32_t lo[3], const int32_t hi[3], particles *out) {
  const void *rec = NULL;
  size_t m = 0;
  DR_TRY(cuda_emigrate_records(state, lo, hi, &rec, &m));
  DR_TRY(particles_reserve(out, out->n + m));
  for (size_t k = 0; k < m; ++k) DR_TRY(particles_push_record(out, (const unsigned char *)rec + REC_WORDS * sizeof(uint32_t) * k));
  return DR_OK;
}

int cuda_download(void *state, particles *out) {
  cuda_state *s = (cuda_state *)state;
  DR_TRY(particles_reserve(out, s->n));
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

/* ---- snapshot and fetch: a frame's fields on the device, then to the host in chunks ----------- */

/* Where k_capture writes each attribute (device pointers into the member's snapshot, s->snap);
 * NULL where not asked for. */
typedef struct capture_out {
  float *x, *v, *C, *F, *mass, *vol0, *logjp;
  uint64_t *id;
  int32_t *material, *owner;
} capture_out;

/* k_capture's scan input: each packet's live lanes. */
__global__ static void k_packet_counts(size_t np, const int2 *hdr, uint32_t *count) {
  const size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (p < np) count[p] = (uint32_t)hdr[p].y;
}

/* One packet's k-component attribute at a (its live lanes 0 .. m-1) to dst's rows start ..
 * start + m - 1: the warp's stores are contiguous in dst (k floats a particle); the packet's
 * reads are gathered. */
__device__ static inline void capture_attr(float *dst, const float *q, int a, int k, uint32_t start, int m, int lane) {
  if (!dst) return;
  for (int j = lane; j < k * m; j += LANES) dst[(size_t)k * start + j] = q[(a + j % k) * LANES + j / k];
}

/* A warp per packet: its live particles, in lane order, to rows start[p] .. of out: download's
 * order (unpack_host), so that a frame written from either is the same. */
__global__ static void k_capture(size_t np, const float *pk, const uint64_t *pid, const int2 *hdr, const uint32_t *start,
                                 int32_t owner, capture_out out) {
  const size_t p = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / LANES;
  const int lane = threadIdx.x % LANES;
  if (p >= np) return;
  const int m = hdr[p].y;
  const uint32_t o = start[p];
  const float *q = pk + p * PK_FLOATS;
  capture_attr(out.x, q, A_X, 3, o, m, lane);
  capture_attr(out.v, q, A_V, 3, o, m, lane);
  capture_attr(out.C, q, A_C, 9, o, m, lane);
  capture_attr(out.F, q, A_F, 9, o, m, lane);
  capture_attr(out.mass, q, A_M, 1, o, m, lane);
  capture_attr(out.vol0, q, A_VOL, 1, o, m, lane);
  capture_attr(out.logjp, q, A_JP, 1, o, m, lane);
  capture_attr((float *)out.material, q, A_MAT, 1, o, m, lane); /* the int's bits, as the packets hold them */
  if (lane < m) {
    if (out.id) out.id[o + lane] = pid[p * LANES + lane];
    if (out.owner) out.owner[o + lane] = owner;
  }
}

/* Queues the snapshot of this GPU's particles (the attributes of mask) into s->snap on s->stream,
 * its vectors exact (DVEC_EXACT: no headroom, as the device's bytes a particle are the plan's
 * bound; kept while the particles do not grow), the owner left out (the member's one value, which
 * fetch writes on the host). */
static int snapshot_queue(cuda_state *s, unsigned mask) {
  s->snap_n = 0;
  s->snap_mask = mask;
  if (s->n == 0) return DR_OK;
  for (int a = 0; a < PARTICLE_ATTRS; ++a)
    if ((mask & ~PA_BIT(owner)) >> a & 1u) DVEC_EXACT(s->snap[a], s->n * particle_attrs[a].bytes, "frame snapshot");
  const size_t np = s->n_packets;
  cudaStream_t st = s->stream;
  uint32_t *count = dp<uint32_t>(s->vals[0]), *start = dp<uint32_t>(s->vals[1]); /* the sort's scratch, >= np */
  k_packet_counts<<<blocks_for(np, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(np, dp<int2>(s->hdr), count);
  LAUNCHED("k_packet_counts");
  CUB_RUN(cub::DeviceScan::ExclusiveSum(temp_ptr, temp_bytes, count, start, (int)np, st));
#define SNAP_(field, type) (mask & PA_BIT(field) ? dp<type>(s->snap[PA_##field]) : NULL)
  const capture_out o = {SNAP_(x, float),    SNAP_(v, float),        SNAP_(C, float),    SNAP_(F, float),
                         SNAP_(mass, float), SNAP_(vol0, float),     SNAP_(logjp, float), SNAP_(id, uint64_t),
                         SNAP_(material, int32_t), NULL};
#undef SNAP_
  const int32_t owner = s->prm.rank * 256 + s->me;
  k_capture<<<blocks_for(np * LANES, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      np, dp<float>(s->pk), dp<uint64_t>(s->pid), dp<int2>(s->hdr), start, owner, o);
  LAUNCHED("k_capture");
  return DR_OK;
}

/* The snapshot's end on one GPU: waits, and checks that the packets held the particles counted. */
static int snapshot_done(cuda_state *s) {
  if (s->n == 0) return DR_OK;
  int last_start = 0, last_count = 0;
  DR_TRY(cuda_read_count(s, dp<uint32_t>(s->vals[1]) + s->n_packets - 1, &last_start)); /* waits for the stream */
  DR_TRY(cuda_read_count(s, dp<uint32_t>(s->vals[0]) + s->n_packets - 1, &last_count));
  if ((size_t)last_start + (size_t)last_count != s->n)
    return dr_fail(DR_EINTERNAL, "cuda backend: snapshot: %zu particles in the packets, %zu expected",
                   (size_t)last_start + (size_t)last_count, s->n);
  s->snap_n = s->n;
  return DR_OK;
}

int cuda_snapshot(void *state, unsigned mask, size_t *n) {
  cuda_state *s = (cuda_state *)state;
  *n = 0;
  DR_TRY(snapshot_queue(s, mask));
  DR_TRY(snapshot_done(s));
  *n = s->snap_n;
  return DR_OK;
}

/* The island's: every member snapshots its own particles, all queued at once, then each is
 * waited for; the island's rows are the members' one after another (download's order). */
int island_snapshot(void *state, unsigned mask, size_t *n) {
  island *I = (island *)state;
  *n = 0;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(snapshot_queue(I->m[k], mask));
  }
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(snapshot_done(I->m[k]));
    *n += I->m[k]->snap_n;
  }
  return DR_OK;
}

/* Rows first .. first + count - 1 of member s's snapshot into dst's rows at ... Runs on the
 * writer's thread: it makes s's device its current one, and copies synchronously (the legacy
 * stream: the snapshot was complete when snapshot returned, and the steps' streams never touch
 * it), into dst's pinned memory. */
static int fetch_member(cuda_state *s, unsigned mask, size_t first, size_t count, particles *dst, size_t at) {
  if ((mask & s->snap_mask) != mask || first > s->snap_n || count > s->snap_n - first)
    return dr_fail(DR_EINTERNAL, "cuda backend: fetch of rows %zu .. %zu (mask 0x%x) from a snapshot of %zu (mask 0x%x)",
                   first, first + count, mask, s->snap_n, s->snap_mask);
  if (count == 0) return DR_OK;
  CU(cudaSetDevice(s->device));
  if (mask & PA_BIT(owner))
    for (size_t i = 0; i < count; ++i) dst->owner[at + i] = s->prm.rank * 256 + s->me;
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    if (!((mask & ~PA_BIT(owner)) >> a & 1u)) continue;
    const size_t b = particle_attrs[a].bytes;
    CU(cudaMemcpy((char *)particles_attr(dst, a) + at * b, (const char *)s->snap[a].ptr + first * b, count * b,
                  cudaMemcpyDeviceToHost));
  }
  return DR_OK;
}

int cuda_fetch(void *state, unsigned mask, size_t first, size_t count, particles *dst) {
  DR_TRY(fetch_member((cuda_state *)state, mask, first, count, dst, 0));
  dst->n = count;
  return DR_OK;
}

/* The island's: the range may span members; each gives its part of it. */
int island_fetch(void *state, unsigned mask, size_t first, size_t count, particles *dst) {
  island *I = (island *)state;
  size_t base = 0, done = 0, total = 0;
  for (int k = 0; k < I->nm; ++k) total += I->m[k]->snap_n;
  if (first > total || count > total - first || (mask & I->m[0]->snap_mask) != mask)
    return dr_fail(DR_EINTERNAL, "cuda backend: fetch of rows %zu .. %zu (mask 0x%x) from a snapshot of %zu (mask 0x%x)",
                   first, first + count, mask, total, I->m[0]->snap_mask);
  for (int k = 0; k < I->nm && done < count; ++k) {
    const size_t m = I->m[k]->snap_n, from = first + done;
    if (from < base + m) {
      const size_t take = base + m - from < count - done ? base + m - from : count - done;
      DR_TRY(fetch_member(I->m[k], mask, from - base, take, dst, done));
      done += take;
    }
    base += m;
  }
  dst->n = count;
  return DR_OK;
}

/* ---- fetch_rows: a checkpoint's rows of the particles themselves, a chunk at a time ------------ */

/* One packet's k-component attribute at a (its live lanes 0 .. m-1, rows o .. o + m - 1) to dst,
 * the rows of [first, first + count) only, row r at dst's row r - first. */
__device__ static inline void rows_attr(float *dst, const float *q, int a, int k, size_t o, int m, int lane,
                                        size_t first, size_t count) {
  for (int j = lane; j < k * m; j += LANES) {
    const size_t row = o + (size_t)(j / k);
    if (row >= first && row < first + count) dst[(size_t)k * (row - first) + j % k] = q[(a + j % k) * LANES + j / k];
  }
}

/* Rows [first, first + count) of the packets' particles in download's order (start: each packet's
 * first row, the exclusive scan of its live lanes) to out's arrays (row r at r - first). A warp a
 * packet, from packet p0 = first / 32 on (a packet holds at most 32 rows, so none before p0 holds
 * a row >= first) in a grid-stride loop; a warp stops at the first packet past the range (the
 * rows rise with the packets), so the grid need not cover every packet. */
__global__ static void k_capture_rows(size_t np, size_t p0, const float *pk, const uint64_t *pid, const int2 *hdr,
                                      const uint32_t *start, size_t first, size_t count, capture_out out) {
  const size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / LANES;
  const size_t warps = (gridDim.x * (size_t)blockDim.x) / LANES;
  const int lane = threadIdx.x % LANES;
  for (size_t p = p0 + warp; p < np; p += warps) {
    const size_t o = start[p];
    if (o >= first + count) return;
    const int m = hdr[p].y;
    if (o + (size_t)m <= first) continue;
    const float *q = pk + p * PK_FLOATS;
    rows_attr(out.x, q, A_X, 3, o, m, lane, first, count);
    rows_attr(out.v, q, A_V, 3, o, m, lane, first, count);
    rows_attr(out.C, q, A_C, 9, o, m, lane, first, count);
    rows_attr(out.F, q, A_F, 9, o, m, lane, first, count);
    rows_attr(out.mass, q, A_M, 1, o, m, lane, first, count);
    rows_attr(out.vol0, q, A_VOL, 1, o, m, lane, first, count);
    rows_attr(out.logjp, q, A_JP, 1, o, m, lane, first, count);
    rows_attr((float *)out.material, q, A_MAT, 1, o, m, lane, first, count); /* the int's bits, as the packets hold them */
    const size_t row = o + (size_t)lane;
    if (lane < m && row >= first && row < first + count) out.id[row - first] = pid[p * LANES + lane];
  }
}

/* Rows first .. first + count - 1 of member s's particles (download's order) into dst's rows at
 * `at` ... on the caller's thread (the one that steps; s's device current): gathered on the device
 * into s->rows (every attribute but the owner, attribute after attribute, count rows each), then
 * copied on s->stream, after whatever the steps queued, into dst's pinned memory; the owner is the
 * member's one value, written on the host. The call with first 0 numbers the rows first (the
 * packets' row starts, into the sort's scratch as the snapshot puts them); the later calls of the
 * checkpoint read them (backend.h: nothing steps between the calls). */
static int fetch_rows_member(cuda_state *s, size_t first, size_t count, particles *dst, size_t at) {
  if (first > s->n || count > s->n - first)
    return dr_fail(DR_EINTERNAL, "cuda backend: fetch_rows of rows %zu .. %zu of %zu particles", first, first + count,
                   s->n);
  if (count == 0) return DR_OK;
  const size_t np = s->n_packets;
  cudaStream_t st = s->stream;
  uint32_t *cnt = dp<uint32_t>(s->vals[0]), *start = dp<uint32_t>(s->vals[1]); /* the sort's scratch, >= np */
  if (first == 0) {
    k_packet_counts<<<blocks_for(np, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(np, dp<int2>(s->hdr), cnt);
    LAUNCHED("k_packet_counts");
    CUB_RUN(cub::DeviceScan::ExclusiveSum(temp_ptr, temp_bytes, cnt, start, (int)np, st));
    int last_start = 0, last_count = 0; /* the packets hold the particles counted (as the snapshot checks) */
    DR_TRY(cuda_read_count(s, start + np - 1, &last_start));
    DR_TRY(cuda_read_count(s, cnt + np - 1, &last_count));
    if ((size_t)last_start + (size_t)last_count != s->n)
      return dr_fail(DR_EINTERNAL, "cuda backend: fetch_rows: %zu particles in the packets, %zu expected",
                     (size_t)last_start + (size_t)last_count, s->n);
  }
  size_t bytes = 0, off[PARTICLE_ATTRS] = {0}; /* each attribute's count rows from a multiple of 8 bytes (the ids') */
  for (int a = 0; a < PARTICLE_ATTRS; ++a)
    if (a != PA_owner) off[a] = bytes, bytes += (count * particle_attrs[a].bytes + 7) / 8 * 8;
  DVEC_EXACT(s->rows, bytes, "checkpoint rows");
  char *base = (char *)s->rows.ptr;
#define ROWS_(field, type) ((type *)(base + off[PA_##field]))
  const capture_out o = {ROWS_(x, float),    ROWS_(v, float),    ROWS_(C, float),        ROWS_(F, float),
                         ROWS_(mass, float), ROWS_(vol0, float), ROWS_(logjp, float),    ROWS_(id, uint64_t),
                         ROWS_(material, int32_t), NULL};
#undef ROWS_
  const size_t p0 = first / LANES, warps = np - p0 < count ? np - p0 : count;
  k_capture_rows<<<blocks_for(warps * LANES, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      np, p0, dp<float>(s->pk), dp<uint64_t>(s->pid), dp<int2>(s->hdr), start, first, count, o);
  LAUNCHED("k_capture_rows");
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    if (a == PA_owner) continue;
    const size_t b = particle_attrs[a].bytes;
    CU(cudaMemcpyAsync((char *)particles_attr(dst, a) + at * b, base + off[a], count * b,
                       cudaMemcpyDeviceToHost, st));
  }
  CU(cudaStreamSynchronize(st));
  for (size_t i = 0; i < count; ++i) dst->owner[at + i] = s->prm.rank * 256 + s->me;
  return DR_OK;
}

int cuda_fetch_rows(void *state, size_t first, size_t count, particles *dst) {
  DR_TRY(fetch_rows_member((cuda_state *)state, first, count, dst, 0));
  dst->n = count;
  return DR_OK;
}

/* The island's: its rows are the members' one after another (download's order); the range may
 * span members, each gives its part of it. The calls come in row order, so each member's first
 * part starts at its row 0 (which numbers its rows). */
int island_fetch_rows(void *state, size_t first, size_t count, particles *dst) {
  island *I = (island *)state;
  size_t base = 0, done = 0, total = 0;
  for (int k = 0; k < I->nm; ++k) total += I->m[k]->n;
  if (first > total || count > total - first)
    return dr_fail(DR_EINTERNAL, "cuda backend: fetch_rows of rows %zu .. %zu of %zu particles", first, first + count,
                   total);
  for (int k = 0; k < I->nm && done < count; ++k) {
    const size_t m = I->m[k]->n, from = first + done;
    if (from < base + m) {
      const size_t take = base + m - from < count - done ? base + m - from : count - done;
      DR_TRY(use(I->m[k]));
      DR_TRY(fetch_rows_member(I->m[k], from - base, take, dst, done));
      done += take;
    }
    base += m;
  }
  dst->n = count;
  return DR_OK;
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
  DVEC(s->pk, s->n_packets * PK_FLOATS * sizeof(float), "particle packets");
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
} upload_staging;

static void staging_close(upload_staging *u) {
  memtally_free(u->pk), memtally_free(u->id), memtally_free(u->hdr);
  memset(u, 0, sizeof *u);
}

static int staging_open(upload_staging *u, size_t packets) {
  memset(u, 0, sizeof *u);
  u->cp = packets < MEM_UPLOAD_PACKETS ? packets : MEM_UPLOAD_PACKETS;
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
  DR_TRY(staging_open(&u, s->n_packets));
  const int rc = upload_slice(s, &u, p, 0, p->n, 0);
  staging_close(&u);
  return rc;
}

/* The same from a source (backend.h's backend_create_from): the device buffers sized for src->n
 * first, then chunk after chunk of MEM_CREATE_CHUNK particles (a multiple of 32: each chunk
 * starts a packet, so the packets are cuda_upload's of them all), the host holding one chunk. */
int cuda_upload_from(cuda_state *s, const particle_source *src) {
  const size_t n = src->n;
  DR_TRY(upload_room(s, n));
  if (n == 0) return DR_OK;
  upload_staging u;
  DR_TRY(staging_open(&u, s->n_packets));
  particles chunk;
  memset(&chunk, 0, sizeof chunk);
  int rc = particles_reserve(&chunk, n < MEM_CREATE_CHUNK ? n : MEM_CREATE_CHUNK);
  for (size_t done = 0; rc == DR_OK && done < n;) {
    const size_t want = n - done < MEM_CREATE_CHUNK ? n - done : MEM_CREATE_CHUNK;
    chunk.n = 0;
    rc = src->next(src->ctx, &chunk, want);
    if (rc == DR_OK && chunk.n != want)
      rc = dr_fail(DR_EINTERNAL, "cuda upload: a particle source gave %zu particles where %zu were asked (%zu of %zu)",
                   chunk.n, want, done, n);
    if (rc == DR_OK) rc = upload_slice(s, &u, &chunk, 0, want, done / LANES);
    done += want;
  }
  particles_free(&chunk);
  staging_close(&u);
  return rc;
}

int island_download(void *state, particles *out) {
  island *I = (island *)state;
  size_t n = 0;
  for (int k = 0; k < I->nm; ++k) n += I->m[k]->n;
  DR_TRY(particles_reserve(out, n));
  out->n = 0;
  particles part = {0};
  int rc = DR_OK;
  for (int k = 0; k < I->nm && rc == DR_OK; ++k) {
    rc = use(I->m[k]);
    if (rc == DR_OK) rc = cuda_download(I->m[k], &part);
    for (size_t i = 0; rc == DR_OK && i < part.n; ++i) rc = particles_push_copy(out, &part, i);
  }
  particles_free(&part);
  return rc;
}

typedef struct coord_index {
  float x;
  size_t i;
} coord_index;

static int by_coord(const void *a, const void *b) {
  const coord_index *p = (const coord_index *)a, *q = (const coord_index *)b;
  return p->x < q->x ? -1 : p->x > q->x ? 1 : (p->i > q->i) - (p->i < q->i);
}

/* p's particles in increasing coordinate along axis (ties by index); NULL when out of memory. */
static coord_index *sorted_along(const particles *p, int axis, const char *what) {
  coord_index *ci = (coord_index *)dr_malloc(sizeof *ci * (p->n ? p->n : 1), what);
  if (!ci) return NULL;
  for (size_t i = 0; i < p->n; ++i) ci[i] = (coord_index){p->x[3 * i + axis], i};
  qsort(ci, p->n, sizeof *ci, by_coord);
  return ci;
}

/* The static split (the paper's), on the positions alone (x: 3n floats): along the longest axis
 * of the particles' bounding box, evenly by count in the order of that coordinate (ties by index):
 * member[i] receives particle i's member; I->axis and I->cut are set. The host holds a
 * (coordinate, index) pair a particle meanwhile (16 B, counted). */
static_assert(MAX_GPUS <= 256, "island_assign numbers the members in a byte");
static int island_assign(island *I, const float *x, size_t n, uint8_t *member) {
  float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (size_t i = 0; i < n; ++i)
    for (int a = 0; a < 3; ++a) lo[a] = fminf(lo[a], x[3 * i + a]), hi[a] = fmaxf(hi[a], x[3 * i + a]);
  I->axis = 0;
  for (int a = 1; a < 3; ++a)
    if (hi[a] - lo[a] > hi[I->axis] - lo[I->axis]) I->axis = a;
  coord_index *ci = (coord_index *)memtally_malloc(MT_SORT, sizeof *ci * (n ? n : 1), "the island's split");
  if (!ci) return DR_ENOMEM;
  for (size_t i = 0; i < n; ++i) ci[i] = (coord_index){x[3 * i + I->axis], i};
  qsort(ci, n, sizeof *ci, by_coord);
  for (int k = 0; k < I->nm; ++k) {
    const size_t b = n * (size_t)k / (size_t)I->nm, e = n * (size_t)(k + 1) / (size_t)I->nm;
    for (size_t j = b; j < e; ++j) member[ci[j].i] = (uint8_t)k;
    if (k > 0) I->cut[k - 1] = b < n ? ci[b].x : hi[I->axis];
  }
  memtally_free(ci);
  return DR_OK;
}

/* parts[k] receives member k's particles of p (island_assign's split), in their order in p, the
 * order a streamed creation gives each member too (island_create_from). */
int island_split(island *I, const particles *p, particles *parts) {
  uint8_t *member = (uint8_t *)memtally_malloc(MT_SORT, p->n ? p->n : 1, "the island's split");
  if (!member) return DR_ENOMEM;
  int rc = island_assign(I, p->x, p->n, member);
  size_t count[MAX_GPUS] = {0};
  for (size_t i = 0; rc == DR_OK && i < p->n; ++i) ++count[member[i]];
  for (int k = 0; k < I->nm && rc == DR_OK; ++k) rc = particles_reserve(&parts[k], count[k]);
  for (size_t i = 0; rc == DR_OK && i < p->n; ++i) rc = particles_push_copy(&parts[member[i]], p, i);
  memtally_free(member);
  return rc;
}

/* The split of a source's particles (island_create_from), read once for their positions (12 B a
 * particle on the host, counted, a chunk of MEM_CREATE_CHUNK particles at a time): *member (n
 * bytes, memtally_malloc; NULL on failure) numbers each particle's member. */
int island_assign_source(island *I, const particle_source *src, uint8_t **member) {
  const size_t n = src->n;
  *member = NULL;
  float *x = (float *)memtally_malloc(MT_PARTICLES, 3 * sizeof(float) * (n ? n : 1), "the island's split");
  if (!x) return DR_ENOMEM;
  particles chunk;
  memset(&chunk, 0, sizeof chunk);
  int rc = particles_reserve(&chunk, n < MEM_CREATE_CHUNK ? n : MEM_CREATE_CHUNK);
  for (size_t done = 0; rc == DR_OK && done < n;) {
    const size_t want = n - done < MEM_CREATE_CHUNK ? n - done : MEM_CREATE_CHUNK;
    chunk.n = 0;
    rc = src->next(src->ctx, &chunk, want);
    if (rc == DR_OK && chunk.n != want)
      rc = dr_fail(DR_EINTERNAL, "cuda island: a particle source gave %zu particles where %zu were asked (%zu of %zu)",
                   chunk.n, want, done, n);
    if (rc == DR_OK) memcpy(x + 3 * done, chunk.x, 3 * sizeof(float) * want);
    done += want;
  }
  particles_free(&chunk);
  if (rc == DR_OK && !(*member = (uint8_t *)memtally_malloc(MT_SORT, n ? n : 1, "the island's split"))) rc = DR_ENOMEM;
  if (rc == DR_OK) rc = island_assign(I, x, n, *member);
  memtally_free(x);
  if (rc) {
    memtally_free(*member);
    *member = NULL;
  }
  return rc;
}

/* member_source: a member's rows of the island's source, read again from its start (the source's
 * rewind): those island_assign gave member k, in their order. */
static int member_next(void *ctx, particles *out, size_t max) {
  member_source *m = (member_source *)ctx;
  size_t added = 0;
  while (added < max) {
    if (m->at == m->buf.n) { /* the source's next chunk */
      if (m->row == m->src->n) break;
      const size_t want = m->src->n - m->row < MEM_CREATE_CHUNK ? m->src->n - m->row : MEM_CREATE_CHUNK;
      m->buf.n = 0;
      m->at = 0;
      DR_TRY(m->src->next(m->src->ctx, &m->buf, want));
      if (m->buf.n != want)
        return dr_fail(DR_EINTERNAL, "cuda island: a particle source gave %zu particles where %zu were asked", m->buf.n,
                       want);
      m->row += want;
    }
    const size_t base = m->row - m->buf.n;
    for (; m->at < m->buf.n && added < max; ++m->at)
      if (m->member[base + m->at] == m->k) {
        DR_TRY(particles_push_copy(out, &m->buf, m->at));
        ++added;
      }
  }
  return DR_OK;
}

int member_source_open(const particle_source *src, const uint8_t *member, int k, member_source *m,
                       particle_source *out) {
  memset(m, 0, sizeof *m);
  m->src = src, m->member = member, m->k = k;
  DR_TRY(particles_reserve(&m->buf, src->n < MEM_CREATE_CHUNK ? src->n : MEM_CREATE_CHUNK)); /* no growth */
  size_t n = 0;
  for (size_t i = 0; i < src->n; ++i) n += member[i] == k;
  *out = (particle_source){.n = n, .next = member_next, .ctx = m};
  if (!src->rewind) return dr_fail(DR_EINTERNAL, "cuda island: a particle source that cannot be read twice");
  return src->rewind(src->ctx);
}

void member_source_close(member_source *m) { particles_free(&m->buf); }

/* New particles (sources, backend.h cuda_add_particles) on the island: taken in order along the split
 * axis and poured into the members in that order, each filled up to an even share of the new total
 * (a member already above its share takes none), so the members stay balanced by count and each
 * receives a contiguous run along the axis; then every member rebuilds and the tags are renewed. */
/* How many of m new particles (next of them placed on members before k) member k takes: up to its
 * even share of the island's total after the addition; the last member takes the rest. */
static size_t island_give(const island *I, int k, size_t total, size_t m, size_t next) {
  const size_t share = total * (size_t)(k + 1) / (size_t)I->nm - total * (size_t)k / (size_t)I->nm;
  size_t give = share > I->m[k]->n ? share - I->m[k]->n : 0;
  if (k == I->nm - 1 || give > m - next) give = m - next;
  return give;
}

int island_add_particles(void *state, const particles *p) {
  island *I = (island *)state;
  if (p->n == 0) return DR_OK;
  coord_index *ci = sorted_along(p, I->axis, "island sources");
  if (!ci) return DR_ENOMEM;
  size_t total = p->n;
  for (int k = 0; k < I->nm; ++k) total += I->m[k]->n;
  particles part;
  memset(&part, 0, sizeof part);
  int rc = DR_OK;
  size_t next = 0;
  for (int k = 0; k < I->nm && rc == DR_OK && next < p->n; ++k) {
    const size_t give = island_give(I, k, total, p->n, next);
    if (give == 0) continue;
    part.n = 0;
    rc = particles_reserve(&part, give);
    for (size_t j = next; j < next + give && rc == DR_OK; ++j) rc = particles_push_copy(&part, p, ci[j].i);
    if (rc == DR_OK && (rc = use(I->m[k])) == DR_OK) rc = append_particles(I->m[k], &part);
    next += give;
  }
  particles_free(&part);
  free(ci);
  DR_TRY(rc);
  return island_rebuild(I);
}

int island_emigrate(void *state, const int32_t lo[3], const int32_t hi[3], particles *out) {
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(cuda_emigrate(I->m[k], lo, hi, out));
  }
  return DR_OK;
}

/* backend.h's emigrate_records on the island: each member packs its leaving particles on its
 * device (cuda_emigrate_records), and the island's buffer holds them all, member by member. */
int island_emigrate_records(void *state, const int32_t lo[3], const int32_t hi[3], const void **rec,
                            size_t *n) {
  island *I = (island *)state;
  const size_t rb = REC_WORDS * sizeof(uint32_t);
  *rec = NULL;
  *n = 0;
  /* every member's records first (each stays valid until that member's next call), then the
   * island's buffer grown once for all of them */
  const void *r[MAX_GPUS] = {NULL};
  size_t m[MAX_GPUS] = {0}, total = 0;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(cuda_emigrate_records(I->m[k], lo, hi, &r[k], &m[k]));
    total += m[k];
  }
  if (total == 0) return DR_OK;
  DR_TRY(cuda_host_pinned(&I->rec, &I->rec_cap, total * rb, "the particles leaving the rank"));
  for (int k = 0, at = 0; k < I->nm; at += (int)m[k], ++k)
    if (m[k]) memcpy((char *)I->rec + (size_t)at * rb, r[k], m[k] * rb);
  *rec = I->rec;
  *n = total;
  return DR_OK;
}

/* backend.h's add_records on the island: as island_add_particles (the new particles go to the
 * members along the split axis, each up to its even share), each member's share gathered into
 * pinned memory and unpacked on its device (append_records); then every member rebuilds. */
int island_add_records(void *state, const void *rec, size_t m) {
  island *I = (island *)state;
  if (m == 0) return DR_OK;
  const size_t rb = REC_WORDS * sizeof(uint32_t);
  const unsigned char *r = (const unsigned char *)rec;
  coord_index *ci = (coord_index *)dr_malloc(sizeof *ci * m, "island arrivals");
  if (!ci) return DR_ENOMEM;
  for (size_t i = 0; i < m; ++i) {
    float x[3]; /* a record starts with the position */
    memcpy(x, r + rb * i, sizeof x);
    ci[i] = (coord_index){x[I->axis], i};
  }
  qsort(ci, m, sizeof *ci, by_coord);
  size_t total = m;
  for (int k = 0; k < I->nm; ++k) total += I->m[k]->n;
  int rc = DR_OK;
  size_t next = 0;
  for (int k = 0; k < I->nm && rc == DR_OK && next < m; ++k) {
    const size_t give = island_give(I, k, total, m, next);
    if (give == 0) continue;
    rc = cuda_host_pinned(&I->rec_in, &I->rec_in_cap, give * rb, "the particles arriving at the rank");
    for (size_t j = 0; j < give && rc == DR_OK; ++j) memcpy((char *)I->rec_in + rb * j, r + rb * ci[next + j].i, rb);
    if (rc == DR_OK && (rc = use(I->m[k])) == DR_OK) rc = append_records(I->m[k], I->rec_in, give);
    next += give;
  }
  free(ci);
  DR_TRY(rc);
  return island_rebuild(I);
}

/* backend.h's reserve_records for an island: its own buffers (the records of all members, and a
 * member's share of the arrivals), and every member's, each for all n: the particles leaving
 * the rank may all come from the member at one end of the island's axis. */
int island_reserve_records(void *state, size_t n) {
  island *I = (island *)state;
  const size_t rb = REC_WORDS * sizeof(uint32_t);
  if (n == 0) return DR_OK;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(cuda_reserve_records(I->m[k], n));
  }
  DR_TRY(cuda_host_pinned(&I->rec, &I->rec_cap, n * rb, "the particles leaving the rank"));
  return cuda_host_pinned(&I->rec_in, &I->rec_in_cap, n * rb, "the particles arriving at the rank");
}

int island_particle_blocks(void *state, int (*add)(void *ctx, const int32_t blk[3], uint64_t count),
                           void *ctx) {
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(cuda_particle_blocks(I->m[k], add, ctx));
  }
  return DR_OK;
}

/* Particles that migrated between ranks or a rebalance (sim.c, at a rebuild-mapping): split
 * again along the island's axis, as at the start, and every member rebuilt. */
int island_set_particles(void *state, particles *p) {
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    CU(cudaStreamSynchronize(I->m[k]->stream)); /* nothing queued still reads the packets */
  }
  particles parts[MAX_GPUS];
  memset(parts, 0, sizeof parts);
  int rc = island_split(I, p, parts);
  for (int k = 0; k < I->nm && rc == DR_OK; ++k) {
    if ((rc = use(I->m[k])) == DR_OK) rc = cuda_set_particles(I->m[k], &parts[k]); /* takes parts[k] over */
  }
  for (int k = 0; k < I->nm; ++k) particles_free(&parts[k]);
  DR_TRY(rc);
  particles_free(p);
  return island_tag(I);
}

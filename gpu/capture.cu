// capture.cu - the particles out to the writer: a frame's fields captured on the device (snapshot;
// where the device has no room for them, gathered a chunk at a time into pinned host memory) and
// fetched to the host in chunks (fetch), and a checkpoint's rows of the particles themselves
// gathered from the packets a chunk at a time (fetch_rows); on one GPU and on an island (the
// members' rows one after another: download's order).

#include "compact_packets.cuh"
#include "cuda_state.h"
#include "memsizes.h"
#include "settings.h"

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

/* Compact packets (compact_packets.cuh): each lane decodes its record and writes its row (row: its
 * place in out's arrays) of the attributes asked for. mats not NULL (a frame): F at the frame's
 * time, the record's advanced by the last G2P's C and dt (ctl->dt_g2p, physics/compact.h); NULL
 * (a checkpoint's rows): F as the record holds it. */
__device__ static inline void capture_compact_lane(const uint32_t *pk, const int2 *hdr, const int32_t *pb_coord,
                                                   const uint64_t *own, const compact_kind *kinds,
                                                   const compact_frame &f, const uint64_t *pid, size_t p, int lane,
                                                   size_t row, int32_t owner, const capture_out &out,
                                                   const material_params *mats, const step_ctl *ctl) {
  cpk_particle c;
  cpk_load(pk, hdr, pb_coord, own, kinds, &f, p, lane, &c);
  if (mats && out.F) constitutive_advance_F(&mats[c.material], ctl->dt_g2p, c.s.C, c.s.F);
  for (int a = 0; a < 3; ++a) {
    if (out.x) out.x[3 * row + a] = c.s.x[a];
    if (out.v) out.v[3 * row + a] = c.s.v[a];
  }
  for (int a = 0; a < 9; ++a) {
    if (out.C) out.C[9 * row + a] = c.s.C[a];
    if (out.F) out.F[9 * row + a] = c.s.F[a];
  }
  if (out.mass) out.mass[row] = c.mass;
  if (out.vol0) out.vol0[row] = c.vol0;
  if (out.logjp) out.logjp[row] = c.s.logjp;
  if (out.material) out.material[row] = c.material;
  if (out.id) out.id[row] = pid[p * LANES + lane];
  if (out.owner) out.owner[row] = owner;
}

/* k_capture for compact packets: a thread a slot. */
__global__ static void k_capture_compact(size_t np, const uint32_t *pk, const uint64_t *pid, const int2 *hdr,
                                         const int32_t *pb_coord, const uint64_t *own, const compact_kind *kinds,
                                         compact_frame f, const uint32_t *start, int32_t owner, capture_out out,
                                         const material_params *mats, const step_ctl *ctl) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  const size_t p = i / LANES;
  const int lane = (int)(i % LANES);
  if (p >= np || lane >= hdr[p].y) return;
  capture_compact_lane(pk, hdr, pb_coord, own, kinds, f, pid, p, lane, start[p] + (size_t)lane, owner, out, mats, ctl);
}

/* Queues the numbering of s's rows on s->stream: each packet's live lanes into the sort's scratch
 * vals[0], their exclusive scan (each packet's first row, download's order) into vals[1]. */
static int queue_row_starts(cuda_state *s) {
  const size_t np = s->n_packets;
  cudaStream_t st = s->stream;
  uint32_t *count = dp<uint32_t>(s->vals[0]), *start = dp<uint32_t>(s->vals[1]); /* the sort's scratch, >= np */
  k_packet_counts<<<blocks_for(np, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(np, dp<int2>(s->hdr), count);
  LAUNCHED("k_packet_counts");
  CUB_RUN(cub::DeviceScan::ExclusiveSum(temp_ptr, temp_bytes, count, start, (int)np, st));
  return DR_OK;
}

/* Waits for the numbering and checks that the packets hold the particles counted (what: the
 * caller, for the message). */
static int check_row_starts(cuda_state *s, const char *what) {
  int last_start = 0, last_count = 0;
  DR_TRY(cuda_read_count(s, dp<uint32_t>(s->vals[1]) + s->n_packets - 1, &last_start)); /* waits for the stream */
  DR_TRY(cuda_read_count(s, dp<uint32_t>(s->vals[0]) + s->n_packets - 1, &last_count));
  if ((size_t)last_start + (size_t)last_count != s->n)
    return dr_fail(DR_EINTERNAL, "cuda backend: %s: %zu particles in the packets, %zu expected", what,
                   (size_t)last_start + (size_t)last_count, s->n);
  return DR_OK;
}

/* Queues the snapshot of this GPU's particles (the attributes of mask) into s->snap on s->stream,
 * its vectors exact (DVEC_EXACT: no headroom, as the device's bytes a particle are the plan's
 * bound; kept while the particles do not grow), the owner left out (the member's one value, which
 * fetch writes on the host); with sim_params.snap_host into pinned host memory instead
 * (snapshot_host_queue). */
static int snapshot_host_queue(cuda_state *s, unsigned mask);

static int snapshot_queue(cuda_state *s, unsigned mask) {
  s->snap_n = 0;
  s->snap_mask = mask;
  if (s->n == 0) return DR_OK;
  if (s->prm.snap_host) return snapshot_host_queue(s, mask);
  for (int a = 0; a < PARTICLE_ATTRS; ++a)
    if ((mask & ~PA_BIT(owner)) >> a & 1u) DVEC_EXACT(s->snap[a], s->n * particle_attrs[a].bytes, "frame snapshot");
  const size_t np = s->n_packets;
  cudaStream_t st = s->stream;
  DR_TRY(queue_row_starts(s));
  const uint32_t *start = dp<uint32_t>(s->vals[1]);
#define SNAP_(field, type) (mask & PA_BIT(field) ? dp<type>(s->snap[PA_##field]) : NULL)
  const capture_out o = {SNAP_(x, float),    SNAP_(v, float),        SNAP_(C, float),    SNAP_(F, float),
                         SNAP_(mass, float), SNAP_(vol0, float),     SNAP_(logjp, float), SNAP_(id, uint64_t),
                         SNAP_(material, int32_t), NULL};
#undef SNAP_
  const int32_t owner = s->prm.rank * 256 + s->me;
  if (s->compact) {
    k_capture_compact<<<blocks_for(np * LANES, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        np, dp<uint32_t>(s->pk), dp<uint64_t>(s->pid), dp<int2>(s->hdr), dp<int32_t>(s->pb_coord),
        dp<uint64_t>(s->keys[1]), dp<compact_kind>(s->d_kinds), s->cframe, start, owner, o,
        dp<material_params>(s->d_mats), dp<step_ctl>(s->ctl));
    LAUNCHED("k_capture_compact");
    return DR_OK;
  }
  k_capture<<<blocks_for(np * LANES, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      np, dp<float>(s->pk), dp<uint64_t>(s->pid), dp<int2>(s->hdr), start, owner, o);
  LAUNCHED("k_capture");
  return DR_OK;
}

/* The snapshot's end on one GPU: waits, and checks that the packets held the particles counted. */
static int snapshot_done(cuda_state *s) {
  if (s->n == 0) return DR_OK;
  DR_TRY(check_row_starts(s, "snapshot"));
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
  if (mask & PA_BIT(owner))
    for (size_t i = 0; i < count; ++i) dst->owner[at + i] = s->prm.rank * 256 + s->me;
  if (s->prm.snap_host) { /* the snapshot is on the host already */
    for (int a = 0; a < PARTICLE_ATTRS; ++a) {
      if (!((mask & ~PA_BIT(owner)) >> a & 1u)) continue;
      const size_t b = particle_attrs[a].bytes;
      memcpy((char *)particles_attr(dst, a) + at * b, (const char *)s->snap_h[a] + first * b, count * b);
    }
    return DR_OK;
  }
  CU(cudaSetDevice(s->device));
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
  if (!dst) return;
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
    if (out.id && lane < m && row >= first && row < first + count) out.id[row - first] = pid[p * LANES + lane];
  }
}

/* k_capture_rows for compact packets: a warp a packet as k_capture_rows walks them, each lane
 * decoding its own slot; mats and ctl as capture_compact_lane's (a frame's, or NULL: a checkpoint's). */
__global__ static void k_capture_rows_compact(size_t np, size_t p0, const uint32_t *pk, const uint64_t *pid,
                                              const int2 *hdr, const int32_t *pb_coord, const uint64_t *own,
                                              const compact_kind *kinds, compact_frame f, const uint32_t *start,
                                              size_t first, size_t count, capture_out out,
                                              const material_params *mats, const step_ctl *ctl) {
  const size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / LANES;
  const size_t warps = (gridDim.x * (size_t)blockDim.x) / LANES;
  const int lane = threadIdx.x % LANES;
  for (size_t p = p0 + warp; p < np; p += warps) {
    const size_t o = start[p];
    if (o >= first + count) return;
    const size_t row = o + (size_t)lane;
    if (lane < hdr[p].y && row >= first && row < first + count)
      capture_compact_lane(pk, hdr, pb_coord, own, kinds, f, pid, p, lane, row - first, 0, out, mats, ctl);
  }
}

/* A checkpoint's rows: every attribute but the owner (the member's one value, written on the host). */
#define ROWS_MASK (((1u << PARTICLE_ATTRS) - 1u) & ~PA_BIT(owner))

/* Where each attribute of mask (the owner never) starts in a buffer of count rows, attribute after
 * attribute, each from a multiple of 8 bytes (the ids'); returns the bytes in all (memplan.c's
 * staging of a host snapshot counts them so). */
static size_t rows_layout(size_t count, unsigned mask, size_t off[PARTICLE_ATTRS]) {
  size_t bytes = 0;
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    off[a] = bytes;
    if (a != PA_owner && (mask >> a & 1u)) bytes += (count * particle_attrs[a].bytes + 7) / 8 * 8;
  }
  return bytes;
}

/* Numbers the rows of s's packets (as the snapshot does) and checks them. */
static int number_rows(cuda_state *s) {
  DR_TRY(queue_row_starts(s));
  return check_row_starts(s, "fetch_rows");
}

/* Rows [first, first + count) of the numbered packets, the attributes of mask, gathered into buf on
 * s->stream (rows_layout's places, row r at r - first). frame: a frame's F (compact storage: the
 * record's advanced by the last G2P, as the device snapshot's), else the record's (a checkpoint's). */
static int gather_rows(cuda_state *s, dvec *buf, size_t first, size_t count, unsigned mask, bool frame) {
  size_t off[PARTICLE_ATTRS];
  DVEC_EXACT(*buf, rows_layout(count, mask, off), frame ? "frame snapshot (a chunk staged)" : "checkpoint rows");
  char *base = (char *)buf->ptr;
#define ROWS_(field, type) (mask & PA_BIT(field) ? (type *)(base + off[PA_##field]) : NULL)
  const capture_out o = {ROWS_(x, float),    ROWS_(v, float),    ROWS_(C, float),        ROWS_(F, float),
                         ROWS_(mass, float), ROWS_(vol0, float), ROWS_(logjp, float),    ROWS_(id, uint64_t),
                         ROWS_(material, int32_t), NULL};
#undef ROWS_
  const size_t np = s->n_packets, p0 = first / LANES, warps = np - p0 < count ? np - p0 : count;
  if (s->compact) {
    k_capture_rows_compact<<<blocks_for(warps * LANES, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->stream>>>(
        np, p0, dp<uint32_t>(s->pk), dp<uint64_t>(s->pid), dp<int2>(s->hdr), dp<int32_t>(s->pb_coord),
        dp<uint64_t>(s->keys[1]), dp<compact_kind>(s->d_kinds), s->cframe, dp<uint32_t>(s->vals[1]), first, count, o,
        frame ? dp<material_params>(s->d_mats) : NULL, frame ? dp<step_ctl>(s->ctl) : NULL);
    LAUNCHED("k_capture_rows_compact");
    return DR_OK;
  }
  k_capture_rows<<<blocks_for(warps * LANES, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->stream>>>(
      np, p0, dp<float>(s->pk), dp<uint64_t>(s->pid), dp<int2>(s->hdr), dp<uint32_t>(s->vals[1]), first, count, o);
  LAUNCHED("k_capture_rows");
  return DR_OK;
}

/* ---- the frame's snapshot in pinned host memory (sim_params.snap_host) ------------------------ */

/* Attribute a's host snapshot: exactly bytes of pinned memory (kept while the particles do not grow,
 * as the device's vectors), counted as the host's transfer memory (memplan.c plans them so). */
static int snap_host_reserve(cuda_state *s, int a, size_t bytes) {
  if (s->snap_h[a] && s->snap_h_bytes[a] >= bytes) return DR_OK;
  DR_TRY(cuda_snap_host_free(s, a));
  void *p = NULL;
  const cudaError_t e = cudaHostAlloc(&p, bytes > 0 ? bytes : 1, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return dr_fail(DR_ENOMEM, "cudaHostAlloc failed (%s:%d): %s: %zu bytes of pinned host memory for the frame "
                   "snapshot's %s", __FILE__, __LINE__, cudaGetErrorString(e), bytes, particle_attrs[a].name);
  }
  s->snap_h[a] = p;
  s->snap_h_bytes[a] = bytes;
  memtally_count(MEMTALLY_HOST, MT_TRANSFER, (int64_t)bytes);
  return DR_OK;
}

int cuda_snap_host_free(cuda_state *s, int a) {
  if (!s->snap_h[a]) return DR_OK;
  void *p = s->snap_h[a];
  memtally_count(MEMTALLY_HOST, MT_TRANSFER, -(int64_t)s->snap_h_bytes[a]);
  s->snap_h[a] = NULL;
  s->snap_h_bytes[a] = 0;
  CU(cudaFreeHost(p));
  return DR_OK;
}

/* snapshot_queue into pinned host memory: the rows numbered as the device snapshot's, then a chunk
 * of them at a time (MEM_CKPT_CHUNK, or DRIFT_FRAME_CHUNK's fewer) gathered into s->snap_stage and
 * copied to the host, all on s->stream (the next chunk's gather waits for the copy of the one before
 * from the same buffer); snapshot_done waits for the last. The device holds one chunk, not the
 * frame; the capture crosses PCIe while the steps wait. */
static int snapshot_host_queue(cuda_state *s, unsigned mask) {
  const unsigned want = mask & ~PA_BIT(owner);
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    dvec_free(&s->snap[a]); /* none on the device */
    if (want >> a & 1u) DR_TRY(snap_host_reserve(s, a, s->n * particle_attrs[a].bytes));
  }
  DR_TRY(queue_row_starts(s));
  const int fc = settings()->frame_chunk;
  const size_t chunk = mem_ckpt_rows(s->n, fc > 0 ? (size_t)fc : MEM_CKPT_CHUNK);
  TRACE("snapshot: %zu rows into pinned host memory, %zu at a time", s->n, chunk);
  for (size_t first = 0; first < s->n; first += chunk) {
    const size_t count = s->n - first < chunk ? s->n - first : chunk;
    size_t off[PARTICLE_ATTRS];
    DR_TRY(gather_rows(s, &s->snap_stage, first, count, want, true));
    rows_layout(count, want, off);
    for (int a = 0; a < PARTICLE_ATTRS; ++a) {
      if (!(want >> a & 1u)) continue;
      const size_t b = particle_attrs[a].bytes;
      CU(cudaMemcpyAsync((char *)s->snap_h[a] + first * b, (const char *)s->snap_stage.ptr + off[a], count * b,
                         cudaMemcpyDeviceToHost, s->stream));
    }
  }
  return DR_OK;
}

/* The rows fetch_rows reads of member s: those held, or its particles. */
static size_t rows_of(const cuda_state *s) { return s->holding ? s->rows_held : s->n; }

/* Rows first .. first + count - 1 of member s's particles (download's order) into dst's rows at
 * `at` ... Live (no hold_rows yet), on the caller's thread (the one that steps): gathered on the
 * device into s->rows, then copied on s->stream, after whatever the steps queued, into dst's
 * pinned memory; the call with first 0 numbers the rows, the later calls of the checkpoint read
 * them (backend.h: nothing steps between the calls). Held: copied from the rows hold_rows
 * gathered, on the legacy stream from any thread (the writer's: the steps' streams never touch
 * s->rows), s's device made the thread's current one. The owner is the member's one value, written
 * on the host. */
static int fetch_rows_member(cuda_state *s, size_t first, size_t count, particles *dst, size_t at) {
  const size_t n = rows_of(s);
  if (first > n || count > n - first)
    return dr_fail(DR_EINTERNAL, "cuda backend: fetch_rows of rows %zu .. %zu of %zu particles", first, first + count, n);
  if (count == 0) return DR_OK;
  int cur = -1;
  CU(cudaGetDevice(&cur));
  if (cur != s->device) CU(cudaSetDevice(s->device));
  size_t off[PARTICLE_ATTRS];
  if (s->holding) {
    rows_layout(s->rows_held, ROWS_MASK, off);
    for (int a = 0; a < PARTICLE_ATTRS; ++a) {
      if (a == PA_owner) continue;
      const size_t b = particle_attrs[a].bytes;
      CU(cudaMemcpy((char *)particles_attr(dst, a) + at * b, (const char *)s->rows.ptr + off[a] + first * b, count * b,
                    cudaMemcpyDeviceToHost));
    }
  } else {
    if (first == 0) DR_TRY(number_rows(s));
    DR_TRY(gather_rows(s, &s->rows, first, count, ROWS_MASK, false));
    rows_layout(count, ROWS_MASK, off);
    for (int a = 0; a < PARTICLE_ATTRS; ++a) {
      if (a == PA_owner) continue;
      const size_t b = particle_attrs[a].bytes;
      CU(cudaMemcpyAsync((char *)particles_attr(dst, a) + at * b, (const char *)s->rows.ptr + off[a], count * b,
                         cudaMemcpyDeviceToHost, s->stream));
    }
    CU(cudaStreamSynchronize(s->stream));
  }
  for (size_t i = 0; i < count; ++i) dst->owner[at + i] = s->prm.rank * 256 + s->me;
  return DR_OK;
}

int cuda_fetch_rows(void *state, size_t first, size_t count, particles *dst) {
  DR_TRY(fetch_rows_member((cuda_state *)state, first, count, dst, 0));
  dst->n = count;
  return DR_OK;
}

/* backend.h's hold_rows on one member: all its rows gathered into s->rows (120 B a particle, kept
 * for the next checkpoint: the memory plan's where it has room), on s->stream after the steps
 * queued, waited for. */
static int hold_rows_member(cuda_state *s) {
  if (s->n > 0) {
    DR_TRY(number_rows(s));
    DR_TRY(gather_rows(s, &s->rows, 0, s->n, ROWS_MASK, false));
    CU(cudaStreamSynchronize(s->stream));
  }
  s->rows_held = s->n;
  s->holding = 1;
  return DR_OK;
}

int cuda_hold_rows(void *state) { return hold_rows_member((cuda_state *)state); }

int island_hold_rows(void *state) {
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(hold_rows_member(I->m[k]));
  }
  return DR_OK;
}

/* The island's: its rows are the members' one after another (download's order); the range may
 * span members, each gives its part of it. Live, the calls come in row order, so each member's
 * first part starts at its row 0 (which numbers its rows); held rows are read in any order. */
int island_fetch_rows(void *state, size_t first, size_t count, particles *dst) {
  island *I = (island *)state;
  size_t base = 0, done = 0, total = 0;
  for (int k = 0; k < I->nm; ++k) total += rows_of(I->m[k]);
  if (first > total || count > total - first)
    return dr_fail(DR_EINTERNAL, "cuda backend: fetch_rows of rows %zu .. %zu of %zu particles", first, first + count,
                   total);
  for (int k = 0; k < I->nm && done < count; ++k) {
    const size_t m = rows_of(I->m[k]), from = first + done;
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

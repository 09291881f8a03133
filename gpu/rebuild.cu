// rebuild.cu - rebuild-mapping: the particles sorted by (particle block, cell), their particle
// blocks, packets and headers, the grid blocks (the 3x3x3 physical blocks of every particle
// block, sorted and unique), the hash table from code to dense index, and, under G2P2G, the primed
// sums moved to the new mapping (keep_primed). A rebuild runs only after every queued step of this
// member (and, on an island, of every member) has finished, so nothing reads the buffers it
// swaps or rewrites; it restarts at grid buffer 0 with buffer 1 cleared.

#include "cuda_state.h"
#include "block_table.cuh"
#include "compact_packets.cuh"

/* Linear probing; a slot is claimed with atomicCAS on the 64-bit key, so concurrent inserts of
 * different codes never share a slot. */
__global__ static void k_table_insert(size_t nb, const uint64_t *codes, unsigned long long *keys, int32_t *vals,
                                      size_t mask) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= nb) return;
  const unsigned long long code = codes[i];
  for (size_t h = table_hash(code) & mask;; h = (h + 1) & mask) {
    const unsigned long long old = atomicCAS(keys + h, TABLE_EMPTY, code);
    if (old == TABLE_EMPTY || old == code) {
      vals[h] = (int32_t)i;
      return;
    }
  }
}

/* ---- rebuild-mapping kernels -------------------------------------------------------------- */

/* Keys of every slot: particle block code (high bits) and cell inside it (low 6 bits); slots
 * beyond a packet's valid lanes get ~0 and sort last. K: 32 bits where the code and the cell fit
 * (6 + code_bits <= 32: a domain of up to 1024 blocks a side), which moves a third fewer bytes
 * through each pass of the sort and through k_heads and k_pblocks; else 64. */
template <typename K>
__global__ static void k_keys(size_t n_slots, const float *pk, const int2 *hdr, float3 origin, float inv_dx,
                              const uint8_t *gone, size_t n_gone, K *keys, uint32_t *vals) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n_slots) return;
  const size_t p = i / LANES;
  const int lane = (int)(i % LANES);
  vals[i] = (uint32_t)i;
  if (lane >= hdr[p].y || (i < n_gone && gone[i])) {
    keys[i] = ~(K)0;
    return;
  }
  const float *q = pk + p * PK_FLOATS + lane;
  const int b0 = bspline_base((q[(A_X + 0) * LANES] - origin.x) * inv_dx);
  const int b1 = bspline_base((q[(A_X + 1) * LANES] - origin.y) * inv_dx);
  const int b2 = bspline_base((q[(A_X + 2) * LANES] - origin.z) * inv_dx);
  const uint64_t code = sparse_block_code(sparse_particle_block(b0), sparse_particle_block(b1), sparse_particle_block(b2));
  keys[i] = (K)((code << 6) | (uint64_t)sparse_node_in_block(sparse_cell_in_particle_block(b0),
                                                             sparse_cell_in_particle_block(b1),
                                                             sparse_cell_in_particle_block(b2)));
}

/* k_keys for compact packets (compact_packets.cuh): each position decoded from the block its slot
 * measures it from (the packet's, or an appended slot's own, whose code own[] holds: keys[1], which
 * the sort overwrites only after this kernel; the appends keep its earlier slots' codes as it
 * grows), its new particle block and cell computed as
 * k_keys computes them from the floats, and the position measured from that block from then on
 * (compact_rebase_x, in place), so that the sort moves the words untouched into packets of that
 * block. A position the new block's offsets cannot hold (a particle that ran away: more than
 * eight cells from its block) counts in *far, which fails the rebuild. */
template <typename K>
__global__ static void k_keys_compact(size_t n_slots, uint32_t *pk, const int2 *hdr, const int32_t *pb_coord,
                                      const uint64_t *own, compact_frame f, float3 origin, float inv_dx,
                                      const uint8_t *gone, size_t n_gone, K *keys, uint32_t *vals, unsigned *far) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n_slots) return;
  const size_t p = i / LANES;
  const int lane = (int)(i % LANES);
  vals[i] = (uint32_t)i;
  if (lane >= hdr[p].y || (i < n_gone && gone[i])) {
    keys[i] = ~(K)0;
    return;
  }
  compact_record r;
  int32_t from[3];
  float x[3];
  cpk_load_x(pk, hdr, pb_coord, own, &f, p, lane, &r, from, x);
  const int b0 = bspline_base((x[0] - origin.x) * inv_dx);
  const int b1 = bspline_base((x[1] - origin.y) * inv_dx);
  const int b2 = bspline_base((x[2] - origin.z) * inv_dx);
  const int32_t to[3] = {sparse_particle_block(b0), sparse_particle_block(b1), sparse_particle_block(b2)};
  if (compact_rebase_x(&f, &r, from, to)) atomicAdd(far, 1u);
  else cpk_write(pk, p, lane, &r, 0, CPK_W1(COMPACT_BITS_X));
  const uint64_t code = sparse_block_code(to[0], to[1], to[2]);
  keys[i] = (K)((code << 6) | (uint64_t)sparse_node_in_block(sparse_cell_in_particle_block(b0),
                                                             sparse_cell_in_particle_block(b1),
                                                             sparse_cell_in_particle_block(b2)));
}

template <typename K> __device__ static inline int is_head(size_t i, const K *keys) {
  return i == 0 || (keys[i] >> 6) != (keys[i - 1] >> 6);
}

template <typename K> __global__ static void k_heads(size_t n, const K *keys, int32_t *head) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) head[i] = is_head(i, keys);
}

/* scan = inclusive sum of the heads: sorted particle i is in particle block scan[i] - 1. Each
 * head records its block's start, coordinates and 27 neighbour codes. In place on pblock. */
template <typename K>
__global__ static void k_pblocks(size_t n, const K *keys, int32_t *pblock, int32_t *pb_start,
                                 int32_t *pb_coord, uint64_t *nbr_codes) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t q = pblock[i] - 1;
  pblock[i] = q;
  if (i == n - 1) pb_start[q + 1] = (int32_t)n;
  if (!is_head(i, keys)) return;
  pb_start[q] = (int32_t)i;
  int c[3];
  sparse_block_coords((uint64_t)(keys[i] >> 6), c);
  for (int a = 0; a < 3; ++a) pb_coord[3 * q + a] = c[a];
  for (int di = -1; di <= 1; ++di)
    for (int dj = -1; dj <= 1; ++dj)
      for (int dk = -1; dk <= 1; ++dk)
        nbr_codes[27 * (size_t)q + sparse_neighbor(di, dj, dk)] = sparse_block_code(c[0] + di, c[1] + dj, c[2] + dk);
}

/* Packets of each particle block: fill (LANES: full packets) particles a packet at most. */
__global__ static void k_pb_packets(size_t n_pb, const int32_t *pb_start, int fill, int32_t *pb_packets) {
  const size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (q < n_pb) pb_packets[q] = (pb_start[q + 1] - pb_start[q] + fill - 1) / fill;
  if (q == n_pb) pb_packets[q] = 0;
}

/* Packet headers of each particle block (pb_packets now holds the exclusive scan). */
__global__ static void k_headers(size_t n_pb, const int32_t *pb_start, const int32_t *pb_packets, int fill,
                                 int2 *hdr) {
  const size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (q >= n_pb) return;
  const int count = pb_start[q + 1] - pb_start[q];
  for (int j = 0, p = pb_packets[q]; j * fill < count; ++j, ++p)
    hdr[p] = make_int2((int)q, min(fill, count - j * fill));
}

/* The particles' move into their new packets (reorder), one group of attributes at a time through
 * scratch that the rebuild no longer needs. A packet's layout is [packet][attribute][lane], so the
 * words of attribute a of every packet, old or new, are the same set of offsets (a * LANES + lane
 * within PK_FLOATS): writing a's new values overwrites only a's old ones. Once every particle's a
 * is gathered (k_reorder_gather, in sorted order: scratch i holds sorted particle i's), the new
 * layout's a can be written (k_reorder_put) over the old in the same buffer; the other attributes
 * are untouched until their own pass. Ids (one slot array) the same, in the last pass. */
#define REORDER_SLOTS 6 /* floats a particle of scratch in a pass (reorder) */
typedef struct reorder_pass {
  float *sc[REORDER_SLOTS]; /* [n] each: attribute a0 + g of sorted particle i at sc[g][i] */
  uint64_t *ids;            /* [n] the ids, in the pass that moves them; else NULL */
  int a0, na;
  size_t stride;            /* words a packet: pk_words (a compact packet's words move as floats, bit for bit) */
} reorder_pass;

/* Sorted particle i's attributes of the pass (and its id) from old slot perm[i] into the scratch. */
__global__ static void k_reorder_gather(size_t n, const uint32_t *__restrict__ perm, const float *src,
                                        const uint64_t *src_id, reorder_pass ps) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint32_t from = perm[i];
  const float *q = src + (size_t)(from / LANES) * ps.stride + from % LANES;
  float v[REORDER_SLOTS];
  for (int g = 0; g < REORDER_SLOTS; ++g)
    if (g < ps.na) v[g] = q[(ps.a0 + g) * LANES]; /* every load in flight before the stores */
  for (int g = 0; g < REORDER_SLOTS; ++g)
    if (g < ps.na) ps.sc[g][i] = v[g];
  if (ps.ids) ps.ids[i] = src_id[from];
}

/* New slot (packet p, lane) of particle block q = hdr[p].x holds sorted particle
 * pb_start[q] + (p - pb_packets[q]) fill + lane (k_headers' packets); lanes past hdr[p].y keep
 * whatever they held, as no one reads them. */
__global__ static void k_reorder_put(size_t n_slots, const int2 *__restrict__ hdr, const int32_t *__restrict__ pb_start,
                                     const int32_t *__restrict__ pb_packets, int fill, reorder_pass ps, float *dst,
                                     uint64_t *dst_id) {
  const size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (j >= n_slots) return;
  const size_t p = j / LANES;
  const int lane = (int)(j % LANES);
  const int2 h = hdr[p];
  if (lane >= h.y) return;
  const size_t i = (size_t)pb_start[h.x] + (p - (size_t)pb_packets[h.x]) * fill + lane;
  float v[REORDER_SLOTS];
  for (int g = 0; g < REORDER_SLOTS; ++g)
    if (g < ps.na) v[g] = ps.sc[g][i]; /* every load in flight before the stores */
  float *d = dst + p * ps.stride + lane;
  for (int g = 0; g < REORDER_SLOTS; ++g)
    if (g < ps.na) d[(ps.a0 + g) * LANES] = v[g];
  if (ps.ids) dst_id[j] = ps.ids[i];
}

__global__ static void k_pb_nbr(size_t m, const uint64_t *nbr_codes, const unsigned long long *keys,
                                const int32_t *vals, size_t mask, int32_t *pb_nbr) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < m) pb_nbr[i] = table_find(keys, vals, mask, nbr_codes[i]);
}

/* G2P2G keeps its primed sums across a rebuild-mapping (keep_primed; the argument that every
 * touched old block is in the new mapping is there). The new dense index of a touched old block
 * is its position among the new mapping's sorted unique codes (what k_table_insert stores), found
 * by binary search; this runs before the host reads the new block count (rc->n, on the device
 * until then), so that a missing block comes back with that read, without a sync of its own. */
__global__ static void k_remap_find(size_t n_old, const uint64_t *__restrict__ old_code,
                                    const uint8_t *__restrict__ old_touched, const uint64_t *__restrict__ code,
                                    rebuild_count *rc, int32_t *__restrict__ to_new) {
  const size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (b >= n_old) return;
  int32_t j = -1;
  if (old_touched[b]) {
    const uint64_t c = old_code[b];
    const int n = rc->n;
    int lo = 0, hi = n; /* the first position whose code is >= c */
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (code[mid] < c) lo = mid + 1;
      else hi = mid;
    }
    if (lo < n && code[lo] == c) {
      j = lo;
    } else { /* plain stores, every writer stores 1 to lost; any one code is reported */
      rc->lost_code = c;
      rc->lost = 1;
    }
  }
  to_new[b] = j;
}

/* Moves the primed sums of every touched old block to its new index and marks it touched there
 * (the new buffers are cleared before). One thread per (old block, node); a node's words of a
 * block are copied whatever the channel layout: the 4 floats nd + 64 k of grid, the 3 of grid0
 * (ASFLIP), or the ich int64 of igrid (deterministic mode, where P2G writes only those). Distinct
 * old codes have distinct new indices, so no two threads write one place. */
__global__ static void k_remap_move(size_t n_old, const int32_t *__restrict__ to_new, const float *__restrict__ old_g,
                                    float *__restrict__ g, const float *__restrict__ old_g0, float *__restrict__ g0,
                                    const long long *__restrict__ old_ig, long long *__restrict__ ig, int ich,
                                    uint8_t *__restrict__ touched) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n_old * BLOCK_NODES) return;
  const size_t b = i / BLOCK_NODES;
  const int nd = (int)(i % BLOCK_NODES);
  const int32_t j = to_new[b];
  if (j < 0) return; /* untouched: its sums are zeros (k_grid cleared it before the primed P2G) */
  if (old_g)
    for (int w = nd; w < BLOCK_FLOATS; w += BLOCK_NODES) g[(size_t)j * BLOCK_FLOATS + w] = old_g[b * BLOCK_FLOATS + w];
  if (old_g0)
    for (int w = nd; w < OLD_FLOATS; w += BLOCK_NODES) g0[(size_t)j * OLD_FLOATS + w] = old_g0[b * OLD_FLOATS + w];
  if (old_ig)
    for (int ch = 0; ch < ich; ++ch)
      ig[((size_t)j * ich + ch) * BLOCK_NODES + nd] = old_ig[(b * ich + ch) * BLOCK_NODES + nd];
  if (nd == 0) touched[j] = 1;
}
/* A rebuild-mapping's start: every particle is in its block again, so the flag goes, and a
 * voided step (begin_step) is no longer held back. A frame's own end (done, not voided) stays. */
__global__ static void k_unvoid(step_ctl *c) {
  c->leave = 0;
  if (c->voided) c->done = 0;
  c->voided = 0;
}

/* Step 5 of a rebuild-mapping: the n sorted particles (old slot vals[1][i]) into the n_packets
 * packets whose headers k_headers wrote, in place (the kernels above) through scratch the rebuild
 * is done with: the sort's keys[0] and keys[1] (2 floats a particle each: their capacity is 8 B a
 * slot of the old packets, and n <= those slots), its unsorted indices vals[0] and the heads
 * (1 float each). vals[1], the permutation, is read by every pass. Where the new packets outgrow a
 * buffer, the particles move into a new one instead (memsizes.h's rule), which replaces the old
 * at the end: only then are two copies of that buffer held. */
static int reorder_passes(cuda_state *s, size_t n_packets, int fill, float *pk, uint64_t *pid) {
  static_assert(PK_ATTRS % REORDER_SLOTS > 0 && PK_ATTRS % REORDER_SLOTS <= REORDER_SLOTS - 2 &&
                    COMPACT_WORDS % REORDER_SLOTS > 0 && COMPACT_WORDS % REORDER_SLOTS <= REORDER_SLOTS - 2,
                "reorder: the last pass has room for the ids (two floats a particle) beside its attributes");
  const int attrs = s->compact ? COMPACT_WORDS : PK_ATTRS;
  const size_t n = s->n, n_slots = n_packets * LANES;
  cudaStream_t st = s->stream;
  float *k0 = dp<float>(s->keys[0]), *k1 = dp<float>(s->keys[1]);
  float *slot[REORDER_SLOTS] = {k0, k0 + n, k1, k1 + n, dp<float>(s->vals[0]), dp<float>(s->head)};
  for (int a0 = 0; a0 < attrs; a0 += REORDER_SLOTS) {
    reorder_pass ps;
    memset(&ps, 0, sizeof ps);
    ps.a0 = a0;
    ps.na = attrs - a0 < REORDER_SLOTS ? attrs - a0 : REORDER_SLOTS;
    ps.stride = pk_words(s);
    if (a0 + ps.na < attrs) {
      for (int g = 0; g < ps.na; ++g) ps.sc[g] = slot[g];
    } else { /* the last: the ids in keys[1], the attributes in the other slots */
      const int other[REORDER_SLOTS - 2] = {0, 1, 4, 5};
      for (int g = 0; g < ps.na; ++g) ps.sc[g] = slot[other[g]];
      ps.ids = (uint64_t *)k1;
    }
    k_reorder_gather<<<blocks_for(n, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        n, dp<uint32_t>(s->vals[1]), dp<float>(s->pk), dp<uint64_t>(s->pid), ps);
    LAUNCHED("k_reorder_gather");
    k_reorder_put<<<blocks_for(n_slots, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        n_slots, dp<int2>(s->hdr), dp<int32_t>(s->pb_start), dp<int32_t>(s->pb_packets), fill, ps, pk, pid);
    LAUNCHED("k_reorder_put");
  }
  return DR_OK;
}

static int reorder(cuda_state *s, size_t n_packets, int fill) {
  const size_t pk_bytes = n_packets * pk_words(s) * sizeof(float), id_bytes = n_packets * LANES * sizeof(uint64_t);
  dvec pk_new = s->pk, pid_new = s->pid; /* the pool and stream of the buffers they would replace */
  pk_new.ptr = pid_new.ptr = NULL;
  pk_new.bytes = pid_new.bytes = 0;
  int rc = DR_OK;
  if (pk_bytes > s->pk.bytes)
    rc = dvec_reserve_at(&pk_new, pk_bytes, 0, "particle packets", __FILE__, __LINE__);
  if (rc == DR_OK && id_bytes > s->pid.bytes)
    rc = dvec_reserve_at(&pid_new, id_bytes, 0, "particle ids", __FILE__, __LINE__);
  if (rc == DR_OK)
    rc = reorder_passes(s, n_packets, fill, dp<float>(pk_new.ptr ? pk_new : s->pk),
                        dp<uint64_t>(pid_new.ptr ? pid_new : s->pid));
  if (rc == DR_OK && pk_new.ptr) rc = dvec_take(&s->pk, &pk_new);
  if (rc == DR_OK && pid_new.ptr) rc = dvec_take(&s->pid, &pid_new);
  dvec_free(&pk_new); /* left only where something failed */
  dvec_free(&pid_new);
  return rc;
}

/* The buffers through which k_g2p leaves particles to k_collide, for n_packets packets (only in
 * scenes with a slip or separate collider). */
int rebuild_push_buffers(cuda_state *s, size_t n_packets) {
  if (!s->push) return DR_OK;
  DVEC(s->push_mask, n_packets * sizeof(unsigned), "particle collision step");
  DVEC(s->push_room, n_packets * LANES * sizeof(float), "particle collision step");
  return DR_OK;
}

/* G2P2G across a rebuild-mapping. While primed, grid[par] holds the next step's P2G, and that
 * P2G already applied the step's plastic return mapping to the particles' F and logJp; running
 * P2G again on the new mapping would apply it twice (NACC: hardening twice, since the hardened
 * p0 moves the yield surface). So the sums are kept: before the rebuild replaces them, the old
 * block codes, touched[par] and the sums of par (grid and, with ASFLIP, grid0; igrid in
 * deterministic mode) are swapped into the old_* buffers (no copy; the buffers that come in are
 * resized and cleared by the rebuild like any other), k_remap_find gives each touched old block
 * its new index, and after the new mapping is built k_remap_move puts its sums there, in buffer
 * 0 (the rebuild restarts at parity 0), with buffer 1 cleared and untouched, as a step expects
 * its next buffer.
 *
 * Every touched old block is in the new mapping. A block is touched only where the primed P2G
 * wrote (the mark goes with the write, p2g_warp; k_grid cleared the buffer's other marks before
 * it), i.e. at the stencil nodes b..b+2 of some particle's base node b, and that scatter is
 * complete: the G2P2G zone test (k_g2p2g's zone) leaves a cell of slack for the move before
 * it and one per queued step (the top of gpu/backend_cuda.cu), so each stencil lay inside the particle's
 * old physical blocks (a particle faster than DR_RUNAWAY_CELLS, or one whose stencil left them,
 * is flagged, step_fail_bad, and the run stops). Nothing moves the particles between that scatter
 * and this rebuild, which assigns each to the particle block P = (b + 1) >> 2 of the same base
 * node (k_keys computes b as locate() does), so b - 4P is in [-1, 2] and the stencil in [-1, 4]
 * from 4P, inside the 3x3x3 physical blocks of P (nodes -4..7 from 4P), all of which the new
 * mapping holds. k_remap_find checks it anyway: a missing block fails the run (remap_lost). */
static int keep_primed(cuda_state *s, size_t old_nb) {
  const int q = s->par;
  dvec_swap(&s->block_code, &s->old_code);
  dvec_swap(&s->touched[q], &s->old_touched);
  if (s->det) { /* P2G wrote only the int sums */
    dvec_swap(&s->igrid[q], &s->old_igrid);
  } else {
    dvec_swap(&s->grid[q], &s->old_grid);
    if (s->asflip) dvec_swap(&s->grid0[q], &s->old_grid0);
  }
  DVEC(s->old_to_new, old_nb * sizeof(int32_t), "grid blocks (G2P2G across a rebuild)");
  return DR_OK;
}

static int remap_lost(const cuda_state *s, const rebuild_count *rc) {
  int c[3];
  sparse_block_coords(rc->lost_code, c);
  return dr_fail(DR_EINTERNAL,
                 "cuda backend: rebuild-mapping %llu under G2P2G: grid block %llu (block coordinates %d %d %d) holds "
                 "primed P2G sums but is not among the %d blocks of the new mapping, which holds the 3x3x3 physical "
                 "blocks of every particle's block (keep_primed): a particle scattered outside them",
                 (unsigned long long)s->rebuilds, rc->lost_code, c[0], c[1], c[2], rc->n);
}

/* Steps 1 and 2 of a rebuild-mapping (rebuild_now) with sort keys of K bits (k_keys). */
template <typename K> static int sort_particles(cuda_state *s, int end_bit) {
  const size_t n = s->n, n_slots = s->n_packets * LANES;
  cudaStream_t st = s->stream;
  const float3 origin = make_float3(s->origin[0], s->origin[1], s->origin[2]);
  const int ns = (int)n_slots, ni = (int)n;
  TRACE("rebuild: %d-bit sort keys", (int)(8 * sizeof(K)));

  /* 1. Keys of every slot and a stable radix sort: valid particles first, by block and cell. The
   *    sort runs through CUB's double buffer, between keys[0] and keys[1] (vals likewise), so that
   *    its temporary storage holds no copy of the pairs (12 B a slot); the sorted keys and slots
   *    are then swapped into keys[1] and vals[1] where the passes left them in [0]. */
  if (s->compact) {
    unsigned *far = dp<unsigned>(s->count);
    CU(cudaMemsetAsync(far, 0, sizeof(unsigned), st));
    k_keys_compact<K><<<blocks_for(n_slots, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        n_slots, dp<uint32_t>(s->pk), dp<int2>(s->hdr), dp<int32_t>(s->pb_coord), dp<uint64_t>(s->keys[1]), s->cframe,
        origin, s->inv_dx, dp<uint8_t>(s->gone), s->n_gone, dp<K>(s->keys[0]), dp<uint32_t>(s->vals[0]), far);
    LAUNCHED("k_keys_compact");
    int n_far = 0;
    DR_TRY(cuda_read_count(s, (const int *)far, &n_far));
    if (n_far > 0)
      return dr_fail(DR_EPHYSICS,
                     "cuda backend, compact storage: rebuild-mapping %llu: %d particles more than eight cells from "
                     "their particle block, beyond what a compact record's positions hold (a runaway step)",
                     (unsigned long long)s->rebuilds, n_far);
  } else {
    k_keys<K><<<blocks_for(n_slots, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        n_slots, dp<float>(s->pk), dp<int2>(s->hdr), origin, s->inv_dx, dp<uint8_t>(s->gone), s->n_gone,
        dp<K>(s->keys[0]), dp<uint32_t>(s->vals[0]));
    LAUNCHED("k_keys");
  }
  s->n_gone = 0; /* the sort drops them: they are the slots past the n valid particles */
  cub::DoubleBuffer<K> dk(dp<K>(s->keys[0]), dp<K>(s->keys[1]));
  cub::DoubleBuffer<uint32_t> dv(dp<uint32_t>(s->vals[0]), dp<uint32_t>(s->vals[1]));
  CUB_RUN(cub::DeviceRadixSort::SortPairs(temp_ptr, temp_bytes, dk, dv, ns, 0, end_bit, st));
  if (dk.Current() != dp<K>(s->keys[1])) dvec_swap(&s->keys[0], &s->keys[1]);
  if (dv.Current() != dp<uint32_t>(s->vals[1])) dvec_swap(&s->vals[0], &s->vals[1]);
  const K *keys = dp<K>(s->keys[1]);

  /* 2. Particle blocks: runs of equal block code, numbered by an inclusive scan of the heads. */
  k_heads<K><<<blocks_for(n, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(n, keys, dp<int32_t>(s->head));
  LAUNCHED("k_heads");
  CUB_RUN(cub::DeviceScan::InclusiveSum(temp_ptr, temp_bytes, dp<int32_t>(s->head), dp<int32_t>(s->pblock), ni, st));
  int n_pb = 0;
  DR_TRY(cuda_read_count(s, dp<int32_t>(s->pblock) + (n - 1), &n_pb));
  s->n_pb = (size_t)n_pb;
  DVEC(s->pb_coord, 3 * s->n_pb * sizeof(int32_t), "particle blocks");
  DVEC(s->pb_start, (s->n_pb + 1) * sizeof(int32_t), "particle blocks");
  DVEC(s->pb_packets, (s->n_pb + 1) * sizeof(int32_t), "particle blocks");
  DVEC(s->pb_nbr, 27 * s->n_pb * sizeof(int32_t), "particle blocks");
  DVEC(s->nbr_codes[0], 27 * s->n_pb * sizeof(uint64_t), "physical block codes");
  DVEC(s->nbr_codes[1], 27 * s->n_pb * sizeof(uint64_t), "physical block codes");
  k_pblocks<K><<<blocks_for(n, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      n, keys, dp<int32_t>(s->pblock), dp<int32_t>(s->pb_start), dp<int32_t>(s->pb_coord),
      dp<uint64_t>(s->nbr_codes[0]));
  LAUNCHED("k_pblocks");
  return DR_OK;
}

/* The block codes of a rebuild-mapping on the host, early (ranks: cuda_blocks() asked for them once):
 * once the rebuild-mapping's count read has found them final, a copy on xstream beside the rest
 * of the rebuild-mapping (the particles' move, the hash table), so that cuda_blocks() waits for that
 * copy only and sim.c sets the rank exchange up while the device still moves the particles and
 * runs the next P2G (setup_exchange_during_p2g). Nothing writes block_code until the next
 * rebuild-mapping, which waits for the copy first (rebuild_codes_wait). */

int rebuild_codes_wait(cuda_state *s) {
  if (!s->codes_pending) return DR_OK;
  s->codes_pending = 0;
  CU(cudaEventSynchronize(s->codes_ev));
  return DR_OK;
}

static int codes_early(cuda_state *s, size_t nb) {
  if (!s->want_codes || nb == 0) return DR_OK;
  DR_TRY(rebuild_codes_wait(s));
  DR_TRY(cuda_host_pinned((void **)&s->h_codes, &s->h_codes_cap, sizeof(uint64_t) * nb, "the block codes"));
  DR_TRY(xdev_xstream_get(s));
  if (!s->codes_ev) CU(cudaEventCreateWithFlags(&s->codes_ev, cudaEventDisableTiming));
  CU(cudaMemcpyAsync(s->h_codes, s->block_code.ptr, nb * sizeof(uint64_t), cudaMemcpyDeviceToHost, s->xstream));
  CU(cudaEventRecord(s->codes_ev, s->xstream));
  s->codes_pending = 1;
  s->h_codes_of = s->rebuilds + 1;
  return DR_OK;
}

int rebuild_now(cuda_state *s) {
  const size_t n = s->n;
  cudaStream_t st = s->stream;
  s->graphs_valid = 0;
  const size_t old_nb = s->n_blocks;
  const int keep = s->primed && n > 0 && old_nb > 0; /* else the frame loop primes again */
  s->primed = keep;
  DR_TRY(rebuild_codes_wait(s)); /* the early copy reads block_code, which this rebuild-mapping rewrites */
  if (keep) DR_TRY(keep_primed(s, old_nb));
  ++s->rebuilds;
  s->need_rebuild = 0;
  s->order_stale = 1;
  s->shared_stale = 1;
  k_unvoid<<<1, 1, 0, st>>>(dp<step_ctl>(s->ctl)); /* every particle in its block again */
  LAUNCHED("k_unvoid");
  if (n == 0) {
    s->n_pb = s->n_blocks = s->n_packets = 0;
    s->n_gone = 0; /* emigrate took every particle: the slots it marked are gone with the packets */
    s->cc_total = 0;
    return DR_OK;
  }
  const int end_bit = 6 + s->code_bits;
  DR_TRY(end_bit <= 32 && !s->keys64 ? sort_particles<uint32_t>(s, end_bit) : sort_particles<uint64_t>(s, end_bit));
  const int n_pb = (int)s->n_pb;

  /* 3. Packets: each particle block starts a packet (the particles move in step 5). */
  const int fill = LANES; /* full packets: fewer particles a packet were slower everywhere (docs/performance.md) */
  k_pb_packets<<<blocks_for(s->n_pb + 1, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      s->n_pb, dp<int32_t>(s->pb_start), fill, dp<int32_t>(s->pb_packets));
  LAUNCHED("k_pb_packets");
  if (s->det) { /* physics/fixed.h: at most FIX_PB_MAX particles per particle block, so no node sum overflows */
    CUB_RUN(cub::DeviceReduce::Max(temp_ptr, temp_bytes, dp<int32_t>(s->pb_packets), dp<int>(s->count), n_pb, st));
    int most = 0;
    DR_TRY(cuda_read_count(s, s->count.ptr, &most));
    if (most > FIX_PB_MAX / fill)
      return dr_fail(DR_EPHYSICS,
                     "deterministic mode: more than %d particles in one block of 4x4x4 cells (%d packets of %d), beyond "
                     "what keeps the fixed-point node sums from overflowing (physics/fixed.h); the material is "
                     "compressed far beyond its sampling",
                     FIX_PB_MAX, most, fill);
  }
  CUB_RUN(cub::DeviceScan::ExclusiveSum(temp_ptr, temp_bytes, dp<int32_t>(s->pb_packets),
                                        dp<int32_t>(s->pb_packets), n_pb + 1, st));

  /* 4. Physical blocks: the 3x3x3 neighbourhoods of all particle blocks, sorted and unique, so
   *    that dense block indices follow Morton order. Before the move, so that one read brings
   *    both counts and the move (the longest part of the rebuild) runs while the host captures
   *    the step's graphs. */
  const int m = 27 * n_pb;
  CUB_RUN(cub::DeviceRadixSort::SortKeys(temp_ptr, temp_bytes, dp<uint64_t>(s->nbr_codes[0]),
                                         dp<uint64_t>(s->nbr_codes[1]), m, 0, s->code_bits, st));
  DVEC(s->block_code, (size_t)m * sizeof(uint64_t), "grid blocks");
  rebuild_count *drc = dp<rebuild_count>(s->count);
  CUB_RUN(cub::DeviceSelect::Unique(temp_ptr, temp_bytes, dp<uint64_t>(s->nbr_codes[1]), dp<uint64_t>(s->block_code),
                                    &drc->n, m, st));
  if (keep) { /* the new indices of the primed blocks, checked with this read (keep_primed) */
    CU(cudaMemsetAsync(&drc->lost, 0, sizeof(rebuild_count) - offsetof(rebuild_count, lost), st));
    k_remap_find<<<blocks_for(old_nb, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        old_nb, dp<uint64_t>(s->old_code), dp<uint8_t>(s->old_touched), dp<uint64_t>(s->block_code), drc,
        dp<int32_t>(s->old_to_new));
    LAUNCHED("k_remap_find");
  }
  CU(cudaMemcpyAsync(&drc->packets, dp<int32_t>(s->pb_packets) + s->n_pb, sizeof(int), cudaMemcpyDeviceToDevice, st));
  CU(cudaMemcpyAsync(s->h_rc, drc, sizeof(rebuild_count), cudaMemcpyDeviceToHost, st));
  CU(cudaStreamSynchronize(st));
  const rebuild_count rc = *s->h_rc;
  TRACE("count %d packets, %d grid blocks%s", rc.packets, rc.n,
        keep ? (rc.lost ? " (G2P2G: primed blocks lost)" : " (G2P2G: primed blocks kept)") : "");
  if (keep && rc.lost) return remap_lost(s, &rc);
  const int nb = rc.n, n_packets = rc.packets;
  DR_TRY(codes_early(s, (size_t)nb)); /* the stream is idle here: block_code is final */

  /* 5. The new packets' headers, then the particles moved into them (reorder). */
  DVEC(s->hdr, (size_t)n_packets * sizeof(int2), "packet headers"); /* the old headers' last reader was k_keys */
  k_headers<<<blocks_for(s->n_pb, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      s->n_pb, dp<int32_t>(s->pb_start), dp<int32_t>(s->pb_packets), fill, dp<int2>(s->hdr));
  LAUNCHED("k_headers");
  DR_TRY(reorder(s, (size_t)n_packets, fill));
  s->n_packets = (size_t)n_packets;
  DR_TRY(rebuild_push_buffers(s, s->n_packets));
  /* the sort buffers cover every slot of the next rebuild */
  for (int k = 0; k < 2; ++k) {
    DVEC(s->keys[k], s->n_packets * LANES * sizeof(uint64_t), "particle sort keys");
    DVEC(s->vals[k], s->n_packets * LANES * sizeof(uint32_t), "particle sort keys");
  }

  s->n_blocks = (size_t)nb;
  for (int k = 0; k < 2; ++k) {
    DVEC(s->grid[k], s->n_blocks * BLOCK_FLOATS * sizeof(float), "grid blocks");
    DVEC(s->touched[k], s->n_blocks, "grid blocks");
    CU(cudaMemsetAsync(s->grid[k].ptr, 0, s->n_blocks * BLOCK_FLOATS * sizeof(float), st));
    CU(cudaMemsetAsync(s->touched[k].ptr, 0, s->n_blocks, st));
    if (s->asflip) {
      DVEC(s->grid0[k], s->n_blocks * OLD_FLOATS * sizeof(float), "grid blocks (ASFLIP)");
      CU(cudaMemsetAsync(s->grid0[k].ptr, 0, s->n_blocks * OLD_FLOATS * sizeof(float), st));
    }
    if (s->det) {
      DVEC(s->igrid[k], s->n_blocks * int_floats(s) * sizeof(long long), "grid blocks (fixed point)");
      CU(cudaMemsetAsync(s->igrid[k].ptr, 0, s->n_blocks * int_floats(s) * sizeof(long long), st));
    }
  }
  s->par = 0;
  if (keep) { /* the primed sums into buffer 0, buffer 1 left cleared (keep_primed) */
    k_remap_move<<<blocks_for(old_nb * BLOCK_NODES, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        old_nb, dp<int32_t>(s->old_to_new), s->det ? NULL : dp<float>(s->old_grid), dp<float>(s->grid[0]),
        !s->det && s->asflip ? dp<float>(s->old_grid0) : NULL, s->asflip ? dp<float>(s->grid0[0]) : NULL,
        s->det ? dp<long long>(s->old_igrid) : NULL,
        fix_of(s, 0).ig, (int)(int_floats(s) / BLOCK_NODES), dp<uint8_t>(s->touched[0]));
    LAUNCHED("k_remap_move");
  }
  if (s->nm > 1) { /* the island: the grid update's output (or the owners) and the peers' block indices (k_tag) */
    if (s->atomics) {
      DVEC(s->own, s->n_blocks, "grid blocks (island owners)");
    } else {
      DVEC(s->vel, s->n_blocks * BLOCK_FLOATS * sizeof(float), "grid blocks (island velocities)");
      if (s->asflip) DVEC(s->vel0, s->n_blocks * OLD_FLOATS * sizeof(float), "grid blocks (island, ASFLIP)");
    }
    DVEC(s->tags, s->n_blocks * (size_t)(s->nm - 1) * sizeof(int32_t), "grid blocks (island tags)");
  }
  DVEC(s->shared, s->n_blocks, "grid blocks");
  CU(cudaMemsetAsync(s->shared.ptr, 0, s->n_blocks, st));

  /* 6. Hash table code -> dense index, then each particle block's 27 physical blocks. */
  size_t cap = 64;
  while (cap < 2 * s->n_blocks) cap <<= 1;
  if (cap > s->table_cap) { /* the power of two is the headroom: the table is at most half full */
    DVEC_EXACT(s->table_keys, cap * sizeof(uint64_t), "block hash table");
    DVEC_EXACT(s->table_vals, cap * sizeof(int32_t), "block hash table");
    s->table_cap = cap;
  }
  const size_t mask = s->table_cap - 1;
  CU(cudaMemsetAsync(s->table_keys.ptr, 0xff, s->table_cap * sizeof(uint64_t), st));
  k_table_insert<<<blocks_for(s->n_blocks, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      s->n_blocks, dp<uint64_t>(s->block_code), dp<unsigned long long>(s->table_keys), dp<int32_t>(s->table_vals),
      mask);
  LAUNCHED("k_table_insert");
  k_pb_nbr<<<blocks_for((size_t)m, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      (size_t)m, dp<uint64_t>(s->nbr_codes[0]), dp<unsigned long long>(s->table_keys), dp<int32_t>(s->table_vals),
      mask, dp<int32_t>(s->pb_nbr));
  LAUNCHED("k_pb_nbr");
  return colliders_slots(s);
}

// colliders.cu - where the colliders stand at each step (k_poses: poses and the boxes in which
// a collider can act) and the collider cache of mesh colliders without keyframes (its slots,
// numbered at each rebuild-mapping, and their level-set samples, refilled when the frame changes).
// The samples and poses are written on the step's stream before the step's k_grid reads them.

#include "cuda_state.h"

col_box colliders_box_local(const collider *c) {
  col_box b;
  float e = 0.0f;
  int all = 0;
  switch (c->geom.shape) {
  case SDF_SPHERE: e = c->geom.r; break;
  case SDF_CYLINDER: e = sqrtf(c->geom.r * c->geom.r + c->geom.half_height * c->geom.half_height); break;
  case SDF_BOX: break;
  case SDF_MESH: break; /* k_poses: the lattices of the frames at the pose (mesh_box) */
  default: all = 1; break; /* a plane: a half-space */
  }
  for (int i = 0; i < 3; ++i) {
    b.lo[i] = all ? -FLT_MAX : c->geom.shape == SDF_BOX ? -c->geom.half[i] : -e;
    b.hi[i] = all ? FLT_MAX : c->geom.shape == SDF_BOX ? c->geom.half[i] : e;
  }
  return b;
}

/* A mesh collider's box at pose P: the lattice of the frame (and of the next one where the pose
 * blends two): off its lattice a level set is +band (levelset.h). Of one frame or two, not of
 * the whole sequence: an animated figure sweeps much more than it covers at any time. */
__device__ static void mesh_box(const boundary_params &bp, const collider *c, const collider_pose &P, col_box *b) {
  for (int i = 0; i < 3; ++i) b->lo[i] = FLT_MAX, b->hi[i] = -FLT_MAX;
  const int last = P.deforming && P.frac > 0.0f ? 1 : 0;
  for (int f = 0; f <= last; ++f) {
    const levelset &L = bp.levelsets[c->geom.levelset + P.frame + f];
    for (int i = 0; i < 3; ++i) {
      b->lo[i] = fminf(b->lo[i], L.origin[i]);
      b->hi[i] = fmaxf(b->hi[i], L.origin[i] + (float)(L.dims[i] * LS_BRICK) * L.h);
    }
  }
}

/* Where the colliders are at the step's end (ctl->t_pose), for k_grid and the particle collision step
 * of k_g2p / k_collide / k_g2p2g (physics/boundary.h): one thread per collider. Also the world box
 * of each collider at that pose, widened by margin (m): wbox[k] for the grid update, and
 * wbox[n_colliders + k] for the particle collision step (empty for a sticky collider). */
__global__ static void k_poses(const step_ctl *__restrict__ ctl, boundary_params bp, collider_pose *__restrict__ poses,
                               const col_box *__restrict__ box, col_box *__restrict__ wbox, float margin,
                               const int *__restrict__ cc_index, int *__restrict__ cc_state, int cc_every) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (ctl->done || k >= bp.n_colliders) return;
  collider_pose P;
  collider_pose_at(&bp.colliders[k], bp.keys, ctl->t_pose, &P);
  poses[k] = P;
  /* the collider cache: samples of another frame (or none since the rebuild-mapping) are taken
   * anew by k_cc_fill, right after; the pose of a cached collider never changes (no keys).
   * cc_every (DRIFT_COLLIDER_CACHE=2) refills at every step: the same arithmetic on samples that
   * cannot be stale, against which tests check that a refill is never missed */
  const int q = cc_index ? cc_index[k] : -1;
  if (q >= 0) {
    const int key = 2 * P.frame + (P.deforming ? 1 : 0), need = cc_every || cc_state[2 * q] != key;
    cc_state[2 * q + 1] = need;
    if (need) cc_state[2 * q] = key;
  }
  col_box b = box[k];
  if (bp.colliders[k].geom.shape == SDF_MESH && !(b.lo[0] > b.hi[0])) mesh_box(bp, &bp.colliders[k], P, &b);
  col_box w;
  int empty = 0, all = 0;
  for (int i = 0; i < 3; ++i) {
    empty |= b.lo[i] > b.hi[i];
    all |= !(b.hi[i] - b.lo[i] < 1e30f);
  }
  for (int i = 0; i < 3; ++i) {
    if (empty || all) {
      w.lo[i] = empty ? FLT_MAX : -FLT_MAX;
      w.hi[i] = empty ? -FLT_MAX : FLT_MAX;
      continue;
    }
    float c = P.center[i], h = margin;
    for (int j = 0; j < 3; ++j) {
      c += P.R[3 * i + j] * 0.5f * (b.lo[j] + b.hi[j]);
      h += fabsf(P.R[3 * i + j]) * 0.5f * (b.hi[j] - b.lo[j]);
    }
    w.lo[i] = c - h, w.hi[i] = c + h;
  }
  wbox[k] = w;
  if (bp.colliders[k].type == BOUNDARY_STICKY)
    for (int i = 0; i < 3; ++i) w.lo[i] = FLT_MAX, w.hi[i] = -FLT_MAX;
  wbox[bp.n_colliders + k] = w;
}

/* The collider cache (DRIFT_COLLIDER_CACHE=2, a test hook, refills at every step): a mesh
 * collider without keyframes stands still, so a grid node's local point in it stays until the
 * next rebuild-mapping, and its level-set samples (collider_mesh_samples: phi, surface velocity and gradient of the frame
 * and of the next one) change only when the frame does (Crawling in Snow: every 62 steps at the
 * paper's step). The grid update blends them by the step's frac (collider_apply_cached, the same
 * arithmetic as collider_apply) instead of sampling two frames' lattices at each node near the
 * figure, the latency-bound part of its step (docs/performance.md). Slots: the grid blocks
 * within the union of the collider's lattices over its frames (cc_box), numbered at each
 * rebuild-mapping (k_cc_flag, a scan, k_cc_place); k_poses flags a refill when the frame
 * changes or after a rebuild-mapping (cc_state), and k_cc_fill refills every slot then. A node
 * outside the slots, or a collider with keys, takes collider_apply as before. */
__global__ static void k_cc_flag(size_t n_blocks, const uint64_t *__restrict__ block_code, float3 origin, float dx,
                                 col_box box, uint32_t *__restrict__ flag) {
  const size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (b >= n_blocks) return;
  int c[3];
  sparse_block_coords(block_code[b], c);
  const float o[3] = {origin.x, origin.y, origin.z};
  int hit = 1;
  for (int a = 0; a < 3; ++a) {
    const float lo = o[a] + (float)(4 * c[a]) * dx, hi = o[a] + (float)(4 * c[a] + 3) * dx;
    hit &= hi >= box.lo[a] && lo <= box.hi[a];
  }
  flag[b] = (uint32_t)hit;
}

/* Slots base + scan - 1 of the flagged blocks, for cached collider q (scan: inclusive). */
__global__ static void k_cc_place(size_t n_blocks, const uint32_t *__restrict__ flag, const uint32_t *__restrict__ scan,
                                  int base, int q, int32_t *__restrict__ slot, int2 *__restrict__ blocks) {
  const size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (b >= n_blocks) return;
  const int32_t k = flag[b] ? base + (int32_t)scan[b] - 1 : -1;
  slot[(size_t)q * n_blocks + b] = k;
  if (k >= 0) blocks[k] = make_int2((int)b, q);
}

/* Every slot's 64 nodes' samples, for the cached colliders k_poses flagged (a grid-stride loop:
 * a step without a refill returns after reading the flags). */
__global__ static void k_cc_fill(const step_ctl *__restrict__ ctl, size_t total, const int2 *__restrict__ blocks,
                                 int n_cc, const int *__restrict__ cc_state, cc_cols cols,
                                 const uint64_t *__restrict__ block_code, float3 origin, float dx,
                                 const __grid_constant__ boundary_params bp, const collider_pose *__restrict__ poses,
                                 mesh_samples *__restrict__ vals) {
  if (ctl->done) return;
  int any = 0;
  for (int q = 0; q < n_cc; ++q) any |= cc_state[2 * q + 1];
  if (!any) return; /* the usual step: no collider changed frame */
  const size_t n = total * BLOCK_NODES, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride) {
    const int2 b = blocks[i / BLOCK_NODES];
    if (!cc_state[2 * b.y + 1]) continue;
    const int nd = (int)(i % BLOCK_NODES), k = cols.k[b.y];
    int c[3];
    sparse_block_coords(block_code[b.x], c);
    /* the node as k_grid places it, and its local point as collider_apply finds it */
    const int idx[3] = {4 * c[0] + nd / 16, 4 * c[1] + (nd / 4) % 4, 4 * c[2] + nd % 4};
    const float o[3] = {origin.x, origin.y, origin.z};
    float xn[3], r[3], xl[3];
    for (int a = 0; a < 3; ++a) xn[a] = o[a] + (float)idx[a] * dx;
    const collider_pose P = poses[k];
    for (int a = 0; a < 3; ++a) r[a] = xn[a] - P.center[a];
    m3_apply_t(P.R, r, xl);
    mesh_samples m;
    collider_mesh_samples(&bp, &bp.colliders[k], &P, xl, &m);
    vals[i] = m;
  }
}

/* The collider cache's slots for the new mapping (see k_cc_flag): the blocks within each cached
 * collider's box, numbered; their samples are taken at the next grid update (cc_state: none). */
int colliders_slots(cuda_state *s) {
  s->cc_total = 0;
  if (s->n_cc == 0 || s->n_blocks == 0) return DR_OK;
  cudaStream_t st = s->stream;
  const size_t nb = s->n_blocks;
  DVEC(s->cc_slot, (size_t)s->n_cc * nb * sizeof(int32_t), "collider cache");
  DVEC(s->cc_scratch, 2 * (size_t)s->n_cc * nb * sizeof(uint32_t), "collider cache");
  int count[COLCACHE_MAX];
  for (int q = 0; q < s->n_cc; ++q) {
    uint32_t *flag = dp<uint32_t>(s->cc_scratch) + 2 * (size_t)q * nb, *scan = flag + nb;
    k_cc_flag<<<blocks_for(nb, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        nb, dp<uint64_t>(s->block_code), make_float3(s->origin[0], s->origin[1], s->origin[2]), s->prm.dx,
        s->cc_box[q], flag);
    LAUNCHED("k_cc_flag");
    CUB_RUN(cub::DeviceScan::InclusiveSum(temp_ptr, temp_bytes, flag, scan, (int)nb, st));
    DR_TRY(cuda_read_count(s, scan + nb - 1, &count[q]));
    s->cc_total += (size_t)count[q];
  }
  if (s->cc_total == 0) return DR_OK;
  DVEC(s->cc_blocks, s->cc_total * sizeof(int2), "collider cache");
  DVEC(s->cc_vals, s->cc_total * BLOCK_NODES * sizeof(mesh_samples), "collider cache");
  int base = 0;
  for (int q = 0; q < s->n_cc; ++q) {
    const uint32_t *flag = dp<uint32_t>(s->cc_scratch) + 2 * (size_t)q * nb, *scan = flag + nb;
    k_cc_place<<<blocks_for(nb, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(nb, flag, scan, base, q,
                                                                          dp<int32_t>(s->cc_slot), dp<int2>(s->cc_blocks));
    LAUNCHED("k_cc_place");
    base += count[q];
  }
  CU(cudaMemsetAsync(s->cc_state.ptr, 0xff, 2 * (size_t)s->n_cc * sizeof(int), st)); /* no samples yet */
  TRACE("collider cache: %zu grid blocks of %zu", s->cc_total, nb);
  return DR_OK;
}

/* The step's poses and world boxes (k_poses) and, where a cached collider changed frame, its
 * samples (k_cc_fill), on stream st before the step's grid update (step_grid_on). */
int colliders_poses(cuda_state *s, cudaStream_t st) {
  if (s->bnd.n_colliders > 0) {
    const bool cc = s->n_cc > 0 && s->cc_total > 0;
    k_poses<<<blocks_for((size_t)s->bnd.n_colliders, 64), 64, 0, st>>>(
        dp<step_ctl>(s->ctl), s->bnd, dp<collider_pose>(s->d_poses), dp<col_box>(s->d_colbox),
        dp<col_box>(s->d_wbox), s->prm.dx, cc ? dp<int>(s->cc_index) : NULL, cc ? dp<int>(s->cc_state) : NULL,
        s->cc_every);
    LAUNCHED("k_poses");
    if (cc) {
      const size_t want = blocks_for(s->cc_total * BLOCK_NODES, SIMPLE_THREADS);
      const unsigned ctas = (unsigned)(want < (size_t)CC_FILL_CTAS ? want : (size_t)CC_FILL_CTAS);
      k_cc_fill<<<ctas, SIMPLE_THREADS, 0, st>>>(
          dp<step_ctl>(s->ctl), s->cc_total, dp<int2>(s->cc_blocks), s->n_cc, dp<int>(s->cc_state), s->cc_col,
          dp<uint64_t>(s->block_code), make_float3(s->origin[0], s->origin[1], s->origin[2]), s->prm.dx, s->bnd,
          dp<collider_pose>(s->d_poses), dp<mesh_samples>(s->cc_vals));
      LAUNCHED("k_cc_fill");
    }
  }
  return DR_OK;
}

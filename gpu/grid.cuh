// grid.cuh - the grid update kernel (k_grid): velocity from momentum, gravity, walls and
// colliders, one thread per node, fused with the clear of the other grid buffer; on an island it
// adds the peers' copies of a block (read by P2P after the step's barrier) or, with p2p_atomics,
// updates the blocks this member owns. Included by gpu/step.cu alone, which launches it
// (step_grid_on). Its reads of peers' buffers are safe for the reasons given at the top of
// gpu/island_barrier.cu: a peer's P[par] is complete once the barrier is passed, and no member
// clears or refills it before every member has passed the next barrier.
#ifndef DRIFT_GPU_GRID_CUH
#define DRIFT_GPU_GRID_CUH

#include "views.cuh"

/* Grid update of buffer g (velocity from momentum, gravity, walls; untouched blocks skipped)
 * fused with clearing the other buffer where the step before touched it. One thread per node;
 * a node's channels read and written as one vector (node_load, node_store).
 * COL: the scene has colliders. The collider code (a mesh's level-set stencils) is compiled only
 * into the kernel of scenes that have them: 40 registers without (CUDA 13, sm_90), with them 80,
 * capped at 64 by GRID_MIN_CTAS (56 bytes spilled, on the collider path). */
#define PEER_BATCH 3    /* island peers whose copies of a block k_grid loads at once (3: every peer of 4 GPUs) */
#define GRID_MIN_CTAS 4 /* CUDA blocks of k_grid an SM must hold at once */
template <bool DET, bool COL>
__global__ static void __launch_bounds__(GRID_BLOCKS_PER_CTA * BLOCK_NODES, GRID_MIN_CTAS)
k_grid(step_ctl *__restrict__ ctl, GRID_PARAMS, int part, step_scalars sc, boundary_params bp, COLLIDER_PARAMS,
       island_view iv) {
  const float dx = sc.dx;
  const float3 origin = sc.origin, gravity = sc.gravity;
  if (ctl->done) return; /* uniform over the CUDA block */
  stamp(ctl, ST_GRID);
  if (blockIdx.x == 0 && threadIdx.x == 0 && ctl->projected) ctl->projected = 0; /* the P2G before took it */
  /* the j-th block, or with list (GRID_SHARED: the shared blocks, xdev_shared_list) the list's j-th of
   * *list_n; past either end none (n_blocks) */
  const size_t j = (size_t)blockIdx.x * GRID_BLOCKS_PER_CTA + threadIdx.x / BLOCK_NODES;
  const size_t blk = !list ? j : j < (size_t)*list_n ? (size_t)list[j] : n_blocks;
  const int nd = threadIdx.x % BLOCK_NODES; /* = sparse_node_in_block(li, lj, lk) */
  /* part (enum grid_part): blocks shared with other ranks, the others, or all */
  const int inside = blk < n_blocks && (part == GRID_ALL || (part & (shared[blk] ? GRID_SHARED : GRID_INTERIOR)));
  const int clear = inside && touched_next[blk];
  __syncthreads(); /* every thread has read its block's flag before one of them clears it */
  if (!inside) return;
  const int ich = g0 ? 7 : 4; /* DET: int channels per node */
  if (clear) {
    if (DET) { /* P2G writes only the int sums; the float grid is rewritten below where touched */
      for (int ch = 0; ch < ich; ++ch) ig_next[(blk * ich + ch) * BLOCK_NODES + nd] = 0;
    } else {
      node_store(g_next + blk * BLOCK_FLOATS, nd, make_float4(0.0f, 0.0f, 0.0f, 0.0f));
      if (g0_next)
        for (int ch = 0; ch < 3; ++ch) g0_next[blk * OLD_FLOATS + ch * BLOCK_NODES + nd] = 0.0f;
    }
    if (nd == 0) touched_next[blk] = 0;
  }
  if (!touched[blk]) return;
  /* p2p_atomics: a block another member owns holds only this member's part; k_pull copies the
   * owner's result, and the owner's copy already holds every part (k_push): no peer sums */
  if (iv.own && iv.own[blk] >= 0) return;
  const int peers = iv.own ? 0 : iv.np;
  float *gd = g + blk * BLOCK_FLOATS;
  float sum[4], sum0[3] = {0.0f, 0.0f, 0.0f};
  if (DET) {
    /* the fixed-point sums, own and the peers' copies (P2P, where they touched the block this
     * step), added as integers, so that the result does not depend on the split; then as floats,
     * once; a node without mass gets zeros */
    long long acc[7];
    const long long *ib = ig + blk * ich * BLOCK_NODES + nd;
    for (int ch = 0; ch < ich; ++ch) acc[ch] = ib[ch * BLOCK_NODES];
    for (int q = 0; q < peers; ++q) {
      const int32_t t = tags[blk * iv.np + q];
      if (t < 0 || !iv.peer_touched[q][t]) continue;
      const long long *pb = iv.peer_ig[q] + (size_t)t * ich * BLOCK_NODES + nd;
      for (int ch = 0; ch < ich; ++ch) acc[ch] += pb[ch * BLOCK_NODES];
    }
    const int empty = acc[0] == 0;
    sum[0] = empty ? 0.0f : fix_from(acc[0], inv_sm);
    for (int a = 1; a < 4; ++a) sum[a] = empty ? 0.0f : fix_from(acc[a], inv_sp);
    if (g0)
      for (int a = 0; a < 3; ++a) sum0[a] = empty ? 0.0f : fix_from(acc[4 + a], inv_sp);
  } else {
    const float4 own = node_load(gd, nd);
    sum[0] = own.x, sum[1] = own.y, sum[2] = own.z, sum[3] = own.w;
    if (g0)
      for (int a = 0; a < 3; ++a) sum0[a] = g0[blk * OLD_FLOATS + a * BLOCK_NODES + nd];
    /* island: the peers' copies of this block (P2P), where they touched it this step; PEER_BATCH
     * peers at a time, their flags and then their sums loaded side by side (one NVLink round trip
     * each instead of one per peer), added in peer order as one at a time would */
    for (int q0 = 0; q0 < peers; q0 += PEER_BATCH) {
      int32_t t[PEER_BATCH];
      float4 pv[PEER_BATCH];
#pragma unroll
      for (int j = 0; j < PEER_BATCH; ++j) t[j] = q0 + j < peers ? tags[blk * iv.np + q0 + j] : -1;
#pragma unroll
      for (int j = 0; j < PEER_BATCH; ++j)
        if (t[j] >= 0 && !iv.peer_touched[q0 + j][t[j]]) t[j] = -1;
#pragma unroll
      for (int j = 0; j < PEER_BATCH; ++j)
        if (t[j] >= 0) pv[j] = node_load(iv.peer_grid[q0 + j] + (size_t)t[j] * BLOCK_FLOATS, nd);
#pragma unroll
      for (int j = 0; j < PEER_BATCH; ++j) {
        if (t[j] < 0) continue;
        sum[0] += pv[j].x, sum[1] += pv[j].y, sum[2] += pv[j].z, sum[3] += pv[j].w;
        if (g0)
          for (int a = 0; a < 3; ++a)
            sum0[a] += iv.peer_grid0[q0 + j][(size_t)t[j] * OLD_FLOATS + a * BLOCK_NODES + nd];
      }
    }
  }
  /* one GPU and p2p_atomics: velocities in place; island: to vel, since peers read P[par] (see the island).
   * DET: the float buffers hold no sums (P2G writes only ig), so every channel is written. */
  float *out = vel ? vel + blk * BLOCK_FLOATS : gd;
  float *out0 = vel0 ? vel0 : g0;
  const float m = sum[0];
  if (m <= 0.0f) {
    if (vel || DET) node_store(out, nd, make_float4(0.0f, 0.0f, 0.0f, 0.0f));
    if (vel0 || (DET && g0))
      for (int a = 0; a < 3; ++a) out0[blk * OLD_FLOATS + a * BLOCK_NODES + nd] = 0.0f;
    return;
  }
  const float dt = ctl->dt;
  int c[3];
  sparse_block_coords(block_code[blk], c);
  const float gr[3] = {gravity.x, gravity.y, gravity.z}, o[3] = {origin.x, origin.y, origin.z};
  const float inv_m = 1.0f / m;
  float v[3];
  for (int a = 0; a < 3; ++a) v[a] = sum[a + 1] * inv_m + gr[a] * dt;
  if (g0) /* ASFLIP: the velocity before the update */
    for (int a = 0; a < 3; ++a) out0[blk * OLD_FLOATS + a * BLOCK_NODES + nd] = sum0[a] * inv_m;
  const int idx[3] = {4 * c[0] + nd / 16, 4 * c[1] + (nd / 4) % 4, 4 * c[2] + nd % 4};
  float xn[3];
  for (int a = 0; a < 3; ++a) xn[a] = o[a] + (float)idx[a] * dx;
  /* boundary_apply_posed, each collider only inside its box; poses at ctl->t_pose, the step's end (k_poses) */
  if (COL)
    for (int k = 0; k < bp.n_colliders; ++k) {
      if (!in_box(wbox[k], xn)) continue;
      const int q = cc_index ? cc_index[k] : -1;
      const int32_t slot = q >= 0 ? cc_slot[(size_t)q * n_blocks + blk] : -1;
      if (slot >= 0) collider_apply_cached(&bp, &bp.colliders[k], &poses[k], xn, &cc_vals[(size_t)slot * BLOCK_NODES + nd], v);
      else collider_apply(&bp, &bp.colliders[k], &poses[k], xn, v);
    }
  boundary_apply_faces(&bp, xn, v);
  node_store(out, nd, make_float4(m, v[0], v[1], v[2])); /* in place (one GPU), m is the mass read */
}

#endif

// g2p.cuh - G2P (k_g2p), the particle collision step it defers (k_collide) and the fused
// G2P2G step (k_g2p2g), as templates on ASFLIP, colliders and the material. Included by
// gpu/step.cu alone, which launches them. G2P reads the grid buffer of its step (or the island's
// vel, written by this member's own k_grid), never a buffer a peer may be writing.
#ifndef DRIFT_GPU_G2P_CUH
#define DRIFT_GPU_G2P_CUH

#include "compact_packets.cuh"
#include "views.cuh"

/* The particle collision step (physics/boundary.h) of one particle. Only the COL variants of
 * k_g2p and k_g2p2g call it (scenes with a slip or separate collider). Out of line, CUDA 13 for
 * sm_90 gives k_g2p 80 registers (ASFLIP: 80; without it 56 and 72) and k_g2p2g 96 instead of
 * 80 (ASFLIP: about 128 either way); inlined, every variant took about 128.
 * Scenes whose colliders are all sticky skip it too (boundary.h: sticky colliders keep what they
 * hold). Position and velocity travel by value. */
struct pushed {
  float x[3], v[3];
};
__device__ __noinline__ static pushed push_particle(const boundary_params *bp, const collider_pose *poses, pushed p,
                                                    float room) {
  boundary_push_posed(bp, poses, p.x, p.v, room);
  return p;
}

/* G2P: APIC velocity and affine matrix C = (4/dx^2) sum w v (x_i - x_p)^T, the deformation
 * update (constitutive_advance_F), advection clamped to the domain, the particle collision step,
 * the inner-free-zone check, largest speed, and the non-finite / runaway check. One warp per
 * packet; flags reduced over the warp first.
 * The G2P of one warp's packet p (all 32 lanes call it). OLD (ASFLIP): the velocity before the
 * update from grid0 (g2p_mats is then never NULL). MAT: G2P may read the material, where
 * g2p_mats is not NULL (false: the load and the fluid's branch of constitutive_advance_F are
 * compiled out: k_g2p without colliders 56 registers instead of 63, CUDA 13, sm_90). COL: the
 * scene has a slip or separate collider (cuda_state.push): COL_INLINE (k_g2p2g) takes the
 * particle collision step here; COL_DEFER (k_g2p) only tests each particle against the
 * colliders' world boxes (wbox, k_poses) and leaves those inside one to k_collide, which pushes
 * them and ends their G2P as here (push_mask: the lanes left; push_room: how far each may
 * move). So k_g2p keeps the registers of a G2P without colliders, and the
 * collision step's code runs only for particles near a collider. */
enum { COL_NONE = 0, COL_INLINE = 1, COL_DEFER = 2 };

/* The warp's flags: its largest speed, and from leave (leave_bits) whether a particle left the
 * inner free zone. */
__device__ __forceinline__ void warp_flags(step_ctl *ctl, unsigned speed_bits, unsigned leave) {
  speed_bits = __reduce_max_sync(FULL, speed_bits);
  leave = __reduce_or_sync(FULL, leave);
  if ((threadIdx.x & 31) == 0) {
    if (speed_bits) atomicMax(&ctl->vmax_bits, speed_bits);
    if (leave & 1u) atomicOr(&ctl->leave, 1u);
  }
}

/* A particle's flag along an axis from its base node b: 1 where it lies outside the inner free
 * zone [zone_lo, zone_hi] of its particle block P. */
__device__ __forceinline__ unsigned leave_bits(int b, int P, int zone_lo, int zone_hi) {
  const int off = b - BLOCK_EDGE * P;
  return off < zone_lo || off > zone_hi;
}

/* CPK: the packets hold compact records (compact_packets.cuh; cv their kinds and lattice): the lane's
 * record is decoded at the start (all but F, which only ASFLIP's OLD reads), its new x, v and C
 * encoded at the end from the packet's block, as the CPU backend rounds a particle at G2P's end
 * (physics/compact.h); F stays as P2G left it, which advances it from this C (the header of
 * compact.h); the collision step then runs inline (COL_DEFER would leave a particle half-finished
 * in a record). */
template <bool OLD, int COL, bool MAT, bool CPK = false>
__device__ __forceinline__ void g2p_warp(step_ctl *ctl, float dt, size_t p, const int2 *__restrict__ hdr,
                                         const int32_t *__restrict__ pb_coord, const int32_t *__restrict__ pb_nbr,
                                         float *__restrict__ pk, const uint64_t *__restrict__ pid, float3 origin,
                                         float3 dmin, float3 dmax, float dx, float inv_dx,
                                         const float *__restrict__ grid, int inner_lo, int inner_hi,
                                         const material_params *__restrict__ g2p_mats,
                                         const float *__restrict__ grid0, const boundary_params &bp,
                                         const collider_pose *__restrict__ poses, const col_box *__restrict__ wbox,
                                         unsigned *__restrict__ push_mask, float *__restrict__ push_room,
                                         float4 *tile, const cpk_view &cv = cpk_view{}) {
  static_assert(!CPK || COL != COL_DEFER, "g2p_warp: compact records take the collision step inline");
  const int lane = threadIdx.x & 31;
  const int2 h = hdr[p];
  const int P[3] = {pb_coord[3 * h.x], pb_coord[3 * h.x + 1], pb_coord[3 * h.x + 2]};
  const int my_nbr = lane < 27 ? pb_nbr[27 * (size_t)h.x + lane] : 0;
  float *base = pk + p * (CPK ? CPK_WORDS : PK_FLOATS) + lane;
  const int valid = lane < h.y;
  float x[3] = {0, 0, 0};
  int d[3] = {0, 0, 0}, ok = 0;
  float fx[3] = {1, 1, 1};
  compact_record rec;
  cpk_particle cp;
  if (valid) {
    if (CPK) {
      cpk_read(reinterpret_cast<const uint32_t *>(pk), p, lane, &rec);
      cpk_decode_moving(&cv.f, P, &rec, cv.kinds, OLD, &cp);
      for (int a = 0; a < 3; ++a) x[a] = cp.s.x[a];
    } else {
      for (int a = 0; a < 3; ++a) x[a] = base[(A_X + a) * LANES];
    }
    ok = locate(x, origin, inv_dx, P, d, fx);
    if (!ok) flag_bad(ctl, pid[p * LANES + lane]);
  }
  float w[3][3];
  for (int a = 0; a < 3; ++a) {
    float dw[3];
    bspline_weights(fx[a], w[a], dw);
  }
  float v[3] = {0, 0, 0}, B[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0}, vold[3] = {0, 0, 0};
  /* The material, read only where G2P needs it (g2p_mats not NULL: a material uses ASFLIP or is
   * weakly compressible): other scenes skip the load and advance F <- (I + dt C) F. */
  material_params mat;
  mat.transfer = TRANSFER_APIC;
  mat.model = -1;
  if (MAT && ok && g2p_mats) mat = g2p_mats[CPK ? cp.material : __float_as_int(base[A_MAT * LANES])];
  const int flip = OLD && mat.transfer == TRANSFER_ASFLIP; /* OLD: APIC variants compile no ASFLIP */
  (void)g2p_nodes<OLD>(ok, d, fx, w, dx, my_nbr, grid, grid0, flip, v, B, vold, tile); /* gpu/p2g.cuh */
  unsigned speed_bits = 0, leave = 0;
  int defer = 0; /* COL_DEFER: inside a collider's box, left to k_collide */
  if (ok) {
    const float k = 4.0f * inv_dx * inv_dx;
    float F[9], Fn[9], C[9];
    for (int q = 0; q < 9; ++q) {
      F[q] = Fn[q] = CPK ? cp.s.F[q] : base[(A_F + q) * LANES];
      C[q] = k * B[q];
    }
    /* APIC moves with v; ASFLIP keeps vnew and moves with vmove (physics/transfer.h) */
    float vmove[3] = {v[0], v[1], v[2]};
    if (flip) {
      float vp[3], vnew[3];
      for (int a = 0; a < 3; ++a) vp[a] = CPK ? cp.s.v[a] : base[(A_V + a) * LANES];
      transfer_velocity(&mat, dt, vp, v, vold, m3_trace(C), m3_det(F), vnew, vmove);
      for (int a = 0; a < 3; ++a) v[a] = vnew[a];
    }
    /* F before the update stays in F for transfer_velocity. A compact record keeps F as P2G left
     * it, P2G advancing it from this C (physics/compact.h): the check below sees C's entries too. */
    if (!CPK) constitutive_advance_F(&mat, dt, C, Fn);
    float state_sum = m3_det(Fn); /* det F, plus C's entries in compact storage: finite or not */
    if (CPK)
      for (int q = 0; q < 9; ++q) state_sum += C[q], cp.s.C[q] = C[q];
    else
      for (int q = 0; q < 9; ++q) base[(A_C + q) * LANES] = C[q], base[(A_F + q) * LANES] = Fn[q];
    for (int a = 0; a < 3; ++a) x[a] += dt * vmove[a];
    const float moved = dt * fmaxf(fabsf(vmove[0]), fmaxf(fabsf(vmove[1]), fabsf(vmove[2])));
    if (COL == COL_INLINE) { /* the particle collision step (physics/boundary.h), poses of k_poses */
      pushed q = {{x[0], x[1], x[2]}, {v[0], v[1], v[2]}};
      q = push_particle(&bp, poses, q, boundary_push_room(dx, moved));
      for (int a = 0; a < 3; ++a) x[a] = q.x[a], v[a] = q.v[a];
    }
    if (COL == COL_DEFER)
      for (int c = 0; c < bp.n_colliders; ++c) defer |= in_box(wbox[bp.n_colliders + c], x);
    if (defer) { /* k_collide pushes it and finishes it; a non-finite F is flagged here */
      for (int a = 0; a < 3; ++a) base[(A_V + a) * LANES] = v[a], base[(A_X + a) * LANES] = x[a];
      push_room[p * LANES + lane] = boundary_push_room(dx, moved);
      if (!isfinite(state_sum)) flag_bad(ctl, pid[p * LANES + lane]);
    } else { /* (k_collide ends its particles with the same lines) */
      const float lo[3] = {dmin.x, dmin.y, dmin.z}, hi[3] = {dmax.x, dmax.y, dmax.z};
      float sp2 = 0.0f;
      for (int a = 0; a < 3; ++a) {
        sp2 += v[a] * v[a];
        x[a] = fminf(fmaxf(x[a], lo[a]), hi[a]);
      }
      if (!CPK)
        for (int a = 0; a < 3; ++a) base[(A_V + a) * LANES] = v[a], base[(A_X + a) * LANES] = x[a];
      const float runaway = DR_RUNAWAY_CELLS * dx / dt;
      if (!isfinite(sp2) || !isfinite(x[0] + x[1] + x[2]) || !isfinite(state_sum) || sp2 > runaway * runaway) {
        flag_bad(ctl, pid[p * LANES + lane]);
      } else {
        if (CPK) { /* the state a compact store keeps (after the checks: a saturated code would hide a NaN) */
          for (int a = 0; a < 3; ++a) cp.s.x[a] = x[a], cp.s.v[a] = v[a];
          compact_set_xvc(&cv.f, P, &cp.s, &rec); /* F, logjp, kind and id stay */
          cpk_write(reinterpret_cast<uint32_t *>(pk), p, lane, &rec, 0, CPK_W1(COMPACT_AT_F));
          compact_decode_x(&cv.f, P, rec.w, x); /* the speed and zone of what is kept */
          compact_decode_v(&rec, v);
          sp2 = 0.0f;
          for (int a = 0; a < 3; ++a) sp2 += v[a] * v[a];
        }
        speed_bits = __float_as_uint(sqrtf(sp2));
        for (int a = 0; a < 3; ++a) {
          const int b = bspline_base((x[a] - (a == 0 ? origin.x : a == 1 ? origin.y : origin.z)) * inv_dx);
          leave |= leave_bits(b, P[a], inner_lo, inner_hi);
        }
      }
    }
  }
  if (COL == COL_DEFER) {
    const unsigned mask = __ballot_sync(FULL, defer);
    if (lane == 0) push_mask[p] = mask;
  }
  warp_flags(ctl, speed_bits, leave);
}

/* The particle collision step of the particles k_g2p left (push_mask), then the rest of their
 * G2P (as g2p_warp ends it). One warp per packet; a packet with no such lane returns at once. */
__global__ static void PARTICLE_BOUNDS
k_collide(step_ctl *ctl, size_t n_packets, PARTICLE_PARAMS, step_scalars sc, const __grid_constant__ boundary_params bp,
          COLLIDER_PARAMS) {
  const float3 origin = sc.origin, dmin = sc.dmin, dmax = sc.dmax;
  const float dx = sc.dx, inv_dx = sc.inv_dx;
  const int zone_lo = sc.zone_lo, zone_hi = sc.zone_hi;
  if (ctl->done) return;
  const size_t p = (size_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (p >= n_packets) return;
  const unsigned mask = push_mask[p];
  if (!mask) return; /* the whole warp */
  const int lane = threadIdx.x & 31;
  unsigned speed_bits = 0, leave = 0;
  if ((mask >> lane) & 1u) {
    const int2 h = hdr[p];
    const int P[3] = {pb_coord[3 * h.x], pb_coord[3 * h.x + 1], pb_coord[3 * h.x + 2]};
    float *base = pk + p * PK_FLOATS + lane;
    float x[3], v[3];
    for (int a = 0; a < 3; ++a) x[a] = base[(A_X + a) * LANES], v[a] = base[(A_V + a) * LANES];
    boundary_push_posed(&bp, poses, x, v, push_room[p * LANES + lane]);
    /* the end of g2p_warp, as there (a function shared by both gave k_g2p 71 registers, not 56) */
    const float lo[3] = {dmin.x, dmin.y, dmin.z}, hi[3] = {dmax.x, dmax.y, dmax.z};
    float sp2 = 0.0f;
    for (int a = 0; a < 3; ++a) {
      sp2 += v[a] * v[a];
      x[a] = fminf(fmaxf(x[a], lo[a]), hi[a]);
    }
    for (int a = 0; a < 3; ++a) base[(A_V + a) * LANES] = v[a], base[(A_X + a) * LANES] = x[a];
    const float runaway = DR_RUNAWAY_CELLS * dx / ctl->dt;
    if (!isfinite(sp2) || !isfinite(x[0] + x[1] + x[2]) || sp2 > runaway * runaway) {
      flag_bad(ctl, pid[p * LANES + lane]);
    } else {
      speed_bits = __float_as_uint(sqrtf(sp2));
      for (int a = 0; a < 3; ++a) {
        const int b = bspline_base((x[a] - (a == 0 ? origin.x : a == 1 ? origin.y : origin.z)) * inv_dx);
        leave |= leave_bits(b, P[a], zone_lo, zone_hi);
      }
    }
  }
  warp_flags(ctl, speed_bits, leave);
}

/* G2P: APIC velocity and affine matrix C = (4/dx^2) sum w v (x_i - x_p)^T, F <- (I + dt C) F,
 * advection clamped to the domain, the inner-free-zone check, largest speed, and the non-finite /
 * runaway check. One warp per packet; flags reduced over the warp first. COL: particles inside a
 * collider's world box are left to k_collide (the particle collision step), which k_g2p's launch
 * queues after it; on compact packets (CPK, cpv their kinds and lattice) the collision step runs
 * inline instead (a record cannot hold a particle half-finished). (sm_90, -Xptxas -v: every float
 * COL variant has the registers of its variant without colliders, 64 / 64 / 70-71, where the
 * collision step inline took 80. Crawling in Snow moved within its run-to-run noise:
 * docs/performance.md.) */
template <bool OLD, bool COL, bool MAT, bool CPK>
__global__ static void PARTICLE_BOUNDS_OF(CPK)
k_g2p(step_ctl *ctl, size_t n_packets, PARTICLE_PARAMS, step_scalars sc, const float *__restrict__ grid,
      const float *__restrict__ grid0, const __grid_constant__ boundary_params bp, COLLIDER_PARAMS,
      const int32_t *__restrict__ order, const cpk_view cpv) {
  __shared__ __align__(16) float4 s_tile[WARPS][G2P_TILE_FLOAT4S(OLD)];
  if (ctl->done) return;
  stamp(ctl, ST_G2P);
  const int warp = threadIdx.x >> 5;
  const size_t i = (size_t)blockIdx.x * WARPS + warp;
  if (i >= n_packets) return;
  const size_t p = order ? (size_t)order[i] : i; /* cuda_g2p_interior: n_packets of the list order */
  if (CPK && i == 0 && (threadIdx.x & 31) == 0) ctl->dt_g2p = ctl->dt; /* P2G's advance of F (step_ctl) */
  g2p_warp<OLD, !COL ? COL_NONE : CPK ? COL_INLINE : COL_DEFER, MAT, CPK>(
      ctl, ctl->dt, p, hdr, pb_coord, pb_nbr, pk, pid, sc.origin, sc.dmin, sc.dmax, sc.dx, sc.inv_dx, grid, sc.zone_lo,
      sc.zone_hi, mats, grid0, bp, poses, wbox, push_mask, push_room, G2P_TILE_OF(OLD, s_tile[warp]), cpv);
}

/* G2P2G (small counts, fixed steps): this step's G2P from grid buffer g, then, in the same
 * kernel, the next step's P2G into the other buffer. A particle scatters once after moving (less
 * than a cell) before the host can react to its flag, plus once per step that still runs on this
 * mapping (lag_of): the zone [zone_lo, zone_hi] (the free zone less lag_of + 1 cells a side)
 * leaves that much slack, so every scattered stencil stays inside the physical blocks. The
 * warp's own writes to its packet are visible to its lanes after __syncwarp. */
template <bool OLD, bool DET, bool COL>
__global__ static void PARTICLE_BOUNDS
k_g2p2g(step_ctl *ctl, size_t n_packets, PARTICLE_PARAMS, step_scalars sc, const float *__restrict__ grid,
        const float *__restrict__ grid0, P2G_TARGET_PARAMS, const __grid_constant__ boundary_params bp,
        COLLIDER_PARAMS, int g2p_mat) {
  __shared__ __align__(16) float s_p2g[WARPS][P2G_SMEM(OLD, DET, G2P2G_NODESUM)];
  __shared__ unsigned s_sort[WARPS][LANES];
  __shared__ __align__(16) float4 s_tile[WARPS][G2P_TILE_FLOAT4S(OLD)];
  if (ctl->done) return;
  stamp(ctl, ST_G2P);
  const int warp = threadIdx.x >> 5;
  const size_t p = (size_t)blockIdx.x * WARPS + warp;
  if (p >= n_packets) return;
  const float dt = ctl->dt;
  g2p_warp<OLD, COL ? COL_INLINE : COL_NONE, true>(ctl, dt, p, hdr, pb_coord, pb_nbr, pk, pid, sc.origin, sc.dmin,
                                                   sc.dmax, sc.dx, sc.inv_dx, grid, sc.zone_lo, sc.zone_hi,
                                                   g2p_mat ? mats : nullptr, grid0, bp, poses, nullptr, nullptr,
                                                   nullptr, G2P_TILE_OF(OLD, s_tile[warp]));
  __syncwarp();
  p2g_any<OLD, DET, G2P2G_NODESUM>(ctl, dt, p, hdr, pb_coord, pb_nbr, pk, pid, mats, sc.origin, sc.dx, sc.inv_dx,
                                   p2g_grid, p2g_touched, p2g_grid0, s_p2g[warp], s_sort[warp], p2g_fp, 1);
}

#endif

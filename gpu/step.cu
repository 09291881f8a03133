// step.cu - one time step's kernels and their launches: the step's beginning (k_begin and its
// variants: dt on the device, voided steps), P2G (k_p2g; the warp's work is gpu/p2g.cuh), the grid
// update (gpu/grid.cuh), G2P and G2P2G (gpu/g2p.cuh), the step's record for the host (k_ctl_out),
// and the CUDA graphs that hold a whole step. The host reads a step's record STEP_LAG steps later,
// so the device never waits for it; the graphs hold device pointers that change only at a
// rebuild-mapping, after which they are captured again (graphs_valid).

#include "cuda_state.h"
#include "views.cuh"
#include "barrier.cuh"
#include "grid.cuh"
#include "g2p.cuh"

/* ---- the step ----------------------------------------------------------------------------- */

/* Whether an island's members share values at a step's beginning: adaptive steps the largest
 * speed (each takes the island's for its dt), voiding steps whether any member's particles left
 * the free zone (they void the step together: a member that ran it would wait at its barrier for
 * one that did not). */
__device__ static bool begin_shares(const step_ctl *c, const island_view &iv) {
  return iv.np > 0 && (c->mode == DT_ADAPTIVE || c->void_on);
}

/* A step's first stamp (DRIFT_GPU_STAMPS), the others zeroed. */
__device__ __forceinline__ void stamps_begin(step_ctl *c) {
  if (!c->stamps) return;
  for (int i = 0; i < ST_COUNT; ++i) c->stamp[i] = 0;
  c->stamp[ST_BEGIN] = global_ns();
}

/* The step's beginning before the island's barrier, by one thread: the stamps, and this
 * member's values for the peers in the slot of this step (spin barriers; events: k_publish
 * stored the speed before the host's barrier). */
__device__ static void begin_publish(step_ctl *c, const island_view &iv) {
  c->gate_ns = 0; /* no gate: the frame loop's steps */
  stamps_begin(c);
  if (!begin_shares(c, iv) || !iv.spin) return;
  const unsigned slot = c->step_seq & 1u;
  c->vmax_pub[slot] = c->vmax_bits;
  c->leave_pub[slot] = c->leave;
}

/* The step's beginning after the island's barrier (or with no island), by one thread (k_begin,
 * or k_begin_barrier's first lane): sets this step's dt (fixed, or adaptive from the island's
 * last largest speed, the last two steps of a frame sharing what is left, exactly as sim.c does
 * on the host) and resets the step's flags. A step queued after the frame ended does nothing; so
 * does one voided (void_on) after a step whose particles, on any member, left the free zone. */
__device__ static void begin_step(step_ctl *c, const island_view &iv) {
  c->performed = 0;
  unsigned vmax_bits = c->vmax_bits, leave = c->leave;
  if (begin_shares(c, iv)) { /* the island's values (see the top of gpu/island_barrier.cu) */
    const unsigned slot = c->step_seq++ & 1u;
    for (int q = 0; q < iv.np; ++q) {
      const volatile step_ctl *p = iv.peer_ctl[q];
      vmax_bits = max(vmax_bits, p->vmax_pub[slot]);
      leave |= p->leave_pub[slot];
    }
  }
  if (c->done) return;
  if (c->void_on && leave) { /* a particle left the free zone: this step waits for a rebuild-mapping
                              * (the host queues it again); t, k, dt and vmax stay */
    c->voided = 1;
    c->done = 1;
    return;
  }
  double dt, t_start;
  if (c->mode == DT_FIXED) {
    dt = c->dt_fixed;
    /* the step's start from the step count, as sim.c computes it (no contraction into an FMA) */
    t_start = __dadd_rn(c->t0, __dmul_rn((double)c->k, c->dt_fixed));
  } else {
    t_start = c->t;
    const double rem = c->t1 - c->t;
    if (rem <= 1e-9 * c->frame_dt) {
      c->done = 1;
      return;
    }
    dt = c->cfl_dx / (c->wave_speed + (double)__uint_as_float(vmax_bits));
    if (c->dt_max > 0.0 && dt > c->dt_max) dt = c->dt_max; /* sim_next_dt's viscous cap */
    if (dt >= rem) dt = rem;
    else if (dt > 0.5 * rem) dt = 0.5 * rem;
  }
  c->dt = (float)dt;
  /* where the host's phase-by-phase path puts the colliders (k_begin_fixed: the step's start
   * plus the float dt), so that both paths take bitwise the same steps */
  c->t_pose = __dadd_rn(t_start, (double)c->dt);
  c->t = __dadd_rn(t_start, dt);
  ++c->k;
  c->performed = 1;
  c->leave = 0;
  c->vmax_bits = 0;
}

/* One warp on an island (its barrier by warp, as k_barrier), else one thread (nothing shared:
 * begin_shares). */
__global__ static void k_begin(step_ctl *c, island_view iv) {
  if (threadIdx.x == 0) begin_publish(c, iv);
  if (begin_shares(c, iv) && iv.spin) { /* the same on every lane */
    __syncwarp();
    island_barrier_warp(c, iv);
  }
  if (threadIdx.x == 0) begin_step(c, iv);
}

/* An island step with nothing between its beginning and its barrier (G2P2G, whose P2G the last
 * step did; the first step after G2P2G frames) begins and passes the barrier in one kernel: one
 * launch less a step (step_launch), and the one barrier
 * serves the values the members share at the beginning. */
__global__ static void k_begin_barrier(step_ctl *c, island_view iv) {
  if (threadIdx.x == 0) begin_publish(c, iv);
  __syncwarp();
  stamp(c, ST_BAR_IN);
  island_barrier_warp(c, iv);
  stamp(c, ST_BAR_OUT);
  if (threadIdx.x == 0) begin_step(c, iv);
}

/* cuda_set_projected: the next P2G leaves out the return mapping (step_ctl.projected). */
__global__ static void k_set_projected(step_ctl *c) { c->projected = 1; }
/* cuda_set_last_dt: the dt of the G2P that last moved the particles (step_ctl.dt_g2p). */
__global__ static void k_set_last_dt(step_ctl *c, float dt) { c->dt_g2p = dt; }
/* A compact G2P with no packets (a rank without particles): its dt noted as k_g2p notes it, for
 * the P2G of particles that arrive from other ranks with that G2P's C. */
__global__ static void k_note_dt_g2p(step_ctl *c) {
  if (!c->done) c->dt_g2p = c->dt;
}

/* A fixed step given by the host (the phase-by-phase path of backend.h). */
__device__ static void begin_fixed(step_ctl *c, float dt, double t_end) {
  c->t = c->t_pose = t_end; /* as k_begin leaves it: the colliders stand where they are at the step's end */
  c->done = 0;
  c->performed = 1;
  c->dt = dt;
  c->leave = 0;
  c->vmax_bits = 0;
  c->gate_ns = 0;
  stamps_begin(c);
}
__global__ static void k_begin_fixed(step_ctl *c, float dt, double t_end) { begin_fixed(c, dt, t_end); }

/* The phases' step begin behind backend.h's gate (ranks: the step queued before the step vote):
 * waits until the host's gate_open writes this gate's number into *gate, then begins the step as
 * k_begin_fixed does (go) or voids it (its kernels return at once, as the frame loop's voided
 * steps do; rebuild_now's k_unvoid or the next begin ends that). A gate the host never opens (a
 * bug; the host's own exits void it) gives up after timeout_ns, voids the step and says so in
 * gate_stuck, which the next step's record carries to the host. */
__global__ static void k_begin_gated(step_ctl *c, const volatile unsigned *gate, unsigned seq, float dt, double t_end,
                                     unsigned long long timeout_ns) {
  const unsigned long long t0 = global_ns();
  unsigned w;
  for (unsigned spins = 0;; ++spins) {
    w = *gate;
    if ((w >> 1) == (seq & 0x7fffffffu)) break;
    __nanosleep(100);
    if ((spins & 255u) == 255u && global_ns() - t0 > timeout_ns) {
      c->gate_stuck = 1;
      w = 0;
      break;
    }
  }
  __threadfence_system();
  if (w & 1u) {
    begin_fixed(c, dt, t_end);
    c->gate_ns = global_ns() - t0; /* the record after this step's G2P carries it (island_g2p_collect) */
    if (c->stamps) c->stamp[ST_GATE] = t0;
  } else {
    c->done = 1;
    c->voided = 1;
    c->performed = 0;
  }
}

/* k_p2g's order of packets (spread_of: packet i x m mod n; m = 0: the list's order). magic is
 * floor((2^64 - 1) / n), so that the remainder takes a multiply-high and one correction instead
 * of a 64-bit division (a subroutine of some sixty instructions at every warp's start, 3.5% of
 * k_p2g's stall samples at l = 46): with x = i m < 2^62, q = floor(x magic / 2^64) is floor(x / n)
 * or one less, so x - q n lies in [0, 2n). */
typedef struct p2g_order {
  unsigned long long m, magic;
} p2g_order;

__device__ __forceinline__ int p2g_order_index(p2g_order o, int i, int n) {
  if (!o.m) return i;
  const unsigned long long x = (unsigned long long)i * o.m;
  unsigned long long r = x - __umul64hi(x, o.magic) * (unsigned long long)n;
  if (r >= (unsigned long long)n) r -= (unsigned long long)n;
  return (int)r;
}

/* P2G with plasticity, stress and forces fused in (MLS-MPM, Hu et al. 2018: the stress enters
 * as -dt V0 (4/dx^2) tau next to APIC's m C). One warp per packet, taken in spread_of's order. */
template <bool OLD, bool DET, bool CPK = false>
__global__ static void PARTICLE_BOUNDS_OF(CPK)
k_p2g(step_ctl *ctl, size_t n_packets, PARTICLE_PARAMS, step_scalars sc, P2G_TARGET_PARAMS,
      const int32_t *__restrict__ order, p2g_order spread, const cpk_view cpv) {
  __shared__ __align__(16) float s_p2g[WARPS][P2G_SMEM(OLD, DET, P2G_NODESUM)];
  __shared__ unsigned s_sort[WARPS][LANES];
  if (ctl->done) return;
  stamp(ctl, ST_P2G);
  const int warp = threadIdx.x >> 5;
  const int n = (int)n_packets; /* below 2^31: append_room's limit of particles a GPU */
  const int i = (int)blockIdx.x * WARPS + warp;
  if (i >= n) return; /* the whole warp */
  const int j = p2g_order_index(spread, i, n); /* spread_of: the packets in work at once lie far apart */
  p2g_any<OLD, DET, P2G_NODESUM, CPK>(ctl, ctl->dt, order ? (size_t)order[j] : (size_t)j, hdr, pb_coord, pb_nbr, pk,
                                      pid, mats, sc.origin, sc.dx, sc.inv_dx, p2g_grid, p2g_touched, p2g_grid0,
                                      s_p2g[warp], s_sort[warp], p2g_fp, !ctl->projected, cpv);
}

/* Material of the particle with the given id (for the message about a bad particle); kinds: compact
 * packets' (the material is the record's kind's), else NULL. */
__global__ static void k_find_material(size_t n_slots, const uint64_t *pid, const int2 *hdr, const float *pk,
                                       const compact_kind *kinds, uint64_t want, step_ctl *ctl) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n_slots) return;
  const size_t p = i / LANES;
  const int lane = (int)(i % LANES);
  if (lane >= hdr[p].y || pid[i] != want) return;
  if (kinds) { /* the kind's 16 bits at COMPACT_AT_KIND */
    compact_record r;
    cpk_read(reinterpret_cast<const uint32_t *>(pk), p, lane, &r);
    int pos = COMPACT_AT_KIND;
    ctl->bad_material = kinds[compact_get_(r.w, &pos, COMPACT_BITS_KIND)].material;
  } else {
    ctl->bad_material = __float_as_int(pk[p * PK_FLOATS + A_MAT * LANES + lane]);
  }
}

/* ---- launching a step --------------------------------------------------------------------- */

/* The island's view of the peers for a step on buffer par (pointers change only at rebuild-mapping,
 * after which the graphs are captured again). */
island_view step_view_of(cuda_state *s, int par) {
  island_view v;
  memset(&v, 0, sizeof v);
  v.np = s->nm - 1;
  v.timeout_ns = s->barrier_timeout_ns;
  v.spin = !s->events;
  v.own = s->atomics ? dp<int8_t>(s->own) : NULL;
  v.bar = dp<unsigned>(s->bar);
  for (int q = 0; q < v.np; ++q) {
    const cuda_state *o = s->peer[q];
    v.peer_bar[q] = dp<unsigned>(o->bar);
    v.peer_ctl[q] = dp<step_ctl>(o->ctl);
    v.peer_grid[q] = dp<float>(o->grid[par]);
    v.peer_grid0[q] = o->asflip ? dp<float>(o->grid0[par]) : NULL;
    v.peer_touched[q] = dp<uint8_t>(o->touched[par]);
    v.peer_ig[q] = o->det ? dp<long long>(o->igrid[par]) : NULL;
  }
  return v;
}

/* p2p_atomics: the peers' buffers of parity par (k_push, k_pull). */
peer_blocks step_peers_of(cuda_state *s, int par) {
  peer_blocks b;
  memset(&b, 0, sizeof b);
  for (int q = 0; q < s->nm - 1; ++q) {
    const cuda_state *o = s->peer[q];
    b.grid[q] = dp<float>(o->grid[par]);
    b.grid0[q] = o->asflip ? dp<float>(o->grid0[par]) : NULL;
    b.touched[q] = dp<uint8_t>(o->touched[par]);
    b.ig[q] = o->det ? dp<long long>(o->igrid[par]) : NULL;
  }
  return b;
}

/* Clears grid buffer par (and its ASFLIP buffer and touched flags) outside the fused clear of
 * k_grid. */
int step_clear_grid(cuda_state *s, int par) {
  if (s->n_blocks == 0) return DR_OK;
  if (s->det) CU(cudaMemsetAsync(s->igrid[par].ptr, 0, s->n_blocks * int_floats(s) * sizeof(long long), s->stream));
  CU(cudaMemsetAsync(s->grid[par].ptr, 0, s->n_blocks * BLOCK_FLOATS * sizeof(float), s->stream));
  if (s->asflip) CU(cudaMemsetAsync(s->grid0[par].ptr, 0, s->n_blocks * OLD_FLOATS * sizeof(float), s->stream));
  CU(cudaMemsetAsync(s->touched[par].ptr, 0, s->n_blocks, s->stream));
  return DR_OK;
}

typedef decltype(&k_p2g<false, false>) p2g_fn;

/* k_p2g's order of packets: the i-th packet taken is packet i x m
 * mod n, m coprime with n and near n / phi, so that packets taken one after another lie about
 * 0.38 n apart and the packets in work at one time spread evenly over the list (three-distance
 * theorem). The list is sorted by grid block, so in order the few thousand warps in flight work
 * on a few thousand neighbouring packets, whose particles scatter to the same grid nodes: their
 * global atomics (a lane group's reduced sums, one a node) queue at the same L2 addresses. Spread,
 * the atomics, loads and instructions are the same and their addresses differ (faster on every
 * scene tried: see docs/performance.md (decisions)). m = 0 (in order) where n < 3. */
static p2g_order spread_of(const cuda_state *s, size_t n) {
  p2g_order o = {0, 0};
  if (n < 3) return o;
  unsigned long long m = (unsigned long long)(0.6180339887498949 * (double)n) | 1ull;
  for (;; m += 2) { /* the next odd m with gcd(m, n) = 1: a few steps at most */
    unsigned long long a = m, b = n;
    while (b) {
      const unsigned long long t = a % b;
      a = b, b = t;
    }
    if (a == 1) {
      o.m = m % n;
      o.magic = ~0ull / (unsigned long long)n;
      return o;
    }
  }
}

/* The instantiation of k_p2g for the member's transfer and mode. */
static p2g_fn p2g_kernel(const cuda_state *s) {
  if (s->compact)
    return s->asflip ? (s->det ? k_p2g<true, true, true> : k_p2g<true, false, true>)
                     : (s->det ? k_p2g<false, true, true> : k_p2g<false, false, true>);
  return s->asflip ? (s->det ? k_p2g<true, true> : k_p2g<true, false>)
                   : (s->det ? k_p2g<false, true> : k_p2g<false, false>);
}

/* P2G of every packet, or (order non-NULL) of the n packets listed at order, in spread_of's
 * order, one packet a warp. */
int step_p2g_on(cuda_state *s, int par, const int32_t *order, size_t n, cudaStream_t st) {
  if (n == 0) return DR_OK;
  const p2g_fn k = p2g_kernel(s);
  const particle_view pv = particle_view_of(s);
  const p2g_target to = p2g_target_of(s, par);
  const cpk_view cpv = {dp<compact_kind>(s->d_kinds), s->cframe};
  k<<<blocks_for(n, WARPS), THREADS, 0, st>>>(dp<step_ctl>(s->ctl), n, PARTICLE_ARGS(pv), step_scalars_of(s, 0, 0),
                                              P2G_TARGET_ARGS(to), order, spread_of(s, n), cpv);
  LAUNCHED("k_p2g");
  return DR_OK;
}

int step_p2g_of(cuda_state *s, int par, const int32_t *order, size_t n) {
  return step_p2g_on(s, par, order, n, s->stream);
}

int step_p2g(cuda_state *s, int par) { return step_p2g_of(s, par, NULL, s->n_packets); }

/* The interior packets (ranks): xdev_boundary_order's list after its n_boundary boundary packets, and
 * how many they are; step_p2g_interior and cuda_g2p_interior take them. */
const int32_t *step_interior_list(const cuda_state *s) { return dp<int32_t>(s->pk_order) + s->n_boundary; }
size_t step_interior_count(const cuda_state *s) { return s->n_packets - s->n_boundary; }

/* The interior packets' P2G, on the step's stream */
int step_p2g_interior(cuda_state *s) {
  return step_p2g_of(s, s->par, step_interior_list(s), step_interior_count(s));
}

int step_grid_on(cuda_state *s, int par, int part, cudaStream_t st) {
  if (s->n_blocks == 0) return DR_OK;
  /* GRID_SHARED on one GPU: over the shared blocks' list instead of every block, as many CUDA
   * blocks as the list's bound (an island member's pass covers every block, the others returning
   * at once) */
  const int listed = part == GRID_SHARED && s->nm == 1;
  if (listed) DR_TRY(xdev_shared_list(s, st));
  const size_t n_launch = listed ? s->shared_bound : s->n_blocks;
  if (n_launch == 0) return DR_OK;
  DR_TRY(colliders_poses(s, st));
  const bool col = s->bnd.n_colliders > 0;
  const grid_view gv = grid_view_of(s, par, listed);
  const collider_view cv = collider_view_of(s);
  (s->det ? (col ? k_grid<true, true> : k_grid<true, false>) : (col ? k_grid<false, true> : k_grid<false, false>))
      <<<blocks_for(n_launch, GRID_BLOCKS_PER_CTA), GRID_BLOCKS_PER_CTA * BLOCK_NODES, 0, st>>>(
          dp<step_ctl>(s->ctl), GRID_ARGS(gv), part, step_scalars_of(s, 0, 0), s->bnd, COLLIDER_ARGS(cv),
          step_view_of(s, par));
  LAUNCHED("k_grid");
  return DR_OK;
}

int step_grid(cuda_state *s, int par, int part) { return step_grid_on(s, par, part, s->stream); }

/* The steps that run on this mapping after the one whose particles leave the zone G2P checks: 0
 * where the next step is voided, else STEP_LAG (the events barrier; the top of gpu/backend_cuda.cu). */
static int lag_of(const cuda_state *s) { return s->void_steps ? 0 : STEP_LAG; }

/* G2P of the n packets order lists (all of them in their order where order is NULL), then, with
 * collide, the particle collision step of every packet (k_collide reads push_mask, which each
 * packet's G2P wrote: after a cuda_g2p_interior, the last part's launch collides both parts).
 * lag: the steps queued before the host reads this step's flags. G2P flags the particles that
 * leave the free zone shrunk by a cell per such step (lag_of): a particle moves less than a cell
 * a step. The phases of backend.h (several ranks) read the flags before the next step (lag 0),
 * and the frame loop voids the step after a leave (lag 0 too, except with the events barrier):
 * both keep the whole free zone, a third more room per axis, fewer
 * rebuild-mappings. */
template <bool CPK>
static decltype(&k_g2p<false, false, false, CPK>) g2p_kernel(const cuda_state *s, bool col) {
  return s->asflip     ? (col ? k_g2p<true, true, true, CPK> : k_g2p<true, false, true, CPK>)
         : s->g2p_mat ? (col ? k_g2p<false, true, true, CPK> : k_g2p<false, false, true, CPK>)
                      : (col ? k_g2p<false, true, false, CPK> : k_g2p<false, false, false, CPK>);
}

int step_g2p_on(cuda_state *s, int par, int lag, const int32_t *order, size_t n, int collide,
                  cudaStream_t st) {
  const bool col = s->push;
  const particle_view pv = particle_view_of(s);
  const step_scalars sc = step_scalars_of(s, FREE_ZONE_LO + lag, FREE_ZONE_HI - lag);
  const collider_view cv = collider_view_of(s);
  if (n == 0 && s->compact) {
    k_note_dt_g2p<<<1, 1, 0, st>>>(dp<step_ctl>(s->ctl));
    LAUNCHED("k_note_dt_g2p");
  }
  if (n > 0) {
    particle_view g2p_pv = pv;
    if (!s->g2p_mat) g2p_pv.mats = nullptr; /* G2P reads no material (k_g2p's MAT) */
    if (s->compact) { /* the collision step inline: nothing is left to k_collide */
      const cpk_view cpv = {dp<compact_kind>(s->d_kinds), s->cframe};
      g2p_kernel<true>(s, col)<<<blocks_for(n, WARPS), THREADS, 0, st>>>(
          dp<step_ctl>(s->ctl), n, PARTICLE_ARGS(g2p_pv), sc, vel_of(s, par), vel0_of(s, par), s->bnd,
          COLLIDER_ARGS(cv), order, cpv);
      LAUNCHED("k_g2p (compact packets)");
      return DR_OK;
    }
    g2p_kernel<false>(s, col)<<<blocks_for(n, WARPS), THREADS, 0, st>>>(
        dp<step_ctl>(s->ctl), n, PARTICLE_ARGS(g2p_pv), sc, vel_of(s, par), vel0_of(s, par), s->bnd, COLLIDER_ARGS(cv),
        order, cpk_view{});
    LAUNCHED("k_g2p");
  }
  if (col && collide && s->n_packets > 0) {
    k_collide<<<blocks_for(s->n_packets, WARPS), THREADS, 0, st>>>(dp<step_ctl>(s->ctl), s->n_packets,
                                                                   PARTICLE_ARGS(pv), sc, s->bnd, COLLIDER_ARGS(cv));
    LAUNCHED("k_collide");
  }
  return DR_OK;
}

int step_g2p_of(cuda_state *s, int par, int lag, const int32_t *order, size_t n, int collide) {
  return step_g2p_on(s, par, lag, order, n, collide, s->stream);
}

int step_g2p(cuda_state *s, int par, int lag) { return step_g2p_of(s, par, lag, NULL, s->n_packets, 1); }

/* The G2P2G variant for the scene: ASFLIP, deterministic sums, colliders. */
template <bool OLD, bool DET>
static decltype(&k_g2p2g<OLD, DET, false>) g2p2g_kernel(bool col) {
  return col ? k_g2p2g<OLD, DET, true> : k_g2p2g<OLD, DET, false>;
}

static int step_g2p2g(cuda_state *s, int par) {
  if (s->n_packets == 0) return DR_OK;
  const bool col = s->push;
  const particle_view pv = particle_view_of(s);
  const p2g_target next = p2g_target_of(s, 1 - par);
  const collider_view cv = collider_view_of(s);
  (s->asflip ? (s->det ? g2p2g_kernel<true, true>(col) : g2p2g_kernel<true, false>(col))
             : (s->det ? g2p2g_kernel<false, true>(col) : g2p2g_kernel<false, false>(col)))
      <<<blocks_for(s->n_packets, WARPS), THREADS, 0, s->stream>>>(
          dp<step_ctl>(s->ctl), s->n_packets, PARTICLE_ARGS(pv),
          step_scalars_of(s, FREE_ZONE_LO + lag_of(s) + 1, FREE_ZONE_HI - lag_of(s) - 1), vel_of(s, par),
          vel0_of(s, par), P2G_TARGET_ARGS(next), s->bnd, COLLIDER_ARGS(cv), s->g2p_mat);
  LAUNCHED("k_g2p2g");
  return DR_OK;
}

/* A step on grid buffer par in three stages, split where the island's barriers go:
 *   head (k_begin, P2G unless fused, k_push) | barrier | grid update | [p2p_atomics: barrier] |
 *   tail (k_pull, G2P or G2P2G, the flags copied to h_slot[par]).
 * Fused: grid[par] already holds this step's P2G (the last G2P2G, or the priming P2G). Unfused
 * without with_p2g: grid[par] holds this step's P2G too (the first step after G2P2G frames,
 * island_advance_frame). */
int step_head(cuda_state *s, int par, int with_p2g) {
  k_begin<<<1, s->nm > 1 ? 32 : 1, 0, s->stream>>>(dp<step_ctl>(s->ctl), step_view_of(s, par));
  LAUNCHED("k_begin");
  if (!s->graph_fused && with_p2g) DR_TRY(step_p2g(s, par));
  return island_launch_push(s, par);
}

/* The step's record written by one warp straight into the host's mapped copy (h_slot), which the
 * host reads after the step's event: a kernel after the step's last kernel costs less than a
 * device-to-host copy node after it (docs/performance.md). */
__global__ static void k_ctl_out(const step_ctl *__restrict__ c, step_ctl *out) {
  static_assert(sizeof(step_ctl) % sizeof(unsigned) == 0, "step_ctl in words");
  const unsigned *src = (const unsigned *)c;
  volatile unsigned *dst = (volatile unsigned *)out;
  for (unsigned i = threadIdx.x; i < sizeof(step_ctl) / sizeof(unsigned); i += blockDim.x) dst[i] = src[i];
  __threadfence_system();
}

/* The step's record into the host's h_slot[par] (k_ctl_out). Both the frame loop's steps and the
 * phases' g2p (ranks) end with it. */
int step_record_out(cuda_state *s, int par) {
  k_ctl_out<<<1, 32, 0, s->stream>>>(dp<step_ctl>(s->ctl), s->d_slot + par);
  LAUNCHED("k_ctl_out");
  return DR_OK;
}

int step_tail(cuda_state *s, int par) {
  DR_TRY(island_launch_pull(s, par));
  DR_TRY(s->graph_fused ? step_g2p2g(s, par) : step_g2p(s, par, lag_of(s)));
  return step_record_out(s, par);
}

/* DRIFT_ISLAND_SKEW=MEMBER:pre|post:US, a test hook for the island's race-freedom under uneven
 * load (tests/gpu): that member's every step waits US microseconds on its GPU, before its barrier
 * (pre: it arrives late, the others wait) or after it (post: it reads its peers' sums late, while
 * they run on through their grid update, G2P and the next P2G into the other buffer, which the
 * double buffering must keep apart from what it still reads). One GPU ignores it. */
__global__ static void k_delay(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

static int step_skew(cuda_state *s, int where) {
  if (s->skew_where != where || s->nm < 2 || s->me != s->skew_member) return DR_OK;
  k_delay<<<1, 1, 0, s->stream>>>(s->skew_ns);
  LAUNCHED("k_delay");
  return DR_OK;
}

/* The whole step on one member with spin-lock barriers (what a graph captures). */
int step_launch(cuda_state *s, int par, int with_p2g) {
  if (s->begin_barrier && (s->graph_fused || !with_p2g) && s->skew_where != SKEW_PRE) {
    k_begin_barrier<<<1, 32, 0, s->stream>>>(dp<step_ctl>(s->ctl), step_view_of(s, par));
    LAUNCHED("k_begin_barrier");
  } else {
    DR_TRY(step_head(s, par, with_p2g));
    DR_TRY(step_skew(s, SKEW_PRE));
    DR_TRY(island_launch_barrier(s, par));
  }
  DR_TRY(step_skew(s, SKEW_POST));
  DR_TRY(step_grid(s, par, GRID_ALL));
  if (s->atomics) DR_TRY(island_launch_barrier(s, par));
  return step_tail(s, par);
}

void step_drop_graphs(cuda_state *s) {
  for (int k = 0; k < 2; ++k)
    if (s->graph[k]) cudaGraphExecDestroy(s->graph[k]), s->graph[k] = NULL;
  s->graphs_valid = 0;
}

/* Captures the step of each parity as a CUDA graph (after every rebuild: sizes and buffers
 * change with the mapping). */
int step_capture_graphs(cuda_state *s) {
  s->graphs_valid = 0;
  for (int k = 0; k < 2; ++k) {
    cudaGraph_t g = NULL;
    CU(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal));
    int rc = step_launch(s, k, 1);
    cudaError_t e = cudaStreamEndCapture(s->stream, &g);
    if (rc) {
      if (g) cudaGraphDestroy(g);
      return rc;
    }
    if (e != cudaSuccess) return cuda_fail(e, "cudaStreamEndCapture(s->stream, &g)", __FILE__, __LINE__);
    /* The same kernels with new sizes and buffers (a rebuild-mapping): updating the executable
     * graph in place costs far less than instantiating it again. Where the update is refused (the
     * graph's shape changed: fused and unfused steps, say), it is instantiated anew. */
    if (s->graph[k]) {
      cudaGraphExecUpdateResultInfo info;
      if (cudaGraphExecUpdate(s->graph[k], g, &info) == cudaSuccess) {
        cudaGraphDestroy(g);
        continue;
      }
      (void)cudaGetLastError(); /* the refusal is not an error of the next launch */
      cudaGraphExecDestroy(s->graph[k]);
      s->graph[k] = NULL;
    }
    e = cudaGraphInstantiate(&s->graph[k], g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) return cuda_fail(e, "cudaGraphInstantiate(&s->graph[k], g, 0)", __FILE__, __LINE__);
  }
  s->graphs_valid = 1;
  return DR_OK;
}

/* Deterministic mode: a P2G contribution out of the fixed-point range (physics/fixed.h). */
int step_fail_fix(cuda_state *s, unsigned long long id) {
  k_find_material<<<blocks_for(s->n_packets * LANES, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->stream>>>(
      s->n_packets * LANES, dp<uint64_t>(s->pid), dp<int2>(s->hdr), dp<float>(s->pk),
      s->compact ? dp<compact_kind>(s->d_kinds) : NULL, id, dp<step_ctl>(s->ctl));
  LAUNCHED("k_find_material");
  step_ctl c;
  CU(cudaMemcpyAsync(&c, s->ctl.ptr, sizeof c, cudaMemcpyDeviceToHost, s->stream));
  CU(cudaStreamSynchronize(s->stream));
  const int mat = c.bad_material;
  return dr_fail(DR_EPHYSICS,
                 "deterministic mode: particle %llu (body %llu, material %s) brings a non-finite momentum or one "
                 "beyond the fixed-point range (2^%d units at %g units per kg m/s, i.e. %.3g kg m/s; "
                 "physics/fixed.h): the run is unstable or faster than 256 times the scene's speed bound",
                 id, id >> 48,
                 s->prm.material_names && mat >= 0 && mat < s->prm.n_materials ? s->prm.material_names[mat] : "?",
                 FIX_LIMIT_BITS, (double)s->prm.fix_scale[1], (double)FIX_LIMIT / (double)s->prm.fix_scale[1]);
}

int step_fail_bad(cuda_state *s, unsigned long long id) {
  k_find_material<<<blocks_for(s->n_packets * LANES, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->stream>>>(
      s->n_packets * LANES, dp<uint64_t>(s->pid), dp<int2>(s->hdr), dp<float>(s->pk),
      s->compact ? dp<compact_kind>(s->d_kinds) : NULL, id, dp<step_ctl>(s->ctl));
  LAUNCHED("k_find_material");
  step_ctl c;
  CU(cudaMemcpyAsync(&c, s->ctl.ptr, sizeof c, cudaMemcpyDeviceToHost, s->stream));
  CU(cudaStreamSynchronize(s->stream));
  return backend_fail_particle(&s->prm, id, c.bad_material);
}

/* The phases' step begin: k_begin_fixed, or behind the gate that g2p_ahead armed (k_begin_gated). */
int step_begin(cuda_state *s, float dt) {
  if (s->gate_armed && s->primed) return dr_fail(DR_EINTERNAL, "cuda backend: a primed P2G behind a gate");
  if (s->gate_armed && !s->gate_queued) {
    k_begin_gated<<<1, 1, 0, s->stream>>>(dp<step_ctl>(s->ctl), s->d_gate, s->gate_seq, dt, s->t_next + (double)dt,
                                          s->barrier_timeout_ns);
    LAUNCHED("k_begin_gated");
    s->gate_queued = 1;
    timeline_marks_gate(s, 1); /* the marks a fold may wait for: those recorded so far */
    return DR_OK;
  }
  if (s->gate_armed) return dr_fail(DR_EINTERNAL, "cuda backend: a second step begun behind one gate");
  k_begin_fixed<<<1, 1, 0, s->stream>>>(dp<step_ctl>(s->ctl), dt, s->t_next + (double)dt);
  LAUNCHED("k_begin_fixed");
  return DR_OK;
}

/* backend.set_last_dt, in stream order before the next P2G. */
int cuda_set_last_dt(void *state, float dt) {
  cuda_state *s = (cuda_state *)state;
  k_set_last_dt<<<1, 1, 0, s->stream>>>(dp<step_ctl>(s->ctl), dt);
  LAUNCHED("k_set_last_dt");
  return DR_OK;
}

/* backend.set_projected, in stream order before the next P2G. */
int cuda_set_projected(void *state) {
  cuda_state *s = (cuda_state *)state;
  k_set_projected<<<1, 1, 0, s->stream>>>(dp<step_ctl>(s->ctl));
  LAUNCHED("k_set_projected");
  return DR_OK;
}

// p2g.cuh - the packet layout, the step's control record, and the P2G of one warp's packet
// (p2g_gather's records, with or without the box sums; p2g_any). Included by backend_cuda.cu
// (nvcc) and, with the CUDA built-ins emulated warp by warp on the host, by
// tests/gpu/test_p2g_warp.cc, which checks it where there is no GPU
// (backend_cuda.cu's header comment describes the pipeline).
#ifndef DRIFT_GPU_P2G_CUH
#define DRIFT_GPU_P2G_CUH

#include <stddef.h>
#include <stdint.h>

#include "memsizes.h"
#include "physics/bspline.h"
#include "physics/constitutive.h"
#include "physics/fixed.h"
#include "physics/sparse.h"
#include "compact_packets.cuh"

/* ---- layout ------------------------------------------------------------------------------- */

enum { A_X = 0, A_V = 3, A_C = 6, A_F = 15, A_M = 24, A_VOL = 25, A_MAT = 26, A_JP = 27, PK_ATTRS = 28 };
#define LANES 32
#define PK_FLOATS (PK_ATTRS * LANES)
/* the memory plan (src/memplan.c) sizes packets and grid blocks from memsizes.h's figures */
static_assert(PK_ATTRS == MEM_PACKET_ATTRS && LANES == MEM_LANES, "memsizes.h: a packet's size");
static_assert(4 * BLOCK_NODES == MEM_BLOCK_FLOATS && 3 * BLOCK_NODES == MEM_OLD_FLOATS, "memsizes.h: a block's size");
#define BLOCK_FLOATS (4 * BLOCK_NODES)
#define OLD_FLOATS (3 * BLOCK_NODES) /* ASFLIP: grid0[blk * OLD_FLOATS + channel * 64 + node] */
#define ZONE 10                       /* free-zone cells per axis: FREE_ZONE_HI - FREE_ZONE_LO + 1 */
#define KEY_NONE 1023u                /* an invalid or lost lane's cell key: sorts last */
#define FULL 0xffffffffu

/* Grid node layout inside a block of 256 floats. GRID_VEC4 1: the 4 channels of a node side by
 * side (16 bytes), so that P2G adds a node's mass and momentum with one vector atomic (float4
 * atomicAdd on global memory, compute capability 9.x) and G2P reads them with one load.
 * GRID_VEC4 0: two 32-wide packets of nodes, channel-major inside a packet. */
#ifndef GRID_VEC4
#define GRID_VEC4 1
#endif
#if GRID_VEC4 && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "GRID_VEC4 needs float4 atomicAdd (compute capability 9.0 or later); build with -DGRID_VEC4=0"
#endif
#if GRID_VEC4
__device__ __forceinline__ int gidx(int node, int ch) { return node * 4 + ch; }
#else
__device__ __forceinline__ int gidx(int node, int ch) { return (node >> 5) * 128 + ch * 32 + (node & 31); }
#endif
/* A node's 4 channels of block gb, read and written whole: with GRID_VEC4 one 16-byte access a
 * thread, which a warp of consecutive nodes makes in whole sectors (four 4-byte accesses 16
 * bytes apart touch every sector four times: ncu counted 67% of k_grid's L2 sectors excessive). */
__device__ __forceinline__ float4 node_load(const float *gb, int node) {
#if GRID_VEC4
  return *reinterpret_cast<const float4 *>(gb + gidx(node, 0));
#else
  return make_float4(gb[gidx(node, 0)], gb[gidx(node, 1)], gb[gidx(node, 2)], gb[gidx(node, 3)]);
#endif
}
__device__ __forceinline__ void node_store(float *gb, int node, float4 v) {
#if GRID_VEC4
  *reinterpret_cast<float4 *>(gb + gidx(node, 0)) = v;
#else
  gb[gidx(node, 0)] = v.x, gb[gidx(node, 1)] = v.y, gb[gidx(node, 2)] = v.z, gb[gidx(node, 3)] = v.w;
#endif
}
/* ---- the step's control record ------------------------------------------------------------ */

enum { DT_FIXED = 0, DT_ADAPTIVE = 1 };

/* Lives in device memory; k_begin sets dt, the kernels read it, G2P writes the flags, and a
 * copy goes to pinned host memory after every step. */
typedef struct step_ctl {
  double t, t1, frame_dt;      /* time (the start of the next step), end of the frame, frame length (s) */
  double t0;                   /* the frame's start */
  double t_pose;               /* the step's end, where the colliders stand (k_poses) */
  double cfl_dx, wave_speed;   /* adaptive step: dt = cfl dx / (c + vmax) */
  double dt_max;               /* adaptive step: > 0 caps that dt (frame_plan.dt_max) */
  double dt_fixed;             /* fixed step (sim.c's double; each step takes it as a float) */
  int k;                       /* steps begun in this frame */
  float dt;                    /* this step's dt */
  int mode;                    /* DT_FIXED or DT_ADAPTIVE */
  int done;                    /* the frame is complete: the step's kernels return at once */
  int performed;               /* this step did work (0 for a step queued after the frame ended, or voided) */
  int void_on;                 /* a step begun after one whose particles left the free zone does nothing (voided;
                                * the frame loop's graphs: see the top of backend_cuda.cu) */
  int voided;                  /* this step did nothing: the one before it needs a rebuild-mapping first */
  unsigned int leave;          /* a particle left its inner free zone in this step */
  unsigned int vmax_bits;      /* largest speed of this step (float bits; non-negative floats order as uints) */
  int bad_material;
  unsigned long long bad_id;   /* smallest id of a non-finite, runaway or lost particle; ~0 if none */
  /* the island (several GPUs): */
  unsigned bar_seq;            /* barriers this member has passed (the same on every member) */
  unsigned step_seq;           /* adaptive steps begun (k_begin) */
  unsigned vmax_pub[2];        /* last step's vmax_bits, published for the peers at k_begin */
  unsigned leave_pub[2];       /* ... and its leave (void_on), so that the island voids a step together */
  unsigned int fix_bad;        /* deterministic mode: a P2G contribution beyond the fixed-point range */
  unsigned long long fix_bad_id; /* ... the smallest id of a particle that brought one; ~0 if none */
  unsigned bar_stuck;          /* the island barrier this member gave up on (0: none; island_barrier) */
  int bar_peer;                /* ... the peer (index in the view) it waited for, */
  unsigned bar_peer_seen;      /* ... and that peer's count when it gave up */
  float dt_g2p;                /* compact storage: the dt of the last G2P, whose update of F the next P2G
                                * makes from the record's C (physics/compact.h; set_last_dt on a resume) */
  int projected;               /* the next P2G leaves out the return mapping (set_projected: a run resumed
                                * from a checkpoint written after G2P2G steps); k_grid clears it */
  int stamps;                  /* DRIFT_GPU_STAMPS: the step's kernels write stamp[] (the device's global ns) */
  unsigned gate_stuck;         /* k_begin_gated gave up waiting for the host's gate_open (the step voided) */
  unsigned long long gate_ns;  /* the device's wait at this step's gate for the ranks' vote (k_begin_gated; 0 for
                                * a step begun without one), ns */
  unsigned long long stamp[8]; /* ... indexed by enum stamp_at (backend_cuda.cu); k_begin zeroes the others */
} step_ctl;

/* Deterministic mode's P2G target (physics/fixed.h): int64 sums and their scales. */
typedef struct fixp {
  long long *ig;   /* [n_blocks][ich][64], ich = 4, or 7 with ASFLIP */
  float sm, sp;    /* units per kg, per kg m/s */
} fixp;

/* ---- the P2G of one warp's packet --------------------------------------------------------- */

/* Stencil of one particle relative to its particle block P: per axis the base node's offset in
 * the free zone (0..9, i.e. b - 4P + 4) and fx = x/dx - b. Returns 0 for a particle outside the
 * free zone (lost: only after a runaway step, which fails the run). */
__device__ static inline int locate(const float x[3], float3 origin, float inv_dx, const int P[3], int d[3],
                                    float fx[3]) {
  const float o[3] = {origin.x, origin.y, origin.z};
  int ok = 1;
  for (int a = 0; a < 3; ++a) {
    const float xg = (x[a] - o[a]) * inv_dx;
    const int b = bspline_base(xg);
    fx[a] = xg - (float)b;
    d[a] = b - BLOCK_EDGE * P[a] - FREE_ZONE_LO;
    ok &= d[a] >= 0 && d[a] < ZONE;
  }
  return ok;
}

/* Where stencil node (d + e) of a free-zone offset d lives: the physical block among the 27 and
 * the node inside it. d + e - 4 + 4P is the node index; the block offset from P is
 * ((d + e) >> 2) - 1 and the node inside it (d + e) & 3, since 4P is a multiple of 4. */
__device__ static inline void node_of(const int d[3], int ei, int ej, int ek, int *nbr, int *node) {
  const int a = d[0] + ei, b = d[1] + ej, c = d[2] + ek;
  *nbr = ((a >> 2) * 3 + (b >> 2)) * 3 + (c >> 2); /* = sparse_neighbor((a>>2)-1, (b>>2)-1, (c>>2)-1) */
  *node = sparse_node_in_block(a & 3, b & 3, c & 3);
}

__device__ static inline void flag_bad(step_ctl *c, unsigned long long id) { atomicMin(&c->bad_id, id); }

/* Stable split radix sort of the warp's 10-bit keys, on the bits that differ between lanes.
 * Returns the lane whose particle this lane processes; *key becomes that particle's key. */
__device__ static inline int warp_sort(unsigned *key, unsigned *scratch) {
  const int lane = threadIdx.x & 31;
  const unsigned varying = __reduce_or_sync(FULL, *key) ^ __reduce_and_sync(FULL, *key);
  unsigned v = (*key << 5) | (unsigned)lane;
  const unsigned below = (1u << lane) - 1u;
  for (int bit = 0; bit < 10; ++bit) {
    if (!((varying >> bit) & 1u)) continue; /* uniform across the warp */
    const unsigned b = (v >> (5 + bit)) & 1u;
    const unsigned ones = __ballot_sync(FULL, b);
    const int dest = b ? (32 - __popc(ones)) + __popc(ones & below) : __popc(~ones & below);
    scratch[dest] = v;
    __syncwarp();
    v = scratch[lane];
    __syncwarp();
  }
  *key = v >> 5;
  return (int)(v & 31u);
}

/* Steps 1-2 of P2G (p2g_gather): this lane's cell in the
 * free zone and the warp's lanes sorted by it (src: the lane whose particle this lane takes, key
 * its cell, KEY_NONE for none), then that particle's plasticity and stress, its affine momentum
 * matrix A (APIC's m C with the stress impulse -dt V0 (4/dx^2) tau), m, m v, and where it lies
 * (d: its base node's offset in the free zone, fx: x/dx - base). OLD (ASFLIP): mC, the affine
 * momentum without the stress, too. A lane with no particle leaves everything zero. */
struct p2g_lane {
  unsigned key;
  int src, valid;
  float m, mv[3], A[9], mC[9], fx[3];
  int d[3];
};

/* CPK: base is the packet's compact records (compact_packets.cuh; cv their kinds and lattice):
 * each lane decodes its own position for its cell, then the record of the lane it takes after the
 * sort (read again: the warp just read it), advances F by the last G2P's C and dt (ctl->dt_g2p:
 * the record's F is the last return mapping's, physics/compact.h), and writes F and logjp back
 * after the return mapping, F's rotation the return mapping's, as the CPU backend rounds them
 * there (compact_set_f: words 7-13 of the record). */
template <bool OLD, bool CPK = false>
__device__ __forceinline__ void p2g_particle(step_ctl *ctl, float dt, size_t p, const int2 h, const int P[3],
                                             float *__restrict__ base, const uint64_t *__restrict__ pid,
                                             const material_params *__restrict__ mats, float3 origin, float inv_dx,
                                             unsigned *s_sort, int plastic, p2g_lane &L,
                                             const cpk_view &cv = cpk_view{}) {
  const int lane = threadIdx.x & 31;
  uint32_t *words = reinterpret_cast<uint32_t *>(base);
  /* 1. This lane's cell in the free zone; sort the warp's lanes by it. */
  unsigned key = KEY_NONE;
  if (lane < h.y) {
    float x[3];
    if (CPK) { /* the positions' 66 bits: words 0-2 */
      const uint32_t w[3] = {words[lane], words[LANES + lane], words[2 * LANES + lane]};
      compact_decode_x(&cv.f, P, w, x);
    } else {
      for (int a = 0; a < 3; ++a) x[a] = base[(A_X + a) * LANES + lane];
    }
    int d[3];
    float fx[3];
    if (locate(x, origin, inv_dx, P, d, fx)) key = (unsigned)((d[0] * ZONE + d[1]) * ZONE + d[2]);
    else flag_bad(ctl, pid[p * LANES + lane]);
  }
  const unsigned prev_key = __shfl_up_sync(FULL, key, 1);
  int src = lane;
  if (!__all_sync(FULL, lane == 0 || prev_key <= key)) src = warp_sort(&key, s_sort);
  L.key = key;
  L.src = src;
  L.valid = key != KEY_NONE;

  /* 2. The particle: plasticity and stress, then the affine momentum matrix A. */
  L.m = 0.0f;
  for (int q = 0; q < 9; ++q) L.A[q] = 0.0f, L.mC[q] = 0.0f;
  for (int a = 0; a < 3; ++a) L.mv[a] = 0.0f, L.fx[a] = 1.0f, L.d[a] = 0;
  if (L.valid && CPK) {
    compact_record r;
    cpk_read(words, 0, src, &r);
    cpk_particle c;
    cpk_decode(&cv.f, P, &r, cv.kinds, &c);
    float tau[9];
    const material_params mat = mats[c.material];
    constitutive_advance_F(&mat, ctl->dt_g2p, c.s.C, c.s.F); /* the last G2P's update (physics/compact.h) */
    const int kept = mat.model == MODEL_NACC;
    float logjp = kept ? c.s.logjp : 0.0f;
    float Rf[9]; /* F's polar rotation, from the return mapping's SVD */
    constitutive_apply_r(&mat, c.s.F, &logjp, tau, plastic, Rf);
    if (mat.model == MODEL_WEAKLY_COMPRESSIBLE && mat.viscosity > 0.0f) constitutive_add_viscous(&mat, c.s.F, c.s.C, tau);
    compact_set_f(&r, c.s.F, kept ? logjp : c.s.logjp, Rf);
    cpk_write(words, 0, src, &r, CPK_W0(COMPACT_AT_F), CPK_W1(COMPACT_AT_KIND));
    L.m = c.mass;
    const float k = -dt * c.vol0 * 4.0f * inv_dx * inv_dx;
    for (int q = 0; q < 9; ++q) L.A[q] = k * tau[q] + L.m * c.s.C[q];
    if (OLD)
      for (int q = 0; q < 9; ++q) L.mC[q] = L.m * c.s.C[q];
    for (int a = 0; a < 3; ++a) L.mv[a] = L.m * c.s.v[a];
    locate(c.s.x, origin, inv_dx, P, L.d, L.fx);
  } else if (L.valid) {
    float x[3], F[9], tau[9];
    for (int a = 0; a < 3; ++a) x[a] = base[(A_X + a) * LANES + src];
    for (int q = 0; q < 9; ++q) F[q] = base[(A_F + q) * LANES + src];
    const material_params mat = mats[__float_as_int(base[A_MAT * LANES + src])];
    const int kept = mat.model == MODEL_NACC; /* the plastic state logJp: only NACC reads and writes it */
    float logjp = kept ? base[A_JP * LANES + src] : 0.0f;
    constitutive_apply(&mat, F, &logjp, tau, plastic);
    if (mat.model == MODEL_WEAKLY_COMPRESSIBLE && mat.viscosity > 0.0f) {
      float C[9];
      for (int q = 0; q < 9; ++q) C[q] = base[(A_C + q) * LANES + src];
      constitutive_add_viscous(&mat, F, C, tau);
    }
    for (int q = 0; q < 9; ++q) base[(A_F + q) * LANES + src] = F[q];
    if (kept) base[A_JP * LANES + src] = logjp;
    L.m = base[A_M * LANES + src];
    const float k = -dt * base[A_VOL * LANES + src] * 4.0f * inv_dx * inv_dx;
    for (int q = 0; q < 9; ++q) L.A[q] = k * tau[q] + L.m * base[(A_C + q) * LANES + src];
    if (OLD)
      for (int q = 0; q < 9; ++q) L.mC[q] = L.m * base[(A_C + q) * LANES + src];
    for (int a = 0; a < 3; ++a) L.mv[a] = L.m * base[(A_V + a) * LANES + src];
    locate(x, origin, inv_dx, P, L.d, L.fx);
  }
}

/* A cell's sums at one node of physical block blk with one native global atomic per node (a
 * float4: mass and momentum), and for ASFLIP (OLD) the momentum without the stress impulse into
 * grid0; mark: this is the block's lowest stencil node on every axis, which marks it touched. */
template <bool OLD>
__device__ __forceinline__ void p2g_add_node(float *__restrict__ grid, float *__restrict__ grid0,
                                             uint8_t *__restrict__ touched, int blk, int node, float v0, float v1,
                                             float v2, float v3, float o0, float o1, float o2, bool mark) {
  float *gb = grid + (size_t)blk * BLOCK_FLOATS;
#if GRID_VEC4
  atomicAdd(reinterpret_cast<float4 *>(gb + gidx(node, 0)), make_float4(v0, v1, v2, v3));
#else
  atomicAdd(gb + gidx(node, 0), v0);
  atomicAdd(gb + gidx(node, 1), v1);
  atomicAdd(gb + gidx(node, 2), v2);
  atomicAdd(gb + gidx(node, 3), v3);
#endif
  if (OLD) {
    float *ob = grid0 + (size_t)blk * OLD_FLOATS + node;
    atomicAdd(ob, o0);
    atomicAdd(ob + BLOCK_NODES, o1);
    atomicAdd(ob + 2 * BLOCK_NODES, o2);
  }
  if (mark) touched[blk] = 1;
}

/* The same in deterministic mode: a cell's fixed-point sums at one node with 64-bit integer
 * atomics into fp.ig ([blk][4 or 7 channels][64 nodes]). */
template <bool OLD>
__device__ __forceinline__ void p2g_add_node_fix(fixp fp, uint8_t *__restrict__ touched, int blk, int node,
                                                 long long i0, long long i1, long long i2, long long i3, long long j0,
                                                 long long j1, long long j2, bool mark) {
  /* two's complement: adding the unsigned bit patterns adds the signed values */
  unsigned long long *ib =
      reinterpret_cast<unsigned long long *>(fp.ig + (size_t)blk * (OLD ? 7 : 4) * BLOCK_NODES + node);
  atomicAdd(ib, (unsigned long long)i0);
  atomicAdd(ib + BLOCK_NODES, (unsigned long long)i1);
  atomicAdd(ib + 2 * BLOCK_NODES, (unsigned long long)i2);
  atomicAdd(ib + 3 * BLOCK_NODES, (unsigned long long)i3);
  if (OLD) {
    atomicAdd(ib + 4 * BLOCK_NODES, (unsigned long long)j0);
    atomicAdd(ib + 5 * BLOCK_NODES, (unsigned long long)j1);
    atomicAdd(ib + 6 * BLOCK_NODES, (unsigned long long)j2);
  }
  if (mark) touched[blk] = 1;
}

/* P2G of one warp's packet (MLS-MPM, Hu et al. 2018: plasticity, stress and forces fused in, the
 * stress entering as -dt V0 (4/dx^2) tau next to APIC's m C). A reduction of each of the 27
 * stencil nodes over the lanes of a cell by a chain of shuffles (3-4 rounds of 4 for the 5-8 lanes
 * of a cell in Sand Blocks) was most of P2G's instructions and its largest stall
 * (docs/performance.md). Instead the warp's lanes first store
 * their particles, in cell order, as records in shared memory: m, b = m v - dx A fx, dx A (the
 * affine momentum, so that a node at stencil offset e gets w (m, b + dx A e)) and the B-spline
 * weights (below). Then lane n < 27 takes stencil node n = (ei, ej, ek) of every
 * cell and walks the records in order, adding w (m, b + dx A e) in registers; where a cell's run
 * of records ends it issues that node's one global atomic and starts again. Every lane reads the
 * same record at the same time (a broadcast; the weights it reads lie in distinct banks), the
 * walk has no shuffle and no dependence between records, and it issues one atomic per node and
 * cell. Lanes 27-31 walk idle. DET: each record's contribution becomes an integer (fix_to) before
 * the lane adds it, so the sums do not depend on the order. Tested on the host
 * (tests/gpu/test_p2g_warp.cc). It replaced a reduction by shuffles, which was slower on every
 * scene tried (see docs/performance.md (decisions)). */
/* Floats per record and where its weights start: m, b[3], dx A[9] (row-major), then for ASFLIP
 * bo[3] = m v - dx mC fx and dx mC[9], then the weights, then (DET) the lane, padded so that the
 * float4 loads stay aligned.
 * The weights: the 9 products wx wy of the first two axes' weights ((ei, ej) at 3 ei + ej), then
 * the 3 weights of the third, so that a lane's weight in the walk is 2 loads and 1 product
 * instead of 3 loads and 2 products (a record's 9 products cost its lane 9). The sums are
 * bitwise those of the 9 weights: w is (wx wy) wz either way (fewer warp instructions in k_p2g;
 * see docs/performance.md (decisions)). */
#define GREC_WFLOATS 12
#define GREC_W(OLD) ((OLD) ? 25 : 13)
#define GREC_SRC(OLD) (GREC_W(OLD) + GREC_WFLOATS) /* deterministic mode: the record's lane in the packet */
#define GREC_FLOATS(OLD) ((GREC_SRC(OLD) + 1 + 3) / 4 * 4)

/* The box sums (p2g_gather's NODESUM: k_g2p2g's G2P2G_NODESUM, k_p2g's P2G_NODESUM; p2g_any). The
 * per-cell walk below issues 27 global atomics a cell (108 floats), so a packet whose particles
 * spread over more cells (they cross cell faces between two rebuild-mappings: the boxes thrown
 * across an island's split) adds more, to nodes that
 * its cells' stencils share. With the box sums the walk is the same, but where a cell's run ends
 * each of the 27 lanes adds its node's sums into the warp's box in shared memory (the box its
 * cells' stencils span, their cells' box 2 nodes wider on every axis, 4 floats a node, 7 with
 * ASFLIP); after the walk the warp issues one global atomic a node the packet reached. The 27
 * lanes of one cell's end add to 27 distinct nodes and a __syncwarp orders one end's adds before
 * the next's, so plain shared loads and stores suffice. Sand Blocks' packets
 * (tools/packet_drift.py): 5 cells and about 70-80 nodes after the sort, 8-11 cells and about 95-115
 * nodes 9 steps later: 2.1-3.1x fewer global atomics, for shared adds and a flush of the box.
 * A packet whose box holds more than N nodes (spread over the free zone) takes the per-cell
 * walk's global atomics, as does deterministic mode (its int64 sums; the same totals either way),
 * and so does a packet whose walk would issue at most as many atomics as its box has nodes, where
 * the box's zeroing and flush cost more than the atomics they save. */
template <int NODESUM, bool OLD, bool DET>
struct p2g_box {
  static constexpr int C = OLD ? 7 : 4;                      /* floats a node */
  static constexpr int FLOATS = NODESUM > 0 && !DET ? NODESUM * C : 0; /* the box's shared floats */
};

/* NODESUM > 0: the box sums (p2g_box) where the packet's box holds at most NODESUM nodes; s_rec
 * then holds the box's floats after the records. */
template <bool OLD, bool DET, int NODESUM = 0, bool CPK = false>
__device__ __forceinline__ void p2g_gather(step_ctl *ctl, float dt, size_t p, const int2 *__restrict__ hdr,
                                           const int32_t *__restrict__ pb_coord, const int32_t *__restrict__ pb_nbr,
                                           float *__restrict__ pk, const uint64_t *__restrict__ pid,
                                           const material_params *__restrict__ mats, float3 origin, float dx,
                                           float inv_dx, float *__restrict__ grid, uint8_t *__restrict__ touched,
                                           float *__restrict__ grid0, float *s_rec, unsigned *s_sort, fixp fp,
                                           int plastic, const cpk_view &cv = cpk_view{}) {
  constexpr int R = GREC_FLOATS(OLD), WO = GREC_W(OLD);
  const int lane = threadIdx.x & 31;
  const int2 h = hdr[p];
  const int P[3] = {pb_coord[3 * h.x], pb_coord[3 * h.x + 1], pb_coord[3 * h.x + 2]};
  const int my_nbr = lane < 27 ? pb_nbr[27 * (size_t)h.x + lane] : 0;
  p2g_lane L;
  p2g_particle<OLD, CPK>(ctl, dt, p, h, P, pk + p * (CPK ? CPK_WORDS : PK_FLOATS), pid, mats, origin, inv_dx, s_sort,
                         plastic, L, cv);

  /* 3. This lane's record at its place in cell order (lane = sorted position). */
  if (L.valid) {
    float *r = s_rec + lane * R;
    float b[3], bo[3] = {0.0f, 0.0f, 0.0f}, Ad[9], Cd[9];
    for (int k = 0; k < 3; ++k) {
      b[k] = L.mv[k] - dx * (L.A[3 * k] * L.fx[0] + L.A[3 * k + 1] * L.fx[1] + L.A[3 * k + 2] * L.fx[2]);
      if (OLD) bo[k] = L.mv[k] - dx * (L.mC[3 * k] * L.fx[0] + L.mC[3 * k + 1] * L.fx[1] + L.mC[3 * k + 2] * L.fx[2]);
    }
    for (int q = 0; q < 9; ++q) Ad[q] = dx * L.A[q], Cd[q] = dx * L.mC[q];
    *reinterpret_cast<float4 *>(r) = make_float4(L.m, b[0], b[1], b[2]);
    *reinterpret_cast<float4 *>(r + 4) = make_float4(Ad[0], Ad[1], Ad[2], Ad[3]);
    *reinterpret_cast<float4 *>(r + 8) = make_float4(Ad[4], Ad[5], Ad[6], Ad[7]);
    if (OLD) {
      *reinterpret_cast<float4 *>(r + 12) = make_float4(Ad[8], bo[0], bo[1], bo[2]);
      *reinterpret_cast<float4 *>(r + 16) = make_float4(Cd[0], Cd[1], Cd[2], Cd[3]);
      *reinterpret_cast<float4 *>(r + 20) = make_float4(Cd[4], Cd[5], Cd[6], Cd[7]);
      r[24] = Cd[8];
    } else {
      r[12] = Ad[8];
    }
    float w[3][3];
    for (int a = 0; a < 3; ++a) {
      float dw[3];
      bspline_weights(L.fx[a], w[a], dw);
    }
    for (int ei = 0; ei < 3; ++ei)
      for (int ej = 0; ej < 3; ++ej) r[WO + 3 * ei + ej] = w[0][ei] * w[1][ej];
    for (int ek = 0; ek < 3; ++ek) r[WO + 9 + ek] = w[2][ek];
    if (DET) r[GREC_SRC(OLD)] = __int_as_float(L.src); /* whose contribution was out of range */
  }
  __syncwarp();
  /* 4. The walk. Valid lanes come first (KEY_NONE sorts last); a record ends its cell's run
   * where the next lane starts another cell or holds no particle. */
  const unsigned valid = __ballot_sync(FULL, L.valid);
  const int n = __popc(valid);
  const unsigned key_before = __shfl_up_sync(FULL, L.key, 1);
  const unsigned heads = __ballot_sync(FULL, lane == 0 || key_before != L.key);
  const unsigned ends = ((heads >> 1) | 0x80000000u) & valid;
  /* The box sums (p2g_box): the box of the valid lanes' cells, 2 nodes wider, if it fits. */
  constexpr bool BOX = p2g_box<NODESUM, OLD, DET>::FLOATS > 0;
  constexpr int BC = p2g_box<NODESUM, OLD, DET>::C;
  float *s_box = s_rec + R * LANES;
  int lo[3] = {0, 0, 0}, ext[3] = {0, 0, 0}, box = 0;
  if (BOX) {
    for (int a = 0; a < 3; ++a) {
      lo[a] = __reduce_min_sync(FULL, L.valid ? L.d[a] : ZONE);
      ext[a] = __reduce_max_sync(FULL, L.valid ? L.d[a] : -1) - lo[a] + 3;
    }
    const int nodes = ext[0] * ext[1] * ext[2];
    /* warp-uniform; 0: the per-cell walk's atomics (27 a cell), where the box would not save enough */
    box = ext[0] > 2 && nodes <= NODESUM && 27.0f * (float)__popc(ends) > (float)nodes ? nodes : 0;
    if (BC == 4) /* a node a float4 (s_rec's records end 16-byte aligned) */
      for (int i = lane; i < box; i += LANES) reinterpret_cast<float4 *>(s_box)[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    else
      for (int i = lane; i < box * BC; i += LANES) s_box[i] = 0.0f;
    __syncwarp();
  }

  const int ei = lane < 27 ? lane / 9 : 0, ej = lane < 27 ? lane / 3 % 3 : 0, ek = lane < 27 ? lane % 3 : 0;
  const float e0 = (float)ei, e1 = (float)ej, e2 = (float)ek;
  const float *wxy = s_rec + WO + 3 * ei + ej, *wz = s_rec + WO + 9 + ek;
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f, u0 = 0.0f, u1 = 0.0f, u2 = 0.0f;
  long long i0 = 0, i1 = 0, i2 = 0, i3 = 0, j0 = 0, j1 = 0, j2 = 0; /* DET */
  unsigned long long fix_bad_id = ~0ULL; /* DET: the smallest id of a record out of range */
#pragma unroll 4
  for (int i = 0; i < n; ++i) {
    const float *r = s_rec + i * R;
    const float4 q0 = *reinterpret_cast<const float4 *>(r);
    const float4 q1 = *reinterpret_cast<const float4 *>(r + 4);
    const float4 q2 = *reinterpret_cast<const float4 *>(r + 8);
    const float4 q3 = OLD ? *reinterpret_cast<const float4 *>(r + 12) : make_float4(r[12], 0.0f, 0.0f, 0.0f);
    const float w = wxy[i * R] * wz[i * R];
    const float v0 = w * q0.x;
    const float v1 = w * (q0.y + q1.x * e0 + q1.y * e1 + q1.z * e2);
    const float v2 = w * (q0.z + q1.w * e0 + q2.x * e1 + q2.y * e2);
    const float v3 = w * (q0.w + q2.z * e0 + q2.w * e1 + q3.x * e2);
    float o0 = 0.0f, o1 = 0.0f, o2 = 0.0f;
    if (OLD) {
      const float4 q4 = *reinterpret_cast<const float4 *>(r + 16);
      const float4 q5 = *reinterpret_cast<const float4 *>(r + 20);
      const float c8 = r[24];
      o0 = w * (q3.y + q4.x * e0 + q4.y * e1 + q4.z * e2);
      o1 = w * (q3.z + q4.w * e0 + q5.x * e1 + q5.y * e2);
      o2 = w * (q3.w + q5.z * e0 + q5.w * e1 + c8 * e2);
    }
    if (DET) { /* each contribution as an integer first: the sums do not depend on the order */
      int bad = 0;
      i0 += fix_to(v0, fp.sm, &bad), i1 += fix_to(v1, fp.sp, &bad);
      i2 += fix_to(v2, fp.sp, &bad), i3 += fix_to(v3, fp.sp, &bad);
      if (OLD) j0 += fix_to(o0, fp.sp, &bad), j1 += fix_to(o1, fp.sp, &bad), j2 += fix_to(o2, fp.sp, &bad);
      if (bad && lane < 27) { /* rare: the run stops */
        const unsigned long long id = pid[p * LANES + __float_as_int(r[GREC_SRC(OLD)])];
        fix_bad_id = id < fix_bad_id ? id : fix_bad_id;
      }
    } else {
      s0 += v0, s1 += v1, s2 += v2, s3 += v3;
      if (OLD) u0 += o0, u1 += o1, u2 += o2;
    }
    if ((ends >> i) & 1u) { /* uniform over the warp: the cell's run ends, one atomic per node */
      const unsigned k = __shfl_sync(FULL, L.key, i);
      const int d[3] = {(int)(k / (ZONE * ZONE)), (int)(k / ZONE % ZONE), (int)(k % ZONE)}; /* the cell's offset */
      int nb, node;
      node_of(d, ei, ej, ek, &nb, &node);
      const int blk = __shfl_sync(FULL, my_nbr, nb);
      /* one mark per block: the lowest stencil node of the block on every axis */
      const bool mark = (ei == 0 || node >> 4 == 0) && (ej == 0 || (node >> 2 & 3) == 0) && (ek == 0 || (node & 3) == 0);
      if (BOX && box) { /* into the warp's box: 27 distinct nodes, ordered by the __syncwarp */
        if (lane < 27) {
          float *b = s_box + BC * (((d[0] + ei - lo[0]) * ext[1] + d[1] + ej - lo[1]) * ext[2] + d[2] + ek - lo[2]);
          b[0] += s0, b[1] += s1, b[2] += s2, b[3] += s3;
          if (OLD) b[4] += u0, b[5] += u1, b[6] += u2;
        }
        __syncwarp();
      } else if (lane < 27 && DET) {
        p2g_add_node_fix<OLD>(fp, touched, blk, node, i0, i1, i2, i3, j0, j1, j2, mark);
      } else if (lane < 27) {
        p2g_add_node<OLD>(grid, grid0, touched, blk, node, s0, s1, s2, s3, u0, u1, u2, mark);
      }
      s0 = s1 = s2 = s3 = u0 = u1 = u2 = 0.0f;
      i0 = i1 = i2 = i3 = j0 = j1 = j2 = 0;
    }
  }
  if (BOX && box) { /* the box's nodes, 32 a pass: one global atomic a node the packet reached */
    for (int t0 = 0; t0 < box; t0 += LANES) {
      const int t = t0 + lane;
      const float *b = s_box + BC * t;
      const float4 v = t >= box ? make_float4(0.0f, 0.0f, 0.0f, 0.0f)
                       : BC == 4 ? *reinterpret_cast<const float4 *>(b) : make_float4(b[0], b[1], b[2], b[3]);
      const bool hit = v.x != 0.0f; /* its mass: 0 only where every weight is 0 */
      int nb = 0, node = 0;
      const int g[3] = {lo[0] + t / (ext[1] * ext[2]), lo[1] + t / ext[2] % ext[1], lo[2] + t % ext[2]};
      if (hit) node_of(g, 0, 0, 0, &nb, &node);
      const int blk = __shfl_sync(FULL, my_nbr, nb);
      if (hit)
        p2g_add_node<OLD>(grid, grid0, touched, blk, node, v.x, v.y, v.z, v.w, OLD ? b[4] : 0.0f, OLD ? b[5] : 0.0f,
                          OLD ? b[6] : 0.0f, true);
    }
  }
  if (DET && fix_bad_id != ~0ULL) {
    atomicOr(&ctl->fix_bad, 1u);
    atomicMin(&ctl->fix_bad_id, fix_bad_id);
  }
}

/* The P2G of a warp's packet (p2g_gather), with the box sums (p2g_box) of at most NODESUM nodes a
 * packet (0: none); s_p2g: P2G_SMEM floats of the warp's shared memory (p2g_gather's records and
 * box). The box sums pay where P2G is latency-bound (the small scenes whose steps are the
 * fused G2P2G's) and lose where it is throughput-bound (the large ones, k_p2g's; see
 * docs/performance.md (decisions)), so k_g2p2g, which runs below parallel.g2p2g_below particles a GPU, takes them
 * (G2P2G_NODESUM) and k_p2g does not (P2G_NODESUM). */
#define P2G_NODESUM 0     /* k_p2g: no box sums */
#define G2P2G_NODESUM 216 /* k_g2p2g: the most nodes of a packet's box it takes */
#define P2G_SMEM(OLD, DET, NODESUM) (GREC_FLOATS(OLD) * LANES + p2g_box<NODESUM, OLD, DET>::FLOATS)
template <bool OLD, bool DET, int NODESUM, bool CPK = false>
__device__ __forceinline__ void p2g_any(step_ctl *ctl, float dt, size_t p, const int2 *__restrict__ hdr,
                                        const int32_t *__restrict__ pb_coord, const int32_t *__restrict__ pb_nbr,
                                        float *__restrict__ pk, const uint64_t *__restrict__ pid,
                                        const material_params *__restrict__ mats, float3 origin, float dx, float inv_dx,
                                        float *__restrict__ grid, uint8_t *__restrict__ touched,
                                        float *__restrict__ grid0, float *s_p2g, unsigned *s_sort, fixp fp,
                                        int plastic, const cpk_view &cv = cpk_view{}) {
  p2g_gather<OLD, DET, NODESUM, CPK>(ctl, dt, p, hdr, pb_coord, pb_nbr, pk, pid, mats, origin, dx, inv_dx, grid,
                                     touched, grid0, s_p2g, s_sort, fp, plastic, cv);
}


/* ---- G2P: the stencil nodes of one warp's particles ----------------------------------------- */

/* G2P's gather for one lane's particle (ok: it has one; d, fx: locate's; w: its B-spline
 * weights): v = sum_i w_i v_i and B = sum_i w_i v_i (x_i - x_p)^T over its 27 stencil nodes, and
 * with ASFLIP (flip) vold = sum_i w_i v0_i. Each node is read from the grid, its block through
 * lane nb's my_nbr (the packet's 27 physical blocks, one per lane). Every lane of the warp calls
 * it (the shuffles). */
template <bool OLD>
__device__ __forceinline__ void g2p_nodes_direct(int ok, const int d[3], const float fx[3], const float w[3][3],
                                                 float dx, int my_nbr, const float *__restrict__ grid,
                                                 const float *__restrict__ grid0, int flip, float v[3], float B[9],
                                                 float vold[3]) {
  for (int ei = 0; ei < 3; ++ei)
    for (int ej = 0; ej < 3; ++ej)
      for (int ek = 0; ek < 3; ++ek) {
        int nb, node;
        node_of(d, ei, ej, ek, &nb, &node);
        const int blk = __shfl_sync(FULL, my_nbr, nb);
        if (!ok) continue;
        const float wt = w[0][ei] * w[1][ej] * w[2][ek];
        const float r[3] = {((float)ei - fx[0]) * dx, ((float)ej - fx[1]) * dx, ((float)ek - fx[2]) * dx};
        const float *gb = grid + (size_t)blk * BLOCK_FLOATS;
#if GRID_VEC4
        const float4 gn = *reinterpret_cast<const float4 *>(gb + gidx(node, 0));
        const float gv[3] = {gn.y, gn.z, gn.w};
#else
        const float gv[3] = {gb[gidx(node, 1)], gb[gidx(node, 2)], gb[gidx(node, 3)]};
#endif
        for (int a = 0; a < 3; ++a) {
          const float vi = wt * gv[a];
          v[a] += vi;
          for (int e = 0; e < 3; ++e) B[3 * a + e] += vi * r[e];
        }
        if (OLD && flip)
          for (int a = 0; a < 3; ++a) vold[a] += wt * grid0[(size_t)blk * OLD_FLOATS + a * BLOCK_NODES + node];
      }
}

/* The same gather through a tile in shared memory, G2P's own: faster than the direct gather on
 * the larger scenes, within noise on the small ones (see docs/performance.md (decisions)). The
 * warp's particles sit in a few cells of one particle block, so their stencils
 * overlap: the union of the stencils is the box [lo, hi + 2] of the lanes' offsets d (a warp
 * minimum and maximum per axis), 6 x 6 x 6 nodes right after a rebuild-mapping. The warp loads
 * that box once into the tile (a node per lane and round, its block through lane nb's my_nbr),
 * and each lane then reads its 27 nodes from the tile, with no block lookup, shuffle or global
 * load per node: the per-node work of g2p_nodes_direct but the weights and sums. The sums are
 * those of g2p_nodes_direct bit for bit (the same values added in the same order). A box larger
 * than G2P_TILE_NODES (particles spread by a long time since the rebuild-mapping), ASFLIP (its
 * old velocities would double the tile) and tile NULL take g2p_nodes_direct. Returns whether the
 * tile served. Every lane of the warp calls it; the control flow is uniform over the warp (the
 * box is the warp's). */
#define G2P_TILE_NODES 216 /* float4 each: 3,456 bytes a warp */
static_assert(G2P_TILE_NODES <= 512, "g2p_nodes_tiled's float quotients are exact for boxes of up to 512 nodes");
/* A kernel's tile per warp (one float4 where the variant takes no tile: ASFLIP), and the pointer
 * g2p_nodes gets (NULL: no tile). */
#define G2P_TILE_FLOAT4S(OLD) (!(OLD) ? G2P_TILE_NODES : 1)
#define G2P_TILE_OF(OLD, t) (!(OLD) ? (t) : (float4 *)0)
__device__ __forceinline__ int g2p_nodes_tiled(int ok, const int d[3], const float fx[3], const float w[3][3],
                                               float dx, int my_nbr, const float *__restrict__ grid, float v[3],
                                               float B[9], float4 *tile) {
  int lo[3], n[3];
  for (int a = 0; a < 3; ++a) {
    lo[a] = (int)__reduce_min_sync(FULL, (unsigned)(ok ? d[a] : ZONE));
    n[a] = (int)__reduce_max_sync(FULL, (unsigned)(ok ? d[a] : 0)) - lo[a] + 3;
  }
  const int total = n[0] > 0 && n[1] > 0 && n[2] > 0 ? n[0] * n[1] * n[2] : 0; /* 0: no lane has a particle */
  if (total > G2P_TILE_NODES) {
    g2p_nodes_direct<false>(ok, d, fx, w, dx, my_nbr, grid, nullptr, 0, v, B, nullptr);
    return 0;
  }
  const int lane = threadIdx.x & 31;
  /* node u of the box at (u / (n1 n2), u / n2 % n1, u % n2), the quotients by float reciprocals:
   * u < 216, so (u + 1/2) / n lies at least 1/432 from a whole number, far beyond the
   * reciprocal's and the product's rounding (the integer divisions were 17.7% of k_g2p's
   * instructions at l = 46) */
  const int n12 = n[1] * n[2];
  const float r12 = 1.0f / (float)n12, r2 = 1.0f / (float)n[2];
  for (int base = 0; base < total; base += LANES) { /* every lane goes round as often: the shuffle */
    const int t = base + lane, in = t < total, u = in ? t : 0;
    const int q0 = (int)(((float)u + 0.5f) * r12), rem = u - q0 * n12;
    const int q1 = (int)(((float)rem + 0.5f) * r2);
    const int c[3] = {lo[0] + q0, lo[1] + q1, lo[2] + rem - q1 * n[2]};
    int nb, node;
    node_of(c, 0, 0, 0, &nb, &node);
    const int blk = __shfl_sync(FULL, my_nbr, nb);
    if (in) {
      const float *gb = grid + (size_t)blk * BLOCK_FLOATS;
#if GRID_VEC4
      tile[t] = *reinterpret_cast<const float4 *>(gb + gidx(node, 0));
#else
      tile[t] = make_float4(gb[gidx(node, 0)], gb[gidx(node, 1)], gb[gidx(node, 2)], gb[gidx(node, 3)]);
#endif
    }
  }
  __syncwarp();
  if (ok) {
    const int s1 = n[2], s0 = n[1] * n[2];
    const int t0 = (d[0] - lo[0]) * s0 + (d[1] - lo[1]) * s1 + (d[2] - lo[2]);
    for (int ei = 0; ei < 3; ++ei)
      for (int ej = 0; ej < 3; ++ej)
        for (int ek = 0; ek < 3; ++ek) {
          const float wt = w[0][ei] * w[1][ej] * w[2][ek];
          const float r[3] = {((float)ei - fx[0]) * dx, ((float)ej - fx[1]) * dx, ((float)ek - fx[2]) * dx};
          const float4 gn = tile[t0 + ei * s0 + ej * s1 + ek];
          const float gv[3] = {gn.y, gn.z, gn.w};
          for (int a = 0; a < 3; ++a) {
            const float vi = wt * gv[a];
            v[a] += vi;
            for (int e = 0; e < 3; ++e) B[3 * a + e] += vi * r[e];
          }
        }
  }
  __syncwarp(); /* the tile is free for the warp's next use */
  return 1;
}

template <bool OLD>
__device__ __forceinline__ int g2p_nodes(int ok, const int d[3], const float fx[3], const float w[3][3], float dx,
                                         int my_nbr, const float *__restrict__ grid, const float *__restrict__ grid0,
                                         int flip, float v[3], float B[9], float vold[3], float4 *tile) {
  if constexpr (!OLD)
    if (tile) return g2p_nodes_tiled(ok, d, fx, w, dx, my_nbr, grid, v, B, tile);
  g2p_nodes_direct<OLD>(ok, d, fx, w, dx, my_nbr, grid, grid0, flip, v, B, vold);
  return 0;
}

#endif

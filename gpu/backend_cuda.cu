// backend_cuda.cu - the CUDA backend, first version (issue 3): the CPU reference backend's
// pipeline (src/backend_cpu.c) on one device, correct before fast.
//
// Layout and physics are those of the CPU backend, so that the two agree up to the order of
// floating-point sums (the paper, section 4; DESIGN.md, "One time step on one device"):
//   - the same sparse grid (physics/sparse.h): origin = domain_min - GRID_PAD dx, 4x4x4 blocks
//     with Morton codes, particle block P = base node >> 2, 3x3x3 physical blocks, free zone;
//   - rebuild-mapping only when G2P flagged that a particle left its free zone: keys
//     (particle block code << 6 | cell) sorted with CUB radix sort (stable, so ties keep the
//     previous order as on the CPU), particle blocks from a scan over key changes, physical
//     blocks = the sorted unique 27-neighbourhoods (dense indices in Morton order, as on the
//     CPU), and a device hash table (open addressing, atomicCAS on 64-bit codes) code -> index;
//   - P2G (one thread per particle, constitutive_update fused in) scatters with float atomicAdd
//     on global memory: sums are reordered against the CPU's fixed order, so results agree to
//     rounding, not bit for bit;
//   - grid update (one CUDA block per grid block, untouched blocks skipped) with gravity and the
//     CPU's wall conditions;
//   - G2P (APIC / MLS-MPM) with the deformation update, clamping, free-zone check, max-speed
//     reduction and the non-finite / runaway check of backend.h.
// Grid storage per block: 4 channels x 64 nodes (mass, then momentum x,y,z, which the grid
// update turns into velocity in place), as on the CPU.
//
// Host synchronisation: G2P writes a small flag record (left the free zone, max speed, smallest
// id of a non-finite particle) that the host reads once per step; a rebuild reads two counts.
// Removing these (dt and the rebuild decision on the device, CUDA graphs) is later work.
#include <cuda_runtime.h>

#include <cub/cub.cuh>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend.h"
#include "error.h"
#include "log.h"
#include "scene.h"
}
#include "backend_cuda.h"
#include "physics/bspline.h"
#include "physics/constitutive.h"
#include "physics/sparse.h"

#define BLOCK_FLOATS (4 * BLOCK_NODES)
#define THREADS 128 /* particle kernels; a multiple of the warp size (the G2P reductions need it) */

/* ---- errors ------------------------------------------------------------------------------- */

static int cuda_fail(cudaError_t e, const char *call, const char *file, int line) {
  cudaGetLastError(); /* clear a non-sticky error so later calls start clean */
  return dr_fail_at(DR_ECUDA, file, line, call, "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Every CUDA runtime call: on failure records "call failed (file:line): error" and returns. */
#define CU(call)                                                                                   \
  do {                                                                                             \
    cudaError_t cu_e_ = (call);                                                                    \
    if (cu_e_ != cudaSuccess) return cuda_fail(cu_e_, #call, __FILE__, __LINE__);                  \
  } while (0)

/* After every kernel launch (launch errors; faults during the kernel surface at the next
 * synchronising call, which CU checks). */
#define LAUNCHED(kernel)                                                                           \
  do {                                                                                             \
    cudaError_t cu_e_ = cudaGetLastError();                                                        \
    if (cu_e_ != cudaSuccess) return cuda_fail(cu_e_, "kernel " kernel, __FILE__, __LINE__);       \
  } while (0)

static unsigned grid_dim(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }

/* ---- device vectors ----------------------------------------------------------------------- */

/* A raw device buffer. Growth policy (DESIGN.md): when a request needs more than half the
 * capacity, the buffer grows to 4x the old capacity (at least twice the request), so the steady
 * state allocates nothing. exact = 1 sizes it to the request (particle state, whose count is
 * fixed in this version). */
typedef struct dvec {
  void *ptr;
  size_t bytes;
} dvec;

static int dvec_fail(size_t need, const char *what, const char *file, int line) {
  cudaGetLastError();
  size_t freeb = 0, total = 0;
  cudaMemGetInfo(&freeb, &total);
  cudaGetLastError();
  return dr_fail_at(DR_ENOMEM, file, line, "cudaMalloc",
                    "out of device memory: %s needs %.1f MiB; cudaMemGetInfo says %.1f MiB free of %.1f MiB", what,
                    need / 1048576.0, freeb / 1048576.0, total / 1048576.0);
}

static int dvec_reserve_at(dvec *v, size_t need, int keep, int exact, const char *what, const char *file, int line) {
  if (exact ? need <= v->bytes : 2 * need <= v->bytes) return DR_OK;
  size_t cap = exact ? need : (4 * v->bytes > 2 * need ? 4 * v->bytes : 2 * need);
  if (cap < 256) cap = 256;
  void *q = NULL;
  if (cudaMalloc(&q, cap) != cudaSuccess) return dvec_fail(cap, what, file, line);
  if (keep && v->ptr && v->bytes) CU(cudaMemcpy(q, v->ptr, v->bytes, cudaMemcpyDeviceToDevice));
  if (v->ptr) CU(cudaFree(v->ptr));
  v->ptr = q;
  v->bytes = cap;
  return DR_OK;
}
#define DVEC_RESERVE(v, need, keep, what) DR_TRY(dvec_reserve_at(&(v), (need), (keep), 0, (what), __FILE__, __LINE__))
#define DVEC_EXACT(v, need, what) DR_TRY(dvec_reserve_at(&(v), (need), 0, 1, (what), __FILE__, __LINE__))

static void dvec_free(dvec *v) {
  if (v->ptr) cudaFree(v->ptr);
  v->ptr = NULL;
  v->bytes = 0;
}

template <typename T> static T *dp(const dvec &v) { return (T *)v.ptr; }

/* ---- state -------------------------------------------------------------------------------- */

/* Particle attributes on the device, structure of arrays (as particles.h). */
typedef struct pbuf {
  dvec x, v, C, F, mass, vol0, id, material;
} pbuf;

/* What G2P reports to the host each step (reset before each G2P). */
typedef struct step_flags {
  unsigned int leave;         /* some particle left its free zone */
  unsigned int vmax_bits;     /* max speed as float bits (non-negative floats order as uints) */
  unsigned long long bad_id;  /* smallest id of a non-finite particle, or ~0 */
  int bad_material;
} step_flags;

typedef struct cuda_state {
  sim_params prm;
  material_params *mats; /* host copy, borrowed by prm.materials */
  int device;
  char device_name[256];
  float origin[3], inv_dx;
  float wall_lo[3], wall_hi[3]; /* nodes below / above these coordinates are wall nodes */
  float dmin[3], dmax[3];       /* domain as floats (the advection clamp) */
  int code_bits;                /* bits of a block code that can be non-zero */

  size_t n;
  pbuf p[2]; /* p[cur] is current; the other is the permutation target at rebuild */
  int cur;
  dvec d_mats;

  dvec pblock;              /* [n] int32: particle block of each particle */
  dvec keys[2], vals[2];    /* [n] uint64 keys, uint32 indices: radix sort in and out */
  dvec head;                /* [n] int32: 1 where a particle block starts, then its inclusive scan */

  size_t n_pb;
  dvec pb_coord;            /* [3 n_pb] int32 */
  dvec pb_nbr;              /* [27 n_pb] int32 physical block indices, sparse_neighbor() order */
  dvec pb_start;            /* [n_pb + 1] int32 first particle of each particle block */
  dvec nbr_codes[2];        /* [27 n_pb] uint64: neighbour codes, then sorted */

  size_t n_blocks;
  dvec block_code;          /* [n_blocks] uint64, sorted */
  dvec grid;                /* [n_blocks][4][64] float */
  dvec touched;             /* [n_blocks] uint8 */
  size_t table_cap;         /* power of two, at least twice n_blocks */
  dvec table_keys, table_vals;

  dvec temp;                /* CUB temporary storage: allocated once, grown when a call needs more */
  dvec flags;               /* step_flags */
  dvec count;               /* int: number selected by DeviceSelect::Unique */

  uint8_t *h_touched;       /* host copy for stats */
  size_t h_touched_cap;

  int need_rebuild;
  uint64_t rebuilds;
  float vmax;
} cuda_state;

/* ---- hash table --------------------------------------------------------------------------- */

#define TABLE_EMPTY 0xffffffffffffffffULL /* cudaMemset 0xff makes every key empty */

/* splitmix64's finalizer (as rng_mix in rng.h, which is host only). */
__device__ static inline uint64_t table_hash(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Linear probing; the slot is claimed with atomicCAS on the 64-bit key, so concurrent inserts
 * of different codes never share a slot and an existing code is found rather than duplicated. */
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

__device__ static inline int32_t table_find(const unsigned long long *keys, const int32_t *vals, size_t mask,
                                            uint64_t code) {
  for (size_t h = table_hash(code) & mask;; h = (h + 1) & mask) {
    const unsigned long long k = keys[h];
    if (k == code) return vals[h];
    if (k == TABLE_EMPTY) return -1;
  }
}

/* ---- rebuild-mapping kernels -------------------------------------------------------------- */

__device__ static inline void base_node(const float *x, float3 origin, float inv_dx, int b[3]) {
  b[0] = bspline_base((x[0] - origin.x) * inv_dx);
  b[1] = bspline_base((x[1] - origin.y) * inv_dx);
  b[2] = bspline_base((x[2] - origin.z) * inv_dx);
}

/* Keys: particle block code (high bits) and cell inside the particle block (low 6 bits). */
__global__ static void k_keys(size_t n, const float *x, float3 origin, float inv_dx, uint64_t *keys,
                              uint32_t *vals) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  int b[3];
  base_node(x + 3 * i, origin, inv_dx, b);
  const uint64_t code = sparse_block_code(b[0] >> 2, b[1] >> 2, b[2] >> 2);
  keys[i] = (code << 6) | (uint64_t)sparse_node_in_block(b[0] & 3, b[1] & 3, b[2] & 3);
  vals[i] = (uint32_t)i;
}

/* out[i] = in[perm[i]] for every attribute. */
__global__ static void k_gather(size_t n, const uint32_t *perm, const float *x, const float *v, const float *C,
                                const float *F, const float *mass, const float *vol0, const uint64_t *id,
                                const int32_t *mat, float *ox, float *ov, float *oC, float *oF, float *omass,
                                float *ovol0, uint64_t *oid, int32_t *omat) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const size_t j = perm[i];
  for (int a = 0; a < 3; ++a) ox[3 * i + a] = x[3 * j + a], ov[3 * i + a] = v[3 * j + a];
  for (int a = 0; a < 9; ++a) oC[9 * i + a] = C[9 * j + a], oF[9 * i + a] = F[9 * j + a];
  omass[i] = mass[j];
  ovol0[i] = vol0[j];
  oid[i] = id[j];
  omat[i] = mat[j];
}

__device__ static inline int is_head(size_t i, const uint64_t *keys) {
  return i == 0 || (keys[i] >> 6) != (keys[i - 1] >> 6);
}

__global__ static void k_heads(size_t n, const uint64_t *keys, int32_t *head) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) head[i] = is_head(i, keys);
}

/* scan = inclusive sum of the heads: particle i is in particle block scan[i] - 1. Each head
 * records its block's start, coordinates and 27 neighbour codes. */
__global__ static void k_pblocks(size_t n, const uint64_t *keys, const int32_t *scan, int32_t *pblock,
                                 int32_t *pb_start, int32_t *pb_coord, uint64_t *nbr_codes) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t q = scan[i] - 1;
  pblock[i] = q;
  if (i == n - 1) pb_start[q + 1] = (int32_t)n;
  if (!is_head(i, keys)) return;
  pb_start[q] = (int32_t)i;
  int c[3];
  sparse_block_coords(keys[i] >> 6, c);
  for (int a = 0; a < 3; ++a) pb_coord[3 * q + a] = c[a];
  for (int di = -1; di <= 1; ++di)
    for (int dj = -1; dj <= 1; ++dj)
      for (int dk = -1; dk <= 1; ++dk)
        nbr_codes[27 * (size_t)q + sparse_neighbor(di, dj, dk)] = sparse_block_code(c[0] + di, c[1] + dj, c[2] + dk);
}

__global__ static void k_pb_nbr(size_t m, const uint64_t *nbr_codes, const unsigned long long *keys,
                                const int32_t *vals, size_t mask, int32_t *pb_nbr) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < m) pb_nbr[i] = table_find(keys, vals, mask, nbr_codes[i]);
}

/* ---- P2G ---------------------------------------------------------------------------------- */

/* The stencil of one particle (as make_stencil in backend_cpu.c): base node, B-spline weights
 * per axis, and where its 27 nodes live (physical block among the particle block's 27, node
 * inside the block). */
typedef struct stencil {
  float fx[3];
  float w[3][3];
  int blk[3][3];  /* per axis and stencil offset: block offset in {0,1,2} */
  int node[3][3]; /* per axis and stencil offset: node coordinate inside the block */
} stencil;

__device__ static inline void make_stencil(const float *x, float3 origin, float inv_dx, const int32_t *P,
                                           stencil *st) {
  const float o[3] = {origin.x, origin.y, origin.z};
  for (int a = 0; a < 3; ++a) {
    const float xg = (x[a] - o[a]) * inv_dx;
    const int b = bspline_base(xg);
    st->fx[a] = xg - (float)b;
    float dw[3];
    bspline_weights(st->fx[a], st->w[a], dw);
    for (int d = 0; d < 3; ++d) {
      const int nd = b + d;
      st->blk[a][d] = (nd >> 2) - P[a] + 1;
      st->node[a][d] = nd & 3;
    }
  }
}

/* One thread per particle: plasticity and Kirchhoff stress (F updated in place), then the
 * MLS-MPM scatter of mass and momentum (Hu et al. 2018): the stress enters as
 * -dt V0 (4/dx^2) tau next to APIC's m C. */
__global__ static void k_p2g(size_t n, float dt, float dx, float inv_dx, float3 origin,
                             const material_params *mats, const float *x, const float *v, const float *C, float *Fs,
                             const float *mass, const float *vol0, const int32_t *material, const int32_t *pblock,
                             const int32_t *pb_coord, const int32_t *pb_nbr, float *grid, uint8_t *touched) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const material_params mat = mats[material[i]];
  float F[9], tau[9];
  for (int q = 0; q < 9; ++q) F[q] = Fs[9 * i + q];
  constitutive_update(&mat, F, tau);
  for (int q = 0; q < 9; ++q) Fs[9 * i + q] = F[q];
  const float m = mass[i];
  const float k = -dt * vol0[i] * 4.0f * inv_dx * inv_dx;
  float A[9], vi[3];
  for (int q = 0; q < 9; ++q) A[q] = k * tau[q] + m * C[9 * i + q];
  for (int a = 0; a < 3; ++a) vi[a] = v[3 * i + a];
  const int32_t pb = pblock[i];
  const int32_t P[3] = {pb_coord[3 * pb], pb_coord[3 * pb + 1], pb_coord[3 * pb + 2]};
  const int32_t *nbr = pb_nbr + 27 * (size_t)pb;
  stencil st;
  make_stencil(x + 3 * i, origin, inv_dx, P, &st);
  for (int di = 0; di < 3; ++di)
    for (int dj = 0; dj < 3; ++dj)
      for (int dk = 0; dk < 3; ++dk) {
        const float w = st.w[0][di] * st.w[1][dj] * st.w[2][dk];
        const float d[3] = {((float)di - st.fx[0]) * dx, ((float)dj - st.fx[1]) * dx, ((float)dk - st.fx[2]) * dx};
        const int blk = nbr[sparse_neighbor(st.blk[0][di] - 1, st.blk[1][dj] - 1, st.blk[2][dk] - 1)];
        float *g = grid + (size_t)blk * BLOCK_FLOATS;
        const int nd = sparse_node_in_block(st.node[0][di], st.node[1][dj], st.node[2][dk]);
        atomicAdd(g + nd, w * m);
        for (int a = 0; a < 3; ++a)
          atomicAdd(g + (a + 1) * BLOCK_NODES + nd,
                    w * (m * vi[a] + A[3 * a] * d[0] + A[3 * a + 1] * d[1] + A[3 * a + 2] * d[2]));
        touched[blk] = 1; /* every writer stores the same value */
      }
}

/* ---- grid update -------------------------------------------------------------------------- */

typedef struct wall_params {
  int boundary;
  float friction;
  float lo[3], hi[3];
} wall_params;

/* Wall condition on one node's velocity (backend_cpu.c's wall(); n points into the domain).
 * sticky: v = 0. slip: the normal component is removed. separate: only motion into the wall is
 * removed, and Coulomb friction slows the tangential part by friction * |v_n|. */
__device__ static inline void wall(const wall_params *wp, float v[3], int axis, float inward) {
  const float vn = v[axis] * inward;
  switch (wp->boundary) {
  case BOUNDARY_STICKY:
    v[0] = v[1] = v[2] = 0.0f;
    return;
  case BOUNDARY_SLIP:
    v[axis] = 0.0f;
    return;
  default:
    if (vn >= 0.0f) return;
    v[axis] = 0.0f;
    const float t2 = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
    if (t2 > 0.0f) {
      const float t = sqrtf(t2), scale = fmaxf(0.0f, 1.0f - wp->friction * (-vn) / t);
      for (int a = 0; a < 3; ++a) v[a] *= scale;
    }
  }
}

/* One CUDA block of 64 threads per grid block, one thread per node. */
__global__ static void k_grid_update(float dt, float dx, float3 origin, float3 gravity, wall_params wp,
                                     const uint64_t *block_code, const uint8_t *touched, float *grid) {
  const size_t blk = blockIdx.x;
  if (!touched[blk]) return;
  const int nd = threadIdx.x; /* = sparse_node_in_block(li, lj, lk) */
  const int li = nd / 16, lj = (nd / 4) % 4, lk = nd % 4;
  float *gd = grid + blk * BLOCK_FLOATS;
  const float m = gd[nd];
  if (m <= 0.0f) return;
  int c[3];
  sparse_block_coords(block_code[blk], c);
  const float g[3] = {gravity.x, gravity.y, gravity.z}, o[3] = {origin.x, origin.y, origin.z};
  float v[3];
  for (int a = 0; a < 3; ++a) v[a] = gd[(a + 1) * BLOCK_NODES + nd] / m + g[a] * dt;
  const int idx[3] = {4 * c[0] + li, 4 * c[1] + lj, 4 * c[2] + lk};
  for (int a = 0; a < 3; ++a) {
    const float xn = o[a] + (float)idx[a] * dx;
    if (xn < wp.lo[a]) wall(&wp, v, a, 1.0f);
    else if (xn > wp.hi[a]) wall(&wp, v, a, -1.0f);
  }
  for (int a = 0; a < 3; ++a) gd[(a + 1) * BLOCK_NODES + nd] = v[a];
}

/* ---- G2P ---------------------------------------------------------------------------------- */

/* One thread per particle: APIC velocity and affine matrix C = (4/dx^2) sum w v (x_i - x_p)^T,
 * F <- (I + dt C) F, advection clamped to the domain, free-zone check, speed, non-finite and
 * runaway check (speed above runaway = DR_RUNAWAY_CELLS dx / dt).
 * The max speed and the free-zone flag are reduced over the warp first (one atomic per warp). */
__global__ static void k_g2p(size_t n, float dt, float dx, float inv_dx, float runaway, float3 origin, float3 dmin,
                             float3 dmax,
                             float *xs, float *vs, float *Cs, float *Fs, const uint64_t *id, const int32_t *pblock,
                             const int32_t *pb_coord, const int32_t *pb_nbr, const float *grid, step_flags *flags) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  unsigned int speed_bits = 0;
  int leave = 0;
  if (i < n) {
    const float k = 4.0f * inv_dx * inv_dx;
    const int32_t pb = pblock[i];
    const int32_t P[3] = {pb_coord[3 * pb], pb_coord[3 * pb + 1], pb_coord[3 * pb + 2]};
    const int32_t *nbr = pb_nbr + 27 * (size_t)pb;
    float x[3] = {xs[3 * i], xs[3 * i + 1], xs[3 * i + 2]};
    stencil st;
    make_stencil(x, origin, inv_dx, P, &st);
    float v[3] = {0, 0, 0}, B[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    for (int di = 0; di < 3; ++di)
      for (int dj = 0; dj < 3; ++dj)
        for (int dk = 0; dk < 3; ++dk) {
          const float w = st.w[0][di] * st.w[1][dj] * st.w[2][dk];
          const float d[3] = {((float)di - st.fx[0]) * dx, ((float)dj - st.fx[1]) * dx,
                              ((float)dk - st.fx[2]) * dx};
          const int blk = nbr[sparse_neighbor(st.blk[0][di] - 1, st.blk[1][dj] - 1, st.blk[2][dk] - 1)];
          const float *g = grid + (size_t)blk * BLOCK_FLOATS;
          const int nd = sparse_node_in_block(st.node[0][di], st.node[1][dj], st.node[2][dk]);
          for (int a = 0; a < 3; ++a) {
            const float vi = g[(a + 1) * BLOCK_NODES + nd];
            v[a] += w * vi;
            for (int e = 0; e < 3; ++e) B[3 * a + e] += w * vi * d[e];
          }
        }
    float F[9], G[9], Fn[9], C[9];
    for (int q = 0; q < 9; ++q) {
      F[q] = Fs[9 * i + q];
      C[q] = k * B[q];
      G[q] = (q % 4 == 0 ? 1.0f : 0.0f) + dt * C[q];
    }
    m3_mul(G, F, Fn);
    const float lo[3] = {dmin.x, dmin.y, dmin.z}, hi[3] = {dmax.x, dmax.y, dmax.z};
    float sp2 = 0.0f;
    for (int a = 0; a < 3; ++a) {
      sp2 += v[a] * v[a];
      const float xa = x[a] + dt * v[a];
      /* Safety net: walls keep material inside; never let a particle leave the padded grid. */
      x[a] = fminf(fmaxf(xa, lo[a]), hi[a]);
    }
    for (int q = 0; q < 9; ++q) Cs[9 * i + q] = C[q], Fs[9 * i + q] = Fn[q];
    for (int a = 0; a < 3; ++a) vs[3 * i + a] = v[a], xs[3 * i + a] = x[a];
    if (!isfinite(sp2) || !isfinite(x[0] + x[1] + x[2]) || !isfinite(m3_det(Fn)) || sp2 > runaway * runaway) {
      atomicMin(&flags->bad_id, (unsigned long long)id[i]);
    } else {
      speed_bits = __float_as_uint(sqrtf(sp2));
      int b[3];
      base_node(x, origin, inv_dx, b);
      for (int a = 0; a < 3; ++a) leave |= !sparse_in_free_zone(b[a], P[a]);
    }
  }
  /* every lane of the warp reaches here: blockDim is a multiple of 32 */
  for (int o = 16; o > 0; o >>= 1) speed_bits = max(speed_bits, __shfl_xor_sync(0xffffffffu, speed_bits, o));
  leave = __any_sync(0xffffffffu, leave);
  if ((threadIdx.x & 31) == 0) {
    if (speed_bits) atomicMax(&flags->vmax_bits, speed_bits);
    if (leave) atomicOr(&flags->leave, 1u);
  }
}

/* Material of the particle with the given id (for the message of a non-finite state). */
__global__ static void k_find_material(size_t n, const uint64_t *id, const int32_t *material, uint64_t want,
                                       step_flags *flags) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n && id[i] == want) flags->bad_material = material[i];
}

/* ---- rebuild-mapping ---------------------------------------------------------------------- */

static int rebuild(void *state, int force, int *rebuilt) {
  cuda_state *s = (cuda_state *)state;
  *rebuilt = 0;
  if (!force && !s->need_rebuild) return DR_OK;
  const size_t n = s->n;
  const float3 origin = make_float3(s->origin[0], s->origin[1], s->origin[2]);
  if (n == 0) {
    s->n_pb = s->n_blocks = 0;
    s->need_rebuild = 0;
    ++s->rebuilds;
    *rebuilt = 1;
    return DR_OK;
  }
  const int ni = (int)n;
  pbuf *in = &s->p[s->cur], *out = &s->p[1 - s->cur];

  /* 1. Keys and a stable radix sort: ties keep the previous order, as on the CPU. */
  k_keys<<<grid_dim(n, THREADS), THREADS>>>(n, dp<float>(in->x), origin, s->inv_dx, dp<uint64_t>(s->keys[0]),
                                            dp<uint32_t>(s->vals[0]));
  LAUNCHED("k_keys");
  const int end_bit = 6 + s->code_bits <= 64 ? 6 + s->code_bits : 64;
  size_t temp_bytes = 0;
  CU(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, dp<uint64_t>(s->keys[0]), dp<uint64_t>(s->keys[1]),
                                     dp<uint32_t>(s->vals[0]), dp<uint32_t>(s->vals[1]), ni, 0, end_bit));
  DVEC_RESERVE(s->temp, temp_bytes, 0, "CUB temporary storage");
  temp_bytes = s->temp.bytes;
  CU(cub::DeviceRadixSort::SortPairs(s->temp.ptr, temp_bytes, dp<uint64_t>(s->keys[0]), dp<uint64_t>(s->keys[1]),
                                     dp<uint32_t>(s->vals[0]), dp<uint32_t>(s->vals[1]), ni, 0, end_bit));
  const uint64_t *keys = dp<uint64_t>(s->keys[1]);

  /* 2. Permute the particles into sorted order. */
  k_gather<<<grid_dim(n, THREADS), THREADS>>>(
      n, dp<uint32_t>(s->vals[1]), dp<float>(in->x), dp<float>(in->v), dp<float>(in->C), dp<float>(in->F),
      dp<float>(in->mass), dp<float>(in->vol0), dp<uint64_t>(in->id), dp<int32_t>(in->material), dp<float>(out->x),
      dp<float>(out->v), dp<float>(out->C), dp<float>(out->F), dp<float>(out->mass), dp<float>(out->vol0),
      dp<uint64_t>(out->id), dp<int32_t>(out->material));
  LAUNCHED("k_gather");
  s->cur = 1 - s->cur;

  /* 3. Particle blocks: runs of equal block code, numbered by an inclusive scan of the heads. */
  k_heads<<<grid_dim(n, THREADS), THREADS>>>(n, keys, dp<int32_t>(s->head));
  LAUNCHED("k_heads");
  int32_t *scan = dp<int32_t>(s->pblock); /* the scan lands in pblock, then k_pblocks rewrites it */
  temp_bytes = 0;
  CU(cub::DeviceScan::InclusiveSum(NULL, temp_bytes, dp<int32_t>(s->head), scan, ni));
  DVEC_RESERVE(s->temp, temp_bytes, 0, "CUB temporary storage");
  temp_bytes = s->temp.bytes;
  CU(cub::DeviceScan::InclusiveSum(s->temp.ptr, temp_bytes, dp<int32_t>(s->head), scan, ni));
  int32_t n_pb = 0;
  CU(cudaMemcpy(&n_pb, scan + (n - 1), sizeof n_pb, cudaMemcpyDeviceToHost));
  s->n_pb = (size_t)n_pb;
  DVEC_RESERVE(s->pb_coord, 3 * s->n_pb * sizeof(int32_t), 0, "particle blocks");
  DVEC_RESERVE(s->pb_nbr, 27 * s->n_pb * sizeof(int32_t), 0, "particle blocks");
  DVEC_RESERVE(s->pb_start, (s->n_pb + 1) * sizeof(int32_t), 0, "particle blocks");
  DVEC_RESERVE(s->nbr_codes[0], 27 * s->n_pb * sizeof(uint64_t), 0, "physical block codes");
  DVEC_RESERVE(s->nbr_codes[1], 27 * s->n_pb * sizeof(uint64_t), 0, "physical block codes");
  /* k_pblocks reads scan[i] and writes pblock[i] = scan[i] - 1 in the same thread: in place */
  k_pblocks<<<grid_dim(n, THREADS), THREADS>>>(n, keys, scan, dp<int32_t>(s->pblock), dp<int32_t>(s->pb_start),
                                               dp<int32_t>(s->pb_coord), dp<uint64_t>(s->nbr_codes[0]));
  LAUNCHED("k_pblocks");

  /* 4. Physical blocks: the 3x3x3 neighbourhoods of all particle blocks, sorted and unique, so
   *    dense block indices follow Morton order as on the CPU. */
  const int m = 27 * n_pb;
  const int code_bits = s->code_bits;
  temp_bytes = 0;
  CU(cub::DeviceRadixSort::SortKeys(NULL, temp_bytes, dp<uint64_t>(s->nbr_codes[0]), dp<uint64_t>(s->nbr_codes[1]),
                                    m, 0, code_bits));
  DVEC_RESERVE(s->temp, temp_bytes, 0, "CUB temporary storage");
  temp_bytes = s->temp.bytes;
  CU(cub::DeviceRadixSort::SortKeys(s->temp.ptr, temp_bytes, dp<uint64_t>(s->nbr_codes[0]),
                                    dp<uint64_t>(s->nbr_codes[1]), m, 0, code_bits));
  DVEC_RESERVE(s->block_code, (size_t)m * sizeof(uint64_t), 0, "grid blocks");
  temp_bytes = 0;
  CU(cub::DeviceSelect::Unique(NULL, temp_bytes, dp<uint64_t>(s->nbr_codes[1]), dp<uint64_t>(s->block_code),
                               dp<int>(s->count), m));
  DVEC_RESERVE(s->temp, temp_bytes, 0, "CUB temporary storage");
  temp_bytes = s->temp.bytes;
  CU(cub::DeviceSelect::Unique(s->temp.ptr, temp_bytes, dp<uint64_t>(s->nbr_codes[1]), dp<uint64_t>(s->block_code),
                               dp<int>(s->count), m));
  int nb = 0;
  CU(cudaMemcpy(&nb, s->count.ptr, sizeof nb, cudaMemcpyDeviceToHost));
  s->n_blocks = (size_t)nb;
  DVEC_RESERVE(s->grid, s->n_blocks * BLOCK_FLOATS * sizeof(float), 0, "grid blocks");
  DVEC_RESERVE(s->touched, s->n_blocks, 0, "grid blocks");

  /* 5. Hash table code -> dense index, then each particle block's 27 physical block indices. */
  size_t cap = 64;
  while (cap < 2 * s->n_blocks) cap <<= 1;
  if (cap > s->table_cap) {
    DVEC_EXACT(s->table_keys, cap * sizeof(uint64_t), "block hash table");
    DVEC_EXACT(s->table_vals, cap * sizeof(int32_t), "block hash table");
    s->table_cap = cap;
  }
  const size_t mask = s->table_cap - 1;
  CU(cudaMemset(s->table_keys.ptr, 0xff, s->table_cap * sizeof(uint64_t)));
  k_table_insert<<<grid_dim(s->n_blocks, THREADS), THREADS>>>(
      s->n_blocks, dp<uint64_t>(s->block_code), dp<unsigned long long>(s->table_keys), dp<int32_t>(s->table_vals),
      mask);
  LAUNCHED("k_table_insert");
  k_pb_nbr<<<grid_dim((size_t)m, THREADS), THREADS>>>((size_t)m, dp<uint64_t>(s->nbr_codes[0]),
                                                      dp<unsigned long long>(s->table_keys),
                                                      dp<int32_t>(s->table_vals), mask, dp<int32_t>(s->pb_nbr));
  LAUNCHED("k_pb_nbr");
  CU(cudaMemset(s->touched.ptr, 0, s->n_blocks));

  s->need_rebuild = 0;
  ++s->rebuilds;
  *rebuilt = 1;
  return DR_OK;
}

/* ---- the steps ---------------------------------------------------------------------------- */

static int p2g(void *state, float dt) {
  cuda_state *s = (cuda_state *)state;
  if (s->n == 0) return DR_OK;
  CU(cudaMemsetAsync(s->grid.ptr, 0, s->n_blocks * BLOCK_FLOATS * sizeof(float)));
  CU(cudaMemsetAsync(s->touched.ptr, 0, s->n_blocks));
  const pbuf *p = &s->p[s->cur];
  k_p2g<<<grid_dim(s->n, THREADS), THREADS>>>(
      s->n, dt, s->prm.dx, s->inv_dx, make_float3(s->origin[0], s->origin[1], s->origin[2]),
      dp<material_params>(s->d_mats), dp<float>(p->x), dp<float>(p->v), dp<float>(p->C), dp<float>(p->F),
      dp<float>(p->mass), dp<float>(p->vol0), dp<int32_t>(p->material), dp<int32_t>(s->pblock),
      dp<int32_t>(s->pb_coord), dp<int32_t>(s->pb_nbr), dp<float>(s->grid), dp<uint8_t>(s->touched));
  LAUNCHED("k_p2g");
  return DR_OK;
}

static int grid_update(void *state, float dt) {
  cuda_state *s = (cuda_state *)state;
  if (s->n_blocks == 0) return DR_OK;
  wall_params wp;
  wp.boundary = s->prm.boundary;
  wp.friction = s->prm.friction;
  for (int a = 0; a < 3; ++a) wp.lo[a] = s->wall_lo[a], wp.hi[a] = s->wall_hi[a];
  k_grid_update<<<(unsigned)s->n_blocks, BLOCK_NODES>>>(
      dt, s->prm.dx, make_float3(s->origin[0], s->origin[1], s->origin[2]),
      make_float3(s->prm.gravity[0], s->prm.gravity[1], s->prm.gravity[2]), wp, dp<uint64_t>(s->block_code),
      dp<uint8_t>(s->touched), dp<float>(s->grid));
  LAUNCHED("k_grid_update");
  return DR_OK;
}

static int g2p(void *state, float dt) {
  cuda_state *s = (cuda_state *)state;
  if (s->n == 0) {
    s->vmax = 0.0f;
    return DR_OK;
  }
  /* reset: leave = 0, vmax = 0, bad_id = ~0 */
  CU(cudaMemsetAsync(s->flags.ptr, 0, 2 * sizeof(unsigned int)));
  CU(cudaMemsetAsync((char *)s->flags.ptr + offsetof(step_flags, bad_id), 0xff, sizeof(unsigned long long)));
  pbuf *p = &s->p[s->cur];
  k_g2p<<<grid_dim(s->n, THREADS), THREADS>>>(
      s->n, dt, s->prm.dx, s->inv_dx, DR_RUNAWAY_CELLS * s->prm.dx / dt,
      make_float3(s->origin[0], s->origin[1], s->origin[2]), make_float3(s->dmin[0], s->dmin[1], s->dmin[2]), make_float3(s->dmax[0], s->dmax[1], s->dmax[2]),
      dp<float>(p->x), dp<float>(p->v), dp<float>(p->C), dp<float>(p->F), dp<uint64_t>(p->id),
      dp<int32_t>(s->pblock), dp<int32_t>(s->pb_coord), dp<int32_t>(s->pb_nbr), dp<float>(s->grid),
      dp<step_flags>(s->flags));
  LAUNCHED("k_g2p");
  /* The one host synchronisation of a step (acceptable for this first version). */
  step_flags f;
  CU(cudaMemcpy(&f, s->flags.ptr, sizeof f, cudaMemcpyDeviceToHost));
  if (f.bad_id != ~0ULL) {
    k_find_material<<<grid_dim(s->n, THREADS), THREADS>>>(s->n, dp<uint64_t>(p->id), dp<int32_t>(p->material),
                                                          f.bad_id, dp<step_flags>(s->flags));
    LAUNCHED("k_find_material");
    CU(cudaMemcpy(&f, s->flags.ptr, sizeof f, cudaMemcpyDeviceToHost));
    const int mat = f.bad_material;
    return dr_fail(DR_EPHYSICS,
                   "particle %llu (body %llu, material %s) reached a non-finite state or a runaway speed (velocity, "
                   "deformation, or more than %g cell per step); the step is too large for the material's stiffness or speed",
                   f.bad_id, f.bad_id >> 48,
                   s->prm.material_names && mat >= 0 && mat < s->prm.n_materials ? s->prm.material_names[mat] : "?",
                   (double)DR_RUNAWAY_CELLS);
  }
  float vmax;
  memcpy(&vmax, &f.vmax_bits, sizeof vmax);
  s->vmax = vmax;
  s->need_rebuild |= f.leave != 0;
  return DR_OK;
}

/* ---- the rest of the interface ------------------------------------------------------------ */

static int max_speed(void *state, float *vmax) {
  *vmax = ((cuda_state *)state)->vmax;
  return DR_OK;
}

static int download(void *state, particles *out) {
  cuda_state *s = (cuda_state *)state;
  const size_t n = s->n;
  DR_TRY(particles_reserve(out, n));
  out->n = n;
  if (n == 0) return DR_OK;
  const pbuf *p = &s->p[s->cur];
  CU(cudaMemcpy(out->x, p->x.ptr, 3 * n * sizeof(float), cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(out->v, p->v.ptr, 3 * n * sizeof(float), cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(out->C, p->C.ptr, 9 * n * sizeof(float), cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(out->F, p->F.ptr, 9 * n * sizeof(float), cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(out->mass, p->mass.ptr, n * sizeof(float), cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(out->vol0, p->vol0.ptr, n * sizeof(float), cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(out->id, p->id.ptr, n * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(out->material, p->material.ptr, n * sizeof(int32_t), cudaMemcpyDeviceToHost));
  const int32_t owner = s->prm.rank * 256 + s->device;
  for (size_t i = 0; i < n; ++i) out->owner[i] = owner;
  return DR_OK;
}

static double held_bytes(const cuda_state *s) {
  double b = 0;
  for (int k = 0; k < 2; ++k) {
    const pbuf *p = &s->p[k];
    b += (double)p->x.bytes + p->v.bytes + p->C.bytes + p->F.bytes + p->mass.bytes + p->vol0.bytes + p->id.bytes +
         p->material.bytes;
    b += (double)s->keys[k].bytes + s->vals[k].bytes + s->nbr_codes[k].bytes;
  }
  b += (double)s->d_mats.bytes + s->pblock.bytes + s->head.bytes + s->pb_coord.bytes + s->pb_nbr.bytes +
       s->pb_start.bytes + s->block_code.bytes + s->grid.bytes + s->touched.bytes + s->table_keys.bytes +
       s->table_vals.bytes + s->temp.bytes + s->flags.bytes + s->count.bytes;
  return b;
}

static int stats(void *state, backend_stats *out) {
  cuda_state *s = (cuda_state *)state;
  out->rebuilds = s->rebuilds;
  out->n_particles = s->n;
  out->n_blocks = s->n_blocks;
  out->n_touched = 0;
  if (s->n_blocks > 0) {
    if (s->h_touched_cap < s->n_blocks) {
      free(s->h_touched);
      s->h_touched = (uint8_t *)dr_malloc(s->n_blocks, "touched-block flags");
      if (!s->h_touched) {
        s->h_touched_cap = 0;
        return DR_ENOMEM;
      }
      s->h_touched_cap = s->n_blocks;
    }
    CU(cudaMemcpy(s->h_touched, s->touched.ptr, s->n_blocks, cudaMemcpyDeviceToHost));
    for (size_t b = 0; b < s->n_blocks; ++b) out->n_touched += s->h_touched[b];
  }
  out->bytes = held_bytes(s);
  return DR_OK;
}

static void destroy(void *state) {
  cuda_state *s = (cuda_state *)state;
  if (!s) return;
  for (int k = 0; k < 2; ++k) {
    pbuf *p = &s->p[k];
    dvec_free(&p->x), dvec_free(&p->v), dvec_free(&p->C), dvec_free(&p->F);
    dvec_free(&p->mass), dvec_free(&p->vol0), dvec_free(&p->id), dvec_free(&p->material);
    dvec_free(&s->keys[k]), dvec_free(&s->vals[k]), dvec_free(&s->nbr_codes[k]);
  }
  dvec_free(&s->d_mats), dvec_free(&s->pblock), dvec_free(&s->head), dvec_free(&s->pb_coord);
  dvec_free(&s->pb_nbr), dvec_free(&s->pb_start), dvec_free(&s->block_code), dvec_free(&s->grid);
  dvec_free(&s->touched), dvec_free(&s->table_keys), dvec_free(&s->table_vals), dvec_free(&s->temp);
  dvec_free(&s->flags), dvec_free(&s->count);
  cudaGetLastError();
  free(s->h_touched);
  free(s->mats);
  free(s);
}

/* Allocation and upload; on failure the caller destroys s. */
static int setup(cuda_state *s, const particles *p) {
  CU(cudaSetDevice(s->device));
  cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, s->device));
  snprintf(s->device_name, sizeof s->device_name, "%s", prop.name);
  const size_t n = p->n;
  s->n = n;
  for (int k = 0; k < 2; ++k) {
    pbuf *q = &s->p[k];
    DVEC_EXACT(q->x, 3 * n * sizeof(float), "particle positions");
    DVEC_EXACT(q->v, 3 * n * sizeof(float), "particle velocities");
    DVEC_EXACT(q->C, 9 * n * sizeof(float), "particle affine matrices");
    DVEC_EXACT(q->F, 9 * n * sizeof(float), "particle deformation gradients");
    DVEC_EXACT(q->mass, n * sizeof(float), "particle masses");
    DVEC_EXACT(q->vol0, n * sizeof(float), "particle volumes");
    DVEC_EXACT(q->id, n * sizeof(uint64_t), "particle ids");
    DVEC_EXACT(q->material, n * sizeof(int32_t), "particle materials");
    DVEC_EXACT(s->keys[k], n * sizeof(uint64_t), "particle sort keys");
    DVEC_EXACT(s->vals[k], n * sizeof(uint32_t), "particle sort keys");
  }
  DVEC_EXACT(s->pblock, n * sizeof(int32_t), "particle block indices");
  DVEC_EXACT(s->head, n * sizeof(int32_t), "particle block indices");
  DVEC_EXACT(s->d_mats, (size_t)s->prm.n_materials * sizeof(material_params), "materials");
  DVEC_EXACT(s->flags, sizeof(step_flags), "step flags");
  DVEC_EXACT(s->count, sizeof(int), "counters");
  CU(cudaMemcpy(s->d_mats.ptr, s->mats, (size_t)s->prm.n_materials * sizeof(material_params),
                cudaMemcpyHostToDevice));
  if (n > 0) {
    pbuf *q = &s->p[0];
    CU(cudaMemcpy(q->x.ptr, p->x, 3 * n * sizeof(float), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(q->v.ptr, p->v, 3 * n * sizeof(float), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(q->C.ptr, p->C, 9 * n * sizeof(float), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(q->F.ptr, p->F, 9 * n * sizeof(float), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(q->mass.ptr, p->mass, n * sizeof(float), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(q->vol0.ptr, p->vol0, n * sizeof(float), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(q->id.ptr, p->id, n * sizeof(uint64_t), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(q->material.ptr, p->material, n * sizeof(int32_t), cudaMemcpyHostToDevice));
  }
  s->cur = 0;
  int rebuilt;
  DR_TRY(rebuild(s, 1, &rebuilt));
  CU(cudaDeviceSynchronize());
  return DR_OK;
}

extern "C" int backend_cuda_create(const sim_params *prm, particles *p, backend *out) {
  memset(out, 0, sizeof *out);
  cuda_state *s = (cuda_state *)dr_calloc(1, sizeof *s, "cuda backend");
  if (!s) return DR_ENOMEM;
  s->prm = *prm;
  s->mats = (material_params *)dr_malloc(sizeof(material_params) * (size_t)prm->n_materials, "materials");
  if (!s->mats) {
    free(s);
    return DR_ENOMEM;
  }
  memcpy(s->mats, prm->materials, sizeof(material_params) * (size_t)prm->n_materials);
  s->prm.materials = s->mats;
  s->device = 0; /* one device per rank in this version (prm->gpus > 1 is the island, later) */
  s->inv_dx = 1.0f / prm->dx;
  int max_block = 0;
  for (int a = 0; a < 3; ++a) {
    s->origin[a] = (float)(prm->domain_min[a] - GRID_PAD * (double)prm->dx);
    /* Wall nodes: the three node layers nearest to each face (within 2.5 dx of it). */
    s->wall_lo[a] = (float)(prm->domain_min[a] + 2.5 * prm->dx);
    s->wall_hi[a] = (float)(prm->domain_max[a] - 2.5 * prm->dx);
    s->dmin[a] = (float)prm->domain_min[a];
    s->dmax[a] = (float)prm->domain_max[a];
    /* Highest block a physical block can have: particles stay in the domain, their stencils
     * reach 2 nodes beyond the base node and the neighbourhood one block beyond that. */
    const int top_node = (int)ceil((prm->domain_max[a] - prm->domain_min[a]) / prm->dx) + GRID_PAD + 3;
    const int top_block = (top_node >> 2) + 2;
    if (top_block > max_block) max_block = top_block;
  }
  int bits = 1;
  while ((1 << bits) <= max_block && bits < BLOCK_CODE_BITS) ++bits;
  s->code_bits = 3 * bits; /* radix sorts look at these bits only (6 more for the cell) */
  const size_t n = p->n;
  int rc = setup(s, p);
  if (rc) {
    destroy(s);
    return rc;
  }
  particles_free(p);
  out->name = "cuda";
  out->state = s;
  out->rebuild = rebuild;
  out->p2g = p2g;
  out->grid_update = grid_update;
  out->g2p = g2p;
  out->max_speed = max_speed;
  out->download = download;
  out->stats = stats;
  out->destroy = destroy;
  log_info("cuda backend: device %d (%s), %zu particles, %zu grid blocks, %.1f MiB of device memory", s->device,
           s->device_name, n, s->n_blocks, held_bytes(s) / 1048576.0);
  return DR_OK;
}

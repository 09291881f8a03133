/* backend_cpu.c - the CPU reference backend (OpenMP): its state's storage, the step and the
 * creation; its particles in and out are backend_cpu_particles.c's, its part of the rank exchange
 * backend_cpu_exchange.c's (backend_cpu_internal.h holds the state).
 *
 * It runs the paper's pipeline on the same sparse block layout as the CUDA backend, written
 * for clarity rather than speed, so that the mapping logic is exercised where there is no GPU
 * and GPU results have an oracle:
 *   - rebuild-mapping only when a particle has left its (10 dx)^3 free zone (physics/sparse.h):
 *     particles are sorted by (particle block code, cell), each particle block records the
 *     dense indices of its 3x3x3 physical blocks, and blocks live in a code -> index hash table;
 *   - P2G with plasticity and stress fused in; particle blocks are processed in 27 colours
 *     (block coordinates mod 3), so two particle blocks processed at once never write the same
 *     physical block: no atomics, and sums are bitwise reproducible whatever the thread count;
 *   - grid update with gravity, the domain faces and the colliders (physics/boundary.h),
 *     skipping blocks no particle touched;
 *   - G2P (APIC, or ASFLIP per material: physics/transfer.h) with the deformation update,
 *     advection and the free-zone check.
 * Grid storage per block: 4 channels x 64 nodes (mass, then momentum x,y,z, which the grid
 * update turns into velocity in place); when a material uses ASFLIP, 3 more channels hold P2G's
 * momentum without the stress impulse, which the grid update turns into the velocity before the
 * update (physics/transfer.h). The rank exchange moves all channels.
 * Deterministic mode (physics/fixed.h): P2G adds int64 fixed-point contributions into igrid
 * (same layout), which the grid update turns into the float grid block by block; the rank
 * exchange moves the int64 sums. Integer sums do not depend on the particle order, which the
 * ranks change (the colours alone already make float sums independent of the thread count). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cpu_internal.h"
#include "error.h"
#include "grid.h"
#include "memsizes.h"
#include "memtally.h"
#include "physics/boundary.h"
#include "physics/bspline.h"
#include "physics/compact.h"
#include "physics/constitutive.h"
#include "physics/fixed.h"
#include "physics/sparse.h"
#include "physics/transfer.h"
#include "scene.h"
#include "settings.h"

/* ---- storage ------------------------------------------------------------------------------ */

/* Counted allocations (memtally.h) of count elements of ptr's type, of one kind. */
#define MT_ALLOC(ptr, count, kind, what)                                                           \
  do {                                                                                             \
    if (!((ptr) = memtally_malloc((kind), sizeof(*(ptr)) * (size_t)(count), (what)))) return DR_ENOMEM; \
  } while (0)
#define MT_ALLOC0(ptr, count, kind, what)                                                          \
  do {                                                                                             \
    if (!((ptr) = memtally_calloc((kind), (size_t)(count), sizeof(*(ptr)), (what)))) return DR_ENOMEM; \
  } while (0)

/* Capacities double from memsizes.h's first ones, as the memory plan (memplan.c) counts them. */
static int grow_particles(cpu_state *s, size_t n) {
  if (n <= s->cap_n && s->cap_n) return DR_OK; /* (a first call allocates, even for no particle) */
  const size_t cap = mem_doubled(s->cap_n ? s->cap_n : MEM_FIRST_PARTICLES, n);
  memtally_free(s->pblock);
  memtally_free(s->sort_key);
  s->pblock = NULL;
  s->sort_key = NULL;
  MT_ALLOC(s->pblock, cap, MT_SORT, "particle block indices");
  MT_ALLOC(s->sort_key, 2 * cap, MT_SORT, "particle sort keys");
  DR_TRY(particles_reserve(&s->tmp, cap));
  s->cap_n = cap;
  return DR_OK;
}

static int grow_pblocks(cpu_state *s, size_t n) {
  if (n <= s->cap_pb && s->cap_pb) return DR_OK;
  const size_t cap = mem_doubled(s->cap_pb ? s->cap_pb : MEM_FIRST_PBLOCKS, n);
  memtally_free(s->pb_coord), memtally_free(s->pb_nbr), memtally_free(s->pb_start), memtally_free(s->color_pb);
  memtally_free(s->nbr_codes);
  s->pb_coord = NULL, s->pb_nbr = NULL, s->pb_start = NULL, s->color_pb = NULL, s->nbr_codes = NULL;
  MT_ALLOC(s->pb_coord, 3 * cap, MT_MAPPING, "particle blocks");
  MT_ALLOC(s->pb_nbr, 27 * cap, MT_MAPPING, "particle blocks");
  MT_ALLOC(s->pb_start, cap + 1, MT_MAPPING, "particle blocks");
  MT_ALLOC(s->color_pb, cap, MT_MAPPING, "particle blocks");
  MT_ALLOC(s->nbr_codes, 27 * cap, MT_MAPPING, "physical block codes");
  s->cap_pb = cap;
  return DR_OK;
}

static void free_blocks(cpu_state *s) {
  memtally_free(s->block_code), memtally_free(s->grid), memtally_free(s->touched), memtally_free(s->shared);
  memtally_free(s->igrid);
  s->block_code = NULL, s->grid = NULL, s->touched = NULL, s->shared = NULL, s->igrid = NULL;
}

static int grow_blocks(cpu_state *s, size_t n) {
  if (n <= s->cap_blocks && s->cap_blocks) return DR_OK;
  const size_t cap = mem_doubled(s->cap_blocks ? s->cap_blocks : MEM_FIRST_BLOCKS, n);
  free_blocks(s);
  MT_ALLOC0(s->shared, cap, MT_GRID, "grid blocks");
  if (s->det) MT_ALLOC(s->igrid, s->bf * cap, MT_GRID, "grid blocks (fixed point)");
  MT_ALLOC(s->block_code, cap, MT_GRID, "grid blocks");
  MT_ALLOC(s->grid, s->bf * cap, MT_GRID, "grid blocks");
  MT_ALLOC0(s->touched, cap, MT_GRID, "grid blocks");
  s->cap_blocks = cap;
  return DR_OK;
}

/* ---- rebuild-mapping --------------------------------------------------------------------- */

static int cmp_pair(const void *a, const void *b) {
  const uint64_t *x = a, *y = b;
  if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
  return (x[1] > y[1]) - (x[1] < y[1]);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

void cpu_base_node(const cpu_state *s, const float *x, int b[3]) {
  for (int a = 0; a < 3; ++a) b[a] = bspline_base((x[a] - s->origin[a]) * s->inv_dx);
}

/* tmp[i] = p[sort_key[2 i + 1]] for every attribute (particles.h's table). */
static void permute(cpu_state *s, size_t n) {
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    const size_t b = particle_attrs[a].bytes;
    char *dst = particles_attr(&s->tmp, a);
    const char *src = particles_attr(&s->p, a);
    for (size_t i = 0; i < n; ++i) memcpy(dst + b * i, src + b * (size_t)s->sort_key[2 * i + 1], b);
  }
}

int cpu_rebuild(void *state, int force, int *rebuilt) {
  cpu_state *s = state;
  *rebuilt = 0;
  if (!force && !s->need_rebuild) return DR_OK;
  size_t n = s->p.n;
  DR_TRY(grow_particles(s, n));
  /* the two particle buffers swap roles below: both must hold cap_n (set_particles may have
   * handed over a smaller one) */
  DR_TRY(particles_reserve(&s->p, s->cap_n));

  /* 1. Keys: particle block code (high bits) and cell inside the particle block (low 6 bits).
   *    Block coordinates stay below 2^20 (scene.c bounds the domain), so the shift is safe. */
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    int b[3];
    cpu_base_node(s, s->p.x + 3 * i, b);
    uint64_t code = sparse_block_code(sparse_particle_block(b[0]), sparse_particle_block(b[1]), sparse_particle_block(b[2]));
    s->sort_key[2 * i] = (code << 6) | (uint64_t)sparse_node_in_block(sparse_cell_in_particle_block(b[0]),
                                                                      sparse_cell_in_particle_block(b[1]),
                                                                      sparse_cell_in_particle_block(b[2]));
    s->sort_key[2 * i + 1] = i;
  }
  /* 2. Sort to cells; ties keep the previous order, so the result is deterministic. */
  qsort(s->sort_key, n, 2 * sizeof(uint64_t), cmp_pair);
  s->tmp.n = n;
  permute(s, n);
  particles swap = s->p;
  s->p = s->tmp;
  s->tmp = swap;

  /* 3. Particle blocks: runs of equal block code. */
  size_t n_pb = 0;
  for (size_t i = 0; i < n; ++i)
    if (i == 0 || (s->sort_key[2 * i] >> 6) != (s->sort_key[2 * i - 2] >> 6)) ++n_pb;
  DR_TRY(grow_pblocks(s, n_pb));
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i == 0 || (s->sort_key[2 * i] >> 6) != (s->sort_key[2 * i - 2] >> 6)) {
      sparse_block_coords(s->sort_key[2 * i] >> 6, s->pb_coord + 3 * k);
      s->pb_start[k++] = i;
    }
    s->pblock[i] = (int32_t)(k - 1);
  }
  s->pb_start[n_pb] = n;
  s->n_pb = n_pb;
  for (size_t q = 0; s->det && q < n_pb; ++q)
    if (s->pb_start[q + 1] - s->pb_start[q] > FIX_PB_MAX)
      return dr_fail(DR_EPHYSICS,
                     "deterministic mode: %zu particles in one block of 4x4x4 cells, more than the %d that keep the "
                     "fixed-point node sums from overflowing (physics/fixed.h); the material is compressed far "
                     "beyond its sampling",
                     s->pb_start[q + 1] - s->pb_start[q], FIX_PB_MAX);

  /* 4. Physical blocks: the 3x3x3 neighbourhoods of all particle blocks, sorted and unique. */
  for (size_t q = 0; q < n_pb; ++q) {
    const int32_t *c = s->pb_coord + 3 * q;
    for (int di = -1; di <= 1; ++di)
      for (int dj = -1; dj <= 1; ++dj)
        for (int dk = -1; dk <= 1; ++dk)
          s->nbr_codes[27 * q + sparse_neighbor(di, dj, dk)] = sparse_block_code(c[0] + di, c[1] + dj, c[2] + dk);
  }
  size_t m = 27 * n_pb;
  qsort(s->nbr_codes, m, sizeof(uint64_t), cmp_u64);
  size_t nb = 0;
  for (size_t i = 0; i < m; ++i)
    if (i == 0 || s->nbr_codes[i] != s->nbr_codes[i - 1]) s->nbr_codes[nb++] = s->nbr_codes[i];
  DR_TRY(grow_blocks(s, nb));
  DR_TRY(grid_table_reset(&s->table, nb));
  for (size_t i = 0; i < nb; ++i) {
    s->block_code[i] = s->nbr_codes[i];
    grid_table_insert(&s->table, s->nbr_codes[i], (int32_t)i);
  }
  s->n_blocks = nb;
  memset(s->shared, 0, nb);
  for (size_t q = 0; q < n_pb; ++q) {
    const int32_t *c = s->pb_coord + 3 * q;
    for (int di = -1; di <= 1; ++di)
      for (int dj = -1; dj <= 1; ++dj)
        for (int dk = -1; dk <= 1; ++dk)
          s->pb_nbr[27 * q + sparse_neighbor(di, dj, dk)] =
              grid_table_find(&s->table, sparse_block_code(c[0] + di, c[1] + dj, c[2] + dk));
  }

  /* 5. Colours: particle blocks whose coordinates agree mod 3 write disjoint physical blocks. */
  size_t count[NCOLORS] = {0};
  for (size_t q = 0; q < n_pb; ++q) {
    const int32_t *c = s->pb_coord + 3 * q;
    ++count[(c[0] % 3) * 9 + (c[1] % 3) * 3 + c[2] % 3];
  }
  s->color_start[0] = 0;
  for (int c = 0; c < NCOLORS; ++c) s->color_start[c + 1] = s->color_start[c] + count[c];
  size_t fill[NCOLORS];
  memcpy(fill, s->color_start, sizeof fill);
  for (size_t q = 0; q < n_pb; ++q) {
    const int32_t *c = s->pb_coord + 3 * q;
    s->color_pb[fill[(c[0] % 3) * 9 + (c[1] % 3) * 3 + c[2] % 3]++] = (int32_t)q;
  }

  s->need_rebuild = 0;
  ++s->rebuilds;
  *rebuilt = 1;
  return DR_OK;
}

/* ---- P2G --------------------------------------------------------------------------------- */

/* The stencil of one particle: base node, B-spline weights per axis, and where its 27 nodes
 * live (physical block among the particle block's 27, node inside the block). */
typedef struct stencil {
  int b[3];
  float fx[3];
  float w[3][3];
  int blk[3][3];  /* per axis and stencil offset: block offset in {0,1,2} */
  int node[3][3]; /* per axis and stencil offset: node coordinate inside the block */
} stencil;

static void make_stencil(const cpu_state *s, const float *x, const int32_t *P, stencil *st) {
  for (int a = 0; a < 3; ++a) {
    float xg = (x[a] - s->origin[a]) * s->inv_dx;
    st->b[a] = bspline_base(xg);
    st->fx[a] = xg - (float)st->b[a];
    float dw[3];
    bspline_weights(st->fx[a], st->w[a], dw);
    for (int d = 0; d < 3; ++d) {
      int nd = st->b[a] + d;
      st->blk[a][d] = (nd >> 2) - P[a] + 1;
      st->node[a][d] = nd & 3;
    }
  }
}

/* One particle's P2G; returns 1 when a fixed-point contribution is out of range (deterministic
 * mode; it then adds 0 for it). */
static int p2g_particle(cpu_state *s, size_t i, const int32_t *nbr, const int32_t *P, float dt) {
  const particles *p = &s->p;
  float *F = p->F + 9 * i;
  float tau[9], R[9];
  /* compact storage: F is the last return mapping's, advanced here by the last G2P's C (physics/compact.h) */
  if (s->compact) constitutive_advance_F(&s->mats[p->material[i]], s->dt_g2p, p->C + 9 * i, F);
  constitutive_apply_r(&s->mats[p->material[i]], F, p->logjp + i, tau, !s->projected, s->compact ? R : NULL);
  if (s->compact) compact_round_f(F, p->logjp + i, R); /* the packet's write-back of F and logjp */
  const float m = p->mass[i];
  const float *v = p->v + 3 * i, *C = p->C + 9 * i;
  constitutive_add_viscous(&s->mats[p->material[i]], F, C, tau);
  /* MLS-MPM (Hu et al. 2018): the stress enters as -dt V0 (4/dx^2) tau next to APIC's m C. */
  const float k = -dt * p->vol0[i] * 4.0f * s->inv_dx * s->inv_dx;
  float A[9], mC[9];
  for (int q = 0; q < 9; ++q) mC[q] = m * C[q], A[q] = k * tau[q] + mC[q];
  const int old = s->channels == CH_ASFLIP;
  stencil st;
  make_stencil(s, p->x + 3 * i, P, &st);
  const float dx = s->prm.dx;
  int bad = 0;
  for (int di = 0; di < 3; ++di)
    for (int dj = 0; dj < 3; ++dj)
      for (int dk = 0; dk < 3; ++dk) {
        float w = st.w[0][di] * st.w[1][dj] * st.w[2][dk];
        float d[3] = {((float)di - st.fx[0]) * dx, ((float)dj - st.fx[1]) * dx, ((float)dk - st.fx[2]) * dx};
        int blk = nbr[sparse_neighbor(st.blk[0][di] - 1, st.blk[1][dj] - 1, st.blk[2][dk] - 1)];
        int nd = sparse_node_in_block(st.node[0][di], st.node[1][dj], st.node[2][dk]);
        s->touched[blk] = 1;
        if (s->det) { /* the same contributions as below, as fixed-point integers */
          int64_t *ig = s->igrid + (size_t)blk * s->bf;
          const float fm = s->prm.fix_scale[0], fp = s->prm.fix_scale[1];
          ig[nd] += fix_to(w * m, fm, &bad);
          for (int a = 0; a < 3; ++a)
            ig[(a + 1) * BLOCK_NODES + nd] +=
                fix_to(w * (m * v[a] + A[3 * a] * d[0] + A[3 * a + 1] * d[1] + A[3 * a + 2] * d[2]), fp, &bad);
          if (old)
            for (int a = 0; a < 3; ++a)
              ig[(a + 4) * BLOCK_NODES + nd] +=
                  fix_to(w * (m * v[a] + mC[3 * a] * d[0] + mC[3 * a + 1] * d[1] + mC[3 * a + 2] * d[2]), fp, &bad);
          continue;
        }
        float *g = s->grid + (size_t)blk * s->bf;
        g[nd] += w * m;
        for (int a = 0; a < 3; ++a)
          g[(a + 1) * BLOCK_NODES + nd] += w * (m * v[a] + A[3 * a] * d[0] + A[3 * a + 1] * d[1] + A[3 * a + 2] * d[2]);
        if (old) /* ASFLIP: the momentum the particle brings, without the stress impulse */
          for (int a = 0; a < 3; ++a)
            g[(a + 4) * BLOCK_NODES + nd] += w * (m * v[a] + mC[3 * a] * d[0] + mC[3 * a + 1] * d[1] + mC[3 * a + 2] * d[2]);
      }
  return bad;
}

int cpu_p2g(void *state, float dt) {
  cpu_state *s = state;
  if (s->gate_armed) { /* behind the gate: runs when it opens (gate_open) */
    s->gate_p2g = 1;
    s->gate_dt = dt;
    return DR_OK;
  }
  if (s->det) memset(s->igrid, 0, sizeof(int64_t) * s->bf * s->n_blocks);
  else memset(s->grid, 0, sizeof(float) * s->bf * s->n_blocks);
  memset(s->touched, 0, s->n_blocks);
  long bad = -1; /* deterministic mode: a particle whose contribution is out of the fixed-point range */
  for (int c = 0; c < NCOLORS; ++c) {
    long lo = (long)s->color_start[c], hi = (long)s->color_start[c + 1];
#pragma omp parallel for schedule(dynamic, 1)
    for (long q = lo; q < hi; ++q) {
      int32_t pb = s->color_pb[q];
      for (size_t i = s->pb_start[pb]; i < s->pb_start[pb + 1]; ++i)
        if (p2g_particle(s, i, s->pb_nbr + 27 * (size_t)pb, s->pb_coord + 3 * (size_t)pb, dt)) {
#pragma omp critical(drift_cpu_fix)
          if (bad < 0 || s->p.id[i] < s->p.id[(size_t)bad]) bad = (long)i;
        }
    }
  }
  s->projected = 0; /* this P2G was the one that set_projected meant */
  if (bad >= 0) {
    const particles *p = &s->p;
    return dr_fail(DR_EPHYSICS,
                   "deterministic mode: particle %llu (body %llu, material %s) brings a non-finite momentum or one "
                   "beyond the fixed-point range (2^%d units at %g units per kg m/s, i.e. %.3g kg m/s; "
                   "physics/fixed.h): the run is unstable or faster than 256 times the scene's speed bound",
                   (unsigned long long)p->id[bad], (unsigned long long)(p->id[bad] >> 48),
                   s->prm.material_names ? s->prm.material_names[p->material[bad]] : "?", FIX_LIMIT_BITS,
                   (double)s->prm.fix_scale[1], (double)FIX_LIMIT / (double)s->prm.fix_scale[1]);
  }
  return DR_OK;
}

/* Deterministic mode: block blk's fixed-point sums as floats in the grid (a node without mass
 * gets zeros, as in float mode, where its momentum is exactly zero too). */
static void fix_block_to_float(cpu_state *s, size_t blk) {
  const int64_t *ig = s->igrid + blk * s->bf;
  float *gd = s->grid + blk * s->bf;
  for (int nd = 0; nd < BLOCK_NODES; ++nd) {
    const int empty = ig[nd] == 0;
    for (int ch = 0; ch < s->channels; ++ch)
      gd[ch * BLOCK_NODES + nd] = empty ? 0.0f : fix_from(ig[ch * BLOCK_NODES + nd], s->inv_scale[ch > 0]);
  }
}

/* ---- grid update ------------------------------------------------------------------------- */

/* The grid update of the touched blocks in part (enum grid_part of backend.h). */
static int grid_update_part(void *state, float dt, int part) {
  cpu_state *s = state;
  const float *g = s->prm.gravity;
  const boundary_params *bp = &s->prm.boundary;
  /* the colliders stand where they are at the step's end */
  for (int k = 0; k < bp->n_colliders; ++k) collider_pose_at(&bp->colliders[k], bp->keys, s->time + dt, &s->poses[k]);
#pragma omp parallel for schedule(static)
  for (long blk = 0; blk < (long)s->n_blocks; ++blk) {
    if (!s->touched[blk] || !(part & (s->shared[blk] ? GRID_SHARED : GRID_INTERIOR))) continue;
    int c[3];
    sparse_block_coords(s->block_code[blk], c);
    if (s->det) fix_block_to_float(s, (size_t)blk);
    float *gd = s->grid + (size_t)blk * s->bf;
    for (int li = 0; li < 4; ++li)
      for (int lj = 0; lj < 4; ++lj)
        for (int lk = 0; lk < 4; ++lk) {
          int nd = sparse_node_in_block(li, lj, lk);
          float m = gd[nd];
          if (m <= 0.0f) continue;
          float v[3];
          for (int a = 0; a < 3; ++a) v[a] = gd[(a + 1) * BLOCK_NODES + nd] / m + g[a] * dt;
          if (s->channels == CH_ASFLIP) /* the velocity before the update */
            for (int a = 0; a < 3; ++a) gd[(a + 4) * BLOCK_NODES + nd] /= m;
          int idx[3] = {4 * c[0] + li, 4 * c[1] + lj, 4 * c[2] + lk};
          float xn[3];
          for (int a = 0; a < 3; ++a) xn[a] = s->origin[a] + (float)idx[a] * s->prm.dx;
          boundary_apply_posed(bp, s->poses, xn, v);
          for (int a = 0; a < 3; ++a) gd[(a + 1) * BLOCK_NODES + nd] = v[a];
        }
  }
  return DR_OK;
}

static int grid_update(void *state, float dt) { return grid_update_part(state, dt, GRID_ALL); }

/* ---- compact storage ---------------------------------------------------------------------- */

/* Particle i's state through the compact record and back (physics/compact.h's compact_round). */
static void compact_round_particle(cpu_state *s, size_t i) {
  particles *p = &s->p;
  compact_state c;
  memcpy(c.x, p->x + 3 * i, sizeof c.x);
  memcpy(c.v, p->v + 3 * i, sizeof c.v);
  memcpy(c.C, p->C + 9 * i, sizeof c.C);
  memcpy(c.F, p->F + 9 * i, sizeof c.F);
  c.logjp = p->logjp[i];
  compact_round(&s->cframe, &c);
  memcpy(p->x + 3 * i, c.x, sizeof c.x);
  memcpy(p->v + 3 * i, c.v, sizeof c.v);
  memcpy(p->C + 9 * i, c.C, sizeof c.C);
  memcpy(p->F + 9 * i, c.F, sizeof c.F);
  p->logjp[i] = c.logjp;
}

/* Particles first..n-1 as a compact store receives them (creation, a resume, arrivals from
 * other ranks, sources): rounded, which leaves the rounded state of a checkpoint as it is
 * (the round trip is idempotent). */
void cpu_compact_round_from(cpu_state *s, size_t first) {
  if (!s->compact) return;
#pragma omp parallel for schedule(static)
  for (long i = (long)first; i < (long)s->p.n; ++i) compact_round_particle(s, (size_t)i);
}

/* ---- G2P --------------------------------------------------------------------------------- */

int cpu_g2p(void *state, float dt) {
  cpu_state *s = state;
  particles *p = &s->p;
  const float dx = s->prm.dx, k = 4.0f * s->inv_dx * s->inv_dx;
  const float runaway = DR_RUNAWAY_CELLS * dx / dt; /* speed limit of backend.h */
  float vmax = 0.0f;
  int leave = 0;
  long bad = -1;
  const boundary_params *bp = &s->prm.boundary; /* colliders at s->poses: the grid update's, the step's end */
#pragma omp parallel for schedule(static) reduction(max : vmax) reduction(| : leave)
  for (long il = 0; il < (long)p->n; ++il) {
    size_t i = (size_t)il;
    int32_t pb = s->pblock[i];
    const int32_t *P = s->pb_coord + 3 * (size_t)pb, *nbr = s->pb_nbr + 27 * (size_t)pb;
    stencil st;
    make_stencil(s, p->x + 3 * i, P, &st);
    float v[3] = {0, 0, 0}, B[9] = {0}, vold[3] = {0, 0, 0};
    const material_params *mat = &s->mats[p->material[i]];
    const int flip = mat->transfer == TRANSFER_ASFLIP;
    for (int di = 0; di < 3; ++di)
      for (int dj = 0; dj < 3; ++dj)
        for (int dk = 0; dk < 3; ++dk) {
          float w = st.w[0][di] * st.w[1][dj] * st.w[2][dk];
          float d[3] = {((float)di - st.fx[0]) * dx, ((float)dj - st.fx[1]) * dx, ((float)dk - st.fx[2]) * dx};
          int blk = nbr[sparse_neighbor(st.blk[0][di] - 1, st.blk[1][dj] - 1, st.blk[2][dk] - 1)];
          const float *g = s->grid + (size_t)blk * s->bf;
          int nd = sparse_node_in_block(st.node[0][di], st.node[1][dj], st.node[2][dk]);
          for (int a = 0; a < 3; ++a) {
            float vi = g[(a + 1) * BLOCK_NODES + nd];
            v[a] += w * vi;
            for (int e = 0; e < 3; ++e) B[3 * a + e] += w * vi * d[e];
          }
          if (flip)
            for (int a = 0; a < 3; ++a) vold[a] += w * g[(a + 4) * BLOCK_NODES + nd];
        }
    float *x = p->x + 3 * i, *F = p->F + 9 * i, *C = p->C + 9 * i;
    float vnew[3], vmove[3];
    for (int q = 0; q < 9; ++q) C[q] = k * B[q];
    transfer_velocity(mat, dt, p->v + 3 * i, v, vold, m3_trace(C), m3_det(F), vnew, vmove);
    /* finite where the new state is: det F, plus C's entries in compact storage, where F stays for
     * P2G to advance */
    float state_sum = 0.0f;
    if (!s->compact) constitutive_advance_F(mat, dt, C, F);
    else
      for (int q = 0; q < 9; ++q) state_sum += C[q];
    state_sum += m3_det(F);
    float xa[3];
    for (int a = 0; a < 3; ++a) xa[a] = x[a] + dt * vmove[a];
    if (bp->n_colliders > 0) { /* the particle collision step (physics/boundary.h) */
      const float moved = dt * fmaxf(fabsf(vmove[0]), fmaxf(fabsf(vmove[1]), fabsf(vmove[2])));
      boundary_push_posed(bp, s->poses, xa, vnew, boundary_push_room(dx, moved));
    }
    float sp2 = 0.0f;
    for (int a = 0; a < 3; ++a) {
      p->v[3 * i + a] = vnew[a];
      sp2 += vnew[a] * vnew[a];
      /* Safety net: walls keep material inside; never let a particle leave the padded grid. */
      x[a] = fminf(fmaxf(xa[a], (float)s->prm.domain_min[a]), (float)s->prm.domain_max[a]);
    }
    if (!isfinite(sp2) || !isfinite(x[0] + x[1] + x[2]) || !isfinite(state_sum) || sp2 > runaway * runaway) {
#pragma omp critical(drift_cpu_bad)
      if (bad < 0 || p->id[i] < p->id[(size_t)bad]) bad = (long)i;
      continue;
    }
    if (s->compact) { /* the state a compact store keeps (after the checks: a saturated code would hide a NaN) */
      compact_round_particle(s, i);
      sp2 = 0.0f;
      for (int a = 0; a < 3; ++a) sp2 += p->v[3 * i + a] * p->v[3 * i + a];
    }
    vmax = fmaxf(vmax, sqrtf(sp2));
    int b[3];
    cpu_base_node(s, x, b);
    for (int a = 0; a < 3; ++a) leave |= !sparse_in_free_zone(b[a], P[a]);
  }
  if (bad >= 0) return backend_fail_particle(&s->prm, p->id[bad], p->material[bad]);
  s->vmax = vmax;
  s->need_rebuild |= leave;
  s->dt_g2p = dt;
  return DR_OK;
}

/* ---- the rest of the interface ----------------------------------------------------------- */

static int max_speed(void *state, float *vmax) {
  *vmax = ((cpu_state *)state)->vmax;
  return DR_OK;
}

static int set_time(void *state, double t) {
  ((cpu_state *)state)->time = t;
  return DR_OK;
}

static int wants_rebuild(void *state) { return ((cpu_state *)state)->need_rebuild; }

static int set_last_dt(void *state, float dt) {
  ((cpu_state *)state)->dt_g2p = dt;
  return DR_OK;
}

static int set_projected(void *state) {
  ((cpu_state *)state)->projected = 1;
  return DR_OK;
}

static void destroy(void *state) {
  cpu_state *s = state;
  if (!s) return;
  particles_free(&s->p);
  particles_free(&s->tmp);
  particles_free(&s->held);
  cpu_snap_release(s);
  memtally_free(s->pblock), memtally_free(s->sort_key);
  memtally_free(s->pb_coord), memtally_free(s->pb_nbr), memtally_free(s->pb_start), memtally_free(s->color_pb);
  memtally_free(s->nbr_codes);
  free_blocks(s);
  grid_table_free(&s->table);
  free(s->poses);
  free(s->mats);
  cpu_exchange_free(s);
  free(s);
}

int backend_cpu_create(const sim_params *prm, particles *p, backend *out) {
  cpu_state *s = dr_calloc(1, sizeof *s, "cpu backend");
  if (!s) return DR_ENOMEM;
  s->prm = *prm;
  s->mats = dr_malloc(sizeof(material_params) * (size_t)prm->n_materials, "materials");
  if (!s->mats) {
    free(s);
    return DR_ENOMEM;
  }
  memcpy(s->mats, prm->materials, sizeof(material_params) * (size_t)prm->n_materials);
  s->prm.materials = s->mats;
  s->poses = dr_malloc(sizeof(collider_pose) * (size_t)(prm->boundary.n_colliders + 1), "collider poses");
  if (!s->poses) {
    free(s->mats);
    free(s);
    return DR_ENOMEM;
  }
  s->inv_dx = 1.0f / prm->dx;
  s->channels = CH_APIC;
  for (int m = 0; m < prm->n_materials; ++m)
    if (prm->materials[m].transfer == TRANSFER_ASFLIP) s->channels = CH_ASFLIP;
  s->bf = (size_t)s->channels * BLOCK_NODES;
  s->det = prm->deterministic != 0;
  for (int k = 0; k < 2; ++k) s->inv_scale[k] = s->det ? 1.0 / (double)prm->fix_scale[k] : 0.0;
  for (int a = 0; a < 3; ++a) {
    s->origin[a] = (float)(prm->domain_min[a] - GRID_PAD * (double)prm->dx);
    /* Wall nodes: the three node layers nearest to each face (within 2.5 dx of it). */
    s->prm.boundary.lo[a] = (float)(prm->domain_min[a] + 2.5 * prm->dx);
    s->prm.boundary.hi[a] = (float)(prm->domain_max[a] - 2.5 * prm->dx);
  }
  s->prm.boundary.band = 0.5f * prm->dx; /* colliders: nodes within half a cell (boundary.h) */
  s->compact = prm->storage == STORAGE_COMPACT;
  double origin[3];
  for (int a = 0; a < 3; ++a) origin[a] = prm->domain_min[a] - GRID_PAD * (double)prm->dx;
  s->cframe = compact_frame_make(origin, (double)prm->dx);
  s->p = *p;
  memset(p, 0, sizeof *p);
  cpu_compact_round_from(s, 0);
  *out = (backend){.name = "cpu", .state = s, .rebuild = cpu_rebuild, .p2g = cpu_p2g, .grid_update = grid_update,
                   .g2p = cpu_g2p, .max_speed = max_speed, .destroy = destroy, .wants_rebuild = wants_rebuild,
                   .grid_update_part = grid_update_part, .set_time = set_time, .set_projected = set_projected, .set_last_dt = set_last_dt,
                   .block_sums = (int)s->bf, .sums_int64 = s->det};
  cpu_particles_ops(out);
  cpu_exchange_ops(out);
  s->ahead_on = settings()->steps_ahead != SETTING_OFF; /* auto: on for the CPU */
  int rebuilt;
  int rc = cpu_rebuild(s, 1, &rebuilt);
  if (rc) {
    destroy(s);
    out->state = NULL;
    return rc;
  }
  return DR_OK;
}

int backend_cpu_create_from(const sim_params *prm, const particle_source *src, backend *out) {
  particles p = {0};
  int rc = particles_reserve(&p, mem_doubled(MEM_FIRST_PARTICLES, src->n));
  if (rc == DR_OK) rc = backend_source_drain(src, &p, MEM_CREATE_CHUNK);
  if (rc == DR_OK) rc = backend_cpu_create(prm, &p, out);
  particles_free(&p); /* taken over on success */
  return rc;
}

/* backend_cpu.c - the CPU reference backend (OpenMP).
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

#include "backend.h"
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

#define NCOLORS 27
#define CH_APIC 4   /* grid channels: mass, momentum x, y, z (the grid update makes it velocity) */
#define CH_ASFLIP 7 /* ... and the momentum without the stress impulse (ASFLIP's old velocity) */

typedef struct xslot { /* node_masks_async's masks of one link */
  void *msg;
  size_t cap, bytes;
} xslot;

typedef struct cpu_state {
  sim_params prm;
  material_params *mats;
  float origin[3], inv_dx;
  xslot *xslot;                 /* node_masks_async's masks, one slot per link */
  int n_xslot;
  int channels;                 /* CH_APIC or CH_ASFLIP */
  size_t bf;                    /* floats per grid block: channels x 64 */
  double time;                  /* start of the next step (set_time), s */
  collider_pose *poses;         /* [n_colliders] where the colliders are in this grid update */
  particles p;                  /* sorted by (particle block, cell) at each rebuild */
  particles tmp;                /* permutation target at rebuild (grow-only) */
  particles snap;               /* backend.h's snapshot: the arrays of snap_mask, snap_cap rows each
                                 * (memtally_malloc, MT_TRANSFER), kept snapshot after snapshot */
  unsigned snap_mask;
  size_t snap_cap;
  int32_t *pblock;              /* [n] particle block of each particle */
  uint64_t *sort_key;           /* [2n]: (key, index) pairs */
  size_t cap_n;

  size_t n_pb, cap_pb;
  int32_t *pb_coord;   /* [3 n_pb] */
  int32_t *pb_nbr;     /* [27 n_pb] physical block indices, sparse_neighbor() order */
  size_t *pb_start;    /* [n_pb + 1] first particle of each particle block */
  int32_t *color_pb;   /* [n_pb] particle blocks grouped by colour */
  size_t color_start[NCOLORS + 1];
  uint64_t *nbr_codes; /* [27 n_pb] scratch for the physical block list */

  size_t n_blocks, cap_blocks;
  uint64_t *block_code;
  float *grid;         /* [n_blocks][channels][64] */
  int64_t *igrid;      /* deterministic mode only: [n_blocks][channels][64] fixed-point P2G sums */
  int det;             /* deterministic mode (prm.deterministic) */
  int compact;         /* parallel.storage "compact": the state rounds through physics/compact.h's record
                        * where a compact store would write it (P2G's return mapping, G2P's end, arrival) */
  compact_frame cframe; /* the record's position lattice: the grid origin and dx */
  int projected;       /* the next P2G leaves out the return mapping (set_projected) */
  double inv_scale[2]; /* 1 / prm.fix_scale */
  uint8_t *touched;    /* [n_blocks] */
  uint8_t *shared;     /* [n_blocks] shared with another rank (mark_shared) */
  block_table table;

  int need_rebuild;
  uint64_t rebuilds;
  float vmax;
  /* backend.h's gate (g2p_ahead, gate_open): the CPU computes at once, so the calls that a GPU
   * would queue behind the gate are deferred until it opens (run) or dropped (voided) */
  int ahead_on;                   /* --steps-ahead (auto: on): g2p_ahead arms the gate */
  int gate_armed;
  int gate_p2g;                   /* p2g(gate_dt) waits behind the gate */
  float gate_dt;
  struct gate_masks { int slot; const int32_t *idx; size_t n; } *gate_masks; /* node_masks_async's, in order */
  int n_gate_masks, cap_gate_masks;
} cpu_state;

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

static void base_node(const cpu_state *s, const float *x, int b[3]) {
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

static int rebuild(void *state, int force, int *rebuilt) {
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
    base_node(s, s->p.x + 3 * i, b);
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
  float tau[9];
  constitutive_apply(&s->mats[p->material[i]], F, p->logjp + i, tau, !s->projected);
  if (s->compact) compact_round_f(F, p->logjp + i); /* the packet's write-back of F and logjp */
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

static int p2g(void *state, float dt) {
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
static void compact_round_from(cpu_state *s, size_t first) {
  if (!s->compact) return;
#pragma omp parallel for schedule(static)
  for (long i = (long)first; i < (long)s->p.n; ++i) compact_round_particle(s, (size_t)i);
}

/* ---- G2P --------------------------------------------------------------------------------- */

static int g2p(void *state, float dt) {
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
    constitutive_advance_F(mat, dt, C, F);
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
    if (!isfinite(sp2) || !isfinite(x[0] + x[1] + x[2]) || !isfinite(m3_det(F)) || sp2 > runaway * runaway) {
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
    base_node(s, x, b);
    for (int a = 0; a < 3; ++a) leave |= !sparse_in_free_zone(b[a], P[a]);
  }
  if (bad >= 0) return backend_fail_particle(&s->prm, p->id[bad], p->material[bad]);
  s->vmax = vmax;
  s->need_rebuild |= leave;
  return DR_OK;
}

/* ---- the rest of the interface ----------------------------------------------------------- */

static int max_speed(void *state, float *vmax) {
  *vmax = ((cpu_state *)state)->vmax;
  return DR_OK;
}

static int download(void *state, particles *out) {
  cpu_state *s = state;
  size_t n = s->p.n;
  DR_TRY(particles_reserve(out, n));
  out->n = n;
  for (int a = 0; a < PARTICLE_ATTRS && n > 0; ++a) /* none yet (sources only): no arrays either */
    memcpy(particles_attr(out, a), particles_attr(&s->p, a), n * particle_attrs[a].bytes);
  for (size_t i = 0; i < n; ++i) out->owner[i] = s->prm.rank * 256;
  return DR_OK;
}

/* Copies attribute a of rows [0, n) of src to dst (owner: this rank's value), in slices over the
 * threads. */
static void copy_attr(const cpu_state *s, int a, char *dst, const char *src, size_t n) {
  const int32_t owner = s->prm.rank * 256;
  const size_t bytes = n * particle_attrs[a].bytes, slice = (size_t)1 << 22;
  const long slices = (long)((bytes + slice - 1) / slice);
#pragma omp parallel for schedule(static)
  for (long k = 0; k < slices; ++k) {
    const size_t b = (size_t)k * slice, e = b + slice < bytes ? b + slice : bytes;
    if (a == PA_owner)
      for (size_t i = b / sizeof(int32_t); i < e / sizeof(int32_t); ++i) ((int32_t *)dst)[i] = owner;
    else
      memcpy(dst + b, src + b, e - b);
  }
}

static void snap_release(cpu_state *s) {
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    void **arr = (void **)((char *)&s->snap + particle_attrs[a].offset);
    memtally_free(*arr);
    *arr = NULL;
  }
  s->snap.n = s->snap_cap = 0;
  s->snap_mask = 0;
}

/* backend.h's snapshot: the host is this backend's device, so the snapshot is a host copy of the
 * mask's arrays, a quarter past the need (mem_frame_capacity, the memory plan's rule), kept; the
 * owner left out (this rank's one value, which fetch writes). */
static int snapshot(void *state, unsigned mask, size_t *n) {
  cpu_state *s = state;
  const size_t m = s->p.n;
  if (m > s->snap_cap || mask != s->snap_mask) {
    snap_release(s);
    const size_t cap = mem_frame_capacity(m);
    for (int a = 0; a < PARTICLE_ATTRS; ++a) {
      if (!((mask & ~PA_BIT(owner)) >> a & 1u)) continue;
      void **arr = (void **)((char *)&s->snap + particle_attrs[a].offset);
      if (!(*arr = memtally_malloc(MT_TRANSFER, cap * particle_attrs[a].bytes, "the frame's snapshot"))) {
        snap_release(s);
        return DR_ENOMEM;
      }
    }
    s->snap_cap = cap, s->snap_mask = mask;
  }
  for (int a = 0; a < PARTICLE_ATTRS && m > 0; ++a)
    if ((mask & ~PA_BIT(owner)) >> a & 1u) copy_attr(s, a, particles_attr(&s->snap, a), particles_attr(&s->p, a), m);
  s->snap.n = m;
  *n = m;
  return DR_OK;
}

/* backend.h's fetch: rows of the snapshot, copied (any thread: the snapshot is not the particles). */
static int fetch(void *state, unsigned mask, size_t first, size_t count, particles *dst) {
  cpu_state *s = state;
  if ((mask & s->snap_mask) != mask || first > s->snap.n || count > s->snap.n - first)
    return dr_fail(DR_EINTERNAL, "cpu backend: fetch of rows %zu .. %zu (mask 0x%x) from a snapshot of %zu (mask 0x%x)",
                   first, first + count, mask, s->snap.n, s->snap_mask);
  for (int a = 0; a < PARTICLE_ATTRS && count > 0; ++a)
    if (a == PA_owner && (mask & PA_BIT(owner)))
      copy_attr(s, a, particles_attr(dst, a), NULL, count);
    else if (mask >> a & 1u)
      memcpy(particles_attr(dst, a), (const char *)particles_attr(&s->snap, a) + first * particle_attrs[a].bytes,
             count * particle_attrs[a].bytes);
  dst->n = count;
  return DR_OK;
}

/* backend.h's fetch_rows: rows of the particles themselves, copied (the owner: this rank's). */
static int fetch_rows(void *state, size_t first, size_t count, particles *dst) {
  cpu_state *s = state;
  if (first > s->p.n || count > s->p.n - first)
    return dr_fail(DR_EINTERNAL, "cpu backend: fetch_rows of rows %zu .. %zu of %zu particles", first, first + count,
                   s->p.n);
  for (int a = 0; a < PARTICLE_ATTRS && count > 0; ++a)
    if (a == PA_owner)
      copy_attr(s, a, particles_attr(dst, a), NULL, count);
    else
      memcpy(particles_attr(dst, a), (const char *)particles_attr(&s->p, a) + first * particle_attrs[a].bytes,
             count * particle_attrs[a].bytes);
  dst->n = count;
  return DR_OK;
}

static size_t count(void *state) { return ((cpu_state *)state)->p.n; }

static int stats(void *state, backend_stats *out) {
  cpu_state *s = state;
  out->rebuilds = s->rebuilds;
  out->n_particles = s->p.n;
  out->n_blocks = s->n_blocks;
  out->vote_wait_s = 0.0; /* the host steps: no device waits for the vote */
  out->bytes = (double)s->cap_n * (2 * particles_record_bytes() + sizeof(int32_t) + 2 * sizeof(uint64_t)) +
               (double)s->cap_blocks * (s->bf * (sizeof(float) + (s->det ? sizeof(int64_t) : 0)) + sizeof(uint64_t) + 1) +
               (double)s->cap_pb * (3 + 27 + 1) * sizeof(int32_t) + (double)s->table.cap * 12;
  for (int a = 0; a < PARTICLE_ATTRS; ++a) /* the frame's snapshot */
    if (particles_attr(&s->snap, a)) out->bytes += (double)s->snap_cap * particle_attrs[a].bytes;
  return DR_OK;
}

/* ---- the rank exchange (mpi/exchange.c) --------------------------------------------------- */

static int blocks(void *state, const uint64_t **codes, size_t *n) {
  cpu_state *s = state;
  *codes = s->block_code; /* sorted by code; the position is the dense index */
  *n = s->n_blocks;
  return DR_OK;
}

/* node_masks_async deferred behind the gate, after the p2g deferred before it (gate_open runs
 * them in order). */
static int gate_defer(cpu_state *s, int slot, const int32_t *idx, size_t n) {
  if (s->n_gate_masks == s->cap_gate_masks) {
    const int cap = s->cap_gate_masks ? 2 * s->cap_gate_masks : 4;
    struct gate_masks *q = realloc(s->gate_masks, sizeof *q * (size_t)cap);
    if (!q) return dr_fail(DR_ENOMEM, "out of host memory for the node masks queued behind the gate");
    s->gate_masks = q, s->cap_gate_masks = cap;
  }
  s->gate_masks[s->n_gate_masks++] = (struct gate_masks){slot, idx, n};
  return DR_OK;
}

/* The slot's mask buffer, of at least need bytes. */
static int xslot_get(cpu_state *s, int slot, size_t need, xslot **out) {
  if (slot < 0) return dr_fail(DR_EINTERNAL, "cpu backend: node mask slot %d", slot);
  if (slot >= s->n_xslot) {
    const int cap = slot + 1 > 2 * s->n_xslot ? slot + 1 : 2 * s->n_xslot;
    xslot *q = realloc(s->xslot, sizeof *q * (size_t)cap);
    if (!q) return dr_fail(DR_ENOMEM, "out of host memory for the exchange's mask buffers");
    memset(q + s->n_xslot, 0, sizeof *q * (size_t)(cap - s->n_xslot));
    s->xslot = q, s->n_xslot = cap;
  }
  xslot *x = &s->xslot[slot];
  if (x->cap < need) {
    free(x->msg);
    x->msg = malloc(need ? need : 1);
    x->cap = x->msg ? need : 0;
    if (!x->msg) return dr_fail(DR_ENOMEM, "out of host memory for the exchange's mask buffers (%zu bytes)", need);
  }
  *out = x;
  return DR_OK;
}

/* The node exchange (backend.h): a block's mask marks the nodes where any channel of this step's
 * sums is non-zero (an untouched block holds none): every node a particle weighs with w > 0 gets
 * mass w m > 0. Not so in deterministic mode, where a tiny w m rounds to a fixed-point 0 while G2P
 * still reads the node with that w: there every node of a touched block is marked (the blocks a
 * particle's stencil reaches, as P2G marks them), so that only the blocks both ranks reach
 * travel, whole. */
static uint64_t node_mask(const cpu_state *s, int32_t blk) {
  uint64_t m = 0;
  if (!s->touched[blk]) return 0;
  if (s->det) return ~0ull;
  const size_t ch = s->bf / BLOCK_NODES;
  for (int nd = 0; nd < BLOCK_NODES; ++nd) {
    int any = 0;
    for (size_t c = 0; c < ch; ++c) any |= s->grid[(size_t)blk * s->bf + c * BLOCK_NODES + nd] != 0.0f;
    m |= (uint64_t)any << nd;
  }
  return m;
}

static int node_masks(void *state, const int32_t *idx, size_t n, uint64_t *out) {
  cpu_state *s = state;
  for (size_t k = 0; k < n; ++k) out[k] = node_mask(s, idx[k]);
  return DR_OK;
}

/* Into the slot's buffer at once (behind the gate: when it opens); node_masks_wait hands it over. */
static int node_masks_async(void *state, int slot, const int32_t *idx, size_t n) {
  cpu_state *s = state;
  if (s->gate_armed) return gate_defer(s, slot, idx, n);
  xslot *x = NULL;
  DR_TRY(xslot_get(s, slot, n * sizeof(uint64_t), &x));
  x->bytes = n * sizeof(uint64_t);
  return node_masks(state, idx, n, x->msg);
}

static int node_masks_wait(void *state, int slot, uint64_t *out) {
  cpu_state *s = state;
  if (slot < 0 || slot >= s->n_xslot)
    return dr_fail(DR_EINTERNAL, "cpu backend: node_masks_wait(%d) without its node_masks_async", slot);
  memcpy(out, s->xslot[slot].msg, s->xslot[slot].bytes);
  return DR_OK;
}

/* The values of the nodes mask marks, between the grid and a node message (block k's from base[k]
 * x channels on, channel by channel, the marked nodes in order): into msg (pack_nodes), or added
 * to the grid (unpack_add_nodes; every block the mask marks is one this rank's P2G touched, as the
 * AND holds its own mask). */
static void move_nodes(cpu_state *s, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base, void *msg,
                       int add) {
  const size_t ch = s->bf / BLOCK_NODES;
  for (size_t k = 0; k < n; ++k) {
    const size_t cnt = (size_t)__builtin_popcountll(mask[k]), at = (size_t)base[k] * ch;
    size_t r = 0;
    for (int nd = 0; nd < BLOCK_NODES && r < cnt; ++nd) {
      if (!((mask[k] >> nd) & 1u)) continue;
      for (size_t c = 0; c < ch; ++c) {
        const size_t g = (size_t)idx[k] * s->bf + c * BLOCK_NODES + nd, q = at + c * cnt + r;
        if (s->det) { /* integer sums: the order of the ranks' additions does not matter */
          if (add) s->igrid[g] += ((const int64_t *)msg)[q];
          else ((int64_t *)msg)[q] = s->igrid[g];
        } else {
          if (add) s->grid[g] += ((const float *)msg)[q];
          else ((float *)msg)[q] = s->grid[g];
        }
      }
      ++r;
    }
  }
}

static int pack_nodes(void *state, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base, void *out) {
  move_nodes(state, idx, n, mask, base, out, 0);
  return DR_OK;
}

static int unpack_add_nodes(void *state, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base,
                            const void *in) {
  move_nodes(state, idx, n, mask, base, (void *)in, 1);
  return DR_OK;
}

static int mark_shared(void *state, const int32_t *idx, size_t n) {
  cpu_state *s = state;
  if (!idx) { /* a new exchange_setup */
    if (s->n_blocks) memset(s->shared, 0, s->n_blocks);
    return DR_OK;
  }
  for (size_t k = 0; k < n; ++k) s->shared[idx[k]] = 1;
  return DR_OK;
}

static int set_time(void *state, double t) {
  ((cpu_state *)state)->time = t;
  return DR_OK;
}

static int wants_rebuild(void *state) { return ((cpu_state *)state)->need_rebuild; }

static int set_projected(void *state) {
  ((cpu_state *)state)->projected = 1;
  return DR_OK;
}

static int set_particles(void *state, particles *p) {
  cpu_state *s = state;
  particles_free(&s->p);
  s->p = *p;
  memset(p, 0, sizeof *p);
  compact_round_from(s, 0);
  int rebuilt;
  return rebuild(s, 1, &rebuilt);
}

static int add_particles(void *state, const particles *p) {
  cpu_state *s = state;
  const size_t n = s->p.n;
  if (n + p->n > s->p.cap) {
    size_t cap = s->p.cap ? s->p.cap : 1024;
    while (cap < n + p->n) cap *= 2;
    DR_TRY(particles_reserve(&s->p, cap));
  }
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    const size_t b = particle_attrs[a].bytes;
    memcpy((char *)particles_attr(&s->p, a) + b * n, particles_attr(p, a), b * p->n);
  }
  s->p.n = n + p->n;
  compact_round_from(s, n);
  int rebuilt;
  return rebuild(s, 1, &rebuilt);
}

/* backend.h's p2g_part: the CPU backend runs its phases to completion, so nothing would overlap
 * the exchange; the boundary part is the whole P2G and the interior part is empty. */
static int p2g_part(void *state, float dt, int part) { return part == P2G_BOUNDARY ? p2g(state, dt) : DR_OK; }

/* backend.h's g2p_ahead, g2p_collect and gate_open: g2p at once, then the gate defers the next
 * step's p2g and node masks (p2g, node_masks_async) until it opens, in their order; a voided gate
 * drops them. Nothing to gain on a CPU, but the ranks' loop runs the same order of calls as on
 * a GPU, so that the tests check it here (--steps-ahead off: off). */
static int g2p_ahead(void *state, float dt, int *armed) {
  cpu_state *s = state;
  *armed = 0;
  DR_TRY(g2p(state, dt));
  if (!s->ahead_on) return DR_OK;
  s->gate_armed = 1;
  s->gate_p2g = 0;
  s->n_gate_masks = 0;
  *armed = 1;
  return DR_OK;
}

static int g2p_collect(void *state) {
  (void)state; /* g2p_ahead's g2p is complete */
  return DR_OK;
}

static int gate_open(void *state, int go) {
  cpu_state *s = state;
  if (!s->gate_armed) return dr_fail(DR_EINTERNAL, "cpu backend: gate_open without g2p_ahead");
  s->gate_armed = 0;
  const int n = s->n_gate_masks;
  s->n_gate_masks = 0;
  if (!go) {
    s->gate_p2g = 0;
    return DR_OK;
  }
  if (s->gate_p2g) {
    s->gate_p2g = 0;
    DR_TRY(p2g(state, s->gate_dt));
  }
  for (int k = 0; k < n; ++k) {
    const struct gate_masks *q = &s->gate_masks[k];
    DR_TRY(node_masks_async(state, q->slot, q->idx, q->n));
  }
  return DR_OK;
}

/* backend.h's emigrate: the leaving particles are appended to out in index order, the others
 * close ranks in theirs; the caller's rebuild-mapping sorts what is left. */
static int emigrate(void *state, const int32_t lo[3], const int32_t hi[3], particles *out) {
  cpu_state *s = state;
  size_t keep = 0;
  for (size_t i = 0; i < s->p.n; ++i) {
    int b[3], leave = 0;
    base_node(s, s->p.x + 3 * i, b);
    for (int a = 0; a < 3; ++a) leave |= (b[a] >> 2) < lo[a] || (b[a] >> 2) >= hi[a];
    if (leave) {
      DR_TRY(particles_push_copy(out, &s->p, i));
      out->owner[out->n - 1] = s->prm.rank * 256;
      continue;
    }
    if (keep != i)
      for (int a = 0; a < PARTICLE_ATTRS; ++a) {
        const size_t b = particle_attrs[a].bytes;
        memcpy((char *)particles_attr(&s->p, a) + b * keep, (char *)particles_attr(&s->p, a) + b * i, b);
      }
    ++keep;
  }
  s->p.n = keep;
  return DR_OK;
}

/* backend.h's particle_blocks: the mapping's particle blocks and their counts. */
static int particle_blocks(void *state, int (*add)(void *ctx, const int32_t blk[3], uint64_t count), void *ctx) {
  cpu_state *s = state;
  for (size_t q = 0; q < s->n_pb; ++q)
    if (s->pb_start[q + 1] > s->pb_start[q]) DR_TRY(add(ctx, s->pb_coord + 3 * q, s->pb_start[q + 1] - s->pb_start[q]));
  return DR_OK;
}

static void destroy(void *state) {
  cpu_state *s = state;
  if (!s) return;
  particles_free(&s->p);
  particles_free(&s->tmp);
  snap_release(s);
  memtally_free(s->pblock), memtally_free(s->sort_key);
  memtally_free(s->pb_coord), memtally_free(s->pb_nbr), memtally_free(s->pb_start), memtally_free(s->color_pb);
  memtally_free(s->nbr_codes);
  free_blocks(s);
  grid_table_free(&s->table);
  free(s->poses);
  free(s->mats);
  for (int k = 0; k < s->n_xslot; ++k) free(s->xslot[k].msg);
  free(s->xslot);
  free(s->gate_masks);
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
  compact_round_from(s, 0);
  *out = (backend){.name = "cpu", .state = s, .rebuild = rebuild, .p2g = p2g, .grid_update = grid_update,
                   .g2p = g2p, .max_speed = max_speed, .download = download, .snapshot = snapshot, .fetch = fetch, .fetch_rows = fetch_rows, .stats = stats, .count = count, .destroy = destroy,
                   .blocks = blocks, .node_masks = node_masks, .node_masks_async = node_masks_async,
                   .node_masks_wait = node_masks_wait, .pack_nodes = pack_nodes, .unpack_add_nodes = unpack_add_nodes,
                   .wants_rebuild = wants_rebuild,
                   .mark_shared = mark_shared, .grid_update_part = grid_update_part,
                   .set_particles = set_particles, .add_particles = add_particles, .emigrate = emigrate, .particle_blocks = particle_blocks, .p2g_part = p2g_part, .set_time = set_time,
                   .set_projected = set_projected, .block_sums = (int)s->bf, .sums_int64 = s->det};
  s->ahead_on = settings()->steps_ahead != SETTING_OFF; /* auto: on for the CPU */
  out->g2p_ahead = g2p_ahead, out->g2p_collect = g2p_collect, out->gate_open = gate_open;
  int rebuilt;
  int rc = rebuild(s, 1, &rebuilt);
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

// views.cuh - the views that the step's kernels (k_p2g, k_grid, k_g2p, k_collide, k_g2p2g) take,
// and their builders from a member's cuda_state. A view is a small plain struct of non-owning
// device pointers (with the counts and scales that go with them), filled once for a launch by its
// builder (particle_view_of, ...). Its pointers are valid for that launch and for the graphs
// captured with it: they change only at a rebuild-mapping, after which the graphs are captured
// again (gpu/step.cu).
//
// A kernel takes a view's members as its own parameters, not the struct: PARTICLE_PARAMS in its
// signature, PARTICLE_ARGS(v) at its launch. nvcc honours __restrict__ on a kernel's parameters.
// It drops it on a struct member, and a local __restrict__ copy brings it back only where the
// compiler proves that nothing in the whole kernel writes the data (a clock read such as stamp's
// defeats that), which it does in none of these kernels. Without it the loads of read-only data
// are no longer read-only loads (LDG.CONSTANT) and loads and stores lose their freedom to
// reorder: the kernels' machine code and registers change. Through the macros each kernel keeps
// its parameters, their qualifiers and its code. The step's scalars carry no qualifiers and
// travel as a plain struct (step_scalars).
#ifndef DRIFT_GPU_VIEWS_CUH
#define DRIFT_GPU_VIEWS_CUH

#include "cuda_state.h"

/* ---- particles ---------------------------------------------------------------------------- */

/* A member's particles on its packets: the packets' headers, the particle
 * blocks, the packets. P2G, G2P, G2P2G and the particle collision step share it. */
typedef struct particle_view {
  const int2 *hdr;             /* [n_packets] (particle block, lanes filled) */
  const int32_t *pb_coord;     /* [3 n_pb] a particle block's block coordinates */
  const int32_t *pb_nbr;       /* [27 n_pb] its neighbour grid blocks */
  float *pk;                   /* [n_packets PK_FLOATS] the particles' attributes */
  const uint64_t *pid;         /* [n_packets LANES] their ids */
  const material_params *mats; /* the material table (k_g2p: NULL where G2P reads none, s->g2p_mat) */
} particle_view;
#define PARTICLE_PARAMS                                                                                          \
  const int2 *__restrict__ hdr, const int32_t *__restrict__ pb_coord, const int32_t *__restrict__ pb_nbr,       \
      float *__restrict__ pk, const uint64_t *__restrict__ pid, const material_params *__restrict__ mats
#define PARTICLE_ARGS(v) (v).hdr, (v).pb_coord, (v).pb_nbr, (v).pk, (v).pid, (v).mats

static inline particle_view particle_view_of(const cuda_state *s) {
  particle_view v;
  v.hdr = dp<int2>(s->hdr);
  v.pb_coord = dp<int32_t>(s->pb_coord);
  v.pb_nbr = dp<int32_t>(s->pb_nbr);
  v.pk = dp<float>(s->pk);
  v.pid = dp<uint64_t>(s->pid);
  v.mats = dp<material_params>(s->d_mats);
  return v;
}

/* ---- the step's scalars ------------------------------------------------------------------- */

/* The grid's origin and spacing, the domain that advection clamps to, gravity, and the free zone
 * [zone_lo, zone_hi] (cells of a particle block) that G2P checks (0, 0 where a kernel has none). */
typedef struct step_scalars {
  float3 origin, dmin, dmax, gravity;
  float dx, inv_dx;
  int zone_lo, zone_hi;
} step_scalars;

static inline step_scalars step_scalars_of(const cuda_state *s, int zone_lo, int zone_hi) {
  step_scalars c;
  c.origin = make_float3(s->origin[0], s->origin[1], s->origin[2]);
  c.dmin = make_float3(s->dmin[0], s->dmin[1], s->dmin[2]);
  c.dmax = make_float3(s->dmax[0], s->dmax[1], s->dmax[2]);
  c.gravity = make_float3(s->prm.gravity[0], s->prm.gravity[1], s->prm.gravity[2]);
  c.dx = s->prm.dx;
  c.inv_dx = s->inv_dx;
  c.zone_lo = zone_lo;
  c.zone_hi = zone_hi;
  return c;
}

/* ---- the grid ----------------------------------------------------------------------------- */

/* Where a P2G adds: grid buffer par, the float sums or in deterministic mode fp.ig, its ASFLIP
 * buffer (NULL without ASFLIP) and its blocks' touched flags. k_p2g's, and k_g2p2g's for the next
 * step's buffer. */
typedef struct p2g_target {
  float *grid;      /* [n_blocks BLOCK_FLOATS] */
  uint8_t *touched; /* [n_blocks] */
  float *grid0;     /* [n_blocks OLD_FLOATS], or NULL */
  fixp fp;          /* deterministic mode's fixed-point sums (fp.ig NULL otherwise) */
} p2g_target;
#define P2G_TARGET_PARAMS                                                                                        \
  float *__restrict__ p2g_grid, uint8_t *__restrict__ p2g_touched, float *__restrict__ p2g_grid0, fixp p2g_fp
#define P2G_TARGET_ARGS(v) (v).grid, (v).touched, (v).grid0, (v).fp

static inline p2g_target p2g_target_of(cuda_state *s, int par) {
  p2g_target t;
  t.grid = dp<float>(s->grid[par]);
  t.touched = dp<uint8_t>(s->touched[par]);
  t.grid0 = grid0_of(s, par);
  t.fp = fix_of(s, par);
  return t;
}

/* k_grid's grid: the block table, the step's buffer par (touched .. ig) and the other one
 * (touched_next .. ig_next, cleared where the step before touched it), the island's separate
 * velocity buffers, and the fixed-point scales' inverses (deterministic mode). */
typedef struct grid_view {
  size_t n_blocks;
  const uint64_t *block_code; /* [n_blocks] */
  const uint8_t *shared;      /* [n_blocks] 1: shared with another rank */
  const int32_t *tags;        /* [n_blocks][nm - 1] the peers' indices of a block (k_tag) */
  const int32_t *list;        /* GRID_SHARED on one GPU: the shared blocks' indices (else NULL) */
  const int *list_n;          /* ... and their count */
  uint8_t *touched;
  float *g, *g0;              /* g0: ASFLIP, else NULL */
  const long long *ig;        /* deterministic mode, else NULL */
  uint8_t *touched_next;
  float *g_next, *g0_next;    /* g0_next: ASFLIP in float mode, else NULL */
  long long *ig_next;
  float *vel, *vel0;          /* an island reduced by double buffering (separate_vel): k_grid's output; else NULL */
  double inv_sm, inv_sp;      /* 1 / fix_scale[0], 1 / fix_scale[1] */
} grid_view;
#define GRID_PARAMS                                                                                              \
  size_t n_blocks, const uint64_t *__restrict__ block_code, const uint8_t *__restrict__ shared,                 \
      const int32_t *__restrict__ tags, const int32_t *__restrict__ list, const int *__restrict__ list_n,       \
      uint8_t *__restrict__ touched, float *__restrict__ g, float *__restrict__ g0,                             \
      const long long *__restrict__ ig, uint8_t *__restrict__ touched_next, float *__restrict__ g_next,         \
      float *__restrict__ g0_next, long long *__restrict__ ig_next, float *__restrict__ vel,                    \
      float *__restrict__ vel0, double inv_sm, double inv_sp
#define GRID_ARGS(v)                                                                                             \
  (v).n_blocks, (v).block_code, (v).shared, (v).tags, (v).list, (v).list_n, (v).touched, (v).g, (v).g0, (v).ig, \
      (v).touched_next, (v).g_next, (v).g0_next, (v).ig_next, (v).vel, (v).vel0, (v).inv_sm, (v).inv_sp

/* k_grid's view of buffer par; listed: over the shared blocks' list (GRID_SHARED on one GPU). */
static inline grid_view grid_view_of(cuda_state *s, int par, int listed) {
  grid_view v;
  v.n_blocks = s->n_blocks;
  v.block_code = dp<uint64_t>(s->block_code);
  v.shared = dp<uint8_t>(s->shared);
  v.tags = dp<int32_t>(s->tags);
  v.list = listed ? dp<int32_t>(s->shared_idx) : NULL;
  v.list_n = listed ? dp<int>(s->shared_n) : NULL;
  v.touched = dp<uint8_t>(s->touched[par]);
  v.g = dp<float>(s->grid[par]);
  v.g0 = grid0_of(s, par);
  v.ig = fix_of(s, par).ig;
  v.touched_next = dp<uint8_t>(s->touched[1 - par]);
  v.g_next = dp<float>(s->grid[1 - par]);
  v.g0_next = s->det ? NULL : grid0_of(s, 1 - par); /* deterministic P2G writes only the int sums */
  v.ig_next = fix_of(s, 1 - par).ig;
  v.vel = separate_vel(s) ? dp<float>(s->vel) : NULL;
  v.vel0 = separate_vel(s) && s->asflip ? dp<float>(s->vel0) : NULL;
  v.inv_sm = 1.0 / (double)s->prm.fix_scale[0];
  v.inv_sp = 1.0 / (double)s->prm.fix_scale[1];
  return v;
}

/* ---- the colliders ------------------------------------------------------------------------ */

/* The colliders at this step: their poses and world boxes (k_poses: wbox[k] for the grid update,
 * wbox[n_colliders + k] for the particle collision step), the collider cache (gpu/colliders.cu;
 * cc_index NULL without one), and the particles that k_g2p leaves to k_collide. The boundary's
 * faces and the colliders' shapes travel beside it in boundary_params, already a struct of
 * views. */
typedef struct collider_view {
  const collider_pose *poses;  /* [n_colliders] */
  const col_box *wbox;         /* [2 n_colliders] */
  const int *cc_index;         /* [n_colliders] the collider's cache q, or -1; NULL: no cache */
  const int32_t *cc_slot;      /* [n_cc n_blocks] a block's slot, or -1 */
  const mesh_samples *cc_vals; /* [slots BLOCK_NODES] */
  unsigned *push_mask;         /* [n_packets] the lanes k_g2p left to k_collide */
  float *push_room;            /* [slots] how far k_collide may move each of them */
} collider_view;
#define COLLIDER_PARAMS                                                                                          \
  const collider_pose *__restrict__ poses, const col_box *__restrict__ wbox, const int *__restrict__ cc_index,  \
      const int32_t *__restrict__ cc_slot, const mesh_samples *__restrict__ cc_vals,                            \
      unsigned *__restrict__ push_mask, float *__restrict__ push_room
#define COLLIDER_ARGS(v) (v).poses, (v).wbox, (v).cc_index, (v).cc_slot, (v).cc_vals, (v).push_mask, (v).push_room

static inline collider_view collider_view_of(const cuda_state *s) {
  collider_view v;
  v.poses = dp<collider_pose>(s->d_poses);
  v.wbox = dp<col_box>(s->d_wbox);
  v.cc_index = s->n_cc > 0 && s->cc_total > 0 ? dp<int>(s->cc_index) : NULL;
  v.cc_slot = dp<int32_t>(s->cc_slot);
  v.cc_vals = dp<mesh_samples>(s->cc_vals);
  v.push_mask = dp<unsigned>(s->push_mask);
  v.push_room = dp<float>(s->push_room);
  return v;
}

#endif

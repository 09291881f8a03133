/* backend_cpu_internal.h - the CPU backend's state and the functions its files share (private to
 * backend_cpu.c, the step: storage, rebuild-mapping, P2G, grid update, G2P, creation;
 * backend_cpu_particles.c, particles in and out: downloads, snapshots, fetches, arrivals and
 * departures; backend_cpu_exchange.c, the rank exchange's node sums and the gate of the step
 * queued ahead). backend_cpu.c's header describes the backend. */
#ifndef DRIFT_BACKEND_CPU_INTERNAL_H
#define DRIFT_BACKEND_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "grid.h"
#include "physics/compact.h"
#include "physics/constitutive.h"

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
  particles held;               /* backend.h's hold_rows: the particles' copy that fetch_rows reads */
  int holding;                  /* 1 once hold_rows has run */
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
  float dt_g2p;        /* compact storage: the last G2P's dt, whose update of F P2G makes (set_last_dt) */
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

/* backend_cpu.c */
/* backend.h's rebuild, p2g and g2p. */
int cpu_rebuild(void *state, int force, int *rebuilt);
int cpu_p2g(void *state, float dt);
int cpu_g2p(void *state, float dt);
/* The node at the base of a position's stencil (grid coordinates from the origin). */
void cpu_base_node(const cpu_state *s, const float *x, int b[3]);
/* Compact storage: particles first .. n - 1 rounded through physics/compact.h's record (arrivals). */
void cpu_compact_round_from(cpu_state *s, size_t first);

/* backend_cpu_particles.c: download, snapshot, fetch, fetch_rows, count, stats, set_particles,
 * add_particles, emigrate and particle_blocks into b; cpu_snap_release frees the snapshot. */
void cpu_particles_ops(backend *b);
void cpu_snap_release(cpu_state *s);

/* backend_cpu_exchange.c: blocks, the node masks (at once and in two halves), pack_nodes,
 * unpack_add_nodes, mark_shared, p2g_part and the gate (g2p_ahead, g2p_collect, gate_open) into
 * b; cpu_exchange_free frees their buffers. */
void cpu_exchange_ops(backend *b);
void cpu_exchange_free(cpu_state *s);

#endif

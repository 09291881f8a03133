// cuda_state.h - the CUDA backend's private header (gpu/ only; nothing outside gpu/ includes it).
//
// What every file of the backend shares: the layout constants (WARPS, THREADS, ...), the checks of
// CUDA calls (CU, LAUNCHED, cuda_fail), device vectors (dvec, DVEC*), the island's views of its
// peers (island_view, peer_blocks), one GPU's state (cuda_state), the island's (island, crew), and
// the prototypes of the functions one file of gpu/ calls in another. The backend's overview (the
// pipeline, the island, the ranks) is at the top of gpu/backend_cuda.cu; the island's race-freedom
// argument at the top of gpu/island_barrier.cu.
//
// The backend is compiled without relocatable device code (CUDA_SEPARABLE_COMPILATION OFF): a
// kernel, a __device__ variable or a __constant__ symbol lives in the one .cu file that uses it;
// device helpers that several files need are static inline here or in a small .cuh
// (gpu/p2g.cuh, gpu/barrier.cuh, gpu/block_table.cuh, gpu/grid.cuh, gpu/g2p.cuh).
#ifndef DRIFT_GPU_CUDA_STATE_H
#define DRIFT_GPU_CUDA_STATE_H

#include <cuda_runtime.h>

#include <cub/cub.cuh>

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <tuple>
#include <type_traits>

extern "C" {
#include "backend.h"
#include "error.h"
#include "hostmem.h"
#include "log.h"
#include "memsizes.h"
#include "memtally.h"
#include "compact_kinds.h"
#include "physics/compact.h"
#include "scene.h"
#include "settings.h"
}
#include "backend_cuda.h"
#include "p2g.cuh"
#include "physics/boundary.h"
#include "physics/bspline.h"
#include "physics/constitutive.h"
#include "physics/fixed.h"
#include "physics/sparse.h"
#include "physics/transfer.h"

/* ---- layout ------------------------------------------------------------------------------- */

/* The packet layout (A_*, LANES, PK_FLOATS), the grid block's (BLOCK_FLOATS, gidx), the step's control
 * record and the P2G of one warp's packet: gpu/p2g.cuh. */
#define WARPS 4 /* warps per CUDA block in the particle kernels (the paper's choice; docs/performance.md) */
enum { SKEW_PRE = 1, SKEW_POST = 2 }; /* DRIFT_ISLAND_SKEW (step_skew, gpu/step.cu) */
#define THREADS (WARPS * LANES)
#define SIMPLE_THREADS 256            /* one-thread-per-item kernels of the rebuild */
#define GRID_BLOCKS_PER_CTA 4 /* grid update: grid blocks of 64 nodes per CUDA block (docs/performance.md) */
/* Steps queued ahead of the host's reading of a step's flags: with one the device never waits for
 * the host (a wait would cost a few microseconds between graph launches). Where the queued step
 * cannot be voided (see the top of gpu/backend_cuda.cu) it eats a cell of the free zone's slack. */
#define STEP_LAG 1

/* The particle kernels' launch bounds (the compiler chooses the registers). */
#define PARTICLE_BOUNDS __launch_bounds__(THREADS)
/* P2G's and G2P's launch bounds, CPK: on compact packets, at least CPK_MIN_BLOCKS blocks an SM
 * (left to choose, the compiler gives the codec's double arithmetic 126-142 registers, 3 blocks;
 * 5 caps them at 96: docs/performance.md's decisions); on float packets the compiler chooses (a
 * minimum of 0 is none: 1 would give float k_p2g 92 registers, not 64). */
#define CPK_MIN_BLOCKS 5
#define PARTICLE_BOUNDS_OF(CPK) __launch_bounds__(THREADS, (CPK) ? CPK_MIN_BLOCKS : 0)

/* ---- errors ------------------------------------------------------------------------------- */

static inline int cuda_fail(cudaError_t e, const char *call, const char *file, int line) {
  cudaGetLastError(); /* clear a non-sticky error so that later calls start clean */
  return dr_fail_at(DR_ECUDA, file, line, call, "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Every CUDA runtime call: on failure records "call failed (file:line): error" and returns. */
#define CU(call)                                                                                   \
  do {                                                                                             \
    cudaError_t cu_e_ = (call);                                                                    \
    if (cu_e_ != cudaSuccess) return cuda_fail(cu_e_, #call, __FILE__, __LINE__);                  \
  } while (0)

/* After every kernel launch (launch errors; faults inside a kernel surface at the next
 * synchronising call, which CU checks). */
#define LAUNCHED(kernel)                                                                           \
  do {                                                                                             \
    cudaError_t cu_e_ = cudaGetLastError();                                                        \
    if (cu_e_ != cudaSuccess) return cuda_fail(cu_e_, "kernel " kernel, __FILE__, __LINE__);       \
  } while (0)

static inline unsigned blocks_for(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }

/* ---- device vectors ----------------------------------------------------------------------- */

/* A device buffer that grows, when a request needs more than its capacity, to the need and a
 * bounded headroom (memsizes.h: an eighth, or up to MEM_DVEC_SLACK for small buffers), so that the
 * steady state allocates nothing once the scene's extent settles and a particle costs the device
 * little more than its bytes (docs/architecture.md). */
typedef struct dvec {
  void *ptr;
  size_t bytes;
  cudaMemPool_t pool;       /* an island member's stream-ordered pool (dvec_pools), else NULL: cudaMalloc */
  cudaStream_t st;          /* ... and the stream its growths are ordered on */
  int pooled;               /* ptr came from pool (it travels with ptr through dvec_swap) */
  int place, kind;          /* where memtally.h counts bytes (1 + the device) and as what */
} dvec;

/* Device allocations made (every member's; DRIFT_GPU_STAMPS tells the rebuild-mappings that made
 * some). Every vector follows memsizes.h's rule (mem_dvec_capacity), first allocations and growths
 * alike; a growth frees the old buffer (cudaFree waits for the device; on an island the pools
 * order it on the stream) and keeps nothing unless through DVEC_KEEP. DVEC_EXACT: no headroom. */
extern unsigned long g_dvec_allocs;
extern int g_dvec_log;      /* DRIFT_GPU_STAMPS=1: each growth logged, with the host's time in cudaFree and cudaMalloc */

/* The host's monotonic clock (ns): the growths' log here, the island's crew below. */
static inline double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
static inline double now_ms(void) { return now_ns() * 1e-6; }
#define DVEC(v, need, what) DR_TRY(dvec_reserve_at(&(v), (need), 0, (what), __FILE__, __LINE__))
#define DVEC_EXACT(v, need, what) DR_TRY(dvec_reserve_at(&(v), (need), 1, (what), __FILE__, __LINE__))
#define DVEC_KEEP(v, need, keep, st, what) DR_TRY(dvec_grow_keep_at(&(v), (need), (keep), (st), (what), __FILE__, __LINE__))

template <typename T> static inline T *dp(const dvec &v) { return (T *)v.ptr; }
#define MAX_GPUS 8
typedef struct island_view {
  int np;                                   /* peers (members - 1); 0 for one GPU */
  unsigned long long timeout_ns;            /* a barrier gives up after this long (gpu/island_barrier.cu) */
  int spin;                                 /* 1: barriers are spin locks (k_begin spins for vmax); 0: events */
  const int8_t *own;                        /* p2p_atomics: [n_blocks] the owner's peer slot, -1 for this member; else NULL */
  unsigned *bar;                            /* this member's barrier count */
  const unsigned *peer_bar[MAX_GPUS - 1];
  const step_ctl *peer_ctl[MAX_GPUS - 1];
  const float *peer_grid[MAX_GPUS - 1];     /* the peers' P[par] of the step being launched */
  const float *peer_grid0[MAX_GPUS - 1];    /* ... and their ASFLIP buffers */
  const uint8_t *peer_touched[MAX_GPUS - 1];
  const long long *peer_ig[MAX_GPUS - 1];   /* deterministic mode: the peers' fixed-point sums of par */
} island_view;

/* p2p_atomics: the peers' buffers of parity par that k_push adds into and k_pull copies from. */
typedef struct peer_blocks {
  float *grid[MAX_GPUS - 1];
  float *grid0[MAX_GPUS - 1];               /* ASFLIP, else NULL */
  uint8_t *touched[MAX_GPUS - 1];
  long long *ig[MAX_GPUS - 1];              /* deterministic mode, else NULL */
} peer_blocks;

__device__ static inline unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* DRIFT_GPU_STAMPS: where a step's kernels stamp the device's clock into step_ctl.stamp (the first
 * thread of the first CTA, as the kernel begins; k_barrier also as its own count is published
 * and as it leaves; k_begin_gated, ranks, as it reaches the gate: gate > begin is the device's wait
 * for the step vote). In the order a step runs them; island_take, and island_g2p_collect where
 * ranks drive the phases, sum the time from each stamp to the next per member (timeline_stamps_take). */
enum stamp_at { ST_GATE, ST_BEGIN, ST_P2G, ST_BAR_IN, ST_BAR_SET, ST_BAR_OUT, ST_GRID, ST_G2P, ST_COUNT };
static_assert(ST_COUNT <= (int)(sizeof(((step_ctl *)0)->stamp) / sizeof(unsigned long long)), "step_ctl.stamp");
__device__ __forceinline__ void stamp(step_ctl *c, int at) {
  if (c->stamps && blockIdx.x == 0 && threadIdx.x == 0) c->stamp[at] = global_ns();
}

/* ---- state -------------------------------------------------------------------------------- */

typedef struct xlist {
  const int32_t *host; /* exchange_setup's list */
  size_t n, off;       /* its length, and where it starts in xidx */
  uint64_t mapping;    /* s->rebuilds when it was registered: its indices number that mapping's blocks */
} xlist;

typedef struct col_box {
  float lo[3], hi[3];
} col_box;

/* The collider cache: at most COLCACHE_MAX mesh colliders of a scene keep their samples. */
#define COLCACHE_MAX 4
#define CC_FILL_CTAS 1024 /* k_cc_fill's grid (grid-stride): enough for a refill, cheap without one */
typedef struct cc_cols {
  int k[COLCACHE_MAX];
} cc_cols;

typedef struct cuda_state {
  sim_params prm;
  material_params *mats; /* host copy, borrowed by prm.materials */
  int device;
  char device_name[256];
  cudaStream_t stream;
  cudaMemPool_t pool[2];        /* an island member's stream-ordered pools (dvec_pools): private, peers' */
  /* xstream, the exchange's stream (high priority), one GPU's alone (nm = 1; an island member runs
   * all on its step's stream): the boundary's P2G, the node masks, the packs and unpacks and the
   * copies of the messages, the shared blocks' update and the boundary's G2P go there, beside the
   * interior's work on the step's stream */
  cudaStream_t xstream;
  int head_on;                  /* this step: cuda_p2g_part queued the boundary's P2G there; xhead_ev follows it */
  int interior_on;              /* ... and cuda_node_masks_async the interior's P2G; cuda_p2g_part(P2G_INTERIOR) only joins */
  int tail_armed;               /* ... this step: cuda_g2p_interior recorded xint_ev; the unpacks leave the join to
                                 * grid_update_part(GRID_SHARED), which may queue them there */
  int tail_on;                  /* ... this step: grid_update_part queued the shared update there; g2p follows */
  cudaEvent_t xint_ev, xtail_ev; /* ... after the interior's grid update (step's stream); after the boundary's G2P */
  cudaEvent_t xhead_ev, xbeg_ev; /* after the boundary's P2G (xstream); the step's start (step's stream) */
  cudaEvent_t xp2g_ev;          /* ... after the boundary's P2G, which the masks wait for */
  struct pslot *pslot;          /* cuda_node_masks_async's buffers, one per rank link */
  int n_pslot;
  float origin[3], inv_dx;
  boundary_params bnd;          /* faces (wall nodes below lo / above hi) and colliders, device pointers */
  dvec d_colliders, d_keys;     /* the colliders and their keyframes (boundary.h) */
  dvec d_poses;                 /* [n_colliders] where they are in this step's grid update (k_poses) */
  bool push;                    /* a slip or separate collider: particles take the particle collision step */
  dvec d_colbox;                /* [n_colliders] col_box: where each collider can hold a particle, in its own frame */
  /* The collider cache (gpu/colliders.cu): mesh colliders without keyframes keep, per grid node
   * near them, their level-set samples (mesh_samples) while their frame stays. */
  int n_cc;                     /* cached colliders (0: none) */
  int cc_every;                 /* DRIFT_COLLIDER_CACHE=2: refill at every step (the test of staleness) */
  cc_cols cc_col;               /* their collider indices */
  col_box cc_box[COLCACHE_MAX]; /* where each can act, in the world, over all its frames */
  size_t cc_total;              /* grid blocks with samples, over every cached collider */
  dvec cc_index;                /* [n_colliders] int: the collider's cache q, or -1 */
  dvec cc_state;                /* [2 n_cc] int: the frame key the samples are of (-1: none), refill now */
  dvec cc_slot;                 /* [n_cc n_blocks] int32: block's samples (slot), or -1 */
  dvec cc_blocks;               /* [cc_total] int2: (block, q) of each slot */
  dvec cc_vals;                 /* [cc_total x 64] mesh_samples */
  dvec cc_scratch;              /* [2 n_blocks] uint32: flags and their scan, at rebuild-mapping */
  dvec d_wbox;                  /* [n_colliders] col_box: the same in the world at the step's end, widened (k_poses) */
  dvec push_mask;               /* [n_packets] lanes that G2P left to k_collide (k_g2p's COL variant) */
  dvec push_room;               /* [slots] how far k_collide may move each of those particles */
  dvec d_ls, d_ls_table, d_ls_bricks; /* mesh colliders' level sets (levelset.h), every frame, uploaded once */
  double t_next;                /* set_time: start of the next step the host drives phase by phase */
  float dmin[3], dmax[3];       /* the domain as floats (the advection clamp) */
  int code_bits;                /* bits of a block code that can be non-zero */

  size_t n;                     /* particles */
  size_t n_packets;             /* packets of the current mapping */
  dvec pk;                      /* [n_packets pk_words(s)] the packets (a rebuild moves them in place: reorder) */
  int compact;                  /* parallel.storage "compact": the packets hold records (compact_packets.cuh) */
  compact_frame cframe;         /* ... their positions' lattice */
  compact_kinds kinds;          /* ... the particle kinds met so far (host), and their copy on the device */
  dvec d_kinds;
  dvec pid;                     /* [slots] uint64 ids */
  dvec hdr;                     /* [n_packets] int2: particle block, valid lanes */
  dvec d_mats;

  dvec keys[2], vals[2];        /* [slots] sort keys and slot indices */
  dvec gone;                    /* [n_gone] slots whose particles emigrate took (dropped by the next rebuild) */
  size_t n_gone;                /* slots gone covers (0: none) */
  dvec xrec;                    /* cuda_emigrate_records: the emigrants' records (n_rec), which read_records reads */
  size_t n_rec;
  dvec xin;                     /* append_records: the arriving records on their way into packets */
  dvec snap[PARTICLE_ATTRS];    /* backend.h's snapshot: [snap_n] rows of each attribute of snap_mask
                                 * (k_capture from the packets; device memory, kept and grown) */
  unsigned snap_mask;
  size_t snap_n;
  void *snap_h[PARTICLE_ATTRS]; /* prm.snap_host: the snapshot in pinned host memory instead of snap (exact,
                                 * kept while the particles do not grow; cuda_snap_host_free) */
  size_t snap_h_bytes[PARTICLE_ATTRS];
  dvec snap_stage;              /* prm.snap_host: a chunk of the snapshot's rows on its way to snap_h */
  dvec rows;                    /* backend.h's fetch_rows: one chunk of rows of every attribute, attribute
                                 * after attribute (k_capture_rows; device memory, kept and grown); after
                                 * hold_rows, all rows_held rows of them, which fetch_rows then reads */
  size_t rows_held;             /* the particles whose rows hold_rows gathered into rows */
  int holding;                  /* 1 once hold_rows has run: fetch_rows reads rows from then on */
  dvec pblock;                  /* [n] particle block of each sorted particle (an inclusive scan first) */
  dvec head;                    /* [n] 1 where a particle block starts */
  size_t n_pb;
  dvec pb_coord;                /* [3 n_pb] int32 */
  dvec pb_start;                /* [n_pb + 1] first sorted particle of each particle block */
  dvec pb_packets;              /* [n_pb + 1] packets of each particle block, then their exclusive scan */
  dvec pb_nbr;                  /* [27 n_pb] physical block indices, sparse_neighbor() order */
  dvec nbr_codes[2];            /* [27 n_pb] neighbour codes, then sorted */

  size_t n_blocks;
  dvec block_code;              /* [n_blocks] uint64, sorted */
  dvec grid[2];                 /* [n_blocks][256] float, the two alternating buffers */
  dvec grid0[2];                /* ASFLIP only (else unallocated): [n_blocks][192] float beside grid[k]: P2G's
                                 * momentum without the stress impulse, then the velocity before the update */
  int asflip;                   /* a material uses ASFLIP (physics/transfer.h) */
  int g2p_mat;                  /* G2P reads the material: ASFLIP or a weakly compressible one */
  dvec touched[2];              /* [n_blocks] uint8 */
  int det;                      /* deterministic mode (prm.deterministic) */
  dvec igrid[2];                /* deterministic mode only: [n_blocks][ich][64] int64 fixed-point P2G sums */
  dvec shared;                  /* [n_blocks] uint8: shared with another rank (cuda_mark_shared) */
  dvec shared_idx, shared_n;    /* ... the shared blocks' indices and their count (xdev_shared_list; device) */
  size_t shared_bound;          /* ... at least that count: the marked lists' lengths summed (cuda_mark_shared) */
  int shared_stale;             /* shared_idx is not the marks' (cuda_mark_shared, rebuild) */
  dvec pk_order;                /* [n_packets] int32 (cuda_p2g_part): boundary packets first, then the rest */
  size_t n_boundary;            /* ... how many are boundary packets */
  int order_stale;              /* pk_order is not this mapping's and marks' (rebuild, cuda_mark_shared) */
  int part_skip;                /* cuda_p2g_part: the boundary call found the step's P2G primed, whole */
  int g2p_rest;                 /* cuda_g2p_interior queued the G2P of pk_order's interior packets: g2p does the rest */
  dvec xidx, xbuf;              /* the rank exchange: block indices and a message on the device */
  xlist *xl;                    /* the exchange's block lists in xidx (register_indices); owned here */
  int n_xl, xl_cap;
  int *h_xbad, *d_xbad;         /* [2] mapped pinned: an exchange kernel's out-of-range block index (index_ok) */
  /* backend.h's gate (g2p_ahead, gate_open; ranks, one GPU each): the next step's k_begin_gated waits on
   * the device until the host writes (gate_seq << 1) | go into *h_gate (mapped pinned) */
  unsigned *h_gate, *d_gate;
  unsigned gate_seq;
  int ahead_on;                 /* --steps-ahead (island_ahead_default): g2p_ahead arms the gate */
  int gate_armed;               /* g2p_ahead armed it; gate_open not yet called */
  int gate_queued;              /* ... and a k_begin_gated waits on it */
  double vote_wait_s;           /* the steps' waits at the gate so far (step_ctl.gate_ns; backend_stats) */
  cudaEvent_t g2p_ev;           /* after the armed step's G2P and its record (g2p_collect waits for it alone) */
  size_t unpack_check_n;        /* cuda_unpack_add_nodes' check of h_xbad, left to the next g2p (list length; 0: none) */
  dvec xrecv;                   /* cuda_unpack_add_nodes: the step's received messages, one after another */
  dvec xnodes;                  /* cuda_pack_nodes: the AND of the node masks and its prefix sums, on the device */
  size_t xrecv_used;            /* bytes of xrecv this step's unpacks took (reset by g2p) */
  cudaEvent_t xrecv_ev;         /* after an unpack's copies and its kernel on xstream */
  uint64_t *h_codes;            /* host copy of block_code (cuda_blocks()) */
  size_t h_codes_cap;           /* bytes (cuda_host_pinned) */
  uint64_t h_codes_of;          /* h_codes holds the codes of mapping h_codes_of - 1 (s->rebuilds); 0: none */
  int want_codes;               /* cuda_blocks() has been called (ranks): each rebuild-mapping copies the codes early */
  int codes_pending;            /* ... that copy is queued on xstream, codes_ev after it, not yet waited for */
  cudaEvent_t codes_ev;
  size_t table_cap;             /* power of two, at least twice n_blocks */
  dvec table_keys, table_vals;

  dvec temp;                    /* CUB temporary storage: grown when a call needs more, else reused */
  dvec ctl;                     /* step_ctl */
  dvec count;                   /* rebuild_count: counts read back at rebuild */
  struct rebuild_count *h_rc;   /* pinned: rebuild_now's read of count, and cuda_read_count's landing place */
  step_ctl *h_slot;             /* [2] pinned: the flags of the last step of each parity */
  step_ctl *d_slot;             /* h_slot mapped into the device (k_ctl_out) */
  cudaEvent_t done_ev[2];       /* recorded after each parity's step */
  cudaEvent_t ph_ev[2];         /* phase timing */

  cudaGraphExec_t graph[2];     /* the step on grid buffer 0 and 1 */
  int graphs_valid;
  int graph_fused;              /* the graphs hold the G2P2G step */
  int primed;                   /* G2P2G: grid[par] already holds the next step's P2G */
  unsigned long long barrier_timeout_ns; /* island_barrier gives up after this long */
  int skew_member, skew_where;  /* DRIFT_ISLAND_SKEW (a test hook): member, SKEW_PRE / SKEW_POST (0: none) */
  unsigned long long skew_ns;   /* ... and the delay it adds to that member's every step */
  float primed_dt;              /* ... taken with this dt (its stress impulse -dt V0 (4/dx^2) tau) */
  /* rebuild-mapping while primed (keep_primed): the old mapping's codes and primed sums, swapped
   * out of block_code, touched[par], grid[par] / grid0[par] (or igrid[par]) so that nothing is
   * copied; after the rebuild they are scratch, swapped back in at the next one */
  dvec old_code, old_touched, old_grid, old_grid0, old_igrid;
  dvec old_to_new;              /* [old blocks] int32: a touched old block's new index, else -1 */
  size_t g2p2g_below;           /* G2P2G for fixed steps and fewer particles than this */
  int par;                      /* the grid buffer the next step uses */
  int last_par;                 /* the buffer of the last completed step (its record: island_g2p's checks) */

  /* the island (gpu/island_barrier.cu); nm = 1: this GPU alone */
  int nm, me;                   /* members, and this member's index (the device in owner) */
  struct cuda_state *peer[MAX_GPUS - 1];
  dvec tags;                    /* [n_blocks][nm - 1] int32: the peers' indices of each block (k_tag) */
  dvec vel, vel0;               /* [n_blocks][256] / [n_blocks][192] float: k_grid's output, G2P's input */
  dvec bar;                     /* unsigned: this member's barrier count, read by the peers */
  int events;                   /* parallel.island_barrier "events" on an island: host-issued barriers, no graphs */
  int atomics;                  /* parallel.island_reduce "p2p_atomics" on an island: no vel, owners (k_owner) */
  int begin_barrier;            /* k_begin_barrier where it can serve (step_launch): the barrier on a device */
  int keys64;                   /* DRIFT_SORT_KEYS64=1 (a test switch): 64-bit sort keys where 32 would do, so that
                                   the path of domains beyond 1024 blocks a side runs on the test scenes */
  int n_sm;                     /* the device's multiprocessors */
  cudaEvent_t bar_ev;           /* events: recorded at each of this member's arrivals at a barrier */
  cudaEvent_t rebuilt_ev;       /* the island: recorded after each rebuild-mapping; the peers' k_tag waits for it */
  dvec own;                     /* p2p_atomics: [n_blocks] int8, the owner's peer slot or -1 (k_owner) */
  float *h_add;                 /* cuda_add_particles: host packets of the new particles (grow-only) */
  uint64_t *h_add_id;
  int2 *h_add_hdr;
  size_t h_add_cap;             /* packets */
  uint32_t *h_crec;             /* compact storage: arriving records with their kinds (pinned, grow-only) */
  size_t h_crec_cap;            /* bytes (cuda_host_pinned) */
  int need_rebuild;
  int unprimed;                 /* the last step queued took the primed sums (primed cleared): a voided step gives them back */
  int void_steps;               /* the frame loop: a step after a leave is voided (not with events; lag_of) */
  uint64_t rebuilds;
  float vmax;
  struct gpu_marks *marks;      /* DRIFT_GPU_MARKS=1: the stream's timeline between entries (gpu_marks) */
  struct gpu_stamps *stamps;    /* DRIFT_GPU_STAMPS=1: the device's time between a step's kernels (gpu_stamps) */
} cuda_state;

/* 32-bit words a packet holds: floats, or compact records (compact_packets.cuh's CPK_WORDS). */
static inline size_t pk_words(const cuda_state *s) { return s->compact ? (size_t)COMPACT_WORDS * LANES : (size_t)PK_FLOATS; }


/* Counts that the rebuild reads back (s->count): CUB's outputs in n; keep_primed's check rides on
 * the read of the block count. */
typedef struct rebuild_count {
  int n;                        /* a CUB reduction's or selection's result */
  int packets;                  /* rebuild_now: the new mapping's packets (read with n) */
  int lost;                     /* k_remap_find: a touched old block is not in the new mapping */
  unsigned long long lost_code; /* ... its code (any one, when several are) */
} rebuild_count;

/* Where a collider can hold a particle (phi < 0, physics/boundary.h: collider_push), as an
 * axis-aligned box: in the collider's own frame (colliders_box_local, on the host, once) and in the
 * world at the step's pose, widened by a margin (k_poses). G2P tests its particles against these
 * boxes and leaves the few inside one to k_collide, so that G2P itself carries none of the
 * collision step's registers; the grid update evaluates a collider only at the nodes inside its
 * box (docs/performance.md). A collider acts on a node where phi < half a cell (a mesh's lattice
 * holds phi up to two cells, and off it phi is that band), on a particle where phi < 0 and then
 * moves it by at most half a cell (boundary.h), so a margin of a cell covers both. An empty box
 * (lo > hi) holds nothing (a sticky collider's box for particles: it keeps what it holds); an
 * unbounded one (a plane) holds everything. */
__device__ __forceinline__ bool in_box(const col_box &b, const float x[3]) {
  return x[0] >= b.lo[0] && x[0] <= b.hi[0] && x[1] >= b.lo[1] && x[1] <= b.hi[1] && x[2] >= b.lo[2] &&
         x[2] <= b.hi[2];
}

/* ---- CUB calls and tracing ---------------------------------------------------------------- */

/* CUB calls: query the scratch size, grow the one scratch buffer if needed, run. */
#define CUB_RUN(call_with_temp)                                                                    \
  do {                                                                                             \
    size_t temp_bytes = 0;                                                                         \
    void *temp_ptr = NULL;                                                                         \
    CU(call_with_temp);                                                                            \
    DVEC(s->temp, temp_bytes, "CUB temporary storage");                                            \
    temp_bytes = s->temp.bytes;                                                                    \
    temp_ptr = s->temp.ptr;                                                                        \
    CU(call_with_temp);                                                                            \
  } while (0)

/* DRIFT_TRACE=1 in the environment: one line per host-side event (log.h). */
#define TRACE(...) log_trace(__VA_ARGS__)

/* Deterministic mode: int64 values per grid block (4 channels, 7 with ASFLIP, x 64 nodes). */
static inline size_t int_floats(const cuda_state *s) { return (size_t)(s->asflip ? 7 : 4) * BLOCK_NODES; }

/* Deterministic mode's P2G target for grid buffer par (unused in float mode). */
static inline fixp fix_of(const cuda_state *s, int par) {
  fixp f = {s->det ? dp<long long>(s->igrid[par]) : NULL, s->prm.fix_scale[0], s->prm.fix_scale[1]};
  return f;
}
/* The ASFLIP buffer beside grid[par], or NULL when no material uses ASFLIP. */
static inline float *grid0_of(cuda_state *s, int par) { return s->asflip ? dp<float>(s->grid0[par]) : NULL; }

/* The grid update writes to vel (an island reduced by double buffering), else in place. */
static inline int separate_vel(const cuda_state *s) { return s->nm > 1 && !s->atomics; }

/* Where G2P reads the grid velocities. */
static inline const float *vel_of(cuda_state *s, int par) { return separate_vel(s) ? dp<float>(s->vel) : dp<float>(s->grid[par]); }
static inline const float *vel0_of(cuda_state *s, int par) {
  return !s->asflip ? NULL : separate_vel(s) ? dp<float>(s->vel0) : dp<float>(s->grid0[par]);
}

/* ---- the island on the host --------------------------------------------------------------- */

/* The rank exchange on an island (island_blocks .. island_unpack_add_nodes): one list of
 * exchange_setup (the rank-level block indices it shares with one other rank), as each member
 * sees it. */
typedef struct island_xlist {
  const int32_t *host;            /* exchange_setup's list (rank-level indices), and its length */
  size_t n;
  int32_t *idx[MAX_GPUS];         /* member k's block indices of the listed blocks it holds (its marks), */
  size_t cnt[MAX_GPUS];           /* ... and how many */
  dvec link_map;                  /* on member 0: [n][nm] every member's index of each listed block, or -1 */
} island_xlist;

/* The island's host threads (gpu/island_crew.cu): one seat a member; a thread waits for the next
 * job spinning for CREW_SPIN_NS, then on the condition variable go. */
#define CREW_SPIN_NS 2000000
struct island;
typedef int (*member_job)(struct island *I, int k);
typedef struct crew_seat {
  struct island *I;
  int k;
} crew_seat;
typedef struct crew {
  int started;            /* threads running, for members 1 .. started (-1: none, the mutex exists) */
  pthread_t th[MAX_GPUS];
  crew_seat seat[MAX_GPUS];
  pthread_mutex_t mu;
  pthread_cond_t go;
  unsigned gen;           /* job number (atomic): a thread runs each job once */
  int busy;               /* threads still working on the job (atomic) */
  int quit;
  member_job job;
  int rc[MAX_GPUS];
  char msg[MAX_GPUS][1024]; /* a thread's error message (error.c keeps one per thread) */
  /* the step job's arguments (island_advance_frame) */
  int par, take, fused;
  double dt_fixed;
  int capture; /* island_rebuild's: capture the member's graphs after tagging */
} crew;

typedef struct island {
  int nm;                   /* members (GPUs) */
  crew crew;
  cuda_state *m[MAX_GPUS];
  int axis;                 /* the static split: along this axis, */
  double cut[MAX_GPUS - 1]; /* member k holds particles between cut[k - 1] and cut[k] at the start */
  float vmax;
  /* several ranks (island_blocks): the union of the members' blocks, sorted, and where each is on
   * every member (its block index there, or -1) */
  uint64_t *codes;
  int32_t *where[MAX_GPUS];
  size_t n_codes, cap_codes;
  island_xlist *xl;         /* cuda_mark_shared's lists since the last exchange_setup */
  int n_xl, cap_xl;
  void *rec_in;             /* island_add_records: one member's share (pinned) */
  size_t rec_in_cap;
} island;

/* Makes s's device current before launching on it (one GPU: it already is, since setup). */
static inline int use(const cuda_state *s) {
  if (s->nm > 1) CU(cudaSetDevice(s->device));
  return DR_OK;
}

/* ---- functions shared between the backend's files --------------------------------------- */

/* dvec.cu */
int dvec_reserve_at(dvec *v, size_t need, int exact, const char *what, const char *file, int line);
int dvec_grow_keep_at(dvec *v, size_t need, size_t keep, cudaStream_t st, const char *what, const char *file,
                      int line);
void dvec_free(dvec *v);
void dvec_swap(dvec *a, dvec *b);
int dvec_take(dvec *v, dvec *from);
int dvec_pools(cuda_state *s);

/* rebuild.cu */
int rebuild_push_buffers(cuda_state *s, size_t n_packets);
int rebuild_codes_wait(cuda_state *s);
int rebuild_now(cuda_state *s);

/* step.cu */
island_view step_view_of(cuda_state *s, int par);
peer_blocks step_peers_of(cuda_state *s, int par);
int step_clear_grid(cuda_state *s, int par);
int step_p2g_on(cuda_state *s, int par, const int32_t *order, size_t n, cudaStream_t st);
int step_p2g_of(cuda_state *s, int par, const int32_t *order, size_t n);
int step_p2g(cuda_state *s, int par);
const int32_t *step_interior_list(const cuda_state *s);
size_t step_interior_count(const cuda_state *s);
int step_p2g_interior(cuda_state *s);
int step_grid_on(cuda_state *s, int par, int part, cudaStream_t st);
int step_grid(cuda_state *s, int par, int part);
int step_g2p_on(cuda_state *s, int par, int lag, const int32_t *order, size_t n, int collide,
                  cudaStream_t st);
int step_g2p_of(cuda_state *s, int par, int lag, const int32_t *order, size_t n, int collide);
int step_g2p(cuda_state *s, int par, int lag);
int step_head(cuda_state *s, int par, int with_p2g);
int step_record_out(cuda_state *s, int par);
int step_tail(cuda_state *s, int par);
int step_launch(cuda_state *s, int par, int with_p2g);
void step_drop_graphs(cuda_state *s);
int step_capture_graphs(cuda_state *s);
int step_fail_fix(cuda_state *s, unsigned long long id);
int step_fail_bad(cuda_state *s, unsigned long long id);
int step_begin(cuda_state *s, float dt);
int cuda_set_projected(void *state);
int cuda_set_last_dt(void *state, float dt);

/* colliders.cu */
col_box colliders_box_local(const collider *c);
int colliders_slots(cuda_state *s);
int colliders_poses(cuda_state *s, cudaStream_t st);

/* island_barrier.cu */
int island_launch_barrier(cuda_state *s, int par);
int island_launch_push(cuda_state *s, int par);
int island_launch_pull(cuda_state *s, int par);
int island_tag_member(island *I, int k);
int island_tag(island *I);
int island_fail_barrier(const island *I, int k, const step_ctl *c);
int island_event_barrier(island *I);
int island_barrier_all(island *I);

/* island_crew.cu */
int crew_start(island *I);
void crew_stop(island *I);
int island_each(island *I, member_job job);
int island_sync(island *I);

/* island.cu */
int island_ahead_default(const sim_params *prm, int n);
int island_devices(const sim_params *prm, int *dev, int *n);
int island_rebuild(island *I);
int island_advance_frame(void *state, const frame_plan *plan, frame_report *rep);
int island_g2p_collect(island *I);
int island_g2p(void *state, float dt);
int island_g2p_ahead(void *state, float dt, int *armed);
void island_xl_free(island *I);
void island_log_zone(const cuda_state *s);
int island_create(const sim_params *prm, const int *dev, int nm, particles *p, backend *out);
int island_create_from(const sim_params *prm, const int *dev, int nm, const particle_source *src, backend *out);

/* exchange_device.cu */
int xdev_sums_floats(const cuda_state *s);
int xdev_xbad_check(cuda_state *s, const char *call, size_t n);
int cuda_blocks(void *state, const uint64_t **codes, size_t *n);
int xdev_xstream_get(cuda_state *s);
void xdev_pslots_free(cuda_state *s);
int cuda_node_masks_async(void *state, int slot, const int32_t *idx, size_t n);
int cuda_node_masks_wait(void *state, int slot, uint64_t *out);
int cuda_node_masks(void *state, const int32_t *idx, size_t n, uint64_t *out);
int cuda_pack_nodes(void *state, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base, void *out);
int cuda_unpack_add_nodes(void *state, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base,
                     const void *in);
int cuda_alloc_sums(void *state, size_t bytes, int device, void **ptr);
void cuda_free_sums(void *ptr, int device);
int cuda_mark_shared(void *state, const int32_t *idx, size_t n);
int xdev_shared_list(cuda_state *s, cudaStream_t st);
int xdev_boundary_order(cuda_state *s);
int island_blocks(void *state, const uint64_t **codes, size_t *n);
int island_mark_shared(void *state, const int32_t *idx, size_t n);
int island_node_masks(void *state, const int32_t *idx, size_t n, uint64_t *out);
int island_pack_nodes(void *state, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base,
                      void *out);
int island_unpack_add_nodes(void *state, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base,
                            const void *in);
int island_alloc_sums(void *state, size_t bytes, int device, void **ptr);

/* particles_io.cu */
int cuda_set_particles(void *state, particles *p);
/* Appends particles (or m records, particles.h's layout) in new packets after the mapping's, read
 * by the next rebuild-mapping: the island's members take their shares through them. */
int append_particles(cuda_state *s, const particles *p);
int append_records(cuda_state *s, const void *rec, size_t m);
void cuda_host_release(void *p);
int cuda_host_pinned(void **p, size_t *cap, size_t need, const char *what);
/* compact_io.cu: m records (host, records.cuh's layout) into add_packets new compact packets from
 * packet old_packets on (append_room made the room), their kinds looked up and the device's table
 * brought up to date. */
int compact_append_records(cuda_state *s, const uint32_t *rec, size_t m, size_t old_packets, size_t add_packets);
int cuda_add_particles(void *state, const particles *p);
int cuda_add_records(void *state, const void *rec, size_t m);
int cuda_emigrate_records(void *state, const int32_t lo[3], const int32_t hi[3], size_t *n);
int cuda_read_records(void *state, size_t first, size_t count, void *rec);
int cuda_reserve_records(void *state, size_t n, size_t round);
int cuda_emigrate(void *state, const int32_t lo[3], const int32_t hi[3], particles *out);
int cuda_download(void *state, particles *out);
int cuda_particle_blocks(void *state, int (*add)(void *ctx, const int32_t blk[3], uint64_t count), void *ctx);
int cuda_upload(cuda_state *s, const particles *p);
int cuda_upload_from(cuda_state *s, const particle_source *src);

/* capture.cu */
int cuda_snapshot(void *state, unsigned mask, size_t *n);
int cuda_snap_host_free(cuda_state *s, int a); /* attribute a's host snapshot (capture.cu) */
int cuda_fetch(void *state, unsigned mask, size_t first, size_t count, particles *dst);
int cuda_fetch_rows(void *state, size_t first, size_t count, particles *dst);
int island_snapshot(void *state, unsigned mask, size_t *n);
int island_fetch(void *state, unsigned mask, size_t first, size_t count, particles *dst);
int island_fetch_rows(void *state, size_t first, size_t count, particles *dst);
int cuda_hold_rows(void *state);
int island_hold_rows(void *state);

/* island_particles.cu */
int island_download(void *state, particles *out);
int island_split(island *I, const particles *p, particles *parts);
int island_assign_source(island *I, const particle_source *src, uint8_t **member);
/* A member's particles of the island's source (island_create_from): the source read again from its
 * start (rewind), the rows that island_assign_source gave member k taken in their order, a chunk
 * of the source at a time (buf). */
typedef struct member_source {
  const particle_source *src;
  const uint8_t *member;
  int k;
  size_t row; /* rows of src read: buf holds rows row - buf.n .. row - 1 */
  particles buf;
  size_t at;  /* buf's next row */
} member_source;
/* Rewinds src and makes *out the source of member k's rows (m: its state, member_source_close). */
int member_source_open(const particle_source *src, const uint8_t *member, int k, member_source *m,
                       particle_source *out);
void member_source_close(member_source *m);
int island_add_particles(void *state, const particles *p);
int island_emigrate(void *state, const int32_t lo[3], const int32_t hi[3], particles *out);
int island_emigrate_records(void *state, const int32_t lo[3], const int32_t hi[3], size_t *n);
int island_read_records(void *state, size_t first, size_t count, void *rec);
int island_add_records(void *state, const void *rec, size_t m);
int island_reserve_records(void *state, size_t n, size_t round);
int island_particle_blocks(void *state, int (*add)(void *ctx, const int32_t blk[3], uint64_t count),
                           void *ctx);
int island_set_particles(void *state, particles *p);

/* timeline.cu */
void timeline_marks_gate(cuda_state *s, int shut);
int timeline_marks_record(cuda_state *s, const char *name, int tag, int end, int step_end);
void timeline_stamps_take(cuda_state *s, const step_ctl *c);
void timeline_stamps_free(cuda_state *s);
void timeline_marks_free(cuda_state *s);
void timeline_new(cuda_state *s);

/* backend_cuda.cu */
int cuda_read_count(cuda_state *s, const void *dev, int *out);
int cuda_p2g(void *state, float dt);
int cuda_p2g_part(void *state, float dt, int part);
int cuda_g2p_interior(void *state, float dt);
double cuda_held_bytes(const cuda_state *s);
int cuda_stats(void *state, backend_stats *out);
void cuda_destroy(void *state);
int cuda_setup(cuda_state *s, const particles *p, const particle_source *src);
int cuda_member_new(const sim_params *prm, int device, cuda_state **out);
int cuda_gate_open_one(cuda_state *s, int go);

#endif

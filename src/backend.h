/* backend.h - the interface every backend implements (libCEED-style: a struct of function
 * pointers over an opaque state, filled in by the backend's create function).
 *
 * The time loop drives one step as separate phases so that, between P2G and the grid update,
 * the rank exchange can add the nodal sums of blocks shared with other ranks:
 *     rebuild (only when a particle left its free zone) -> p2g -> [exchange] -> grid_update -> g2p
 * Implementations: cpu (src/backend_cpu.c, the OpenMP reference) and cuda (gpu/). */
#ifndef DRIFT_BACKEND_H
#define DRIFT_BACKEND_H

#include <stdint.h>

#include "particles.h"
#include "physics/boundary.h"
#include "physics/material.h"

/* What every backend needs to know about the world, in the units the kernels use. */
typedef struct sim_params {
  double domain_min[3], domain_max[3]; /* m */
  float dx;                            /* m */
  float gravity[3];                    /* m/s^2 */
  boundary_params boundary;            /* faces and colliders; pointers borrowed for the backend's
                                        * lifetime (host memory); lo and hi are the backend's to fill */
  int n_materials;
  const material_params *materials;    /* borrowed for the backend's lifetime */
  const char *const *material_names;   /* borrowed, for messages */
  int n_bodies;
  const char *const *body_names;       /* borrowed, for messages: "bodies[2] (box)" per scene body */
  int rank;                            /* MPI rank, for the owner field */
  int gpus;                            /* GPUs to use (cuda; 0 = the visible ones, shared among the node's ranks) */
  int local_rank, local_size;          /* this rank among the ranks of its node (MPI_COMM_TYPE_SHARED) */
  long g2p2g_below;                    /* cuda: fused G2P2G (fixed steps) below this many particles per GPU */
  int deterministic;                   /* 1: P2G sums in 64-bit fixed point (physics/fixed.h) */
  float fix_scale[2];                  /* deterministic: units per kg (mass) and per kg m/s (momentum) */
  int island_barrier;                  /* cuda, several GPUs: enum island_barrier_kind (scene.h) */
  int island_reduce;                   /* cuda, several GPUs: enum island_reduce_kind (scene.h) */
  int storage;                         /* enum storage_kind (scene.h): compact rounds the state through
                                        * physics/compact.h's record (both backends) */
  int snap_host;                       /* cuda: the frame's snapshot in pinned host memory, gathered on
                                        * the device a chunk at a time (sim_options.snap_host) */
} sim_params;

/* A particle that moves more than this many cells in one step has broken the CFL condition
 * (MPM's transfers assume less than one cell per step, and adaptive steps keep |v| dt below
 * cfl dx): g2p fails with DR_EPHYSICS as for a non-finite state. Without it an exploding run can
 * fling its particles onto the domain faces, where sticky walls freeze them with finite,
 * meaningless values, and whether a NaN shows up first depends on rounding. */
#define DR_RUNAWAY_CELLS 1.0f

/* The message of backend.h's g2p failure for a bad particle: its id, its body (from the id,
 * particles.h) and its material (m: index into materials). Records it with dr_fail and returns
 * DR_EPHYSICS. Both backends report through it, so that the message reads the same. */
int backend_fail_particle(const sim_params *prm, uint64_t id, int m);

typedef struct backend_stats {
  uint64_t rebuilds;       /* rebuild-mappings so far */
  uint64_t n_particles;    /* particles held */
  uint64_t n_blocks;       /* physical blocks of the current mapping */
  double bytes;            /* memory held (host or device), bytes */
  double vote_wait_s;      /* device time spent waiting for the ranks' step vote since the start, s (a GPU's
                            * step queued ahead behind its gate, backend.h's g2p_ahead; the largest over an
                            * island's GPUs); 0 where nothing waits on a device (the CPU backend) */
} backend_stats;

enum grid_part { GRID_INTERIOR = 1, GRID_SHARED = 2, GRID_ALL = 3 };
/* p2g_part: the particles whose stencils may reach a block shared with another rank, or the others. */
enum p2g_part { P2G_BOUNDARY = 1, P2G_INTERIOR = 2 };

/* A frame's substeps, for backends that run them without the host choosing each step. */
typedef struct frame_plan {
  double t0, t1;      /* the frame's start and end (s) */
  int fixed_steps;    /* > 0: this many steps of dt_fixed; 0: adaptive steps */
  double dt_fixed;    /* fixed steps: sim.c's frame length / fixed_steps (not (t1 - t0) / fixed_steps,
                       * which rounds differently), so that every path takes the same steps */
  double cfl_dx;      /* adaptive: cfl * dx (m); dt = cfl_dx / (wave_speed + max |v|), the last two
                       * steps of the frame sharing what is left (as sim.c does step by step) */
  double wave_speed;  /* adaptive: the fastest elastic wave (m/s) */
  double dt_max;      /* adaptive: > 0 caps dt before the frame's end shares it (sim.c's viscous bound,
                       * the same test: dt > dt_max); 0: no cap */
  int k0;             /* steps of this frame already taken (a run resumed part-way into the frame) */
  double t_start;     /* where this call's first step starts (s): t0, or later when k0 > 0 */
  float vmax0;        /* >= 0: the speed the first step's dt comes from (a checkpoint's, or a source's
                       * faster particles), as sim.c's own loop takes it; < 0: the backend's last */
  /* Optional (NULL: never): asked before each step is queued, with the frame's steps queued so
   * far; nonzero stops the frame there: no more steps are queued, those queued finish, and
   * advance_frame returns DR_OK with rep->stopped set unless the frame ended anyway. sim.c
   * passes a look at the signal flag (signals.h), so that a signal stops a run within a step on
   * every backend, however long its frames are. It runs on the host while the device works. */
  int (*stop)(void *ctx, uint64_t queued);
  void *stop_ctx;
} frame_plan;

typedef struct frame_report {
  uint64_t steps;     /* steps completed in this call, after plan->k0 (on failure: before the failing one) */
  double last_dt;     /* s */
  int stopped;        /* 1: plan->stop stopped the frame before its end (steps < the frame's) */
  double t;           /* adaptive steps: the time reached (s), the start of the next step, summed
                       * step by step exactly as sim.c sums it (t_start + dt + dt ...); t_start if
                       * none. Fixed steps: sim.c takes t0 + (k0 + steps) dt_fixed instead. */
} frame_report;

typedef struct backend {
  const char *name;
  int n_devices; /* GPUs this rank drives (cuda: its island); 0 for cpu */
  void *state;
  /* Optional (NULL where absent): the time (s) at the start of the next step, so that moving
   * colliders stand where they should in its grid update (placed at the step's end, t + dt).
   * sim.c calls it before every step it drives phase by phase; advance_frame knows the time. */
  int (*set_time)(void *state, double t);
  /* Rebuilds the particle-grid mapping if a particle left its free zone during the last g2p,
   * or if force; sets *rebuilt. */
  int (*rebuild)(void *state, int force, int *rebuilt);
  /* Particle to grid with plasticity, stress and forces fused in (clears the grid first). */
  int (*p2g)(void *state, float dt);
  /* Optional (NULL: p2g only): p2g in two calls, P2G_BOUNDARY then P2G_INTERIOR, which together
   * are p2g. The boundary holds every particle whose stencil may reach a block that mark_shared
   * marked (a superset is allowed: the cpu backend scatters everything there); sim.c packs and
   * sends the shared nodes' sums after it and scatters the interior while they travel. */
  int (*p2g_part)(void *state, float dt, int part);
  /* Nodal velocities from momenta, gravity, wall conditions; untouched blocks skipped. */
  int (*grid_update)(void *state, float dt);
  /* Grid to particle, deformation update, advection, free-zone check. A non-finite state or a
   * runaway speed (DR_RUNAWAY_CELLS) fails with DR_EPHYSICS naming the particle. */
  int (*g2p)(void *state, float dt);
  /* Optional (all three or none; NULL: every step's P2G is queued after the step vote): the next
   * step queued ahead of the vote (sim.c: several ranks, fixed steps), so that the device starts
   * it as soon as the ranks agree instead of after the host has queued it. g2p_ahead does what g2p
   * queues, then shuts a gate (*armed = 1; 0 where the backend does the whole g2p instead, as g2p
   * would): the p2g, p2g_part and node_masks_async calls that follow queue behind it (cuda: the
   * step's first kernel waits on the device; cpu: the calls are deferred). g2p_collect does the
   * rest of g2p (waits for the G2P, not the queued step; reads its flags: wants_rebuild,
   * max_speed, failures). gate_open(go) lets the queued step run (1) or voids it (0:
   * its kernels return at once, the deferred calls are dropped; particles and grid stay as g2p
   * left them, so that a rebuild-mapping can follow). Every armed g2p_ahead is followed by one
   * gate_open; destroy voids a gate left shut. */
  int (*g2p_ahead)(void *state, float dt, int *armed);
  int (*g2p_collect)(void *state);
  int (*gate_open)(void *state, int go);
  /* Largest particle speed after the last g2p (m/s), for the adaptive step. */
  int (*max_speed)(void *state, float *vmax);
  /* Optional (NULL where absent): waits until the work the phases queued is done (cuda), so that
   * the host can time phases. */
  int (*finish)(void *state);
  /* Optional (NULL where absent): all substeps of a frame, rebuilds included, without the host
   * choosing each step. Same physics as calling the phases; used by sim.c where present. */
  int (*advance_frame)(void *state, const frame_plan *plan, frame_report *rep);
  /* Copies the particles out (out is resized as needed; allocates). Order is unspecified. */
  int (*download)(void *state, particles *out);
  /* A frame's particles in two halves, so that the host never holds them all (sim_output.c):
   * snapshot copies the attributes in mask (PA_BIT) of every particle held into a snapshot the
   * backend owns, in its own memory (cuda: device buffers, each member of an island its own rows,
   * the members one after another; cpu: host arrays), and sets *n to their number; it is valid
   * until the next snapshot, and the particles may step on as soon as snapshot returns. The rows'
   * order is download's, so that a frame written from either holds the same rows. fetch copies
   * rows first .. first + count - 1 of the snapshot (attributes in mask, a subset of the
   * snapshot's) into dst's arrays of those attributes, which the caller allocated for at least
   * count particles (with alloc_sums, device 0, where the backend has it), sets dst->n = count and
   * leaves dst's other arrays alone. fetch may run on another thread than the other calls (the
   * writer's) while they run, but never with a snapshot. */
  int (*snapshot)(void *state, unsigned mask, size_t *n);
  int (*fetch)(void *state, unsigned mask, size_t first, size_t count, particles *dst);
  /* A checkpoint's particles a chunk at a time, so that the host never holds them all
   * (sim_checkpoint.c): rows first .. first + count - 1 of the particles as they stand, every
   * attribute, in download's order, into dst's arrays, which the caller allocated for at least
   * count particles (with alloc_sums, device 0, where the backend has it); sets dst->n = count.
   * The calls of one checkpoint come in row order from first 0 on (cuda: the first numbers the
   * rows), on the thread that steps, and nothing steps or changes the particles between them. */
  int (*fetch_rows)(void *state, size_t first, size_t count, particles *dst);
  /* Optional: a copy of every particle's rows as they stand (fetch_rows's, download's order) in
   * the backend's own memory (cuda: each device's rows, attribute after attribute; cpu: host
   * arrays), after which fetch_rows reads the copy, from any thread (the writer's), while the
   * particles step on: the calls may come in any order and need not start at row 0. Each
   * checkpoint of a run that holds calls it first (sim_checkpoint.c); the copy stays, reused,
   * until the next. Its bytes are the memory plan's (memplan.h: where the plan has room). */
  int (*hold_rows)(void *state);
  /* The rank exchange (mpi/exchange.h; NULL where a backend does not take part in several ranks:
   * sim.c refuses one without blocks, node_masks, pack_nodes and unpack_add_nodes there). */
  /* The current mapping's block codes, sorted; a code's position is its dense block index. */
  int (*blocks)(void *state, const uint64_t **codes, size_t *n);
  /* Values per block of the P2G sums (0: 4 channels x 64 nodes, mass and momentum); a multiple of
   * 64: block_sums / 64 channels of one value per node. */
  int block_sums;
  /* 0: the values are floats; 1: int64 fixed-point sums (deterministic mode, physics/fixed.h),
   * which add the same in any order, so that the result does not depend on the ranks. */
  int sums_int64;
  /* The node exchange, in which only the nodes that both ranks' P2G reached this step travel.
   * node_masks writes to out the mask of each listed block's nodes that hold a non-zero sum this
   * step (bit j of the block's 64-bit word: node j of its 4 x 4 x 4, the grid's node order; an
   * untouched block's word is 0; deterministic mode: every node of a touched block). Optional
   * (both or neither), node_masks in two halves, so that the caller queues work between them
   * (sim.c: the interior's P2G, which adds to no shared block) that the device runs while the
   * masks travel to the host: node_masks_async queues the masks into buffers of its own (slot:
   * the link's index, 0, 1, ...) and queues behind the gate (g2p_ahead); node_masks_wait(slot)
   * waits for them (not for what was queued after) and writes the n words to out. pack_nodes
   * writes the sums of the nodes that mask marks (the AND of both ranks' masks) of the listed
   * blocks: block after block, channel by channel (block_sums / 64 channels), the marked nodes in
   * order; base[k] is the number of marked nodes in blocks 0 .. k-1 (the caller's prefix sum:
   * block k's values start at base[k] x channels). With every node marked (base[k] = 64 k) that
   * is every value of the blocks in the grid's layout. It reads only the shared blocks that the
   * boundary's P2G completed (the interior's P2G, queued before it, touches none), and returns
   * once out holds the message. unpack_add_nodes adds such a message to the listed blocks (each
   * block it marks is one this rank's P2G touched: the AND holds this rank's mask); in, mask and
   * base stay unchanged until the next g2p returns (cuda: the copy is queued, not waited for).
   * Each idx list these take is one that mark_shared was given since its last reset (an island
   * keeps each member's part of every such list). */
  int (*node_masks)(void *state, const int32_t *idx, size_t n, uint64_t *out);
  int (*node_masks_async)(void *state, int slot, const int32_t *idx, size_t n);
  int (*node_masks_wait)(void *state, int slot, uint64_t *out);
  int (*pack_nodes)(void *state, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base, void *out);
  int (*unpack_add_nodes)(void *state, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base,
                          const void *in);
  /* Marks blocks as shared with other ranks (until the next rebuild-mapping), for
   * grid_update_part. idx NULL: a new exchange_setup begins; the marks and the lists given before
   * are dropped (their memory is freed; the lists given after stay alive until the next one). */
  int (*mark_shared)(void *state, const int32_t *idx, size_t n);
  /* The grid update of the blocks not shared (GRID_INTERIOR) or shared (GRID_SHARED) with other
   * ranks: the interior is updated while the shared sums are in flight. */
  int (*grid_update_part)(void *state, float dt, int part);
  /* Optional (NULL: g2p does it all): after grid_update_part(GRID_INTERIOR), the G2P of the
   * particles whose stencils reach no block that mark_shared marked, while the shared sums are in
   * flight; the next g2p then does the rest and everything g2p does after its G2P. */
  int (*g2p_interior)(void *state, float dt);
  /* Optional: memory for the shared sums that pack_nodes writes and unpack_add_nodes reads, and
   * for fetch's arrays: pinned host memory (device = 0; cuda: copies without a pageable
   * bounce, and kernels of every GPU of the island reach it), or device memory (device = 1)
   * that a CUDA-aware MPI sends from directly. NULL: malloc serves. */
  int (*alloc_sums)(void *state, size_t bytes, int device, void **ptr);
  void (*free_sums)(void *ptr, int device); /* needs no state: may run after destroy */
  /* Whether the last g2p asked for a rebuild-mapping. */
  int (*wants_rebuild)(void *state);
  /* Replaces the particles (takes p over; *p is left empty) and rebuilds the mapping. */
  int (*set_particles)(void *state, particles *p);
  /* Optional (NULL where absent; sim.c then downloads, appends and calls set_particles): appends
   * the particles of p (left unchanged) and rebuilds the mapping, for particle sources
   * (emit.h). Storage grows only when it is too small (cuda: 4x when more than half full). */
  int (*add_particles)(void *state, const particles *p);
  /* Several ranks (sim.c refuses a backend without it there): removes the particles whose
   * particle block (sim_migrate.c's sim_particle_block) lies outside [lo, hi) on some axis and appends them
   * to out (grown as needed), in an order that depends only on how the backend holds them. The caller then adds the particles it received (add_particles)
   * or forces a rebuild-mapping, which drops the removed ones from the mapping. */
  int (*emigrate)(void *state, const int32_t lo[3], const int32_t hi[3], particles *out);
  /* Optional (NULL: sim.c packs what emigrate gives, and unpacks for add_particles): emigrate and
   * add_particles with the particles as records (particles_pack's layout, particles_record_bytes()
   * each), which is what travels between ranks, so that a backend whose particles live on a
   * device converts them there instead of on the host, and the host holds no more of them at a
   * time than a migration's round (sim_migrate.c). emigrate_records removes the particles as
   * emigrate does and keeps them as records in memory of its own (on a device: on the device),
   * *n of them; read_records copies records [first, first + count) of those into rec (host
   * memory; pinned copies fastest), valid until the next emigrate_records (a range past them is
   * refused before anything is copied); add_records appends
   * the n records at rec (host memory, left unchanged) without a rebuild-mapping: the caller's
   * rebuild (forced) follows the last of them. */
  int (*emigrate_records)(void *state, const int32_t lo[3], const int32_t hi[3], size_t *n);
  int (*read_records)(void *state, size_t first, size_t count, void *rec);
  int (*add_records)(void *state, const void *rec, size_t n);
  /* Optional (with emigrate_records; NULL: nothing to reserve): makes the memory that
   * emigrate_records keeps hold n records, and add_records take `round` at a time, so that a
   * rebalance of up to n particles later neither pins nor faults in memory. sim.c calls it once,
   * at the start. */
  int (*reserve_records)(void *state, size_t n, size_t round);
  /* Several ranks (sim.c refuses a backend without it there): for the load balance, calls
   * add(ctx, blk, count) for every particle block of the current mapping with the number of
   * particles the mapping put in it (an add that fails ends the walk with its status). An
   * estimate, within a block of sim_migrate.c's sim_particle_block: the mapping's blocks may be shifted by a
   * cell (sparse_particle_block), and particles that moved since the last rebuild-mapping (within
   * their free zone) count where they were. On a GPU only the mapping's per-block figures cross
   * to the host, not the particles. */
  int (*particle_blocks)(void *state, int (*add)(void *ctx, const int32_t blk[3], uint64_t count), void *ctx);
  /* Optional (NULL: never): 1 when the particles' F and logJp, as download copies them, already
   * hold the return mapping of the next step's P2G (cuda: after fused G2P2G steps, whose P2G of
   * the next step is done and kept). A checkpoint records it (ckpt_state.projected), so that the
   * run resumed from it does not apply the mapping a second time. */
  int (*projected)(void *state);
  /* The particles given last (create, set_particles) already hold the next step's return
   * mapping: the next P2G computes their stress without applying it (constitutive_apply with
   * plastic 0); the steps after it apply it as usual. */
  int (*set_projected)(void *state);
  /* The dt of the G2P that last moved the particles given last (a resumed run: its checkpoint's
   * last_dt; 0 before any step). Compact storage's P2G makes that G2P's update of F from the
   * record's C with it (physics/compact.h); float storage does not read it. */
  int (*set_last_dt)(void *state, float dt);
  int (*stats)(void *state, backend_stats *out);
  /* Optional (NULL: stats' n_particles): the particles held, from the host's own count (no
   * device traffic): several ranks cast it in every step's vote, for the load balance. */
  size_t (*count)(void *state);
  void (*destroy)(void *state);
} backend;

/* Chooses and creates a backend (kind: enum backend_kind of scene.h; auto picks cuda where a
 * GPU and the CUDA backend are present, cpu otherwise). Takes the particles over: *p is left
 * empty. Logs the choice. */
int backend_create(int kind, const sim_params *prm, particles *p, backend *out);
/* The same with the particles from a source (particles.h), chunk by chunk (a run's creation: the
 * sampled scene), so that no host copy of them all exists beside the backend's: the backend sizes
 * its storage for src->n first (its buffers never grow with a copy), takes the chunks in order,
 * and holds the same particles in the same order as backend_create given them in one array. */
int backend_create_from(int kind, const sim_params *prm, const particle_source *src, backend *out);
void backend_destroy(backend *b);

/* The CPU reference backend. */
int backend_cpu_create(const sim_params *prm, particles *p, backend *out);
/* Its particles are its host memory: the chunks go straight into them, reserved for src->n as a
 * slice grown from MEM_FIRST_PARTICLES would be (memsizes.h, the memory plan's rule). */
int backend_cpu_create_from(const sim_params *prm, const particle_source *src, backend *out);
/* Appends src's particles to p (reserved for them first) in chunks of at most max; fails where the
 * source gives other than src->n. */
int backend_source_drain(const particle_source *src, particles *p, size_t max);

#endif

/* memplan.h - the memory plan: what a run of a scene will allocate, on the host and on each
 * device of its busiest rank, computed from the scene in closed form (no particle is sampled,
 * so it answers at once for any particle count), printed by `drift check` and held by
 * `drift run` against the free memory before anything is sampled or allocated.
 *
 * The inputs: particles per body from its volume (every body lies inside the domain: the
 * scene refuses others) times ppc / dx^3, which is the stratified sampling's expectation
 * (sample.h); a source's most over the run (rate x its time, or for a resampling source its
 * shape's count at every frame it is active, at most max_particles: a bound); particle blocks
 * and grid blocks from each body's bounding box (sparse.h's particle blocks, their 3x3x3
 * physical blocks), scaled by the shape's share of the box; overlaps between bodies are counted
 * twice (a bound). The decomposition splits the particles between ranks at block faces
 * (mpi/decomp.h cuts the histogram at its halves): the busiest rank holds its share and at most a
 * slab of blocks a block thick across the bodies' longest extent more; an island's members split
 * theirs evenly.
 *
 * The formulas, one function a backend (memplan_cpu, memplan_cuda), follow the allocations:
 * memsizes.h's capacities and growth rules, which the allocating code uses too. The host's
 * figure is the larger of two phases: the start (on the CPU the backend's particles, which the
 * sampled scene, or a one-rank resume's checkpoint, streams into; on one GPU a chunk of them,
 * MEM_CREATE_CHUNK, and the upload's staging; an island gathers them all for its split; a resume
 * on several ranks, whose slices and migration hold more at its start, is not planned apart) and
 * the steady state (the backend's buffers on the CPU, the frame's chunk slot and, on the CPU, its
 * snapshot; a migration round's buffers, the checkpoint's chunk buffers: its rows where they fit one
 * chunk, else two of MEM_CKPT_CHUNK particles; where checkpoints are held, ckpt_hold, the
 * backend's copy of the rows: on a GPU every row on the device, on the CPU 124 B x cap(n)). A
 * GPU's frame snapshot is on the device, or with snap_host in pinned host memory, every row of the
 * rank's devices, with a chunk of MEM_CKPT_CHUNK rows staged on each device. Bytes are grouped by memtally.h's kinds, so that a run's counted peak compares
 * kind by kind. */
#ifndef DRIFT_MEMPLAN_H
#define DRIFT_MEMPLAN_H

#include <stdint.h>

#include "memtally.h"
#include "scene.h"

typedef struct memplan_bytes {
  double kind[MT_KINDS]; /* bytes by memtally kind */
  double total;
} memplan_bytes;

/* What the busiest rank (and one of its devices) holds: the formulas' inputs. */
typedef struct memplan_load {
  double start;    /* particles at the start (sampled) */
  double most;     /* particles at most over the run (sources included) */
  double pblocks;  /* particle blocks */
  double blocks;   /* grid blocks (physical blocks) */
  int ranks;
  int devices;     /* GPUs of the rank (cuda) */
  int frames;      /* frames run (a checkpoint's chunks only where one is written along the way) */
  int ckpt_hold;   /* checkpoints written from the backend's copy of the rows (hold_rows) */
  int snap_host;   /* cuda: the frame's snapshot in pinned host memory (sim_params.snap_host) */
} memplan_load;

typedef struct memplan_config {
  int backend;        /* BACKEND_CPU or BACKEND_CUDA: whose formula */
  int ranks;          /* >= 1 */
  int devices;        /* GPUs a rank (cuda), >= 1 */
  int frames;         /* frames run (0: the scene's) */
  int ckpt_hold;      /* checkpoints from the backend's copy of the rows where the run writes any */
  int snap_host;      /* cuda: the frame's snapshot in pinned host memory, a chunk staged on each device
                       * (drift run's choice where a device has no room for it: sim_params.snap_host) */
} memplan_config;

typedef struct memplan {
  memplan_config cfg;
  int frames;           /* the scene's time.frames */
  int n_bodies, n_materials;
  uint64_t *body;       /* [n_bodies] particles at the start (a source: 0) */
  uint64_t *source;     /* [n_bodies] the most a source emits over the run (others: 0) */
  uint64_t *material;   /* [n_materials] particles at the start */
  uint64_t particles;   /* at the start, all ranks */
  uint64_t most;        /* at most over the run, all ranks */
  double pblocks, blocks; /* all ranks, at the start */
  double slab;          /* the share of the particles a rank may hold beyond 1 / ranks */
  memplan_load load;    /* the busiest rank's */
  memplan_bytes host;   /* the busiest rank's host memory at its peak */
  memplan_bytes device; /* each of its devices (cuda; zero on the cpu) */
} memplan;

/* The plan of scene s (allocates its arrays; memplan_destroy frees them). */
int memplan_create(const scene *s, const memplan_config *c, memplan *out);
void memplan_destroy(memplan *p);

/* Particles body b holds at the start (0 for a source): round(volume ppc / dx^3). */
uint64_t memplan_body_particles(const scene *s, int b);
/* The most source b emits over frames frames (0 for a body that is not a source). */
uint64_t memplan_source_particles(const scene *s, int b, int frames);

/* The CPU backend's host bytes for load l. */
void memplan_cpu(const scene *s, const memplan_load *l, memplan_bytes *host);
/* The CUDA backend's host bytes and each device's for load l; in compact storage (the scene's
 * parallel.storage) those of the compact packets' layout (docs/performance.md, Compact storage),
 * which the backend does not hold yet. */
void memplan_cuda(const scene *s, const memplan_load *l, memplan_bytes *host, memplan_bytes *device);

/* The particles (all ranks, at most over the run) that would fit in host_free bytes a rank and
 * device_free bytes a device (0: not checked) by the same formulas, the blocks kept. */
uint64_t memplan_fitting(const scene *s, const memplan *p, double host_free, double device_free);

/* The host memory this process may still allocate: the least of MemAvailable (/proc/meminfo),
 * the cgroup's memory.max minus its memory.current where it has one, and RLIMIT_AS minus the
 * address space in use where it is set. *limit names the one that binds. Never fails: a source
 * that cannot be read is left out (all unreadable: *bytes = 0 and *limit "unknown"). */
void memplan_host_free(double *bytes, const char **limit);

#endif

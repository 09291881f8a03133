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
#include "physics/material.h"

/* What every backend needs to know about the world, in the units the kernels use. */
typedef struct sim_params {
  double domain_min[3], domain_max[3]; /* m */
  float dx;                            /* m */
  float gravity[3];                    /* m/s^2 */
  int boundary;                        /* enum boundary_kind (scene.h) */
  float friction;                      /* Coulomb coefficient of 'separate' walls */
  int n_materials;
  const material_params *materials;    /* borrowed for the backend's lifetime */
  const char *const *material_names;   /* borrowed, for messages */
  int rank;                            /* MPI rank, for the owner field */
  int gpus;                            /* GPUs to use (cuda; 0 = all visible) */
} sim_params;

/* A particle that moves more than this many cells in one step has broken the CFL condition
 * (MPM's transfers assume less than one cell per step, and adaptive steps keep |v| dt below
 * cfl dx): g2p fails with DR_EPHYSICS as for a non-finite state. Without it an exploding run can
 * fling its particles onto the domain faces, where sticky walls freeze them with finite,
 * meaningless values, and whether a NaN shows up first depends on rounding. */
#define DR_RUNAWAY_CELLS 1.0f

typedef struct backend_stats {
  uint64_t rebuilds;       /* rebuild-mappings so far */
  uint64_t n_particles;    /* particles held */
  uint64_t n_blocks;       /* physical blocks of the current mapping */
  uint64_t n_touched;      /* blocks touched in the last P2G */
  double bytes;            /* memory held (host or device), bytes */
} backend_stats;

typedef struct backend {
  const char *name;
  void *state;
  /* Rebuilds the particle-grid mapping if a particle left its free zone during the last g2p,
   * or if force; sets *rebuilt. */
  int (*rebuild)(void *state, int force, int *rebuilt);
  /* Particle to grid with plasticity, stress and forces fused in (clears the grid first). */
  int (*p2g)(void *state, float dt);
  /* Nodal velocities from momenta, gravity, wall conditions; untouched blocks skipped. */
  int (*grid_update)(void *state, float dt);
  /* Grid to particle, deformation update, advection, free-zone check. A non-finite state or a
   * runaway speed (DR_RUNAWAY_CELLS) fails with DR_EPHYSICS naming the particle. */
  int (*g2p)(void *state, float dt);
  /* Largest particle speed after the last g2p (m/s), for the adaptive step. */
  int (*max_speed)(void *state, float *vmax);
  /* Copies the particles out (out is resized as needed; allocates). Order is unspecified. */
  int (*download)(void *state, particles *out);
  int (*stats)(void *state, backend_stats *out);
  void (*destroy)(void *state);
} backend;

/* Chooses and creates a backend (kind: enum backend_kind of scene.h; auto picks cuda where a
 * GPU and the CUDA backend are present, cpu otherwise). Takes the particles over: *p is left
 * empty. Logs the choice. */
int backend_create(int kind, const sim_params *prm, particles *p, backend *out);
void backend_destroy(backend *b);

/* The CPU reference backend. */
int backend_cpu_create(const sim_params *prm, particles *p, backend *out);

#endif

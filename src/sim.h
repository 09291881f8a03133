/* sim.h - the time loop: sampling (or a checkpoint to resume from), the backend, substeps that
 * land exactly on frame times, frames, checkpoints and progress, on one rank or several (the
 * rank exchange slots in between P2G and the grid update, backend.h). A signal (signals.h)
 * stops the run before the next substep with a checkpoint of where it stands. */
#ifndef DRIFT_SIM_H
#define DRIFT_SIM_H

#include <mpi.h>
#include <stdint.h>

#include "backend.h"
#include "scene.h"

typedef struct sim_options {
  const char *out_dir; /* overrides output.dir when non-NULL */
  int frames;          /* overrides time.frames when > 0 */
  int backend;         /* overrides parallel.backend when >= 0 (enum backend_kind) */
  int write_output;    /* 0: write no files (tests drive sim_advance_frame themselves) */
  int profile;         /* 1: time each phase (sim_status.phase_seconds); the backend then waits for
                        * every phase to finish, so steps run slower: for drift bench, not for runs */
  const char *resume;  /* non-NULL: continue from this checkpoint file, or the newest whole one in
                        * this folder ("" = the output folder) instead of sampling the scene */
  int force;           /* with resume: from a checkpoint of another scene file (its hash differs);
                        * without: delete an earlier run's output in the output folder first */
  int gpus;            /* overrides parallel.gpus_per_rank when > 0 (--gpus) */
  const char *continue_with; /* the command that resumes this run after a signal, shell-quoted
                              * (drift run builds it from its command line); NULL: a plain one */
  int ckpt_hold;       /* 1: checkpoints from a copy of the particles the backend holds (hold_rows),
                        * written behind the steps; drift run sets it where the memory plan has room
                        * for the copy (memplan.h); 0: fetched from the live particles, the steps
                        * waiting */
  int snap_host;       /* cuda: 1 holds the frame's snapshot in pinned host memory instead of on the GPU;
                        * drift run sets it where the memory plan has no room for it on a GPU, or as
                        * --snapshot-host says (memplan.h) */
} sim_options;

/* Phases of a step, as timed with sim_options.profile. */
enum sim_phase { PHASE_REBUILD, PHASE_P2G, PHASE_GRID, PHASE_G2P, PHASE_COUNT };

typedef struct sim_status {
  int frame;            /* last completed frame */
  int frames;           /* frames to simulate */
  double time;          /* s */
  uint64_t steps;       /* substeps so far */
  uint64_t rebuilds;    /* rebuild-mappings so far */
  uint64_t particles;   /* all ranks */
  double step_seconds;  /* wall time in substeps */
  double io_seconds;    /* wall time the run spent on output: capturing frames and checkpoints, and
                         * waiting for the writer where it fell behind */
  double write_seconds; /* wall time the writer spent writing, behind the steps (at the last sim_flush) */
  double last_dt;       /* s */
  double phase_seconds[PHASE_COUNT]; /* wall time per phase (only with sim_options.profile) */
  double rank_bytes;    /* bytes sent between ranks so far, all ranks */
  uint64_t migrated;    /* particles moved between ranks so far, all ranks */
  uint64_t rebalances;  /* times the cuts between ranks moved */
  double mpi_wait_seconds;  /* the frames' largest rank's host time waiting on MPI (the ranks line's MPI wait), s */
  double vote_wait_seconds; /* ... and its device time waiting at the step vote (device at the vote), s */
  /* The totals of the last frame written (all ranks' particles, summed in double; the frame's
   * writer computes them: up to date after sim_flush):
   * mass kg, momentum kg m/s, kinetic energy J, and the gravitational potential energy J of the
   * particles above the domain's lowest corner (-sum m g . (x - domain.min)). totals_frame: that
   * frame, -1 before any is written. */
  int totals_frame;
  double mass, momentum[3], kinetic_energy, potential_energy;
} sim_status;

typedef struct sim sim;

/* Samples the scene, or reads the checkpoint of opt->resume, creates the backend and, when
 * writing output, the output folder (nothing is written before the scene proved valid).
 * Collective over comm. Allocates *out. */
int sim_create(const scene *s, const sim_options *opt, MPI_Comm comm, sim **out);
/* Simulates the next frame (the rest of it after a resume part-way); captures it, and a
 * checkpoint, for the writer if output is on and they are due, and returns while they are
 * written. DR_ESTOPPED: a signal came (any rank's); the run stands before a substep of the frame. */
int sim_advance_frame(sim *S);
/* Collective. Waits until the frames and checkpoints queued are written; returns the first
 * failure among them (the frame or checkpoint named). */
int sim_flush(sim *S);
/* Writes frame 0 (unless resumed) and runs the remaining frames with one progress line per frame
 * and a summary. After a signal, writes a checkpoint and fails with DR_ESTOPPED. */
int sim_run(sim *S);
/* This rank's particles (out is resized; allocates). */
int sim_particles(sim *S, particles *out);
const sim_status *sim_get_status(const sim *S);
/* Turns sim_options.profile on or off from the next frame on (drift bench --profile-from: the
 * frames before the profiled ones run as a run does, without waiting for each phase). */
void sim_set_profile(sim *S, int on);
const char *sim_backend_name(const sim *S);
/* GPUs this rank drives (0 for the cpu backend). */
int sim_gpus(const sim *S);
void sim_destroy(sim **S);
/* The particle attributes a frame of scene s takes (PA_BIT mask: backend.h's snapshot): what its output.fields, its
 * totals and its preview need. */
unsigned sim_frame_mask(const scene *s);
/* The largest |coordinate| of scene s's domain, m: the range of its frames' positions (output.precision
 * half stores them in a fixed point reaching it). */
double sim_position_extent(const scene *s);

#endif

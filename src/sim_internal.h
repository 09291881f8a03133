/* sim_internal.h - what the files of the time loop share, and no one else includes: the struct
 * sim, the step vote's entries, the load balance's pairs, and the functions one sim file calls
 * in another (prefix sim_). sim.h stays the public interface.
 *
 * The files: sim.c (create, destroy, the run and one rank's frame loop, step sizes, stops and
 * the tests' hook), sim_ranks.c (the frame loop of several ranks: the step vote, the step queued
 * ahead of it, the exchange set up during P2G), sim_migrate.c (the decomposition, load counts,
 * rebalance, migration and redistribute), sim_output.c (frames and their totals),
 * sim_checkpoint.c (checkpoints and the resume), sim_sources.c (particle sources' emission rounds).
 *
 * Invariants: every rank holds the same decomposition (dec) and takes the same decisions from
 * agreed figures only (the step vote's sums are of whole numbers, exact in any order); the ranks
 * call the collective functions below in the same order. */
#ifndef DRIFT_SIM_INTERNAL_H
#define DRIFT_SIM_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "balance.h"
#include "checkpoint.h"
#include "decomp.h"
#include "emit.h"
#include "exchange.h"
#include "h5frame.h"
#include "outdir.h"
#include "settings.h"
#include "sim.h"
#include "writer.h"
#include "xdmf.h"

/* What the progress line reports about the ranks, summed over a frame on this rank. */
typedef struct rank_frame_stats {
  double bytes, wait;   /* bytes sent to other ranks; seconds waiting on MPI */
  uint64_t migrated;
  int rebalanced;
} rank_frame_stats;

/* A frame's totals, summed over the ranks (sim_output.c frame_totals). */
enum { TOT_N, TOT_MASS, TOT_P, TOT_KE = TOT_P + 3, TOT_PE, TOT_COUNT };

/* A frame in flight (sim_output.c): its file, begun by the main thread, and its writer's job's
 * results. The job owns it from writer_submit until writer_wait(ticket). */
typedef struct frame_rec {
  struct frame_slot *slot;
  size_t n;          /* the frame's particles on this rank (the snapshot's) */
  int projected;     /* the snapshot's F and logjp already hold the next step's return mapping (backend.h) */
  int frame;
  double time;       /* s */
  int queued;        /* a job was queued and not yet completed (slot_done) */
  int released;      /* its job has fetched the whole snapshot (writer_signal: under the writer's lock) */
  uint64_t ticket;
  h5frame_file file; /* its rows are the job's */
  int put_rc;        /* the job's result: this rank's rows written (h5frame_put's status) */
  char put_msg[1024]; /* and its message */
  double local[TOT_COUNT];  /* the job's result: this rank's sums */
  double totals[TOT_COUNT]; /* all ranks' sums, once the frame is complete */
} frame_rec;

/* The frames in flight (sim_output.c): at most two, one backend snapshot (backend.h). A frame's
 * job fetches the snapshot a chunk at a time into p[0] and p[1] in turn (the fetch of a chunk
 * overlaps the rows of the one before; p[1] only where the frame has more than one chunk) and
 * releases it once its last chunk is fetched: the next frame's snapshot waits for that
 * (back-pressure), not for the rows, so that the next frame's file is begun and its job queued
 * while the writer still writes the last chunks, and the writer goes from one frame to the next
 * without waiting for the main thread. The writer runs one job at a time: the jobs share the
 * chunk buffers (the attributes of mask in host memory from the backend's alloc_sums, pinned on a
 * GPU, or malloc, cap particles each: mem_frame_chunk_capacity, kept frame after frame), J and
 * stress. Frames complete in order, the older first. */
typedef struct frame_slot {
  struct sim *S;
  particles p[2];    /* two chunks' buffers: only the arrays of mask are allocated, cap particles each */
  int bufs;          /* buffers allocated: 1, or 2 where a frame has more than one chunk */
  unsigned mask;     /* PA_BIT of each attribute of the snapshot */
  size_t cap;
  size_t tallied;    /* bytes of the buffers counted in memtally.h's tally */
  float *J, *stress; /* the fields derived on the host by a job, a chunk's (scene.output_fields
                      * asks for them; else NULL): det F [cap], Cauchy stress [6 cap]; malloc, kept */
  frame_rec rec[2];
  int next;          /* the record the next frame takes: rec[next ^ 1] is the newer in flight */
} frame_slot;

/* One of a checkpoint's chunk buffers (two where it takes more than one chunk) and the writer's job that
 * writes it. */
typedef struct ckpt_chunk {
  struct ckpt_slot *c;
  particles p;        /* every attribute, the slot's cap rows: the backend's alloc_sums (pinned on a GPU) or
                       * malloc, kept; p.n: the rows fetched into it */
  size_t first;       /* their first row (this rank's rows) */
  int last;           /* the checkpoint's last chunk: its job finishes the file (synced) */
  int queued;         /* its job was queued and not yet waited for */
  uint64_t ticket;
} ckpt_chunk;

/* A checkpoint in flight. Its file is begun by the main thread. Held (sim_options.ckpt_hold): the
 * backend copies the rows (hold_rows) and one writer's job fetches them from the copy a chunk at
 * a time and writes each (ckpt_put_rows) while the steps go on. Live: the main thread fetches the
 * rows from the particles a chunk at a time (backend.h's fetch_rows) into one buffer while the
 * writer's job writes the other; the steps wait for the last fetch. Either way the checkpoint is
 * completed (ckpt_end) by the main thread, after the frames before it, before the next frame's or
 * checkpoint's file. */
typedef struct ckpt_slot {
  struct sim *S;
  ckpt_state st;
  uint64_t *emitted;  /* a copy of the sources' counts at the capture (st.emitted points here) */
  int queued;         /* its last job queued, the checkpoint not yet completed (ckpt_done) */
  uint64_t ticket;    /* the last job's */
  ckpt_file file;     /* begun by the main thread; its rows are the jobs' */
  ckpt_chunk chunk[2];
  size_t cap;         /* rows a chunk buffer holds (mem_ckpt_rows: at most MEM_CKPT_CHUNK) */
  int buffers;        /* chunk buffers allocated: 1 where a checkpoint is one chunk, else 2 */
  size_t tallied;     /* their bytes, counted (memtally.h, MT_TRANSFER) */
  int put_rc;         /* the jobs' result: this rank's rows written and synced (the writer's until the last
                       * job is waited for) */
  char put_msg[1024]; /* and its message */
} ckpt_slot;

/* DRIFT_TEST_HOOK's actions (parse_test_hook): raise SIGTERM, exit, fail alone before a substep,
 * fail alone in a rebuild-mapping of several ranks (redistribute), stop (SIGSTOP) as the
 * frame's file is created (sim_test_hook_file), or fail a frame's rows (sim_test_hook_rows). */
enum hook_action { HOOK_NONE, HOOK_SIGNAL, HOOK_EXIT, HOOK_FAIL, HOOK_REBUILD, HOOK_STOPFILE, HOOK_ROWS };

struct sim {
  const scene *sc;
  MPI_Comm comm;
  int rank, nranks;
  sim_options opt;
  const char *out_dir;
  outdir_lock lock;     /* rank 0, writing output: the output folder's, for the whole run */
  material_params *mats;
  collider *colliders;    /* the scene's colliders as the kernels see them */
  collider_key *collider_keys;
  sim_params prm;
  backend be;
  sim_status st;
  double frame_dt;      /* s */
  int substeps_fixed;   /* fixed dt: substeps per frame; 0 when adaptive */
  double wave_speed;    /* m/s, for the CFL step */
  particles host;       /* download buffer for the particle sources' resampling, reused */
  /* output, written behind the compute (sim_output.c): the writer, the frames in flight, the
   * checkpoint's; the frames in the XDMF file (the writer's) */
  double dt_max;        /* s, the adaptive step's cap: cfl scene_viscous_dt, 0 for none */
  writer *writer;
  frame_slot frame;     /* the frames in flight */
  ckpt_slot ckpt;
  void *pack;           /* frames that convert: the writer's conversion buffer (pack_bytes: h5frame_pack_bytes,
                         * malloc, the run's first frame to its end; the writer runs one job at a time) */
  size_t pack_bytes;
  int output_failed;    /* the failure being returned is the writer's (a frame or a checkpoint) */
  xdmf_frame *written;
  int n_written;
  xdmf_list xdmf;       /* rank 0: frames.xdmf's entries, each formatted once */
  const char **mat_names;
  int with_logjp;       /* frames carry logjp: the scene has an nacc material */
  char (*body_label)[48];  /* "bodies[2] (box)" per body, for messages */
  const char **body_names; /* pointers into body_label, as sim_params wants them */
  /* several ranks (docs/architecture.md) */
  decomp dec;           /* every rank's box of blocks */
  exchange ex;          /* shared blocks and their per-step exchange */
  float origin[3], inv_dx; /* the grid's origin and 1/dx as the backends compute them */
  balance_model bal;    /* when the cuts move: threshold and cost rules (balance.h) */
  /* this rank's last rebalance, for the next vote (0: none since): its time (ns) and emigrants */
  double rebal_ns, rebal_moved;
  int setup_pending;    /* the mapping changed (redistribute): the next step sets up the exchange */
  int setup_rc;         /* ... and this rank's part of that rebuild-mapping returned this, which the ranks
                         * agree on in that step, once its P2G is queued (setup_exchange_during_p2g) */
  double compute_seconds; /* this rank's time in P2G, grid update and G2P since the last rebuild */
  double win_seconds;     /* ... and since the cuts last moved (balance_by time: its load, BALANCE_TIME_MIN_STEPS) */
  long win_steps;         /* the steps since the cuts last moved (the same on every rank) */
  MPI_Datatype vote_type; /* the step vote's element (step_vote), and its reduction */
  MPI_Op vote_op;
  /* The next step queued ahead of the vote (backend.h's g2p_ahead; advance_frame_ranks): */
  int gate_shut;        /* g2p_ahead armed the backend's gate: gate_open follows the vote */
  int ahead;            /* the step about to run was queued ahead and its gate opened */
  int ahead_rc;         /* ... what queueing its P2G returned */
  int ahead_early;      /* ... its node masks were queued (exchange_pack), the interior's P2G after them */
  int migrate_margin;   /* blocks a particle may stray past its rank's box before it migrates at a
                         * rebuild-mapping whose cuts stay (--migrate-margin, the ranks' largest; vote_op) */
  rank_frame_stats fs;  /* since the last progress line */
  uint64_t fs_steps0;   /* steps at the last progress line */
  double vote_wait_s0;  /* the backend's vote_wait_s at the last ranks line (log_ranks) */
  /* Where the next substep starts: frame st.frame + 1, after step_in_frame substeps, at time
   * t_in_frame; part-way into the frame only after a resume from a checkpoint written on a
   * signal, or when a signal stopped the run. */
  int step_in_frame;
  double t_in_frame;    /* s */
  int vmax_pending;     /* 1: the next step's dt comes from vmax_next (the checkpoint's), not the backend */
  float vmax_next;      /* m/s */
  uint64_t rebuilds_base; /* rebuild-mappings before the backend was created (a resume) */
  int resumed;          /* the run continues from a checkpoint */
  int resume_projected; /* ... and its particles already hold the next return mapping (ckpt_state.projected) */
  char resumed_from[4096];
  int stop_signal;      /* the signal that stopped the run (any rank's), 0 while running */
  double progress_at;   /* wall time (sim_now) of the next progress line inside a frame */
  emit_state em;        /* particle sources (emit.h): counts and the last frame emitted */
  particles emitted;    /* this rank's particles of an emission round (reused) */
  particles appended;   /* download + append when the backend has no add_particles (reused) */
  particles leaving, arriving; /* redistribute without the backend's records calls (reused) */
  /* a migration's rounds (sim_migrate.c, migrate_rounds): their records (particles_pack's layout;
   * reused, mig_round each): 0 those sent, grouped by rank; 1 those received; 2 those staged, read
   * from the backend. Pinned host memory where the backend gives it (alloc_sums: the GPU copies
   * them without a bounce) up to --pinned-max-mb, else pageable. */
  size_t mig_round;     /* records a rank sends, and receives, in one round at most */
  unsigned char *mig_buf[3];
  size_t mig_cap[3];
  void (*mig_free[3])(void *ptr, int device); /* the backend's free_sums where pinned, else NULL */
  struct {              /* DRIFT_TEST_HOOK=ACTION:RANK:STEP, for the tests only (docs/debugging.md) */
    int action;         /* hook_action; the main thread resets it once the hook fires */
    int rank;
    uint64_t step;
    int64_t rows_frame; /* HOOK_ROWS: the frame whose rows fail on this rank, else -1; set before
                         * the writer starts and never after (the writer reads it, not action) */
  } hook;
};

/* The step vote of several ranks (step_vote): what it carries, the largest over the ranks of the
 * entries before VOTE_SUMS, the sum of those from it. */
enum {
  VOTE_VMAX,     /* m/s: the next step's dt */
  VOTE_REBUILD,  /* a rank wants a rebuild-mapping */
  VOTE_STATUS,   /* the first failure */
  VOTE_SIGNAL,   /* a signal */
  VOTE_FAILED,   /* the failure came from the step just done */
  VOTE_LOAD_MAX, /* the load balance's measure (particles or compute seconds; balance_by) */
  VOTE_N_MAX,    /* particles */
  VOTE_REBAL_NS, /* the time the last rebalance took, ns (0: none since the last vote) */
  VOTE_SUMS,
  VOTE_LOAD_SUM = VOTE_SUMS,
  VOTE_N_SUM,
  VOTE_TIME_SUM,  /* compute time since the last rebuild-mapping, ns */
  VOTE_MOVED_SUM, /* the particles the last rebalance moved (0: none since the last vote) */
  VOTE_N
};

/* The load balance's counts: (block code, particles x weight) pairs, one per particle block the
 * backend reports (particle_blocks; a block may come twice, from two members of an island, and
 * the cuts add its counts), or one per block of a histogram (particles_load). */
typedef struct load_pairs {
  uint64_t *v; /* v[2k] the code, v[2k + 1] the count */
  size_t n, cap;
  uint64_t weight;
} load_pairs;

/* Wall time, s (CLOCK_MONOTONIC). */
/* Whether frame f is followed by a checkpoint (scene output.checkpoint_every; frame 0, the
 * scene as sampled, never is). */
static inline int sim_checkpoint_due(const struct sim *S, int f) {
  return f > 0 && S->opt.write_output && S->sc->checkpoint_every > 0 && f % S->sc->checkpoint_every == 0;
}

/* A streamed piece's size (a frame's or checkpoint's chunk, a resume's piece, a migration's
 * round): dflt, or fewer where DRIFT_FRAME_CHUNK sets it (the tests' hook, settings.h). */
static inline size_t sim_chunk(size_t dflt) {
  return settings()->frame_chunk > 0 ? (size_t)settings()->frame_chunk : dflt;
}

static inline double sim_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* sim.c: the step loop's pieces that the ranks' loop shares */
double sim_next_dt(const sim *S, double t, double t1, int k, double vmax);
int sim_step_speed(sim *S, float *vmax);
int sim_test_hook(sim *S);
void sim_test_hook_file(sim *S, int frame);
int sim_test_hook_rows(const sim *S, int frame, const char *path);
int sim_stop_at(sim *S, int sig, double t, int k);
void sim_progress_in_frame(sim *S, double t, uint64_t k);

/* sim_ranks.c */
int sim_advance_frame_ranks(sim *S, double t0, double t1);
int sim_log_ranks(sim *S, double seconds);

/* sim_migrate.c */
size_t sim_rank_count(const sim *S);
int sim_keep_own(void *ctx, const double x[3]);
/* Whether this rank owns a particle at x (its block in this rank's box). */
int sim_owns(const sim *S, const float x[3]);
/* The particles of the load pairs L that this rank owns, summed over the ranks. Collective. */
int sim_load_owned(const sim *S, const load_pairs *L, uint64_t *mine);
int sim_initial_decomposition(sim *S);
int sim_particles_load(const sim *S, const particles *p, load_pairs *L, int32_t lo[3], int32_t hi[3]);
int sim_rebalance(sim *S, const load_pairs *L);
void sim_mig_release(sim *S, int k);
int sim_reserve_migration(sim *S);
int sim_redistribute(sim *S, const double *glob);

/* sim_output.c: frames, and what checkpoints share with them */
int sim_make_dirs(const char *path);
int sim_list_earlier_frames(sim *S);
int sim_write_frame(sim *S);
int sim_complete_frame(sim *S);
int sim_output_failed(sim *S, int rc);
/* The frame slot's links (its sim, each record's slot), which the writer's jobs read: set once, in
 * sim_create, before the writer starts. */
void sim_output_init(sim *S);
void sim_output_destroy(sim *S);
/* A chunk buffer's arrays: those of the attributes in mask, cap rows each, from the backend's
 * pinned memory where it has it (a GPU copies there without a bounce), counted as transfer memory
 * into *tallied; sim_chunk_free gives back every array p holds (its caller the count). */
int sim_chunk_alloc(sim *S, particles *p, unsigned mask, size_t cap, const char *what, size_t *tallied);
void sim_chunk_free(sim *S, particles *p);
/* A fetch of rows first .. first + count - 1 into dst on a thread of its own (sim_fetch_start)
 * while the writer writes the chunk before: of the frame's snapshot (backend.h's fetch, the
 * attributes of mask) or, rows set, of a held checkpoint's copy (fetch_rows). Its failure's
 * message is kept here (error.h's record is the thread's). */
typedef struct fetch_job {
  const sim *S;
  unsigned mask;
  int rows;
  size_t first, count;
  particles *dst;
  int rc, threaded;
  pthread_t thread;
  char msg[1024];
} fetch_job;
/* Starts j on a thread of its own; where none can be started it runs now, on this one. */
void sim_fetch_start(fetch_job *j);
/* Waits for j (where started); its failure becomes this thread's. */
int sim_fetch_wait(fetch_job *j);

/* sim_checkpoint.c */
int sim_write_checkpoint(sim *S);
int sim_ckpt_done(sim *S);
/* The stream of this rank's particles a resume hands the backend (sim_checkpoint.c). */
typedef struct resume_stream resume_stream;
int sim_resume_from_checkpoint(sim *S, resume_stream **rs);
particle_source sim_resume_source(resume_stream *rs);
float sim_resume_mass_max(const resume_stream *rs);
void sim_resume_close(resume_stream **rs);
int sim_stop_with_checkpoint(sim *S);
void sim_ckpt_destroy(sim *S);

/* sim_sources.c */
int sim_emit_frame(sim *S, int f, double t0);

#endif

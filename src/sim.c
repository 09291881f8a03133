/* sim.c - the time loop (see sim.h). */
#define _POSIX_C_SOURCE 200809L
#include "sim.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "balance.h"
#include "checkpoint.h"
#include "comm.h"
#include "decomp.h"
#include "emit.h"
#include "error.h"
#include "exchange.h"
#include "hostmem.h"
#include "physics/bspline.h"
#include "physics/fixed.h"
#include "physics/sparse.h"
#include "h5frame.h"
#include "log.h"
#include "preview.h"
#include "sample.h"
#include "signals.h"
#include "xdmf.h"

/* What the progress line reports about the ranks, summed over a frame on this rank. */
typedef struct rank_frame_stats {
  double bytes, wait;   /* bytes sent to other ranks; seconds waiting on MPI */
  uint64_t migrated;
  int rebalanced;
} rank_frame_stats;

/* DRIFT_TEST_HOOK's actions (parse_test_hook): raise SIGTERM, exit, fail alone before a substep,
 * or fail alone in a rebuild-mapping of several ranks (redistribute). */
enum hook_action { HOOK_NONE, HOOK_SIGNAL, HOOK_EXIT, HOOK_FAIL, HOOK_REBUILD };

struct sim {
  const scene *sc;
  MPI_Comm comm;
  int rank, nranks;
  sim_options opt;
  const char *out_dir;
  material_params *mats;
  collider *colliders;    /* the scene's colliders as the kernels see them */
  collider_key *collider_keys;
  sim_params prm;
  backend be;
  sim_status st;
  double frame_dt;      /* s */
  int substeps_fixed;   /* fixed dt: substeps per frame; 0 when adaptive */
  double wave_speed;    /* m/s, for the CFL step */
  particles host;       /* download buffer for frames, reused */
  xdmf_frame *written;  /* frames in the XDMF file */
  int n_written;
  const char **mat_names;
  int with_logjp;       /* frames carry logjp: the scene has an nacc material */
  char (*body_label)[48];  /* "bodies[2] (box)" per body, for messages */
  const char **body_names; /* pointers into body_label, as sim_params wants them */
  /* several ranks (DESIGN.md, "Between ranks") */
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
                         * rebuild-mapping whose cuts stay (DRIFT_MIGRATE_MARGIN, default 1; vote_op) */
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
  emit_state em;        /* particle sources (emit.h): counts and the last frame emitted */
  particles emitted;    /* this rank's particles of an emission round (reused) */
  particles appended;   /* download + append when the backend has no add_particles (reused) */
  particles leaving, arriving; /* redistribute without the backend's records calls (reused) */
  /* migrate's records (particles_pack's layout; reused, grown 2x): 0 those sent, grouped by
   * rank; 1 those the rank ends with (kept, then received); 2 the emigrants packed from
   * particles where the backend has no emigrate_records. Pinned host memory where the backend
   * gives it (alloc_sums: the GPU copies them without a bounce), else malloc. */
  unsigned char *mig_buf[3];
  size_t mig_cap[3];
  void (*mig_free[3])(void *ptr, int device); /* the backend's free_sums where pinned, else NULL */
  struct {              /* DRIFT_TEST_HOOK=ACTION:RANK:STEP, for the tests only (README, "Tests") */
    int action;         /* hook_action */
    int rank;
    uint64_t step;
  } hook;
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* mkdir -p; the message names the folder. */
static int make_dirs(const char *path) {
  char buf[4096];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
    return dr_fail(DR_EIO, "%s: output folder path too long", path);
  for (char *q = buf + 1;; ++q) {
    if (*q == '/' || *q == 0) {
      char c = *q;
      *q = 0;
      if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return dr_fail(DR_EIO, "cannot create output folder %s: %s", buf, strerror(errno));
      *q = c;
      if (!c) break;
    }
  }
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return dr_fail(DR_EIO, "output folder %s exists but is not a folder", path);
  return DR_OK;
}

/* ---- several ranks ------------------------------------------------------------------------ */

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

/* This rank's particles: the backend's own count (no device traffic), else its stats. */
static size_t rank_count(const sim *S) {
  if (S->be.count) return S->be.count(S->be.state);
  backend_stats bs = {0};
  return S->be.stats(S->be.state, &bs) == DR_OK ? (size_t)bs.n_particles : 0;
}

/* The particle block of a position, computed as the backends do (float, same origin). */
static void particle_block(const sim *S, const float x[3], int32_t blk[3]) {
  for (int a = 0; a < 3; ++a) blk[a] = bspline_base((x[a] - S->origin[a]) * S->inv_dx) >> 2;
}

static int owner_of(const sim *S, const float x[3]) {
  int32_t blk[3];
  particle_block(S, x, blk);
  return decomp_owner(&S->dec, blk);
}

static int keep_own(void *ctx, const double x[3]) {
  const sim *S = ctx;
  const float xf[3] = {(float)x[0], (float)x[1], (float)x[2]};
  return owner_of(S, xf) == S->rank;
}

static int count_point(void *ctx, const double x[3]) {
  void **c = ctx;
  const sim *S = c[0];
  const float xf[3] = {(float)x[0], (float)x[1], (float)x[2]};
  int32_t blk[3];
  particle_block(S, xf, blk);
  return hist_add(c[1], sparse_block_code(blk[0], blk[1], blk[2]), 1);
}

/* Recursive bisection of the scene's particle counts per block. Every rank visits the sampled
 * positions (none is stored) and cuts the same histogram, so all get the same boxes. */
static int initial_decomposition(sim *S) {
  block_hist h = {0};
  void *ctx[2] = {S, &h};
  int rc = sample_visit(S->sc, count_point, ctx);
  if (rc == DR_OK) rc = decomp_rcb(&h, S->nranks, &S->dec);
  hist_free(&h);
  return rc;
}

/* The load balance's counts: (block code, particles x weight) pairs, one per particle block the
 * backend reports (particle_blocks; a block may come twice, from two members of an island, and
 * the cuts add its counts), or one per block of a histogram (particles_load). */
typedef struct load_pairs {
  uint64_t *v; /* v[2k] the code, v[2k + 1] the count */
  size_t n, cap;
  uint64_t weight;
} load_pairs;

static int load_push(load_pairs *L, uint64_t code, uint64_t count) {
  if (L->n == L->cap) {
    const size_t cap = L->cap ? 2 * L->cap : 4096;
    uint64_t *v = realloc(L->v, sizeof *v * 2 * cap);
    if (!v) return dr_fail(DR_ENOMEM, "out of host memory for the load balance (%zu blocks)", L->n);
    L->v = v, L->cap = cap;
  }
  L->v[2 * L->n] = code;
  L->v[2 * L->n + 1] = count * L->weight;
  ++L->n;
  return DR_OK;
}

static int load_add(void *ctx, const int32_t blk[3], uint64_t count) {
  return load_push(ctx, sparse_block_code(blk[0], blk[1], blk[2]), count);
}

/* The particles of p per particle block (a histogram first: one pair per block, not per particle). */
static int particles_load(const sim *S, const particles *p, load_pairs *L) {
  block_hist h = {0};
  int rc = DR_OK;
  for (size_t i = 0; rc == DR_OK && i < p->n; ++i) {
    int32_t blk[3];
    particle_block(S, p->x + 3 * i, blk);
    rc = hist_add(&h, sparse_block_code(blk[0], blk[1], blk[2]), 1);
  }
  for (size_t i = 0; rc == DR_OK && i < h.cap; ++i)
    if (h.code[i] != UINT64_MAX) rc = load_push(L, h.code[i], h.count[i]);
  hist_free(&h);
  return rc;
}

/* New cuts from the ranks' load pairs, gathered on every rank and cut as they come
 * (decomp_rcb_pairs: no merging into one histogram). */
static int rebalance(sim *S, const load_pairs *L) {
  int rc = DR_OK;
  int *counts = malloc(sizeof *counts * (size_t)S->nranks), *displs = malloc(sizeof *displs * (size_t)S->nranks);
  uint64_t *all = NULL;
  if (!counts || !displs) rc = dr_fail(DR_ENOMEM, "out of host memory for the load balance");
  if (rc == DR_OK && 2 * L->n > INT_MAX) rc = dr_fail(DR_EINTERNAL, "load balance: %zu blocks exceed MPI's int counts", L->n);
  int n2 = (int)(2 * L->n);
  if (rc == DR_OK) {
    int e = MPI_Allgather(&n2, 1, MPI_INT, counts, 1, MPI_INT, S->comm);
    if (e != MPI_SUCCESS) rc = comm_fail(e, __FILE__, __LINE__, "MPI_Allgather(histogram sizes)");
  }
  size_t total = 0;
  for (int r = 0; rc == DR_OK && r < S->nranks; ++r) displs[r] = (int)total, total += (size_t)counts[r];
  if (rc == DR_OK && total > INT_MAX) rc = dr_fail(DR_EINTERNAL, "load balance: %zu values exceed MPI's int counts", total);
  if (rc == DR_OK && !(all = malloc(sizeof *all * (total ? total : 1))))
    rc = dr_fail(DR_ENOMEM, "out of host memory for the load balance");
  if (rc == DR_OK) {
    int e = MPI_Allgatherv(L->v, n2, MPI_UINT64_T, all, counts, displs, MPI_UINT64_T, S->comm);
    if (e != MPI_SUCCESS) rc = comm_fail(e, __FILE__, __LINE__, "MPI_Allgatherv(histograms)");
  }
  if (rc == DR_OK) {
    decomp_free(&S->dec);
    rc = decomp_rcb_pairs(all, total / 2, S->nranks, &S->dec);
  }
  free(counts), free(displs), free(all);
  return rc;
}

static void mig_release(sim *S, int k) {
  if (S->mig_buf[k] && S->mig_free[k]) S->mig_free[k](S->mig_buf[k], 0);
  else free(S->mig_buf[k]);
  S->mig_buf[k] = NULL, S->mig_cap[k] = 0, S->mig_free[k] = NULL;
}

/* migrate's record buffer k of at least bytes, kept between calls (its contents are not kept
 * when it grows). */
static int mig_reserve(sim *S, int k, size_t bytes) {
  if (bytes <= S->mig_cap[k] && S->mig_buf[k]) return DR_OK;
  const size_t cap = hostmem_capacity(S->mig_cap[k], bytes);
  mig_release(S, k);
  /* pinned up to DRIFT_PINNED_MAX_MB, pageable past it (hostmem.h) */
  const int pinned = S->be.state && S->be.alloc_sums && S->be.free_sums && cap <= hostmem_pinned_max();
  void *q = NULL;
  if (pinned) DR_TRY(S->be.alloc_sums(S->be.state, cap, 0, &q));
  else q = cap > ((size_t)2 << 20) ? hostmem_pageable(cap) : malloc(cap);
  if (!q) return dr_fail(DR_ENOMEM, "out of host memory for migration (%zu bytes of particle records)", cap);
  S->mig_buf[k] = q, S->mig_cap[k] = cap, S->mig_free[k] = pinned ? S->be.free_sums : NULL;
  return DR_OK;
}

/* Sends the particle records recs [n] (particles_pack's layout) whose block lies outside this
 * rank's box by more than margin blocks to the rank that owns their position, and leaves in
 * S->mig_buf[1] the records this rank ends with: those it keeps (in their order), then those it
 * receives (by rank); *nq of them. recs is left unchanged and may be any buffer but
 * S->mig_buf[0] and [1]. rc: this rank's outcome so far (how recs came), agreed on with the
 * outcome of the records' destinations in one vote. Collective over S->comm; the ranks agree on
 * every failure before the particles' exchange; that exchange's own failure (MPI's) is this
 * rank's, for the caller's next agreement (two fewer collectives a migration). */
static int migrate_records(sim *S, int rc, const unsigned char *recs, size_t n, int margin, size_t *nq) {
  const int R = S->nranks;
  const size_t rec = particles_record_bytes();
  *nq = 0;
  if (rc != DR_OK) n = 0;
  int *dest = malloc(sizeof *dest * (n ? n : 1));
  int *scount = calloc((size_t)R, sizeof *scount), *rcount = calloc((size_t)R, sizeof *rcount);
  int *sdispl = calloc((size_t)R, sizeof *sdispl), *rdispl = calloc((size_t)R, sizeof *rdispl);
  int *fill = calloc((size_t)R, sizeof *fill);
  MPI_Datatype rec_type = MPI_DATATYPE_NULL;
  if (!dest || !scount || !rcount || !sdispl || !rdispl || !fill) rc = dr_fail(DR_ENOMEM, "out of host memory for migration");
  /* one record per particle, as one MPI datatype: counts stay in particles, not bytes */
  if (rc == DR_OK) {
    int e = MPI_Type_contiguous((int)rec, MPI_BYTE, &rec_type);
    if (e == MPI_SUCCESS) e = MPI_Type_commit(&rec_type);
    if (e != MPI_SUCCESS) rc = comm_fail(e, __FILE__, __LINE__, "MPI_Type_commit(particle record)");
  }
  const int32_t *mybox = S->dec.box[S->rank];
  size_t keep = 0;
  int one = -1; /* the only rank every record goes to, if there is one (-2: several) */
  for (size_t i = 0; rc == DR_OK && i < n; ++i) {
    float x[3]; /* the record starts with the position (PARTICLE_ATTRIBUTES) */
    memcpy(x, recs + rec * i, sizeof x);
    int32_t blk[3];
    particle_block(S, x, blk);
    int out = 0;
    for (int a = 0; a < 3; ++a) out |= blk[a] < mybox[a] - margin || blk[a] >= mybox[3 + a] + margin;
    dest[i] = out ? decomp_owner(&S->dec, blk) : S->rank;
    if (dest[i] != S->rank) ++scount[dest[i]];
    else ++keep;
    one = one == -1 || one == dest[i] ? dest[i] : -2;
  }
  rc = comm_agree(S->comm, rc);
  if (rc == DR_OK) {
    int e = MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, S->comm);
    if (e != MPI_SUCCESS) rc = comm_fail(e, __FILE__, __LINE__, "MPI_Alltoall(migration counts)");
  }
  size_t stot = 0, rtot = 0;
  for (int r = 0; rc == DR_OK && r < R; ++r) sdispl[r] = (int)stot, stot += (size_t)scount[r];
  for (int r = 0; rc == DR_OK && r < R; ++r) rdispl[r] = (int)rtot, rtot += (size_t)rcount[r];
  if (rc == DR_OK && (stot > INT_MAX || rtot > INT_MAX))
    rc = dr_fail(DR_EINTERNAL, "migration: %zu particles to send and %zu to receive on rank %d exceed MPI's int counts",
                 stot, rtot, S->rank);
  /* every record to one other rank (two ranks, and any cut a particle crosses): sent as it is */
  const unsigned char *sbuf = NULL;
  if (rc == DR_OK && one >= 0 && one != S->rank) sbuf = recs;
  else if (rc == DR_OK) rc = mig_reserve(S, 0, rec * stot);
  if (rc == DR_OK) rc = mig_reserve(S, 1, rec * (keep + rtot));
  unsigned char *qbuf = rc == DR_OK ? S->mig_buf[1] : NULL;
  if (rc == DR_OK && !sbuf) {
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      unsigned char *to = dest[i] == S->rank ? qbuf + rec * kept++
                                             : S->mig_buf[0] + rec * (size_t)(sdispl[dest[i]] + fill[dest[i]]++);
      memcpy(to, recs + rec * i, rec);
    }
    sbuf = S->mig_buf[0];
  }
  rc = comm_agree(S->comm, rc); /* nobody enters the exchange alone */
  if (rc == DR_OK) {
    int e = MPI_Alltoallv(sbuf, scount, sdispl, rec_type, qbuf + rec * keep, rcount, rdispl, rec_type, S->comm);
    if (e != MPI_SUCCESS) rc = comm_fail(e, __FILE__, __LINE__, "MPI_Alltoallv(particles)");
  }
  if (rc == DR_OK) *nq = keep + rtot;
  S->fs.migrated += stot;
  if (rec_type != MPI_DATATYPE_NULL) MPI_Type_free(&rec_type);
  free(dest), free(scount), free(rcount), free(sdispl), free(rdispl), free(fill);
  return rc;
}

/* p's particles as records in S->mig_buf[2] (for migrate_records). */
static int pack_records(sim *S, const particles *p) {
  const size_t rec = particles_record_bytes();
  DR_TRY(mig_reserve(S, 2, rec * p->n));
  for (size_t i = 0; i < p->n; ++i) particles_pack(p, i, S->mig_buf[2] + rec * i);
  return DR_OK;
}

/* The first n records migrate_records left in S->mig_buf[1], appended to q. */
static int unpack_records(sim *S, size_t n, particles *q) {
  const size_t rec = particles_record_bytes();
  DR_TRY(particles_reserve(q, q->n + n));
  for (size_t k = 0; k < n; ++k) DR_TRY(particles_push_record(q, S->mig_buf[1] + rec * k));
  return DR_OK;
}

/* Several ranks, at the start: the host memory for the particles of the largest rebalance the
 * threshold lets come (at an imbalance x, about x times the rank's count moves: weak_2's moved
 * 622,399 of 3,114,752 at 20%), reserved now, so that no rebalance pins memory or faults it in
 * (weak_2 on 2 x H200: 110 ms of its 159 ms rebalance frame went to 70 MB of new pinned buffers,
 * and an MPI receive into fresh pages runs at a quarter of its speed). Grown later, as before,
 * if a rebalance needs more. */
static int reserve_migration(sim *S) {
  const double frac = S->bal.threshold < 0.1 ? 0.1 : S->bal.threshold > 0.5 ? 0.5 : S->bal.threshold;
  const size_t n = (size_t)(frac * (double)rank_count(S)) + 4096, rec = particles_record_bytes();
  const double t0 = now();
  DR_TRY(mig_reserve(S, 1, rec * n)); /* those received (and kept) */
  if (S->nranks > 2) DR_TRY(mig_reserve(S, 0, rec * n)); /* grouped by destination (two ranks: sent as they are) */
  if (S->be.emigrate_records && S->be.reserve_records) DR_TRY(S->be.reserve_records(S->be.state, n));
  else if (!S->be.emigrate_records) DR_TRY(mig_reserve(S, 2, rec * n)); /* packed from emigrate */
  log_trace("migration: host memory for %zu particle records reserved in %.1f ms", n, 1e3 * (now() - t0));
  return DR_OK;
}

/* migrate_records for particles (a resume's slices): fills q (empty on entry) with the particles
 * this rank keeps and those it receives. p is left unchanged. Collective. */
static int migrate(sim *S, const particles *p, int margin, particles *q) {
  size_t nq = 0;
  int rc = pack_records(S, p); /* before mig_buf[2] is read: it may move */
  rc = migrate_records(S, rc, S->mig_buf[2], p->n, margin, &nq);
  if (rc == DR_OK) rc = unpack_records(S, nq, q);
  return comm_agree(S->comm, rc);
}

/* At a rebuild-mapping of several ranks: moves the cuts when the load is uneven (from the
 * backend's per-block counts, particle_blocks), then sends the particles that left this rank's
 * box by more than the margin (a block, DRIFT_MIGRATE_MARGIN; by any amount after new cuts) to
 * the rank that owns their position (emigrate, migrate), and hands the backend those that
 * arrive: the particles that stay never leave the backend (on a GPU they never cross to the
 * host). */
static int redistribute(sim *S, const double *glob) {
  const double t_start = now();
  /* the load (particles, or compute time since the cuts last moved: balance_by), agreed in the
   * step vote that asked for this rebuild-mapping (step_vote) */
  const int by_time = S->sc->balance_by == BALANCE_TIME;
  const double my_seconds = S->win_seconds, my_n = (double)rank_count(S);
  /* loads: particles, or compute time in ns (vote) */
  const double lmax[2] = {glob[VOTE_LOAD_MAX], glob[VOTE_N_MAX]}, lsum[2] = {glob[VOTE_LOAD_SUM], glob[VOTE_N_SUM]};
  int rc = DR_OK;
  S->compute_seconds = 0;
  const double mean = lsum[0] / S->nranks, imbalance = mean > 0 ? lmax[0] / mean - 1.0 : 0.0;
  const uint64_t nmax = (uint64_t)lmax[1];
  /* the threshold and cost rules (balance.h), from agreed figures only: every rank decides alike */
  double estimate = 0;
  /* by time: the load is each rank's compute time since the cuts last moved, and the cuts stay
   * until that holds BALANCE_TIME_MIN_STEPS steps (balance.h) */
  const int settled = !by_time || S->win_steps >= BALANCE_TIME_MIN_STEPS;
  if (!settled) log_trace("redistribute: %ld steps timed since the cuts last moved: too few to move them", S->win_steps);
  const balance_why why = balance_decide(&S->bal, settled ? imbalance : 0.0, 1e-9 * glob[VOTE_TIME_SUM] / S->nranks,
                                         lsum[1] / S->nranks, &estimate);
  const int cuts_move = why != BALANCE_STAY;
  if (cuts_move) S->win_seconds = 0, S->win_steps = 0;
  log_trace("redistribute: load agreed");
  int margin = S->migrate_margin;
  if (cuts_move) {
    /* weights: 1 per particle, or this rank's cost per particle relative to the mean (x1000) */
    uint64_t weight = 1;
    if (by_time && my_n > 0 && lsum[0] > 0) {
      const double cost = my_seconds / my_n, mean_cost = 1e-9 * lsum[0] / lsum[1];
      weight = (uint64_t)(1000.0 * cost / mean_cost + 0.5);
      if (weight < 1) weight = 1;
    }
    load_pairs L = {.weight = weight};
    rc = comm_agree(S->comm, S->be.particle_blocks(S->be.state, load_add, &L));
    log_trace("redistribute: load counted");
    if (rc == DR_OK) rc = comm_agree(S->comm, rebalance(S, &L));
    free(L.v);
    log_trace("redistribute: cuts computed");
    if (rc) return rc;
    margin = 0;
    S->fs.rebalanced = 1;
    if (why == BALANCE_THRESHOLD)
      log_info("load balance: the largest %s is %.0f%% above the mean (threshold %.0f%%; largest rank %llu "
               "particles): cuts moved",
               by_time ? "compute time" : "particle count", 100.0 * imbalance, 100.0 * S->bal.threshold,
               (unsigned long long)nmax);
    else
      log_info("load balance: the largest %s is %.1f%% above the mean; the %.1f ms of steps lost to it since the "
               "cuts last moved exceed a rebalance's %s cost, %.1f ms (largest rank %llu particles): cuts moved",
               by_time ? "compute time" : "particle count", 100.0 * imbalance, 1e3 * S->bal.lost_prev_s,
               S->bal.measured ? "measured" : "estimated", 1e3 * estimate, (unsigned long long)nmax);
  }
  const int32_t *box = S->dec.box[S->rank];
  const int32_t lo[3] = {box[0] - margin, box[1] - margin, box[2] - margin},
                hi[3] = {box[3] + margin, box[4] + margin, box[5] + margin};
  /* the emigrants as records: packed by the backend where it can (on a GPU, on the device), else
   * from the particles emigrate gives */
  const void *gone = NULL;
  size_t n_gone = 0, n_in = 0;
  if (S->be.emigrate_records) {
    rc = S->be.emigrate_records(S->be.state, lo, hi, &gone, &n_gone);
  } else {
    particles *out = &S->leaving;
    out->n = 0;
    rc = S->be.emigrate(S->be.state, lo, hi, out);
    if (rc == DR_OK) rc = pack_records(S, out);
    gone = S->mig_buf[2], n_gone = rc == DR_OK ? out->n : 0;
  }
  log_trace("redistribute: %zu particles emigrate", n_gone);
  /* agreed in migrate_records; its exchange's own failure in the next step's (S->setup_rc) */
  rc = migrate_records(S, rc, (const unsigned char *)gone, n_gone, margin, &n_in);
  log_trace("redistribute: %zu particles arrive", n_in);
  if (rc == DR_OK && S->hook.action == HOOK_REBUILD && S->hook.rank == S->rank && S->st.steps + 1 >= S->hook.step) {
    S->hook.action = HOOK_NONE; /* the tests' hook: this rank's part of a rebuild-mapping fails, the others' do not */
    rc = dr_fail(DR_EINTERNAL, "DRIFT_TEST_HOOK: rank %d fails alone in its rebuild-mapping before step %llu", S->rank,
                 (unsigned long long)S->st.steps + 1);
  }
  if (rc == DR_OK && n_in > 0 && S->be.add_records) {
    rc = S->be.add_records(S->be.state, S->mig_buf[1], n_in);
  } else if (rc == DR_OK && n_in > 0) {
    particles *in = &S->arriving;
    in->n = 0;
    rc = unpack_records(S, n_in, in);
    if (rc == DR_OK) rc = S->be.add_particles(S->be.state, in);
  } else if (rc == DR_OK) {
    int rebuilt = 0;
    rc = S->be.rebuild(S->be.state, 1, &rebuilt);
  }
  log_trace("redistribute: rebuilt");
  /* The ranks agree on this rank's part (rc) in the step that follows, once its P2G is queued, so
   * that the device does not wait for the slowest rank's rebuild-mapping; then the exchange is set
   * up for the new mapping while the device runs that P2G (setup_exchange_during_p2g). */
  S->setup_pending = 1;
  S->setup_rc = rc;
  if (cuts_move) { /* this rank's part of the rebalance's cost, for the next vote */
    S->rebal_ns = nearbyint(1e9 * (now() - t_start));
    S->rebal_moved = (double)n_gone;
  }
  return DR_OK;
}

/* The first step after a rebuild-mapping of several ranks: the new mapping's block codes come to
 * the host first (blocks(); the backend keeps them), then the step's whole P2G is queued; then
 * the ranks agree on the rebuild-mapping (redistribute's last part, S->setup_rc: where it failed
 * on any rank, *agreed says so and every rank stops), and the exchange is set up (host work and
 * messages with the neighbours, about 0.3 ms for 44,000 blocks, weak_2 on 2 x H200), both while
 * the device runs the P2G. Collective: every rank sets up, whatever its P2G returned. */
static int setup_exchange_during_p2g(sim *S, float dt, int *agreed) {
  backend *b = &S->be;
  const uint64_t *codes = NULL;
  size_t n = 0;
  int rc = S->setup_rc;
  S->setup_rc = DR_OK;
  S->setup_pending = 0;
  if (rc == DR_OK) rc = b->blocks(b->state, &codes, &n);
  const int prc = rc == DR_OK ? b->p2g(b->state, dt) : DR_OK;
  log_trace("exchange setup: the P2G queued");
  *agreed = comm_agree(S->comm, rc);
  if (*agreed != DR_OK) return *agreed;
  const int src = comm_agree(S->comm, exchange_setup(&S->ex, S->comm, b));
  log_trace("exchange set up (%zu shared blocks)", S->ex.n_shared);
  return prc ? prc : src;
}

/* ---- the step loop: step sizes, stops, test hooks ------------------------------------------ */

/* The next substep's dt, or 0 when the frame is complete: a fixed step, or the adaptive
 * cfl dx / (c + max |v|) with the last two substeps of a frame sharing what is left, so that no
 * substep is tiny and the frame ends exactly at t1. k: substeps done in the frame so far. */
static double next_dt(const sim *S, double t, double t1, int k, double vmax) {
  if (S->substeps_fixed > 0) return k < S->substeps_fixed ? S->frame_dt / S->substeps_fixed : 0.0;
  if (!(t1 - t > 1e-9 * S->frame_dt)) return 0.0;
  double dt = S->sc->cfl * S->sc->dx / (S->wave_speed + vmax);
  const double rem = t1 - t;
  if (dt >= rem) dt = rem;
  else if (dt > 0.5 * rem) dt = 0.5 * rem;
  return dt;
}

/* The largest speed the next step's dt comes from: the checkpoint's right after a resume (a new
 * backend has no last step), else the backend's from its last G2P. This rank's only. */
static int step_speed(sim *S, float *vmax) {
  if (S->vmax_pending) {
    *vmax = S->vmax_next;
    return DR_OK;
  }
  return S->be.max_speed(S->be.state, vmax);
}

/* Parses DRIFT_TEST_HOOK=ACTION:RANK:STEP (ACTION signal, exit, fail or rebuild): the tests make one
 * rank raise SIGTERM, exit, or fail without telling the others, before substep STEP, or fail
 * alone in its part of the first rebuild-mapping of several ranks from there on (redistribute). */
static int parse_test_hook(sim *S) {
  const char *h = getenv("DRIFT_TEST_HOOK");
  if (!h || !*h) return DR_OK;
  char action[16];
  int rank = -1;
  unsigned long long step = 0;
  if (sscanf(h, "%15[a-z]:%d:%llu", action, &rank, &step) != 3 || step < 1 ||
      (strcmp(action, "signal") && strcmp(action, "exit") && strcmp(action, "fail") && strcmp(action, "rebuild")))
    return dr_fail(DR_EINPUT, "DRIFT_TEST_HOOK='%s': expected signal|exit|fail|rebuild:RANK:STEP (a test hook)", h);
  S->hook.action = !strcmp(action, "signal") ? HOOK_SIGNAL
                   : !strcmp(action, "exit")   ? HOOK_EXIT
                   : !strcmp(action, "fail")   ? HOOK_FAIL
                                               : HOOK_REBUILD;
  S->hook.rank = rank;
  S->hook.step = step;
  return DR_OK;
}

/* The tests' hook (DRIFT_TEST_HOOK), before substep done + 1 of this rank. */
static int test_hook_at(sim *S, uint64_t done) {
  if (S->hook.action == HOOK_NONE || S->hook.action == HOOK_REBUILD || S->hook.rank != S->rank ||
      done + 1 < S->hook.step)
    return DR_OK;
  const int action = S->hook.action;
  S->hook.action = HOOK_NONE;
  if (action == HOOK_SIGNAL) raise(SIGTERM);
  if (action == HOOK_EXIT) _exit(1); /* a rank that dies */
  if (action == HOOK_FAIL)           /* a failure the other ranks are not told of */
    return dr_fail(DR_EINTERNAL, "DRIFT_TEST_HOOK: rank %d fails alone before step %llu", S->rank,
                   (unsigned long long)done + 1);
  return DR_OK;
}

/* The tests' hook before substep st.steps + 1. */
static int test_hook(sim *S) { return test_hook_at(S, S->st.steps); }

/* frame_plan.stop, for a backend that runs a frame's steps itself (cuda): before it queues the
 * frame's step queued + 1, the tests' signal hook (as before every substep here) and a look at
 * the signal flag, so that a signal stops the run within a step as on the host's loop. */
static int frame_stop(void *ctx, uint64_t queued) {
  sim *S = ctx;
  if (S->hook.action == HOOK_SIGNAL) (void)test_hook_at(S, S->st.steps + queued); /* it only raises SIGTERM */
  return signals_pending();
}

/* Remembers where a stop found the run (the next substep's start) and returns DR_ESTOPPED;
 * sim_run writes the checkpoint. */
static int stop_at(sim *S, int sig, double t, int k) {
  S->stop_signal = sig;
  S->t_in_frame = t;
  S->step_in_frame = k;
  S->st.time = t;
  return DR_ESTOPPED;
}

/* The per-step agreement of several ranks: one blocking allreduce (VOTE_*: largest, then sums)
 * of the largest speed (the next step's dt), whether any rank wants a rebuild-mapping, the first
 * failure, a signal, whether a failure came from the step just done (so that every rank names the
 * same step in its message), and the loads the load balance compares at a rebuild-mapping. Its
 * inputs are known once a step's g2p is done, and its result is needed before the next step's p2g
 * (dt, and a rebuild-mapping that moves particles between ranks). Blocking: the host has little to
 * overlap with it, while the device waits for it between g2p and the next p2g, or runs the step
 * queued ahead behind its gate (backend.h's g2p_ahead). */
typedef struct step_vote {
  double loc[VOTE_N], glob[VOTE_N];
} step_vote;

/* The vote's reduction: the largest of its first VOTE_SUMS entries, the sum of the others. MPI
 * hands it whole elements (vote_type), len of them. */
static void vote_reduce(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  const double *a = in;
  double *b = inout;
  for (int e = 0; e < *len; ++e, a += VOTE_N, b += VOTE_N) {
    for (int i = 0; i < VOTE_SUMS; ++i) b[i] = a[i] > b[i] ? a[i] : b[i];
    for (int i = VOTE_SUMS; i < VOTE_N; ++i) b[i] += a[i];
  }
}

/* The vote's element type and reduction, made once a run. */
static int vote_op(sim *S) {
  if (S->vote_op) return DR_OK;
  /* For A/B measurements: a wider margin migrates fewer particles back and forth across a cut,
   * a narrower one keeps the band of shared blocks thinner. The ranks take the largest asked. */
  const char *mme = getenv("DRIFT_MIGRATE_MARGIN");
  int mm = mme && *mme ? atoi(mme) : 1;
  mm = mm < 0 ? 0 : mm > 4 ? 4 : mm;
  DR_MPI(MPI_Allreduce(MPI_IN_PLACE, &mm, 1, MPI_INT, MPI_MAX, S->comm));
  S->migrate_margin = mm;
  MPI_Datatype t;
  DR_MPI(MPI_Type_contiguous(VOTE_N, MPI_DOUBLE, &t));
  int e = MPI_Type_commit(&t);
  if (e == MPI_SUCCESS) e = MPI_Op_create(vote_reduce, 1, &S->vote_op);
  if (e != MPI_SUCCESS) {
    MPI_Type_free(&t);
    S->vote_op = 0;
    return comm_fail(e, __FILE__, __LINE__, "MPI_Type_commit/MPI_Op_create(step vote)");
  }
  S->vote_type = t;
  return DR_OK;
}

/* Casts this rank's vote for the next step and waits for the result: the tests' hook, the speed
 * and rebuild flag of the last g2p, *rc (a failure so far; one set on entry came from the step
 * just done), a pending signal. A failing hook returns at once (the others wait in the allreduce
 * until main ends the job). The wait counts as waiting on MPI. */
static int vote(sim *S, step_vote *v, int *rc) {
  backend *b = &S->be;
  float vmax = 0.0f;
  v->loc[VOTE_FAILED] = *rc != DR_OK; /* the failure, if any, came from the step's phases */
  if (*rc == DR_OK) DR_TRY(test_hook(S));
  if (*rc == DR_OK) *rc = step_speed(S, &vmax);
  v->loc[VOTE_VMAX] = vmax;
  v->loc[VOTE_REBUILD] = *rc == DR_OK && b->wants_rebuild(b->state);
  v->loc[VOTE_STATUS] = *rc;
  v->loc[VOTE_SIGNAL] = signals_pending();
  /* whole numbers (compute time in ns), whose sums a double holds exactly in any order: every
   * rank then gets the same sums, bit for bit, and takes the same decision (redistribute) */
  const double n = (double)rank_count(S), ns = nearbyint(S->compute_seconds * 1e9),
               load = S->sc->balance_by == BALANCE_TIME ? nearbyint(S->win_seconds * 1e9) : n;
  v->loc[VOTE_LOAD_MAX] = v->loc[VOTE_LOAD_SUM] = load;
  v->loc[VOTE_N_MAX] = v->loc[VOTE_N_SUM] = n;
  v->loc[VOTE_TIME_SUM] = ns;
  /* a rebalance's cost, once, in the vote after it (balance_measured) */
  v->loc[VOTE_REBAL_NS] = S->rebal_ns;
  v->loc[VOTE_MOVED_SUM] = S->rebal_moved;
  S->rebal_ns = S->rebal_moved = 0;
  DR_TRY(vote_op(S));
  const double w = MPI_Wtime();
  DR_MPI(MPI_Allreduce(v->loc, v->glob, 1, S->vote_type, S->vote_op, S->comm));
  S->fs.wait += MPI_Wtime() - w;
  return DR_OK;
}

/* Queues step k + 1's P2G (and with p2g_part, the boundary's P2G, the node masks and the
 * interior's P2G, as the loop below does after the vote) behind the gate that g2p_ahead shut: the
 * device starts it the moment the vote lets it (gate_open), instead of after the host's launches.
 * Only where the step will be a plain one: fixed steps, not a frame's last step, not a set-up
 * step (a rebuild-mapping voids the gate first). A failure here goes into the vote. */
static int queue_ahead(sim *S, double t_next, float dt) {
  backend *b = &S->be;
  const int split = b->p2g_part && S->ex.nlinks > 0;
  int rc = b->set_time ? b->set_time(b->state, t_next) : DR_OK;
  if (rc == DR_OK) rc = split ? b->p2g_part(b->state, dt, P2G_BOUNDARY) : b->p2g(b->state, dt);
  S->ahead_early = split && rc == DR_OK && exchange_pack(&S->ex, b);
  if (S->ahead_early) rc = b->p2g_part(b->state, dt, P2G_INTERIOR);
  S->ahead_rc = rc;
  return rc;
}

/* A frame on several ranks: every step one vote (step_vote) agrees on the largest speed
 * (adaptive dt), on whether any rank needs a rebuild-mapping, on failure, and on whether any rank
 * got a signal; P2G sums of shared blocks cross between ranks before the grid update. Starts where
 * the run stands (S->step_in_frame, S->t_in_frame). */
static int advance_frame_ranks(sim *S, double t0, double t1) {
  backend *b = &S->be;
  double t = S->t_in_frame;
  int k = S->step_in_frame, rc = DR_OK, stepped = 0; /* stepped: this rank completed the last step */
  step_vote v = {.loc = {0}};
  DR_TRY(vote(S, &v, &rc)); /* the frame's first step */
  for (;;) {
    if (S->gate_shut) { /* the step queued ahead runs only where the ranks go on without a rebuild-mapping */
      const int go = v.glob[VOTE_STATUS] == 0 && v.glob[VOTE_SIGNAL] == 0 && v.glob[VOTE_REBUILD] == 0;
      S->gate_shut = 0;
      const int grc = b->gate_open(b->state, go);
      S->ahead = go;
      if (!go) {
        exchange_drop_packs(&S->ex); /* its node masks were voided with it */
        log_trace("step %d: the step queued ahead voided (%s)", k,
                  v.glob[VOTE_STATUS] != 0 ? "a rank failed" : v.glob[VOTE_SIGNAL] != 0 ? "a signal" : "a rebuild-mapping first");
      }
      if (grc != DR_OK && rc == DR_OK) rc = grc; /* the step fails; the next vote says so */
    }
    if (v.glob[VOTE_STATUS] != 0) { /* every rank knows */
      /* a step that failed on another rank did not happen: the messages name it, as the failing rank does */
      if (!rc && v.glob[VOTE_FAILED] != 0 && stepped) --S->st.steps;
      if (!rc) rc = dr_fail((int)v.glob[VOTE_STATUS], "another rank stopped (its message is above)");
      dr_mark_agreed();
      return rc;
    }
    /* the slowest rank's time for the last rebalance, and the particles it moved: the cost rule's
     * estimate follows (balance.h) */
    if (v.glob[VOTE_REBAL_NS] > 0) balance_measured(&S->bal, 1e-9 * v.glob[VOTE_REBAL_NS], v.glob[VOTE_MOVED_SUM]);
    const double dt = next_dt(S, t, t1, k, v.glob[VOTE_VMAX]);
    if (dt == 0.0) break;
    if (v.glob[VOTE_SIGNAL] != 0) return stop_at(S, (int)v.glob[VOTE_SIGNAL], t, k);
    /* fixed steps: the time from the step count, as on one rank (advance_frame_host) */
    S->st.time = S->substeps_fixed > 0 ? t0 + k * dt : t;
    if (rc == DR_OK && b->set_time) rc = b->set_time(b->state, S->st.time);
    double ph = now(); /* phase times (sim_options.profile; the CPU backend is synchronous) */
    if (v.glob[VOTE_REBUILD] != 0) DR_TRY(redistribute(S, v.glob));
    S->st.phase_seconds[PHASE_REBUILD] += S->opt.profile ? now() - ph : 0;
    double bytes0 = S->ex.bytes_sent, wait0 = S->ex.wait_seconds, c0 = MPI_Wtime();
    ph = now();
    /* With p2g_part (and blocks shared with another rank), only the particles whose stencils
     * may reach shared blocks scatter before the sums are packed and sent; the others scatter
     * while the messages travel (the profile's P2G phase then holds the boundary part only).
     * Right after a rebuild-mapping the shared blocks are not known yet: the whole P2G is queued
     * first, and the exchange is set up while the device runs it. */
    const int setup = S->setup_pending;
    const int split = !setup && b->p2g_part && S->ex.nlinks > 0;
    const int ahead = S->ahead; /* queued with the last G2P (queue_ahead), its gate open now */
    S->ahead = 0;
    log_trace("step %d: p2g%s%s", k, split ? " (boundary)" : setup ? " (exchange set up meanwhile)" : "",
              ahead ? ", queued ahead" : "");
    if (setup) {
      int agreed = DR_OK;
      rc = setup_exchange_during_p2g(S, (float)dt, &agreed);
      if (agreed != DR_OK) return agreed; /* a rank's rebuild-mapping failed: every rank stops here */
    } else if (ahead) {
      if (rc == DR_OK) rc = S->ahead_rc;
    } else {
      rc = split ? b->p2g_part(b->state, (float)dt, P2G_BOUNDARY) : b->p2g(b->state, (float)dt);
    }
    if (S->opt.profile) S->st.phase_seconds[PHASE_P2G] += now() - ph, ph = now();
    log_trace("step %d: exchange", k);
    /* Always exchange, so that no neighbour waits for this rank's sums (a failure is agreed on
     * at the next vote); the interior blocks are updated while the sums are in flight. */
    /* Where the backend makes the node masks in two halves, the interior's P2G is queued between
     * them: the device scatters it while the host waits for the masks and copies them out. In the
     * set-up step (whole P2G) the interior's grid update goes there instead. */
    const int early = ahead ? S->ahead_early : (split || setup) && rc == DR_OK && exchange_pack(&S->ex, b);
    const int grid_early = early && setup && b->grid_update_part;
    if (early && split && !ahead) rc = b->p2g_part(b->state, (float)dt, P2G_INTERIOR);
    if (grid_early) rc = b->grid_update_part(b->state, (float)dt, GRID_INTERIOR);
    int xrc = exchange_start(&S->ex, b);
    if (split && !early && rc == DR_OK) rc = b->p2g_part(b->state, (float)dt, P2G_INTERIOR);
    if (rc == DR_OK && xrc == DR_OK && b->grid_update_part && !grid_early)
      rc = b->grid_update_part(b->state, (float)dt, GRID_INTERIOR);
    /* and the interior's G2P, which reads those blocks alone: the messages have that long too */
    if (rc == DR_OK && xrc == DR_OK && b->grid_update_part && b->g2p_interior && S->ex.nlinks > 0)
      rc = b->g2p_interior(b->state, (float)dt);
    int frc = exchange_finish(&S->ex, b); /* also after a failed pack: it waits for the messages it posted */
    if (rc == DR_OK) rc = frc;
    if (rc == DR_OK)
      rc = b->grid_update_part ? b->grid_update_part(b->state, (float)dt, GRID_SHARED) : b->grid_update(b->state, (float)dt);
    if (S->opt.profile) S->st.phase_seconds[PHASE_GRID] += now() - ph, ph = now(); /* the exchange included */
    log_trace("step %d: g2p", k);
    /* Fixed steps: the next step of the frame is queued behind a gate before the vote (queue_ahead),
     * so that the device runs it as soon as the ranks agree (DRIFT_STEP_AHEAD=0 in the backend: off) */
    const int next_ahead = rc == DR_OK && b->g2p_ahead && S->substeps_fixed > 0 && k + 1 < S->substeps_fixed;
    if (next_ahead) {
      int armed = 0;
      rc = b->g2p_ahead(b->state, (float)dt, &armed);
      if (armed) {
        S->gate_shut = 1;
        const int qrc = queue_ahead(S, t0 + (k + 1) * dt, (float)dt);
        const int crc = b->g2p_collect(b->state);
        if (rc == DR_OK) rc = crc ? crc : qrc;
      }
    } else if (rc == DR_OK) {
      rc = b->g2p(b->state, (float)dt);
    }
    log_trace("step %d: vote", k);
    const double c1 = MPI_Wtime();
    if (S->opt.profile) S->st.phase_seconds[PHASE_G2P] += now() - ph;
    stepped = rc == DR_OK;
    if (rc == DR_OK) {
      ++S->st.steps;
      S->st.last_dt = dt;
      S->vmax_pending = 0;
    }
    const double computed = c1 - c0 - (S->ex.wait_seconds - wait0);
    S->compute_seconds += computed; /* before the vote, which carries it */
    S->win_seconds += computed;
    S->win_steps += rc == DR_OK;
    DR_TRY(vote(S, &v, &rc));
    S->fs.bytes += S->ex.bytes_sent - bytes0;
    S->fs.wait += S->ex.wait_seconds - wait0;
    t = S->substeps_fixed > 0 ? t0 + (k + 1) * dt : t + dt;
    ++k;
  }
  return DR_OK;
}

/* ---- checkpoints ------------------------------------------------------------------------ */

/* Collective. Writes DIR/checkpoint_NNNNN.h5 of the state the run stands at: the end of frame
 * st.frame, or part-way into the next one after a stop. */
static int write_checkpoint(sim *S) {
  const double t0 = now();
  int rc = comm_agree(S->comm, S->be.download(S->be.state, &S->host));
  backend_stats bs;
  if (rc == DR_OK) rc = comm_agree(S->comm, S->be.stats(S->be.state, &bs));
  float vmax = 0.0f, vall = 0.0f;
  if (rc == DR_OK) rc = comm_agree(S->comm, step_speed(S, &vmax));
  DR_TRY(rc);
  DR_MPI(MPI_Allreduce(&vmax, &vall, 1, MPI_FLOAT, MPI_MAX, S->comm));
  /* G2P2G already applied the next step's return mapping (one rank only: several ranks step
   * phase by phase, never fused, so every rank says 0 there) */
  int mine = S->be.projected ? S->be.projected(S->be.state) : 0, projected = 0;
  DR_MPI(MPI_Allreduce(&mine, &projected, 1, MPI_INT, MPI_MAX, S->comm));
  S->st.rebuilds = S->rebuilds_base + bs.rebuilds;
  const ckpt_state st = {.frame = S->st.frame, .step_in_frame = S->step_in_frame, .time = S->t_in_frame,
                         .steps = S->st.steps, .rebuilds = S->st.rebuilds, .last_dt = S->st.last_dt, .vmax = vall,
                         .scene_hash = S->sc->hash, .emit_frame = S->em.frame_done, .n_sources = S->em.n,
                         .emitted = S->em.emitted, .projected = projected};
  const ckpt_scene sc = {.text = S->sc->text, .len = S->sc->text_len, .path = S->sc->path};
  DR_TRY(ckpt_write(S->comm, S->out_dir, &st, &sc, &S->host, S->sc->checkpoint_keep));
  char path[4096];
  ckpt_path(S->out_dir, S->st.frame, path, sizeof path);
  log_info("checkpoint %s (frame %d%s, t %.4f s)", path, S->st.frame, S->step_in_frame ? " and part of the next" : "",
           S->t_in_frame);
  S->st.io_seconds += now() - t0;
  return DR_OK;
}

/* Continues from a checkpoint instead of sampling the scene. Reads it (the file given, or the
 * newest whole one in a folder; default the output folder), refuses one from another scene
 * unless --force, and leaves in *p the particles this rank owns. Every rank reads an even slice;
 * on several ranks the cuts are then made from all slices (rebalance, as when the load drifts)
 * and the particles move to their owners (migrate, as at a rebuild-mapping), so no rank ever
 * holds the whole scene. Restores the time, the step counts and the step-size controller. */
static int resume_from_checkpoint(sim *S, particles *p) {
  const char *where = S->opt.resume && S->opt.resume[0] ? S->opt.resume : S->out_dir;
  ckpt_state st = {0};
  particles slice = {0};
  int kind = 0, rc = DR_OK; /* 0 missing, 1 a folder, 2 something else */
  if (S->rank == 0) {
    struct stat sb;
    kind = stat(where, &sb) != 0 ? 0 : S_ISDIR(sb.st_mode) ? 1 : 2;
  }
  DR_MPI(MPI_Bcast(&kind, 1, MPI_INT, 0, S->comm));
  if (kind == 0 && !(S->opt.resume && S->opt.resume[0])) {
    rc = dr_fail(DR_EINPUT, "--resume: nothing to resume from: the output folder %s does not exist", where);
    dr_mark_agreed(); /* every rank knows (the broadcast) */
    return rc;
  }
  if (kind == 1) {
    rc = ckpt_read_latest(S->comm, where, &st, &slice, S->resumed_from, sizeof S->resumed_from);
  } else {
    snprintf(S->resumed_from, sizeof S->resumed_from, "%s", where);
    rc = ckpt_read(S->comm, where, &st, &slice);
  }
  /* the same scene file, byte for byte (the same on every rank) */
  if (rc == DR_OK && st.scene_hash != S->sc->hash) {
    if (!S->opt.force)
      rc = dr_fail(DR_EINPUT,
                   "checkpoint %s comes from another scene file than %s (scene hash %016llx, the file's %016llx); "
                   "--force continues from it with this scene",
                   S->resumed_from, S->sc->path, (unsigned long long)st.scene_hash, (unsigned long long)S->sc->hash);
    else
      log_info("warning: checkpoint %s comes from another scene file than %s; continuing with this scene (--force)",
               S->resumed_from, S->sc->path);
  }
  /* materials the scene defines (only --force lets another scene through) */
  if (rc == DR_OK) {
    double bad[2] = {0, -1}, all[2];
    for (size_t i = 0; i < slice.n; ++i)
      if (slice.material[i] < 0 || slice.material[i] >= S->sc->n_materials)
        bad[0] += 1, bad[1] = fmax(bad[1], slice.material[i]);
    int e = MPI_Allreduce(bad, all, 2, MPI_DOUBLE, MPI_MAX, S->comm);
    if (e != MPI_SUCCESS) rc = comm_fail(e, __FILE__, __LINE__, "MPI_Allreduce(material check)");
    else if (all[0] > 0)
      rc = dr_fail(DR_EINPUT, "checkpoint %s: particles of material %.0f, but %s defines %d material(s)", S->resumed_from,
                   all[1], S->sc->path, S->sc->n_materials);
  }
  rc = comm_agree(S->comm, rc);
  if (rc == DR_OK && S->nranks > 1) {
    load_pairs L = {.weight = 1};
    rc = comm_agree(S->comm, particles_load(S, &slice, &L));
    if (rc == DR_OK) rc = comm_agree(S->comm, rebalance(S, &L));
    free(L.v);
    if (rc == DR_OK) rc = migrate(S, &slice, 0, p);
    S->fs.migrated = 0; /* reading is not migration */
    particles_free(&slice);
  } else {
    *p = slice; /* one rank: the slice is everything */
  }
  /* the particle sources go on from their counts (emit.h); another scene's (--force) must match */
  if (rc == DR_OK && st.n_sources != S->em.n)
    rc = dr_fail(DR_EINPUT, "checkpoint %s holds %d particle source(s), but %s defines %d", S->resumed_from,
                 st.n_sources, S->sc->path, S->em.n);
  if (rc == DR_OK) {
    for (int i = 0; i < S->em.n; ++i) S->em.emitted[i] = st.emitted[i];
    S->em.frame_done = st.emit_frame;
  } else {
    dr_mark_agreed(); /* the same checkpoint on every rank */
  }
  free(st.emitted);
  if (rc) return rc;
  S->resumed = 1;
  S->st.frame = st.frame;
  S->st.time = st.time;
  S->st.steps = st.steps;
  S->fs_steps0 = st.steps;
  S->st.last_dt = st.last_dt;
  S->st.rebuilds = st.rebuilds;
  S->t_in_frame = st.time;
  S->step_in_frame = st.step_in_frame;
  S->resume_projected = st.projected;
  S->vmax_pending = 1;
  S->vmax_next = (float)st.vmax;
  log_info("resuming from %s: frame %d%s, t %.4f s, %llu steps, %llu particles (written by %d rank%s, read by %d)",
           S->resumed_from, st.frame, st.step_in_frame ? " and part of the next" : "", st.time,
           (unsigned long long)st.steps, (unsigned long long)st.n_particles, st.ranks, st.ranks == 1 ? "" : "s",
           S->nranks);
  return DR_OK;
}

/* Deterministic mode: the fixed-point scales of physics/fixed.h, from the largest particle mass
 * (all ranks; masses never change, so a resume finds the same) and a speed bound from the scene
 * alone, so that every run of the scene, on any number of ranks, resumed or not, uses the same. */
static int deterministic_scales(sim *S, const particles *p) {
  const scene *s = S->sc;
  double m_max = 0.0;
  for (size_t i = 0; i < p->n; ++i) m_max = fmax(m_max, p->mass[i]);
  if (S->nranks > 1) {
    double mine = m_max;
    DR_MPI(MPI_Allreduce(&mine, &m_max, 1, MPI_DOUBLE, MPI_MAX, S->comm));
  }
  double v = fmax(1.0, S->wave_speed), g = 0.0, L = 0.0;
  for (int a = 0; a < 3; ++a) g += s->gravity[a] * s->gravity[a], L = fmax(L, s->domain_max[a] - s->domain_min[a]);
  v = fmax(v, sqrt(2.0 * sqrt(g) * L)); /* free fall across the domain */
  for (int b = 0; b < s->n_bodies; ++b) {
    const double *u = s->bodies[b].velocity;
    v = fmax(v, sqrt(u[0] * u[0] + u[1] * u[1] + u[2] * u[2]));
  }
  for (int c = 0; c < s->n_colliders; ++c) /* keyframed translation speeds */
    for (int k = 1; k < s->colliders[c].n_keys; ++k) {
      const scene_collider_key *k0 = &s->colliders[c].keys[k - 1], *k1 = &s->colliders[c].keys[k];
      double d2 = 0.0;
      for (int a = 0; a < 3; ++a) d2 += (k1->translation[a] - k0->translation[a]) * (k1->translation[a] - k0->translation[a]);
      if (k1->time > k0->time) v = fmax(v, sqrt(d2) / (k1->time - k0->time));
    }
  fix_scales(m_max, v, S->prm.fix_scale);
  S->prm.deterministic = 1;
  if (S->rank == 0)
    log_info("deterministic mode: P2G sums in 64-bit fixed point, %g units per kg (largest particle mass %.3g kg) "
             "and %g per kg m/s (speed bound %.3g m/s); a contribution may reach %.3g kg m/s",
             (double)S->prm.fix_scale[0], m_max, (double)S->prm.fix_scale[1], v,
             (double)FIX_LIMIT / (double)S->prm.fix_scale[1]);
  return DR_OK;
}

/* After a resume: the frames the run wrote before it, for frames.xdmf (rank 0; those missing
 * are left out). */
static int list_earlier_frames(sim *S) {
  if (S->rank != 0 || !S->opt.write_output) return DR_OK;
  for (int f = 0; f <= S->st.frame; f += S->sc->output_every) {
    char path[4400];
    h5frame_path(S->out_dir, f, path, sizeof path);
    if (access(path, F_OK) != 0) continue;
    /* each frame's own count (particle sources change it from frame to frame) */
    uint64_t n = 0;
    int jp = 0;
    if (h5frame_count(path, &n, &jp) != DR_OK) { /* unreadable: left out, as a missing one */
      dr_clear();
      continue;
    }
    xdmf_frame *w = realloc(S->written, sizeof *w * (size_t)(S->n_written + 1));
    if (!w) return dr_fail(DR_ENOMEM, "out of host memory for the frame list");
    S->written = w;
    S->written[S->n_written++] = (xdmf_frame){.frame = f, .time = f * S->frame_dt, .n = n, .logjp = jp};
  }
  return DR_OK;
}

int sim_create(const scene *s, const sim_options *opt, MPI_Comm comm, sim **out) {
  *out = NULL;
  sim *S = dr_calloc(1, sizeof *S, "simulation");
  if (!S) return DR_ENOMEM;
  int rc = DR_OK;
  S->sc = s;
  S->comm = comm;
  S->opt = *opt;
  MPI_Comm_rank(comm, &S->rank);
  MPI_Comm_size(comm, &S->nranks);
  S->out_dir = opt->out_dir ? opt->out_dir : s->output_dir;
  S->st.frames = opt->frames > 0 ? opt->frames : s->frames;
  S->st.totals_frame = -1;
  S->frame_dt = 1.0 / s->fps;
  if (s->dt > 0) S->substeps_fixed = (int)ceil(S->frame_dt / s->dt - 1e-9);
  S->wave_speed = scene_wave_speed(s);
  if ((rc = parse_test_hook(S))) {
    dr_mark_agreed(); /* every rank reads the same variable */
    goto fail;
  }

  S->mats = dr_malloc(sizeof(material_params) * (size_t)s->n_materials, "materials");
  S->mat_names = dr_malloc(sizeof(char *) * (size_t)s->n_materials, "materials");
  if (!S->mats || !S->mat_names) {
    rc = DR_ENOMEM;
    goto fail;
  }
  for (int m = 0; m < s->n_materials; ++m) {
    S->mats[m] = s->materials[m].params;
    S->mat_names[m] = s->materials[m].name;
    S->with_logjp |= s->materials[m].params.model == MODEL_NACC;
  }
  S->body_label = dr_malloc(sizeof *S->body_label * (size_t)(s->n_bodies ? s->n_bodies : 1), "body names");
  S->body_names = dr_malloc(sizeof(char *) * (size_t)(s->n_bodies ? s->n_bodies : 1), "body names");
  if (!S->body_label || !S->body_names) {
    rc = DR_ENOMEM;
    goto fail;
  }
  for (int b = 0; b < s->n_bodies; ++b) {
    snprintf(S->body_label[b], sizeof S->body_label[b], "bodies[%d] (%s)", b, scene_shape_name(s->bodies[b].shape));
    S->body_names[b] = S->body_label[b];
  }
  int n_keys = 0;
  rc = scene_kernel_colliders(s, &S->colliders, &S->collider_keys, &n_keys);
  if (rc) goto fail;
  S->prm = (sim_params){.dx = (float)s->dx, .n_materials = s->n_materials, .materials = S->mats,
                        .material_names = S->mat_names, .n_bodies = s->n_bodies,
                        .body_names = S->body_names, .rank = S->rank,
                        .gpus = opt->gpus > 0 ? opt->gpus : s->gpus_per_rank, .g2p2g_below = s->g2p2g_below,
                        .island_barrier = s->island_barrier, .island_reduce = s->island_reduce};
  rc = comm_agree(comm, comm_local(comm, &S->prm.local_rank, &S->prm.local_size));
  if (rc) goto fail;
  for (int a = 0; a < 3; ++a) {
    S->prm.domain_min[a] = s->domain_min[a];
    S->prm.domain_max[a] = s->domain_max[a];
    S->prm.gravity[a] = (float)s->gravity[a];
  }
  for (int f = 0; f < DR_FACES; ++f) {
    S->prm.boundary.type[f] = s->faces[f].type;
    S->prm.boundary.friction[f] = (float)s->faces[f].friction;
  }
  S->prm.boundary.n_colliders = s->n_colliders;
  S->prm.boundary.n_keys = n_keys;
  S->prm.boundary.colliders = S->colliders;
  S->prm.boundary.keys = S->collider_keys;
  if (s->collider_levelsets) { /* borrowed from the scene, which outlives the simulation */
    S->prm.boundary.n_levelsets = s->collider_levelsets->n;
    S->prm.boundary.levelsets = s->collider_levelsets->sets;
    S->prm.boundary.ls_table = s->collider_levelsets->table;
    S->prm.boundary.ls_bricks = s->collider_levelsets->bricks;
    S->prm.boundary.ls_table_n = s->collider_levelsets->table_n;
    S->prm.boundary.ls_bricks_n = s->collider_levelsets->bricks_n;
  }

  if ((rc = emit_init(s, &S->em))) goto fail;
  particles p = {0};
  balance_init(&S->bal, s->balance_threshold, s->balance_cost);
  /* For the tests only (test_ranks): a rebalance's fixed cost before one is measured, so that
   * the cost rule moves the cuts of a small scene on a fast device within a few frames. */
  const char *prior = getenv("DRIFT_BALANCE_PRIOR_MS");
  if (prior && *prior) {
    char *end = NULL;
    const double ms = strtod(prior, &end);
    if (end == prior || *end || !(ms > 0.0) || ms > 1e6) {
      rc = dr_fail(DR_EINPUT, "DRIFT_BALANCE_PRIOR_MS='%s': expected milliseconds, above 0", prior);
      dr_mark_agreed(); /* every rank reads the same variable */
      goto fail;
    }
    S->bal.fixed_s = 1e-3 * ms;
  }
  S->inv_dx = 1.0f / (float)s->dx;
  for (int a = 0; a < 3; ++a) S->origin[a] = (float)(s->domain_min[a] - GRID_PAD * s->dx);
  if (opt->resume) {
    rc = resume_from_checkpoint(S, &p);
  } else if (S->nranks > 1) {
    /* Every rank cuts the same histogram the same way, then samples only its own box. */
    rc = initial_decomposition(S);
    if (rc == DR_OK) rc = sample_scene_where(s, keep_own, S, &p);
  } else {
    rc = sample_scene(s, &p);
  }
  if (rc) {
    particles_free(&p);
    goto fail;
  }
  S->st.particles = p.n;
  if (S->nranks > 1) {
    uint64_t mine = p.n, all = 0;
    int e = MPI_Allreduce(&mine, &all, 1, MPI_UINT64_T, MPI_SUM, comm);
    if (e != MPI_SUCCESS) {
      rc = comm_fail(e, __FILE__, __LINE__, "MPI_Allreduce(particle count)");
      particles_free(&p);
      goto fail;
    }
    S->st.particles = all;
  }
  if (s->deterministic) rc = comm_agree(comm, deterministic_scales(S, &p));
  if (rc) {
    particles_free(&p);
    goto fail;
  }
  rc = backend_create(opt->backend >= 0 ? opt->backend : s->backend, &S->prm, &p, &S->be);
  particles_free(&p);
  if (S->nranks > 1) {
    rc = comm_agree(comm, rc);
    /* what redistribute and the exchange (its node exchange) need of a backend */
    if (rc == DR_OK && !(S->be.set_particles && S->be.emigrate && S->be.particle_blocks && S->be.add_particles &&
                         S->be.blocks && S->be.node_masks && S->be.pack_nodes && S->be.unpack_add_nodes))
      rc = dr_fail(DR_EINPUT, "the %s backend does not run on several ranks (%d ranks): use --backend cpu, or one rank",
                   S->be.name, S->nranks);
    rc = comm_agree(comm, rc);
    if (rc == DR_OK) rc = exchange_setup(&S->ex, comm, &S->be);
    rc = comm_agree(comm, rc);
    if (rc == DR_OK) rc = comm_agree(comm, reserve_migration(S));
    if (rc == DR_OK && S->rank == 0)
      log_info("rank exchange: the sums of the shared nodes both ranks reach (node exchange) through %s",
               S->ex.device_sums ? "device memory (CUDA-aware MPI)" : S->be.alloc_sums ? "pinned host memory" : "host memory");
  }
  /* a checkpoint written after fused G2P2G steps: its particles hold the next return mapping */
  if (rc == DR_OK && S->resume_projected) rc = comm_agree(comm, S->be.set_projected(S->be.state));
  if (rc) goto fail;
  /* the rebuild counter goes on from the checkpoint's */
  backend_stats bs;
  if ((rc = S->be.stats(S->be.state, &bs))) goto fail;
  S->rebuilds_base = S->resumed ? S->st.rebuilds - bs.rebuilds : 0;
  S->st.rebuilds = S->rebuilds_base + bs.rebuilds;
  if (!S->resumed) S->t_in_frame = 0.0;
  if (opt->write_output) {
    rc = S->rank == 0 ? make_dirs(S->out_dir) : DR_OK;
    if (rc == DR_OK && S->resumed) rc = list_earlier_frames(S);
    rc = comm_agree(comm, rc);
    if (rc) goto fail;
  }
  *out = S;
  return DR_OK;
fail:
  sim_destroy(&S);
  return rc;
}

/* The frame's totals (sim_status): this rank's particles' count, mass, momentum, kinetic and
 * gravitational potential energy (above the domain's lowest corner), summed in double. */
enum { TOT_N, TOT_MASS, TOT_P, TOT_KE = TOT_P + 3, TOT_PE, TOT_COUNT };
static void frame_totals(const sim *S, const particles *h, double tot[TOT_COUNT]) {
  const double *g = S->sc->gravity, *lo = S->sc->domain_min;
  const float *x = h->x, *v = h->v, *mass = h->mass;
  double ms = 0.0, p0 = 0.0, p1 = 0.0, p2 = 0.0, ke = 0.0, pe = 0.0;
  /* threads: a node's rank may hold tens of millions of particles, read once more per frame */
  const long n = (long)h->n;
#pragma omp parallel for schedule(static) reduction(+ : ms, p0, p1, p2, ke, pe)
  for (long i = 0; i < n; ++i) {
    const double m = mass[i], vx = v[3 * i], vy = v[3 * i + 1], vz = v[3 * i + 2];
    ms += m;
    p0 += m * vx, p1 += m * vy, p2 += m * vz;
    ke += 0.5 * m * (vx * vx + vy * vy + vz * vz);
    pe -= m * (g[0] * ((double)x[3 * i] - lo[0]) + g[1] * ((double)x[3 * i + 1] - lo[1]) +
               g[2] * ((double)x[3 * i + 2] - lo[2]));
  }
  tot[TOT_N] = (double)h->n; /* exact below 2^53 */
  tot[TOT_MASS] = ms, tot[TOT_P] = p0, tot[TOT_P + 1] = p1, tot[TOT_P + 2] = p2, tot[TOT_KE] = ke, tot[TOT_PE] = pe;
}

static int write_frame(sim *S) {
  double t0 = now();
  DR_TRY(S->be.download(S->be.state, &S->host));
  /* The totals go in one non-blocking allreduce, which travels while the frame is written (the
   * writes' collectives come in the same order on every rank) */
  double tot[TOT_COUNT], all[TOT_COUNT];
  frame_totals(S, &S->host, tot);
  MPI_Request req;
  DR_MPI(MPI_Iallreduce(tot, all, TOT_COUNT, MPI_DOUBLE, MPI_SUM, S->comm, &req));
  h5frame_meta meta = {.frame = S->st.frame, .time = S->st.time, .dx = S->sc->dx,
                       .n_materials = S->sc->n_materials, .material_names = S->mat_names,
                       .with_logjp = S->with_logjp};
  h5frame_data d = {.n = S->host.n, .position = S->host.x, .velocity = S->host.v, .id = S->host.id,
                    .material = S->host.material, .owner = S->host.owner, .logjp = S->host.logjp};
  int rc = h5frame_write(S->comm, S->out_dir, &meta, &d);
  if (rc == DR_OK && S->sc->preview) {
    preview_params pp = {.size = S->sc->preview_size, .view = S->sc->preview_view, .color = S->sc->preview_color};
    for (int a = 0; a < 3; ++a) pp.domain_min[a] = S->sc->domain_min[a], pp.domain_max[a] = S->sc->domain_max[a];
    const preview_data pd = {.n = S->host.n, .position = S->host.x, .vol0 = S->host.vol0,
                             .material = S->host.material, .owner = S->host.owner};
    rc = preview_write(S->comm, S->out_dir, S->st.frame, &pp, &pd);
  }
  DR_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE)); /* also after a failed write: no request left behind */
  DR_TRY(rc);
  const uint64_t n_all = (uint64_t)all[TOT_N];
  S->st.totals_frame = S->st.frame;
  S->st.mass = all[TOT_MASS];
  for (int a = 0; a < 3; ++a) S->st.momentum[a] = all[TOT_P + a];
  S->st.kinetic_energy = all[TOT_KE];
  S->st.potential_energy = all[TOT_PE];
  log_info("frame %d totals: mass %.6g kg  momentum (%.6g, %.6g, %.6g) kg m/s  kinetic energy %.6g J  "
           "potential energy %.6g J", S->st.frame, all[TOT_MASS], all[TOT_P], all[TOT_P + 1], all[TOT_P + 2],
           all[TOT_KE], all[TOT_PE]);
  /* a rerun of a frame (after a resume) replaces its entry */
  int i = 0;
  while (i < S->n_written && S->written[i].frame != S->st.frame) ++i;
  if (i == S->n_written) {
    xdmf_frame *w = realloc(S->written, sizeof *w * (size_t)(S->n_written + 1));
    if (!w) return dr_fail(DR_ENOMEM, "out of host memory for the frame list");
    S->written = w;
    ++S->n_written;
  }
  S->written[i] = (xdmf_frame){.frame = S->st.frame, .time = S->st.time, .n = n_all, .logjp = S->with_logjp};
  rc = S->rank == 0 ? xdmf_write(S->out_dir, S->written, S->n_written) : DR_OK;
  DR_TRY(comm_agree(S->comm, rc));
  S->st.io_seconds += now() - t0;
  return DR_OK;
}

/* Ends a phase: with profiling, waits for the backend and adds the phase's wall time. */
static int phase_done(sim *S, int phase, double *t) {
  if (!S->opt.profile) return DR_OK;
  if (S->be.finish) DR_TRY(S->be.finish(S->be.state));
  double t1 = now();
  S->st.phase_seconds[phase] += t1 - *t;
  *t = t1;
  return DR_OK;
}

/* One substep: the phases of backend.h. */
static int substep(sim *S, double dt) {
  int rebuilt = 0;
  backend *b = &S->be;
  if (b->set_time) DR_TRY(b->set_time(b->state, S->st.time));
  double t = now();
  DR_TRY(b->rebuild(b->state, 0, &rebuilt));
  DR_TRY(phase_done(S, PHASE_REBUILD, &t));
  DR_TRY(b->p2g(b->state, (float)dt));
  DR_TRY(phase_done(S, PHASE_P2G, &t));
  DR_TRY(b->grid_update(b->state, (float)dt));
  DR_TRY(phase_done(S, PHASE_GRID, &t));
  DR_TRY(b->g2p(b->state, (float)dt));
  DR_TRY(phase_done(S, PHASE_G2P, &t));
  ++S->st.steps;
  S->st.last_dt = dt;
  S->vmax_pending = 0;
  return DR_OK;
}

/* A frame on one rank, the host choosing each substep (the phases of backend.h); starts where
 * the run stands (S->step_in_frame, S->t_in_frame) and stops before a substep when a signal
 * came. */
static int advance_frame_host(sim *S, double t0, double t1) {
  double t = S->t_in_frame;
  for (int k = S->step_in_frame;; ++k) {
    DR_TRY(test_hook(S));
    float vmax = 0.0f;
    DR_TRY(step_speed(S, &vmax));
    const double dt = next_dt(S, t, t1, k, vmax);
    if (dt == 0.0) break;
    const int sig = signals_pending();
    if (sig) return stop_at(S, sig, t, k);
    /* fixed steps: the time from the step count, as the frame's end is (no sum of rounded dt) */
    S->st.time = S->substeps_fixed > 0 ? t0 + k * dt : t;
    DR_TRY(substep(S, dt));
    t = S->substeps_fixed > 0 ? t0 + (k + 1) * dt : t + dt;
  }
  return DR_OK;
}

/* The ranks' line of a frame: bytes sent between ranks, the largest share of step time spent
 * waiting on MPI (the host's), shared-block copies, particles migrated, load imbalance, and where
 * a device waits at the step vote (a GPU's step queued ahead, behind its gate), the largest share
 * of the frame's time it spent there: the host's MPI wait overlaps the device's work, this does not. */
static int log_ranks(sim *S, double seconds) {
  backend_stats bs;
  DR_TRY(S->be.stats(S->be.state, &bs));
  const double vote_wait = bs.vote_wait_s - S->vote_wait_s0;
  S->vote_wait_s0 = bs.vote_wait_s;
  double sum[4] = {S->fs.bytes, (double)S->ex.n_shared, (double)S->fs.migrated, (double)bs.n_particles}, gsum[4];
  double mx[4] = {seconds > 0 ? S->fs.wait / seconds : 0, (double)bs.n_particles, S->fs.rebalanced,
                  seconds > 0 ? vote_wait / seconds : 0},
         gmx[4];
  DR_MPI(MPI_Allreduce(sum, gsum, 4, MPI_DOUBLE, MPI_SUM, S->comm));
  DR_MPI(MPI_Allreduce(mx, gmx, 4, MPI_DOUBLE, MPI_MAX, S->comm));
  const double mean = gsum[3] / S->nranks;
  S->st.rank_bytes += gsum[0];
  S->st.migrated += (uint64_t)gsum[2];
  S->st.rebalances += gmx[2] != 0;
  S->st.mpi_wait_seconds += gmx[0] * seconds;
  S->st.vote_wait_seconds += gmx[3] * seconds;
  char device[64] = "";
  if (gmx[3] > 0) snprintf(device, sizeof device, "  device at the vote %.1f%%", 100.0 * gmx[3]);
  log_info("ranks: %d  sent %.3g MB (%.3g kB/step)  MPI wait %.1f%%%s  shared blocks %.0f  migrated %.0f  "
           "imbalance %.1f%%%s",
           S->nranks, gsum[0] / 1e6, S->st.steps ? gsum[0] / 1e3 / (double)(S->st.steps - S->fs_steps0) : 0.0,
           100.0 * gmx[0], device, gsum[1], gsum[2], mean > 0 ? 100.0 * (gmx[1] / mean - 1.0) : 0.0,
           gmx[2] != 0 ? "  (cuts moved)" : "");
  memset(&S->fs, 0, sizeof S->fs);
  S->fs_steps0 = S->st.steps;
  return DR_OK;
}

/* ---- particle sources ---------------------------------------------------------------------- */

/* Hands this rank's new particles to the backend: add_particles, or download, append and
 * set_particles where the backend has none. */
static int backend_append(sim *S, const particles *q) {
  if (q->n == 0) return DR_OK;
  if (S->be.add_particles) return S->be.add_particles(S->be.state, q);
  particles *a = &S->appended;
  DR_TRY(S->be.download(S->be.state, a));
  const size_t n = a->n;
  DR_TRY(particles_reserve(a, n + q->n));
  for (int k = 0; k < PARTICLE_ATTRS; ++k) {
    const size_t b = particle_attrs[k].bytes;
    memcpy((char *)particles_attr(a, k) + b * n, particles_attr(q, k), b * q->n);
  }
  a->n = n + q->n;
  return S->be.set_particles(S->be.state, a); /* takes a's arrays over */
}

/* The emission round at the start of frame f (t0 its start), on every rank (emit.h): all
 * ranks compute the same candidates and keep those whose block they own, so ids and counts
 * need no communication; resampling sources count the particles in their cells over all ranks
 * first (one allreduce per source). Collective; the ranks agree on the outcome. */
static int emit_frame(sim *S, int f, double t0) {
  emit_state *E = &S->em;
  const scene *sc = S->sc;
  int any = 0, resample = 0;
  for (int i = 0; i < E->n; ++i)
    if (emit_active(sc, E, i, t0)) any = 1, resample |= sc->bodies[E->body[i]].emit.mode == EMIT_RESAMPLE;
  if (!any) {
    E->frame_done = f;
    return DR_OK;
  }
  int rc = resample ? S->be.download(S->be.state, &S->host) : DR_OK;
  if (S->nranks > 1) rc = comm_agree(S->comm, rc);
  DR_TRY(rc);
  particles *q = &S->emitted;
  q->n = 0;
  uint64_t total = 0;
  double vemit = 0;
  for (int i = 0; i < E->n && rc == DR_OK; ++i) {
    if (!emit_active(sc, E, i, t0)) continue;
    const scene_body *b = &sc->bodies[E->body[i]];
    int32_t *counts = NULL;
    if (b->emit.mode == EMIT_RESAMPLE) {
      int64_t lo[3], n[3];
      const uint64_t cells = emit_cells(sc, E->body[i], lo, n);
      if (cells > INT_MAX) {
        rc = dr_fail(DR_EINPUT, "%s: bodies[%d]: a resampling source of %llu cells (at most %d)", sc->path, E->body[i],
                     (unsigned long long)cells, INT_MAX);
        dr_mark_agreed(); /* every rank computes the same */
        break;
      }
      counts = dr_calloc(cells, sizeof *counts, "resampling source cells");
      if (S->nranks > 1) rc = comm_agree(S->comm, counts ? DR_OK : DR_ENOMEM);
      else if (!counts) rc = DR_ENOMEM;
      if (rc) {
        free(counts);
        break;
      }
      emit_count_cells(sc, E->body[i], &S->host, counts);
      if (S->nranks > 1) {
        int e = MPI_Allreduce(MPI_IN_PLACE, counts, (int)cells, MPI_INT32_T, MPI_SUM, S->comm);
        if (e != MPI_SUCCESS) rc = comm_fail(e, __FILE__, __LINE__, "MPI_Allreduce(resampling source cells)");
      }
    }
    uint64_t added = 0;
    if (rc == DR_OK) rc = emit_source(sc, E, i, f, t0, counts, S->nranks > 1 ? keep_own : NULL, S, q, &added);
    free(counts);
    if (S->nranks > 1) rc = comm_agree(S->comm, rc);
    total += added;
    if (added) {
      const double *v = b->velocity;
      vemit = fmax(vemit, sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]));
    }
  }
  if (rc == DR_OK) rc = backend_append(S, q);
  if (S->nranks > 1) {
    rc = comm_agree(S->comm, rc);
    /* a rank's mapping changed: the shared blocks again (as after a redistribution) */
    if (rc == DR_OK && total > 0) rc = comm_agree(S->comm, exchange_setup(&S->ex, S->comm, &S->be));
  }
  DR_TRY(rc);
  S->st.particles += total;
  E->frame_done = f;
  /* adaptive steps: the next dt must see the new particles' speed (the backend's is from the
   * last G2P, before they existed); fixed steps do not look at speeds (G2P2G stays on) */
  if (total > 0 && S->substeps_fixed == 0) {
    float vmax = 0.0f;
    DR_TRY(step_speed(S, &vmax));
    if (vemit > vmax) {
      S->vmax_next = (float)vemit;
      S->vmax_pending = 1;
    }
  }
  return DR_OK;
}

int sim_advance_frame(sim *S) {
  const int f = S->st.frame + 1;
  const double t0 = (f - 1) * S->frame_dt, t1 = f * S->frame_dt;
  if (S->em.n > 0 && S->em.frame_done < f) DR_TRY(emit_frame(S, f, t0));
  double w0 = now();
  int rc;
  if (S->nranks > 1) {
    rc = advance_frame_ranks(S, t0, t1);
  } else if (S->be.advance_frame && !S->opt.profile) {
    /* The backend runs the frame's steps itself (cuda: without waiting for each step). It asks
     * frame_stop before queueing each step; on a signal it lets the queued steps finish and
     * says how far it got, and the run stops there, part-way into the frame, with the state of
     * that step's end (the time as the loop below sums it, the backend's last speed for the
     * next dt), as on the host's loop. A frame resumed part-way starts at its step k0 and time;
     * a first dt from the checkpoint's speed (or a source's) travels as vmax0. So a resumed run
     * takes the same path (cuda: the same kernels, G2P2G included) as the run it continues. */
    const int k0 = S->step_in_frame;
    const double t_start = k0 > 0 ? S->t_in_frame : t0;
    const int sig = signals_pending();
    if (sig) return stop_at(S, sig, t_start, k0);
    frame_plan plan = {.t0 = t0, .t1 = t1, .fixed_steps = S->substeps_fixed,
                       .dt_fixed = S->substeps_fixed > 0 ? S->frame_dt / S->substeps_fixed : 0.0,
                       .cfl_dx = S->sc->cfl * S->sc->dx, .wave_speed = S->wave_speed,
                       .k0 = k0, .t_start = t_start, .vmax0 = S->vmax_pending ? S->vmax_next : -1.0f,
                       .stop = frame_stop, .stop_ctx = S};
    frame_report rep = {0};
    rc = test_hook(S);
    if (rc == DR_OK) rc = S->be.advance_frame(S->be.state, &plan, &rep);
    S->st.steps += rep.steps;
    if (rep.steps) S->st.last_dt = rep.last_dt, S->vmax_pending = 0;
    if (rc == DR_OK && rep.stopped) {
      const int k = k0 + (int)rep.steps;
      /* fixed steps: the time from the step count, as advance_frame_host computes it */
      const double t = S->substeps_fixed > 0 ? t0 + k * plan.dt_fixed : rep.t;
      rc = stop_at(S, signals_pending(), t, k);
    }
  } else {
    rc = advance_frame_host(S, t0, t1);
  }
  S->st.step_seconds += now() - w0;
  if (rc) return rc;
  if (S->nranks > 1) DR_TRY(log_ranks(S, now() - w0));
  S->st.time = t1;
  S->st.frame = f;
  S->t_in_frame = t1;
  S->step_in_frame = 0;
  backend_stats bs;
  DR_TRY(S->be.stats(S->be.state, &bs));
  S->st.rebuilds = S->rebuilds_base + bs.rebuilds;
  if (S->opt.write_output && f % S->sc->output_every == 0) DR_TRY(write_frame(S));
  if (S->opt.write_output && S->sc->checkpoint_every > 0 && f % S->sc->checkpoint_every == 0)
    DR_TRY(write_checkpoint(S));
  return DR_OK;
}

/* A signal stopped the run (every rank knows): all write a checkpoint of where it stands. */
static int stop_with_checkpoint(sim *S) {
  const char *sig = signals_name(S->stop_signal);
  log_info("%s: stopping at frame %d, %d step(s) into frame %d (t %.4f s); writing a checkpoint", sig, S->st.frame,
           S->step_in_frame, S->st.frame + 1, S->t_in_frame);
  int rc = S->opt.write_output ? write_checkpoint(S) : DR_OK;
  if (rc) {
    char cause[1024];
    snprintf(cause, sizeof cause, "%s", dr_message());
    dr_clear();
    rc = dr_fail(rc, "stopped by %s, but the checkpoint could not be written: %s", sig, cause);
    dr_mark_agreed(); /* write_checkpoint's failures are agreed */
    return rc;
  }
  char path[4096];
  ckpt_path(S->out_dir, S->st.frame, path, sizeof path);
  rc = dr_fail(DR_ESTOPPED, "stopped by %s at frame %d + %d step(s), t %.4f s: checkpoint %s written; continue with: "
               "drift run %s --out %s --resume", sig, S->st.frame, S->step_in_frame, S->t_in_frame, path, S->sc->path,
               S->out_dir);
  dr_mark_agreed();
  return rc;
}

int sim_run(sim *S) {
  const sim_status *st = &S->st;
  double cfl_dt = S->sc->dx / S->wave_speed;
  if (S->substeps_fixed > 0 && S->frame_dt / S->substeps_fixed > cfl_dt)
    log_info("warning: the fixed step %.3g s is larger than dx / c = %.3g s (c = %.4g m/s, the fastest elastic wave); "
             "the run is likely to blow up: use a smaller time.dt or time.cfl",
             S->frame_dt / S->substeps_fixed, cfl_dt, S->wave_speed);
  log_info("drift %s: %llu particles, %s backend, %d frames at %g fps, frames in %s/", DRIFT_VERSION,
           (unsigned long long)st->particles, S->be.name, st->frames, S->sc->fps, S->out_dir);
  if (S->opt.write_output && !S->resumed) DR_TRY(write_frame(S));
  if (S->resumed && st->frame >= st->frames)
    log_info("nothing to do: the checkpoint is at frame %d, the run has %d frames (--frames N to go on)", st->frame,
             st->frames);
  double start = now();
  const int first = st->frame + 1;
  uint64_t steps_before = st->steps, rebuilds_before = st->rebuilds, steps_start = st->steps;
  for (int f = first; f <= st->frames; ++f) {
    double w = now();
    int rc = sim_advance_frame(S);
    if (rc == DR_ESTOPPED) return stop_with_checkpoint(S);
    if (rc) {
      /* Name the frame and step where physics broke down; the message of the cause follows. */
      const int agreed = dr_agreed();
      char cause[1024];
      snprintf(cause, sizeof cause, "%s", dr_message());
      dr_clear();
      rc = dr_fail(rc, "frame %d, step %llu: %s", f, (unsigned long long)st->steps + 1, cause);
      if (agreed) dr_mark_agreed();
      return rc;
    }
    double ms = 1e3 * (now() - w), elapsed = now() - start;
    double eta = elapsed / (f - first + 1) * (st->frames - f);
    log_info("frame %d/%d  t %.4f s  substeps %llu  rebuilds %llu  particles %llu  %.1f ms/frame  ETA %.0f s", f,
             st->frames, st->time, (unsigned long long)(st->steps - steps_before),
             (unsigned long long)(st->rebuilds - rebuilds_before), (unsigned long long)st->particles, ms, eta);
    steps_before = st->steps;
    rebuilds_before = st->rebuilds;
  }
  double total = now() - start;
  const uint64_t steps_run = st->steps - steps_start;
  double rate = st->step_seconds > 0 ? (double)st->particles * (double)steps_run / st->step_seconds : 0;
  log_info("done: %d frames, %llu substeps, %llu rebuilds, %llu particles in %.2f s (%.2f s stepping, %.2f s writing); "
           "%.3g particle-steps/s",
           st->frames, (unsigned long long)st->steps, (unsigned long long)st->rebuilds,
           (unsigned long long)st->particles, total, st->step_seconds, st->io_seconds, rate);
  if (S->opt.write_output) log_info("frames: %s/frame_*.h5; open %s/frames.xdmf in ParaView", S->out_dir, S->out_dir);
  return DR_OK;
}

int sim_particles(sim *S, particles *out) { return S->be.download(S->be.state, out); }
const sim_status *sim_get_status(const sim *S) { return &S->st; }

void sim_set_profile(sim *S, int on) { S->opt.profile = on != 0; }
const char *sim_backend_name(const sim *S) { return S->be.name; }

int sim_gpus(const sim *S) { return S->be.n_devices; }

void sim_destroy(sim **Sp) {
  sim *S = *Sp;
  if (!S) return;
  exchange_destroy(&S->ex);
  decomp_free(&S->dec);
  backend_destroy(&S->be);
  emit_free(&S->em);
  particles_free(&S->emitted);
  particles_free(&S->appended);
  particles_free(&S->host);
  particles_free(&S->leaving);
  particles_free(&S->arriving);
  for (int k = 0; k < 3; ++k) mig_release(S, k);
  if (S->vote_op) MPI_Op_free(&S->vote_op); /* 0: never made (vote_op) */
  if (S->vote_type) MPI_Type_free(&S->vote_type);
  free(S->written);
  free(S->mats);
  free(S->mat_names);
  free(S->body_label);
  free(S->body_names);
  free(S->colliders);
  free(S->collider_keys);
  free(S);
  *Sp = NULL;
}

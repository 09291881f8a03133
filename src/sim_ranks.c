/* sim_ranks.c - a frame on several ranks: one blocking vote a step (step_vote: dt, rebuild,
 * failure, signal, the loads), the P2G sums of shared blocks exchanged between P2G and the grid
 * update, the next step queued ahead behind the backend's gate while the vote travels, and the
 * exchange set up during the first P2G after a rebuild-mapping; and the ranks' progress line.
 *
 * Invariants: every rank casts one vote per step and takes every decision from its result alone,
 * so all ranks run the same steps; a failure or a signal on any rank stops every rank at the same
 * step; a step queued ahead runs only where the vote lets the ranks go on without a
 * rebuild-mapping (else its gate voids it, with its node masks). */
#define _POSIX_C_SOURCE 200809L
#include "sim_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "watchdog.h"
#include "error.h"
#include "log.h"
#include "sanitize.h"
#include "settings.h"
#include "signals.h"

/* The first step after a rebuild-mapping of several ranks: the new mapping's block codes come to
 * the host first (blocks(); the backend keeps them), then the step's whole P2G is queued; then
 * the ranks agree on the rebuild-mapping (redistribute's last part, S->setup_rc: where it failed
 * on any rank, *agreed says so and every rank stops), and the exchange is set up (host work and
 * messages with the neighbours, a fraction of a millisecond for tens of thousands of blocks), both while
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
 * hands it whole elements (vote_type), len of them, on whichever thread drives its progress. */
static void vote_reduce(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  dr_tsan_acquire(in); /* the buffers as comm_allreduce handed them over (sanitize.h) */
  dr_tsan_acquire(inout);
  const double *a = in;
  double *b = inout;
  for (int e = 0; e < *len; ++e, a += VOTE_N, b += VOTE_N) {
    for (int i = 0; i < VOTE_SUMS; ++i) b[i] = a[i] > b[i] ? a[i] : b[i];
    for (int i = VOTE_SUMS; i < VOTE_N; ++i) b[i] += a[i];
  }
  dr_tsan_release(inout); /* perhaps on the writer's thread: comm_allreduce's wait acquires it (sanitize.h) */
}

/* The vote's element type and reduction, made once a run. */
static int vote_op(sim *S) {
  if (S->vote_op) return DR_OK;
  /* --migrate-margin: a wider margin migrates fewer particles back and forth across a cut, a
   * narrower one keeps the band of shared blocks thinner. The ranks take the largest asked. */
  int mm = settings()->migrate_margin;
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
  if (*rc == DR_OK) DR_TRY(sim_test_hook(S));
  if (*rc == DR_OK) *rc = sim_step_speed(S, &vmax);
  v->loc[VOTE_VMAX] = vmax;
  v->loc[VOTE_REBUILD] = *rc == DR_OK && b->wants_rebuild(b->state);
  v->loc[VOTE_STATUS] = *rc;
  v->loc[VOTE_SIGNAL] = signals_pending();
  /* whole numbers (compute time in ns), whose sums a double holds exactly in any order: every
   * rank then gets the same sums, bit for bit, and takes the same decision (redistribute) */
  const double n = (double)sim_rank_count(S), ns = nearbyint(S->compute_seconds * 1e9),
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
  watchdog_where(S->st.frame, S->st.steps);
  DR_TRY(comm_allreduce(v->loc, v->glob, 1, S->vote_type, S->vote_op, S->comm, "the step vote"));
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
int sim_advance_frame_ranks(sim *S, double t0, double t1) {
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
    const double dt = sim_next_dt(S, t, t1, k, v.glob[VOTE_VMAX]);
    if (dt == 0.0) break;
    if (v.glob[VOTE_SIGNAL] != 0) return sim_stop_at(S, (int)v.glob[VOTE_SIGNAL], t, k);
    sim_progress_in_frame(S, t, (uint64_t)k);
    /* fixed steps: the time from the step count, as on one rank (advance_frame_host) */
    S->st.time = S->substeps_fixed > 0 ? t0 + k * dt : t;
    if (rc == DR_OK && b->set_time) rc = b->set_time(b->state, S->st.time);
    double ph = sim_now(); /* phase times (sim_options.profile; the CPU backend is synchronous) */
    if (v.glob[VOTE_REBUILD] != 0) DR_TRY(sim_redistribute(S, v.glob));
    S->st.phase_seconds[PHASE_REBUILD] += S->opt.profile ? sim_now() - ph : 0;
    double bytes0 = S->ex.bytes_sent, wait0 = S->ex.wait_seconds, c0 = MPI_Wtime();
    ph = sim_now();
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
    if (S->opt.profile) S->st.phase_seconds[PHASE_P2G] += sim_now() - ph, ph = sim_now();
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
    if (S->opt.profile) S->st.phase_seconds[PHASE_GRID] += sim_now() - ph, ph = sim_now(); /* the exchange included */
    log_trace("step %d: g2p", k);
    /* Fixed steps: the next step of the frame is queued behind a gate before the vote (queue_ahead),
     * so that the device runs it as soon as the ranks agree (--steps-ahead off: off) */
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
    if (S->opt.profile) S->st.phase_seconds[PHASE_G2P] += sim_now() - ph;
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

/* The ranks' line of a frame: bytes sent between ranks, the largest share of step time spent
 * waiting on MPI (the host's), shared-block copies, particles migrated, load imbalance, and where
 * a device waits at the step vote (a GPU's step queued ahead, behind its gate), the largest share
 * of the frame's time it spent there: the host's MPI wait overlaps the device's work, this does not. */
int sim_log_ranks(sim *S, double seconds) {
  backend_stats bs;
  DR_TRY(S->be.stats(S->be.state, &bs));
  const double vote_wait = bs.vote_wait_s - S->vote_wait_s0;
  S->vote_wait_s0 = bs.vote_wait_s;
  double sum[4] = {S->fs.bytes, (double)S->ex.n_shared, (double)S->fs.migrated, (double)bs.n_particles}, gsum[4];
  double mx[4] = {seconds > 0 ? S->fs.wait / seconds : 0, (double)bs.n_particles, S->fs.rebalanced,
                  seconds > 0 ? vote_wait / seconds : 0},
         gmx[4];
  DR_TRY(comm_allreduce(sum, gsum, 4, MPI_DOUBLE, MPI_SUM, S->comm, "the frame's rank figures"));
  DR_TRY(comm_allreduce(mx, gmx, 4, MPI_DOUBLE, MPI_MAX, S->comm, "the frame's rank figures"));
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

/* sim.c - the time loop (see sim.h): sim_create (sampling or a resume, the backend, the output
 * folder), sim_run, sim_advance_frame and one rank's frame loop, with the step sizes, stops and
 * the tests' hook that the ranks' loop (sim_ranks.c) shares. The other sim_*.c files hold the
 * rest (sim_internal.h lists them).
 *
 * Invariants: a frame ends exactly at f * frame_dt (fixed steps: the time from the step count,
 * never a sum of rounded dt); the run stands before a substep whenever it stops (a signal, a
 * failure), at step_in_frame / t_in_frame of frame st.frame + 1; with several ranks every rank
 * takes the same path (the same dt, the same stops) from agreed figures. */
#define _POSIX_C_SOURCE 200809L
#include "sim_internal.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm.h"
#include "watchdog.h"
#include "error.h"
#include "log.h"
#include "physics/fixed.h"
#include "physics/sparse.h"
#include "sample.h"
#include "settings.h"
#include "signals.h"

/* ---- the step loop: step sizes, stops, test hooks ------------------------------------------ */

/* The next substep's dt, or 0 when the frame is complete: a fixed step, or the adaptive
 * cfl dx / (c + max |v|) (at most dt_max, the viscous bound) with the last two substeps of a frame sharing what is left, so that no
 * substep is tiny and the frame ends exactly at t1. k: substeps done in the frame so far. */
double sim_next_dt(const sim *S, double t, double t1, int k, double vmax) {
  if (S->substeps_fixed > 0) return k < S->substeps_fixed ? S->frame_dt / S->substeps_fixed : 0.0;
  if (!(t1 - t > 1e-9 * S->frame_dt)) return 0.0;
  double dt = S->sc->cfl * S->sc->dx / (S->wave_speed + vmax);
  if (S->dt_max > 0 && dt > S->dt_max) dt = S->dt_max;
  const double rem = t1 - t;
  if (dt >= rem) dt = rem;
  else if (dt > 0.5 * rem) dt = 0.5 * rem;
  return dt;
}

/* The largest speed the next step's dt comes from: the checkpoint's right after a resume (a new
 * backend has no last step), else the backend's from its last G2P. This rank's only. */
int sim_step_speed(sim *S, float *vmax) {
  if (S->vmax_pending) {
    *vmax = S->vmax_next;
    return DR_OK;
  }
  return S->be.max_speed(S->be.state, vmax);
}

/* Parses DRIFT_TEST_HOOK=ACTION:RANK:STEP (ACTION signal, exit, fail, rebuild or stopfile): the
 * tests make one rank raise SIGTERM, exit, or fail without telling the others, before substep
 * STEP, or fail alone in its part of the first rebuild-mapping of several ranks from there on
 * (redistribute); stopfile stops the rank (SIGSTOP, as a hung node) as it comes to create the file
 * of frame STEP, when the others wait for it inside HDF5's collective calls (the watchdog's
 * regions); rows fails the rank's rows of frame STEP in the writer's job (as an I/O failure:
 * the run stops on that frame at its completion, the frame after it already begun). */
static int parse_test_hook(sim *S) {
  const char *h = settings()->test_hook;
  S->hook.rows_frame = -1;
  if (!*h) return DR_OK;
  char action[16];
  int rank = -1;
  unsigned long long step = 0;
  if (sscanf(h, "%15[a-z]:%d:%llu", action, &rank, &step) != 3 || step < 1 ||
      (strcmp(action, "signal") && strcmp(action, "exit") && strcmp(action, "fail") && strcmp(action, "rebuild") &&
       strcmp(action, "stopfile") && strcmp(action, "rows")))
    return dr_fail(DR_EINPUT, "DRIFT_TEST_HOOK='%s': expected signal|exit|fail|rebuild|stopfile|rows:RANK:STEP (a test hook)",
                   h);
  S->hook.action = !strcmp(action, "signal")   ? HOOK_SIGNAL
                   : !strcmp(action, "exit")   ? HOOK_EXIT
                   : !strcmp(action, "fail")   ? HOOK_FAIL
                   : !strcmp(action, "rebuild") ? HOOK_REBUILD
                   : !strcmp(action, "rows")    ? HOOK_ROWS
                                                : HOOK_STOPFILE;
  S->hook.rank = rank;
  S->hook.step = step;
  if (S->hook.action == HOOK_ROWS && rank == S->rank) S->hook.rows_frame = (int64_t)step;
  return DR_OK;
}

/* The tests' hook (DRIFT_TEST_HOOK), before substep done + 1 of this rank. */
static int test_hook_at(sim *S, uint64_t done) {
  if (S->hook.action == HOOK_NONE || S->hook.action == HOOK_REBUILD || S->hook.action == HOOK_STOPFILE ||
      S->hook.action == HOOK_ROWS || S->hook.rank != S->rank ||
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
int sim_test_hook(sim *S) { return test_hook_at(S, S->st.steps); }

/* The tests' hook as this rank comes to create the file of a frame (stopfile). */
void sim_test_hook_file(sim *S, int frame) {
  if (S->hook.action != HOOK_STOPFILE || S->hook.rank != S->rank || (uint64_t)frame < S->hook.step) return;
  S->hook.action = HOOK_NONE;
  raise(SIGSTOP);
}

/* The tests' hook in the writer's job of a frame (rows): its rows fail. It reads rows_frame alone,
 * which no thread writes once the writer runs (the main thread resets action). */
int sim_test_hook_rows(const sim *S, int frame, const char *path) {
  if (S->hook.rows_frame < 0 || (int64_t)frame != S->hook.rows_frame) return DR_OK;
  return dr_fail(DR_EIO, "writing %s: DRIFT_TEST_HOOK: rank %d's rows fail", path, S->rank);
}

/* A frame that takes long says how far it got, every PROGRESS_EVERY_S of wall time (rank 0's
 * line; one clock read per step otherwise; DRIFT_PROGRESS_S for the tests). t < 0: the time is
 * not known here (cuda's queue). */
#define PROGRESS_EVERY_S (settings()->progress_s > 0 ? settings()->progress_s : 30.0)
void sim_progress_in_frame(sim *S, double t, uint64_t k) {
  const double now = sim_now();
  if (now < S->progress_at) return;
  S->progress_at = now + PROGRESS_EVERY_S;
  const int f = S->st.frame + 1;
  if (t >= 0)
    log_info("frame %d: t %.6g s of %.6g s, %llu substeps so far", f, t, f * S->frame_dt, (unsigned long long)k);
  else
    log_info("frame %d: %llu substeps so far (ends at t %.6g s)", f, (unsigned long long)k, f * S->frame_dt);
}

/* frame_plan.stop, for a backend that runs a frame's steps itself (cuda): before it queues the
 * frame's step queued + 1, the tests' signal hook (as before every substep here) and a look at
 * the signal flag, so that a signal stops the run within a step as on the host's loop. */
static int frame_stop(void *ctx, uint64_t queued) {
  sim *S = ctx;
  if (S->hook.action == HOOK_SIGNAL) (void)test_hook_at(S, S->st.steps + queued); /* it only raises SIGTERM */
  sim_progress_in_frame(S, -1.0, (uint64_t)S->step_in_frame + queued);
  return signals_pending();
}

/* Remembers where a stop found the run (the next substep's start) and returns DR_ESTOPPED;
 * sim_run writes the checkpoint. */
int sim_stop_at(sim *S, int sig, double t, int k) {
  S->stop_signal = sig;
  S->t_in_frame = t;
  S->step_in_frame = k;
  S->st.time = t;
  return DR_ESTOPPED;
}

/* Deterministic mode: the fixed-point scales of physics/fixed.h, from the largest particle mass
 * (m_max: this rank's; all ranks' is taken; masses never change, so a resume finds the same) and
 * a speed bound from the scene alone, so that every run of the scene, on any number of ranks,
 * resumed or not, uses the same. */
static int deterministic_scales(sim *S, double m_max) {
  const scene *s = S->sc;
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

/* The run's particle count (st.particles) from this rank's n: every rank's sum. */
static int sim_count_all(sim *S, size_t n) {
  S->st.particles = n;
  if (S->nranks == 1) return DR_OK;
  uint64_t mine = n, all = 0;
  DR_TRY(comm_allreduce(&mine, &all, 1, MPI_UINT64_T, MPI_SUM, S->comm, "the particle count"));
  S->st.particles = all;
  return DR_OK;
}

/* Rank 0: creates the output folder and claims it (outdir.h) before any work, so that a run
 * into a folder in use, or holding another run's output, is refused at once and writes nothing. */
static int claim_out_dir(sim *S) {
  const sim_options *o = &S->opt;
  struct stat sb;
  /* --resume from the output folder itself: a missing folder is the resume's to report */
  if (o->resume && !o->resume[0] && stat(S->out_dir, &sb) != 0) return DR_OK;
  DR_TRY(sim_make_dirs(S->out_dir));
  return outdir_claim(S->out_dir, o->resume ? OUTDIR_RESUME : o->force ? OUTDIR_FORCE : OUTDIR_NEW, &S->lock);
}

int sim_create(const scene *s, const sim_options *opt, MPI_Comm comm, sim **out) {
  *out = NULL;
  if (s->n_levelset_jobs > 0) /* every rank's scene is the same: they all return here */
    return dr_fail(DR_EINTERNAL, "%s: a simulation created before its mesh level sets were built (scene_build_levelsets)",
                   s->path);
  sim *S = dr_calloc(1, sizeof *S, "simulation");
  if (!S) return DR_ENOMEM;
  S->lock.fd = -1;
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
  S->dt_max = s->cfl * scene_viscous_dt(s);
  if ((rc = watchdog_set(comm, S->nranks > 1 ? s->watchdog_s : 0))) goto fail;
  if ((rc = settings_check())) {
    dr_mark_agreed(); /* every rank reads the same environment */
    goto fail;
  }
  if ((rc = parse_test_hook(S))) {
    dr_mark_agreed(); /* every rank reads the same variable */
    goto fail;
  }
  if (opt->write_output && (rc = comm_agree(comm, S->rank == 0 ? claim_out_dir(S) : DR_OK))) goto fail;

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
                        .island_barrier = s->island_barrier, .island_reduce = s->island_reduce,
                        .storage = s->storage, .snap_host = opt->snap_host};
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
  balance_init(&S->bal, s->balance_threshold, s->balance_cost);
  /* For the tests only (test_ranks): a rebalance's fixed cost before one is measured, so that
   * the cost rule moves the cuts of a small scene on a fast device within a few frames. */
  if (settings()->from[SET_BALANCE_PRIOR_MS]) S->bal.fixed_s = 1e-3 * settings()->balance_prior_ms;
  S->inv_dx = 1.0f / (float)s->dx;
  for (int a = 0; a < 3; ++a) S->origin[a] = (float)(s->domain_min[a] - GRID_PAD * s->dx);
  if (opt->resume) {
    /* The checkpoint streams into the backend, as a sampled scene does: on several ranks each keeps
     * the rows it owns under cuts made from the checkpoint's loads (sim_checkpoint.c). */
    resume_stream *rs = NULL;
    rc = sim_resume_from_checkpoint(S, &rs);
    const particle_source src = rc == DR_OK ? sim_resume_source(rs) : (particle_source){0};
    if (rc == DR_OK) rc = sim_count_all(S, src.n);
    if (rc == DR_OK && s->deterministic) rc = comm_agree(comm, deterministic_scales(S, sim_resume_mass_max(rs)));
    if (rc) {
      sim_resume_close(&rs);
      goto fail;
    }
    rc = backend_create_from(opt->backend >= 0 ? opt->backend : s->backend, &S->prm, &src, &S->be);
    sim_resume_close(&rs);
  } else {
    /* The sampled scene streams into the backend (backend_create_from), a chunk at a time: the host
     * holds no copy of all its particles. With several ranks every rank cuts the same histogram
     * the same way, then samples only its own box. */
    sample_stream *ss = NULL;
    if (S->nranks > 1) rc = sim_initial_decomposition(S);
    if (rc == DR_OK) rc = sample_stream_open(s, S->nranks > 1 ? sim_keep_own : NULL, S, &ss);
    const particle_source src = rc == DR_OK ? sample_stream_source(ss) : (particle_source){0};
    if (rc == DR_OK) rc = sim_count_all(S, src.n);
    /* the masses come from the bodies: the scene's largest on every rank */
    if (rc == DR_OK && s->deterministic) rc = comm_agree(comm, deterministic_scales(S, sample_stream_mass_max(ss)));
    if (rc) {
      sample_stream_close(&ss);
      goto fail;
    }
    rc = backend_create_from(opt->backend >= 0 ? opt->backend : s->backend, &S->prm, &src, &S->be);
    sample_stream_close(&ss);
    /* adaptive steps: the first dt sees the bodies' initial speed (the backend's speed is its last
     * G2P's, and none has run), as scene_initial_dt and drift check do */
    const double v0 = scene_bodies_speed(s, 0);
    if (S->substeps_fixed == 0 && v0 > 0) S->vmax_next = (float)v0, S->vmax_pending = 1;
  }
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
    if (rc == DR_OK) rc = comm_agree(comm, sim_reserve_migration(S));
    if (rc == DR_OK && S->rank == 0)
      log_info("rank exchange: the sums of the shared nodes both ranks reach (node exchange) through %s",
               S->ex.device_sums ? "device memory (CUDA-aware MPI)" : S->be.alloc_sums ? "pinned host memory" : "host memory");
  }
  /* a checkpoint written after fused G2P2G steps: its particles hold the next return mapping */
  if (rc == DR_OK && S->resume_projected) rc = comm_agree(comm, S->be.set_projected(S->be.state));
  /* compact storage's P2G makes the last G2P's update of F with its dt (physics/compact.h) */
  if (rc == DR_OK && S->resumed) rc = comm_agree(comm, S->be.set_last_dt(S->be.state, (float)S->st.last_dt));
  if (rc) goto fail;
  /* the rebuild counter goes on from the checkpoint's */
  backend_stats bs;
  if ((rc = S->be.stats(S->be.state, &bs))) goto fail;
  S->rebuilds_base = S->resumed ? S->st.rebuilds - bs.rebuilds : 0;
  S->st.rebuilds = S->rebuilds_base + bs.rebuilds;
  if (!S->resumed) S->t_in_frame = 0.0;
  sim_output_init(S);
  if (opt->write_output) {
    rc = S->rank == 0 ? sim_make_dirs(S->out_dir) : DR_OK;
    if (rc == DR_OK && S->resumed) rc = sim_list_earlier_frames(S);
    rc = comm_agree(comm, rc);
    if (rc == DR_OK) rc = comm_agree(comm, writer_create(comm, &S->writer));
    if (rc) goto fail;
  }
  *out = S;
  return DR_OK;
fail:
  sim_destroy(&S);
  return rc;
}

/* Ends a phase: with profiling, waits for the backend and adds the phase's wall time. */
static int phase_done(sim *S, int phase, double *t) {
  if (!S->opt.profile) return DR_OK;
  if (S->be.finish) DR_TRY(S->be.finish(S->be.state));
  double t1 = sim_now();
  S->st.phase_seconds[phase] += t1 - *t;
  *t = t1;
  return DR_OK;
}

/* One substep: the phases of backend.h. */
static int substep(sim *S, double dt) {
  int rebuilt = 0;
  backend *b = &S->be;
  if (b->set_time) DR_TRY(b->set_time(b->state, S->st.time));
  double t = sim_now();
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
    DR_TRY(sim_test_hook(S));
    float vmax = 0.0f;
    DR_TRY(sim_step_speed(S, &vmax));
    const double dt = sim_next_dt(S, t, t1, k, vmax);
    if (dt == 0.0) break;
    const int sig = signals_pending();
    if (sig) return sim_stop_at(S, sig, t, k);
    sim_progress_in_frame(S, t, (uint64_t)k);
    /* fixed steps: the time from the step count, as the frame's end is (no sum of rounded dt) */
    S->st.time = S->substeps_fixed > 0 ? t0 + k * dt : t;
    DR_TRY(substep(S, dt));
    t = S->substeps_fixed > 0 ? t0 + (k + 1) * dt : t + dt;
  }
  return DR_OK;
}

int sim_advance_frame(sim *S) {
  const int f = S->st.frame + 1;
  const double t0 = (f - 1) * S->frame_dt, t1 = f * S->frame_dt;
  if (S->em.n > 0 && S->em.frame_done < f) DR_TRY(sim_emit_frame(S, f, t0));
  double w0 = sim_now();
  S->progress_at = w0 + PROGRESS_EVERY_S;
  int rc;
  if (S->nranks > 1) {
    rc = sim_advance_frame_ranks(S, t0, t1);
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
    if (sig) return sim_stop_at(S, sig, t_start, k0);
    frame_plan plan = {.t0 = t0, .t1 = t1, .fixed_steps = S->substeps_fixed,
                       .dt_fixed = S->substeps_fixed > 0 ? S->frame_dt / S->substeps_fixed : 0.0,
                       .cfl_dx = S->sc->cfl * S->sc->dx, .wave_speed = S->wave_speed, .dt_max = S->dt_max,
                       .k0 = k0, .t_start = t_start, .vmax0 = S->vmax_pending ? S->vmax_next : -1.0f,
                       .stop = frame_stop, .stop_ctx = S};
    frame_report rep = {0};
    rc = sim_test_hook(S);
    if (rc == DR_OK) rc = S->be.advance_frame(S->be.state, &plan, &rep);
    S->st.steps += rep.steps;
    if (rep.steps) S->st.last_dt = rep.last_dt, S->vmax_pending = 0;
    if (rc == DR_OK && rep.stopped) {
      const int k = k0 + (int)rep.steps;
      /* fixed steps: the time from the step count, as advance_frame_host computes it */
      const double t = S->substeps_fixed > 0 ? t0 + k * plan.dt_fixed : rep.t;
      rc = sim_stop_at(S, signals_pending(), t, k);
    }
  } else {
    rc = advance_frame_host(S, t0, t1);
  }
  S->st.step_seconds += sim_now() - w0;
  if (rc) return rc;
  watchdog_frame(sim_now() - w0); /* slow frames raise the watchdog's limit (watchdog.h) */
  if (S->nranks > 1) DR_TRY(sim_log_ranks(S, sim_now() - w0));
  S->st.time = t1;
  S->st.frame = f;
  S->t_in_frame = t1;
  S->step_in_frame = 0;
  backend_stats bs;
  DR_TRY(S->be.stats(S->be.state, &bs));
  S->st.rebuilds = S->rebuilds_base + bs.rebuilds;
  if (S->opt.write_output && f % S->sc->output_every == 0) DR_TRY(sim_write_frame(S));
  if (sim_checkpoint_due(S, f)) DR_TRY(sim_write_checkpoint(S));
  return DR_OK;
}

int sim_run(sim *S) {
  const sim_status *st = &S->st;
  double cfl_dt = S->sc->dx / S->wave_speed;
  if (S->substeps_fixed > 0 && S->frame_dt / S->substeps_fixed > cfl_dt)
    log_info("warning: the fixed step %.3g s is larger than dx / c = %.3g s (c = %.4g m/s, the fastest elastic wave); "
             "the run is likely to blow up: use a smaller time.dt or time.cfl",
             S->frame_dt / S->substeps_fixed, cfl_dt, S->wave_speed);
  const double visc_dt = scene_viscous_dt(S->sc);
  if (S->substeps_fixed > 0 && visc_dt > 0 && S->frame_dt / S->substeps_fixed > visc_dt)
    log_info("warning: the fixed step %.3g s is larger than the viscous bound density dx^2 / (6 viscosity) = %.3g s; "
             "the run is likely to blow up: use a smaller time.dt or time.cfl", S->frame_dt / S->substeps_fixed, visc_dt);
  log_info("drift %s: %llu particles, %s backend, %d frames at %g fps, frames in %s/", DRIFT_VERSION,
           (unsigned long long)st->particles, S->be.name, st->frames, S->sc->fps, S->out_dir);
  if (S->opt.write_output && !S->resumed) DR_TRY(sim_write_frame(S));
  if (S->resumed && st->frame >= st->frames)
    log_info("nothing to do: the checkpoint is at frame %d, the run has %d frames (--frames N to go on)", st->frame,
             st->frames);
  double start = sim_now();
  const int first = st->frame + 1;
  uint64_t steps_before = st->steps, rebuilds_before = st->rebuilds, steps_start = st->steps;
  for (int f = first; f <= st->frames; ++f) {
    double w = sim_now();
    int rc = sim_advance_frame(S);
    if (rc == DR_ESTOPPED) return sim_stop_with_checkpoint(S);
    if (rc && !S->output_failed) {
      /* Name the frame and step where physics broke down; the message of the cause follows. */
      const int agreed = dr_agreed();
      char cause[1024];
      snprintf(cause, sizeof cause, "%s", dr_message());
      dr_clear();
      /* every rank stops here (agreed, or the only rank): the frames and the checkpoint in
       * flight, captured before the failure, are completed (a checkpoint is published by the main
       * thread, h5rows.h), so that the run can be resumed from the last checkpoint (best effort:
       * the failure's message wins) */
      if ((agreed || S->nranks == 1) && S->opt.write_output) {
        (void)sim_flush(S);
        dr_clear();
      }
      rc = dr_fail(rc, "frame %d, step %llu: %s", f, (unsigned long long)st->steps + 1, cause);
      if (agreed) dr_mark_agreed();
      return rc;
    }
    if (rc) return rc; /* the writer's: its message names the frame or checkpoint */
    double ms = 1e3 * (sim_now() - w), elapsed = sim_now() - start;
    double eta = elapsed / (f - first + 1) * (st->frames - f);
    log_info("frame %d/%d  t %.4f s  substeps %llu  rebuilds %llu  particles %llu  %.1f ms/frame  ETA %.0f s", f,
             st->frames, st->time, (unsigned long long)(st->steps - steps_before),
             (unsigned long long)(st->rebuilds - rebuilds_before), (unsigned long long)st->particles, ms, eta);
    steps_before = st->steps;
    rebuilds_before = st->rebuilds;
  }
  DR_TRY(sim_flush(S));
  double total = sim_now() - start;
  const uint64_t steps_run = st->steps - steps_start;
  double rate = st->step_seconds > 0 ? (double)st->particles * (double)steps_run / st->step_seconds : 0;
  log_info("done: %d frames, %llu substeps, %llu rebuilds, %llu particles in %.2f s (%.2f s stepping, %.2f s "
           "capturing and waiting for the writer; it wrote for %.2f s%s); %.3g particle-steps/s",
           st->frames, (unsigned long long)st->steps, (unsigned long long)st->rebuilds,
           (unsigned long long)st->particles, total, st->step_seconds, st->io_seconds, st->write_seconds,
           S->writer && writer_threaded(S->writer) ? " behind the steps" : "", rate);
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
  sim_output_destroy(S); /* first: its jobs read the state below */
  (void)watchdog_set(MPI_COMM_NULL, 0);
  outdir_release(&S->lock);
  exchange_destroy(&S->ex);
  decomp_free(&S->dec);
  backend_destroy(&S->be);
  emit_free(&S->em);
  particles_free(&S->emitted);
  particles_free(&S->appended);
  particles_free(&S->host);
  particles_free(&S->leaving);
  particles_free(&S->arriving);
  for (int k = 0; k < 3; ++k) sim_mig_release(S, k);
  if (S->vote_op) MPI_Op_free(&S->vote_op); /* 0: never made (vote_op) */
  if (S->vote_type) MPI_Type_free(&S->vote_type);
  free(S->written);
  xdmf_list_free(&S->xdmf);
  free(S->mats);
  free(S->mat_names);
  free(S->body_label);
  free(S->body_names);
  free(S->colliders);
  free(S->collider_keys);
  free(S);
  *Sp = NULL;
}

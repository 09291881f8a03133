/* sim.c - the time loop (see sim.h). */
#define _POSIX_C_SOURCE 200809L
#include "sim.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "comm.h"
#include "error.h"
#include "h5frame.h"
#include "log.h"
#include "sample.h"
#include "xdmf.h"

struct sim {
  const scene *sc;
  MPI_Comm comm;
  int rank, nranks;
  sim_options opt;
  const char *out_dir;
  material_params *mats;
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
  if (S->nranks > 1) {
    rc = dr_fail(DR_EINPUT, "this build runs one rank only (the exchange between ranks is not in it yet); started with %d ranks", S->nranks);
    goto fail;
  }
  S->out_dir = opt->out_dir ? opt->out_dir : s->output_dir;
  S->st.frames = opt->frames > 0 ? opt->frames : s->frames;
  S->frame_dt = 1.0 / s->fps;
  if (s->dt > 0) S->substeps_fixed = (int)ceil(S->frame_dt / s->dt - 1e-9);
  S->wave_speed = scene_wave_speed(s);

  S->mats = dr_malloc(sizeof(material_params) * (size_t)s->n_materials, "materials");
  S->mat_names = dr_malloc(sizeof(char *) * (size_t)s->n_materials, "materials");
  if (!S->mats || !S->mat_names) {
    rc = DR_ENOMEM;
    goto fail;
  }
  for (int m = 0; m < s->n_materials; ++m) {
    S->mats[m] = s->materials[m].params;
    S->mat_names[m] = s->materials[m].name;
  }
  S->prm = (sim_params){.dx = (float)s->dx, .boundary = s->boundary, .friction = (float)s->friction,
                        .n_materials = s->n_materials, .materials = S->mats,
                        .material_names = S->mat_names, .rank = S->rank,
                        .gpus = s->gpus_per_rank, .g2p2g_below = s->g2p2g_below};
  for (int a = 0; a < 3; ++a) {
    S->prm.domain_min[a] = s->domain_min[a];
    S->prm.domain_max[a] = s->domain_max[a];
    S->prm.gravity[a] = (float)s->gravity[a];
  }

  particles p = {0};
  rc = sample_scene(s, &p);
  if (rc) {
    particles_free(&p);
    goto fail;
  }
  S->st.particles = p.n;
  rc = backend_create(opt->backend >= 0 ? opt->backend : s->backend, &S->prm, &p, &S->be);
  particles_free(&p);
  if (rc) goto fail;
  if (opt->write_output) {
    rc = S->rank == 0 ? make_dirs(S->out_dir) : DR_OK;
    rc = comm_agree(comm, rc);
    if (rc) goto fail;
  }
  *out = S;
  return DR_OK;
fail:
  sim_destroy(&S);
  return rc;
}

static int write_frame(sim *S) {
  double t0 = now();
  DR_TRY(S->be.download(S->be.state, &S->host));
  h5frame_meta meta = {.frame = S->st.frame, .time = S->st.time, .dx = S->sc->dx,
                       .n_materials = S->sc->n_materials, .material_names = S->mat_names};
  h5frame_data d = {.n = S->host.n, .position = S->host.x, .velocity = S->host.v, .id = S->host.id,
                    .material = S->host.material, .owner = S->host.owner};
  DR_TRY(h5frame_write(S->comm, S->out_dir, &meta, &d));
  uint64_t n_local = S->host.n, n_all = 0;
  DR_MPI(MPI_Allreduce(&n_local, &n_all, 1, MPI_UINT64_T, MPI_SUM, S->comm));
  xdmf_frame *w = realloc(S->written, sizeof *w * (size_t)(S->n_written + 1));
  if (!w) return dr_fail(DR_ENOMEM, "out of host memory for the frame list");
  S->written = w;
  S->written[S->n_written++] = (xdmf_frame){.frame = S->st.frame, .time = S->st.time, .n = n_all};
  int rc = S->rank == 0 ? xdmf_write(S->out_dir, S->written, S->n_written) : DR_OK;
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
  return DR_OK;
}

int sim_advance_frame(sim *S) {
  const int f = S->st.frame + 1;
  const double t0 = (f - 1) * S->frame_dt, t1 = f * S->frame_dt;
  double w0 = now();
  if (S->be.advance_frame && !S->opt.profile) {
    /* The backend runs the frame's steps itself (cuda: without waiting for each step). */
    frame_plan plan = {.t0 = t0, .t1 = t1, .fixed_steps = S->substeps_fixed,
                       .cfl_dx = S->sc->cfl * S->sc->dx, .wave_speed = S->wave_speed};
    frame_report rep = {0};
    int rc = S->be.advance_frame(S->be.state, &plan, &rep);
    S->st.steps += rep.steps;
    if (rep.steps) S->st.last_dt = rep.last_dt;
    if (rc) return rc;
  } else if (S->substeps_fixed > 0) {
    double dt = S->frame_dt / S->substeps_fixed;
    for (int k = 0; k < S->substeps_fixed; ++k) {
      S->st.time = t0 + k * dt;
      int rc = substep(S, dt);
      if (rc) return rc;
    }
  } else {
    /* Adaptive: dt = cfl dx / (c + max |v|); the last two substeps of a frame share what is
     * left, so no substep is tiny and the frame ends exactly at t1. */
    double t = t0;
    while (t1 - t > 1e-9 * S->frame_dt) {
      float vmax = 0.0f;
      DR_TRY(S->be.max_speed(S->be.state, &vmax));
      double dt = S->sc->cfl * S->sc->dx / (S->wave_speed + (double)vmax);
      double rem = t1 - t;
      if (dt >= rem) dt = rem;
      else if (dt > 0.5 * rem) dt = 0.5 * rem;
      S->st.time = t;
      int rc = substep(S, dt);
      if (rc) return rc;
      t += dt;
    }
  }
  S->st.step_seconds += now() - w0;
  S->st.time = t1;
  S->st.frame = f;
  backend_stats bs;
  DR_TRY(S->be.stats(S->be.state, &bs));
  S->st.rebuilds = bs.rebuilds;
  if (S->opt.write_output && f % S->sc->output_every == 0) DR_TRY(write_frame(S));
  return DR_OK;
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
  if (S->opt.write_output) DR_TRY(write_frame(S));
  double start = now();
  uint64_t steps_before = 0, rebuilds_before = st->rebuilds;
  for (int f = 1; f <= st->frames; ++f) {
    double w = now();
    int rc = sim_advance_frame(S);
    if (rc) {
      /* Name the frame and step where physics broke down; the message of the cause follows. */
      char cause[1024];
      snprintf(cause, sizeof cause, "%s", dr_message());
      dr_clear();
      return dr_fail(rc, "frame %d, step %llu: %s", f, (unsigned long long)st->steps + 1, cause);
    }
    double ms = 1e3 * (now() - w), elapsed = now() - start;
    double eta = elapsed / f * (st->frames - f);
    log_info("frame %d/%d  t %.4f s  substeps %llu  rebuilds %llu  particles %llu  %.1f ms/frame  ETA %.0f s", f,
             st->frames, st->time, (unsigned long long)(st->steps - steps_before),
             (unsigned long long)(st->rebuilds - rebuilds_before), (unsigned long long)st->particles, ms, eta);
    steps_before = st->steps;
    rebuilds_before = st->rebuilds;
  }
  double total = now() - start;
  double rate = st->step_seconds > 0 ? (double)st->particles * (double)st->steps / st->step_seconds : 0;
  log_info("done: %d frames, %llu substeps, %llu rebuilds, %llu particles in %.2f s (%.2f s stepping, %.2f s writing); "
           "%.3g particle-steps/s",
           st->frames, (unsigned long long)st->steps, (unsigned long long)st->rebuilds,
           (unsigned long long)st->particles, total, st->step_seconds, st->io_seconds, rate);
  if (S->opt.write_output) log_info("frames: %s/frame_*.h5; open %s/frames.xdmf in ParaView", S->out_dir, S->out_dir);
  return DR_OK;
}

int sim_particles(sim *S, particles *out) { return S->be.download(S->be.state, out); }
const sim_status *sim_get_status(const sim *S) { return &S->st; }
const char *sim_backend_name(const sim *S) { return S->be.name; }

void sim_destroy(sim **Sp) {
  sim *S = *Sp;
  if (!S) return;
  backend_destroy(&S->be);
  particles_free(&S->host);
  free(S->written);
  free(S->mats);
  free(S->mat_names);
  free(S);
  *Sp = NULL;
}

/* sim_output.c - what the run writes and reads back: frames (HDF5, a preview, frames.xdmf) with
 * their totals, checkpoints, the resume from one, the list of frames written before a resume, and
 * the checkpoint a signal's stop writes. docs/output.md describes the files.
 *
 * Invariants: writing is collective, every rank calls these in the same order, and their
 * failures are agreed (comm_agree); a checkpoint holds the state before a substep (the end of
 * frame st.frame, or part-way into the next after a stop) and resuming from it takes the run on
 * the same path; frames.xdmf lists each frame once (a frame written again replaces its entry). */
#define _POSIX_C_SOURCE 200809L
#include "sim_internal.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "comm.h"
#include "watchdog.h"
#include "error.h"
#include "h5frame.h"
#include "log.h"
#include "memsizes.h"
#include "memtally.h"
#include "physics/constitutive.h"
#include "preview.h"
#include "settings.h"
#include "signals.h"
#include "writer.h"

static int complete_frame(sim *S);

/* mkdir -p; the message names the folder. */
int sim_make_dirs(const char *path) {
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

/* ---- frames and checkpoints, written behind the compute (writer.h) ----------------------- */

/* A checkpoint's job, on the writer's thread: one chunk of this rank's rows (ckpt_put_rows: no
 * MPI, no HDF5), and with the last chunk the file synced (ckpt_put_finish). The jobs' status is
 * the slot's (put_rc: the first failure, after which the later chunks are not written), agreed by
 * the main thread at the checkpoint's completion (ckpt_done), as a frame's is. */
static int checkpoint_job(MPI_Comm comm, void *ctx) {
  (void)comm;
  ckpt_chunk *k = ctx;
  ckpt_slot *c = k->c;
  int rc = c->put_rc;
  if (rc == DR_OK && k->p.n > 0) rc = ckpt_put_rows(&c->file, k->first, &k->p);
  if (k->last) rc = ckpt_put_finish(&c->file, rc);
  if (rc && !c->put_rc) { /* its message, for ckpt_done (this thread's record is the writer's) */
    c->put_rc = rc;
    snprintf(c->put_msg, sizeof c->put_msg, "%s", dr_message());
    dr_clear();
  }
  return DR_OK;
}

/* Completes the checkpoint in flight (collective): waits for its jobs, agrees on every rank's
 * rows, and publishes it (ckpt_end: the checksum written, renamed, the folder synced, old ones
 * pruned) or removes it. */
static int ckpt_done(sim *S) {
  ckpt_slot *c = &S->ckpt;
  if (!c->queued) return DR_OK;
  c->queued = 0;
  c->chunk[0].queued = c->chunk[1].queued = 0; /* the jobs run in order: the last one is the last to run */
  DR_TRY(sim_output_failed(S, writer_wait(S->writer, c->ticket)));
  if (c->put_rc) dr_fail(c->put_rc, "%s", c->put_msg);
  watchdog_enter("the checkpoint's file, completed by all ranks together");
  const int rc = ckpt_end(S->comm, &c->file, c->put_rc);
  watchdog_leave();
  DR_TRY(sim_output_failed(S, rc));
  log_info("checkpoint %s (frame %d%s, t %.4f s)", c->file.rows.final, c->st.frame,
           c->st.step_in_frame ? " and part of the next" : "", c->st.time);
  return DR_OK;
}

/* A chunk buffer's arrays: those of the attributes in mask, cap rows each, from the backend's
 * pinned memory where it has it (a GPU copies there without a bounce), counted as transfer memory
 * into *tallied; chunk_free gives back every array p holds (its caller the count). */
static int chunk_alloc(sim *S, particles *p, unsigned mask, size_t cap, const char *what, size_t *tallied) {
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    if (!(mask >> a & 1u)) continue;
    void **arr = (void **)((char *)p + particle_attrs[a].offset);
    const size_t bytes = cap * particle_attrs[a].bytes;
    if (S->be.alloc_sums) DR_TRY(S->be.alloc_sums(S->be.state, bytes, 0, arr));
    else if (!(*arr = dr_malloc(bytes, what))) return DR_ENOMEM;
    *tallied += bytes;
    memtally_count(MEMTALLY_HOST, MT_TRANSFER, (int64_t)bytes);
  }
  return DR_OK;
}

static void chunk_free(sim *S, particles *p) {
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    void **arr = (void **)((char *)p + particle_attrs[a].offset);
    if (!*arr) continue;
    if (S->be.free_sums) S->be.free_sums(*arr, 0);
    else free(*arr);
    *arr = NULL;
  }
}

static void ckpt_release(sim *S) {
  ckpt_slot *c = &S->ckpt;
  for (int b = 0; b < 2; ++b) chunk_free(S, &c->chunk[b].p);
  memtally_count(MEMTALLY_HOST, MT_TRANSFER, -(int64_t)c->tallied);
  c->tallied = 0;
  c->cap = 0;
  c->buffers = 0;
}

/* Room in the slot's chunk buffers for a checkpoint of n particles: every attribute of
 * mem_ckpt_rows(n, MEM_CKPT_CHUNK) rows (DRIFT_FRAME_CHUNK's fewer where a test sets it), in one
 * buffer where they are one chunk, else two (mem_ckpt_buffers); the backend's pinned memory where
 * it has it, kept checkpoint after checkpoint (sized anew where particle sources outgrow it: a
 * checkpoint is rare, and no headroom keeps a scene of one chunk at a copy's 124 B a particle). */
static int ckpt_reserve(sim *S, size_t n) {
  ckpt_slot *c = &S->ckpt;
  const size_t set = settings()->frame_chunk > 0 ? (size_t)settings()->frame_chunk : MEM_CKPT_CHUNK;
  const size_t chunk = set < MEM_CKPT_CHUNK ? set : MEM_CKPT_CHUNK;
  const size_t cap = mem_ckpt_rows(n, chunk);
  const int buffers = mem_ckpt_buffers(n, chunk);
  if (cap <= c->cap && buffers <= c->buffers) return DR_OK;
  ckpt_release(S);
  c->buffers = buffers;
  for (int b = 0; b < buffers; ++b)
    DR_TRY(chunk_alloc(S, &c->chunk[b].p, (1u << PARTICLE_ATTRS) - 1u, cap, "a checkpoint's chunk", &c->tallied));
  c->cap = cap;
  return DR_OK;
}

/* This rank's n rows of the checkpoint begun in c->file, from the backend to the writer a chunk
 * at a time: chunk k is fetched (main thread) into one buffer while the writer writes chunk k - 1
 * from the other; before a buffer is fetched into again, the job that wrote it is waited for.
 * Returns with every chunk fetched and the last one's job queued (c->ticket). A checkpoint is
 * rare: the steps wait for its fetches (fetch_rows reads the particles themselves, which must not
 * move meanwhile; a copy of them on the device would take 124 B a particle, more than the
 * device's plan holds), and overlap only the writing of the last chunk and the sync. Local; the
 * status is this rank's (a fetch's or the writer's). */
static int ckpt_fetch(sim *S, size_t n) {
  if (n > S->ckpt.cap && S->ckpt.buffers < 2)
    return dr_fail(DR_EINTERNAL, "a checkpoint of %zu particles in chunks of %zu with one buffer", n, S->ckpt.cap);
  ckpt_slot *c = &S->ckpt;
  size_t first = 0;
  int b = 0;
  do {
    ckpt_chunk *k = &c->chunk[b];
    if (k->queued) {
      k->queued = 0;
      DR_TRY(writer_wait(S->writer, k->ticket));
    }
    const size_t count = n - first < c->cap ? n - first : c->cap;
    k->p.n = 0;
    if (count > 0) DR_TRY(S->be.fetch_rows(S->be.state, first, count, &k->p));
    if (k->p.n != count)
      return dr_fail(DR_EINTERNAL, "%s backend: fetch_rows gave %zu rows where %zu were asked", S->be.name, k->p.n,
                     count);
    k->c = c;
    k->first = first;
    k->last = first + count == n;
    DR_TRY(writer_submit(S->writer, checkpoint_job, k, &k->ticket));
    k->queued = 1;
    c->ticket = k->ticket;
    first += count;
    b ^= 1;
  } while (first < n);
  return DR_OK;
}

/* Collective. Begins DIR/checkpoint_NNNNN.h5 of the state the run stands at (the end of frame
 * st.frame, or part-way into the next one after a stop), and hands its rows to the writer as they
 * are fetched from the backend (ckpt_fetch); returns once the last is fetched, before they are
 * all written. The previous checkpoint, whose buffers this one reuses, is completed first. */
int sim_write_checkpoint(sim *S) {
  const double t0 = sim_now();
  /* the frames in flight complete first: a checkpoint on the disk means every frame up to its
   * own is too (a resume from it writes the frames after it only) */
  DR_TRY(complete_frame(S));
  DR_TRY(ckpt_done(S));
  ckpt_slot *c = &S->ckpt;
  backend_stats bs;
  int rc = comm_agree(S->comm, S->be.stats(S->be.state, &bs));
  if (rc == DR_OK && !S->be.fetch_rows)
    rc = dr_fail(DR_EINTERNAL, "%s backend: no fetch_rows, which checkpoints need", S->be.name);
  if (rc == DR_OK) rc = ckpt_reserve(S, (size_t)bs.n_particles);
  rc = comm_agree(S->comm, rc);
  float vmax = 0.0f, vall = 0.0f;
  if (rc == DR_OK) rc = comm_agree(S->comm, sim_step_speed(S, &vmax));
  DR_TRY(rc);
  DR_TRY(comm_allreduce(&vmax, &vall, 1, MPI_FLOAT, MPI_MAX, S->comm, "the checkpoint's speed"));
  /* G2P2G already applied the next step's return mapping (one rank only: several ranks step
   * phase by phase, never fused, so every rank says 0 there) */
  int mine = S->be.projected ? S->be.projected(S->be.state) : 0, projected = 0;
  DR_TRY(comm_allreduce(&mine, &projected, 1, MPI_INT, MPI_MAX, S->comm, "the checkpoint's step state"));
  S->st.rebuilds = S->rebuilds_base + bs.rebuilds;
  /* the sources' counts go on changing: the checkpoint holds a copy */
  if (S->em.n > 0) {
    uint64_t *e = realloc(c->emitted, sizeof *e * (size_t)S->em.n);
    if (!e) return dr_fail(DR_ENOMEM, "out of host memory for the checkpoint's source counts");
    c->emitted = e;
    memcpy(e, S->em.emitted, sizeof *e * (size_t)S->em.n);
  }
  c->S = S;
  c->st = (ckpt_state){.frame = S->st.frame, .step_in_frame = S->step_in_frame, .time = S->t_in_frame,
                       .steps = S->st.steps, .rebuilds = S->st.rebuilds, .last_dt = S->st.last_dt, .vmax = vall,
                       .scene_hash = S->sc->hash, .emit_frame = S->em.frame_done, .n_sources = S->em.n,
                       .emitted = c->emitted, .projected = projected};
  const ckpt_scene sc = {.text = S->sc->text, .len = S->sc->text_len, .path = S->sc->path};
  const size_t n = (size_t)bs.n_particles;
  watchdog_enter("the checkpoint's file, created by all ranks together");
  rc = ckpt_begin(S->comm, S->out_dir, &c->st, &sc, n, S->sc->checkpoint_keep, &c->file);
  watchdog_leave();
  if (rc) {
    dr_mark_agreed(); /* ckpt_begin's failures are agreed */
    return sim_output_failed(S, rc);
  }
  c->put_rc = DR_OK;
  c->put_msg[0] = 0;
  const double t1 = sim_now();
  rc = comm_agree(S->comm, ckpt_fetch(S, n));
  if (rc == DR_OK) {
    log_trace("checkpoint %d: %zu particles fetched in chunks of %zu: %.2f ms", c->st.frame, n, c->cap,
              1e3 * (sim_now() - t1));
    c->queued = 1;
    S->st.io_seconds += sim_now() - t0;
    return DR_OK;
  }
  /* a rank's fetch or writer failed (every rank knows): the jobs queued end, and the file goes */
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", dr_message());
  for (int b = 0; b < 2; ++b)
    if (c->chunk[b].queued) {
      c->chunk[b].queued = 0;
      (void)writer_wait(S->writer, c->chunk[b].ticket);
    }
  watchdog_enter("the checkpoint's file, removed by all ranks together");
  (void)ckpt_end(S->comm, &c->file, rc); /* removes it, every rank told */
  watchdog_leave();
  dr_clear();
  dr_fail(rc, "%s", msg);
  dr_mark_agreed();
  return sim_output_failed(S, rc);
}

/* The checkpoint's materials (lo .. hi over all its particles; lo > hi: none) must be the
 * scene's (only --force lets another scene through). */
static int check_materials(const sim *S, int32_t lo, int32_t hi) {
  if (lo > hi || (lo >= 0 && hi < S->sc->n_materials)) return DR_OK;
  return dr_fail(DR_EINPUT, "checkpoint %s: particles of material %d, but %s defines %d material(s)", S->resumed_from,
                 hi >= S->sc->n_materials ? (int)hi : (int)lo, S->sc->path, S->sc->n_materials);
}

/* Continues from a checkpoint instead of sampling the scene. Reads it (the file given, or the
 * newest whole one in a folder; default the output folder), refuses one from another scene
 * unless --force, and restores the time, the step counts and the step-size controller.
 * One rank: *reader streams the particles (ckpt_open: checked whole first, then read a chunk of
 * MEM_CREATE_CHUNK rows at a time into the backend, backend_create_from), *p stays empty.
 * Several ranks: *reader is NULL and *p holds the particles this rank owns: every rank reads an
 * even slice, the cuts are made from all slices (rebalance, as when the load drifts) and the
 * particles move to their owners (migrate, as at a rebuild-mapping), so no rank holds the whole
 * scene, but each holds its slice (124 B a particle, n / R of them) and then its own particles
 * whole: the rebalance needs every slice's load before any particle moves, and the migration
 * sends whole particles between ranks, which a stream of chunks would have to repeat chunk by
 * chunk with every rank in step. */
int sim_resume_from_checkpoint(sim *S, particles *p, ckpt_reader **reader) {
  const char *where = S->opt.resume && S->opt.resume[0] ? S->opt.resume : S->out_dir;
  ckpt_state st = {0};
  particles slice = {0};
  int kind = 0, rc = DR_OK; /* 0 missing, 1 a folder, 2 something else */
  *reader = NULL;
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
  const int stream = S->nranks == 1;
  if (kind == 1) {
    rc = stream ? ckpt_open_latest(where, MEM_CREATE_CHUNK, &st, reader, S->resumed_from, sizeof S->resumed_from)
                : ckpt_read_latest(S->comm, where, &st, &slice, S->resumed_from, sizeof S->resumed_from);
  } else {
    snprintf(S->resumed_from, sizeof S->resumed_from, "%s", where);
    rc = stream ? ckpt_open(where, MEM_CREATE_CHUNK, &st, reader) : ckpt_read(S->comm, where, &st, &slice);
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
  /* materials the scene defines: the reader's first pass saw every row; the slices, every rank's */
  if (rc == DR_OK && stream) {
    const ckpt_rows_seen *seen = ckpt_reader_seen(*reader);
    rc = check_materials(S, seen->material_min, seen->material_max);
  } else if (rc == DR_OK) {
    int64_t mine[2] = {INT32_MAX, INT32_MAX}, all[2]; /* the least material and the negated largest */
    for (size_t i = 0; i < slice.n; ++i) {
      if (slice.material[i] < mine[0]) mine[0] = slice.material[i];
      if (-(int64_t)slice.material[i] < mine[1]) mine[1] = -(int64_t)slice.material[i];
    }
    const int e = MPI_Allreduce(mine, all, 2, MPI_INT64_T, MPI_MIN, S->comm);
    if (e != MPI_SUCCESS) rc = comm_fail(e, __FILE__, __LINE__, "MPI_Allreduce(material check)");
    else if (all[0] <= -all[1]) rc = check_materials(S, (int32_t)all[0], (int32_t)-all[1]);
  }
  rc = comm_agree(S->comm, rc);
  if (rc == DR_OK && !stream) {
    load_pairs L = {.weight = 1};
    rc = comm_agree(S->comm, sim_particles_load(S, &slice, &L));
    if (rc == DR_OK) rc = comm_agree(S->comm, sim_rebalance(S, &L));
    free(L.v);
    if (rc == DR_OK) rc = sim_migrate(S, &slice, 0, p);
    S->fs.migrated = 0; /* reading is not migration */
    /* the migration's record buffers, sized for a whole slice here and allocated before the
     * backend (pageable), go: sim_reserve_migration sizes the run's own after the backend */
    for (int k = 0; k < (int)(sizeof S->mig_buf / sizeof S->mig_buf[0]); ++k) sim_mig_release(S, k);
  }
  particles_free(&slice);
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
  if (rc) {
    ckpt_close(reader);
    return rc;
  }
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

/* After a resume: the frames the run wrote before it, for frames.xdmf (rank 0; those missing
 * are left out). */
int sim_list_earlier_frames(sim *S) {
  if (S->rank != 0 || !S->opt.write_output) return DR_OK;
  for (int f = 0; f <= S->st.frame; f += S->sc->output_every) {
    char path[4400];
    h5frame_path(S->out_dir, f, path, sizeof path);
    if (access(path, F_OK) != 0) continue;
    /* each frame's own count (particle sources change it from frame to frame) */
    uint64_t n = 0;
    unsigned fields = 0;
    if (h5frame_count(path, &n, &fields) != DR_OK) { /* unreadable: left out, as a missing one */
      dr_clear();
      continue;
    }
    xdmf_frame *w = realloc(S->written, sizeof *w * (size_t)(S->n_written + 1));
    if (!w) return dr_fail(DR_ENOMEM, "out of host memory for the frame list");
    S->written = w;
    S->written[S->n_written++] = (xdmf_frame){.frame = f, .time = f * S->frame_dt, .n = n, .fields = fields};
  }
  return DR_OK;
}

/* The frame's totals (sim_status): this rank's particles' count, mass, momentum, kinetic and
 * gravitational potential energy (above the domain's lowest corner), summed in double, a chunk
 * of the frame at a time (first: the frame's first chunk). */
static void frame_totals(const sim *S, const particles *h, int first, double tot[TOT_COUNT]) {
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
  /* a frame's first chunk gives its sums as they are, the others add theirs: a frame of one chunk
   * has the sums of one pass over all its particles */
  const double sums[TOT_COUNT] = {[TOT_N] = (double)h->n, [TOT_MASS] = ms, [TOT_P] = p0, [TOT_P + 1] = p1,
                                  [TOT_P + 2] = p2, [TOT_KE] = ke, [TOT_PE] = pe};
  for (int k = 0; k < TOT_COUNT; ++k) tot[k] = first ? sums[k] : tot[k] + sums[k]; /* N: exact below 2^53 */
}

/* The fields a frame derives on the host from chunk h's F (into the slot's J and stress):
 * J = det F, and the Cauchy stress sigma = tau / J from the Kirchhoff stress tau that P2G scatters
 * (constitutive_apply, on a copy of F and logjp: the return mapping is applied unless the state
 * already holds it, so the stress is the admissible one the next step starts from). Drucker-Prager
 * and NACC treat an inverted F as its mirror image, so they divide by |J|; a degenerate particle
 * (J = 0) gets a zero stress. */
static void frame_derived(const sim *S, frame_slot *f, const particles *h) {
  const long n = (long)h->n;
  const unsigned fields = S->sc->output_fields;
  if (fields & H5FRAME_BIT(H5FRAME_J)) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) f->J[i] = m3_det(h->F + 9 * i);
  }
  if (!(fields & H5FRAME_BIT(H5FRAME_STRESS))) return;
  const int plastic = !f->projected;
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i) {
    const material_params *m = &S->mats[h->material[i]];
    float F[9], tau[9], logjp = h->logjp ? h->logjp[i] : m->nacc_logjp0;
    for (int q = 0; q < 9; ++q) F[q] = h->F[9 * i + q];
    constitutive_apply(m, F, &logjp, tau, plastic);
    if (h->C) constitutive_add_viscous(m, F, h->C + 9 * i, tau); /* as P2G: viscous liquids */
    float J = m3_det(F);
    if (m->model == MODEL_DRUCKER_PRAGER || m->model == MODEL_NACC) J = fabsf(J);
    const float r = J != 0.0f ? 1.0f / J : 0.0f;
    float *s = f->stress + 6 * i;
    s[0] = tau[0] * r, s[1] = tau[4] * r, s[2] = tau[8] * r; /* xx yy zz */
    s[3] = tau[1] * r, s[4] = tau[5] * r, s[5] = tau[2] * r; /* xy yz zx */
  }
}

/* A fetch of rows first .. first + count - 1 of the snapshot into dst, on a thread of its own
 * (fetch_start) while the writer writes the chunk before; its failure's message is kept here
 * (error.h's record is the thread's). */
typedef struct fetch_job {
  const sim *S;
  unsigned mask;
  size_t first, count;
  particles *dst;
  int rc, threaded;
  pthread_t thread;
  char msg[1024];
} fetch_job;

static void *fetch_run(void *arg) {
  fetch_job *j = arg;
  j->rc = j->S->be.fetch(j->S->be.state, j->mask, j->first, j->count, j->dst);
  if (j->rc) {
    snprintf(j->msg, sizeof j->msg, "%s", dr_message());
    dr_clear();
  }
  return NULL;
}

/* Starts j on a thread of its own; where none can be started it runs now, on this one. */
static void fetch_start(fetch_job *j) {
  j->threaded = pthread_create(&j->thread, NULL, fetch_run, j) == 0;
  if (!j->threaded) (void)fetch_run(j);
}

/* Waits for j; its failure becomes this thread's. */
static int fetch_wait(fetch_job *j) {
  if (j->threaded) (void)pthread_join(j->thread, NULL); /* fails only for a thread not joinable */
  j->threaded = 0;
  return j->rc ? dr_fail(j->rc, "%s", j->msg) : DR_OK;
}

/* A frame's job, on the writer's thread: the frame's rows fetched from the backend's snapshot a
 * chunk at a time (mem_frame_chunk_capacity) into the slot's two buffers in turn, the fetch of
 * chunk k + 1 (on a thread of its own) overlapping the rest of chunk k: this rank's totals, the
 * derived fields and the rows (h5frame_put at the chunk's first row: no MPI, no HDF5) and its
 * part of the preview; then the preview's composite (collective over the writer's communicator).
 * The rows' status is the slot's (put_rc: a fetch's or a put's failure, which stops the chunks),
 * agreed by the main thread at the frame's completion (slot_done), so that a failure seen by one
 * rank never stops one rank's writer alone: every rank's writer runs the same jobs, and their
 * collective calls meet. */
static int frame_job(MPI_Comm comm, void *ctx) {
  frame_slot *f = ctx;
  sim *S = f->S;
  const int preview = S->sc->preview;
  preview_params pp = {.size = S->sc->preview_size, .view = S->sc->preview_view, .color = S->sc->preview_color};
  for (int a = 0; a < 3; ++a) pp.domain_min[a] = S->sc->domain_min[a], pp.domain_max[a] = S->sc->domain_max[a];
  preview_canvas pc = {0};
  if (preview) (void)preview_begin(&pp, &pc); /* its failure (out of memory) is preview_end's */
  double fetch_s = 0.0, sums_s = 0.0, rows_s = 0.0;
  for (int k = 0; k < TOT_COUNT; ++k) f->local[k] = 0.0;
  fetch_job next = {.S = S, .mask = f->mask, .count = f->n < f->cap ? f->n : f->cap, .dst = &f->p[0]};
  double t0 = sim_now();
  if (next.count > 0) fetch_start(&next);
  int rc = DR_OK, k = 0;
  for (size_t first = 0; first < f->n; first += f->cap, ++k) {
    const int failed = fetch_wait(&next); /* chunk k is in p[k & 1] */
    if (rc == DR_OK) rc = failed;
    if (rc) break;
    const double t1 = sim_now();
    fetch_s += t1 - t0;
    particles *h = &f->p[k & 1];
    const size_t after = first + f->cap;
    if (after < f->n) { /* chunk k + 1 into the other buffer meanwhile */
      next = (fetch_job){.S = S, .mask = f->mask, .first = after, .count = f->n - after < f->cap ? f->n - after : f->cap,
                         .dst = &f->p[(k + 1) & 1]};
      fetch_start(&next);
    }
    frame_totals(S, h, first == 0, f->local);
    frame_derived(S, f, h);
    const double t2 = sim_now();
    h5frame_data d = {.n = h->n, .position = h->x, .velocity = h->v, .id = h->id, .material = h->material,
                      .owner = h->owner, .logjp = h->logjp, .J = f->J, .F = h->F, .stress = f->stress, .C = h->C};
    rc = h5frame_put(&f->file, first, &d, S->pack, S->pack ? H5FRAME_PACK_BYTES : 0);
    if (preview && rc == DR_OK) {
      const preview_data pd = {.n = h->n, .position = h->x, .vol0 = h->vol0, .material = h->material, .owner = h->owner};
      preview_add(&pc, &pp, &pd);
    }
    t0 = sim_now();
    sums_s += t2 - t1, rows_s += t0 - t2;
  }
  if (next.threaded) (void)pthread_join(next.thread, NULL); /* a failure stopped the chunks: the fetch in flight
                                                              * ends first, its status moot */
  f->local[TOT_N] = (double)f->n; /* exact below 2^53; also where the frame has no particles */
  log_trace("writer: frame %d of %zu particles in chunks of %zu: waiting for fetches %.2f ms, totals and derived "
            "fields %.2f ms, rows %.2f ms", f->frame, f->n, f->cap, 1e3 * fetch_s, 1e3 * sums_s, 1e3 * rows_s);
  f->put_rc = rc;
  if (f->put_rc) { /* its message, for slot_done (this thread's record is the writer's) */
    snprintf(f->put_msg, sizeof f->put_msg, "%s", dr_message());
    dr_clear();
  }
  if (!preview) return DR_OK;
  return preview_end(comm, S->out_dir, f->frame, &pp, &pc, f->put_rc);
}

/* Where a job of the writer failed: the run stops with its message, not as a step's failure. */
int sim_output_failed(sim *S, int rc) {
  if (rc) S->output_failed = 1;
  return rc;
}

/* Completes the slot's frame (collective; frames complete in order): waits for its job, agrees
 * on every rank's rows (h5frame_end publishes the file or removes it), sums the totals, and lists
 * the frame in frames.xdmf; its totals become the status's. */
static int slot_done(sim *S, frame_slot *f) {
  if (!f->queued) return DR_OK;
  f->queued = 0;
  DR_TRY(sim_output_failed(S, writer_wait(S->writer, f->ticket)));
  if (f->put_rc) dr_fail(f->put_rc, "%s", f->put_msg);
  watchdog_enter("the frame's file, completed by all ranks together");
  int rc = h5frame_end(S->comm, &f->file, f->put_rc);
  watchdog_leave();
  if (rc) return sim_output_failed(S, rc);
  DR_TRY(comm_allreduce(f->local, f->totals, TOT_COUNT, MPI_DOUBLE, MPI_SUM, S->comm, "the frame's totals"));
  const double *all = f->totals;
  log_info("frame %d totals: mass %.6g kg  momentum (%.6g, %.6g, %.6g) kg m/s  kinetic energy %.6g J  "
           "potential energy %.6g J", f->frame, all[TOT_MASS], all[TOT_P], all[TOT_P + 1], all[TOT_P + 2],
           all[TOT_KE], all[TOT_PE]);
  /* a rerun of a frame (after a resume) replaces its entry */
  int i = 0;
  while (i < S->n_written && S->written[i].frame != f->frame) ++i;
  if (i == S->n_written) {
    xdmf_frame *w = realloc(S->written, sizeof *w * (size_t)(S->n_written + 1));
    rc = w ? DR_OK : dr_fail(DR_ENOMEM, "out of host memory for the frame list");
    if (w) S->written = w, ++S->n_written;
  }
  if (rc == DR_OK) {
    S->written[i] = (xdmf_frame){.frame = f->frame, .time = f->time, .n = (uint64_t)all[TOT_N],
                                 .fields = S->sc->output_fields};
    rc = S->rank == 0 ? xdmf_write(S->out_dir, S->written, S->n_written) : DR_OK;
  }
  DR_TRY(sim_output_failed(S, comm_agree(S->comm, rc)));
  if (f->frame >= S->st.totals_frame) {
    S->st.totals_frame = f->frame;
    S->st.mass = all[TOT_MASS];
    for (int a = 0; a < 3; ++a) S->st.momentum[a] = all[TOT_P + a];
    S->st.kinetic_energy = all[TOT_KE];
    S->st.potential_energy = all[TOT_PE];
  }
  return DR_OK;
}

/* The largest |coordinate| a frame's position may hold: the domain's (the particles stay inside
 * it), the same on every rank; precision half stores positions in a fixed point that reaches it. */
double sim_position_extent(const scene *s) {
  double e = 0.0;
  for (int a = 0; a < 3; ++a) e = fmax(e, fmax(fabs(s->domain_min[a]), fabs(s->domain_max[a])));
  return e;
}

/* The attributes a frame captures: what its fields need (output.fields: F for J; F, the material
 * and, with NACC snow, logjp for the stress), the position, velocity and mass for the totals, the
 * initial volume, material and owner for the preview. */
unsigned sim_frame_mask(const scene *s) {
  const unsigned fl = s->output_fields;
  int with_logjp = 0;
  for (int m = 0; m < s->n_materials; ++m) with_logjp |= s->materials[m].params.model == MODEL_NACC;
#define WANTS_(field) (fl & H5FRAME_BIT(field))
  unsigned m = PA_BIT(x) | PA_BIT(v) | PA_BIT(mass);
  if (WANTS_(H5FRAME_ID)) m |= PA_BIT(id);
  if (WANTS_(H5FRAME_MATERIAL) || WANTS_(H5FRAME_STRESS)) m |= PA_BIT(material);
  if (WANTS_(H5FRAME_OWNER)) m |= PA_BIT(owner);
  if (WANTS_(H5FRAME_LOGJP) || (WANTS_(H5FRAME_STRESS) && with_logjp)) m |= PA_BIT(logjp);
  if (WANTS_(H5FRAME_J) || WANTS_(H5FRAME_F) || WANTS_(H5FRAME_STRESS)) m |= PA_BIT(F);
  if (WANTS_(H5FRAME_C) || WANTS_(H5FRAME_STRESS)) m |= PA_BIT(C); /* stress: a viscous liquid's */
#undef WANTS_
  if (s->preview) m |= PA_BIT(vol0) | PA_BIT(material) | PA_BIT(owner);
  return m;
}

static void slot_release(sim *S, frame_slot *f) {
  for (int b = 0; b < 2; ++b) chunk_free(S, &f->p[b]);
  memtally_count(MEMTALLY_HOST, MT_TRANSFER, -(int64_t)f->tallied);
  f->tallied = 0;
  free(f->J);
  free(f->stress);
  f->J = f->stress = NULL;
  f->cap = 0;
  f->bufs = 0;
}

/* Room in slot f for the chunks of a frame of n particles (mem_frame_chunk_capacity, at most
 * MEM_FRAME_CHUNK particles; mem_frame_buffers of them) of the frame's attributes (mask): the
 * backend's pinned memory where it has it (a GPU copies there without a bounce), kept frame after
 * frame. */
static int slot_reserve(sim *S, frame_slot *f, unsigned mask, size_t n) {
  const size_t chunk = settings()->frame_chunk > 0 ? (size_t)settings()->frame_chunk : MEM_FRAME_CHUNK;
  /* kept while it takes the frame in a few more chunks than it was sized for */
  const size_t want = mem_frame_chunk_capacity(n, chunk);
  if (f->cap >= want - want / 4 && mask == f->mask && mem_frame_buffers(n, f->cap) <= f->bufs) return DR_OK;
  slot_release(S, f);
  const size_t cap = want;
  const int bufs = mem_frame_buffers(n, cap);
  f->mask = mask;
  for (int b = 0; b < bufs; ++b) DR_TRY(chunk_alloc(S, &f->p[b], mask, cap, "a frame's particles", &f->tallied));
  f->bufs = bufs;
  const unsigned fields = S->sc->output_fields;
  if ((fields & H5FRAME_BIT(H5FRAME_J)) && !(f->J = dr_malloc(cap * sizeof(float), "a frame's J")))
    return DR_ENOMEM;
  if ((fields & H5FRAME_BIT(H5FRAME_STRESS)) && !(f->stress = dr_malloc(6 * cap * sizeof(float), "a frame's stress")))
    return DR_ENOMEM;
  const size_t derived = cap * sizeof(float) * ((f->J ? 1 : 0) + (f->stress ? 6 : 0));
  f->tallied += derived;
  memtally_count(MEMTALLY_HOST, MT_TRANSFER, (int64_t)derived);
  f->cap = cap;
  return DR_OK;
}

/* Completes the frame in flight, if any (collective). */
static int complete_frame(sim *S) { return slot_done(S, &S->frame); }

/* Collective. Takes frame st.frame as the backend's snapshot (backend.h) once the frame in flight
 * is written (its job reads the one snapshot there is: back-pressure when the disk is slower than
 * the steps, while the steps of the frame after it overlap its writing), and queues it for the
 * writer, which fetches it chunk by chunk; returns before it is written. */
int sim_write_frame(sim *S) {
  const double t0 = sim_now();
  frame_slot *f = &S->frame;
  /* the checkpoint in flight is published first (its frames are already): it is on the disk one
   * frame after it was captured at the latest, even where this frame's completion fails */
  DR_TRY(ckpt_done(S));
  const double t1 = sim_now();
  DR_TRY(complete_frame(S)); /* every frame job done: none reads the snapshot any more */
  const double t2 = sim_now();
  const unsigned mask = sim_frame_mask(S->sc);
  size_t n = 0;
  int rc = S->be.snapshot(S->be.state, mask, &n);
  if (rc == DR_OK) rc = slot_reserve(S, f, mask, n);
  if (rc == DR_OK && S->sc->output_precision == H5FRAME_HALF && !S->pack) { /* once a run */
    if ((S->pack = dr_malloc(H5FRAME_PACK_BYTES, "the frames' conversion buffer")))
      memtally_count(MEMTALLY_HOST, MT_TRANSFER, (int64_t)H5FRAME_PACK_BYTES);
    else
      rc = DR_ENOMEM;
  }
  DR_TRY(comm_agree(S->comm, rc));
  const double t3 = sim_now();
  f->n = n;
  f->S = S;
  f->frame = S->st.frame;
  f->time = S->st.time;
  h5frame_meta meta = {.frame = f->frame, .time = f->time, .dx = S->sc->dx, .n_materials = S->sc->n_materials,
                       .material_names = S->mat_names, .fields = S->sc->output_fields,
                       .precision = S->sc->output_precision, .extent = sim_position_extent(S->sc)};
  /* the free-space check keeps room for the checkpoint due with this frame */
  if (sim_checkpoint_due(S, f->frame)) ckpt_size(S->sc->text_len, &meta.after_per_particle, &meta.after_bytes);
  sim_test_hook_file(S, f->frame);
  watchdog_enter("the frame's file, created by all ranks together");
  rc = h5frame_begin(S->comm, S->out_dir, &meta, n, &f->file);
  watchdog_leave();
  if (rc) { /* the frames before are completed, whole, before the run stops on this one */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dr_message());
    dr_clear();
    (void)sim_flush(S);
    dr_clear();
    dr_fail(rc, "%s", msg);
    dr_mark_agreed(); /* h5frame_begin's failures are agreed */
    return sim_output_failed(S, rc);
  }
  f->projected = S->be.projected ? S->be.projected(S->be.state) : 0;
  DR_TRY(writer_submit(S->writer, frame_job, f, &f->ticket));
  f->queued = 1;
  const double t4 = sim_now();
  S->st.io_seconds += t4 - t0;
  log_trace("main: frame %d: the checkpoint before %.2f ms, the frame before completed (its writing waited for) %.2f "
            "ms, snapshot %.2f ms, file begun %.2f ms", f->frame, 1e3 * (t1 - t0), 1e3 * (t2 - t1), 1e3 * (t3 - t2),
            1e3 * (t4 - t3));
  return DR_OK;
}

int sim_flush(sim *S) {
  if (!S->writer) return DR_OK;
  const double t0 = sim_now();
  int rc = sim_output_failed(S, writer_drain(S->writer));
  if (rc == DR_OK) rc = complete_frame(S);
  if (rc == DR_OK) rc = ckpt_done(S);
  S->st.io_seconds += sim_now() - t0;
  S->st.write_seconds = writer_busy_seconds(S->writer);
  return rc;
}

void sim_output_destroy(sim *S) {
  writer_destroy(&S->writer); /* waits for what is queued: the buffers below are its */
  /* a frame begun and never completed (the run stopped on a failure) leaves no file */
  if (S->rank == 0) h5rows_abandon(&S->frame.file.rows);
  slot_release(S, &S->frame);
  if (S->ckpt.file.rows.begun && S->ckpt.file.fd >= 0) (void)close(S->ckpt.file.fd); /* its puts unfinished */
  if (S->rank == 0) h5rows_abandon(&S->ckpt.file.rows); /* a checkpoint begun, never completed */
  ckpt_release(S);
  free(S->ckpt.emitted);
  if (S->pack) memtally_count(MEMTALLY_HOST, MT_TRANSFER, -(int64_t)H5FRAME_PACK_BYTES);
  free(S->pack);
  S->pack = NULL;
}

/* A signal stopped the run (every rank knows): all write a checkpoint of where it stands. */
int sim_stop_with_checkpoint(sim *S) {
  const char *sig = signals_name(S->stop_signal);
  log_info("%s: stopping at frame %d, %d step(s) into frame %d (t %.4f s); writing a checkpoint", sig, S->st.frame,
           S->step_in_frame, S->st.frame + 1, S->t_in_frame);
  /* the frames in flight first, whole; then the checkpoint, waited for */
  int rc = S->opt.write_output ? sim_flush(S) : DR_OK;
  if (rc == DR_OK && S->opt.write_output) rc = sim_write_checkpoint(S);
  if (rc == DR_OK && S->opt.write_output) rc = sim_flush(S);
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
  if (S->opt.continue_with)
    rc = dr_fail(DR_ESTOPPED, "stopped by %s at frame %d + %d step(s), t %.4f s: checkpoint %s written; continue with: "
                 "%s", sig, S->st.frame, S->step_in_frame, S->t_in_frame, path, S->opt.continue_with);
  else
    rc = dr_fail(DR_ESTOPPED, "stopped by %s at frame %d + %d step(s), t %.4f s: checkpoint %s written; continue with: "
                 "drift run %s --out %s --resume", sig, S->st.frame, S->step_in_frame, S->t_in_frame, path, S->sc->path,
                 S->out_dir);
  dr_mark_agreed();
  return rc;
}

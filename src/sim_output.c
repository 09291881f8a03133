/* sim_output.c - the frames the run writes (HDF5, a preview, frames.xdmf) with their totals, the
 * list of frames written before a resume, and what frames and checkpoints share: the output
 * folder, the chunk buffers, the writer's flush and teardown. Checkpoints and the resume are
 * sim_checkpoint.c's. docs/output.md describes the files.
 *
 * Invariants: writing is collective, every rank calls these in the same order, and their
 * failures are agreed (comm_agree); frames.xdmf lists each frame once (a frame written again
 * replaces its entry). */
#define _POSIX_C_SOURCE 200809L
#include "sim_internal.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
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
#include "signals.h"
#include "writer.h"


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

/* ---- frames, written behind the compute (writer.h) --------------------------------------- */

int sim_chunk_alloc(sim *S, particles *p, unsigned mask, size_t cap, const char *what, size_t *tallied) {
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

void sim_chunk_free(sim *S, particles *p) {
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    void **arr = (void **)((char *)p + particle_attrs[a].offset);
    if (!*arr) continue;
    if (S->be.free_sums) S->be.free_sums(*arr, 0);
    else free(*arr);
    *arr = NULL;
  }
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
static void frame_totals(const sim *S, const particles *h, int first, double tot[TOT_COUNT], int threads) {
  const double *g = S->sc->gravity, *lo = S->sc->domain_min;
  const float *x = h->x, *v = h->v, *mass = h->mass;
  double ms = 0.0, p0 = 0.0, p1 = 0.0, p2 = 0.0, ke = 0.0, pe = 0.0;
  /* threads: a node's rank may hold tens of millions of particles, read once more per frame */
  const long n = (long)h->n;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(+ : ms, p0, p1, p2, ke, pe)
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

/* A chunk's totals on a thread of their own, beside the chunk's rows (frame_job): one thread
 * reading the chunk once more while the writer's team copies it. */
typedef struct totals_job {
  const sim *S;
  const particles *h;
  int first, threaded;
  double *tot;
  pthread_t thread;
} totals_job;

static void *totals_run(void *arg) {
  totals_job *j = arg;
  frame_totals(j->S, j->h, j->first, j->tot, 1);
  return NULL;
}

static void totals_start(totals_job *j) {
  j->threaded = pthread_create(&j->thread, NULL, totals_run, j) == 0;
  if (!j->threaded) frame_totals(j->S, j->h, j->first, j->tot, omp_get_max_threads());
}

static void totals_wait(totals_job *j) {
  if (j->threaded) (void)pthread_join(j->thread, NULL);
  j->threaded = 0;
}

/* The fields a frame derives on the host from chunk h's F (into the slot's J and stress):
 * J = det F, and the Cauchy stress sigma = tau / J from the Kirchhoff stress tau that P2G scatters
 * (constitutive_apply, on a copy of F and logjp: the return mapping is applied unless the state
 * already holds it, so the stress is the admissible one the next step starts from). Drucker-Prager
 * and NACC treat an inverted F as its mirror image, so they divide by |J|; a degenerate particle
 * (J = 0) gets a zero stress. */
static void frame_derived(const sim *S, frame_slot *f, const particles *h, int projected) {
  const long n = (long)h->n;
  const unsigned fields = S->sc->output_fields;
  if (fields & H5FRAME_BIT(H5FRAME_J)) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) f->J[i] = m3_det(h->F + 9 * i);
  }
  if (!(fields & H5FRAME_BIT(H5FRAME_STRESS))) return;
  const int plastic = !projected;
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

static void *fetch_run(void *arg) {
  fetch_job *j = arg;
  const backend *be = &j->S->be;
  j->rc = j->rows ? be->fetch_rows(be->state, j->first, j->count, j->dst)
                  : be->fetch(be->state, j->mask, j->first, j->count, j->dst);
  if (j->rc == DR_OK && j->dst->n != j->count)
    j->rc = dr_fail(DR_EINTERNAL, "%s backend: a fetch gave %zu rows where %zu were asked", be->name, j->dst->n,
                    j->count);
  if (j->rc) {
    snprintf(j->msg, sizeof j->msg, "%s", dr_message());
    dr_clear();
  }
  return NULL;
}

void sim_fetch_start(fetch_job *j) {
  j->threaded = pthread_create(&j->thread, NULL, fetch_run, j) == 0;
  if (!j->threaded) (void)fetch_run(j);
}

int sim_fetch_wait(fetch_job *j) {
  if (j->threaded) (void)pthread_join(j->thread, NULL); /* fails only for a thread not joinable */
  j->threaded = 0;
  return j->rc ? dr_fail(j->rc, "%s", j->msg) : DR_OK;
}

/* Record r's snapshot no longer needed by its job: the next frame's may be taken. */
static void rec_release(frame_rec *r) { writer_signal(r->slot->S->writer, &r->released); }

/* A frame's job, on the writer's thread: the frame's rows fetched from the backend's snapshot a
 * chunk at a time (mem_frame_chunk_capacity) into the slot's two buffers in turn, the fetch of
 * chunk k + 1 (on a thread of its own) overlapping the rest of chunk k: this rank's totals, the
 * derived fields and the rows (h5frame_put at the chunk's first row: no MPI, no HDF5) and its
 * part of the preview; the snapshot released once the last chunk is fetched (rec_release); then
 * the preview's composite (collective over the writer's communicator). The rows' status is the
 * record's (put_rc: a fetch's or a put's failure, which stops the chunks), agreed by the main
 * thread at the frame's completion (slot_done), so that a failure seen by one rank never stops one
 * rank's writer alone: every rank's writer runs the same jobs, and their collective calls meet. */
static int frame_job(MPI_Comm comm, void *ctx) {
  frame_rec *r = ctx;
  frame_slot *f = r->slot;
  sim *S = f->S;
  const int preview = S->sc->preview;
  preview_params pp = {.size = S->sc->preview_size, .view = S->sc->preview_view, .color = S->sc->preview_color};
  for (int a = 0; a < 3; ++a) pp.domain_min[a] = S->sc->domain_min[a], pp.domain_max[a] = S->sc->domain_max[a];
  preview_canvas pc = {0};
  if (preview) (void)preview_begin(&pp, &pc); /* its failure (out of memory) is preview_end's */
  double fetch_s = 0.0, derived_s = 0.0, rows_s = 0.0;
  for (int k = 0; k < TOT_COUNT; ++k) r->local[k] = 0.0;
  fetch_job next = {.S = S, .mask = f->mask, .count = r->n < f->cap ? r->n : f->cap, .dst = &f->p[0]};
  double t0 = sim_now();
  if (next.count > 0) sim_fetch_start(&next);
  else rec_release(r);
  int rc = sim_test_hook_rows(S, r->frame, r->file.rows.final), k = 0;
  h5rows_ahead ahead; /* the rows' space allocated while the chunks are fetched and copied */
  h5frame_ahead_start(&r->file, &ahead);
  for (size_t first = 0; first < r->n; first += f->cap, ++k) {
    const int failed = sim_fetch_wait(&next); /* chunk k is in p[k & 1] */
    if (rc == DR_OK) rc = failed;
    if (rc) break;
    const double t1 = sim_now();
    fetch_s += t1 - t0;
    particles *h = &f->p[k & 1];
    const size_t after = first + f->cap;
    if (after < r->n) { /* chunk k + 1 into the other buffer meanwhile */
      next = (fetch_job){.S = S, .mask = f->mask, .first = after, .count = r->n - after < f->cap ? r->n - after : f->cap,
                         .dst = &f->p[(k + 1) & 1]};
      sim_fetch_start(&next);
    } else {
      rec_release(r); /* every chunk fetched */
    }
    totals_job tj = {.S = S, .h = h, .first = first == 0, .tot = r->local};
    totals_start(&tj);
    frame_derived(S, f, h, r->projected);
    const double t2 = sim_now();
    h5frame_data d = {.n = h->n, .position = h->x, .velocity = h->v, .id = h->id, .material = h->material,
                      .owner = h->owner, .logjp = h->logjp, .J = f->J, .F = h->F, .stress = f->stress, .C = h->C};
    rc = h5frame_put(&r->file, first, &d, S->pack, S->pack_bytes);
    totals_wait(&tj);
    if (preview && rc == DR_OK) {
      const preview_data pd = {.n = h->n, .position = h->x, .vol0 = h->vol0, .material = h->material, .owner = h->owner};
      preview_add(&pc, &pp, &pd);
    }
    t0 = sim_now();
    derived_s += t2 - t1, rows_s += t0 - t2;
  }
  if (next.threaded) (void)pthread_join(next.thread, NULL); /* a failure stopped the chunks: the fetch in flight
                                                              * ends first, its status moot */
  rec_release(r); /* where a failure stopped the chunks */
  h5frame_ahead_join(&r->file);
  r->local[TOT_N] = (double)r->n; /* exact below 2^53; also where the frame has no particles */
  log_trace("writer: frame %d of %zu particles in chunks of %zu: waiting for fetches %.2f ms, derived fields %.2f ms, "
            "rows (the totals beside them) %.2f ms",
            r->frame, r->n, f->cap, 1e3 * fetch_s, 1e3 * derived_s, 1e3 * rows_s);
  r->put_rc = rc;
  if (r->put_rc) { /* its message, for slot_done (this thread's record is the writer's) */
    snprintf(r->put_msg, sizeof r->put_msg, "%s", dr_message());
    dr_clear();
  }
  if (!preview) return DR_OK;
  return preview_end(comm, S->out_dir, r->frame, &pp, &pc, r->put_rc);
}

/* Where a job of the writer failed: the run stops with its message, not as a step's failure. */
int sim_output_failed(sim *S, int rc) {
  if (rc) S->output_failed = 1;
  return rc;
}

/* Rank 0: a frame that is not published leaves no preview either (its job may have drawn it). */
static void drop_preview(const sim *S, int frame) {
  if (S->rank != 0 || !S->sc->preview) return;
  char path[4400];
  preview_path(S->out_dir, frame, path, sizeof path);
  (void)unlink(path);
}

/* Completes record r's frame (collective; frames complete in order, the older first): waits for
 * its job, agrees on every rank's rows (h5frame_end publishes the file or removes it), sums the
 * totals, and lists the frame in frames.xdmf; its totals become the status's. The run stops on
 * the first frame whose completion fails: no caller completes a frame after it (sim_complete_frame
 * and sim_flush return at the first failure), and sim_output_destroy removes the frames still in
 * flight, so that no frame after a failed one is published. */
static int slot_done(sim *S, frame_rec *r) {
  if (!r->queued) return DR_OK;
  r->queued = 0;
  int rc = writer_wait(S->writer, r->ticket);
  if (rc) return sim_output_failed(S, rc);
  if (r->put_rc) dr_fail(r->put_rc, "%s", r->put_msg);
  watchdog_enter("the frame's file, completed by all ranks together");
  rc = h5frame_end(S->comm, &r->file, r->put_rc);
  watchdog_leave();
  if (rc) {
    drop_preview(S, r->frame);
    return sim_output_failed(S, rc);
  }
  DR_TRY(comm_allreduce(r->local, r->totals, TOT_COUNT, MPI_DOUBLE, MPI_SUM, S->comm, "the frame's totals"));
  const double *all = r->totals;
  log_info("frame %d totals: mass %.6g kg  momentum (%.6g, %.6g, %.6g) kg m/s  kinetic energy %.6g J  "
           "potential energy %.6g J", r->frame, all[TOT_MASS], all[TOT_P], all[TOT_P + 1], all[TOT_P + 2],
           all[TOT_KE], all[TOT_PE]);
  /* a rerun of a frame (after a resume) replaces its entry */
  int i = 0;
  while (i < S->n_written && S->written[i].frame != r->frame) ++i;
  if (i == S->n_written) {
    xdmf_frame *w = realloc(S->written, sizeof *w * (size_t)(S->n_written + 1));
    rc = w ? DR_OK : dr_fail(DR_ENOMEM, "out of host memory for the frame list");
    if (w) S->written = w, ++S->n_written;
  }
  if (rc == DR_OK) {
    S->written[i] = (xdmf_frame){.frame = r->frame, .time = r->time, .n = (uint64_t)all[TOT_N],
                                 .fields = S->sc->output_fields};
    rc = S->rank == 0 ? xdmf_list_write(&S->xdmf, S->out_dir, S->written, S->n_written) : DR_OK;
  }
  rc = comm_agree(S->comm, rc);
  DR_TRY(sim_output_failed(S, rc));
  if (r->frame >= S->st.totals_frame) {
    S->st.totals_frame = r->frame;
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
  for (int b = 0; b < 2; ++b) sim_chunk_free(S, &f->p[b]);
  memtally_count(MEMTALLY_HOST, MT_TRANSFER, -(int64_t)f->tallied);
  f->tallied = 0;
  free(f->J);
  free(f->stress);
  f->J = f->stress = NULL;
  f->cap = 0;
  f->bufs = 0;
}

/* The chunk buffers of a frame of n particles (mem_frame_chunk_capacity, at most
 * MEM_FRAME_CHUNK particles; mem_frame_buffers of them): those of slot f where they serve (kept
 * while they take the frame in a few more chunks than they were sized for). */
static size_t slot_want(size_t n) { return mem_frame_chunk_capacity(n, sim_chunk(MEM_FRAME_CHUNK)); }
static int slot_fits(const frame_slot *f, unsigned mask, size_t n) {
  const size_t want = slot_want(n);
  return f->cap > 0 && f->cap >= want - want / 4 && mask == f->mask && mem_frame_buffers(n, f->cap) <= f->bufs;
}

/* Room in slot f for the chunks of a frame of n particles of the frame's attributes (mask): the
 * backend's pinned memory where it has it (a GPU copies there without a bounce), kept frame after
 * frame. No job may be running (they use the buffers). */
static int slot_reserve(sim *S, frame_slot *f, unsigned mask, size_t n) {
  if (slot_fits(f, mask, n)) return DR_OK;
  slot_release(S, f);
  const size_t cap = slot_want(n);
  const int bufs = mem_frame_buffers(n, cap);
  f->mask = mask;
  for (int b = 0; b < bufs; ++b) DR_TRY(sim_chunk_alloc(S, &f->p[b], mask, cap, "a frame's particles", &f->tallied));
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

/* Completes the frames in flight, the older first (collective). */
int sim_complete_frame(sim *S) {
  frame_slot *f = &S->frame;
  DR_TRY(slot_done(S, &f->rec[f->next]));
  return slot_done(S, &f->rec[f->next ^ 1]);
}

/* Waits until record r's job no longer reads the snapshot (released, ended, or never queued). */
static void slot_wait_released(sim *S, frame_rec *r) {
  if (r->queued) writer_wait_flag(S->writer, r->ticket, &r->released);
}

void sim_output_init(sim *S) {
  S->frame.S = S;
  for (int i = 0; i < 2; ++i) S->frame.rec[i].slot = &S->frame;
}

/* Collective. Takes frame st.frame as the backend's snapshot (backend.h) once the frame before
 * it has fetched its own (its job reads the one snapshot there is: back-pressure when the disk is
 * slower than the steps, while the steps of the frame after it overlap its writing), and queues it
 * for the writer, which fetches it chunk by chunk; returns before it is written. The frame two
 * before is completed first: at most two are in flight. */
int sim_write_frame(sim *S) {
  const double t0 = sim_now();
  frame_slot *f = &S->frame;
  /* the checkpoint in flight is published first (its frames are already): it is on the disk one
   * frame after it was captured at the latest, even where this frame's completion fails */
  DR_TRY(sim_ckpt_done(S));
  const double t1 = sim_now();
  frame_rec *r = &f->rec[f->next], *before = &f->rec[f->next ^ 1];
  DR_TRY(slot_done(S, r)); /* the frame two before: its job ran before the one before */
  slot_wait_released(S, before);
  const double t2 = sim_now();
  const unsigned mask = sim_frame_mask(S->sc);
  size_t n = 0;
  int rc = S->be.snapshot(S->be.state, mask, &n);
  /* buffers that no longer serve are made anew once no job uses them (collective: agreed) */
  int refit = rc == DR_OK && !slot_fits(f, mask, n), any = 0;
  DR_TRY(comm_agree(S->comm, rc));
  DR_TRY(comm_allreduce(&refit, &any, 1, MPI_INT, MPI_MAX, S->comm, "the frames' buffers"));
  if (any) DR_TRY(slot_done(S, before));
  rc = slot_reserve(S, f, mask, n);
  const size_t pack_bytes = h5frame_pack_bytes(S->sc->output_fields, S->sc->output_precision);
  if (rc == DR_OK && pack_bytes && !S->pack) { /* once a run */
    if ((S->pack = dr_malloc(pack_bytes, "the frames' conversion buffer"))) {
      S->pack_bytes = pack_bytes;
      memtally_count(MEMTALLY_HOST, MT_TRANSFER, (int64_t)pack_bytes);
    } else {
      rc = DR_ENOMEM;
    }
  }
  DR_TRY(comm_agree(S->comm, rc));
  const double t3 = sim_now();
  r->n = n;
  r->frame = S->st.frame;
  r->time = S->st.time;
  r->released = 0;
  h5frame_meta meta = {.frame = r->frame, .time = r->time, .dx = S->sc->dx, .n_materials = S->sc->n_materials,
                       .material_names = S->mat_names, .fields = S->sc->output_fields,
                       .precision = S->sc->output_precision, .extent = sim_position_extent(S->sc)};
  /* the free-space check keeps room for the checkpoint due with this frame */
  if (sim_checkpoint_due(S, r->frame)) ckpt_size(S->sc->text_len, &meta.after_per_particle, &meta.after_bytes);
  sim_test_hook_file(S, r->frame);
  watchdog_enter("the frame's file, created by all ranks together");
  rc = h5frame_begin(S->comm, S->out_dir, &meta, n, &r->file);
  watchdog_leave();
  if (rc) { /* the frames before are completed, whole, before the run stops on this one (or on
             * the first of them that fails: the earlier failure is the one to name) */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dr_message());
    dr_clear();
    const int before_rc = sim_flush(S);
    if (before_rc) return before_rc;
    dr_fail(rc, "%s", msg);
    dr_mark_agreed(); /* h5frame_begin's failures are agreed */
    return sim_output_failed(S, rc);
  }
  r->projected = S->be.projected ? S->be.projected(S->be.state) : 0;
  DR_TRY(writer_submit(S->writer, frame_job, r, &r->ticket));
  r->queued = 1;
  f->next ^= 1;
  const double t4 = sim_now();
  S->st.io_seconds += t4 - t0;
  log_trace("main: frame %d: the checkpoint before %.2f ms, the frame two before completed and the snapshot of the "
            "one before released (waited for) %.2f ms, snapshot %.2f ms, file begun %.2f ms",
            r->frame, 1e3 * (t1 - t0), 1e3 * (t2 - t1), 1e3 * (t3 - t2), 1e3 * (t4 - t3));
  return DR_OK;
}

int sim_flush(sim *S) {
  if (!S->writer) return DR_OK;
  const double t0 = sim_now();
  int rc = sim_output_failed(S, writer_drain(S->writer));
  if (rc == DR_OK) rc = sim_complete_frame(S);
  if (rc == DR_OK) rc = sim_ckpt_done(S);
  S->st.io_seconds += sim_now() - t0;
  S->st.write_seconds = writer_busy_seconds(S->writer);
  return rc;
}

void sim_output_destroy(sim *S) {
  writer_destroy(&S->writer); /* waits for what is queued: the buffers below are its */
  /* a frame begun and never completed (the run stopped on a failure) leaves no file */
  frame_slot *f = &S->frame;
  for (int i = 0; i < 2; ++i) {
    if (S->rank == 0) h5rows_abandon(&f->rec[i].file.rows);
    if (f->rec[i].queued) drop_preview(S, f->rec[i].frame);
  }
  slot_release(S, f);
  sim_ckpt_destroy(S);
  if (S->pack) memtally_count(MEMTALLY_HOST, MT_TRANSFER, -(int64_t)S->pack_bytes);
  free(S->pack);
  S->pack = NULL;
  S->pack_bytes = 0;
}


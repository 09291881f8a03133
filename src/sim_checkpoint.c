/* sim_checkpoint.c - checkpoints: written from the backend's copy of the particles behind the
 * steps, or from its live particles a chunk at a time while they wait (sim_write_checkpoint), the
 * resume from one (sim_resume_from_checkpoint), and
 * the checkpoint a signal's stop writes. io/checkpoint.c holds the file; docs/output.md
 * describes it.
 *
 * Invariants: writing is collective, every rank calls these in the same order, and their
 * failures are agreed (comm_agree); a checkpoint on the disk means every frame up to its own is
 * too; a checkpoint holds the state before a substep (the end of frame st.frame, or part-way into
 * the next after a stop) and resuming from it takes the run on the same path. */
#define _POSIX_C_SOURCE 200809L
#include "sim_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "comm.h"
#include "error.h"
#include "log.h"
#include "memsizes.h"
#include "memtally.h"
#include "signals.h"
#include "watchdog.h"
#include "writer.h"

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

/* A held checkpoint's one job, on the writer's thread: this rank's rows fetched from the backend's
 * copy (fetch_rows, any thread once held) a chunk at a time into the slot's buffers in turn, the
 * fetch of chunk k + 1 (on a thread of its own, as a frame's) overlapping the write of chunk k
 * (ckpt_put_rows), then the file synced (ckpt_put_finish). Its status is the slot's, as
 * checkpoint_job's. */
static int checkpoint_held_job(MPI_Comm comm, void *ctx) {
  (void)comm;
  ckpt_slot *c = ctx;
  const size_t n = c->file.rows.n;
  fetch_job next = {.S = c->S, .rows = 1, .count = n < c->cap ? n : c->cap, .dst = &c->chunk[0].p};
  if (n > 0) sim_fetch_start(&next);
  int rc = DR_OK, k = 0;
  for (size_t first = 0; first < n; first += c->cap, ++k) {
    rc = sim_fetch_wait(&next); /* chunk k is in chunk[k & 1] */
    if (rc) break;
    const size_t after = first + c->cap;
    if (after < n) { /* chunk k + 1 into the other buffer meanwhile */
      next = (fetch_job){.S = c->S, .rows = 1, .first = after, .count = n - after < c->cap ? n - after : c->cap,
                         .dst = &c->chunk[(k + 1) & 1].p};
      sim_fetch_start(&next);
    }
    if ((rc = ckpt_put_rows(&c->file, first, &c->chunk[k & 1].p))) break;
  }
  if (next.threaded) (void)pthread_join(next.thread, NULL); /* a failure stopped the chunks: the fetch in flight
                                                              * ends first, its status moot */
  rc = ckpt_put_finish(&c->file, rc);
  if (rc) {
    c->put_rc = rc;
    snprintf(c->put_msg, sizeof c->put_msg, "%s", dr_message());
    dr_clear();
  }
  return DR_OK;
}

/* Completes the checkpoint in flight (collective): completes the frames in flight (a held
 * checkpoint goes out behind the frame written with it, which must be on the disk before it), waits
 * for its jobs, agrees on every rank's rows, and publishes it (ckpt_end: the checksum written,
 * renamed, the folder synced, old ones pruned) or removes it. */
int sim_ckpt_done(sim *S) {
  ckpt_slot *c = &S->ckpt;
  if (!c->queued) return DR_OK;
  DR_TRY(sim_complete_frame(S));
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

static void ckpt_release(sim *S) {
  ckpt_slot *c = &S->ckpt;
  for (int b = 0; b < 2; ++b) sim_chunk_free(S, &c->chunk[b].p);
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
  const size_t set = sim_chunk(MEM_CKPT_CHUNK);
  const size_t chunk = set < MEM_CKPT_CHUNK ? set : MEM_CKPT_CHUNK;
  const size_t cap = mem_ckpt_rows(n, chunk);
  const int buffers = mem_ckpt_buffers(n, chunk);
  if (cap <= c->cap && buffers <= c->buffers) return DR_OK;
  ckpt_release(S);
  c->buffers = buffers;
  for (int b = 0; b < buffers; ++b)
    DR_TRY(sim_chunk_alloc(S, &c->chunk[b].p, (1u << PARTICLE_ATTRS) - 1u, cap, "a checkpoint's chunk", &c->tallied));
  c->cap = cap;
  return DR_OK;
}

/* This rank's n rows of the checkpoint begun in c->file, from the backend to the writer a chunk
 * at a time: chunk k is fetched (main thread) into one buffer while the writer writes chunk k - 1
 * from the other; before a buffer is fetched into again, the job that wrote it is waited for.
 * Returns with every chunk fetched and the last one's job queued (c->ticket). A checkpoint is
 * rare: the steps wait for its fetches (fetch_rows reads the particles themselves, which must not
 * move meanwhile: where the plan has room for a copy of them, the checkpoint is held instead), and
 * overlap only the writing of the last chunk and the sync. Local; the status is this rank's (a
 * fetch's or the writer's). */
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
 * st.frame, or part-way into the next one after a stop). Held: the backend copies the rows and the
 * writer fetches and writes them behind the steps (checkpoint_held_job); live: the rows go to the
 * writer as they are fetched from the backend (ckpt_fetch). Returns before they are all written.
 * The previous checkpoint, whose buffers this one reuses, is completed first. A checkpoint on the
 * disk means every frame up to its own is too (a resume from it writes the frames after it only):
 * live, the frames in flight complete first; held, it is written before the checkpoint's job and
 * completed before the checkpoint (sim_ckpt_done). */
int sim_write_checkpoint(sim *S) {
  const double t0 = sim_now();
  const int held = S->opt.ckpt_hold && S->be.hold_rows;
  if (!held) DR_TRY(sim_complete_frame(S));
  DR_TRY(sim_ckpt_done(S));
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
  if (held) {
    rc = S->be.hold_rows(S->be.state);
    if (rc == DR_OK) {
      rc = writer_submit(S->writer, checkpoint_held_job, c, &c->ticket);
      c->chunk[0].queued = rc == DR_OK;
      c->chunk[0].ticket = c->ticket;
    }
    rc = comm_agree(S->comm, rc);
  } else {
    rc = comm_agree(S->comm, ckpt_fetch(S, n));
  }
  if (rc == DR_OK) {
    log_trace("checkpoint %d: %zu particles %s in chunks of %zu: %.2f ms", c->st.frame, n,
              held ? "held by the backend, written behind the steps" : "fetched", c->cap, 1e3 * (sim_now() - t1));
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

/* The checkpoint's rows a resume streams into the backend: all of them on one rank; on several,
 * the pieces of the file whose particles may lie in this rank's box, of which it keeps the rows it
 * owns (n of them, counted from the loads before). So no rank holds more than a piece of rows on
 * the host, none waits on another while the backend takes them (a backend that reads the source
 * twice, an island's, rewinds it freely), and each reads about its share of the file: a piece is
 * RESUME_ROWS consecutive rows, which lie close together (each writer's rows are in its mapping's
 * order), and the first pass gave each its box of blocks. RESUME_ROWS is an eighth of the chunk
 * the backend takes rows in, beside which the memory plan counts no buffer (memplan.c's creation
 * phase). */
enum { RESUME_ROWS = MEM_CREATE_CHUNK / 8 };

/* A piece of the file: rows [first, first + count), whose particles' blocks lie in [lo, hi]. */
typedef struct resume_piece {
  int64_t first, count, lo[3], hi[3];
} resume_piece;
enum { PIECE_WORDS = sizeof(resume_piece) / sizeof(int64_t) };

struct resume_stream {
  const sim *S;
  ckpt_reader *reader;
  particle_source all;  /* one rank: every row of the checkpoint */
  resume_piece *piece;  /* several: the pieces this rank reads, in the file's order */
  size_t n_piece, next; /* and the next to read */
  particles buf;        /* rows read, looked at from row at on */
  size_t at;
  size_t n, given; /* this rank's particles, and those handed out */
};

/* The rows of a piece (DRIFT_FRAME_CHUNK's fewer where a test sets it). */
static size_t resume_rows(void) {
  const size_t set = sim_chunk(RESUME_ROWS);
  return set < RESUME_ROWS ? set : RESUME_ROWS;
}

/* particle_source.next: the next min(max, n - given) particles this rank owns. */
static int own_next(void *ctx, particles *out, size_t max) {
  resume_stream *rs = ctx;
  const sim *S = rs->S;
  const size_t want = rs->n - rs->given < max ? rs->n - rs->given : max;
  DR_TRY(particles_reserve(out, out->n + want));
  for (size_t got = 0; got < want;) {
    if (rs->at == rs->buf.n) {
      if (rs->next == rs->n_piece)
        return dr_fail(DR_EINTERNAL, "checkpoint %s: rank %d counted %zu particles of its own, but found %zu",
                       S->resumed_from, S->rank, rs->n, rs->given + got);
      const resume_piece *q = &rs->piece[rs->next++];
      rs->buf.n = 0, rs->at = 0;
      DR_TRY(ckpt_reader_rows(rs->reader, (uint64_t)q->first, (uint64_t)q->count, &rs->buf));
    }
    for (; rs->at < rs->buf.n && got < want; ++rs->at) {
      if (!sim_owns(S, rs->buf.x + 3 * rs->at)) continue;
      DR_TRY(particles_push_copy(out, &rs->buf, rs->at));
      ++got;
    }
  }
  rs->given += want;
  return DR_OK;
}

static int own_rewind(void *ctx) {
  resume_stream *rs = ctx;
  rs->buf.n = 0, rs->at = 0, rs->given = 0, rs->next = 0;
  return DR_OK;
}

particle_source sim_resume_source(resume_stream *rs) {
  if (rs->S->nranks == 1) return rs->all;
  return (particle_source){.n = rs->n, .next = own_next, .ctx = rs, .rewind = own_rewind};
}

float sim_resume_mass_max(const resume_stream *rs) { return ckpt_reader_seen(rs->reader)->mass_max; }

void sim_resume_close(resume_stream **rs) {
  if (!*rs) return;
  ckpt_close(&(*rs)->reader);
  particles_free(&(*rs)->buf);
  free((*rs)->piece);
  free(*rs);
  *rs = NULL;
}

/* Every rank's pieces (mine, this rank's n of them) into *all (allocated), *total of them.
 * Collective. */
static int gather_pieces(sim *S, const resume_piece *mine, size_t n, resume_piece **all, size_t *total) {
  const int R = S->nranks;
  int *counts = calloc((size_t)R, sizeof *counts), *displs = calloc((size_t)R, sizeof *displs);
  int rc = counts && displs ? DR_OK : dr_fail(DR_ENOMEM, "out of host memory for the resume's pieces");
  const int words = (int)(n * PIECE_WORDS);
  if (rc == DR_OK && n * PIECE_WORDS > INT_MAX) rc = dr_fail(DR_EINTERNAL, "resume: %zu pieces on one rank", n);
  rc = comm_agree(S->comm, rc);
  MPI_Request req;
  if (rc == DR_OK) {
    const int e = MPI_Iallgather(&words, 1, MPI_INT, counts, 1, MPI_INT, S->comm, &req);
    rc = e != MPI_SUCCESS ? comm_fail(e, __FILE__, __LINE__, "MPI_Iallgather(the resume's pieces)")
                          : comm_wait(S->comm, 1, &req, MPI_STATUSES_IGNORE, NULL, "the resume's pieces");
  }
  size_t sum = 0;
  for (int r = 0; rc == DR_OK && r < R; ++r) displs[r] = (int)sum, sum += (size_t)counts[r];
  if (rc == DR_OK && sum > INT_MAX) rc = dr_fail(DR_EINTERNAL, "resume: %zu piece words exceed MPI's int counts", sum);
  *all = NULL;
  if (rc == DR_OK && !(*all = malloc(sizeof **all * (sum / PIECE_WORDS + 1))))
    rc = dr_fail(DR_ENOMEM, "out of host memory for the resume's pieces");
  rc = comm_agree(S->comm, rc);
  if (rc == DR_OK) {
    const int e = MPI_Iallgatherv(mine, words, MPI_INT64_T, *all, counts, displs, MPI_INT64_T, S->comm, &req);
    rc = e != MPI_SUCCESS ? comm_fail(e, __FILE__, __LINE__, "MPI_Iallgatherv(the resume's pieces)")
                          : comm_wait(S->comm, 1, &req, MPI_STATUSES_IGNORE, NULL, "the resume's pieces");
  }
  *total = sum / PIECE_WORDS;
  free(counts), free(displs);
  return rc;
}

/* Several ranks: the cuts from the checkpoint's loads (each rank counts its slice's particles per
 * block, a piece at a time, and boxes each piece; rebalance, as when the load drifts), how many
 * particles this rank owns under them, and the pieces whose box meets this rank's. Collective. */
static int resume_cuts(sim *S, resume_stream *rs) {
  load_pairs L = {.weight = 1};
  uint64_t first = 0, end = 0;
  ckpt_reader_slice_rows(rs->reader, &first, &end);
  const size_t step = resume_rows(), mine = (size_t)((end - first + step - 1) / step);
  resume_piece *pc = calloc(mine ? mine : 1, sizeof *pc), *all = NULL;
  int rc = pc ? DR_OK : dr_fail(DR_ENOMEM, "out of host memory for the resume's pieces");
  for (size_t k = 0; rc == DR_OK && k < mine; ++k) {
    const uint64_t at = first + k * step, count = end - at < step ? end - at : step;
    int32_t lo[3] = {INT32_MAX, INT32_MAX, INT32_MAX}, hi[3] = {INT32_MIN, INT32_MIN, INT32_MIN};
    rs->buf.n = 0;
    if ((rc = ckpt_reader_rows(rs->reader, at, count, &rs->buf)) || (rc = sim_particles_load(S, &rs->buf, &L, lo, hi)))
      break;
    pc[k] = (resume_piece){.first = (int64_t)at, .count = (int64_t)count, .lo = {lo[0], lo[1], lo[2]},
                           .hi = {hi[0], hi[1], hi[2]}};
  }
  rs->buf.n = 0;
  rc = comm_agree(S->comm, rc);
  if (rc == DR_OK) rc = comm_agree(S->comm, sim_rebalance(S, &L));
  uint64_t n = 0;
  if (rc == DR_OK) rc = comm_agree(S->comm, sim_load_owned(S, &L, &n));
  free(L.v);
  size_t total = 0;
  if (rc == DR_OK) rc = gather_pieces(S, pc, mine, &all, &total);
  free(pc);
  /* the pieces whose box meets this rank's [lo, hi) */
  const int32_t *box = S->dec.box[S->rank];
  uint64_t rows = 0;
  for (size_t k = 0; rc == DR_OK && k < total; ++k) {
    int meets = all[k].count > 0;
    for (int a = 0; a < 3; ++a) meets &= all[k].lo[a] < box[3 + a] && all[k].hi[a] >= box[a];
    if (!meets) continue;
    all[rs->n_piece++] = all[k];
    rows += (uint64_t)all[k].count;
  }
  rs->piece = all;
  rs->n = (size_t)n;
  if (rc == DR_OK)
    log_trace("resume: rank %d owns %llu particles and reads %llu of the %llu rows (%zu of %zu pieces)", S->rank,
              (unsigned long long)n, (unsigned long long)rows, (unsigned long long)ckpt_reader_source(rs->reader).n,
              rs->n_piece, total);
  return rc;
}

/* Continues from a checkpoint instead of sampling the scene. Opens it (the file given, or the
 * newest whole one in a folder; default the output folder: ckpt_open checks it whole), refuses
 * one from another scene unless --force, restores the time, the step counts and the step-size
 * controller, and leaves in *rs the stream of this rank's particles for the backend (on several
 * ranks after the cuts are made from the checkpoint's loads). */
int sim_resume_from_checkpoint(sim *S, resume_stream **out) {
  const char *where = S->opt.resume && S->opt.resume[0] ? S->opt.resume : S->out_dir;
  ckpt_state st = {0};
  int kind = 0, rc = DR_OK; /* 0 missing, 1 a folder, 2 something else */
  *out = NULL;
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
  resume_stream *rs = calloc(1, sizeof *rs);
  if ((rc = comm_agree(S->comm, rs ? DR_OK : dr_fail(DR_ENOMEM, "out of host memory for the resume")))) {
    free(rs);
    return rc;
  }
  rs->S = S;
  if (kind == 1) {
    rc = ckpt_open_latest(S->comm, where, MEM_CREATE_CHUNK, &st, &rs->reader, S->resumed_from, sizeof S->resumed_from);
  } else {
    snprintf(S->resumed_from, sizeof S->resumed_from, "%s", where);
    rc = ckpt_open(S->comm, where, MEM_CREATE_CHUNK, &st, &rs->reader);
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
  /* materials the scene defines: the reader's first pass saw every row */
  if (rc == DR_OK) {
    const ckpt_rows_seen *seen = ckpt_reader_seen(rs->reader);
    rc = check_materials(S, seen->material_min, seen->material_max);
  }
  rc = comm_agree(S->comm, rc);
  if (rc == DR_OK && S->nranks > 1) rc = resume_cuts(S, rs);
  else if (rc == DR_OK) rs->all = ckpt_reader_source(rs->reader), rs->n = rs->all.n;
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
    sim_resume_close(&rs);
    return rc;
  }
  *out = rs;
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

/* The checkpoint's part of the output's teardown (the writer already stopped): a checkpoint begun
 * and never completed leaves no file; its buffers go. */
void sim_ckpt_destroy(sim *S) {
  if (S->ckpt.file.rows.begun && S->ckpt.file.fd >= 0) (void)close(S->ckpt.file.fd); /* its puts unfinished */
  if (S->rank == 0) h5rows_abandon(&S->ckpt.file.rows);
  ckpt_release(S);
  free(S->ckpt.emitted);
}

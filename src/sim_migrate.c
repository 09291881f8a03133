/* sim_migrate.c - particles between ranks: the initial decomposition (recursive bisection of the
 * scene's particle counts per block), the load counts and new cuts (rebalance), the particle
 * records that migrate to their owners, and redistribute, a rebuild-mapping of several ranks.
 *
 * Invariants: every rank cuts the same counts the same way, so all hold the same boxes (dec); a
 * particle's block is computed as the backends compute it (float, the grid's origin), so host
 * and backend agree on its owner; the particles that stay never leave the backend; the ranks
 * agree on every failure before a particle exchange, so none enters it alone. */
#define _POSIX_C_SOURCE 200809L
#include "sim_internal.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "watchdog.h"
#include "error.h"
#include "hostmem.h"
#include "log.h"
#include "memsizes.h"
#include "memtally.h"
#include "physics/bspline.h"
#include "physics/sparse.h"
#include "sample.h"

/* This rank's particles: the backend's own count (no device traffic), else its stats. */
size_t sim_rank_count(const sim *S) {
  if (S->be.count) return S->be.count(S->be.state);
  backend_stats bs = {0};
  return S->be.stats(S->be.state, &bs) == DR_OK ? (size_t)bs.n_particles : 0;
}

/* The particle block of a position, computed as the backends do (float, same origin). */
static void sim_particle_block(const sim *S, const float x[3], int32_t blk[3]) {
  for (int a = 0; a < 3; ++a) blk[a] = bspline_base((x[a] - S->origin[a]) * S->inv_dx) >> 2;
}

static int owner_of(const sim *S, const float x[3]) {
  int32_t blk[3];
  sim_particle_block(S, x, blk);
  return decomp_owner(&S->dec, blk);
}

int sim_owns(const sim *S, const float x[3]) { return owner_of(S, x) == S->rank; }

int sim_keep_own(void *ctx, const double x[3]) {
  const float xf[3] = {(float)x[0], (float)x[1], (float)x[2]};
  return sim_owns(ctx, xf);
}

static int count_point(void *ctx, const double x[3]) {
  void **c = ctx;
  const sim *S = c[0];
  const float xf[3] = {(float)x[0], (float)x[1], (float)x[2]};
  int32_t blk[3];
  sim_particle_block(S, xf, blk);
  return hist_add(c[1], sparse_block_code(blk[0], blk[1], blk[2]), 1);
}

/* Recursive bisection of the scene's particle counts per block. Every rank visits the sampled
 * positions (none is stored) and cuts the same histogram, so all get the same boxes. */
int sim_initial_decomposition(sim *S) {
  block_hist h = {0};
  void *ctx[2] = {S, &h};
  int rc = sample_visit(S->sc, count_point, ctx);
  if (rc == DR_OK) rc = decomp_rcb(&h, S->nranks, &S->dec);
  hist_free(&h);
  return rc;
}

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

/* The particles of p per particle block (a histogram first: one pair per block, not per particle),
 * and [lo, hi] widened to hold their blocks. */
int sim_particles_load(const sim *S, const particles *p, load_pairs *L, int32_t lo[3], int32_t hi[3]) {
  block_hist h = {0};
  int rc = DR_OK;
  for (size_t i = 0; rc == DR_OK && i < p->n; ++i) {
    int32_t blk[3];
    sim_particle_block(S, p->x + 3 * i, blk);
    for (int a = 0; a < 3; ++a) {
      if (blk[a] < lo[a]) lo[a] = blk[a];
      if (blk[a] > hi[a]) hi[a] = blk[a];
    }
    rc = hist_add(&h, sparse_block_code(blk[0], blk[1], blk[2]), 1);
  }
  for (size_t i = 0; rc == DR_OK && i < h.cap; ++i)
    if (h.code[i] != UINT64_MAX) rc = load_push(L, h.code[i], h.count[i]);
  hist_free(&h);
  return rc;
}

/* The particles of the load pairs L (every rank's: its own share of a scene) that this rank owns
 * under the cuts S->dec, summed over the ranks into *mine. Collective. */
int sim_load_owned(const sim *S, const load_pairs *L, uint64_t *mine) {
  uint64_t *to = calloc((size_t)S->nranks, sizeof *to), *all = calloc((size_t)S->nranks, sizeof *all);
  int rc = to && all ? DR_OK : dr_fail(DR_ENOMEM, "out of host memory for the load balance");
  for (size_t k = 0; rc == DR_OK && k < L->n; ++k) {
    int c[3];
    sparse_block_coords(L->v[2 * k], c);
    const int32_t blk[3] = {c[0], c[1], c[2]};
    to[decomp_owner(&S->dec, blk)] += L->v[2 * k + 1] / L->weight;
  }
  rc = comm_agree(S->comm, rc);
  if (rc == DR_OK) rc = comm_allreduce(to, all, S->nranks, MPI_UINT64_T, MPI_SUM, S->comm, "the particles each rank owns");
  if (rc == DR_OK) *mine = all[S->rank];
  free(to), free(all);
  return rc;
}

/* New cuts from the ranks' load pairs, gathered on every rank and cut as they come
 * (decomp_rcb_pairs: no merging into one histogram). */
int sim_rebalance(sim *S, const load_pairs *L) {
  int rc = DR_OK;
  int *counts = malloc(sizeof *counts * (size_t)S->nranks), *displs = malloc(sizeof *displs * (size_t)S->nranks);
  uint64_t *all = NULL;
  if (!counts || !displs) rc = dr_fail(DR_ENOMEM, "out of host memory for the load balance");
  if (rc == DR_OK && 2 * L->n > INT_MAX) rc = dr_fail(DR_EINTERNAL, "load balance: %zu blocks exceed MPI's int counts", L->n);
  int n2 = (int)(2 * L->n);
  if (rc == DR_OK) {
    MPI_Request req;
    int e = MPI_Iallgather(&n2, 1, MPI_INT, counts, 1, MPI_INT, S->comm, &req);
    if (e != MPI_SUCCESS) rc = comm_fail(e, __FILE__, __LINE__, "MPI_Iallgather(histogram sizes)");
    else rc = comm_wait(S->comm, 1, &req, MPI_STATUSES_IGNORE, NULL, "the load balance's histograms");
  }
  size_t total = 0;
  for (int r = 0; rc == DR_OK && r < S->nranks; ++r) displs[r] = (int)total, total += (size_t)counts[r];
  if (rc == DR_OK && total > INT_MAX) rc = dr_fail(DR_EINTERNAL, "load balance: %zu values exceed MPI's int counts", total);
  if (rc == DR_OK && !(all = malloc(sizeof *all * (total ? total : 1))))
    rc = dr_fail(DR_ENOMEM, "out of host memory for the load balance");
  if (rc == DR_OK) {
    MPI_Request req;
    int e = MPI_Iallgatherv(L->v, n2, MPI_UINT64_T, all, counts, displs, MPI_UINT64_T, S->comm, &req);
    if (e != MPI_SUCCESS) rc = comm_fail(e, __FILE__, __LINE__, "MPI_Iallgatherv(histograms)");
    else rc = comm_wait(S->comm, 1, &req, MPI_STATUSES_IGNORE, NULL, "the load balance's histograms");
  }
  if (rc == DR_OK) {
    decomp_free(&S->dec);
    rc = decomp_rcb_pairs(all, total / 2, S->nranks, &S->dec);
  }
  free(counts), free(displs), free(all);
  return rc;
}

void sim_mig_release(sim *S, int k) {
  if (S->mig_buf[k]) memtally_count(MEMTALLY_HOST, MT_TRANSFER, -(int64_t)S->mig_cap[k]);
  if (S->mig_buf[k] && S->mig_free[k]) S->mig_free[k](S->mig_buf[k], 0);
  else free(S->mig_buf[k]);
  S->mig_buf[k] = NULL, S->mig_cap[k] = 0, S->mig_free[k] = NULL;
}

/* migrate's record buffer k of at least bytes, kept between calls (its contents are not kept
 * when it grows). */
static int mig_reserve(sim *S, int k, size_t bytes) {
  if (bytes <= S->mig_cap[k] && S->mig_buf[k]) return DR_OK;
  const size_t cap = hostmem_capacity(S->mig_cap[k], bytes);
  sim_mig_release(S, k);
  /* pinned up to --pinned-max-mb, pageable past it (hostmem.h) */
  const int pinned = S->be.state && S->be.alloc_sums && S->be.free_sums && cap <= hostmem_pinned_max();
  void *q = NULL;
  if (pinned) DR_TRY(S->be.alloc_sums(S->be.state, cap, 0, &q));
  else q = cap > ((size_t)2 << 20) ? hostmem_pageable(cap) : malloc(cap);
  if (!q) return dr_fail(DR_ENOMEM, "out of host memory for migration (%zu bytes of particle records)", cap);
  S->mig_buf[k] = q, S->mig_cap[k] = cap, S->mig_free[k] = pinned ? S->be.free_sums : NULL;
  memtally_count(MEMTALLY_HOST, MT_TRANSFER, (int64_t)cap);
  return DR_OK;
}

/* A migration's records of the emigrants [first, first + count) into `to`: the backend's own
 * (read_records), else packed from the particles emigrate gave (S->leaving). */
static int read_gone(sim *S, size_t first, size_t count, unsigned char *to) {
  if (S->be.read_records) return S->be.read_records(S->be.state, first, count, to);
  const size_t rec = particles_record_bytes();
  for (size_t i = 0; i < count; ++i) particles_pack(&S->leaving, first + i, to + rec * i);
  return DR_OK;
}

/* A round's n records received: to the backend (add_records: appended, the rebuild-mapping after
 * the last round), else unpacked into S->arriving for add_particles after the last round. */
static int take_arrivals(sim *S, const unsigned char *recs, size_t n) {
  if (S->be.add_records) return S->be.add_records(S->be.state, recs, n);
  particles *in = &S->arriving;
  const size_t need = in->n + n;
  if (need > in->cap) DR_TRY(particles_reserve(in, need > 2 * in->cap ? need : 2 * in->cap));
  const size_t rec = particles_record_bytes();
  for (size_t k = 0; k < n; ++k) DR_TRY(particles_push_record(in, recs + rec * k));
  return DR_OK;
}

/* The round's table, gathered from every rank: a row of ROUND_HEAD values (its status, its
 * emigrants not yet read, and the records it takes in a round: its own mig_round, which depends
 * on its own particles) and then, for each rank, how many of its staged records go there. */
enum { ROUND_STATUS, ROUND_UNREAD, ROUND_ROOM, ROUND_HEAD };

/* The records receiver d takes from each sender s in a round (grant[s * R + d]): all it is sent
 * where they fit its round (its ROUND_ROOM, B), else B shared in proportion to what each sender has for it,
 * what the shares leave given a record at a time to the senders in rank order that have more.
 * Every rank computes the same from the same table, so no second exchange of counts is needed. */
static void round_grants(const uint64_t *rows, int R, uint64_t *grant) {
  const int w = ROUND_HEAD + R;
  for (int d = 0; d < R; ++d) {
    const uint64_t B = rows[d * w + ROUND_ROOM];
    uint64_t total = 0, given = 0;
    for (int s = 0; s < R; ++s) total += rows[s * w + ROUND_HEAD + d];
    for (int s = 0; s < R; ++s) {
      const uint64_t want = rows[s * w + ROUND_HEAD + d];
      grant[s * R + d] = total <= B ? want : want * B / total; /* want, B < 2^31: no overflow */
      given += grant[s * R + d];
    }
    for (int s = 0; total > B && given < B; s = (s + 1) % R)
      if (grant[s * R + d] < rows[s * w + ROUND_HEAD + d]) ++grant[s * R + d], ++given;
  }
}

/* Sends the n emigrants (read_gone) to the ranks that own their positions, or keeps those whose
 * block lies within margin blocks of this rank's box, in rounds: in each a rank stages up to
 * S->mig_round records (S->mig_buf[2], those not sent before first), the ranks gather how many
 * each has for each (one allgather, which also agrees on their statuses: the ranks agree on every
 * failure before a round's exchange, so none enters it alone), each receiver takes at most
 * mig_round (round_grants), the granted ones travel grouped by destination (S->mig_buf[0]; sent
 * as they are where they all go to one rank) into S->mig_buf[1], and go to the backend
 * (take_arrivals). So a rank's host holds three buffers of a round, however many move; a round
 * ends the migration when every rank's emigrants are sent. *n_in: the records this rank took
 * (received, then kept, by rank in each round). rc: this rank's outcome so far (how the
 * emigrants came). The last round's exchange's and arrivals' own failure is this rank's, for the
 * caller's next agreement. Collective over S->comm. */
static int migrate_rounds(sim *S, int rc, size_t n, int margin, size_t *n_in) {
  const int R = S->nranks, w = ROUND_HEAD + R;
  const size_t rec = particles_record_bytes(), B = S->mig_round;
  *n_in = 0;
  if (rc != DR_OK) n = 0;
  uint64_t *row = calloc((size_t)w, sizeof *row), *rows = calloc((size_t)R * (size_t)w, sizeof *rows);
  uint64_t *grant = calloc((size_t)R * (size_t)R, sizeof *grant);
  int *dest = malloc(sizeof *dest * (B ? B : 1));
  int *scount = calloc((size_t)R, sizeof *scount), *rcount = calloc((size_t)R, sizeof *rcount);
  int *sdispl = calloc((size_t)R, sizeof *sdispl), *rdispl = calloc((size_t)R, sizeof *rdispl);
  int *fill = calloc((size_t)R, sizeof *fill);
  MPI_Datatype rec_type = MPI_DATATYPE_NULL;
  if (rc == DR_OK && (!row || !rows || !grant || !dest || !scount || !rcount || !sdispl || !rdispl || !fill))
    rc = dr_fail(DR_ENOMEM, "out of host memory for migration");
  if (rc == DR_OK && (B == 0 || B > INT_MAX))
    rc = dr_fail(DR_EINTERNAL, "migration: a round of %zu records (expected 1 to INT_MAX)", B);
  /* one record per particle, as one MPI datatype: counts stay in particles, not bytes */
  if (rc == DR_OK) {
    int e = MPI_Type_contiguous((int)rec, MPI_BYTE, &rec_type);
    if (e == MPI_SUCCESS) e = MPI_Type_commit(&rec_type);
    if (e != MPI_SUCCESS) rc = comm_fail(e, __FILE__, __LINE__, "MPI_Type_commit(particle record)");
  }
  if (rc == DR_OK) rc = mig_reserve(S, 2, rec * B); /* staged */
  if (rc == DR_OK) rc = mig_reserve(S, 1, rec * B); /* received */
  const int32_t *mybox = S->dec.box[S->rank];
  size_t first = 0, held = 0; /* emigrants read so far; of them staged, not yet sent */
  int rounds = 0;
  for (;; ++rounds) {
    unsigned char *staged = S->mig_buf[2];
    if (rc == DR_OK) {
      const size_t k = B - held < n - first ? B - held : n - first;
      if (k > 0 && (rc = read_gone(S, first, k, staged + rec * held)) == DR_OK) first += k, held += k;
    }
    memset(row, 0, sizeof *row * (size_t)w);
    int one = -1; /* the only rank every staged record goes to, if there is one (-2: several) */
    for (size_t i = 0; rc == DR_OK && i < held; ++i) {
      float x[3]; /* the record starts with the position (PARTICLE_ATTRIBUTES) */
      memcpy(x, staged + rec * i, sizeof x);
      int32_t blk[3];
      sim_particle_block(S, x, blk);
      int out = 0;
      for (int a = 0; a < 3; ++a) out |= blk[a] < mybox[a] - margin || blk[a] >= mybox[3 + a] + margin;
      dest[i] = out ? decomp_owner(&S->dec, blk) : S->rank;
      ++row[ROUND_HEAD + dest[i]];
      one = one == -1 || one == dest[i] ? dest[i] : -2;
    }
    /* records for several ranks: grouped by destination before they go (the buffer made before
     * the agreement: nothing fails between it and the exchange) */
    if (rc == DR_OK && one == -2) rc = mig_reserve(S, 0, rec * B);
    row[ROUND_STATUS] = (uint64_t)(rc > 0 ? rc : 0);
    row[ROUND_UNREAD] = rc == DR_OK ? n - first : 0;
    row[ROUND_ROOM] = B;
    /* the table, and the ranks' agreement on their statuses */
    uint64_t worst = 0;
    {
      MPI_Request req;
      const int e = MPI_Iallgather(row, w, MPI_UINT64_T, rows, w, MPI_UINT64_T, S->comm, &req);
      const int g = e != MPI_SUCCESS ? comm_fail(e, __FILE__, __LINE__, "MPI_Iallgather(migration counts)")
                                     : comm_wait(S->comm, 1, &req, MPI_STATUSES_IGNORE, NULL, "the migration's counts");
      if (g != DR_OK) {
        rc = g;
        break;
      }
    }
    for (int r = 0; r < R; ++r) worst = rows[r * w + ROUND_STATUS] > worst ? rows[r * w + ROUND_STATUS] : worst;
    if ((rc = comm_agreed(rc, (int)worst)) != DR_OK) break;
    round_grants(rows, R, grant);
    size_t stot = 0, rtot = 0;
    uint64_t after = 0; /* every rank's emigrants left after this round */
    for (int r = 0; r < R; ++r) {
      scount[r] = (int)grant[S->rank * R + r], rcount[r] = (int)grant[r * R + S->rank];
      sdispl[r] = (int)stot, rdispl[r] = (int)rtot, fill[r] = 0;
      stot += (size_t)scount[r], rtot += (size_t)rcount[r];
      after += rows[r * w + ROUND_UNREAD];
      for (int d = 0; d < R; ++d) after += rows[r * w + ROUND_HEAD + d] - grant[r * R + d];
    }
    /* the granted records grouped by destination, those left staged moved to the front in their
     * order; all to one rank: the first stot of them sent as they are */
    const unsigned char *sbuf = staged;
    size_t left = held - stot;
    if (one < 0 && stot > 0) {
      size_t kept = 0;
      for (size_t i = 0; i < held; ++i) {
        const int d = dest[i];
        unsigned char *to = fill[d] < scount[d] ? S->mig_buf[0] + rec * (size_t)(sdispl[d] + fill[d]++)
                                               : staged + rec * kept++;
        if (to != staged + rec * i) memcpy(to, staged + rec * i, rec);
      }
      sbuf = S->mig_buf[0];
    }
    {
      MPI_Request req;
      const int e = MPI_Ialltoallv(sbuf, scount, sdispl, rec_type, S->mig_buf[1], rcount, rdispl, rec_type, S->comm, &req);
      if (e != MPI_SUCCESS) rc = comm_fail(e, __FILE__, __LINE__, "MPI_Ialltoallv(particles)");
      else rc = comm_wait(S->comm, 1, &req, MPI_STATUSES_IGNORE, NULL, "the migration of particles");
    }
    if (rc == DR_OK && one >= 0 && stot > 0 && left > 0) memmove(staged, staged + rec * stot, rec * left);
    held = left;
    if (rc == DR_OK && rtot > 0) rc = take_arrivals(S, S->mig_buf[1], rtot);
    if (rc == DR_OK) *n_in += rtot;
    S->fs.migrated += stot;
    if (after == 0) break;
  }
  if (rounds > 0) log_trace("migration: %d rounds of at most %zu records", rounds + 1, B);
  if (rec_type != MPI_DATATYPE_NULL) MPI_Type_free(&rec_type);
  free(row), free(rows), free(grant), free(dest);
  free(scount), free(rcount), free(sdispl), free(rdispl), free(fill);
  return rc;
}

/* Several ranks, at the start: the host memory of a migration's rounds (mem_migration_round: the
 * share of the rank's particles that the largest rebalance the threshold lets come moves, at an
 * imbalance x about x times the rank's count, but at most MEM_MIGRATION_ROUND records, or
 * DRIFT_FRAME_CHUNK's, a round) and the backend's for all of that share, reserved now, so that no
 * rebalance pins memory or faults it in: pinning new buffers costs more than the rebalance's
 * copies, and an MPI receive into fresh pages runs at a fraction of its speed (hostmem.h). */
int sim_reserve_migration(sim *S) {
  const size_t count = sim_rank_count(S), rec = particles_record_bytes();
  const size_t n = (size_t)(mem_migration_share(S->bal.threshold) * (double)count) + MEM_MIGRATION_EXTRA;
  const size_t set = sim_chunk(MEM_MIGRATION_ROUND);
  S->mig_round = mem_migration_round(S->bal.threshold, count, set);
  const double t0 = sim_now();
  DR_TRY(mig_reserve(S, 2, rec * S->mig_round)); /* staged */
  DR_TRY(mig_reserve(S, 1, rec * S->mig_round)); /* received */
  if (S->nranks > 2) DR_TRY(mig_reserve(S, 0, rec * S->mig_round)); /* grouped by destination (two ranks: sent as they are) */
  if (S->be.emigrate_records && S->be.reserve_records) DR_TRY(S->be.reserve_records(S->be.state, n, S->mig_round));
  log_trace("migration: host memory for rounds of %zu particle records reserved in %.1f ms (the backend's for %zu)",
            S->mig_round, 1e3 * (sim_now() - t0), n);
  return DR_OK;
}

/* At a rebuild-mapping of several ranks: moves the cuts when the load is uneven (from the
 * backend's per-block counts, particle_blocks), then sends the particles that left this rank's
 * box by more than the margin (--migrate-margin, a block; by any amount after new cuts) to
 * the rank that owns their position (emigrate, migrate), and hands the backend those that
 * arrive: the particles that stay never leave the backend (on a GPU they never cross to the
 * host). */
int sim_redistribute(sim *S, const double *glob) {
  const double t_start = sim_now();
  /* the load (particles, or compute time since the cuts last moved: balance_by), agreed in the
   * step vote that asked for this rebuild-mapping (step_vote) */
  const int by_time = S->sc->balance_by == BALANCE_TIME;
  const double my_seconds = S->win_seconds, my_n = (double)sim_rank_count(S);
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
    if (rc == DR_OK) rc = comm_agree(S->comm, sim_rebalance(S, &L));
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
  /* the emigrants: kept by the backend as records where it can (on a GPU, on the device), else
   * the particles emigrate gives, packed a round at a time */
  size_t n_gone = 0, n_in = 0;
  S->arriving.n = 0;
  if (S->be.emigrate_records) {
    rc = S->be.emigrate_records(S->be.state, lo, hi, &n_gone);
  } else {
    S->leaving.n = 0;
    rc = S->be.emigrate(S->be.state, lo, hi, &S->leaving);
    n_gone = rc == DR_OK ? S->leaving.n : 0;
  }
  log_trace("redistribute: %zu particles emigrate", n_gone);
  /* agreed in migrate_rounds; its last exchange's own failure in the next step's (S->setup_rc) */
  rc = migrate_rounds(S, rc, n_gone, margin, &n_in);
  log_trace("redistribute: %zu particles arrive", n_in);
  if (rc == DR_OK && S->hook.action == HOOK_REBUILD && S->hook.rank == S->rank && S->st.steps + 1 >= S->hook.step) {
    S->hook.action = HOOK_NONE; /* the tests' hook: this rank's part of a rebuild-mapping fails, the others' do not */
    rc = dr_fail(DR_EINTERNAL, "DRIFT_TEST_HOOK: rank %d fails alone in its rebuild-mapping before step %llu", S->rank,
                 (unsigned long long)S->st.steps + 1);
  }
  if (rc == DR_OK && S->arriving.n > 0) {
    rc = S->be.add_particles(S->be.state, &S->arriving);
  } else if (rc == DR_OK) { /* (records the backend took: appended, not yet mapped) */
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
    S->rebal_ns = nearbyint(1e9 * (sim_now() - t_start));
    S->rebal_moved = (double)n_gone;
  }
  return DR_OK;
}

/* sim_sources.c - particle sources (emit.h): the emission round at the start of a frame and the
 * hand-over of the new particles to the backend.
 *
 * Invariants: every rank computes the same candidates and keeps those whose block it owns, so
 * ids and counts need no communication; the ranks agree on each round's outcome; after new
 * particles on several ranks the exchange's shared blocks are set up again. */
#define _POSIX_C_SOURCE 200809L
#include "sim_internal.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "watchdog.h"
#include "error.h"

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
int sim_emit_frame(sim *S, int f, double t0) {
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
      if (S->nranks > 1)
        rc = comm_allreduce(MPI_IN_PLACE, counts, (int)cells, MPI_INT32_T, MPI_SUM, S->comm, "a source's cell counts");
    }
    uint64_t added = 0;
    if (rc == DR_OK) rc = emit_source(sc, E, i, f, t0, counts, S->nranks > 1 ? sim_keep_own : NULL, S, q, &added);
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
    DR_TRY(sim_step_speed(S, &vmax));
    if (vemit > vmax) {
      S->vmax_next = (float)vemit;
      S->vmax_pending = 1;
    }
  }
  return DR_OK;
}

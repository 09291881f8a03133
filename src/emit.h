/* emit.h - particle sources: bodies with "emit" (docs/scene-format.md, "Particle sources").
 *
 * When. A source emits at the start of a frame, before its first substep, on the host (so the
 * same rule holds for every backend and for the CUDA backend's whole-frame and G2P2G paths: a
 * rebuild-mapping follows every emission, and G2P2G starts again from an unprimed P2G after an
 * emission, since the primed sums lack the new particles). Emission is a pure function of the frame, the scene and, for resampling, where the
 * particles stand at that instant:
 *   - mode "rate": N(t) = floor(rate (min(t, end) - start)) particles are born by time t >= start;
 *     at the start t0 of a frame the source brings its count up to min(N(t0), max_particles).
 *     A particle is thus emitted at most one frame after its birth, never before start, and
 *     births up to end are all emitted (at the first frame start at or after end). The k-th
 *     particle of the source stands at a point drawn uniformly inside the shape from random
 *     stream (seed, k).
 *   - mode "resample": at every frame start t0 with start <= t0 < end, every cell of the shape's
 *     bounding cells is sampled as at the start of a run (ppc stratified points, random stream
 *     (seed, round, cell)); of the points inside the shape (m of them), the first m - c are added,
 *     where c is the number of particles of any material whose position lies in that cell. A
 *     cell never ends a round with more than max(c, m) particles, and a full cell gets nothing.
 *     Candidates are ordered by cell, then stratum; max_particles cuts the list.
 * Particles start with the body's velocity, F = I, C = 0, volume dx^3 / ppc and mass volume x
 * density (for the initial sampling a body's volume is split exactly among its particles).
 *
 * Ids. The k-th particle a source (body b) ever emits has id (b << 48) | k: a body that emits is
 * not sampled at the start, so its id range is free; ids stay unique over the run, ranks and
 * devices without any communication, because every rank computes the same ordered candidate
 * list and keeps the candidates whose position it owns. The source's state is its count k and
 * the last frame whose emission is done; checkpoints hold both (io/checkpoint.h), so a resumed
 * run emits exactly what an uninterrupted one does. */
#ifndef DRIFT_EMIT_H
#define DRIFT_EMIT_H

#include <stdint.h>

#include "particles.h"
#include "scene.h"

#define EMIT_ID_BITS 48

typedef struct emit_state {
  int n;              /* sources: the bodies with emit, in body order */
  int *body;          /* [n] body index of each source */
  uint64_t *emitted;  /* [n] particles each source has emitted so far (the next one's k) */
  int frame_done;     /* the last frame whose start-of-frame emission is done (-1: none) */
} emit_state;

int emit_init(const scene *s, emit_state *st);
void emit_free(emit_state *st);

/* Whether source i emits at the start of frame f (t0 its start time): rate sources that owe
 * particles, resampling ones inside [start, end), neither when max_particles is reached. */
int emit_active(const scene *s, const emit_state *st, int i, double t0);

/* A resampling source's cells: the body's bounding cells, lo and the count of cells. */
uint64_t emit_cells(const scene *s, int body, int64_t lo[3], int64_t n[3]);
/* Adds to counts (one per cell of emit_cells) the particles of p standing in each cell. */
void emit_count_cells(const scene *s, int body, const particles *p, int32_t *counts);

/* The candidates of source i at the start of frame f (t0 its start time), in order, cut at
 * max_particles; appends to out those for which keep(ctx, x) is non-zero (NULL keeps all) and
 * advances the source's count by all candidates (kept or not: every rank computes the same).
 * counts: the cells' particle counts over all ranks (resampling sources only, else NULL).
 * *added: candidates over all ranks. */
typedef int (*emit_keep_fn)(void *ctx, const double x[3]);
int emit_source(const scene *s, emit_state *st, int i, int f, double t0, const int32_t *counts, emit_keep_fn keep,
                void *ctx, particles *out, uint64_t *added);

#endif

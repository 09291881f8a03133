/* emit.c - particle sources (see emit.h). */
#include "emit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "physics/constitutive.h"
#include "rng.h"
#include "sample.h"

#define RATE_TRIES 10000 /* rejection sampling of a point inside the shape */

int emit_init(const scene *s, emit_state *st) {
  memset(st, 0, sizeof *st);
  st->frame_done = -1;
  int n = 0;
  for (int b = 0; b < s->n_bodies; ++b) n += s->bodies[b].emit.mode != EMIT_NONE;
  if (n == 0) return DR_OK;
  st->body = dr_malloc(sizeof *st->body * (size_t)n, "particle sources");
  st->emitted = dr_calloc((size_t)n, sizeof *st->emitted, "particle sources");
  if (!st->body || !st->emitted) {
    emit_free(st);
    return DR_ENOMEM;
  }
  for (int b = 0; b < s->n_bodies; ++b)
    if (s->bodies[b].emit.mode != EMIT_NONE) st->body[st->n++] = b;
  return DR_OK;
}

void emit_free(emit_state *st) {
  free(st->body);
  free(st->emitted);
  memset(st, 0, sizeof *st);
}

/* Particles a rate source has borne by time t: floor(rate (min(t, end) - start)), 0 before
 * start (a relative slack of 1e-9 so that rate x duration lands on its integer). */
static uint64_t rate_born(const scene_emit *e, double t) {
  if (!(t > e->start)) return 0;
  const double x = e->rate * (fmin(t, e->end) - e->start);
  const double n = floor(x + 1e-9 * fmax(1.0, x));
  return n >= (double)EMIT_MAX_PARTICLES ? EMIT_MAX_PARTICLES : (uint64_t)n;
}

int emit_active(const scene *s, const emit_state *st, int i, double t0) {
  const scene_emit *e = &s->bodies[st->body[i]].emit;
  if (st->emitted[i] >= e->max_particles) return 0;
  if (e->mode == EMIT_RATE) return rate_born(e, t0) > st->emitted[i];
  return t0 >= e->start && t0 < e->end;
}

uint64_t emit_cells(const scene *s, int body, int64_t lo[3], int64_t n[3]) {
  int64_t hi[3];
  sample_body_cells(s, &s->bodies[body], lo, hi);
  for (int a = 0; a < 3; ++a) n[a] = hi[a] - lo[a];
  return (uint64_t)(n[0] * n[1] * n[2]);
}

void emit_count_cells(const scene *s, int body, const particles *p, int32_t *counts) {
  int64_t lo[3], n[3];
  emit_cells(s, body, lo, n);
  for (size_t i = 0; i < p->n; ++i) {
    int64_t c[3];
    int in = 1;
    for (int a = 0; a < 3 && in; ++a) {
      c[a] = (int64_t)floor(((double)p->x[3 * i + a] - s->domain_min[a]) / s->dx) - lo[a];
      in = c[a] >= 0 && c[a] < n[a];
    }
    if (in) ++counts[(c[2] * n[1] + c[1]) * n[0] + c[0]];
  }
}

/* One candidate: kept (appended to out) when keep says so; its id is (body << 48) | k. */
typedef struct cand_ctx {
  const scene *s;
  int body;
  emit_keep_fn keep;
  void *ctx;
  particles *out;
  float mass, vol, logjp;
} cand_ctx;

static int candidate(const cand_ctx *c, const double x[3], uint64_t k) {
  if (c->keep && !c->keep(c->ctx, x)) return DR_OK;
  const scene_body *b = &c->s->bodies[c->body];
  const float xf[3] = {(float)x[0], (float)x[1], (float)x[2]};
  const float vf[3] = {(float)b->velocity[0], (float)b->velocity[1], (float)b->velocity[2]};
  DR_TRY(particles_push(c->out, xf, vf, c->mass, c->vol, ((uint64_t)c->body << EMIT_ID_BITS) | k, b->material));
  c->out->logjp[c->out->n - 1] = c->logjp;
  return DR_OK;
}

int emit_source(const scene *s, emit_state *st, int i, int f, double t0, const int32_t *counts, emit_keep_fn keep,
                void *ctx, particles *out, uint64_t *added) {
  *added = 0;
  if (!emit_active(s, st, i, t0)) return DR_OK;
  const int bi = st->body[i];
  const scene_body *b = &s->bodies[bi];
  const scene_emit *e = &b->emit;
  const scene_material *mat = &s->materials[b->material];
  const double vol = s->dx * s->dx * s->dx / b->ppc;
  cand_ctx c = {s, bi, keep, ctx, out, (float)(vol * mat->density), (float)vol,
                mat->params.model == MODEL_NACC ? mat->params.nacc_logjp0 : 0.0f};
  const uint64_t base_seed = b->seed * 1000003ULL + (uint64_t)bi;
  uint64_t k = st->emitted[i];
  if (e->mode == EMIT_RATE) {
    uint64_t target = rate_born(e, t0);
    if (target > e->max_particles) target = e->max_particles;
    double lo[3], hi[3];
    scene_body_bounds(b, lo, hi);
    for (; k < target; ++k) {
      rng r = rng_stream(rng_mix(base_seed ^ 0x7261746573726331ULL), k);
      double x[3] = {0.5 * (lo[0] + hi[0]), 0.5 * (lo[1] + hi[1]), 0.5 * (lo[2] + hi[2])};
      for (int t = 0; t < RATE_TRIES; ++t) {
        double y[3];
        for (int a = 0; a < 3; ++a) y[a] = lo[a] + (hi[a] - lo[a]) * (double)rng_uniform(&r);
        if (scene_body_inside(b, y)) {
          memcpy(x, y, sizeof x);
          break;
        }
      }
      DR_TRY(candidate(&c, x, k));
    }
  } else {
    int64_t lo[3], n[3];
    emit_cells(s, bi, lo, n);
    const uint64_t round_seed = rng_mix(base_seed + 0x9e3779b97f4a7c15ULL * (uint64_t)(f + 1));
    double pts[3 * MAX_CELL_SAMPLES];
    for (int64_t iz = 0; iz < n[2] && k < e->max_particles; ++iz)
      for (int64_t iy = 0; iy < n[1] && k < e->max_particles; ++iy)
        for (int64_t ix = 0; ix < n[0] && k < e->max_particles; ++ix) {
          const uint64_t cell = (uint64_t)((iz * n[1] + iy) * n[0] + ix);
          const int64_t cc[3] = {lo[0] + ix, lo[1] + iy, lo[2] + iz};
          sample_cell(s, b, cc, round_seed, cell, pts);
          int m = 0;
          for (int q = 0; q < b->ppc; ++q) m += scene_body_inside(b, pts + 3 * q);
          int want = m - counts[cell];
          for (int q = 0; q < b->ppc && want > 0 && k < e->max_particles; ++q) {
            if (!scene_body_inside(b, pts + 3 * q)) continue;
            DR_TRY(candidate(&c, pts + 3 * q, k));
            ++k;
            --want;
          }
        }
  }
  *added = k - st->emitted[i];
  st->emitted[i] = k;
  return DR_OK;
}

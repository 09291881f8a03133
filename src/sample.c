/* sample.c - stratified random sampling of bodies (see sample.h). */
#include "sample.h"

#include <math.h>
#include <stdlib.h>

#include "error.h"
#include "rng.h"

#define ID_CELL_BITS PARTICLE_ID_BODY_SHIFT

/* The body's bounding cells [lo, hi) in cells of the domain grid (cell i spans
 * [domain_min + i dx, domain_min + (i+1) dx)). */
void sample_body_cells(const scene *s, const scene_body *b, int64_t lo[3], int64_t hi[3]) {
  double bmin[3], bmax[3];
  scene_body_bounds(b, bmin, bmax);
  for (int a = 0; a < 3; ++a) {
    lo[a] = (int64_t)floor((bmin[a] - s->domain_min[a]) / s->dx);
    hi[a] = (int64_t)ceil((bmax[a] - s->domain_min[a]) / s->dx);
    if (hi[a] <= lo[a]) hi[a] = lo[a] + 1;
  }
}

void sample_cell(const scene *s, const scene_body *b, const int64_t c[3], uint64_t seed, uint64_t stream,
                 double *pts) {
  const int ppc = b->ppc;
  int k = 1;
  while (k * k * k < ppc) ++k;
  const int nstrata = k * k * k;
  int strata[MAX_CELL_SAMPLES];
  rng r = rng_stream(seed, stream);
  for (int q = 0; q < nstrata; ++q) strata[q] = q;
  for (int q = 0; q < ppc && ppc < nstrata; ++q) {
    int j = q + (int)rng_below(&r, (uint32_t)(nstrata - q));
    int t = strata[q];
    strata[q] = strata[j];
    strata[j] = t;
  }
  for (int q = 0; q < ppc; ++q) {
    int st = strata[q];
    int sx = st % k, sy = (st / k) % k, sz = st / (k * k);
    /* In double: in float, cell index + fraction rounds to 2^-23 of the index (1/8 cell at 2^20
     * cells), piling points onto cell faces and dropping some on a box's max face. */
    double *x = pts + 3 * q;
    x[0] = s->domain_min[0] + (c[0] + (sx + (double)rng_uniform(&r)) / k) * s->dx;
    x[1] = s->domain_min[1] + (c[1] + (sy + (double)rng_uniform(&r)) / k) * s->dx;
    x[2] = s->domain_min[2] + (c[2] + (sz + (double)rng_uniform(&r)) / k) * s->dx;
  }
}

/* Visits the particles of body bi; emit(ctx, position, id) is called for each, or only counted
 * when emit is NULL. Strata: the smallest k^3 >= ppc sub-cells; when ppc < k^3 a random subset
 * of ppc strata (partial Fisher-Yates) is used, so points stay spread over the cell. */
typedef int (*emit_fn)(void *ctx, const double x[3], uint64_t id);

static int visit_body(const scene *s, int bi, emit_fn emit, void *ctx, uint64_t *count) {
  const scene_body *b = &s->bodies[bi];
  int64_t lo[3], hi[3];
  sample_body_cells(s, b, lo, hi);
  int ppc = b->ppc;
  int64_t nx = hi[0] - lo[0], ny = hi[1] - lo[1], nz = hi[2] - lo[2];
  if ((double)nx * ny * nz * ppc >= (double)(1ULL << ID_CELL_BITS))
    return dr_fail(DR_EINPUT, "%s: bodies[%d]: too many cells to give particles unique ids", s->path, bi);
  uint64_t n = 0;
  double pts[3 * MAX_CELL_SAMPLES];
  for (int64_t iz = 0; iz < nz; ++iz)
    for (int64_t iy = 0; iy < ny; ++iy)
      for (int64_t ix = 0; ix < nx; ++ix) {
        uint64_t cell = (uint64_t)((iz * ny + iy) * nx + ix);
        const int64_t c[3] = {lo[0] + ix, lo[1] + iy, lo[2] + iz};
        sample_cell(s, b, c, b->seed * 1000003ULL + (uint64_t)bi, cell, pts);
        for (int q = 0; q < ppc; ++q) {
          const double *x = pts + 3 * q;
          if (!scene_body_inside(b, x)) continue;
          ++n;
          if (emit) DR_TRY(emit(ctx, x, ((uint64_t)bi << ID_CELL_BITS) | (cell * (uint64_t)ppc + (uint64_t)q)));
        }
      }
  *count = n;
  return DR_OK;
}

uint64_t sample_count(const scene *s, int b) {
  uint64_t n = 0;
  if (s->bodies[b].emit.mode != EMIT_NONE) return 0;
  if (visit_body(s, b, NULL, NULL, &n)) return 0;
  return n;
}

double sample_shape_volume(const scene *s, int bi) {
  const scene_body *b = &s->bodies[bi];
  if (b->shape == SHAPE_BOX) /* a rotation keeps the volume */
    return (b->max[0] - b->min[0]) * (b->max[1] - b->min[1]) * (b->max[2] - b->min[2]);
  if (b->shape == SHAPE_MESH) return b->volume; /* the placed mesh's, by the divergence theorem */
  if (b->shape == SHAPE_CYLINDER) return 3.14159265358979323846 * b->radius * b->radius * b->height;
  return 4.0 / 3.0 * 3.14159265358979323846 * b->radius * b->radius * b->radius;
}

int sample_scene(const scene *s, particles *p) { return sample_scene_where(s, NULL, NULL, p); }

typedef struct visit_ctx {
  sample_point_fn fn;
  void *ctx;
} visit_ctx;

static int visit_one(void *ctx, const double x[3], uint64_t id) {
  (void)id;
  visit_ctx *c = ctx;
  return c->fn(c->ctx, x);
}

/* Mesh bodies are sampled through their level sets: built by scene_build_levelsets first. */
static int levelsets_built(const scene *s) {
  if (s->n_levelset_jobs == 0) return DR_OK;
  return dr_fail(DR_EINTERNAL, "%s: sampled before its mesh level sets were built (scene_build_levelsets)", s->path);
}

int sample_visit(const scene *s, sample_point_fn fn, void *ctx) {
  DR_TRY(levelsets_built(s));
  visit_ctx c = {fn, ctx};
  for (int bi = 0; bi < s->n_bodies; ++bi) {
    uint64_t n = 0; /* sources too: where their particles will be (the initial cuts) */
    DR_TRY(visit_body(s, bi, visit_one, &c, &n));
  }
  return DR_OK;
}

/* ---- the bodies as a particle source ---------------------------------------------------------- */

struct sample_stream {
  const scene *s;
  sample_keep_fn keep;
  void *keep_ctx;
  size_t kept;      /* the particles keep accepts: the source's n */
  double *vol;      /* [n_bodies] each body's particle volume (m^3), from its count */
  double mass_max;  /* the largest particle mass (kg, as stored: in float) */
  /* where next goes on: body bi, its cell (a linear index over its bounding cells, x fastest) and
   * the point q of that cell, whose points pts holds when in_cell */
  int bi, in_cell, q;
  int64_t lo[3], nx, ny;
  uint64_t cell, ncells;
  double pts[3 * MAX_CELL_SAMPLES];
};

typedef struct count_ctx {
  sample_keep_fn keep;
  void *keep_ctx;
  size_t kept;
} count_ctx;

static int count_kept(void *ctx, const double x[3], uint64_t id) {
  (void)id;
  count_ctx *c = ctx;
  c->kept += c->keep(c->keep_ctx, x) != 0;
  return DR_OK;
}

/* The stream's next body (sources skipped; bi = n_bodies at the end), at its first cell. */
static void next_body(sample_stream *st) {
  const scene *s = st->s;
  while (++st->bi < s->n_bodies && s->bodies[st->bi].emit.mode != EMIT_NONE) {
  }
  st->in_cell = 0;
  st->cell = 0;
  st->ncells = 0;
  if (st->bi >= s->n_bodies) return;
  int64_t hi[3];
  sample_body_cells(s, &s->bodies[st->bi], st->lo, hi);
  st->nx = hi[0] - st->lo[0], st->ny = hi[1] - st->lo[1];
  st->ncells = (uint64_t)(st->nx * st->ny * (hi[2] - st->lo[2]));
}

int sample_stream_open(const scene *s, sample_keep_fn keep, void *keep_ctx, sample_stream **out) {
  *out = NULL;
  DR_TRY(levelsets_built(s));
  sample_stream *st = dr_calloc(1, sizeof *st, "the sampling stream");
  if (!st) return DR_ENOMEM;
  st->vol = dr_calloc((size_t)(s->n_bodies ? s->n_bodies : 1), sizeof *st->vol, "the sampling stream");
  if (!st->vol) {
    sample_stream_close(&st);
    return DR_ENOMEM;
  }
  st->s = s, st->keep = keep, st->keep_ctx = keep_ctx;
  for (int bi = 0; bi < s->n_bodies; ++bi) {
    if (s->bodies[bi].emit.mode != EMIT_NONE) continue; /* sources emit later (emit.h) */
    count_ctx c = {keep, keep_ctx, 0};
    uint64_t n = 0;
    int rc = visit_body(s, bi, keep ? count_kept : NULL, &c, &n);
    if (rc == DR_OK && n == 0)
      rc = dr_fail(DR_EINPUT, "%s: bodies[%d]: the body holds no particle (it is thinner than its sampling; raise ppc or make it larger than dx)", s->path, bi);
    if (rc) {
      sample_stream_close(&st);
      return rc;
    }
    st->kept += keep ? c.kept : (size_t)n;
    /* the body's volume shared by all its particles, whichever rank keeps them */
    st->vol[bi] = sample_shape_volume(s, bi) / (double)n;
    st->mass_max = fmax(st->mass_max, (double)(float)(st->vol[bi] * s->materials[s->bodies[bi].material].density));
  }
  st->bi = -1;
  next_body(st);
  *out = st;
  return DR_OK;
}

static int stream_next(void *ctx, particles *out, size_t max) {
  sample_stream *st = ctx;
  const scene *s = st->s;
  size_t added = 0;
  while (added < max && st->bi < s->n_bodies) {
    const int bi = st->bi;
    const scene_body *b = &s->bodies[bi];
    if (!st->in_cell) {
      if (st->cell == st->ncells) {
        next_body(st);
        continue;
      }
      const uint64_t nx = (uint64_t)st->nx, ny = (uint64_t)st->ny;
      const int64_t c[3] = {st->lo[0] + (int64_t)(st->cell % nx), st->lo[1] + (int64_t)(st->cell / nx % ny),
                            st->lo[2] + (int64_t)(st->cell / (nx * ny))};
      sample_cell(s, b, c, b->seed * 1000003ULL + (uint64_t)bi, st->cell, st->pts);
      st->q = 0;
      st->in_cell = 1;
    }
    const scene_material *mat = &s->materials[b->material];
    const float vol = (float)st->vol[bi], mass = (float)(st->vol[bi] * mat->density);
    const float logjp = mat->params.model == MODEL_NACC ? mat->params.nacc_logjp0 : 0.0f;
    const float vf[3] = {(float)b->velocity[0], (float)b->velocity[1], (float)b->velocity[2]};
    for (; st->q < b->ppc && added < max; ++st->q) {
      const double *x = st->pts + 3 * st->q;
      if (!scene_body_inside(b, x) || (st->keep && !st->keep(st->keep_ctx, x))) continue;
      const float xf[3] = {(float)x[0], (float)x[1], (float)x[2]};
      const uint64_t id = ((uint64_t)bi << ID_CELL_BITS) | (st->cell * (uint64_t)b->ppc + (uint64_t)st->q);
      DR_TRY(particles_push(out, xf, vf, mass, vol, id, b->material));
      out->logjp[out->n - 1] = logjp; /* the plastic state starts at the material's initial_compression */
      ++added;
    }
    if (st->q == b->ppc) st->in_cell = 0, ++st->cell;
  }
  return DR_OK;
}

/* The same particles again from the first body's first cell (the sampling is a function of the
 * scene: bitwise the same). */
static int stream_rewind(void *ctx) {
  sample_stream *st = ctx;
  st->bi = -1;
  next_body(st);
  return DR_OK;
}

particle_source sample_stream_source(sample_stream *st) {
  return (particle_source){.n = st->kept, .next = stream_next, .ctx = st, .rewind = stream_rewind};
}

double sample_stream_mass_max(const sample_stream *st) { return st->mass_max; }

void sample_stream_close(sample_stream **stp) {
  sample_stream *st = *stp;
  if (!st) return;
  free(st->vol);
  free(st);
  *stp = NULL;
}

int sample_scene_where(const scene *s, sample_keep_fn keep, void *keep_ctx, particles *p) {
  sample_stream *st = NULL;
  DR_TRY(sample_stream_open(s, keep, keep_ctx, &st));
  const int rc = stream_next(st, p, st->kept);
  sample_stream_close(&st);
  return rc;
}

/* sample.c - stratified random sampling of bodies (see sample.h). */
#include "sample.h"

#include <math.h>

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

typedef struct push_ctx {
  particles *p;
  const scene_body *b;
  int material;
  sample_keep_fn keep;
  void *keep_ctx;
} push_ctx;

static int push_one(void *ctx, const double x[3], uint64_t id) {
  push_ctx *c = ctx;
  if (c->keep && !c->keep(c->keep_ctx, x)) return DR_OK;
  float xf[3] = {(float)x[0], (float)x[1], (float)x[2]};
  float vf[3] = {(float)c->b->velocity[0], (float)c->b->velocity[1], (float)c->b->velocity[2]};
  return particles_push(c->p, xf, vf, 0.0f, 0.0f, id, c->material);
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

int sample_visit(const scene *s, sample_point_fn fn, void *ctx) {
  visit_ctx c = {fn, ctx};
  for (int bi = 0; bi < s->n_bodies; ++bi) {
    uint64_t n = 0; /* sources too: where their particles will be (the initial cuts) */
    DR_TRY(visit_body(s, bi, visit_one, &c, &n));
  }
  return DR_OK;
}

int sample_scene_where(const scene *s, sample_keep_fn keep, void *keep_ctx, particles *p) {
  for (int bi = 0; bi < s->n_bodies; ++bi) {
    if (s->bodies[bi].emit.mode != EMIT_NONE) continue; /* sources emit later (emit.h) */
    size_t first = p->n;
    push_ctx ctx = {p, &s->bodies[bi], s->bodies[bi].material, keep, keep_ctx};
    uint64_t n = 0;
    DR_TRY(visit_body(s, bi, push_one, &ctx, &n));
    if (n == 0)
      return dr_fail(DR_EINPUT, "%s: bodies[%d]: the body holds no particle (it is thinner than its sampling; raise ppc or make it larger than dx)", s->path, bi);
    double vol = sample_shape_volume(s, bi) / (double)n;
    const scene_material *mat = &s->materials[s->bodies[bi].material];
    double mass = vol * mat->density;
    const float logjp = mat->params.model == MODEL_NACC ? mat->params.nacc_logjp0 : 0.0f;
    for (size_t i = first; i < p->n; ++i) {
      p->vol0[i] = (float)vol;
      p->mass[i] = (float)mass;
      p->logjp[i] = logjp; /* the plastic state starts at the material's initial_compression */
    }
  }
  return DR_OK;
}

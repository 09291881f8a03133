/* scene_bodies.c - the scene's bodies: their shapes (box, sphere, cylinder, mesh), material,
 * sampling keys and particle sources, and the geometry the sampler asks of them (bounds, inside).
 *
 * A body is checked for duplicate keys before its shape is read, then against that shape's keys.
 * Invariants: materials are parsed before bodies (body.material is an index into them); every
 * body's bounding box (scene_body_bounds) lies inside the domain within REL_TOL * dx; rotation is
 * a unit quaternion (identity when absent); mesh bodies are read in scene_meshes.c. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "meshsdf.h"
#include "scene_parse.h"

#define MAX_PPC 1000
#define MAX_SEED 9007199254740992.0    /* 2^53: the largest integer a JSON number holds exactly */

static const char *const SHAPE_NAMES[] = {"box", "sphere", "cylinder", "mesh"};

const char *scene_shape_name(int shape) {
  return shape >= 0 && shape < (int)(sizeof SHAPE_NAMES / sizeof *SHAPE_NAMES) ? SHAPE_NAMES[shape] : "?";
}
static const char *const ALL_BODY_KEYS[] = {"shape",    "min", "max",      "rotation", "center", "radius",
                                            "axis",     "height", "material", "ppc", "velocity", "seed",
                                            "file",     "scale", "translation", "emit"};
static const char *const MESH_KEYS[] = {"shape", "file", "scale", "translation", "rotation", "material",
                                        "ppc", "velocity", "seed", "emit"};
static const char *const BOX_KEYS[] = {"shape", "min", "max", "rotation", "material", "ppc", "velocity", "seed", "emit"};
static const char *const SPHERE_KEYS[] = {"shape", "center", "radius", "material",
                                          "ppc",   "velocity", "seed", "emit"};
static const char *const CYLINDER_KEYS[] = {"shape",    "center", "axis", "radius", "height",
                                            "material", "ppc",    "velocity", "seed", "emit"};
static const char *const EMIT_KEYS[] = {"mode", "start", "end", "rate", "volume_rate", "max_particles"};
static const char *const EMIT_MODES[] = {"rate", "resample"};

/* Fails when the bounding box of a body leaves the domain; key names the value to blame and
 * what says which shape ("the sphere", "the cylinder", "the rotated box"). */
int scene_check_bounds_inside(const ctx *c, const scene *s, const scene_body *body,
                              const char *where, const char *blame, const char *what) {
  char key[KEY_LEN], x[32], y[32];
  double lo[3], hi[3], tol = REL_TOL * s->dx;
  scene_body_bounds(body, lo, hi);
  for (int i = 0; i < 3; ++i) {
    const int below = lo[i] < s->domain_min[i] - tol;
    if (!below && !(hi[i] > s->domain_max[i] + tol)) continue;
    sj_join(key, where, blame);
    return sj_fail(c, key, "%s leaves the domain through domain.%s along %c (got its %s %c at %s; "
                   "expected %s domain.%s.%c %s)", what, below ? "min" : "max", AXIS[i],
                   below ? "lowest" : "highest", AXIS[i], sj_fmt_derived(x, below ? lo[i] : hi[i]),
                   below ? ">=" : "<=", below ? "min" : "max", AXIS[i],
                   sj_fmt_num(y, below ? s->domain_min[i] : s->domain_max[i]));
  }
  return 0;
}

/* A box: min < max, both inside the domain; or, rotated about its centre, its bounding box
 * inside the domain. */
static int parse_box(const ctx *c, const cJSON *b, const char *where, const scene *s,
                     scene_body *body) {
  char key[KEY_LEN], x[32], y[32];
  double tol = REL_TOL * s->dx;
  DR_TRY(sj_get_vec3(c, b, where, "min", 1, NULL, "m", body->min));
  DR_TRY(sj_get_vec3(c, b, where, "max", 1, NULL, "m", body->max));
  for (int i = 0; i < 3; ++i)
    if (!(body->max[i] > body->min[i])) {
      sj_join(key, where, "max");
      return sj_fail(c, key, "not above min along %c (got max.%c %s <= min.%c %s; expected max > min "
                     "on every axis)", AXIS[i], AXIS[i], sj_fmt_num(x, body->max[i]), AXIS[i],
                     sj_fmt_num(y, body->min[i]));
    }
  DR_TRY(sj_get_rotation(c, b, where, &body->rotated, body->rotation, NULL));
  if (body->rotated) return scene_check_bounds_inside(c, s, body, where, "rotation", "the rotated box");
  for (int i = 0; i < 3; ++i)
    if (body->min[i] < s->domain_min[i] - tol) {
      sj_join(key, where, "min");
      return sj_fail(c, key, "outside the domain: below domain.min along %c (got min.%c %s; expected "
                     ">= domain.min.%c %s)", AXIS[i], AXIS[i], sj_fmt_num(x, body->min[i]), AXIS[i],
                     sj_fmt_num(y, s->domain_min[i]));
    }
  for (int i = 0; i < 3; ++i)
    if (body->max[i] > s->domain_max[i] + tol) {
      sj_join(key, where, "max");
      return sj_fail(c, key, "outside the domain: above domain.max along %c (got max.%c %s; expected "
                     "<= domain.max.%c %s)", AXIS[i], AXIS[i], sj_fmt_num(x, body->max[i]), AXIS[i],
                     sj_fmt_num(y, s->domain_max[i]));
    }
  return 0;
}

/* A sphere: radius > 0, its bounding box inside the domain. */
static int parse_sphere(const ctx *c, const cJSON *b, const char *where, const scene *s,
                        scene_body *body) {
  char key[KEY_LEN], x[32], y[32];
  double tol = REL_TOL * s->dx;
  DR_TRY(sj_get_vec3(c, b, where, "center", 1, NULL, "m", body->center));
  DR_TRY(sj_get_real(c, b, where, "radius", 1, 0, POSITIVE_M, &body->radius));
  for (int i = 0; i < 3; ++i) {
    double lo = s->domain_min[i], hi = s->domain_max[i], ctr = body->center[i];
    if (ctr < lo - tol || ctr > hi + tol) {
      sj_join(key, where, "center");
      return sj_fail(c, key, "outside the domain: %s domain.%s along %c (got center.%c %s; expected "
                     "%s domain.%s.%c %s)", ctr < lo ? "below" : "above", ctr < lo ? "min" : "max",
                     AXIS[i], AXIS[i], sj_fmt_num(x, ctr), ctr < lo ? ">=" : "<=",
                     ctr < lo ? "min" : "max", AXIS[i], sj_fmt_num(y, ctr < lo ? lo : hi));
    }
  }
  for (int i = 0; i < 3; ++i) {
    double lo = s->domain_min[i], hi = s->domain_max[i], ctr = body->center[i], r = body->radius;
    if (ctr - r < lo - tol || ctr + r > hi + tol) {
      int below = ctr - r < lo - tol;
      sj_join(key, where, "radius");
      return sj_fail(c, key, "the sphere leaves the domain through domain.%s along %c (got center.%c "
                     "%s radius = %s; expected %s domain.%s.%c %s)", below ? "min" : "max", AXIS[i],
                     AXIS[i], below ? "-" : "+", sj_fmt_derived(x, below ? ctr - r : ctr + r),
                     below ? ">=" : "<=", below ? "min" : "max", AXIS[i],
                     sj_fmt_num(y, below ? lo : hi));
    }
  }
  return 0;
}

/* A cylinder: radius, height > 0, its bounding box inside the domain. */
static int parse_cylinder(const ctx *c, const cJSON *b, const char *where, const scene *s,
                          scene_body *body) {
  DR_TRY(sj_get_vec3(c, b, where, "center", 1, NULL, "m", body->center));
  DR_TRY(sj_get_direction(c, b, where, "axis", body->axis));
  DR_TRY(sj_get_real(c, b, where, "radius", 1, 0, POSITIVE_M, &body->radius));
  DR_TRY(sj_get_real(c, b, where, "height", 1, 0, POSITIVE_M, &body->height));
  return scene_check_bounds_inside(c, s, body, where, "height", "the cylinder");
}

/* body.material: the index of a defined material. */
static int parse_body_material(const ctx *c, const cJSON *b, const char *where, const scene *s,
                               scene_body *body) {
  char key[KEY_LEN], g[GOT_LEN], defined[600];
  const char *name = NULL;
  DR_TRY(sj_get_string(c, b, where, "material", 1, NULL, "the name of a material in materials",
                       &name));
  for (int i = 0; i < s->n_materials; ++i)
    if (strcmp(name, s->materials[i].name) == 0) {
      body->material = i;
      return 0;
    }
  size_t k = 0;
  defined[0] = 0;
  for (int i = 0; i < s->n_materials; ++i) {
    char nm[200];
    sj_clean(nm, sizeof nm, s->materials[i].name, 70);
    if (k + strlen(nm) + 8 > 400) {
      snprintf(defined + k, sizeof defined - k, ", ...");
      break;
    }
    k += (size_t)snprintf(defined + k, sizeof defined - k, "%s%s", i ? ", " : "", nm);
  }
  sj_join(key, where, "material");
  return sj_fail(c, key, "no material of that name (got %s; expected one of the defined materials: "
                 "%s)", sj_got(g, cJSON_GetObjectItemCaseSensitive(b, "material")), defined);
}

/* body.emit: a particle source (src/emit.h). mode "rate" (default) takes exactly one of rate
 * (particles/s) and volume_rate (m^3/s, turned into particles/s with the body's particle volume
 * dx^3 / ppc); mode "resample" refills the shape every frame and takes neither. */
static int parse_emit(const ctx *c, const cJSON *b, const char *where, const scene *s, scene_body *body) {
  char ew[64], key[KEY_LEN], x[32], y[32];
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(b, "emit");
  scene_emit *em = &body->emit;
  memset(em, 0, sizeof *em);
  if (!e) return 0;
  snprintf(ew, sizeof ew, "%s.emit", where);
  DR_TRY(sj_need_object(c, e, ew, "with keys mode, start, end, rate or volume_rate, max_particles"));
  DR_TRY(sj_check_keys(c, e, ew, EMIT_KEYS, 6, NULL, 0, NULL));
  int mode = 0;
  DR_TRY(sj_get_enum(c, e, ew, "mode", 0, EMIT_MODES, 2, &mode));
  em->mode = mode == 0 ? EMIT_RATE : EMIT_RESAMPLE;
  DR_TRY(sj_get_real(c, e, ew, "start", 0, 0, (range){0, INFINITY, 0, 0, "s"}, &em->start));
  DR_TRY(sj_get_real(c, e, ew, "end", 0, INFINITY, (range){0, INFINITY, 0, 0, "s"}, &em->end));
  if (!(em->end > em->start)) {
    sj_join(key, ew, "end");
    return sj_fail(c, key, "not after start (got end %s <= start %s; expected end > start)", sj_fmt_num(x, em->end),
                   sj_fmt_num(y, em->start));
  }
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(e, "rate"), *v = cJSON_GetObjectItemCaseSensitive(e, "volume_rate");
  if (em->mode == EMIT_RESAMPLE && (r || v)) {
    sj_join(key, ew, r ? "rate" : "volume_rate");
    return sj_fail(c, key, "not allowed with mode \"resample\" (a resampling source refills its shape every frame; "
                   "expected no rate or volume_rate, or mode \"rate\")");
  }
  if (em->mode == EMIT_RATE && r && v) {
    sj_join(key, ew, "volume_rate");
    return sj_fail(c, key, "given together with rate (expected exactly one of rate (particles/s) and volume_rate "
                   "(m^3/s))");
  }
  if (em->mode == EMIT_RATE && !r && !v)
    return sj_fail(c, ew, "missing rate or volume_rate (expected exactly one of rate (particles/s) and volume_rate "
                   "(m^3/s), or mode \"resample\")");
  const range positive_rate = {0, INFINITY, 1, 0, "particles/s"}, positive_vrate = {0, INFINITY, 1, 0, "m^3/s"};
  if (r) DR_TRY(sj_get_real(c, e, ew, "rate", 1, 0, positive_rate, &em->rate));
  if (v) {
    DR_TRY(sj_get_real(c, e, ew, "volume_rate", 1, 0, positive_vrate, &em->volume_rate));
    em->rate = em->volume_rate / (s->dx * s->dx * s->dx / body->ppc);
  }
  double cap = 0;
  DR_TRY(sj_get_int(c, e, ew, "max_particles", 0, (double)EMIT_MAX_PARTICLES, 1, (double)EMIT_MAX_PARTICLES, &cap));
  em->max_particles = (uint64_t)cap;
  return 0;
}

static int parse_body(const ctx *c, const cJSON *b, int index, scene *s, scene_body *body) {
  static const double zero[3] = {0, 0, 0};
  char where[32], variant[40];
  double seed;
  snprintf(where, sizeof where, "bodies[%d]", index);
  DR_TRY(sj_need_object(c, b, where, "with keys shape, material, ..."));
  DR_TRY(sj_check_keys(c, b, where, NULL, 0, NULL, 0, NULL)); /* duplicates, before reading shape */
  DR_TRY(sj_get_enum(c, b, where, "shape", -1, SHAPE_NAMES, 4, &body->shape));
  snprintf(variant, sizeof variant, "shape '%s'", SHAPE_NAMES[body->shape]);
  body->rotation[0] = 1;
  if (body->shape == SHAPE_BOX) {
    DR_TRY(sj_check_keys(c, b, where, BOX_KEYS, 9, ALL_BODY_KEYS, 16, variant));
    DR_TRY(parse_box(c, b, where, s, body));
  } else if (body->shape == SHAPE_SPHERE) {
    DR_TRY(sj_check_keys(c, b, where, SPHERE_KEYS, 8, ALL_BODY_KEYS, 16, variant));
    DR_TRY(parse_sphere(c, b, where, s, body));
  } else if (body->shape == SHAPE_MESH) {
    DR_TRY(sj_check_keys(c, b, where, MESH_KEYS, 10, ALL_BODY_KEYS, 16, variant));
    DR_TRY(scene_parse_mesh_body(c, b, where, s, body));
  } else {
    DR_TRY(sj_check_keys(c, b, where, CYLINDER_KEYS, 10, ALL_BODY_KEYS, 16, variant));
    DR_TRY(parse_cylinder(c, b, where, s, body));
  }
  DR_TRY(parse_body_material(c, b, where, s, body));
  DR_TRY(sj_get_int32(c, b, where, "ppc", 0, 8, 1, MAX_PPC, &body->ppc));
  DR_TRY(sj_get_vec3(c, b, where, "velocity", 0, zero, "m/s", body->velocity));
  DR_TRY(sj_get_int(c, b, where, "seed", 0, index, 0, MAX_SEED, &seed));
  body->seed = (uint64_t)seed;
  return parse_emit(c, b, where, s, body);
}

int scene_parse_bodies(const ctx *c, const cJSON *root, scene *s) {
  const cJSON *bs;
  char g[GOT_LEN];
  DR_TRY(sj_get_section(c, root, "bodies", 1, "a list of bodies", &bs));
  if (!cJSON_IsArray(bs))
    return sj_fail(c, "bodies", "wrong type (got %s; expected a list of bodies [{\"shape\": ...}, "
                   "...])", sj_got(g, bs));
  int n = cJSON_GetArraySize(bs);
  if (n == 0)
    return sj_fail(c, "bodies", "empty (got []; expected at least one body, e.g. {\"shape\": "
                   "\"box\", \"min\": [...], \"max\": [...], \"material\": ...})");
  DR_ALLOC0(s->bodies, n, "scene bodies");
  s->n_bodies = n;
  int i = 0;
  for (const cJSON *b = bs->child; b; b = b->next, ++i) {
    DR_TRY(parse_body(c, b, i, s, &s->bodies[i]));
    s->n_sources += s->bodies[i].emit.mode != EMIT_NONE;
  }
  return 0;
}

/* Rotation matrix (row-major) of a box body's quaternion. */
static void body_matrix(const scene_body *b, double R[9]) {
  const double w = b->rotation[0], x = b->rotation[1], y = b->rotation[2], z = b->rotation[3];
  R[0] = 1 - 2 * (y * y + z * z), R[1] = 2 * (x * y - w * z), R[2] = 2 * (x * z + w * y);
  R[3] = 2 * (x * y + w * z), R[4] = 1 - 2 * (x * x + z * z), R[5] = 2 * (y * z - w * x);
  R[6] = 2 * (x * z - w * y), R[7] = 2 * (y * z + w * x), R[8] = 1 - 2 * (x * x + y * y);
}

void scene_body_bounds(const scene_body *b, double lo[3], double hi[3]) {
  if (b->shape == SHAPE_MESH) {
    for (int a = 0; a < 3; ++a) lo[a] = b->mesh_lo[a], hi[a] = b->mesh_hi[a];
    return;
  }
  for (int a = 0; a < 3; ++a) {
    double ext;
    if (b->shape == SHAPE_BOX && !b->rotated) {
      lo[a] = b->min[a];
      hi[a] = b->max[a];
      continue;
    }
    double c = b->center[a];
    if (b->shape == SHAPE_BOX) { /* |R| times the half extents */
      double R[9];
      body_matrix(b, R);
      c = 0.5 * (b->min[a] + b->max[a]);
      ext = 0;
      for (int j = 0; j < 3; ++j) ext += fabs(R[3 * a + j]) * 0.5 * (b->max[j] - b->min[j]);
    } else if (b->shape == SHAPE_SPHERE) {
      ext = b->radius;
    } else { /* cylinder: the caps' discs, projected */
      double u = b->axis[a];
      ext = fabs(u) * 0.5 * b->height + b->radius * sqrt(fmax(0.0, 1 - u * u));
    }
    lo[a] = c - ext;
    hi[a] = c + ext;
  }
}

int scene_body_inside(const scene_body *b, const double p[3]) {
  if (b->shape == SHAPE_MESH) return levelset_phi(b->pool, b->levelset, p) < 0.0f;
  if (b->shape == SHAPE_BOX && !b->rotated)
    return p[0] >= b->min[0] && p[0] < b->max[0] && p[1] >= b->min[1] && p[1] < b->max[1] &&
           p[2] >= b->min[2] && p[2] < b->max[2];
  if (b->shape == SHAPE_BOX) { /* in the box's own frame: R^T (p - centre) */
    double R[9], d[3];
    body_matrix(b, R);
    for (int a = 0; a < 3; ++a) d[a] = p[a] - 0.5 * (b->min[a] + b->max[a]);
    for (int j = 0; j < 3; ++j) {
      double l = R[j] * d[0] + R[3 + j] * d[1] + R[6 + j] * d[2], h = 0.5 * (b->max[j] - b->min[j]);
      if (!(l >= -h && l < h)) return 0;
    }
    return 1;
  }
  double d[3], d2 = 0;
  for (int a = 0; a < 3; ++a) d[a] = p[a] - b->center[a], d2 += d[a] * d[a];
  if (b->shape == SHAPE_SPHERE) return d2 < b->radius * b->radius;
  double ax = d[0] * b->axis[0] + d[1] * b->axis[1] + d[2] * b->axis[2];
  return fabs(ax) < 0.5 * b->height && d2 - ax * ax < b->radius * b->radius;
}

/* scene_colliders.c - what acts on the grid like a wall: the domain's boundary faces and the
 * colliders (plane, box, sphere, cylinder, mesh) with their keyframed motion, and the colliders
 * as the kernels take them (scene_kernel_colliders).
 *
 * A wall's friction is allowed only with type "separate". Invariants: at most MAX_COLLIDERS
 * colliders (each is tested at every grid node); keyframe times increase and consecutive
 * rotations differ by at most 180 degrees; the name lists follow the enums' order in
 * physics/boundary.h and physics/sdf.h (WALL_TYPES, FACE_NAMES, COLLIDER_SHAPES). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "scene_parse.h"

#define MAX_COLLIDERS 256                /* colliders are tested at every grid node */

/* Wall types, and the face names of the per-face form (enum boundary_face order). */
static const char *const WALL_TYPES[] = {"sticky", "slip", "separate"};
static const char *const FACE_NAMES[] = {"x-", "x+", "y-", "y+", "z-", "z+"};

/* obj.type and obj.friction of a wall (a face, the boundary's default, a collider): type
 * defaults to def_type, friction (allowed only with "separate") to def_friction there. */
static int parse_wall(const ctx *c, const cJSON *obj, const char *where, int def_type,
                      double def_friction, int *type, double *friction) {
  char key[KEY_LEN];
  DR_TRY(sj_get_enum(c, obj, where, "type", def_type, WALL_TYPES, 3, type));
  if (cJSON_GetObjectItemCaseSensitive(obj, "friction") && *type != BOUNDARY_SEPARATE) {
    sj_join(key, where, "friction");
    return sj_fail(c, key, "allowed only with type \"separate\" (got type \"%s\"; expected no "
                   "friction, or type \"separate\")", WALL_TYPES[*type]);
  }
  return sj_get_real(c, obj, where, "friction", 0, *type == BOUNDARY_SEPARATE ? def_friction : 0,
                     (range){0, INFINITY, 0, 0, ""}, friction);
}

/* boundary: {type, friction} for every face, or per face {"x-": {type, friction}, ...}; the two
 * mix: faces not listed take the top-level type and friction (default sticky). */
int scene_parse_boundary(const ctx *c, const cJSON *root, scene *s) {
  static const char *const keys[] = {"type", "friction", "x-", "x+", "y-", "y+", "z-", "z+"};
  static const char *const face_keys[] = {"type", "friction"};
  const cJSON *b;
  int type = BOUNDARY_STICKY;
  double friction = 0;
  DR_TRY(sj_get_section(c, root, "boundary", 0, "", &b));
  if (b) {
    DR_TRY(sj_need_object(c, b, "boundary", "with keys type, friction, or faces x-, x+, y-, y+, z-, z+"));
    DR_TRY(sj_check_keys(c, b, "boundary", keys, 8, NULL, 0, NULL));
    DR_TRY(parse_wall(c, b, "boundary", BOUNDARY_STICKY, 0, &type, &friction));
  }
  for (int f = 0; f < DR_FACES; ++f) {
    s->faces[f].type = type;
    s->faces[f].friction = friction;
    const cJSON *o = b ? cJSON_GetObjectItemCaseSensitive(b, FACE_NAMES[f]) : NULL;
    if (!o) continue;
    char where[KEY_LEN];
    sj_join(where, "boundary", FACE_NAMES[f]);
    DR_TRY(sj_need_object(c, o, where, "with keys type, friction"));
    DR_TRY(sj_check_keys(c, o, where, face_keys, 2, NULL, 0, NULL));
    DR_TRY(parse_wall(c, o, where, type, friction, &s->faces[f].type, &s->faces[f].friction));
  }
  return 0;
}

/* Collider shapes (enum sdf_shape order) and the keys each accepts. */
static const char *const COLLIDER_SHAPES[] = {"plane", "box", "sphere", "cylinder", "mesh"};
static const char *const ALL_COLLIDER_KEYS[] = {"shape", "point", "normal", "min", "max", "center",
                                                "radius", "axis", "height", "type", "friction",
                                                "motion", "file", "files", "fps", "first", "count",
                                                "scale", "rotation", "translation"};
static const char *const MESH_COLLIDER_KEYS[] = {"shape", "file", "files", "fps", "first", "count", "scale",
                                                 "rotation", "translation", "type", "friction", "motion"};
static const char *const PLANE_COLLIDER_KEYS[] = {"shape", "point", "normal", "type", "friction", "motion"};
static const char *const BOX_COLLIDER_KEYS[] = {"shape", "min", "max", "type", "friction", "motion"};
static const char *const SPHERE_COLLIDER_KEYS[] = {"shape", "center", "radius", "type", "friction", "motion"};
static const char *const CYLINDER_COLLIDER_KEYS[] = {"shape", "center", "axis", "radius", "height",
                                                     "type", "friction", "motion"};

/* motion: a non-empty list of keyframes {time, translation, rotation}, times increasing, each
 * rotation at most 180 degrees from the previous one. */
static int parse_motion(const ctx *c, const cJSON *col, const char *where, scene_collider *sc) {
  static const char *const keys[] = {"time", "translation", "rotation"};
  static const double zero[3] = {0, 0, 0};
  char mkey[KEY_LEN], g[GOT_LEN], a[32], b[32];
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(col, "motion");
  if (!m) return 0;
  sj_join(mkey, where, "motion");
  if (!cJSON_IsArray(m))
    return sj_fail(c, mkey, "wrong type (got %s; expected a list of keyframes [{\"time\": s, "
                   "\"translation\": [x, y, z], \"rotation\": {\"axis\": [x, y, z], \"angle\": "
                   "degrees}}, ...])", sj_got(g, m));
  int n = cJSON_GetArraySize(m);
  if (n == 0)
    return sj_fail(c, mkey, "empty (got []; expected at least one keyframe, or no motion for a static "
                   "collider)");
  DR_ALLOC0(sc->keys, n, "collider keyframes");
  sc->n_keys = n;
  int i = 0;
  for (const cJSON *k = m->child; k; k = k->next, ++i) {
    char kw[KEY_LEN + 16];
    int rotated;
    scene_collider_key *K = &sc->keys[i];
    snprintf(kw, sizeof kw, "%s[%d]", mkey, i);
    DR_TRY(sj_need_object(c, k, kw, "with keys time, translation, rotation"));
    DR_TRY(sj_check_keys(c, k, kw, keys, 3, NULL, 0, NULL));
    DR_TRY(sj_get_real(c, k, kw, "time", 1, 0, (range){-INFINITY, INFINITY, 0, 0, "s"}, &K->time));
    if (i > 0 && !(K->time > K[-1].time)) {
      char key[KEY_LEN];
      sj_join(key, kw, "time");
      return sj_fail(c, key, "not after the previous keyframe (got %s; expected keyframe times that "
                     "increase, > %s s)", sj_fmt_num(a, K->time), sj_fmt_num(b, K[-1].time));
    }
    DR_TRY(sj_get_vec3(c, k, kw, "translation", 0, zero, "m", K->translation));
    DR_TRY(sj_get_rotation(c, k, kw, &rotated, K->rotation, &K->angle));
    if (i > 0) {
      const double *p = K[-1].rotation, *q = K->rotation;
      if (p[0] * q[0] + p[1] * q[1] + p[2] * q[2] + p[3] * q[3] < -1e-9) {
        char key[KEY_LEN];
        sj_join(key, kw, "rotation");
        return sj_fail(c, key, "turns by more than 180 degrees from the previous keyframe (got angle "
                       "%s after %s; expected at most 180 degrees between keyframes: add keyframes "
                       "in between)", sj_fmt_num(a, K->angle), sj_fmt_num(b, K[-1].angle));
      }
    }
  }
  return 0;
}

static int parse_collider(const ctx *c, const cJSON *col, int index, scene *s, scene_collider *sc) {
  char where[32], variant[40], key[KEY_LEN], x[32], y[32];
  snprintf(where, sizeof where, "colliders[%d]", index);
  DR_TRY(sj_need_object(c, col, where, "with keys shape, type, ..."));
  DR_TRY(sj_check_keys(c, col, where, NULL, 0, NULL, 0, NULL)); /* duplicates, before reading shape */
  DR_TRY(sj_get_enum(c, col, where, "shape", -1, COLLIDER_SHAPES, 5, &sc->shape));
  snprintf(variant, sizeof variant, "shape '%s'", COLLIDER_SHAPES[sc->shape]);
  const range positive = {0, INFINITY, 1, 0, "m"};
  switch (sc->shape) {
  case SDF_PLANE:
    DR_TRY(sj_check_keys(c, col, where, PLANE_COLLIDER_KEYS, 6, ALL_COLLIDER_KEYS, 20, variant));
    DR_TRY(sj_get_vec3(c, col, where, "point", 1, NULL, "m", sc->point));
    DR_TRY(sj_get_direction(c, col, where, "normal", sc->normal));
    break;
  case SDF_BOX:
    DR_TRY(sj_check_keys(c, col, where, BOX_COLLIDER_KEYS, 6, ALL_COLLIDER_KEYS, 20, variant));
    DR_TRY(sj_get_vec3(c, col, where, "min", 1, NULL, "m", sc->min));
    DR_TRY(sj_get_vec3(c, col, where, "max", 1, NULL, "m", sc->max));
    for (int i = 0; i < 3; ++i)
      if (!(sc->max[i] > sc->min[i])) {
        sj_join(key, where, "max");
        return sj_fail(c, key, "not above min along %c (got max.%c %s <= min.%c %s; expected max > "
                       "min on every axis)", AXIS[i], AXIS[i], sj_fmt_num(x, sc->max[i]), AXIS[i],
                       sj_fmt_num(y, sc->min[i]));
      }
    break;
  case SDF_SPHERE:
    DR_TRY(sj_check_keys(c, col, where, SPHERE_COLLIDER_KEYS, 6, ALL_COLLIDER_KEYS, 20, variant));
    DR_TRY(sj_get_vec3(c, col, where, "center", 1, NULL, "m", sc->center));
    DR_TRY(sj_get_real(c, col, where, "radius", 1, 0, positive, &sc->radius));
    break;
  case SDF_MESH:
    DR_TRY(sj_check_keys(c, col, where, MESH_COLLIDER_KEYS, 12, ALL_COLLIDER_KEYS, 20, variant));
    DR_TRY(scene_parse_mesh_collider(c, col, where, s, sc));
    break;
  default:
    DR_TRY(sj_check_keys(c, col, where, CYLINDER_COLLIDER_KEYS, 8, ALL_COLLIDER_KEYS, 20, variant));
    DR_TRY(sj_get_vec3(c, col, where, "center", 1, NULL, "m", sc->center));
    DR_TRY(sj_get_direction(c, col, where, "axis", sc->axis));
    DR_TRY(sj_get_real(c, col, where, "radius", 1, 0, positive, &sc->radius));
    DR_TRY(sj_get_real(c, col, where, "height", 1, 0, positive, &sc->height));
    break;
  }
  DR_TRY(parse_wall(c, col, where, BOUNDARY_STICKY, 0, &sc->type, &sc->friction));
  return parse_motion(c, col, where, sc);
}

/* colliders: an optional list of solid shapes that act on the grid like walls. */
int scene_parse_colliders(const ctx *c, const cJSON *root, scene *s) {
  const cJSON *cs;
  char g[GOT_LEN];
  DR_TRY(sj_get_section(c, root, "colliders", 0, "", &cs));
  if (!cs) return 0;
  if (!cJSON_IsArray(cs))
    return sj_fail(c, "colliders", "wrong type (got %s; expected a list of colliders [{\"shape\": "
                   "...}, ...])", sj_got(g, cs));
  int n = cJSON_GetArraySize(cs);
  if (n > MAX_COLLIDERS)
    return sj_fail(c, "colliders", "too many (got %d; expected at most %d)", n, MAX_COLLIDERS);
  if (n == 0) return 0;
  DR_ALLOC0(s->colliders, n, "scene colliders");
  s->n_colliders = n;
  int i = 0;
  for (const cJSON *col = cs->child; col; col = col->next, ++i)
    DR_TRY(parse_collider(c, col, i, s, &s->colliders[i]));
  return 0;
}

int scene_kernel_colliders(const scene *s, collider **cols, collider_key **keys, int *n_keys) {
  int nk = 0;
  *cols = NULL;
  *keys = NULL;
  *n_keys = 0;
  for (int i = 0; i < s->n_colliders; ++i) nk += s->colliders[i].n_keys;
  collider *C = dr_calloc((size_t)(s->n_colliders ? s->n_colliders : 1), sizeof *C, "colliders");
  collider_key *K = dr_calloc((size_t)(nk ? nk : 1), sizeof *K, "collider keyframes");
  if (!C || !K) {
    free(C), free(K);
    return DR_ENOMEM;
  }
  for (int i = 0, k = 0; i < s->n_colliders; ++i) {
    const scene_collider *sc = &s->colliders[i];
    collider *c = &C[i];
    c->geom.shape = sc->shape;
    c->type = sc->type;
    c->friction = (float)sc->friction;
    switch (sc->shape) {
    case SDF_PLANE:
      for (int a = 0; a < 3; ++a) c->center[a] = (float)sc->point[a], c->geom.n[a] = (float)sc->normal[a];
      break;
    case SDF_BOX:
      for (int a = 0; a < 3; ++a) {
        c->center[a] = (float)(0.5 * (sc->min[a] + sc->max[a]));
        c->geom.half[a] = (float)(0.5 * (sc->max[a] - sc->min[a]));
      }
      break;
    case SDF_SPHERE:
      for (int a = 0; a < 3; ++a) c->center[a] = (float)sc->center[a];
      c->geom.r = (float)sc->radius;
      break;
    case SDF_MESH:
      for (int a = 0; a < 3; ++a) c->center[a] = (float)sc->mesh_center[a];
      c->geom.levelset = sc->levelset;
      c->n_frames = sc->n_frames;
      c->fps = (float)sc->fps;
      break;
    default:
      for (int a = 0; a < 3; ++a) c->center[a] = (float)sc->center[a], c->geom.n[a] = (float)sc->axis[a];
      c->geom.r = (float)sc->radius;
      c->geom.half_height = (float)(0.5 * sc->height);
      break;
    }
    c->key0 = k;
    c->n_keys = sc->n_keys;
    for (int j = 0; j < sc->n_keys; ++j, ++k) {
      K[k].time = sc->keys[j].time;
      for (int a = 0; a < 3; ++a) K[k].translation[a] = (float)sc->keys[j].translation[a];
      for (int a = 0; a < 4; ++a) K[k].rotation[a] = (float)sc->keys[j].rotation[a];
    }
  }
  *cols = C;
  *keys = K;
  *n_keys = nk;
  return DR_OK;
}

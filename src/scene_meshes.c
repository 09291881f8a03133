/* scene_meshes.c - meshes of bodies and colliders: OBJ files placed by scale, rotation and
 * translation, and their level sets.
 *
 * File names are resolved against the scene file's folder unless absolute. Invariants: a mesh is
 * placed (x -> translation + R (scale x)) before its bounds or level set are taken; level sets
 * have a node spacing of LS_SPACING cells and store |phi| up to LS_BAND cells, a sequence's band
 * grown by its largest vertex displacement between frames so that blending two frames stays
 * exact; every file of a sequence has the same vertices (their motion gives the velocity); the
 * pools live in the scene (body_levelsets, collider_levelsets), allocated on first use. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "mesh.h"
#include "meshsdf.h"
#include "scene_parse.h"

#define MAX_MESH_FRAMES 100000           /* files of one mesh sequence */
#define LS_SPACING 0.5                   /* mesh level sets: node spacing, in cells (dx / 2) */
#define LS_BAND 2.0                      /* mesh level sets: |phi| stored up to this many cells */

/* path resolved against the scene file's folder unless absolute. */
static int resolve_path(const ctx *c, const scene *s, const char *key, const char *file, char *out, size_t cap) {
  char g[GOT_LEN];
  if (!*file || sj_has_control_char(file))
    return sj_fail(c, key, "not a file name (got \"%s\"; expected the path of an OBJ file)", (sj_clean(g, sizeof g, file, 60), g));
  int n;
  if (file[0] == '/') {
    n = snprintf(out, cap, "%s", file);
  } else {
    const char *slash = strrchr(s->path, '/');
    n = slash ? snprintf(out, cap, "%.*s/%s", (int)(slash - s->path), s->path, file) : snprintf(out, cap, "%s", file);
  }
  if (n < 0 || (size_t)n >= cap) return sj_fail(c, key, "the path is too long (expected at most %zu bytes)", cap - 1);
  return 0;
}

/* The placement x -> translation + R (scale x) of a mesh: keys scale, rotation, translation. */
static int get_placement(const ctx *c, const cJSON *obj, const char *where, double *scale, double rot[4],
                         int *rotated, double translation[3]) {
  static const double zero[3] = {0, 0, 0};
  DR_TRY(sj_get_real(c, obj, where, "scale", 0, 1, (range){0, INFINITY, 1, 0, ""}, scale));
  DR_TRY(sj_get_rotation(c, obj, where, rotated, rot, NULL));
  return sj_get_vec3(c, obj, where, "translation", 0, zero, "m", translation);
}

/* Reads the OBJ at path (key: the scene key to blame) and places it. */
static int load_placed_mesh(const ctx *c, const char *key, const char *path, double scale, const double q[4],
                            const double t[3], mesh *m) {
  char err[700];
  int rc = mesh_read_obj(path, m, err, sizeof err);
  if (rc == DR_ENOMEM) return dr_fail(DR_ENOMEM, "%s", err);
  if (rc) return sj_fail(c, key, "%s", err);
  const double w = q[0], x = q[1], y = q[2], z = q[3];
  const double R[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - w * z),     2 * (x * z + w * y),
                       2 * (x * y + w * z),     1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                       2 * (x * z - w * y),     2 * (y * z + w * x),     1 - 2 * (x * x + y * y)};
  for (int i = 0; i < m->n_verts; ++i) {
    double *v = m->v + 3 * i, o[3];
    for (int a = 0; a < 3; ++a) o[a] = t[a] + scale * (R[3 * a] * v[0] + R[3 * a + 1] * v[1] + R[3 * a + 2] * v[2]);
    for (int a = 0; a < 3; ++a) v[a] = o[a];
  }
  return 0;
}

/* Plans a level set of mesh m (taken over: *m is emptied) into the colliders' pool or the
 * bodies': its sizes added to s->levelset_plan, the mesh kept for scene_build_levelsets, *index its
 * place in the pool (allocated empty on first use, so that bodies can point at it now). vel: [2][3
 * n_verts] (out, in; copied) or NULL. */
static int plan_levelset(const ctx *c, scene *s, int collider, mesh *m, const double shift[3], double band,
                         const double *vel_out, const double *vel_in, const char *key, int *index) {
  levelset_pool **pool = collider ? &s->collider_levelsets : &s->body_levelsets;
  if (!*pool) {
    *pool = dr_calloc(1, sizeof **pool, "level-set pool");
    if (!*pool) return DR_ENOMEM;
  }
  char what[KEY_LEN + 700];
  snprintf(what, sizeof what, "%s: %s", c->path, key);
  int64_t table_n, floats_n;
  DR_TRY(meshsdf_size(m, shift, LS_SPACING * s->dx, band, vel_out ? 7 : 1, what, &table_n, &floats_n));
  scene_levelset_job *jobs = realloc(s->levelset_jobs, sizeof *jobs * (size_t)(s->n_levelset_jobs + 1));
  if (!jobs) return dr_fail(DR_ENOMEM, "out of host memory planning the level set of %s", what);
  s->levelset_jobs = jobs;
  scene_levelset_job *j = &jobs[s->n_levelset_jobs];
  memset(j, 0, sizeof *j);
  const size_t nv3 = 3 * (size_t)m->n_verts;
  const size_t wlen = strlen(what) + 1;
  j->what = malloc(wlen);
  if (j->what) memcpy(j->what, what, wlen);
  if (vel_out) j->vel = malloc(sizeof(double) * 2 * (nv3 ? nv3 : 1));
  if (!j->what || (vel_out && !j->vel)) {
    free(j->what), free(j->vel);
    return dr_fail(DR_ENOMEM, "out of host memory planning the level set of %s", what);
  }
  if (vel_out) {
    memcpy(j->vel, vel_out, sizeof(double) * nv3);
    memcpy(j->vel + nv3, vel_in, sizeof(double) * nv3);
  }
  j->m = *m;
  memset(m, 0, sizeof *m);
  for (int a = 0; a < 3; ++a) j->shift[a] = shift[a];
  j->band = band;
  j->collider = collider;
  ++s->n_levelset_jobs;
  scene_levelset_sizes *z = &s->levelset_plan[collider];
  *index = z->sets++;
  z->table_n += table_n;
  z->floats_n += floats_n;
  return DR_OK;
}

void scene_free_levelset_jobs(scene *s) {
  for (int k = 0; k < s->n_levelset_jobs; ++k) {
    mesh_destroy(&s->levelset_jobs[k].m);
    free(s->levelset_jobs[k].vel);
    free(s->levelset_jobs[k].what);
  }
  free(s->levelset_jobs);
  s->levelset_jobs = NULL;
  s->n_levelset_jobs = 0;
}

int scene_build_levelsets(scene *s) {
  levelset_pool *pools[2] = {s->body_levelsets, s->collider_levelsets};
  int rc = DR_OK;
  for (int k = 0; k < 2 && !rc; ++k) {
    const scene_levelset_sizes *z = &s->levelset_plan[k];
    if (pools[k] && z->sets > 0 && levelset_pool_reserve(pools[k], z->sets, z->table_n, z->floats_n))
      rc = dr_fail(DR_ENOMEM, "out of host memory for the mesh level sets of %s: %.1f MiB planned", s->path,
                   scene_levelset_data_bytes(z) / 1048576.0);
  }
  for (int k = 0; k < s->n_levelset_jobs && !rc; ++k) {
    const scene_levelset_job *j = &s->levelset_jobs[k];
    const size_t nv3 = 3 * (size_t)j->m.n_verts;
    int index;
    rc = meshsdf_build(pools[j->collider], &j->m, j->shift, LS_SPACING * s->dx, j->band, j->vel,
                       j->vel ? j->vel + nv3 : NULL, j->what, &index);
  }
  /* the plan's sizes are the build's: meshsdf_size marks the same bricks */
  for (int k = 0; k < 2 && !rc; ++k) {
    const scene_levelset_sizes *z = &s->levelset_plan[k];
    const levelset_pool *q = pools[k];
    if (z->sets > 0 && (!q || q->n != z->sets || q->table_n != z->table_n || q->bricks_n != z->floats_n))
      rc = dr_fail(DR_EINTERNAL, "%s: the mesh level sets built differ from their plan (%d sets, %lld and %lld "
                   "against %d, %lld and %lld)", s->path, q ? q->n : 0, (long long)(q ? q->table_n : 0),
                   (long long)(q ? q->bricks_n : 0), z->sets, (long long)z->table_n, (long long)z->floats_n);
  }
  if (!rc) scene_free_levelset_jobs(s);
  return rc;
}

/* A mesh body: file, placement; its bounding box inside the domain. */
int scene_parse_mesh_body(const ctx *c, const cJSON *b, const char *where, scene *s, scene_body *body) {
  char key[KEY_LEN], path[4096];
  const char *file = NULL;
  mesh m;
  DR_TRY(sj_get_string(c, b, where, "file", 1, NULL, "the path of an OBJ file (relative to the scene file)", &file));
  sj_join(key, where, "file");
  DR_TRY(resolve_path(c, s, key, file, path, sizeof path));
  DR_TRY(get_placement(c, b, where, &body->scale, body->rotation, &body->rotated, body->translation));
  DR_TRY(load_placed_mesh(c, key, path, body->scale, body->rotation, body->translation, &m));
  mesh_bounds(&m, body->mesh_lo, body->mesh_hi);
  body->volume = fabs(mesh_volume(&m));
  int rc = scene_check_bounds_inside(c, s, body, where, "file", "the mesh");
  if (!rc && !(body->volume > 0)) rc = sj_fail(c, key, "the mesh encloses no volume (got %s; expected a closed triangle mesh)", path);
  static const double zero[3] = {0, 0, 0};
  if (!rc) rc = plan_levelset(c, s, 0, &m, zero, LS_BAND * s->dx, NULL, NULL, key, &body->levelset);
  body->pool = s->body_levelsets;
  mesh_destroy(&m);
  return rc;
}

/* "files": a printf pattern with exactly one integer conversion (%d, %4d, %04d); %% allowed. */
static int check_pattern(const ctx *c, const char *key, const char *pat) {
  char g[GOT_LEN];
  int conv = 0;
  for (const char *p = pat; *p; ++p) {
    if (*p != '%') continue;
    if (p[1] == '%') {
      ++p;
      continue;
    }
    const char *q = p + 1;
    while (*q >= '0' && *q <= '9' && q - p < 4) ++q;
    if (*q != 'd') {
      sj_clean(g, sizeof g, pat, 80);
      return sj_fail(c, key, "not a file pattern (got \"%s\"; expected one integer conversion such as %%04d, and %%%% for a "
                     "literal %%)", g);
    }
    ++conv;
    p = q;
  }
  if (conv != 1) {
    sj_clean(g, sizeof g, pat, 80);
    return sj_fail(c, key, "not a file pattern (got \"%s\" with %d integer conversions; expected exactly one, e.g. "
                   "\"crawler_%%04d.obj\")", g, conv);
  }
  return 0;
}

static int file_exists(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  fclose(f);
  return 1;
}

/* A mesh collider: file, or files + fps (+ first, count); placement; level sets. */
int scene_parse_mesh_collider(const ctx *c, const cJSON *col, const char *where, scene *s, scene_collider *sc) {
  char key[KEY_LEN], pkey[KEY_LEN], path[4096], pattern[4096], a[32];
  const char *file = NULL, *files = NULL;
  int rotated;
  double first = 0, count = 0;
  DR_TRY(sj_get_string(c, col, where, "file", 0, NULL, "the path of an OBJ file (relative to the scene file)", &file));
  DR_TRY(sj_get_string(c, col, where, "files", 0, NULL, "a pattern of OBJ file names such as \"crawler_%04d.obj\"", &files));
  if (file && files) {
    sj_join(key, where, "files");
    return sj_fail(c, key, "given with file (expected either file, one mesh, or files, a sequence)");
  }
  if (!file && !files) {
    sj_join(key, where, "file");
    return sj_fail(c, key, "missing required key (expected file, the path of an OBJ file, or files with fps for a "
                   "sequence)");
  }
  sj_join(pkey, where, files ? "files" : "file");
  if (files) {
    DR_TRY(check_pattern(c, pkey, files));
    DR_TRY(resolve_path(c, s, pkey, files, pattern, sizeof pattern));
    DR_TRY(sj_get_real(c, col, where, "fps", 1, 0, (range){0, INFINITY, 1, 0, "frames per second"}, &sc->fps));
    DR_TRY(sj_get_int(c, col, where, "first", 0, 0, 0, 1e9, &first));
    DR_TRY(sj_get_int(c, col, where, "count", 0, 0, 2, MAX_MESH_FRAMES, &count));
    if (count == 0) { /* every file from first on, up to the first one missing */
      for (int k = 0; k < MAX_MESH_FRAMES; ++k) {
        snprintf(path, sizeof path, pattern, (int)first + k);
        if (!file_exists(path)) break;
        count = k + 1;
      }
      if (count < 2) {
        snprintf(path, sizeof path, pattern, (int)first + (int)count);
        return sj_fail(c, pkey, "a sequence needs at least 2 files (found %d; %s cannot be read; expected files numbered "
                       "from first = %s)", (int)count, path, sj_fmt_num(a, first));
      }
    }
  } else {
    const char *bad[] = {"fps", "first", "count"};
    for (int i = 0; i < 3; ++i)
      if (cJSON_GetObjectItemCaseSensitive(col, bad[i])) {
        sj_join(key, where, bad[i]);
        return sj_fail(c, key, "allowed only with files, a sequence (got file, one mesh)");
      }
    DR_TRY(resolve_path(c, s, pkey, file, pattern, sizeof pattern));
    count = 1;
  }
  DR_TRY(get_placement(c, col, where, &sc->scale, sc->rotation, &rotated, sc->translation));
  sc->n_frames = (int)count;
  mesh *ms = dr_calloc((size_t)count, sizeof *ms, "mesh sequence");
  if (!ms) return DR_ENOMEM;
  int rc = 0, n = 0;
  for (; n < sc->n_frames && !rc; ++n) {
    if (files) snprintf(path, sizeof path, pattern, (int)first + n);
    else snprintf(path, sizeof path, "%s", pattern);
    rc = load_placed_mesh(c, pkey, path, sc->scale, sc->rotation, sc->translation, &ms[n]);
    if (!rc && n > 0 && ms[n].n_verts != ms[0].n_verts)
      rc = sj_fail(c, pkey, "%s has %d vertices, the sequence's first file %d (expected the same vertices in every file: "
                   "their motion gives the collider's velocity)", path, ms[n].n_verts, ms[0].n_verts);
  }
  double *vel = NULL;
  if (!rc) {
    double lo[3], hi[3];
    mesh_bounds(&ms[0], lo, hi);
    for (int i = 0; i < 3; ++i) sc->mesh_center[i] = 0.5 * (lo[i] + hi[i]);
    const int nv = ms[0].n_verts;
    /* per-vertex velocities of the intervals: vel[k] from frame k to k + 1, and zero before the
     * first and after the last frame */
    vel = dr_calloc((size_t)(sc->n_frames + 1) * 3 * (size_t)nv, sizeof *vel, "mesh sequence velocities");
    if (!vel) rc = DR_ENOMEM;
    /* The blend of two frames' distances is the distance to the surface in between only where
     * both are unclamped: the band grows by the largest vertex displacement between frames (a
     * face translating by d between frames then blends exactly). */
    double band = LS_BAND * s->dx, move = 0;
    for (int k = 0; !rc && k + 1 < sc->n_frames; ++k)
      for (int i = 0; i < nv; ++i) {
        double d2 = 0;
        for (int a = 0; a < 3; ++a) {
          const double d = ms[k + 1].v[3 * i + a] - ms[k].v[3 * i + a];
          vel[(size_t)(k + 1) * 3 * nv + 3 * i + a] = d * sc->fps;
          d2 += d * d;
        }
        move = fmax(move, sqrt(d2));
      }
    band += move;
    for (int k = 0; !rc && k < sc->n_frames; ++k) {
      int idx;
      const double *vin = files ? vel + (size_t)k * 3 * nv : NULL, *vout = files ? vel + (size_t)(k + 1) * 3 * nv : NULL;
      if (files && k + 1 == sc->n_frames) vout = vel; /* after the last frame: still (vel[0] is zero) */
      rc = plan_levelset(c, s, 1, &ms[k], sc->mesh_center, band, vout, vin, pkey, &idx);
      if (k == 0) sc->levelset = idx;
    }
  }
  free(vel);
  for (int k = 0; k < n; ++k) mesh_destroy(&ms[k]);
  free(ms);
  return rc;
}

/* scene_settings.c - the scene's run settings: the sections domain, time, gravity, output and
 * parallel, the command line's island variants, and the time step derived from them.
 *
 * Each parse function reads one section in the format's key order (docs/scene-format.md) and sets
 * every field it owns, defaults included, even when the section is absent. Invariants: domain is
 * parsed before everything that checks against it (dx bounds the cell count per axis to [4, 2^20],
 * which keeps block coordinates within a 64-bit sort key); time is parsed before output (output.every
 * is bounded by time.frames); a fixed dt is rounded down so that whole substeps fill each frame. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "frame_fields.h"
#include "scene_parse.h"

#define MIN_CELLS_PER_AXIS 4.0
#define MAX_CELLS_PER_AXIS 1048576.0   /* 2^20: block coordinates (cells / 4 + padding) fit in 19 bits, so a block code and a 6-bit cell code share one 64-bit sort key */
#define MAX_CHECKPOINT_EVERY 100000000 /* as --frames */
#define MAX_CHECKPOINT_KEEP 1000
#define MIN_FPS 1e-3            /* time.fps: a frame of at most 1000 s of simulated time */
#define MAX_FPS 1e4
#define MIN_CFL 1e-3            /* time.cfl: below this a run is steps without motion */
#define DEFAULT_MAX_SUBSTEPS 100000 /* time.max_substeps: past it a frame is a mistake, not a run */
#define MAX_PREVIEW_SIZE 4096 /* output.preview_size: a 4096^2 picture needs 128 MiB of keys per rank */

int scene_parse_domain(const ctx *c, const cJSON *root, scene *s) {
  static const char *const keys[] = {"min", "max", "dx"};
  const cJSON *d;
  char a[32], b[32], e[32];
  DR_TRY(sj_get_section(c, root, "domain", 1, "an object with keys min, max, dx", &d));
  DR_TRY(sj_need_object(c, d, "domain", "with keys min, max, dx"));
  DR_TRY(sj_check_keys(c, d, "domain", keys, 3, NULL, 0, NULL));
  DR_TRY(sj_get_vec3(c, d, "domain", "min", 1, NULL, "m", s->domain_min));
  DR_TRY(sj_get_vec3(c, d, "domain", "max", 1, NULL, "m", s->domain_max));
  for (int i = 0; i < 3; ++i)
    if (!(s->domain_max[i] > s->domain_min[i]))
      return sj_fail(c, "domain.max", "not above domain.min along %c (got max.%c %s <= min.%c %s; "
                     "expected max > min on every axis)", AXIS[i], AXIS[i],
                     sj_fmt_num(a, s->domain_max[i]), AXIS[i], sj_fmt_num(b, s->domain_min[i]));
  DR_TRY(sj_get_real(c, d, "domain", "dx", 1, 0, POSITIVE_M, &s->dx));
  for (int i = 0; i < 3; ++i) {
    double extent = s->domain_max[i] - s->domain_min[i];
    double cells = extent / s->dx;
    if (cells < MIN_CELLS_PER_AXIS * (1 - REL_TOL))
      return sj_fail(c, "domain.dx", "too coarse: the domain is %s cells wide along %c (got %s; "
                     "expected dx <= %s m, at least 4 cells per axis)", sj_fmt_derived(a, cells), AXIS[i],
                     sj_fmt_num(b, s->dx), sj_fmt_derived(e, extent / MIN_CELLS_PER_AXIS));
    if (cells > MAX_CELLS_PER_AXIS * (1 + REL_TOL))
      return sj_fail(c, "domain.dx", "too fine: the domain is %s cells wide along %c (got %s; "
                     "expected dx >= %s m, at most 1048576 = 2^20 cells per axis)", sj_fmt_derived(a, cells),
                     AXIS[i], sj_fmt_num(b, s->dx), sj_fmt_derived(e, extent / MAX_CELLS_PER_AXIS));
  }
  return 0;
}

int scene_parse_time(const ctx *c, const cJSON *root, scene *s) {
  static const char *const keys[] = {"frames", "fps", "dt", "cfl", "max_substeps"};
  const cJSON *t;
  char a[32], b[32], e[32], g[GOT_LEN], h[GOT_LEN];
  DR_TRY(sj_get_section(c, root, "time", 1, "an object with keys frames, fps and dt or cfl", &t));
  DR_TRY(sj_need_object(c, t, "time", "with keys frames, fps and dt or cfl"));
  DR_TRY(sj_check_keys(c, t, "time", keys, 5, NULL, 0, NULL));
  DR_TRY(sj_get_int32(c, t, "time", "frames", 1, 0, 1, INT_MAX, &s->frames));
  DR_TRY(sj_get_real(c, t, "time", "fps", 1, 0, (range){MIN_FPS, MAX_FPS, 0, 0, "frames per second"}, &s->fps));
  DR_TRY(sj_get_int32(c, t, "time", "max_substeps", 0, DEFAULT_MAX_SUBSTEPS, 1, INT_MAX, &s->max_substeps));
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dt");
  const cJSON *cfl = cJSON_GetObjectItemCaseSensitive(t, "cfl");
  if (dt && cfl)
    return sj_fail(c, "time", "both dt and cfl are given (got dt %s and cfl %s; expected exactly one: "
                   "dt for a fixed step or cfl for an adaptive one)", sj_got(g, dt), sj_got(h, cfl));
  if (!dt && !cfl)
    return sj_fail(c, "time", "neither dt nor cfl is given (expected exactly one: dt (s) for a fixed "
                   "step or cfl (0.001 <= cfl <= 1) for an adaptive one)");
  double frame = 1.0 / s->fps;
  s->dt = s->cfl = 0;
  if (dt) {
    double v;
    DR_TRY(sj_get_real(c, t, "time", "dt", 1, 0, (range){0, INFINITY, 1, 0, "s"}, &v));
    if (v > frame * (1 + REL_TOL))
      return sj_fail(c, "time.dt", "longer than one frame (got %s; expected dt <= 1/fps = %s s)",
                     sj_fmt_num(a, v), sj_fmt_num(b, frame));
    /* the time loop counts a frame's substeps in an int, and max_substeps bounds them */
    const double n = ceil(frame / v - 1e-9);
    if (n > s->max_substeps)
      return sj_fail(c, "time.dt", "too short: %s substeps per frame, more than time.max_substeps = %d (got %s; "
                     "expected dt >= 1/fps / %d = %s s, or a larger time.max_substeps)", sj_fmt_derived(e, n),
                     s->max_substeps, sj_fmt_num(a, v), s->max_substeps, sj_fmt_derived(b, frame / s->max_substeps));
    s->dt = v;
    s->dt = scene_initial_dt(s); /* rounded down so that whole substeps fill each frame */
  } else {
    DR_TRY(sj_get_real(c, t, "time", "cfl", 1, 0, (range){MIN_CFL, 1, 0, 0, ""}, &s->cfl));
  }
  return 0;
}

int scene_parse_gravity(const ctx *c, const cJSON *root, scene *s) {
  static const double def[3] = {0, -9.81, 0};
  return sj_get_vec3(c, root, "", "gravity", 0, def, "m/s^2", s->gravity);
}

/* output.fields: an array of distinct field names (h5frame_field_names), position among them. */
static int parse_fields(const ctx *c, const cJSON *o, scene *s) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "fields");
  char g[GOT_LEN], list[200], key[64];
  if (!v) return 0;
  sj_list_names(list, sizeof list, h5frame_field_names, H5FRAME_FIELDS);
  if (!cJSON_IsArray(v))
    return sj_fail(c, "output.fields", "wrong type (got %s; expected an array of names from: %s)", sj_got(g, v), list);
  unsigned fields = 0;
  int i = 0;
  for (const cJSON *e = v->child; e; e = e->next, ++i) {
    snprintf(key, sizeof key, "output.fields[%d]", i);
    int f = 0;
    while (f < H5FRAME_FIELDS && !(cJSON_IsString(e) && strcmp(e->valuestring, h5frame_field_names[f]) == 0)) ++f;
    if (f == H5FRAME_FIELDS)
      return sj_fail(c, key, "unknown field (got %s; expected one of: %s)", sj_got(g, e), list);
    if (fields & H5FRAME_BIT(f))
      return sj_fail(c, key, "%s listed twice (got %s; expected each field once)", h5frame_field_names[f], sj_got(g, e));
    fields |= H5FRAME_BIT(f);
  }
  if (!(fields & H5FRAME_BIT(H5FRAME_POSITION)))
    return sj_fail(c, "output.fields", "position missing (got %s; position is always written: the XDMF geometry "
                   "needs it; expected it among: %s)", sj_got(g, v), list);
  s->output_fields = fields;
  return 0;
}

int scene_parse_output(const ctx *c, const cJSON *root, scene *s) {
  static const char *const keys[] = {"dir",     "every",         "checkpoint_every", "checkpoint_keep",
                                     "preview", "preview_color", "preview_size",     "preview_view",
                                     "fields",  "precision"};
  static const char *const colors[] = {"material", "owner"};
  static const char *const views[] = {"front", "side", "top"};
  const cJSON *o;
  const char *dir = "frames";
  char g[GOT_LEN];
  s->output_every = 1;
  s->output_fields = H5FRAME_DEFAULT_FIELDS;
  s->output_precision = H5FRAME_FLOAT;
  for (int m = 0; m < s->n_materials; ++m) /* materials are parsed before output */
    if (s->materials[m].params.model == MODEL_NACC) s->output_fields |= H5FRAME_BIT(H5FRAME_LOGJP);
  s->checkpoint_every = 0;
  s->checkpoint_keep = 2;
  s->preview = 0;
  s->preview_color = 0; /* material */
  s->preview_size = 512;
  s->preview_view = 0;  /* front */
  DR_TRY(sj_get_section(c, root, "output", 0, "", &o));
  if (o) {
    DR_TRY(sj_need_object(c, o, "output", "with keys dir, every, checkpoint_every, checkpoint_keep, preview, "
                          "preview_color, preview_size, preview_view, fields, precision"));
    DR_TRY(sj_check_keys(c, o, "output", keys, 10, NULL, 0, NULL));
    DR_TRY(sj_get_string(c, o, "output", "dir", 0, dir, "a non-empty string, a directory", &dir));
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "dir");
    if (!*dir)
      return sj_fail(c, "output.dir", "empty (got \"\"; expected a non-empty directory name)");
    if (strlen(dir) >= sizeof s->output_dir)
      return sj_fail(c, "output.dir", "too long (got %zu bytes; expected fewer than %zu)",
                     strlen(dir), sizeof s->output_dir);
    if (sj_has_control_char(dir))
      return sj_fail(c, "output.dir", "contains a control character (got %s; expected a directory "
                     "name of printable characters)", sj_got(g, v));
    DR_TRY(sj_get_int32(c, o, "output", "every", 0, 1, 1, INT_MAX, &s->output_every));
    if (s->output_every > s->frames)
      return sj_fail(c, "output.every", "larger than time.frames (got %d; expected at most "
                     "time.frames = %d)", s->output_every, s->frames);
    /* Not bounded by time.frames: --frames may extend a run that resumes from a checkpoint. */
    DR_TRY(sj_get_int32(c, o, "output", "checkpoint_every", 0, 0, 0, MAX_CHECKPOINT_EVERY, &s->checkpoint_every));
    DR_TRY(sj_get_int32(c, o, "output", "checkpoint_keep", 0, 2, 1, MAX_CHECKPOINT_KEEP, &s->checkpoint_keep));
    DR_TRY(sj_get_bool(c, o, "output", "preview", 0, &s->preview));
#ifndef DRIFT_HAVE_PNG
    if (s->preview)
      return sj_fail(c, "output.preview", "not available: this build of drift has no libpng (install libpng-dev, "
                     "or tools/pack-device-deps.sh's png folder, and rebuild; or set it to false)");
#endif
    DR_TRY(sj_get_enum(c, o, "output", "preview_color", 0, colors, 2, &s->preview_color));
    DR_TRY(sj_get_int32(c, o, "output", "preview_size", 0, 512, 16, MAX_PREVIEW_SIZE, &s->preview_size));
    DR_TRY(sj_get_enum(c, o, "output", "preview_view", 0, views, 3, &s->preview_view));
    DR_TRY(parse_fields(c, o, s));
    DR_TRY(sj_get_enum(c, o, "output", "precision", 0, h5frame_precision_names, H5FRAME_PRECISIONS,
                       &s->output_precision));
  }
  snprintf(s->output_dir, sizeof s->output_dir, "%s", dir);
  return 0;
}

const char *const scene_island_barrier_names[2] = {"spin", "events"};
const char *const scene_island_reduce_names[2] = {"double_buffer", "p2p_atomics"};

/* The index of name among names[0..n), or -1. */
static int scene_name_index(const char *const *names, int n, const char *name) {
  for (int i = 0; i < n; ++i)
    if (strcmp(name, names[i]) == 0) return i;
  return -1;
}

int scene_island_flag(const char *flag, const char *value, int island[2]) {
  const int k = strcmp(flag, "--island-reduce") == 0;
  const char *const *names = k ? scene_island_reduce_names : scene_island_barrier_names;
  island[k] = scene_name_index(names, 2, value);
  if (island[k] < 0) return dr_fail(DR_EINPUT, "%s: '%s' is not one of %s, %s", flag, value, names[0], names[1]);
  return DR_OK;
}

void scene_set_island(scene *s, const int island[2]) {
  if (island[0] >= 0) s->island_barrier = island[0];
  if (island[1] >= 0) s->island_reduce = island[1];
}

int scene_parse_parallel(const ctx *c, const cJSON *root, scene *s) {
  static const char *const keys[] = {"backend",       "gpus_per_rank",  "g2p2g_below",  "balance_threshold",
                                     "balance_by",    "balance_cost",   "deterministic", "island_barrier",
                                     "island_reduce", "storage",       "watchdog_s"};
  static const char *const balance_by[] = {"particles", "time"};
  static const char *const backends[] = {"auto", "cpu", "cuda"};
  static const char *const storages[] = {"float", "compact"};
  const cJSON *p;
  s->backend = BACKEND_AUTO;
  s->gpus_per_rank = 0;
  s->g2p2g_below = 100000;
  s->balance_threshold = 0.2;
  s->balance_by = BALANCE_PARTICLES;
  s->balance_cost = 1;
  s->deterministic = 0;
  s->island_barrier = ISLAND_BARRIER_SPIN;
  s->island_reduce = ISLAND_REDUCE_DOUBLE_BUFFER;
  s->watchdog_s = 300;
  s->storage = STORAGE_FLOAT;
  DR_TRY(sj_get_section(c, root, "parallel", 0, "", &p));
  if (!p) return 0;
  DR_TRY(sj_need_object(c, p, "parallel", "with keys backend, gpus_per_rank, g2p2g_below, balance_threshold, balance_by, "
                                       "balance_cost, deterministic, island_barrier, island_reduce, storage, watchdog_s"));
  DR_TRY(sj_check_keys(c, p, "parallel", keys, 11, NULL, 0, NULL));
  DR_TRY(sj_get_bool(c, p, "parallel", "balance_cost", 1, &s->balance_cost));
  DR_TRY(sj_get_bool(c, p, "parallel", "deterministic", 0, &s->deterministic));
  DR_TRY(sj_get_enum(c, p, "parallel", "balance_by", BALANCE_PARTICLES, balance_by, 2, &s->balance_by));
  DR_TRY(sj_get_real(c, p, "parallel", "balance_threshold", 0, 0.2, (range){0, INFINITY, 0, 0, ""},
                     &s->balance_threshold));
  DR_TRY(sj_get_real(c, p, "parallel", "watchdog_s", 0, 300, (range){1, 1e6, 0, 0, "s"}, &s->watchdog_s));
  DR_TRY(sj_get_enum(c, p, "parallel", "backend", BACKEND_AUTO, backends, 3, &s->backend));
  DR_TRY(sj_get_enum(c, p, "parallel", "storage", STORAGE_FLOAT, storages, 2, &s->storage));
  DR_TRY(sj_get_enum(c, p, "parallel", "island_barrier", ISLAND_BARRIER_SPIN, scene_island_barrier_names, 2,
                     &s->island_barrier));
  DR_TRY(sj_get_enum(c, p, "parallel", "island_reduce", ISLAND_REDUCE_DOUBLE_BUFFER, scene_island_reduce_names, 2,
                     &s->island_reduce));
  DR_TRY(sj_get_int32(c, p, "parallel", "g2p2g_below", 0, 100000, 0, INT_MAX, &s->g2p2g_below));
  return sj_get_int32(c, p, "parallel", "gpus_per_rank", 0, 0, 0, 8, &s->gpus_per_rank); /* an island has at most 8 GPUs */
}

double scene_wave_speed(const scene *s) {
  double c = 0;
  for (int i = 0; i < s->n_materials; ++i) {
    const scene_material *m = &s->materials[i];
    double ci;
    if (m->params.model == MODEL_WEAKLY_COMPRESSIBLE) {
      ci = sqrt(m->bulk_modulus * m->gamma / m->density);
    } else {
      double e = m->youngs_modulus, nu = m->poisson_ratio;
      double mu = e / (2 * (1 + nu)), lambda = e * nu / ((1 + nu) * (1 - 2 * nu));
      ci = sqrt((lambda + 2 * mu) / m->density);
    }
    if (ci > c) c = ci;
  }
  return c;
}

double scene_viscous_dt(const scene *s) {
  double dt = 0;
  for (int i = 0; i < s->n_materials; ++i) {
    const scene_material *m = &s->materials[i];
    if (m->params.model != MODEL_WEAKLY_COMPRESSIBLE || !(m->viscosity > 0)) continue;
    const double di = m->density * s->dx * s->dx / (6.0 * m->viscosity);
    if (dt == 0 || di < dt) dt = di;
  }
  return dt;
}

double scene_bodies_speed(const scene *s, int sources) {
  double vmax = 0;
  for (int i = 0; i < s->n_bodies; ++i) {
    if (!sources && s->bodies[i].emit.mode != EMIT_NONE) continue;
    const double *v = s->bodies[i].velocity;
    const double speed = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    if (speed > vmax) vmax = speed;
  }
  return vmax;
}

double scene_initial_dt(const scene *s) {
  double frame = 1.0 / s->fps;
  if (s->dt > 0) {
    double n = ceil(frame / s->dt - 1e-9);
    if (n < 1) n = 1;
    return frame / n;
  }
  double c = scene_wave_speed(s) + scene_bodies_speed(s, 1);
  if (!(c > 0)) return frame;
  double dt = s->cfl * s->dx / c;
  const double visc = s->cfl * scene_viscous_dt(s);
  if (visc > 0 && dt > visc) dt = visc;
  return dt < frame ? dt : frame;
}

double scene_substeps_at_rest(const scene *s) {
  const double frame = 1.0 / s->fps;
  if (s->dt > 0) return fmax(1.0, ceil(frame / s->dt - 1e-9));
  const double c = scene_wave_speed(s);
  if (!(c > 0)) return 1.0;
  double dt = s->cfl * s->dx / c;
  const double visc = s->cfl * scene_viscous_dt(s); /* viscous liquids: the diffusion bound too */
  if (visc > 0 && dt > visc) dt = visc;
  return fmax(1.0, ceil(frame / dt - 1e-9));
}

int scene_check_substeps(const ctx *c, const scene *s) {
  char a[32], b[32], d[32], e[32], f[32];
  if (s->dt > 0) return 0; /* checked with time.dt */
  const double n = scene_substeps_at_rest(s), w = scene_wave_speed(s);
  if (n <= s->max_substeps) return 0;
  return sj_fail(c, "time.cfl", "too many substeps: about %s substeps per frame at rest, more than time.max_substeps = "
                 "%d (got cfl %s: 1/fps = %s s, cfl dx / c = %s s with c = %s m/s, the fastest wave; expected "
                 "a larger cfl or dx, softer or denser materials, or a larger time.max_substeps)",
                 sj_fmt_derived(a, n), s->max_substeps, sj_fmt_num(b, s->cfl), sj_fmt_derived(d, 1.0 / s->fps),
                 sj_fmt_derived(e, s->cfl * s->dx / w), sj_fmt_derived(f, w));
}

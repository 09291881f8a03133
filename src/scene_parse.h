/* scene_parse.h - private to the scene loader (src/scene*.c): what its files share. Not included
 * anywhere else; src/scene.h is the loader's public interface.
 *
 * ctx carries the scene file's name as messages show it (already escaped). Every function here
 * that returns int returns 0 or the code of the first problem found (DR_EINPUT with its one-line
 * message recorded by sj_fail, or DR_ENOMEM); callers pass it up unchanged with DR_TRY, so the
 * first problem is the one reported. */
#ifndef DRIFT_SCENE_PARSE_H
#define DRIFT_SCENE_PARSE_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>

#include "scene.h"

#define PI 3.14159265358979323846
#define REL_TOL 1e-9                   /* rounding slack for comparisons of derived values */
#define KEY_LEN 512                    /* a key path, user parts escaped and clipped */
#define GOT_LEN 128                    /* a value shown in a message */

static const char *const AXIS = "xyz";

/* What every check needs: the file name as it will appear in messages. */
typedef struct ctx {
  char path[600];
} ctx;

/* The range a real number must lie in; lo/hi = -/+INFINITY when unbounded. */
typedef struct range {
  double lo, hi;
  int lo_open, hi_open; /* 1: the bound itself is excluded */
  const char *unit;     /* "m", "Pa", ... or "" */
} range;

static const range POSITIVE_M = {0, INFINITY, 1, 0, "m"};

/* scene_json.c: message helpers. Everything a user wrote is escaped and clipped. */

/* Copies src into dst (capacity cap): control bytes and bytes that are not valid UTF-8 as \xNN,
 * at most max bytes, "..." if cut. */
void sj_clean(char *dst, size_t cap, const char *src, size_t max);
/* Shortest "%g" form that reads back as the same double. */
const char *sj_fmt_num(char buf[32], double v);
/* A derived value (a sum, a ratio) in messages: 12 significant digits hide rounding noise. */
const char *sj_fmt_derived(char buf[32], double v);
/* Describes a JSON value for "(got ...)". */
const char *sj_got(char buf[GOT_LEN], const cJSON *v);
/* Records "PATH: KEY: what" (or "PATH: what" without a key). Returns DR_EINPUT. */
int sj_fail(const ctx *c, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* key = where.name (or name at the top level); name is escaped. */
void sj_join(char key[KEY_LEN], const char *where, const char *name);
/* Joins a list of names into "a, b, c". */
void sj_list_names(char *buf, size_t cap, const char *const *names, int n);
int sj_has_control_char(const char *s);

/* The deepest nesting of objects and arrays a scene file may have. */
#define SJ_MAX_DEPTH 100
/* Scans the JSON text buf (len bytes) for what cJSON accepts or reports at the wrong place: raw
 * control characters, invalid UTF-8 and \u0000 in strings, integers a double does not hold
 * exactly, comments, trailing commas, nesting deeper than SJ_MAX_DEPTH. Returns 1 with the first
 * one's byte offset in *at and a description in what (cap bytes), else 0. */
int sj_scan_text(const char *buf, size_t len, size_t *at, char *what, size_t cap);

/* scene_json.c: checked reads. required = 0: an absent key yields def and no error. */

/* Fails unless v is an object; `expect` says what the object should hold. */
int sj_need_object(const ctx *c, const cJSON *v, const char *key, const char *expect);
/* Rejects duplicate keys in obj, and (when valid is given) keys not in valid. A key found in
 * `foreign` (keys that belong to another variant, e.g. another material model) is reported as
 * "not a key of <variant>". */
int sj_check_keys(const ctx *c, const cJSON *obj, const char *where, const char *const *valid,
                  int n_valid, const char *const *foreign, int n_foreign, const char *variant);
/* Reads obj.name as a real number in r. Absent: *out = def, or an error when required. */
int sj_get_real(const ctx *c, const cJSON *obj, const char *where, const char *name,
                int required, double def, range r, double *out);
/* Reads obj.name as an integer in [lo, hi]. */
int sj_get_int(const ctx *c, const cJSON *obj, const char *where, const char *name,
               int required, double def, double lo, double hi, double *out);
int sj_get_int32(const ctx *c, const cJSON *obj, const char *where, const char *name,
                 int required, int def, int lo, int hi, int *out);
/* Reads obj.name as [x, y, z]: exactly three finite numbers. */
int sj_get_vec3(const ctx *c, const cJSON *obj, const char *where, const char *name,
                int required, const double def[3], const char *unit, double out[3]);
/* Reads obj.name as a string; absent: *out = def (or an error when required). */
int sj_get_string(const ctx *c, const cJSON *obj, const char *where, const char *name,
                  int required, const char *def, const char *expect, const char **out);
/* Reads obj.name as true or false (JSON booleans only); absent: *out = def. */
int sj_get_bool(const ctx *c, const cJSON *obj, const char *where, const char *name, int def, int *out);
/* Reads obj.name as one of names[0..n); *out is its index. def < 0: required. */
int sj_get_enum(const ctx *c, const cJSON *obj, const char *where, const char *name, int def,
                const char *const *names, int n, int *out);
/* The optional section root.name: NULL when absent, an error when not an object. */
int sj_get_section(const ctx *c, const cJSON *root, const char *name, int required,
                   const char *expect, const cJSON **out);
/* obj.name as a direction: three numbers, not all zero; *out is normalised. */
int sj_get_direction(const ctx *c, const cJSON *obj, const char *where, const char *name,
                     double out[3]);
/* obj.rotation = {"axis": [x, y, z], "angle": degrees} as a unit quaternion (w, x, y, z);
 * *present = 0 and the identity when absent. */
int sj_get_rotation(const ctx *c, const cJSON *obj, const char *where, int *present,
                    double q[4], double *angle_out);

/* The sections, in the order scene.c parses them. */
int scene_parse_domain(const ctx *c, const cJSON *root, scene *s);      /* scene_settings.c */
int scene_parse_time(const ctx *c, const cJSON *root, scene *s);        /* scene_settings.c */
int scene_parse_gravity(const ctx *c, const cJSON *root, scene *s);     /* scene_settings.c */
int scene_parse_materials(const ctx *c, const cJSON *root, scene *s);   /* scene_materials.c */
int scene_parse_bodies(const ctx *c, const cJSON *root, scene *s);      /* scene_bodies.c */
int scene_parse_boundary(const ctx *c, const cJSON *root, scene *s);    /* scene_colliders.c */
int scene_parse_colliders(const ctx *c, const cJSON *root, scene *s);   /* scene_colliders.c */
int scene_parse_output(const ctx *c, const cJSON *root, scene *s);      /* scene_settings.c */
int scene_parse_parallel(const ctx *c, const cJSON *root, scene *s);    /* scene_settings.c */

/* scene_settings.c: after every section: the adaptive step's substeps per frame at rest (from
 * the fastest wave) within time.max_substeps (a fixed dt is checked with time). */
int scene_check_substeps(const ctx *c, const scene *s);

/* scene_bodies.c: fails when the bounding box of a body leaves the domain; key names the value to
 * blame and what says which shape ("the sphere", "the cylinder", "the rotated box"). */
int scene_check_bounds_inside(const ctx *c, const scene *s, const scene_body *body,
                              const char *where, const char *blame, const char *what);
/* scene_meshes.c: a mesh body (file, placement; its bounding box inside the domain) and a mesh
 * collider (file, or files + fps (+ first, count); placement; level sets planned). */
int scene_parse_mesh_body(const ctx *c, const cJSON *b, const char *where, scene *s, scene_body *body);
int scene_parse_mesh_collider(const ctx *c, const cJSON *col, const char *where, scene *s,
                              scene_collider *sc);
/* Frees the level sets planned and not built (scene_destroy). */
void scene_free_levelset_jobs(scene *s);

#endif

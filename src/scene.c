/* scene.c - reads a scene file (JSON, SI units) into a struct scene.
 *
 * Every key is checked for its type, its range and its consistency with the others; unknown
 * and duplicate keys are errors. The first problem found becomes one line
 * "FILE: KEY: what is wrong (got VALUE; expected WHAT)" recorded with dr_fail(DR_EINPUT, ...).
 * Sections are checked in a fixed order: the top-level keys, then domain, time, gravity,
 * materials, bodies, boundary, colliders, output, parallel; inside a section, duplicate and unknown keys
 * first, then the values in the order the format lists them. The format and every rule
 * enforced here are described in docs/scene-format.md: keep the two in step. */
#include "scene.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "mesh.h"
#include "meshsdf.h"
#include "physics/constitutive.h"

#define MAX_FILE_BYTES (64L << 20)    /* a scene file larger than this is a mistake */
#define MIN_CELLS_PER_AXIS 4.0
#define MAX_CELLS_PER_AXIS 1048576.0   /* 2^20: block coordinates (cells / 4 + padding) fit in 19 bits, so a block code and a 6-bit cell code share one 64-bit sort key */
#define MAX_PPC 1000
#define MAX_COLLIDERS 256                /* colliders are tested at every grid node */
#define MAX_MESH_FRAMES 100000           /* files of one mesh sequence */
#define LS_SPACING 0.5                   /* mesh level sets: node spacing, in cells (dx / 2) */
#define LS_BAND 2.0                      /* mesh level sets: |phi| stored up to this many cells */
#define MAX_CHECKPOINT_EVERY 100000000 /* as --frames */
#define MAX_CHECKPOINT_KEEP 1000
#define MAX_PREVIEW_SIZE 4096 /* output.preview_size: a 4096^2 picture needs 128 MiB of keys per rank */
#define MAX_SEED 9007199254740992.0    /* 2^53: the largest integer a JSON number holds exactly */
#define PI 3.14159265358979323846
#define REL_TOL 1e-9                   /* rounding slack for comparisons of derived values */
#define KEY_LEN 512                    /* a key path, user parts escaped and clipped */
#define GOT_LEN 128                    /* a value shown in a message */

static const char *const AXIS = "xyz";

/* What every check needs: the file name as it will appear in messages. */
typedef struct ctx {
  char path[600];
} ctx;

/* ---------------------------------------------------------------------------------------------
 * Message helpers: everything a user wrote is escaped (no control characters reach the one-line
 * message) and clipped. */

/* Length of the valid UTF-8 sequence at p, or 0 when p does not start one. */
static size_t utf8_len(const unsigned char *p) {
  size_t n = p[0] < 0x80 ? 1 : p[0] >= 0xC2 && p[0] <= 0xDF ? 2 : p[0] >= 0xE0 && p[0] <= 0xEF ? 3
           : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4 : 0;
  for (size_t i = 1; i < n; ++i)
    if ((p[i] & 0xC0) != 0x80) return 0;
  return n;
}

/* Copies src into dst (capacity cap): control bytes and bytes that are not valid UTF-8 as \xNN,
 * at most max bytes, "..." if cut. */
static void clean(char *dst, size_t cap, const char *src, size_t max) {
  size_t n = 0;
  if (max + 4 > cap) max = cap > 4 ? cap - 4 : 0;
  for (const unsigned char *p = (const unsigned char *)src; *p;) {
    char piece[5];
    size_t k = utf8_len(p), used = k;
    if (k == 0 || *p < 0x20 || *p == 0x7f) {
      snprintf(piece, sizeof piece, "\\x%02x", *p);
      k = 4;
      used = 1;
    } else {
      memcpy(piece, p, k);
    }
    if (n + k > max) {
      memcpy(dst + n, "...", 3);
      n += 3;
      break;
    }
    memcpy(dst + n, piece, k);
    n += k;
    p += used;
  }
  dst[n] = 0;
}

/* Shortest "%g" form that reads back as the same double. */
static const char *fmt_num(char buf[32], double v) {
  if (isinf(v)) return v > 0 ? "inf" : "-inf";
  if (isnan(v)) return "nan";
  snprintf(buf, 32, "%.15g", v);
  if (strtod(buf, NULL) != v) snprintf(buf, 32, "%.17g", v);
  return buf;
}

/* A derived value (a sum, a ratio) in messages: 12 significant digits hide rounding noise. */
static const char *fmt_derived(char buf[32], double v) {
  snprintf(buf, 32, "%.12g", v);
  return buf;
}

/* Describes a JSON value for "(got ...)". */
static const char *got(char buf[GOT_LEN], const cJSON *v) {
  char num[32];
  if (!v) {
    snprintf(buf, GOT_LEN, "nothing");
  } else if (cJSON_IsNumber(v)) {
    if (!isfinite(v->valuedouble))
      snprintf(buf, GOT_LEN, "a number beyond double range, read as %s", fmt_num(num, v->valuedouble));
    else
      snprintf(buf, GOT_LEN, "%s", fmt_num(num, v->valuedouble));
  } else if (cJSON_IsTrue(v)) {
    snprintf(buf, GOT_LEN, "true");
  } else if (cJSON_IsFalse(v)) {
    snprintf(buf, GOT_LEN, "false");
  } else if (cJSON_IsNull(v)) {
    snprintf(buf, GOT_LEN, "null");
  } else if (cJSON_IsString(v)) {
    char s[GOT_LEN - 3];
    clean(s, sizeof s, v->valuestring, 60);
    snprintf(buf, GOT_LEN, "\"%s\"", s);
  } else {
    char *text = cJSON_PrintUnformatted(v);
    if (text) {
      clean(buf, GOT_LEN, text, 60);
      cJSON_free(text);
    } else {
      snprintf(buf, GOT_LEN, cJSON_IsArray(v) ? "an array" : "an object");
    }
  }
  return buf;
}

/* Records "PATH: KEY: what" (or "PATH: what" without a key). Returns DR_EINPUT. */
static int fail(const ctx *c, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(const ctx *c, const char *key, const char *fmt, ...) {
  char what[900], line[sizeof ((ctx *)0)->path + KEY_LEN + 900 + 8];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (key && *key)
    snprintf(line, sizeof line, "%s: %s: %s", c->path, key, what);
  else
    snprintf(line, sizeof line, "%s: %s", c->path, what);
  for (char *p = line; *p; ++p) /* last line of defence: the message is one line */
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = ' ';
  return dr_fail(DR_EINPUT, "%s", line);
}

/* key = where.name (or name at the top level); name is escaped. */
static void join(char key[KEY_LEN], const char *where, const char *name) {
  char n[200];
  size_t k = 0;
  clean(n, sizeof n, name, 80);
  for (const char *p = where ? where : ""; *p && k + 1 < KEY_LEN; ++p) key[k++] = *p;
  if (k > 0 && k + 1 < KEY_LEN) key[k++] = '.';
  for (const char *p = n; *p && k + 1 < KEY_LEN; ++p) key[k++] = *p;
  key[k] = 0;
}

/* Joins a list of names into "a, b, c". */
static void list_names(char *buf, size_t cap, const char *const *names, int n) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < n && k < cap; ++i) {
    int w = snprintf(buf + k, cap - k, "%s%s", i ? ", " : "", names[i]);
    if (w < 0) break;
    k += (size_t)w;
  }
}

static int in_list(const char *s, const char *const *names, int n) {
  for (int i = 0; i < n; ++i)
    if (strcmp(s, names[i]) == 0) return 1;
  return 0;
}

/* Levenshtein distance, capped: for "did you mean" hints on misspelt keys. */
static int edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return 99;
  int prev[64], cur[64];
  for (size_t j = 0; j <= lb; ++j) prev[j] = (int)j;
  for (size_t i = 1; i <= la; ++i) {
    cur[0] = (int)i;
    for (size_t j = 1; j <= lb; ++j) {
      int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
      int del = prev[j] + 1, ins = cur[j - 1] + 1;
      cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
    memcpy(prev, cur, sizeof(int) * (lb + 1));
  }
  return prev[lb];
}

/* ---------------------------------------------------------------------------------------------
 * Generic checks of objects and values. */

/* Fails unless v is an object; `expect` says what the object should hold. */
static int need_object(const ctx *c, const cJSON *v, const char *key, const char *expect) {
  char g[GOT_LEN];
  if (cJSON_IsObject(v)) return 0;
  return fail(c, key, "wrong type (got %s; expected an object%s%s)", got(g, v), *expect ? " " : "",
              expect);
}

/* Rejects duplicate keys in obj, and (when valid is given) keys not in valid. A key found in
 * `foreign` (keys that belong to another variant, e.g. another material model) is reported as
 * "not a key of <variant>". */
static int check_keys(const ctx *c, const cJSON *obj, const char *where, const char *const *valid,
                      int n_valid, const char *const *foreign, int n_foreign, const char *variant) {
  char key[KEY_LEN], names[400];
  for (const cJSON *it = obj->child; it; it = it->next) {
    const char *name = it->string ? it->string : "";
    int count = 1;
    for (const cJSON *o = it->next; o; o = o->next)
      if (o->string && strcmp(o->string, name) == 0) ++count;
    if (count > 1) {
      join(key, where, name);
      return fail(c, key, "duplicate key (given %d times; expected each key at most once)", count);
    }
    if (!valid || in_list(name, valid, n_valid)) continue;
    join(key, where, name);
    list_names(names, sizeof names, valid, n_valid);
    if (foreign && in_list(name, foreign, n_foreign))
      return fail(c, key, "not a key of %s (expected one of: %s)", variant, names);
    const char *best = NULL;
    int best_d = 3;
    for (int i = 0; i < n_valid; ++i) {
      int d = edit_distance(name, valid[i]);
      if (d < best_d) best_d = d, best = valid[i];
    }
    if (best)
      return fail(c, key, "unknown key (did you mean \"%s\"? expected one of: %s)", best, names);
    return fail(c, key, "unknown key (expected one of: %s)", names);
  }
  return 0;
}

/* The range a real number must lie in; lo/hi = -/+INFINITY when unbounded. */
typedef struct range {
  double lo, hi;
  int lo_open, hi_open; /* 1: the bound itself is excluded */
  const char *unit;     /* "m", "Pa", ... or "" */
} range;

static void fmt_range(char *buf, size_t cap, const char *name, range r) {
  char a[32], b[32], unit[40] = "";
  if (r.unit && *r.unit) snprintf(unit, sizeof unit, " (%s)", r.unit);
  if (isfinite(r.lo) && isfinite(r.hi))
    snprintf(buf, cap, "%s %s %s %s %s%s", fmt_num(a, r.lo), r.lo_open ? "<" : "<=", name,
             r.hi_open ? "<" : "<=", fmt_num(b, r.hi), unit);
  else if (isfinite(r.lo))
    snprintf(buf, cap, "%s %s %s%s", name, r.lo_open ? ">" : ">=", fmt_num(a, r.lo), unit);
  else if (isfinite(r.hi))
    snprintf(buf, cap, "%s %s %s%s", name, r.hi_open ? "<" : "<=", fmt_num(b, r.hi), unit);
  else
    snprintf(buf, cap, "any number%s", unit);
}

/* Checks that v is a finite number that single precision can hold (the kernels compute in
 * float): 0 or a magnitude in [FLT_MIN, FLT_MAX]. want: the range, e.g. "dx > 0 (m)", or "". */
static int check_number(const ctx *c, const cJSON *v, const char *key, const char *want) {
  char g[GOT_LEN];
  const char *sep = *want ? ", " : "";
  if (!cJSON_IsNumber(v))
    return fail(c, key, "wrong type (got %s; expected a number%s%s)", got(g, v), sep, want);
  double x = v->valuedouble;
  if (!isfinite(x))
    return fail(c, key, "not a finite number (got %s; expected a finite number%s%s)", got(g, v),
                sep, want);
  if (fabs(x) > FLT_MAX || (x != 0 && fabs(x) < FLT_MIN))
    return fail(c, key, "out of range (got %s; expected %s%sa number single precision holds: 0 or a "
                "magnitude from 1.2e-38 to 3.4e+38)", got(g, v), want, *want ? " and " : "");
  return 0;
}

/* Reads obj.name as a real number in r. Absent: *out = def, or an error when required. */
static int get_real(const ctx *c, const cJSON *obj, const char *where, const char *name,
                    int required, double def, range r, double *out) {
  char key[KEY_LEN], want[160], g[GOT_LEN];
  join(key, where, name);
  fmt_range(want, sizeof want, name, r);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
  if (!v) {
    if (required) return fail(c, key, "missing required key (expected a number, %s)", want);
    *out = def;
    return 0;
  }
  DR_TRY(check_number(c, v, key, want));
  double x = v->valuedouble;
  if (x < r.lo || x > r.hi || (r.lo_open && x == r.lo) || (r.hi_open && x == r.hi))
    return fail(c, key, "out of range (got %s; expected %s)", got(g, v), want);
  *out = x;
  return 0;
}

/* Reads obj.name as an integer in [lo, hi]. */
static int get_int(const ctx *c, const cJSON *obj, const char *where, const char *name,
                   int required, double def, double lo, double hi, double *out) {
  char key[KEY_LEN], want[120], g[GOT_LEN], a[32], b[32];
  join(key, where, name);
  snprintf(want, sizeof want, "an integer from %s to %s", fmt_num(a, lo), fmt_num(b, hi));
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
  if (!v) {
    if (required) return fail(c, key, "missing required key (expected %s)", want);
    *out = def;
    return 0;
  }
  if (!cJSON_IsNumber(v)) return fail(c, key, "wrong type (got %s; expected %s)", got(g, v), want);
  double x = v->valuedouble;
  if (!isfinite(x)) return fail(c, key, "not a finite number (got %s; expected %s)", got(g, v), want);
  if (x != floor(x)) return fail(c, key, "not an integer (got %s; expected %s)", got(g, v), want);
  if (x < lo || x > hi) return fail(c, key, "out of range (got %s; expected %s)", got(g, v), want);
  *out = x;
  return 0;
}

static int get_int32(const ctx *c, const cJSON *obj, const char *where, const char *name,
                     int required, int def, int lo, int hi, int *out) {
  double x;
  DR_TRY(get_int(c, obj, where, name, required, def, lo, hi, &x));
  *out = (int)x;
  return 0;
}

/* Reads obj.name as [x, y, z]: exactly three finite numbers. */
static int get_vec3(const ctx *c, const cJSON *obj, const char *where, const char *name,
                    int required, const double def[3], const char *unit, double out[3]) {
  char key[KEY_LEN], ekey[KEY_LEN + 16], want[120], g[GOT_LEN];
  join(key, where, name);
  snprintf(want, sizeof want, "an array of 3 numbers [x, y, z] (%s)", unit);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
  if (!v) {
    if (required) return fail(c, key, "missing required key (expected %s)", want);
    for (int i = 0; i < 3; ++i) out[i] = def[i];
    return 0;
  }
  if (!cJSON_IsArray(v)) return fail(c, key, "wrong type (got %s; expected %s)", got(g, v), want);
  int n = cJSON_GetArraySize(v);
  if (n != 3)
    return fail(c, key, "wrong length (got %s, %d item%s; expected %s)", got(g, v), n,
                n == 1 ? "" : "s", want);
  int i = 0;
  for (const cJSON *e = v->child; e; e = e->next, ++i) {
    snprintf(ekey, sizeof ekey, "%s[%d]", key, i);
    DR_TRY(check_number(c, e, ekey, ""));
    out[i] = e->valuedouble;
  }
  return 0;
}

/* Reads obj.name as a string; absent: *out = def (or an error when required). */
static int get_string(const ctx *c, const cJSON *obj, const char *where, const char *name,
                      int required, const char *def, const char *expect, const char **out) {
  char key[KEY_LEN], g[GOT_LEN];
  join(key, where, name);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
  if (!v) {
    if (required) return fail(c, key, "missing required key (expected %s)", expect);
    *out = def;
    return 0;
  }
  if (!cJSON_IsString(v) || !v->valuestring)
    return fail(c, key, "wrong type (got %s; expected %s)", got(g, v), expect);
  *out = v->valuestring;
  return 0;
}

/* Reads obj.name as true or false (JSON booleans only); absent: *out = def. */
static int get_bool(const ctx *c, const cJSON *obj, const char *where, const char *name, int def, int *out) {
  char key[KEY_LEN], g[GOT_LEN];
  join(key, where, name);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
  if (!v) {
    *out = def;
    return 0;
  }
  if (!cJSON_IsBool(v)) return fail(c, key, "wrong type (got %s; expected true or false)", got(g, v));
  *out = cJSON_IsTrue(v) ? 1 : 0;
  return 0;
}

/* Reads obj.name as one of names[0..n); *out is its index. def < 0: required. */
static int get_enum(const ctx *c, const cJSON *obj, const char *where, const char *name, int def,
                    const char *const *names, int n, int *out) {
  char key[KEY_LEN], want[300], list[240], g[GOT_LEN];
  join(key, where, name);
  list_names(list, sizeof list, names, n);
  snprintf(want, sizeof want, "one of: %s", list);
  const char *s = NULL;
  DR_TRY(get_string(c, obj, where, name, def < 0, NULL, want, &s));
  if (!s) {
    *out = def;
    return 0;
  }
  for (int i = 0; i < n; ++i)
    if (strcmp(s, names[i]) == 0) {
      *out = i;
      return 0;
    }
  return fail(c, key, "unknown value (got %s; expected %s)",
              got(g, cJSON_GetObjectItemCaseSensitive(obj, name)), want);
}

/* The optional section root.name: NULL when absent, an error when not an object. */
static int get_section(const ctx *c, const cJSON *root, const char *name, int required,
                       const char *expect, const cJSON **out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
  *out = NULL;
  if (!v) {
    if (required) return fail(c, name, "missing required section (expected %s)", expect);
    return 0;
  }
  *out = v;
  return 0;
}

static int has_control_char(const char *s) {
  for (; *s; ++s)
    if ((unsigned char)*s < 0x20 || *s == 0x7f) return 1;
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Sections. */

/* obj.name as a direction: three numbers, not all zero; *out is normalised. */
static int get_direction(const ctx *c, const cJSON *obj, const char *where, const char *name,
                         double out[3]) {
  char key[KEY_LEN], g[GOT_LEN];
  DR_TRY(get_vec3(c, obj, where, name, 1, NULL, "a direction, not all zero", out));
  double l = sqrt(out[0] * out[0] + out[1] * out[1] + out[2] * out[2]);
  if (!(l > 0) || !isfinite(l)) {
    join(key, where, name);
    return fail(c, key, "not a direction (got %s; expected a vector of non-zero length)",
                got(g, cJSON_GetObjectItemCaseSensitive(obj, name)));
  }
  for (int i = 0; i < 3; ++i) out[i] /= l;
  return 0;
}

/* obj.rotation = {"axis": [x, y, z], "angle": degrees} as a unit quaternion (w, x, y, z);
 * *present = 0 and the identity when absent. */
static int get_rotation(const ctx *c, const cJSON *obj, const char *where, int *present,
                        double q[4], double *angle_out) {
  static const char *const keys[] = {"axis", "angle"};
  char rkey[KEY_LEN];
  double axis[3], angle;
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(obj, "rotation");
  q[0] = 1, q[1] = q[2] = q[3] = 0;
  *present = r != NULL;
  if (angle_out) *angle_out = 0;
  if (!r) return 0;
  join(rkey, where, "rotation");
  DR_TRY(need_object(c, r, rkey, "{\"axis\": [x, y, z], \"angle\": degrees}"));
  DR_TRY(check_keys(c, r, rkey, keys, 2, NULL, 0, NULL));
  DR_TRY(get_direction(c, r, rkey, "axis", axis));
  DR_TRY(get_real(c, r, rkey, "angle", 1, 0, (range){-INFINITY, INFINITY, 0, 0, "degrees"}, &angle));
  double h = 0.5 * angle * (PI / 180.0);
  q[0] = cos(h);
  for (int i = 0; i < 3; ++i) q[i + 1] = axis[i] * sin(h);
  if (angle_out) *angle_out = angle;
  return 0;
}

static const range POSITIVE_M = {0, INFINITY, 1, 0, "m"};

static int parse_domain(const ctx *c, const cJSON *root, scene *s) {
  static const char *const keys[] = {"min", "max", "dx"};
  const cJSON *d;
  char a[32], b[32], e[32];
  DR_TRY(get_section(c, root, "domain", 1, "an object with keys min, max, dx", &d));
  DR_TRY(need_object(c, d, "domain", "with keys min, max, dx"));
  DR_TRY(check_keys(c, d, "domain", keys, 3, NULL, 0, NULL));
  DR_TRY(get_vec3(c, d, "domain", "min", 1, NULL, "m", s->domain_min));
  DR_TRY(get_vec3(c, d, "domain", "max", 1, NULL, "m", s->domain_max));
  for (int i = 0; i < 3; ++i)
    if (!(s->domain_max[i] > s->domain_min[i]))
      return fail(c, "domain.max", "not above domain.min along %c (got max.%c %s <= min.%c %s; "
                  "expected max > min on every axis)", AXIS[i], AXIS[i],
                  fmt_num(a, s->domain_max[i]), AXIS[i], fmt_num(b, s->domain_min[i]));
  DR_TRY(get_real(c, d, "domain", "dx", 1, 0, POSITIVE_M, &s->dx));
  for (int i = 0; i < 3; ++i) {
    double extent = s->domain_max[i] - s->domain_min[i];
    double cells = extent / s->dx;
    if (cells < MIN_CELLS_PER_AXIS * (1 - REL_TOL))
      return fail(c, "domain.dx", "too coarse: the domain is %s cells wide along %c (got %s; "
                  "expected dx <= %s m, at least 4 cells per axis)", fmt_derived(a, cells), AXIS[i],
                  fmt_num(b, s->dx), fmt_derived(e, extent / MIN_CELLS_PER_AXIS));
    if (cells > MAX_CELLS_PER_AXIS * (1 + REL_TOL))
      return fail(c, "domain.dx", "too fine: the domain is %s cells wide along %c (got %s; "
                  "expected dx >= %s m, at most 1048576 = 2^20 cells per axis)", fmt_derived(a, cells),
                  AXIS[i], fmt_num(b, s->dx), fmt_derived(e, extent / MAX_CELLS_PER_AXIS));
  }
  return 0;
}

static int parse_time(const ctx *c, const cJSON *root, scene *s) {
  static const char *const keys[] = {"frames", "fps", "dt", "cfl"};
  const cJSON *t;
  char a[32], b[32], g[GOT_LEN], h[GOT_LEN];
  DR_TRY(get_section(c, root, "time", 1, "an object with keys frames, fps and dt or cfl", &t));
  DR_TRY(need_object(c, t, "time", "with keys frames, fps and dt or cfl"));
  DR_TRY(check_keys(c, t, "time", keys, 4, NULL, 0, NULL));
  DR_TRY(get_int32(c, t, "time", "frames", 1, 0, 1, INT_MAX, &s->frames));
  DR_TRY(get_real(c, t, "time", "fps", 1, 0, (range){0, INFINITY, 1, 0, "frames per second"},
                  &s->fps));
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dt");
  const cJSON *cfl = cJSON_GetObjectItemCaseSensitive(t, "cfl");
  if (dt && cfl)
    return fail(c, "time", "both dt and cfl are given (got dt %s and cfl %s; expected exactly one: "
                "dt for a fixed step or cfl for an adaptive one)", got(g, dt), got(h, cfl));
  if (!dt && !cfl)
    return fail(c, "time", "neither dt nor cfl is given (expected exactly one: dt (s) for a fixed "
                "step or cfl (0 < cfl <= 1) for an adaptive one)");
  double frame = 1.0 / s->fps;
  s->dt = s->cfl = 0;
  if (dt) {
    double v;
    DR_TRY(get_real(c, t, "time", "dt", 1, 0, (range){0, INFINITY, 1, 0, "s"}, &v));
    if (v > frame * (1 + REL_TOL))
      return fail(c, "time.dt", "longer than one frame (got %s; expected dt <= 1/fps = %s s)",
                  fmt_num(a, v), fmt_num(b, frame));
    /* the time loop counts a frame's substeps in an int */
    if (ceil(frame / v - 1e-9) > INT_MAX)
      return fail(c, "time.dt", "too short: more than %d substeps per frame (got %s; expected dt >= "
                  "1/fps / %d = %s s)", INT_MAX, fmt_num(a, v), INT_MAX, fmt_derived(b, frame / INT_MAX));
    s->dt = v;
    s->dt = scene_initial_dt(s); /* rounded down so that whole substeps fill each frame */
  } else {
    DR_TRY(get_real(c, t, "time", "cfl", 1, 0, (range){0, 1, 1, 0, ""}, &s->cfl));
  }
  return 0;
}

static int parse_gravity(const ctx *c, const cJSON *root, scene *s) {
  static const double def[3] = {0, -9.81, 0};
  return get_vec3(c, root, "", "gravity", 0, def, "m/s^2", s->gravity);
}

/* Material models: the keys each one accepts. */
static const char *const MODEL_NAMES[] = {"fixed_corotated", "drucker_prager",
                                          "weakly_compressible", "nacc"};
/* Every model also takes the transfer keys (TRANSFER_KEYS, last in each list). */
#define N_TRANSFER_KEYS 4
#define TRANSFER_KEYS "transfer", "flip_blend", "asflip_beta_min", "asflip_beta_max"
static const char *const ALL_MATERIAL_KEYS[] = {"model",         "density",        "youngs_modulus",
                                                "poisson_ratio", "friction_angle", "bulk_modulus",
                                                "gamma",         "friction",       "cohesion",
                                                "hardening",     "initial_compression", TRANSFER_KEYS};
#define N_ALL_MATERIAL_KEYS (11 + N_TRANSFER_KEYS)
static const char *const FIXED_COROTATED_KEYS[] = {"model", "density", "youngs_modulus",
                                                   "poisson_ratio", TRANSFER_KEYS};
static const char *const DRUCKER_PRAGER_KEYS[] = {"model", "density", "youngs_modulus",
                                                  "poisson_ratio", "friction_angle", TRANSFER_KEYS};
static const char *const WEAKLY_COMPRESSIBLE_KEYS[] = {"model", "density", "bulk_modulus",
                                                       "gamma", TRANSFER_KEYS};
static const char *const NACC_KEYS[] = {"model",    "density",  "bulk_modulus", "poisson_ratio",
                                        "friction", "cohesion", "hardening",    "initial_compression",
                                        TRANSFER_KEYS};

/* NACC snow: bulk modulus and Poisson's ratio, the yield surface's friction M, cohesion beta,
 * hardening xi and the initial plastic state (defaults: the paper's Crawling in Snow, and the
 * usual initial_compression of -0.01). */
static int parse_nacc(const ctx *c, const cJSON *m, const char *where, scene_material *mat) {
  char key[KEY_LEN], a[32], b[32];
  material_params *p = &mat->params;
  double M, beta, xi, a0;
  DR_TRY(get_real(c, m, where, "bulk_modulus", 1, 0, (range){0, INFINITY, 1, 0, "Pa"}, &mat->bulk_modulus));
  DR_TRY(get_real(c, m, where, "poisson_ratio", 1, 0, (range){-1, 0.5, 1, 1, ""}, &mat->poisson_ratio));
  const double K = mat->bulk_modulus, nu = mat->poisson_ratio, E = 3 * K * (1 - 2 * nu);
  const double mu = E / (2 * (1 + nu));
  if (!(E <= FLT_MAX && mu <= FLT_MAX)) {
    join(key, where, "bulk_modulus");
    return fail(c, key, "too large: Young's modulus 3 K (1 - 2 nu) overflows single precision (got %s with "
                "poisson_ratio %s; expected at most 3.4e+38 Pa)", fmt_num(a, K), fmt_num(b, nu));
  }
  mat->youngs_modulus = E; /* derived, for the wave speed */
  DR_TRY(get_real(c, m, where, "friction", 0, 0.8, (range){0, INFINITY, 1, 0, ""}, &M));
  DR_TRY(get_real(c, m, where, "cohesion", 0, 0.9, (range){0, INFINITY, 0, 0, ""}, &beta));
  DR_TRY(get_real(c, m, where, "hardening", 0, 5.0, (range){0, INFINITY, 0, 0, ""}, &xi));
  DR_TRY(get_real(c, m, where, "initial_compression", 0, -0.01, (range){-INFINITY, 0, 0, 0, ""}, &a0));
  const double p0 = K * (1e-5 + sinh(xi * -a0));
  if (!(p0 <= FLT_MAX && M * M <= FLT_MAX)) {
    join(key, where, M * M <= FLT_MAX ? "initial_compression" : "friction");
    return fail(c, key, "too large: the initial yield pressure K (1e-5 + sinh(hardening x -initial_compression)) "
                "or friction^2 overflows single precision (got initial_compression %s with hardening %s; expected "
                "a yield pressure within 3.4e+38 Pa)", fmt_num(a, a0), fmt_num(b, xi));
  }
  mat->nacc_friction = M, mat->nacc_cohesion = beta, mat->nacc_hardening = xi, mat->nacc_initial = a0;
  material_nacc_from_user(p, (float)mat->density, (float)K, (float)nu, (float)M, (float)beta, (float)xi, (float)a0);
  return 0;
}
static const char *const TRANSFER_NAMES[] = {"apic", "asflip"};

/* transfer (apic | asflip) and, with asflip only, its parameters. */
static int parse_transfer(const ctx *c, const cJSON *m, const char *where, scene_material *mat) {
  static const char *const asflip_keys[] = {"flip_blend", "asflip_beta_min", "asflip_beta_max"};
  char key[KEY_LEN], a[32], b[32];
  material_params *p = &mat->params;
  DR_TRY(get_enum(c, m, where, "transfer", TRANSFER_APIC, TRANSFER_NAMES, 2, &p->transfer));
  if (p->transfer != TRANSFER_ASFLIP) {
    for (int i = 0; i < 3; ++i)
      if (cJSON_GetObjectItemCaseSensitive(m, asflip_keys[i])) {
        join(key, where, asflip_keys[i]);
        return fail(c, key, "allowed only with transfer \"asflip\" (got transfer \"%s\"; expected no "
                    "%s, or transfer \"asflip\")", TRANSFER_NAMES[p->transfer], asflip_keys[i]);
      }
    return 0;
  }
  const range unit = {0, 1, 0, 0, ""};
  DR_TRY(get_real(c, m, where, "flip_blend", 0, 0.99, unit, &mat->flip_blend));
  DR_TRY(get_real(c, m, where, "asflip_beta_min", 0, 0, unit, &mat->beta_min));
  DR_TRY(get_real(c, m, where, "asflip_beta_max", 0, 1, unit, &mat->beta_max));
  if (mat->beta_max < mat->beta_min) {
    join(key, where, cJSON_GetObjectItemCaseSensitive(m, "asflip_beta_max") ? "asflip_beta_max" : "asflip_beta_min");
    return fail(c, key, "asflip_beta_max below asflip_beta_min (got asflip_beta_min %s and asflip_beta_max %s; "
                "expected asflip_beta_min <= asflip_beta_max)", fmt_num(a, mat->beta_min), fmt_num(b, mat->beta_max));
  }
  p->flip_blend = (float)mat->flip_blend;
  p->beta_min = (float)mat->beta_min;
  p->beta_max = (float)mat->beta_max;
  return 0;
}

/* Young's modulus and Poisson's ratio of a solid, and the Lame parameters from them. */
static int parse_elastic(const ctx *c, const cJSON *m, const char *where, scene_material *mat) {
  char key[KEY_LEN], a[32], b[32];
  DR_TRY(get_real(c, m, where, "youngs_modulus", 1, 0, (range){0, INFINITY, 1, 0, "Pa"},
                  &mat->youngs_modulus));
  DR_TRY(get_real(c, m, where, "poisson_ratio", 1, 0, (range){-1, 0.5, 1, 1, ""},
                  &mat->poisson_ratio));
  double e = mat->youngs_modulus, nu = mat->poisson_ratio;
  double mu = e / (2 * (1 + nu));
  double lambda = e * nu / ((1 + nu) * (1 - 2 * nu));
  if (!(fabs(mu) <= FLT_MAX && fabs(lambda) <= FLT_MAX)) {
    join(key, where, "poisson_ratio");
    return fail(c, key, "too close to %s for this youngs_modulus: the Lame parameters overflow "
                "single precision (got %s with youngs_modulus %s; expected mu and lambda within "
                "3.4e+38 Pa)", nu > 0 ? "0.5" : "-1", fmt_num(a, nu), fmt_num(b, e));
  }
  mat->params.mu = (float)mu;
  mat->params.lambda = (float)lambda;
  return 0;
}

static int parse_material(const ctx *c, const cJSON *m, const char *where, scene_material *mat) {
  char variant[80];
  DR_TRY(need_object(c, m, where, "with keys model, density, ..."));
  DR_TRY(check_keys(c, m, where, NULL, 0, NULL, 0, NULL)); /* duplicates, before reading model */
  int model;
  DR_TRY(get_enum(c, m, where, "model", -1, MODEL_NAMES, 4, &model));
  snprintf(variant, sizeof variant, "model '%s'", MODEL_NAMES[model]);
  const char *const *keys = model == MODEL_FIXED_COROTATED  ? FIXED_COROTATED_KEYS
                            : model == MODEL_DRUCKER_PRAGER ? DRUCKER_PRAGER_KEYS
                            : model == MODEL_NACC           ? NACC_KEYS
                                                            : WEAKLY_COMPRESSIBLE_KEYS;
  int n_keys = (model == MODEL_DRUCKER_PRAGER ? 5 : model == MODEL_NACC ? 8 : 4) + N_TRANSFER_KEYS;
  DR_TRY(check_keys(c, m, where, keys, n_keys, ALL_MATERIAL_KEYS, N_ALL_MATERIAL_KEYS, variant));

  material_params *p = &mat->params;
  memset(p, 0, sizeof *p);
  p->model = model;
  DR_TRY(get_real(c, m, where, "density", 1, 0, (range){0, INFINITY, 1, 0, "kg/m^3"},
                  &mat->density));
  p->density = (float)mat->density;
  if (model == MODEL_WEAKLY_COMPRESSIBLE) {
    DR_TRY(get_real(c, m, where, "bulk_modulus", 1, 0, (range){0, INFINITY, 1, 0, "Pa"},
                    &mat->bulk_modulus));
    DR_TRY(get_real(c, m, where, "gamma", 0, 7, (range){1, INFINITY, 0, 0, ""}, &mat->gamma));
    p->bulk = (float)mat->bulk_modulus;
    p->gamma = (float)mat->gamma;
    return parse_transfer(c, m, where, mat);
  }
  if (model == MODEL_NACC) {
    DR_TRY(parse_nacc(c, m, where, mat));
    return parse_transfer(c, m, where, mat);
  }
  DR_TRY(parse_elastic(c, m, where, mat));
  if (model == MODEL_DRUCKER_PRAGER) {
    DR_TRY(get_real(c, m, where, "friction_angle", 0, 30, (range){0, 90, 0, 1, "degrees"},
                    &mat->friction_angle));
    double sphi = sin(mat->friction_angle * (PI / 180.0));
    p->alpha = (float)(sqrt(2.0 / 3.0) * 2.0 * sphi / (3.0 - sphi));
  }
  return parse_transfer(c, m, where, mat);
}

static int parse_materials(const ctx *c, const cJSON *root, scene *s) {
  const cJSON *ms;
  char key[KEY_LEN], name[200];
  DR_TRY(get_section(c, root, "materials", 1, "an object of named materials", &ms));
  DR_TRY(need_object(c, ms, "materials", "of named materials"));
  int n = cJSON_GetArraySize(ms);
  if (n == 0)
    return fail(c, "materials", "empty (got {}; expected at least one named material, e.g. "
                "\"rubber\": {\"model\": \"fixed_corotated\", ...})");
  DR_TRY(check_keys(c, ms, "materials", NULL, 0, NULL, 0, NULL));
  DR_ALLOC0(s->materials, n, "scene materials");
  s->n_materials = n;
  int i = 0;
  for (const cJSON *m = ms->child; m; m = m->next, ++i) {
    const char *nm = m->string ? m->string : "";
    size_t len = strlen(nm);
    join(key, "materials", nm);
    if (len == 0)
      return fail(c, "materials", "a material has an empty name (got \"\"; expected a name of 1 "
                  "to %d characters)", SCENE_NAME_MAX - 1);
    if (len >= SCENE_NAME_MAX)
      return fail(c, key, "material name too long (got %zu bytes; expected 1 to %d)", len,
                  SCENE_NAME_MAX - 1);
    if (has_control_char(nm)) {
      clean(name, sizeof name, nm, 80);
      return fail(c, key, "material name contains a control character (got \"%s\"; expected "
                  "printable characters)", name);
    }
    memcpy(s->materials[i].name, nm, len + 1);
    DR_TRY(parse_material(c, m, key, &s->materials[i]));
  }
  return 0;
}

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
static int check_bounds_inside(const ctx *c, const scene *s, const scene_body *body,
                               const char *where, const char *blame, const char *what) {
  char key[KEY_LEN], x[32], y[32];
  double lo[3], hi[3], tol = REL_TOL * s->dx;
  scene_body_bounds(body, lo, hi);
  for (int i = 0; i < 3; ++i) {
    const int below = lo[i] < s->domain_min[i] - tol;
    if (!below && !(hi[i] > s->domain_max[i] + tol)) continue;
    join(key, where, blame);
    return fail(c, key, "%s leaves the domain through domain.%s along %c (got its %s %c at %s; "
                "expected %s domain.%s.%c %s)", what, below ? "min" : "max", AXIS[i],
                below ? "lowest" : "highest", AXIS[i], fmt_derived(x, below ? lo[i] : hi[i]),
                below ? ">=" : "<=", below ? "min" : "max", AXIS[i],
                fmt_num(y, below ? s->domain_min[i] : s->domain_max[i]));
  }
  return 0;
}

/* A box: min < max, both inside the domain; or, rotated about its centre, its bounding box
 * inside the domain. */
static int parse_box(const ctx *c, const cJSON *b, const char *where, const scene *s,
                     scene_body *body) {
  char key[KEY_LEN], x[32], y[32];
  double tol = REL_TOL * s->dx;
  DR_TRY(get_vec3(c, b, where, "min", 1, NULL, "m", body->min));
  DR_TRY(get_vec3(c, b, where, "max", 1, NULL, "m", body->max));
  for (int i = 0; i < 3; ++i)
    if (!(body->max[i] > body->min[i])) {
      join(key, where, "max");
      return fail(c, key, "not above min along %c (got max.%c %s <= min.%c %s; expected max > min "
                  "on every axis)", AXIS[i], AXIS[i], fmt_num(x, body->max[i]), AXIS[i],
                  fmt_num(y, body->min[i]));
    }
  DR_TRY(get_rotation(c, b, where, &body->rotated, body->rotation, NULL));
  if (body->rotated) return check_bounds_inside(c, s, body, where, "rotation", "the rotated box");
  for (int i = 0; i < 3; ++i)
    if (body->min[i] < s->domain_min[i] - tol) {
      join(key, where, "min");
      return fail(c, key, "outside the domain: below domain.min along %c (got min.%c %s; expected "
                  ">= domain.min.%c %s)", AXIS[i], AXIS[i], fmt_num(x, body->min[i]), AXIS[i],
                  fmt_num(y, s->domain_min[i]));
    }
  for (int i = 0; i < 3; ++i)
    if (body->max[i] > s->domain_max[i] + tol) {
      join(key, where, "max");
      return fail(c, key, "outside the domain: above domain.max along %c (got max.%c %s; expected "
                  "<= domain.max.%c %s)", AXIS[i], AXIS[i], fmt_num(x, body->max[i]), AXIS[i],
                  fmt_num(y, s->domain_max[i]));
    }
  return 0;
}

/* A sphere: radius > 0, its bounding box inside the domain. */
static int parse_sphere(const ctx *c, const cJSON *b, const char *where, const scene *s,
                        scene_body *body) {
  char key[KEY_LEN], x[32], y[32];
  double tol = REL_TOL * s->dx;
  DR_TRY(get_vec3(c, b, where, "center", 1, NULL, "m", body->center));
  DR_TRY(get_real(c, b, where, "radius", 1, 0, POSITIVE_M, &body->radius));
  for (int i = 0; i < 3; ++i) {
    double lo = s->domain_min[i], hi = s->domain_max[i], ctr = body->center[i];
    if (ctr < lo - tol || ctr > hi + tol) {
      join(key, where, "center");
      return fail(c, key, "outside the domain: %s domain.%s along %c (got center.%c %s; expected "
                  "%s domain.%s.%c %s)", ctr < lo ? "below" : "above", ctr < lo ? "min" : "max",
                  AXIS[i], AXIS[i], fmt_num(x, ctr), ctr < lo ? ">=" : "<=",
                  ctr < lo ? "min" : "max", AXIS[i], fmt_num(y, ctr < lo ? lo : hi));
    }
  }
  for (int i = 0; i < 3; ++i) {
    double lo = s->domain_min[i], hi = s->domain_max[i], ctr = body->center[i], r = body->radius;
    if (ctr - r < lo - tol || ctr + r > hi + tol) {
      int below = ctr - r < lo - tol;
      join(key, where, "radius");
      return fail(c, key, "the sphere leaves the domain through domain.%s along %c (got center.%c "
                  "%s radius = %s; expected %s domain.%s.%c %s)", below ? "min" : "max", AXIS[i],
                  AXIS[i], below ? "-" : "+", fmt_derived(x, below ? ctr - r : ctr + r),
                  below ? ">=" : "<=", below ? "min" : "max", AXIS[i],
                  fmt_num(y, below ? lo : hi));
    }
  }
  return 0;
}

/* A cylinder: radius, height > 0, its bounding box inside the domain. */
static int parse_cylinder(const ctx *c, const cJSON *b, const char *where, const scene *s,
                          scene_body *body) {
  DR_TRY(get_vec3(c, b, where, "center", 1, NULL, "m", body->center));
  DR_TRY(get_direction(c, b, where, "axis", body->axis));
  DR_TRY(get_real(c, b, where, "radius", 1, 0, POSITIVE_M, &body->radius));
  DR_TRY(get_real(c, b, where, "height", 1, 0, POSITIVE_M, &body->height));
  return check_bounds_inside(c, s, body, where, "height", "the cylinder");
}

/* body.material: the index of a defined material. */
static int parse_body_material(const ctx *c, const cJSON *b, const char *where, const scene *s,
                               scene_body *body) {
  char key[KEY_LEN], g[GOT_LEN], defined[600];
  const char *name = NULL;
  DR_TRY(get_string(c, b, where, "material", 1, NULL, "the name of a material in materials",
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
    clean(nm, sizeof nm, s->materials[i].name, 70);
    if (k + strlen(nm) + 8 > 400) {
      snprintf(defined + k, sizeof defined - k, ", ...");
      break;
    }
    k += (size_t)snprintf(defined + k, sizeof defined - k, "%s%s", i ? ", " : "", nm);
  }
  join(key, where, "material");
  return fail(c, key, "no material of that name (got %s; expected one of the defined materials: "
              "%s)", got(g, cJSON_GetObjectItemCaseSensitive(b, "material")), defined);
}

/* ---------------------------------------------------------------------------------------------
 * Meshes (bodies and colliders): OBJ files placed by scale, rotation and translation. */

/* path resolved against the scene file's folder unless absolute. */
static int resolve_path(const ctx *c, const scene *s, const char *key, const char *file, char *out, size_t cap) {
  char g[GOT_LEN];
  if (!*file || has_control_char(file))
    return fail(c, key, "not a file name (got \"%s\"; expected the path of an OBJ file)", (clean(g, sizeof g, file, 60), g));
  int n;
  if (file[0] == '/') {
    n = snprintf(out, cap, "%s", file);
  } else {
    const char *slash = strrchr(s->path, '/');
    n = slash ? snprintf(out, cap, "%.*s/%s", (int)(slash - s->path), s->path, file) : snprintf(out, cap, "%s", file);
  }
  if (n < 0 || (size_t)n >= cap) return fail(c, key, "the path is too long (expected at most %zu bytes)", cap - 1);
  return 0;
}

/* The placement x -> translation + R (scale x) of a mesh: keys scale, rotation, translation. */
static int get_placement(const ctx *c, const cJSON *obj, const char *where, double *scale, double rot[4],
                         int *rotated, double translation[3]) {
  static const double zero[3] = {0, 0, 0};
  DR_TRY(get_real(c, obj, where, "scale", 0, 1, (range){0, INFINITY, 1, 0, ""}, scale));
  DR_TRY(get_rotation(c, obj, where, rotated, rot, NULL));
  return get_vec3(c, obj, where, "translation", 0, zero, "m", translation);
}

/* Reads the OBJ at path (key: the scene key to blame) and places it. */
static int load_placed_mesh(const ctx *c, const char *key, const char *path, double scale, const double q[4],
                            const double t[3], mesh *m) {
  char err[700];
  int rc = mesh_read_obj(path, m, err, sizeof err);
  if (rc == DR_ENOMEM) return dr_fail(DR_ENOMEM, "%s", err);
  if (rc) return fail(c, key, "%s", err);
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

/* A level set into *pool (allocated on first use); what names the mesh in messages. */
static int build_levelset(const ctx *c, const scene *s, levelset_pool **pool, const mesh *m, const double shift[3],
                          double band, const double *vout, const double *vin, const char *key, int *index) {
  if (!*pool) {
    *pool = dr_calloc(1, sizeof **pool, "level-set pool");
    if (!*pool) return DR_ENOMEM;
  }
  char what[KEY_LEN + 700];
  snprintf(what, sizeof what, "%s: %s", c->path, key);
  return meshsdf_build(*pool, m, shift, LS_SPACING * s->dx, band, vout, vin, what, index);
}

/* A mesh body: file, placement; its bounding box inside the domain. */
static int parse_mesh_body(const ctx *c, const cJSON *b, const char *where, scene *s, scene_body *body) {
  char key[KEY_LEN], path[4096];
  const char *file = NULL;
  mesh m;
  DR_TRY(get_string(c, b, where, "file", 1, NULL, "the path of an OBJ file (relative to the scene file)", &file));
  join(key, where, "file");
  DR_TRY(resolve_path(c, s, key, file, path, sizeof path));
  DR_TRY(get_placement(c, b, where, &body->scale, body->rotation, &body->rotated, body->translation));
  DR_TRY(load_placed_mesh(c, key, path, body->scale, body->rotation, body->translation, &m));
  mesh_bounds(&m, body->mesh_lo, body->mesh_hi);
  body->volume = fabs(mesh_volume(&m));
  int rc = check_bounds_inside(c, s, body, where, "file", "the mesh");
  if (!rc && !(body->volume > 0)) rc = fail(c, key, "the mesh encloses no volume (got %s; expected a closed triangle mesh)", path);
  static const double zero[3] = {0, 0, 0};
  if (!rc) rc = build_levelset(c, s, &s->body_levelsets, &m, zero, LS_BAND * s->dx, NULL, NULL, key, &body->levelset);
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
      clean(g, sizeof g, pat, 80);
      return fail(c, key, "not a file pattern (got \"%s\"; expected one integer conversion such as %%04d, and %%%% for a "
                  "literal %%)", g);
    }
    ++conv;
    p = q;
  }
  if (conv != 1) {
    clean(g, sizeof g, pat, 80);
    return fail(c, key, "not a file pattern (got \"%s\" with %d integer conversions; expected exactly one, e.g. "
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
static int parse_mesh_collider(const ctx *c, const cJSON *col, const char *where, scene *s, scene_collider *sc) {
  char key[KEY_LEN], pkey[KEY_LEN], path[4096], pattern[4096], a[32];
  const char *file = NULL, *files = NULL;
  int rotated;
  double first = 0, count = 0;
  DR_TRY(get_string(c, col, where, "file", 0, NULL, "the path of an OBJ file (relative to the scene file)", &file));
  DR_TRY(get_string(c, col, where, "files", 0, NULL, "a pattern of OBJ file names such as \"crawler_%04d.obj\"", &files));
  if (file && files) {
    join(key, where, "files");
    return fail(c, key, "given with file (expected either file, one mesh, or files, a sequence)");
  }
  if (!file && !files) {
    join(key, where, "file");
    return fail(c, key, "missing required key (expected file, the path of an OBJ file, or files with fps for a "
                "sequence)");
  }
  join(pkey, where, files ? "files" : "file");
  if (files) {
    DR_TRY(check_pattern(c, pkey, files));
    DR_TRY(resolve_path(c, s, pkey, files, pattern, sizeof pattern));
    DR_TRY(get_real(c, col, where, "fps", 1, 0, (range){0, INFINITY, 1, 0, "frames per second"}, &sc->fps));
    DR_TRY(get_int(c, col, where, "first", 0, 0, 0, 1e9, &first));
    DR_TRY(get_int(c, col, where, "count", 0, 0, 2, MAX_MESH_FRAMES, &count));
    if (count == 0) { /* every file from first on, up to the first one missing */
      for (int k = 0; k < MAX_MESH_FRAMES; ++k) {
        snprintf(path, sizeof path, pattern, (int)first + k);
        if (!file_exists(path)) break;
        count = k + 1;
      }
      if (count < 2) {
        snprintf(path, sizeof path, pattern, (int)first + (int)count);
        return fail(c, pkey, "a sequence needs at least 2 files (found %d; %s cannot be read; expected files numbered "
                    "from first = %s)", (int)count, path, fmt_num(a, first));
      }
    }
  } else {
    const char *bad[] = {"fps", "first", "count"};
    for (int i = 0; i < 3; ++i)
      if (cJSON_GetObjectItemCaseSensitive(col, bad[i])) {
        join(key, where, bad[i]);
        return fail(c, key, "allowed only with files, a sequence (got file, one mesh)");
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
      rc = fail(c, pkey, "%s has %d vertices, the sequence's first file %d (expected the same vertices in every file: "
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
      rc = build_levelset(c, s, &s->collider_levelsets, &ms[k], sc->mesh_center, band, vout, vin, pkey, &idx);
      if (k == 0) sc->levelset = idx;
    }
  }
  free(vel);
  for (int k = 0; k < n; ++k) mesh_destroy(&ms[k]);
  free(ms);
  return rc;
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
  DR_TRY(need_object(c, e, ew, "with keys mode, start, end, rate or volume_rate, max_particles"));
  DR_TRY(check_keys(c, e, ew, EMIT_KEYS, 6, NULL, 0, NULL));
  int mode = 0;
  DR_TRY(get_enum(c, e, ew, "mode", 0, EMIT_MODES, 2, &mode));
  em->mode = mode == 0 ? EMIT_RATE : EMIT_RESAMPLE;
  DR_TRY(get_real(c, e, ew, "start", 0, 0, (range){0, INFINITY, 0, 0, "s"}, &em->start));
  DR_TRY(get_real(c, e, ew, "end", 0, INFINITY, (range){0, INFINITY, 0, 0, "s"}, &em->end));
  if (!(em->end > em->start)) {
    join(key, ew, "end");
    return fail(c, key, "not after start (got end %s <= start %s; expected end > start)", fmt_num(x, em->end),
                fmt_num(y, em->start));
  }
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(e, "rate"), *v = cJSON_GetObjectItemCaseSensitive(e, "volume_rate");
  if (em->mode == EMIT_RESAMPLE && (r || v)) {
    join(key, ew, r ? "rate" : "volume_rate");
    return fail(c, key, "not allowed with mode \"resample\" (a resampling source refills its shape every frame; "
                "expected no rate or volume_rate, or mode \"rate\")");
  }
  if (em->mode == EMIT_RATE && r && v) {
    join(key, ew, "volume_rate");
    return fail(c, key, "given together with rate (expected exactly one of rate (particles/s) and volume_rate "
                "(m^3/s))");
  }
  if (em->mode == EMIT_RATE && !r && !v)
    return fail(c, ew, "missing rate or volume_rate (expected exactly one of rate (particles/s) and volume_rate "
                "(m^3/s), or mode \"resample\")");
  const range positive_rate = {0, INFINITY, 1, 0, "particles/s"}, positive_vrate = {0, INFINITY, 1, 0, "m^3/s"};
  if (r) DR_TRY(get_real(c, e, ew, "rate", 1, 0, positive_rate, &em->rate));
  if (v) {
    DR_TRY(get_real(c, e, ew, "volume_rate", 1, 0, positive_vrate, &em->volume_rate));
    em->rate = em->volume_rate / (s->dx * s->dx * s->dx / body->ppc);
  }
  double cap = 0;
  DR_TRY(get_int(c, e, ew, "max_particles", 0, (double)EMIT_MAX_PARTICLES, 1, (double)EMIT_MAX_PARTICLES, &cap));
  em->max_particles = (uint64_t)cap;
  return 0;
}

static int parse_body(const ctx *c, const cJSON *b, int index, scene *s, scene_body *body) {
  static const double zero[3] = {0, 0, 0};
  char where[32], variant[40];
  double seed;
  snprintf(where, sizeof where, "bodies[%d]", index);
  DR_TRY(need_object(c, b, where, "with keys shape, material, ..."));
  DR_TRY(check_keys(c, b, where, NULL, 0, NULL, 0, NULL)); /* duplicates, before reading shape */
  DR_TRY(get_enum(c, b, where, "shape", -1, SHAPE_NAMES, 4, &body->shape));
  snprintf(variant, sizeof variant, "shape '%s'", SHAPE_NAMES[body->shape]);
  body->rotation[0] = 1;
  if (body->shape == SHAPE_BOX) {
    DR_TRY(check_keys(c, b, where, BOX_KEYS, 9, ALL_BODY_KEYS, 16, variant));
    DR_TRY(parse_box(c, b, where, s, body));
  } else if (body->shape == SHAPE_SPHERE) {
    DR_TRY(check_keys(c, b, where, SPHERE_KEYS, 8, ALL_BODY_KEYS, 16, variant));
    DR_TRY(parse_sphere(c, b, where, s, body));
  } else if (body->shape == SHAPE_MESH) {
    DR_TRY(check_keys(c, b, where, MESH_KEYS, 10, ALL_BODY_KEYS, 16, variant));
    DR_TRY(parse_mesh_body(c, b, where, s, body));
  } else {
    DR_TRY(check_keys(c, b, where, CYLINDER_KEYS, 10, ALL_BODY_KEYS, 16, variant));
    DR_TRY(parse_cylinder(c, b, where, s, body));
  }
  DR_TRY(parse_body_material(c, b, where, s, body));
  DR_TRY(get_int32(c, b, where, "ppc", 0, 8, 1, MAX_PPC, &body->ppc));
  DR_TRY(get_vec3(c, b, where, "velocity", 0, zero, "m/s", body->velocity));
  DR_TRY(get_int(c, b, where, "seed", 0, index, 0, MAX_SEED, &seed));
  body->seed = (uint64_t)seed;
  return parse_emit(c, b, where, s, body);
}

static int parse_bodies(const ctx *c, const cJSON *root, scene *s) {
  const cJSON *bs;
  char g[GOT_LEN];
  DR_TRY(get_section(c, root, "bodies", 1, "a list of bodies", &bs));
  if (!cJSON_IsArray(bs))
    return fail(c, "bodies", "wrong type (got %s; expected a list of bodies [{\"shape\": ...}, "
                "...])", got(g, bs));
  int n = cJSON_GetArraySize(bs);
  if (n == 0)
    return fail(c, "bodies", "empty (got []; expected at least one body, e.g. {\"shape\": "
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

/* Wall types, and the face names of the per-face form (enum boundary_face order). */
static const char *const WALL_TYPES[] = {"sticky", "slip", "separate"};
static const char *const FACE_NAMES[] = {"x-", "x+", "y-", "y+", "z-", "z+"};

/* obj.type and obj.friction of a wall (a face, the boundary's default, a collider): type
 * defaults to def_type, friction (allowed only with "separate") to def_friction there. */
static int parse_wall(const ctx *c, const cJSON *obj, const char *where, int def_type,
                      double def_friction, int *type, double *friction) {
  char key[KEY_LEN];
  DR_TRY(get_enum(c, obj, where, "type", def_type, WALL_TYPES, 3, type));
  if (cJSON_GetObjectItemCaseSensitive(obj, "friction") && *type != BOUNDARY_SEPARATE) {
    join(key, where, "friction");
    return fail(c, key, "allowed only with type \"separate\" (got type \"%s\"; expected no "
                "friction, or type \"separate\")", WALL_TYPES[*type]);
  }
  return get_real(c, obj, where, "friction", 0, *type == BOUNDARY_SEPARATE ? def_friction : 0,
                  (range){0, INFINITY, 0, 0, ""}, friction);
}

/* boundary: {type, friction} for every face, or per face {"x-": {type, friction}, ...}; the two
 * mix: faces not listed take the top-level type and friction (default sticky). */
static int parse_boundary(const ctx *c, const cJSON *root, scene *s) {
  static const char *const keys[] = {"type", "friction", "x-", "x+", "y-", "y+", "z-", "z+"};
  static const char *const face_keys[] = {"type", "friction"};
  const cJSON *b;
  int type = BOUNDARY_STICKY;
  double friction = 0;
  DR_TRY(get_section(c, root, "boundary", 0, "", &b));
  if (b) {
    DR_TRY(need_object(c, b, "boundary", "with keys type, friction, or faces x-, x+, y-, y+, z-, z+"));
    DR_TRY(check_keys(c, b, "boundary", keys, 8, NULL, 0, NULL));
    DR_TRY(parse_wall(c, b, "boundary", BOUNDARY_STICKY, 0, &type, &friction));
  }
  for (int f = 0; f < DR_FACES; ++f) {
    s->faces[f].type = type;
    s->faces[f].friction = friction;
    const cJSON *o = b ? cJSON_GetObjectItemCaseSensitive(b, FACE_NAMES[f]) : NULL;
    if (!o) continue;
    char where[KEY_LEN];
    join(where, "boundary", FACE_NAMES[f]);
    DR_TRY(need_object(c, o, where, "with keys type, friction"));
    DR_TRY(check_keys(c, o, where, face_keys, 2, NULL, 0, NULL));
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
  join(mkey, where, "motion");
  if (!cJSON_IsArray(m))
    return fail(c, mkey, "wrong type (got %s; expected a list of keyframes [{\"time\": s, "
                "\"translation\": [x, y, z], \"rotation\": {\"axis\": [x, y, z], \"angle\": "
                "degrees}}, ...])", got(g, m));
  int n = cJSON_GetArraySize(m);
  if (n == 0)
    return fail(c, mkey, "empty (got []; expected at least one keyframe, or no motion for a static "
                "collider)");
  DR_ALLOC0(sc->keys, n, "collider keyframes");
  sc->n_keys = n;
  int i = 0;
  for (const cJSON *k = m->child; k; k = k->next, ++i) {
    char kw[KEY_LEN + 16];
    int rotated;
    scene_collider_key *K = &sc->keys[i];
    snprintf(kw, sizeof kw, "%s[%d]", mkey, i);
    DR_TRY(need_object(c, k, kw, "with keys time, translation, rotation"));
    DR_TRY(check_keys(c, k, kw, keys, 3, NULL, 0, NULL));
    DR_TRY(get_real(c, k, kw, "time", 1, 0, (range){-INFINITY, INFINITY, 0, 0, "s"}, &K->time));
    if (i > 0 && !(K->time > K[-1].time)) {
      char key[KEY_LEN];
      join(key, kw, "time");
      return fail(c, key, "not after the previous keyframe (got %s; expected keyframe times that "
                  "increase, > %s s)", fmt_num(a, K->time), fmt_num(b, K[-1].time));
    }
    DR_TRY(get_vec3(c, k, kw, "translation", 0, zero, "m", K->translation));
    DR_TRY(get_rotation(c, k, kw, &rotated, K->rotation, &K->angle));
    if (i > 0) {
      const double *p = K[-1].rotation, *q = K->rotation;
      if (p[0] * q[0] + p[1] * q[1] + p[2] * q[2] + p[3] * q[3] < -1e-9) {
        char key[KEY_LEN];
        join(key, kw, "rotation");
        return fail(c, key, "turns by more than 180 degrees from the previous keyframe (got angle "
                    "%s after %s; expected at most 180 degrees between keyframes: add keyframes "
                    "in between)", fmt_num(a, K->angle), fmt_num(b, K[-1].angle));
      }
    }
  }
  return 0;
}

static int parse_collider(const ctx *c, const cJSON *col, int index, scene *s, scene_collider *sc) {
  char where[32], variant[40], key[KEY_LEN], x[32], y[32];
  snprintf(where, sizeof where, "colliders[%d]", index);
  DR_TRY(need_object(c, col, where, "with keys shape, type, ..."));
  DR_TRY(check_keys(c, col, where, NULL, 0, NULL, 0, NULL)); /* duplicates, before reading shape */
  DR_TRY(get_enum(c, col, where, "shape", -1, COLLIDER_SHAPES, 5, &sc->shape));
  snprintf(variant, sizeof variant, "shape '%s'", COLLIDER_SHAPES[sc->shape]);
  const range positive = {0, INFINITY, 1, 0, "m"};
  switch (sc->shape) {
  case SDF_PLANE:
    DR_TRY(check_keys(c, col, where, PLANE_COLLIDER_KEYS, 6, ALL_COLLIDER_KEYS, 20, variant));
    DR_TRY(get_vec3(c, col, where, "point", 1, NULL, "m", sc->point));
    DR_TRY(get_direction(c, col, where, "normal", sc->normal));
    break;
  case SDF_BOX:
    DR_TRY(check_keys(c, col, where, BOX_COLLIDER_KEYS, 6, ALL_COLLIDER_KEYS, 20, variant));
    DR_TRY(get_vec3(c, col, where, "min", 1, NULL, "m", sc->min));
    DR_TRY(get_vec3(c, col, where, "max", 1, NULL, "m", sc->max));
    for (int i = 0; i < 3; ++i)
      if (!(sc->max[i] > sc->min[i])) {
        join(key, where, "max");
        return fail(c, key, "not above min along %c (got max.%c %s <= min.%c %s; expected max > "
                    "min on every axis)", AXIS[i], AXIS[i], fmt_num(x, sc->max[i]), AXIS[i],
                    fmt_num(y, sc->min[i]));
      }
    break;
  case SDF_SPHERE:
    DR_TRY(check_keys(c, col, where, SPHERE_COLLIDER_KEYS, 6, ALL_COLLIDER_KEYS, 20, variant));
    DR_TRY(get_vec3(c, col, where, "center", 1, NULL, "m", sc->center));
    DR_TRY(get_real(c, col, where, "radius", 1, 0, positive, &sc->radius));
    break;
  case SDF_MESH:
    DR_TRY(check_keys(c, col, where, MESH_COLLIDER_KEYS, 12, ALL_COLLIDER_KEYS, 20, variant));
    DR_TRY(parse_mesh_collider(c, col, where, s, sc));
    break;
  default:
    DR_TRY(check_keys(c, col, where, CYLINDER_COLLIDER_KEYS, 8, ALL_COLLIDER_KEYS, 20, variant));
    DR_TRY(get_vec3(c, col, where, "center", 1, NULL, "m", sc->center));
    DR_TRY(get_direction(c, col, where, "axis", sc->axis));
    DR_TRY(get_real(c, col, where, "radius", 1, 0, positive, &sc->radius));
    DR_TRY(get_real(c, col, where, "height", 1, 0, positive, &sc->height));
    break;
  }
  DR_TRY(parse_wall(c, col, where, BOUNDARY_STICKY, 0, &sc->type, &sc->friction));
  return parse_motion(c, col, where, sc);
}

/* colliders: an optional list of solid shapes that act on the grid like walls. */
static int parse_colliders(const ctx *c, const cJSON *root, scene *s) {
  const cJSON *cs;
  char g[GOT_LEN];
  DR_TRY(get_section(c, root, "colliders", 0, "", &cs));
  if (!cs) return 0;
  if (!cJSON_IsArray(cs))
    return fail(c, "colliders", "wrong type (got %s; expected a list of colliders [{\"shape\": "
                "...}, ...])", got(g, cs));
  int n = cJSON_GetArraySize(cs);
  if (n > MAX_COLLIDERS)
    return fail(c, "colliders", "too many (got %d; expected at most %d)", n, MAX_COLLIDERS);
  if (n == 0) return 0;
  DR_ALLOC0(s->colliders, n, "scene colliders");
  s->n_colliders = n;
  int i = 0;
  for (const cJSON *col = cs->child; col; col = col->next, ++i)
    DR_TRY(parse_collider(c, col, i, s, &s->colliders[i]));
  return 0;
}

static int parse_output(const ctx *c, const cJSON *root, scene *s) {
  static const char *const keys[] = {"dir",     "every",         "checkpoint_every", "checkpoint_keep",
                                     "preview", "preview_color", "preview_size",     "preview_view"};
  static const char *const colors[] = {"material", "owner"};
  static const char *const views[] = {"front", "side", "top"};
  const cJSON *o;
  const char *dir = "frames";
  char g[GOT_LEN];
  s->output_every = 1;
  s->checkpoint_every = 0;
  s->checkpoint_keep = 2;
  s->preview = 0;
  s->preview_color = 0; /* material */
  s->preview_size = 512;
  s->preview_view = 0;  /* front */
  DR_TRY(get_section(c, root, "output", 0, "", &o));
  if (o) {
    DR_TRY(need_object(c, o, "output", "with keys dir, every, checkpoint_every, checkpoint_keep, preview, "
                       "preview_color, preview_size, preview_view"));
    DR_TRY(check_keys(c, o, "output", keys, 8, NULL, 0, NULL));
    DR_TRY(get_string(c, o, "output", "dir", 0, dir, "a non-empty string, a directory", &dir));
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "dir");
    if (!*dir)
      return fail(c, "output.dir", "empty (got \"\"; expected a non-empty directory name)");
    if (strlen(dir) >= sizeof s->output_dir)
      return fail(c, "output.dir", "too long (got %zu bytes; expected fewer than %zu)",
                  strlen(dir), sizeof s->output_dir);
    if (has_control_char(dir))
      return fail(c, "output.dir", "contains a control character (got %s; expected a directory "
                  "name of printable characters)", got(g, v));
    DR_TRY(get_int32(c, o, "output", "every", 0, 1, 1, INT_MAX, &s->output_every));
    if (s->output_every > s->frames)
      return fail(c, "output.every", "larger than time.frames (got %d; expected at most "
                  "time.frames = %d)", s->output_every, s->frames);
    /* Not bounded by time.frames: --frames may extend a run that resumes from a checkpoint. */
    DR_TRY(get_int32(c, o, "output", "checkpoint_every", 0, 0, 0, MAX_CHECKPOINT_EVERY, &s->checkpoint_every));
    DR_TRY(get_int32(c, o, "output", "checkpoint_keep", 0, 2, 1, MAX_CHECKPOINT_KEEP, &s->checkpoint_keep));
    DR_TRY(get_bool(c, o, "output", "preview", 0, &s->preview));
#ifndef DRIFT_HAVE_PNG
    if (s->preview)
      return fail(c, "output.preview", "not available: this build of drift has no libpng (install libpng-dev, "
                  "or tools/pack-device-deps.sh's png folder, and rebuild; or set it to false)");
#endif
    DR_TRY(get_enum(c, o, "output", "preview_color", 0, colors, 2, &s->preview_color));
    DR_TRY(get_int32(c, o, "output", "preview_size", 0, 512, 16, MAX_PREVIEW_SIZE, &s->preview_size));
    DR_TRY(get_enum(c, o, "output", "preview_view", 0, views, 3, &s->preview_view));
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

static int parse_parallel(const ctx *c, const cJSON *root, scene *s) {
  static const char *const keys[] = {"backend",       "gpus_per_rank",  "g2p2g_below",  "balance_threshold",
                                     "balance_by",    "balance_cost",   "deterministic", "island_barrier",
                                     "island_reduce"};
  static const char *const balance_by[] = {"particles", "time"};
  static const char *const backends[] = {"auto", "cpu", "cuda"};
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
  DR_TRY(get_section(c, root, "parallel", 0, "", &p));
  if (!p) return 0;
  DR_TRY(need_object(c, p, "parallel", "with keys backend, gpus_per_rank, g2p2g_below, balance_threshold, balance_by, "
                                       "balance_cost, deterministic, island_barrier, island_reduce"));
  DR_TRY(check_keys(c, p, "parallel", keys, 9, NULL, 0, NULL));
  DR_TRY(get_bool(c, p, "parallel", "balance_cost", 1, &s->balance_cost));
  DR_TRY(get_bool(c, p, "parallel", "deterministic", 0, &s->deterministic));
  DR_TRY(get_enum(c, p, "parallel", "balance_by", BALANCE_PARTICLES, balance_by, 2, &s->balance_by));
  DR_TRY(get_real(c, p, "parallel", "balance_threshold", 0, 0.2, (range){0, INFINITY, 0, 0, ""},
                  &s->balance_threshold));
  DR_TRY(get_enum(c, p, "parallel", "backend", BACKEND_AUTO, backends, 3, &s->backend));
  DR_TRY(get_enum(c, p, "parallel", "island_barrier", ISLAND_BARRIER_SPIN, scene_island_barrier_names, 2,
                  &s->island_barrier));
  DR_TRY(get_enum(c, p, "parallel", "island_reduce", ISLAND_REDUCE_DOUBLE_BUFFER, scene_island_reduce_names, 2,
                  &s->island_reduce));
  DR_TRY(get_int32(c, p, "parallel", "g2p2g_below", 0, 100000, 0, INT_MAX, &s->g2p2g_below));
  return get_int32(c, p, "parallel", "gpus_per_rank", 0, 0, 0, 8, &s->gpus_per_rank); /* an island has at most 8 GPUs */
}

static int parse_scene(const ctx *c, const cJSON *root, scene *s) {
  static const char *const keys[] = {"description", "domain",   "time",      "gravity",
                                     "materials",   "bodies",   "boundary",  "colliders",
                                     "output",      "parallel"};
  char g[GOT_LEN], names[300];
  const char *desc = NULL;
  list_names(names, sizeof names, keys, 10);
  if (!cJSON_IsObject(root))
    return fail(c, "top level", "not an object (got %s; expected an object with keys %s)",
                got(g, root), names);
  DR_TRY(check_keys(c, root, "", keys, 10, NULL, 0, NULL));
  DR_TRY(get_string(c, root, "", "description", 0, "", "a string", &desc));
  DR_TRY(parse_domain(c, root, s));
  DR_TRY(parse_time(c, root, s));
  DR_TRY(parse_gravity(c, root, s));
  DR_TRY(parse_materials(c, root, s));
  DR_TRY(parse_bodies(c, root, s));
  DR_TRY(parse_boundary(c, root, s));
  DR_TRY(parse_colliders(c, root, s));
  DR_TRY(parse_output(c, root, s));
  DR_TRY(parse_parallel(c, root, s));
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The file. */

/* Reads the whole file, NUL-terminated, into *buf. */
static int read_file(const ctx *c, const char *path, char **buf, size_t *len) {
  *buf = NULL;
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return fail(c, NULL, "cannot read: %s", strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  int err = 0;
  while (b) {
    if (n + 1 >= cap) {
      if (cap >= (size_t)MAX_FILE_BYTES) {
        free(b);
        fclose(f);
        return fail(c, NULL, "cannot read: larger than %ld MiB, too large for a scene file",
                    MAX_FILE_BYTES >> 20);
      }
      char *nb = realloc(b, cap * 2);
      if (!nb) {
        free(b);
        b = NULL;
        break;
      }
      b = nb;
      cap *= 2;
    }
    size_t got_now = fread(b + n, 1, cap - 1 - n, f);
    n += got_now;
    if (got_now == 0) {
      if (ferror(f)) err = errno ? errno : EIO;
      break;
    }
  }
  fclose(f);
  if (!b) return dr_fail(DR_ENOMEM, "out of host memory reading the scene file %s", c->path);
  if (err) {
    free(b);
    return fail(c, NULL, "cannot read: %s", strerror(err));
  }
  b[n] = 0;
  *buf = b;
  *len = n;
  return 0;
}

/* "line L, column C" of byte offset pos (columns count characters, not UTF-8 bytes). */
static void position(const char *buf, size_t pos, long *line, long *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < pos; ++i) {
    if (buf[i] == '\n') {
      ++*line;
      *col = 1;
    } else if (((unsigned char)buf[i] & 0xC0) != 0x80) {
      ++*col;
    }
  }
}

static int parse_json(const ctx *c, const char *buf, size_t len, cJSON **root) {
  long line, col;
  const char *nul = memchr(buf, 0, len);
  if (nul) {
    position(buf, (size_t)(nul - buf), &line, &col);
    return fail(c, NULL, "line %ld, column %ld: not valid JSON (got a NUL byte; expected text)",
                line, col);
  }
  /* the length includes the terminating NUL: cJSON then rejects trailing garbage */
  *root = cJSON_ParseWithLengthOpts(buf, len + 1, NULL, 1);
  if (*root) return 0;
  const char *at = cJSON_GetErrorPtr();
  size_t pos = (at && at >= buf && at <= buf + len) ? (size_t)(at - buf) : len;
  position(buf, pos, &line, &col);
  if (pos >= len)
    return fail(c, NULL, "line %ld, column %ld: not valid JSON (got the end of the file; expected "
                "more: is a bracket, brace or quote left open?)", line, col);
  char near[64], shown[GOT_LEN];
  size_t k = 0;
  while (k < 24 && pos + k < len && buf[pos + k] != '\n' && buf[pos + k] != '\r') ++k;
  memcpy(near, buf + pos, k);
  near[k] = 0;
  clean(shown, sizeof shown, near, 60);
  int more = pos + k < len && buf[pos + k] != '\n' && buf[pos + k] != '\r';
  if (k == 0)
    return fail(c, NULL, "line %ld, column %ld: not valid JSON (got the end of the line; expected a "
                "JSON value, a comma or a closing bracket here)", line, col);
  return fail(c, NULL, "line %ld, column %ld: not valid JSON (got \"%s%s\"; expected a JSON value, "
              "a comma or a closing bracket here)", line, col, shown, more ? "..." : "");
}

/* Parses and validates buf (len bytes, NUL-terminated at len) for scene_load and scene_parse.
 * Takes buf over: on success *out keeps it as the scene's text, on failure it is freed. */
static int scene_take(const ctx *c, char *buf, size_t len, scene *out) {
  cJSON *root = NULL;
  int rc = parse_json(c, buf, len, &root);
  if (!rc) rc = parse_scene(c, root, out);
  cJSON_Delete(root);
  if (rc) {
    free(buf);
    scene_destroy(out);
    memset(out, 0, sizeof *out);
    return rc;
  }
  /* kept for checkpoints: the exact bytes and their hash */
  out->text = buf;
  out->text_len = len;
  out->hash = scene_hash_bytes(buf, len);
  return 0;
}

/* out->path and the context's cleaned name, for messages. */
static void scene_name(ctx *c, const char *name, scene *out) {
  memset(out, 0, sizeof *out);
  clean(c->path, sizeof c->path, name ? name : "(null)", 500);
  snprintf(out->path, sizeof out->path, "%s", name ? name : "");
}

int scene_load(const char *path, scene *out) {
  ctx c;
  char *buf;
  size_t len;
  scene_name(&c, path, out);
  if (!path) return fail(&c, NULL, "cannot read: no file name given");
  DR_TRY(read_file(&c, path, &buf, &len));
  return scene_take(&c, buf, len, out);
}

int scene_parse(const char *name, const char *bytes, size_t len, scene *out) {
  ctx c;
  scene_name(&c, name, out);
  if (!bytes && len > 0) return fail(&c, NULL, "cannot read: no bytes given");
  if (len >= (size_t)MAX_FILE_BYTES)
    return fail(&c, NULL, "cannot read: larger than %ld MiB, too large for a scene file",
                MAX_FILE_BYTES >> 20);
  char *buf = malloc(len + 1);
  if (!buf) return dr_fail(DR_ENOMEM, "out of host memory reading the scene file %s", c.path);
  if (len > 0) memcpy(buf, bytes, len);
  buf[len] = 0;
  return scene_take(&c, buf, len, out);
}

uint64_t scene_hash_bytes(const void *bytes, size_t len) {
  const unsigned char *p = bytes;
  uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a, 64 bits */
  for (size_t i = 0; i < len; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

void scene_destroy(scene *s) {
  if (!s) return;
  free(s->materials);
  free(s->bodies);
  for (int i = 0; i < s->n_colliders; ++i) free(s->colliders[i].keys);
  free(s->colliders);
  levelset_pool_free(s->collider_levelsets);
  levelset_pool_free(s->body_levelsets);
  free(s->collider_levelsets);
  free(s->body_levelsets);
  s->collider_levelsets = s->body_levelsets = NULL;
  free(s->text);
  s->materials = NULL;
  s->bodies = NULL;
  s->colliders = NULL;
  s->text = NULL;
  s->text_len = 0;
  s->n_materials = s->n_bodies = s->n_colliders = 0;
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

double scene_initial_dt(const scene *s) {
  double frame = 1.0 / s->fps;
  if (s->dt > 0) {
    double n = ceil(frame / s->dt - 1e-9);
    if (n < 1) n = 1;
    return frame / n;
  }
  double vmax = 0;
  for (int i = 0; i < s->n_bodies; ++i) {
    const double *v = s->bodies[i].velocity;
    double speed = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    if (speed > vmax) vmax = speed;
  }
  double c = scene_wave_speed(s) + vmax;
  if (!(c > 0)) return frame;
  double dt = s->cfl * s->dx / c;
  return dt < frame ? dt : frame;
}

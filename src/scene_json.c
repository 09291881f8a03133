/* scene_json.c - the scene loader's checked reads of JSON values and its messages, and the scan
 * of the JSON text for what cJSON would let through (sj_scan_text: strings are valid UTF-8 with no
 * raw control character and no \u0000, integers read back exactly, no comment, no trailing comma,
 * at most SJ_MAX_DEPTH levels) before cJSON reads it.
 *
 * Every getter reads one key of one object, checks its type and range, and on the first problem
 * records one line "FILE: KEY: what is wrong (got VALUE; expected WHAT)" through sj_fail, which
 * returns DR_EINPUT for the caller to pass up unchanged. Invariants the rest of the loader relies
 * on: everything a user wrote is escaped (sj_clean: no control byte, no invalid UTF-8 reaches a
 * message) and clipped, so a message is always one line of bounded length; key paths are built
 * with sj_join into KEY_LEN bytes; a value in "(got ...)" is formatted by sj_got into GOT_LEN
 * bytes; an absent optional key yields its default and no error. Real numbers accepted here are
 * finite and representable in single precision (the kernels compute in float). */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "scene_parse.h"

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
void sj_clean(char *dst, size_t cap, const char *src, size_t max) {
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
const char *sj_fmt_num(char buf[32], double v) {
  if (isinf(v)) return v > 0 ? "inf" : "-inf";
  if (isnan(v)) return "nan";
  snprintf(buf, 32, "%.15g", v);
  if (strtod(buf, NULL) != v) snprintf(buf, 32, "%.17g", v);
  return buf;
}

/* A derived value (a sum, a ratio) in messages: 12 significant digits hide rounding noise. */
const char *sj_fmt_derived(char buf[32], double v) {
  snprintf(buf, 32, "%.12g", v);
  return buf;
}

/* Describes a JSON value for "(got ...)". */
const char *sj_got(char buf[GOT_LEN], const cJSON *v) {
  char num[32];
  if (!v) {
    snprintf(buf, GOT_LEN, "nothing");
  } else if (cJSON_IsNumber(v)) {
    if (!isfinite(v->valuedouble))
      snprintf(buf, GOT_LEN, "a number beyond double range, read as %s", sj_fmt_num(num, v->valuedouble));
    else
      snprintf(buf, GOT_LEN, "%s", sj_fmt_num(num, v->valuedouble));
  } else if (cJSON_IsTrue(v)) {
    snprintf(buf, GOT_LEN, "true");
  } else if (cJSON_IsFalse(v)) {
    snprintf(buf, GOT_LEN, "false");
  } else if (cJSON_IsNull(v)) {
    snprintf(buf, GOT_LEN, "null");
  } else if (cJSON_IsString(v)) {
    char s[GOT_LEN - 3];
    sj_clean(s, sizeof s, v->valuestring, 60);
    snprintf(buf, GOT_LEN, "\"%s\"", s);
  } else {
    char *text = cJSON_PrintUnformatted(v);
    if (text) {
      sj_clean(buf, GOT_LEN, text, 60);
      cJSON_free(text);
    } else {
      snprintf(buf, GOT_LEN, cJSON_IsArray(v) ? "an array" : "an object");
    }
  }
  return buf;
}

/* Records "PATH: KEY: what" (or "PATH: what" without a key). Returns DR_EINPUT. */
int sj_fail(const ctx *c, const char *key, const char *fmt, ...) {
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
void sj_join(char key[KEY_LEN], const char *where, const char *name) {
  char n[200];
  size_t k = 0;
  sj_clean(n, sizeof n, name, 80);
  for (const char *p = where ? where : ""; *p && k + 1 < KEY_LEN; ++p) key[k++] = *p;
  if (k > 0 && k + 1 < KEY_LEN) key[k++] = '.';
  for (const char *p = n; *p && k + 1 < KEY_LEN; ++p) key[k++] = *p;
  key[k] = 0;
}

/* Joins a list of names into "a, b, c". */
void sj_list_names(char *buf, size_t cap, const char *const *names, int n) {
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
 * The text before cJSON reads it: what cJSON lets through or reports at the wrong place. */

/* Length of the UTF-8 sequence at p (n bytes left) under RFC 3629: no overlong form, no
 * surrogate, nothing above U+10FFFF; 0 when p does not start one. */
static size_t utf8_strict_len(const unsigned char *p, size_t n) {
  const size_t k = utf8_len(p);
  if (k == 0 || k > n) return 0;
  for (size_t i = 1; i < k; ++i) /* utf8_len stops at a NUL, which is no continuation byte */
    if ((p[i] & 0xC0) != 0x80) return 0;
  if (k == 3 && ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xED && p[1] >= 0xA0))) return 0;
  if (k == 4 && ((p[0] == 0xF0 && p[1] < 0x90) || (p[0] == 0xF4 && p[1] >= 0x90))) return 0;
  return k;
}

/* Whether an integer written without a fraction or exponent (digits t[0..n), a leading '-'
 * allowed) reads back exactly as a double. */
static int integer_exact(const char *t, size_t n) {
  char tok[400], back[400];
  if (n >= sizeof tok) return 0;
  memcpy(tok, t, n);
  tok[n] = 0;
  const char *d = tok[0] == '-' ? tok + 1 : tok;
  while (d[0] == '0' && d[1]) ++d;
  if (strlen(d) <= 15) return 1; /* 15 digits always fit in a double's 53 bits */
  const double v = fabs(strtod(tok, NULL));
  if (!isfinite(v)) return 0;
  snprintf(back, sizeof back, "%.0f", v);
  return strcmp(back, d) == 0;
}

int sj_scan_text(const char *buf, size_t len, size_t *at, char *what, size_t cap) {
  const unsigned char *b = (const unsigned char *)buf;
  int depth = 0;
  for (size_t i = 0; i < len;) {
    const unsigned char ch = b[i];
    if (ch == '"') { /* a string: to its closing quote */
      size_t j = i + 1;
      for (;;) {
        if (j >= len) return 0; /* left open: cJSON says so */
        if (b[j] == '"') break;
        *at = j;
        if (b[j] < 0x20) {
          snprintf(what, cap, "a raw control character in a string (got byte \\x%02x; expected it escaped, e.g. "
                   "\\n, or \\u%04x)", b[j], b[j]);
          return 1;
        }
        if (b[j] == '\\') {
          if (j + 5 < len && b[j + 1] == 'u' && !memcmp(buf + j + 2, "0000", 4)) {
            snprintf(what, cap, "\\u0000 in a string (got a NUL character; expected none: it would cut the string)");
            return 1;
          }
          j += 2;
          continue;
        }
        if (b[j] >= 0x80) {
          const size_t k = utf8_strict_len(b + j, len - j);
          if (k == 0) {
            snprintf(what, cap, "not valid UTF-8 in a string (got byte \\x%02x; expected text in UTF-8)", b[j]);
            return 1;
          }
          j += k;
          continue;
        }
        ++j;
      }
      i = j + 1;
      continue;
    }
    *at = i;
    if (ch == '/') {
      snprintf(what, cap, "comments are not JSON (got \"%s\"; expected none)",
               i + 1 < len && b[i + 1] == '*' ? "/*" : i + 1 < len && b[i + 1] == '/' ? "//" : "/");
      return 1;
    }
    if (ch == ',') {
      size_t j = i + 1;
      while (j < len && (b[j] == ' ' || b[j] == '\t' || b[j] == '\n' || b[j] == '\r')) ++j;
      if (j < len && (b[j] == '}' || b[j] == ']')) {
        snprintf(what, cap, "trailing comma (got \",\" before \"%c\"; expected another item after it, or no comma)",
                 b[j]);
        return 1;
      }
    }
    if ((ch == '[' || ch == '{') && ++depth > SJ_MAX_DEPTH) {
      snprintf(what, cap, "nested deeper than %d levels (expected a scene's few levels of objects and arrays)",
               SJ_MAX_DEPTH);
      return 1;
    }
    if (ch == ']' || ch == '}') --depth;
    if (ch == '-' || (ch >= '0' && ch <= '9')) { /* a number: an integer must read back exactly */
      size_t j = i + 1;
      int integer = 1;
      while (j < len && (strchr("0123456789+-.eE", b[j]) && b[j])) integer &= !strchr(".eE", b[j++]);
      if (integer && !integer_exact(buf + i, j - i)) {
        char tok[48];
        snprintf(tok, sizeof tok, "%.*s%s", (int)(j - i < 40 ? j - i : 40), buf + i, j - i > 40 ? "..." : "");
        snprintf(what, cap, "an integer that a double does not hold exactly (got %s, read as %.17g; expected at "
                 "most 2^53 = 9007199254740992 in magnitude, or a number with a decimal point or an exponent)", tok,
                 strtod(buf + i, NULL));
        return 1;
      }
      i = j;
      continue;
    }
    ++i;
  }
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Generic checks of objects and values. */

/* Fails unless v is an object; `expect` says what the object should hold. */
int sj_need_object(const ctx *c, const cJSON *v, const char *key, const char *expect) {
  char g[GOT_LEN];
  if (cJSON_IsObject(v)) return 0;
  return sj_fail(c, key, "wrong type (got %s; expected an object%s%s)", sj_got(g, v), *expect ? " " : "",
                 expect);
}

/* Rejects duplicate keys in obj, and (when valid is given) keys not in valid. A key found in
 * `foreign` (keys that belong to another variant, e.g. another material model) is reported as
 * "not a key of <variant>". */
int sj_check_keys(const ctx *c, const cJSON *obj, const char *where, const char *const *valid,
                  int n_valid, const char *const *foreign, int n_foreign, const char *variant) {
  char key[KEY_LEN], names[400];
  for (const cJSON *it = obj->child; it; it = it->next) {
    const char *name = it->string ? it->string : "";
    int count = 1;
    for (const cJSON *o = it->next; o; o = o->next)
      if (o->string && strcmp(o->string, name) == 0) ++count;
    if (count > 1) {
      sj_join(key, where, name);
      return sj_fail(c, key, "duplicate key (given %d times; expected each key at most once)", count);
    }
    if (!valid || in_list(name, valid, n_valid)) continue;
    sj_join(key, where, name);
    sj_list_names(names, sizeof names, valid, n_valid);
    if (foreign && in_list(name, foreign, n_foreign))
      return sj_fail(c, key, "not a key of %s (expected one of: %s)", variant, names);
    const char *best = NULL;
    int best_d = 3;
    for (int i = 0; i < n_valid; ++i) {
      int d = edit_distance(name, valid[i]);
      if (d < best_d) best_d = d, best = valid[i];
    }
    if (best)
      return sj_fail(c, key, "unknown key (did you mean \"%s\"? expected one of: %s)", best, names);
    return sj_fail(c, key, "unknown key (expected one of: %s)", names);
  }
  return 0;
}


static void fmt_range(char *buf, size_t cap, const char *name, range r) {
  char a[32], b[32], unit[40] = "";
  if (r.unit && *r.unit) snprintf(unit, sizeof unit, " (%s)", r.unit);
  if (isfinite(r.lo) && isfinite(r.hi))
    snprintf(buf, cap, "%s %s %s %s %s%s", sj_fmt_num(a, r.lo), r.lo_open ? "<" : "<=", name,
             r.hi_open ? "<" : "<=", sj_fmt_num(b, r.hi), unit);
  else if (isfinite(r.lo))
    snprintf(buf, cap, "%s %s %s%s", name, r.lo_open ? ">" : ">=", sj_fmt_num(a, r.lo), unit);
  else if (isfinite(r.hi))
    snprintf(buf, cap, "%s %s %s%s", name, r.hi_open ? "<" : "<=", sj_fmt_num(b, r.hi), unit);
  else
    snprintf(buf, cap, "any number%s", unit);
}

/* Checks that v is a finite number that single precision can hold (the kernels compute in
 * float): 0 or a magnitude in [FLT_MIN, FLT_MAX]. want: the range, e.g. "dx > 0 (m)", or "". */
static int check_number(const ctx *c, const cJSON *v, const char *key, const char *want) {
  char g[GOT_LEN];
  const char *sep = *want ? ", " : "";
  if (!cJSON_IsNumber(v))
    return sj_fail(c, key, "wrong type (got %s; expected a number%s%s)", sj_got(g, v), sep, want);
  double x = v->valuedouble;
  if (!isfinite(x))
    return sj_fail(c, key, "not a finite number (got %s; expected a finite number%s%s)", sj_got(g, v),
                   sep, want);
  if (fabs(x) > FLT_MAX || (x != 0 && fabs(x) < FLT_MIN))
    return sj_fail(c, key, "out of range (got %s; expected %s%sa number single precision holds: 0 or a "
                   "magnitude from 1.2e-38 to 3.4e+38)", sj_got(g, v), want, *want ? " and " : "");
  return 0;
}

/* Reads obj.name as a real number in r. Absent: *out = def, or an error when required. */
int sj_get_real(const ctx *c, const cJSON *obj, const char *where, const char *name,
                int required, double def, range r, double *out) {
  char key[KEY_LEN], want[160], g[GOT_LEN];
  sj_join(key, where, name);
  fmt_range(want, sizeof want, name, r);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
  if (!v) {
    if (required) return sj_fail(c, key, "missing required key (expected a number, %s)", want);
    *out = def;
    return 0;
  }
  DR_TRY(check_number(c, v, key, want));
  double x = v->valuedouble;
  if (x < r.lo || x > r.hi || (r.lo_open && x == r.lo) || (r.hi_open && x == r.hi))
    return sj_fail(c, key, "out of range (got %s; expected %s)", sj_got(g, v), want);
  *out = x;
  return 0;
}

/* Reads obj.name as an integer in [lo, hi]. */
int sj_get_int(const ctx *c, const cJSON *obj, const char *where, const char *name,
               int required, double def, double lo, double hi, double *out) {
  char key[KEY_LEN], want[120], g[GOT_LEN], a[32], b[32];
  sj_join(key, where, name);
  snprintf(want, sizeof want, "an integer from %s to %s", sj_fmt_num(a, lo), sj_fmt_num(b, hi));
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
  if (!v) {
    if (required) return sj_fail(c, key, "missing required key (expected %s)", want);
    *out = def;
    return 0;
  }
  if (!cJSON_IsNumber(v)) return sj_fail(c, key, "wrong type (got %s; expected %s)", sj_got(g, v), want);
  double x = v->valuedouble;
  if (!isfinite(x)) return sj_fail(c, key, "not a finite number (got %s; expected %s)", sj_got(g, v), want);
  if (x != floor(x)) return sj_fail(c, key, "not an integer (got %s; expected %s)", sj_got(g, v), want);
  if (x < lo || x > hi) return sj_fail(c, key, "out of range (got %s; expected %s)", sj_got(g, v), want);
  *out = x;
  return 0;
}

int sj_get_int32(const ctx *c, const cJSON *obj, const char *where, const char *name,
                 int required, int def, int lo, int hi, int *out) {
  double x;
  DR_TRY(sj_get_int(c, obj, where, name, required, def, lo, hi, &x));
  *out = (int)x;
  return 0;
}

/* Reads obj.name as [x, y, z]: exactly three finite numbers. */
int sj_get_vec3(const ctx *c, const cJSON *obj, const char *where, const char *name,
                int required, const double def[3], const char *unit, double out[3]) {
  char key[KEY_LEN], ekey[KEY_LEN + 16], want[120], g[GOT_LEN];
  sj_join(key, where, name);
  snprintf(want, sizeof want, "an array of 3 numbers [x, y, z] (%s)", unit);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
  if (!v) {
    if (required) return sj_fail(c, key, "missing required key (expected %s)", want);
    for (int i = 0; i < 3; ++i) out[i] = def[i];
    return 0;
  }
  if (!cJSON_IsArray(v)) return sj_fail(c, key, "wrong type (got %s; expected %s)", sj_got(g, v), want);
  int n = cJSON_GetArraySize(v);
  if (n != 3)
    return sj_fail(c, key, "wrong length (got %s, %d item%s; expected %s)", sj_got(g, v), n,
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
int sj_get_string(const ctx *c, const cJSON *obj, const char *where, const char *name,
                  int required, const char *def, const char *expect, const char **out) {
  char key[KEY_LEN], g[GOT_LEN];
  sj_join(key, where, name);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
  if (!v) {
    if (required) return sj_fail(c, key, "missing required key (expected %s)", expect);
    *out = def;
    return 0;
  }
  if (!cJSON_IsString(v) || !v->valuestring)
    return sj_fail(c, key, "wrong type (got %s; expected %s)", sj_got(g, v), expect);
  *out = v->valuestring;
  return 0;
}

/* Reads obj.name as true or false (JSON booleans only); absent: *out = def. */
int sj_get_bool(const ctx *c, const cJSON *obj, const char *where, const char *name, int def, int *out) {
  char key[KEY_LEN], g[GOT_LEN];
  sj_join(key, where, name);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
  if (!v) {
    *out = def;
    return 0;
  }
  if (!cJSON_IsBool(v)) return sj_fail(c, key, "wrong type (got %s; expected true or false)", sj_got(g, v));
  *out = cJSON_IsTrue(v) ? 1 : 0;
  return 0;
}

/* Reads obj.name as one of names[0..n); *out is its index. def < 0: required. */
int sj_get_enum(const ctx *c, const cJSON *obj, const char *where, const char *name, int def,
                const char *const *names, int n, int *out) {
  char key[KEY_LEN], want[300], list[240], g[GOT_LEN];
  sj_join(key, where, name);
  sj_list_names(list, sizeof list, names, n);
  snprintf(want, sizeof want, "one of: %s", list);
  const char *s = NULL;
  DR_TRY(sj_get_string(c, obj, where, name, def < 0, NULL, want, &s));
  if (!s) {
    *out = def;
    return 0;
  }
  for (int i = 0; i < n; ++i)
    if (strcmp(s, names[i]) == 0) {
      *out = i;
      return 0;
    }
  return sj_fail(c, key, "unknown value (got %s; expected %s)",
                 sj_got(g, cJSON_GetObjectItemCaseSensitive(obj, name)), want);
}

/* The optional section root.name: NULL when absent, an error when not an object. */
int sj_get_section(const ctx *c, const cJSON *root, const char *name, int required,
                   const char *expect, const cJSON **out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
  *out = NULL;
  if (!v) {
    if (required) return sj_fail(c, name, "missing required section (expected %s)", expect);
    return 0;
  }
  *out = v;
  return 0;
}

int sj_has_control_char(const char *s) {
  for (; *s; ++s)
    if ((unsigned char)*s < 0x20 || *s == 0x7f) return 1;
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Directions and rotations (bodies, mesh placements, colliders, keyframes). */

/* obj.name as a direction: three numbers, not all zero; *out is normalised. */
int sj_get_direction(const ctx *c, const cJSON *obj, const char *where, const char *name,
                     double out[3]) {
  char key[KEY_LEN], g[GOT_LEN];
  DR_TRY(sj_get_vec3(c, obj, where, name, 1, NULL, "a direction, not all zero", out));
  double l = sqrt(out[0] * out[0] + out[1] * out[1] + out[2] * out[2]);
  if (!(l > 0) || !isfinite(l)) {
    sj_join(key, where, name);
    return sj_fail(c, key, "not a direction (got %s; expected a vector of non-zero length)",
                   sj_got(g, cJSON_GetObjectItemCaseSensitive(obj, name)));
  }
  for (int i = 0; i < 3; ++i) out[i] /= l;
  return 0;
}

/* obj.rotation = {"axis": [x, y, z], "angle": degrees} as a unit quaternion (w, x, y, z);
 * *present = 0 and the identity when absent. */
int sj_get_rotation(const ctx *c, const cJSON *obj, const char *where, int *present,
                    double q[4], double *angle_out) {
  static const char *const keys[] = {"axis", "angle"};
  char rkey[KEY_LEN];
  double axis[3], angle;
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(obj, "rotation");
  q[0] = 1, q[1] = q[2] = q[3] = 0;
  *present = r != NULL;
  if (angle_out) *angle_out = 0;
  if (!r) return 0;
  sj_join(rkey, where, "rotation");
  DR_TRY(sj_need_object(c, r, rkey, "{\"axis\": [x, y, z], \"angle\": degrees}"));
  DR_TRY(sj_check_keys(c, r, rkey, keys, 2, NULL, 0, NULL));
  DR_TRY(sj_get_direction(c, r, rkey, "axis", axis));
  DR_TRY(sj_get_real(c, r, rkey, "angle", 1, 0, (range){-INFINITY, INFINITY, 0, 0, "degrees"}, &angle));
  double h = 0.5 * angle * (PI / 180.0);
  q[0] = cos(h);
  for (int i = 0; i < 3; ++i) q[i + 1] = axis[i] * sin(h);
  if (angle_out) *angle_out = angle;
  return 0;
}

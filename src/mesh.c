/* mesh.c - the OBJ reader (see mesh.h). */
#define _POSIX_C_SOURCE 200809L /* fileno */
#include "mesh.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "error.h"

#define MAX_OBJ_BYTES (1L << 30) /* larger than this is not a collider mesh */

static int obj_fail(char *err, size_t cap, const char *path, long line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int obj_fail(char *err, size_t cap, const char *path, long line, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (line > 0) snprintf(err, cap, "%s:%ld: %s", path, line, msg);
  else snprintf(err, cap, "%s: %s", path, msg);
  return DR_EINPUT;
}

/* Grows *p (elements of size sz) to hold at least need; 0 on success. */
static int grow(void **p, int *cap, int need, size_t sz) {
  if (need <= *cap) return 0;
  int nc = *cap ? *cap : 256;
  while (nc < need) {
    if (nc > (1 << 29)) return 1;
    nc *= 2;
  }
  void *q = realloc(*p, (size_t)nc * sz);
  if (!q) return 1;
  *p = q;
  *cap = nc;
  return 0;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

/* The next whitespace-separated token of [*s, end): its start and length (0 at the end). */
static size_t next_token(const char **s, const char *end, const char **tok) {
  const char *p = *s;
  while (p < end && is_space(*p)) ++p;
  const char *q = p;
  while (q < end && !is_space(*q)) ++q;
  *tok = p;
  *s = q;
  return (size_t)(q - p);
}

/* A shown token: at most 40 printable characters. */
static void shown(char out[64], const char *t, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n && k < 40; ++i) out[k++] = (t[i] >= 0x20 && t[i] < 0x7f) ? t[i] : '?';
  if (n > 40) out[k++] = '.', out[k++] = '.', out[k++] = '.';
  out[k] = 0;
}

int mesh_read_obj(const char *path, mesh *out, char *err, size_t errcap) {
  memset(out, 0, sizeof *out);
  err[0] = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return obj_fail(err, errcap, path, 0, "cannot read the mesh: %s", strerror(errno));
  struct stat sb; /* fopen opens a folder for reading on Linux; its size means nothing */
  if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
    fclose(f);
    return obj_fail(err, errcap, path, 0, "cannot read the mesh: is a folder (expected an OBJ file)");
  }
  if (fseek(f, 0, SEEK_END) != 0) {
    fclose(f);
    return obj_fail(err, errcap, path, 0, "cannot read the mesh: %s", strerror(errno));
  }
  long size = ftell(f);
  if (size < 0 || size > MAX_OBJ_BYTES) {
    fclose(f);
    return obj_fail(err, errcap, path, 0, "cannot read the mesh: %s", size < 0 ? strerror(errno) : "larger than 1 GiB");
  }
  rewind(f);
  char *buf = malloc((size_t)size + 1);
  if (!buf) {
    fclose(f);
    snprintf(err, errcap, "%s: out of host memory reading the mesh", path);
    return DR_ENOMEM;
  }
  size_t got = fread(buf, 1, (size_t)size, f);
  int rerr = ferror(f);
  fclose(f);
  if (rerr || got != (size_t)size) {
    free(buf);
    return obj_fail(err, errcap, path, 0, "cannot read the mesh: read error");
  }
  buf[size] = 0;

  double *v = NULL;
  int *tri = NULL, *face = NULL;
  int nv = 0, vcap = 0, nt = 0, tcap = 0, fcap = 0, rc = 0;
  long line = 0;
  char a[64];
  const char *p = buf, *end = buf + size;
  while (p < end && !rc) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol) eol = end;
    ++line;
    const char *s = p, *tok;
    p = eol + 1;
    size_t n = next_token(&s, eol, &tok);
    if (n == 0 || tok[0] == '#') continue;
    if (memchr(tok, 0, (size_t)(eol - tok))) {
      rc = obj_fail(err, errcap, path, line, "not a text file (got a NUL byte; expected an OBJ mesh)");
      break;
    }
    if (n == 1 && tok[0] == 'v') {
      if (grow((void **)&v, &vcap, 3 * (nv + 1), sizeof *v)) {
        rc = obj_fail(err, errcap, path, line, "out of memory (%d vertices)", nv);
        break;
      }
      int k = 0;
      while (k < 3) {
        size_t m = next_token(&s, eol, &tok);
        if (m == 0) break;
        char num[128];
        if (m >= sizeof num) m = sizeof num - 1;
        memcpy(num, tok, m);
        num[m] = 0;
        char *e;
        double x = strtod(num, &e);
        if (e == num || *e) {
          shown(a, tok, m);
          rc = obj_fail(err, errcap, path, line, "vertex coordinate %c is not a number (got \"%s\")", "xyz"[k], a);
          break;
        }
        if (!isfinite(x)) {
          shown(a, tok, m);
          rc = obj_fail(err, errcap, path, line, "vertex coordinate %c is not finite (got \"%s\")", "xyz"[k], a);
          break;
        }
        v[3 * nv + k++] = x;
      }
      if (rc) break;
      if (k < 3) {
        rc = obj_fail(err, errcap, path, line, "vertex with %d coordinate%s (expected \"v x y z\")", k, k == 1 ? "" : "s");
        break;
      }
      ++nv;
    } else if (n == 1 && tok[0] == 'f') {
      int k = 0;
      for (;;) {
        size_t m = next_token(&s, eol, &tok);
        if (m == 0) break;
        /* the vertex index is what comes before the first '/' */
        size_t vi = 0;
        while (vi < m && tok[vi] != '/') ++vi;
        char num[32], *e;
        shown(a, tok, m);
        if (vi == 0 || vi >= sizeof num) {
          rc = obj_fail(err, errcap, path, line, "face vertex %d is not a vertex index (got \"%s\"; expected i, i/t, i//n or i/t/n)", k + 1, a);
          break;
        }
        memcpy(num, tok, vi);
        num[vi] = 0;
        errno = 0;
        long idx = strtol(num, &e, 10);
        if (*e || errno) {
          rc = obj_fail(err, errcap, path, line, "face vertex %d is not a vertex index (got \"%s\"; expected i, i/t, i//n or i/t/n)", k + 1, a);
          break;
        }
        if (idx == 0 || idx > nv || idx < -(long)nv) {
          rc = obj_fail(err, errcap, path, line, "face vertex %d refers to vertex %ld, but %d vertices are defined above this line (expected 1..%d, or -1..-%d counting back)",
                        k + 1, idx, nv, nv, nv);
          break;
        }
        if (grow((void **)&face, &fcap, k + 1, sizeof *face)) {
          rc = obj_fail(err, errcap, path, line, "out of memory (a face of %d vertices)", k);
          break;
        }
        face[k++] = idx > 0 ? (int)(idx - 1) : (int)(nv + idx);
      }
      if (rc) break;
      if (k < 3) {
        rc = obj_fail(err, errcap, path, line, "face with %d vertices (expected at least 3)", k);
        break;
      }
      if (grow((void **)&tri, &tcap, 3 * (nt + k - 2), sizeof *tri)) {
        rc = obj_fail(err, errcap, path, line, "out of memory (%d triangles)", nt);
        break;
      }
      for (int j = 1; j + 1 < k; ++j, ++nt) {
        tri[3 * nt] = face[0];
        tri[3 * nt + 1] = face[j];
        tri[3 * nt + 2] = face[j + 1];
      }
    }
  }
  free(buf);
  free(face);
  if (!rc && nt == 0) rc = obj_fail(err, errcap, path, 0, "no faces (got %d vertices and no \"f\" line; expected a closed triangle mesh)", nv);
  if (rc) {
    free(v), free(tri);
    return rc;
  }
  out->n_verts = nv;
  out->n_tris = nt;
  out->v = v;
  out->tri = tri;
  return DR_OK;
}

void mesh_destroy(mesh *m) {
  if (!m) return;
  free(m->v);
  free(m->tri);
  memset(m, 0, sizeof *m);
}

void mesh_bounds(const mesh *m, double lo[3], double hi[3]) {
  for (int a = 0; a < 3; ++a) lo[a] = INFINITY, hi[a] = -INFINITY;
  for (int t = 0; t < 3 * m->n_tris; ++t) {
    const double *x = m->v + 3 * m->tri[t];
    for (int a = 0; a < 3; ++a) lo[a] = fmin(lo[a], x[a]), hi[a] = fmax(hi[a], x[a]);
  }
}

double mesh_volume(const mesh *m) {
  double vol = 0;
  for (int t = 0; t < m->n_tris; ++t) {
    const double *a = m->v + 3 * m->tri[3 * t], *b = m->v + 3 * m->tri[3 * t + 1], *c = m->v + 3 * m->tri[3 * t + 2];
    vol += a[0] * (b[1] * c[2] - b[2] * c[1]) - a[1] * (b[0] * c[2] - b[2] * c[0]) + a[2] * (b[0] * c[1] - b[1] * c[0]);
  }
  return vol / 6.0;
}

/* scene.c - reads a scene file (JSON, SI units) into a struct scene: the entry points and the
 * order in which the sections are checked.
 *
 * Every key is checked for its type, its range and its consistency with the others; unknown
 * and duplicate keys are errors. The first problem found becomes one line
 * "FILE: KEY: what is wrong (got VALUE; expected WHAT)" recorded with dr_fail(DR_EINPUT, ...).
 * Sections are checked in a fixed order: the top-level keys, then domain, time, gravity,
 * materials, bodies, boundary, colliders, output, parallel; inside a section, duplicate and unknown keys
 * first, then the values in the order the format lists them. The format and every rule
 * enforced here are described in docs/scene-format.md: keep the two in step.
 *
 * The loader's files: scene_json.c (checked reads and messages), scene_settings.c (domain, time,
 * gravity, output, parallel), scene_materials.c, scene_bodies.c, scene_meshes.c, scene_colliders.c
 * (boundary and colliders); scene_parse.h is what they share. On failure scene_load and scene_parse
 * leave *out owning nothing; on success *out owns everything until scene_destroy. */
#include "scene.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "meshsdf.h"
#include "scene_parse.h"

#define MAX_FILE_BYTES (64L << 20)    /* a scene file larger than this is a mistake */

/* The top level: its keys, then each section in the order given above. */
static int parse_scene(const ctx *c, const cJSON *root, scene *s) {
  static const char *const keys[] = {"description", "domain",   "time",      "gravity",
                                     "materials",   "bodies",   "boundary",  "colliders",
                                     "output",      "parallel"};
  char g[GOT_LEN], names[300];
  const char *desc = NULL;
  sj_list_names(names, sizeof names, keys, 10);
  if (!cJSON_IsObject(root))
    return sj_fail(c, "top level", "not an object (got %s; expected an object with keys %s)",
                   sj_got(g, root), names);
  DR_TRY(sj_check_keys(c, root, "", keys, 10, NULL, 0, NULL));
  DR_TRY(sj_get_string(c, root, "", "description", 0, "", "a string", &desc));
  DR_TRY(scene_parse_domain(c, root, s));
  DR_TRY(scene_parse_time(c, root, s));
  DR_TRY(scene_parse_gravity(c, root, s));
  DR_TRY(scene_parse_materials(c, root, s));
  DR_TRY(scene_parse_bodies(c, root, s));
  DR_TRY(scene_parse_boundary(c, root, s));
  DR_TRY(scene_parse_colliders(c, root, s));
  DR_TRY(scene_parse_output(c, root, s));
  DR_TRY(scene_parse_parallel(c, root, s));
  return scene_check_substeps(c, s);
}

/* ---------------------------------------------------------------------------------------------
 * The file. */

/* Reads the whole file, NUL-terminated, into *buf. */
static int read_file(const ctx *c, const char *path, char **buf, size_t *len) {
  *buf = NULL;
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return sj_fail(c, NULL, "cannot read: %s", strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  int err = 0;
  while (b) {
    if (n + 1 >= cap) {
      if (cap >= (size_t)MAX_FILE_BYTES) {
        free(b);
        fclose(f);
        return sj_fail(c, NULL, "cannot read: larger than %ld MiB, too large for a scene file",
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
    return sj_fail(c, NULL, "cannot read: %s", strerror(err));
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
    return sj_fail(c, NULL, "line %ld, column %ld: not valid JSON (got a NUL byte; expected text)",
                   line, col);
  }
  /* the length includes the terminating NUL: cJSON then rejects trailing garbage */
  *root = cJSON_ParseWithLengthOpts(buf, len + 1, NULL, 1);
  const char *at = *root ? NULL : cJSON_GetErrorPtr();
  size_t pos = (at && at >= buf && at <= buf + len) ? (size_t)(at - buf) : len;
  /* what cJSON lets through, or reports later than where it is (a trailing comma is found at
   * the bracket after it): the first problem in the file is the one reported */
  size_t found;
  char what[300];
  if (sj_scan_text(buf, len, &found, what, sizeof what) && (*root || found <= pos)) {
    cJSON_Delete(*root);
    *root = NULL;
    position(buf, found, &line, &col);
    return sj_fail(c, NULL, "line %ld, column %ld: %s", line, col, what);
  }
  if (*root) return 0;
  position(buf, pos, &line, &col);
  if (pos >= len)
    return sj_fail(c, NULL, "line %ld, column %ld: not valid JSON (got the end of the file; expected "
                   "more: is a bracket, brace or quote left open?)", line, col);
  char near[64], shown[GOT_LEN];
  size_t k = 0;
  while (k < 24 && pos + k < len && buf[pos + k] != '\n' && buf[pos + k] != '\r') ++k;
  memcpy(near, buf + pos, k);
  near[k] = 0;
  sj_clean(shown, sizeof shown, near, 60);
  int more = pos + k < len && buf[pos + k] != '\n' && buf[pos + k] != '\r';
  if (k == 0)
    return sj_fail(c, NULL, "line %ld, column %ld: not valid JSON (got the end of the line; expected a "
                   "JSON value, a comma or a closing bracket here)", line, col);
  return sj_fail(c, NULL, "line %ld, column %ld: not valid JSON (got \"%s%s\"; expected a JSON value, "
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
  sj_clean(c->path, sizeof c->path, name ? name : "(null)", 500);
  snprintf(out->path, sizeof out->path, "%s", name ? name : "");
}

int scene_load(const char *path, scene *out) {
  ctx c;
  char *buf;
  size_t len;
  scene_name(&c, path, out);
  if (!path) return sj_fail(&c, NULL, "cannot read: no file name given");
  DR_TRY(read_file(&c, path, &buf, &len));
  return scene_take(&c, buf, len, out);
}

int scene_parse(const char *name, const char *bytes, size_t len, scene *out) {
  ctx c;
  scene_name(&c, name, out);
  if (!bytes && len > 0) return sj_fail(&c, NULL, "cannot read: no bytes given");
  if (len >= (size_t)MAX_FILE_BYTES)
    return sj_fail(&c, NULL, "cannot read: larger than %ld MiB, too large for a scene file",
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
  scene_free_levelset_jobs(s);
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

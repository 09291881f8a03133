/* fuzz_scene.c - libFuzzer target for the scene loader (src/scene.c).
 *
 * Each input is taken as the bytes of a scene file. The loader's contract, which this target
 * turns into crashes that the fuzzer reports: it never crashes, leaks, reads or writes out of
 * bounds or hits undefined behaviour (AddressSanitizer, LeakSanitizer, UBSan); a rejected input
 * gives DR_EINPUT with one non-empty line naming the file, and leaves the scene empty; an
 * accepted one holds what the rest of drift relies on (checked below), and the functions that
 * read a loaded scene (bounds, colliders for the kernels, the initial step) run cleanly on it.
 * Built and run by run_fuzz.sh (the CTest test scene_fuzz). */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "scene.h"

#define NAME "fuzz.json"

static void broken(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_scene: contract broken: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  abort();
}

#define REQUIRE(cond)                                                                              \
  do {                                                                                             \
    if (!(cond)) broken(#cond, NULL);                                                              \
  } while (0)

static void check_rejected(int rc, const scene *s) {
  const char *msg = dr_message();
  if (rc != DR_EINPUT) broken("a rejected scene returns DR_EINPUT", msg);
  if (strncmp(msg, NAME ": ", strlen(NAME) + 2) != 0) broken("the message starts with the file name", msg);
  if (strlen(msg) <= strlen(NAME) + 2) broken("the message says what is wrong", msg);
  for (const char *p = msg; *p; ++p)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) broken("the message is one line without control characters", msg);
  REQUIRE(s->materials == NULL && s->bodies == NULL && s->colliders == NULL && s->text == NULL);
  REQUIRE(s->n_materials == 0 && s->n_bodies == 0 && s->n_colliders == 0);
}

static void check_accepted(const scene *s, const uint8_t *data, size_t size) {
  REQUIRE(s->text && s->text_len == size && memcmp(s->text, data, size) == 0);
  REQUIRE(s->hash == scene_hash_bytes(data, size));
  REQUIRE(s->dx > 0 && isfinite(s->dx));
  for (int a = 0; a < 3; ++a) REQUIRE(s->domain_max[a] > s->domain_min[a]);
  REQUIRE(s->frames >= 1 && s->fps > 0 && isfinite(s->fps));
  REQUIRE((s->dt > 0) != (s->cfl > 0));
  /* the time loop counts a fixed step's substeps per frame in an int (sim.c) */
  REQUIRE(s->dt == 0 || ceil(1 / s->fps / s->dt - 1e-9) <= INT_MAX);
  /* no frame asks for more substeps at rest than time.max_substeps (check and run refuse those) */
  REQUIRE(s->max_substeps >= 1 && scene_substeps_at_rest(s) <= s->max_substeps);
  REQUIRE(s->n_materials >= 1 && s->materials && s->n_bodies >= 1 && s->bodies);
  REQUIRE(s->n_colliders >= 0 && (s->n_colliders == 0) == (s->colliders == NULL));
  REQUIRE(s->output_every >= 1 && s->output_every <= s->frames && s->output_dir[0]);
  for (int i = 0; i < s->n_bodies; ++i) {
    const scene_body *b = &s->bodies[i];
    double lo[3], hi[3];
    REQUIRE(b->material >= 0 && b->material < s->n_materials);
    REQUIRE(b->ppc >= 1);
    scene_body_bounds(b, lo, hi);
    for (int a = 0; a < 3; ++a) REQUIRE(lo[a] <= hi[a]);
  }
  for (int i = 0; i < s->n_colliders; ++i)
    REQUIRE(s->colliders[i].n_keys >= 0 && (s->colliders[i].n_keys == 0) == (s->colliders[i].keys == NULL));
  collider *cols = NULL;
  collider_key *keys = NULL;
  int n_keys = 0;
  REQUIRE(scene_kernel_colliders(s, &cols, &keys, &n_keys) == 0);
  free(cols);
  free(keys);
  const double dt = scene_initial_dt(s);
  REQUIRE(dt > 0 && dt <= 1 / s->fps);
  REQUIRE(isfinite(scene_wave_speed(s)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  scene s;
  dr_clear();
  int rc = scene_parse(NAME, (const char *)data, size, &s);
  if (rc)
    check_rejected(rc, &s);
  else
    check_accepted(&s, data, size);
  scene_destroy(&s);
  return 0;
}

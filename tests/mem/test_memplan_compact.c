/* test_memplan_compact.c - compact storage's device plan (memplan.c's memplan_cuda with
 * parallel.storage "compact": the compact packets' layout, docs/performance.md's Memory) holds
 * at most BOUND B a particle, everything counted, on the scenes given on the command line (128 on
 * the capacity scenes of sand; deterministic mode's 64-bit grid sums with ASFLIP cost 30 B a
 * particle of grid more in tests/mem/capacity_materials.json), and with --billion the last scene
 * at dx / 2^(1/3) (a billion particles of sand from capacity_500m.json) fits one H200's 139 GiB.
 * The same scenes in float storage plan more than 128 B (so the bound says something), and the
 * compact plan's particle bytes are those of the record: 60 B a particle in packets of 32, with
 * no id vector. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "memplan.h"
#include "physics/compact.h"
#include "scene.h"

static int plan(const scene *s, int storage, memplan *p) {
  scene t = *s;
  t.storage = storage;
  const memplan_config cfg = {.backend = BACKEND_CUDA, .ranks = 1, .devices = 1};
  return memplan_create(&t, &cfg, p);
}

static void check_scene(const char *path, double dx_scale, double bound) {
  scene s;
  if (scene_load(path, &s)) {
    CHECK(0, "%s: does not load", path);
    return;
  }
  s.dx *= dx_scale;
  memplan c, f;
  if (plan(&s, STORAGE_COMPACT, &c) || plan(&s, STORAGE_FLOAT, &f)) {
    CHECK(0, "%s: no plan", path);
    scene_destroy(&s);
    return;
  }
  const double n = (double)c.most, bc = c.device.total / n, bf = f.device.total / n;
  printf("%s%s: %.3g particles, compact %.1f B a particle (particles %.1f, sort %.1f, mapping %.1f, grid %.1f, "
         "transfer %.1f), float %.1f; %.1f GiB\n",
         path, dx_scale != 1.0 ? " at dx / 2^(1/3)" : "", n, bc, c.device.kind[MT_PARTICLES] / n,
         c.device.kind[MT_SORT] / n, c.device.kind[MT_MAPPING] / n, c.device.kind[MT_GRID] / n,
         c.device.kind[MT_TRANSFER] / n, bf, c.device.total / 1073741824.0);
  CHECK(bc <= bound, "%s: compact storage plans %.1f B a particle, more than %g", path, bc, bound);
  CHECK(bf > 128.0, "%s: float storage plans %.1f B a particle (expected more than 128)", path, bf);
  /* particles: the packets (60 B a lane) and their headers, each with its headroom (an eighth) */
  const double rec = COMPACT_WORDS * 4.0;
  CHECK(c.device.kind[MT_PARTICLES] / n >= rec && c.device.kind[MT_PARTICLES] / n <= rec * 1.25 + 1.0,
        "%s: compact particles %.1f B a particle, expected 60 to 76", path, c.device.kind[MT_PARTICLES] / n);
  if (dx_scale != 1.0) {
    CHECK(n >= 1e9, "%s at dx / 2^(1/3): %.4g particles, expected a billion", path, n);
    CHECK(c.device.total <= 139.0 * 1073741824.0, "a billion particles plan %.1f GiB, more than an H200's 139",
          c.device.total / 1073741824.0);
  }
  memplan_destroy(&c), memplan_destroy(&f);
  scene_destroy(&s);
}

int main(int argc, char **argv) {
  const int billion = argc > 1 && !strcmp(argv[1], "--billion"), first = 2 + billion;
  if (argc < first + 1) {
    fprintf(stderr, "usage: %s [--billion] BOUND SCENE...\n", argv[0]);
    return 2;
  }
  const double bound = atof(argv[first - 1]);
  for (int i = first; i < argc; ++i) check_scene(argv[i], 1.0, bound);
  if (billion) check_scene(argv[argc - 1], 1.0 / cbrt(2.0), bound);
  if (failures_) fprintf(stderr, "%d failure(s)\n", failures_);
  return failures_ ? 1 : 0;
}

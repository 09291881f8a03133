/* test_memplan_compact.c - compact storage's device plan (memplan.c's memplan_cuda with
 * parallel.storage "compact": packets of compact records, every other buffer float storage's,
 * docs/performance.md's Memory) holds at most BOUND B a particle, everything counted, on the
 * scenes given on the command line (163 on the capacity scenes of sand; deterministic mode's
 * 64-bit grid sums with ASFLIP cost 30 B a particle of grid more in
 * tests/mem/capacity_materials.json); the same scenes in float storage plan at least 52 B a
 * particle more (the packets' 112 B a lane against 60), and the compact plan's particle bytes are
 * the record's 60 B and the id's 8 in packets of 32, each vector with its headroom. With the frames'
 * snapshot in pinned host memory the sand's plan is at most 128 B a particle on a GPU and 64 on the
 * host (issue 55's billion on one H200: jobs/bench/capacity_1b_compact.json). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "memplan.h"
#include "physics/compact.h"
#include "scene.h"
#include "sim.h"

/* BOUND above this: a scene of other materials than sand (capacity_materials: 194), held to no
 * 128 B with the snapshot on the host */
#define HOST_SNAP_LIMIT 170.0

static int plan(const scene *s, int storage, int snap_host, memplan *p) {
  scene t = *s;
  t.storage = storage;
  const memplan_config cfg = {.backend = BACKEND_CUDA, .ranks = 1, .devices = 1, .snap_host = snap_host};
  return memplan_create(&t, &cfg, p);
}

static void check_scene(const char *path, double bound) {
  scene s;
  if (scene_load(path, &s)) {
    CHECK(0, "%s: does not load", path);
    return;
  }
  memplan c, f;
  if (plan(&s, STORAGE_COMPACT, 0, &c) || plan(&s, STORAGE_FLOAT, 0, &f)) {
    CHECK(0, "%s: no plan", path);
    scene_destroy(&s);
    return;
  }
  const double n = (double)c.most, bc = c.device.total / n, bf = f.device.total / n;
  printf("%s: %.3g particles, compact %.1f B a particle (particles %.1f, sort %.1f, mapping %.1f, grid %.1f, "
         "transfer %.1f), float %.1f; %.1f GiB\n",
         path, n, bc, c.device.kind[MT_PARTICLES] / n,
         c.device.kind[MT_SORT] / n, c.device.kind[MT_MAPPING] / n, c.device.kind[MT_GRID] / n,
         c.device.kind[MT_TRANSFER] / n, bf, c.device.total / 1073741824.0);
  CHECK(bc <= bound, "%s: compact storage plans %.1f B a particle, more than %g", path, bc, bound);
  CHECK(bf - bc >= 52.0, "%s: float storage plans %.1f B a particle, compact %.1f (expected 52 B less at least)", path,
        bf, bc);
  /* particles: the packets (60 B a lane), the ids (8 B) and the headers, each with its headroom (an eighth) */
  const double rec = COMPACT_WORDS * 4.0 + 8.0;
  CHECK(c.device.kind[MT_PARTICLES] / n >= rec && c.device.kind[MT_PARTICLES] / n <= rec * 1.25 + 1.0,
        "%s: compact particles %.1f B a particle, expected 68 to 86", path, c.device.kind[MT_PARTICLES] / n);
  /* the frames' snapshot in pinned host memory (where a GPU has no room for it): a GPU holds the
   * snapshot's bytes less but a staging chunk, at most HOST_SNAP_BOUND B a particle on the sand of
   * the capacity scenes (issue 55: a billion in at most 128 B), and the host at most 64 */
  memplan h;
  if (plan(&s, STORAGE_COMPACT, 1, &h)) {
    CHECK(0, "%s: no plan with the snapshot on the host", path);
  } else {
    const double bd = h.device.total / n, bh = h.host.total / n;
    printf("%s: the snapshot on the host: a GPU %.1f B a particle, the host %.1f B\n", path, bd, bh);
    CHECK(bound > HOST_SNAP_LIMIT || bd <= 128.0, "%s: compact storage with the snapshot on the host plans %.1f B a "
          "particle on a GPU, more than 128", path, bd);
    double row = 0.0; /* the snapshot's bytes a particle: the frame's attributes but the owner */
    for (int a = 0; a < PARTICLE_ATTRS; ++a)
      if ((sim_frame_mask(&s) & ~PA_BIT(owner)) >> a & 1u) row += (double)particle_attrs[a].bytes;
    CHECK(bd <= bc - row + 1.0, "%s: the snapshot (%.0f B a particle) on the host leaves a GPU %.1f B a particle against "
          "%.1f with it", path, row, bd, bc);
    CHECK(bh <= 64.0, "%s: the snapshot on the host: the host plans %.1f B a particle, more than 64", path, bh);
    memplan_destroy(&h);
  }
  memplan_destroy(&c), memplan_destroy(&f);
  scene_destroy(&s);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s BOUND SCENE...\n", argv[0]);
    return 2;
  }
  const double bound = atof(argv[1]);
  for (int i = 2; i < argc; ++i) check_scene(argv[i], bound);
  if (failures_) fprintf(stderr, "%d failure(s)\n", failures_);
  return failures_ ? 1 : 0;
}

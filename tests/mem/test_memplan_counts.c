/* test_memplan_counts.c - the memory plan's particle counts (memplan.h: volume x ppc / dx^3, in
 * closed form) against the sampling's (sample.h: every point drawn and tested) for every body of
 * every scene given on the command line, and against analytic counts for shapes whose sampled
 * count is exact (a box on cell faces).
 *
 * Tolerance: 2% of a scene's total, and for each body 2% or 4 standard deviations of a cell's
 * share of the surface, whichever is larger (the sampling's count differs from its expectation
 * only in the cells the surface cuts: at most ppc a cell, a few sqrt(surface cells) in all). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "error.h"
#include "memplan.h"
#include "sample.h"
#include "scene.h"

static int check_scene(const char *path) {
  scene s;
  if (scene_load(path, &s) || scene_build_levelsets(&s)) {
    CHECK(0, "%s: does not load: %s", path, dr_message());
    return 1;
  }
  const memplan_config cfg = {.backend = BACKEND_CPU, .ranks = 1, .devices = 1};
  memplan plan;
  if (memplan_create(&s, &cfg, &plan)) {
    CHECK(0, "%s: no plan", path);
    scene_destroy(&s);
    return 1;
  }
  double sampled_all = 0.0, planned_all = 0.0;
  for (int b = 0; b < s.n_bodies; ++b) {
    if (s.bodies[b].emit.mode != EMIT_NONE) continue;
    const double sampled = (double)sample_count(&s, b), planned = (double)plan.body[b];
    double lo[3], hi[3];
    scene_body_bounds(&s.bodies[b], lo, hi);
    double area = 0.0; /* the bounding box's surface, in cells: at least the shape's */
    for (int a = 0; a < 3; ++a) {
      const double u = (hi[(a + 1) % 3] - lo[(a + 1) % 3]) / s.dx, v = (hi[(a + 2) % 3] - lo[(a + 2) % 3]) / s.dx;
      area += 2.0 * u * v;
    }
    const double tol = fmax(0.02 * sampled, 4.0 * s.bodies[b].ppc * sqrt(area));
    CHECK(fabs(planned - sampled) <= tol, "%s: bodies[%d]: plan %.0f particles, sampled %.0f (tolerance %.0f)", path,
          b, planned, sampled, tol);
    printf("%s: bodies[%d] (%s): plan %.0f, sampled %.0f (%+.3f%%)\n", path, b, scene_shape_name(s.bodies[b].shape),
           planned, sampled, sampled > 0 ? 100.0 * (planned / sampled - 1.0) : 0.0);
    sampled_all += sampled;
    planned_all += planned;
  }
  CHECK(fabs(planned_all - sampled_all) <= 0.02 * sampled_all, "%s: plan %.0f particles in all, sampled %.0f", path,
        planned_all, sampled_all);
  CHECK(plan.particles == (uint64_t)planned_all, "%s: the plan's total %llu is not the sum of its bodies %.0f", path,
        (unsigned long long)plan.particles, planned_all);
  memplan_destroy(&plan);
  scene_destroy(&s);
  return 0;
}

/* A box on cell faces: l^3 cells of ppc particles exactly, sampled and planned alike. */
static void check_box(void) {
  const char *text = "{\"domain\": {\"min\": [0, 0, 0], \"max\": [1, 1, 1], \"dx\": 0.05},"
                     "\"time\": {\"frames\": 1, \"fps\": 24, \"cfl\": 0.5},"
                     "\"materials\": {\"sand\": {\"model\": \"drucker_prager\", \"density\": 1600,"
                     " \"youngs_modulus\": 3.5e5, \"poisson_ratio\": 0.3, \"friction_angle\": 35}},"
                     "\"bodies\": [{\"shape\": \"box\", \"min\": [0.2, 0.2, 0.2], \"max\": [0.6, 0.7, 0.8],"
                     " \"material\": \"sand\", \"ppc\": 5}]}";
  scene s;
  if (scene_parse("box.json", text, strlen(text), &s)) {
    CHECK(0, "box.json does not parse");
    return;
  }
  const uint64_t expect = 8 * 10 * 12 * 5; /* cells along x, y, z times ppc */
  memplan plan;
  const memplan_config cfg = {.backend = BACKEND_CPU, .ranks = 1, .devices = 1};
  CHECK(memplan_create(&s, &cfg, &plan) == 0, "box.json: no plan");
  CHECK(plan.particles == expect, "box.json: plan %llu particles, expected %llu", (unsigned long long)plan.particles,
        (unsigned long long)expect);
  CHECK(sample_count(&s, 0) == expect, "box.json: sampled %llu particles, expected %llu",
        (unsigned long long)sample_count(&s, 0), (unsigned long long)expect);
  memplan_destroy(&plan);
  scene_destroy(&s);
}

int main(int argc, char **argv) {
  check_box();
  for (int i = 1; i < argc; ++i) check_scene(argv[i]);
  if (failures_) fprintf(stderr, "%d failure(s)\n", failures_);
  return failures_ ? 1 : 0;
}

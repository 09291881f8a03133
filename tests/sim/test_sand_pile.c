/* A column of Drucker-Prager sand collapses into a pile: it spreads and loses height, comes to
 * rest, and, unlike a fluid, keeps a heap whose slope is held by friction. The same column of
 * weakly compressible fluid is run alongside as the contrast. */
#include "simtest.h"

static const char *column =
    "{\"domain\":{\"min\":[0,0,0],\"max\":[1.2,0.5,1.2],\"dx\":0.02},"
    "\"time\":{\"frames\":%d,\"fps\":10,\"cfl\":0.5},"
    "\"materials\":{\"m\":%s},"
    "\"bodies\":[{\"shape\":\"box\",\"min\":[0.52,0.04,0.52],\"max\":[0.68,0.36,0.68],\"material\":\"m\",\"ppc\":8}],"
    "\"boundary\":{\"type\":\"separate\",\"friction\":0.5}}";

static moments collapse(const char *material, int frames, double *height, double *radius) {
  char json[2048];
  snprintf(json, sizeof json, column, frames, material);
  scene s;
  scene_from_text(json, &s);
  sim *S = start(&s);
  for (int f = 1; f <= frames; ++f) MUST(sim_advance_frame(S));
  particles p = {0};
  MUST(sim_particles(S, &p));
  moments m = measure(&s, &p);
  /* Height: 99th-percentile y (robust to a few stray grains); radius: 99th-percentile distance
   * from the column axis in the floor plane. */
  size_t n = p.n;
  double *ys = malloc(n * sizeof *ys), *rs = malloc(n * sizeof *rs);
  for (size_t i = 0; i < n; ++i) {
    ys[i] = p.x[3 * i + 1];
    rs[i] = hypot(p.x[3 * i] - 0.6, p.x[3 * i + 2] - 0.6);
  }
  int cmp(const void *a, const void *b);
  qsort(ys, n, sizeof *ys, cmp);
  qsort(rs, n, sizeof *rs, cmp);
  *height = ys[n * 99 / 100];
  *radius = rs[n * 99 / 100];
  free(ys), free(rs);
  particles_free(&p);
  sim_destroy(&S);
  scene_destroy(&s);
  return m;
}

int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  init(&argc, &argv);
  double h_sand, r_sand, h_fluid, r_fluid;
  moments sand = collapse("{\"model\":\"drucker_prager\",\"density\":1600,\"youngs_modulus\":3e5,\"poisson_ratio\":0.3,\"friction_angle\":35}",
                          20, &h_sand, &r_sand);
  moments fluid = collapse("{\"model\":\"weakly_compressible\",\"density\":1000,\"bulk_modulus\":5e4,\"gamma\":7}", 20,
                           &h_fluid, &r_fluid);
  const double h0 = 0.36, r0 = 0.08 * sqrt(2.0);
  printf("initial column: height %.3f m, half-diagonal %.3f m\n", h0, r0);
  printf("sand after 2 s:  height %.3f m, radius %.3f m, max speed %.4f m/s\n", h_sand, r_sand, sand.vmax);
  printf("fluid after 2 s: height %.3f m, radius %.3f m, max speed %.4f m/s\n", h_fluid, r_fluid, fluid.vmax);
  CHECK(h_sand < 0.8 * h0, "the sand column did not collapse (height %.3f of %.3f)", h_sand, h0);
  CHECK(r_sand > 1.4 * r0, "the sand did not spread (radius %.3f, column %.3f)", r_sand, r0);
  CHECK(sand.vmax < 0.05, "the pile is not at rest after 2 s (max speed %.3f m/s)", sand.vmax);
  CHECK(sand.xmin[1] >= 0.0, "sand went through the floor");
  /* Friction keeps a heap: the pile's aspect ratio is well above the fluid's puddle. */
  CHECK(h_sand / r_sand > 2.0 * (h_fluid / r_fluid), "the sand pile (h/r %.3f) is as flat as the fluid (%.3f)",
        h_sand / r_sand, h_fluid / r_fluid);
  CHECK(h_sand / r_sand > 0.25, "the pile is too flat for a 35 degree sand (h/r %.3f)", h_sand / r_sand);
  return finish("test_sand_pile");
}

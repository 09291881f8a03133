/* NACC snow in a whole simulation: a cube of snow (the paper's Crawling in Snow parameters)
 * dropped 10 cm onto the floor compacts where it lands and keeps its shape as a block, where the
 * same cube of cohesionless sand collapses into a low, wide pile.
 *   - compaction: the plastic state logJp falls below its initial value (on average by more than
 *     0.01, most in the bottom layer that took the impact), and the snow's volume, sum V0
 *     det(F_e) exp(logJp - logJp0), ends below 99% of the initial volume (an elastic material
 *     would come back to 100%);
 *   - a block: its height stays above 80% of the cube's and its width within 15% of it, and it
 *     does not creep (the width at the end equals the width half a second earlier to half a cell);
 *   - the contrast: the sand pile ends at most two thirds as high and at least twice as wide. */
#include "simtest.h"

#define FRAMES 30

typedef struct shape_stats {
  double height, width, width_before, volume_ratio, mean_logjp, bottom_logjp, top_logjp;
} shape_stats;

/* Extent along an axis, from the 1st to the 99th percentile (robust to a few stray particles). */
static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double extent(const particles *p, int axis) {
  double *v = malloc(sizeof *v * p->n);
  for (size_t i = 0; i < p->n; ++i) v[i] = p->x[3 * i + axis];
  qsort(v, p->n, sizeof *v, cmp);
  const double e = v[p->n * 99 / 100] - v[p->n / 100];
  free(v);
  return e;
}

static shape_stats drop(const char *material) {
  char json[2048];
  snprintf(json, sizeof json,
           "{\"domain\":{\"min\":[0,0,0],\"max\":[0.8,0.5,0.8],\"dx\":0.02},"
           "\"time\":{\"frames\":%d,\"fps\":20,\"cfl\":0.5},\"materials\":{\"m\":%s},"
           "\"bodies\":[{\"shape\":\"box\",\"min\":[0.3,0.15,0.3],\"max\":[0.5,0.35,0.5],\"material\":\"m\"}],"
           "\"boundary\":{\"type\":\"separate\",\"friction\":0.5}}",
           FRAMES, material);
  scene s;
  scene_from_text(json, &s);
  sim *S = start(&s);
  particles p = {0};
  shape_stats st;
  memset(&st, 0, sizeof st);
  for (int f = 1; f <= FRAMES; ++f) {
    MUST(sim_advance_frame(S));
    if (f == FRAMES - 10) {
      MUST(sim_particles(S, &p));
      st.width_before = fmax(extent(&p, 0), extent(&p, 2));
    }
  }
  MUST(sim_particles(S, &p));
  const material_params *m = &s.materials[0].params;
  const double a0 = m->model == MODEL_NACC ? m->nacc_logjp0 : 0;
  double v0 = 0, v = 0, ymin = 1e9, ymax = -1e9;
  for (size_t i = 0; i < p.n; ++i) ymin = fmin(ymin, p.x[3 * i + 1]), ymax = fmax(ymax, p.x[3 * i + 1]);
  int nb = 0, nt = 0;
  for (size_t i = 0; i < p.n; ++i) {
    v0 += p.vol0[i];
    v += p.vol0[i] * m3_det(p.F + 9 * i) * exp(p.logjp[i] - a0);
    st.mean_logjp += p.logjp[i] / p.n;
    const double y = (p.x[3 * i + 1] - ymin) / (ymax - ymin);
    if (y < 1.0 / 3) st.bottom_logjp += p.logjp[i], ++nb;
    if (y > 2.0 / 3) st.top_logjp += p.logjp[i], ++nt;
  }
  st.bottom_logjp /= nb ? nb : 1;
  st.top_logjp /= nt ? nt : 1;
  st.volume_ratio = v / v0;
  st.height = extent(&p, 1);
  st.width = fmax(extent(&p, 0), extent(&p, 2));
  particles_free(&p);
  sim_destroy(&S);
  scene_destroy(&s);
  return st;
}

int main(int argc, char **argv) {
  choose_backend(argc, argv);
  init(&argc, &argv);
  const double side = 0.2, dx = 0.02;
  /* the paper's snow (bulk modulus 5e5 dyn/cm^2 = 5e4 Pa, M 0.8, beta 0.9, xi 5), the defaults */
  shape_stats snow = drop("{\"model\":\"nacc\",\"density\":400,\"bulk_modulus\":5e4,\"poisson_ratio\":0.3}");
  shape_stats sand = drop("{\"model\":\"drucker_prager\",\"density\":400,\"youngs_modulus\":6e4,\"poisson_ratio\":0.3,"
                          "\"friction_angle\":35}");
  printf("snow: height %.3f m, width %.3f m (%.3f m 0.5 s before), volume %.4f of the initial, logJp mean %.4f "
         "(bottom third %.4f, top third %.4f; initial -0.01)\n",
         snow.height, snow.width, snow.width_before, snow.volume_ratio, snow.mean_logjp, snow.bottom_logjp,
         snow.top_logjp);
  printf("sand: height %.3f m, width %.3f m\n", sand.height, sand.width);
  CHECK(snow.mean_logjp < -0.01 - 0.01, "the snow did not compact (mean logJp %.4f)", snow.mean_logjp);
  CHECK(snow.bottom_logjp < snow.top_logjp, "the bottom (%.4f) is not more compacted than the top (%.4f)",
        snow.bottom_logjp, snow.top_logjp);
  CHECK(snow.volume_ratio < 0.99, "the snow kept its volume (%.4f of the initial)", snow.volume_ratio);
  CHECK(snow.height > 0.8 * side, "the snow block lost its height (%.3f m of %.2f)", snow.height, side);
  CHECK(snow.width < 1.15 * side, "the snow block spread (%.3f m wide, the cube %.2f)", snow.width, side);
  CHECK(fabs(snow.width - snow.width_before) < 0.5 * dx, "the snow keeps creeping (%.3f -> %.3f m)", snow.width_before,
        snow.width);
  CHECK(sand.height < 2.0 / 3.0 * snow.height, "the sand pile (%.3f m) is as high as the snow block (%.3f m)",
        sand.height, snow.height);
  CHECK(sand.width > 2 * snow.width, "the sand (%.3f m) did not spread more than the snow (%.3f m)", sand.width,
        snow.width);
  return finish("test_snow");
}

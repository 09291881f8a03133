/* Per-face walls with Coulomb friction. A stiff elastic block slides over the domain's floor:
 *   - on a rough floor (separate, friction mu) it decelerates at mu g (the floor carries the
 *     block's weight M g; Coulomb friction takes mu M g of tangential force), the analytic rate;
 *   - on a frictionless floor it keeps its speed, even when the side faces it never touches are
 *     rough;
 *   - pressed into a corner by gravity along -x and -y and sliding along z, it is slowed by each
 *     face by that face's own coefficient: mu_floor g + mu_side g.
 * The deceleration is the least-squares slope of the centre-of-mass velocity over the sliding
 * part of the run (after the block has settled, before it stops). */
#include "simtest.h"

/* Runs the block and returns the slope of its mean velocity along axis `along` (m/s^2) between
 * t0 and t1; *v0 is the mean velocity at t0. */
static double slope(const char *gravity, const char *boundary, const char *velocity, int along, double t0, double t1,
                    double *v0) {
  char json[2048];
  snprintf(json, sizeof json,
           "{\"domain\":{\"min\":[0,0,0],\"max\":[0.48,0.32,1.2],\"dx\":0.04},"
           "\"time\":{\"frames\":%d,\"fps\":50,\"cfl\":0.5},\"gravity\":%s,"
           "\"materials\":{\"rubber\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":5e5,"
           "\"poisson_ratio\":0.3}},"
           "\"bodies\":[{\"shape\":\"box\",\"min\":[0.04,0.04,0.2],\"max\":[0.2,0.16,0.44],\"material\":\"rubber\","
           "\"velocity\":%s}],"
           "\"boundary\":%s}",
           (int)ceil(t1 * 50), gravity, velocity, boundary);
  scene s;
  scene_from_text(json, &s);
  sim *S = start(&s);
  particles p = {0};
  double st = 0, sv = 0, stt = 0, stv = 0;
  int n = 0;
  *v0 = NAN;
  for (int f = 1; f <= s.frames; ++f) {
    MUST(sim_advance_frame(S));
    const double t = f / 50.0;
    if (t < t0 - 1e-9) continue;
    MUST(sim_particles(S, &p));
    moments m = measure(&s, &p);
    const double v = m.momentum[along] / m.mass;
    if (isnan(*v0)) *v0 = v;
    CHECK(m.xmin[0] >= 0 && m.xmin[1] >= 0, "a particle left the domain");
    st += t, sv += v, stt += t * t, stv += t * v, ++n;
  }
  particles_free(&p);
  sim_destroy(&S);
  scene_destroy(&s);
  return (n * stv - st * sv) / (n * stt - st * st);
}

int main(int argc, char **argv) {
  choose_backend(argc, argv);
  init(&argc, &argv);
  const double g = 9.81, mu = 0.3, mu_side = 0.2;
  double v0;

  /* a rough floor between frictionless side faces; the block slides along z at 1.5 m/s and
   * stops after 1.5 / (mu g) = 0.51 s */
  double a = slope("[0,-9.81,0]", "{\"type\":\"slip\",\"y-\":{\"type\":\"separate\",\"friction\":0.3}}", "[0,0,1.5]", 2,
                   0.1, 0.4, &v0);
  printf("rough floor (mu %.2f): deceleration %.4f m/s^2, expected mu g = %.4f (speed %.3f m/s at 0.1 s)\n", mu, -a,
         mu * g, v0);
  CHECK(fabs(-a - mu * g) < 0.03 * mu * g, "rough floor: deceleration %.4f, expected %.4f", -a, mu * g);
  CHECK(v0 > 1.0, "the block has slowed down before the measurement (%.3f m/s)", v0);

  /* a frictionless floor: the rough side faces are not touched, the speed stays */
  a = slope("[0,-9.81,0]", "{\"type\":\"separate\",\"friction\":0.8,\"y-\":{\"friction\":0}}", "[0,0,1.5]", 2, 0.1,
            0.4, &v0);
  printf("frictionless floor: deceleration %.5f m/s^2 (speed %.3f m/s)\n", -a, v0);
  CHECK(fabs(a) < 0.01 * mu * g, "frictionless floor: the block decelerates at %.4f m/s^2", -a);
  CHECK(fabs(v0 - 1.5) < 0.02, "frictionless floor: speed %.4f m/s, expected 1.5", v0);

  /* a corner: gravity presses the block on the floor (y-) and the side (x-) with g each */
  a = slope("[-9.81,-9.81,0]",
            "{\"type\":\"slip\",\"y-\":{\"type\":\"separate\",\"friction\":0.3},\"x-\":{\"type\":\"separate\"}}",
            "[0,0,1.5]", 2, 0.1, 0.4, &v0);
  printf("corner, rough floor, frictionless side: deceleration %.4f m/s^2, expected %.4f\n", -a, mu * g);
  CHECK(fabs(-a - mu * g) < 0.03 * mu * g, "corner (floor only rough): deceleration %.4f, expected %.4f", -a, mu * g);
  a = slope("[-9.81,-9.81,0]",
            "{\"type\":\"slip\",\"y-\":{\"type\":\"separate\",\"friction\":0.3},"
            "\"x-\":{\"type\":\"separate\",\"friction\":0.2}}",
            "[0,0,2.5]", 2, 0.1, 0.4, &v0);
  printf("corner, both faces rough: deceleration %.4f m/s^2, expected (mu_floor + mu_side) g = %.4f\n", -a,
         (mu + mu_side) * g);
  CHECK(fabs(-a - (mu + mu_side) * g) < 0.03 * (mu + mu_side) * g, "corner (both rough): deceleration %.4f, expected %.4f",
        -a, (mu + mu_side) * g);
  return finish("test_friction");
}

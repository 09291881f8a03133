/* An elastic cube dropped on a frictionless floor ('separate' walls) bounces: its centre of
 * mass comes back up after the impact, and its total energy (kinetic + gravitational + elastic)
 * never grows beyond the initial value (explicit MPM may lose energy, never gain it). */
#include "simtest.h"

int main(int argc, char **argv) {
  init(&argc, &argv);
  const char *json =
      "{\"domain\":{\"min\":[0,0,0],\"max\":[0.64,0.64,0.64],\"dx\":0.02},"
      "\"time\":{\"frames\":60,\"fps\":100,\"cfl\":0.5},"
      "\"materials\":{\"jelly\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":5e4,\"poisson_ratio\":0.3}},"
      "\"bodies\":[{\"shape\":\"box\",\"min\":[0.22,0.2,0.22],\"max\":[0.42,0.4,0.42],\"material\":\"jelly\",\"ppc\":8,\"velocity\":[0,-2,0]}],"
      "\"boundary\":{\"type\":\"separate\",\"friction\":0}}";
  scene s;
  scene_from_text(json, &s);
  sim *S = start(&s);
  particles p = {0};
  MUST(sim_particles(S, &p));
  moments m0 = measure(&s, &p);
  double E0 = m0.kinetic + m0.potential + m0.elastic;
  /* Energies are measured from the floor level: potential m g (y - y_floor). */
  int impact = 0, rebound = 0;
  double worst = -1e30, ymin = 1e30;
  for (int f = 1; f <= 60; ++f) {
    MUST(sim_advance_frame(S));
    MUST(sim_particles(S, &p));
    moments m = measure(&s, &p);
    double E = m.kinetic + m.potential + m.elastic, vy = m.momentum[1] / m.mass;
    printf("frame %2d  y_com %.4f  vy %+.4f  E/E0 %.4f (kinetic %.4f potential %.4f elastic %.4f J)\n", f, m.com[1], vy,
           E / E0, m.kinetic, m.potential, m.elastic);
    if (m.com[1] < ymin) ymin = m.com[1];
    if (m.xmin[1] < 0.08) impact = 1;
    if (impact && vy > 0.3) rebound = 1;
    worst = fmax(worst, E / E0);
    CHECK(isfinite(E), "energy is not finite at frame %d", f);
    CHECK(m.xmin[1] >= 0.0, "a particle went through the floor (y %g)", m.xmin[1]);
  }
  CHECK(impact, "the cube never reached the floor");
  CHECK(rebound, "the cube did not bounce (no upward velocity after impact)");
  CHECK(worst < 1.02, "energy grew to %.4f of the initial", worst);
  printf("highest energy %.4f of the initial; lowest centre of mass %.4f m\n", worst, ymin);
  particles_free(&p);
  sim_destroy(&S);
  scene_destroy(&s);
  return finish("test_bounce");
}

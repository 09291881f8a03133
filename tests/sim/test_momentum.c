/* Conservation: two elastic spheres of different sizes collide with no gravity and no wall in
 * reach. MLS-MPM with APIC transfers conserves linear and angular momentum exactly up to
 * rounding; the collision must really happen (each sphere's momentum changes a lot). With the
 * adaptive step this also exercises the backend's max-speed reduction. `test_momentum cuda` runs
 * it on the CUDA backend, whose float atomics reorder the P2G sums: every reordered sum still
 * conserves what the transfer conserves, to rounding (the gpu-labelled test_momentum_cuda). */
#include "simtest.h"

int main(int argc, char **argv) {
  choose_backend(argc, argv);
  init(&argc, &argv);
  const char *json =
      "{\"domain\":{\"min\":[0,0,0],\"max\":[1.2,0.8,0.8],\"dx\":0.02},"
      "\"time\":{\"frames\":12,\"fps\":60,\"cfl\":0.5},\"gravity\":[0,0,0],"
      "\"materials\":{\"a\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":1e5,\"poisson_ratio\":0.3},"
      "              \"b\":{\"model\":\"fixed_corotated\",\"density\":1500,\"youngs_modulus\":2e5,\"poisson_ratio\":0.25}},"
      "\"bodies\":[{\"shape\":\"sphere\",\"center\":[0.4,0.41,0.4],\"radius\":0.1,\"material\":\"a\",\"ppc\":8,\"velocity\":[2,0,0.1]},"
      "           {\"shape\":\"sphere\",\"center\":[0.75,0.39,0.4],\"radius\":0.08,\"material\":\"b\",\"ppc\":8,\"velocity\":[-1.5,0,0]}],"
      "\"boundary\":{\"type\":\"sticky\"}}";
  scene s;
  scene_from_text(json, &s);
  sim *S = start(&s);
  particles p = {0};
  MUST(sim_particles(S, &p));
  moments m0 = measure(&s, &p);
  double pscale = 0; /* sum of |m v|: the scale of rounding errors */
  for (size_t i = 0; i < p.n; ++i) pscale += p.mass[i] * sqrt(p.v[3 * i] * p.v[3 * i] + p.v[3 * i + 2] * p.v[3 * i + 2]);
  double lscale = pscale * 1.0;
  double pa0 = 0; /* x momentum of sphere a */
  for (size_t i = 0; i < p.n; ++i)
    if (p.material[i] == 0) pa0 += p.mass[i] * p.v[3 * i];
  double E0 = m0.kinetic + m0.elastic;
  double worst_p = 0, worst_l = 0, pa = 0, emax = 0;
  for (int f = 1; f <= 12; ++f) {
    MUST(sim_advance_frame(S));
    MUST(sim_particles(S, &p));
    moments m = measure(&s, &p);
    pa = 0;
    for (size_t i = 0; i < p.n; ++i)
      if (p.material[i] == 0) pa += p.mass[i] * p.v[3 * i];
    for (int a = 0; a < 3; ++a) {
      worst_p = fmax(worst_p, fabs(m.momentum[a] - m0.momentum[a]) / pscale);
      worst_l = fmax(worst_l, fabs(m.angular[a] - m0.angular[a]) / lscale);
    }
    emax = fmax(emax, (m.kinetic + m.elastic) / E0);
    printf("frame %2d  P = (%.7f, %.7f, %.7f)  L = (%.7f, %.7f, %.7f)  sphere a: p_x %.5f  E/E0 %.4f\n", f,
           m.momentum[0], m.momentum[1], m.momentum[2], m.angular[0], m.angular[1], m.angular[2], pa,
           (m.kinetic + m.elastic) / E0);
    CHECK(m.xmin[0] > 0.1 && m.xmax[0] < 1.1, "a sphere reached the walls; the test needs free space");
  }
  printf("largest relative change: linear momentum %.3g, angular momentum %.3g\n", worst_p, worst_l);
  CHECK(worst_p < 1e-5, "linear momentum drifted by %g of its scale", worst_p);
  CHECK(worst_l < 1e-5, "angular momentum drifted by %g of its scale", worst_l);
  CHECK(pa < 0.5 * pa0, "sphere a kept its momentum (%g of %g): no collision happened", pa, pa0);
  CHECK(emax < 1.0 + 1e-3, "energy grew to %g of the initial", emax);
  particles_free(&p);
  sim_destroy(&S);
  scene_destroy(&s);
  return finish("test_momentum");
}

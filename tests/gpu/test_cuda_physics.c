/* test_cuda_physics - the CPU integration tests' physics through the CUDA backend
 * (parallel.backend "cuda" in the scene): free fall of an elastic box (tests/sim/test_freefall.c:
 * v_n = g t_n exactly, the discrete symplectic-Euler trajectory, a rigid translation) and the
 * collision of two elastic spheres with the adaptive step, which exercises the device max-speed
 * reduction (tests/sim/test_momentum.c: linear and angular momentum conserved to rounding).
 * Same scenes and tolerances as the CPU tests: float atomics reorder the P2G sums, but every
 * reordered sum still conserves what the transfer conserves, to rounding.
 * Exits 77 (skipped) where no CUDA device is usable. */
#include "gpu_query.h"
#include "sim/simtest.h"

static void freefall(void) {
  const char *json =
      "{\"domain\":{\"min\":[0,0,0],\"max\":[2,4,2],\"dx\":0.05},"
      "\"time\":{\"frames\":10,\"fps\":20,\"dt\":0.001},"
      "\"materials\":{\"rubber\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":1e4,\"poisson_ratio\":0.3}},"
      "\"bodies\":[{\"shape\":\"box\",\"min\":[0.9,3.0,0.9],\"max\":[1.1,3.2,1.1],\"material\":\"rubber\",\"ppc\":8}],"
      "\"parallel\":{\"backend\":\"cuda\"}}";
  scene s;
  scene_from_text(json, &s);
  sim *S = start(&s);
  CHECK(!strcmp(sim_backend_name(S), "cuda"), "backend %s", sim_backend_name(S));
  particles p = {0};
  MUST(sim_particles(S, &p));
  moments m0 = measure(&s, &p);
  const double g = 9.81, dt = 0.001;
  for (int f = 1; f <= 10; ++f) {
    MUST(sim_advance_frame(S));
    MUST(sim_particles(S, &p));
    moments m = measure(&s, &p);
    double t = sim_get_status(S)->time;
    double n = t / dt;
    double y_exact = m0.com[1] - 0.5 * g * t * t;
    double y_discrete = m0.com[1] - 0.5 * g * dt * dt * n * (n + 1);
    double vy = m.momentum[1] / m.mass;
    printf("freefall t %.3f  y %.6f  analytic %.6f  discrete %.6f  vy %.6f (analytic %.6f)\n", t, m.com[1], y_exact,
           y_discrete, vy, -g * t);
    CHECK(fabs(vy + g * t) < 1e-4 * g * t + 1e-5, "velocity %g vs %g", vy, -g * t);
    CHECK(fabs(m.com[1] - y_discrete) < 2e-5 + 1e-5 * n, "height %g vs discrete %g", m.com[1], y_discrete);
    CHECK(fabs(m.com[1] - y_exact) <= 0.5 * g * dt * t * 1.01 + 2e-5, "height %g vs analytic %g", m.com[1], y_exact);
    CHECK(fabs(m.com[0] - m0.com[0]) < 1e-5 && fabs(m.com[2] - m0.com[2]) < 1e-5, "drifted sideways");
    double spread = 0;
    for (size_t i = 0; i < p.n; ++i) spread = fmax(spread, fabs(p.v[3 * i + 1] - vy));
    CHECK(spread < 1e-4, "velocity spread %g", spread);
  }
  CHECK(sim_get_status(S)->steps == 500, "%llu substeps, expected 500", (unsigned long long)sim_get_status(S)->steps);
  for (size_t i = 0; i < p.n; ++i)
    if (p.owner[i] != 0) {
      CHECK(0, "particle %zu has owner %d, expected 0 (rank 0, device 0)", i, p.owner[i]);
      break;
    }
  particles_free(&p);
  sim_destroy(&S);
  scene_destroy(&s);
}

static void momentum(void) {
  const char *json =
      "{\"domain\":{\"min\":[0,0,0],\"max\":[1.2,0.8,0.8],\"dx\":0.02},"
      "\"time\":{\"frames\":12,\"fps\":60,\"cfl\":0.5},\"gravity\":[0,0,0],"
      "\"materials\":{\"a\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":1e5,\"poisson_ratio\":0.3},"
      "              \"b\":{\"model\":\"fixed_corotated\",\"density\":1500,\"youngs_modulus\":2e5,\"poisson_ratio\":0.25}},"
      "\"bodies\":[{\"shape\":\"sphere\",\"center\":[0.4,0.41,0.4],\"radius\":0.1,\"material\":\"a\",\"ppc\":8,\"velocity\":[2,0,0.1]},"
      "           {\"shape\":\"sphere\",\"center\":[0.75,0.39,0.4],\"radius\":0.08,\"material\":\"b\",\"ppc\":8,\"velocity\":[-1.5,0,0]}],"
      "\"boundary\":{\"type\":\"sticky\"},\"parallel\":{\"backend\":\"cuda\"}}";
  scene s;
  scene_from_text(json, &s);
  sim *S = start(&s);
  CHECK(!strcmp(sim_backend_name(S), "cuda"), "backend %s", sim_backend_name(S));
  particles p = {0};
  MUST(sim_particles(S, &p));
  moments m0 = measure(&s, &p);
  double pscale = 0;
  for (size_t i = 0; i < p.n; ++i) pscale += p.mass[i] * sqrt(p.v[3 * i] * p.v[3 * i] + p.v[3 * i + 2] * p.v[3 * i + 2]);
  double pa0 = 0;
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
      worst_l = fmax(worst_l, fabs(m.angular[a] - m0.angular[a]) / pscale);
    }
    emax = fmax(emax, (m.kinetic + m.elastic) / E0);
    printf("momentum frame %2d  substeps %llu  P = (%.7f, %.7f, %.7f)  L = (%.7f, %.7f, %.7f)  sphere a: p_x %.5f  "
           "E/E0 %.4f\n",
           f, (unsigned long long)sim_get_status(S)->steps, m.momentum[0], m.momentum[1], m.momentum[2],
           m.angular[0], m.angular[1], m.angular[2], pa, (m.kinetic + m.elastic) / E0);
    CHECK(m.xmin[0] > 0.1 && m.xmax[0] < 1.1, "a sphere reached the walls; the test needs free space");
  }
  printf("momentum: largest relative change: linear %.3g, angular %.3g\n", worst_p, worst_l);
  CHECK(worst_p < 1e-5, "linear momentum drifted by %g of its scale", worst_p);
  CHECK(worst_l < 1e-5, "angular momentum drifted by %g of its scale", worst_l);
  CHECK(pa < 0.5 * pa0, "sphere a kept its momentum (%g of %g): no collision happened", pa, pa0);
  CHECK(emax < 1.0 + 1e-3, "energy grew to %g of the initial", emax);
  particles_free(&p);
  sim_destroy(&S);
  scene_destroy(&s);
}

int main(int argc, char **argv) {
  int ngpu = 0;
  char gname[256];
  gpu_count(&ngpu, gname, sizeof gname);
  if (ngpu == 0) {
    printf("no GPU: skipped\n");
    return 77;
  }
  init(&argc, &argv);
  printf("test_cuda_physics on %s\n", gname);
  freefall();
  momentum();
  return finish("test_cuda_physics");
}

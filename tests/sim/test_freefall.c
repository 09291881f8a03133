/* Free fall: an elastic box in a large domain with no wall in reach falls as a rigid body.
 * Symplectic Euler on the grid gives v_n = g t_n exactly and
 * y_n = y_0 + g dt^2 n (n+1) / 2 = y_0 + g t^2 / 2 + g dt t / 2,
 * which approaches the analytic trajectory y_0 + g t^2 / 2 at first order in dt.
 * `test_freefall cuda` runs it on the CUDA backend (the gpu-labelled test_freefall_cuda). */
#include "simtest.h"

int main(int argc, char **argv) {
  choose_backend(argc, argv);
  init(&argc, &argv);
  const char *json =
      "{\"domain\":{\"min\":[0,0,0],\"max\":[2,4,2],\"dx\":0.05},"
      "\"time\":{\"frames\":10,\"fps\":20,\"dt\":0.001},"
      "\"materials\":{\"rubber\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":1e4,\"poisson_ratio\":0.3}},"
      "\"bodies\":[{\"shape\":\"box\",\"min\":[0.9,3.0,0.9],\"max\":[1.1,3.2,1.1],\"material\":\"rubber\",\"ppc\":8}]}";
  scene s;
  scene_from_text(json, &s);
  sim *S = start(&s);
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
    printf("t %.3f  y %.6f  analytic %.6f  discrete %.6f  vy %.6f (analytic %.6f)\n", t, m.com[1], y_exact, y_discrete,
           vy, -g * t);
    CHECK(fabs(vy + g * t) < 1e-4 * g * t + 1e-5, "velocity %g vs %g", vy, -g * t);
    CHECK(fabs(m.com[1] - y_discrete) < 2e-5 + 1e-5 * n, "height %g vs discrete %g", m.com[1], y_discrete);
    CHECK(fabs(m.com[1] - y_exact) <= 0.5 * g * dt * t * 1.01 + 2e-5, "height %g vs analytic %g", m.com[1], y_exact);
    CHECK(fabs(m.com[0] - m0.com[0]) < 1e-5 && fabs(m.com[2] - m0.com[2]) < 1e-5, "drifted sideways");
    /* A rigid translation: every particle moves with the same velocity. */
    double spread = 0;
    for (size_t i = 0; i < p.n; ++i) spread = fmax(spread, fabs(p.v[3 * i + 1] - vy));
    CHECK(spread < 1e-4, "velocity spread %g", spread);
  }
  CHECK(sim_get_status(S)->steps == 500, "%llu substeps, expected 500", (unsigned long long)sim_get_status(S)->steps);
  /* One rank: owner = device, 0 .. G-1 (the island's GPUs: all visible ones by default), each used. */
  const int gpus = sim_gpus(S);
  int used[256] = {0};
  for (size_t i = 0; i < p.n; ++i) {
    if (p.owner[i] < 0 || p.owner[i] >= (gpus > 0 ? gpus : 1)) {
      CHECK(0, "particle %zu has owner %d, expected rank 0 and a device below %d", i, p.owner[i], gpus);
      break;
    }
    used[p.owner[i]] = 1;
  }
  for (int d = 0; d < gpus; ++d) CHECK(used[d], "no particle on device %d of %d", d, gpus);
  particles_free(&p);
  sim_destroy(&S);
  scene_destroy(&s);
  return finish("test_freefall");
}

/* ASFLIP transfers (Fei et al. 2021) in the backends, against the APIC and FLIP limits:
 *   - a constructed case: a cloud of particles with random velocities and no stress (a fluid at
 *     rest volume), far from any wall, one step under gravity. With flip_blend 1 and no
 *     positional adjustment, FLIP gives every particle its own velocity plus the grid's change,
 *     here exactly g dt (the weights sum to one): v_p + g dt, noise kept, while APIC replaces
 *     the noise by the grid's smoothed velocity; the positions and affine matrices equal APIC's
 *     (both move with the grid velocity). With full positional adjustment (beta 1) the particle
 *     moves by dt (v_p + g dt) - dt v_apic more than with APIC (to float rounding of positions,
 *     2^-23 of 0.5 m per rounding);
 *   - flip_blend 0 is APIC bit for bit, over a whole run with stress, walls and a moving
 *     collider;
 *   - FLIP keeps the kinetic energy of a noisy velocity field that APIC dissipates.
 * The backend comes from argv[1] (cpu or cuda), as in the other integration tests. On cuda two
 * runs are not bitwise equal even for the same settings (P2G sums are float atomics in any
 * order), so "equal" becomes: one step, within 1e-6 (m, m/s, 1/s, F) of each other; the whole
 * run, within test_cuda_vs_cpu's tolerances (positions 1e-4 of the domain, velocities 1e-2 of
 * the largest speed). */
#include "simtest.h"

#include "backend.h"

#define N 4000

/* a == b exactly on the CPU backend; within tol on cuda (see the top). */
static int same(double a, double b, double tol) { return test_backend_ == BACKEND_CUDA ? fabs(a - b) <= tol : a == b; }

/* One step of the constructed cloud with the given material transfer settings; returns the
 * particles after it (allocates). */
static void one_step(int transfer, float alpha, float beta, particles *out, particles *in) {
  material_params m;
  memset(&m, 0, sizeof m);
  m.model = MODEL_WEAKLY_COMPRESSIBLE;
  m.density = 1000;
  m.bulk = 1e4f;
  m.gamma = 7;
  m.transfer = transfer;
  m.flip_blend = alpha;
  m.beta_min = m.beta_max = beta;
  const char *names[1] = {"water"};
  sim_params prm;
  memset(&prm, 0, sizeof prm);
  for (int a = 0; a < 3; ++a) prm.domain_min[a] = 0, prm.domain_max[a] = 1;
  prm.dx = 0.05f;
  prm.gravity[1] = -9.81f;
  for (int f = 0; f < DR_FACES; ++f) prm.boundary.type[f] = BOUNDARY_SLIP;
  prm.n_materials = 1;
  prm.materials = &m;
  prm.material_names = names;
  particles p = {0};
  particles_reserve(&p, in->n);
  p.n = in->n;
  memcpy(p.x, in->x, 3 * sizeof(float) * in->n);
  memcpy(p.v, in->v, 3 * sizeof(float) * in->n);
  memcpy(p.C, in->C, 9 * sizeof(float) * in->n);
  memcpy(p.F, in->F, 9 * sizeof(float) * in->n);
  memcpy(p.mass, in->mass, sizeof(float) * in->n);
  memcpy(p.vol0, in->vol0, sizeof(float) * in->n);
  memcpy(p.logjp, in->logjp, sizeof(float) * in->n);
  memcpy(p.id, in->id, sizeof(uint64_t) * in->n);
  memcpy(p.material, in->material, sizeof(int32_t) * in->n);
  memcpy(p.owner, in->owner, sizeof(int32_t) * in->n);
  backend b;
  MUST(backend_create(test_backend_ >= 0 ? test_backend_ : BACKEND_CPU, &prm, &p, &b));
  particles_free(&p);
  const float dt = 1e-3f;
  if (b.set_time) MUST(b.set_time(b.state, 0.0));
  MUST(b.p2g(b.state, dt));
  MUST(b.grid_update(b.state, dt));
  MUST(b.g2p(b.state, dt));
  MUST(b.download(b.state, out));
  backend_destroy(&b);
}

static void constructed(void) {
  particles in = {0};
  uint64_t r = 88172645463325252ULL;
  for (int i = 0; i < N; ++i) {
    float x[3], v[3];
    for (int a = 0; a < 3; ++a) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      x[a] = 0.35f + 0.3f * (float)((r >> 11) * (1.0 / 9007199254740992.0));
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      v[a] = (a == 0 ? 0.5f : 0.0f) + (float)((r >> 11) * (1.0 / 9007199254740992.0)) - 0.5f;
    }
    particles_push(&in, x, v, 0.015625f, 1.5625e-5f, (uint64_t)i, 0);
  }
  particles apic = {0}, zero = {0}, flip = {0}, adj = {0};
  one_step(TRANSFER_APIC, 0, 0, &apic, &in);
  one_step(TRANSFER_ASFLIP, 0, 1, &zero, &in);
  one_step(TRANSFER_ASFLIP, 1, 0, &flip, &in);
  one_step(TRANSFER_ASFLIP, 1, 1, &adj, &in);
  size_t *oa = order_by_id(&apic), *oz = order_by_id(&zero), *of = order_by_id(&flip), *oj = order_by_id(&adj);
  const float dt = 1e-3f, g = -9.81f;
  int same0 = 1, samex = 1;
  double worst_flip = 0, worst_adj = 0, noise_apic = 0, noise_flip = 0;
  for (size_t k = 0; k < in.n; ++k) {
    const size_t i = oa[k], z = oz[k], f = of[k], j = oj[k];
    const size_t o = (size_t)apic.id[i]; /* the input is in id order */
    for (int a = 0; a < 3; ++a) {
      same0 &= same(apic.x[3 * i + a], zero.x[3 * z + a], 1e-6) && same(apic.v[3 * i + a], zero.v[3 * z + a], 1e-6);
      samex &= same(apic.x[3 * i + a], flip.x[3 * f + a], 1e-6);
      const double want = (double)in.v[3 * o + a] + (a == 1 ? g * dt : 0); /* v_p + g dt */
      worst_flip = fmax(worst_flip, fabs(flip.v[3 * f + a] - want));
      const double dxa = (double)adj.x[3 * j + a] - apic.x[3 * i + a], want_dx = dt * (want - apic.v[3 * i + a]);
      worst_adj = fmax(worst_adj, fabs(dxa - want_dx));
      const double mean = a == 0 ? 0.5 : a == 1 ? g * dt : 0;
      noise_apic += (apic.v[3 * i + a] - mean) * (apic.v[3 * i + a] - mean);
      noise_flip += (flip.v[3 * f + a] - mean) * (flip.v[3 * f + a] - mean);
    }
    for (int q = 0; q < 9; ++q) {
      same0 &= same(apic.C[9 * i + q], zero.C[9 * z + q], 1e-4) && same(apic.F[9 * i + q], zero.F[9 * z + q], 1e-6);
      samex &= same(apic.C[9 * i + q], flip.C[9 * f + q], 1e-4);
    }
  }
  printf("constructed cloud, one step: FLIP velocity off v_p + g dt by at most %.3g m/s; positional adjustment off "
         "dt (v_p + g dt - v_apic) by %.3g m; velocity noise (rms) APIC %.4f, FLIP %.4f m/s\n",
         worst_flip, worst_adj, sqrt(noise_apic / in.n / 3), sqrt(noise_flip / in.n / 3));
  CHECK(same0, "flip_blend 0 differs from APIC (positions, velocities, C or F)");
  CHECK(samex, "FLIP without positional adjustment moves particles differently from APIC (or C differs)");
  CHECK(worst_flip < 2e-5, "FLIP velocity off the particle's own velocity + g dt by %.3g m/s", worst_flip);
  CHECK(worst_adj < (test_backend_ == BACKEND_CUDA ? 2e-6 : 2e-7), "the positional adjustment moved particles by %.3g m more than dt alpha beta (v_p - v_old)",
        worst_adj);
  CHECK(noise_flip > 3 * noise_apic, "FLIP did not keep the noise APIC smooths (%.4g vs %.4g)", noise_flip, noise_apic);
  free(oa), free(oz), free(of), free(oj);
  particles_free(&in), particles_free(&apic), particles_free(&zero), particles_free(&flip), particles_free(&adj);
}

/* A dam break with a moving paddle: "transfer" "asflip" with flip_blend 0 against plain APIC. */
static const char *dam =
    "{\"domain\":{\"min\":[0,0,0],\"max\":[0.8,0.4,0.24],\"dx\":0.02},"
    "\"time\":{\"frames\":%d,\"fps\":25,\"cfl\":0.5},"
    "\"materials\":{\"water\":{\"model\":\"weakly_compressible\",\"density\":1000,\"bulk_modulus\":2e4,\"gamma\":7%s},"
    "\"jelly\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":5e4,\"poisson_ratio\":0.3%s}},"
    "\"bodies\":[{\"shape\":\"box\",\"min\":[0.04,0.04,0.04],\"max\":[0.3,0.3,0.2],\"material\":\"water\"},"
    "{\"shape\":\"sphere\",\"center\":[0.6,0.2,0.12],\"radius\":0.06,\"material\":\"jelly\",\"velocity\":[-1,0,0]}],"
    "\"boundary\":{\"type\":\"separate\",\"friction\":0.2},"
    "\"colliders\":[{\"shape\":\"box\",\"min\":[0.4,0.0,0.1],\"max\":[0.44,0.12,0.14],\"type\":\"slip\","
    "\"motion\":[{\"time\":0},{\"time\":0.4,\"translation\":[0,0,0.08],\"rotation\":{\"axis\":[0,1,0],\"angle\":90}}]}]}";

static void run(const char *water, const char *jelly, int frames, particles *out) {
  char json[4096];
  snprintf(json, sizeof json, dam, frames, water, jelly);
  scene s;
  scene_from_text(json, &s);
  sim *S = start(&s);
  for (int f = 1; f <= frames; ++f) MUST(sim_advance_frame(S));
  MUST(sim_particles(S, out));
  sim_destroy(&S);
  scene_destroy(&s);
}

static void whole_run(void) {
  particles a = {0}, b = {0};
  run("", "", 6, &a);
  run(",\"transfer\":\"asflip\",\"flip_blend\":0", ",\"transfer\":\"asflip\",\"flip_blend\":0,\"asflip_beta_min\":0.5",
      6, &b);
  CHECK(a.n == b.n, "particle counts differ");
  size_t *oa = order_by_id(&a), *ob = order_by_id(&b), differ = 0;
  double vmax = 0;
  for (size_t k = 0; k < a.n; ++k)
    for (int c = 0; c < 3; ++c) vmax = fmax(vmax, fabs(a.v[3 * k + c]));
  const double xt = 1e-4 * 0.8, vt = 1e-2 * vmax; /* cuda only (see the top) */
  for (size_t k = 0; k < a.n && a.n == b.n; ++k) {
    const size_t i = oa[k], j = ob[k];
    int eq = a.id[i] == b.id[j];
    for (int c = 0; c < 3; ++c) eq &= same(a.x[3 * i + c], b.x[3 * j + c], xt) && same(a.v[3 * i + c], b.v[3 * j + c], vt);
    if (test_backend_ != BACKEND_CUDA)
      for (int q = 0; q < 9; ++q) eq &= a.F[9 * i + q] == b.F[9 * j + q] && a.C[9 * i + q] == b.C[9 * j + q];
    differ += !eq;
  }
  printf("dam break with a paddle, 6 frames: ASFLIP with flip_blend 0 vs APIC: %zu of %zu particles differ\n", differ,
         a.n);
  CHECK(differ == 0, "ASFLIP with flip_blend 0 is not APIC%s (%zu particles differ)",
        test_backend_ == BACKEND_CUDA ? " within tolerance" : " bit for bit", differ);
  free(oa), free(ob);
  particles_free(&a), particles_free(&b);
}

int main(int argc, char **argv) {
  choose_backend(argc, argv);
  init(&argc, &argv);
  constructed();
  whole_run();
  return finish("test_asflip");
}

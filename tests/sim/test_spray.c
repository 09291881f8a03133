/* Spray of weakly compressible water: particles that fly alone, or in clumps too small to fill
 * their nodes, stay bounded under the adaptive step (the Fountain benchmark's failure,
 * jobs/bench/fountain.json: "particle 11796 ... reached a non-finite state or a runaway speed").
 *
 * A particle alone in the air has no neighbours on its 27 nodes, and APIC keeps its affine
 * velocity C from step to step: its volume J = det F is an oscillator of its own, pushed by its
 * own pressure through its own nodes (frequency sqrt(12) c / dx with quadratic B-splines). With
 * tension in the equation of state (p = K (J^-gamma - 1) < 0 for J > 1), a lone particle that
 * broke off compressed (J 0.9), or one that spins (a skew C of 216 /s, what the Fountain's spray
 * particle 23373 carried, whose F <- (I + dt C) F gained dt^2 |C|^2 / 2 of volume every step),
 * oscillated with a growing amplitude at the adaptive step's c dt / dx ~ 0.55 until one step
 * threw J below zero and the particle away: the CPU backend's Fountain run died so at frame 132,
 * step 6118, J of particle 23373 going 1.03, 1.01, 0.74, then 7e4. physics/constitutive.h now
 * keeps the liquid free of tension (J clamped to [0.1, 1], as the claymore-based reference
 * kernels do) and advances only J in G2P (J <- J (1 + dt tr C)).
 *
 * Each case: water particles (gamma 7, K 1e4 Pa, dx 0.66 cm: the Fountain's), no gravity, far
 * from the walls (a 1 m box), 1500 steps of sim.c's adaptive step dt = cfl dx / (c + max |v|), cfl 0.6, with
 * max |v| from the backend after each G2P. Checks: no step fails (backend.h's runaway check), and
 * at the end every particle's J lies in [0.1, 1] after the constitutive clamp, its speed is at
 * most its initial speed + 1 m/s (no force acts on a lone particle but its own pressure, which
 * has nothing to push against), and it moved at most that fast on the whole. Before the fix
 * three cases ran away (at steps 15, 26 and 1016: speeds of 1e2 to 4e4 m/s) and the two others
 * ended stretched, under tension (J 1.0002 for the spinning one, 10 for the one that was
 * compressed and spinning). The backend comes from argv[1] (cpu or cuda). */
#include "simtest.h"

#include "backend.h"

#define STEPS 1500
#define DX 0.0066f

typedef struct spray_case {
  const char *what;
  int n;      /* particles: 1 alone, 8 a clump in one cell */
  float J0;   /* initial volume ratio */
  float spin; /* skew part of C (1/s) */
  float v[3]; /* initial velocity (m/s) */
} spray_case;

static void run(const spray_case *k) {
  material_params m;
  memset(&m, 0, sizeof m);
  material_from_user(&m, MODEL_WEAKLY_COMPRESSIBLE, 1000.0f, 0.0f, 0.0f, 0.0f, 1.0e4f, 7.0f);
  m.transfer = TRANSFER_ASFLIP; /* the Fountain's: scene.c's defaults */
  m.flip_blend = 0.99f;
  m.beta_min = 0.0f;
  m.beta_max = 1.0f;
  const char *names[1] = {"water"};
  sim_params prm;
  memset(&prm, 0, sizeof prm);
  for (int a = 0; a < 3; ++a) prm.domain_min[a] = 0, prm.domain_max[a] = 1.0;
  prm.dx = DX;
  for (int f = 0; f < DR_FACES; ++f) prm.boundary.type[f] = BOUNDARY_SLIP;
  prm.n_materials = 1;
  prm.materials = &m;
  prm.material_names = names;
  particles p = {0};
  const float vol = DX * DX * DX / 27.0f, c3 = cbrtf(k->J0);
  float speed0 = 0.0f;
  for (int i = 0; i < k->n; ++i) {
    /* a clump: 2 x 2 x 2 particles 0.17 dx apart inside one cell */
    const float x[3] = {0.5013f + 0.0011f * (float)(i % 2), 0.4977f + 0.0011f * (float)((i / 2) % 2),
                        0.5001f + 0.0011f * (float)(i / 4)};
    MUST(particles_push(&p, x, k->v, 1000.0f * vol, vol, (uint64_t)i, 0));
    float *F = p.F + 9 * i, *C = p.C + 9 * i;
    for (int q = 0; q < 9; ++q) F[q] = (q % 4 == 0) ? c3 : 0.0f;
    C[1] = k->spin, C[3] = -k->spin;             /* about z */
    C[5] = 0.3f * k->spin, C[7] = -0.3f * k->spin; /* and x */
  }
  speed0 = sqrtf(k->v[0] * k->v[0] + k->v[1] * k->v[1] + k->v[2] * k->v[2]);
  backend b;
  MUST(backend_create(test_backend_ >= 0 ? test_backend_ : BACKEND_CPU, &prm, &p, &b));
  particles_free(&p);
  const double c = constitutive_wave_speed(&m), cfl = 0.6;
  float vmax = speed0;
  double t = 0.0;
  int failed = -1;
  for (int s = 0; s < STEPS; ++s) {
    const float dt = (float)(cfl * DX / (c + vmax));
    int rebuilt;
    if (b.set_time) MUST(b.set_time(b.state, t));
    MUST(b.rebuild(b.state, 0, &rebuilt));
    MUST(b.p2g(b.state, dt));
    MUST(b.grid_update(b.state, dt));
    if (b.g2p(b.state, dt) != DR_OK) {
      failed = s;
      break;
    }
    MUST(b.max_speed(b.state, &vmax));
    t += dt;
  }
  CHECK(failed < 0, "%s: step %d failed: %s", k->what, failed, dr_message());
  particles out = {0};
  MUST(b.download(b.state, &out));
  double jmin = 1e30, jmax = -1e30, vfast = 0.0, moved = 0.0;
  for (size_t i = 0; i < out.n; ++i) {
    float F[9], tau[9];
    memcpy(F, out.F + 9 * i, sizeof F);
    constitutive_update(&m, F, tau); /* the J the next P2G uses */
    const double J = m3_det(F);
    const float *v = out.v + 3 * i, *x = out.x + 3 * i;
    jmin = fmin(jmin, J), jmax = fmax(jmax, J);
    vfast = fmax(vfast, sqrt((double)v[0] * v[0] + (double)v[1] * v[1] + (double)v[2] * v[2]));
    const double d[3] = {x[0] - 0.5013, x[1] - 0.4977, x[2] - 0.5001};
    moved = fmax(moved, sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]));
  }
  printf("  %-44s J in [%.4f, %.4f], max speed %.3f m/s (initially %.3f), moved %.4f m, t %.3f s\n", k->what,
         jmin, jmax, vfast, speed0, moved, t);
  if (failed < 0) {
    CHECK(jmin >= DR_WC_J_MIN * (1 - 1e-5) && jmax <= 1.0 + 1e-5, "%s: J in [%g, %g]", k->what, jmin, jmax);
    CHECK(vfast <= speed0 + 1.0, "%s: speed %g m/s from %g", k->what, vfast, speed0);
    CHECK(moved <= (speed0 + 1.0) * t, "%s: moved %g m in %g s", k->what, moved, t);
  }
  particles_free(&out);
  backend_destroy(&b);
}

int main(int argc, char **argv) {
  choose_backend(argc, argv);
  init(&argc, &argv);
  printf("test_spray: lone and clumped water particles under the adaptive step\n");
  const spray_case cases[] = {
      {"alone, spinning 216 /s (the Fountain's 23373)", 1, 1.0f, 216.0f, {-0.495f, 0.267f, 0.179f}},
      {"alone, compressed J 0.9", 1, 0.9f, 0.0f, {0.2f, -0.5f, 0.1f}},
      {"alone, compressed J 0.98, spinning", 1, 0.98f, 150.0f, {0.2f, -0.5f, 0.1f}},
      {"clump of 8, compressed J 0.96", 8, 0.96f, 0.0f, {0.2f, -0.5f, 0.1f}},
      {"clump of 8, compressed J 0.9, spinning", 8, 0.9f, 150.0f, {-0.5f, 0.25f, 0.1f}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) run(&cases[i]);
  return finish("test_spray");
}

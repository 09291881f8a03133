/* Colliders in whole simulations:
 *   - a ball of sand dropped on a static sphere collider (separate, with friction) flows around
 *     it and comes to rest: no particle gets deeper into the sphere than half a cell, at any
 *     frame (the sand spreads on the floor and piles against the sphere's foot);
 *   - a box collider moving at a constant speed (a piston) pushes a layer of sand along a
 *     frictionless floor at its own speed: the material touching its face moves at the piston's
 *     speed, and none gets behind its face;
 *   - a sticky box collider sliding under an elastic block (a conveyor plate) drags the block
 *     with it at its speed; the same plate with slip walls leaves the block where it was;
 *   - a turning sticky cylinder carries the material stuck to it at its surface speed.
 * The expectations are the colliders' own motions (analytic), not numbers from earlier runs. */
#include "simtest.h"

/* Smallest signed distance of the particles to a sphere (m). */
static double sphere_clearance(const particles *p, const double c[3], double r) {
  double m = INFINITY;
  for (size_t i = 0; i < p->n; ++i) {
    const float *x = p->x + 3 * i;
    m = fmin(m, sqrt((x[0] - c[0]) * (x[0] - c[0]) + (x[1] - c[1]) * (x[1] - c[1]) + (x[2] - c[2]) * (x[2] - c[2])) - r);
  }
  return m;
}

static void drop_on_sphere(void) {
  const double dx = 0.025, c[3] = {0.4, 0.25, 0.4}, r = 0.12;
  const char *json =
      "{\"domain\":{\"min\":[0,0,0],\"max\":[0.8,0.8,0.8],\"dx\":0.025},"
      "\"time\":{\"frames\":30,\"fps\":30,\"cfl\":0.5},"
      "\"materials\":{\"sand\":{\"model\":\"drucker_prager\",\"density\":1600,\"youngs_modulus\":1e5,"
      "\"poisson_ratio\":0.3,\"friction_angle\":35}},"
      "\"bodies\":[{\"shape\":\"sphere\",\"center\":[0.41,0.49,0.4],\"radius\":0.1,\"material\":\"sand\"}],"
      "\"boundary\":{\"type\":\"separate\"},"
      "\"colliders\":[{\"shape\":\"sphere\",\"center\":[0.4,0.25,0.4],\"radius\":0.12,\"type\":\"separate\",\"friction\":0.5}]}";
  scene s;
  scene_from_text(json, &s);
  sim *S = start(&s);
  particles p = {0};
  double worst = INFINITY;
  int touched = 0;
  for (int f = 1; f <= s.frames; ++f) {
    MUST(sim_advance_frame(S));
    MUST(sim_particles(S, &p));
    const double d = sphere_clearance(&p, c, r);
    worst = fmin(worst, d);
    touched |= d < dx;
  }
  /* at rest: the RMS speed, and all but a few grains slow (at this resolution single grains
   * still drop off the sphere's underside at the end, at up to 2 m/s) */
  double v2 = 0;
  size_t fast = 0;
  for (size_t i = 0; i < p.n; ++i) {
    const float *v = p.v + 3 * i;
    const double sp2 = (double)v[0] * v[0] + (double)v[1] * v[1] + (double)v[2] * v[2];
    v2 += sp2;
    fast += sp2 > 0.25;
  }
  const double rms = sqrt(v2 / (double)p.n);
  printf("sand on a sphere: deepest particle %.4f dx inside the sphere; at the end RMS speed %.3f m/s, %zu of %zu "
         "particles faster than 0.5 m/s\n", -worst / dx, rms, fast, p.n);
  CHECK(touched, "the sand never reached the sphere");
  CHECK(worst > -0.5 * dx, "a particle got %.3f dx into the sphere (at most 0.5 allowed)", -worst / dx);
  CHECK(rms < 0.15 && fast <= p.n / 100, "the sand is not coming to rest (RMS speed %.3f m/s, %zu particles faster "
        "than 0.5 m/s)", rms, fast);
  particles_free(&p);
  sim_destroy(&S);
  scene_destroy(&s);
}

/* A piston: a box collider that starts moving at V along x at t = 0.1 s. */
static void piston(void) {
  const double dx = 0.02, V = 0.5, face0 = 0.12, t_start = 0.1;
  const char *json =
      "{\"domain\":{\"min\":[0,0,0],\"max\":[1.2,0.4,0.2],\"dx\":0.02},"
      "\"time\":{\"frames\":24,\"fps\":40,\"cfl\":0.5},"
      "\"materials\":{\"sand\":{\"model\":\"drucker_prager\",\"density\":1600,\"youngs_modulus\":5e4,"
      "\"poisson_ratio\":0.3,\"friction_angle\":30}},"
      "\"bodies\":[{\"shape\":\"box\",\"min\":[0.14,0.04,0.04],\"max\":[0.5,0.14,0.16],\"material\":\"sand\"}],"
      "\"boundary\":{\"type\":\"slip\"},"
      "\"colliders\":[{\"shape\":\"box\",\"min\":[-0.2,-0.1,-0.1],\"max\":[0.12,0.5,0.3],\"type\":\"separate\","
      "\"motion\":[{\"time\":0.1},{\"time\":10.1,\"translation\":[5,0,0]}]}]}";
  scene s;
  scene_from_text(json, &s);
  sim *S = start(&s);
  particles p = {0};
  double worst = INFINITY, vfront = 0;
  for (int f = 1; f <= s.frames; ++f) {
    MUST(sim_advance_frame(S));
    MUST(sim_particles(S, &p));
    const double t = f / 40.0, face = face0 + (t > t_start ? V * (t - t_start) : 0);
    double sum = 0, mass = 0;
    for (size_t i = 0; i < p.n; ++i) {
      const double x = p.x[3 * i];
      worst = fmin(worst, x - face);
      if (x < face + 2 * dx) sum += p.mass[i] * p.v[3 * i], mass += p.mass[i];
    }
    vfront = mass > 0 ? sum / mass : 0;
    if (f % 4 == 0)
      printf("t %.3f s  piston face %.3f m  material in front moves at %.4f m/s  (furthest behind the face %.3f dx)\n", t,
             face, vfront, -worst / dx);
  }
  CHECK(fabs(vfront - V) < 0.05 * V, "the material at the piston moves at %.4f m/s, the piston at %.2f", vfront, V);
  CHECK(worst > -0.5 * dx, "a particle got %.3f dx behind the piston face", -worst / dx);
  particles_free(&p);
  sim_destroy(&S);
  scene_destroy(&s);
}

/* An elastic block on a plate (a box collider) that slides along x at V. */
static double conveyor(const char *type, double *x_shift) {
  const double V = 0.4;
  char json[2048];
  snprintf(json, sizeof json,
           "{\"domain\":{\"min\":[0,0,0],\"max\":[1.0,0.4,0.3],\"dx\":0.02},"
           "\"time\":{\"frames\":16,\"fps\":40,\"cfl\":0.5},"
           "\"materials\":{\"jelly\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":5e4,"
           "\"poisson_ratio\":0.3}},"
           "\"bodies\":[{\"shape\":\"box\",\"min\":[0.2,0.15,0.08],\"max\":[0.36,0.25,0.22],\"material\":\"jelly\"}],"
           "\"boundary\":{\"type\":\"slip\"},"
           "\"colliders\":[{\"shape\":\"box\",\"min\":[-0.5,0.05,-0.1],\"max\":[0.6,0.15,0.4],\"type\":\"%s\","
           "\"motion\":[{\"time\":0},{\"time\":1,\"translation\":[%g,0,0]}]}]}",
           type, V);
  scene s;
  scene_from_text(json, &s);
  sim *S = start(&s);
  particles p = {0};
  MUST(sim_particles(S, &p));
  const double x0 = measure(&s, &p).com[0];
  double vsum = 0; /* the block rocks on the plate: its mean velocity over the second half */
  moments m;
  for (int f = 1; f <= s.frames; ++f) {
    MUST(sim_advance_frame(S));
    MUST(sim_particles(S, &p));
    m = measure(&s, &p);
    if (2 * f > s.frames) vsum += m.momentum[0] / m.mass / (s.frames - s.frames / 2);
  }
  *x_shift = m.com[0] - x0;
  particles_free(&p);
  sim_destroy(&S);
  scene_destroy(&s);
  return vsum;
}

/* A sticky cylinder along z turning at w rad/s about its axis, half sunk into a fluid layer:
 * the fluid stuck to it moves at its surface speed w r. */
static void turning_cylinder(void) {
  const double w = 4.0, r = 0.1, cx = 0.3, cy = 0.2, dx = 0.02;
  char json[2048];
  snprintf(json, sizeof json,
           "{\"domain\":{\"min\":[0,0,0],\"max\":[0.6,0.4,0.12],\"dx\":0.02},"
           "\"time\":{\"frames\":8,\"fps\":40,\"cfl\":0.5},\"gravity\":[0,0,0],"
           "\"materials\":{\"jelly\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":1e4,"
           "\"poisson_ratio\":0.3}},"
           "\"bodies\":[{\"shape\":\"cylinder\",\"center\":[%g,%g,0.06],\"axis\":[0,0,1],\"radius\":%g,\"height\":0.12,"
           "\"material\":\"jelly\",\"ppc\":8}],"
           "\"boundary\":{\"type\":\"slip\"},"
           "\"colliders\":[{\"shape\":\"cylinder\",\"center\":[%g,%g,0.06],\"axis\":[0,0,1],\"radius\":%g,\"height\":1,"
           "\"type\":\"sticky\",\"motion\":[{\"time\":0},{\"time\":0.5,\"rotation\":{\"axis\":[0,0,1],\"angle\":%g}}]}]}",
           cx, cy, r + 0.04, cx, cy, r, w * 0.5 * 180 / 3.14159265358979);
  scene s;
  scene_from_text(json, &s);
  sim *S = start(&s);
  for (int f = 1; f <= s.frames; ++f) MUST(sim_advance_frame(S));
  particles p = {0};
  MUST(sim_particles(S, &p));
  /* the tangential speed of the particles inside the collider, against w times their radius */
  double err = 0, sum = 0;
  int n = 0;
  for (size_t i = 0; i < p.n; ++i) {
    const double x = p.x[3 * i] - cx, y = p.x[3 * i + 1] - cy, rho = hypot(x, y);
    if (rho > r - 1.5 * dx || rho < 2 * dx) continue;
    const double vt = (-y * p.v[3 * i] + x * p.v[3 * i + 1]) / rho;
    err = fmax(err, fabs(vt - w * rho));
    sum += vt / (w * rho);
    ++n;
  }
  printf("turning cylinder: %d particles inside it, tangential speed / (w r) = %.4f on average, worst error %.4f m/s\n", n,
         n ? sum / n : 0, err);
  CHECK(n > 100, "too few particles inside the cylinder (%d)", n);
  CHECK(n > 0 && fabs(sum / n - 1) < 0.02, "material in the turning cylinder moves at %.4f of its speed", sum / n);
  CHECK(err < 0.02 * w * r, "a particle in the turning cylinder is off its speed by %.4f m/s", err);
  particles_free(&p);
  sim_destroy(&S);
  scene_destroy(&s);
}

int main(int argc, char **argv) {
  choose_backend(argc, argv);
  init(&argc, &argv);
  double t0 = MPI_Wtime();
  drop_on_sphere();
  printf("(%.1f s)\n", MPI_Wtime() - t0);
  t0 = MPI_Wtime();
  piston();
  printf("(%.1f s)\n", MPI_Wtime() - t0);
  t0 = MPI_Wtime();
  double shift_sticky, shift_slip;
  const double v_sticky = conveyor("sticky", &shift_sticky), v_slip = conveyor("slip", &shift_slip);
  printf("(%.1f s)\n", MPI_Wtime() - t0);
  printf("conveyor plate at 0.4 m/s for 0.4 s: sticky block at %.4f m/s on average over the last 0.2 s (moved %.4f "
         "m), slip block at %.4f m/s (moved "
         "%.4f m)\n",
         v_sticky, shift_sticky, v_slip, shift_slip);
  CHECK(fabs(v_sticky - 0.4) < 0.02, "the sticky plate drags the block at %.4f m/s, expected 0.4", v_sticky);
  CHECK(fabs(shift_sticky - 0.16) < 0.02, "the sticky plate moved the block %.4f m, expected 0.16", shift_sticky);
  CHECK(fabs(v_slip) < 0.01 && fabs(shift_slip) < 0.005, "the slip plate moved the block (%.4f m/s, %.4f m)", v_slip,
        shift_slip);
  turning_cylinder();
  return finish("test_colliders");
}

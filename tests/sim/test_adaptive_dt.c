/* test_adaptive_dt - the adaptive substep (time.dt absent) against its rule, recomputed here:
 * dt = cfl dx / (c + vmax), c the largest wave speed of the scene's materials (sqrt((lambda + 2
 * mu) / rho) for an elastic one) and vmax the largest particle speed; where dt reaches what is
 * left of the frame the step takes what is left, and where it is more than half of it the last
 * two steps share it, so that the frame ends exactly at its time (docs/scene-format.md, time.cfl).
 * A rubber box moving at 30 m/s in an empty domain without gravity, where the speed rules the
 * step (c = 3.67 m/s): a rigid translation keeps every particle's speed at 30 m/s, so the number of
 * substeps of each frame is the rule's, from the first step on (the bodies' initial velocity is
 * part of the first dt, as `drift check` prints it). The count is taken for the speed 30 m/s give
 * or take 1e-4 (float rounding of the transfers), and each frame must end at f / fps. Then a
 * resting box beside a source that emits at 30 m/s from the second frame's start: the first
 * frame's steps are the rule's at rest (the source's speed is not yet any particle's), the
 * second's at 30 m/s from its first step on (scene-format.md: the first step after an emission
 * takes the emitted speed into account). */
#include "simtest.h"

/* Substeps of one frame by the rule at speed v, and the last one's dt. */
static int rule_steps(double cfl, double dx, double c, double v, double frame, double *last) {
  double t = 0.0;
  int k = 0;
  while (frame - t > 1e-9 * frame) {
    double dt = cfl * dx / (c + v);
    const double rem = frame - t;
    if (dt >= rem) dt = rem;
    else if (dt > 0.5 * rem) dt = 0.5 * rem;
    t += dt;
    *last = dt;
    ++k;
  }
  return k;
}

/* frame f's substeps and last dt against the rule at speed v (give or take 1e-4), and its end. */
static void check_frame(sim *S, int f, uint64_t *before, double cfl, double dx, double c, double v, double frame) {
  double last_lo = 0, last_hi = 0;
  const int lo = rule_steps(cfl, dx, c, v * (1 - 1e-4), frame, &last_lo),
            hi = rule_steps(cfl, dx, c, v * (1 + 1e-4), frame, &last_hi);
  const double last_min = fmin(last_lo, last_hi) * (1 - 1e-6), last_max = fmax(last_lo, last_hi) * (1 + 1e-6);
  const sim_status *st = sim_get_status(S);
  const int steps = (int)(st->steps - *before);
  *before = st->steps;
  printf("frame %d: %d substeps (the rule: %d to %d at %.4g m/s, c %.4g m/s), the last %.6g s (the rule: %.6g to "
         "%.6g), t %.17g\n", f, steps, lo, hi, v, c, st->last_dt, last_min, last_max, st->time);
  CHECK(steps >= lo && steps <= hi, "frame %d: %d substeps, the rule gives %d to %d", f, steps, lo, hi);
  CHECK(st->last_dt >= last_min && st->last_dt <= last_max, "frame %d: the last substep %.9g s, the rule gives %.9g to %.9g",
        f, st->last_dt, last_min, last_max);
  CHECK(fabs(st->time - f * frame) <= 1e-12, "frame %d ends at t = %.17g, expected %.17g", f, st->time, f * frame);
}

/* A resting box and a source at 30 m/s whose first particles are born at the second frame's start. */
static void emitted(double cfl, double dx, double c, double v, double frame) {
  const char *json =
      "{\"domain\":{\"min\":[0,0,0],\"max\":[6,1,1],\"dx\":0.05},"
      "\"time\":{\"frames\":2,\"fps\":24,\"cfl\":0.5},\"gravity\":[0,0,0],"
      "\"materials\":{\"rubber\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":1e4,"
      "\"poisson_ratio\":0.3}},"
      "\"bodies\":[{\"shape\":\"box\",\"min\":[4.4,0.4,0.4],\"max\":[4.6,0.6,0.6],\"material\":\"rubber\",\"ppc\":8},"
      "{\"shape\":\"box\",\"min\":[0.4,0.4,0.4],\"max\":[0.6,0.6,0.6],\"material\":\"rubber\",\"ppc\":8,"
      "\"velocity\":[30,0,0],\"emit\":{\"rate\":2000,\"start\":0,\"end\":0.03}}]}";
  scene s;
  scene_from_text(json, &s);
  sim *S = start(&s);
  uint64_t before = 0;
  MUST(sim_advance_frame(S));
  check_frame(S, 1, &before, cfl, dx, c, 0.0, frame);
  MUST(sim_advance_frame(S));
  check_frame(S, 2, &before, cfl, dx, c, v, frame);
  CHECK(sim_get_status(S)->particles == 512 + 60, "%llu particles, expected 512 and the source's 60",
        (unsigned long long)sim_get_status(S)->particles);
  sim_destroy(&S);
  scene_destroy(&s);
}

int main(int argc, char **argv) {
  choose_backend(argc, argv);
  init(&argc, &argv);
  const char *json =
      "{\"domain\":{\"min\":[0,0,0],\"max\":[6,1,1],\"dx\":0.05},"
      "\"time\":{\"frames\":2,\"fps\":24,\"cfl\":0.5},\"gravity\":[0,0,0],"
      "\"materials\":{\"rubber\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":1e4,"
      "\"poisson_ratio\":0.3}},"
      "\"bodies\":[{\"shape\":\"box\",\"min\":[0.4,0.4,0.4],\"max\":[0.6,0.6,0.6],\"material\":\"rubber\","
      "\"ppc\":8,\"velocity\":[30,0,0]}]}";
  scene s;
  scene_from_text(json, &s);
  const double e = 1e4, nu = 0.3, rho = 1000.0, v = 30.0, cfl = 0.5, dx = 0.05, frame = 1.0 / 24.0;
  const double mu = e / (2 * (1 + nu)), lambda = e * nu / ((1 + nu) * (1 - 2 * nu));
  const double c = sqrt((lambda + 2 * mu) / rho);
  sim *S = start(&s);
  uint64_t before = 0;
  for (int f = 1; f <= 2; ++f) {
    MUST(sim_advance_frame(S));
    check_frame(S, f, &before, cfl, dx, c, v, frame);
  }
  particles p = {0};
  MUST(sim_particles(S, &p));
  double vmin = 1e30, vmax = 0;
  for (size_t i = 0; i < p.n; ++i) {
    const double sp = sqrt(p.v[3 * i] * p.v[3 * i] + p.v[3 * i + 1] * p.v[3 * i + 1] + p.v[3 * i + 2] * p.v[3 * i + 2]);
    vmin = fmin(vmin, sp), vmax = fmax(vmax, sp);
  }
  CHECK(vmin > v * (1 - 1e-4) && vmax < v * (1 + 1e-4), "the speeds spread over %.9g to %.9g m/s (a rigid translation)",
        vmin, vmax);
  particles_free(&p);
  sim_destroy(&S);
  scene_destroy(&s);
  emitted(cfl, dx, c, v, frame);
  return finish("test_adaptive_dt");
}

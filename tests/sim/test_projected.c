/* A state that already holds the next step's return mapping continues as if it had never been
 * interrupted (backend.set_projected, issue 10: a checkpoint written after the CUDA backend's
 * fused G2P2G steps, whose P2G of the next step had projected F and logJp in place).
 *
 * Snow (NACC, the Crawling in Snow parameters but a lighter initial compression) pulled apart:
 * a 12-cell cube whose particles move away from its centre at 10 m/s per metre, so that most of them yield on the tension side every
 * step, where NACC's mapping is not idempotent (it softens: p0 shrinks and leaves the returned
 * state outside the smaller surface). Run A steps on; at step K its particles are copied out
 * right after a P2G (the mapping of step K applied, the grid not yet updated) into run B, which
 * is told so (set_projected), and into run C, which is not. B and C then take step K's P2G again
 * and go on to step K + M with A. B must follow A to rounding (its first P2G computes the stress
 * of the state as it is); C applies the mapping a second time, and the test checks that this
 * makes a difference at all, many times B's (so that the check of B can fail).
 *
 * argv[1] (cpu or cuda) picks the backend. On the CUDA backend a second case takes the path
 * users meet: A runs whole frames with fused G2P2G (fixed steps, below g2p2g_below particles),
 * after which backend.projected must say 1; B is created from A's particles as a resumed run
 * would be, told set_projected, and both run the next frame (the first P2G of B's frame is the
 * priming P2G of the G2P2G path). */
#include "simtest.h"

#include "backend.h"

#define DX 0.02f
#define DT 1e-4f
#define STEPS_K 20 /* steps before the copy */
#define STEPS_M 3   /* steps after it: tearing snow amplifies rounding about tenfold per step, so
                     * that after 10 steps two runs whose states differed by float rounding alone
                     * differ in logJp by 2e-3 (CPU, deterministic sums), as much as one extra
                     * mapping makes; after 3, by 1e-5 against 3e-2 */

static material_params snow(void) {
  material_params m;
  memset(&m, 0, sizeof m);
  /* the Crawling in Snow values of jobs/scenes (bulk 5e5 Pa, nu 0.3, M 0.8, beta 0.9, xi 5) */
  material_nacc_from_user(&m, 400.0f, 5.0e5f, 0.3f, 0.8f, 0.9f, 5.0f, -0.01f);
  return m;
}

static sim_params params(const material_params *m) {
  static const char *names[1] = {"snow"};
  sim_params prm;
  memset(&prm, 0, sizeof prm);
  for (int a = 0; a < 3; ++a) prm.domain_min[a] = 0, prm.domain_max[a] = 0.8;
  prm.dx = DX;
  for (int f = 0; f < DR_FACES; ++f) prm.boundary.type[f] = BOUNDARY_SLIP;
  prm.n_materials = 1;
  prm.materials = m;
  prm.material_names = names;
  prm.g2p2g_below = 100000; /* the default: fused G2P2G on the CUDA backend's frames */
  return prm;
}

/* A 12-cell cube at 8 particles per cell, moving away from its centre (0.4, 0.4, 0.4). */
static void cube(const material_params *m, particles *p) {
  const int n = 24; /* particles per edge: 12 cells x 2 */
  const float h = 0.5f * DX, vol = h * h * h;
  uint64_t id = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k) {
        const float x[3] = {0.28f + h * (i + 0.5f), 0.28f + h * (j + 0.5f), 0.28f + h * (k + 0.5f)};
        const float v[3] = {10.0f * (x[0] - 0.4f), 10.0f * (x[1] - 0.4f), 10.0f * (x[2] - 0.4f)};
        MUST(particles_push(p, x, v, m->density * vol, vol, id++, 0));
        p->logjp[p->n - 1] = m->nacc_logjp0;
      }
}

static void step(backend *b, int p2g) {
  int rebuilt;
  if (p2g) {
    MUST(b->rebuild(b->state, 0, &rebuilt));
    MUST(b->p2g(b->state, DT));
  }
  MUST(b->grid_update(b->state, DT));
  MUST(b->g2p(b->state, DT));
}

/* Largest differences of x (m) and logJp between two particle sets, by id, and how many
 * particles' logJp differ by more than B's tolerance (1e-4): one or two such particles point to
 * a yield decision that rounding flipped, many to a state that is wrong. */
static void compare(const particles *a, const particles *b, double *dx, double *dj, size_t *n_off) {
  CHECK(a->n == b->n, "%zu particles against %zu", a->n, b->n);
  size_t *ia = order_by_id(a), *ib = order_by_id(b);
  *dx = *dj = 0.0;
  *n_off = 0;
  for (size_t q = 0; q < a->n && a->n == b->n; ++q) {
    const size_t i = ia[q], j = ib[q];
    CHECK(a->id[i] == b->id[j], "ids differ at %zu", q);
    for (int c = 0; c < 3; ++c) *dx = fmax(*dx, fabs((double)a->x[3 * i + c] - b->x[3 * j + c]));
    const double d = fabs((double)a->logjp[i] - b->logjp[j]);
    *dj = fmax(*dj, d);
    *n_off += d > 1e-4;
  }
  free(ia);
  free(ib);
}

/* The runs told (B) and not told (C) against the uninterrupted one (A): B follows A to
 * rounding, C does not, and C's difference is large enough that B's check can fail. */
static void judge(const char *what, const particles *pa, const particles *pb, const particles *pc) {
  double bx, bj, cx, cj;
  size_t bn, cn;
  compare(pa, pb, &bx, &bj, &bn);
  compare(pa, pc, &cx, &cj, &cn);
  printf("  %s: after %d more steps, told: max |dx| %.3g m, |dlogJp| %.3g (%zu particles above 1e-4); not told "
         "(the mapping twice): %.3g m, %.3g (%zu particles)\n", what, STEPS_M, bx, bj, bn, cx, cj, cn);
  CHECK(cj > 1e-3, "%s: applying the mapping twice changed logJp by %g only: the case cannot tell", what, cj);
  CHECK(bj <= 1e-4 && bj * 100 <= cj, "%s: told: logJp differs by %g (the mapping twice: %g)", what, bj, cj);
  CHECK(bx <= 1e-6 && bx * 20 <= cx, "%s: told: x differs by %g m (the mapping twice: %g m)", what, bx, cx);
}

static int backend_kind(void) { return test_backend_ >= 0 ? test_backend_ : BACKEND_CPU; }

/* A backend of this test's kind holding a copy of p. */
static void start_from(const particles *p, const sim_params *prm, backend *b) {
  particles copy = {0};
  for (size_t i = 0; i < p->n; ++i) MUST(particles_push_copy(&copy, p, i));
  MUST(backend_create(backend_kind(), prm, &copy, b));
  particles_free(&copy);
}

/* Particles whose logJp moved in the last step (yielding): the mapping was at work. */
static size_t yielding(const particles *before, const particles *after) {
  size_t *ia = order_by_id(before), *ib = order_by_id(after), n = 0;
  for (size_t q = 0; q < before->n && before->n == after->n; ++q) n += before->logjp[ia[q]] != after->logjp[ib[q]];
  free(ia);
  free(ib);
  return n;
}

/* The phase-by-phase steps of backend.h (both backends). */
static void phases(void) {
  const material_params m = snow();
  const sim_params prm = params(&m);
  particles p0 = {0}, mid = {0}, before = {0}, pa = {0}, pb = {0}, pc = {0};
  cube(&m, &p0);
  backend A, B, C;
  MUST(backend_create(backend_kind(), &prm, &p0, &A));
  for (int s = 0; s < STEPS_K; ++s) step(&A, 1);
  MUST(A.download(A.state, &before));
  int rebuilt;
  MUST(A.rebuild(A.state, 0, &rebuilt));
  MUST(A.p2g(A.state, DT)); /* step K's mapping, applied in place */
  MUST(A.download(A.state, &mid));
  const size_t n_yield = yielding(&before, &mid);
  step(&A, 0);
  for (int s = 1; s < STEPS_M; ++s) step(&A, 1);
  MUST(A.download(A.state, &pa));

  start_from(&mid, &prm, &B);
  CHECK(B.set_projected != NULL, "the %s backend has no set_projected", B.name);
  if (B.set_projected) MUST(B.set_projected(B.state));
  for (int s = 0; s < STEPS_M; ++s) step(&B, 1);
  MUST(B.download(B.state, &pb));

  start_from(&mid, &prm, &C);
  for (int s = 0; s < STEPS_M; ++s) step(&C, 1);
  MUST(C.download(C.state, &pc));

  printf("  phases (%s): %zu of %zu particles yield at step %d\n", A.name, n_yield, mid.n, STEPS_K + 1);
  CHECK(n_yield > mid.n / 2, "only %zu of %zu particles yield: the case does not test the mapping", n_yield, mid.n);
  judge("phases", &pa, &pb, &pc);
  particles_free(&mid);
  particles_free(&before);
  particles_free(&pa);
  particles_free(&pb);
  particles_free(&pc);
  backend_destroy(&A);
  backend_destroy(&B);
  backend_destroy(&C);
}

/* One frame of n fixed steps through advance_frame, as sim.c plans it. */
static void frame(backend *b, int f, int n) {
  frame_plan plan;
  memset(&plan, 0, sizeof plan);
  plan.t0 = plan.t_start = (double)f * n * DT;
  plan.t1 = (double)(f + 1) * n * DT;
  plan.fixed_steps = n;
  plan.dt_fixed = DT;
  plan.vmax0 = -1.0f;
  frame_report rep;
  MUST(b->advance_frame(b->state, &plan, &rep));
  CHECK(rep.steps == (uint64_t)n && !rep.stopped, "frame %d: %llu steps of %d", f, (unsigned long long)rep.steps, n);
}

/* The CUDA backend's frames with fused G2P2G: the checkpoint's flag and the resumed run. */
static void frames(void) {
  const material_params m = snow();
  const sim_params prm = params(&m);
  particles p0 = {0}, mid = {0}, pa = {0}, pb = {0}, pc = {0};
  cube(&m, &p0);
  backend A, B, C;
  MUST(backend_create(backend_kind(), &prm, &p0, &A));
  if (!A.advance_frame || !A.projected) {
    printf("  frames: the %s backend runs no frames of its own: nothing to check\n", A.name);
    backend_destroy(&A);
    return;
  }
  frame(&A, 0, STEPS_K);
  CHECK(A.projected(A.state) == 1, "after a frame of fused G2P2G steps, projected says %d", A.projected(A.state));
  MUST(A.download(A.state, &mid));
  frame(&A, 1, STEPS_M);
  MUST(A.download(A.state, &pa));

  start_from(&mid, &prm, &B);
  CHECK(B.projected(B.state) == 0, "a backend given particles says projected %d", B.projected(B.state));
  MUST(B.set_projected(B.state));
  frame(&B, 1, STEPS_M);
  MUST(B.download(B.state, &pb));

  start_from(&mid, &prm, &C);
  frame(&C, 1, STEPS_M);
  MUST(C.download(C.state, &pc));

  judge("frames (fused G2P2G)", &pa, &pb, &pc);
  particles_free(&mid);
  particles_free(&pa);
  particles_free(&pb);
  particles_free(&pc);
  backend_destroy(&A);
  backend_destroy(&B);
  backend_destroy(&C);
}

int main(int argc, char **argv) {
  choose_backend(argc, argv);
  init(&argc, &argv);
  printf("test_projected: a state that already holds the return mapping, continued\n");
  phases();
  frames();
  return finish("test_projected");
}

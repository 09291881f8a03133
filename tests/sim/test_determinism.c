/* test_determinism - parallel.deterministic: P2G sums in 64-bit fixed point (physics/fixed.h)
 * make the particles bitwise identical whatever the threads, the ranks, the particle order and
 * the GPU's scheduling, on one backend.
 *
 *   test_determinism [cpu|cuda]   on one rank:
 *     cpu:  deterministic runs with 1, 2 and 4 OpenMP threads give bitwise identical particles
 *           (position, velocity, C, F by id) after every frame;
 *     cuda: two deterministic runs give bitwise identical particles (float atomics make two
 *           default runs differ in the last bits: test_asflip);
 *     both: the deterministic run agrees with the default float run to rounding (the same
 *           physics): positions within 1e-5 of the domain, velocities within 1e-3 of the
 *           largest speed (test_ranks' tolerances for float runs that differ in sum order).
 *   mpirun -n N test_determinism [cpu|cuda]: the deterministic run on N ranks (subdomains,
 *     shared-block sums exchanged, particles migrating, cuts moving) gives bitwise the particles
 *     of the run on one rank (rank 0 runs it alone on MPI_COMM_SELF). Float sums cannot do this:
 *     a shared node's sum is (this rank's part) + (the neighbour's part), in another order than
 *     on one rank (test_ranks needs tolerances).
 * Scenes: a dam break (fixed dt; material crosses the cuts), ASFLIP water stirred by a moving
 * paddle with a block of NACC snow thrown in (the ASFLIP channels, colliders, logJp), and two
 * elastic spheres colliding (adaptive dt, whose max speed must agree too). */
#include <omp.h>

#include "sim/simtest.h"

static const char *const scenes[][2] = {
    {"dam break",
     "{\"domain\":{\"min\":[0,0,0],\"max\":[0.8,0.4,0.24],\"dx\":0.02},"
     "\"time\":{\"frames\":2,\"fps\":25,\"dt\":0.0008},"
     "\"materials\":{\"water\":{\"model\":\"weakly_compressible\",\"density\":1000,\"bulk_modulus\":2e4,\"gamma\":7}},"
     "\"bodies\":[{\"shape\":\"box\",\"min\":[0.04,0.04,0.04],\"max\":[0.3,0.34,0.2],\"material\":\"water\",\"ppc\":8}],"
     "\"boundary\":{\"type\":\"slip\"},\"parallel\":{\"balance_threshold\":0.05,\"deterministic\":%s}}"},
    {"ASFLIP water, a moving paddle, NACC snow",
     "{\"domain\":{\"min\":[0,0,0],\"max\":[0.8,0.4,0.24],\"dx\":0.02},"
     "\"time\":{\"frames\":2,\"fps\":25,\"dt\":0.0008},"
     "\"materials\":{\"water\":{\"model\":\"weakly_compressible\",\"density\":1000,\"bulk_modulus\":2e4,\"gamma\":7,"
     "\"transfer\":\"asflip\",\"asflip_beta_min\":1},"
     "\"snow\":{\"model\":\"nacc\",\"density\":400,\"bulk_modulus\":5e4,\"poisson_ratio\":0.3,"
     "\"initial_compression\":-0.3}},"
     "\"bodies\":[{\"shape\":\"box\",\"min\":[0.04,0.04,0.04],\"max\":[0.3,0.34,0.2],\"material\":\"water\",\"ppc\":2},"
     "{\"shape\":\"box\",\"min\":[0.4,0.26,0.06],\"max\":[0.6,0.36,0.18],\"material\":\"snow\",\"velocity\":[-2,0,0]}],"
     "\"boundary\":{\"type\":\"slip\"},"
     "\"colliders\":[{\"shape\":\"box\",\"min\":[0.3,0,0.1],\"max\":[0.34,0.15,0.14],\"type\":\"separate\","
     "\"motion\":[{\"time\":0},{\"time\":0.4,\"translation\":[0.2,0,0],\"rotation\":{\"axis\":[0,1,0],\"angle\":90}}]}],"
     "\"parallel\":{\"balance_threshold\":0.05,\"deterministic\":%s}}"},
    {"colliding spheres (adaptive dt)",
     "{\"domain\":{\"min\":[0,0,0],\"max\":[1,0.5,0.5],\"dx\":0.025},"
     "\"time\":{\"frames\":3,\"fps\":25,\"cfl\":0.5},\"gravity\":[0,0,0],"
     "\"materials\":{\"jelly\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":2e4,\"poisson_ratio\":0.3}},"
     "\"bodies\":[{\"shape\":\"sphere\",\"center\":[0.3,0.25,0.25],\"radius\":0.1,\"material\":\"jelly\",\"ppc\":8,\"velocity\":[1.5,0,0]},"
     "           {\"shape\":\"sphere\",\"center\":[0.7,0.26,0.25],\"radius\":0.1,\"material\":\"jelly\",\"ppc\":8,\"velocity\":[-1.5,0,0]}],"
     "\"boundary\":{\"type\":\"slip\"},\"parallel\":{\"balance_threshold\":0.05,\"deterministic\":%s}}"},
};
#define N_SCENES (int)(sizeof scenes / sizeof *scenes)

static int backend_(void) { return test_backend_ >= 0 ? test_backend_ : BACKEND_CPU; }

static void load(int k, int det, scene *s) {
  char json[4096];
  snprintf(json, sizeof json, scenes[k][1], det ? "true" : "false");
  scene_from_text(json, s);
}

static sim *create(const scene *s, MPI_Comm comm) {
  sim_options opt = {.backend = backend_(), .write_output = 0};
  sim *S = NULL;
  MUST(sim_create(s, &opt, comm, &S));
  return S;
}

/* Fields of a (ordered by oa) and b (by ob) that differ in any bit: x, v, C, F. */
static size_t bit_diffs(const particles *a, const size_t *oa, const particles *b, const size_t *ob) {
  size_t bad = 0;
  for (size_t k = 0; k < a->n; ++k) {
    const size_t i = oa[k], j = ob[k];
    bad += a->id[i] != b->id[j];
    bad += memcmp(a->x + 3 * i, b->x + 3 * j, 3 * sizeof(float)) != 0;
    bad += memcmp(a->v + 3 * i, b->v + 3 * j, 3 * sizeof(float)) != 0;
    bad += memcmp(a->C + 9 * i, b->C + 9 * j, 9 * sizeof(float)) != 0;
    bad += memcmp(a->F + 9 * i, b->F + 9 * j, 9 * sizeof(float)) != 0;
  }
  return bad;
}

/* Largest position difference (m) and velocity difference (m/s) by id, and the largest speed. */
static void diffs(const particles *a, const particles *b, double *dx, double *dv, double *vmax) {
  size_t *oa = order_by_id(a), *ob = order_by_id(b);
  *dx = *dv = *vmax = 0;
  for (size_t k = 0; k < a->n; ++k) {
    const size_t i = oa[k], j = ob[k];
    double d2 = 0, v2 = 0;
    for (int c = 0; c < 3; ++c) {
      *dx = fmax(*dx, fabs((double)a->x[3 * i + c] - b->x[3 * j + c]));
      const double d = (double)a->v[3 * i + c] - b->v[3 * j + c];
      d2 += d * d;
      v2 += (double)b->v[3 * j + c] * b->v[3 * j + c];
    }
    *dv = fmax(*dv, sqrt(d2));
    *vmax = fmax(*vmax, sqrt(v2));
  }
  free(oa), free(ob);
}

/* One rank: deterministic runs (threads, or twice on the GPU) bitwise equal; float run close. */
static void one_rank(int k) {
  const int cpu = backend_() == BACKEND_CPU;
  static const int threads[] = {1, 2, 4};
  const int runs = cpu ? 3 : 2;
  scene sd, sf;
  load(k, 1, &sd);
  load(k, 0, &sf);
  sim *D[3] = {NULL, NULL, NULL}, *F = NULL;
  for (int r = 0; r < runs; ++r) D[r] = create(&sd, MPI_COMM_SELF);
  F = create(&sf, MPI_COMM_SELF);
  double L = 0;
  for (int a = 0; a < 3; ++a) L = fmax(L, sd.domain_max[a] - sd.domain_min[a]);
  printf("%s: %llu particles, %d frames, %s\n", scenes[k][0], (unsigned long long)sim_get_status(D[0])->particles,
         sd.frames, cpu ? "deterministic with 1, 2, 4 threads" : "deterministic twice");
  particles p[3] = {{0}}, pf = {0};
  double worst_x = 0, worst_v = 0;
  for (int f = 1; f <= sd.frames; ++f) {
    for (int r = 0; r < runs; ++r) {
      if (cpu) omp_set_num_threads(threads[r]);
      MUST(sim_advance_frame(D[r]));
      MUST(sim_particles(D[r], &p[r]));
    }
    if (cpu) omp_set_num_threads(2);
    MUST(sim_advance_frame(F));
    MUST(sim_particles(F, &pf));
    size_t *o0 = order_by_id(&p[0]);
    for (int r = 1; r < runs; ++r) {
      CHECK(p[r].n == p[0].n, "%s frame %d: %zu particles in run %d, %zu in run 0", scenes[k][0], f, p[r].n, r, p[0].n);
      if (p[r].n != p[0].n) continue;
      size_t *o = order_by_id(&p[r]);
      const size_t bad = bit_diffs(&p[0], o0, &p[r], o);
      CHECK(bad == 0, "%s frame %d: %zu particle fields differ in some bit between %s", scenes[k][0], f, bad,
            cpu ? (r == 1 ? "1 and 2 threads" : "1 and 4 threads") : "two deterministic runs");
      CHECK(sim_get_status(D[r])->steps == sim_get_status(D[0])->steps, "%s frame %d: step counts differ",
            scenes[k][0], f);
      free(o);
    }
    free(o0);
    double dx, dv, vmax;
    diffs(&p[0], &pf, &dx, &dv, &vmax);
    printf("  frame %d  steps %llu  deterministic vs float: max|dx| %.3g L  max|dv| %.3g vmax (vmax %.3f m/s)\n", f,
           (unsigned long long)sim_get_status(D[0])->steps, dx / L, dv / (vmax + 1e-3), vmax);
    worst_x = fmax(worst_x, dx / L);
    worst_v = fmax(worst_v, dv / (vmax + 1e-3));
  }
  CHECK(worst_x <= 1e-5, "%s: deterministic and float positions differ by %.3g of the domain (tolerance 1e-5)",
        scenes[k][0], worst_x);
  CHECK(worst_v <= 1e-3, "%s: deterministic and float velocities differ by %.3g of the largest speed (tolerance 1e-3)",
        scenes[k][0], worst_v);
  for (int r = 0; r < runs; ++r) sim_destroy(&D[r]), particles_free(&p[r]);
  sim_destroy(&F);
  particles_free(&pf);
  scene_destroy(&sd);
  scene_destroy(&sf);
}

/* Several ranks against one, bitwise. */
static void ranks(int k) {
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  scene s;
  load(k, 1, &s);
  sim *W = create(&s, MPI_COMM_WORLD), *R = rank == 0 ? create(&s, MPI_COMM_SELF) : NULL;
  if (rank == 0) printf("%s on %d ranks against 1, deterministic: %llu particles, %d frames\n", scenes[k][0], nranks,
                        (unsigned long long)sim_get_status(W)->particles, s.frames);
  particles mine = {0}, all = {0}, ref = {0};
  for (int f = 1; f <= s.frames; ++f) {
    MUST(sim_advance_frame(W));
    MUST(sim_particles(W, &mine));
    gather_particles(&mine, rank, nranks, &all);
    if (rank != 0) continue;
    MUST(sim_advance_frame(R));
    MUST(sim_particles(R, &ref));
    CHECK(all.n == ref.n, "%s frame %d: %zu particles on %d ranks, %zu on one", scenes[k][0], f, all.n, nranks, ref.n);
    if (all.n != ref.n) break;
    size_t *oa = order_by_id(&all), *orf = order_by_id(&ref);
    const size_t bad = bit_diffs(&all, oa, &ref, orf);
    printf("  frame %d  steps %llu/%llu  fields differing in some bit: %zu\n", f,
           (unsigned long long)sim_get_status(W)->steps, (unsigned long long)sim_get_status(R)->steps, bad);
    CHECK(bad == 0, "%s frame %d: %zu particle fields differ between %d ranks and 1", scenes[k][0], f, bad, nranks);
    free(oa), free(orf);
  }
  if (rank == 0) {
    const sim_status *st = sim_get_status(W);
    printf("  %llu particles migrated, cuts moved %llu times, %.3g MB of sums sent between ranks\n",
           (unsigned long long)st->migrated, (unsigned long long)st->rebalances, st->rank_bytes / 1e6);
    CHECK(st->rank_bytes > 0, "%s: no shared-block sums crossed between ranks", scenes[k][0]);
  }
  particles_free(&mine), particles_free(&all), particles_free(&ref);
  sim_destroy(&W);
  sim_destroy(&R);
  scene_destroy(&s);
}

int main(int argc, char **argv) {
  init(&argc, &argv);
  choose_backend(argc, argv);
  int nranks;
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  for (int k = 0; k < N_SCENES; ++k) {
    if (nranks == 1) one_rank(k);
    else ranks(k);
  }
  return finish("test_determinism");
}

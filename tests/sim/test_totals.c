#define _XOPEN_SOURCE 700 /* nftw */
/* test_totals - the totals of every written frame (sim_status: mass, momentum, kinetic and
 * gravitational potential energy, summed over all ranks by one non-blocking allreduce while the
 * frame is written) against the particles themselves and against the physics.
 *
 *   test_totals [cpu|cuda]            on one rank
 *   mpirun -n N test_totals [cpu|cuda] on N ranks (the bodies straddle the cuts)
 *
 * For every frame written:
 *   - the totals equal this test's own sums over sim_particles of every rank;
 *   - a jelly block thrown in free fall, far from the walls: mass = density x the block's volume
 *     (the block is whole cells); momentum = M (v0 + g t) and kinetic energy = M |v0 + g t|^2 / 2
 *     (a uniform velocity field stays uniform); the potential energy follows the centre of mass of
 *     symplectic Euler's positions, x_n = x_0 + n dt v_0 + g dt^2 n (n + 1) / 2;
 *   - two jelly spheres colliding head-on without gravity: momentum stays what it was at the
 *     start, through the collision (MPM conserves it; a shared block's sum lost or counted twice
 *     between ranks breaks it), and the kinetic energy does not grow. */
#include <ftw.h>

#include "sim/simtest.h"

static const char *const block_json =
    "{\"domain\":{\"min\":[0,-0.5,0],\"max\":[1,0.5,1],\"dx\":0.025},"
    "\"time\":{\"frames\":3,\"fps\":25,\"dt\":0.0005},\"gravity\":[0,-9.81,0],"
    "\"materials\":{\"jelly\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":2e4,\"poisson_ratio\":0.3}},"
    "\"bodies\":[{\"shape\":\"box\",\"min\":[0.3,-0.1,0.3],\"max\":[0.5,0.1,0.5],\"material\":\"jelly\",\"ppc\":8,"
    "\"velocity\":[0.8,0.5,-0.3]}],"
    "\"boundary\":{\"type\":\"slip\"},\"output\":{\"dir\":\"frames\",\"every\":1}}";

static const char *const spheres_json =
    "{\"domain\":{\"min\":[0,0,0],\"max\":[1,0.5,0.5],\"dx\":0.025},"
    "\"time\":{\"frames\":3,\"fps\":25,\"cfl\":0.5},\"gravity\":[0,0,0],"
    "\"materials\":{\"jelly\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":2e4,\"poisson_ratio\":0.3}},"
    "\"bodies\":[{\"shape\":\"sphere\",\"center\":[0.3,0.25,0.25],\"radius\":0.1,\"material\":\"jelly\",\"ppc\":8,\"velocity\":[1.5,0,0]},"
    "           {\"shape\":\"sphere\",\"center\":[0.7,0.26,0.25],\"radius\":0.1,\"material\":\"jelly\",\"ppc\":8,\"velocity\":[-1.2,0.2,0]}],"
    "\"boundary\":{\"type\":\"slip\"},\"output\":{\"dir\":\"frames\",\"every\":1}}";

enum { T_MASS, T_P, T_KE = T_P + 3, T_PE, T_XC, T_N = T_XC + 3 };

/* This test's own sums over every rank's particles: mass, momentum, kinetic and potential
 * energy (above the domain's lowest corner), and the centre of mass. */
static void own_totals(sim *S, const scene *sc, double t[T_N]) {
  particles p = {0};
  MUST(sim_particles(S, &p));
  double loc[T_N] = {0};
  for (size_t i = 0; i < p.n; ++i) {
    const double m = p.mass[i];
    loc[T_MASS] += m;
    for (int a = 0; a < 3; ++a) {
      const double v = p.v[3 * i + a], x = p.x[3 * i + a];
      loc[T_P + a] += m * v;
      loc[T_KE] += 0.5 * m * v * v;
      loc[T_PE] -= m * sc->gravity[a] * (x - sc->domain_min[a]);
      loc[T_XC + a] += m * x;
    }
  }
  particles_free(&p);
  MPI_Allreduce(loc, t, T_N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  for (int a = 0; a < 3; ++a) t[T_XC + a] /= t[T_MASS];
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

/* The scene, run frame by frame with its frames written into a fresh folder; check(S, sc, f, own,
 * first) after every frame, with first the test's sums before the first step. */
static void run(const char *name, const char *json,
                void (*check)(const sim *S, const scene *sc, int f, const double *own, const double *first)) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char dir[64] = "/tmp/drift-totals-XXXXXX";
  if (rank == 0 && !mkdtemp(dir)) {
    perror("mkdtemp");
    exit(1);
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  scene sc;
  scene_from_text(json, &sc);
  sim_options opt = {.backend = test_backend_ >= 0 ? test_backend_ : BACKEND_CPU, .write_output = 1, .out_dir = dir};
  sim *S = NULL;
  MUST(sim_create(&sc, &opt, MPI_COMM_WORLD, &S));
  CHECK(sim_get_status(S)->totals_frame == -1, "%s: totals before any frame was written", name);
  double first[T_N], own[T_N];
  own_totals(S, &sc, first);
  for (int f = 1; f <= sc.frames; ++f) {
    MUST(sim_advance_frame(S));
    MUST(sim_flush(S)); /* the frame is written behind the steps: its totals come with it */
    const sim_status *st = sim_get_status(S);
    own_totals(S, &sc, own);
    CHECK(st->totals_frame == f, "%s: the totals are of frame %d, not %d", name, st->totals_frame, f);
    /* the totals against this test's sums of the same particles (another order: rounding only) */
    const double pscale = own[T_MASS] * (1.0 + sqrt(2.0 * own[T_KE] / own[T_MASS]));
    CHECK(fabs(st->mass - own[T_MASS]) <= 1e-9 * own[T_MASS], "%s frame %d: mass %.9g, the particles' %.9g", name, f,
          st->mass, own[T_MASS]);
    for (int a = 0; a < 3; ++a)
      CHECK(fabs(st->momentum[a] - own[T_P + a]) <= 1e-9 * pscale, "%s frame %d: momentum[%d] %.9g, the particles' %.9g",
            name, f, a, st->momentum[a], own[T_P + a]);
    CHECK(fabs(st->kinetic_energy - own[T_KE]) <= 1e-9 * (own[T_KE] + 1e-12),
          "%s frame %d: kinetic energy %.9g, the particles' %.9g", name, f, st->kinetic_energy, own[T_KE]);
    CHECK(fabs(st->potential_energy - own[T_PE]) <= 1e-9 * (fabs(own[T_PE]) + 1e-12),
          "%s frame %d: potential energy %.9g, the particles' %.9g", name, f, st->potential_energy, own[T_PE]);
    if (rank == 0)
      printf("  %s frame %d: mass %.6g kg  momentum (%.6g, %.6g, %.6g)  kinetic %.6g J  potential %.6g J\n", name, f,
             st->mass, st->momentum[0], st->momentum[1], st->momentum[2], st->kinetic_energy, st->potential_energy);
    check(S, &sc, f, own, first);
  }
  sim_destroy(&S);
  scene_destroy(&sc);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The block in free fall: mass, momentum and kinetic energy from the scene; the potential energy
 * from the centre of mass of symplectic Euler's positions, above the domain's lowest corner (at
 * y = -0.5 m: not the origin). */
static void check_block(const sim *S, const scene *sc, int f, const double *own, const double *first) {
  const sim_status *st = sim_get_status(S);
  const double rho = 1000.0, side = 0.2, M = rho * side * side * side, v0[3] = {0.8, 0.5, -0.3};
  const double dt = 0.0005, n = (double)f / (sc->fps * dt); /* steps so far: whole */
  const double t = n * dt;
  CHECK(fabs(st->mass - M) <= 1e-6 * M, "block frame %d: mass %.9g kg, density x volume %.9g", f, st->mass, M);
  double v2 = 0.0;
  for (int a = 0; a < 3; ++a) {
    const double v = v0[a] + sc->gravity[a] * t;
    v2 += v * v;
    CHECK(fabs(st->momentum[a] - M * v) <= 1e-5 * M, "block frame %d: momentum[%d] %.9g, M (v0 + g t) %.9g", f, a,
          st->momentum[a], M * v);
  }
  CHECK(fabs(st->kinetic_energy - 0.5 * M * v2) <= 1e-5 * 0.5 * M * v2,
        "block frame %d: kinetic energy %.9g J, M |v0 + g t|^2 / 2 %.9g", f, st->kinetic_energy, 0.5 * M * v2);
  /* the centre of mass: x_0 + n dt v_0 + g dt^2 n (n + 1) / 2 (x += dt v after v += g dt) */
  double pe = 0.0;
  for (int a = 0; a < 3; ++a) {
    const double xc = first[T_XC + a] + t * v0[a] + sc->gravity[a] * dt * dt * n * (n + 1.0) / 2.0;
    CHECK(fabs(own[T_XC + a] - xc) <= 2e-6, "block frame %d: centre of mass[%d] %.9g m, expected %.9g", f, a,
          own[T_XC + a], xc);
    pe -= M * sc->gravity[a] * (xc - sc->domain_min[a]);
  }
  CHECK(fabs(st->potential_energy - pe) <= 2e-5 * M * 9.81,
        "block frame %d: potential energy %.9g J, M g h of the centre of mass %.9g", f, st->potential_energy, pe);
}

/* The spheres: momentum as at the start through the collision; kinetic energy not growing. */
static void check_spheres(const sim *S, const scene *sc, int f, const double *own, const double *first) {
  (void)sc, (void)own;
  const sim_status *st = sim_get_status(S);
  const double pscale = first[T_MASS] * 1.5;
  for (int a = 0; a < 3; ++a)
    CHECK(fabs(st->momentum[a] - first[T_P + a]) <= 1e-5 * pscale,
          "spheres frame %d: momentum[%d] %.9g, %.9g at the start (conserved)", f, a, st->momentum[a], first[T_P + a]);
  CHECK(st->kinetic_energy <= first[T_KE] * (1.0 + 1e-6), "spheres frame %d: kinetic energy %.9g J grew from %.9g",
        f, st->kinetic_energy, first[T_KE]);
  CHECK(fabs(st->potential_energy) <= 1e-12, "spheres frame %d: potential energy %.9g J without gravity", f,
        st->potential_energy);
  if (f == sc->frames)
    CHECK(st->kinetic_energy < 0.99 * first[T_KE], "spheres: kinetic energy %.6g J after the collision, %.6g before: "
          "did they meet?", st->kinetic_energy, first[T_KE]);
}

int main(int argc, char **argv) {
  int provided; /* as drift: the frames' writer runs on a thread of its own */
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  choose_backend(argc, argv);
  log_set_quiet(1);
  int nranks = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) printf("test_totals on %d rank(s)\n", nranks);
  run("block", block_json, check_block);
  run("spheres", spheres_json, check_spheres);
  const int bad = failures_;
  int all = 0;
  MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("%s\n", all ? "FAILED" : "passed");
  MPI_Finalize();
  return all ? 1 : 0;
}

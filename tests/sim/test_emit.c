/* test_emit - particle sources (body.emit, src/emit.h), checked against rules recomputed here.
 *
 * One rank (argv[1] cpu or cuda):
 *   - rate: 1030 particles/s from 0.1 s to 0.3 s at 20 fps; after frame f (its start t0 =
 *     (f - 1) / 20) the count is floor(1030 (min(t0, 0.3) - 0.1)) for t0 > 0.1, else 0 (51.5
 *     after 0.05 s is 51: a fraction of a particle is not yet born): none before start, 206 =
 *     rate x duration in all, none after end. Ids are exactly
 *     (0 << 48) | k for k < count (unique, no gaps). Every particle has mass dx^3 / ppc x
 *     density, so the total mass is count x that. Zero gravity, particles far from the walls:
 *     the total momentum is the count x mass x the source velocity (momentum is conserved by
 *     the transfers, so it is what the particles were born with).
 *   - the same with max_particles 120: the count stops at 120; with volume_rate = 1030 dx^3 /
 *     ppc m^3/s: the same counts as rate 1030.
 *   - resample: a box of 5^3 cells at 8 per cell, water flowing out of it downward under
 *     gravity: the count after frame f is the count after frame f - 1 plus, over the box's
 *     cells, max(0, 8 - particles in the cell) counted here from frame f - 1's positions (the
 *     rule of emit.h); frame 1 fills the box exactly (1000); ids unique.
 * Several ranks (mpirun -n 2): the rate and resample scenes on MPI_COMM_WORLD against rank 0
 * alone on MPI_COMM_SELF: the same count and the same id set after every frame; the sources
 * straddle the cut (the initial cuts count the sources' shapes), so particles end on both. */
#include "sim/simtest.h"

#include "emit.h"

#define RATE_SCENE(extra, rate_keys)                                                                                   \
  "{\"domain\": {\"min\": [0, 0, 0], \"max\": [0.64, 0.64, 0.64], \"dx\": 0.02},"                                      \
  "\"time\": {\"frames\": 10, \"fps\": 20, \"dt\": 0.001}, \"gravity\": [0, 0, 0],"                                  \
  "\"materials\": {\"water\": {\"model\": \"weakly_compressible\", \"density\": 1000, \"bulk_modulus\": 1e4, "          \
  "\"gamma\": 7}},"                                                                                                    \
  "\"bodies\": [{\"shape\": \"box\", \"min\": [0.16, 0.24, 0.24], \"max\": [0.48, 0.4, 0.4], \"material\": \"water\", " \
  "\"ppc\": 8, \"velocity\": [0.2, -0.1, 0.05], \"emit\": {" rate_keys ", \"start\": 0.1, \"end\": 0.3" extra "}}],"   \
  "\"boundary\": {\"type\": \"slip\"}, \"parallel\": {\"backend\": \"cpu\"}}"

static const char *RESAMPLE_SCENE =
    "{\"domain\": {\"min\": [0, 0, 0], \"max\": [0.5, 0.5, 0.5], \"dx\": 0.02},"
    "\"time\": {\"frames\": 5, \"fps\": 25, \"dt\": 0.001},"
    "\"materials\": {\"water\": {\"model\": \"weakly_compressible\", \"density\": 1000, \"bulk_modulus\": 1e4, "
    "\"gamma\": 7, \"transfer\": \"asflip\"}},"
    "\"bodies\": [{\"shape\": \"box\", \"min\": [0.2, 0.3, 0.2], \"max\": [0.3, 0.4, 0.3], \"material\": \"water\", "
    "\"ppc\": 8, \"velocity\": [0, -1, 0], \"emit\": {\"mode\": \"resample\"}}],"
    "\"boundary\": {\"type\": \"slip\"}, \"parallel\": {\"backend\": \"cpu\"}}";

static uint64_t expected_rate_count(int f, double cap) {
  const double t0 = (f - 1) / 20.0;
  double n = t0 > 0.1 ? floor(1030.0 * (fmin(t0, 0.3) - 0.1) + 1e-6) : 0.0;
  return (uint64_t)fmin(n, cap);
}

/* Ids exactly {(body << 48) | k : k < n}. */
static int ids_dense(const particles *p, int body) {
  size_t *o = order_by_id(p);
  int ok = 1;
  for (size_t i = 0; i < p->n && ok; ++i) ok = p->id[o[i]] == (((uint64_t)body << EMIT_ID_BITS) | i);
  free(o);
  return ok;
}

static void rate_run(const char *name, const char *json, double cap) {
  scene s;
  scene_from_text(json, &s);
  sim *S = start(&s);
  particles p = {0};
  const double pmass = s.dx * s.dx * s.dx / 8 * 1000.0;
  const double *v = s.bodies[0].velocity;
  for (int f = 1; f <= s.frames; ++f) {
    MUST(sim_advance_frame(S));
    MUST(sim_particles(S, &p));
    const uint64_t want = expected_rate_count(f, cap);
    CHECK(p.n == want, "%s frame %d: %zu particles, expected %llu", name, f, p.n, (unsigned long long)want);
    CHECK(sim_get_status(S)->particles == p.n, "%s frame %d: status says %llu particles, the backend holds %zu", name,
          f, (unsigned long long)sim_get_status(S)->particles, p.n);
    CHECK(ids_dense(&p, 0), "%s frame %d: ids are not exactly 0..%zu of body 0", name, f, p.n);
    if (p.n == 0) continue;
    moments m = measure(&s, &p);
    CHECK(fabs(m.mass - p.n * pmass) <= 1e-5 * p.n * pmass, "%s frame %d: mass %.9g, expected %zu x %.9g", name, f,
          m.mass, p.n, pmass);
    for (int a = 0; a < 3; ++a)
      CHECK(fabs(m.momentum[a] - m.mass * v[a]) <= 1e-4 * m.mass * 0.2, "%s frame %d: momentum[%d] %.6g, expected %.6g",
            name, f, a, m.momentum[a], m.mass * v[a]);
  }
  printf("%s: %zu particles after %d frames\n", name, p.n, s.frames);
  particles_free(&p);
  sim_destroy(&S);
  scene_destroy(&s);
}

/* Particles per cell of the box's 5^3 cells, from positions (as emit.h counts them). */
static uint64_t deficit(const scene *s, const particles *p) {
  int counts[125] = {0};
  for (size_t i = 0; i < p->n; ++i) {
    int c[3], in = 1;
    const int lo[3] = {10, 15, 10};
    for (int a = 0; a < 3; ++a) {
      c[a] = (int)floor(((double)p->x[3 * i + a] - s->domain_min[a]) / s->dx) - lo[a];
      in &= c[a] >= 0 && c[a] < 5;
    }
    if (in) ++counts[(c[2] * 5 + c[1]) * 5 + c[0]];
  }
  uint64_t d = 0;
  for (int k = 0; k < 125; ++k) d += counts[k] < 8 ? (uint64_t)(8 - counts[k]) : 0;
  return d;
}

static void resample_run(void) {
  scene s;
  scene_from_text(RESAMPLE_SCENE, &s);
  sim *S = start(&s);
  particles p = {0};
  uint64_t want = 1000; /* an empty box of 125 cells */
  for (int f = 1; f <= s.frames; ++f) {
    MUST(sim_advance_frame(S));
    MUST(sim_particles(S, &p));
    CHECK(p.n == want, "resample frame %d: %zu particles, expected %llu", f, p.n, (unsigned long long)want);
    CHECK(ids_dense(&p, 0), "resample frame %d: ids are not exactly 0..%zu of body 0", f, p.n);
    const uint64_t d = deficit(&s, &p);
    if (f >= 2) CHECK(d > 0, "resample frame %d: the water did not flow out of the box (test set-up)", f);
    want = p.n + d;
  }
  printf("resample: %zu particles after %d frames\n", p.n, s.frames);
  particles_free(&p);
  sim_destroy(&S);
  scene_destroy(&s);
}

/* Several ranks against rank 0 alone: the same count and id set after every frame. */
static void ranks_run(const char *name, const char *json) {
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  scene s;
  scene_from_text(json, &s);
  sim_options opt = {.backend = test_backend_, .write_output = 0};
  sim *W = NULL, *R = NULL;
  MUST(sim_create(&s, &opt, MPI_COMM_WORLD, &W));
  if (rank == 0) MUST(sim_create(&s, &opt, MPI_COMM_SELF, &R));
  particles mine = {0}, ref = {0};
  for (int f = 1; f <= s.frames; ++f) {
    MUST(sim_advance_frame(W));
    MUST(sim_particles(W, &mine));
    int n = (int)mine.n, *counts = rank == 0 ? calloc((size_t)nranks, sizeof(int)) : NULL;
    int *displs = rank == 0 ? calloc((size_t)nranks, sizeof(int)) : NULL, total = 0;
    MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    for (int r = 0; rank == 0 && r < nranks; ++r) displs[r] = total, total += counts[r];
    uint64_t *ids = rank == 0 ? malloc(sizeof *ids * (size_t)(total ? total : 1)) : NULL;
    MPI_Gatherv(mine.id, n, MPI_UINT64_T, ids, counts, displs, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    int spread = 0; /* particles on more than one rank by the end */
    for (int r = 0; rank == 0 && r < nranks; ++r) spread += counts[r] > 0;
    if (rank == 0) {
      MUST(sim_advance_frame(R));
      MUST(sim_particles(R, &ref));
      CHECK((size_t)total == ref.n, "%s frame %d: %d particles on %d ranks, %zu on one", name, f, total, nranks, ref.n);
      particles all = {0};
      const size_t ntot = total > 0 ? (size_t)total : 0;
      particles_reserve(&all, ntot);
      if (ntot > 0) memcpy(all.id, ids, sizeof *ids * ntot);
      all.n = ntot;
      size_t *oa = order_by_id(&all), *orf = order_by_id(&ref);
      size_t diff = 0;
      for (size_t i = 0; i < all.n && i < ref.n; ++i) diff += all.id[oa[i]] != ref.id[orf[i]];
      CHECK(diff == 0, "%s frame %d: %zu ids differ between %d ranks and one", name, f, diff, nranks);
      if (f == s.frames) {
        printf("%s on %d ranks: %d particles, on %d rank(s)\n", name, nranks, total, spread);
        CHECK(spread > 1, "%s: every particle on one rank: the test does not cross a cut", name);
      }
      free(oa), free(orf);
      particles_free(&all);
    }
    free(counts), free(displs), free(ids);
  }
  particles_free(&mine);
  particles_free(&ref);
  sim_destroy(&W);
  sim_destroy(&R);
  scene_destroy(&s);
}

int main(int argc, char **argv) {
  init(&argc, &argv);
  choose_backend(argc, argv);
  int nranks;
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  char vrate[64];
  snprintf(vrate, sizeof vrate, "\"volume_rate\": %.17g", 1030.0 * 0.02 * 0.02 * 0.02 / 8);
  char json[4096];
  if (nranks > 1) {
    ranks_run("rate", RATE_SCENE("", "\"rate\": 1030"));
    ranks_run("resample", RESAMPLE_SCENE);
    return finish("test_emit (ranks)");
  }
  rate_run("rate", RATE_SCENE("", "\"rate\": 1030"), 1e300);
  rate_run("max_particles", RATE_SCENE(", \"max_particles\": 120", "\"rate\": 1030"), 120);
  snprintf(json, sizeof json, RATE_SCENE("", "%s"), vrate);
  rate_run("volume_rate", json, 1e300);
  resample_run();
  return finish("test_emit");
}

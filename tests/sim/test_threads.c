/* The CPU reference is an oracle only if it is reproducible: the coloured P2G must give
 * bitwise identical particles whatever the number of OpenMP threads. Also checks that ids
 * survive the re-sorting of rebuild-mapping (same set, each once). */
#include <omp.h>

#include "simtest.h"

static int cmp_id(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static void run(const scene *s, int threads, particles *out) {
  omp_set_num_threads(threads);
  sim *S = start(s);
  for (int f = 1; f <= 8; ++f) MUST(sim_advance_frame(S));
  MUST(sim_particles(S, out));
  printf("%d thread(s): %llu substeps, %llu rebuilds\n", threads, (unsigned long long)sim_get_status(S)->steps,
         (unsigned long long)sim_get_status(S)->rebuilds);
  CHECK(sim_get_status(S)->rebuilds > 1, "no rebuild-mapping happened; the test must exercise it");
  sim_destroy(&S);
}

int main(int argc, char **argv) {
  init(&argc, &argv);
  const char *json =
      "{\"domain\":{\"min\":[0,0,0],\"max\":[1,1,1],\"dx\":0.025},"
      "\"time\":{\"frames\":8,\"fps\":24,\"cfl\":0.5},"
      "\"materials\":{\"sand\":{\"model\":\"drucker_prager\",\"density\":1600,\"youngs_modulus\":3e5,\"poisson_ratio\":0.3},"
      "             \"water\":{\"model\":\"weakly_compressible\",\"density\":1000,\"bulk_modulus\":1e5}},"
      "\"bodies\":[{\"shape\":\"box\",\"min\":[0.2,0.05,0.2],\"max\":[0.5,0.6,0.5],\"material\":\"sand\",\"ppc\":4},"
      "           {\"shape\":\"sphere\",\"center\":[0.7,0.6,0.6],\"radius\":0.15,\"material\":\"water\",\"ppc\":8,\"velocity\":[-1,0,0]}],"
      "\"boundary\":{\"type\":\"slip\"}}";
  scene s;
  scene_from_text(json, &s);
  particles a = {0}, b = {0};
  run(&s, 1, &a);
  run(&s, 2, &b);
  run(&s, 4, &b); /* more threads than cores: scheduling changes, results must not */
  CHECK(a.n == b.n, "particle counts differ");
  size_t diff = 0;
  for (size_t i = 0; i < a.n && a.n == b.n; ++i) {
    diff += a.id[i] != b.id[i];
    diff += memcmp(a.x + 3 * i, b.x + 3 * i, 12) != 0;
    diff += memcmp(a.v + 3 * i, b.v + 3 * i, 12) != 0;
    diff += memcmp(a.F + 9 * i, b.F + 9 * i, 36) != 0;
  }
  CHECK(diff == 0, "%zu particle fields differ between 1 and 4 threads", diff);
  uint64_t *ids = malloc(a.n * sizeof *ids);
  memcpy(ids, a.id, a.n * sizeof *ids);
  qsort(ids, a.n, sizeof *ids, cmp_id);
  size_t dup = 0;
  for (size_t i = 1; i < a.n; ++i) dup += ids[i] == ids[i - 1];
  CHECK(dup == 0, "%zu duplicate ids", dup);
  free(ids);
  particles_free(&a);
  particles_free(&b);
  scene_destroy(&s);
  return finish("test_threads");
}

/* simtest.h - helpers for the integration tests: a scene from a JSON string, a simulation
 * without output, per-frame reductions over particles. Header-only; each test is one file. */
#ifndef DRIFT_SIMTEST_H
#define DRIFT_SIMTEST_H

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "gpu_query.h"
#include "log.h"
#include "particles.h"
#include "physics/constitutive.h"
#include "scene.h"
#include "sim.h"

#include "check.h"

#define MUST(expr)                                                                                 \
  do {                                                                                             \
    if ((expr) != 0) {                                                                             \
      fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #expr, dr_message());            \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

/* Writes json to a temporary file and loads it. */
static inline void scene_from_text(const char *json, scene *s) {
  char path[] = "/tmp/drift-test-XXXXXX.json";
  int fd = mkstemps(path, 5);
  if (fd < 0) {
    perror("mkstemps");
    exit(1);
  }
  FILE *f = fdopen(fd, "w");
  fputs(json, f);
  fclose(f);
  MUST(scene_load(path, s));
  MUST(scene_build_levelsets(s));
  unlink(path);
}

/* The backend a test runs on: argv[1] "cuda" or "cpu", else the scene's (auto). A cuda run
 * where no CUDA device is usable exits 77 (skipped). Call before init(). */
static int test_backend_ = -1;
static inline void choose_backend(int argc, char **argv) {
  if (argc < 2) return;
  if (!strcmp(argv[1], "cpu")) {
    test_backend_ = BACKEND_CPU;
  } else if (!strcmp(argv[1], "cuda")) {
    int ngpu = 0;
    char name[256];
    gpu_count(&ngpu, name, sizeof name);
    if (ngpu == 0) {
      printf("no GPU: skipped\n");
      exit(77);
    }
    printf("backend cuda on %s\n", name);
    test_backend_ = BACKEND_CUDA;
  } else {
    fprintf(stderr, "usage: %s [cpu|cuda]\n", argv[0]);
    exit(2);
  }
}

static inline sim *start(const scene *s) {
  sim_options opt = {.backend = test_backend_, .write_output = 0};
  sim *S = NULL;
  MUST(sim_create(s, &opt, MPI_COMM_WORLD, &S));
  if (test_backend_ == BACKEND_CUDA && strcmp(sim_backend_name(S), "cuda")) {
    fprintf(stderr, "FAIL: asked for cuda, got backend %s\n", sim_backend_name(S));
    exit(1);
  }
  return S;
}

/* Particle indices of p in increasing id order (allocates). */
static const uint64_t *order_ids_;
static int order_cmp_(const void *a, const void *b) {
  const uint64_t x = order_ids_[*(const size_t *)a], y = order_ids_[*(const size_t *)b];
  return (x > y) - (x < y);
}
static inline size_t *order_by_id(const particles *p) {
  size_t *o = malloc(sizeof *o * (p->n ? p->n : 1));
  for (size_t i = 0; i < p->n; ++i) o[i] = i;
  order_ids_ = p->id;
  qsort(o, p->n, sizeof *o, order_cmp_);
  return o;
}

typedef struct moments {
  double mass, momentum[3], com[3], kinetic, potential, elastic, vmax, xmin[3], xmax[3];
  double angular[3];
} moments;

/* Mass-weighted sums over particles; potential energy is -m g.x. */
static inline moments measure(const scene *s, const particles *p) {
  moments m;
  memset(&m, 0, sizeof m);
  for (int a = 0; a < 3; ++a) m.xmin[a] = 1e30, m.xmax[a] = -1e30;
  for (size_t i = 0; i < p->n; ++i) {
    double mi = p->mass[i], v2 = 0;
    const float *x = p->x + 3 * i, *v = p->v + 3 * i;
    m.mass += mi;
    for (int a = 0; a < 3; ++a) {
      m.momentum[a] += mi * v[a];
      m.com[a] += mi * x[a];
      m.potential -= mi * s->gravity[a] * x[a];
      v2 += (double)v[a] * v[a];
      if (x[a] < m.xmin[a]) m.xmin[a] = x[a];
      if (x[a] > m.xmax[a]) m.xmax[a] = x[a];
    }
    m.angular[0] += mi * ((double)x[1] * v[2] - (double)x[2] * v[1]);
    m.angular[1] += mi * ((double)x[2] * v[0] - (double)x[0] * v[2]);
    m.angular[2] += mi * ((double)x[0] * v[1] - (double)x[1] * v[0]);
    /* APIC's affine part carries spin: m (dx^2/4) eps_abc C_cb (Jiang et al. 2015). */
    const float *C = p->C + 9 * i;
    const double D = 0.25 * s->dx * s->dx;
    m.angular[0] += mi * D * ((double)C[7] - C[5]);
    m.angular[1] += mi * D * ((double)C[2] - C[6]);
    m.angular[2] += mi * D * ((double)C[3] - C[1]);
    m.kinetic += 0.5 * mi * v2;
    if (sqrt(v2) > m.vmax) m.vmax = sqrt(v2);
    m.elastic += p->vol0[i] * constitutive_energy_density(&s->materials[p->material[i]].params, p->F + 9 * i);
  }
  for (int a = 0; a < 3; ++a) m.com[a] /= m.mass;
  return m;
}

static inline int finish(const char *name) {
  if (failures_) fprintf(stderr, "%s: %d check(s) failed\n", name, failures_);
  else printf("%s: all checks passed\n", name);
  MPI_Finalize();
  return failures_ ? 1 : 0;
}

static inline void init(int *argc, char ***argv) {
  int provided; /* as drift: the frames' writer runs on a thread of its own (writer.h) */
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  log_set_quiet(1);
}

/* Gathers every rank's particles (id, x, v, C, F) on rank 0. */
static inline void gather_particles(const particles *p, int rank, int nranks, particles *all) {
  int n = (int)p->n, *counts = NULL, *displs = NULL, total = 0;
  if (rank == 0) counts = calloc((size_t)nranks, sizeof *counts), displs = calloc((size_t)nranks, sizeof *displs);
  MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    for (int r = 0; r < nranks; ++r) displs[r] = total, total += counts[r];
    particles_reserve(all, (size_t)total);
    all->n = (size_t)total;
  }
  MPI_Gatherv(p->id, n, MPI_UINT64_T, rank == 0 ? all->id : NULL, counts, displs, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  const int width[] = {3, 3, 9, 9};
  float *const src[] = {p->x, p->v, p->C, p->F};
  float *dst[4] = {all->x, all->v, all->C, all->F};
  for (int f = 0; f < 4; ++f) {
    for (int r = 0; rank == 0 && r < nranks; ++r)
      counts[r] = counts[r] / (f ? width[f - 1] : 1) * width[f], displs[r] = displs[r] / (f ? width[f - 1] : 1) * width[f];
    MPI_Gatherv(src[f], width[f] * n, MPI_FLOAT, rank == 0 ? dst[f] : NULL, counts, displs, MPI_FLOAT, 0,
                MPI_COMM_WORLD);
  }
  free(counts);
  free(displs);
}


#endif

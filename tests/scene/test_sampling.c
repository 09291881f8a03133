/* test_sampling - bodies filled with particles (src/sample.c) against the shapes' analytic
 * geometry: for boxes, rotated boxes, spheres and cylinders (along an axis and tilted),
 *   - the particle count is volume * ppc / dx^3 within the noise of stratified sampling (only the
 *     cells the surface cuts are random: each stratum point there is a Bernoulli draw, so the
 *     standard deviation is at most sqrt(strata cut) / 2; we allow 5 of them);
 *   - the body's mass is exactly density * volume;
 *   - every particle lies in the shape (checked here with independent formulas), and the
 *     particles' centroid and second moments match the solid's (so a rotation turns the right
 *     way and a cylinder points along its axis);
 *   - ids are unique;
 *   - each cell's ppc points are stratified: inside the cell, one to a sub-cell of side dx / k,
 *     k the smallest with k^3 >= ppc (every sub-cell taken where ppc = k^3). */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "particles.h"
#include "sample.h"
#include "scene.h"

static int failures;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);                     \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      ++failures;                                                                                  \
    }                                                                                              \
  } while (0)

static const double PI = 3.14159265358979323846;

/* Rotation matrix of the angle (degrees) about the axis, row-major. */
static void rotation(const double axis[3], double deg, double R[9]) {
  double l = sqrt(axis[0] * axis[0] + axis[1] * axis[1] + axis[2] * axis[2]);
  double u[3] = {axis[0] / l, axis[1] / l, axis[2] / l}, a = deg * PI / 180, c = cos(a), s = sin(a);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) R[3 * i + j] = (i == j ? c : 0) + (1 - c) * u[i] * u[j];
  R[1] -= s * u[2], R[2] += s * u[1], R[3] += s * u[2], R[5] -= s * u[0], R[6] -= s * u[1], R[7] += s * u[0];
}

typedef struct shape {
  const char *json;    /* the body, as a scene file gives it */
  int kind;            /* 0 box (rotated by R about c), 1 sphere, 2 cylinder */
  double c[3];         /* centre */
  double R[9];         /* box: rotation; cylinder: column 2 is the axis */
  double h[3];         /* box: half extents; cylinder: radius, -, half height; sphere: radius */
} shape;

/* Local coordinates R^T (x - c). */
static void local(const shape *sh, const float *x, double l[3]) {
  double d[3] = {x[0] - sh->c[0], x[1] - sh->c[1], x[2] - sh->c[2]};
  for (int j = 0; j < 3; ++j) l[j] = sh->R[j] * d[0] + sh->R[3 + j] * d[1] + sh->R[6 + j] * d[2];
}

static int inside(const shape *sh, const double l[3]) {
  const double eps = 1e-9;
  if (sh->kind == 0) return fabs(l[0]) <= sh->h[0] + eps && fabs(l[1]) <= sh->h[1] + eps && fabs(l[2]) <= sh->h[2] + eps;
  if (sh->kind == 1) return l[0] * l[0] + l[1] * l[1] + l[2] * l[2] <= sh->h[0] * sh->h[0] + eps;
  return l[0] * l[0] + l[1] * l[1] <= sh->h[0] * sh->h[0] + eps && fabs(l[2]) <= sh->h[2] + eps;
}

/* sample_cell's points for 40 cells of s's first body: in their cell, one to a stratum. */
static void strata(const char *name, const scene *s, int ppc) {
  int k = 1;
  while (k * k * k < ppc) ++k;
  int outside = 0, shared = 0;
  for (int t = 0; t < 40; ++t) {
    const int64_t c[3] = {3 + t % 17, 5 + (3 * t) % 19, 2 + (7 * t) % 23};
    double pts[3 * MAX_CELL_SAMPLES];
    unsigned char taken[MAX_CELL_SAMPLES] = {0};
    sample_cell(s, &s->bodies[0], c, 1234567u + (uint64_t)t, (uint64_t)(t * t), pts);
    for (int q = 0; q < ppc; ++q) {
      int st = 0;
      for (int a = 2; a >= 0; --a) {
        const double u = (pts[3 * q + a] - s->domain_min[a]) / s->dx - (double)c[a]; /* in [0, 1) within the cell */
        outside += !(u >= 0 && u < 1);
        const int j = u < 0 ? 0 : u >= 1 ? k - 1 : (int)(u * k);
        st = st * k + j;
      }
      shared += taken[st]++ > 0;
    }
  }
  CHECK(outside == 0, "%s, ppc %d: %d sample coordinates outside their cell", name, ppc, outside);
  CHECK(shared == 0, "%s, ppc %d: %d points share a stratum of side dx / %d with another of their cell", name, ppc, shared, k);
}

static void run(const char *name, const shape *sh, int ppc) {
  char json[2048], path[] = "/tmp/drift-sampling-XXXXXX.json";
  snprintf(json, sizeof json,
           "{\"domain\":{\"min\":[0,0,0],\"max\":[1,1,1],\"dx\":0.025},\"time\":{\"frames\":1,\"fps\":24,\"cfl\":0.5},"
           "\"materials\":{\"m\":{\"model\":\"fixed_corotated\",\"density\":1234,\"youngs_modulus\":1e5,\"poisson_ratio\":0.3}},"
           "\"bodies\":[%.*s,\"material\":\"m\",\"ppc\":%d}]}",
           (int)strlen(sh->json) - 1, sh->json, ppc);
  int fd = mkstemps(path, 5);
  FILE *f = fdopen(fd, "w");
  fputs(json, f);
  fclose(f);
  scene s;
  if (scene_load(path, &s) || scene_build_levelsets(&s)) {
    fprintf(stderr, "%s: %s\n", name, dr_message());
    ++failures;
    unlink(path);
    return;
  }
  unlink(path);
  particles p = {0};
  if (sample_scene(&s, &p)) {
    fprintf(stderr, "%s: %s\n", name, dr_message());
    ++failures;
    scene_destroy(&s);
    return;
  }
  const double dx = s.dx;
  strata(name, &s, ppc);
  double vol, area;
  if (sh->kind == 0) {
    vol = 8 * sh->h[0] * sh->h[1] * sh->h[2];
    area = 8 * (sh->h[0] * sh->h[1] + sh->h[1] * sh->h[2] + sh->h[0] * sh->h[2]);
  } else if (sh->kind == 1) {
    vol = 4.0 / 3.0 * PI * pow(sh->h[0], 3);
    area = 4 * PI * sh->h[0] * sh->h[0];
  } else {
    vol = PI * sh->h[0] * sh->h[0] * 2 * sh->h[2];
    area = 2 * PI * sh->h[0] * sh->h[0] + 2 * PI * sh->h[0] * 2 * sh->h[2];
  }
  const double expect = vol * ppc / (dx * dx * dx);
  /* strata the surface cuts: about (surface / dx^2) cut cells (x 1.5 for slanted cuts), ppc each */
  const double sigma = 0.5 * sqrt(1.5 * area / (dx * dx) * ppc);
  CHECK(fabs((double)p.n - expect) < 5 * sigma, "%s, ppc %d: %zu particles, expected %.1f +- %.1f", name, ppc, p.n,
        expect, 5 * sigma);
  CHECK(p.n == sample_count(&s, 0), "%s: sample_count %llu differs from the sampled %zu", name,
        (unsigned long long)sample_count(&s, 0), p.n);
  double mass = 0, m1[3] = {0, 0, 0}, m2[9] = {0};
  int outside = 0;
  for (size_t i = 0; i < p.n; ++i) {
    double l[3];
    local(sh, p.x + 3 * i, l);
    outside += !inside(sh, l);
    mass += p.mass[i];
    for (int a = 0; a < 3; ++a) {
      m1[a] += l[a];
      for (int b = 0; b < 3; ++b) m2[3 * a + b] += l[a] * l[b];
    }
  }
  CHECK(outside == 0, "%s: %d particles outside the shape", name, outside);
  CHECK(fabs(mass - 1234 * vol) < 1e-5 * 1234 * vol, "%s: mass %.9g, expected density * volume %.9g", name, mass,
        1234 * vol);
  /* second moments of the solid in its own frame: box h^2/3, sphere r^2/5, cylinder r^2/4 and
   * (half height)^2 / 3 along the axis; no cross terms, centroid at the centre */
  double want[3];
  for (int a = 0; a < 3; ++a)
    want[a] = sh->kind == 0 ? sh->h[a] * sh->h[a] / 3
              : sh->kind == 1 ? sh->h[0] * sh->h[0] / 5
              : a < 2 ? sh->h[0] * sh->h[0] / 4 : sh->h[2] * sh->h[2] / 3;
  double worst = 0, off = 0, cen = 0;
  for (int a = 0; a < 3; ++a) {
    worst = fmax(worst, fabs(m2[4 * a] / p.n - want[a]) / want[a]);
    cen = fmax(cen, fabs(m1[a] / p.n));
    for (int b = 0; b < 3; ++b)
      if (a != b) off = fmax(off, fabs(m2[3 * a + b] / p.n) / sqrt(want[a] * want[b]));
  }
  CHECK(worst < 0.03, "%s: second moments off by %.3f (relative)", name, worst);
  CHECK(off < 0.02, "%s: cross moments %.3f (should vanish in the shape's frame)", name, off);
  CHECK(cen < 0.1 * dx, "%s: centroid %.4f m off the centre", name, cen);
  /* ids unique */
  uint64_t *ids = malloc(sizeof *ids * (p.n ? p.n : 1));
  memcpy(ids, p.id, sizeof *ids * p.n);
  int cmp(const void *x, const void *y);
  qsort(ids, p.n, sizeof *ids, cmp);
  int dup = 0;
  for (size_t i = 1; i < p.n; ++i) dup += ids[i] == ids[i - 1];
  CHECK(dup == 0, "%s: %d duplicate ids", name, dup);
  printf("%-28s ppc %2d: %7zu particles, expected %9.1f (%+.2f sigma); moments within %.2f%%\n", name, ppc, p.n, expect,
         ((double)p.n - expect) / sigma, 100 * worst);
  free(ids);
  particles_free(&p);
  scene_destroy(&s);
}

int cmp(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return (a > b) - (a < b);
}

int main(void) {
  shape box = {"{\"shape\":\"box\",\"min\":[0.2,0.3,0.25],\"max\":[0.7,0.55,0.65]}", 0, {0.45, 0.425, 0.45},
               {1, 0, 0, 0, 1, 0, 0, 0, 1}, {0.25, 0.125, 0.2}};
  shape rbox = {"{\"shape\":\"box\",\"min\":[0.3,0.35,0.4],\"max\":[0.7,0.55,0.6],\"rotation\":{\"axis\":[1,2,3],"
                "\"angle\":30}}",
                0, {0.5, 0.45, 0.5}, {0}, {0.2, 0.1, 0.1}};
  const double ax[3] = {1, 2, 3};
  rotation(ax, 30, rbox.R);
  shape sph = {"{\"shape\":\"sphere\",\"center\":[0.5,0.5,0.5],\"radius\":0.23}", 1, {0.5, 0.5, 0.5},
               {1, 0, 0, 0, 1, 0, 0, 0, 1}, {0.23, 0, 0}};
  shape cyl = {"{\"shape\":\"cylinder\",\"center\":[0.5,0.45,0.5],\"axis\":[0,0,1],\"radius\":0.17,\"height\":0.5}", 2,
               {0.5, 0.45, 0.5}, {1, 0, 0, 0, 1, 0, 0, 0, 1}, {0.17, 0, 0.25}};
  /* tilted along (1, 1, 1): a frame whose third column is the axis */
  shape tcyl = {"{\"shape\":\"cylinder\",\"center\":[0.5,0.5,0.5],\"axis\":[1,1,1],\"radius\":0.12,\"height\":0.6}", 2,
                {0.5, 0.5, 0.5}, {0}, {0.12, 0, 0.3}};
  const double s3 = 1 / sqrt(3.0), s2 = 1 / sqrt(2.0), s6 = 1 / sqrt(6.0);
  const double T[9] = {s2, s6, s3, -s2, s6, s3, 0, -2 * s6, s3};
  memcpy(tcyl.R, T, sizeof T);
  const int ppcs[2] = {8, 27};
  for (int k = 0; k < 2; ++k) {
    run("box", &box, ppcs[k]);
    run("box rotated 30 deg", &rbox, ppcs[k]);
    run("sphere", &sph, ppcs[k]);
    run("cylinder along z", &cyl, ppcs[k]);
    run("cylinder along (1,1,1)", &tcyl, ppcs[k]);
  }
  run("cylinder along z", &cyl, 5); /* fewer particles than strata: a random subset per cell */
  if (failures) {
    fprintf(stderr, "test_sampling: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_sampling: all checks passed\n");
  return 0;
}

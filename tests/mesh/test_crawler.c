/* The crawling figure of jobs/scenes/crawling_snow.json (jobs/scenes/crawler/, written by
 * tools/make_crawler.py), as drift reads it:
 *   - every file of the sequence reads with drift's OBJ reader, with the same vertex and triangle
 *     counts; each connected part is closed and consistently oriented (every directed edge once,
 *     its reverse once) and encloses a positive volume (outward triangles);
 *   - the scene at a coarse cell (4.5 cm instead of 1.35 cm; about 35,000 particles of the same
 *     NACC snow) with the first second of the sequence (31 files at 30 fps): the figure settles
 *     into the snow and crawls; at every frame that falls on a file of the sequence (every second
 *     frame at 60 fps), no particle lies inside any part of the figure by more than half a cell.
 *     The depth is measured on the OBJ file itself (the distance to the part's triangles, inside
 *     where the part's winding number is 1), not with drift's level sets; the figure must touch
 *     the snow (particles within half a cell of its surface) for the test to mean anything. */
#include "mesh.h"
#include "meshsdf.h"
#include "sim/simtest.h"

#ifndef CRAWLER_DIR
#error "CRAWLER_DIR: the folder of the crawler's OBJ files"
#endif

#define N_FILES 121 /* the sequence: 4 s at 30 fps, crawler_0000.obj .. crawler_0120.obj */
#define PI 3.14159265358979323846
static const double place[3] = {1.3, 0.189, 0.4725}; /* the scene's translation */

static int cmp_edge(const void *a, const void *b) {
  const long long x = *(const long long *)a, y = *(const long long *)b;
  return (x > y) - (x < y);
}

/* Connected parts of m: part[v] for every vertex (by shared vertices). Returns the count. */
static int parts_of(const mesh *m, int *part) {
  for (int i = 0; i < m->n_verts; ++i) part[i] = -1;
  int n = 0, changed = 1;
  for (int t = 0; t < m->n_tris; ++t)
    for (int k = 0; k < 3; ++k)
      if (part[m->tri[3 * t + k]] < 0) part[m->tri[3 * t + k]] = n++;
  while (changed) { /* relax: a triangle's vertices take the smallest label among them */
    changed = 0;
    for (int t = 0; t < m->n_tris; ++t) {
      int lo = part[m->tri[3 * t]];
      for (int k = 1; k < 3; ++k) lo = part[m->tri[3 * t + k]] < lo ? part[m->tri[3 * t + k]] : lo;
      for (int k = 0; k < 3; ++k)
        if (part[m->tri[3 * t + k]] != lo) part[m->tri[3 * t + k]] = lo, changed = 1;
    }
  }
  int *rename = malloc(sizeof(int) * (size_t)n), np = 0;
  for (int i = 0; i < n; ++i) rename[i] = -1;
  for (int i = 0; i < m->n_verts; ++i)
    if (part[i] >= 0) {
      if (rename[part[i]] < 0) rename[part[i]] = np++;
      part[i] = rename[part[i]];
    }
  free(rename);
  return np;
}

static void check_sequence(void) {
  int nv0 = -1, nt0 = -1, np0 = -1, bad = 0;
  for (int k = 0; k < N_FILES; ++k) {
    char path[4096], err[700];
    snprintf(path, sizeof path, "%s/crawler_%04d.obj", CRAWLER_DIR, k);
    mesh m;
    if (mesh_read_obj(path, &m, err, sizeof err)) {
      CHECK(0, "%s", err);
      return;
    }
    int *part = malloc(sizeof(int) * (size_t)m.n_verts);
    const int np = parts_of(&m, part);
    if (k == 0) nv0 = m.n_verts, nt0 = m.n_tris, np0 = np;
    CHECK(m.n_verts == nv0 && m.n_tris == nt0 && np == np0, "%s: %d vertices, %d triangles, %d parts; the first file %d, %d, %d",
          path, m.n_verts, m.n_tris, np, nv0, nt0, np0);
    /* closed and consistently oriented: the sorted directed edges hold each edge once and its reverse */
    long long *e = malloc(sizeof(long long) * 3 * (size_t)m.n_tris);
    for (int t = 0; t < m.n_tris; ++t)
      for (int j = 0; j < 3; ++j) e[3 * t + j] = (long long)m.tri[3 * t + j] * m.n_verts + m.tri[3 * t + (j + 1) % 3];
    qsort(e, 3 * (size_t)m.n_tris, sizeof *e, cmp_edge);
    for (size_t i = 0; i < 3 * (size_t)m.n_tris; ++i) {
      const long long a = e[i] / m.n_verts, b = e[i] % m.n_verts, rev = b * m.n_verts + a;
      if ((i > 0 && e[i - 1] == e[i]) || !bsearch(&rev, e, 3 * (size_t)m.n_tris, sizeof *e, cmp_edge) || a == b) ++bad;
    }
    /* each part encloses a positive volume */
    double *vol = calloc((size_t)np, sizeof *vol);
    for (int t = 0; t < m.n_tris; ++t) {
      const double *A = m.v + 3 * m.tri[3 * t], *B = m.v + 3 * m.tri[3 * t + 1], *C = m.v + 3 * m.tri[3 * t + 2];
      vol[part[m.tri[3 * t]]] += (A[0] * (B[1] * C[2] - B[2] * C[1]) - A[1] * (B[0] * C[2] - B[2] * C[0]) +
                                  A[2] * (B[0] * C[1] - B[1] * C[0])) / 6;
    }
    for (int c = 0; c < np; ++c) CHECK(vol[c] > 1e-5, "%s: part %d encloses %g m^3 (expected > 0: outward triangles)", path, c, vol[c]);
    if (k == 0) printf("crawler_0000.obj: %d vertices, %d triangles, %d closed parts, volume %.4f m^3\n", m.n_verts, m.n_tris, np,
                       mesh_volume(&m));
    free(vol), free(e), free(part);
    mesh_destroy(&m);
  }
  CHECK(bad == 0, "%d directed edges are not matched by exactly one reverse edge (expected closed, consistently "
        "oriented parts)", bad);
  printf("%d files: the same %d vertices and %d triangles, every part closed and outward\n", N_FILES, nv0, nt0);
}

static double solid_angle(const double x[3], const double *A, const double *B, const double *C) {
  double a[3], b[3], c[3];
  for (int i = 0; i < 3; ++i) a[i] = A[i] - x[i], b[i] = B[i] - x[i], c[i] = C[i] - x[i];
  const double la = sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2]), lb = sqrt(b[0] * b[0] + b[1] * b[1] + b[2] * b[2]),
               lc = sqrt(c[0] * c[0] + c[1] * c[1] + c[2] * c[2]);
  const double det = a[0] * (b[1] * c[2] - b[2] * c[1]) - a[1] * (b[0] * c[2] - b[2] * c[0]) + a[2] * (b[0] * c[1] - b[1] * c[0]);
  const double den = la * lb * lc + (a[0] * b[0] + a[1] * b[1] + a[2] * b[2]) * lc +
                     (a[0] * c[0] + a[1] * c[1] + a[2] * c[2]) * lb + (b[0] * c[0] + b[1] * c[1] + b[2] * c[2]) * la;
  return 2 * atan2(det, den);
}

/* The deepest particle inside any part of the figure (file k, placed as the scene places it),
 * and how many particles lie within touch of its surface (outside or inside). */
static double deepest(const particles *p, int k, double touch, int *touching) {
  char path[4096], err[700];
  snprintf(path, sizeof path, "%s/crawler_%04d.obj", CRAWLER_DIR, k);
  mesh m;
  MUST(mesh_read_obj(path, &m, err, sizeof err));
  for (int i = 0; i < m.n_verts; ++i)
    for (int a = 0; a < 3; ++a) m.v[3 * i + a] += place[a];
  int *part = malloc(sizeof(int) * (size_t)m.n_verts);
  const int np = parts_of(&m, part);
  double *box = malloc(sizeof(double) * 6 * (size_t)np);
  for (int c = 0; c < np; ++c)
    for (int a = 0; a < 3; ++a) box[6 * c + a] = INFINITY, box[6 * c + 3 + a] = -INFINITY;
  for (int i = 0; i < m.n_verts; ++i)
    for (int a = 0; a < 3; ++a)
      box[6 * part[i] + a] = fmin(box[6 * part[i] + a], m.v[3 * i + a]), box[6 * part[i] + 3 + a] = fmax(box[6 * part[i] + 3 + a], m.v[3 * i + a]);
  double worst = 0;
  *touching = 0;
  for (size_t i = 0; i < p->n; ++i) {
    const double x[3] = {p->x[3 * i], p->x[3 * i + 1], p->x[3 * i + 2]};
    int near = 0;
    for (int c = 0; c < np; ++c) {
      const double *b = box + 6 * c;
      if (x[0] < b[0] - touch || x[1] < b[1] - touch || x[2] < b[2] - touch || x[0] > b[3] + touch ||
          x[1] > b[4] + touch || x[2] > b[5] + touch)
        continue;
      double w = 0, d = INFINITY, bary[3];
      for (int t = 0; t < m.n_tris; ++t) {
        if (part[m.tri[3 * t]] != c) continue;
        const double *A = m.v + 3 * m.tri[3 * t], *B = m.v + 3 * m.tri[3 * t + 1], *C = m.v + 3 * m.tri[3 * t + 2];
        w += solid_angle(x, A, B, C);
        d = fmin(d, meshsdf_point_triangle(x, A, B, C, bary));
      }
      if (w > 2 * PI) worst = fmax(worst, d); /* inside this part (winding number 1) */
      near |= d < touch;
    }
    *touching += near;
  }
  free(box), free(part);
  mesh_destroy(&m);
  return worst;
}

static void crawl_coarse(void) {
  const double dx = 0.045;
  char json[4096];
  snprintf(json, sizeof json,
           "{\"domain\":{\"min\":[0,0,0],\"max\":[3.267,0.675,0.945],\"dx\":%g},"
           "\"time\":{\"frames\":60,\"fps\":60,\"cfl\":0.5},"
           "\"materials\":{\"snow\":{\"model\":\"nacc\",\"density\":400,\"bulk_modulus\":5e4,\"poisson_ratio\":0.3,"
           "\"friction\":0.8,\"cohesion\":0.9,\"hardening\":5,\"initial_compression\":-0.01}},"
           "\"bodies\":[{\"shape\":\"box\",\"min\":[0.045,0.045,0.045],\"max\":[3.222,0.189,0.9],\"material\":\"snow\"}],"
           "\"boundary\":{\"type\":\"slip\",\"y-\":{\"type\":\"separate\",\"friction\":0.5}},"
           "\"colliders\":[{\"shape\":\"mesh\",\"files\":\"%s/crawler_%%04d.obj\",\"fps\":30,\"count\":31,"
           "\"translation\":[%g,%g,%g],\"type\":\"separate\",\"friction\":0.5}]}",
           dx, CRAWLER_DIR, place[0], place[1], place[2]);
  scene s;
  scene_from_text(json, &s);
  CHECK(s.n_colliders == 1 && s.colliders[0].n_frames == 31, "the collider holds %d frames, expected 31",
        s.n_colliders ? s.colliders[0].n_frames : 0);
  sim *S = start(&s);
  particles p = {0};
  double worst = 0;
  int worst_frame = 0, most_touching = 0;
  for (int f = 1; f <= s.frames; ++f) {
    MUST(sim_advance_frame(S));
    if (f % 2) continue; /* frame f at 60 fps is file f / 2 at 30 fps */
    MUST(sim_particles(S, &p));
    int touching;
    const double d = deepest(&p, f / 2, 0.5 * dx, &touching);
    if (d > worst) worst = d, worst_frame = f;
    most_touching = touching > most_touching ? touching : most_touching;
    if (f % 12 == 0)
      printf("t %.3f s: deepest particle %.3f dx inside the figure, %d particles within half a cell of it\n", f / 60.0,
             d / dx, touching);
  }
  printf("%zu particles, 1 s: deepest %.3f dx inside the figure (frame %d); at most %d particles within half a cell\n", p.n,
         worst / dx, worst_frame, most_touching);
  CHECK(most_touching > 200, "the figure never touched the snow (at most %d particles within half a cell of it)",
        most_touching);
  CHECK(worst < 0.5 * dx, "a particle got %.3f dx into the figure at frame %d (at most 0.5 allowed)", worst / dx,
        worst_frame);
  particles_free(&p);
  sim_destroy(&S);
  scene_destroy(&s);
}

/* DRIFT_CRAWLER=sequence: the files only. The crawl is issue 9: before the union level sets of
 * meshsdf.c and the particle collision step of physics/boundary.h, snow ended 1.25 cells (5.6 cm)
 * inside the figure, in the creases of the knees; now about 0.1 cell. */
int main(int argc, char **argv) {
  choose_backend(argc, argv);
  init(&argc, &argv);
  const char *only = getenv("DRIFT_CRAWLER");
  double t0 = MPI_Wtime();
  check_sequence();
  printf("(%.1f s)\n", MPI_Wtime() - t0);
  if (!only || strcmp(only, "sequence")) {
    t0 = MPI_Wtime();
    crawl_coarse();
    printf("(%.1f s)\n", MPI_Wtime() - t0);
  }
  return finish("test_crawler");
}

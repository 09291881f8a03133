/* test_mesh - triangle meshes (src/mesh.c), their narrow-band level sets (src/meshsdf.c,
 * src/physics/levelset.h) and mesh bodies, against expectations computed here:
 *   - the OBJ reader: quads as fans, v/vt/vn index forms, negative indices give the unit cube
 *     (12 triangles, volume 1); malformed files fail with "FILE:LINE: ..." naming the line;
 *   - the level set of the unit cube mesh against the box's exact signed distance, and of an
 *     icosphere mesh against brute-force distances to its triangles and against the sphere:
 *     the largest error in the band is a small fraction of dx, and the sign is right at every
 *     point sampled (band, deep inside, far outside), rotated and shifted lattices included;
 *   - collider_apply's shortcut for mesh nodes far outside the band gives the full evaluation's
 *     result at every node, on an animated, keyframed icosphere sequence, and skips most nodes;
 *   - two overlapping cubes in one mesh: inside, phi is the depth in the part the point is
 *     deepest in (the union's min of the parts' signed distances), not the distance to the
 *     other part's buried faces;
 *   - a mesh body from the cube OBJ holds the same particles (count within 1 %, same mass) as
 *     the box body it equals, and every particle of an icosphere body lies in the sphere;
 *   - meshsdf_size's bricks against a brute-force count (every brick of the lattice against every
 *     triangle), and a scene's level sets planned at load (jobs/scenes/meshes.json: static,
 *     keyframed and sequence colliders, a mesh body), nothing sampled before they are built, and
 *     the build allocating exactly the planned bytes (counted host memory). */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "mesh.h"
#include "memtally.h"
#include "meshsdf.h"
#include "particles.h"
#include "physics/check.h"
#include "sample.h"
#include "scene.h"

#ifndef MESH_DIR
#error "MESH_DIR: the folder of the test meshes"
#endif

static void path_of(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", MESH_DIR, name); }

/* Reads the test mesh NAME (MESH_DIR) into *m; 0, or 1 after a failed check naming the cause. */
static int read_test_mesh(const char *name, mesh *m) {
  char p[512], err[800];
  path_of(p, sizeof p, name);
  if (mesh_read_obj(p, m, err, sizeof err) == 0) return 0;
  CHECK(0, "%s", err);
  return 1;
}

/* Writes text to a temporary .obj file; returns its path (static buffer). */
static const char *temp_obj(const char *text) {
  static char path[64];
  snprintf(path, sizeof path, "/tmp/drift-mesh-XXXXXX.obj");
  int fd = mkstemps(path, 4);
  if (fd < 0) {
    perror("mkstemps");
    exit(1);
  }
  FILE *f = fdopen(fd, "w");
  fputs(text, f);
  fclose(f);
  return path;
}

static void test_reader(void) {
  char p[512], err[800];
  mesh m;
  const char *good[] = {"cube.obj", "cube_relative.obj"};
  for (int g = 0; g < 2; ++g) {
    path_of(p, sizeof p, good[g]);
    int rc = mesh_read_obj(p, &m, err, sizeof err);
    CHECK(rc == 0, "%s: %s", good[g], err);
    if (rc) continue;
    double lo[3], hi[3];
    mesh_bounds(&m, lo, hi);
    CHECK(m.n_tris == 12, "%s: %d triangles, expected 12 (6 quads as fans)", good[g], m.n_tris);
    CHECK(fabs(mesh_volume(&m) - 1.0) < 1e-12, "%s: volume %g, expected 1 (outward faces)", good[g], mesh_volume(&m));
    for (int a = 0; a < 3; ++a) CHECK(lo[a] == 0 && hi[a] == 1, "%s: bounds [%g, %g] along %d", good[g], lo[a], hi[a], a);
    mesh_destroy(&m);
  }
  /* bad files: the message names the file and the line */
  struct {
    const char *text;
    int line;
    const char *says;
  } bad[] = {
      {"v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 4\n", 4, "refers to vertex 4"},
      {"v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 -4\n", 4, "refers to vertex -4"},
      {"v 0 0 0\nv 1 0 0\nv 0 1 0\nf 0 1 2\n", 4, "refers to vertex 0"},
      {"# c\nv 0 0 0\nv 1 zero 0\n", 3, "coordinate y is not a number"},
      {"v 0 0 0\nv 1 0\n", 2, "vertex with 2 coordinates"},
      {"v 0 0 0\nv 1 0 0\nv 0 1 0\n\nf 1 2\n", 5, "face with 2 vertices"},
      {"v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 x/2 3\n", 4, "face vertex 2 is not a vertex index"},
      {"v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 /2 3\n", 4, "face vertex 2 is not a vertex index"},
      {"v 0 0 nan\n", 1, "not finite"},
      {"v 0 0 0\nv 1 0 0\nv 0 1 0\n", 0, "no faces"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; ++i) {
    const char *path = temp_obj(bad[i].text);
    int rc = mesh_read_obj(path, &m, err, sizeof err);
    char where[128];
    if (bad[i].line) snprintf(where, sizeof where, "%s:%d: ", path, bad[i].line);
    else snprintf(where, sizeof where, "%s: ", path);
    CHECK(rc == DR_EINPUT && strncmp(err, where, strlen(where)) == 0 && strstr(err, bad[i].says),
          "bad file %zu: rc %d, message \"%s\" (expected \"%s...%s...\")", i, rc, err, where, bad[i].says);
    if (!rc) mesh_destroy(&m);
    unlink(path);
  }
  int rc = mesh_read_obj("/nonexistent/x.obj", &m, err, sizeof err);
  CHECK(rc == DR_EINPUT && strstr(err, "/nonexistent/x.obj: cannot read"), "missing file: \"%s\"", err);
}

/* exact signed distance to the box [lo, hi] */
static double box_sdf(const double lo[3], const double hi[3], const double x[3]) {
  double out = 0, in = -INFINITY;
  for (int a = 0; a < 3; ++a) {
    double c = 0.5 * (lo[a] + hi[a]), h = 0.5 * (hi[a] - lo[a]), d = fabs(x[a] - c) - h;
    if (d > 0) out += d * d;
    in = fmax(in, d);
  }
  return in > 0 ? sqrt(out) : in;
}

/* brute force over the triangles; the sign by the winding number is what we test, so here the
 * sign comes from the sphere (the icosphere's vertices lie on it, its faces within sag inside) */
static double mesh_dist(const mesh *m, const double x[3]) {
  double d = INFINITY, b[3];
  for (int t = 0; t < m->n_tris; ++t)
    d = fmin(d, meshsdf_point_triangle(x, m->v + 3 * m->tri[3 * t], m->v + 3 * m->tri[3 * t + 1],
                                       m->v + 3 * m->tri[3 * t + 2], b));
  return d;
}

static void test_cube_levelset(void) {
  mesh m;
  if (read_test_mesh("cube.obj", &m)) return;
  /* shifted and scaled: the cube [0.3, 0.7] x [0.2, 0.6] x [0.1, 0.5] (a side of 0.4 m), dx 0.05 */
  for (int i = 0; i < m.n_verts; ++i)
    for (int a = 0; a < 3; ++a) m.v[3 * i + a] = 0.4 * m.v[3 * i + a] + 0.3 - 0.1 * a;
  const double lo[3] = {0.3, 0.2, 0.1}, hi[3] = {0.7, 0.6, 0.5}, dx = 0.05, band = 2 * dx;
  const double shift[3] = {0.5, 0.4, 0.3};
  levelset_pool pool = {0};
  int idx = -1;
  CHECK(meshsdf_build(&pool, &m, shift, 0.5 * dx, band, NULL, NULL, "cube", &idx) == 0 && idx == 0, "build: %s",
        dr_message());
  check_rng r = {7};
  double worst = 0, worst_far = 0;
  long wrong_sign = 0, n = 0;
  for (int i = 0; i < 200000; ++i) {
    double x[3];
    for (int a = 0; a < 3; ++a) x[a] = lo[a] - 0.3 + 1.0 * check_rng_unit(&r);
    double xl[3] = {x[0] - shift[0], x[1] - shift[1], x[2] - shift[2]};
    const double e = box_sdf(lo, hi, x), got = levelset_phi(&pool, idx, xl);
    ++n;
    if (fabs(e) > 1e-6 && (e < 0) != (got < 0)) ++wrong_sign;
    if (fabs(e) < band - dx) worst = fmax(worst, fabs(got - e));
    else worst_far = fmax(worst_far, fabs(got - fmax(-band, fmin(band, e))));
  }
  printf("cube level set: %ld points, max |error| %.4f dx in the band, %.4f dx beyond (clamped at %g dx), %ld wrong signs\n",
         n, worst / dx, worst_far / dx, band / dx, wrong_sign);
  CHECK(wrong_sign == 0, "%ld points with the wrong sign", wrong_sign);
  /* trilinear interpolation is exact across a face; the error is at the box's edges and corners
   * (outside: the distance is curved; inside: the kink where the nearest face changes): h / 3 */
  CHECK(worst < 0.2 * dx, "max error %.4f dx in the band", worst / dx);
  CHECK(worst_far < 0.6 * dx, "max error %.4f dx next to the band's edge", worst_far / dx);
  /* the gradient is the face normal in the middle of a face */
  float g[3];
  const float xf[3] = {0.2f + 0.013f, 0.017f, -0.011f}; /* just outside the +x face (local frame) */
  const float phi = ls_sample(&pool.sets[idx], pool.table, pool.bricks, xf, g, 0, NULL);
  CHECK(fabsf(phi - 0.013f) < 1e-4f && fabsf(g[0] - 1) < 1e-3f && fabsf(g[1]) < 1e-3f && fabsf(g[2]) < 1e-3f,
        "phi %g gradient (%g %g %g) on the +x face, expected 0.013 and (1 0 0)", phi, g[0], g[1], g[2]);
  levelset_pool_free(&pool);
  mesh_destroy(&m);
}

/* Two closed parts in one mesh that overlap (the crawler's limbs at their joints): the cube of
 * test_cube_levelset and the same cube 0.2 m further along x, [0.5, 0.9]. Inside, phi is the
 * depth in the part the point is deepest in, min(phi_A, phi_B), not the distance to the nearest
 * triangle: at x = 0.52, 2 cm from B's buried face at x = 0.5, a point is 18 cm deep in A. */
static void test_union_levelset(void) {
  char p[512], err[800];
  mesh a, b;
  path_of(p, sizeof p, "cube.obj");
  if (mesh_read_obj(p, &a, err, sizeof err) || mesh_read_obj(p, &b, err, sizeof err)) {
    CHECK(0, "%s", err);
    return;
  }
  mesh m = {a.n_verts + b.n_verts, a.n_tris + b.n_tris, malloc(sizeof(double) * 3 * (size_t)(a.n_verts + b.n_verts)),
            malloc(sizeof(int) * 3 * (size_t)(a.n_tris + b.n_tris))};
  for (int i = 0; i < a.n_verts; ++i)
    for (int k = 0; k < 3; ++k) {
      m.v[3 * i + k] = 0.4 * a.v[3 * i + k] + 0.3 - 0.1 * k;
      m.v[3 * (a.n_verts + i) + k] = m.v[3 * i + k] + (k == 0 ? 0.2 : 0.0);
    }
  for (int t = 0; t < 3 * a.n_tris; ++t) m.tri[t] = a.tri[t], m.tri[3 * a.n_tris + t] = a.tri[t] + a.n_verts;
  const double loa[3] = {0.3, 0.2, 0.1}, hia[3] = {0.7, 0.6, 0.5}, lob[3] = {0.5, 0.2, 0.1}, hib[3] = {0.9, 0.6, 0.5};
  const double dx = 0.05, band = 2 * dx, zero[3] = {0, 0, 0};
  levelset_pool pool = {0};
  int idx = -1;
  CHECK(meshsdf_build(&pool, &m, zero, 0.5 * dx, band, NULL, NULL, "two cubes", &idx) == 0, "build: %s", dr_message());
  check_rng r = {11};
  double worst = 0;
  long wrong_sign = 0, n = 0;
  for (int i = 0; i < 100000; ++i) {
    double x[3];
    for (int k = 0; k < 3; ++k) x[k] = loa[k] - 0.15 + (hib[k] - loa[k] + 0.3) * check_rng_unit(&r);
    const double e = fmin(box_sdf(loa, hia, x), box_sdf(lob, hib, x)), got = levelset_phi(&pool, idx, x);
    ++n;
    if (fabs(e) > 1e-6 && (e < 0) != (got < 0)) ++wrong_sign;
    if (fabs(e) < band - dx) worst = fmax(worst, fabs(got - e));
  }
  const double x[3] = {0.52, 0.4, 0.3};
  const double deep = levelset_phi(&pool, idx, x);
  printf("two overlapping cubes: %ld points, max |error| %.4f dx in the band, %ld wrong signs; phi %.4f dx 2 cm from "
         "a buried face, 18 cm deep (expected -2 dx, the band)\n",
         n, worst / dx, wrong_sign, deep / dx);
  CHECK(wrong_sign == 0, "%ld points with the wrong sign", wrong_sign);
  CHECK(worst < 0.2 * dx, "max error %.4f dx in the band", worst / dx);
  CHECK(fabs(deep + band) < 1e-5, "phi %g m at (0.52, 0.4, 0.3), 18 cm deep in the first cube (expected -%g, the band)",
        deep, band);
  levelset_pool_free(&pool);
  mesh_destroy(&m), mesh_destroy(&a), mesh_destroy(&b);
}

static void test_icosphere_levelset(void) {
  mesh m;
  if (read_test_mesh("icosphere.obj", &m)) return;
  const double R = 0.3, dx = 0.04, band = 2 * dx, c[3] = {0.1, -0.2, 0.05};
  for (int i = 0; i < 3 * m.n_verts; ++i) m.v[i] = R * m.v[i] + c[i % 3];
  /* the faces' sag below the sphere: the icosphere lies between R cos(edge angle) and R */
  double sag = 0;
  for (int t = 0; t < m.n_tris; ++t) {
    double ctr[3] = {0, 0, 0};
    for (int k = 0; k < 3; ++k)
      for (int a = 0; a < 3; ++a) ctr[a] += m.v[3 * m.tri[3 * t + k] + a] / 3;
    sag = fmax(sag, R - sqrt((ctr[0] - c[0]) * (ctr[0] - c[0]) + (ctr[1] - c[1]) * (ctr[1] - c[1]) + (ctr[2] - c[2]) * (ctr[2] - c[2])));
  }
  levelset_pool pool = {0};
  int idx = -1;
  CHECK(meshsdf_build(&pool, &m, c, 0.5 * dx, band, NULL, NULL, "icosphere", &idx) == 0, "build: %s", dr_message());
  check_rng r = {11};
  double worst_mesh = 0, worst_sphere = 0;
  long wrong = 0, n = 0;
  for (int i = 0; i < 40000; ++i) {
    double xl[3], x[3], d2 = 0;
    for (int a = 0; a < 3; ++a) xl[a] = -0.5 + check_rng_unit(&r), x[a] = xl[a] + c[a], d2 += xl[a] * xl[a];
    const double rho = sqrt(d2), ds = rho - R, got = levelset_phi(&pool, idx, xl);
    /* inside the polyhedron for sure below R - sag, outside for sure beyond R */
    if (rho < R - sag - 1e-9 || rho > R + 1e-9) {
      ++n;
      if ((rho < R) != (got < 0)) ++wrong;
    }
    if (fabs(ds) < band - dx) {
      const double dm = mesh_dist(&m, x) * (ds < 0 ? -1 : 1); /* the polyhedron's own distance */
      if (fabs(ds) > sag) worst_mesh = fmax(worst_mesh, fabs(got - dm));
      worst_sphere = fmax(worst_sphere, fabs(got - ds));
    }
  }
  printf("icosphere level set (%d triangles, sag %.4f dx): max |error| %.4f dx against the mesh, %.4f dx against the sphere; %ld of %ld signs wrong\n",
         m.n_tris, sag / dx, worst_mesh / dx, worst_sphere / dx, wrong, n);
  CHECK(wrong == 0, "%ld wrong signs", wrong);
  CHECK(worst_mesh < 0.1 * dx, "max error %.4f dx against the mesh's distance", worst_mesh / dx);
  CHECK(worst_sphere < 0.1 * dx + sag, "max error %.4f dx against the sphere", worst_sphere / dx);
  /* The gradient (the colliders' normal) is continuous: on the two sides of a lattice node, a
   * float step apart across the cells' faces, it agrees (the gradient of the trilinear phi
   * jumped there by ~h / R, and which cell floor() picked followed the last bit of the point:
   * a CPU and a GPU build took different normals where grid nodes lie on level-set nodes); and
   * near the surface it is the sphere's radial direction. */
  const levelset *L = &pool.sets[idx];
  double worst_jump = 0, worst_dir = 0;
  long nodes = 0;
  for (int i = 0; i < 4 * L->dims[0]; ++i)
    for (int j = 0; j < 4 * L->dims[1]; ++j)
      for (int k = 0; k < 4 * L->dims[2]; ++k) {
        const int id[3] = {i, j, k};
        float xn[3], lo[3], hi[3], glo[3], ghi[3];
        double d2 = 0;
        for (int a = 0; a < 3; ++a) {
          xn[a] = L->origin[a] + (float)id[a] * L->h;
          lo[a] = nextafterf(xn[a], -INFINITY), hi[a] = nextafterf(xn[a], INFINITY);
          d2 += (double)xn[a] * xn[a];
        }
        if (fabs(sqrt(d2) - R) > 0.5 * dx) continue;
        ++nodes;
        ls_sample(L, pool.table, pool.bricks, lo, glo, 0, NULL);
        ls_sample(L, pool.table, pool.bricks, hi, ghi, 0, NULL);
        double gl = 0, dot = 0;
        for (int a = 0; a < 3; ++a) {
          worst_jump = fmax(worst_jump, fabs((double)glo[a] - ghi[a]));
          gl += (double)ghi[a] * ghi[a], dot += ghi[a] * xn[a];
        }
        worst_dir = fmax(worst_dir, 1 - dot / sqrt(gl * d2));
      }
  printf("icosphere gradient at %ld lattice nodes within 0.5 dx of the sphere: max jump across the node %.3g, max 1 - "
         "cos(angle to the radius) %.3g\n", nodes, worst_jump, worst_dir);
  CHECK(nodes > 100 && worst_jump < 1e-3, "the gradient jumps by %.3g across lattice nodes (%ld nodes)", worst_jump,
        nodes);
  CHECK(worst_dir < 0.02, "the gradient is %.3g (1 - cos) off the sphere's radius", worst_dir);
  /* ls_far_outside (the particle collision step's shortcut) says "outside" only where the eight
   * corners all read +band, i.e. where ls_sample gives +band up to rounding; and it does say so
   * for most points of the box around the sphere beyond the band. */
  long far = 0, far_beyond = 0, beyond = 0, far_wrong = 0;
  for (int i = 0; i < 40000; ++i) {
    float xl[3];
    double d2 = 0;
    for (int a = 0; a < 3; ++a) xl[a] = (float)(-0.6 + 1.2 * check_rng_unit(&r)), d2 += (double)xl[a] * xl[a];
    const int f = ls_far_outside(L, pool.table, xl);
    const float phi = ls_sample(L, pool.table, pool.bricks, xl, NULL, 0, NULL);
    far += f;
    if (f && !(fabsf(phi - L->band) <= 1e-6f * L->band)) ++far_wrong;
    if (sqrt(d2) > R + 3 * band) ++beyond, far_beyond += f;
  }
  printf("ls_far_outside: %ld of 40000 points far outside, %ld of the %ld beyond R + 3 band; %ld where phi is not +band\n",
         far, far_beyond, beyond, far_wrong);
  CHECK(far_wrong == 0, "ls_far_outside said outside at %ld points where phi is not +band", far_wrong);
  CHECK(far_beyond == beyond && beyond > 1000, "ls_far_outside missed %ld of %ld points far from the sphere",
        beyond - far_beyond, beyond);
  levelset_pool_free(&pool);
  mesh_destroy(&m);
}

/* collider_apply's shortcut for mesh nodes far outside (collider_mesh_idle): wherever it skips a
 * node, the full evaluation (collider_eval: phi, normal and velocity of the blended frames) would
 * not have acted either, and where it does not skip, the result is the full one's. An icosphere
 * sequence of two frames (the second moved 6 cells along x, per-vertex velocities on), turned and
 * moved by keyframes, at a time before the sequence (frame 0 alone), between its frames (blend)
 * and after it (frame 1 alone), at random nodes around it; then with the grid's act distance
 * set to the level set's band, where the shortcut must never fire. */
static void test_mesh_collider_idle(void) {
  mesh m;
  if (read_test_mesh("icosphere.obj", &m)) return;
  const double R = 0.3, dx = 0.04, band = 2 * dx, c[3] = {0.1, -0.2, 0.05}, step = 0.24, V = step * 4;
  for (int i = 0; i < 3 * m.n_verts; ++i) m.v[i] = R * m.v[i] + c[i % 3];
  double *vel = malloc(sizeof(double) * 3 * (size_t)m.n_verts);
  for (int i = 0; i < 3 * m.n_verts; ++i) vel[i] = i % 3 == 0 ? V : 0.0;
  levelset_pool pool = {0};
  int i0 = -1, i1 = -1;
  CHECK(meshsdf_build(&pool, &m, c, 0.5 * dx, band, vel, vel, "frame 0", &i0) == 0, "build: %s", dr_message());
  for (int i = 0; i < m.n_verts; ++i) m.v[3 * i] += step;
  CHECK(meshsdf_build(&pool, &m, c, 0.5 * dx, band, vel, vel, "frame 1", &i1) == 0 && i1 == i0 + 1, "build: %s",
        dr_message());
  const double half = 3.14159265358979323846 / 12; /* a turn of 30 degrees about y */
  const float s30 = (float)sin(half), c30 = (float)cos(half);
  collider_key keys[2] = {{0.0, {0, 0, 0}, {1, 0, 0, 0}}, {0.5, {0.05f, 0.02f, 0}, {c30, 0, s30, 0}}};
  collider col = {0};
  col.geom.shape = SDF_MESH, col.geom.levelset = i0;
  for (int a = 0; a < 3; ++a) col.center[a] = (float)c[a];
  col.type = BOUNDARY_SEPARATE, col.friction = 0.3f, col.key0 = 0, col.n_keys = 2, col.n_frames = 2, col.fps = 4;
  boundary_params bp = {0};
  bp.band = 0.5f * (float)dx;
  bp.n_colliders = 1, bp.colliders = &col, bp.n_keys = 2, bp.keys = keys;
  bp.n_levelsets = pool.n, bp.levelsets = pool.sets, bp.ls_table = pool.table, bp.ls_bricks = pool.bricks;
  bp.ls_table_n = pool.table_n, bp.ls_bricks_n = pool.bricks_n;
  const double times[3] = {0.0, 0.2, 0.4}; /* frame 0; 0.8 of the way to frame 1; past the sequence */
  check_rng r = {7};
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) bp.band = pool.sets[i0].band; /* the act distance reaches the band: no shortcut */
    for (int ti = 0; ti < 3; ++ti) {
      collider_pose P;
      collider_pose_at(&col, keys, times[ti], &P);
      long idle = 0, acted = 0, wrong = 0, cached_wrong = 0;
      for (int i = 0; i < 40000; ++i) {
        float x[3], v[3], w[3], w0[3], xl[3], rr[3], n[3], vc[3];
        for (int a = 0; a < 3; ++a) {
          x[a] = (float)(c[a] + check_rng_range(&r, -0.55, 0.55));
          v[a] = w[a] = w0[a] = (float)check_rng_range(&r, -1, 1);
          rr[a] = x[a] - P.center[a];
        }
        m3_apply_t(P.R, rr, xl);
        idle += collider_mesh_idle(&bp, &col, &P, xl);
        const int got = collider_apply(&bp, &col, &P, x, v);
        const float phi = collider_eval(&bp, &col, &P, x, bp.band, n, vc);
        const int act = phi < bp.band;
        if (act) {
          for (int a = 0; a < 3; ++a) w[a] -= vc[a];
          bc_project(col.type, col.friction, n, w);
          for (int a = 0; a < 3; ++a) w[a] += vc[a];
        }
        /* the same from the samples a backend may keep per node (collider_apply_cached) */
        mesh_samples ms;
        collider_mesh_samples(&bp, &col, &P, xl, &ms);
        float u[3] = {w0[0], w0[1], w0[2]};
        const int got_c = collider_apply_cached(&bp, &col, &P, x, &ms, u);
        cached_wrong += got_c != got || memcmp(u, v, sizeof u) != 0;
        acted += got;
        int bad = got != act;
        for (int a = 0; a < 3; ++a) bad |= !(fabsf(v[a] - w[a]) <= 1e-6f * (1.0f + fabsf(w[a])));
        wrong += bad;
      }
      printf("mesh collider shortcut (act distance %.2f dx, t = %.2f s, frame %d, blend %.2f): %ld of 40000 nodes "
             "skipped, %ld acted on, %ld differ from the full evaluation\n",
             bp.band / dx, times[ti], P.frame, P.deforming ? P.frac : 0.0f, idle, acted, wrong);
      CHECK(wrong == 0, "t = %.2f s: %ld nodes differ from the full evaluation", times[ti], wrong);
      CHECK(cached_wrong == 0, "t = %.2f s: %ld nodes differ between collider_apply and collider_apply_cached", times[ti],
            cached_wrong);
      CHECK(acted > 500, "t = %.2f s: only %ld nodes acted on", times[ti], acted);
      if (pass == 0)
        CHECK(idle > 10000, "t = %.2f s: the shortcut skipped only %ld of 40000 nodes", times[ti], idle);
      else
        CHECK(idle == 0, "t = %.2f s: the shortcut skipped %ld nodes with the act distance at the band", times[ti], idle);
    }
  }
  free(vel);
  levelset_pool_free(&pool);
  mesh_destroy(&m);
}

/* A scene with one body (json) loaded from a temporary file. */
static int load_scene(const char *body, scene *s) {
  char json[2048];
  snprintf(json, sizeof json,
           "{\"domain\":{\"min\":[0,0,0],\"max\":[1,1,1],\"dx\":0.05},\"time\":{\"frames\":1,\"fps\":30,\"dt\":1e-3},"
           "\"materials\":{\"m\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":1e5,\"poisson_ratio\":0.3}},"
           "\"bodies\":[%s]}",
           body);
  char path[] = "/tmp/drift-mesh-XXXXXX.json";
  int fd = mkstemps(path, 5);
  FILE *f = fdopen(fd, "w");
  fputs(json, f);
  fclose(f);
  int rc = scene_load(path, s);
  if (!rc) rc = scene_build_levelsets(s);
  unlink(path);
  return rc;
}

static void test_bodies(void) {
  char body[1024], p[512];
  scene a, b;
  path_of(p, sizeof p, "cube.obj");
  /* the cube scaled to 0.43 m, turned by 90 degrees about z (a cube again) and moved */
  snprintf(body, sizeof body,
           "{\"shape\":\"mesh\",\"file\":\"%s\",\"scale\":0.43,\"rotation\":{\"axis\":[0,0,1],\"angle\":90},"
           "\"translation\":[0.63,0.21,0.17],\"material\":\"m\",\"ppc\":8}", p);
  if (load_scene(body, &a)) {
    CHECK(0, "mesh body: %s", dr_message());
    return;
  }
  /* rotation about z by 90 degrees: x -> -y, so x in [0.63 - 0.43, 0.63], y in [0.21, 0.64] */
  if (load_scene("{\"shape\":\"box\",\"min\":[0.2,0.21,0.17],\"max\":[0.63,0.64,0.6],\"material\":\"m\",\"ppc\":8}", &b)) {
    CHECK(0, "box body: %s", dr_message());
    scene_destroy(&a);
    return;
  }
  particles pa = {0}, pb = {0};
  CHECK(sample_scene(&a, &pa) == 0 && sample_scene(&b, &pb) == 0, "sampling: %s", dr_message());
  double ma = 0, mb = 0;
  for (size_t i = 0; i < pa.n; ++i) ma += pa.mass[i];
  for (size_t i = 0; i < pb.n; ++i) mb += pb.mass[i];
  printf("cube mesh body: %zu particles, box body: %zu (%.3f %%); masses %.4f and %.4f kg\n", pa.n, pb.n,
         100.0 * ((double)pa.n - (double)pb.n) / (double)pb.n, ma, mb);
  CHECK(fabs((double)pa.n - (double)pb.n) <= 0.01 * (double)pb.n, "counts %zu and %zu differ by more than 1 %%", pa.n, pb.n);
  CHECK(fabs(ma - mb) < 1e-9 * mb + 1e-6 * mb, "masses %g and %g differ", ma, mb);
  for (size_t i = 0; i < pa.n; ++i) {
    const float *x = pa.x + 3 * i;
    if (!(x[0] > 0.2f - 1e-4f && x[0] < 0.63f + 1e-4f && x[1] > 0.21f - 1e-4f && x[1] < 0.64f + 1e-4f &&
          x[2] > 0.17f - 1e-4f && x[2] < 0.6f + 1e-4f)) {
      CHECK(0, "particle %zu at (%g %g %g) outside the placed cube", i, x[0], x[1], x[2]);
      break;
    }
  }
  particles_free(&pa);
  particles_free(&pb);
  scene_destroy(&a);
  scene_destroy(&b);

  /* an icosphere body: every particle in the sphere */
  path_of(p, sizeof p, "icosphere.obj");
  snprintf(body, sizeof body, "{\"shape\":\"mesh\",\"file\":\"%s\",\"scale\":0.3,\"translation\":[0.5,0.5,0.5],\"material\":\"m\"}", p);
  if (load_scene(body, &a)) {
    CHECK(0, "icosphere body: %s", dr_message());
    return;
  }
  CHECK(sample_scene(&a, &pa) == 0, "sampling: %s", dr_message());
  double worst = 0;
  for (size_t i = 0; i < pa.n; ++i) {
    const float *x = pa.x + 3 * i;
    worst = fmax(worst, sqrt((x[0] - 0.5) * (x[0] - 0.5) + (x[1] - 0.5) * (x[1] - 0.5) + (x[2] - 0.5) * (x[2] - 0.5)));
  }
  const double expect = 8 * fabs(a.bodies[0].volume) / (0.05 * 0.05 * 0.05);
  printf("icosphere body: %zu particles (volume * ppc / dx^3 = %.0f), farthest from the centre %.4f m\n", pa.n, expect, worst);
  CHECK(worst < 0.3, "a particle %.4f m from the centre of a sphere of 0.3 m", worst);
  CHECK(fabs((double)pa.n - expect) < 0.02 * expect, "%zu particles, expected about %.0f", pa.n, expect);
  particles_free(&pa);
  scene_destroy(&a);
}

/* meshsdf_size against a brute-force count of the band's bricks (meshsdf.h: the lattice covers the
 * bounding box with a margin of band + a brick; a brick is in the band where its centre lies within
 * band + its half-diagonal of a triangle), and against what meshsdf_build appends. */
static void test_size(void) {
  mesh m;
  if (read_test_mesh("icosphere.obj", &m)) return;
  const double R = 0.3, h = 0.02, band = 0.1, shift[3] = {0.1, -0.2, 0.05};
  for (int i = 0; i < 3 * m.n_verts; ++i) m.v[i] = R * m.v[i] + shift[i % 3] + 0.013 * (i % 3);
  int64_t table_n = 0, floats_n = 0;
  CHECK(meshsdf_size(&m, shift, h, band, 1, "icosphere", &table_n, &floats_n) == 0, "size: %s", dr_message());
  double lo[3], hi[3], origin[3];
  int dims[3];
  mesh_bounds(&m, lo, hi);
  const double margin = band + 4 * h, reach = band + 2 * sqrt(3.0) * h;
  int64_t nb = 1, marked = 0;
  for (int a = 0; a < 3; ++a) {
    origin[a] = lo[a] - shift[a] - margin;
    dims[a] = ((int)(ceil((hi[a] - shift[a] + margin - origin[a]) / h) + 1) + 3) / 4;
    nb *= dims[a];
  }
  for (int k = 0; k < dims[2]; ++k)
    for (int j = 0; j < dims[1]; ++j)
      for (int i = 0; i < dims[0]; ++i) {
        const double x[3] = {origin[0] + (4 * i + 2) * h + shift[0], origin[1] + (4 * j + 2) * h + shift[1],
                             origin[2] + (4 * k + 2) * h + shift[2]};
        int in = 0;
        for (int t = 0; t < m.n_tris && !in; ++t) {
          double bary[3];
          in = meshsdf_point_triangle(x, m.v + 3 * m.tri[3 * t], m.v + 3 * m.tri[3 * t + 1], m.v + 3 * m.tri[3 * t + 2],
                                      bary) <= reach;
        }
        marked += in;
      }
  CHECK(table_n == nb, "the brick table: %lld entries, expected %lld", (long long)table_n, (long long)nb);
  CHECK(floats_n == marked * 64, "the bricks: %lld floats, expected %lld (%lld bricks of 64 nodes)", (long long)floats_n,
        (long long)(marked * 64), (long long)marked);
  CHECK(marked > 0 && marked < nb, "the band holds %lld of %lld bricks", (long long)marked, (long long)nb);
  levelset_pool pool = {0};
  int idx = -1;
  CHECK(meshsdf_build(&pool, &m, shift, h, band, NULL, NULL, "icosphere", &idx) == 0, "build: %s", dr_message());
  CHECK(pool.table_n == table_n && pool.bricks_n == floats_n, "built %lld and %lld, sized %lld and %lld",
        (long long)pool.table_n, (long long)pool.bricks_n, (long long)table_n, (long long)floats_n);
  levelset_pool_free(&pool);
  mesh_destroy(&m);
}

/* A scene's level sets: planned at load, built on demand into exactly the planned bytes. */
static void test_plan_then_build(void) {
  scene s;
  const char *path = MESH_DIR "/../../jobs/scenes/meshes.json";
  if (scene_load(path, &s)) {
    CHECK(0, "%s: %s", path, dr_message());
    return;
  }
  const scene_levelset_sizes *b = &s.levelset_plan[0], *c = &s.levelset_plan[1];
  CHECK(s.n_levelset_jobs == 6 && b->sets == 1 && c->sets == 5, "planned %d level sets (%d of bodies, %d of colliders), "
        "expected 6: the ball, and the ramp, the turning ball and three pusher frames", s.n_levelset_jobs, b->sets, c->sets);
  CHECK(c->floats_n > 0 && c->table_n > 0 && b->floats_n > 0, "planned sizes: %lld, %lld, %lld", (long long)c->floats_n,
        (long long)c->table_n, (long long)b->floats_n);
  CHECK(s.collider_levelsets && s.collider_levelsets->n == 0, "a level set was built at load");
  particles p = {0};
  dr_clear();
  CHECK(sample_scene(&s, &p) == DR_EINTERNAL, "sampled before the level sets were built");
  dr_clear();
  particles_free(&p);
  const int64_t before = memtally_now(MEMTALLY_HOST, MT_KINDS);
  CHECK(scene_build_levelsets(&s) == 0, "build: %s", dr_message());
  const int64_t grew = memtally_now(MEMTALLY_HOST, MT_KINDS) - before;
  const int64_t planned = (int64_t)(b->sets + c->sets) * (int64_t)sizeof(levelset) +
                          4 * (b->table_n + b->floats_n + c->table_n + c->floats_n);
  CHECK(grew == planned, "the build holds %lld B of counted host memory, the plan %lld B", (long long)grew,
        (long long)planned);
  CHECK(s.n_levelset_jobs == 0 && s.collider_levelsets->n == 5 && s.body_levelsets->n == 1 &&
        s.collider_levelsets->bricks_n == c->floats_n && s.body_levelsets->table_n == b->table_n,
        "the pools built: %d and %d sets", s.collider_levelsets->n, s.body_levelsets->n);
  CHECK(scene_build_levelsets(&s) == 0 && memtally_now(MEMTALLY_HOST, MT_KINDS) - before == grew,
        "a second build changed something");
  CHECK(sample_scene(&s, &p) == 0 && p.n > 0, "sampling after the build: %s", dr_message());
  particles_free(&p);
  scene_destroy(&s);
  CHECK(memtally_now(MEMTALLY_HOST, MT_KINDS) == before, "the scene's level sets not all released");
}

int main(void) {
  test_reader();
  test_cube_levelset();
  test_union_levelset();
  test_icosphere_levelset();
  test_mesh_collider_idle();
  test_bodies();
  test_size();
  test_plan_then_build();
  return check_summary("test_mesh");
}

/* Mesh colliders in whole simulations (cpu, or cuda with the argument "cuda"):
 *   - sand dropped on a wedge (ramp.obj, a separate collider with friction) slides down it and
 *     never gets into it by more than half a cell (the depth measured with the wedge's own
 *     half-spaces, not the level set);
 *   - an elastic block dropped on a box collider given as a mesh (cube.obj) moves as on the
 *     analytic box collider: positions by particle id agree to a small fraction of a cell;
 *   - a sequence of three OBJ frames of a box moving along x (slab_*.obj) at 4 frames per
 *     second pushes a sand layer on a slip floor at the sequence's speed (per-vertex velocity
 *     x fps), with no particle behind its moving face by more than half a cell. */
#include "sim/simtest.h"

#ifndef MESH_DIR
#error "MESH_DIR: the folder of the test meshes"
#endif

/* Depth of x inside the wedge 0 <= x' <= 1, 0 <= z' <= 1, 0 <= y' <= (1 - x') / 2 of ramp.obj
 * placed by x = t + s x': the largest (least negative) signed distance to its planes, < 0 inside. */
static double wedge_sdf(const double t[3], double s, const float *p) {
  const double x = (p[0] - t[0]) / s, y = (p[1] - t[1]) / s, z = (p[2] - t[2]) / s;
  const double slope = (y - 0.5 * (1 - x)) / sqrt(1.25); /* the plane 0.5 x + y = 0.5, unit normal */
  double d = fmax(fmax(-x, x - 1), fmax(-z, z - 1));
  d = fmax(d, fmax(-y, slope));
  return d * s;
}

static void sand_on_ramp(void) {
  const double dx = 0.03, t[3] = {0.05, 0.0, -0.1}, sc = 0.7;
  char json[2048];
  snprintf(json, sizeof json,
           "{\"domain\":{\"min\":[0,0,0],\"max\":[0.9,0.6,0.3],\"dx\":%g},"
           "\"time\":{\"frames\":18,\"fps\":30,\"cfl\":0.5},"
           "\"materials\":{\"sand\":{\"model\":\"drucker_prager\",\"density\":1600,\"youngs_modulus\":5e4,"
           "\"poisson_ratio\":0.3,\"friction_angle\":30}},"
           "\"bodies\":[{\"shape\":\"box\",\"min\":[0.1,0.38,0.08],\"max\":[0.3,0.5,0.22],\"material\":\"sand\"}],"
           "\"boundary\":{\"type\":\"separate\"},"
           "\"colliders\":[{\"shape\":\"mesh\",\"file\":\"%s/ramp.obj\",\"scale\":%g,\"translation\":[%g,%g,%g],"
           "\"type\":\"separate\",\"friction\":0.2}]}",
           dx, MESH_DIR, sc, t[0], t[1], t[2]);
  scene s;
  scene_from_text(json, &s);
  sim *S = start(&s);
  particles p = {0};
  double worst = INFINITY, x0 = 0;
  int touched = 0;
  MUST(sim_particles(S, &p));
  x0 = measure(&s, &p).com[0];
  for (int f = 1; f <= s.frames; ++f) {
    MUST(sim_advance_frame(S));
    MUST(sim_particles(S, &p));
    double d = INFINITY;
    for (size_t i = 0; i < p.n; ++i) d = fmin(d, wedge_sdf(t, sc, p.x + 3 * i));
    worst = fmin(worst, d);
    touched |= d < dx;
  }
  const moments m = measure(&s, &p);
  printf("sand on a mesh ramp: %zu particles, smallest signed distance to the wedge %.4f dx (negative: inside), centre "
         "of mass moved %.3f m down the slope (+x)\n", p.n, worst / dx, m.com[0] - x0);
  CHECK(touched, "the sand never reached the ramp");
  CHECK(worst > -0.5 * dx, "a particle got %.3f dx into the ramp (at most 0.5 allowed)", -worst / dx);
  CHECK(m.com[0] - x0 > 0.05, "the sand did not slide down the slope (moved %.3f m along x)", m.com[0] - x0);
  particles_free(&p);
  sim_destroy(&S);
  scene_destroy(&s);
}

/* An elastic block dropped on a box collider, the box given analytically or as a mesh. */
static void block_on_box(const char *collider, particles *out) {
  char json[2048];
  snprintf(json, sizeof json,
           "{\"domain\":{\"min\":[0,0,0],\"max\":[0.6,0.6,0.6],\"dx\":0.03},"
           "\"time\":{\"frames\":12,\"fps\":40,\"dt\":0.001},"
           "\"materials\":{\"jelly\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":5e4,"
           "\"poisson_ratio\":0.3}},"
           "\"bodies\":[{\"shape\":\"box\",\"min\":[0.21,0.36,0.22],\"max\":[0.39,0.48,0.37],\"material\":\"jelly\","
           "\"velocity\":[0.3,-1,0]}],"
           "\"boundary\":{\"type\":\"slip\"},\"colliders\":[%s]}",
           collider);
  scene s;
  scene_from_text(json, &s);
  sim *S = start(&s);
  for (int f = 1; f <= s.frames; ++f) MUST(sim_advance_frame(S));
  MUST(sim_particles(S, out));
  sim_destroy(&S);
  scene_destroy(&s);
}

static void mesh_box_vs_box(void) {
  const double dx = 0.03;
  char mesh_col[1024];
  /* cube.obj is [0, 1]^3: scaled by 0.36 and moved to [0.12, 0.48] x [0.02, 0.38] x [0.1, 0.46] */
  snprintf(mesh_col, sizeof mesh_col,
           "{\"shape\":\"mesh\",\"file\":\"%s/cube.obj\",\"scale\":0.36,\"translation\":[0.12,-0.06,0.1],"
           "\"type\":\"separate\",\"friction\":0.3}", MESH_DIR);
  particles a = {0}, b = {0};
  block_on_box("{\"shape\":\"box\",\"min\":[0.12,-0.06,0.1],\"max\":[0.48,0.3,0.46],\"type\":\"separate\",\"friction\":0.3}", &a);
  block_on_box(mesh_col, &b);
  CHECK(a.n == b.n && a.n > 0, "%zu and %zu particles", a.n, b.n);
  if (a.n == b.n) {
    size_t *oa = order_by_id(&a), *ob = order_by_id(&b);
    double worst = 0, ymin = INFINITY, vx = 0, m = 0;
    for (size_t k = 0; k < a.n; ++k) {
      const size_t i = oa[k], j = ob[k];
      for (int c = 0; c < 3; ++c) worst = fmax(worst, fabs((double)a.x[3 * i + c] - b.x[3 * j + c]));
      ymin = fmin(ymin, b.x[3 * j + 1]);
      vx += a.mass[i] * a.v[3 * i], m += a.mass[i];
    }
    printf("elastic block on a box collider: mesh vs analytic, max position difference %.2e m = %.4f dx; lowest "
           "particle at y = %.4f (the top face at 0.3); block speed along x %.3f m/s\n", worst, worst / dx, ymin, vx / m);
    CHECK(ymin > 0.3 - 0.5 * dx, "a particle at y %.4f, more than half a cell into the mesh box (top 0.3)", ymin);
    CHECK(worst < 0.02 * dx, "mesh and analytic box colliders differ by %.4f dx", worst / dx);
    CHECK(vx / m < 0.25, "friction on the box top did not slow the block (%.3f m/s)", vx / m);
    free(oa), free(ob);
  }
  particles_free(&a);
  particles_free(&b);
}

/* The slab sequence: slab_000k.obj is the unit cube moved by 0.5 k along x; scaled by 0.3 and
 * played at 4 fps it moves 0.15 m per 0.25 s = 0.6 m/s from t = 0 to 0.5 s. */
static void sequence_pushes(void) {
  const double dx = 0.02, V = 0.6, face0 = 0.12;
  char json[2048];
  snprintf(json, sizeof json,
           "{\"domain\":{\"min\":[0,0,0],\"max\":[0.8,0.3,0.16],\"dx\":%g},"
           "\"time\":{\"frames\":14,\"fps\":40,\"cfl\":0.5},"
           "\"materials\":{\"sand\":{\"model\":\"drucker_prager\",\"density\":1600,\"youngs_modulus\":5e4,"
           "\"poisson_ratio\":0.3,\"friction_angle\":30}},"
           "\"bodies\":[{\"shape\":\"box\",\"min\":[0.14,0.04,0.04],\"max\":[0.36,0.12,0.12],\"material\":\"sand\"}],"
           "\"boundary\":{\"type\":\"slip\"},"
           "\"colliders\":[{\"shape\":\"mesh\",\"files\":\"%s/slab_%%04d.obj\",\"fps\":4,\"scale\":0.3,"
           "\"translation\":[%g,-0.05,-0.07],\"type\":\"separate\"}]}",
           dx, MESH_DIR, face0 - 0.3);
  scene s;
  scene_from_text(json, &s);
  CHECK(s.colliders[0].n_frames == 3, "%d frames found, expected 3 (slab_0000 .. slab_0002)", s.colliders[0].n_frames);
  sim *S = start(&s);
  particles p = {0};
  double worst = INFINITY, vfront = 0;
  for (int f = 1; f <= s.frames; ++f) {
    MUST(sim_advance_frame(S));
    MUST(sim_particles(S, &p));
    const double t = f / 40.0, face = face0 + V * t;
    double sum = 0, mass = 0;
    for (size_t i = 0; i < p.n; ++i) {
      const double x = p.x[3 * i];
      worst = fmin(worst, x - face);
      if (x < face + 2 * dx) sum += p.mass[i] * p.v[3 * i], mass += p.mass[i];
    }
    vfront = mass > 0 ? sum / mass : 0;
    if (f % 4 == 0 || f == s.frames)
      printf("t %.3f s  slab face %.3f m  material in front moves at %.4f m/s  (nearest particle %.3f dx ahead of the "
             "face; negative: behind)\n", t, face, vfront, worst / dx);
  }
  CHECK(worst > -0.5 * dx, "a particle got %.3f dx behind the moving mesh's face", -worst / dx);
  CHECK(fabs(vfront - V) < 0.1 * V, "the material in front of the sequence moves at %.4f m/s, expected %.2f", vfront, V);
  particles_free(&p);
  sim_destroy(&S);
  scene_destroy(&s);
}

int main(int argc, char **argv) {
  choose_backend(argc, argv);
  init(&argc, &argv);
  double t0 = MPI_Wtime();
  sand_on_ramp();
  printf("(%.1f s)\n", MPI_Wtime() - t0);
  t0 = MPI_Wtime();
  mesh_box_vs_box();
  printf("(%.1f s)\n", MPI_Wtime() - t0);
  t0 = MPI_Wtime();
  sequence_pushes();
  printf("(%.1f s)\n", MPI_Wtime() - t0);
  return finish("test_mesh_colliders");
}

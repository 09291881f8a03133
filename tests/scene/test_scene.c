/* test_scene.c - scene_load on valid scenes: every parsed value and default, the derived material
 * parameters, the wave speed and the initial step (fixed and CFL), against numbers worked out by
 * hand; plus the error contract (DR_EINPUT, one line naming the file and key, *out left empty).
 * The many ways a scene can be wrong are covered by check_bad_scenes.sh and the files in bad/. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "frame_fields.h"
#include "scene.h"

static int failures;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                     \
      ++failures;                                                                                  \
    }                                                                                              \
  } while (0)

/* |a - b| <= rel * |b| (exact when b == 0). */
#define CHECK_NEAR(a, b, rel)                                                                      \
  do {                                                                                             \
    double a_ = (a), b_ = (b);                                                                     \
    if (!(fabs(a_ - b_) <= (rel) * fabs(b_))) {                                                    \
      fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.17g, expected %.17g\n", __FILE__,          \
              __LINE__, #a, a_, b_);                                                               \
      ++failures;                                                                                  \
    }                                                                                              \
  } while (0)

#define CHECK_VEC(v, x, y, z)                                                                      \
  do {                                                                                             \
    CHECK_NEAR((v)[0], (x), 1e-15);                                                                \
    CHECK_NEAR((v)[1], (y), 1e-15);                                                                \
    CHECK_NEAR((v)[2], (z), 1e-15);                                                                \
  } while (0)

static const double F = 1e-6; /* tolerance of values the kernels hold in float */

/* Writes text to a new temporary file; returns its path in path (size 64). */
static void write_temp(char path[64], const char *text) {
  const char *dir = getenv("TMPDIR");
  snprintf(path, 64, "%s/test_scene.XXXXXX", dir && strlen(dir) < 40 ? dir : "/tmp");
  int fd = mkstemp(path);
  if (fd < 0) {
    perror("mkstemp");
    exit(1);
  }
  FILE *f = fdopen(fd, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
    perror("writing a temporary scene");
    exit(1);
  }
}

/* Loads text as a scene file; returns scene_load's status. */
static int load_text(const char *text, scene *s, char path[64]) {
  write_temp(path, text);
  dr_clear();
  int rc = scene_load(path, s);
  if (rc) fprintf(stderr, "  (scene_load: %s)\n", dr_message());
  return rc;
}

/* Every key given, none left to its default. */
static const char *FULL =
    "{\n"
    "  \"description\": \"every key\",\n"
    "  \"domain\": { \"min\": [0, -0.5, 0.25], \"max\": [2, 1, 1.25], \"dx\": 0.025 },\n"
    "  \"time\": { \"frames\": 120, \"fps\": 24, \"cfl\": 0.6 },\n"
    "  \"gravity\": [0.5, -3.7, 0],\n"
    "  \"materials\": {\n"
    "    \"jelly\": { \"model\": \"fixed_corotated\", \"density\": 1000, \"youngs_modulus\": 5e4,"
    " \"poisson_ratio\": 0.3 },\n"
    "    \"sand\": { \"model\": \"drucker_prager\", \"density\": 1600, \"youngs_modulus\": 3.5e5,"
    " \"poisson_ratio\": 0.3, \"friction_angle\": 35 },\n"
    "    \"water\": { \"model\": \"weakly_compressible\", \"density\": 1000, \"bulk_modulus\": 2e5,"
    " \"gamma\": 6.5 }\n"
    "  },\n"
    "  \"bodies\": [\n"
    "    { \"shape\": \"box\", \"min\": [0.05, -0.45, 0.3], \"max\": [1.95, 0.4, 1.2],"
    " \"material\": \"water\", \"ppc\": 4, \"velocity\": [1, 0, 0], \"seed\": 11 },\n"
    "    { \"shape\": \"sphere\", \"center\": [1.4, 0.7, 0.75], \"radius\": 0.3, \"material\": \"sand\","
    " \"ppc\": 27, \"velocity\": [0, -3, 4], \"seed\": 12345678901 }\n"
    "  ],\n"
    "  \"boundary\": { \"type\": \"separate\", \"friction\": 0.4, \"y-\": { \"friction\": 0.7 },"
    " \"x+\": { \"type\": \"slip\" }, \"z-\": {} },\n"
    "  \"output\": { \"dir\": \"out/frames\", \"every\": 5, \"checkpoint_every\": 10, \"checkpoint_keep\": 3,\n"
    "              \"preview\": true, \"preview_color\": \"owner\", \"preview_size\": 300, \"preview_view\": \"top\",\n"
    "              \"precision\": \"half\" },\n"
    "  \"parallel\": { \"backend\": \"cuda\", \"gpus_per_rank\": 4, \"g2p2g_below\": 5000, \"balance_by\": \"time\", \"balance_threshold\": 0.5, \"balance_cost\": false,\n"
    "                \"deterministic\": true, \"watchdog_s\": 45,\n"
    "                \"island_barrier\": \"events\", \"island_reduce\": \"p2p_atomics\", \"storage\": \"compact\" }\n"
    "}\n";

static void test_full(void) {
  scene s;
  char path[64];
  CHECK(load_text(FULL, &s, path) == 0);
  CHECK(strcmp(s.path, path) == 0);
  CHECK_VEC(s.domain_min, 0, -0.5, 0.25);
  CHECK_VEC(s.domain_max, 2, 1, 1.25);
  CHECK(s.dx == 0.025);
  CHECK(s.frames == 120);
  CHECK(s.fps == 24);
  CHECK(s.dt == 0);
  CHECK(s.cfl == 0.6);
  CHECK_VEC(s.gravity, 0.5, -3.7, 0);

  CHECK(s.n_materials == 3);
  if (s.n_materials == 3) {
    const scene_material *j = &s.materials[0], *sa = &s.materials[1], *w = &s.materials[2];
    CHECK(strcmp(j->name, "jelly") == 0);
    CHECK(j->params.model == MODEL_FIXED_COROTATED);
    CHECK(j->density == 1000 && j->youngs_modulus == 5e4 && j->poisson_ratio == 0.3);
    CHECK_NEAR(j->params.density, 1000, F);
    CHECK_NEAR(j->params.mu, 19230.76923076923, F);      /* 5e4 / (2 * 1.3) */
    CHECK_NEAR(j->params.lambda, 28846.153846153844, F); /* 5e4 * 0.3 / (1.3 * 0.4) */
    CHECK(j->params.alpha == 0 && j->params.bulk == 0);
    CHECK(j->params.transfer == TRANSFER_APIC && j->params.flip_blend == 0); /* the default transfer */

    CHECK(strcmp(sa->name, "sand") == 0);
    CHECK(sa->params.model == MODEL_DRUCKER_PRAGER);
    CHECK(sa->density == 1600 && sa->youngs_modulus == 3.5e5 && sa->poisson_ratio == 0.3);
    CHECK(sa->friction_angle == 35);
    CHECK_NEAR(sa->params.mu, 134615.38461538462, F);
    CHECK_NEAR(sa->params.lambda, 201923.0769230769, F);
    /* sqrt(2/3) * 2 sin(35 deg) / (3 - sin(35 deg)), sin(35 deg) = 0.573576436351046 */
    CHECK_NEAR(sa->params.alpha, 0.386019330011002, F);

    CHECK(strcmp(w->name, "water") == 0);
    CHECK(w->params.model == MODEL_WEAKLY_COMPRESSIBLE);
    CHECK(w->density == 1000 && w->bulk_modulus == 2e5 && w->gamma == 6.5);
    CHECK_NEAR(w->params.density, 1000, F);
    CHECK_NEAR(w->params.bulk, 2e5, F);
    CHECK_NEAR(w->params.gamma, 6.5, F);
    CHECK(w->params.mu == 0 && w->params.lambda == 0);
  }

  CHECK(s.n_bodies == 2);
  if (s.n_bodies == 2) {
    const scene_body *b = &s.bodies[0], *sp = &s.bodies[1];
    CHECK(b->shape == SHAPE_BOX);
    CHECK_VEC(b->min, 0.05, -0.45, 0.3);
    CHECK_VEC(b->max, 1.95, 0.4, 1.2);
    CHECK(b->material == 2);
    CHECK(b->ppc == 4);
    CHECK_VEC(b->velocity, 1, 0, 0);
    CHECK(b->seed == 11);
    CHECK(sp->shape == SHAPE_SPHERE);
    CHECK_VEC(sp->center, 1.4, 0.7, 0.75);
    CHECK(sp->radius == 0.3);
    CHECK(sp->material == 1);
    CHECK(sp->ppc == 27);
    CHECK_VEC(sp->velocity, 0, -3, 4);
    CHECK(sp->seed == 12345678901ULL);
  }
  /* faces x-, x+, y-, y+, z-, z+: the top level for those not listed, y- its own friction, x+
   * its own type (friction 0: not separate), z- an empty object (the top level again) */
  const int types[DR_FACES] = {BOUNDARY_SEPARATE, BOUNDARY_SLIP, BOUNDARY_SEPARATE,
                               BOUNDARY_SEPARATE, BOUNDARY_SEPARATE, BOUNDARY_SEPARATE};
  const double frictions[DR_FACES] = {0.4, 0, 0.7, 0.4, 0.4, 0.4};
  for (int f = 0; f < DR_FACES; ++f) CHECK(s.faces[f].type == types[f] && s.faces[f].friction == frictions[f]);
  CHECK(s.n_colliders == 0 && s.colliders == NULL);
  CHECK(strcmp(s.output_dir, "out/frames") == 0);
  CHECK(s.output_every == 5);
  CHECK(s.checkpoint_every == 10 && s.checkpoint_keep == 3);
  CHECK(s.preview == 1 && s.preview_color == 1 && s.preview_size == 300 && s.preview_view == 2); /* owner, top */
  CHECK(s.output_precision == H5FRAME_HALF);
  CHECK(s.backend == BACKEND_CUDA);
  CHECK(s.gpus_per_rank == 4);
  CHECK(s.g2p2g_below == 5000);
  CHECK(s.balance_by == BALANCE_TIME && s.balance_threshold == 0.5 && s.balance_cost == 0 && s.deterministic == 1);
  CHECK(s.island_barrier == ISLAND_BARRIER_EVENTS && s.island_reduce == ISLAND_REDUCE_P2P_ATOMICS);
  CHECK(s.storage == STORAGE_COMPACT);
  CHECK(s.watchdog_s == 45);

  /* fastest wave: water, sqrt(2e5 * 6.5 / 1000); sand sqrt((lambda + 2 mu) / 1600) = 17.16 */
  CHECK_NEAR(scene_wave_speed(&s), sqrt(1300.0), 1e-12);
  /* CFL: 0.6 * 0.025 / (c + |(0, -3, 4)|) */
  CHECK_NEAR(scene_initial_dt(&s), 0.6 * 0.025 / (sqrt(1300.0) + 5), 1e-12);
  scene_destroy(&s);
  CHECK(s.materials == NULL && s.bodies == NULL);
  scene_destroy(&s); /* twice is harmless */
  unlink(path);
}

/* Only what is required: everything else takes its default. */
static const char *MINIMAL =
    "{ \"domain\": { \"min\": [0, 0, 0], \"max\": [1, 1, 1], \"dx\": 0.25 },\n"
    "  \"time\": { \"frames\": 3, \"fps\": 30, \"cfl\": 1 },\n"
    "  \"materials\": {\n"
    "    \"sand\": { \"model\": \"drucker_prager\", \"density\": 1, \"youngs_modulus\": 1,"
    " \"poisson_ratio\": -0.5 },\n"
    "    \"water\": { \"model\": \"weakly_compressible\", \"density\": 1000, \"bulk_modulus\": 1 }\n"
    "  },\n"
    "  \"bodies\": [\n"
    "    { \"shape\": \"sphere\", \"center\": [0.5, 0.5, 0.5], \"radius\": 0.5, \"material\": \"sand\" },\n"
    "    { \"shape\": \"box\", \"min\": [0, 0, 0], \"max\": [1, 1, 1], \"material\": \"water\" }\n"
    "  ] }\n";

static void test_defaults(void) {
  scene s;
  char path[64];
  CHECK(load_text(MINIMAL, &s, path) == 0);
  CHECK_VEC(s.gravity, 0, -9.81, 0);
  for (int f = 0; f < DR_FACES; ++f) CHECK(s.faces[f].type == BOUNDARY_STICKY && s.faces[f].friction == 0);
  CHECK(s.n_colliders == 0);
  CHECK(strcmp(s.output_dir, "frames") == 0);
  CHECK(s.output_every == 1);
  CHECK(s.checkpoint_every == 0 && s.checkpoint_keep == 2);
  CHECK(s.preview == 0 && s.preview_color == 0 && s.preview_size == 512 && s.preview_view == 0); /* material, front */
  CHECK(s.output_precision == H5FRAME_FLOAT);
  CHECK(s.backend == BACKEND_AUTO);
  CHECK(s.gpus_per_rank == 0);
  CHECK(s.g2p2g_below == 100000);
  CHECK(s.balance_by == BALANCE_PARTICLES && s.balance_threshold == 0.2 && s.balance_cost == 1 && s.deterministic == 0);
  CHECK(s.island_barrier == ISLAND_BARRIER_SPIN && s.island_reduce == ISLAND_REDUCE_DOUBLE_BUFFER);
  CHECK(s.storage == STORAGE_FLOAT);
  CHECK(s.watchdog_s == 300);
  CHECK(s.n_materials == 2 && s.n_bodies == 2);
  if (s.n_materials == 2 && s.n_bodies == 2) {
    CHECK(s.materials[0].friction_angle == 30);
    CHECK_NEAR(s.materials[0].params.alpha, 0.3265986323710904, F); /* sin 30 = 1/2 */
    CHECK_NEAR(s.materials[0].params.mu, 1.0, F);                   /* 1 / (2 * 0.5) */
    CHECK_NEAR(s.materials[0].params.lambda, -0.5, F);              /* -0.5 / (0.5 * 2) */
    CHECK(s.materials[1].gamma == 7);
    CHECK_NEAR(s.materials[1].params.gamma, 7, F);
    for (int i = 0; i < 2; ++i) {
      CHECK(s.bodies[i].ppc == 8);
      CHECK_VEC(s.bodies[i].velocity, 0, 0, 0);
      CHECK(s.bodies[i].seed == (uint64_t)i); /* the body's index */
    }
    CHECK(s.bodies[1].material == 1);
  }
  /* c = sqrt((lambda + 2 mu) / density) = sqrt(1.5) beats water's sqrt(7 / 1000); the CFL step
   * 1 * 0.25 / sqrt(1.5) = 0.204 is longer than a frame, so the frame (1/30 s) is the step */
  CHECK_NEAR(scene_wave_speed(&s), sqrt(1.5), 1e-12);
  CHECK_NEAR(scene_initial_dt(&s), 1.0 / 30, 1e-12);
  scene_destroy(&s);
  unlink(path);
}

/* Drucker-Prager fit: each Mohr-Coulomb match as the kernels' alpha = sqrt(2) a, a the slope of
 * sqrt(J2) + a I1 <= 0, from the closed forms (computed here, not with the parser's formula), and
 * an unknown fit named with the valid values. */
static double fit_alpha(const char *fit, double phi_deg) {
  char text[1024];
  scene s;
  char path[64];
  snprintf(text, sizeof text,
           "{ \"domain\": { \"min\": [0, 0, 0], \"max\": [1, 1, 1], \"dx\": 0.25 },\n"
           "  \"time\": { \"frames\": 1, \"fps\": 30, \"cfl\": 0.5 },\n"
           "  \"materials\": { \"sand\": { \"model\": \"drucker_prager\", \"density\": 1600,"
           " \"youngs_modulus\": 1e5, \"poisson_ratio\": 0.3, \"friction_angle\": %.17g%s%s%s } },\n"
           "  \"bodies\": [ { \"shape\": \"box\", \"min\": [0, 0, 0], \"max\": [0.5, 0.5, 0.5],"
           " \"material\": \"sand\" } ] }\n",
           phi_deg, fit ? ", \"fit\": \"" : "", fit ? fit : "", fit ? "\"" : "");
  double alpha = -1;
  if (load_text(text, &s, path) == 0) {
    alpha = s.materials[0].params.alpha;
    scene_destroy(&s);
  }
  unlink(path);
  return alpha;
}

static void test_dp_fit(void) {
  const double r2 = sqrt(2.0), r3 = sqrt(3.0), deg = 3.14159265358979323846 / 180.0;
  const double phis[] = {0, 20, 30, 35, 45, 89};
  for (int i = 0; i < 6; ++i) {
    const double s = sin(phis[i] * deg);
    const double comp = r2 * 2 * s / (r3 * (3 - s)), plane = r2 * s / 3, insc = r2 * s / sqrt(3 * (3 + s * s));
    CHECK_NEAR(fit_alpha(NULL, phis[i]), comp, F);
    CHECK(fit_alpha(NULL, phis[i]) == fit_alpha("compression", phis[i])); /* the default, bitwise */
    CHECK_NEAR(fit_alpha("plane_strain", phis[i]), plane, F);
    CHECK_NEAR(fit_alpha("inscribed", phis[i]), insc, F);
  }
  /* phi = 30: the plane-strain cone is the compression cone of an angle of 22.24 degrees
   * (sin = 3 (1/2) / (2 sqrt(3) + 1/2) = 0.378364), the inscribed one of 21.43 degrees */
  const double s22 = 1.5 / (2 * r3 + 0.5);
  CHECK_NEAR(asin(s22) / deg, 22.2335, 1e-4);
  CHECK_NEAR(fit_alpha("plane_strain", 30), r2 * 2 * s22 / (r3 * (3 - s22)), F);
  CHECK_NEAR(fit_alpha("plane_strain", 30), r2 / 6, F);
  CHECK_NEAR(fit_alpha("inscribed", 30), r2 * 0.5 / sqrt(9.75), F);
  CHECK(fit_alpha("inscribed", 30) < fit_alpha("plane_strain", 30) &&
        fit_alpha("plane_strain", 30) < fit_alpha("compression", 30));

  scene s;
  char path[64];
  const char *bad =
      "{ \"domain\": { \"min\": [0, 0, 0], \"max\": [1, 1, 1], \"dx\": 0.25 },\n"
      "  \"time\": { \"frames\": 1, \"fps\": 30, \"cfl\": 0.5 },\n"
      "  \"materials\": { \"sand\": { \"model\": \"drucker_prager\", \"density\": 1600,"
      " \"youngs_modulus\": 1e5, \"poisson_ratio\": 0.3, \"fit\": \"triaxial\" } },\n"
      "  \"bodies\": [ { \"shape\": \"box\", \"min\": [0, 0, 0], \"max\": [0.5, 0.5, 0.5],"
      " \"material\": \"sand\" } ] }\n";
  write_temp(path, bad);
  dr_clear();
  CHECK(scene_load(path, &s) == DR_EINPUT);
  const char *msg = dr_message();
  CHECK(strstr(msg, "materials.sand.fit: unknown value") != NULL);
  CHECK(strstr(msg, "\"triaxial\"") != NULL);
  CHECK(strstr(msg, "compression, plane_strain, inscribed") != NULL);
  CHECK(strchr(msg, '\n') == NULL);
  unlink(path);
}

/* viscosity on weakly_compressible: parsed, 0 by default (no bound), the viscous bound
 * density dx^2 / (6 mu) and the initial step capped at cfl times it; a negative value fails. */
static void test_viscosity(void) {
  const char *fmt =
      "{ \"domain\": { \"min\": [0, 0, 0], \"max\": [0.02, 0.02, 0.02], \"dx\": 0.001 },\n"
      "  \"time\": { \"frames\": 1, \"fps\": 30, \"cfl\": 0.5 },\n"
      "  \"materials\": { \"honey\": { \"model\": \"weakly_compressible\", \"density\": 1400,"
      " \"bulk_modulus\": 2000%s },\n"
      "                 \"water\": { \"model\": \"weakly_compressible\", \"density\": 1000,"
      " \"bulk_modulus\": 2000, \"viscosity\": 0.001 } },\n"
      "  \"bodies\": [ { \"shape\": \"box\", \"min\": [0.005, 0.005, 0.005], \"max\": [0.01, 0.01, 0.01],"
      " \"material\": \"honey\" } ] }\n";
  char text[1200], path[64];
  scene s;
  snprintf(text, sizeof text, fmt, ", \"viscosity\": 2.5");
  CHECK(load_text(text, &s, path) == 0);
  if (s.n_materials == 2) {
    CHECK(s.materials[0].viscosity == 2.5 && s.materials[0].params.viscosity == 2.5f);
    CHECK(s.materials[1].viscosity == 0.001);
    const double bound = 1400 * 1e-6 / (6 * 2.5); /* honey's, the smaller */
    CHECK_NEAR(scene_viscous_dt(&s), bound, 1e-15);
    /* CFL: 0.5 * 0.001 / sqrt(2000 * 7 / 1000) = 1.34e-4 s; viscous: 0.5 * 9.33e-5 s */
    CHECK_NEAR(scene_initial_dt(&s), 0.5 * bound, 1e-15);
  }
  scene_destroy(&s);
  unlink(path);
  /* without viscosity (water's is too small to bind): the CFL step, no bound from honey */
  snprintf(text, sizeof text, fmt, "");
  CHECK(load_text(text, &s, path) == 0);
  if (s.n_materials == 2) {
    CHECK(s.materials[0].viscosity == 0 && s.materials[0].params.viscosity == 0.0f);
    CHECK_NEAR(scene_viscous_dt(&s), 1000 * 1e-6 / (6 * 0.001), 1e-12);
    CHECK_NEAR(scene_initial_dt(&s), 0.5 * 0.001 / sqrt(14.0), 1e-15);
  }
  scene_destroy(&s);
  unlink(path);
  snprintf(text, sizeof text, fmt, ", \"viscosity\": -1");
  write_temp(path, text);
  dr_clear();
  CHECK(scene_load(path, &s) == DR_EINPUT);
  CHECK(strstr(dr_message(), "materials.honey.viscosity") != NULL);
  CHECK(strchr(dr_message(), '\n') == NULL);
  unlink(path);
}

/* Particle sources: defaults, volume_rate turned into particles/s with dx^3 / ppc, resample. */
static void test_emit(void) {
  static const char *text =
      "{ \"domain\": { \"min\": [0, 0, 0], \"max\": [1, 1, 1], \"dx\": 0.25 },\n"
      "  \"time\": { \"frames\": 3, \"fps\": 30, \"cfl\": 1 },\n"
      "  \"materials\": { \"water\": { \"model\": \"weakly_compressible\", \"density\": 1000, \"bulk_modulus\": 1 } },\n"
      "  \"bodies\": [\n"
      "    { \"shape\": \"box\", \"min\": [0, 0, 0], \"max\": [1, 1, 1], \"material\": \"water\" },\n"
      "    { \"shape\": \"box\", \"min\": [0, 0, 0], \"max\": [1, 1, 1], \"material\": \"water\", \"ppc\": 27,\n"
      "      \"emit\": { \"rate\": 250 } },\n"
      "    { \"shape\": \"box\", \"min\": [0, 0, 0], \"max\": [1, 1, 1], \"material\": \"water\", \"ppc\": 4,\n"
      "      \"emit\": { \"volume_rate\": 0.5, \"start\": 1, \"end\": 2.5, \"max_particles\": 7 } },\n"
      "    { \"shape\": \"sphere\", \"center\": [0.5, 0.5, 0.5], \"radius\": 0.5, \"material\": \"water\",\n"
      "      \"emit\": { \"mode\": \"resample\" } }\n"
      "  ] }\n";
  scene s;
  char path[64];
  CHECK(load_text(text, &s, path) == 0);
  CHECK(s.n_bodies == 4 && s.n_sources == 3);
  if (s.n_bodies == 4) {
    CHECK(s.bodies[0].emit.mode == EMIT_NONE);
    const scene_emit *a = &s.bodies[1].emit, *b = &s.bodies[2].emit, *c = &s.bodies[3].emit;
    CHECK(a->mode == EMIT_RATE && a->rate == 250 && a->start == 0 && isinf(a->end) &&
          a->max_particles == EMIT_MAX_PARTICLES);
    /* 0.5 m^3/s of particles of 0.25^3 / 4 m^3: 128 particles/s */
    CHECK(b->mode == EMIT_RATE && b->volume_rate == 0.5 && b->start == 1 && b->end == 2.5 && b->max_particles == 7);
    CHECK_NEAR(b->rate, 128, 1e-12);
    CHECK(c->mode == EMIT_RESAMPLE && c->rate == 0 && c->start == 0 && isinf(c->end));
  }
  scene_destroy(&s);
  unlink(path);
}

/* A fixed dt is rounded down so that a whole number of steps fills each frame. */
static void check_fixed_dt(double fps, const char *dt_text, double expected) {
  char text[1024], path[64];
  scene s;
  snprintf(text, sizeof text,
           "{ \"domain\": { \"min\": [0, 0, 0], \"max\": [1, 1, 1], \"dx\": 0.1 },"
           "  \"time\": { \"frames\": 2, \"fps\": %.17g, \"dt\": %s },"
           "  \"materials\": { \"m\": { \"model\": \"fixed_corotated\", \"density\": 1000,"
           "    \"youngs_modulus\": 1e5, \"poisson_ratio\": 0.3 } },"
           "  \"bodies\": [ { \"shape\": \"box\", \"min\": [0.2, 0.2, 0.2], \"max\": [0.4, 0.4, 0.4],"
           "    \"material\": \"m\" } ] }",
           fps, dt_text);
  CHECK(load_text(text, &s, path) == 0);
  CHECK(s.cfl == 0);
  CHECK_NEAR(scene_initial_dt(&s), expected, 1e-15);
  CHECK(s.dt == scene_initial_dt(&s)); /* stored rounded; rounding again changes nothing */
  scene_destroy(&s);
  unlink(path);
}

static void test_fixed_dt(void) {
  check_fixed_dt(24, "1e-3", 1.0 / 24 / 42); /* 41.67 steps -> 42 */
  check_fixed_dt(30, "0.01", 1.0 / 30 / 4);  /* 3.33 steps -> 4 */
  check_fixed_dt(25, "0.004", 1.0 / 25 / 10); /* exactly 10 steps stay 10 */
  check_fixed_dt(24, "0.041666666666666664", 1.0 / 24); /* dt = 1/fps: one step per frame */
}

/* The error contract: DR_EINPUT, one line "PATH: KEY: ...", and nothing left to free. */
/* Colliders (every shape, keyframes, wall types), a cylinder body and a rotated box, the
 * per-face boundary without a top-level type; and what the kernels get from them. */
static const char *SHAPES =
    "{ \"domain\": { \"min\": [0, 0, 0], \"max\": [1, 1, 1], \"dx\": 0.05 },\n"
    "  \"time\": { \"frames\": 3, \"fps\": 30, \"cfl\": 0.5 },\n"
    "  \"materials\": { \"j\": { \"model\": \"fixed_corotated\", \"density\": 1000, \"youngs_modulus\": 1e4,"
    " \"poisson_ratio\": 0.3, \"transfer\": \"asflip\" },\n"
    "    \"w\": { \"model\": \"weakly_compressible\", \"density\": 1000, \"bulk_modulus\": 1e4,"
    " \"transfer\": \"asflip\", \"flip_blend\": 0.9, \"asflip_beta_min\": 0.25, \"asflip_beta_max\": 0.75 },\n"
    "    \"snow\": { \"model\": \"nacc\", \"density\": 400, \"bulk_modulus\": 5e4, \"poisson_ratio\": 0.3 },\n"
    "    \"firn\": { \"model\": \"nacc\", \"density\": 550, \"bulk_modulus\": 2e5, \"poisson_ratio\": 0.25,"
    " \"friction\": 1.2, \"cohesion\": 0.3, \"hardening\": 2, \"initial_compression\": -0.05 } },\n"
    "  \"bodies\": [\n"
    "    { \"shape\": \"cylinder\", \"center\": [0.5, 0.5, 0.5], \"axis\": [0, 0, 2], \"radius\": 0.2,"
    " \"height\": 0.4, \"material\": \"j\" },\n"
    "    { \"shape\": \"box\", \"min\": [0.3, 0.3, 0.3], \"max\": [0.7, 0.5, 0.6],"
    " \"rotation\": { \"axis\": [0, 1, 0], \"angle\": 90 }, \"material\": \"j\" }\n"
    "  ],\n"
    "  \"boundary\": { \"y-\": { \"type\": \"separate\", \"friction\": 0.3 } },\n"
    "  \"colliders\": [\n"
    "    { \"shape\": \"plane\", \"point\": [0, 0.1, 0], \"normal\": [0, 3, 4], \"type\": \"slip\" },\n"
    "    { \"shape\": \"box\", \"min\": [0.1, 0.2, 0.3], \"max\": [0.3, 0.6, 0.4], \"type\": \"separate\","
    " \"friction\": 0.5,\n"
    "      \"motion\": [ { \"time\": 0 }, { \"time\": 1, \"translation\": [0.5, 0, 0],"
    " \"rotation\": { \"axis\": [0, 0, 1], \"angle\": 90 } } ] },\n"
    "    { \"shape\": \"sphere\", \"center\": [0.5, 2, 0.5], \"radius\": 0.25 },\n"
    "    { \"shape\": \"cylinder\", \"center\": [0.5, 0.5, 0.5], \"axis\": [1, 0, 0], \"radius\": 0.1,"
    " \"height\": 0.6 }\n"
    "  ] }\n";

static void test_shapes(void) {
  scene s;
  char path[64];
  CHECK(load_text(SHAPES, &s, path) == 0);
  CHECK(s.n_bodies == 2 && s.n_colliders == 4 && s.n_materials == 4);
  if (s.n_materials == 4) { /* NACC: the defaults (the paper's Crawling in Snow, initial -0.01), and values given */
    const material_params *sn = &s.materials[2].params, *fi = &s.materials[3].params;
    const double E = 3 * 5e4 * (1 - 0.6), mu = E / 2.6;
    CHECK(sn->model == MODEL_NACC && fi->model == MODEL_NACC);
    CHECK_NEAR(sn->mu, mu, F);
    CHECK_NEAR(sn->lambda, 5e4 - 2 * mu / 3, F);
    CHECK_NEAR(sn->bulk, 5e4, F);
    CHECK_NEAR(sn->nacc_m2, 0.64, F);
    CHECK_NEAR(sn->nacc_beta, 0.9, F);
    CHECK_NEAR(sn->nacc_xi, 5, F);
    CHECK_NEAR(sn->nacc_logjp0, -0.01, F);
    CHECK_NEAR(fi->nacc_m2, 1.44, F);
    CHECK_NEAR(fi->nacc_beta, 0.3, F);
    CHECK_NEAR(fi->nacc_xi, 2, F);
    CHECK_NEAR(fi->nacc_logjp0, -0.05, F);
    CHECK(s.materials[2].youngs_modulus == E); /* derived, for the wave speed */
  }
  if (s.n_materials == 4) { /* ASFLIP: the defaults (pyasflip's), and values given */
    const material_params *j = &s.materials[0].params, *w = &s.materials[1].params;
    CHECK(j->transfer == TRANSFER_ASFLIP && w->transfer == TRANSFER_ASFLIP);
    CHECK_NEAR(j->flip_blend, 0.99, F);
    CHECK(j->beta_min == 0 && j->beta_max == 1);
    CHECK_NEAR(w->flip_blend, 0.9, F);
    CHECK(w->beta_min == 0.25f && w->beta_max == 0.75f);
  }
  if (s.n_bodies != 2 || s.n_colliders != 4) return;
  const scene_body *cy = &s.bodies[0], *bx = &s.bodies[1];
  CHECK(cy->shape == SHAPE_CYLINDER && cy->radius == 0.2 && cy->height == 0.4);
  CHECK_VEC(cy->axis, 0, 0, 1); /* normalised */
  double lo[3], hi[3];
  scene_body_bounds(cy, lo, hi);
  CHECK_NEAR(lo[0], 0.3, 1e-15);
  CHECK_NEAR(hi[1], 0.7, 1e-15);
  CHECK_NEAR(lo[2], 0.3, 1e-15);
  CHECK_NEAR(hi[2], 0.7, 1e-15);
  /* the box turned 90 degrees about y: its x and z extents swap about the centre (0.5, 0.4, 0.45) */
  CHECK(bx->rotated);
  scene_body_bounds(bx, lo, hi);
  CHECK_NEAR(lo[0], 0.5 - 0.15, 1e-12);
  CHECK_NEAR(hi[0], 0.5 + 0.15, 1e-12);
  CHECK_NEAR(lo[1], 0.3, 1e-12);
  CHECK_NEAR(lo[2], 0.45 - 0.2, 1e-12);
  const double in[3] = {0.5, 0.4, 0.26}, out[3] = {0.34, 0.4, 0.45};
  CHECK(scene_body_inside(bx, in) && !scene_body_inside(bx, out));
  CHECK(s.faces[FACE_YMIN].type == BOUNDARY_SEPARATE && s.faces[FACE_YMIN].friction == 0.3);
  CHECK(s.faces[FACE_XMIN].type == BOUNDARY_STICKY && s.faces[FACE_YMAX].type == BOUNDARY_STICKY);

  const scene_collider *pl = &s.colliders[0], *cb = &s.colliders[1], *sp = &s.colliders[2];
  CHECK(pl->shape == SDF_PLANE && pl->type == BOUNDARY_SLIP && pl->n_keys == 0);
  CHECK_VEC(pl->normal, 0, 0.6, 0.8);
  CHECK(cb->shape == SDF_BOX && cb->type == BOUNDARY_SEPARATE && cb->friction == 0.5 && cb->n_keys == 2);
  CHECK(sp->type == BOUNDARY_STICKY && sp->friction == 0);
  if (cb->n_keys == 2) {
    CHECK(cb->keys[0].time == 0 && cb->keys[0].rotation[0] == 1);
    CHECK_VEC(cb->keys[1].translation, 0.5, 0, 0);
    CHECK_NEAR(cb->keys[1].rotation[0], sqrt(0.5), 1e-15);
    CHECK_NEAR(cb->keys[1].rotation[3], sqrt(0.5), 1e-15);
  }
  collider *cols = NULL;
  collider_key *keys = NULL;
  int nk = -1;
  CHECK(scene_kernel_colliders(&s, &cols, &keys, &nk) == 0);
  CHECK(nk == 2);
  if (cols && keys) {
    CHECK(cols[1].key0 == 0 && cols[1].n_keys == 2 && cols[3].n_keys == 0);
    CHECK_NEAR(cols[1].center[0], 0.2, F);
    CHECK_NEAR(cols[1].geom.half[1], 0.2, F);
    CHECK_NEAR(cols[3].geom.half_height, 0.3, F);
    CHECK(keys[1].time == 1);
  }
  free(cols);
  free(keys);
  scene_destroy(&s);
  CHECK(s.colliders == NULL && s.n_colliders == 0);
  unlink(path);
}

static void test_errors(void) {
  scene s;
  char path[64];
  dr_clear();
  CHECK(scene_load("/nonexistent/scene.json", &s) == DR_EINPUT);
  CHECK(strcmp(dr_message(), "/nonexistent/scene.json: cannot read: No such file or directory") == 0);
  CHECK(s.materials == NULL && s.bodies == NULL && s.n_materials == 0 && s.n_bodies == 0);

  /* fails late (bodies), after materials were allocated: they must be released */
  char text[2048];
  snprintf(text, sizeof text, "%s", MINIMAL);
  char *at = strstr(text, "\"material\": \"water\"");
  CHECK(at != NULL);
  if (!at) return;
  memcpy(at, "\"material\": \"wader\"", 19);
  write_temp(path, text);
  dr_clear();
  CHECK(scene_load(path, &s) == DR_EINPUT);
  CHECK(s.materials == NULL && s.bodies == NULL && s.n_materials == 0);
  const char *msg = dr_message();
  char prefix[128];
  snprintf(prefix, sizeof prefix, "%s: bodies[1].material: ", path);
  CHECK(strncmp(msg, prefix, strlen(prefix)) == 0);
  CHECK(strstr(msg, "\"wader\"") != NULL);
  CHECK(strstr(msg, "sand, water") != NULL);
  CHECK(strchr(msg, '\n') == NULL);
  scene_destroy(&s);
  unlink(path);

  /* a key with a newline in it still gives one line */
  write_temp(path, "{ \"a\\nb\": 1 }");
  dr_clear();
  CHECK(scene_load(path, &s) == DR_EINPUT);
  CHECK(strchr(dr_message(), '\n') == NULL);
  CHECK(strstr(dr_message(), "a\\x0ab: unknown key") != NULL);
  unlink(path);
}

/* The scene hash that checkpoints record: 64-bit FNV-1a of the file's bytes, kept with the bytes. */
static void test_hash(void) {
  /* FNV-1a reference values (the published test vectors) */
  CHECK(scene_hash_bytes("", 0) == 0xcbf29ce484222325ULL);
  CHECK(scene_hash_bytes("a", 1) == 0xaf63dc4c8601ec8cULL);
  CHECK(scene_hash_bytes("foobar", 6) == 0x85944171f73967e8ULL);
  scene s, t;
  char path[64], path2[64];
  CHECK(load_text(MINIMAL, &s, path) == 0);
  CHECK(s.text && s.text_len == strlen(MINIMAL) && memcmp(s.text, MINIMAL, s.text_len) == 0);
  CHECK(s.hash == scene_hash_bytes(MINIMAL, strlen(MINIMAL)));
  /* one more space: the same scene, another file, another hash */
  char text[2048];
  snprintf(text, sizeof text, "%s ", MINIMAL);
  CHECK(load_text(text, &t, path2) == 0);
  CHECK(t.hash != s.hash);
  scene_destroy(&s);
  scene_destroy(&t);
  CHECK(s.text == NULL && s.text_len == 0);
  unlink(path);
  unlink(path2);
}

/* scene_parse: a scene from memory reads as the same file does (values, text, hash), needs no NUL
 * at the end, and fails as scene_load does, with the name given standing for the file. */
static void test_parse_memory(void) {
  scene s, t;
  char path[64];
  CHECK(load_text(MINIMAL, &s, path) == 0);
  const size_t n = strlen(MINIMAL);
  char *bytes = malloc(n); /* exactly the file's bytes: no NUL after them */
  CHECK(bytes != NULL);
  if (!bytes) return;
  memcpy(bytes, MINIMAL, n);
  dr_clear();
  CHECK(scene_parse("memory.json", bytes, n, &t) == 0);
  CHECK(strcmp(t.path, "memory.json") == 0);
  CHECK(t.text != bytes && t.text_len == n && memcmp(t.text, MINIMAL, n) == 0 && t.text[n] == 0);
  CHECK(t.hash == s.hash);
  CHECK(t.n_materials == s.n_materials && t.n_bodies == s.n_bodies && t.frames == s.frames);
  CHECK(t.dx == s.dx && t.bodies[1].material == s.bodies[1].material);
  scene_destroy(&t);
  scene_destroy(&s);
  unlink(path);

  /* cut short: the message names "memory.json" and where the JSON ends */
  dr_clear();
  CHECK(scene_parse("memory.json", bytes, n / 2, &t) == DR_EINPUT);
  CHECK(strncmp(dr_message(), "memory.json: line ", 18) == 0);
  CHECK(strstr(dr_message(), "got the end of the file") != NULL);
  CHECK(t.materials == NULL && t.text == NULL);
  /* a NUL byte inside the bytes given is refused, not taken for the end */
  bytes[5] = 0;
  dr_clear();
  CHECK(scene_parse("memory.json", bytes, n, &t) == DR_EINPUT);
  CHECK(strstr(dr_message(), "got a NUL byte") != NULL);
  /* nothing at all */
  dr_clear();
  CHECK(scene_parse("memory.json", NULL, 0, &t) == DR_EINPUT);
  CHECK(strncmp(dr_message(), "memory.json: ", 13) == 0);
  free(bytes);
}

int main(void) {
  test_full();
  test_parse_memory();
  test_hash();
  test_emit();
  test_defaults();
  test_dp_fit();
  test_viscosity();
  test_fixed_dt();
  test_shapes();
  test_errors();
  if (failures) {
    fprintf(stderr, "test_scene: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_scene: all checks passed\n");
  return 0;
}

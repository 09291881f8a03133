/* scene_materials.c - the scene's materials section: named materials, each one model with its
 * keys, turned into the kernels' material_params.
 *
 * A material is checked for duplicate keys before its model is read, then against the keys of
 * that model (a key of another model is reported as such). Invariants: every parameter the kernels
 * see (Lame parameters, NACC's yield pressure and friction^2) fits single precision, or the key to
 * blame is reported; the transfer keys are accepted by every model, their ASFLIP parameters only
 * with transfer "asflip"; materials[i].name is non-empty, printable and below SCENE_NAME_MAX. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "physics/constitutive.h"
#include "scene_parse.h"

/* Material models: the keys each one accepts. */
static const char *const MODEL_NAMES[] = {"fixed_corotated", "drucker_prager",
                                          "weakly_compressible", "nacc"};
/* Every model also takes the transfer keys (TRANSFER_KEYS, last in each list). */
#define TRANSFER_KEYS "transfer", "flip_blend", "asflip_beta_min", "asflip_beta_max"
static const char *const ALL_MATERIAL_KEYS[] = {"model",         "density",        "youngs_modulus",
                                                "poisson_ratio", "friction_angle", "bulk_modulus",
                                                "gamma",         "friction",       "cohesion",
                                                "hardening",     "initial_compression", "fit",
                                                "viscosity",     TRANSFER_KEYS};
#define N_ALL_MATERIAL_KEYS ((int)(sizeof ALL_MATERIAL_KEYS / sizeof ALL_MATERIAL_KEYS[0]))
static const char *const FIXED_COROTATED_KEYS[] = {"model", "density", "youngs_modulus",
                                                   "poisson_ratio", TRANSFER_KEYS};
static const char *const DRUCKER_PRAGER_KEYS[] = {"model", "density", "youngs_modulus",
                                                  "poisson_ratio", "friction_angle", "fit",
                                                  TRANSFER_KEYS};
static const char *const WEAKLY_COMPRESSIBLE_KEYS[] = {"model", "density", "bulk_modulus",
                                                       "gamma", "viscosity", TRANSFER_KEYS};
static const char *const NACC_KEYS[] = {"model",    "density",  "bulk_modulus", "poisson_ratio",
                                        "friction", "cohesion", "hardening",    "initial_compression",
                                        TRANSFER_KEYS};

/* Physical ranges (docs/scene-format.md): from a light foam to past osmium, from a soft gel to
 * past diamond's 1.2e12 Pa, and Tait exponents up to 20 (water's is 7); beyond them the wave speed
 * asks for substeps no run finishes, or J^-gamma overflows single precision. */
static const range DENSITY_RANGE = {1e-3, 1e5, 0, 0, "kg/m^3"};
static const range STIFFNESS_RANGE = {1, 1e13, 0, 0, "Pa"};
static const range GAMMA_RANGE = {1, 20, 0, 0, ""};

/* NACC snow: bulk modulus and Poisson's ratio, the yield surface's friction M, cohesion beta,
 * hardening xi and the initial plastic state (defaults: the paper's Crawling in Snow, and the
 * usual initial_compression of -0.01). */
static int parse_nacc(const ctx *c, const cJSON *m, const char *where, scene_material *mat) {
  char key[KEY_LEN], a[32], b[32];
  material_params *p = &mat->params;
  double M, beta, xi, a0;
  DR_TRY(sj_get_real(c, m, where, "bulk_modulus", 1, 0, STIFFNESS_RANGE, &mat->bulk_modulus));
  DR_TRY(sj_get_real(c, m, where, "poisson_ratio", 1, 0, (range){-1, 0.5, 1, 1, ""}, &mat->poisson_ratio));
  const double K = mat->bulk_modulus, nu = mat->poisson_ratio, E = 3 * K * (1 - 2 * nu);
  const double mu = E / (2 * (1 + nu));
  if (!(E <= FLT_MAX && mu <= FLT_MAX)) {
    sj_join(key, where, "bulk_modulus");
    return sj_fail(c, key, "too large: Young's modulus 3 K (1 - 2 nu) overflows single precision (got %s with "
                   "poisson_ratio %s; expected at most 3.4e+38 Pa)", sj_fmt_num(a, K), sj_fmt_num(b, nu));
  }
  mat->youngs_modulus = E; /* derived, for the wave speed */
  DR_TRY(sj_get_real(c, m, where, "friction", 0, 0.8, (range){0, INFINITY, 1, 0, ""}, &M));
  DR_TRY(sj_get_real(c, m, where, "cohesion", 0, 0.9, (range){0, INFINITY, 0, 0, ""}, &beta));
  DR_TRY(sj_get_real(c, m, where, "hardening", 0, 5.0, (range){0, INFINITY, 0, 0, ""}, &xi));
  DR_TRY(sj_get_real(c, m, where, "initial_compression", 0, -0.01, (range){-INFINITY, 0, 0, 0, ""}, &a0));
  const double p0 = K * (1e-5 + sinh(xi * -a0));
  if (!(p0 <= FLT_MAX && M * M <= FLT_MAX)) {
    sj_join(key, where, M * M <= FLT_MAX ? "initial_compression" : "friction");
    return sj_fail(c, key, "too large: the initial yield pressure K (1e-5 + sinh(hardening x -initial_compression)) "
                   "or friction^2 overflows single precision (got initial_compression %s with hardening %s; expected "
                   "a yield pressure within 3.4e+38 Pa)", sj_fmt_num(a, a0), sj_fmt_num(b, xi));
  }
  mat->nacc_friction = M, mat->nacc_cohesion = beta, mat->nacc_hardening = xi, mat->nacc_initial = a0;
  material_nacc_from_user(p, (float)mat->density, (float)K, (float)nu, (float)M, (float)beta, (float)xi, (float)a0);
  return 0;
}
static const char *const TRANSFER_NAMES[] = {"apic", "asflip"};

/* Drucker-Prager: which Mohr-Coulomb match the cone's slope comes from (key fit). */
enum dp_fit { DP_FIT_COMPRESSION = 0, DP_FIT_PLANE_STRAIN = 1, DP_FIT_INSCRIBED = 2 };
static const char *const DP_FIT_NAMES[] = {"compression", "plane_strain", "inscribed"};

/* The kernels' cone slope alpha (yield |dev tau| + alpha tr tau <= 0, Frobenius norm) of friction
 * angle phi (degrees) under a fit. alpha = sqrt(2) a, a the slope of the classical form
 * sqrt(J2) + a I1 <= 0 (|dev tau| = sqrt(2 J2)), so each fit is a Mohr-Coulomb match of a:
 *   compression   a = 2 sin(phi) / (sqrt(3) (3 - sin(phi))): the cone through the pyramid's
 *                 compressive meridian (Klar et al. 2016, the outer cone);
 *   plane_strain  a = sin(phi) / 3: Mohr-Coulomb in plane strain with the return mapping's
 *                 volume-preserving flow (zero dilatancy): the out-of-plane deviator vanishes at
 *                 yield, so sqrt(J2) is the in-plane Mohr circle's radius and I1 / 3 its centre,
 *                 and radius = -sin(phi) centre is Mohr-Coulomb (the plane-strain match for a
 *                 zero dilation angle, tan beta = sqrt(3) sin(phi) in Abaqus's q-p form);
 *                 computed, as the user reads it, as the compression formula at
 *                 sin(phi_fit) = 3 sin(phi) / (2 sqrt(3) + sin(phi));
 *   inscribed     a = sin(phi) / sqrt(3 (3 + sin^2(phi))): the cone tangent to the pyramid's
 *                 faces, nowhere stronger than Mohr-Coulomb (de Souza Neto, Peric & Owen,
 *                 Computational Methods for Plasticity, 2008, ch. 6; the same as the plane-strain
 *                 match under associated flow, a = tan(phi) / sqrt(9 + 12 tan^2(phi))).
 * The compression expression is kept as it was, so that fit "compression" is bitwise the default. */
static double dp_alpha(double phi_deg, int fit) {
  double sphi = sin(phi_deg * (PI / 180.0));
  if (fit == DP_FIT_INSCRIBED) return sqrt(2.0 / 3.0) * sphi / sqrt(3.0 + sphi * sphi);
  if (fit == DP_FIT_PLANE_STRAIN) sphi = 3.0 * sphi / (2.0 * sqrt(3.0) + sphi);
  return sqrt(2.0 / 3.0) * 2.0 * sphi / (3.0 - sphi);
}

/* transfer (apic | asflip) and, with asflip only, its parameters. */
static int parse_transfer(const ctx *c, const cJSON *m, const char *where, scene_material *mat) {
  static const char *const asflip_keys[] = {"flip_blend", "asflip_beta_min", "asflip_beta_max"};
  char key[KEY_LEN], a[32], b[32];
  material_params *p = &mat->params;
  DR_TRY(sj_get_enum(c, m, where, "transfer", TRANSFER_APIC, TRANSFER_NAMES, 2, &p->transfer));
  if (p->transfer != TRANSFER_ASFLIP) {
    for (int i = 0; i < 3; ++i)
      if (cJSON_GetObjectItemCaseSensitive(m, asflip_keys[i])) {
        sj_join(key, where, asflip_keys[i]);
        return sj_fail(c, key, "allowed only with transfer \"asflip\" (got transfer \"%s\"; expected no "
                       "%s, or transfer \"asflip\")", TRANSFER_NAMES[p->transfer], asflip_keys[i]);
      }
    return 0;
  }
  const range unit = {0, 1, 0, 0, ""};
  DR_TRY(sj_get_real(c, m, where, "flip_blend", 0, 0.99, unit, &mat->flip_blend));
  DR_TRY(sj_get_real(c, m, where, "asflip_beta_min", 0, 0, unit, &mat->beta_min));
  DR_TRY(sj_get_real(c, m, where, "asflip_beta_max", 0, 1, unit, &mat->beta_max));
  if (mat->beta_max < mat->beta_min) {
    sj_join(key, where, cJSON_GetObjectItemCaseSensitive(m, "asflip_beta_max") ? "asflip_beta_max" : "asflip_beta_min");
    return sj_fail(c, key, "asflip_beta_max below asflip_beta_min (got asflip_beta_min %s and asflip_beta_max %s; "
                   "expected asflip_beta_min <= asflip_beta_max)", sj_fmt_num(a, mat->beta_min), sj_fmt_num(b, mat->beta_max));
  }
  p->flip_blend = (float)mat->flip_blend;
  p->beta_min = (float)mat->beta_min;
  p->beta_max = (float)mat->beta_max;
  return 0;
}

/* Young's modulus and Poisson's ratio of a solid, and the Lame parameters from them. */
static int parse_elastic(const ctx *c, const cJSON *m, const char *where, scene_material *mat) {
  char key[KEY_LEN], a[32], b[32];
  DR_TRY(sj_get_real(c, m, where, "youngs_modulus", 1, 0, STIFFNESS_RANGE, &mat->youngs_modulus));
  DR_TRY(sj_get_real(c, m, where, "poisson_ratio", 1, 0, (range){-1, 0.5, 1, 1, ""},
                     &mat->poisson_ratio));
  double e = mat->youngs_modulus, nu = mat->poisson_ratio;
  double mu = e / (2 * (1 + nu));
  double lambda = e * nu / ((1 + nu) * (1 - 2 * nu));
  if (!(fabs(mu) <= FLT_MAX && fabs(lambda) <= FLT_MAX)) {
    sj_join(key, where, "poisson_ratio");
    return sj_fail(c, key, "too close to %s for this youngs_modulus: the Lame parameters overflow "
                   "single precision (got %s with youngs_modulus %s; expected mu and lambda within "
                   "3.4e+38 Pa)", nu > 0 ? "0.5" : "-1", sj_fmt_num(a, nu), sj_fmt_num(b, e));
  }
  mat->params.mu = (float)mu;
  mat->params.lambda = (float)lambda;
  return 0;
}

static int parse_material(const ctx *c, const cJSON *m, const char *where, scene_material *mat) {
  char variant[80];
  DR_TRY(sj_need_object(c, m, where, "with keys model, density, ..."));
  DR_TRY(sj_check_keys(c, m, where, NULL, 0, NULL, 0, NULL)); /* duplicates, before reading model */
  int model;
  DR_TRY(sj_get_enum(c, m, where, "model", -1, MODEL_NAMES, 4, &model));
  snprintf(variant, sizeof variant, "model '%s'", MODEL_NAMES[model]);
  const char *const *keys = model == MODEL_FIXED_COROTATED  ? FIXED_COROTATED_KEYS
                            : model == MODEL_DRUCKER_PRAGER ? DRUCKER_PRAGER_KEYS
                            : model == MODEL_NACC           ? NACC_KEYS
                                                            : WEAKLY_COMPRESSIBLE_KEYS;
#define N_KEYS(a) ((int)(sizeof(a) / sizeof((a)[0])))
  int n_keys = model == MODEL_FIXED_COROTATED  ? N_KEYS(FIXED_COROTATED_KEYS)
               : model == MODEL_DRUCKER_PRAGER ? N_KEYS(DRUCKER_PRAGER_KEYS)
               : model == MODEL_NACC           ? N_KEYS(NACC_KEYS)
                                               : N_KEYS(WEAKLY_COMPRESSIBLE_KEYS);
#undef N_KEYS
  DR_TRY(sj_check_keys(c, m, where, keys, n_keys, ALL_MATERIAL_KEYS, N_ALL_MATERIAL_KEYS, variant));

  material_params *p = &mat->params;
  memset(p, 0, sizeof *p);
  p->model = model;
  DR_TRY(sj_get_real(c, m, where, "density", 1, 0, DENSITY_RANGE, &mat->density));
  p->density = (float)mat->density;
  if (model == MODEL_WEAKLY_COMPRESSIBLE) {
    DR_TRY(sj_get_real(c, m, where, "bulk_modulus", 1, 0, STIFFNESS_RANGE, &mat->bulk_modulus));
    DR_TRY(sj_get_real(c, m, where, "gamma", 0, 7, GAMMA_RANGE, &mat->gamma));
    DR_TRY(sj_get_real(c, m, where, "viscosity", 0, 0, (range){0, FLT_MAX, 0, 0, "Pa s"}, &mat->viscosity));
    p->bulk = (float)mat->bulk_modulus;
    p->gamma = (float)mat->gamma;
    p->viscosity = (float)mat->viscosity;
    return parse_transfer(c, m, where, mat);
  }
  if (model == MODEL_NACC) {
    DR_TRY(parse_nacc(c, m, where, mat));
    return parse_transfer(c, m, where, mat);
  }
  DR_TRY(parse_elastic(c, m, where, mat));
  if (model == MODEL_DRUCKER_PRAGER) {
    DR_TRY(sj_get_real(c, m, where, "friction_angle", 0, 30, (range){0, 90, 0, 1, "degrees"},
                       &mat->friction_angle));
    int fit;
    DR_TRY(sj_get_enum(c, m, where, "fit", DP_FIT_COMPRESSION, DP_FIT_NAMES, 3, &fit));
    p->alpha = (float)dp_alpha(mat->friction_angle, fit);
  }
  return parse_transfer(c, m, where, mat);
}

int scene_parse_materials(const ctx *c, const cJSON *root, scene *s) {
  const cJSON *ms;
  char key[KEY_LEN], name[200];
  DR_TRY(sj_get_section(c, root, "materials", 1, "an object of named materials", &ms));
  DR_TRY(sj_need_object(c, ms, "materials", "of named materials"));
  int n = cJSON_GetArraySize(ms);
  if (n == 0)
    return sj_fail(c, "materials", "empty (got {}; expected at least one named material, e.g. "
                   "\"rubber\": {\"model\": \"fixed_corotated\", ...})");
  DR_TRY(sj_check_keys(c, ms, "materials", NULL, 0, NULL, 0, NULL));
  DR_ALLOC0(s->materials, n, "scene materials");
  s->n_materials = n;
  int i = 0;
  for (const cJSON *m = ms->child; m; m = m->next, ++i) {
    const char *nm = m->string ? m->string : "";
    size_t len = strlen(nm);
    sj_join(key, "materials", nm);
    if (len == 0)
      return sj_fail(c, "materials", "a material has an empty name (got \"\"; expected a name of 1 "
                     "to %d characters)", SCENE_NAME_MAX - 1);
    if (len >= SCENE_NAME_MAX)
      return sj_fail(c, key, "material name too long (got %zu bytes; expected 1 to %d)", len,
                     SCENE_NAME_MAX - 1);
    if (sj_has_control_char(nm)) {
      sj_clean(name, sizeof name, nm, 80);
      return sj_fail(c, key, "material name contains a control character (got \"%s\"; expected "
                     "printable characters)", name);
    }
    memcpy(s->materials[i].name, nm, len + 1);
    DR_TRY(parse_material(c, m, key, &s->materials[i]));
  }
  return 0;
}

/* jelly_block.h - the fixture of the tests that drive a backend through backend.h directly
 * (test_emigrate, test_pack_nodes): a 16 x 10 x 12-cell block of elastic material at 8 particles per
 * cell, thrown along +x and falling in a 1 m box with slip walls, dx DX, fixed steps of DT.
 * Include after simtest.h. */
#ifndef DRIFT_TESTS_JELLY_BLOCK_H
#define DRIFT_TESTS_JELLY_BLOCK_H

#include "backend.h"
#include "physics/fixed.h"

#define DX 0.02f
#define DT 2e-4f

static material_params jelly(void) {
  material_params m;
  memset(&m, 0, sizeof m);
  material_from_user(&m, MODEL_FIXED_COROTATED, 1000.0f, 2e5f, 0.3f, 0.0f, 0.0f, 0.0f);
  return m;
}

/* The box, the material m, and deterministic mode where det (fixed-point scales for m). */
static sim_params params(const material_params *m, int det) {
  static const char *names[1] = {"jelly"};
  sim_params prm;
  memset(&prm, 0, sizeof prm);
  for (int a = 0; a < 3; ++a) prm.domain_min[a] = 0, prm.domain_max[a] = 1.0;
  prm.dx = DX;
  prm.gravity[1] = -9.81f;
  for (int f = 0; f < DR_FACES; ++f) prm.boundary.type[f] = BOUNDARY_SLIP;
  prm.n_materials = 1;
  prm.materials = m;
  prm.material_names = names;
  prm.g2p2g_below = 100000;
  prm.deterministic = det;
  fix_scales(m->density * (0.5 * DX) * (0.5 * DX) * (0.5 * DX), 10.0, prm.fix_scale);
  return prm;
}

/* The block's particles (ids 0, 1, ...) appended to p. */
static void block(const material_params *m, particles *p) {
  const float h = 0.5f * DX, vol = h * h * h;
  uint64_t id = 0;
  for (int i = 0; i < 32; ++i)
    for (int j = 0; j < 20; ++j)
      for (int k = 0; k < 24; ++k) {
        const float x[3] = {0.3f + h * (i + 0.5f), 0.4f + h * (j + 0.5f), 0.35f + h * (k + 0.5f)};
        const float v[3] = {2.0f, 0.5f, -0.3f};
        MUST(particles_push(p, x, v, m->density * vol, vol, id++, 0));
      }
}

/* One whole step of b, phase by phase (a rebuild-mapping where b asks for one). */
static void step(backend *b) {
  int rebuilt;
  MUST(b->rebuild(b->state, 0, &rebuilt));
  MUST(b->p2g(b->state, DT));
  MUST(b->grid_update(b->state, DT));
  MUST(b->g2p(b->state, DT));
}

#endif

/* test_transfer - the G2P velocity update of src/physics/transfer.h against its definitions:
 * APIC takes the grid velocity; ASFLIP with flip_blend 0 is APIC exactly; with flip_blend 1 and
 * no positional adjustment it is the standard FLIP update v_p + (vpic - vold) and the particle
 * moves with vpic; the positional adjustment beta switches between beta_min (compressed) and
 * beta_max (separating) on log(det F) + dt tr C, and scales the FLIP part of the motion. */
#include <math.h>
#include <string.h>

#include "physics/check.h"
#include "physics/transfer.h"

static material_params asflip(float alpha, float bmin, float bmax) {
  material_params m;
  memset(&m, 0, sizeof m);
  m.transfer = TRANSFER_ASFLIP;
  m.flip_blend = alpha;
  m.beta_min = bmin;
  m.beta_max = bmax;
  return m;
}

int main(void) {
  check_rng rng = {2021};
  material_params apic;
  memset(&apic, 0, sizeof apic);
  const material_params a0 = asflip(0, 0, 1), flip = asflip(1, 0, 0), full = asflip(0.7f, 0.2f, 0.9f);
  for (int k = 0; k < 10000; ++k) {
    float vp[3], vpic[3], vold[3], vn[3], vm[3], vn2[3], vm2[3];
    for (int i = 0; i < 3; ++i) {
      vp[i] = (float)check_rng_range(&rng, -5, 5);
      vpic[i] = (float)check_rng_range(&rng, -5, 5);
      vold[i] = (float)check_rng_range(&rng, -5, 5);
    }
    const float dt = (float)check_rng_range(&rng, 1e-5, 1e-3), trC = (float)check_rng_range(&rng, -50, 50);
    const float detF = (float)check_rng_range(&rng, 0.8, 1.2);

    transfer_velocity(&apic, dt, vp, vpic, vold, trC, detF, vn, vm);
    for (int i = 0; i < 3; ++i) CHECK(vn[i] == vpic[i] && vm[i] == vpic[i], "APIC does not take the grid velocity");

    transfer_velocity(&a0, dt, vp, vpic, vold, trC, detF, vn2, vm2);
    for (int i = 0; i < 3; ++i) CHECK(vn2[i] == vn[i] && vm2[i] == vm[i], "ASFLIP with flip_blend 0 differs from APIC");

    transfer_velocity(&flip, dt, vp, vpic, vold, trC, detF, vn, vm);
    for (int i = 0; i < 3; ++i) {
      const double want = (double)vp[i] + ((double)vpic[i] - vold[i]); /* FLIP: v_p + the grid's change */
      CHECK(fabs(vn[i] - want) < 4e-6 * (fabs(vp[i]) + fabs(vpic[i]) + fabs(vold[i])), "FLIP: %g, expected %g", vn[i],
            want);
      CHECK(vm[i] == vpic[i], "FLIP without positional adjustment does not move with the grid velocity");
    }

    transfer_velocity(&full, dt, vp, vpic, vold, trC, detF, vn, vm);
    const int compressed = log((double)detF) + (double)trC * dt < -1e-3;
    const double beta = compressed ? 0.2 : 0.9;
    for (int i = 0; i < 3; ++i) {
      const double d = (double)vp[i] - vold[i];
      CHECK(fabs(vn[i] - (vpic[i] + 0.7 * d)) < 1e-5, "ASFLIP velocity %g, expected %g", vn[i], vpic[i] + 0.7 * d);
      CHECK(fabs(vm[i] - (vpic[i] + beta * 0.7 * d)) < 1e-5, "ASFLIP advection velocity %g, expected %g (%s)", vm[i],
            vpic[i] + beta * 0.7 * d, compressed ? "compressed" : "separating");
    }
  }
  /* the switch itself: a particle at rest volume that expands separates, one that shrinks does not */
  float vp[3] = {1, 0, 0}, z[3] = {0, 0, 0}, vn[3], vm[3];
  transfer_velocity(&full, 1e-3f, vp, z, z, 10.0f, 1.0f, vn, vm);
  CHECK(fabsf(vm[0] - 0.9f * 0.7f) < 1e-6f, "an expanding particle does not take beta_max (%g)", vm[0]);
  transfer_velocity(&full, 1e-3f, vp, z, z, -10.0f, 1.0f, vn, vm);
  CHECK(fabsf(vm[0] - 0.2f * 0.7f) < 1e-6f, "a compressed particle does not take beta_min (%g)", vm[0]);
  transfer_velocity(&full, 1e-3f, vp, z, z, 0.0f, 0.95f, vn, vm);
  CHECK(fabsf(vm[0] - 0.2f * 0.7f) < 1e-6f, "a particle compressed by 5%% does not take beta_min (%g)", vm[0]);
  return check_summary("test_transfer");
}

/* particles.c - the host particle slice (see particles.h). */
#include "particles.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

#define GROW(field, k)                                                                             \
  do {                                                                                             \
    void *q_ = realloc(p->field, sizeof(*p->field) * (k) * cap);                                   \
    if (!q_) return dr_fail(DR_ENOMEM, "out of host memory: %zu particles need %.1f MiB", cap,     \
                            (double)sizeof(*p->field) * (k) * cap / 1048576.0);                    \
    p->field = q_;                                                                                 \
  } while (0)

int particles_reserve(particles *p, size_t cap) {
  if (cap <= p->cap) return DR_OK;
  GROW(x, 3);
  GROW(v, 3);
  GROW(C, 9);
  GROW(F, 9);
  GROW(mass, 1);
  GROW(vol0, 1);
  GROW(id, 1);
  GROW(material, 1);
  GROW(owner, 1);
  p->cap = cap;
  return DR_OK;
}

int particles_push(particles *p, const float x[3], const float v[3], float mass, float vol0,
                   uint64_t id, int32_t material) {
  if (p->n == p->cap) DR_TRY(particles_reserve(p, p->cap ? 2 * p->cap : 1024));
  size_t i = p->n++;
  memcpy(p->x + 3 * i, x, 3 * sizeof(float));
  memcpy(p->v + 3 * i, v, 3 * sizeof(float));
  memset(p->C + 9 * i, 0, 9 * sizeof(float));
  for (int k = 0; k < 9; ++k) p->F[9 * i + k] = (k % 4 == 0) ? 1.0f : 0.0f;
  p->mass[i] = mass;
  p->vol0[i] = vol0;
  p->id[i] = id;
  p->material[i] = material;
  p->owner[i] = 0;
  return DR_OK;
}

void particles_free(particles *p) {
  free(p->x);
  free(p->v);
  free(p->C);
  free(p->F);
  free(p->mass);
  free(p->vol0);
  free(p->id);
  free(p->material);
  free(p->owner);
  memset(p, 0, sizeof *p);
}

/* particles.c - the host particle slice (see particles.h). */
#include "particles.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

#define ATTR(field, count) {#field, offsetof(particles, field), sizeof(*((particles *)0)->field) * (count)}
const particle_attr particle_attrs[PARTICLE_ATTRS] = {
    ATTR(x, 3),     ATTR(v, 3),  ATTR(C, 9),        ATTR(F, 9),     ATTR(mass, 1),
    ATTR(vol0, 1),  ATTR(logjp, 1), ATTR(id, 1),    ATTR(material, 1), ATTR(owner, 1),
};
#undef ATTR

void *particles_attr(const particles *p, int a) { return *(void *const *)((const char *)p + particle_attrs[a].offset); }

static void set_attr(particles *p, int a, void *q) { *(void **)((char *)p + particle_attrs[a].offset) = q; }

size_t particles_record_bytes(void) {
  size_t b = 0;
  for (int a = 0; a < PARTICLE_ATTRS; ++a) b += particle_attrs[a].bytes;
  return (b + 3) / 4 * 4;
}

void particles_pack(const particles *p, size_t i, void *rec) {
  char *r = rec;
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    const size_t b = particle_attrs[a].bytes;
    memcpy(r, (const char *)particles_attr(p, a) + i * b, b);
    r += b;
  }
}

int particles_push_record(particles *p, const void *rec) {
  if (p->n == p->cap) DR_TRY(particles_reserve(p, p->cap ? 2 * p->cap : 1024));
  const char *r = rec;
  const size_t i = p->n++;
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    const size_t b = particle_attrs[a].bytes;
    memcpy((char *)particles_attr(p, a) + i * b, r, b);
    r += b;
  }
  return DR_OK;
}

int particles_append(particles *dst, const particles *src, size_t i) {
  if (dst->n == dst->cap) DR_TRY(particles_reserve(dst, dst->cap ? 2 * dst->cap : 1024));
  const size_t j = dst->n++;
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    const size_t b = particle_attrs[a].bytes;
    memcpy((char *)particles_attr(dst, a) + j * b, (const char *)particles_attr(src, a) + i * b, b);
  }
  return DR_OK;
}

int particles_reserve(particles *p, size_t cap) {
  if (cap <= p->cap) return DR_OK;
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    const size_t bytes = particle_attrs[a].bytes * cap;
    void *q = realloc(particles_attr(p, a), bytes);
    if (!q)
      return dr_fail(DR_ENOMEM, "out of host memory: %zu particles need %.1f MiB", cap, (double)bytes / 1048576.0);
    set_attr(p, a, q);
  }
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
  p->logjp[i] = 0.0f;
  p->id[i] = id;
  p->material[i] = material;
  p->owner[i] = 0;
  return DR_OK;
}

void particles_free(particles *p) {
  for (int a = 0; a < PARTICLE_ATTRS; ++a) free(particles_attr(p, a));
  memset(p, 0, sizeof *p);
}

/* particles.c - the host particle slice (see particles.h). */
#include "particles.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "memsizes.h"
#include "memtally.h"

#define ATTR_(field, type, k, what) {#field, offsetof(particles, field), sizeof(type) * (k)},
const particle_attr particle_attrs[PARTICLE_ATTRS] = {PARTICLE_ATTRIBUTES(ATTR_)};
#undef ATTR_

void *particles_attr(const particles *p, int a) { return *(void *const *)((const char *)p + particle_attrs[a].offset); }

int particles_reserve(particles *p, size_t cap) {
  if (cap <= p->cap) return DR_OK;
#define GROW_(field, type, k, what)                                                                \
  do {                                                                                             \
    void *q_ = memtally_realloc(MT_PARTICLES, p->field, sizeof(type) * (k) * cap, "particles (" #field ")"); \
    if (!q_) return DR_ENOMEM;                                                                     \
    p->field = q_;                                                                                 \
  } while (0);
  PARTICLE_ATTRIBUTES(GROW_)
#undef GROW_
  p->cap = cap;
  return DR_OK;
}

int particles_push(particles *p, const float x[3], const float v[3], float mass, float vol0,
                   uint64_t id, int32_t material) {
  if (p->n == p->cap) DR_TRY(particles_reserve(p, p->cap ? 2 * p->cap : MEM_FIRST_PARTICLES));
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
#define FREE_(field, type, k, what) memtally_free(p->field);
  PARTICLE_ATTRIBUTES(FREE_)
#undef FREE_
  memset(p, 0, sizeof *p);
}

size_t particles_record_bytes(void) {
  size_t bytes = 0;
#define BYTES_(field, type, k, what) bytes += sizeof(type) * (k);
  PARTICLE_ATTRIBUTES(BYTES_)
#undef BYTES_
  return bytes;
}

void particles_pack(const particles *p, size_t i, void *record) {
  unsigned char *r = record;
#define PACK_(field, type, k, what)                                                                \
  memcpy(r, p->field + (size_t)(k) * i, sizeof(type) * (k));                                       \
  r += sizeof(type) * (k);
  PARTICLE_ATTRIBUTES(PACK_)
#undef PACK_
}

int particle_source_take(const particle_source *src, particles *out, size_t want) {
  const size_t before = out->n;
  DR_TRY(src->next(src->ctx, out, want));
  if (out->n - before != want)
    return dr_fail(DR_EINTERNAL, "a particle source of %zu particles gave %zu where %zu were asked", src->n,
                   out->n - before, want);
  return DR_OK;
}

int particle_source_chunks(const particle_source *src, size_t max,
                           int (*use)(void *ctx, const particles *chunk, size_t done), void *ctx) {
  const size_t n = src->n;
  particles chunk;
  memset(&chunk, 0, sizeof chunk);
  int rc = particles_reserve(&chunk, n < max ? n : max);
  for (size_t done = 0; rc == DR_OK && done < n;) {
    const size_t want = n - done < max ? n - done : max;
    chunk.n = 0;
    rc = particle_source_take(src, &chunk, want);
    if (rc == DR_OK) rc = use(ctx, &chunk, done);
    done += want;
  }
  particles_free(&chunk);
  return rc;
}

int particles_push_record(particles *p, const void *record) {
  if (p->n == p->cap) DR_TRY(particles_reserve(p, p->cap ? 2 * p->cap : MEM_FIRST_PARTICLES));
  const size_t i = p->n++;
  const unsigned char *r = record;
#define UNPACK_(field, type, k, what)                                                              \
  memcpy(p->field + (size_t)(k) * i, r, sizeof(type) * (k));                                       \
  r += sizeof(type) * (k);
  PARTICLE_ATTRIBUTES(UNPACK_)
#undef UNPACK_
  return DR_OK;
}

int particles_push_copy(particles *p, const particles *src, size_t i) {
  if (p->n == p->cap) DR_TRY(particles_reserve(p, p->cap ? 2 * p->cap : MEM_FIRST_PARTICLES));
  const size_t j = p->n++;
#define COPY_(field, type, k, what) memcpy(p->field + (size_t)(k) * j, src->field + (size_t)(k) * i, sizeof(type) * (k));
  PARTICLE_ATTRIBUTES(COPY_)
#undef COPY_
  return DR_OK;
}

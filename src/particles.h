/* particles.h - a slice of particles in host memory, one array per attribute (structure of
 * arrays). This is how particles enter a backend (create), leave it (download, for output), and
 * later travel between ranks. Backends keep their own layout inside. */
#ifndef DRIFT_PARTICLES_H
#define DRIFT_PARTICLES_H

#include <stddef.h>
#include <stdint.h>

typedef struct particles {
  size_t n, cap;
  float *x;          /* [3n] position, m */
  float *v;          /* [3n] velocity, m/s */
  float *C;          /* [9n] APIC affine velocity matrix, 1/s, row-major */
  float *F;          /* [9n] deformation gradient (elastic part), row-major */
  float *mass;       /* [n] kg */
  float *vol0;       /* [n] initial volume, m^3 */
  uint64_t *id;      /* [n] stable, unique over the run */
  int32_t *material; /* [n] index into scene.materials */
  int32_t *owner;    /* [n] rank * 256 + device */
} particles;

/* Makes room for at least cap particles (keeps the first n). Allocates. */
int particles_reserve(particles *p, size_t cap);
/* Appends one particle at rest state (C = 0, F = I). Grows 2x when full. */
int particles_push(particles *p, const float x[3], const float v[3], float mass, float vol0,
                   uint64_t id, int32_t material);
void particles_free(particles *p);

#endif

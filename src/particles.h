/* particles.h - a slice of particles in host memory, one array per attribute (structure of
 * arrays). This is how particles enter a backend (create), leave it (download, for output), and
 * travel between ranks. Backends keep their own layout inside.
 *
 * The attributes are also listed in a table (particle_attrs), so that code that moves whole
 * particles (growing, sorting, migration between ranks) loops over the table instead of naming
 * each field: a new attribute is one field here and one line in the table of particles.c. */
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
  float *logjp;      /* [n] plastic state: log of the plastic volume ratio J_p (NACC's alpha; starts
                      * at the material's initial_compression); 0 for models without one */
  uint64_t *id;      /* [n] stable, unique over the run */
  int32_t *material; /* [n] index into scene.materials */
  int32_t *owner;    /* [n] rank * 256 + device */
} particles;

/* One attribute: where its array pointer sits in struct particles, and its size per particle. */
typedef struct particle_attr {
  const char *name;
  size_t offset;     /* offsetof(particles, field) */
  size_t bytes;      /* bytes per particle */
} particle_attr;

#define PARTICLE_ATTRS 10
extern const particle_attr particle_attrs[PARTICLE_ATTRS];

/* The array of attribute a (an index into particle_attrs). */
void *particles_attr(const particles *p, int a);
/* Bytes of one particle's whole state, every attribute (a multiple of 4). */
size_t particles_record_bytes(void);
/* Copies particle i's whole state into rec (particles_record_bytes() bytes). */
void particles_pack(const particles *p, size_t i, void *rec);
/* Appends a particle from a record of particles_pack (grows 2x when full; allocates). */
int particles_push_record(particles *p, const void *rec);
/* Appends particle i of src, every attribute (grows 2x when full; allocates). */
int particles_append(particles *dst, const particles *src, size_t i);

/* Makes room for at least cap particles (keeps the first n). Allocates. */
int particles_reserve(particles *p, size_t cap);
/* Appends one particle at rest state (C = 0, F = I, logjp = 0). Grows 2x when full. */
int particles_push(particles *p, const float x[3], const float v[3], float mass, float vol0,
                   uint64_t id, int32_t material);
void particles_free(particles *p);

#endif

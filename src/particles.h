/* particles.h - a slice of particles in host memory, one array per attribute (structure of
 * arrays). This is how particles enter a backend (create), leave it (download, for output and
 * checkpoints), and travel between ranks. Backends keep their own layout inside. */
#ifndef DRIFT_PARTICLES_H
#define DRIFT_PARTICLES_H

#include <stddef.h>
#include <stdint.h>

/* Every per-particle attribute, one line each: X(field, C type, values per particle, meaning).
 * The struct below, growing and freeing (particles.c), whole-particle records (migration between
 * ranks in sim_migrate.c) and checkpoints (io/checkpoint.c) all go through this list, so a new
 * attribute (e.g. a plastic-state scalar for a snow model) is one line here, its initial value
 * in particles_push, and its use in the backends. Types: float, uint64_t or int32_t. */
#define PARTICLE_ATTRIBUTES(X)                                                                     \
  X(x, float, 3, "position, m")                                                                    \
  X(v, float, 3, "velocity, m/s")                                                                  \
  X(C, float, 9, "APIC affine velocity matrix, 1/s, row-major")                                    \
  X(F, float, 9, "deformation gradient (elastic part), row-major")                                 \
  X(mass, float, 1, "mass, kg")                                                                    \
  X(vol0, float, 1, "initial volume, m^3")                                                         \
  X(logjp, float, 1, "plastic state: log of the plastic volume ratio J_p (NACC), 0 for others")   \
  X(id, uint64_t, 1, "stable, unique over the run")                                                \
  X(material, int32_t, 1, "index into scene.materials")                                            \
  X(owner, int32_t, 1, "rank * 256 + device that computed it")

/* A particle id holds the index of the body it was sampled from (scene.bodies) in its bits from
 * this one up (sample.h gives the rest): messages name the body from the id alone, on any rank. */
#define PARTICLE_ID_BODY_SHIFT 48
static inline int particle_id_body(uint64_t id) { return (int)(id >> PARTICLE_ID_BODY_SHIFT); }

typedef struct particles {
  size_t n, cap;
#define PARTICLES_FIELD_(name, type, k, what) type *name; /* [k n] what */
  PARTICLE_ATTRIBUTES(PARTICLES_FIELD_)
#undef PARTICLES_FIELD_
} particles;

/* Particles handed over in bounded chunks instead of one array of them all (a backend's creation,
 * backend.h: the sampled scene streams into it). n: the particles it gives in all. next appends
 * the following min(max, what is left) particles to out (growing it where it lacks room), so
 * that a consumer taking chunks of a multiple of 32 keeps them aligned on its packets; having
 * appended none means that all n were given. */
typedef struct particle_source {
  size_t n;
  int (*next)(void *ctx, particles *out, size_t max);
  void *ctx;
  /* Optional (NULL: one pass only): starts the source again from its first particle, so that a
   * consumer may read it more than once (an island's creation: the split, then each member's). */
  int (*rewind)(void *ctx);
} particle_source;

/* Appends src's next want particles to out: a source that gives another count (fewer than
 * asked before its end, or more) is an internal error naming both counts. */
int particle_source_take(const particle_source *src, particles *out, size_t want);
/* Reads all of src, at most max particles at a time into one buffer (held meanwhile, counted as
 * particles), handing each chunk to use(ctx, chunk, done), done the particles before it. */
int particle_source_chunks(const particle_source *src, size_t max,
                           int (*use)(void *ctx, const particles *chunk, size_t done), void *ctx);

/* The same list as a table, for code that loops over attributes at run time (sorting in the
 * CPU backend): where each array pointer sits in struct particles, and its bytes per particle. */
typedef struct particle_attr {
  const char *name;
  size_t offset; /* offsetof(particles, field) */
  size_t bytes;  /* bytes per particle */
} particle_attr;

#define PARTICLE_COUNT_(field, type, k, what) +1
enum { PARTICLE_ATTRS = 0 PARTICLE_ATTRIBUTES(PARTICLE_COUNT_) };
#undef PARTICLE_COUNT_
/* Each attribute's index in particle_attrs (PA_x, PA_v, ...), and its bit in a mask of
 * attributes (backend.h's snapshot and fetch). */
#define PARTICLE_INDEX_(field, type, k, what) PA_##field,
enum particle_attr_index { PARTICLE_ATTRIBUTES(PARTICLE_INDEX_) };
#undef PARTICLE_INDEX_
#define PA_BIT(field) (1u << PA_##field)
extern const particle_attr particle_attrs[PARTICLE_ATTRS];

/* The array of attribute a (an index into particle_attrs). */
void *particles_attr(const particles *p, int a);
/* Makes room for at least cap particles (keeps the first n). Allocates. */
int particles_reserve(particles *p, size_t cap);
/* Appends one particle at rest state (C = 0, F = I, logjp = 0, owner 0). Grows 2x when full. */
int particles_push(particles *p, const float x[3], const float v[3], float mass, float vol0,
                   uint64_t id, int32_t material);
void particles_free(particles *p);

/* Whole particles as flat records of every attribute (PARTICLE_ATTRIBUTES order, packed), for
 * messages between ranks. */
size_t particles_record_bytes(void);
void particles_pack(const particles *p, size_t i, void *record);
/* Appends the particle a record holds. Grows 2x when full. */
int particles_push_record(particles *p, const void *record);
/* Appends particle i of src (all attributes). Grows 2x when full. */
int particles_push_copy(particles *p, const particles *src, size_t i);

#endif

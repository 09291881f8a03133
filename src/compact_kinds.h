/* compact_kinds.h - the table of a run's distinct particle kinds (mass, initial volume, material,
 * body) that parallel.storage "compact" stores as a 16-bit index in each record
 * (physics/compact.h's kind): lossless, since a body's particles share their mass and volume.
 * A backend's own table (one a GPU): it grows as particles arrive (creation, a resume, arrivals
 * from other ranks, sources) and never shrinks, so an index once given stays valid. */
#ifndef DRIFT_COMPACT_KINDS_H
#define DRIFT_COMPACT_KINDS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COMPACT_KINDS_MAX 65536 /* the record's 16 bits */

typedef struct compact_kind {
  float mass, vol0;
  int32_t material, body;
} compact_kind;

typedef struct compact_kinds {
  compact_kind *kind; /* [n] in the order they were first met: index i is kind[i] */
  size_t n, cap;
  uint32_t *slot;     /* open addressing: index + 1, 0 empty; a power of two, at most half full */
  size_t slots;
  uint32_t last;      /* the index last found: consecutive particles mostly share it */
} compact_kinds;

/* The index of k in t, added where it is new. DR_EINPUT beyond COMPACT_KINDS_MAX kinds (the
 * message says why and what to do), DR_ENOMEM where the table cannot grow; t unchanged then. */
int compact_kinds_index(compact_kinds *t, const compact_kind *k, uint32_t *index);
void compact_kinds_free(compact_kinds *t);

#ifdef __cplusplus
}
#endif

#endif
